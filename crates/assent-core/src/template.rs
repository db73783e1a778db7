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
/// U+007F–U+009F) and every bidirectional formatting character (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069) written as a visible `\uXXXX` escape, so a value taken from a
/// call's arguments can neither hold a NUL (which PostgreSQL text cannot store) nor move an
/// operator's terminal cursor, rewrite a line with a carriage return, start an escape
/// sequence (also the one-byte CSI U+009B), or reverse what follows it (a right-to-left
/// override) in a message, a summary or a card. Text without one is returned as is. The
/// escape is JSON's own, so JSON text passed through this is still JSON of the same value.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(acts_on_display) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if acts_on_display(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether `c` changes how the text around it is shown rather than being shown: a control
/// character or a bidirectional formatting character.
fn acts_on_display(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `v` as JSON text that is safe to show ([`visible`] over `serde_json`'s text: C1 controls,
/// DEL and bidi formatting characters, which JSON may carry raw, written as `\uXXXX`
/// escapes). Still valid JSON, of the same value.
pub fn visible_json(v: &Value) -> String {
    visible(&v.to_string()).into_owned()
}

/// [`visible_json`] pretty-printed (two-space indent): each line made [`visible`] on its own,
/// since the line breaks between members are JSON's, not the value's (a newline inside a
/// string is already the escape `\n`).
pub fn visible_json_pretty(v: &Value) -> String {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    text.split('\n').map(visible).collect::<Vec<_>>().join("\n")
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
    use super::{visible, visible_json, visible_json_pretty};
    use serde_json::Value;

    #[test]
    fn control_characters_become_visible_escapes_and_other_text_is_kept() {
        assert_eq!(visible("pay bob 5 €"), "pay bob 5 €");
        assert_eq!(visible("a\u{0}b"), "a\\u0000b");
        assert_eq!(visible("\u{1b}[2K\rok\n"), "\\u001b[2K\\u000dok\\u000a");
        assert_eq!(visible("\u{9b}2K\u{7f}"), "\\u009b2K\\u007f");
        assert_eq!(visible("ab\u{202e}cd\u{2066}"), "ab\\u202ecd\\u2066");
        let v = serde_json::json!({"to": "x\u{202e}y\u{9b}\u{1b}"});
        let shown = visible_json(&v);
        assert_eq!(shown, r#"{"to":"x\u202ey\u009b\u001b"}"#);
        assert_eq!(serde_json::from_str::<Value>(&shown).unwrap(), v);
        let pretty = visible_json_pretty(&v);
        assert_eq!(pretty, "{\n  \"to\": \"x\\u202ey\\u009b\\u001b\"\n}");
        assert_eq!(serde_json::from_str::<Value>(&pretty).unwrap(), v);
    }
}
