//! Agent Format approval message templates (seed 004 "Message Templates"): `{{variable}}`
//! interpolation with dotted access, no logic; a missing variable renders as empty text.

use serde_json::Value;

/// The variables available to a template for one tool invocation.
#[derive(Debug, Clone)]
pub struct TemplateContext<'a> {
    /// `{{tool_name}}`: the tool's alias/name.
    pub tool_name: &'a str,
    /// `{{tool_args}}` (canonical JSON) and `{{tool_args.<key>...}}`.
    pub tool_args: &'a Value,
    /// `{{agent_alias}}`: the agent's alias (assent uses `metadata.name`, else the id).
    pub agent_alias: &'a str,
    /// `{{agent_id}}`: `metadata.id`.
    pub agent_id: &'a str,
    /// `{{mcp_server_alias}}`: the MCP server alias, empty for local tools.
    pub mcp_server_alias: Option<&'a str>,
    /// The canonical JSON of `tool_args` when the caller already has it (saves computing it
    /// again); `None` computes it when a template needs it.
    pub tool_args_json: Option<&'a str>,
    /// Further variables, looked up by dotted path when a name is none of the above: for a
    /// delegation `{"parent": {"input": …}, "skill_id": …, "skill_args": …,
    /// "remote_agent_alias": …}` (`{{parent.input.action}}`, `{{skill_args.amount}}`).
    pub extra: Option<&'a Value>,
}

impl TemplateContext<'_> {
    fn args_json(&self) -> String {
        match self.tool_args_json {
            Some(s) => s.to_string(),
            None => value_text(self.tool_args),
        }
    }
}

/// `text` as it may be shown and stored: every control character (Unicode `Cc`: U+0000–U+001F,
/// U+007F–U+009F) written as a visible `\u00XX` escape, so a value taken from a call's
/// arguments can neither hold a NUL (which PostgreSQL text cannot store) nor move an
/// operator's terminal cursor, rewrite a line with a carriage return, or start an escape
/// sequence in a message, a summary or a card. Text without one is returned as is.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => crate::canonical::canonical_value(other).unwrap_or_default(),
    }
}

fn resolve(ctx: &TemplateContext<'_>, name: &str) -> String {
    match name {
        "tool_name" => ctx.tool_name.to_string(),
        "tool_args" => ctx.args_json(),
        "agent_alias" => ctx.agent_alias.to_string(),
        "agent_id" => ctx.agent_id.to_string(),
        "mcp_server_alias" => ctx.mcp_server_alias.unwrap_or("").to_string(),
        _ => match name.strip_prefix("tool_args.") {
            Some(path) => crate::condition::lookup(ctx.tool_args, path)
                .map(value_text)
                .unwrap_or_default(),
            None => ctx
                .extra
                .and_then(|x| crate::condition::lookup(x, name))
                .map(value_text)
                .unwrap_or_default(),
        },
    }
}

/// Renders `template`: each `{{ name }}` is replaced by its value (strings as they are, other
/// JSON values as canonical JSON, missing ones as empty text), control characters made
/// [`visible`]. Text outside braces is kept as is,
/// including a lone `{{` with no closing `}}`.
pub fn render(template: &str, ctx: &TemplateContext<'_>) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                // Values come from the call; the template's own text is the policy author's.
                out.push_str(&visible(&resolve(ctx, after[..end].trim())));
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The message used when no template is given: names the tool (and server) and its arguments.
pub fn default_message(ctx: &TemplateContext<'_>) -> String {
    let args = ctx.args_json();
    match ctx.mcp_server_alias {
        Some(s) => format!(
            "Agent {} wants to call {s}/{} with {args}",
            ctx.agent_id, ctx.tool_name
        ),
        None => format!(
            "Agent {} wants to call {} with {args}",
            ctx.agent_id, ctx.tool_name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(args: &Value) -> TemplateContext<'_> {
        TemplateContext {
            extra: None,
            tool_name: "execute_trade",
            tool_args: args,
            agent_alias: "trading_agent",
            agent_id: "financial_analyst_v2",
            mcp_server_alias: Some("broker"),
            tool_args_json: None,
        }
    }

    #[test]
    fn renders_every_variable() {
        let a = json!({"symbol": "AAPL", "quantity": 100, "price": 150.25, "order": {"details": {"amount": 5}}});
        let c = ctx(&a);
        assert_eq!(
            render(
                "Approve {{tool_args.quantity}} {{ tool_args.symbol }} at ${{tool_args.price}}?",
                &c
            ),
            "Approve 100 AAPL at $150.25?"
        );
        assert_eq!(render("{{tool_args.order.details.amount}}", &c), "5");
        assert_eq!(
            render(
                "{{tool_name}}|{{agent_alias}}|{{agent_id}}|{{mcp_server_alias}}",
                &c
            ),
            "execute_trade|trading_agent|financial_analyst_v2|broker"
        );
        assert_eq!(
            render("{{tool_args}}", &c),
            r#"{"order":{"details":{"amount":5}},"price":150.25,"quantity":100,"symbol":"AAPL"}"#
        );
        assert_eq!(
            render("{{tool_args.order}}", &c),
            r#"{"details":{"amount":5}}"#
        );
    }

    #[test]
    fn missing_variables_render_empty_and_no_logic_runs() {
        let a = json!({});
        let mut c = ctx(&a);
        c.mcp_server_alias = None;
        assert_eq!(
            render(
                "[{{tool_args.nope}}][{{skill_id}}][{{mcp_server_alias}}]",
                &c
            ),
            "[][][]"
        );
        assert_eq!(render("{{#if x}}y{{/if}}", &c), "y");
        assert_eq!(render("unclosed {{tool_name", &c), "unclosed {{tool_name");
    }

    #[test]
    fn default_message_names_tool_and_arguments() {
        let a = json!({"path": "/tmp/x"});
        let m = default_message(&ctx(&a));
        assert_eq!(
            m,
            r#"Agent financial_analyst_v2 wants to call broker/execute_trade with {"path":"/tmp/x"}"#
        );
    }
}

#[cfg(test)]
mod visible_tests {
    use super::visible;

    #[test]
    fn control_characters_become_visible_escapes_and_other_text_is_kept() {
        assert_eq!(visible("pay bob 5 €"), "pay bob 5 €");
        assert_eq!(visible("a\u{0}b"), "a\\u0000b");
        assert_eq!(visible("\u{1b}[2K\rok\n"), "\\u001b[2K\\u000dok\\u000a");
        assert_eq!(visible("\u{7f}\u{9b}"), "\\u007f\\u009b");
    }
}
