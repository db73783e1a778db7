//! Who may do what, and what a malformed request gets: missing and wrong keys (401), an agent
//! acting for another agent or an operator proposing (403), an operator without the rule's
//! approver role, and bad bodies, queries and routes answered with a 4xx that says what is
//! wrong. Attacks on the API (ambiguous JSON, floods) are in `security.rs` and `abuse.rs`.

use crate::kit::{BOT, Gw, OP, assert_error, assert_says, serve, start_tuned};
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

/// Found by review: the dashboard's event stream said `changed` on every change, so agents
/// proposing in a loop had every open tab re-read the whole queue each time; and it ran on
/// after its session was signed out. Changes within 500 ms make one event, and the stream ends
/// once its session signs no one in.
#[tokio::test]
async fn the_dashboards_event_stream_coalesces_changes_and_ends_at_sign_out() {
    use std::time::{Duration, Instant};
    let gw = crate::kit::serve().await;
    let cookie = gw.dashboard_session().await;
    let mut events = dashboard_events(&gw, &cookie).await;
    let started = Instant::now();
    let mut held = String::new();
    for n in 0..30 {
        let (s, b) = gw
            .propose("pay", json!({"amount": 1000 + n, "to": "bob"}))
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        held = b["approval_id"].as_str().unwrap().to_string();
    }
    let mut text = String::new();
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_millis(1200), events.chunk())
        .await
        .unwrap_or(Ok(None))
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let said = text.matches("event: changed").count();
    let most = 2 + (started.elapsed().as_millis() / 500) as usize;
    assert!(
        (1..=most).contains(&said),
        "{said} events in {:?}",
        started.elapsed()
    );
    // Signed out: the stream ends within its session check (10 s), with no change to wake it.
    let page = gw
        .dashboard_page(&format!("/ui/approvals/{held}"), &cookie)
        .await;
    let csrf = crate::kit::csrf_of(&page);
    crate::dashboard_kit::sign_out_with(&gw, &cookie, &csrf).await;
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        while let Ok(Some(_)) = events.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream ran on after sign-out");
}

/// Found by review: one signed-in browser could open dashboard event streams without bound,
/// each reading the store every 10 s and on every change. A session keeps eight: the ninth
/// ends the oldest at once, and the others stay open and are told of changes.
#[tokio::test]
async fn a_session_keeps_eight_dashboard_streams_a_ninth_ends_the_oldest() {
    use std::time::Duration;
    let gw = crate::kit::serve().await;
    let cookie = gw.dashboard_session().await;
    let mut streams = Vec::new();
    for _ in 0..9 {
        streams.push(dashboard_events(&gw, &cookie).await);
    }
    let mut oldest = streams.remove(0);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(_)) = oldest.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the oldest stream was not ended");
    let (s, b) = gw
        .propose("pay", json!({"amount": 5000, "to": "bob"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    for (n, r) in streams.iter_mut().enumerate() {
        let mut text = String::new();
        while !text.contains("event: changed") {
            let chunk = tokio::time::timeout(Duration::from_secs(5), r.chunk()).await;
            let chunk = chunk.unwrap_or_else(|_| panic!("stream {n} told nothing"));
            let chunk = chunk.unwrap().unwrap_or_else(|| panic!("stream {n} ended"));
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// `GET /ui/events` with the session `cookie`: the open stream (asserted `200`).
async fn dashboard_events(gw: &Gw, cookie: &str) -> reqwest::Response {
    let r = gw
        .http
        .get(format!("{}/ui/events", gw.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r
}

/// The `Set-Cookie` of the dashboard session a sign-in as [`OP`] with `headers` started.
async fn session_cookie(gw: &Gw, headers: &[(&str, &str)]) -> String {
    let r = gw.dashboard_sign_in_with(OP, headers).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    r.headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("assent_ui=") || c.starts_with("__Host-assent_ui="))
        .expect("a session cookie")
}

/// Review finding: the session cookie was `Secure` only when a trusted proxy said https, so a
/// gateway published at an `https://` `public_url` behind a proxy missing from
/// `trusted_proxies` let the browser send the cookie over plain http too. A https `public_url`
/// makes it `Secure`; a client's own `X-Forwarded-Proto` still earns nothing.
#[tokio::test]
async fn the_session_cookie_is_secure_when_the_gateway_is_published_over_https() {
    let gw = serve().await;
    let forged = [("x-forwarded-proto", "https")];
    assert!(!session_cookie(&gw, &forged).await.contains("Secure"));
    gw.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start_tuned(dir.path(), |st| {
        st.public_url = Some(std::sync::Arc::from("https://assent.example.com"));
    })
    .await;
    assert!(session_cookie(&gw, &[]).await.contains("; Secure"));
    gw.stop().await;
}
