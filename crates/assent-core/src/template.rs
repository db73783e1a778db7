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
/// U+007F–U+009F) and every default-ignorable code point ([`is_default_ignorable`]: the
/// bidirectional formatting characters, zero-width characters, variation selectors, the tag
/// characters U+E0000–U+E0FFF…) written as a visible `\uXXXX` escape (a pair of them, UTF-16
/// surrogates, above U+FFFF), so a value taken from a call's arguments can neither hold a NUL
/// (which PostgreSQL text cannot store) nor move an operator's terminal cursor, rewrite a line
/// with a carriage return, start an escape sequence (also the one-byte CSI U+009B), reverse
/// what follows it (a right-to-left override), or carry text the operator cannot see (zero
/// width characters, "ASCII smuggling" in tag characters, which a model reading the call later
/// does see) in a message, a summary or a card. Text without one is returned as is. The escape
/// is JSON's own, so JSON text passed through this is still JSON of the same value.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(acts_on_display) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if acts_on_display(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` as one plain line for a log or a stored error: every character [`visible`] escapes
/// (control characters, newlines among them, the line separators U+2028/2029 and the
/// default-ignorable characters — bidirectional marks, embeddings, overrides and isolates,
/// zero-width characters, U+FEFF…) replaced by a space, cut to `max_chars` characters, with
/// `cut_mark` added when it was cut. For text a remote party wrote (a webhook receiver's or
/// Slack's error): one holding a newline forged log lines, one holding U+202E reversed how the
/// rest of the line reads in a terminal or the dashboard (found by review).
pub fn plain_line(text: &str, max_chars: usize, cut_mark: &str) -> String {
    let mut out: String = text
        .chars()
        .take(max_chars)
        .map(|c| if acts_on_display(c) { ' ' } else { c })
        .collect();
    if text.chars().nth(max_chars).is_some() {
        out.push_str(cut_mark);
    }
    out
}

/// Whether `c` changes how the text around it is shown, or is not shown at all, rather than
/// being shown: a control character or a default-ignorable code point.
fn acts_on_display(c: char) -> bool {
    // U+2028 and U+2029 break lines where a client honours them (found by review).
    c.is_control() || is_invisible(c) || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Whether `c` is shown as nothing or formats the text around it: a default-ignorable code
/// point ([`is_default_ignorable`]) or any other format character (General_Category `Cf`, from
/// `unicode-properties`: the interlinear annotation marks U+FFF9–U+FFFB, the Arabic number
/// signs U+0600–U+0605, the Egyptian hieroglyph format controls…). Found by review: those
/// outside the default-ignorable list passed raw, and a terminal drawing them with no width
/// let an agent's padding of `"  \u{fffb}"` runs, never more than two blanks in a row, push
/// a fake card field to the start of a line; a tool named `delete_repo\u{fffb}` looked like
/// `delete_repo`.
pub fn is_invisible(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory as _};
    is_default_ignorable(c) || (!c.is_ascii() && c.general_category() == GeneralCategory::Format)
}

/// The first character of `text` that is a control character or [`is_invisible`], written for
/// an error message: `U+200B at byte 8`. `None` when there is none. For refusals of names and
/// ids, so the person fixing one learns which character they cannot see.
pub fn first_hidden(text: &str) -> Option<String> {
    text.char_indices()
        .find(|(_, c)| c.is_control() || is_invisible(*c))
        .map(|(at, c)| format!("U+{:04X} at byte {at}", u32::from(c)))
}

/// Whether `c` is a default-ignorable code point (Unicode's `Default_Ignorable_Code_Point`,
/// DerivedCoreProperties.txt, Unicode 15.1): rendered as nothing — the soft hyphen, combining
/// grapheme joiner, Arabic letter mark, Hangul fillers, Mongolian and other variation
/// selectors, zero-width space/joiners, the bidirectional marks, embeddings, overrides and
/// isolates, word joiner and invisible operators, the byte order mark, the shorthand format
/// controls, musical symbol formatting and the tag characters (U+E0000–U+E0FFF).
pub fn is_default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fff8}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// `v` as JSON text that is safe to show ([`visible`] over `serde_json`'s text: C1 controls,
/// DEL and default-ignorable characters, which JSON may carry raw, written as `\uXXXX`
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

/// The value of variable `name`; `{{tool_args}}` computed once into `args` and copied after.
fn resolve(ctx: &TemplateContext<'_>, name: &str, args: &mut Option<String>) -> String {
    match name {
        "tool_name" => ctx.tool_name.to_string(),
        "tool_args" => args.get_or_insert_with(|| ctx.args_json()).clone(),
        "agent_alias" => ctx.agent_alias.to_string(),
        "agent_id" => ctx.agent_id.to_string(),
        "mcp_server_alias" => ctx.mcp_server_alias.unwrap_or("").to_string(),
        _ => match name.strip_prefix("tool_args.") {
            Some(path) => crate::arg_path::lookup(ctx.tool_args, path)
                .map(value_text)
                .unwrap_or_default(),
            None => ctx
                .extra
                .and_then(|x| crate::arg_path::lookup(x, name))
                .map(value_text)
                .unwrap_or_default(),
        },
    }
}

/// The most bytes of one rendered text ([`render`]): 64 KiB, past which it is cut and ends in
/// [`CUT_MARK`]. Found by review: nothing bounded a template's expansion, so a rule repeating
/// `{{tool_args}}` thousands of times (a replay's candidate fits 24,000 of them) made one
/// call's message some gigabytes, its arguments canonicalised again for each.
pub const MAX_RENDERED_BYTES: usize = 64 * 1024;

/// The most bytes of one side-effect or rollback note ([`render_shared`]): 4 KiB, so that one
/// note quoting a large argument does not use up the budget its rule's other notes share.
pub const MAX_NOTE_BYTES: usize = 4 * 1024;

/// What ends a rendered text cut at its bound ([`render_within`]).
pub const CUT_MARK: &str = "… (cut: the rendered text is too long to show)";

/// Renders `template`: each `{{ name }}` is replaced by its value (strings as they are, other
/// JSON values as canonical JSON, missing ones as empty text), control characters made
/// [`visible`]. Text outside braces is kept as is,
/// including a lone `{{` with no closing `}}`. At most [`MAX_RENDERED_BYTES`]
/// ([`render_within`]).
pub fn render(template: &str, ctx: &TemplateContext<'_>) -> String {
    render_within(template, ctx, MAX_RENDERED_BYTES)
}

/// [`render`] in at most `max` bytes: past them the text is cut on a character boundary and
/// ends in [`CUT_MARK`]; nothing past the cut is resolved, and a value is cut to the room left
/// before it is made [`visible`].
pub fn render_within(template: &str, ctx: &TemplateContext<'_>, max: usize) -> String {
    let mut out = String::with_capacity(template.len().min(max) + 32);
    let mut args = None;
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        if !push_within(&mut out, &rest[..start], max) {
            return out;
        }
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                // Values come from the call; the template's own text is the policy author's.
                let value = resolve(ctx, after[..end].trim(), &mut args);
                // One byte past the room, so a value that does not fit is still cut and marked.
                let room = max.saturating_sub(out.len()).saturating_add(1);
                if !push_within(&mut out, &visible(head(&value, room)), max) {
                    return out;
                }
                rest = &after[end + 2..];
            }
            None => {
                push_within(&mut out, &rest[start..], max);
                return out;
            }
        }
    }
    push_within(&mut out, rest, max);
    out
}

/// Each of `templates` [`render_within`] [`MAX_NOTE_BYTES`] and the bytes `left` of a budget
/// they share, which each text's length uses up; once it is spent, the rest become one last
/// text saying how many were left out. A verdict's side effects and rollback notes, one per covering rule, share
/// one budget of [`MAX_RENDERED_BYTES`] (found by review: the bound was per text, and a
/// candidate policy of thousands of rules each with `side_effects: "{{tool_args}}"` rendered
/// hundreds of MB for one call).
pub fn render_shared(
    templates: &[&str],
    ctx: &TemplateContext<'_>,
    left: &mut usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in templates.iter().enumerate() {
        if *left == 0 {
            out.push(format!(
                "… ({} more not shown: the texts are too long)",
                templates.len() - i
            ));
            break;
        }
        let text = render_within(t, ctx, (*left).min(MAX_NOTE_BYTES));
        *left = left.saturating_sub(text.len().max(1));
        out.push(text);
    }
    out
}

/// The first `max` bytes of `text`, fewer to end on a character boundary.
fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Appends `text` to `out` within `max` bytes; past them, what fits (on a character
/// boundary) and [`CUT_MARK`], and `false`.
fn push_within(out: &mut String, text: &str, max: usize) -> bool {
    let room = max.saturating_sub(out.len());
    if text.len() <= room {
        out.push_str(text);
        return true;
    }
    out.push_str(head(text, room));
    out.push_str(CUT_MARK);
    false
}

/// The message used when no template is given: names the tool (and server) and its arguments,
/// with invisible and control characters as escapes ([`visible`]: canonical JSON carries bidi
/// overrides and C1 controls raw, and this message is shown on every surface).
pub fn default_message(ctx: &TemplateContext<'_>) -> String {
    let json = ctx.args_json();
    let args = visible(&json);
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

    /// Attack (found by review): a rule repeating `{{tool_args}}` ten thousand times over a
    /// call of 64 KiB of arguments rendered 640 MB for one message. The text is cut at
    /// `MAX_RENDERED_BYTES` on a character boundary and says so; a short one is whole.
    #[test]
    fn a_template_repeating_the_arguments_is_cut_at_the_bound() {
        let a = json!({"note": "é".repeat(32 * 1024)});
        let c = ctx(&a);
        let out = render(&"{{tool_args}}".repeat(10_000), &c);
        assert!(out.ends_with(CUT_MARK), "{}", &out[out.len() - 80..]);
        assert!(
            out.len() <= MAX_RENDERED_BYTES + CUT_MARK.len(),
            "{}",
            out.len()
        );
        assert!(out.len() > MAX_RENDERED_BYTES - 4, "{}", out.len());
        // Long template text alone is cut the same way; short text is untouched.
        let out = render(&"x".repeat(MAX_RENDERED_BYTES + 1), &c);
        assert_eq!(out.len(), MAX_RENDERED_BYTES + CUT_MARK.len());
        assert_eq!(
            render("{{tool_args.note}}", &ctx(&json!({"note": "hi"}))),
            "hi"
        );
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

    /// Attack (found by review): the default message quoted the canonical JSON of the
    /// arguments, which carries a right-to-left override, a zero-width space and the one-byte
    /// CSI raw, into every surface that shows the message (the watcher's list among them).
    #[test]
    fn default_message_shows_an_agents_invisible_characters_as_escapes() {
        let a = json!({"to": "evil\u{202e}gpj.exe\u{200b}\u{9b}2J\u{2028}Risk R1"});
        let m = default_message(&ctx(&a));
        assert!(
            m.ends_with(r#"{"to":"evil\u202egpj.exe\u200b\u009b2J\u2028Risk R1"}"#),
            "{m}"
        );
        assert!(
            !m.contains(['\u{202e}', '\u{200b}', '\u{9b}', '\u{2028}']),
            "{m}"
        );
    }
}

#[cfg(test)]
mod visible_tests {
    use super::{
        first_hidden, is_invisible, plain_line, visible, visible_json, visible_json_pretty,
    };
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

    /// Attack (found by review): text the operator cannot see. A zero-width space, a word
    /// joiner, a variation selector and "ASCII smuggling" in tag characters (U+E0000 block:
    /// `U+E0065 U+E0076 U+E0069 U+E006C` spells "evil" to a model, nothing on screen) were
    /// shown raw. Each is an escape now, a UTF-16 surrogate pair above U+FFFF, so JSON text
    /// stays JSON of the same value.
    #[test]
    fn invisible_characters_become_visible_escapes() {
        assert_eq!(
            visible("a\u{200b}b\u{2060}c\u{fe0f}"),
            "a\\u200bb\\u2060c\\ufe0f"
        );
        assert_eq!(visible("\u{ad}\u{feff}\u{3164}"), "\\u00ad\\ufeff\\u3164");
        let smuggled = "ok\u{e0065}\u{e0076}\u{e0069}\u{e006c}";
        assert_eq!(
            visible(smuggled),
            "ok\\udb40\\udc65\\udb40\\udc76\\udb40\\udc69\\udb40\\udc6c"
        );
        let v = serde_json::json!({"body": smuggled, "x": "\u{200d}\u{1d173}"});
        let shown = visible_json(&v);
        assert!(shown.is_ascii(), "{shown}");
        assert_eq!(serde_json::from_str::<Value>(&shown).unwrap(), v);
        // Visible text around them, and characters that are merely rare, stay as they are.
        assert_eq!(visible("Zürich 日本 😀 \u{2065}"), "Zürich 日本 😀 \\u2065");
        assert_eq!(visible("\u{e1000}"), "\u{e1000}");
    }

    /// Attack (found by review): format characters outside the default-ignorable list (the
    /// interlinear annotation marks, the Arabic number signs, the Egyptian hieroglyph format
    /// controls…) passed raw, drawn with no width by common terminals: padding of `"  \u{fffb}"`
    /// runs, never more than two blanks in a row, escaped the card's blank-run marking and
    /// pushed a fake field to the start of a line. Every format character is escaped now.
    #[test]
    fn every_format_character_becomes_a_visible_escape() {
        for c in [
            '\u{fff9}', '\u{fffb}', '\u{0600}', '\u{0605}', '\u{06dd}', '\u{070f}', '\u{08e2}',
        ] {
            assert!(is_invisible(c), "{:04x}", c as u32);
            let shown = visible(&format!("a{c}")).into_owned();
            assert_eq!(shown, format!("a\\u{:04x}", c as u32));
        }
        for c in ['\u{110bd}', '\u{13430}'] {
            assert!(
                visible(&c.to_string()).starts_with("\\ud8"),
                "{:x}",
                c as u32
            );
        }
        // Letters, marks and symbols are not format characters.
        for c in ['a', 'é', '\u{0301}', '日', '😀', '\u{0627}'] {
            assert!(!is_invisible(c), "{c}");
        }
    }

    /// A remote party's error kept as one line: newlines, carriage returns, a right-to-left
    /// override, a zero-width space, a tag character and U+2028 become spaces; other text,
    /// accents and emoji included, is kept; the cut counts characters, not bytes, and the mark
    /// is added only when something was cut.
    #[test]
    fn plain_line_blanks_what_acts_on_display_and_cuts_by_characters() {
        let evil = "a\nb\r\u{202e}c\u{200b}d\u{e0065}\u{2028}é😀";
        assert_eq!(plain_line(evil, 100, "…"), "a b  c d  é😀");
        assert_eq!(plain_line("Zürich 日本", 100, "…"), "Zürich 日本");
        assert_eq!(plain_line("éééé", 3, "…"), "ééé…");
        assert_eq!(plain_line("éééé", 3, ""), "ééé");
        assert_eq!(plain_line("ééé", 3, "…"), "ééé");
        assert_eq!(plain_line("", 0, "…"), "");
        assert_eq!(plain_line("x", 0, "…"), "…");
    }

    /// A refused name says which character the operator cannot see, and where: the first
    /// control or invisible one, by its code point and byte offset.
    #[test]
    fn first_hidden_names_the_first_unseen_character_and_its_byte() {
        assert_eq!(first_hidden("alice"), None);
        assert_eq!(first_hidden("Zürich 日本"), None);
        assert_eq!(
            first_hidden("ali\u{200b}ce").as_deref(),
            Some("U+200B at byte 3")
        );
        assert_eq!(
            first_hidden("é\t\u{202e}").as_deref(),
            Some("U+0009 at byte 2")
        );
        assert_eq!(
            first_hidden("x\u{e0065}").as_deref(),
            Some("U+E0065 at byte 1")
        );
    }
}
