//! Policy: Agent Format agent files (seed 004) and assent governance policies, parsed from
//! YAML text and validated into a [`Registry`] the gatekeeper reads.
//!
//! Agent files follow Agent Format 1.0 (`metadata`, `action_space.local_tools[]`,
//! `action_space.mcp_servers[]`, `constraints.governance_policies[]`); unknown fields are
//! ignored, as the format's forward-compatibility rule requires. Governance files are assent's
//! own format (`docs/policy.md`) and reject unknown keys, so a typo never silently weakens a rule.

use crate::approval::{DefaultDecision, check_default_decision};
use crate::condition::Condition;
pub use crate::triggers::{Escalation, ScopeSpec, Thresholds};
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::fmt;

/// seed 002 risk tier. R0–R1 map to AAEP `low`, R2 to `medium`, R3–R4 to `high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
pub enum RiskTier {
    /// Negligible risk (AAEP low).
    R0,
    /// Low risk (AAEP low).
    R1,
    /// Medium risk (AAEP medium); the default tier.
    R2,
    /// High risk (AAEP high); always requires confirmation.
    R3,
    /// Critical risk (AAEP high); always requires confirmation.
    R4,
}

impl RiskTier {
    /// `"R0"` … `"R4"`.
    pub fn as_str(self) -> &'static str {
        ["R0", "R1", "R2", "R3", "R4"][self as usize]
    }
    /// Parses `"R0"` … `"R4"`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "R0" => Self::R0,
            "R1" => Self::R1,
            "R2" => Self::R2,
            "R3" => Self::R3,
            "R4" => Self::R4,
            _ => return None,
        })
    }
    /// AAEP `risk_level`: `low`, `medium` or `high`.
    pub fn risk_level(self) -> &'static str {
        match self {
            Self::R0 | Self::R1 => "low",
            Self::R2 => "medium",
            Self::R3 | Self::R4 => "high",
        }
    }
}

impl fmt::Display for RiskTier {
    /// [`RiskTier::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    /// The file it came from, as given to [`Registry::load`].
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
}

/// Which agents a governance policy applies to besides those that reference it. Every field
/// that is given must match; a selector with no field selects no agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Agent ids or globs (`*` selects every agent).
    #[serde(default)]
    pub agents: Vec<String>,
    /// Agent `metadata.namespace` must equal this.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Every label must be present with this value.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Selector {
    fn is_empty(&self) -> bool {
        self.agents.is_empty() && self.namespace.is_none() && self.labels.is_empty()
    }
    /// Whether this selector picks `agent`.
    pub fn selects(&self, agent: &Agent) -> bool {
        if self.is_empty() {
            return false;
        }
        let ids = self.agents.is_empty()
            || self.agents.iter().any(|p| {
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
    /// `approvers`: operator roles that may decide.
    pub approvers: Vec<String>,
    /// `thresholds`: rate, cost and output-size limits beyond which a call needs confirmation.
    pub thresholds: Thresholds,
    /// `scope`: path roots and URL domains the call's targets must stay inside.
    pub scope: ScopeSpec,
    /// `suggested_alternatives`: shown to the operator and the agent with the approval request.
    pub suggested_alternatives: Vec<String>,
    /// `on_timeout`: extend the wait once to other roles before the default decision applies.
    pub on_timeout: Option<Escalation>,
    /// `deny`: refuse the call outright — `true`, or `{condition, message_template}` to refuse
    /// only when the condition matches (a condition that cannot be evaluated requires
    /// approval instead). The rendered template is the denial reason.
    pub deny: Option<ApprovalSpec>,
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

/// A configuration error with the file, the line when known, and the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadError {
    /// The file, as given to [`Registry::load`].
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// All errors found while loading, one per line.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadErrors(pub Vec<LoadError>);

impl fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
impl std::error::Error for LoadErrors {}

/// Every agent and governance policy, validated. Read-only once built.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Agents by `metadata.id`.
    pub agents: BTreeMap<String, Agent>,
    /// Governance policies by id.
    pub policies: BTreeMap<String, Policy>,
    /// Load-time warnings (e.g. a high-risk rule that defaults to approve).
    pub warnings: Vec<String>,
    /// SHA-256 (hex) of the governance policy set as loaded: of the RFC 8785 canonical JSON of
    /// the array of the governance files' texts, sorted (so neither file names nor load order
    /// change it; any edit of a policy does). Recorded with each held call (MPLP Confirm
    /// `governance`, `docs/conformance.md`).
    pub policy_set_sha256: String,
    /// Unknown-field errors collected in strict mode before the files are parsed.
    strict_errors: Vec<LoadError>,
}

/// [`Registry::policy_set_sha256`] of these governance files.
fn policy_set_sha256(governance_files: &[(String, String)]) -> String {
    let mut texts: Vec<&str> = governance_files.iter().map(|(_, t)| t.as_str()).collect();
    texts.sort_unstable();
    let canonical = crate::canonical::canonical_value(&serde_json::json!(texts))
        .expect("an array of strings is canonical");
    crate::canonical::sha256_hex(canonical.as_bytes())
}

fn reg_errs_push(reg: &mut Registry, file: &str, line: Option<u64>, path: &str) {
    reg.strict_errors.push(LoadError {
        file: file.to_string(),
        line,
        message: format!("unknown field `{path}` (not in Agent Format 1.0; strict mode)"),
    });
}

// ---- raw serde shapes ----

#[derive(Deserialize)]
struct RawAgentFile {
    metadata: RawMeta,
    #[serde(default)]
    action_space: RawActionSpace,
    #[serde(default)]
    constraints: RawConstraints,
}
#[derive(Deserialize)]
struct RawMeta {
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}
#[derive(Deserialize, Default)]
struct RawActionSpace {
    #[serde(default)]
    local_tools: Vec<Spanned<RawLocalTool>>,
    #[serde(default)]
    mcp_servers: Vec<Spanned<RawMcpServer>>,
    #[serde(default)]
    local_agents: Vec<Spanned<RawLocalAgent>>,
    #[serde(default)]
    remote_agents: Vec<Spanned<RawRemoteAgent>>,
}
#[derive(Deserialize)]
struct RawLocalAgent {
    alias: String,
    source: String,
    #[serde(default)]
    approval: Option<Value>,
}
#[derive(Deserialize)]
struct RawRemoteAgent {
    alias: String,
    #[serde(default)]
    approval: Option<Value>,
    #[serde(default)]
    allowed_skills: Option<Vec<Value>>,
}
#[derive(Deserialize)]
struct RawLocalTool {
    alias: String,
    #[serde(default)]
    approval: Option<Value>,
}
#[derive(Deserialize)]
struct RawMcpServer {
    alias: String,
    #[serde(default)]
    approval: Option<Value>,
    #[serde(default)]
    allowed_tools: Option<Vec<Value>>,
}
#[derive(Deserialize, Default)]
struct RawConstraints {
    #[serde(default)]
    governance_policies: Vec<RawPolicyRef>,
}
#[derive(Deserialize)]
struct RawPolicyRef {
    policy_ref: String,
    #[serde(default = "yes")]
    required: bool,
}
fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicyFile {
    policies: Vec<Spanned<RawPolicy>>,
}
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    id: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    selector: Selector,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
}
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    tool: String,
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    approval: Option<Value>,
    #[serde(default)]
    risk_tier: Option<String>,
    #[serde(default)]
    irreversible: bool,
    #[serde(default)]
    timeout_seconds: Option<u64>,
    #[serde(default)]
    default_decision: Option<String>,
    #[serde(default)]
    approvers: Vec<String>,
    #[serde(default)]
    thresholds: Thresholds,
    #[serde(default)]
    scope: ScopeSpec,
    #[serde(default)]
    suggested_alternatives: Vec<String>,
    #[serde(default)]
    on_timeout: Option<Escalation>,
    #[serde(default)]
    deny: Option<Value>,
    #[serde(default)]
    in_client_approval: bool,
    #[serde(default)]
    side_effects: Option<String>,
    #[serde(default)]
    rollback: Option<String>,
    #[serde(default)]
    dry_run_tool: Option<String>,
    #[serde(default)]
    redact: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
}

/// Longest approval wait a rule may set, and longest `on_timeout` extension: 7 days, in
/// seconds (issue 10 §10). Policy `timeout_seconds` and `on_timeout.after_seconds` must lie in
/// `1..=MAX_WAIT_SECONDS`.
pub const MAX_WAIT_SECONDS: u64 = 604_800;

/// `Err("NAME N is out of range (MIN to MAX UNIT)")` unless `min <= value <= max`.
pub(crate) fn in_range(
    name: &str,
    value: u64,
    min: u64,
    max: u64,
    unit: &str,
) -> Result<(), String> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{name} {value} is out of range ({min} to {max} {unit})"
        ))
    }
}

/// Validates one governance rule (issue 10 §10 bounds included): the [`Rule`] and a load-time
/// warning, or `Err(reason)` for the caller to report with the file and line.
fn build_rule(rr: &RawRule, label: String) -> Result<(Rule, Option<String>), String> {
    let tool = match glob::Pattern::new(&rr.tool) {
        Ok(g) if !rr.tool.is_empty() => g,
        _ => return Err(format!("`tool: {}` is not a tool name or glob", rr.tool)),
    };
    let risk_tier =
        match rr.risk_tier.as_deref() {
            None => None,
            Some(t) => Some(RiskTier::parse(t).ok_or_else(|| {
                format!("unknown risk_tier `{t}` (expected R0, R1, R2, R3 or R4)")
            })?),
        };
    let default_decision = match rr.default_decision.as_deref() {
        None => None,
        Some("approve") => Some(DefaultDecision::Approve),
        Some("reject") => Some(DefaultDecision::Reject),
        Some(o) => {
            return Err(format!(
                "unknown default_decision `{o}` (expected approve or reject)"
            ));
        }
    };
    let approval = rr.approval.as_ref().map(ApprovalSpec::parse).transpose()?;
    let deny = match rr.deny.as_ref().map(ApprovalSpec::parse).transpose() {
        Ok(Some(ApprovalSpec::Exempt)) | Ok(None) => None,
        Ok(d) => d,
        Err(e) => return Err(format!("deny: {}", e.replace("`approval`", "`deny`"))),
    };
    if let Some(t) = rr.timeout_seconds {
        in_range("timeout_seconds", t, 1, MAX_WAIT_SECONDS, "seconds")?;
    }
    rr.thresholds.validate().and(rr.scope.validate())?;
    if let Some(e) = &rr.on_timeout {
        if e.escalate_to.is_empty() {
            return Err("on_timeout.escalate_to must name at least one role".into());
        }
        in_range(
            "on_timeout.after_seconds",
            e.after_seconds,
            1,
            MAX_WAIT_SECONDS,
            "seconds",
        )?;
    }
    let warning = check_default_decision(
        rr.irreversible,
        risk_tier.unwrap_or(RiskTier::R2),
        default_decision.unwrap_or_default(),
    )?;
    let rule = Rule {
        label,
        tool,
        server: rr.server.clone(),
        approval,
        risk_tier,
        irreversible: rr.irreversible,
        timeout_seconds: rr.timeout_seconds,
        default_decision,
        approvers: rr.approvers.clone(),
        thresholds: rr.thresholds.clone(),
        scope: rr.scope.clone(),
        suggested_alternatives: rr.suggested_alternatives.clone(),
        on_timeout: rr.on_timeout.clone(),
        in_client_approval: rr.in_client_approval,
        side_effects: rr.side_effects.clone(),
        rollback: rr.rollback.clone(),
        dry_run_tool: rr.dry_run_tool.clone(),
        redact: rr.redact.clone(),
        deny,
    };
    Ok((rule, warning))
}

fn yaml_err(file: &str, e: serde_saphyr::Error) -> LoadError {
    let line = e.location().map(|l| l.line());
    let msg = e.to_string();
    // The rendered message may repeat the location and quote the source; keep the first line.
    let msg = msg.lines().next().unwrap_or("invalid YAML").to_string();
    LoadError {
        file: file.to_string(),
        line,
        message: msg,
    }
}

fn identifier_ok(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_alphabetic() || x == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

fn policy_id_ok(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_lowercase() || x.is_ascii_digit())
        && c.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || "_.-".contains(x))
}

impl Registry {
    /// Builds a registry from `(file name, YAML text)` pairs of agent files and governance
    /// files. Collects every error (file, line, reason) instead of stopping at the first.
    ///
    /// Errors: YAML syntax or shape, duplicate agent ids, duplicate aliases within an agent's
    /// `local_tools` or `mcp_servers` (Agent Format: runtimes MUST reject them), bad `approval`
    /// values, bad policy ids, unknown risk tiers, an irreversible rule whose default decision
    /// is `approve` (AAEP §6.4.1), and a duration or count outside its bound (issue 10 §10:
    /// `timeout_seconds` and `on_timeout.after_seconds` 1 to [`MAX_WAIT_SECONDS`], the
    /// `thresholds` of [`Thresholds::validate`]; `FILE:LINE: policy `ID` rules[N]: KEY VALUE is
    /// out of range (MIN to MAX UNIT)`). Unresolvable `required` policy references are not load errors:
    /// the agent is loaded as refused and every call it makes is denied.
    pub fn load(
        agent_files: &[(String, String)],
        governance_files: &[(String, String)],
    ) -> Result<Registry, LoadErrors> {
        Self::load_with(agent_files, governance_files, false)
    }

    /// [`Registry::load`]; fields of agent files that the Agent Format 1.0 schema does not
    /// define are warnings (`FILE:LINE: unknown field `PATH` …; ignored`), or errors when
    /// `strict` (Agent Format forward compatibility: catches `aproval: true`).
    pub fn load_with(
        agent_files: &[(String, String)],
        governance_files: &[(String, String)],
        strict: bool,
    ) -> Result<Registry, LoadErrors> {
        let mut reg = Registry::default();
        for (file, text) in agent_files {
            let Ok(doc) = serde_saphyr::from_str::<Value>(text) else {
                continue; // the typed parse below reports it
            };
            for path in crate::agf::unknown_fields(&doc) {
                let key = path.rsplit(['.', ']']).next().unwrap_or(&path);
                let line = crate::agf::line_of_key(text, key);
                if strict {
                    reg_errs_push(&mut reg, file, line, &path);
                } else {
                    let at = line.map(|l| format!("{file}:{l}")).unwrap_or(file.clone());
                    reg.warnings.push(format!(
                        "{at}: unknown field `{path}` (not in Agent Format 1.0); ignored (--strict makes this an error)"
                    ));
                }
            }
        }
        let mut errs = std::mem::take(&mut reg.strict_errors);
        reg.policy_set_sha256 = policy_set_sha256(governance_files);
        for (file, text) in governance_files {
            reg.load_governance(file, text, &mut errs);
        }
        for (file, text) in agent_files {
            reg.load_agent(file, text, &mut errs);
        }
        // Resolve policy references after everything is loaded.
        let mut warnings = Vec::new();
        for a in reg.agents.values_mut() {
            for r in &a.policy_refs {
                if reg.policies.contains_key(&r.id) {
                    continue;
                }
                if r.required {
                    let reason = format!(
                        "agent `{}` requires governance policy `{}`, which does not resolve in the policy registry",
                        a.id, r.id
                    );
                    warnings.push(format!(
                        "{}: {reason}; every call of this agent is denied",
                        a.file
                    ));
                    a.refused.get_or_insert(reason);
                } else {
                    warnings.push(format!(
                        "{}: optional governance policy `{}` does not resolve; ignored",
                        a.file, r.id
                    ));
                }
            }
        }
        // Patterns that do not compile always require approval; say so at start-up.
        let mut specs: Vec<(&str, String, &ApprovalSpec)> = Vec::new();
        for a in reg.agents.values() {
            for t in &a.local_tools {
                specs.extend(
                    t.approval
                        .iter()
                        .map(|s| (a.file.as_str(), format!("local tool `{}`", t.alias), s)),
                );
            }
            for m in &a.mcp_servers {
                specs.extend(
                    m.approval
                        .iter()
                        .map(|s| (a.file.as_str(), format!("MCP server `{}`", m.alias), s)),
                );
                for t in m.allowed_tools.iter().flatten() {
                    specs.extend(t.approval.iter().map(|s| {
                        (
                            a.file.as_str(),
                            format!("MCP server `{}` tool `{}`", m.alias, t.name),
                            s,
                        )
                    }));
                }
            }
            for d in &a.delegates {
                specs.extend(
                    d.approval
                        .iter()
                        .map(|s| (a.file.as_str(), format!("agent `{}`", d.alias), s)),
                );
                for k in d.skills.iter().flatten() {
                    specs.extend(k.approval.iter().map(|s| {
                        (
                            a.file.as_str(),
                            format!("agent `{}` skill `{}`", d.alias, k.id),
                            s,
                        )
                    }));
                }
            }
        }
        for p in reg.policies.values() {
            for r in &p.rules {
                specs.extend(
                    r.approval
                        .iter()
                        .map(|s| (p.file.as_str(), r.label.clone(), s)),
                );
            }
        }
        for (file, what, spec) in specs {
            if let ApprovalSpec::Required {
                condition: Some(c), ..
            } = spec
            {
                for (key, e) in c.pattern_errors() {
                    warnings.push(format!(
                        "{file}: {what}: pattern for `{key}` does not compile ({e}); every call it covers requires approval"
                    ));
                }
            }
        }
        reg.warnings.extend(warnings);
        if errs.is_empty() {
            Ok(reg)
        } else {
            Err(LoadErrors(errs))
        }
    }

    fn load_agent(&mut self, file: &str, text: &str, errs: &mut Vec<LoadError>) {
        let raw: RawAgentFile = match serde_saphyr::from_str(text) {
            Ok(r) => r,
            Err(e) => return errs.push(yaml_err(file, e)),
        };
        let err = |line: Option<u64>, message: String| LoadError {
            file: file.to_string(),
            line,
            message,
        };
        let id = raw.metadata.id.clone();
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        {
            errs.push(err(
                None,
                format!("metadata.id `{id}` must match ^[a-z0-9][a-z0-9_-]*$"),
            ));
            return;
        }
        if let Some(prev) = self.agents.get(&id) {
            errs.push(err(
                None,
                format!("agent id `{id}` is already defined in {}", prev.file),
            ));
            return;
        }
        let mut local_tools: Vec<LocalTool> = Vec::new();
        for t in &raw.action_space.local_tools {
            let line = Some(t.referenced.line());
            let alias = t.value.alias.clone();
            if !identifier_ok(&alias) {
                errs.push(err(
                    line,
                    format!("local tool alias `{alias}` must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
                ));
            }
            if local_tools.iter().any(|x| x.alias == alias) {
                errs.push(err(line, format!("duplicate local tool alias `{alias}`")));
                continue;
            }
            let approval = match t
                .value
                .approval
                .as_ref()
                .map(ApprovalSpec::parse)
                .transpose()
            {
                Ok(a) => a,
                Err(e) => {
                    errs.push(err(line, format!("local tool `{alias}`: {e}")));
                    continue;
                }
            };
            local_tools.push(LocalTool { alias, approval });
        }
        let mut mcp_servers: Vec<McpServer> = Vec::new();
        for s in &raw.action_space.mcp_servers {
            let line = Some(s.referenced.line());
            let alias = s.value.alias.clone();
            if !identifier_ok(&alias) {
                errs.push(err(
                    line,
                    format!("MCP server alias `{alias}` must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
                ));
            }
            if mcp_servers.iter().any(|x| x.alias == alias) {
                errs.push(err(line, format!("duplicate MCP server alias `{alias}`")));
                continue;
            }
            let approval = match s
                .value
                .approval
                .as_ref()
                .map(ApprovalSpec::parse)
                .transpose()
            {
                Ok(a) => a,
                Err(e) => {
                    errs.push(err(line, format!("MCP server `{alias}`: {e}")));
                    continue;
                }
            };
            let allowed_tools = match &s.value.allowed_tools {
                None => None,
                Some(list) => {
                    let mut out: Vec<AllowedTool> = Vec::new();
                    for (i, entry) in list.iter().enumerate() {
                        let parsed = match entry {
                            Value::String(n) if !n.is_empty() => Ok(AllowedTool {
                                name: n.clone(),
                                approval: None,
                            }),
                            Value::Object(m) => match m.get("name").and_then(Value::as_str) {
                                Some(n) if !n.is_empty() => {
                                    m.get("approval").map(ApprovalSpec::parse).transpose().map(
                                        |approval| AllowedTool {
                                            name: n.to_string(),
                                            approval,
                                        },
                                    )
                                }
                                _ => Err("an object entry needs a non-empty `name`".into()),
                            },
                            _ => Err("an entry must be a tool name or {name, approval}".into()),
                        };
                        match parsed {
                            Ok(t) if out.iter().any(|x| x.name == t.name) => errs.push(err(
                                line,
                                format!(
                                    "MCP server `{alias}`: duplicate allowed_tools entry `{}`",
                                    t.name
                                ),
                            )),
                            Ok(t) => out.push(t),
                            Err(e) => errs.push(err(
                                line,
                                format!("MCP server `{alias}` allowed_tools[{i}]: {e}"),
                            )),
                        }
                    }
                    Some(out)
                }
            };
            mcp_servers.push(McpServer {
                alias,
                approval,
                allowed_tools,
            });
        }
        let mut delegates: Vec<Delegate> = Vec::new();
        let locals = raw.action_space.local_agents.iter().map(|a| {
            (
                a.referenced.line(),
                &a.value.alias,
                &a.value.approval,
                None,
                Some(&a.value.source),
            )
        });
        let remotes = raw.action_space.remote_agents.iter().map(|a| {
            (
                a.referenced.line(),
                &a.value.alias,
                &a.value.approval,
                Some(&a.value.allowed_skills),
                None,
            )
        });
        for (line, alias, approval, skills, source) in locals.chain(remotes) {
            let line = Some(line);
            let remote = skills.is_some();
            let what = if remote {
                "remote agent"
            } else {
                "local agent"
            };
            if !identifier_ok(alias) {
                errs.push(err(
                    line,
                    format!("{what} alias `{alias}` must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
                ));
            }
            if source.is_some_and(|s| s.is_empty()) {
                errs.push(err(
                    line,
                    format!("{what} `{alias}`: source must not be empty"),
                ));
            }
            if delegates.iter().any(|d| &d.alias == alias) {
                errs.push(err(
                    line,
                    format!("duplicate agent alias `{alias}` in local_agents/remote_agents"),
                ));
                continue;
            }
            let approval = match approval.as_ref().map(ApprovalSpec::parse).transpose() {
                Ok(a) => a,
                Err(e) => {
                    errs.push(err(line, format!("{what} `{alias}`: {e}")));
                    continue;
                }
            };
            let skills = match skills.and_then(Option::as_ref) {
                None => None,
                Some(list) => {
                    let mut out: Vec<SkillRef> = Vec::new();
                    for (i, entry) in list.iter().enumerate() {
                        let parsed = match entry {
                            Value::String(n) if !n.is_empty() => Ok(SkillRef {
                                id: n.clone(),
                                approval: None,
                            }),
                            Value::Object(m) => match m.get("id").and_then(Value::as_str) {
                                Some(n) if !n.is_empty() => {
                                    m.get("approval").map(ApprovalSpec::parse).transpose().map(
                                        |approval| SkillRef {
                                            id: n.to_string(),
                                            approval,
                                        },
                                    )
                                }
                                _ => Err("an object entry needs a non-empty `id`".into()),
                            },
                            _ => Err("an entry must be a skill id or {id, approval}".into()),
                        };
                        match parsed {
                            Ok(k) if out.iter().any(|x| x.id == k.id) => errs.push(err(
                                line,
                                format!("remote agent `{alias}`: duplicate skill `{}`", k.id),
                            )),
                            Ok(k) => out.push(k),
                            Err(e) => errs.push(err(
                                line,
                                format!("remote agent `{alias}` allowed_skills[{i}]: {e}"),
                            )),
                        }
                    }
                    Some(out)
                }
            };
            delegates.push(Delegate {
                alias: alias.clone(),
                remote,
                approval,
                skills,
            });
        }
        let policy_refs = raw
            .constraints
            .governance_policies
            .iter()
            .map(|r| PolicyRef {
                id: r.policy_ref.clone(),
                required: r.required,
            })
            .collect();
        self.agents.insert(
            id.clone(),
            Agent {
                name: raw.metadata.name.clone().unwrap_or_else(|| id.clone()),
                id,
                namespace: raw.metadata.namespace.clone(),
                labels: raw.metadata.labels.clone(),
                file: file.to_string(),
                local_tools,
                mcp_servers,
                delegates,
                policy_refs,
                refused: None,
            },
        );
    }

    fn load_governance(&mut self, file: &str, text: &str, errs: &mut Vec<LoadError>) {
        let raw: RawPolicyFile = match serde_saphyr::from_str(text) {
            Ok(r) => r,
            Err(e) => return errs.push(yaml_err(file, e)),
        };
        for p in raw.policies {
            let pline = Some(p.referenced.line());
            let p = p.value;
            let err = |line: Option<u64>, message: String| LoadError {
                file: file.to_string(),
                line,
                message,
            };
            if !policy_id_ok(&p.id) {
                errs.push(err(
                    pline,
                    format!(
                        "policy id `{}` must match ^[a-z0-9][a-z0-9_.-]*$ (e.g. org.team.name-v1)",
                        p.id
                    ),
                ));
                continue;
            }
            if let Some(prev) = self.policies.get(&p.id) {
                errs.push(err(
                    pline,
                    format!("policy id `{}` is already defined in {}", p.id, prev.file),
                ));
                continue;
            }
            let mut rules = Vec::new();
            for (i, r) in p.rules.iter().enumerate() {
                let line = r.referenced.line();
                let label = format!("{} rules[{i}] (line {line})", p.id);
                match build_rule(&r.value, label) {
                    Ok((rule, warning)) => {
                        if let Some(w) = warning {
                            self.warnings
                                .push(format!("{file}:{line}: policy `{}` rules[{i}]: {w}", p.id));
                        }
                        rules.push(rule);
                    }
                    Err(m) => errs.push(err(
                        Some(line),
                        format!("policy `{}` rules[{i}]: {m}", p.id),
                    )),
                }
            }
            self.policies.insert(
                p.id.clone(),
                Policy {
                    id: p.id,
                    file: file.to_string(),
                    selector: p.selector,
                    rules,
                },
            );
        }
    }

    /// The governance policies that apply to `agent`: those it references and those whose
    /// selector picks it.
    pub fn policies_for<'a>(&'a self, agent: &'a Agent) -> impl Iterator<Item = &'a Policy> + 'a {
        self.policies.values().filter(move |p| {
            agent.policy_refs.iter().any(|r| r.id == p.id) || p.selector.selects(agent)
        })
    }

    /// Ids of the governance policies behind `reasons`: those with a rule that left a reason
    /// (the reason's `file` is the policy's file and its `rule` the rule's label). Sorted, each
    /// once. These are the policies that governed a call's verdict.
    pub fn policies_behind(&self, reasons: &[crate::Reason]) -> Vec<String> {
        self.policies
            .values()
            .filter(|p| {
                reasons
                    .iter()
                    .any(|r| r.file == p.file && p.rules.iter().any(|x| x.label == r.rule))
            })
            .map(|p| p.id.clone())
            .collect()
    }

    /// Tool names the agent declares on MCP server `alias`: `Ok(None)` when every tool is
    /// declared (`allowed_tools` omitted), `Ok(Some(names))` otherwise. `Err` with the reason when
    /// the agent or the alias is unknown.
    pub fn declared_tools(&self, agent: &str, alias: &str) -> Result<Option<Vec<String>>, String> {
        let a = self
            .agents
            .get(agent)
            .ok_or_else(|| format!("agent `{agent}` is not declared in any agent file"))?;
        let s = a
            .mcp_servers
            .iter()
            .find(|s| s.alias == alias)
            .ok_or_else(|| {
                format!(
                    "MCP server alias `{alias}` is not declared by agent `{agent}` ({})",
                    a.file
                )
            })?;
        Ok(s.allowed_tools
            .as_ref()
            .map(|l| l.iter().map(|t| t.name.clone()).collect()))
    }
}
