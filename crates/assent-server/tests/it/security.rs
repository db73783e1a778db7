//! Attacks on the HTTP API, each test named for the attack it stops (issue 10): ambiguous
//! JSON (duplicate keys, numbers a double changes), unauthenticated bodies, oversized fields,
//! errors that are not JSON, and the pending cap dodged through clarifications.

use crate::{AGENTS, GOV, Gw, start, start_custom, start_opts};
use assent_server::Settings;
use reqwest::StatusCode;
use serde_json::{Value, json};

const BOT: &str = "bot-key";
const OP: &str = "alice-key";

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

#[tokio::test]
async fn a_duplicate_key_cannot_make_the_gated_call_differ_from_the_one_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    // serde_json keeps the last `amount` (5, under the approval threshold); a first-wins
    // executor would pay 5000. Refused, naming the key path; nothing is recorded.
    let (s, b) = raw(
        &gw,
        "POST",
        "/v1/tool-calls",
        Some(BOT),
        r#"{"agent":"bot","session_id":"s","tool":"pay","arguments":{"amount":5000,"to":"bob","amount":5}}"#,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("DUPLICATE_KEY")),
        "{b}"
    );
    assert!(
        b["message"].as_str().unwrap().contains("/arguments/amount"),
        "{b}"
    );
    // The tool name itself, and a key spelled with an escape, count too.
    let (s, b) = raw(
        &gw,
        "POST",
        "/v1/tool-calls",
        Some(BOT),
        r#"{"agent":"bot","session_id":"s","tool":"pay","tool":"read","arguments":{}}"#,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("DUPLICATE_KEY")),
        "{b}"
    );
    let (s, b) = raw(
        &gw,
        "POST",
        "/v1/tool-calls",
        Some(BOT),
        r#"{"agent":"bot","session_id":"s","tool":"pay","arguments":{"to":"bob","t\u006f":"mallory","amount":1}}"#,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("DUPLICATE_KEY")),
        "{b}"
    );
    let (_, list) = gw
        .req("GET", "/v1/approvals?status=all", Some(OP), None)
        .await;
    assert_eq!(list["approvals"], json!([]), "nothing was held");
    // A decision's edit and a redemption are read the same way.
    let (_, p) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    let id = p["approval_id"].as_str().unwrap();
    let (s, b) = raw(
        &gw,
        "POST",
        &format!("/v1/approvals/{id}/decision"),
        Some(OP),
        r#"{"decision":"approve","arguments":{"amount":10,"to":"bob","to":"mallory"}}"#,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("DUPLICATE_KEY")),
        "{b}"
    );
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some(OP), None)
        .await;
    assert_eq!(rec["status"], "pending", "the refused edit decided nothing");
    gw.stop().await;
}

#[tokio::test]
async fn numbers_a_double_would_change_are_refused_so_two_calls_never_share_a_hash() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
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
        let (s, b) = raw(&gw, "POST", "/v1/tool-calls", Some(BOT), &body).await;
        assert_eq!(
            (s, b["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("INEXACT_NUMBER")),
            "{amount} ({why}): {b}"
        );
        assert!(b["message"].as_str().unwrap().contains(amount), "{b}");
    }
    // What a double carries exactly passes, and the operator sees the value that was sent.
    let (s, b) = raw(
        &gw,
        "POST",
        "/v1/tool-calls",
        Some(BOT),
        r#"{"agent":"bot","session_id":"s","tool":"pay","arguments":{"amount":1000.5,"to":"bob"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some(OP), None)
        .await;
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
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some(BOT), None)
        .await;
    let token = rec["token"].as_str().unwrap();
    let body = format!(
        r#"{{"token":"{token}","tool":"pay","arguments":{{"amount":1000.50000000000000000001,"to":"bob"}}}}"#
    );
    let (s, b) = raw(&gw, "POST", "/v1/tokens/redeem", Some(BOT), &body).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("INEXACT_NUMBER")),
        "{b}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_unauthenticated_body_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    // Without a valid key the answer is 401, not a 400 that tells the caller about its fields.
    for key in [None, Some("wrong-key")] {
        let (s, b) = raw(&gw, "POST", "/v1/tool-calls", key, r#"{"tool": 1"#).await;
        assert_eq!(
            (s, b["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("UNAUTHENTICATED")),
            "{b}"
        );
        let (s, _) = raw(&gw, "POST", "/v1/approvals/x/cancel", key, "not json").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    gw.stop().await;
}

#[tokio::test]
async fn oversized_names_and_arguments_are_refused_before_they_reach_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_opts(
        dir.path(),
        300_000,
        Settings {
            max_arguments_bytes: 4096,
            ..Settings::default()
        },
    )
    .await;
    let long = "t".repeat(257);
    for body in [
        json!({"agent": "bot", "session_id": "s", "tool": long, "arguments": {}}),
        json!({"agent": "bot", "session_id": long, "tool": "read", "arguments": {}}),
        json!({"agent": "bot", "session_id": "s", "tool": "read", "server": long, "arguments": {}}),
        json!({"agent": "bot", "session_id": "s", "tool": "read", "run_id": long, "arguments": {}}),
    ] {
        let (s, b) = gw
            .req("POST", "/v1/tool-calls", Some(BOT), Some(body))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
        assert!(b["message"].as_str().unwrap().contains("256 bytes"), "{b}");
    }
    let big = json!({"agent": "bot", "session_id": "s", "tool": "read", "arguments": {"x": "y".repeat(5000)}});
    let (s, b) = gw.req("POST", "/v1/tool-calls", Some(BOT), Some(big)).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("ARGUMENTS_TOO_LARGE")),
        "{b}"
    );
    // A body over the limit itself is a JSON 413 too.
    let huge = json!({"agent": "bot", "session_id": "s", "tool": "read", "arguments": {"x": "y".repeat(200_000)}});
    let (s, b) = gw
        .req("POST", "/v1/tool-calls", Some(BOT), Some(huge))
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("PAYLOAD_TOO_LARGE")),
        "{b}"
    );
    let (_, list) = gw
        .req("GET", "/v1/approvals?status=all", Some(OP), None)
        .await;
    assert_eq!(list["approvals"], json!([]));
    gw.stop().await;
}

#[tokio::test]
async fn malformed_paths_queries_and_uris_get_a_json_error_never_a_5xx() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let get = |path: String| {
        let gw = &gw;
        async move {
            let resp = gw
                .http
                .get(format!("{}{path}", gw.url))
                .bearer_auth(OP)
                .send()
                .await
                .unwrap();
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
    let resp = gw
        .http
        .put(format!("{}/v1/tool-calls", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "METHOD_NOT_ALLOWED");
    // The dashboard's `next=` with control characters is refused as a target, not a 500.
    let resp = gw
        .http
        .get(format!(
            "{}/ui/login?next=/ui/%0d%0aSet-Cookie:%20x=1",
            gw.url
        ))
        .send()
        .await
        .unwrap();
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

#[tokio::test]
async fn clarifications_cannot_be_used_to_dodge_the_pending_cap() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_opts(
        dir.path(),
        300_000,
        Settings {
            approval_timeout_ms: Some(300_000),
            max_pending_per_agent: 2,
            ..Settings::default()
        },
    )
    .await;
    let ask = json!({"agent": "bot", "session_id": "s", "question": "Which account?", "accepted_response_kinds": ["freetext"]});
    let (s, b) = gw
        .req("POST", "/v1/clarifications", Some(BOT), Some(ask.clone()))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (s, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    // Two things wait now: neither another question nor another approval is accepted.
    let (s, b) = gw
        .req("POST", "/v1/clarifications", Some(BOT), Some(ask))
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("TOO_MANY_PENDING")),
        "{b}"
    );
    let (s, b) = gw.propose("pay", json!({"amount": 600, "to": "bob"})).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("TOO_MANY_PENDING")),
        "{b}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_operator_cannot_say_no_by_cancelling_an_approval_they_could_not_decide() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    // `pay` needs the finance role; olaf has only ops.
    let (_, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    let pay = b["approval_id"].as_str().unwrap().to_string();
    let (_, b) = gw.propose("quick", json!({})).await;
    let quick = b["approval_id"].as_str().unwrap().to_string();
    let (s, b) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{pay}/cancel"),
            Some("olaf-key"),
            None,
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("FORBIDDEN")),
        "{b}"
    );
    // Cancelling the whole session cancels only what olaf could decide.
    let (s, b) = gw
        .req("POST", "/v1/sessions/s1/cancel", Some("olaf-key"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (b["cancelled"].clone(), b["refused"].clone()),
        (json!([quick]), json!([pay])),
        "{b}"
    );
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{pay}"), Some(OP), None)
        .await;
    assert_eq!(rec["status"], "pending");
    // Another agent's key cannot cancel it either; its own agent and a finance operator can.
    let (s, _) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{pay}/cancel"),
            Some("other-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, b) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{pay}/cancel"),
            Some(OP),
            None,
        )
        .await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{b}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn guessing_keys_is_held_to_a_few_a_second_even_for_the_right_key() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    // Wrong keys are answered 401 until the address's allowance is used up, then 429 with
    // Retry-After; from then on even the right key is not checked.
    let mut throttled = None;
    for i in 0..60 {
        let (s, b) = gw
            .req(
                "GET",
                "/v1/whoami",
                Some(&format!("guess-{i:04}-key")),
                None,
            )
            .await;
        if s == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(b["code"], "AUTH_THROTTLED", "{b}");
            throttled = Some(i);
            break;
        }
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{b}");
    }
    let n = throttled.expect("60 wrong keys in a row were never throttled");
    assert!(n <= 30, "throttled only after {n} guesses");
    let resp = gw
        .http
        .get(format!("{}/v1/whoami", gw.url))
        .bearer_auth(OP)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&wait), "{wait}");
    // The dashboard's sign-in shares the lock-out.
    let login = gw
        .http
        .get(format!("{}/ui/login", gw.url))
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let html = login.text().await.unwrap();
    let csrf = html
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string();
    let resp = gw
        .http
        .post(format!("{}/ui/login", gw.url))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&key={OP}&next=/ui"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
    let (s, b) = gw.req("GET", "/v1/whoami", Some(OP), None).await;
    assert_eq!(
        (s, b["name"].as_str()),
        (StatusCode::OK, Some("alice")),
        "{b}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn one_principal_cannot_flood_the_gateway_past_its_rate() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_custom(
        dir.path(),
        300_000,
        Settings::default(),
        AGENTS,
        GOV,
        |st| {
            st.throttle = std::sync::Arc::new(assent_server::throttle::Throttle::new(
                assent_server::throttle::RateLimits {
                    requests_per_second: 1,
                    burst: 3,
                },
            ));
        },
    )
    .await;
    let mut codes = Vec::new();
    for _ in 0..6 {
        let (s, b) = gw.propose("read", json!({})).await;
        codes.push((s, b["code"].as_str().map(str::to_string)));
    }
    assert_eq!(
        codes.iter().filter(|(s, _)| *s == StatusCode::OK).count(),
        3,
        "{codes:?}"
    );
    assert!(
        codes.contains(&(StatusCode::TOO_MANY_REQUESTS, Some("RATE_LIMITED".into()))),
        "{codes:?}"
    );
    // Another principal is not slowed down by it.
    let (s, _) = gw.req("GET", "/v1/approvals", Some(OP), None).await;
    assert_eq!(s, StatusCode::OK);
    gw.stop().await;
}

#[tokio::test]
async fn a_body_trickled_slowly_is_cut_off_with_a_json_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let gw = start_opts(
        dir.path(),
        300_000,
        Settings {
            body_read_timeout: std::time::Duration::from_secs(1),
            ..Settings::default()
        },
    )
    .await;
    let addr = gw.url.trim_start_matches("http://").to_string();
    // Authenticated or not, on the API, the AAEP replies and the dashboard's sign-in alike.
    for (path, auth) in [
        ("/v1/tool-calls", format!("authorization: Bearer {BOT}\r\n")),
        ("/aaep/v1/replies", String::new()),
        ("/ui/login", String::new()),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"agent\":"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let t = std::time::Instant::now();
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tcp.read_to_end(&mut buf),
        )
        .await;
        let text = String::from_utf8_lossy(&buf);
        assert!(text.starts_with("HTTP/1.1 408"), "{path}: {text}");
        assert!(
            text.contains(r#""code":"REQUEST_TIMEOUT""#),
            "{path}: {text}"
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{path}: {:?}",
            t.elapsed()
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn no_grant_stands_in_for_the_consent_an_irreversible_call_needs_each_time() {
    const AGENT: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: wire\n";
    const GOV: &str = "policies:\n  - id: t.irrev-v1\n    selector: {agents: [\"*\"]}\n    rules:\n      - tool: wire\n        irreversible: true\n        risk_tier: R1\n";
    let dir = tempfile::tempdir().unwrap();
    let gw = crate::start_reg(dir.path(), 300_000, Settings::default(), AGENT, GOV).await;
    // Irreversible at R1 and no approval rule: still held for a person.
    let (s, b) = gw.propose("wire", json!({"to": "x"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    // A standing grant is refused; approving this one call is fine.
    let (s, b) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{id}/decision"),
            Some(OP),
            Some(json!({"decision": "approve", "scope": "session", "whole_tool": true})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(
        b["message"].as_str().unwrap().contains("irreversible"),
        "{b}"
    );
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = gw.propose("wire", json!({"to": "x"})).await;
    assert_eq!(
        s,
        StatusCode::ACCEPTED,
        "the next identical call needs a person again: {b}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn one_principal_cannot_pin_unbounded_long_polls() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_custom(
        dir.path(),
        300_000,
        Settings::default(),
        AGENTS,
        GOV,
        |st| {
            st.waiters = std::sync::Arc::new(assent_server::waiters::Waiters::new(2));
        },
    )
    .await;
    let (_, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    let id = b["approval_id"].as_str().unwrap().to_string();
    let poll = |gw: &Gw| {
        let (http, url) = (
            gw.http.clone(),
            format!("{}/v1/approvals/{id}?wait=30", gw.url),
        );
        tokio::spawn(async move {
            let r = http.get(url).bearer_auth(BOT).send().await.unwrap();
            let s = r.status();
            (s, r.json::<Value>().await.unwrap())
        })
    };
    let a = poll(&gw);
    let b2 = poll(&gw);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (s, b) = poll(&gw).await.unwrap();
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("TOO_MANY_WAITERS")),
        "{b}"
    );
    // A plain read still works, and a decision wakes the two waiting polls at once.
    let (s, _) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some(BOT), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let t = std::time::Instant::now();
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    for w in [a, b2] {
        let (s, b) = w.await.unwrap();
        assert_eq!(
            (s, b["status"].as_str()),
            (StatusCode::OK, Some("approved")),
            "{b}"
        );
    }
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_edit_cannot_raise_an_amount_already_over_its_cost_threshold() {
    const AGENT: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n";
    const GOV: &str = "policies:\n  - id: t.cost-v1\n    selector: {agents: [\"*\"]}\n    rules:\n      - tool: pay\n        thresholds: {cost: {argument: amount, max_per_session: 100}}\n";
    let dir = tempfile::tempdir().unwrap();
    let gw = crate::start_reg(dir.path(), 300_000, Settings::default(), AGENT, GOV).await;
    let (s, b) = gw.propose("pay", json!({"amount": 500})).await;
    assert_eq!(
        (s, b["triggers"].clone()),
        (StatusCode::ACCEPTED, json!(["cost"])),
        "{b}"
    );
    let id = b["approval_id"].as_str().unwrap().to_string();
    let edit = |amount: i64| {
        let (gw, id) = (&gw, id.clone());
        async move {
            gw.req(
                "POST",
                &format!("/v1/approvals/{id}/decision"),
                Some(OP),
                Some(json!({"decision": "approve", "arguments": {"amount": amount}})),
            )
            .await
        }
    };
    // Approving 500 over the threshold is the operator's call; turning it into a billion is not.
    let (s, b) = edit(1_000_000_000).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("EDIT_OVER_THRESHOLD")
        ),
        "{b}"
    );
    let (s, b) = edit(400).await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{b}"
    );
    gw.stop().await;
}
