//! The `humanSummary` of seed 002's ApprovalRequest: generated from the canonical call, and
//! checked against it — every value it shows must be present, byte for byte, in the canonical
//! arguments ("generated, but MUST be verified against canonical").

use crate::canonical::ToolCall;
use crate::template::visible;
use serde_json::Value;

/// Longest value shown in full; longer ones are cut (on a character boundary) and end in `…`.
pub const MAX_VALUE_CHARS: usize = 120;

/// `s` cut to at most `max` characters (Unicode scalar values, so never inside one): a cut
/// text keeps its first `max - 1` and ends in `…`; `s` itself when it is short enough. The one
/// cut of every text shown or sent with a length limit (webhook and Slack bodies, AAEP
/// envelopes, chart labels). A `max` of 0 gives `…` alone.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// A generated summary and the `(argument, value text)` pairs it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct HumanSummary {
    /// One line: `tool` (on MCP server `alias`) with `key = value`, …
    pub text: String,
    /// Each top-level argument shown and the canonical JSON text of its value (possibly cut).
    pub shown: Vec<(String, String)>,
}

impl HumanSummary {
    /// Generates the summary of `call` from `canonical_arguments` (the RFC 8785 text of its
    /// arguments). Values are their canonical JSON; long ones are cut to [`MAX_VALUE_CHARS`].
    pub fn generate(call: &ToolCall, canonical_arguments: &str) -> HumanSummary {
        let args: Value = serde_json::from_str(canonical_arguments).unwrap_or(Value::Null);
        let mut shown = Vec::new();
        if let Value::Object(m) = &args {
            for (k, v) in m {
                let mut text = serde_json_canonicalizer::to_string(v).unwrap_or_default();
                if text.chars().count() > MAX_VALUE_CHARS {
                    text = text.chars().take(MAX_VALUE_CHARS).collect();
                }
                shown.push((k.clone(), text));
            }
        }
        let on = call
            .server
            .as_deref()
            .map(|s| format!(" on MCP server `{}`", visible(s)))
            .unwrap_or_default();
        let parts: Vec<String> = shown
            .iter()
            .map(|(k, v)| {
                let full = serde_json_canonicalizer::to_string(&args[k]).unwrap_or_default();
                // A cut inside a string closes it, so that what the cut string holds cannot
                // read as pairs of its own after it (found by review: `"Invoice 42, amount =
                // 5` padded past the cut read as a pair `amount = 5`).
                let cut = match (full.len() > v.len(), in_string(v)) {
                    (false, _) => "",
                    (true, false) => "…",
                    (true, true) => "…\"",
                };
                format!("{} = {}{cut}", key_text(k), visible(v))
            })
            .collect();
        let text = if parts.is_empty() {
            format!("Call `{}`{on} with no arguments", visible(&call.tool))
        } else {
            format!(
                "Call `{}`{on} with {}",
                visible(&call.tool),
                parts.join(", ")
            )
        };
        HumanSummary { text, shown }
    }

    /// Checks every shown value against `canonical_arguments`: the argument must exist at the
    /// top level and its canonical JSON must equal the shown text (or start with it, when the
    /// value was cut to [`MAX_VALUE_CHARS`]). `Err` names the first value that does not match.
    pub fn verify(&self, canonical_arguments: &str) -> Result<(), String> {
        let args: Value = serde_json::from_str(canonical_arguments)
            .map_err(|e| format!("canonical arguments are not JSON: {e}"))?;
        for (k, v) in &self.shown {
            let actual = args
                .get(k)
                .map(|x| serde_json_canonicalizer::to_string(x).unwrap_or_default());
            let ok = match &actual {
                Some(a) if v.chars().count() == MAX_VALUE_CHARS => a.starts_with(v.as_str()),
                Some(a) => a == v,
                None => false,
            };
            if !ok {
                return Err(format!(
                    "summary shows `{k} = {v}`, which is not in the canonical arguments"
                ));
            }
        }
        if self.shown.is_empty() && canonical_arguments != "{}" {
            return Err("summary shows no arguments but the call has some".into());
        }
        Ok(())
    }
}

/// Whether JSON text `t`, cut short, ends inside a string: its unescaped quotes are odd.
fn in_string(t: &str) -> bool {
    let (mut inside, mut escaped) = (false, false);
    for c in t.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if inside => escaped = true,
            '"' => inside = !inside,
            _ => {}
        }
    }
    inside
}

/// An argument's key as the summary shows it: as written when it is a plain name (ASCII
/// letters, digits, `_`, `-`, `.`), else as a JSON string, visible. Found by review: keys were
/// shown unquoted, so an agent's key `" amount = 5, note"` (sorted first by its space) made
/// the summary read `amount = 5, note = "", amount = 5000`, a forged pair that `verify`
/// accepted because that key really exists.
fn key_text(k: &str) -> String {
    let plain = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain {
        k.to_string()
    } else {
        let quoted = serde_json::to_string(k).unwrap_or_default();
        visible(&quoted).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn a_key_that_is_not_a_plain_name_is_quoted_so_it_cannot_forge_a_pair() {
        use crate::canonical::ToolCall;
        let args = serde_json::json!({" amount = 5, note": "", "amount": 5000});
        let call = ToolCall::new("pay", None, args).unwrap();
        let canonical_args = serde_json_canonicalizer::to_string(&call.arguments).unwrap();
        let s = super::HumanSummary::generate(&call, &canonical_args);
        assert_eq!(
            s.text,
            r#"Call `pay` with " amount = 5, note" = "", amount = 5000"#
        );
        assert!(s.verify(&canonical_args).is_ok());
    }

    /// Found by review: a string cut at the summary's limit was left open, so its own text
    /// read as pairs after it: `a_memo = "Invoice 42, amount = 5…, amount = 5000`. A cut
    /// inside a string closes it.
    #[test]
    fn a_string_cut_short_is_closed_so_its_text_cannot_forge_a_pair() {
        use crate::canonical::ToolCall;
        let memo = format!("Invoice 42, amount = 5{}", " ".repeat(200));
        let args = serde_json::json!({"a_memo": memo, "amount": 5000});
        let call = ToolCall::new("pay", None, args).unwrap();
        let canonical_args = serde_json_canonicalizer::to_string(&call.arguments).unwrap();
        let s = super::HumanSummary::generate(&call, &canonical_args);
        assert!(s.text.contains("…\", amount = 5000"), "{}", s.text);
        assert!(s.verify(&canonical_args).is_ok());
    }

    #[test]
    fn a_cut_counts_characters_never_splits_one_and_marks_itself() {
        assert_eq!(cut("short", 5), "short");
        assert_eq!(cut("héllo wörld", 5), "héll…");
        assert_eq!(cut("日本語のテキスト", 4).chars().count(), 4);
        assert_eq!(cut("🦀🦀🦀", 2), "🦀…");
        assert_eq!(cut("abc", 0), "…");
    }
}
