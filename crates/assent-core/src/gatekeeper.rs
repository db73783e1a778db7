//! The gatekeeper: one pure function from (registry, agent, call) to a [`Verdict`] with reasons
//! (MPLP Gatekeeper duty; seed 002 "When confirmations trigger"; seed 004 union semantics).

use crate::approval::{DefaultDecision, effective_default};
use crate::canonical::ToolCall;
use crate::condition::Outcome;
use crate::policy::{Agent, ApprovalSpec, Registry, RiskTier};
use crate::template::{TemplateContext, default_message, render};
use crate::triggers::{
    Escalation, Observations, cost_exceeded, domain_violations, path_violations, rate_exceeded,
};
use serde::{Deserialize, Serialize};

/// `allow`, `confirm` (hold for a human) or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    /// Run it.
    Allow,
    /// Hold it for a human (MPLP REQUIRE_CONFIRMATION).
    Confirm,
    /// Refuse it (`TOOL_DENIED`).
    Deny,
}

impl VerdictKind {
    /// `"allow"`, `"confirm"` or `"deny"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Confirm => "confirm",
            Self::Deny => "deny",
        }
    }
}

/// One reason behind a verdict: the file, the rule in it, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The agent or governance file; empty for built-in rules.
    pub file: String,
    /// Where in the file (or the built-in rule's name).
    pub rule: String,
    /// What it said about this call.
    pub text: String,
}

/// The gatekeeper's answer for one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Allow, confirm or deny.
    pub kind: VerdictKind,
    /// Every source consulted, in order: the declaration, governance rules, the risk tier.
    pub reasons: Vec<Reason>,
    /// Highest tier any covering rule gives; R2 when none does.
    pub risk_tier: RiskTier,
    /// True when any covering rule marks the action irreversible; such a call is never
    /// `allow` (seed 001, AAEP §6.4.1) and its `default_decision` is `reject`.
    pub irreversible: bool,
    /// Shortest `timeout_seconds` of the covering rules, if any names one.
    pub timeout_seconds: Option<u64>,
    /// Default applied at expiry: `approve` only if every covering rule that names one says so
    /// and the action is reversible; `reject` otherwise.
    pub default_decision: DefaultDecision,
    /// Operator roles allowed to decide (union over covering rules; empty = any operator).
    pub approvers: Vec<String>,
    /// The rendered approval message (confirm), or the denial reason (deny), or empty (allow).
    pub message: String,
    /// Threshold and scope triggers that fired (`rate`, `cost`, `paths`, `domains`); their
    /// texts are in `reasons`. A grant never covers a call with any (seed 002).
    pub triggers: Vec<String>,
    /// `suggested_alternatives` of the covering rules, in order, without repeats.
    pub suggested_alternatives: Vec<String>,
    /// `on_timeout` of the covering rules merged: every role, the shortest extension.
    pub escalation: Option<Escalation>,
    /// Smallest `thresholds.output_bytes` of the covering rules.
    pub output_bytes: Option<u64>,
    /// The agent's own user may approve in the MCP client (issue 4): a covering rule sets
    /// `in_client_approval`, the verdict is `confirm`, the tier is below R3 and no covering
    /// rule names approver roles.
    #[serde(default)]
    pub in_client_approval: bool,
    /// `side_effects` of the covering rules, rendered (confirm only), in rule order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_effects: Vec<String>,
    /// `rollback` notes of the covering rules, rendered (confirm only), in rule order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollback: Vec<String>,
    /// The first covering rule's `dry_run_tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_tool: Option<String>,
    /// Argument paths to mask outside the gateway: the union of the covering rules' `redact`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
}

/// The approval wait by risk when no rule names `timeout_seconds` (issue 3; AAEP §6.4.2):
/// high 300 s, medium 120 s, low 60 s.
pub fn default_timeout_seconds(tier: RiskTier) -> u64 {
    match tier.risk_level() {
        "high" => 300,
        "medium" => 120,
        _ => 60,
    }
}

/// The reason a rule with `irreversible: true` gives (seed 001; AAEP §6.4.1).
const IRREVERSIBLE_NOTE: &str = "irreversible: an action that cannot be undone always needs explicit human consent (seed 001, AAEP §6.4.1), so confirmation is required and the default on timeout is reject";

fn reason(file: &str, rule: impl Into<String>, text: impl Into<String>) -> Reason {
    Reason {
        file: file.to_string(),
        rule: rule.into(),
        text: text.into(),
    }
}

/// Outcome of one `approval` spec: `Some(why)` when it requires approval, naming the clause
/// that matched (`approval condition matched: amount > 1000 (amount = 5000)`) or could not be
/// evaluated.
fn requires(spec: &ApprovalSpec, args: &serde_json::Value) -> Option<String> {
    match spec {
        ApprovalSpec::Exempt => None,
        ApprovalSpec::Required {
            condition: None, ..
        } => Some("approval is always required".into()),
        ApprovalSpec::Required {
            condition: Some(c), ..
        } => match c.evaluate(args) {
            Outcome::Match(groups) => Some(format!(
                "approval condition matched: {}",
                groups.join("; or ")
            )),
            Outcome::NoMatch => None,
            Outcome::CannotEvaluate(why) => Some(unevaluable("approval", &why)),
        },
    }
}

/// The reason for a condition that cannot be evaluated (fail closed: approval is required).
fn unevaluable(what: &str, why: &[String]) -> String {
    format!(
        "{what} condition cannot be evaluated ({}), so approval is required",
        why.join("; ")
    )
}

fn template_of(spec: &ApprovalSpec) -> Option<&str> {
    match spec {
        ApprovalSpec::Required {
            message_template, ..
        } => message_template.as_deref(),
        ApprovalSpec::Exempt => None,
    }
}

fn deny(text: String, file: &str, rule: &str) -> Verdict {
    deny_because(text.clone(), text, file, rule)
}

/// A deny verdict whose message (for the agent) and reason (for the record) differ.
fn deny_because(message: String, why: String, file: &str, rule: &str) -> Verdict {
    Verdict {
        kind: VerdictKind::Deny,
        reasons: vec![reason(file, rule, why)],
        risk_tier: RiskTier::R2,
        irreversible: false,
        timeout_seconds: None,
        default_decision: DefaultDecision::Reject,
        approvers: Vec::new(),
        message,
        triggers: Vec::new(),
        suggested_alternatives: Vec::new(),
        escalation: None,
        output_bytes: None,
        in_client_approval: false,
        side_effects: Vec::new(),
        rollback: Vec::new(),
        dry_run_tool: None,
        redact: Vec::new(),
    }
}

/// Decides `call` for `agent_id`.
///
/// - Deny: the agent is unknown, refused (a required policy does not resolve), or does not
///   declare the tool / MCP server alias; the reason names it.
/// - Confirm: the agent's `approval` (tool, or server blanket unless the tool overrides it)
///   or any covering governance rule requires approval, a condition cannot be evaluated, a
///   covering rule marks the action `irreversible` (seed 001, AAEP §6.4.1: whatever its tier;
///   its default decision is then always `reject`), or the risk tier is R3/R4 (seed 002).
///   Agent `approval: false` never removes a governance requirement.
/// - Allow: otherwise.
///
/// This form sees no earlier calls (rate and cost thresholds count this call only) and checks
/// paths lexically; [`evaluate_in`] takes [`Observations`].
pub fn evaluate(reg: &Registry, agent_id: &str, call: &ToolCall) -> Verdict {
    evaluate_with(reg, agent_id, call, None)
}

/// [`evaluate`], given the canonical JSON of the call's arguments
/// ([`ToolCall::canonical_arguments`]) when the caller has it already, so the message does not
/// canonicalise them a second time.
pub fn evaluate_with(
    reg: &Registry,
    agent_id: &str,
    call: &ToolCall,
    canonical_arguments: Option<&str>,
) -> Verdict {
    evaluate_in(
        reg,
        agent_id,
        call,
        canonical_arguments,
        &Observations::none(0),
    )
}

/// [`evaluate_with`], observing the session's earlier calls and the filesystem through `obs`:
/// a covering rule's `thresholds` (rate, cost) and `scope` (paths, domains) turn an allow into
/// a confirm and name the trigger in `reasons` and `triggers`. They never turn a deny into
/// anything else.
pub fn evaluate_in(
    reg: &Registry,
    agent_id: &str,
    call: &ToolCall,
    canonical_arguments: Option<&str>,
    obs: &Observations<'_>,
) -> Verdict {
    evaluate_inner(reg, agent_id, call, canonical_arguments, obs, Mode::Tool)
}

/// What is being gated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tool,
    Target,
    Delegation,
}

/// The synthetic call of a delegation (seed 004 "Approval on Agent Delegation"): tool
/// `delegate.<target>`, arguments `{"input": …, "skill_id"?: …, "skill_args"?: …}`. Its
/// canonical hash is what an approval of the delegation binds.
pub fn delegation_call(
    target: &str,
    input: serde_json::Value,
    skill_id: Option<&str>,
    skill_args: Option<serde_json::Value>,
) -> Result<ToolCall, crate::CanonicalError> {
    let mut args = serde_json::json!({ "input": input });
    if let Some(s) = skill_id {
        args["skill_id"] = s.into();
    }
    if let Some(a) = skill_args {
        args["skill_args"] = a;
    }
    ToolCall::new(format!("delegate.{target}"), None, args)
}

/// The verdict for a delegation to a sub-agent (seed 004 "Approval on Agent Delegation";
/// `call` from [`delegation_call`]). The target must be one of the agent's `local_agents[]` or
/// `remote_agents[]` (a `skill_id` only on a remote agent, and one of its `allowed_skills` when
/// it declares them), else deny. The reference's `approval` decides, its condition keys being
/// paths over `{"parent": {"input": …}}` (`parent.input.risk_level`); a skill's `approval`
/// decides too, over the skill's input fields. Templates see `{{parent.input.*}}`,
/// `{{skill_id}}`, `{{skill_args}}`, `{{skill_args.*}}`, `{{remote_agent_alias}}`,
/// `{{agent_alias}}` (the sub-agent) and `{{agent_id}}` (the parent). Governance rules covering
/// the tool name `delegate.<target>` apply as for a tool call. The sub-agent's own tool calls
/// are gated separately, as its own.
pub fn evaluate_delegation(
    reg: &Registry,
    agent_id: &str,
    call: &ToolCall,
    canonical_arguments: Option<&str>,
) -> Verdict {
    evaluate_inner(
        reg,
        agent_id,
        call,
        canonical_arguments,
        &Observations::none(0),
        Mode::Delegation,
    )
}

/// The verdict for an MPLP Confirm on a target that is not a tool call (MPLP Confirm module
/// §2.3, §4.2): a submitted plan, a context, an extension, … `call` is its synthetic form, tool
/// `mplp.<target_type>` with the target as arguments. It always needs a human (`confirm`)
/// unless a governance rule covering that tool name denies it; covering rules give its risk
/// tier, approvers, timeout, default decision, escalation and message as for a tool call. The
/// agent's declarations are not consulted (a target is not one of its tools).
pub fn evaluate_target(
    reg: &Registry,
    agent_id: &str,
    call: &ToolCall,
    canonical_arguments: Option<&str>,
) -> Verdict {
    evaluate_inner(
        reg,
        agent_id,
        call,
        canonical_arguments,
        &Observations::none(0),
        Mode::Target,
    )
}

fn evaluate_inner(
    reg: &Registry,
    agent_id: &str,
    call: &ToolCall,
    canonical_arguments: Option<&str>,
    obs: &Observations<'_>,
    mode: Mode,
) -> Verdict {
    let Some(agent) = reg.agents.get(agent_id) else {
        return deny(
            format!("agent `{agent_id}` is not declared in any agent file"),
            "",
            "agents",
        );
    };
    if let Some(why) = &agent.refused {
        return deny(why.clone(), &agent.file, "constraints.governance_policies");
    }
    let args = &call.arguments;
    let mut reasons = Vec::new();
    let mut required = false;
    let mut template: Option<&str> = None;

    // 1. The agent's own declaration (a Confirm target always needs a human).
    let target = mode == Mode::Target;
    let mut extra: Option<serde_json::Value> = None;
    let mut sub_alias: Option<String> = None;
    let mut delegation_spec: Option<(&ApprovalSpec, String)> = None;
    if mode == Mode::Delegation {
        let alias = call.tool.strip_prefix("delegate.").unwrap_or(&call.tool);
        let Some(d) = agent.delegates.iter().find(|d| d.alias == alias) else {
            return deny(
                format!(
                    "`{alias}` is not declared in action_space.local_agents or remote_agents of agent `{}`",
                    agent.id
                ),
                &agent.file,
                "action_space",
            );
        };
        let list = if d.remote {
            "remote_agents"
        } else {
            "local_agents"
        };
        let rule = format!("action_space.{list}[{alias}]");
        let skill_id = args.get("skill_id").and_then(|v| v.as_str());
        let skill_args = args
            .get("skill_args")
            .cloned()
            .unwrap_or(serde_json::json!({}));
        let input = args
            .get("input")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let mut x = serde_json::json!({"parent": {"input": input}, "skill_args": skill_args});
        if d.remote {
            x["remote_agent_alias"] = alias.into();
        }
        if let Some(sid) = skill_id {
            if !d.remote {
                return deny(
                    format!("`{alias}` is a local agent; skill_id applies to remote agents only"),
                    &agent.file,
                    &rule,
                );
            }
            x["skill_id"] = sid.into();
            if let Some(skills) = &d.skills {
                match skills.iter().find(|k| k.id == sid) {
                    None => {
                        return deny(
                            format!(
                                "skill `{sid}` is not in allowed_skills of remote agent `{alias}`"
                            ),
                            &agent.file,
                            &rule,
                        );
                    }
                    Some(k) => {
                        if let Some(spec) = &k.approval {
                            match requires(spec, &x["skill_args"]) {
                                Some(why) => {
                                    required = true;
                                    template = template_of(spec);
                                    reasons.push(reason(
                                        &agent.file,
                                        format!("{rule}.allowed_skills[{sid}]"),
                                        why,
                                    ));
                                }
                                None => reasons.push(reason(
                                    &agent.file,
                                    format!("{rule}.allowed_skills[{sid}]"),
                                    "skill approval condition did not match",
                                )),
                            }
                        }
                    }
                }
            }
        }
        extra = Some(x);
        sub_alias = Some(alias.to_string());
        delegation_spec = d.approval.as_ref().map(|s| (s, rule.clone()));
        if d.approval.is_none() {
            reasons.push(reason(&agent.file, &rule, "declared without approval"));
        }
    }
    let extra = extra;
    let (spec, rule) = if mode == Mode::Delegation {
        match delegation_spec {
            Some((s, rule)) => (Some(s), rule),
            None => (None, String::new()),
        }
    } else if target {
        required = true;
        reasons.push(reason(
            "",
            "mplp confirm",
            format!(
                "a {} submitted for approval needs a human decision (MPLP Confirm)",
                call.tool.strip_prefix("mplp.").unwrap_or(&call.tool)
            ),
        ));
        (None, String::new())
    } else {
        match declaration(agent, call) {
            Ok(x) => x,
            Err((text, rule)) => return deny(text, &agent.file, &rule),
        }
    };
    let agent_template = spec.and_then(template_of);
    let cond_args = extra.as_ref().unwrap_or(args);
    match spec.map(|s| (s, requires(s, cond_args))) {
        Some((s, Some(why))) => {
            required = true;
            template = template.or(template_of(s));
            reasons.push(reason(&agent.file, &rule, why));
        }
        Some((ApprovalSpec::Exempt, None)) => {
            reasons.push(reason(&agent.file, &rule, "declared with approval: false"))
        }
        Some((_, None)) => reasons.push(reason(
            &agent.file,
            &rule,
            "approval condition did not match",
        )),
        None if target || mode == Mode::Delegation => {}
        None => reasons.push(reason(&agent.file, &rule, "declared without approval")),
    }

    // 2. Governance rules (union, tighten-only).
    let mut tier: Option<RiskTier> = None;
    let mut irreversible = false;
    let mut timeout: Option<u64> = None;
    let mut approve_default = None::<bool>;
    let mut approvers: Vec<String> = Vec::new();
    let mut triggers: Vec<String> = Vec::new();
    let mut alternatives: Vec<String> = Vec::new();
    let mut escalation: Option<Escalation> = None;
    let mut output_bytes: Option<u64> = None;
    let mut in_client = false;
    let mut side_effect_templates: Vec<&str> = Vec::new();
    let mut rollback_templates: Vec<&str> = Vec::new();
    let mut dry_run_tool: Option<String> = None;
    let mut redact: Vec<String> = Vec::new();
    for p in reg.policies_for(agent) {
        for r in p
            .rules
            .iter()
            .filter(|r| r.covers(&call.tool, call.server.as_deref()))
        {
            let mut notes = Vec::new();
            if let Some(ApprovalSpec::Required {
                condition,
                message_template,
            }) = &r.deny
            {
                let outcome = condition.as_ref().map(|c| c.evaluate(args));
                let matched = match &outcome {
                    None => Some("deny: true".to_string()),
                    Some(Outcome::Match(groups)) => {
                        Some(format!("deny condition matched: {}", groups.join("; or ")))
                    }
                    _ => None,
                };
                match outcome {
                    None | Some(Outcome::Match(_)) => {
                        let ctx = TemplateContext {
                            tool_name: &call.tool,
                            tool_args: args,
                            agent_alias: &agent.name,
                            agent_id: &agent.id,
                            mcp_server_alias: call.server.as_deref(),
                            tool_args_json: canonical_arguments,
                            extra: None,
                        };
                        let matched = matched.unwrap_or_default();
                        let why = format!("denied by governance rule {} ({matched})", r.label);
                        return match message_template.as_deref().map(|t| render(t, &ctx)) {
                            Some(m) => {
                                deny_because(m.clone(), format!("{why}: {m}"), &p.file, &r.label)
                            }
                            None => deny(why, &p.file, &r.label),
                        };
                    }
                    Some(Outcome::CannotEvaluate(why)) => {
                        required = true;
                        notes.push(unevaluable("deny", &why));
                    }
                    Some(Outcome::NoMatch) => {}
                }
            }
            if let Some(spec) = &r.approval {
                match requires(spec, args) {
                    Some(why) => {
                        required = true;
                        if template.is_none() {
                            template = template_of(spec);
                        }
                        notes.push(why);
                    }
                    None => notes.push("approval not required by this rule".into()),
                }
            }
            if let Some(t) = r.risk_tier {
                tier = Some(tier.map_or(t, |x| x.max(t)));
                notes.push(format!("risk tier {}", t.as_str()));
            }
            if r.irreversible {
                // Seed 001, AAEP §6.4.1: no irreversible action without explicit human consent,
                // whatever the tier or the other sources say; the default at expiry is reject.
                irreversible = true;
                required = true;
                notes.push(IRREVERSIBLE_NOTE.into());
            }
            if let Some(t) = r.timeout_seconds {
                timeout = Some(timeout.map_or(t, |x| x.min(t)));
            }
            if let Some(d) = r.default_decision {
                let a = d == DefaultDecision::Approve;
                approve_default = Some(approve_default.unwrap_or(true) && a);
            }
            for role in &r.approvers {
                if !approvers.contains(role) {
                    approvers.push(role.clone());
                }
            }
            let covered = || {
                obs.prior_calls
                    .iter()
                    .filter(|c| r.covers(&c.tool, c.server.as_deref()))
            };
            let mut fired = |name: &str, why: String| {
                required = true;
                if !triggers.iter().any(|t| t == name) {
                    triggers.push(name.to_string());
                }
                notes.push(why);
            };
            if let Some(l) = &r.thresholds.rate
                && let Some(why) = rate_exceeded(l, covered(), obs.now_ms)
            {
                fired("rate", why);
            }
            if let Some(l) = &r.thresholds.cost
                && let Some(why) = cost_exceeded(l, covered(), args)
            {
                fired("cost", why);
            }
            if let Some(ps) = &r.scope.paths {
                for why in path_violations(ps, args, obs) {
                    fired("paths", why);
                }
            }
            if let Some(ds) = &r.scope.domains {
                for why in domain_violations(ds, args) {
                    fired("domains", why);
                }
            }
            in_client |= r.in_client_approval;
            side_effect_templates.extend(r.side_effects.as_deref());
            rollback_templates.extend(r.rollback.as_deref());
            if dry_run_tool.is_none() {
                dry_run_tool.clone_from(&r.dry_run_tool);
            }
            for path in &r.redact {
                if !redact.contains(path) {
                    redact.push(path.clone());
                }
            }
            if let Some(n) = r.thresholds.output_bytes {
                output_bytes = Some(output_bytes.map_or(n, |x| x.min(n)));
            }
            for a in &r.suggested_alternatives {
                if !alternatives.contains(a) {
                    alternatives.push(a.clone());
                }
            }
            if let Some(e) = &r.on_timeout {
                let m = escalation.get_or_insert_with(|| Escalation {
                    escalate_to: Vec::new(),
                    after_seconds: e.after_seconds,
                });
                m.after_seconds = m.after_seconds.min(e.after_seconds);
                for role in &e.escalate_to {
                    if !m.escalate_to.contains(role) {
                        m.escalate_to.push(role.clone());
                    }
                }
            }
            if notes.is_empty() {
                notes.push("rule covers this tool".into());
            }
            reasons.push(reason(&p.file, &r.label, notes.join("; ")));
        }
    }

    // 3. Risk tier: R3/R4 always need confirmation (seed 002).
    let risk_tier = tier.unwrap_or(RiskTier::R2);
    if risk_tier >= RiskTier::R3 {
        if !required {
            reasons.push(reason(
                "",
                "risk tier",
                format!(
                    "risk tier {} requires confirmation (seed 002)",
                    risk_tier.as_str()
                ),
            ));
        }
        required = true;
    }
    let in_client_ok = in_client && required && risk_tier < RiskTier::R3 && approvers.is_empty();
    let configured = if approve_default == Some(true) {
        DefaultDecision::Approve
    } else {
        DefaultDecision::Reject
    };
    let kind = if required {
        VerdictKind::Confirm
    } else {
        VerdictKind::Allow
    };
    let mut side_effects = Vec::new();
    let mut rollback = Vec::new();
    let message = if required {
        let ctx = TemplateContext {
            tool_name: &call.tool,
            tool_args: args,
            agent_alias: sub_alias.as_deref().unwrap_or(&agent.name),
            agent_id: &agent.id,
            mcp_server_alias: call.server.as_deref(),
            tool_args_json: canonical_arguments,
            extra: extra.as_ref(),
        };
        side_effects = side_effect_templates
            .iter()
            .map(|t| render(t, &ctx))
            .collect();
        rollback = rollback_templates.iter().map(|t| render(t, &ctx)).collect();
        // The template of the source that required approval, else the agent's own template.
        match (template.or(agent_template), &sub_alias) {
            (Some(t), _) => render(t, &ctx),
            (None, Some(sub)) => {
                let input = crate::canonical::canonical_value(&args["input"]).unwrap_or_default();
                match args.get("skill_id").and_then(|v| v.as_str()) {
                    Some(k) => format!(
                        "Agent {} wants to delegate to {sub} (skill {k}) with {input}",
                        agent.id
                    ),
                    None => format!("Agent {} wants to delegate to {sub} with {input}", agent.id),
                }
            }
            (None, None) => default_message(&ctx),
        }
    } else {
        String::new()
    };
    Verdict {
        kind,
        reasons,
        risk_tier,
        irreversible,
        timeout_seconds: timeout,
        default_decision: effective_default(irreversible, configured),
        approvers,
        message,
        triggers,
        suggested_alternatives: alternatives,
        escalation,
        output_bytes,
        in_client_approval: in_client_ok,
        side_effects,
        rollback,
        dry_run_tool,
        redact,
    }
}

/// Finds the agent's declaration of the call: the applicable `approval` (None when omitted and
/// not inherited) and a label of where it is. `Err((reason, rule))` when not declared.
fn declaration<'a>(
    agent: &'a Agent,
    call: &ToolCall,
) -> Result<(Option<&'a ApprovalSpec>, String), (String, String)> {
    match &call.server {
        None => {
            let t = agent
                .local_tools
                .iter()
                .find(|t| t.alias == call.tool)
                .ok_or_else(|| {
                    (
                        format!(
                            "tool `{}` is not declared in action_space.local_tools of agent `{}`",
                            call.tool, agent.id
                        ),
                        "action_space.local_tools".to_string(),
                    )
                })?;
            Ok((
                t.approval.as_ref(),
                format!("action_space.local_tools[{}]", t.alias),
            ))
        }
        Some(alias) => {
            let s = agent.mcp_servers.iter().find(|s| &s.alias == alias).ok_or_else(|| {
                (
                    format!("MCP server alias `{alias}` is not declared in action_space.mcp_servers of agent `{}`", agent.id),
                    "action_space.mcp_servers".to_string(),
                )
            })?;
            let base = format!("action_space.mcp_servers[{alias}]");
            match &s.allowed_tools {
                None => Ok((s.approval.as_ref(), base)),
                Some(list) => {
                    let t = list.iter().find(|t| t.name == call.tool).ok_or_else(|| {
                        (
                            format!(
                                "tool `{}` is not in allowed_tools of MCP server `{alias}` for agent `{}`",
                                call.tool, agent.id
                            ),
                            format!("{base}.allowed_tools"),
                        )
                    })?;
                    Ok((
                        t.approval.as_ref().or(s.approval.as_ref()),
                        format!("{base}.allowed_tools[{}]", t.name),
                    ))
                }
            }
        }
    }
}
