//! The gatekeeper: one pure function from (registry, agent, call) to a [`Verdict`] with reasons
//! (MPLP Gatekeeper duty; seed 002 "When confirmations trigger"; seed 004 union semantics).
//!
//! It folds every source into one composed verdict value: the agent's declaration (`declared`,
//! `delegation`), then each covering governance rule in policy order (`compose`), then the risk
//! tier and the message (`Composed::finish`), its default at the timeout settled by
//! `timeout_default` ([`settle_default`], the rule the expiry sweep applies). `kit` holds the
//! shared helpers at the bottom. This module holds the public entry points only (and, for the
//! unit tests, `test_kit`); the verdict type is in [`crate::verdict`], the rule model in
//! [`crate::policy`].

mod compose;
mod declared;
mod delegation;
mod kit;
mod timeout_default;

use crate::canonical::ToolCall;
use crate::policy::{Agent, Registry};
use crate::template::TemplateContext;
use crate::triggers::Observations;
use compose::Composed;
use declared::Mode::{self, Delegation, Target, Tool};
use kit::Denial;

pub use crate::risk::default_timeout_seconds;
pub use crate::verdict::{ApprovalTerms, Reason, Verdict, VerdictKind};
pub use compose::{TRIGGER_DENY_UNEVALUABLE, TRIGGER_TOOL_LOOKALIKE};
pub use delegation::delegation_call;
pub use timeout_default::settle_default;

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
    evaluate_inner(reg, agent_id, call, canonical_arguments, obs, Tool)
}

/// The verdict for a delegation to a sub-agent (seed 004 "Approval on Agent Delegation";
/// `call` from [`delegation_call`]). The target must be one of the agent's `local_agents[]` or
/// `remote_agents[]` (a `skill_id` only on a remote agent, and one of its `allowed_skills` when
/// it declares them), else deny. The reference's `approval` decides, its condition keys being
/// paths over `{"parent": {"input": …}}` (`parent.input.risk_level`); a skill's `approval`
/// decides too, over the skill's input fields. Templates see `{{parent.input.*}}`,
/// `{{skill_id}}`, `{{skill_args}}`, `{{skill_args.*}}`, `{{remote_agent_alias}}`,
/// `{{agent_alias}}` (the sub-agent) and `{{agent_id}}` (the parent). Governance rules covering
/// the tool name `delegate.<target>` apply as for a tool call, observing the session through
/// `obs` as [`evaluate_in`] does: their `thresholds` count the session's earlier delegations,
/// their `scope` resolves paths, and what the session took in raises the delegation's risk
/// (found by review: delegations were evaluated with nothing observed, so a rate on
/// `delegate.*` never fired and a delegation after untrusted output was not raised). The
/// sub-agent's own tool calls are gated separately, as its own.
pub fn evaluate_delegation(
    reg: &Registry,
    agent_id: &str,
    call: &ToolCall,
    canonical_arguments: Option<&str>,
    obs: &Observations<'_>,
) -> Verdict {
    evaluate_inner(reg, agent_id, call, canonical_arguments, obs, Delegation)
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
    // Nothing observed (no earlier calls, no filesystem): a target has no thresholds to count.
    let none = Observations::none(0);
    evaluate_inner(reg, agent_id, call, canonical_arguments, &none, Target)
}

/// The one evaluation behind every entry point: an unknown or refused agent is denied, else
/// the sources are composed and the composed verdict finished.
fn evaluate_inner(
    reg: &Registry,
    agent_id: &str,
    call: &ToolCall,
    canonical_arguments: Option<&str>,
    obs: &Observations<'_>,
    mode: Mode,
) -> Verdict {
    let Some(agent) = reg.agents.get(agent_id) else {
        let text = format!("agent `{agent_id}` is not declared in any agent file");
        return Denial::new("", "agents", text).into_verdict();
    };
    if let Some(why) = &agent.refused {
        let rule = "constraints.governance_policies";
        return Denial::new(&agent.file, rule, why.clone()).into_verdict();
    }
    let ctx = TemplateContext {
        tool_name: &call.tool,
        tool_args: &call.arguments,
        agent_alias: &agent.name,
        agent_id: &agent.id,
        mcp_server_alias: call.server.as_deref(),
        tool_args_json: canonical_arguments,
        extra: None,
    };
    match compose(reg, agent, call, &ctx, obs, mode) {
        Ok(verdict) => verdict.finish(agent, ctx),
        Err(denial) => denial.into_verdict(),
    }
}

/// Folds every source into one composed verdict: the agent's declaration of the call, then
/// each governance rule that covers it, in policy order (looked up in the registry's rule
/// index, [`Registry::covering_rules`], not by scanning every rule). `Err` as soon as one denies it.
fn compose<'a>(
    reg: &'a Registry,
    agent: &'a Agent,
    call: &ToolCall,
    ctx: &TemplateContext<'_>,
    obs: &Observations<'_>,
    mode: Mode,
) -> Result<Composed<'a>, Denial> {
    let mut verdict = Composed::default();
    verdict.add_declaration(agent, call, mode)?;
    let rules = reg.covering_rules(agent, &call.tool, call.server.as_deref());
    // Tighten only: a policy that applies only because of what the agent's own file says (it
    // references the policy, or declares the namespace or labels the policy selects) may not
    // loosen what a policy whose selector picks the agent by id says of the call (its duties,
    // passkey, default, timeout, who decides): `Selector::governs`.
    let governed = rules.iter().any(|(p, _)| p.selector.governs(agent));
    for (p, r) in rules {
        let loosens = !governed || p.selector.governs(agent);
        verdict.add_rule(&p.file, r, ctx, obs, loosens)?;
    }
    hold_lookalikes(reg, agent, call, &mut verdict);
    verdict.add_session(call, obs);
    Ok(verdict)
}

/// Holds a call whose tool name only looks like one a governance rule covers: each rule that
/// covers the folded name ([`Registry::lookalike_rules`]) but not the name itself adds its reason
/// and the trigger `tool_lookalike` ([`Composed::add_lookalike`]), so `Delete_Repo` or a
/// full-width `ｄelete_repo` beside a rule denying `delete_repo` is never allowed where a
/// dispatcher reading names loosely might run it. Free on the fast path: a name already folded
/// (printable lower-case ASCII) is only scanned. A rule whose own `tool` is not folded is
/// matched as written.
fn hold_lookalikes<'a>(reg: &'a Registry, agent: &Agent, call: &ToolCall, v: &mut Composed<'a>) {
    for (p, r) in reg.lookalike_rules(agent, &call.tool, call.server.as_deref()) {
        v.add_lookalike(&p.file, r, &call.tool);
    }
}

/// Test set-up shared by the gatekeeper's unit tests.
#[cfg(test)]
mod test_kit {
    use crate::policy::Registry;

    /// The agent file of agent `bot`, declaring the local tool `pay`.
    pub(super) const AGENT: &str =
        "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n";

    /// The registry of agent file `agent` and one governance file of `policies`, each
    /// `(id, rules)`: a policy selecting agent `bot` whose `rules` are YAML list items written
    /// from the left margin.
    pub(super) fn governing_bot(agent: &str, policies: &[(&str, &str)]) -> Registry {
        let mut gov = String::from("policies:\n");
        for (id, rules) in policies {
            gov += &format!("  - id: {id}\n    selector: {{agents: [bot]}}\n    rules:\n");
            for line in rules.lines() {
                gov += &format!("      {line}\n");
            }
        }
        Registry::of(agent, &gov)
    }
}

#[cfg(test)]
mod tests {
    use super::test_kit::governing_bot;
    use super::{TRIGGER_TOOL_LOOKALIKE, VerdictKind, evaluate};
    use crate::ToolCall;
    use serde_json::json;

    /// Agent `bot` declares MCP server `gh` with no `allowed_tools` (every tool name passes).
    const GH: &str = "metadata: {id: bot}\naction_space:\n  mcp_servers:\n    - alias: gh\n";

    /// The rules of the review: `delete_repo` denied, `merge_*` held, both on `gh`.
    const RULES: &str = "- {tool: delete_repo, server: gh, deny: true}
- {tool: \"merge_*\", server: gh, approval: true}";

    fn verdict(tool: &str) -> crate::Verdict {
        let reg = governing_bot(GH, &[("a.gh-v1", RULES)]);
        let call = ToolCall::new(tool, Some("gh".into()), json!({})).unwrap();
        evaluate(&reg, "bot", &call)
    }

    /// The attack (found by review): rules match tool names byte for byte, so `Delete_Repo`,
    /// a full-width `ｄelete_repo`, `delete_repo ` or `delete_repo\0` was allowed beside a rule
    /// denying `delete_repo`, and `Merge_pr` beside one holding `merge_*`; an executor
    /// dispatching names loosely ran the denied tool. Each is now held for a person, the
    /// trigger `tool_lookalike` named, the reason naming the rule's tool; never allowed.
    #[test]
    fn a_tool_name_that_only_looks_like_a_governed_one_is_held_never_allowed() {
        let cases = [
            ("Delete_Repo", "delete_repo", "denies"),
            ("\u{ff44}elete_repo", "delete_repo", "denies"),
            ("DELETE_REPO", "delete_repo", "denies"),
            ("delete_repo ", "delete_repo", "denies"),
            ("delete_repo\0", "delete_repo", "denies"),
            ("delete\u{200b}_repo", "delete_repo", "denies"),
            ("Merge_pr", "merge_*", "holds"),
        ];
        for (tool, like, does) in cases {
            let v = verdict(tool);
            assert_eq!(
                v.kind,
                VerdictKind::Confirm,
                "{tool:?}: {:?}",
                v.terms.reasons
            );
            assert_eq!(v.terms.triggers, [TRIGGER_TOOL_LOOKALIKE], "{tool:?}");
            assert_eq!(v.terms.default_decision.as_str(), "reject", "{tool:?}");
            assert!(!v.terms.in_client_approval, "{tool:?}");
            let why = v
                .terms
                .reasons
                .iter()
                .find(|r| r.rule.starts_with("a.gh-v1"));
            let why = why.map(|r| r.text.as_str()).unwrap_or_default();
            assert!(
                why.contains(&format!("looks like `{like}`, which this rule {does}")),
                "{tool:?}: {why}"
            );
            assert!(!why.contains('\0') && !why.contains('\u{200b}'), "{why:?}");
        }
    }

    /// The exact names keep their verdicts and no trigger; a name that folds to no governed
    /// tool (`Create_Issue`) is allowed as before.
    #[test]
    fn exact_and_unrelated_tool_names_keep_their_verdicts() {
        assert_eq!(verdict("delete_repo").kind, VerdictKind::Deny);
        let v = verdict("merge_pr");
        assert_eq!(v.kind, VerdictKind::Confirm);
        assert!(v.terms.triggers.is_empty(), "{:?}", v.terms.triggers);
        for tool in ["create_issue", "Create_Issue", "list repos"] {
            let v = verdict(tool);
            assert_eq!(v.kind, VerdictKind::Allow, "{tool}: {:?}", v.terms.reasons);
            assert!(v.terms.triggers.is_empty());
        }
    }

    /// The gap the first fix left: a rule whose own tool is written in mixed case (an
    /// upstream's `GetUser`) was matched as written, so a call of `getuser`, already folded,
    /// was allowed beside a rule denying `GetUser`. A rule's tool folds too; the rule's own
    /// spelling keeps its verdict, an unrelated name its own.
    #[test]
    fn a_call_spelt_otherwise_than_a_mixed_case_rule_is_held() {
        let rules = "- {tool: GetUser, server: gh, deny: true}";
        let reg = governing_bot(GH, &[("a.gh-v1", rules)]);
        let verdict = |tool: &str| {
            let call = ToolCall::new(tool, Some("gh".into()), json!({})).unwrap();
            evaluate(&reg, "bot", &call)
        };
        for tool in ["getuser", "GETUSER", "Getuser "] {
            let v = verdict(tool);
            assert_eq!(v.kind, VerdictKind::Confirm, "{tool:?}");
            assert_eq!(v.terms.triggers, [TRIGGER_TOOL_LOOKALIKE], "{tool:?}");
        }
        assert_eq!(verdict("GetUser").kind, VerdictKind::Deny);
        let other = verdict("get_user");
        assert_eq!(other.kind, VerdictKind::Allow);
        assert!(other.terms.triggers.is_empty());
        // On another server the rule does not apply, spelt alike or not.
        let call = ToolCall::new("getuser", Some("gl".into()), json!({})).unwrap();
        let gl = "metadata: {id: bot}\naction_space:\n  mcp_servers:\n    - alias: gh\n    - alias: gl\n";
        let reg = governing_bot(gl, &[("a.gh-v1", rules)]);
        assert_eq!(evaluate(&reg, "bot", &call).kind, VerdictKind::Allow);
    }
}
