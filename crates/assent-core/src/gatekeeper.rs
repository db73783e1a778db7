//! The gatekeeper: one pure function from (registry, agent, call) to a [`Verdict`] with reasons
//! (MPLP Gatekeeper duty; seed 002 "When confirmations trigger"; seed 004 union semantics).

use crate::approval::{DefaultDecision, effective_default};
use crate::canonical::ToolCall;
use crate::condition::Outcome;
use crate::policy::{Agent, ApprovalSpec, Registry, RiskTier, Rule};
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

/// What the agent's own file says about the call (step 1 of [`evaluate_inner`]).
struct Declared<'a> {
    reasons: Vec<Reason>,
    required: bool,
    /// The template of the source that required approval.
    template: Option<&'a str>,
    /// The agent's own template for the call, used when no requiring source has one.
    agent_template: Option<&'a str>,
    /// A delegation's context (`parent.input`, `skill_args`, …): what its conditions and
    /// templates see.
    extra: Option<serde_json::Value>,
    /// A delegation's target alias (`{{agent_alias}}` in its templates).
    sub_alias: Option<String>,
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
    let mut d = match declared(agent, call, mode) {
        Ok(d) => d,
        Err((text, rule)) => return deny(text, &agent.file, &rule),
    };
    let ctx = TemplateContext {
        tool_name: &call.tool,
        tool_args: &call.arguments,
        agent_alias: &agent.name,
        agent_id: &agent.id,
        mcp_server_alias: call.server.as_deref(),
        tool_args_json: canonical_arguments,
        extra: None,
    };
    let mut g = Composed {
        required: d.required,
        template: d.template,
        ..Composed::default()
    };
    for p in reg.policies_for(agent) {
        for r in p
            .rules
            .iter()
            .filter(|r| r.covers(&call.tool, call.server.as_deref()))
        {
            match g.apply(r, &ctx, obs) {
                Ok(notes) => d.reasons.push(reason(&p.file, &r.label, notes.join("; "))),
                Err((message, why)) => return deny_because(message, why, &p.file, &r.label),
            }
        }
    }
    finish(d, g, agent, ctx)
}

/// Step 1: the agent's declaration of the call, or `Err((reason, rule))` to deny it when the
/// agent declares none. A Confirm target always needs a human and consults no declaration.
fn declared<'a>(
    agent: &'a Agent,
    call: &ToolCall,
    mode: Mode,
) -> Result<Declared<'a>, (String, String)> {
    let mut d = Declared {
        reasons: Vec::new(),
        required: false,
        template: None,
        agent_template: None,
        extra: None,
        sub_alias: None,
    };
    let (spec, rule) = match mode {
        Mode::Delegation => match delegated(agent, call, &mut d)? {
            Some((s, rule)) => (Some(s), rule),
            None => (None, String::new()),
        },
        Mode::Target => {
            d.required = true;
            d.reasons.push(reason(
                "",
                "mplp confirm",
                format!(
                    "a {} submitted for approval needs a human decision (MPLP Confirm)",
                    call.tool.strip_prefix("mplp.").unwrap_or(&call.tool)
                ),
            ));
            (None, String::new())
        }
        Mode::Tool => declaration(agent, call)?,
    };
    d.agent_template = spec.and_then(template_of);
    let cond_args = d.extra.as_ref().unwrap_or(&call.arguments);
    let text = match spec.map(|s| (s, requires(s, cond_args))) {
        Some((s, Some(why))) => {
            d.required = true;
            d.template = d.template.or(template_of(s));
            why
        }
        Some((ApprovalSpec::Exempt, None)) => "declared with approval: false".into(),
        Some((_, None)) => "approval condition did not match".into(),
        None if mode != Mode::Tool => return Ok(d),
        None => "declared without approval".into(),
    };
    d.reasons.push(reason(&agent.file, &rule, text));
    Ok(d)
}

/// Step 1 for a delegation (seed 004 "Approval on Agent Delegation"): finds the target and
/// the skill, evaluates the skill's approval into `d`, sets `d.extra` and `d.sub_alias`, and
/// returns the reference's `approval` with its label. `Err((reason, rule))` to deny an
/// undeclared target, a skill on a local agent, or a skill outside `allowed_skills`.
fn delegated<'a>(
    agent: &'a Agent,
    call: &ToolCall,
    d: &mut Declared<'a>,
) -> Result<Option<(&'a ApprovalSpec, String)>, (String, String)> {
    let args = &call.arguments;
    let alias = call.tool.strip_prefix("delegate.").unwrap_or(&call.tool);
    let Some(target) = agent.delegates.iter().find(|t| t.alias == alias) else {
        return Err((
            format!(
                "`{alias}` is not declared in action_space.local_agents or remote_agents of agent `{}`",
                agent.id
            ),
            "action_space".into(),
        ));
    };
    let list = if target.remote {
        "remote_agents"
    } else {
        "local_agents"
    };
    let rule = format!("action_space.{list}[{alias}]");
    let skill_args = args
        .get("skill_args")
        .cloned()
        .unwrap_or(serde_json::json!({}));
    let input = args
        .get("input")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let mut x = serde_json::json!({"parent": {"input": input}, "skill_args": skill_args});
    if target.remote {
        x["remote_agent_alias"] = alias.into();
    }
    if let Some(sid) = args.get("skill_id").and_then(|v| v.as_str()) {
        if !target.remote {
            return Err((
                format!("`{alias}` is a local agent; skill_id applies to remote agents only"),
                rule,
            ));
        }
        x["skill_id"] = sid.into();
        if let Some(skills) = &target.skills {
            let Some(k) = skills.iter().find(|k| k.id == sid) else {
                return Err((
                    format!("skill `{sid}` is not in allowed_skills of remote agent `{alias}`"),
                    rule,
                ));
            };
            if let Some(spec) = &k.approval {
                let text = match requires(spec, &x["skill_args"]) {
                    Some(why) => {
                        d.required = true;
                        d.template = template_of(spec);
                        why
                    }
                    None => "skill approval condition did not match".into(),
                };
                let label = format!("{rule}.allowed_skills[{sid}]");
                d.reasons.push(reason(&agent.file, label, text));
            }
        }
    }
    d.extra = Some(x);
    d.sub_alias = Some(alias.to_string());
    if target.approval.is_none() {
        d.reasons
            .push(reason(&agent.file, &rule, "declared without approval"));
    }
    Ok(target.approval.as_ref().map(|s| (s, rule)))
}

/// Step 2: the covering governance rules composed (union, tighten-only).
#[derive(Default)]
struct Composed<'a> {
    required: bool,
    template: Option<&'a str>,
    tier: Option<RiskTier>,
    irreversible: bool,
    timeout: Option<u64>,
    approve_default: Option<bool>,
    approvers: Vec<String>,
    triggers: Vec<String>,
    alternatives: Vec<String>,
    escalation: Option<Escalation>,
    output_bytes: Option<u64>,
    in_client: bool,
    side_effects: Vec<&'a str>,
    rollback: Vec<&'a str>,
    dry_run_tool: Option<String>,
    redact: Vec<String>,
}

fn push_new(list: &mut Vec<String>, items: &[String]) {
    for i in items {
        if !list.contains(i) {
            list.push(i.clone());
        }
    }
}

impl<'a> Composed<'a> {
    /// Adds one covering rule; its notes for the reason, or `Err((message, reason))` when its
    /// `deny` matches.
    fn apply(
        &mut self,
        r: &'a Rule,
        ctx: &TemplateContext<'_>,
        obs: &Observations<'_>,
    ) -> Result<Vec<String>, (String, String)> {
        let args = ctx.tool_args;
        let mut notes = Vec::new();
        if let Some(note) = denied(r, ctx)? {
            self.required = true;
            notes.push(note);
        }
        if let Some(spec) = &r.approval {
            match requires(spec, args) {
                Some(why) => {
                    self.required = true;
                    self.template = self.template.or(template_of(spec));
                    notes.push(why);
                }
                None => notes.push("approval not required by this rule".into()),
            }
        }
        if let Some(t) = r.risk_tier {
            self.tier = Some(self.tier.map_or(t, |x| x.max(t)));
            notes.push(format!("risk tier {}", t.as_str()));
        }
        if r.irreversible {
            // Seed 001, AAEP §6.4.1: no irreversible action without explicit human consent,
            // whatever the tier or the other sources say; the default at expiry is reject.
            self.irreversible = true;
            self.required = true;
            notes.push(IRREVERSIBLE_NOTE.into());
        }
        if let Some(t) = r.timeout_seconds {
            self.timeout = Some(self.timeout.map_or(t, |x| x.min(t)));
        }
        if let Some(d) = r.default_decision {
            let a = d == DefaultDecision::Approve;
            self.approve_default = Some(self.approve_default.unwrap_or(true) && a);
        }
        push_new(&mut self.approvers, &r.approvers);
        self.fire_triggers(r, args, obs, &mut notes);
        self.merge(r);
        if notes.is_empty() {
            notes.push("rule covers this tool".into());
        }
        Ok(notes)
    }

    /// Rate, cost and scope triggers: each that fires requires confirmation and is named.
    fn fire_triggers(
        &mut self,
        r: &Rule,
        args: &serde_json::Value,
        obs: &Observations<'_>,
        notes: &mut Vec<String>,
    ) {
        let covered = || {
            obs.prior_calls
                .iter()
                .filter(|c| r.covers(&c.tool, c.server.as_deref()))
        };
        let mut fired = Vec::new();
        if let Some(l) = &r.thresholds.rate
            && let Some(why) = rate_exceeded(l, covered(), obs.now_ms)
        {
            fired.push(("rate", why));
        }
        if let Some(l) = &r.thresholds.cost
            && let Some(why) = cost_exceeded(l, covered(), args)
        {
            fired.push(("cost", why));
        }
        if let Some(ps) = &r.scope.paths {
            fired.extend(
                path_violations(ps, args, obs)
                    .into_iter()
                    .map(|w| ("paths", w)),
            );
        }
        if let Some(ds) = &r.scope.domains {
            fired.extend(
                domain_violations(ds, args)
                    .into_iter()
                    .map(|w| ("domains", w)),
            );
        }
        for (name, why) in fired {
            self.required = true;
            if !self.triggers.iter().any(|t| t == name) {
                self.triggers.push(name.to_string());
            }
            notes.push(why);
        }
    }

    /// The keys that only accumulate: in-client approval, side effects, rollback, dry run,
    /// redaction, output size, alternatives, escalation.
    fn merge(&mut self, r: &'a Rule) {
        self.in_client |= r.in_client_approval;
        self.side_effects.extend(r.side_effects.as_deref());
        self.rollback.extend(r.rollback.as_deref());
        if self.dry_run_tool.is_none() {
            self.dry_run_tool.clone_from(&r.dry_run_tool);
        }
        push_new(&mut self.redact, &r.redact);
        if let Some(n) = r.thresholds.output_bytes {
            self.output_bytes = Some(self.output_bytes.map_or(n, |x| x.min(n)));
        }
        push_new(&mut self.alternatives, &r.suggested_alternatives);
        if let Some(e) = &r.on_timeout {
            let m = self.escalation.get_or_insert_with(|| Escalation {
                escalate_to: Vec::new(),
                after_seconds: e.after_seconds,
            });
            m.after_seconds = m.after_seconds.min(e.after_seconds);
            push_new(&mut m.escalate_to, &e.escalate_to);
        }
    }
}

/// A rule's `deny`: `Err((message, reason))` when it matches (the reason names the clause),
/// `Ok(Some(note))` when its condition cannot be evaluated (approval is required instead),
/// `Ok(None)` otherwise.
fn denied(r: &Rule, ctx: &TemplateContext<'_>) -> Result<Option<String>, (String, String)> {
    let Some(ApprovalSpec::Required {
        condition,
        message_template,
    }) = &r.deny
    else {
        return Ok(None);
    };
    let matched = match condition.as_ref().map(|c| c.evaluate(ctx.tool_args)) {
        None => "deny: true".to_string(),
        Some(Outcome::Match(groups)) => {
            format!("deny condition matched: {}", groups.join("; or "))
        }
        Some(Outcome::CannotEvaluate(why)) => return Ok(Some(unevaluable("deny", &why))),
        Some(Outcome::NoMatch) => return Ok(None),
    };
    let why = format!("denied by governance rule {} ({matched})", r.label);
    Err(match message_template.as_deref().map(|t| render(t, ctx)) {
        Some(m) => (m.clone(), format!("{why}: {m}")),
        None => (why.clone(), why),
    })
}

/// Step 3: the risk tier (R3/R4 always need confirmation, seed 002), the default decision,
/// the message, and the verdict.
fn finish(
    mut d: Declared<'_>,
    g: Composed<'_>,
    agent: &Agent,
    ctx: TemplateContext<'_>,
) -> Verdict {
    let risk_tier = g.tier.unwrap_or(RiskTier::R2);
    let mut required = g.required;
    if risk_tier >= RiskTier::R3 {
        if !required {
            d.reasons.push(reason(
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
    let in_client_ok =
        g.in_client && required && risk_tier < RiskTier::R3 && g.approvers.is_empty();
    let configured = if g.approve_default == Some(true) {
        DefaultDecision::Approve
    } else {
        DefaultDecision::Reject
    };
    let kind = if required {
        VerdictKind::Confirm
    } else {
        VerdictKind::Allow
    };
    let (mut message, mut side_effects, mut rollback) = (String::new(), Vec::new(), Vec::new());
    if required {
        let ctx = TemplateContext {
            agent_alias: d.sub_alias.as_deref().unwrap_or(ctx.agent_alias),
            extra: d.extra.as_ref(),
            ..ctx
        };
        side_effects = g.side_effects.iter().map(|t| render(t, &ctx)).collect();
        rollback = g.rollback.iter().map(|t| render(t, &ctx)).collect();
        message = message_for(g.template.or(d.agent_template), &d, agent, &ctx);
    }
    Verdict {
        kind,
        reasons: d.reasons,
        risk_tier,
        irreversible: g.irreversible,
        timeout_seconds: g.timeout,
        default_decision: effective_default(g.irreversible, configured),
        approvers: g.approvers,
        message,
        triggers: g.triggers,
        suggested_alternatives: g.alternatives,
        escalation: g.escalation,
        output_bytes: g.output_bytes,
        in_client_approval: in_client_ok,
        side_effects,
        rollback,
        dry_run_tool: g.dry_run_tool,
        redact: g.redact,
    }
}

/// The approval message: the template of the source that required approval, else the agent's
/// own template, else a default that names the tool (or the delegation) and its arguments.
fn message_for(
    template: Option<&str>,
    d: &Declared<'_>,
    agent: &Agent,
    ctx: &TemplateContext<'_>,
) -> String {
    match (template, &d.sub_alias) {
        (Some(t), _) => render(t, ctx),
        (None, Some(sub)) => {
            let args = ctx.tool_args;
            let input = crate::canonical::canonical_value(&args["input"]).unwrap_or_default();
            match args.get("skill_id").and_then(|v| v.as_str()) {
                Some(k) => format!(
                    "Agent {} wants to delegate to {sub} (skill {k}) with {input}",
                    agent.id
                ),
                None => format!("Agent {} wants to delegate to {sub} with {input}", agent.id),
            }
        }
        (None, None) => default_message(ctx),
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
