//! The AAEP binding (Appendix B.1, chapters 5 and 6) against a real server: every event and
//! message validated against the AAEP schemas.

use super::schemas::{assert_valid, validator};
use super::{AGENTS, Gw, REDACTING_GOV, Settings, start, start_reg};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// A minimal SSE reader over a streaming reqwest response.
struct Sse {
    resp: reqwest::Response,
    buf: String,
}

#[derive(Debug)]
struct Msg {
    event: String,
    id: Option<String>,
    data: Value,
}

impl Sse {
    async fn open(gw: &Gw, key: &str, path: &str, last: Option<&str>) -> Sse {
        let mut r = gw.http.get(format!("{}{path}", gw.url)).bearer_auth(key);
        if let Some(l) = last {
            r = r.header("Last-Event-ID", l);
        }
        let resp = r.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Sse {
            resp,
            buf: String::new(),
        }
    }
    /// The next message, or `None` after `wait`.
    async fn next(&mut self, wait: Duration) -> Option<Msg> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..i + 2).collect();
                let (mut event, mut id, mut data) = (String::new(), None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                return Some(Msg {
                    event,
                    id,
                    data: serde_json::from_str(&data).unwrap(),
                });
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .ok()?
                .ok()??;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
    /// The next `aaep.event` of type `ty` within 5 s (skipping others).
    async fn expect(&mut self, ty: &str) -> Msg {
        loop {
            let m = self
                .next(Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("no {ty} event"));
            if m.data["type"] == ty {
                assert_eq!(m.event, "aaep.event");
                assert_eq!(m.id.as_deref(), m.data["event_id"].as_str());
                return m;
            }
        }
    }
    /// Asserts no event of type `ty` arrives within `wait`.
    async fn none_of(&mut self, ty: &str, wait: Duration) {
        while let Some(m) = self.next(wait).await {
            assert_ne!(m.data["type"], ty, "unexpected {:#}", m.data);
        }
    }
}

fn core(name: &str) -> jsonschema::Validator {
    validator(&format!("aaep/schemas/core/{name}.schema.json"))
}
fn handshake(name: &str) -> jsonschema::Validator {
    validator(&format!("aaep/schemas/handshake/{name}.schema.json"))
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

impl Gw {
    async fn subscribe(&self, key: &str, replies: bool, extra: Value) -> (String, Sse) {
        let mut caps = json!({"supports_confirmation_reply": replies, "supports_clarification_reply": replies});
        if let (Value::Object(c), Value::Object(e)) = (&mut caps, extra) {
            c.extend(e);
        }
        let req = json!({"type": "subscription.request", "aaep_version": "1.0.0",
                         "subscriber_id": format!("test-{key}"), "capabilities": caps});
        assert_valid(&handshake("subscription.request"), &req, "our own request");
        let resp = self
            .http
            .post(format!("{}/aaep/v1/subscriptions", self.url))
            .bearer_auth(key)
            .json(&req)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let loc = resp.headers()["location"].to_str().unwrap().to_string();
        let body: Value = resp.json().await.unwrap();
        assert_valid(
            &handshake("subscription.accepted"),
            &body,
            "subscription.accepted",
        );
        let id = body["subscription_id"].as_str().unwrap().to_string();
        assert_eq!(loc, format!("/aaep/v1/events?subscription_id={id}"));
        let sse = Sse::open(self, key, &loc, None).await;
        (id, sse)
    }
    async fn reply(&self, key: Option<&str>, body: Value) -> StatusCode {
        let mut r = self
            .http
            .post(format!("{}/aaep/v1/replies", self.url))
            .json(&body);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        let resp = r.send().await.unwrap();
        let s = resp.status();
        assert!(
            resp.bytes().await.unwrap().is_empty(),
            "a reply answer has no body"
        );
        s
    }
    async fn hold_write(&self, path: &str) -> String {
        let (s, b) = self
            .req(
                "POST",
                "/v1/tool-calls",
                Some("bot-key"),
                Some(
                    json!({"agent": "bot", "session_id": "s1", "tool": "write_file", "server": "fs",
                             "arguments": {"path": path, "content": "x"}}),
                ),
            )
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        b["approval_id"].as_str().unwrap().to_string()
    }
    async fn status(&self, id: &str) -> Value {
        self.req(
            "GET",
            &format!("/v1/approvals/{id}"),
            Some("alice-key"),
            None,
        )
        .await
        .1
    }
}

fn confirm(token: &str, sub: &str, decision: &str) -> Value {
    json!({"type": "confirmation.reply", "reply_token": token, "decision": decision,
           "subscription_id": sub, "timestamp": now(), "decided_by": "user:test"})
}

#[tokio::test]
async fn a_confirmation_is_announced_answered_and_resolved_with_valid_events() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    let id = gw.hold_write("/tmp/a").await;
    let ev = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    assert_valid(
        &core("agent.awaiting.confirmation"),
        &ev,
        "awaiting.confirmation",
    );
    assert_valid(
        &validator("aaep/schemas/envelope.schema.json"),
        &ev,
        "envelope",
    );
    let token = ev["reply_token"].as_str().unwrap();
    assert!(
        token.len() == 36 && token[4..].chars().all(|c| c.is_ascii_hexdigit()),
        "{token}"
    );
    assert_eq!(
        (ev["urgency"].as_str(), ev["default_decision"].as_str()),
        (Some("critical"), Some("reject"))
    );
    assert!(ev["session_id"].as_str().unwrap().starts_with("sess_"));
    assert_eq!(ev["extra_context"]["approval_id"], json!(id));
    assert!(
        ev["consequence"]
            .as_str()
            .unwrap()
            .contains(r#"{"content":"x","path":"/tmp/a"}"#)
    );
    // The same call again while pending joins it: no second confirmation.
    let (s, b) = gw
        .req(
            "POST",
            "/v1/tool-calls",
            Some("bot-key"),
            Some(
                json!({"agent": "bot", "session_id": "s1", "tool": "write_file", "server": "fs",
                         "arguments": {"content": "x", "path": "/tmp/a"}}),
            ),
        )
        .await;
    assert_eq!(
        (s, b["joined"].as_bool()),
        (StatusCode::ACCEPTED, Some(true))
    );
    sse.none_of(
        "aaep:agent.awaiting.confirmation",
        Duration::from_millis(300),
    )
    .await;

    let reply = confirm(token, &sub, "accept");
    assert_valid(&handshake("confirmation.reply"), &reply, "our reply");
    assert_eq!(
        gw.reply(Some("alice-key"), reply).await,
        StatusCode::NO_CONTENT
    );
    let st = gw.status(&id).await;
    assert_eq!(st["status"], "approved", "{st}");
    assert!(
        st["decisions"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("decided_by user:test")
    );
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_valid(&core("agent.state.changed"), &ev, "state.changed");
    assert_eq!(
        (ev["from_state"].as_str(), ev["to_state"].as_str()),
        (Some("awaiting_input"), Some("calling_tool"))
    );
    // sequence numbers increase
    assert!(ev["sequence_number"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn every_check_of_6_3_4_ignores_a_failing_reply_without_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    let (mute, _m) = gw.subscribe("alice-key", false, json!({})).await;
    let (olafs, _o) = gw.subscribe("olaf-key", true, json!({})).await;
    let (closed, _c) = gw.subscribe("alice-key", true, json!({})).await;
    assert_eq!(
        gw.reply(
            Some("alice-key"),
            json!({"type": "subscription.close", "subscription_id": closed})
        )
        .await,
        StatusCode::NO_CONTENT
    );
    let id = gw.hold_write("/tmp/b").await;
    let ev = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    let token = ev["reply_token"].as_str().unwrap().to_string();
    let late_ts = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let late_ts = late_ts
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let mut no_ts = confirm(&token, &sub, "accept");
    no_ts.as_object_mut().unwrap().remove("timestamp");
    let mut extra_field = confirm(&token, &sub, "accept");
    extra_field["approve_anyway"] = json!(true);
    let cases: Vec<(&str, Option<&str>, Value)> = vec![
        ("schema: missing timestamp", Some("alice-key"), no_ts),
        ("schema: unknown field", Some("alice-key"), extra_field),
        (
            "schema: decision not allowed",
            Some("alice-key"),
            confirm(&token, &sub, "maybe"),
        ),
        (
            "unknown token",
            Some("alice-key"),
            confirm("rpl_0123456789abcdef0123456789abcdef", &sub, "accept"),
        ),
        ("expired: timestamp after the timeout", Some("alice-key"), {
            let mut r = confirm(&token, &sub, "accept");
            r["timestamp"] = json!(late_ts);
            r
        }),
        ("unauthenticated", None, confirm(&token, &sub, "accept")),
        (
            "wrong key",
            Some("nobody-key"),
            confirm(&token, &sub, "accept"),
        ),
        (
            "an agent, not an operator",
            Some("bot-key"),
            confirm(&token, &sub, "accept"),
        ),
        (
            "someone else's subscription",
            Some("alice-key"),
            confirm(&token, &olafs, "accept"),
        ),
        (
            "subscription without reply support",
            Some("alice-key"),
            confirm(&token, &mute, "accept"),
        ),
        (
            "closed subscription",
            Some("alice-key"),
            confirm(&token, &closed, "accept"),
        ),
        (
            "unknown subscription",
            Some("alice-key"),
            confirm(&token, "sub_0000", "accept"),
        ),
    ];
    for (what, key, body) in cases {
        assert_eq!(gw.reply(key, body).await, StatusCode::NO_CONTENT, "{what}");
        assert_eq!(
            gw.status(&id).await["status"],
            "pending",
            "{what} was applied"
        );
    }
    // Only a body that is not JSON is a 400.
    let r = gw
        .http
        .post(format!("{}/aaep/v1/replies", gw.url))
        .bearer_auth("alice-key")
        .body("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // A valid reject, then a late duplicate: the first wins; the late one gets the courtesy notice.
    let mut rej = confirm(&token, &sub, "reject");
    rej["decision_rationale"] = json!("reduce the amount first");
    assert_eq!(
        gw.reply(Some("alice-key"), rej).await,
        StatusCode::NO_CONTENT
    );
    let st = gw.status(&id).await;
    assert_eq!(st["status"], "rejected");
    assert!(
        st["reason"]
            .as_str()
            .unwrap()
            .contains("reduce the amount first")
    );
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "thinking"); // a rejection is followed by an event, never silence
    assert_eq!(
        gw.reply(Some("alice-key"), confirm(&token, &sub, "accept"))
            .await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(gw.status(&id).await["status"], "rejected");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_valid(&core("agent.state.changed"), &ev, "courtesy notice");
    assert_eq!(ev["extensions"]["assent"]["courtesy_notice"], true);
}

#[tokio::test]
async fn first_reply_wins_across_two_subscriptions_and_forwarded_replies_count() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (a, mut sa) = gw.subscribe("alice-key", true, json!({})).await;
    let (o, mut so) = gw.subscribe("olaf-key", true, json!({})).await;
    for round in 0..5 {
        let id = gw.hold_write(&format!("/tmp/race{round}")).await;
        let token = sa.expect("aaep:agent.awaiting.confirmation").await.data["reply_token"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            so.expect("aaep:agent.awaiting.confirmation").await.data["reply_token"],
            json!(token)
        );
        let (x, y) = tokio::join!(
            gw.reply(Some("alice-key"), confirm(&token, &a, "accept")),
            gw.reply(Some("olaf-key"), confirm(&token, &o, "reject"))
        );
        assert_eq!((x, y), (StatusCode::NO_CONTENT, StatusCode::NO_CONTENT));
        let st = gw.status(&id).await;
        assert_eq!(st["decisions"].as_array().unwrap().len(), 1, "{st}");
        // Both subscriptions see the resolution; the loser also gets a courtesy notice.
        let mut notices = 0;
        for sse in [&mut sa, &mut so] {
            let first = sse.expect("aaep:agent.state.changed").await.data;
            let mut seen = vec![first];
            while let Some(m) = sse.next(Duration::from_millis(300)).await {
                seen.push(m.data);
            }
            notices += seen
                .iter()
                .filter(|e| e["extensions"]["assent"]["courtesy_notice"] == true)
                .count();
        }
        assert_eq!(notices, 1, "round {round}");
    }
    // Forwarding (§6.6): a subscription that cannot reply sees the confirmation; another
    // authenticated subscription replies with the token and is honoured.
    let (_fwd, mut sf) = gw.subscribe("olaf-key", false, json!({})).await;
    let id = gw.hold_write("/tmp/fwd").await;
    let token = sf.expect("aaep:agent.awaiting.confirmation").await.data["reply_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        gw.reply(Some("alice-key"), confirm(&token, &a, "accept"))
            .await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(gw.status(&id).await["status"], "approved");
    let db = rusqlite::Connection::open(gw.state.store.db_path()).unwrap();
    let n: i64 = db
        .query_row(
            "SELECT count(*) FROM audit WHERE kind = 'decision'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 6);
}

#[tokio::test]
async fn timeouts_apply_both_defaults_and_long_waits_count_down() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    // `quick` rejects at its 1 s timeout, `lenient` accepts at its 1 s timeout.
    let (_, q) = gw.propose("quick", json!({})).await;
    let ev = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    assert_eq!(
        (
            ev["timeout_seconds"].as_i64(),
            ev["default_decision"].as_str()
        ),
        (Some(1), Some("reject"))
    );
    let qtoken = ev["reply_token"].as_str().unwrap().to_string();
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "thinking");
    assert_eq!(
        gw.status(q["approval_id"].as_str().unwrap()).await["status"],
        "expired"
    );
    // A reply after the timeout changes nothing.
    assert_eq!(
        gw.reply(Some("alice-key"), confirm(&qtoken, &sub, "accept"))
            .await,
        StatusCode::NO_CONTENT
    );
    assert!(
        gw.status(q["approval_id"].as_str().unwrap())
            .await
            .get("token")
            .is_none()
    );
    let (_, l) = gw.propose("lenient", json!({})).await;
    let ev = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    assert_eq!(ev["default_decision"], "accept");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "calling_tool");
    assert!(gw.status(l["approval_id"].as_str().unwrap()).await["approval_token"].is_object());

    // A 300 s wait: progress at 50% and at 10% remaining (moved forward in the database).
    let id = gw.hold_write("/tmp/long").await;
    sse.expect("aaep:agent.awaiting.confirmation").await;
    let db = rusqlite::Connection::open(gw.state.store.db_path()).unwrap();
    let shift = |ms: i64| {
        db.execute("UPDATE approvals SET requested_at = requested_at - ?2, expires_at = expires_at - ?2 WHERE id = ?1", rusqlite::params![id, ms]).unwrap();
    };
    shift(151_000);
    let ev = sse.expect("aaep:agent.progress.updated").await.data;
    assert_valid(&core("agent.progress.updated"), &ev, "progress 50%");
    assert_eq!(ev["progress"]["percent"], 50);
    shift(125_000);
    let ev = sse.expect("aaep:agent.progress.updated").await.data;
    assert_eq!(ev["progress"]["percent"], 90);
    assert!(ev["summary_terse"].as_str().unwrap().contains("s left"));
    sse.none_of("aaep:agent.progress.updated", Duration::from_millis(1500))
        .await;
}

#[tokio::test]
async fn cancelling_a_session_cancels_its_confirmations_and_their_reply_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    let id = gw.hold_write("/tmp/c").await;
    let token = sse.expect("aaep:agent.awaiting.confirmation").await.data["reply_token"]
        .as_str()
        .unwrap()
        .to_string();
    // A question of the same session dies with it: its reply token no longer answers it.
    let (s, q) = gw
        .req(
            "POST",
            "/v1/clarifications",
            Some("bot-key"),
            Some(json!({"agent": "bot", "session_id": "s1",
            "question": "Which folder?", "accepted_response_kinds": ["freetext"]})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{q}");
    let q_token = sse.expect("aaep:agent.awaiting.clarification").await.data["reply_token"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, b) = gw
        .req("POST", "/v1/sessions/s1/cancel", Some("bot-key"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["clarifications"], json!([q["id"]]), "{b}");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "thinking");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["summary_normal"], "The question was withdrawn.");
    let ev = sse.expect("aaep:agent.session.cancelled").await.data;
    assert_valid(&core("agent.session.cancelled"), &ev, "session.cancelled");
    assert!(
        ev["summary_normal"].as_str().unwrap().contains("1 pending"),
        "{ev}"
    );
    let first_session = ev["session_id"].clone();
    let answer = json!({"type": "clarification.reply", "reply_token": q_token, "response": "/tmp",
                        "subscription_id": sub, "timestamp": now()});
    assert_eq!(
        gw.reply(Some("alice-key"), answer).await,
        StatusCode::NO_CONTENT
    );
    let (_, c) = gw
        .req(
            "GET",
            &format!("/v1/clarifications/{}", q["id"].as_str().unwrap()),
            Some("bot-key"),
            None,
        )
        .await;
    assert_eq!(c["status"], "cancelled", "{c}");
    // Exactly once per session: cancelling it again announces nothing new, while a session
    // with nothing pending is announced once.
    let (s, _) = gw
        .req("POST", "/v1/sessions/s1/cancel", Some("bot-key"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = gw
        .req("POST", "/v1/sessions/idle/cancel", Some("bot-key"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let ev = sse.expect("aaep:agent.session.cancelled").await.data;
    assert_ne!(ev["session_id"], first_session, "{ev}");
    assert!(
        ev["summary_normal"].as_str().unwrap().contains("0 pending"),
        "{ev}"
    );
    gw.req("POST", "/v1/sessions/idle/cancel", Some("bot-key"), None)
        .await;
    sse.none_of("aaep:agent.session.cancelled", Duration::from_millis(1500))
        .await;
    assert_eq!(
        gw.reply(Some("alice-key"), confirm(&token, &sub, "accept"))
            .await,
        StatusCode::NO_CONTENT
    );
    let st = gw.status(&id).await;
    assert_eq!(
        (st["status"].as_str(), st.get("approval_token")),
        (Some("cancelled"), None)
    );
}

#[tokio::test]
async fn streams_resume_after_last_event_id_and_open_a_subscription_without_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let mut anon = Sse::open(&gw, "olaf-key", "/aaep/v1/events", None).await;
    let first = anon.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.event, "aaep.subscription");
    assert_valid(
        &handshake("subscription.accepted"),
        &first.data,
        "announced subscription",
    );
    let sub = first.data["subscription_id"].as_str().unwrap().to_string();
    assert_eq!(
        first.data["honored_capabilities"]["supports_confirmation_reply"],
        false
    );
    gw.hold_write("/tmp/r1").await;
    let e1 = anon.expect("aaep:agent.awaiting.confirmation").await;
    drop(anon);
    gw.hold_write("/tmp/r2").await;
    gw.hold_write("/tmp/r3").await;
    let mut again = Sse::open(
        &gw,
        "olaf-key",
        &format!("/aaep/v1/events?subscription_id={sub}"),
        e1.id.as_deref(),
    )
    .await;
    let a = again.expect("aaep:agent.awaiting.confirmation").await;
    let b = again.expect("aaep:agent.awaiting.confirmation").await;
    assert!(a.data["consequence"].as_str().unwrap().contains("/tmp/r2"));
    assert!(b.data["consequence"].as_str().unwrap().contains("/tmp/r3"));
    // Another operator cannot open this subscription; an agent cannot subscribe.
    let r = gw
        .http
        .get(format!("{}/aaep/v1/events?subscription_id={sub}", gw.url))
        .bearer_auth("alice-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = gw
        .http
        .get(format!("{}/aaep/v1/events", gw.url))
        .bearer_auth("bot-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // A bad request is rejected with a valid subscription.rejected.
    let r = gw.http.post(format!("{}/aaep/v1/subscriptions", gw.url)).bearer_auth("alice-key")
        .json(&json!({"type": "subscription.request", "aaep_version": "2.0.0", "subscriber_id": "x", "capabilities": {}}))
        .send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_valid(
        &handshake("subscription.rejected"),
        &body,
        "subscription.rejected",
    );
    assert_eq!(body["reason_code"], "version_unsupported");
}

#[tokio::test]
async fn filters_never_drop_critical_events_and_extensions_lengthen_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let filters = json!({"event_filters": {"include": ["aaep:agent.session.started"]},
                         "assent": {"timeout_extension_seconds": 5000}});
    let (_sub, mut sse) = gw.subscribe("alice-key", true, filters).await;
    let id = gw.hold_write("/tmp/f").await;
    // awaiting.confirmation is critical: delivered although not included.
    let ev = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    // The extension is capped at 600 s (aaep_max_timeout_extension_seconds).
    let st = gw.status(&id).await;
    let t = |k: &str| {
        time::OffsetDateTime::parse(
            st[k].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert_eq!((t("expires_at") - t("requested_at")).whole_seconds(), 900);
    assert_eq!(ev["timeout_seconds"], 900);
    gw.decide(&id, "alice-key", "approve").await;
    // state.changed is not critical and not included: filtered out.
    sse.none_of("aaep:agent.state.changed", Duration::from_millis(800))
        .await;
}

#[tokio::test]
async fn a_modified_action_is_an_approval_with_modifications() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    let id = gw.hold_write("/tmp/m").await;
    let token = sse.expect("aaep:agent.awaiting.confirmation").await.data["reply_token"]
        .as_str()
        .unwrap()
        .to_string();
    // A modification of the wrong shape makes the reply ignored.
    let mut r = confirm(&token, &sub, "accept");
    r["modified_action"] = json!({"args": {}});
    assert_eq!(gw.reply(Some("alice-key"), r).await, StatusCode::NO_CONTENT);
    assert_eq!(gw.status(&id).await["status"], "pending");
    let mut r = confirm(&token, &sub, "accept");
    r["modified_action"] = json!({"arguments": {"path": "/tmp/m", "content": "safer"}});
    assert_valid(&handshake("confirmation.reply"), &r, "modified reply");
    assert_eq!(gw.reply(Some("alice-key"), r).await, StatusCode::NO_CONTENT);
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some("bot-key"), None)
        .await;
    assert_eq!(
        (rec["status"].as_str(), rec["arguments"]["content"].as_str()),
        (Some("approved"), Some("safer"))
    );
}

#[tokio::test]
async fn clarifications_of_each_kind_accept_only_replies_of_that_kind() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    let ask = |q: Value| async {
        let (s, b) = gw
            .req("POST", "/v1/clarifications", Some("bot-key"), Some(q))
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        b["id"].as_str().unwrap().to_string()
    };
    let cases = [
        (json!(["freetext"]), json!([]), json!(42), json!("at 67")),
        (json!(["yes_no"]), json!([]), json!("yes"), json!(true)),
        (json!(["numeric"]), json!([]), json!("67"), json!(67)),
        (
            json!(["multiple_choice"]),
            json!([{"value": "65", "label": "At 65"}, {"value": "67", "label": "At 67"}]),
            json!("66"),
            json!("67"),
        ),
    ];
    for (kinds, choices, wrong, right) in cases {
        let mut q = json!({"agent": "bot", "session_id": "s1", "question": "When do you retire?",
                           "accepted_response_kinds": kinds, "timeout_seconds": 120});
        if choices != json!([]) {
            q["choices"] = choices;
        }
        let id = ask(q).await;
        let ev = sse.expect("aaep:agent.awaiting.clarification").await.data;
        assert_valid(
            &core("agent.awaiting.clarification"),
            &ev,
            "awaiting.clarification",
        );
        let token = ev["reply_token"].as_str().unwrap();
        let reply = |resp: &Value| {
            json!({"type": "clarification.reply", "reply_token": token, "response": resp,
                                          "subscription_id": sub, "timestamp": now(), "decided_by": "user:test"})
        };
        assert_valid(&handshake("clarification.reply"), &reply(&wrong), "reply");
        // The wrong kind counts as no reply; the agent keeps waiting.
        assert_eq!(
            gw.reply(Some("alice-key"), reply(&wrong)).await,
            StatusCode::NO_CONTENT
        );
        let (_, c) = gw
            .req(
                "GET",
                &format!("/v1/clarifications/{id}"),
                Some("bot-key"),
                None,
            )
            .await;
        assert_eq!(c["status"], "pending", "{kinds}: {wrong} was accepted");
        let (s, _) = gw
            .req(
                "POST",
                &format!("/v1/clarifications/{id}/answer"),
                Some("alice-key"),
                Some(json!({"response": wrong})),
            )
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            gw.reply(Some("alice-key"), reply(&right)).await,
            StatusCode::NO_CONTENT
        );
        let (_, c) = gw
            .req(
                "GET",
                &format!("/v1/clarifications/{id}?wait=5"),
                Some("bot-key"),
                None,
            )
            .await;
        assert_eq!(
            (c["status"].as_str(), &c["response"]),
            (Some("answered"), &right),
            "{kinds}"
        );
        sse.expect("aaep:agent.state.changed").await;
    }
    // Answered through the API; an unanswered one expires.
    let id = ask(json!({"agent": "bot", "session_id": "s1", "question": "Proceed?", "accepted_response_kinds": ["yes_no"]})).await;
    let (s, c) = gw
        .req(
            "POST",
            &format!("/v1/clarifications/{id}/answer"),
            Some("alice-key"),
            Some(json!({"response": false})),
        )
        .await;
    assert_eq!((s, c["response"].clone()), (StatusCode::OK, json!(false)));
    let (s, _) = gw
        .req(
            "POST",
            &format!("/v1/clarifications/{id}/answer"),
            Some("alice-key"),
            Some(json!({"response": true})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let id = ask(json!({"agent": "bot", "session_id": "s1", "question": "Quick?", "accepted_response_kinds": ["yes_no"], "timeout_seconds": 1})).await;
    let (_, c) = gw
        .req(
            "GET",
            &format!("/v1/clarifications/{id}?wait=5"),
            Some("bot-key"),
            None,
        )
        .await;
    assert_eq!(c["status"], "expired");
    // Bad questions are 400s; another agent cannot ask for bot or read its questions.
    for bad in [
        json!({"agent": "bot", "session_id": "s1", "question": "?", "accepted_response_kinds": ["essay"]}),
        json!({"agent": "bot", "session_id": "s1", "question": "?", "accepted_response_kinds": ["multiple_choice"]}),
        json!({"agent": "bot", "session_id": "s1", "question": "", "accepted_response_kinds": ["yes_no"]}),
    ] {
        assert_eq!(
            gw.req("POST", "/v1/clarifications", Some("bot-key"), Some(bad))
                .await
                .0,
            StatusCode::BAD_REQUEST
        );
    }
    assert_eq!(
        gw.req(
            "GET",
            &format!("/v1/clarifications/{id}"),
            Some("other-key"),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn redacted_arguments_never_reach_aaep_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_reg(
        dir.path(),
        300_000,
        Settings::default(),
        AGENTS,
        REDACTING_GOV,
    )
    .await;
    let (_sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    let (s, b) = gw
        .propose(
            "pay",
            json!({"amount": 500, "to": "acme", "card": {"number": "4111111111111111"}}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let ev = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    let text = ev.to_string();
    assert!(!text.contains("4111111111111111"), "{text}");
    assert!(
        text.contains("[redacted]") && text.contains("acme"),
        "{text}"
    );
    // The operator's own view keeps the real call.
    let id = b["approval_id"].as_str().unwrap();
    assert_eq!(
        gw.status(id).await["call"]["arguments"]["card"]["number"],
        "4111111111111111"
    );
}

#[tokio::test]
async fn an_edit_or_modified_action_cannot_cross_a_threshold_the_held_call_did_not() {
    // `pay` always needs a human; spending over 100 in a session is a threshold of its own.
    const AGENT: &str =
        "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";
    const GOV: &str = "policies:\n  - id: t.edit-v1\n    selector: {agents: [\"*\"]}\n    rules:\n      - tool: pay\n        thresholds: {cost: {argument: amount, max_per_session: 100}}\n";
    let dir = tempfile::tempdir().unwrap();
    let gw = start_reg(dir.path(), 300_000, Settings::default(), AGENT, GOV).await;
    let (sub, mut sse) = gw.subscribe("alice-key", true, json!({})).await;
    let (s, b) = gw.propose("pay", json!({"amount": 50})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let token = sse.expect("aaep:agent.awaiting.confirmation").await.data["reply_token"]
        .as_str()
        .unwrap()
        .to_string();
    // An AAEP subscriber's modified_action of 5000 crosses the cost threshold: ignored.
    let mut r = confirm(&token, &sub, "accept");
    r["modified_action"] = json!({"arguments": {"amount": 5000}});
    assert_eq!(gw.reply(Some("alice-key"), r).await, StatusCode::NO_CONTENT);
    assert_eq!(gw.status(&id).await["status"], "pending");
    // So does an operator's edit, with the reason.
    let (s, b) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{id}/decision"),
            Some("alice-key"),
            Some(json!({"decision": "approve", "arguments": {"amount": 5000}})),
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("EDIT_OVER_THRESHOLD")
        ),
        "{b}"
    );
    assert_eq!(b["triggers"], json!(["cost"]), "{b}");
    // Within the threshold it is approved, and later calls count the edited amount.
    let (s, b) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{id}/decision"),
            Some("alice-key"),
            Some(json!({"decision": "approve", "arguments": {"amount": 90}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = gw.propose("pay", json!({"amount": 20})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["triggers"], json!(["cost"]), "90 + 20 is over 100: {b}");
}

/// AAEP §6.2.1/§6.2.2: every confirmation gets its own reply token (`rpl_` + 32 hex), stored
/// with a unique index so that no token is issued twice, also across a restart; a decided
/// confirmation keeps its token, so it can never be handed out again.
#[tokio::test]
async fn reply_tokens_are_unique_across_confirmations_and_restarts_and_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let mut tokens = Vec::new();
    let read = |gw: &Gw| -> Vec<(String, String)> {
        let db = rusqlite::Connection::open(gw.state.store.db_path()).unwrap();
        db.prepare("SELECT id, reply_token FROM approvals ORDER BY rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let mut first = String::new();
    for round in 0..2 {
        let gw = start(dir.path()).await;
        for n in 0..10 {
            let (s, b) = gw
                .propose("pay", json!({"amount": 200 + round * 100 + n, "to": "bob"}))
                .await;
            assert_eq!(s, StatusCode::ACCEPTED, "{b}");
            if round == 0 && n == 0 {
                first = b["approval_id"].as_str().unwrap().to_string();
                let (s, _) = gw.decide(&first, "alice-key", "approve").await;
                assert_eq!(s, StatusCode::OK);
            }
        }
        tokens = read(&gw);
        gw.stop().await;
    }
    assert_eq!(tokens.len(), 20);
    let mut seen = std::collections::HashSet::new();
    for (_, t) in &tokens {
        assert!(
            t.len() == 36 && t.starts_with("rpl_") && t[4..].bytes().all(|c| c.is_ascii_hexdigit()),
            "{t}"
        );
        assert!(seen.insert(t.clone()), "reply token {t} issued twice");
    }
    // The decided confirmation keeps its token; the unique index refuses to issue it again.
    let kept = tokens
        .iter()
        .find(|(id, _)| *id == first)
        .unwrap()
        .1
        .clone();
    let db = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    let again = db.execute(
        "UPDATE approvals SET reply_token = ?1 WHERE id = ?2",
        [&kept, &tokens[1].0],
    );
    assert!(
        again.is_err_and(|e| e.to_string().contains("UNIQUE")),
        "a reply token could be issued twice"
    );
}

/// Issue 10 §5: an `on_timeout` escalation outlives the first wait, so the
/// `awaiting.confirmation` announces the real deadline (first wait + `after_seconds`) with the
/// escalation in `extensions.assent`, the escalation itself is an `agent.progress.updated`
/// naming the new approvers, a reply is accepted until the announced deadline (even after the
/// first wait ran out) and ignored after it.
#[tokio::test]
async fn an_escalation_is_announced_up_front_and_replies_count_until_the_announced_deadline() {
    const ESC_GOV: &str = r#"
policies:
  - id: acme.test.esc-v1
    selector: {agents: ["*"]}
    rules:
      - tool: quick
        approval: true
        approvers: [finance]
        timeout_seconds: 1
        on_timeout: {escalate_to: [ops], after_seconds: 3}
"#;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        approval_timeout_ms: Some(300_000),
        ..Settings::default()
    };
    let gw = start_reg(dir.path(), 300_000, settings, AGENTS, ESC_GOV).await;
    let (sub, mut sse) = gw.subscribe("olaf-key", true, json!({})).await;
    let (_, q) = gw.propose("quick", json!({})).await;
    let id = q["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{q}"))
        .to_string();
    let ev = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    assert_valid(
        &core("agent.awaiting.confirmation"),
        &ev,
        "escalating confirmation",
    );
    assert_eq!(ev["timeout_seconds"], 4, "{ev}");
    let esc = &ev["extensions"]["assent"]["escalation"];
    assert_eq!(
        (&esc["after_seconds"], &esc["escalate_to"]),
        (&json!(3), &json!(["ops"]))
    );
    let deadline = esc["deadline"].as_str().unwrap().to_string();
    let token = ev["reply_token"].as_str().unwrap().to_string();
    // The escalation (after the first second) is announced; the deadline stays.
    let ev = sse.expect("aaep:agent.progress.updated").await.data;
    assert_valid(&core("agent.progress.updated"), &ev, "escalation progress");
    let esc = &ev["extensions"]["assent"]["escalation"];
    assert_eq!(esc["approvers"], json!(["finance", "ops"]), "{ev}");
    assert_eq!(esc["deadline"], deadline.as_str());
    assert!(ev["eta_ms"].as_i64().unwrap() <= 3000, "{ev}");
    // Past the first wait, before the announced deadline: olaf (ops) may now accept.
    assert_eq!(gw.status(&id).await["status"], "pending");
    assert_eq!(
        gw.reply(Some("olaf-key"), confirm(&token, &sub, "accept"))
            .await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(gw.status(&id).await["status"], "approved");

    // A second one whose announced deadline has passed: the reply is ignored.
    let (_, q) = gw.propose("quick", json!({"n": 2})).await;
    let late = q["approval_id"].as_str().unwrap().to_string();
    let token = sse.expect("aaep:agent.awaiting.confirmation").await.data["reply_token"]
        .as_str()
        .unwrap()
        .to_string();
    let db = rusqlite::Connection::open(gw.state.store.db_path()).unwrap();
    db.execute("UPDATE approvals SET requested_at = requested_at - 4500, expires_at = expires_at - 4500 WHERE id = ?1", [&late]).unwrap();
    assert_eq!(
        gw.reply(Some("olaf-key"), confirm(&token, &sub, "accept"))
            .await,
        StatusCode::NO_CONTENT
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rec = gw.status(&late).await;
    assert_eq!(rec["status"], "expired", "{rec}");
    assert!(rec.get("token").is_none(), "{rec}");
}
