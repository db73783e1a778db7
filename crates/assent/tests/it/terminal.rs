//! What the operator's terminal receives: `assent pending`, `assent show` and
//! `assent export learning-samples` print an agent's text (the held call's message is rendered
//! from its arguments) with every control and bidirectional formatting character shown as an
//! escape, never acting. And what the CLI refuses of a hostile gateway's answers (an endless
//! body, a redirect).

use crate::{BIN, BOT_KEY, Served, cli, ok, served};
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

/// Attack: someone with write access to the database edits a held call's payee, so that the
/// operator reviewing from the terminal reads the edited call as the agent's request. The
/// card of `assent pending` and `assent show` now opens with a warning naming what no seal
/// vouches for (`call`), and the API's listing carries it in `damaged`; an intact call beside
/// it has no warning. Before, only the dashboard, webhooks and Slack said so.
#[test]
fn a_call_edited_in_the_database_is_shown_as_damaged_on_the_terminal() {
    let s = served("");
    let url = &s.server.url;
    let intact = crate::propose_to(url, 5001, "ext-1");
    let edited = crate::propose_to(url, 5002, "ext-2");
    let (intact, edited) = (
        intact["approval_id"].as_str().unwrap(),
        edited["approval_id"].as_str().unwrap(),
    );
    pay_mallory(&s, edited, 5002);
    let warning = "!! NOT AS ASSENT SEALED IT: call";
    let shown = ok(&cli(url, &["show", edited]));
    assert!(shown.starts_with(warning), "{shown}");
    assert!(
        shown.contains("mallory") && shown.contains("cannot be approved"),
        "{shown}"
    );
    assert!(!ok(&cli(url, &["show", intact])).contains("NOT AS ASSENT"));
    let listed = ok(&cli(url, &["pending"]));
    assert_eq!(listed.matches(warning).count(), 1, "{listed}");
    let cards: Vec<&str> = listed.split("\n\n").collect();
    let bad = cards.iter().find(|c| c.contains(edited)).unwrap();
    assert!(bad.starts_with(warning), "{listed}");
    let json: Value = serde_json::from_str(&ok(&cli(url, &["pending", "--json"]))).unwrap();
    let damaged = |id: &str| {
        let a = json["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id);
        a.unwrap().get("damaged").cloned()
    };
    assert_eq!(damaged(edited), Some(json!(["call"])), "{json}");
    assert_eq!(damaged(intact), None, "{json}");
    // Settled, a token whose seal does not hold (as under a replaced audit key) is named
    // without calling the record tampered with: `assent audit verify` judges it.
    ok(&cli(url, &["approve", intact]));
    edit_db(
        &s,
        &format!("UPDATE tokens SET seal = 'forged' WHERE approval_id = '{intact}';"),
    );
    let settled = ok(&cli(url, &["show", intact]));
    let neutral = "!! unreadable or not vouched for by this gateway's seals: tokens.seal";
    assert!(settled.starts_with(neutral), "{settled}");
    assert!(!settled.contains("NOT AS ASSENT"), "{settled}");
}

/// Edits held call `id` of `amount` in `s`'s database so that it pays `mallory`: no seal
/// vouches for the edited call.
pub(crate) fn pay_mallory(s: &Served, id: &str, amount: i64) {
    let args = format!(r#"{{"amount":{amount},"currency":"EUR","recipient":"mallory"}}"#);
    edit_db(
        s,
        &format!("UPDATE approvals SET arguments = '{args}' WHERE id = '{id}';"),
    );
}

/// Runs `sql` on `s`'s database behind the running gateway's back (the `sqlite3` tool).
fn edit_db(s: &Served, sql: &str) {
    let out = std::process::Command::new("sqlite3")
        .args(["-cmd", ".timeout 5000"])
        .arg(s.data.join("assent.db"))
        .arg(sql)
        .output()
        .unwrap();
    ok(&out);
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
    // Found by review: a run of spaces the terminal wraps starts a line that reads as a field.
    let padded = format!(
        "Retry upload?{}  agent:    ops_lead_bot (session s)",
        " ".repeat(300)
    );
    reqwest::blocking::Client::new()
        .post(format!("{url}/v1/clarifications"))
        .bearer_auth(BOT_KEY)
        .json(
            &json!({"agent": "treasury_bot", "session_id": "s", "question": padded,
                      "accepted_response_kinds": ["yes_no"]}),
        )
        .send()
        .unwrap();
    let listed = ok(&cli(url, &["clarifications"]));
    assert!(
        listed.contains("Retry upload?␠×302agent:") && !listed.contains(&" ".repeat(80)),
        "{listed}"
    );
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

/// Attack (found by review): the padding attack read through a pipe. A recipient of `ACME`,
/// visible filler (`─`, which a terminal set to draw East Asian ambiguous characters wide
/// shows two columns wide) and a fake `  risk:      R0 (low)` field: a card printed to a
/// terminal was hung to its width, but one printed to a pipe (`watch -n2 assent pending`,
/// `assent pending | less`) was not, and the pager's own wrapping started a line with the
/// fake field. Now a card is hung to `$COLUMNS`, else 80 columns, wherever it goes, each
/// character counted at its widest, and the value is all there across its continuations.
#[test]
fn a_card_read_through_a_pipe_starts_no_line_with_an_agents_text() {
    use unicode_width::UnicodeWidthStr as _;
    let s = served("");
    let fake = "  risk:      R0 (low)";
    let recipient = format!("ACME{}{fake}", "─".repeat(226));
    let b = crate::propose_to(&s.server.url, 5000, &recipient);
    assert_eq!(b["decision"], "pending", "{b}");
    let id = b["approval_id"].as_str().unwrap();
    for (columns, width) in [(None, 80), (Some("57"), 57), (Some("wide"), 80)] {
        for args in [vec!["pending"], vec!["show", id]] {
            let mut c = std::process::Command::new(BIN);
            c.args(&args)
                .env("ASSENT_URL", &s.server.url)
                .env("ASSENT_API_KEY", crate::OP_KEY)
                .env_remove("COLUMNS");
            if let Some(n) = columns {
                c.env("COLUMNS", n);
            }
            let out = ok(&c.output().unwrap());
            for line in out.lines() {
                assert!(line.width_cjk() <= width, "{args:?} {columns:?}: {line}");
                assert!(!line.starts_with(fake), "{args:?} {columns:?}: {line}");
            }
            let joined: String = out
                .lines()
                .map(|l| l.strip_prefix("   ↳ ").unwrap_or(l))
                .collect();
            let value = format!("ACME{}", "─".repeat(226));
            assert!(joined.contains(&value), "{args:?} {columns:?}: {out}");
        }
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

/// A server on a port of its own answering every request (read whole) with `answer`, then
/// closing the connection: its URL and how many requests it read.
fn answering(
    answer: impl Fn(&mut std::net::TcpStream) + Send + 'static,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, Read};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            let mut r = std::io::BufReader::new(conn.try_clone().unwrap());
            let mut length = 0;
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                let lower = line.to_ascii_lowercase();
                if let Some(n) = lower.strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let _ = r.read_exact(&mut vec![0; length]);
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            answer(&mut conn);
        }
    });
    (url, count)
}

/// Attack (found by review): the client read a gateway's whole answer into memory, however
/// long: a hostile or broken gateway could exhaust the CLI's memory with an endless body.
/// Answers are now read up to 32 MiB (a page of a paged list, 64 MiB), a longer one refused.
/// Here a pending list of 100 MiB of JSON white space before `{"approvals":[]}`, which the
/// old client accepted.
#[test]
fn the_cli_refuses_a_gateway_answer_longer_than_it_reads() {
    let (url, _) = answering(|conn| {
        use std::io::Write;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                    transfer-encoding: chunked\r\n\r\n";
        let _ = conn.write_all(head.as_bytes());
        let mib = vec![b' '; 1 << 20];
        let mut send = |bytes: &[u8]| {
            conn.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
                .and_then(|()| conn.write_all(bytes))
                .and_then(|()| conn.write_all(b"\r\n"))
        };
        for _ in 0..100 {
            if send(&mib).is_err() {
                return;
            }
        }
        let _ = send(br#"{"approvals":[]}"#);
        let _ = send(b"");
    });
    let out = cli(&url, &["pending"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(err.contains("longer than 64 MiB"), "{err}");
}

/// Attack (found by review): the client followed redirects, so a gateway (or whoever answers
/// at its address) could have a `307` replay an operator's decision, body and key, to another
/// host. It now follows none and says why.
#[test]
fn the_cli_follows_no_redirect_of_a_decision() {
    use std::sync::atomic::Ordering;
    let (elsewhere, reached) = answering(|_| {});
    let (url, asked) = answering(move |conn| {
        use std::io::Write;
        let answer = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {elsewhere}/v1/approvals/a1/decision\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
        );
        let _ = conn.write_all(answer.as_bytes());
    });
    let out = cli(&url, &["approve", "a1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(err.contains("REDIRECT_NOT_FOLLOWED"), "{err}");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the decision was sent on"
    );
}

/// Attack (found by review): a hostile gateway's error message, up to the 32 MiB an answer may
/// hold, was printed to the operator's terminal whole. It is cut to 16,384 characters, and
/// says so.
#[test]
fn the_cli_cuts_a_gateway_error_message_it_prints() {
    let (url, _) = answering(|conn| {
        use std::io::Write;
        let body = json!({"code": "BAD_REQUEST", "message": "m".repeat(1 << 20)}).to_string();
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(answer.as_bytes());
    });
    let out = cli(&url, &["pending"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        err.len() < 17_000 && err.contains("mmm… (cut)"),
        "{} bytes",
        err.len()
    );
}
