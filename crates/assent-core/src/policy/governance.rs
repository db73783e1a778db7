//! Governance files (assent's own format, `docs/policy.md`): their serde shapes, which reject
//! unknown keys so a typo never silently weakens a rule, and their validation into [`Policy`]
//! values with [`Rule`]s (policy ids, tiers, default decisions, `deny`, and the bounds of
//! issue 10 §10). It does not resolve which agents a policy applies to (the registry does).

use super::error::{LoadError, yaml_err};
use super::model::{ApprovalSpec, Policy, Rule, Selector};
use crate::approval::{DefaultDecision, QUORUM_DEFAULT_NOTE, check_default_decision};
use crate::json::present;
use crate::risk::RiskTier;
use crate::session_risk::Effects;
use crate::triggers::{Escalation, EscalationStep, ScopeSpec, Thresholds, in_range};
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

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
    #[serde(default, deserialize_with = "present")]
    approval: Option<Value>,
    #[serde(default)]
    risk_tier: Option<String>,
    #[serde(default)]
    irreversible: bool,
    #[serde(default)]
    timeout_seconds: Option<u64>,
    #[serde(default)]
    default_decision: Option<String>,
    /// `None`: no `approvers` key; `Some(Null)`: an explicit `approvers:` or `approvers: null`.
    #[serde(default, deserialize_with = "present")]
    approvers: Option<Value>,
    #[serde(default)]
    thresholds: Thresholds,
    #[serde(default)]
    scope: ScopeSpec,
    #[serde(default)]
    suggested_alternatives: Vec<String>,
    #[serde(default)]
    on_timeout: Option<RawEscalation>,
    #[serde(default)]
    escalation: Option<Vec<RawStep>>,
    #[serde(default, deserialize_with = "present")]
    deny: Option<Value>,
    #[serde(default)]
    in_client_approval: bool,
    #[serde(default)]
    separation_of_duties: Option<bool>,
    #[serde(default)]
    require_passkey: Option<bool>,
    #[serde(default)]
    side_effects: Option<String>,
    #[serde(default)]
    rollback: Option<String>,
    #[serde(default)]
    dry_run_tool: Option<String>,
    #[serde(default)]
    redact: Vec<String>,
    #[serde(default)]
    untrusted_output: bool,
    #[serde(default)]
    private_data: bool,
    #[serde(default)]
    egress: bool,
    #[serde(default)]
    writes: bool,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
}

/// `on_timeout` as written: the [`Escalation`] keys and no others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEscalation {
    escalate_to: Vec<String>,
    after_seconds: u64,
}

/// One step of an `escalation` chain as written: `after` (seconds, or a duration such as
/// `10m`, `1h 30m`) and the roles that join.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    after: RawAfter,
    approvers: Vec<String>,
}

/// `after` of an escalation step: whole seconds, or a duration text (`humantime` syntax).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawAfter {
    Seconds(u64),
    Text(String),
}

/// Most steps an `escalation` chain may have.
pub const MAX_ESCALATION_STEPS: usize = 8;

/// Longest approval wait a rule may set, and longest `on_timeout` extension: 7 days, in
/// seconds (issue 10 §10). Policy `timeout_seconds` and `on_timeout.after_seconds` must lie in
/// `1..=MAX_WAIT_SECONDS`.
pub const MAX_WAIT_SECONDS: u64 = 604_800;

/// Validates one governance rule (issue 10 §10 bounds included): the [`Rule`] and its
/// load-time warnings, or `Err(reason)` for the caller to report with the file and line.
fn build_rule(rr: &RawRule, label: String) -> Result<(Rule, Vec<String>), String> {
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
    // A governance rule's `approval` and `deny` objects take only these keys (found by review:
    // `deny: {args_match: …}`, the condition without its `condition:`, loaded as `deny: true`
    // and denied every call of the tool).
    for (what, v) in [("approval", &rr.approval), ("deny", &rr.deny)] {
        let extra = v.as_ref().and_then(Value::as_object).and_then(|m| {
            m.keys()
                .find(|k| !matches!(k.as_str(), "condition" | "message_template"))
        });
        if let Some(k) = extra {
            return Err(format!(
                "{what}: unknown key `{k}` (expected condition, message_template; a condition goes under `condition:`)"
            ));
        }
    }
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
    let escalation = escalation(rr)?;
    let approvers = match &rr.approvers {
        None => crate::quorum::Approvers::default(),
        Some(Value::Null) => {
            return Err(format!(
                "approvers: null: {}",
                crate::quorum::EMPTY_APPROVERS
            ));
        }
        Some(v) => crate::quorum::parse_approvers(v)?,
    };
    let mut warnings: Vec<String> = check_default_decision(
        rr.irreversible,
        approvers.quorum.as_ref(),
        risk_tier.unwrap_or(RiskTier::R2),
        default_decision.unwrap_or_default(),
    )?
    .into_iter()
    .collect();
    if default_decision == Some(DefaultDecision::Approve) {
        warnings.extend(trigger_default_warning(&rr.thresholds, &rr.scope));
    }
    let rule = Rule {
        label,
        tool,
        server: rr.server.clone(),
        approval,
        risk_tier,
        irreversible: rr.irreversible,
        timeout_seconds: rr.timeout_seconds,
        default_decision,
        approvers: approvers.roles,
        quorum: approvers.quorum,
        thresholds: rr.thresholds.clone(),
        scope: rr.scope.clone(),
        suggested_alternatives: rr.suggested_alternatives.clone(),
        escalation,
        in_client_approval: rr.in_client_approval,
        separation_of_duties: rr.separation_of_duties,
        require_passkey: rr.require_passkey,
        side_effects: rr.side_effects.clone(),
        rollback: rr.rollback.clone(),
        dry_run_tool: rr.dry_run_tool.clone(),
        redact: rr.redact.clone(),
        deny,
        effects: Effects {
            untrusted_output: rr.untrusted_output,
            private_data: rr.private_data,
            egress: rr.egress,
            writes: rr.writes || rr.irreversible,
        },
    };
    Ok((rule, warnings))
}

/// The load-time warning for a rule saying `default_decision: approve` beside `thresholds` or
/// `scope` (`None` when it has neither): a call they hold — a trigger fires, `rate`, `cost`,
/// `output_bytes` (a held result), `paths`, `domains` — is held so a person decides, and its
/// default on timeout is reject whatever the rule says ([`crate::grant::default_on_timeout`]),
/// so the approving default applies only to the calls they let through or to what else holds.
fn trigger_default_warning(t: &Thresholds, scope: &ScopeSpec) -> Option<String> {
    let named: Vec<&str> = [
        ("thresholds.rate", t.rate.is_some()),
        ("thresholds.cost", t.cost.is_some()),
        ("thresholds.output_bytes", t.output_bytes.is_some()),
        ("scope.paths", scope.paths.is_some()),
        ("scope.domains", scope.domains.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    (!named.is_empty()).then(|| {
        format!(
            "`default_decision: approve` does not apply to a call its {} hold: a call held by a trigger is held so a person decides, and its default on timeout is reject",
            named.join(", ")
        )
    })
}

/// Whether `s` is a policy id: `^[a-z0-9][a-z0-9_.-]*$` (e.g. `org.team.name-v1`).
fn policy_id_ok(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_lowercase() || x.is_ascii_digit())
        && c.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || "_.-".contains(x))
}

/// Loads the governance policies of one file into `policies` (keyed by id), in file order.
/// A YAML error, a bad or repeated policy id (the policy is skipped) and each rule that does
/// not validate (the rule is skipped) are pushed to `errs` with the file and line; load-time
/// warnings (e.g. a high-risk rule that defaults to approve) to `warnings` as
/// `FILE:LINE: policy `ID` rules[N]: …`.
pub(super) fn load_governance(
    file: &str,
    text: &str,
    policies: &mut BTreeMap<String, Policy>,
    warnings: &mut Vec<String>,
    errs: &mut Vec<LoadError>,
) {
    let raw: RawPolicyFile = match crate::yaml::from_str(text) {
        Ok(r) => r,
        Err(e) => return errs.push(yaml_err(file, e)),
    };
    let err = |line: Option<u64>, message: String| LoadError {
        file: file.to_string(),
        line,
        message,
    };
    for p in raw.policies {
        let pline = Some(p.referenced.line());
        let p = p.value;
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
        if let Some(prev) = policies.get(&p.id) {
            errs.push(err(
                pline,
                format!("policy id `{}` is already defined in {}", p.id, prev.file),
            ));
            continue;
        }
        // A selector glob that does not compile selected no agent, silently: every rule of
        // the policy, denials included, stopped applying (found by review: `payments-**`, an
        // unclosed `[`). It stops the load like a rule's bad `tool` glob.
        for a in p.selector.agents.iter() {
            if a.is_empty() || glob::Pattern::new(a).is_err() {
                errs.push(err(
                    pline,
                    format!(
                        "policy `{}` selector.agents: `{a}` is not an agent id or glob",
                        p.id
                    ),
                ));
            }
        }
        let mut rules = Vec::new();
        for (i, r) in p.rules.iter().enumerate() {
            let line = r.referenced.line();
            let label = format!("{} rules[{i}] (line {line})", p.id);
            match build_rule(&r.value, label) {
                Ok((rule, warned)) => {
                    for w in warned {
                        warnings.push(format!("{file}:{line}: policy `{}` rules[{i}]: {w}", p.id));
                    }
                    rules.push(rule);
                }
                Err(m) => errs.push(err(
                    Some(line),
                    format!("policy `{}` rules[{i}]: {m}", p.id),
                )),
            }
        }
        let policy = Policy {
            id: p.id,
            file: file.to_string(),
            selector: p.selector,
            rules,
        };
        policies.insert(policy.id.clone(), policy);
    }
}

/// Partners a pair warning lists by name; the rest are counted (`… and N more`).
const PARTNERS_NAMED: usize = 3;

/// The rules of `partners` (each with its file) that meet `rule` ([`may_meet`], itself
/// excluded), named as `LABEL (FILE)`: at most [`PARTNERS_NAMED`] of them, then `and N more`;
/// `None` when there is none. Its cost is one [`may_meet`] a partner.
fn partners_of(rule: &Rule, partners: &[(&Rule, &str)]) -> Option<String> {
    let mut named = Vec::new();
    let mut more = 0usize;
    for (o, file) in partners {
        if std::ptr::eq(rule, *o) || !may_meet(rule, o) {
            continue;
        }
        if named.len() < PARTNERS_NAMED {
            named.push(format!("{} ({file})", o.label));
        } else {
            more += 1;
        }
    }
    if more > 0 {
        named.push(format!("{more} more"));
    }
    match named.len() {
        0 => None,
        1 => named.pop(),
        n => {
            let last = named.pop().unwrap_or_default();
            Some(format!("{} and {last}", named[..n - 1].join(", ")))
        }
    }
}

/// The pair warnings of the loaded governance `policies`, once every file is loaded: one for
/// each rule that needs a quorum and may cover a call with rules that say `default_decision:
/// approve` ([`QUORUM_DEFAULT_NOTE`]), and one for each rule saying `default_decision:
/// approve` that may cover a call with other rules whose `thresholds` or `scope` hold it (a
/// call a trigger holds defaults to reject; the rule's own are warned of by `build_rule`) or
/// that hold at R3/R4 without naming a default (the approving default applies to their calls).
/// Each names the rule and at most [`PARTNERS_NAMED`] partners (`… and N more`), so a file of
/// N quorum rules and N approving ones gives N warnings, not N² (found by review: 3,000 and
/// 3,000 rules made 9 M warnings, gigabytes that killed the gateway on reload). Warnings,
/// not errors: the gatekeeper and the expiry sweep make such a call's timeout reject
/// ([`crate::approval::default_at_timeout`], [`crate::grant::default_on_timeout`]).
/// Approximate: selectors are not compared and two tool globs meet when either matches the
/// other's text, so it may warn for rules that never cover one call and misses globs that
/// meet otherwise (`pay*`, `*ment`).
pub(super) fn pair_warnings(policies: &BTreeMap<String, Policy>) -> Vec<String> {
    let rules = || {
        policies
            .values()
            .flat_map(|p| p.rules.iter().map(move |r| (r, p.file.as_str())))
    };
    let approving: Vec<(&Rule, &str)> = rules()
        .filter(|(r, _)| r.default_decision == Some(DefaultDecision::Approve))
        .collect();
    let holding: Vec<(&Rule, &str)> = rules()
        .filter(|(r, _)| holds(&r.thresholds, &r.scope))
        .collect();
    // Found by review: a broad `default_decision: approve` composes onto a call a specific
    // rule holds at R3/R4 naming no default (read as "reject when omitted"): only rules that
    // name a default vote on it, so the approving one applies at the high tier's timeout.
    let silent_high: Vec<(&Rule, &str)> = rules()
        .filter(|(r, _)| r.default_decision.is_none() && r.risk_tier >= Some(RiskTier::R3))
        .collect();
    let mut out = Vec::new();
    for (a, file) in &approving {
        if let Some(named) = partners_of(a, &silent_high) {
            out.push(format!(
                "{file}: {} says `default_decision: approve` and {named} hold at R3 or above naming no default, and they may cover the same call: only rules that name a default vote on it, so their calls are approved at their timeout; say `default_decision: reject` on them to keep a person's say",
                a.label
            ));
        }
    }
    for (q, file) in rules().filter(|(r, _)| r.quorum.is_some()) {
        if let Some(named) = partners_of(q, &approving) {
            out.push(format!(
                "{file}: {} needs a quorum and {named} say `default_decision: approve`, and they may cover the same call: {QUORUM_DEFAULT_NOTE}",
                q.label
            ));
        }
    }
    for (a, file) in &approving {
        if let Some(named) = partners_of(a, &holding) {
            out.push(format!(
                "{file}: {} says `default_decision: approve` and the thresholds or scope of {named} may hold the same call: a call held by a trigger is held so a person decides, and its default on timeout is reject",
                a.label
            ));
        }
    }
    out
}

/// Whether `thresholds` or `scope` may hold a call ([`trigger_default_warning`]'s keys).
fn holds(t: &Thresholds, scope: &ScopeSpec) -> bool {
    t.rate.is_some()
        || t.cost.is_some()
        || t.output_bytes.is_some()
        || scope.paths.is_some()
        || scope.domains.is_some()
}

/// Whether rules `a` and `b` may cover one call: no server, or the same, and either's tool
/// glob matches the other's text.
fn may_meet(a: &Rule, b: &Rule) -> bool {
    let servers = a.server.is_none() || b.server.is_none() || a.server == b.server;
    servers && (a.tool.matches(b.tool.as_str()) || b.tool.matches(a.tool.as_str()))
}

/// The rule's `escalation` chain or `on_timeout` (not both), checked: at most
/// [`MAX_ESCALATION_STEPS`] steps, each naming a role, `after` 1 s to [`MAX_WAIT_SECONDS`] and
/// strictly increasing; `on_timeout.after_seconds` in the same bounds.
fn escalation(rr: &RawRule) -> Result<Option<Escalation>, String> {
    match (&rr.on_timeout, &rr.escalation) {
        (Some(_), Some(_)) => Err(
            "a rule has either on_timeout or escalation, not both (on_timeout is a one-step escalation)"
                .into(),
        ),
        (Some(e), None) => {
            if e.escalate_to.is_empty() {
                return Err("on_timeout.escalate_to must name at least one role".into());
            }
            let after = e.after_seconds;
            in_range("on_timeout.after_seconds", after, 1, MAX_WAIT_SECONDS, "seconds")?;
            Ok(Some(Escalation {
                steps: vec![EscalationStep {
                    after_seconds: None,
                    approvers: e.escalate_to.clone(),
                }],
                last_wait_seconds: Some(after),
            }))
        }
        (None, Some(chain)) => chain_of(chain).map(Some),
        (None, None) => Ok(None),
    }
}

/// Checks an `escalation` chain (see [`escalation`]).
fn chain_of(chain: &[RawStep]) -> Result<Escalation, String> {
    if chain.is_empty() || chain.len() > MAX_ESCALATION_STEPS {
        return Err(format!(
            "escalation has {} steps (1 to {MAX_ESCALATION_STEPS})",
            chain.len()
        ));
    }
    let mut steps: Vec<EscalationStep> = Vec::with_capacity(chain.len());
    for (i, st) in chain.iter().enumerate() {
        let after = match &st.after {
            RawAfter::Seconds(s) => *s,
            RawAfter::Text(t) => {
                seconds_of(t).map_err(|e| format!("escalation[{i}].after: {e}"))?
            }
        };
        in_range(
            &format!("escalation[{i}].after"),
            after,
            1,
            MAX_WAIT_SECONDS,
            "seconds",
        )?;
        if st.approvers.is_empty() || st.approvers.iter().any(|r| r.trim().is_empty()) {
            return Err(format!(
                "escalation[{i}].approvers must name at least one role"
            ));
        }
        if let Some(prev) = steps.last().and_then(|p| p.after_seconds)
            && after <= prev
        {
            return Err(format!(
                "escalation[{i}].after ({after} s) must come after the step before it ({prev} s)"
            ));
        }
        steps.push(EscalationStep {
            after_seconds: Some(after),
            approvers: st.approvers.clone(),
        });
    }
    Ok(Escalation {
        steps,
        last_wait_seconds: None,
    })
}

/// Whole seconds of a duration text such as `10m`, `90s`, `1h 30m` (`humantime`).
fn seconds_of(text: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration (e.g. 90s, 10m, 1h 30m): {e}"))?;
    if d.subsec_nanos() != 0 {
        return Err(format!("`{text}` is not a whole number of seconds"));
    }
    Ok(d.as_secs())
}

#[cfg(test)]
mod tests {
    use crate::policy::Registry;

    const AGENT: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n";

    /// The trap: a rule says `default_decision: approve` beside `thresholds` or `scope`; an
    /// operator reads it as "approved at the timeout", but every call they hold defaults to
    /// reject. The load warns, naming the rule and what holds; the same default on a rule with
    /// neither, and a rule with them and no approving default, do not warn.
    #[test]
    fn an_approving_default_beside_thresholds_or_scope_is_a_load_warning() {
        let gov = "policies:
  - id: a.lenient-v1
    selector: {agents: [bot]}
    rules:
      - tool: pay
        default_decision: approve
        thresholds: {cost: {argument: amount, max_per_session: 100}, output_bytes: 500}
      - tool: write
        default_decision: approve
        scope: {paths: {arguments: [path], roots: [/srv]}}
      - tool: note
        default_decision: approve
      - tool: read
        default_decision: reject
        scope: {domains: {arguments: [url], allow: [example.com]}}
";
        let reg = Registry::of(AGENT, gov);
        let warned = reg.warnings_with("does not apply to a call its");
        assert_eq!(warned.len(), 2, "{:?}", reg.warnings);
        assert!(
            warned[0].contains("g.yaml:5: policy `a.lenient-v1` rules[0]"),
            "{warned:?}"
        );
        assert!(
            warned[0].contains("thresholds.cost, thresholds.output_bytes hold"),
            "{warned:?}"
        );
        assert!(warned[1].contains("rules[1]") && warned[1].contains("scope.paths hold"));
        assert!(
            warned
                .iter()
                .all(|w| w.contains("default on timeout is reject"))
        );
    }

    /// The trap across rules: rule A says `default_decision: approve` for `pay*`; rule B of
    /// another policy holds `pay` by a cost threshold, so a call B holds defaults to reject
    /// whatever A says. The load warns at A, naming B; a rule whose tools B never covers,
    /// and B itself (no approving default), do not.
    #[test]
    fn an_approving_default_beside_another_rules_thresholds_is_a_load_warning() {
        let gov = "policies:
  - id: a.lenient-v1
    selector: {agents: [bot]}
    rules:
      - {tool: \"pay*\", approval: true, default_decision: approve}
      - {tool: note, approval: true, default_decision: approve}
  - id: b.cost-v1
    selector: {agents: [bot]}
    rules:
      - {tool: pay, thresholds: {cost: {argument: amount, max_per_session: 100}}}
";
        let reg = Registry::of(AGENT, gov);
        let warned = reg.warnings_with("may hold the same call");
        assert_eq!(warned.len(), 1, "{:?}", reg.warnings);
        assert!(
            warned[0].starts_with("g.yaml: a.lenient-v1 rules[0] (line 5) says")
                && warned[0].contains("b.cost-v1 rules[0] (line 10) (g.yaml)")
                && warned[0].contains("default on timeout is reject"),
            "{warned:?}"
        );
    }

    /// The trap (found by review): a baseline `{tool: "*", default_decision: approve}` and a
    /// specific `wire` rule at R3 naming no default: the author reads "reject when omitted",
    /// but only rules naming a default vote on it, so a held `wire` call is approved at its
    /// timeout. The load warns at the baseline, naming the R3 rule; one saying `reject` is
    /// not named.
    #[test]
    fn an_approving_default_beside_a_silent_high_tier_rule_is_a_load_warning() {
        let gov = "policies:
  - id: a.base-v1
    selector: {agents: [bot]}
    rules:
      - {tool: \"*\", risk_tier: R1, default_decision: approve}
      - {tool: wire, risk_tier: R3, approvers: [finance]}
      - {tool: pay, risk_tier: R4, approvers: [finance], default_decision: reject}
";
        let reg = Registry::of(AGENT, gov);
        let warned = reg.warnings_with("hold at R3 or above naming no default");
        assert_eq!(warned.len(), 1, "{:?}", reg.warnings);
        assert!(
            warned[0].starts_with("g.yaml: a.base-v1 rules[0] (line 5) says")
                && warned[0].contains("a.base-v1 rules[1] (line 6) (g.yaml)")
                && !warned[0].contains("rules[2]"),
            "{warned:?}"
        );
    }

    /// The attack: N rules needing a quorum and N approving rules for the same tool gave N²
    /// warnings (3,000 each: 9 M, gigabytes copied into the reload reply and the log). One
    /// warning a quorum rule, naming three partners and counting the rest, one an approving
    /// rule beside thresholds; and never more than 1,000 warnings in all.
    #[test]
    fn many_quorum_and_approving_rules_give_a_bounded_number_of_warnings() {
        let gov = |n: usize| {
            let mut g = String::from(
                "policies:\n  - id: a.many-v1\n    selector: {agents: [bot]}\n    rules:\n",
            );
            for _ in 0..n {
                g.push_str("      - {tool: pay, approvers: {roles: [finance], count: 2}}\n");
                g.push_str("      - {tool: pay, default_decision: approve, thresholds: {output_bytes: 10}}\n");
            }
            g
        };
        let load = |n| Registry::of(AGENT, &gov(n));
        let reg = load(5);
        let quorum = reg.warnings_with("needs a quorum");
        assert_eq!(quorum.len(), 5, "{:?}", reg.warnings);
        assert!(
            quorum[0].contains("rules[5] (line 10) (g.yaml) and 2 more say"),
            "{quorum:?}"
        );
        let beside = reg.warnings_with("may hold the same call");
        assert_eq!(beside.len(), 5, "{:?}", reg.warnings);
        assert!(beside[0].contains(" and 1 more may hold"), "{beside:?}");
        let reg = load(1_500);
        assert_eq!(reg.warnings.len(), 1_000);
        assert_eq!(reg.warnings[999], "3501 more warnings not shown");
    }
}
