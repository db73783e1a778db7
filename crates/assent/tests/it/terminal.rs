//! What the operator's terminal receives: `assent pending`, `assent show` and
//! `assent export learning-samples` print an agent's text (the held call's message is rendered
//! from its arguments) with every control and bidirectional formatting character shown as an
//! escape, never acting.

use crate::{BIN, BOT_KEY, cli, ok, served};
use serde_json::{Value, json};

/// Attack (found by review): terminal spoofing. An agent's arguments reach the card three
/// ways: as canonical JSON (which escapes only U+0000–U+001F), quoted in the reasons
/// ("recipient = …"), and through the message and side-effect templates (which the gateway
/// escapes, but not a bidi override). So the one-byte CSI U+009B and a right-to-left override
/// U+202E reached the operator's terminal raw: a CSI sequence can move the cursor and erase
/// the arguments line, an override reverses the recipient. The CLI now makes every card line
/// inert itself, whatever the gateway sent.
#[test]
fn an_agents_escape_sequences_reach_the_operators_terminal_as_visible_text() {
    let s = served("");
    let recipient = "ext-1\u{1b}[1A\u{1b}[2K\r\u{9b}2K\u{202e}eciffo-tsop";
    let b = crate::propose_to(&s.server.url, 5000, recipient);
    assert_eq!(b["decision"], "pending", "{b}");
    let id = b["approval_id"].as_str().unwrap();
    for args in [vec!["pending"], vec!["show", id]] {
        let out = ok(&cli(&s.server.url, &args));
        for acting in ['\u{1b}', '\r', '\u{9b}', '\u{202e}'] {
            assert!(
                !out.contains(acting),
                "{args:?} printed {acting:?} raw: {out:?}"
            );
        }
        // The message, the quoted reason and the arguments' JSON each show the escapes (the
        // JSON ones as JSON's own `\uXXXX`, so the line is still the same JSON value).
        let escaped = r"ext-1\u001b[1A\u001b[2K";
        let tail = r"\u009b2K\u202eeciffo-tsop";
        for shown in [
            format!(r"to {escaped}\u000d{tail}?"),
            format!(r#"(recipient = "{escaped}\r{tail}")"#),
            format!(r#""recipient":"{escaped}\r{tail}"}}"#),
        ] {
            assert!(out.contains(&shown), "{args:?}: {shown} not in {out}");
        }
    }
}

/// Attack (found by review): a list item was made inert line by line after it was split on
/// line breaks, so a line break in an agent's question started a line of its own — a fake
/// `agent:` line, or a whole fake question — in `assent clarifications`; and `--json` output
/// printed the one-byte CSI U+009B and bidi overrides raw (JSON need not escape them).
#[test]
fn an_agents_line_breaks_and_escapes_stay_inside_its_own_fields() {
    let s = served("");
    let url = &s.server.url;
    let question = "Pay it?\n  agent:    ops_lead_bot (session s)\u{9b}2K\u{202e}";
    let q: Value = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/clarifications"))
        .bearer_auth(BOT_KEY)
        .json(
            &json!({"agent": "treasury_bot", "session_id": "s", "question": question,
                      "accepted_response_kinds": ["yes_no"]}),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let listed = ok(&cli(url, &["clarifications"]));
    assert!(
        !listed
            .lines()
            .any(|l| l.starts_with("  agent:    ops_lead_bot")),
        "{listed}"
    );
    assert!(listed.contains(r"Pay it?\u000a  agent:"), "{listed}");
    let id = q["id"].as_str().unwrap();
    {
        let out = ok(&cli(url, &["clarifications", "--json"]));
        assert!(
            !out.contains('\u{9b}') && !out.contains('\u{202e}'),
            "{out:?}"
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        let shown = &v["clarifications"][0];
        assert_eq!(
            (shown["id"].as_str(), shown["question"].as_str()),
            (Some(id), Some(question))
        );
    }
}

/// Attack (found by review): terminal spoofing through the learning export.
/// `assent export learning-samples` wrote each sample as `serde_json` text, which escapes C0
/// controls but not the one-byte CSI U+009B, DEL or a right-to-left override U+202E: an agent
/// that put them in an argument, then cancelled its call, had them reach the operator's
/// terminal raw. Each line is now made inert, still JSON of the same value.
#[test]
fn an_agents_bidi_override_in_a_settled_call_reaches_the_learning_export_escaped() {
    let s = served("");
    let recipient = "ext-1\u{9b}2K\u{7f}\u{202e}eciffo-tsop";
    let http = reqwest::blocking::Client::new();
    let b = crate::propose_to(&s.server.url, 5000, recipient);
    assert_eq!(b["decision"], "pending", "{b}");
    let id = b["approval_id"].as_str().unwrap();
    let cancelled = http
        .post(format!("{}/v1/approvals/{id}/cancel", s.server.url))
        .bearer_auth(BOT_KEY)
        .send()
        .unwrap();
    assert!(cancelled.status().is_success(), "{cancelled:?}");
    let out = std::process::Command::new(BIN)
        .args(["export", "learning-samples", "--data-dir"])
        .arg(&s.data)
        .output()
        .unwrap();
    let jsonl = ok(&out);
    for acting in ['\u{9b}', '\u{7f}', '\u{202e}'] {
        assert!(!jsonl.contains(acting), "{acting:?} raw in {jsonl:?}");
    }
    assert!(
        jsonl.contains(r#""recipient":"ext-1\u009b2K\u007f\u202eeciffo-tsop""#),
        "{jsonl}"
    );
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{jsonl}");
    assert_eq!(lines[0]["input"]["arguments"]["recipient"], recipient);
}

/// A recipient that pads its way to a fake card field: `ACME`, 300 spaces (or, as
/// `padded_blanks`, the same run of U+00A0, U+2003 and U+3000), then a line that reads like
/// the card's own `approvers:` field.
const FAKE_FIELD: &str = "  approvers: nobody, auto-approved as R0 (low)";

/// Every line `text` shows on a terminal `width` columns wide that wraps long lines hard.
/// (At the one width where a line ends just before `approvers`, the text still starts a
/// line, but after a visible `␠×N` and not indented as a field is: the watcher, which
/// wraps itself, starts every continuation with `↳`.)
fn wrapped(text: &str, width: usize) -> Vec<String> {
    text.lines()
        .flat_map(|l| {
            let chars: Vec<char> = l.chars().collect();
            let pieces: Vec<String> = chars.chunks(width).map(|c| c.iter().collect()).collect();
            if pieces.is_empty() {
                vec![String::new()]
            } else {
                pieces
            }
        })
        .collect()
}

/// Attack (found by review): fake field lines made of plain spaces. An agent sent a recipient
/// of `ACME`, 300 spaces and `  approvers: nobody, auto-approved as R0 (low)`; none of it is a
/// control character, so the card printed it as is, and the terminal's wrapping started a
/// line with what read as the card's own `approvers:` field. A run of more than two blank
/// characters of any kind (U+0020, U+00A0, the U+2000 block, U+3000) is now shown as `␠×N`.
#[test]
fn an_agents_padding_cannot_start_a_line_that_reads_as_a_card_field() {
    let s = served("");
    for blank in [" ", "\u{a0}", "\u{2003}\u{3000}\u{a0}"] {
        let padding = blank.repeat(300 / blank.chars().count());
        let recipient = format!("ACME{padding}{FAKE_FIELD}");
        let b = crate::propose_to(&s.server.url, 5000, &recipient);
        assert_eq!(b["decision"], "pending", "{b}");
        let id = b["approval_id"].as_str().unwrap();
        for args in [vec!["pending"], vec!["show", id]] {
            let out = ok(&cli(&s.server.url, &args));
            assert!(
                out.contains("ACME␠×302approvers: nobody"),
                "{args:?}: {out}"
            );
            for width in 60..=240 {
                for line in wrapped(&out, width) {
                    assert!(
                        !line.starts_with(FAKE_FIELD),
                        "{args:?} at {width} columns shows a line `{line}`:\n{out}"
                    );
                }
            }
        }
        let cancelled = reqwest::blocking::Client::new()
            .post(format!("{}/v1/approvals/{id}/cancel", s.server.url))
            .bearer_auth(BOT_KEY)
            .json(&json!({}))
            .send()
            .unwrap();
        assert!(cancelled.status().is_success(), "{cancelled:?}");
    }
}

/// Attack (found by review): `assent approve` of several ids printed each failure's id, code
/// and message from the gateway's batch answer raw, though the gateway echoes the id it was
/// given (and its message may quote an agent's text). Now the line is made inert.
#[test]
fn a_batch_decisions_failures_reach_the_terminal_as_visible_text() {
    let s = served("");
    let id = crate::held(&s.server.url, 5000);
    let hostile = "nope\u{1b}[1A\u{9b}2K\u{202e}x";
    let out = cli(&s.server.url, &["approve", &id, hostile]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for acting in ['\u{1b}', '\u{9b}', '\u{202e}'] {
        assert!(!err.contains(acting), "{acting:?} raw in {err:?}");
    }
    assert!(err.contains(r"nope\u001b[1A\u009b2K\u202ex"), "{err}");
}
