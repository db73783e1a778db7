//! The validated policy model the gatekeeper reads: an agent's declarations ([`Agent`], its
//! local tools, MCP servers and delegates, each with an optional [`ApprovalSpec`]) and the
//! governance policies ([`Policy`], [`Rule`], [`Selector`]). It holds no parsing of files (see
//! `agent_file` and `governance`) and no decision (see the gatekeeper).

use crate::approval::DefaultDecision;
use crate::condition::Condition;
use crate::risk::RiskTier;
use crate::triggers::{Escalation, ScopeSpec, Thresholds};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// An Agent Format `approval` value once parsed. An omitted field is `None` at the use site.
#[derive(Debug, Clone)]
pub enum ApprovalSpec {
    /// `approval: false`: exempt (from a server-level blanket approval only).
    Exempt,
    /// `approval: true` or an object: required, optionally only when `condition` matches.
    Required {
        /// `message_template`, rendered by [`crate::template::render`].
        message_template: Option<String>,
        /// `condition`; `None` means always.
        condition: Option<Condition>,
    },
}

impl ApprovalSpec {
    /// Parses `true`, `false` or `{message_template?, condition?}` (`{}` means `true`).
    pub fn parse(v: &Value) -> Result<Self, String> {
        match v {
            Value::Bool(false) => Ok(Self::Exempt),
            Value::Bool(true) => Ok(Self::Required {
                message_template: None,
                condition: None,
            }),
            Value::Object(m) => {
                let message_template = match m.get("message_template") {
                    None => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => return Err("`message_template` must be a string".into()),
                };
                let condition = match m.get("condition") {
                    None => None,
                    Some(c) => Some(Condition::parse(c).map_err(|e| format!("condition: {e}"))?),
                };
                Ok(Self::Required {
                    message_template,
                    condition,
                })
            }
            _ => Err("`approval` must be true, false or an object".into()),
        }
    }
}

/// A local tool of an agent (`action_space.local_tools[]`).
#[derive(Debug, Clone)]
pub struct LocalTool {
    /// `alias`, unique among the agent's local tools; the tool name in calls.
    pub alias: String,
    /// `approval`; `None` when omitted.
    pub approval: Option<ApprovalSpec>,
}

/// A sub-agent the agent may delegate to (`action_space.local_agents[]` or
/// `remote_agents[]`, seed 004 "Approval on Agent Delegation").
#[derive(Debug, Clone)]
pub struct Delegate {
    /// `alias`, unique among the agent's local and remote agents; the `target` of a delegation.
    pub alias: String,
    /// True for `remote_agents[]` (A2A), false for `local_agents[]`.
    pub remote: bool,
    /// `approval` on the reference: gates the delegation itself. Its condition keys are paths
    /// over the delegation context, e.g. `parent.input.risk_level`.
    pub approval: Option<ApprovalSpec>,
    /// `allowed_skills` of a remote agent (`None`: not declared, any skill).
    pub skills: Option<Vec<SkillRef>>,
    /// Where a local agent is defined (`None` for a remote agent): what the registry resolves
    /// to a loaded agent, whose calls the declaring agent's plans then gate
    /// ([`Delegations`](super::Delegations)).
    pub source: Option<DelegateSource>,
}

/// A local agent's `source` and `source_type` (Agent Format `local_agents[]`), as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateSource {
    /// `source_type`: `file` when omitted (the schema's default); also `registry`, `db` or a
    /// runtime's own type. Only `file` and `registry` resolve ([`Delegations`](super::Delegations)).
    pub source_type: String,
    /// `source`, not empty: a path relative to the declaring agent's file (`file`), or an
    /// agent's `metadata.id` (`registry`).
    pub source: String,
    /// The 1-based line of the `local_agents[]` entry in its file, for warnings.
    pub line: u64,
}

/// One `allowed_skills` entry of a remote agent: a skill id and its own approval, whose
/// condition keys are the skill's input fields.
#[derive(Debug, Clone)]
pub struct SkillRef {
    /// The A2A skill id.
    pub id: String,
    /// `approval` on the skill reference.
    pub approval: Option<ApprovalSpec>,
}

/// One `allowed_tools` entry of an MCP server: a name, and its own approval when it has one
/// (`None` inherits the server's).
#[derive(Debug, Clone)]
pub struct AllowedTool {
    /// The MCP tool name.
    pub name: String,
    /// The entry's own `approval`; `None` inherits the server's.
    pub approval: Option<ApprovalSpec>,
}

/// An MCP server of an agent (`action_space.mcp_servers[]`).
#[derive(Debug, Clone)]
pub struct McpServer {
    /// `alias`, unique among the agent's MCP servers; the `server` of calls.
    pub alias: String,
    /// Server-level (blanket) approval.
    pub approval: Option<ApprovalSpec>,
    /// `None`: every tool of the server is declared. `Some`: only these.
    pub allowed_tools: Option<Vec<AllowedTool>>,
}

/// The `metadata.annotations` key under which an agent file names (comma-separated agent
/// ids) the agents it accepts as its orchestrators: an agent declaring it in
/// `action_space.local_agents[]` gates its calls with its plans only when the declared
/// agent's own file names it here (Agent Format annotations: runtime pass-through data).
pub const ORCHESTRATORS_ANNOTATION: &str = "assent/orchestrators";

/// A validated agent file.
#[derive(Debug, Clone)]
pub struct Agent {
    /// `metadata.id`.
    pub id: String,
    /// `metadata.name` (used as `{{agent_alias}}`).
    pub name: String,
    /// `metadata.namespace`, for governance selectors.
    pub namespace: Option<String>,
    /// `metadata.labels`, for governance selectors.
    pub labels: BTreeMap<String, String>,
    /// The agents this agent's own file accepts as orchestrators (`metadata.annotations`
    /// [`ORCHESTRATORS_ANNOTATION`]): only their plans may gate its calls
    /// ([`super::Delegations`]).
    pub orchestrators: Vec<String>,
    /// The file it came from, as given to [`Registry::load`](super::Registry::load).
    pub file: String,
    /// `action_space.local_tools`.
    pub local_tools: Vec<LocalTool>,
    /// `action_space.mcp_servers`.
    pub mcp_servers: Vec<McpServer>,
    /// `action_space.local_agents` then `remote_agents`.
    pub delegates: Vec<Delegate>,
    /// Referenced governance policies (`constraints.governance_policies[]`).
    pub policy_refs: Vec<PolicyRef>,
    /// Set when a `required` referenced policy does not resolve: every call is denied with it.
    pub refused: Option<String>,
}

/// `constraints.governance_policies[]` entry: a policy id and whether it must resolve
/// (Agent Format `GovernancePolicyRef.required`, default true).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRef {
    /// `policy_ref`.
    pub id: String,
    /// `required` (default true): the agent is refused when the id does not resolve.
    pub required: bool,
    /// The 1-based line of the entry in the agent file, for load errors.
    pub line: Option<u64>,
}

/// Whether glob `pattern` matches exactly one name, itself: no metacharacter of the `glob`
/// crate (`*`, `?`, `[`) and no path separator (which `glob` lets match another separator on
/// Windows). Such a pattern always compiles.
pub(super) fn is_literal_glob(pattern: &str) -> bool {
    !pattern.contains(['*', '?', '[', '/', '\\'])
}

/// Which agents a governance policy applies to besides those that reference it. Every field
/// that is given must match; a selector with no field selects no agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Agent ids or globs (`*` selects every agent).
    #[serde(default)]
    pub agents: Vec<String>,
    /// Agent `metadata.namespace` must equal this (written with no value: a load error,
    /// [`crate::json::written`]: it would select every agent).
    #[serde(default, deserialize_with = "crate::json::written")]
    pub namespace: Option<String>,
    /// Every label must be present with this value.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Selector {
    /// Whether no field is given: such a policy selects no agent and applies only to the
    /// agents that reference it.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty() && self.namespace.is_none() && self.labels.is_empty()
    }

    /// The selector as a one-line text for messages, e.g. `{agents: [payments-bot],
    /// namespace: finance, labels: {team: treasury}}` (only the fields given; `{}` when empty).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.agents.is_empty() {
            parts.push(format!("agents: [{}]", self.agents.join(", ")));
        }
        if let Some(ns) = &self.namespace {
            parts.push(format!("namespace: {ns}"));
        }
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            parts.push(format!("labels: {{{}}}", labels.join(", ")));
        }
        format!("{{{}}}", parts.join(", "))
    }
    /// Whether this selector picks `agent` on the operators' word alone, so that its policy
    /// may loosen what others say of the agent's calls: it [`Selector::selects`] the agent and
    /// names no `namespace` nor `labels`, which the agent's own file declares. A policy picked
    /// by them only tightens, as one the agent's file references (found by review: a team
    /// adding `labels: {env: sandbox}` to its own agent file put it under the sandbox's
    /// relaxed policy, whose approving default and short timeout then approved its R4 calls).
    /// The agent id is the operators' (each principal's key is bound to one).
    pub fn governs(&self, agent: &Agent) -> bool {
        self.namespace.is_none() && self.labels.is_empty() && self.selects(agent)
    }

    /// Whether this selector picks `agent`.
    pub fn selects(&self, agent: &Agent) -> bool {
        if self.is_empty() {
            return false;
        }
        let ids = self.agents.is_empty()
            || self.agents.iter().any(|p| {
                // A literal matches only itself: skip compiling it (a verdict asks this).
                if is_literal_glob(p) {
                    return *p == agent.id;
                }
                glob::Pattern::new(p)
                    .map(|g| g.matches(&agent.id))
                    .unwrap_or(false)
            });
        let ns = self.namespace.is_none() || self.namespace == agent.namespace;
        let labels = self
            .labels
            .iter()
            .all(|(k, v)| agent.labels.get(k) == Some(v));
        ids && ns && labels
    }
}

/// One governance rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `POLICY_ID rules[N] (line L)`, for reasons.
    pub label: String,
    /// `tool`: a tool name or glob.
    pub tool: glob::Pattern,
    /// `server`: the MCP server alias the rule is limited to.
    pub server: Option<String>,
    /// `approval`, in the agent-file forms.
    pub approval: Option<ApprovalSpec>,
    /// `risk_tier`.
    pub risk_tier: Option<RiskTier>,
    /// `irreversible`.
    pub irreversible: bool,
    /// `timeout_seconds`: how long an approval waits, in seconds.
    pub timeout_seconds: Option<u64>,
    /// `default_decision` applied at expiry.
    pub default_decision: Option<DefaultDecision>,
    /// `approvers`: operator roles that may decide (every role any group names; empty: any
    /// operator).
    pub approvers: Vec<String>,
    /// `approvers` as a quorum, when it asks for more than one approval (issue 14 §1).
    pub quorum: Option<crate::quorum::Quorum>,
    /// `thresholds`: rate, cost and output-size limits beyond which a call needs confirmation.
    pub thresholds: Thresholds,
    /// `scope`: path roots and URL domains the call's targets must stay inside.
    pub scope: ScopeSpec,
    /// `suggested_alternatives`: shown to the operator and the agent with the approval request.
    pub suggested_alternatives: Vec<String>,
    /// `escalation` (a chain of steps, issue 14 §3) or `on_timeout` (one step at the timeout,
    /// issue 10 §5): roles that join the approvers while the approval waits.
    pub escalation: Option<Escalation>,
    /// `deny`: refuse the call outright — `true`, or `{condition, message_template}` to refuse
    /// only when the condition matches (a condition that cannot be evaluated requires
    /// approval instead). The rendered template is the denial reason.
    pub deny: Option<ApprovalSpec>,
    /// `separation_of_duties`: refuse an approval from the agent's owner or from the person the
    /// call acts for (issue 14 §2); absent: on for R4.
    pub separation_of_duties: Option<bool>,
    /// `require_passkey`: an approving vote needs a passkey assertion bound to the approval and
    /// its `call_hash` (issue 14 §4); absent: on for R4.
    pub require_passkey: Option<bool>,
    /// `in_client_approval`: the person driving the agent may approve in the MCP client
    /// (elicitation). Never effective for R3/R4 or when any covering rule names approvers.
    pub in_client_approval: bool,
    /// `side_effects`: what the call will change, for the operator (a template like the
    /// approval message; seed 002 "predicted side effects").
    pub side_effects: Option<String>,
    /// `rollback`: how to undo the call, or why it cannot be undone (a template; seed 002
    /// "rollback/safety notes").
    pub rollback: Option<String>,
    /// `dry_run_tool`: a tool of the same server that previews the call with the same
    /// arguments (the dashboard's dry-run button, where assent forwards calls).
    pub dry_run_tool: Option<String>,
    /// `redact`: argument paths (`card.number`, dotted) masked in everything that leaves the
    /// gateway (webhooks, events, logs, exports), never in the stored call.
    pub redact: Vec<String>,
    /// `untrusted_output`, `private_data`, `egress`, `writes` (an `irreversible` rule counts
    /// as `writes`): what the tool's calls do, for the risk that follows the session
    /// ([`crate::session_risk`]).
    pub effects: crate::session_risk::Effects,
}

impl Rule {
    /// Whether the rule covers a call of `tool` on `server`.
    pub fn covers(&self, tool: &str, server: Option<&str>) -> bool {
        self.tool.matches(tool) && (self.server.is_none() || self.server.as_deref() == server)
    }
}

/// A governance policy from assent's policy registry.
#[derive(Debug, Clone)]
pub struct Policy {
    /// `org.team.name-v1`.
    pub id: String,
    /// The file it came from.
    pub file: String,
    /// Which agents it applies to besides those that reference it.
    pub selector: Selector,
    /// Its rules, in file order.
    pub rules: Vec<Rule>,
}
