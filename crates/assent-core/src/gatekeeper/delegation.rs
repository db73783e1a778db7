//! Delegations (seed 004 "Approval on Agent Delegation"): the synthetic call of a delegation
//! ([`delegation_call`], tool `delegate.<target>`) and step 1 of the gatekeeper for one —
//! finding the target among the agent's `local_agents` / `remote_agents`, checking its skill,
//! and adding the skill's approval and the delegation context to the [`Composed`] verdict. The
//! sub-agent's own tool calls are gated separately, as its own.

use super::compose::Composed;
use super::kit::{Denial, reason, requires, template_of};
use crate::canonical::{CanonicalError, ToolCall};
use crate::policy::{Agent, ApprovalSpec, Delegate};

/// The reason a delegation naming no skill to a target that declares `allowed_skills` needs a
/// person (`Composed::add_no_skill`).
const NO_SKILL_ID: &str = "asked with no skill id; it declares allowed_skills, so a person decides (the remote agent would pick the skill from the message, past allowed_skills and each skill's approval)";

/// The trigger of a delegation held by [`NO_SKILL_ID`] (`Composed::add_no_skill`): held so a
/// person decides, so — as for every trigger — no grant covers it, its default at the timeout
/// is reject and it is not asked in the client.
const TRIGGER_SKILL_UNNAMED: &str = "skill_unnamed";

/// The synthetic call of a delegation (seed 004 "Approval on Agent Delegation"): tool
/// `delegate.<target>`, arguments `{"input": …, "skill_id"?: …, "skill_args"?: …}`. Its
/// canonical hash is what an approval of the delegation binds.
///
/// Errors: those of [`ToolCall::new`], and [`CanonicalError::AmbiguousKey`] (key
/// `skill_args.<key>`, or `input.<key>`) for `skill_args` or `input` holding both a dotted key
/// and the nested path of that name, or [`CanonicalError::FoldedAmbiguousKey`] (key and nested
/// path under `skill_args.` or `input.`)
/// when that nested path is spelt in another case or Unicode form, or
/// [`CanonicalError::DottedAmbiguousKey`] (JSON pointers from `/skill_args` or `/input`) for
/// any other pair of places one name reaches: a skill's condition is read from `skill_args` as its root, literal key first, while
/// the remote skill reads the nested value (found by review: `{"order.amount": 5, "order":
/// {"amount": 50000}}` passed a skill's `order.amount > 100` approval unasked).
pub fn delegation_call(
    target: &str,
    input: serde_json::Value,
    skill_id: Option<&str>,
    skill_args: Option<serde_json::Value>,
) -> Result<ToolCall, CanonicalError> {
    unambiguous_under("input", &input)?;
    let mut args = serde_json::json!({ "input": input });
    if let Some(s) = skill_id {
        args["skill_id"] = s.into();
    }
    if let Some(a) = skill_args {
        unambiguous_under("skill_args", &a)?;
        args["skill_args"] = a;
    }
    ToolCall::new(format!("delegate.{target}"), None, args)
}

/// [`crate::canonical::check_unambiguous`] of `value`, the delegation's `input` or
/// `skill_args`, the keys it names put under `prefix` (found by review: the folded case named
/// the key without its `skill_args.` prefix, as if it were one of the call's own arguments).
/// `input` is checked too (found by review: `{"order.amount": 50000, "order": {"amount": 1}}`
/// passed a reference's `parent.input.order.amount > 100` approval, which reads the nested
/// value, while the sub-agent was shown both).
fn unambiguous_under(prefix: &str, value: &serde_json::Value) -> Result<(), CanonicalError> {
    crate::canonical::check_unambiguous(value).map_err(|e| match e {
        CanonicalError::AmbiguousKey { key } => CanonicalError::AmbiguousKey {
            key: format!("{prefix}.{key}"),
        },
        CanonicalError::FoldedAmbiguousKey { key, nested } => CanonicalError::FoldedAmbiguousKey {
            key: format!("{prefix}.{key}"),
            nested: format!("{prefix}.{nested}"),
        },
        CanonicalError::DottedAmbiguousKey { path, other } => CanonicalError::DottedAmbiguousKey {
            path: format!("/{prefix}{path}"),
            other: format!("/{prefix}{other}"),
        },
        other => other,
    })
}

impl<'a> Composed<'a> {
    /// Step 1 for a delegation: finds the target and the skill, adds the skill's approval,
    /// sets the delegation context (`extra`, `sub_alias`), and returns the reference's
    /// `approval` with its label. `Err` to deny an undeclared target, a skill on a local agent,
    /// a skill outside `allowed_skills`, or a `skill_id` that is not a string. A remote target
    /// declaring `allowed_skills` asked with no `skill_id` needs a person.
    pub(super) fn add_delegation(
        &mut self,
        agent: &'a Agent,
        call: &ToolCall,
    ) -> Result<Option<(&'a ApprovalSpec, String)>, Denial> {
        let args = &call.arguments;
        let alias = call.tool.strip_prefix("delegate.").unwrap_or(&call.tool);
        let deny = |rule: &str, text: String| Denial::new(&agent.file, rule, text);
        let Some(target) = agent.delegates.iter().find(|t| t.alias == alias) else {
            return Err(deny(
                "action_space",
                format!(
                    "`{alias}` is not declared in action_space.local_agents or remote_agents of agent `{}`",
                    agent.id
                ),
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
        match args.get("skill_id") {
            Some(serde_json::Value::String(sid)) => {
                if !target.remote {
                    return Err(deny(
                        &rule,
                        format!(
                            "`{alias}` is a local agent; skill_id applies to remote agents only"
                        ),
                    ));
                }
                x["skill_id"] = sid.as_str().into();
                self.add_skill(agent, target, sid, &rule, &x["skill_args"])
                    .map_err(|text| deny(&rule, text))?;
            }
            // Fail closed: a skill id that is no string names no skill to check.
            Some(other) => {
                return Err(deny(
                    &rule,
                    format!("skill_id must be a string, not {other}"),
                ));
            }
            None => self.add_no_skill(agent, target, &rule),
        }
        self.extra = Some(x);
        self.sub_alias = Some(alias.to_string());
        if target.approval.is_none() {
            self.reasons
                .push(reason(&agent.file, &rule, "declared without approval"));
        }
        Ok(target.approval.as_ref().map(|s| (s, rule)))
    }

    /// A delegation to `target` (labelled `rule`) naming no skill: when the target declares
    /// `allowed_skills`, the remote agent would pick the skill from the message, past the list
    /// and past every skill's `approval` (found by review: with no `skill_id` a delegation to an
    /// agent allowing `process-payment` only under approval was allowed). It needs a person
    /// then (fail closed, not a denial: a person may still allow it), with a reason saying why
    /// and the trigger [`TRIGGER_SKILL_UNNAMED`] (found by review: held with no trigger, an
    /// approving default at the timeout, a grant or the agent's own user in the client let it
    /// through with no person deciding).
    fn add_no_skill(&mut self, agent: &Agent, target: &Delegate, rule: &str) {
        if target.skills.is_some() {
            self.require(None);
            if !self.triggers.iter().any(|t| t == TRIGGER_SKILL_UNNAMED) {
                self.triggers.push(TRIGGER_SKILL_UNNAMED.to_string());
            }
            let label = format!("{rule}.allowed_skills");
            self.reasons.push(reason(&agent.file, label, NO_SKILL_ID));
        }
    }

    /// The skill `sid` of remote agent `target` (labelled `rule`): `Err(reason)` when the target
    /// declares `allowed_skills` without it; else its `approval`, when it has one, decides over
    /// `skill_args` and leaves a reason.
    fn add_skill(
        &mut self,
        agent: &Agent,
        target: &'a Delegate,
        sid: &str,
        rule: &str,
        skill_args: &serde_json::Value,
    ) -> Result<(), String> {
        let Some(skills) = &target.skills else {
            return Ok(());
        };
        let Some(k) = skills.iter().find(|k| k.id == sid) else {
            return Err(format!(
                "skill `{sid}` is not in allowed_skills of remote agent `{}`",
                target.alias
            ));
        };
        if let Some(spec) = &k.approval {
            let text = match requires(spec, skill_args) {
                Some(why) => {
                    self.require(template_of(spec));
                    why
                }
                None => "skill approval condition did not match".into(),
            };
            let label = format!("{rule}.allowed_skills[{sid}]");
            self.reasons.push(reason(&agent.file, label, text));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::Registry;
    use crate::triggers::Observations;
    use crate::{VerdictKind, evaluate_delegation};
    use serde_json::json;

    const AGENT: &str = "metadata: {id: bot}
action_space:
  remote_agents:
    - alias: payments
      allowed_skills: [lookup, {id: process-payment, approval: true}]
    - alias: search
";

    /// The attack: naming no skill, a delegation to a remote agent declaring `allowed_skills`
    /// skipped the list and each skill's approval (the remote picks the skill from the
    /// message). It needs a person, the reason says why; a skill id that is no string is
    /// denied. A named allowed skill, and a target declaring no `allowed_skills`, pass.
    #[test]
    fn a_delegation_naming_no_skill_needs_a_person_when_the_target_lists_skills() {
        let reg = Registry::load(&[("a.yaml".into(), AGENT.into())], &[]).unwrap();
        let eval = |args: serde_json::Value| {
            let call = crate::ToolCall::new("delegate.payments", None, args).unwrap();
            evaluate_delegation(&reg, "bot", &call, None, &Observations::none(0))
        };
        let v = eval(json!({"input": {"text": "pay 5000"}}));
        assert_eq!(v.kind, VerdictKind::Confirm);
        let why = v
            .terms
            .reasons
            .iter()
            .find(|r| r.rule.ends_with(".allowed_skills"));
        assert!(
            why.is_some_and(|r| r.text.contains("asked with no skill id")),
            "{v:?}"
        );
        assert_eq!(v.terms.triggers, [super::TRIGGER_SKILL_UNNAMED], "{v:?}");
        assert!(!v.terms.in_client_approval, "{v:?}");
        assert_eq!(
            eval(json!({"input": {}, "skill_id": 7})).kind,
            VerdictKind::Deny
        );
        let v = eval(json!({"input": {}, "skill_id": "lookup"}));
        assert_eq!(v.kind, VerdictKind::Allow, "{v:?}");
        let call = crate::ToolCall::new("delegate.search", None, json!({"input": {}})).unwrap();
        let v = evaluate_delegation(&reg, "bot", &call, None, &Observations::none(0));
        assert_eq!(v.kind, VerdictKind::Allow, "{v:?}");
    }
}
