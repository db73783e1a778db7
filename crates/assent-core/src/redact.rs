//! Redaction of call arguments that leave the gateway (issue 5: a rule's `redact` list).
//!
//! A path is dotted (`card.number`, `recipients.0.email`); `*` matches every key of an
//! object or element of an array (`headers.*`). Values at those paths are replaced by
//! [`MASK`] in copies sent out (webhooks, Slack payloads, AAEP events, exports); the stored
//! call is never changed.
//!
//! Text is masked before it is rendered, never by searching it afterwards: the approval
//! message, side effects and rollback notes are rendered from [`Redactor::arguments`] by the
//! gatekeeper (`gatekeeper::compose`), and [`Redactor::summary`] generates the human summary
//! of the masked call — a renderer cuts long values and escapes control and bidi characters,
//! so a secret is not in its text as any stored copy of it. [`Redactor::text`] stays as a
//! second net, for texts only rendered from the real arguments (condition reasons).

use crate::canonical::ToolCall;
use crate::summary::HumanSummary;
use crate::template::visible;
use serde_json::Value;

/// What a redacted value is replaced with.
pub const MASK: &str = "[redacted]";

/// Masks `paths` in copies of one call's arguments and in texts rendered from them.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    paths: Vec<Vec<String>>,
    /// Text forms of the redacted values (strings of 3+ characters and numbers), longest first:
    /// each string as it is, JSON-escaped, both with [`visible`]'s escapes, and Rust-escaped.
    secrets: Vec<String>,
    /// Top-level keys of the arguments whose string value is free text masked with
    /// [`Redactor::text`] ([`Redactor::with_free_text`]).
    free_text: Vec<String>,
}

impl Redactor {
    /// A redactor for `arguments` with the rule's `paths` (empty: masks nothing).
    pub fn new(arguments: &Value, paths: &[String]) -> Self {
        Self::under(arguments, paths, &[])
    }

    /// [`Redactor::new`] of arguments that hold the call's arguments at `prefix` (a held
    /// result's, `result.TOOL`: `{"call": {"arguments": …}, …}`, so `["call", "arguments"]`),
    /// its `paths` read below it. Found by review: a held result kept its call's `redact`
    /// paths but was masked at its own top level, where they name nothing, so every redacted
    /// value reached webhooks, Slack, AAEP and the learning export in clear once the call's
    /// result passed its `output_bytes`.
    pub fn under(arguments: &Value, paths: &[String], prefix: &[&str]) -> Self {
        // A dotted path names the nested value and also, as every reader of arguments
        // (`arg_path::lookup`: templates, conditions, scopes) finds it first, a top-level key
        // spelled with the dots (`{"card.number": …}`): both are masked.
        let below = |rest: Vec<String>| -> Vec<String> {
            prefix.iter().map(|s| s.to_string()).chain(rest).collect()
        };
        let paths: Vec<Vec<String>> = paths
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| below(p.split('.').map(str::to_string).collect()))
            .chain(
                paths
                    .iter()
                    .filter(|p| p.contains('.'))
                    .map(|p| below(vec![p.clone()])),
            )
            .collect();
        let mut secrets = Vec::new();
        // The walk is one for reading and masking, so it reads a copy.
        let mut copy = arguments.clone();
        for p in &paths {
            visit(&mut copy, p, &mut |v| leaves(v, &mut secrets));
        }
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self {
            paths,
            secrets,
            free_text: Vec::new(),
        }
    }

    /// This redactor, also masking with [`Redactor::text`] the free text held at the top-level
    /// `keys` of the arguments it masks (a held result's `preview`, the first characters of a
    /// result that may echo a redacted value). Found by review: a held result's preview went
    /// to webhooks, Slack and AAEP in clear beside its masked call.
    pub fn with_free_text(mut self, keys: &[&str]) -> Self {
        self.free_text = keys.iter().map(|k| k.to_string()).collect();
        self
    }

    /// Whether it masks anything.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Whether masking `arguments` hides anything: some redacted path names a value in them
    /// (even one that is already the text [`MASK`]). A surface that shows only the masked call
    /// (a Slack card, an AAEP confirmation) must then not offer to approve it: the approval
    /// binds the real values (the call hash), which that surface never showed.
    ///
    /// Attack (found by review): a rule redacts `card.number`; the agent proposes a refund to
    /// its own card, and "Approve once" on a card showing `[redacted]` approved it.
    pub fn hides_anything(&self, arguments: &Value) -> bool {
        // The walk is one for reading and masking, so it reads a copy.
        let mut copy = arguments.clone();
        let mut found = false;
        for p in &self.paths {
            visit(&mut copy, p, &mut |_| found = true);
        }
        found
    }

    /// A copy of `arguments` with every value at a redacted path replaced by [`MASK`].
    pub fn arguments(&self, arguments: &Value) -> Value {
        let mut out = arguments.clone();
        for p in &self.paths {
            visit(&mut out, p, &mut |v| *v = Value::String(MASK.into()));
        }
        for k in &self.free_text {
            if let Some(Value::String(t)) = out.get_mut(k.as_str()) {
                *t = self.cut_text(t);
            }
        }
        out
    }

    /// [`Redactor::text`] of a text that may have been cut short: a redacted value's first
    /// characters (three or more) ending it are masked too (found by review: a held result's
    /// preview, cut at 2,048 characters, ended with the first digits of a card number).
    fn cut_text(&self, text: &str) -> String {
        let mut out = self.text(text);
        let tail = self
            .secrets
            .iter()
            .filter_map(|s| {
                let starts: Vec<usize> = s.char_indices().map(|(i, _)| i).skip(3).collect();
                starts.into_iter().rev().find(|&i| out.ends_with(&s[..i]))
            })
            .max();
        if let Some(n) = tail {
            out.truncate(out.len() - n);
            out.push_str(MASK);
        }
        out
    }

    /// The human summary of `call` generated from its masked arguments: what every text that
    /// leaves the gateway shows instead of the stored summary (which is generated from, and
    /// verified against, the real arguments). With nothing to mask it is the summary of the
    /// call itself.
    pub fn summary(&self, call: &ToolCall) -> String {
        let masked = self.arguments(&call.arguments);
        let canonical = crate::canonical::canonical_value(&masked).unwrap_or_default();
        HumanSummary::generate(call, &canonical).text
    }

    /// `text` with every redacted value's text form replaced by [`MASK`]: the second net for
    /// text rendered from the real arguments. It finds a value only whole, as it is,
    /// JSON-escaped or with [`visible`]'s escapes, so a text that cuts values must be
    /// rendered from [`Redactor::arguments`] instead.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            out = out.replace(s.as_str(), MASK);
        }
        out
    }
}

fn leaves(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.chars().count() >= 3 => {
            // As it appears inside rendered JSON (quotes and escapes).
            let quoted = Value::String(s.clone()).to_string();
            let escaped = quoted[1..quoted.len() - 1].to_string();
            // As templates and reasons show it: control and bidi characters escaped.
            out.push(visible(s).into_owned());
            out.push(visible(&escaped).into_owned());
            out.push(escaped);
            // As a Rust debug string (`{:?}`, the scope triggers' reasons): `\u{202e}`.
            let debug = format!("{s:?}");
            out.push(debug[1..debug.len() - 1].to_string());
            out.push(s.clone());
        }
        Value::Number(n) if n.to_string().len() >= 3 => {
            out.push(n.to_string());
            if let Ok(c) = crate::canonical::canonical_value(v) {
                out.push(c);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| leaves(x, out)),
        Value::Object(m) => m.values().for_each(|x| leaves(x, out)),
        _ => {}
    }
}

/// Calls `f` on every value at `path` (a `*` segment: each key or element) under `v`.
fn visit(v: &mut Value, path: &[String], f: &mut dyn FnMut(&mut Value)) {
    let Some((first, rest)) = path.split_first() else {
        f(v);
        return;
    };
    let children: Vec<&mut Value> = match (v, first.as_str()) {
        (Value::Object(m), "*") => m.values_mut().collect(),
        (Value::Array(a), "*") => a.iter_mut().collect(),
        (Value::Object(m), k) => m.get_mut(k).into_iter().collect(),
        (Value::Array(a), k) => k
            .parse::<usize>()
            .ok()
            .and_then(|i| a.get_mut(i))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    for child in children {
        visit(child, rest, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Found by review: a held result's preview went out in clear, and a value cut at its end
    /// too.
    #[test]
    fn a_held_results_preview_is_masked_even_where_it_was_cut() {
        let args = json!({"call": {"arguments": {"card": {"number": "4111111111111111"}}},
                          "preview": "charged 4111111111111111 then 41111111"});
        let paths = ["card.number".to_string()];
        let r = Redactor::under(&args, &paths, &["call", "arguments"]).with_free_text(&["preview"]);
        let out = r.arguments(&args);
        assert_eq!(out["preview"], "charged [redacted] then [redacted]");
        assert_eq!(out["call"]["arguments"]["card"]["number"], MASK);
        // Two characters are not enough to mask ("41" ends many texts).
        let short = json!({"call": {"arguments": {"card": {"number": "4111111111111111"}}},
                           "preview": "total 41"});
        assert_eq!(r.arguments(&short)["preview"], "total 41");
    }

    /// Attack/accident: a tool with flat dotted parameter names sends `{"card.number": …}`;
    /// the template reads it (literal key first) while a nested-only walk masked nothing.
    #[test]
    fn a_redacted_dotted_path_also_masks_a_literal_key_spelled_with_its_dots() {
        let args = json!({"card.number": "4111111111111111", "amount": 5});
        let r = Redactor::new(&args, &["card.number".to_string()]);
        assert_eq!(
            r.arguments(&args),
            json!({"card.number": MASK, "amount": 5})
        );
        assert_eq!(
            r.text("pay with 4111111111111111"),
            format!("pay with {MASK}")
        );
        let nested = json!({"card": {"number": "4111111111111111"}});
        assert_eq!(
            Redactor::new(&nested, &["card.number".to_string()]).arguments(&nested),
            json!({"card": {"number": MASK}})
        );
    }

    /// What a masked copy would hide decides whether a surface showing only that copy may
    /// offer to approve the call: any value at a redacted path (nested, dotted key, wildcard,
    /// even one spelled like the mask), and nothing when no path names a value.
    #[test]
    fn hides_anything_is_true_exactly_when_a_redacted_path_names_a_value() {
        let paths = ["card.number".to_string(), "headers.*".to_string()];
        let hides = |args: Value| Redactor::new(&args, &paths).hides_anything(&args);
        assert!(hides(json!({"amount": 5, "card": {"number": "4111"}})));
        assert!(hides(json!({"card.number": 7})));
        assert!(hides(json!({"headers": {"a": null}})));
        assert!(hides(json!({"card": {"number": MASK}})));
        assert!(hides(json!({"card": {"number": {"deep": [1, 2]}}})));
        assert!(!hides(json!({"amount": 5, "card": {"exp": "12/30"}})));
        assert!(!hides(json!({"headers": {}, "card": "4111"})));
        assert!(!hides(json!("card.number")));
        let args = json!({"card": {"number": "4111"}});
        assert!(!Redactor::new(&args, &[]).hides_anything(&args));
    }

    #[test]
    fn masks_paths_wildcards_and_rendered_text_but_not_the_original() {
        let args = json!({"card": {"number": "4111111111111111", "exp": "12/30"},
                          "amount": 120, "headers": {"a": "secret-a", "b": "secret-b"},
                          "to": [{"email": "x@example.com"}, {"email": "y@example.com"}]});
        let r = Redactor::new(
            &args,
            &[
                "card.number".into(),
                "headers.*".into(),
                "to.*.email".into(),
                "missing.path".into(),
            ],
        );
        let out = r.arguments(&args);
        assert_eq!(out["card"]["number"], MASK);
        assert_eq!(out["card"]["exp"], "12/30");
        assert_eq!(out["headers"], json!({"a": MASK, "b": MASK}));
        assert_eq!(out["to"][1]["email"], MASK);
        assert_eq!(out["amount"], 120);
        assert_eq!(
            args["card"]["number"], "4111111111111111",
            "the original is unchanged"
        );
        let text = r.text("Pay with 4111111111111111 to x@example.com (12/30)");
        assert_eq!(text, "Pay with [redacted] to [redacted] (12/30)");
        assert!(Redactor::new(&args, &[]).is_empty());
    }

    /// The shapes a renderer gives a value — control and bidi characters escaped the
    /// template's way, inside JSON the reason's way, or Rust's `{:?}` way — are all masked
    /// by the second net.
    #[test]
    fn the_net_finds_a_secret_escaped_as_templates_reasons_and_triggers_show_it() {
        let secret = "line one\n\tline two \u{202e}evil\u{85}";
        let args = json!({"key": secret, "host": "web-1"});
        let r = Redactor::new(&args, &["key".into()]);
        let shown = [
            visible(secret).into_owned(),
            crate::template::visible_json(&args),
            format!("{secret:?}"),
            crate::canonical::canonical_value(&args).unwrap(),
        ];
        for text in shown {
            let masked = r.text(&text);
            assert!(
                !masked.contains("line one") && !masked.contains("evil"),
                "{text} -> {masked}"
            );
        }
    }

    /// A summary cuts a long value to 120 characters, so masking its text afterwards finds
    /// nothing: the summary that leaves is generated from the masked call.
    #[test]
    fn a_long_secret_is_not_in_the_summary_of_the_masked_call() {
        let token: String = (0..200)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        let call = ToolCall::new("deploy", None, json!({"token": token, "host": "web-1"})).unwrap();
        let r = Redactor::new(&call.arguments, &["token".into()]);
        let stored = HumanSummary::generate(&call, &call.canonical_arguments().unwrap()).text;
        assert!(
            stored.contains(&token[..100]),
            "the stored summary shows it: {stored}"
        );
        assert!(
            r.text(&stored).contains(&token[..100]),
            "the net cannot find a cut value"
        );
        let out = r.summary(&call);
        assert_eq!(
            out,
            r#"Call `deploy` with host = "web-1", token = "[redacted]""#
        );
        assert_eq!(Redactor::new(&call.arguments, &[]).summary(&call), stored);
    }

    /// Found by review: a held result's call arguments sit under `call.arguments`, where its
    /// call's paths, read at the top, named nothing. Read below the prefix, both forms of a
    /// dotted path are masked there, and nothing else.
    #[test]
    fn paths_under_a_prefix_mask_the_call_inside_a_held_result() {
        let held = json!({"call": {"arguments": {"card": {"number": "4111-1111"},
                          "card.number": "5555-5555"}}, "output_bytes": 5000});
        let r = Redactor::under(&held, &["card.number".into()], &["call", "arguments"]);
        let m = r.arguments(&held);
        assert_eq!(m["call"]["arguments"]["card"]["number"], MASK);
        assert_eq!(m["call"]["arguments"]["card.number"], MASK);
        assert_eq!(m["output_bytes"], 5000);
        assert!(r.hides_anything(&held));
        assert_eq!(r.text("paid with 4111-1111"), format!("paid with {MASK}"));
        let top = Redactor::new(&held, &["card.number".into()]);
        assert!(
            !top.hides_anything(&held),
            "read at the top, the path names nothing"
        );
    }
}
