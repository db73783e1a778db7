//! Who may do what, and what a malformed request gets: missing and wrong keys (401), an agent
//! acting for another agent or an operator proposing (403), an operator without the rule's
//! approver role, and bad bodies, queries and routes answered with a 4xx that says what is
//! wrong. Attacks on the API (ambiguous JSON, floods) are in `security.rs` and `abuse.rs`.

use crate::kit::{BOT, OP, assert_error, assert_says, serve};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn authentication_and_authorisation() {
    let gw = serve().await;
    let body = json!({"agent": "bot", "session_id": "s", "tool": "read", "arguments": {}});
    let (s, b) = gw
        .req("POST", "/v1/tool-calls", None, Some(body.clone()))
        .await;
    assert_error(s, &b, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED");
    let (s, _) = gw.post("/v1/tool-calls", "wrong-key", body.clone()).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = gw.get("/v1/approvals", "nope").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // An agent key cannot act for another agent id, and an operator cannot propose.
    let (s, b) = gw.post("/v1/tool-calls", "other-key", body.clone()).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "FORBIDDEN");
    let (s, _) = gw.post("/v1/tool-calls", OP, body).await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    let id = gw.pending("pay", json!({"amount": 500, "to": "bob"})).await;
    // An agent key cannot decide or list.
    let (s, _) = gw.decide(&id, BOT, "approve").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = gw.get("/v1/approvals?status=pending", BOT).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // Another agent does not learn the approval exists.
    let (s, b) = gw.approval(&id, "other-key").await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "NOT_FOUND");
    // An operator without the rule's approver role cannot decide.
    let (s, b) = gw.decide(&id, "olaf-key", "approve").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_says(&b, "message", "finance");
    let (_, rec) = gw.approval(&id, OP).await;
    assert_eq!(rec["status"], "pending");
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    gw.stop().await;
}

#[tokio::test]
async fn bad_input_gets_a_4xx_with_a_useful_message() {
    let gw = serve().await;
    let send_raw = |body: &'static str| {
        let (http, url) = (gw.http.clone(), format!("{}/v1/tool-calls", gw.url));
        async move {
            let r = http
                .post(url)
                .bearer_auth("bot-key")
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let s = r.status();
            (s, r.json::<Value>().await.unwrap())
        }
    };
    let (s, b) = send_raw("{\"agent\": ").await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "invalid JSON body");
    let (s, b) =
        send_raw(r#"{"agent":"bot","session_id":"s","tool":"read","arguments":{},"colour":1}"#)
            .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_says(&b, "message", "unknown field `colour`");
    let (s, b) =
        send_raw(r#"{"agent":"bot","session_id":"s","tool":"read","arguments":[1]}"#).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_says(&b, "message", "arguments must be a JSON object");
    let (s, b) = send_raw(r#"{"agent":"bot","session_id":"s","arguments":{}}"#).await;
    assert!(
        s == StatusCode::BAD_REQUEST
            && b["message"]
                .as_str()
                .unwrap()
                .contains("missing field `tool`"),
        "{b}"
    );
    let (s, _) = send_raw("").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, b) = gw.decide_with("x", OP, json!({"decision": "maybe"})).await;
    assert!(
        s == StatusCode::BAD_REQUEST
            && b["message"]
                .as_str()
                .unwrap()
                .contains("unknown variant `maybe`"),
        "{b}"
    );
    let (s, b) = gw.get("/v1/approvals?status=bogus", OP).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    let (s, _) = gw.get("/v1/approvals/nope?wait=abc", OP).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, b) = gw.approval("does-not-exist", OP).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "NOT_FOUND");
    let (s, b) = gw.req("GET", "/v2/nothing", None, None).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "NOT_FOUND");
    let (s, b) = gw.req("DELETE", "/v1/tool-calls", None, None).await;
    assert_error(s, &b, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
    gw.stop().await;
}
