//! Step 1 of the gatekeeper: what the agent's own file says about the call, added to the
//! [`Composed`] verdict. A tool call must be declared (`local_tools`, or an MCP server alias and
//! its `allowed_tools`), its `approval` (or the server's blanket one) decides; a Confirm target
//! needs a human and consults no declaration; a delegation is read by `delegation`. Governance
//! rules are not read here.

use super::compose::Composed;
use super::kit::{Denial, reason, requires, template_of};
use crate::canonical::ToolCall;
use crate::policy::{Agent, ApprovalSpec};

/// What is being gated.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// A tool call of the agent.
    Tool,
    /// An MPLP Confirm target (`mplp.<target_type>`).
    Target,
    /// A delegation to a sub-agent (`delegate.<target>`).
    Delegation,
}

impl<'a> Composed<'a> {
    /// Adds the agent's declaration of `call` (its reason, and whether it requires approval),
    /// or `Err` to deny the call when the agent declares none. A Confirm target always needs a
    /// human and consults no declaration.
    pub fn add_declaration(
        &mut self,
        agent: &'a Agent,
        call: &ToolCall,
        mode: Mode,
    ) -> Result<(), Denial> {
        let (spec, rule) = match mode {
            Mode::Delegation => match self.add_delegation(agent, call)? {
                Some((s, rule)) => (Some(s), rule),
                None => (None, String::new()),
            },
            Mode::Target => {
                self.require(None);
                self.reasons.push(reason(
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
        self.agent_template = spec.and_then(template_of);
        let cond_args = self.extra.as_ref().unwrap_or(&call.arguments);
        let text = match spec.map(|s| (s, requires(s, cond_args))) {
            Some((s, Some(why))) => {
                self.require(template_of(s));
                why
            }
            Some((ApprovalSpec::Exempt, None)) => "declared with approval: false".into(),
            Some((_, None)) => "approval condition did not match".into(),
            None if mode != Mode::Tool => return Ok(()),
            None => "declared without approval".into(),
        };
        self.reasons.push(reason(&agent.file, &rule, text));
        Ok(())
    }
}

/// Finds the agent's declaration of the call: the applicable `approval` (None when omitted and
/// not inherited) and a label of where it is. `Err` names what is not declared.
fn declaration<'a>(
    agent: &'a Agent,
    call: &ToolCall,
) -> Result<(Option<&'a ApprovalSpec>, String), Denial> {
    let deny = |rule: &str, text: String| Denial::new(&agent.file, rule, text);
    let (tool, id) = (&call.tool, &agent.id);
    // `SUBJECT is not declared in LIST of agent `ID``, denied under the rule LIST.
    let undeclared = |subject: String, list: &str| {
        deny(
            list,
            format!("{subject} is not declared in {list} of agent `{id}`"),
        )
    };
    let Some(alias) = &call.server else {
        let t = agent.local_tools.iter().find(|t| &t.alias == tool);
        let t =
            t.ok_or_else(|| undeclared(format!("tool `{tool}`"), "action_space.local_tools"))?;
        let rule = format!("action_space.local_tools[{}]", t.alias);
        return Ok((t.approval.as_ref(), rule));
    };
    let s = agent.mcp_servers.iter().find(|s| &s.alias == alias);
    let s = s.ok_or_else(|| {
        undeclared(
            format!("MCP server alias `{alias}`"),
            "action_space.mcp_servers",
        )
    })?;
    let base = format!("action_space.mcp_servers[{alias}]");
    let Some(list) = &s.allowed_tools else {
        return Ok((s.approval.as_ref(), base));
    };
    let t = list.iter().find(|t| &t.name == tool).ok_or_else(|| {
        let text = format!(
            "tool `{tool}` is not in allowed_tools of MCP server `{alias}` for agent `{id}`"
        );
        deny(&format!("{base}.allowed_tools"), text)
    })?;
    let rule = format!("{base}.allowed_tools[{}]", t.name);
    Ok((t.approval.as_ref().or(s.approval.as_ref()), rule))
}
