//! U+0000 (NUL) at the edge. PostgreSQL's `text` cannot hold it: an agent that slipped one into
//! a session id, a reason or an answer would make every write of that text fail (`503` for
//! each of the agent's proposals on a Postgres store) or be cut short. Every identifier and
//! text the gateway stores is refused with a `400` naming the field, and nothing is stored; a
//! call's arguments (kept only as canonical JSON text, where it is escaped) keep it, exactly.
//! The same for the other characters that act on a display rather than being shown (ESC, the
//! C1 CSI, bidi overrides): refused in ids, shown as escapes where arguments are displayed.

use crate::kit::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

const BOT: &str = "bot-key";
const OP: &str = "alice-key";

/// Asserts a `400 BAD_REQUEST` whose message names `field` and the NUL.
#[track_caller]
fn refused(r: (StatusCode, Value), field: &str) {
    let (s, b) = r;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", field);
    assert_says(&b, "message", "U+0000");
}

/// Every audit record of the gateway's database.
fn records(gw: &Gw) -> i64 {
    gw.sql().int("SELECT count(*) FROM audit", &[])
}

#[tokio::test]
async fn a_session_id_or_any_other_id_with_a_nul_is_refused_naming_it_and_nothing_is_stored() {
    let gw = serve().await;
    let before = records(&gw);
    let base = json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {}});
    for (field, value) in [
        ("session_id", "s1\u{0}"),
        ("agent", "bot\u{0}"),
        ("tool", "re\u{0}ad"),
        ("server", "fs\u{0}"),
        ("run_id", "\u{0}"),
        ("device_id", "d\u{0}"),
        ("trace_id", "\u{0}"),
        ("plan_id", "\u{0}"),
        ("step_id", "\u{0}"),
    ] {
        let mut body = base.clone();
        body[field] = json!(value);
        refused(
            gw.post("/v1/tool-calls", BOT, body).await,
            &format!("`/{field}`"),
        );
    }
    assert_eq!(records(&gw), before, "nothing was stored");
    // The same session without the NUL is served as ever.
    let (s, b) = gw.post("/v1/tool-calls", BOT, base).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    gw.stop().await;
}

#[tokio::test]
async fn a_nul_inside_a_calls_arguments_is_kept_exactly_and_binds_its_token() {
    let gw = serve().await;
    let args = json!({"amount": 500, "to": "bob", "memo": "a\u{0}b", "k\u{0}": ["\u{0}"]});
    let (s, b) = gw.propose("read", args.clone()).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    let id = gw.pending("pay", args.clone()).await;
    let (_, a) = gw.approval(&id, OP).await;
    assert_eq!(a["call"]["arguments"], args, "{a}");
    // Found by review: the summary and message rendered from the arguments are stored as
    // text; they show the NUL as a visible escape and hold none.
    for field in ["human_summary", "message"] {
        let text = a[field].as_str().unwrap();
        assert!(!text.contains('\u{0}'), "{field}: {text:?}");
    }
    assert_says(&a, "human_summary", "k\\u0000\" = ");
    // An operator's edit may hold it too.
    let mut edited = args.clone();
    edited["memo"] = json!("c\u{0}d");
    let (s, b) = gw.edit(&id, edited.clone()).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let token = token_of(&gw.as_agent(&id).await);
    // The token binds the exact arguments: with the NUL elsewhere it is another call.
    let mut other = edited.clone();
    other["memo"] = json!("cd\u{0}");
    let (s, b) = gw.redeem(&token, "pay", other, None).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOKEN_MISMATCH");
    let (s, b) = gw.redeem(&token, "pay", edited, None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

#[tokio::test]
async fn a_nul_in_a_reason_scope_question_or_answer_is_refused_and_changes_nothing() {
    let gw = serve().await;
    let id = gw.pending("pay", json!({"amount": 500, "to": "bob"})).await;
    let (decide, cancel) = (
        format!("/v1/approvals/{id}/decision"),
        format!("/v1/approvals/{id}/cancel"),
    );
    for (path, key, body, field) in [
        (
            &decide,
            OP,
            json!({"decision": "deny", "reason": "no\u{0}"}),
            "`/reason`",
        ),
        (
            &decide,
            OP,
            json!({"decision": "approve", "scope": "session\u{0}"}),
            "`/scope`",
        ),
        (&cancel, BOT, json!({"reason": "\u{0}"}), "`/reason`"),
    ] {
        refused(gw.post(path, key, body).await, field);
    }
    let (_, a) = gw.approval(&id, OP).await;
    assert_eq!(a["status"], "pending", "{a}");

    let ask = json!({"agent": "bot", "session_id": "s1", "question": "Which account?", "accepted_response_kinds": ["freetext"]});
    for (field, value) in [("question", "Which\u{0}?"), ("context", "\u{0}")] {
        let mut body = ask.clone();
        body[field] = json!(value);
        refused(
            gw.post("/v1/clarifications", BOT, body).await,
            &format!("`/{field}`"),
        );
    }
    let (s, c) = gw.post("/v1/clarifications", BOT, ask).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{c}");
    let cid = c["id"].as_str().unwrap();
    let answer = format!("/v1/clarifications/{cid}/answer");
    refused(
        gw.post(&answer, OP, json!({"response": "acct\u{0}1"}))
            .await,
        "`/response`",
    );
    let (s, b) = gw.post(&answer, OP, json!({"response": "acct-1"})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

#[tokio::test]
async fn a_nul_in_a_path_query_or_form_field_is_refused_before_any_handler() {
    let gw = serve().await;
    let before = records(&gw);
    let (s, b) = gw
        .req("POST", "/v1/sessions/s1%00/cancel", Some(BOT), None)
        .await;
    refused((s, b), "the request path");
    let (s, b) = gw.get("/v1/approvals/abc%00", OP).await;
    refused((s, b), "the request path");
    let (s, b) = gw
        .get("/v1/approvals?status=pending&agent=bot%00", OP)
        .await;
    refused((s, b), "query parameter `agent`");
    let resp = gw
        .http
        .post(format!("{}/ui/login", gw.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("csrf=x&key=abc%00&next=/ui")
        .send()
        .await
        .unwrap();
    let s = resp.status();
    refused((s, resp.json().await.unwrap()), "form field `key`");
    assert_eq!(records(&gw), before, "nothing was stored");
    gw.stop().await;
}

/// Attack (found by review): terminal spoofing. An agent's session id or tool name holding an
/// escape sequence or a carriage return would be printed raw on the operator's terminal by
/// `assent pending` and `watch`, rewriting the card (for example the arguments line). No id
/// has a use for a control character: refused, naming the field and the character.
#[tokio::test]
async fn an_id_with_a_terminal_escape_sequence_is_refused() {
    let gw = serve().await;
    for (field, value, says) in [
        (
            "session_id",
            "s1\u{1b}[2A\r",
            "characters (U+001B at byte 2)",
        ),
        ("tool", "read\u{9b}", "characters (U+009B at byte 4)"),
        ("run_id", "r\n1", "characters (U+000A at byte 1)"),
        // Found by review: a name that looks like another (`read<U+200B>`, a right-to-left
        // override) on every card.
        (
            "tool",
            "read\u{200b}",
            "bidirectional formatting characters (U+200B at byte 4)",
        ),
        (
            "session_id",
            "s\u{202e}1",
            "bidirectional formatting characters (U+202E at byte 1)",
        ),
        // A format character outside the default-ignorable list, drawn with no width
        // (found by review: `read<U+FFFB>` passed and looked like `read`).
        (
            "tool",
            "read\u{fffb}",
            "bidirectional formatting characters (U+FFFB at byte 4)",
        ),
        (
            "tool",
            "read\u{0600}",
            "bidirectional formatting characters (U+0600 at byte 4)",
        ),
    ] {
        let mut body = json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {}});
        body[field] = json!(value);
        let (s, b) = gw.post("/v1/tool-calls", BOT, body).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
        assert_says(&b, "message", field);
        assert_says(&b, "message", says);
    }
    gw.stop().await;
}

/// Attack (found by review): a question, a plan and a Confirm took any session id, so one of
/// 100 KB with terminal escapes was stored (and `POST /v1/sessions/{id}/cancel`, which checks
/// the id, could then not withdraw it), and a question's `context` had no bound of its own.
/// Refused, naming the field; nothing is stored.
#[tokio::test]
async fn questions_plans_and_confirms_check_their_session_id_like_every_route() {
    let gw = serve().await;
    let before = records(&gw);
    let long = "s".repeat(300);
    let question = json!({"agent": "bot", "question": "Which account?", "accepted_response_kinds": ["freetext"]});
    let plan = json!({"agent": "bot", "plan": {}});
    let confirm = json!({"agent": "bot", "target_type": "context",
        "target_id": "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"});
    for session in ["s1\u{1b}[2J\u{202e}", long.as_str(), ""] {
        for (path, base) in [
            ("/v1/clarifications", &question),
            ("/v1/plans", &plan),
            ("/v1/confirms", &confirm),
        ] {
            let mut body = base.clone();
            body["session_id"] = json!(session);
            let (s, b) = gw.post(path, BOT, body).await;
            assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
            assert_says(&b, "message", "session_id");
        }
    }
    let mut body = question.clone();
    body["session_id"] = json!("s1");
    body["context"] = json!("c".repeat(16_385));
    let (s, b) = gw.post("/v1/clarifications", BOT, body).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "context");
    assert_eq!(records(&gw), before, "nothing was stored");
    gw.stop().await;
}

/// Attack (found by review): the NUL check in front of every route reads only bodies labelled
/// `application/x-www-form-urlencoded`, and the dashboard parsed any body as a form, so a
/// decision form sent as `text/plain` carried a NUL into the stored reason (and on PostgreSQL,
/// which stores no NUL, failed the write). A field sent twice was read as its last value, so
/// a proxy reading the first saw a different decision. Both are refused wherever the form is
/// read, whatever its label; nothing is decided.
#[tokio::test]
async fn a_dashboard_form_with_a_nul_or_a_field_sent_twice_is_refused_whatever_its_content_type() {
    let gw = serve().await;
    let id = gw.pending("pay", json!({"amount": 500, "to": "bob"})).await;
    let cookie = gw.dashboard_session().await;
    let card_path = format!("/ui/approvals/{id}");
    let csrf = csrf_of(&gw.dashboard_page(&card_path, &cookie).await);
    let before = records(&gw);
    for (content_type, body, says) in [
        (
            "text/plain",
            format!("csrf={csrf}&decision=deny&reason=no%00pe"),
            "U+0000",
        ),
        (
            "Application/X-WWW-Form-Urlencoded",
            format!("csrf={csrf}&decision=deny&reason=no%00pe"),
            "U+0000",
        ),
        (
            "application/x-www-form-urlencoded",
            format!("csrf={csrf}&decision=deny&reason=no&decision=approve"),
            "`decision` is sent twice",
        ),
    ] {
        let resp = gw
            .dashboard_post(&format!("{card_path}/decide"), &cookie, content_type, body)
            .await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{content_type}");
        let page = resp.text().await.unwrap();
        assert!(page.contains(says), "{content_type}: {page}");
        assert!(page.contains("Nothing was changed"), "{page}");
    }
    assert_eq!(gw.approval(&id, OP).await.1["status"], "pending");
    assert_eq!(records(&gw), before, "nothing was stored");
    gw.stop().await;
}

/// Attack (found by review): display spoofing on the dashboard. An argument with a
/// right-to-left override (U+202E) or the one-byte CSI (U+009B) was shown raw in the card's
/// message, its reason ("to = …") and its arguments, so `ext-<RLO>eciffo-tsop` read as
/// another recipient. Each is now a visible `\uXXXX` escape (JSON's own in the arguments, so
/// the approve form still sends the same value: approving unchanged is no edit).
#[tokio::test]
async fn an_argument_with_a_bidi_override_or_c1_control_is_shown_escaped_on_the_dashboard() {
    let to = "bob\u{202e}eciffo-tsop\u{9b}2K";
    shown_escaped_and_approved_unchanged(to, r"bob\u202eeciffo-tsop\u009b2K").await;
}

/// Attack (found by review): text the operator cannot see. A recipient holding a zero-width
/// space and "ASCII smuggling" in Unicode tag characters (U+E0000 block: a model reading the
/// call sees the letters, the screen shows nothing) looked like plain `bob` on the card. They
/// are escapes now (a surrogate pair above U+FFFF), and the editor's JSON is the same value.
#[tokio::test]
async fn an_argument_with_invisible_characters_is_shown_escaped_on_the_dashboard() {
    let to = "bob\u{200b}\u{e0065}\u{e0076}";
    shown_escaped_and_approved_unchanged(to, r"bob\u200b\udb40\udc65\udb40\udc76").await;
}

/// A `pay` call to `to` is held; its card shows none of `to`'s raw characters but `escaped`
/// in the message ("Pay 500 to …?") and the arguments, and approving the editor's arguments
/// as shown approves the call unchanged (no edit).
async fn shown_escaped_and_approved_unchanged(to: &str, escaped: &str) {
    let gw = serve().await;
    let id = gw.pending("pay", json!({"amount": 500, "to": to})).await;
    let cookie = gw.dashboard_session().await;
    let card_path = format!("/ui/approvals/{id}");
    let page = gw.dashboard_page(&card_path, &cookie).await;
    let raw = to
        .chars()
        .filter(|c| !c.is_ascii_alphanumeric() && *c != '-');
    for c in raw {
        assert!(
            !page.contains(c),
            "U+{:04X} shown raw: {page}",
            u32::from(c)
        );
    }
    assert!(page.contains(&format!("Pay 500 to {escaped}?")), "{page}");
    assert!(page.contains(&format!("{escaped}&#34;")), "{page}");
    let csrf = csrf_of(&page);
    let editor = page.split("name=\"arguments\"").nth(1).unwrap();
    let editor = editor
        .split('>')
        .nth(1)
        .unwrap()
        .split("</textarea")
        .next()
        .unwrap();
    let shown: Value = serde_json::from_str(&editor.replace("&#34;", "\"")).unwrap();
    assert_eq!(
        shown,
        json!({"amount": 500, "to": to}),
        "the editor holds the same value"
    );
    let form = serde_urlencoded::to_string([
        ("csrf", csrf.as_str()),
        ("decision", "approve"),
        ("scope", "once"),
        ("arguments", editor.replace("&#34;", "\"").as_str()),
    ])
    .unwrap();
    let resp = gw
        .dashboard_post(
            &format!("{card_path}/decide"),
            &cookie,
            "application/x-www-form-urlencoded",
            form,
        )
        .await;
    assert!(
        resp.status().is_success() || resp.status().is_redirection(),
        "{}",
        resp.status()
    );
    let (_, a) = gw.approval(&id, OP).await;
    assert_eq!(a["status"], "approved", "{a}");
    assert_eq!(
        a["arguments_changed"], false,
        "approving the shown arguments is no edit: {a}"
    );
    gw.stop().await;
}
