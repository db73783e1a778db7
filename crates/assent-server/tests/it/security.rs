//! Attacks on the HTTP API's input, each test named for the attack it stops (issue 10):
//! ambiguous JSON (duplicate keys, numbers a double changes), unauthenticated bodies, oversized
//! fields, and malformed paths or queries answered with errors that are JSON, never a 5xx.
//! Attacks on the API's limits (floods, slow bodies, the pending cap) are in `abuse.rs`.

use crate::kit::{
    BOT, Gw, OP, assert_answer, assert_error, assert_says, serve, serve_with, token_of,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Sends `body` as raw bytes (so it may be JSON no serialiser would write) with `key`.
async fn raw(
    gw: &Gw,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let mut r = gw
        .http
        .request(method.parse().unwrap(), format!("{}{path}", gw.url))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    let resp = r.send().await.unwrap();
    let s = resp.status();
    let text = resp.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({s}): {text}"));
    (s, v)
}

/// Proposes the raw `body` as agent `bot` (`POST /v1/tool-calls`).
async fn propose_raw(gw: &Gw, body: &str) -> (StatusCode, Value) {
    raw(gw, "POST", "/v1/tool-calls", Some(BOT), body).await
}

#[tokio::test]
async fn a_duplicate_key_cannot_make_the_gated_call_differ_from_the_one_that_runs() {
    let gw = serve().await;
    // serde_json keeps the last `amount` (5, under the approval threshold); a first-wins
    // executor would pay 5000. Refused, naming the key path; nothing is recorded.
    let (s, b) = propose_raw(
        &gw,
        r#"{"agent":"bot","session_id":"s","tool":"pay","arguments":{"amount":5000,"to":"bob","amount":5}}"#,
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "DUPLICATE_KEY");
    assert_says(&b, "message", "/arguments/amount");
    // The tool name itself, and a key spelled with an escape, count too.
    for body in [
        r#"{"agent":"bot","session_id":"s","tool":"pay","tool":"read","arguments":{}}"#,
        r#"{"agent":"bot","session_id":"s","tool":"pay","arguments":{"to":"bob","t\u006f":"mallory","amount":1}}"#,
    ] {
        let (s, b) = propose_raw(&gw, body).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, "DUPLICATE_KEY");
    }
    let (_, list) = gw.get("/v1/approvals?status=all", OP).await;
    assert_eq!(list["approvals"], json!([]), "nothing was held");
    // A decision's edit and a redemption are read the same way.
    let id = gw.pending("pay", json!({"amount": 500, "to": "bob"})).await;
    let (s, b) = raw(
        &gw,
        "POST",
        &format!("/v1/approvals/{id}/decision"),
        Some(OP),
        r#"{"decision":"approve","arguments":{"amount":10,"to":"bob","to":"mallory"}}"#,
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "DUPLICATE_KEY");
    let (_, rec) = gw.approval(&id, OP).await;
    assert_eq!(rec["status"], "pending", "the refused edit decided nothing");
    gw.stop().await;
}

#[tokio::test]
async fn numbers_a_double_would_change_are_refused_so_two_calls_never_share_a_hash() {
    let gw = serve().await;
    for (amount, why) in [
        ("18446744073709551616", "2^64: serde_json made it a double"),
        ("18446744073709551617", "shares 2^64's double"),
        ("9007199254740993", "2^53 + 1"),
        (
            "9007199254740993.0",
            "a decimal beyond the double's precision",
        ),
        ("1e400", "beyond the largest double"),
        ("0.1000000000000000000001", "rounds to 0.1"),
    ] {
        let body = format!(
            r#"{{"agent":"bot","session_id":"s","tool":"pay","arguments":{{"amount":{amount},"to":"bob"}}}}"#
        );
        let (s, b) = propose_raw(&gw, &body).await;
        assert_eq!(
            (s, b["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("INEXACT_NUMBER")),
            "{amount} ({why}): {b}"
        );
        assert!(b["message"].as_str().unwrap().contains(amount), "{b}");
    }
    // What a double carries exactly passes, and the operator sees the value that was sent.
    let (s, b) = propose_raw(
        &gw,
        r#"{"agent":"bot","session_id":"s","tool":"pay","arguments":{"amount":1000.5,"to":"bob"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (_, rec) = gw.approval(&id, OP).await;
    assert!(
        rec["canonical"]
            .as_str()
            .unwrap()
            .contains(r#""amount":1000.5"#),
        "{rec}"
    );
    // An approved token cannot be redeemed for a number that rounds to the approved one.
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    let (_, rec) = gw.approval(&id, BOT).await;
    let token = token_of(&rec);
    let body = format!(
        r#"{{"token":"{token}","tool":"pay","arguments":{{"amount":1000.50000000000000000001,"to":"bob"}}}}"#
    );
    let (s, b) = raw(&gw, "POST", "/v1/tokens/redeem", Some(BOT), &body).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "INEXACT_NUMBER");
    gw.stop().await;
}

#[tokio::test]
async fn an_unauthenticated_body_is_refused_before_it_is_read() {
    let gw = serve().await;
    // Without a valid key the answer is 401, not a 400 that tells the caller about its fields.
    for key in [None, Some("wrong-key")] {
        let (s, b) = raw(&gw, "POST", "/v1/tool-calls", key, r#"{"tool": 1"#).await;
        assert_error(s, &b, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED");
        let (s, _) = raw(&gw, "POST", "/v1/approvals/x/cancel", key, "not json").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    gw.stop().await;
}

#[tokio::test]
async fn oversized_names_and_arguments_are_refused_before_they_reach_the_audit_log() {
    let gw = serve_with(|s| s.max_arguments_bytes = 4096).await;
    let long = "t".repeat(257);
    for body in [
        json!({"agent": "bot", "session_id": "s", "tool": long, "arguments": {}}),
        json!({"agent": "bot", "session_id": long, "tool": "read", "arguments": {}}),
        json!({"agent": "bot", "session_id": "s", "tool": "read", "server": long, "arguments": {}}),
        json!({"agent": "bot", "session_id": "s", "tool": "read", "run_id": long, "arguments": {}}),
    ] {
        let (s, b) = gw.post("/v1/tool-calls", BOT, body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
        assert_says(&b, "message", "256 bytes");
    }
    let big = json!({"x": "y".repeat(5000)});
    let (s, b) = gw.propose_in("s", "read", big).await;
    assert_error(s, &b, StatusCode::PAYLOAD_TOO_LARGE, "ARGUMENTS_TOO_LARGE");
    // A body over the limit itself is a JSON 413 too.
    let huge = json!({"x": "y".repeat(200_000)});
    let (s, b) = gw.propose_in("s", "read", huge).await;
    assert_error(s, &b, StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE");
    let (_, list) = gw.get("/v1/approvals?status=all", OP).await;
    assert_eq!(list["approvals"], json!([]));
    gw.stop().await;
}

#[tokio::test]
async fn malformed_paths_queries_and_uris_get_a_json_error_never_a_5xx() {
    let gw = serve().await;
    let get = |path: String| {
        let gw = &gw;
        async move {
            let resp = gw.get_raw(&path, OP).await;
            let s = resp.status();
            let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
            let text = resp.text().await.unwrap();
            (s, ct, text)
        }
    };
    for (path, status) in [
        ("/v1/approvals/%ZZ".to_string(), StatusCode::NOT_FOUND),
        ("/v1/approvals/%FF%FE".to_string(), StatusCode::BAD_REQUEST),
        (
            "/v1/approvals?limit=%ZZ".to_string(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "/v1/approvals/x?wait=soon".to_string(),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/v1/approvals/{}", "a".repeat(9000)),
            StatusCode::URI_TOO_LONG,
        ),
        ("/v1/nothing-here".to_string(), StatusCode::NOT_FOUND),
    ] {
        let (s, ct, text) = get(path.clone()).await;
        assert_eq!(s, status, "{path}: {text}");
        assert!(ct.starts_with("application/json"), "{path}: {ct} {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            v["code"].is_string() && v["message"].is_string(),
            "{path}: {v}"
        );
    }
    let resp = gw.raw("PUT", "/v1/tool-calls", None).await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "METHOD_NOT_ALLOWED");
    // The dashboard's `next=` with control characters is refused as a target, not a 500.
    let next = "/ui/login?next=/ui/%0d%0aSet-Cookie:%20x=1";
    let resp = gw.raw("GET", next, None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()
            .get("set-cookie")
            .is_some_and(|c| !c.to_str().unwrap().contains("x=1"))
    );
    let html = resp.text().await.unwrap();
    assert!(
        html.contains(r#"value="/ui""#),
        "the target falls back to /ui"
    );
    gw.stop().await;
}

/// Attack: a rule denies `target.device` matching `/dev/sda`; the agent sends a literal
/// top-level key `"target.device": "/dev/null"` for the policy to read and the nested
/// `{"target": {"device": "/dev/sda"}}` the tool reads. Before, the policy saw `/dev/null`
/// and allowed the call; now such arguments are refused (400 naming the key), and each form
/// alone is judged as before.
#[tokio::test]
async fn a_dotted_key_cannot_show_the_policy_one_value_while_the_tool_reads_another() {
    let rule = "- tool: dd\n  deny: {condition: {args_match: {target.device: {pattern: \"^/dev/sda\"}}}}\n";
    let agent = crate::kit::one_tool_agent("bot", "alias: dd");
    let gw = crate::kit::serve_policy(&agent, &crate::kit::policy("t.dotted-v1", rule)).await;
    let both = json!({"target.device": "/dev/null", "target": {"device": "/dev/sda"}});
    let (s, b) = gw.propose("dd", both).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "target.device");
    let (s, b) = gw
        .propose("dd", json!({"target": {"device": "/dev/sda"}}))
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOOL_DENIED");
    let (s, b) = gw
        .propose("dd", json!({"target": {"device": "/dev/null"}}))
        .await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    gw.stop().await;
}

/// Attack (found by review): a rule holds `pay` when `order.details.amount` is over 1000; the
/// agent puts the dotted key one level down, `{"order": {"details.amount": 50000, "details":
/// {"amount": 1}}}`: the condition read 1 and let the call through, while a tool or sub-agent
/// expanding dotted keys reads 50000. Refused (400 naming both places), at any depth and
/// beside a dotted sibling.
#[tokio::test]
async fn a_dotted_key_below_the_top_cannot_show_the_policy_one_value_while_the_tool_reads_another()
{
    let rule =
        "- tool: pay\n  approval: {condition: {args_match: {order.details.amount: {gt: 1000}}}}\n";
    let agent = crate::kit::one_tool_agent("bot", "alias: pay");
    let gw = crate::kit::serve_policy(&agent, &crate::kit::policy("t.nested-v1", rule)).await;
    let both = json!({"order": {"details.amount": 50000, "details": {"amount": 1}}});
    let (s, b) = gw.propose("pay", both).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "/order/details.amount");
    assert_says(&b, "message", "/order/details/amount");
    let siblings = json!({"order.details.amount": 1, "order.details": {"amount": 50000}});
    let (s, b) = gw.propose("pay", siblings).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    let (s, b) = gw
        .propose("pay", json!({"order": {"details": {"amount": 50000}}}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (s, b) = gw
        .propose(
            "pay",
            json!({"order": {"details": {"amount": 1}, "note.txt": "x"}}),
        )
        .await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    gw.stop().await;
}

/// Attack: a rule holds `pay` when `amount` is over 1000; the agent sends
/// `{"amount": 5, "AMOUNT": 5000}`. The policy read 5 and allowed the call, and a tool decoding
/// with Go's case-folding `encoding/json` (the last key wins) paid 5000. Keys of one object
/// that differ only in case or Unicode form (a Kelvin sign for a `K`) are refused now: 400
/// naming the key's JSON pointer, before any rule is read.
#[tokio::test]
async fn keys_differing_only_in_case_cannot_show_the_policy_one_amount_while_the_tool_reads_another()
 {
    let rule = "- tool: pay\n  approval: {condition: {args_match: {amount: {gt: 1000}}}}\n";
    let agent = crate::kit::one_tool_agent("bot", "alias: pay");
    let gw = crate::kit::serve_policy(&agent, &crate::kit::policy("t.case-v1", rule)).await;
    let (s, b) = gw
        .propose("pay", json!({"amount": 5, "AMOUNT": 5000}))
        .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "/amount");
    let nested = json!({"order": {"kind": "refund", "\u{212A}ind": "transfer"}, "amount": 5});
    let (s, b) = gw.propose("pay", nested).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "/order/");
    let (s, b) = gw.propose("pay", json!({"amount": 5000})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (s, b) = gw.propose("pay", json!({"amount": 5})).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    gw.stop().await;
}

/// Found by review: an executor redeeming with the agent's spelling of a number (`1e3`,
/// `1000.0`, the same `call_hash` as the approved `1000`) was answered `200` with nothing to
/// run but that spelling, so it ran a float where the approver saw an integer. The answer
/// carries the arguments as the `call_hash` reads them: what the executor runs.
#[tokio::test]
async fn a_redemption_with_1e3_for_an_approved_1000_is_answered_the_arguments_as_hashed() {
    let gw = serve().await;
    let (s, b) = gw
        .propose("pay", json!({"amount": 1000, "to": "bob"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    let (_, rec) = gw.approval(&id, BOT).await;
    let token = token_of(&rec);
    let body =
        format!(r#"{{"token":"{token}","tool":"pay","arguments":{{"to":"bob","amount":1e3}}}}"#);
    let (s, b) = raw(&gw, "POST", "/v1/tokens/redeem", Some(BOT), &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["arguments"], json!({"amount": 1000, "to": "bob"}), "{b}");
    assert!(
        b["arguments"]["amount"].is_u64(),
        "an integer, as approved: {b}"
    );
    gw.stop().await;
}
