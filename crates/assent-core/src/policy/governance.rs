//! Governance files (assent's own format, `docs/policy.md`): their serde shapes, which reject
//! unknown keys so a typo never silently weakens a rule, and their validation into [`Policy`]
//! values with [`Rule`]s (policy ids, tiers, default decisions, `deny`, and the bounds of
//! issue 10 §10). It does not resolve which agents a policy applies to (the registry does).

use super::error::{LoadError, yaml_err};
use super::model::{ApprovalSpec, Policy, Rule, Selector};
use crate::approval::{DefaultDecision, check_default_decision};
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
    #[serde(default, deserialize_with = "crate::json::written")]
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

/// Longest tool or agent glob a policy may hold, in bytes (ids and names are at most 256).
pub const MAX_GLOB_BYTES: usize = 256;

/// Most `*` a tool or agent glob may hold: the `glob` crate matches one `*` a call deeper, so
/// a glob of 500,000 stars overflowed the stack and aborted the gateway at a reload (found by
/// review).
pub const MAX_GLOB_STARS: usize = 16;

/// `g` compiled as a tool or agent glob, or why not: empty, over [`MAX_GLOB_BYTES`] or
/// [`MAX_GLOB_STARS`], or not a glob.
pub(super) fn bounded_glob(g: &str) -> Result<glob::Pattern, String> {
    if g.is_empty() {
        return Err("is empty: not a name or glob".into());
    }
    if g.len() > MAX_GLOB_BYTES {
        return Err(format!(
            "is {} bytes long: at most {MAX_GLOB_BYTES}",
            g.len()
        ));
    }
    if g.matches('*').count() > MAX_GLOB_STARS {
        return Err(format!("holds more than {MAX_GLOB_STARS} `*`"));
    }
    glob::Pattern::new(g).map_err(|_| "is not a name or glob".into())
}

/// `s` cut to 64 characters for an error message.
fn cut(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Validates one governance rule (issue 10 §10 bounds included): the [`Rule`] and its
/// load-time warnings, or `Err(reason)` for the caller to report with the file and line.
fn build_rule(rr: &RawRule, label: String) -> Result<(Rule, Vec<String>), String> {
    let tool = match bounded_glob(&rr.tool) {
        Ok(g) => g,
        Err(why) => return Err(format!("`tool: {}` {why}", cut(&rr.tool))),
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
            if let Err(why) = bounded_glob(a) {
                errs.push(err(
                    pline,
                    format!("policy `{}` selector.agents: `{}` {why}", p.id, cut(a)),
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
}
