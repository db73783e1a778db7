//! OpenAPI schemas (utoipa `ToSchema`) of the wire types this crate re-exports from
//! `assent-core`: core has no utoipa dependency, and Rust's orphan rule forbids implementing
//! utoipa's trait for core's types here, so each one is mirrored by a schema-only type of the
//! same name and the same serde form (times that core keeps as Unix milliseconds are the RFC
//! 3339 strings the wire carries). The mirrors are never built at run time; the body types of
//! this crate point at them with `#[schema(value_type = …)]`. That they describe what core
//! really serialises is checked on a live gateway: `assent-server`'s `tests/it/openapi.rs`
//! validates every answer of a whole approval life cycle against the document, and
//! Schemathesis (`tests/e2e/test_openapi.py`) checks the answers to the cases it generates.

#![allow(dead_code)]

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Seed 002 risk tier (`assent_core::RiskTier`).
#[derive(Serialize, ToSchema)]
pub enum RiskTier {
    /// Read-only, no side effects.
    R0,
    /// Low.
    R1,
    /// Medium (the default when no rule covers the call).
    R2,
    /// High.
    R3,
    /// Critical.
    R4,
}

/// Status of an approval (`assent_core::ApprovalStatus`); `pending` is the only non-terminal one.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Approved.
    Approved,
    /// Rejected (denied, or the default decision at expiry).
    Rejected,
    /// Expired.
    Expired,
    /// Withdrawn.
    Cancelled,
}

/// An operator's decision (`assent_core::DecisionKind`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    /// Approve.
    Approve,
    /// Deny.
    Deny,
}

/// What happens when an approval times out (`assent_core::DefaultDecision`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DefaultDecision {
    /// Approve at expiry.
    Approve,
    /// Reject at expiry.
    Reject,
}

/// How an approval was settled (`assent_core::approval::Settlement`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Settlement {
    /// Approved.
    Approve,
    /// Denied.
    Deny,
    /// Expired.
    Expire,
    /// Cancelled.
    Cancel,
}

/// One reason behind a verdict (`assent_core::Reason`).
#[derive(Serialize, ToSchema)]
pub struct Reason {
    /// The policy file (or `declaration`, `risk`).
    pub file: String,
    /// The rule's name.
    pub rule: String,
    /// The reason, in words.
    pub text: String,
}

/// One group of a quorum: `count` distinct people holding one of `roles`.
#[derive(Serialize, ToSchema)]
pub struct QuorumGroup {
    /// Roles admitted (empty: any operator).
    pub roles: Vec<String>,
    /// How many distinct people.
    pub count: u32,
}

/// What a deny vote does on an approval that needs a quorum.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DenyRule {
    /// One deny rejects.
    Any,
    /// A deny needs the same quorum as an approval.
    Quorum,
}

/// Several distinct people must approve (`assent_core::quorum::Quorum`).
#[derive(Serialize, ToSchema)]
pub struct Quorum {
    /// Every group must be filled.
    pub groups: Vec<QuorumGroup>,
    /// What a deny vote does.
    pub deny: DenyRule,
}

/// A group's count so far (`assent_core::quorum::GroupTally`).
#[derive(Serialize, ToSchema)]
pub struct GroupTally {
    /// Roles admitted.
    pub roles: Vec<String>,
    /// How many are needed.
    pub count: u32,
    /// Who was counted.
    pub counted: Vec<String>,
}

/// The approving votes counted against a quorum (`assent_core::quorum::Tally`).
#[derive(Serialize, ToSchema)]
pub struct Tally {
    /// Whether every group is filled.
    pub met: bool,
    /// Each group's count.
    pub groups: Vec<GroupTally>,
}

/// One step of an escalation chain (`assent_core::escalation::EscalationStep`).
#[derive(Serialize, ToSchema)]
pub struct EscalationStep {
    /// Seconds after the request (absent: at the timeout).
    pub after_seconds: Option<u64>,
    /// Roles added at this step.
    pub approvers: Vec<String>,
}

/// `on_timeout` of the covering rules, merged (`assent_core::triggers::Escalation`).
#[derive(Serialize, ToSchema)]
pub struct Escalation {
    /// The steps, in order.
    pub steps: Vec<EscalationStep>,
    /// The wait after the last step, in seconds.
    pub last_wait_seconds: Option<u64>,
}

/// What a verdict asks of the approval that holds its call (`assent_core::ApprovalTerms`),
/// serialised flat inside an approval.
#[derive(Serialize, ToSchema)]
pub struct ApprovalTerms {
    /// The rendered approval message.
    pub message: String,
    /// Every source consulted, in order.
    pub reasons: Vec<Reason>,
    /// Highest tier of the covering rules.
    pub risk_tier: RiskTier,
    /// Whether the action is irreversible.
    pub irreversible: bool,
    /// Default applied at expiry.
    pub default_decision: DefaultDecision,
    /// Operator roles allowed to decide (empty: any operator).
    pub approvers: Vec<String>,
    /// Several distinct people must approve (absent: one approval decides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum: Option<Quorum>,
    /// Threshold and scope triggers that fired.
    pub triggers: Vec<String>,
    /// Seed 002 `suggestedAlternatives`.
    pub suggested_alternatives: Vec<String>,
    /// The escalation chain.
    pub escalation: Option<Escalation>,
    /// Largest result released without a hold, in bytes.
    pub output_bytes: Option<u64>,
    /// Whether the agent's own user may approve in the MCP client.
    pub in_client_approval: bool,
    /// Separation of duties (present only when on).
    #[schema(required = false)]
    pub separation_of_duties: bool,
    /// An approving vote needs a passkey (present only when on).
    #[schema(required = false)]
    pub require_passkey: bool,
    /// Side effects, rendered.
    pub side_effects: Vec<String>,
    /// Rollback notes, rendered.
    pub rollback: Vec<String>,
    /// The tool that previews this call.
    pub dry_run_tool: Option<String>,
    /// Argument paths masked in everything that leaves the gateway.
    pub redact: Vec<String>,
}

/// A grant: a decision that covers later calls (`assent_core::grant::Grant`).
#[derive(Serialize, ToSchema)]
pub struct Grant {
    /// Grant id.
    pub id: String,
    /// The agent it covers.
    pub agent: String,
    /// The session it covers (scope `session`).
    pub session_id: Option<String>,
    /// The tool.
    pub tool: String,
    /// The MCP server.
    pub server: Option<String>,
    /// The exact call it covers (absent: `whole_tool`).
    pub call_hash: Option<String>,
    /// Whether any arguments are covered.
    pub whole_tool: bool,
    /// `session`, `agent`, `workspace` or `time:DURATION`.
    pub scope: String,
    /// The tier of the approved call.
    pub risk_tier: RiskTier,
    /// Whether the scope was discouraged for this tier.
    pub discouraged: bool,
    /// The approval that made it.
    pub approval_id: String,
    /// Who approved.
    pub created_by: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, when it has an end.
    pub expires_at: Option<String>,
    /// RFC 3339, when revoked.
    pub revoked_at: Option<String>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
}

/// Pin state of one upstream tool (`assent_core::pin::PinState`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PinState {
    /// Matches its pin.
    Pinned,
    /// Pinned now, at first use.
    FirstUse,
    /// Changed or new: held for review.
    Held,
}

/// Status of a tool review (`assent_core::pin::ReviewStatus`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReviewStatus {
    /// Waiting.
    Pending,
    /// Accepted (pinned).
    Accepted,
    /// Rejected.
    Rejected,
}

/// One tool of a checked list (`assent_core::pin::ToolState`).
#[derive(Serialize, ToSchema)]
pub struct ToolState {
    /// Tool name.
    pub name: String,
    /// Its state.
    pub state: PinState,
    /// The review holding it.
    pub review_id: Option<String>,
    /// That review's status.
    pub review_status: Option<ReviewStatus>,
    /// The pinned definition.
    pub pinned: Option<Value>,
}

/// A review of a changed or new tool (`assent_core::pin::ToolReview`).
#[derive(Serialize, ToSchema)]
pub struct ToolReview {
    /// Review id.
    pub id: String,
    /// MCP server.
    pub server: String,
    /// Tool name.
    pub tool: String,
    /// SHA-256 of the canonical definition.
    pub fingerprint: String,
    /// The definition seen.
    pub definition: Value,
    /// The definition pinned before, if any.
    pub pinned: Option<Value>,
    /// Status.
    pub status: ReviewStatus,
    /// RFC 3339.
    pub seen_at: String,
    /// Who reported it.
    pub seen_by: String,
    /// Who decided.
    pub decided_by: Option<String>,
    /// RFC 3339.
    pub decided_at: Option<String>,
    /// JSON Patch from the pinned definition (when there is one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<Value>,
}

/// A pinned tool definition (`assent_core::pin::ToolPin`).
#[derive(Serialize, ToSchema)]
pub struct ToolPin {
    /// MCP server.
    pub server: String,
    /// Tool name.
    pub tool: String,
    /// SHA-256 of the canonical definition.
    pub fingerprint: String,
    /// The definition.
    pub definition: Value,
    /// RFC 3339.
    pub pinned_at: String,
    /// Who pinned it.
    pub pinned_by: String,
}

/// Status of a clarification (`assent_core::clarification::ClarificationStatus`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClarificationStatus {
    /// Waiting.
    Pending,
    /// Answered.
    Answered,
    /// Expired.
    Expired,
    /// Cancelled.
    Cancelled,
}

/// An agent's question to an operator (`assent_core::clarification::Clarification`).
#[derive(Serialize, ToSchema)]
pub struct Clarification {
    /// Id.
    pub id: String,
    /// The asking agent.
    pub agent: String,
    /// Its session.
    pub session_id: String,
    /// The question.
    pub question: String,
    /// AAEP response kinds accepted.
    pub accepted_response_kinds: Vec<String>,
    /// Choices offered.
    pub choices: Vec<Value>,
    /// Context.
    pub context: Option<String>,
    /// Status.
    pub status: ClarificationStatus,
    /// The answer.
    pub response: Option<Value>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// RFC 3339.
    pub answered_at: Option<String>,
    /// RFC 3339.
    pub requested_at: String,
    /// RFC 3339.
    pub expires_at: String,
}

/// A signed audit checkpoint (`assent_core::checkpoint::Checkpoint`).
#[derive(Serialize, ToSchema)]
pub struct SignedCheckpoint {
    /// Audit sequence number of the head.
    pub seq: i64,
    /// Hash of the head record.
    pub head_hash: String,
    /// Records covered.
    pub record_count: i64,
    /// Unix milliseconds.
    pub time: i64,
    /// Ed25519 public key, hex.
    pub public_key: String,
    /// Signature, hex.
    pub signature: String,
}

/// A tool call (`assent_core::canonical::ToolCall`).
#[derive(Serialize, ToSchema)]
pub struct ToolCall {
    /// Tool name.
    pub tool: String,
    /// MCP server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Arguments.
    pub arguments: Value,
}

/// A vote in a receipt (`assent_core::receipt::ReceiptVote`); `passkey` is the WebAuthn proof.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiptVote {
    /// Who voted.
    pub by: String,
    /// The vote.
    pub decision: DecisionKind,
    /// Their roles.
    pub roles: Vec<String>,
    /// RFC 3339.
    pub at: String,
    /// Reason.
    pub reason: Option<String>,
    /// The passkey proof (an object), when signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passkey: Option<Value>,
}

/// A decision in a receipt (`assent_core::receipt::ReceiptDecision`).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiptDecision {
    /// The settlement.
    pub decision: Settlement,
    /// Who.
    pub by: String,
    /// RFC 3339.
    pub at: String,
    /// Reason.
    pub reason: Option<String>,
    /// The passkey proof (an object), when signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passkey: Option<Value>,
}

/// A signed approval receipt, checkable offline (`assent_core::receipt::Receipt`).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// Format version.
    pub receipt_version: u32,
    /// The approval.
    pub approval_id: String,
    /// The agent.
    pub agent: String,
    /// Its session.
    pub session_id: String,
    /// Whom the call acts for.
    pub on_behalf_of: Option<String>,
    /// Status.
    pub status: ApprovalStatus,
    /// The held call.
    pub call: ToolCall,
    /// Its canonical form.
    pub canonical: String,
    /// Its SHA-256.
    pub call_hash: String,
    /// The hash of the call approved, when an operator edited it.
    pub approved_call_hash: Option<String>,
    /// Tier.
    pub risk_tier: RiskTier,
    /// The quorum.
    pub quorum: Option<Quorum>,
    /// Whether approving votes needed a passkey (present only when on).
    #[schema(required = false)]
    pub require_passkey: bool,
    /// Votes.
    pub votes: Vec<ReceiptVote>,
    /// Decisions.
    pub decisions: Vec<ReceiptDecision>,
    /// Policy files.
    pub policies: Vec<String>,
    /// Hash of the policy set.
    pub policy_set_sha256: Option<String>,
    /// RFC 3339.
    pub requested_at: String,
    /// RFC 3339.
    pub decided_at: Option<String>,
    /// RFC 3339.
    pub issued_at: String,
    /// Ed25519 public key, hex.
    pub public_key: String,
    /// Signature, hex.
    pub signature: String,
}
