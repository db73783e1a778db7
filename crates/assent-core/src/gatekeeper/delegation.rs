//! Delegations (seed 004 "Approval on Agent Delegation"): the synthetic call of a delegation
//! ([`delegation_call`], tool `delegate.<target>`) and step 1 of the gatekeeper for one —
//! finding the target among the agent's `local_agents` / `remote_agents`, checking its skill,
//! and adding the skill's approval and the delegation context to the [`Composed`] verdict. The
//! sub-agent's own tool calls are gated separately, as its own.

use super::compose::Composed;
use super::kit::{Denial, reason, requires, template_of};
use crate::canonical::{CanonicalError, ToolCall};
use crate::policy::{Agent, ApprovalSpec, Delegate};

/// The synthetic call of a delegation (seed 004 "Approval on Agent Delegation"): tool
/// `delegate.<target>`, arguments `{"input": …, "skill_id"?: …, "skill_args"?: …}`. Its
/// canonical hash is what an approval of the delegation binds.
///
/// Errors: those of [`ToolCall::new`], and [`CanonicalError::AmbiguousKey`] (key
/// `skill_args.<key>`) for `skill_args` holding both a dotted key and the nested path of that
/// name: a skill's condition is read from `skill_args` as its root, literal key first, while
/// the remote skill reads the nested value (found by review: `{"order.amount": 5, "order":
/// {"amount": 50000}}` passed a skill's `order.amount > 100` approval unasked).
pub fn delegation_call(
    target: &str,
    input: serde_json::Value,
    skill_id: Option<&str>,
    skill_args: Option<serde_json::Value>,
) -> Result<ToolCall, CanonicalError> {
    let mut args = serde_json::json!({ "input": input });
    if let Some(s) = skill_id {
        args["skill_id"] = s.into();
    }
    if let Some(a) = skill_args {
        crate::canonical::check_unambiguous(&a).map_err(|e| match e {
            CanonicalError::AmbiguousKey { key } => CanonicalError::AmbiguousKey {
                key: format!("skill_args.{key}"),
            },
            other => other,
        })?;
        args["skill_args"] = a;
    }
    ToolCall::new(format!("delegate.{target}"), None, args)
}

impl<'a> Composed<'a> {
    /// Step 1 for a delegation: finds the target and the skill, adds the skill's approval,
    /// sets the delegation context (`extra`, `sub_alias`), and returns the reference's
    /// `approval` with its label. `Err` to deny an undeclared target, a skill on a local agent,
    /// or a skill outside `allowed_skills`.
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
        if let Some(sid) = args.get("skill_id").and_then(|v| v.as_str()) {
            if !target.remote {
                return Err(deny(
                    &rule,
                    format!("`{alias}` is a local agent; skill_id applies to remote agents only"),
                ));
            }
            x["skill_id"] = sid.into();
            self.add_skill(agent, target, sid, &rule, &x["skill_args"])
                .map_err(|text| deny(&rule, text))?;
        }
        self.extra = Some(x);
        self.sub_alias = Some(alias.to_string());
        if target.approval.is_none() {
            self.reasons
                .push(reason(&agent.file, &rule, "declared without approval"));
        }
        Ok(target.approval.as_ref().map(|s| (s, rule)))
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
