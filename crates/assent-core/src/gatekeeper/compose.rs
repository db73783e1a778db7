//! The composed verdict: [`Composed`], the one value the gatekeeper folds every source into —
//! the agent's declaration (added by `declared` and `delegation`), then each covering
//! governance rule ([`Composed::add_rule`]: union, tighten-only; its thresholds and scope via
//! [`Composed::add_triggers`]) — and [`Composed::finish`], which applies the risk tier and
//! renders the message into a [`Verdict`], its default at the timeout settled by
//! `timeout_default`. It does not find the covering rules or the agent's declaration.

use super::kit::{Denial, reason, requires, template_of, unevaluable};
use super::timeout_default::{configured, settle_default};
use crate::approval::DefaultDecision;
use crate::canonical::ToolCall;
use crate::condition::Outcome;
use crate::policy::{Agent, ApprovalSpec, Rule};
use crate::quorum::{Quorum, merge};
use crate::redact::Redactor;
use crate::risk::RiskTier;
use crate::session_risk::{Effects, escalations};
use crate::template::{TemplateContext, default_message, render, render_shared};
use crate::triggers::{
    Escalation, Observations, PriorCall, domain_violations, path_violations, threshold_triggers,
};
use crate::verdict::{ApprovalTerms, Reason, Verdict, VerdictKind};

/// The trigger of a call held because a covering rule's `deny` condition cannot be evaluated
/// against it (an argument missing, of another type, a pattern that did not compile): no grant
/// covers it, its default at the timeout is reject and it is not asked in the client — a
/// person decides whether the deny applies.
pub const TRIGGER_DENY_UNEVALUABLE: &str = "deny_unevaluable";

/// The trigger of a call whose tool name is not covered by a governance rule that covers the
/// name folded (`Registry::lookalike_rules`: `Delete_Repo`, a full-width `ｄelete_repo`, or
/// `delete_repo ` beside a rule for `delete_repo`): a dispatcher reading names loosely may run
/// the rule's tool, so a person decides — never allowed, no grant, default reject.
pub const TRIGGER_TOOL_LOOKALIKE: &str = "tool_lookalike";

/// The reason a rule with `irreversible: true` gives (seed 001; AAEP §6.4.1).
const IRREVERSIBLE_NOTE: &str = "irreversible: an action that cannot be undone always needs explicit human consent (seed 001, AAEP §6.4.1), so confirmation is required and the default on timeout is reject";

/// The note of a rule whose policy applies only because the agent's own file references it,
/// beside a policy that selects the agent: it tightens only.
const BY_REFERENCE_NOTE: &str = "applies by the agent's own reference beside a policy that selects it, so it only tightens: its timeout, approvers, escalation, approving default, in-client approval and `false` duties or passkey do not apply";

/// Every source consulted so far, composed: the reasons in order, whether any requires a
/// human, and the keys the covering rules merge (highest tier, shortest timeout, union of
/// approvers, …). `'a` is the registry's lifetime (templates and notes are borrowed from it).
#[derive(Default)]
pub(super) struct Composed<'a> {
    /// Every source's reason, in order: the declaration, then governance rules.
    pub reasons: Vec<Reason>,
    required: bool,
    /// The template of the first source that required approval.
    template: Option<&'a str>,
    /// The agent's own template for the call, used when no requiring source has one.
    pub agent_template: Option<&'a str>,
    /// A delegation's context (`parent.input`, `skill_args`, …): what its conditions and
    /// templates see.
    pub extra: Option<serde_json::Value>,
    /// A delegation's target alias (`{{agent_alias}}` in its templates).
    pub sub_alias: Option<String>,
    tier: Option<RiskTier>,
    irreversible: bool,
    timeout: Option<u64>,
    approve_default: Option<bool>,
    approvers: Vec<String>,
    /// Roles of the covering rules without a quorum, and the quorums of the others (each
    /// group allowing only its own rule's escalation roles).
    plain_approvers: Vec<String>,
    quorums: Vec<Quorum>,
    /// The roles the escalations of the rules without a quorum name: those escalation may
    /// add to the group their roles form.
    plain_escalation: Vec<String>,
    /// The names of the triggers that fired, once each, in order (an unevaluable `deny`, a
    /// skill left unnamed, thresholds and scope, session risk): a call held by any is held so
    /// a person decides ([`settle_default`]: its default on timeout is reject).
    pub triggers: Vec<String>,
    alternatives: Vec<String>,
    escalation: Option<Escalation>,
    output_bytes: Option<u64>,
    in_client: bool,
    /// `separation_of_duties` as the covering rules say it: any `true`, any `false`.
    duties_on: bool,
    duties_off: bool,
    /// `require_passkey` as the covering rules say it: any `true`, any `false`.
    passkey_on: bool,
    passkey_off: bool,
    side_effects: Vec<&'a str>,
    rollback: Vec<&'a str>,
    dry_run_tool: Option<String>,
    redact: Vec<String>,
    /// What the call does, as the covering rules say ([`crate::session_risk::Effects`]).
    effects: Effects,
    /// A covering rule's `deny` could not be evaluated ([`TRIGGER_DENY_UNEVALUABLE`]).
    deny_unknown: bool,
}

/// Appends the items of `items` not yet in `list`, in order.
fn push_new(list: &mut Vec<String>, items: &[String]) {
    for i in items {
        if !list.contains(i) {
            list.push(i.clone());
        }
    }
}

impl<'a> Composed<'a> {
    /// Records that a source requires a human; its `template` is used unless an earlier
    /// requiring source gave one.
    pub fn require(&mut self, template: Option<&'a str>) {
        self.required = true;
        self.template = self.template.or(template);
    }

    /// Adds one covering governance rule of policy file `file`, with its notes as one reason;
    /// `Err` when its `deny` matches. `loosens: false` (a policy the agent's own file pulls in
    /// by reference while a policy its selector picks covers the call too, see
    /// `gatekeeper::compose`) keeps only what tightens: its approval, tier, irreversibility,
    /// deny, triggers, `separation_of_duties: true`, `require_passkey: true`, a `reject`
    /// default and the notes; not its timeout, an `approve` default, approvers, quorum,
    /// escalation, in-client approval, or a `false` duties or passkey.
    pub fn add_rule(
        &mut self,
        file: &str,
        r: &'a Rule,
        ctx: &TemplateContext<'_>,
        obs: &Observations<'_>,
        loosens: bool,
    ) -> Result<(), Denial> {
        let args = ctx.tool_args;
        let mut notes = Vec::new();
        if let Some(note) = denied(file, r, ctx)? {
            // Found by review: held with no trigger, a call the deny may have stopped was let
            // through by a grant, by an approving default at the timeout, or by the agent's
            // own user in the client. Only an operator settles it.
            self.require(None);
            self.deny_unknown = true;
            if !self.triggers.iter().any(|t| t == TRIGGER_DENY_UNEVALUABLE) {
                self.triggers.push(TRIGGER_DENY_UNEVALUABLE.to_string());
            }
            notes.push(note);
        }
        if let Some(spec) = &r.approval {
            match requires(spec, args) {
                Some(why) => {
                    self.require(template_of(spec));
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
            self.require(None);
            notes.push(IRREVERSIBLE_NOTE.into());
        }
        if let Some(d) = r.default_decision {
            let a = d == DefaultDecision::Approve;
            // Found by review: an approving default of a policy the agent pulled in by
            // reference approved, at a 5 s timeout, calls its governing policy left to reject.
            if loosens || !a {
                self.approve_default = Some(self.approve_default.unwrap_or(true) && a);
            }
        }
        if loosens {
            self.add_deciders(r);
        } else {
            notes.push(BY_REFERENCE_NOTE.into());
        }
        self.add_triggers(r, args, obs, &mut notes);
        self.merge(r, loosens);
        if notes.is_empty() {
            notes.push("rule covers this tool".into());
        }
        self.reasons.push(reason(file, &r.label, notes.join("; ")));
        Ok(())
    }

    /// Holds the call of `tool` because rule `r` of policy file `file` covers its folded name
    /// (`Registry::lookalike_rules`) but not `tool` itself
    /// ([`TRIGGER_TOOL_LOOKALIKE`]); the reason names the rule's tool and what the rule does.
    pub fn add_lookalike(&mut self, file: &str, r: &Rule, tool: &str) {
        self.require(None);
        if !self.triggers.iter().any(|t| t == TRIGGER_TOOL_LOOKALIKE) {
            self.triggers.push(TRIGGER_TOOL_LOOKALIKE.to_string());
        }
        let does = if r.deny.is_some() {
            "denies"
        } else if r.approval.is_some() || r.irreversible {
            "holds"
        } else {
            "governs"
        };
        let text = format!(
            "tool `{}` looks like `{}`, which this rule {does}, but is not that name (it differs in case, width, invisible characters or surrounding spaces): a dispatcher reading names loosely may run it, so a person decides ({TRIGGER_TOOL_LOOKALIKE})",
            crate::template::visible(tool),
            r.tool.as_str()
        );
        self.reasons.push(reason(file, &r.label, text));
    }

    /// Who decides, and when, as rule `r` says: its timeout (the shortest wins), its approver
    /// roles (a union: one more role that may decide), its quorum and its escalation roles.
    fn add_deciders(&mut self, r: &'a Rule) {
        if let Some(t) = r.timeout_seconds {
            self.timeout = Some(self.timeout.map_or(t, |x| x.min(t)));
        }
        push_new(&mut self.approvers, &r.approvers);
        // Found by review: one rule's escalation widened every rule's quorum groups; a group
        // now allows only the roles its own rule escalates to.
        let escalates = r.escalation.as_ref().map(|e| e.roles()).unwrap_or_default();
        match &r.quorum {
            Some(q) => {
                let mut q = q.clone();
                for g in &mut q.groups {
                    g.escalation = Some(escalates.clone());
                }
                self.quorums.push(q);
            }
            None => {
                push_new(&mut self.plain_approvers, &r.approvers);
                push_new(&mut self.plain_escalation, &escalates);
            }
        }
        if let Some(e) = &r.escalation {
            match &mut self.escalation {
                Some(m) => m.merge(e),
                None => self.escalation = Some(e.clone()),
            }
        }
    }

    /// Rate, cost and scope triggers of rule `r`: each that fires requires confirmation, is
    /// named in `triggers` once and explains itself in `notes`.
    pub fn add_triggers(
        &mut self,
        r: &Rule,
        args: &serde_json::Value,
        obs: &Observations<'_>,
        notes: &mut Vec<String>,
    ) {
        let covers = |c: &PriorCall| r.covers(&c.tool, c.server.as_deref());
        let mut fired = threshold_triggers(&r.thresholds, covers, args, obs);
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

    /// The risk that follows the session (issue 16 §3): each escalation of `call` in
    /// `obs.session` ([`escalations`]) raises the tier (never lowers it), requires a person,
    /// names its trigger once and explains itself in a reason of its own. Called after every
    /// covering rule was added (a denial never gets here).
    pub fn add_session(&mut self, call: &ToolCall, obs: &Observations<'_>) {
        for e in escalations(
            obs.session,
            self.effects,
            &call.tool,
            call.server.as_deref(),
        ) {
            self.tier = Some(self.tier.map_or(e.tier, |t| t.max(e.tier)));
            self.required = true;
            if !self.triggers.iter().any(|t| t == e.trigger) {
                self.triggers.push(e.trigger.to_string());
            }
            self.reasons.push(reason("", "session risk", e.why));
        }
    }

    /// The keys that only accumulate: in-client approval, side effects, rollback, dry run,
    /// redaction, output size, alternatives. Unless `loosens`, not the keys that only
    /// loosen: `in_client_approval: true`, `separation_of_duties: false`,
    /// `require_passkey: false`.
    fn merge(&mut self, r: &'a Rule, loosens: bool) {
        self.effects = self.effects.union(r.effects);
        self.duties_on |= r.separation_of_duties == Some(true);
        self.passkey_on |= r.require_passkey == Some(true);
        if loosens {
            self.in_client |= r.in_client_approval;
            self.duties_off |= r.separation_of_duties == Some(false);
            self.passkey_off |= r.require_passkey == Some(false);
        }
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
    }

    /// The last step: the risk tier (R3/R4 always need confirmation, seed 002), the default
    /// decision, the message, and the verdict.
    pub fn finish(mut self, agent: &Agent, ctx: TemplateContext<'_>) -> Verdict {
        let risk_tier = self.tier.unwrap_or(RiskTier::R2);
        if risk_tier >= RiskTier::R3 {
            if !self.required {
                self.reasons.push(reason(
                    "",
                    "risk tier",
                    format!(
                        "risk tier {} requires confirmation (seed 002)",
                        risk_tier.as_str()
                    ),
                ));
            }
            self.required = true;
        }
        let required = self.required;
        let escalates = self.escalation.as_ref().map(|e| e.roles());
        let quorum = merge(
            &self.quorums,
            &self.plain_approvers,
            Some(&self.plain_escalation),
        )
        .map(|q| q.scoped(escalates.as_deref().unwrap_or_default()));
        // Found by review: a call held by a trigger (session risk, a threshold, scope) is held
        // so a person decides; asked in the client, a REST agent approved its own call.
        let in_client_ok = self.in_client
            && !self.deny_unknown
            && self.triggers.is_empty()
            && required
            && risk_tier < RiskTier::R3
            && self.approvers.is_empty()
            && quorum.is_none();
        let require_passkey =
            required && (self.passkey_on || (risk_tier == RiskTier::R4 && !self.passkey_off));
        let duties = self.duties_on || (risk_tier == RiskTier::R4 && !self.duties_off);
        let configured = configured(self.approve_default, self.deny_unknown);
        let kind = if required {
            VerdictKind::Confirm
        } else {
            VerdictKind::Allow
        };
        let (mut message, mut side_effects, mut rollback) = (String::new(), Vec::new(), Vec::new());
        if required {
            // Under `redact` the texts are rendered from the masked arguments: they leave the
            // gateway (webhooks, Slack, AAEP, exports), and a rendered value may be cut or
            // escaped, so masking the text afterwards would miss it (issue 5).
            let masked = masked_context(ctx.tool_args, self.extra.as_ref(), &self.redact);
            let (tool_args, extra, tool_args_json) = match &masked {
                Some((a, x)) => (a, x.as_ref(), None),
                None => (ctx.tool_args, self.extra.as_ref(), ctx.tool_args_json),
            };
            // `{{tool_args}}` canonicalised once for every text of the verdict, not once per
            // rule (found by review: a replay, which passes none, canonicalised the arguments
            // again for each of thousands of rules' notes).
            let args_text = match tool_args_json {
                Some(_) => None,
                None => crate::canonical::canonical_value(tool_args).ok(),
            };
            let ctx = TemplateContext {
                agent_alias: self.sub_alias.as_deref().unwrap_or(ctx.agent_alias),
                tool_args,
                tool_args_json: tool_args_json.or(args_text.as_deref()),
                extra,
                ..ctx
            };
            let mut left = crate::template::MAX_RENDERED_BYTES;
            side_effects = render_shared(&self.side_effects, &ctx, &mut left);
            rollback = render_shared(&self.rollback, &ctx, &mut left);
            message = self.message(agent, &ctx);
        }
        let mut terms = ApprovalTerms {
            message,
            reasons: self.reasons,
            risk_tier,
            irreversible: self.irreversible,
            default_decision: configured,
            approvers: self.approvers,
            quorum,
            triggers: self.triggers,
            suggested_alternatives: self.alternatives,
            escalation: self.escalation,
            output_bytes: self.output_bytes,
            // The MCP client cannot carry a passkey assertion; and its user is the person
            // the call acts for, whom separation of duties keeps from approving it (found
            // by review: one rule's `in_client_approval` cancelled another's duties).
            in_client_approval: in_client_ok && !require_passkey && !duties,
            separation_of_duties: duties,
            require_passkey,
            side_effects,
            rollback,
            dry_run_tool: self.dry_run_tool,
            redact: self.redact,
        };
        settle_default(&mut terms, configured, required);
        Verdict {
            kind,
            timeout_seconds: self.timeout,
            terms,
        }
    }

    /// The approval message: the template of the source that required approval, else the
    /// agent's own template, else a default that names the tool (or the delegation) and its
    /// arguments.
    fn message(&self, agent: &Agent, ctx: &TemplateContext<'_>) -> String {
        match (self.template.or(self.agent_template), &self.sub_alias) {
            (Some(t), _) => render(t, ctx),
            (None, Some(sub)) => {
                let args = ctx.tool_args;
                // Shown on every surface: an agent's invisible or control characters (here
                // also in `skill_id`, a plain string) as escapes.
                let canonical =
                    crate::canonical::canonical_value(&args["input"]).unwrap_or_default();
                let input = crate::template::visible(&canonical);
                let skill = args.get("skill_id").and_then(|v| v.as_str());
                match skill.map(crate::template::visible) {
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
}

/// The arguments and the delegation context (`extra`) with the `redact` paths masked, the
/// values the texts of a verdict are rendered from; `None` when nothing is redacted. A
/// delegation's context repeats its `input` (`parent.input`) and `skill_args`: those are
/// taken from the masked arguments.
fn masked_context(
    args: &serde_json::Value,
    extra: Option<&serde_json::Value>,
    redact: &[String],
) -> Option<(serde_json::Value, Option<serde_json::Value>)> {
    if redact.is_empty() {
        return None;
    }
    let masked = Redactor::new(args, redact).arguments(args);
    let extra = extra.map(|x| {
        let mut x = x.clone();
        if let Some(i) = masked.get("input") {
            x["parent"]["input"] = i.clone();
        }
        if let Some(k) = masked.get("skill_args") {
            x["skill_args"] = k.clone();
        }
        x
    });
    Some((masked, extra))
}

/// The `deny` of rule `r` in policy file `file`: `Err` when it matches (the reason names the
/// clause; the message is the rule's rendered template when it has one), `Ok(Some(note))` when
/// its condition cannot be evaluated (approval is required instead), `Ok(None)` otherwise.
fn denied(file: &str, r: &Rule, ctx: &TemplateContext<'_>) -> Result<Option<String>, Denial> {
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
    let (message, why) = match message_template.as_deref().map(|t| render(t, ctx)) {
        Some(m) => (m.clone(), format!("{why}: {m}")),
        None => (why.clone(), why),
    };
    Err(Denial {
        file: file.to_string(),
        rule: r.label.clone(),
        message,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_kit::{AGENT, governing_bot};
    use crate::policy::Registry;
    use crate::triggers::{Escalation, EscalationStep};
    use crate::{RiskTier, ToolCall, VerdictKind, evaluate};
    use serde_json::json;

    fn step(roles: &[&str]) -> EscalationStep {
        EscalationStep {
            after_seconds: None,
            approvers: roles.iter().map(|r| r.to_string()).collect(),
        }
    }

    /// Two covering rules fold tighten-only: the highest tier, the shortest wait, the union of
    /// approvers and escalation roles with the shortest extension, the smallest output limit,
    /// `approve` at expiry only when every rule that names a default says so, and one reason a
    /// rule, in policy order, before the tier's.
    #[test]
    fn covering_rules_fold_into_one_tighter_verdict() {
        let rules = "- tool: pay
  risk_tier: R1
  timeout_seconds: 60
  approvers: [ops]
  default_decision: approve
  on_timeout: {escalate_to: [lead], after_seconds: 100}
  thresholds: {output_bytes: 500}
  suggested_alternatives: [quote]
- tool: pay
  risk_tier: R3
  timeout_seconds: 30
  approvers: [ops, cfo]
  on_timeout: {escalate_to: [cfo], after_seconds: 50}
  thresholds: {output_bytes: 900}
  suggested_alternatives: [quote, wait]";
        let reg = governing_bot(AGENT, &[("a.fold-v1", rules)]);
        let call = ToolCall::new("pay", None, json!({})).unwrap();
        let v = evaluate(&reg, "bot", &call);
        assert_eq!(v.kind, VerdictKind::Confirm);
        assert_eq!(v.terms.risk_tier, RiskTier::R3);
        assert_eq!(v.timeout_seconds, Some(30));
        assert_eq!(v.terms.approvers, ["ops", "cfo"]);
        assert_eq!(
            v.terms.escalation,
            Some(Escalation {
                steps: vec![step(&["lead"]), step(&["cfo"])],
                last_wait_seconds: Some(50)
            })
        );
        assert_eq!(v.terms.output_bytes, Some(500));
        assert_eq!(v.terms.suggested_alternatives, ["quote", "wait"]);
        assert_eq!(v.terms.default_decision.as_str(), "approve");
        let rules: Vec<&str> = v.terms.reasons.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(rules.len(), 4, "{rules:?}");
        assert!(rules[1].starts_with("a.fold-v1 rules[0]"), "{rules:?}");
        assert!(rules[2].starts_with("a.fold-v1 rules[1]"), "{rules:?}");
        assert_eq!(rules[3], "risk tier");
        assert!(!v.terms.in_client_approval);
    }

    /// The attack: `bot`'s own file references an opt-in policy (no selector) that turns
    /// duties and passkey off, approves at a 5 s timeout, lets the client approve and names
    /// an approver role of its own. Where the policy that governs `bot` covers the call, it
    /// tightens only: R4's duties and passkey stay, the default is reject, the timeout and
    /// approvers are the governing policy's. A call only the opt-in policy covers still gets
    /// its keys.
    #[test]
    fn a_referenced_opt_in_policy_never_loosens_a_governing_policy() {
        let gov = "policies:
  - id: acme.finance.payments-v1
    selector: {agents: [bot]}
    rules:
      - {tool: pay, risk_tier: R4, approvers: [cfo], timeout_seconds: 600}
  - id: acme.sandbox.relaxed-v1
    rules:
      - tool: \"*\"
        approval: true
        default_decision: approve
        timeout_seconds: 5
        separation_of_duties: false
        require_passkey: false
        in_client_approval: true
        approvers: [intern]
        on_timeout: {escalate_to: [intern], after_seconds: 1}
";
        let agent = "metadata: {id: bot}\nconstraints:\n  governance_policies:\n    - policy_ref: acme.sandbox.relaxed-v1
action_space:\n  local_tools:\n    - alias: pay\n    - alias: note\n";
        let reg = Registry::of(agent, gov);
        let v = evaluate(&reg, "bot", &ToolCall::new("pay", None, json!({})).unwrap());
        assert_eq!(v.kind, VerdictKind::Confirm);
        assert_eq!(v.terms.risk_tier, RiskTier::R4);
        assert!(v.terms.separation_of_duties && v.terms.require_passkey);
        assert_eq!(v.terms.default_decision.as_str(), "reject");
        assert_eq!(v.timeout_seconds, Some(600));
        assert_eq!(v.terms.approvers, ["cfo"]);
        assert_eq!(v.terms.escalation, None);
        assert!(!v.terms.in_client_approval);
        // Its reason is still there, and its `approval: true` still holds a call.
        assert_eq!(v.terms.reasons.len(), 3, "{:?}", v.terms.reasons);
        assert!(v.terms.reasons[2].text.contains("it only tightens"));
        let v = evaluate(
            &reg,
            "bot",
            &ToolCall::new("note", None, json!({})).unwrap(),
        );
        assert_eq!(v.kind, VerdictKind::Confirm);
        assert_eq!(v.terms.default_decision.as_str(), "approve");
        assert_eq!(v.timeout_seconds, Some(5));
        assert_eq!(v.terms.approvers, ["intern"]);
    }

    /// Under `redact`, the message, side effects and rollback notes are rendered from the
    /// masked arguments — a template's, the default message's `{{tool_args}}` and a
    /// delegation's `parent.input` alike — so no escape or cut of a value can carry it out;
    /// the reasons still quote the real arguments (they are masked where they leave).
    #[test]
    fn redacted_values_are_masked_before_the_texts_are_rendered() {
        let gov = r#"policies:
  - id: a.redact-v1
    selector: {agents: [bot]}
    rules:
      - tool: pay
        redact: [card]
        side_effects: "Charges {{tool_args.card}} {{tool_args.amount}}"
        rollback: "Refund {{tool_args}}"
        approval:
          message_template: "Pay {{tool_args.amount}} with {{tool_args.card}}"
      - tool: ship
        redact: [to]
        approval: true
      - tool: delegate.exec
        redact: [input.action]
"#;
        let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n    - alias: ship
  local_agents:
    - alias: exec
      source: exec.agf.yaml
      approval: {message_template: \"Run {{parent.input.action}} in {{parent.input.env}}\"}\n";
        let reg = Registry::of(agent, gov);
        let card = "4111 1111\n1111\t1111";
        let call = ToolCall::new("pay", None, json!({"card": card, "amount": 5})).unwrap();
        let v = evaluate(&reg, "bot", &call);
        assert_eq!(v.kind, VerdictKind::Confirm);
        assert_eq!(v.terms.message, "Pay 5 with [redacted]");
        assert_eq!(v.terms.side_effects, ["Charges [redacted] 5"]);
        assert_eq!(
            v.terms.rollback,
            [r#"Refund {"amount":5,"card":"[redacted]"}"#]
        );
        let call = ToolCall::new("ship", None, json!({"to": "Main St\n12", "n": 1})).unwrap();
        let v = evaluate(&reg, "bot", &call);
        assert_eq!(
            v.terms.message,
            r#"Agent bot wants to call ship with {"n":1,"to":"[redacted]"}"#
        );
        let input = json!({"action": "rm -rf\n/srv", "env": "prod"});
        let call = crate::gatekeeper::delegation_call("exec", input, None, None).unwrap();
        let v = crate::gatekeeper::evaluate_delegation(
            &reg,
            "bot",
            &call,
            None,
            &crate::triggers::Observations::none(0),
        );
        assert_eq!(v.kind, VerdictKind::Confirm, "{:?}", v.terms.reasons);
        assert_eq!(v.terms.message, "Run [redacted] in prod");
    }
}
