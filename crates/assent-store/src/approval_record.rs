//! The approval as stored: [`ApprovalRecord`] with its [`DecisionRecord`]s, [`VoteRecord`]s,
//! [`EditedCall`] and [`TokenInfo`], and what each answers about itself (whether its call is
//! intact, whether it went ahead, the quorum tally, the deadline it announces). Types only:
//! the strict reader that fills them from the database is `record.rs`.

use crate::db::{self, Row, ValueRef};
use crate::stored::Settlement;
use assent_core::ToolCall;
use assent_core::approval::{ApprovalStatus, DecisionKind, DefaultDecision, GrantScope};
use assent_core::decision;
use assent_core::escalation::Schedule;
use assent_core::gatekeeper::ApprovalTerms;
use assent_core::passkey::PasskeyProof;
use assent_core::quorum::{Ballot, Quorum, Tally, in_force, tally};
use serde::Serialize;
use serde_json::{Value, json};

/// One decision on an approval, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    /// `approve`, `deny`, `expire` or `cancel`; `deny` when the stored value is unreadable
    /// (the approval's `damaged` then names `decisions.decision`).
    pub decision: Settlement,
    /// The operator's reason, or the expiry note.
    pub reason: Option<String>,
    /// Principal name, or `system:expiry`.
    pub actor: String,
    /// Unix milliseconds.
    pub at: i64,
    /// For an expiry: the default decision that was applied (`reject` when unreadable; the
    /// approval's `damaged` then names `decisions.default_applied`).
    pub default_applied: Option<DefaultDecision>,
    /// MPLP `decision_id` (UUID v4).
    pub decision_id: String,
    /// The passkey assertion that signed an approving decision (issue 14 §4).
    pub passkey: Option<PasskeyProof>,
}

/// One vote on an approval that needs a quorum (issue 14 §1), as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VoteRecord {
    /// The principal who cast it (at most one vote each).
    pub principal: String,
    /// Approve or deny; `deny` when the stored value is unreadable (see `damaged`).
    pub decision: DecisionKind,
    /// Their roles when they voted; `[]` when unreadable (see `damaged`).
    pub roles: Vec<String>,
    /// Their reason, if they gave one.
    pub reason: Option<String>,
    /// Unix milliseconds.
    pub at: i64,
    /// The passkey assertion that signed an approving vote (issue 14 §4).
    pub passkey: Option<PasskeyProof>,
    /// The row's sealed columns as stored and its seal ([`crate::votes::vouch`]).
    #[serde(skip)]
    pub(crate) sealed: StoredVote,
}

/// A `votes` row's sealed columns as stored — `[approval_id, principal, decision, roles,
/// reason, at, passkey]`, then `key_binding` when it has one (migration 0038), text as text
/// (JSON columns unparsed), so that the seal covers the bytes the gateway wrote — and its
/// `seal` (64 hex; `''` before migration 0032).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct StoredVote {
    pub(crate) columns: Value,
    pub(crate) seal: String,
}

impl StoredVote {
    /// From a row of `principal, decision, roles, reason, at, passkey, approval_id, seal,
    /// key_binding` (`read_approval`'s vote SELECT). A column of an unexpected type is kept as
    /// `"?"`, so the seal does not hold for it. The key binding (migration 0038) is sealed
    /// when there is one: a vote without one keeps the seven columns of migration 0032.
    pub(crate) fn read(r: &Row<'_>) -> db::Result<StoredVote> {
        let raw = |i: usize| -> db::Result<Value> {
            Ok(match r.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Int(n) => json!(n),
                ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
                ValueRef::Bool(_) | ValueRef::Other => json!("?"),
            })
        };
        // The eighth column, the key binding, only when there is one.
        let mut columns = [6, 0, 1, 2, 3, 4, 5, 8]
            .map(raw)
            .into_iter()
            .collect::<db::Result<Vec<_>>>()?;
        columns.truncate(if columns[7].is_null() { 7 } else { 8 });
        let columns = Value::Array(columns);
        let seal = match r.get_ref(7)? {
            ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
            _ => String::new(),
        };
        Ok(StoredVote { columns, seal })
    }
}

/// An approval as stored (seed 002 ApprovalRequest, MPLP Confirm).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRecord {
    /// UUID v4.
    pub id: String,
    /// The agent id that proposed the call.
    pub agent: String,
    /// The agent's session id.
    pub session_id: String,
    /// The call as proposed.
    pub call: ToolCall,
    /// RFC 8785 canonical JSON of the call.
    pub canonical: String,
    /// SHA-256 of `canonical`, lowercase hex.
    pub call_hash: String,
    /// What the verdict asked of this approval (serialised flat). Read strictly: an
    /// unreadable `risk_tier` is `R4`, `approvers` `[`[`crate::stored::UNREADABLE_ROLE`]`]` (a role
    /// nobody holds), `default_decision` `reject`, a list `[]` (see `damaged`).
    #[serde(flatten)]
    pub terms: ApprovalTerms,
    /// Unix milliseconds.
    pub requested_at: i64,
    /// Unix milliseconds; the approval expires at this time.
    pub expires_at: i64,
    /// Current status; `cancelled` when the stored value is unreadable (see `damaged`).
    pub status: ApprovalStatus,
    /// Unix milliseconds of the decision, expiry or cancellation.
    pub decided_at: Option<i64>,
    /// The decision that settled it (at most one).
    pub decisions: Vec<DecisionRecord>,
    /// The votes cast on it when its terms carry a quorum, in voting order.
    pub votes: Vec<VoteRecord>,
    /// The token's id and expiry once one was minted.
    pub token: Option<TokenInfo>,
    /// The agent's run id (seed 002 `runId`), if it sent one.
    pub run_id: Option<String>,
    /// The principal the call acts for (`on_behalf_of`, issue 14 §2), as the agent said.
    pub on_behalf_of: Option<String>,
    /// The client device id the agent sent; the token is bound to it.
    pub device_id: Option<String>,
    /// Approvals with the same key are "similar" (same agent, server, tool and rules).
    pub group_key: String,
    /// Seed 002 `humanSummary`, verified against the canonical arguments at creation.
    pub human_summary: String,
    /// Unix milliseconds of the last escalation step taken.
    pub escalated_at: Option<i64>,
    /// When its escalation steps happen and when its default decision applies (issue 14 §3),
    /// fixed when it was raised; `None` without an escalation (or when unreadable: see
    /// `damaged`).
    pub escalation_schedule: Option<Schedule>,
    /// How many steps of `escalation_schedule` were taken.
    pub escalation_steps: usize,
    /// The decided scope (wire form `once`, `session`, `15m`, `workspace`) once approved;
    /// `once` when the stored value is unreadable (see `damaged`).
    pub scope: Option<GrantScope>,
    /// The grant this approval created (scope wider than once) or was allowed by.
    pub grant_id: Option<String>,
    /// The operator's edit of the arguments, when approved with modifications.
    pub edited: Option<EditedCall>,
    /// MPLP trace id (UUID v4).
    pub trace_id: String,
    /// MPLP span id of this approval (UUID v4).
    pub span_id: String,
    /// W3C `traceparent` of the span that raised it (issue 15 §1), as proposed; `None` when
    /// tracing was off. Not checked: it only places spans in a trace.
    pub traceparent: Option<String>,
    /// MPLP Confirm `target_type` (`other` for a tool call).
    pub target_type: String,
    /// MPLP Confirm `target_id` (UUID v4): the held tool call, plan or other target.
    pub target_id: String,
    /// AAEP `reply_token` of its confirmation (`rpl_` + 44 hex, [`crate::ordered_id`]), for
    /// approvals that were held (`rpl_` + 32 hex before 2026-11-29).
    pub reply_token: Option<String>,
    /// RFC 6902 patch from the target's previous submission (a resubmitted plan), if any.
    pub target_diff: Option<Value>,
    /// SHA-256 (hex) of the policy set in force when the call was held
    /// (`Registry::policy_set_sha256`; stored with the approval, in the same transaction, in
    /// its `confirm_context` row, issue 14 §8); `None` when none was recorded.
    pub policy_set_sha256: Option<String>,
    /// Names of the stored columns that could not be read (issue 10 §8), e.g. `["approvers"]`;
    /// each holds its most restrictive value above; `status.settled` for a pending approval with a
    /// decision row or a `decided_at` (set back to pending behind the gateway's back). Non-empty: nobody may decide, cancel or
    /// expire the approval ([`crate::DecideError::Damaged`]) and `assent audit verify` reports it.
    /// Not serialised when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
}

impl ApprovalRecord {
    /// Whether the stored `call_hash` is the SHA-256 of the stored call's canonical form, and
    /// the stored `canonical` text that form (a few microseconds: the call is canonicalised
    /// again; receipts and `tool_call_canonical` carry that text). `false` means the row was edited
    /// behind the gateway's back: nobody may decide it and the expiry sweep leaves it alone,
    /// as a damaged approval (found by review: an edited `call_hash` bound the token to
    /// another call than the one the operator was shown).
    pub fn call_intact(&self) -> bool {
        self.call
            .canonical_and_hash()
            .is_ok_and(|(c, h)| h == self.call_hash && c == self.canonical)
    }

    /// Whether this approval let its call go ahead: `approved`, or `expired` with the default
    /// its expiry recorded as applied being `approve` (the expiry records `reject` for what
    /// may not be approved by a timeout). Read from the status and the decisions, not from
    /// whether a token row exists: a planted token row does not make a rejection read as
    /// accepted, and a token minted before the seals (migration 0028) still reads as the
    /// approval it was. The AAEP resolution, the MPLP status, the denial and the learning
    /// samples use it.
    pub fn went_ahead(&self) -> bool {
        match self.status {
            ApprovalStatus::Approved => true,
            ApprovalStatus::Expired => self.decisions.iter().any(|d| {
                d.decision == Settlement::Expire
                    && d.default_applied == Some(DefaultDecision::Approve)
            }),
            _ => false,
        }
    }

    /// Masks this call's `redact` paths in what leaves the gateway; a held result's
    /// (`result.TOOL`) below its `call.arguments`, where its call's arguments are
    /// ([`assent_core::redact::Redactor::under`]), and their values in its `preview` text.
    pub fn redactor(&self) -> assent_core::redact::Redactor {
        let (args, paths) = (&self.call.arguments, &self.terms.redact);
        match self.call.tool.starts_with("result.") {
            true => assent_core::redact::Redactor::under(args, paths, &["call", "arguments"])
                .with_free_text(&["preview"]),
            false => assent_core::redact::Redactor::new(args, paths),
        }
    }

    /// RFC 8785 canonical JSON of the proposed arguments.
    pub fn canonical_arguments(&self) -> String {
        assent_core::canonical::canonical_value(&self.call.arguments)
            .unwrap_or_else(|_| self.call.arguments.to_string())
    }
    /// The arguments the agent may run with: the operator's edit, else the proposed ones.
    pub fn effective_arguments(&self) -> &Value {
        self.edited
            .as_ref()
            .map_or(&self.call.arguments, |e| &e.arguments)
    }
    /// The AAEP deadline (Unix ms) announced in `agent.awaiting.confirmation`'s
    /// `timeout_seconds` (AAEP §6.1, §6.4; issues 10 §5, 14 §3): when the default decision
    /// really applies — the escalation schedule's deadline, else `expires_at`. Replies are
    /// accepted before it, countdowns count toward it.
    pub fn announced_deadline(&self) -> i64 {
        decision::announced_deadline(self.expires_at, self.escalation_schedule.as_ref())
    }

    /// The roles the escalation steps taken so far added to the approvers.
    pub fn escalated_roles(&self) -> Vec<String> {
        self.escalation_schedule
            .as_ref()
            .map(|s| s.added(self.escalation_steps))
            .unwrap_or_default()
    }

    /// The quorum in force ([`assent_core::quorum::in_force`]: widened once escalated) and the
    /// approving votes tallied against it (issue 14 §1); `None` when one approval decides.
    pub fn quorum_tally(&self) -> Option<(Quorum, Tally)> {
        let q = in_force(self.terms.quorum.as_ref(), &self.escalated_roles())?;
        let t = self.tally_of(&q, DecisionKind::Approve);
        Some((q, t))
    }

    /// The votes of `kind` cast so far, tallied against `q`.
    pub fn tally_of(&self, q: &Quorum, kind: DecisionKind) -> Tally {
        let ballots: Vec<Ballot<'_>> = self
            .votes
            .iter()
            .filter(|v| v.decision == kind)
            .map(|v| Ballot {
                principal: &v.principal,
                roles: &v.roles,
            })
            .collect();
        tally(q, &ballots)
    }

    /// The hash the token binds: of the edited call, else of the proposed one.
    pub fn effective_hash(&self) -> &str {
        self.edited
            .as_ref()
            .map_or(&self.call_hash, |e| &e.call_hash)
    }
}

/// An operator's edit of a held call's arguments (seed 002 "Approve with modifications"),
/// re-canonicalised and re-hashed. The caller re-checks it with the gatekeeper first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EditedCall {
    /// The new arguments.
    pub arguments: Value,
    /// RFC 8785 canonical JSON of the arguments.
    pub canonical_arguments: String,
    /// RFC 8785 canonical JSON of the whole edited call (same tool and server).
    pub canonical: String,
    /// SHA-256 of `canonical`, lowercase hex.
    pub call_hash: String,
}

/// The stored part of a minted token; [`crate::Store::token_string`] signs it for the agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenInfo {
    /// `tokenId`, UUID v4.
    pub token_id: String,
    /// Unix milliseconds after which it cannot be redeemed.
    pub expires_at: i64,
    /// Unix milliseconds of its redemption, if redeemed.
    pub used_at: Option<i64>,
    /// Unix milliseconds of minting.
    pub issued_at: i64,
    /// The approval's scope (`once`, `session`, `15m`, `workspace`).
    pub scope: String,
    /// `issuedToClientDeviceId`, when the agent sent a device id.
    pub device_id: Option<String>,
    /// The call hash it binds.
    pub call_hash: String,
    /// The row's seal ([`crate::Store::token_of`] signs nothing for a row whose seal is not
    /// its own); not part of any answer.
    #[serde(skip)]
    pub seal: String,
}
