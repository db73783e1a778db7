//! AAEP event streams (§5, §6.5): a stream resumes after `Last-Event-ID` and opens a
//! subscription without an id; only its owner may open it, agents may not subscribe, and a bad
//! request gets a valid `subscription.rejected`; cancelling a session announces
//! `agent.session.cancelled` once and retires its confirmations' and questions' reply tokens.

use super::kit::{AWAITING, Sse, confirm, core, handshake, now};
use crate::kit::{BOT, OP, assert_says, serve};
use crate::schemas::assert_valid;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// Attack (found by review): the AAEP `session_id` of session `s1` is `sess_` + 32 hex; an
/// agent that cancels a session of that very name (idle: nothing pending under it) announced
/// `agent.session.cancelled` under the id of `s1`, so AAEP clients dropped `s1`'s pending
/// confirmation while its approving default ran on. Names of the hashed form are hashed too.
#[tokio::test]
async fn a_session_named_like_anothers_aaep_id_cannot_cancel_it_on_the_stream() {
    let gw = serve().await;
    let (_sub, mut sse) = gw.listen().await;
    let id = gw.hold_write("/tmp/c").await;
    let held = sse.expect(AWAITING).await.data;
    let forged = held["session_id"].as_str().unwrap().to_string();
    assert!(forged.starts_with("sess_") && forged.len() == 37, "{held}");
    let (s, _) = gw.cancel_session(&forged, BOT).await;
    assert_eq!(s, StatusCode::OK);
    let ev = sse.expect("aaep:agent.session.cancelled").await.data;
    assert_ne!(ev["session_id"], forged, "{ev}");
    assert_says(&ev, "summary_normal", "0 pending");
    assert_eq!(gw.status(&id).await["status"], "pending");
    gw.stop().await;
}

/// Attack (found by review): agents `bot` and `other` both name a session `sess_run42`, a
/// name of the AAEP form that was passed through as its AAEP `session_id`; `other` cancelling
/// its own idle `sess_run42` announced `agent.session.cancelled` under the id of `bot`'s
/// session with a pending confirmation, which AAEP clients drop (§6.8) while its default runs.
#[tokio::test]
async fn an_agent_cancelling_a_session_name_another_agent_uses_cancels_nothing_of_its_on_the_stream()
 {
    let gw = serve().await;
    let (_sub, mut sse) = gw.listen().await;
    let args = json!({"path": "/tmp/c", "content": "x"});
    let (s, b) = gw
        .call("sess_run42", "write_file", args, json!({"server": "fs"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let held = sse.expect(AWAITING).await.data;
    assert_ne!(held["session_id"], "sess_run42", "{held}");
    let (s, _) = gw.cancel_session("sess_run42", "other-key").await;
    assert_eq!(s, StatusCode::OK);
    let ev = sse.expect("aaep:agent.session.cancelled").await.data;
    assert_ne!(ev["session_id"], held["session_id"], "{ev}");
    assert_says(&ev, "summary_normal", "0 pending");
    let id = b["approval_id"].as_str().unwrap();
    assert_eq!(gw.status(id).await["status"], "pending");
    gw.stop().await;
}

/// Attack (found by review): an agent with a call held in session `s1` (its default on timeout
/// approving) asks a decoy question in `s1` that times out at once; its resolution,
/// `agent.state.changed` back to `thinking`, named no question, so a client following §6.8
/// could take it for the end of the session's pending confirmation. It names the question.
#[tokio::test]
async fn a_questions_resolution_names_the_question_it_resolves() {
    let gw = serve().await;
    let (_sub, mut sse) = gw.listen().await;
    let (id, token) = gw.confirmation(&mut sse, "/tmp/c").await;
    let q = gw
        .ask(
            json!({"agent": "bot", "session_id": "s1", "question": "Which folder?",
            "accepted_response_kinds": ["freetext"], "timeout_seconds": 1}),
        )
        .await;
    let q_token = sse.reply_token("aaep:agent.awaiting.clarification").await;
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_valid(&core("agent.state.changed"), &ev, "state.changed");
    let named = &ev["extensions"]["assent"];
    assert_eq!(named["clarification_id"], q.as_str(), "{ev}");
    assert_eq!(named["reply_token"], q_token.as_str(), "{ev}");
    assert_ne!(named["reply_token"], token.as_str(), "{ev}");
    assert_eq!(gw.status(&id).await["status"], "pending");
    gw.stop().await;
}

#[tokio::test]
async fn cancelling_a_session_cancels_its_confirmations_and_their_reply_tokens() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let (id, token) = gw.confirmation(&mut sse, "/tmp/c").await;
    // A question of the same session dies with it: its reply token no longer answers it.
    let (s, q) = gw
        .post(
            "/v1/clarifications",
            BOT,
            json!({"agent": "bot", "session_id": "s1",
            "question": "Which folder?", "accepted_response_kinds": ["freetext"]}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{q}");
    let q_token = sse.reply_token("aaep:agent.awaiting.clarification").await;
    let (s, b) = gw.cancel_session("s1", BOT).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["clarifications"], json!([q["id"]]), "{b}");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "thinking");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["summary_normal"], "The question was withdrawn.");
    let ev = sse.expect("aaep:agent.session.cancelled").await.data;
    assert_valid(&core("agent.session.cancelled"), &ev, "session.cancelled");
    assert_says(&ev, "summary_normal", "1 pending");
    let first_session = ev["session_id"].clone();
    let answer = json!({"type": "clarification.reply", "reply_token": q_token, "response": "/tmp",
                        "subscription_id": sub, "timestamp": now()});
    assert_eq!(gw.reply(Some(OP), answer).await, StatusCode::NO_CONTENT);
    let (_, c) = gw.clarification(q["id"].as_str().unwrap(), BOT).await;
    assert_eq!(c["status"], "cancelled", "{c}");
    // Exactly once per session: cancelling it again announces nothing new, while a session
    // with nothing pending is announced once.
    let (s, _) = gw.cancel_session("s1", BOT).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = gw.cancel_session("idle", BOT).await;
    assert_eq!(s, StatusCode::OK);
    let ev = sse.expect("aaep:agent.session.cancelled").await.data;
    assert_ne!(ev["session_id"], first_session, "{ev}");
    assert_says(&ev, "summary_normal", "0 pending");
    gw.cancel_session("idle", BOT).await;
    sse.none_of("aaep:agent.session.cancelled", Duration::from_millis(1500))
        .await;
    assert_eq!(
        gw.reply(Some(OP), confirm(&token, &sub, "accept")).await,
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
    let gw = serve().await;
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
    let e1 = anon.expect(AWAITING).await;
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
    let a = again.expect(AWAITING).await;
    let b = again.expect(AWAITING).await;
    assert!(a.data["consequence"].as_str().unwrap().contains("/tmp/r2"));
    assert!(b.data["consequence"].as_str().unwrap().contains("/tmp/r3"));
    drop(again);
    // Found by review: the same URL again without the id, as a plain SSE client reconnects
    // (with its Last-Event-ID), opened a subscription at the newest event and lost the gap.
    gw.hold_write("/tmp/r4").await;
    let mut plain = Sse::open(&gw, "olaf-key", "/aaep/v1/events", b.id.as_deref()).await;
    let c = plain.expect(AWAITING).await;
    assert!(
        c.data["consequence"].as_str().unwrap().contains("/tmp/r4"),
        "{:#}",
        c.data
    );
    drop(plain);
    // Another operator cannot open this subscription; an agent cannot subscribe.
    let status = async |path: String, key: &str| {
        let r = gw.http.get(format!("{}{path}", gw.url)).bearer_auth(key);
        r.send().await.unwrap().status()
    };
    let path = format!("/aaep/v1/events?subscription_id={sub}");
    assert_eq!(status(path, OP).await, StatusCode::NOT_FOUND);
    let path = "/aaep/v1/events".to_string();
    assert_eq!(status(path, BOT).await, StatusCode::FORBIDDEN);
    // A bad request is rejected with a valid subscription.rejected.
    let r = gw.http.post(format!("{}/aaep/v1/subscriptions", gw.url)).bearer_auth(OP)
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
    // Found by review: a posted `sse:` subscriber id was taken for a bare stream's own, and
    // the streams keeper closed it under its subscriber.
    let r = gw.http.post(format!("{}/aaep/v1/subscriptions", gw.url)).bearer_auth(OP)
        .json(&json!({"type": "subscription.request", "aaep_version": "1.0.0", "subscriber_id": "sse:alice", "capabilities": {}}))
        .send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "subscription.rejected", "{body}");
    assert!(
        body["reason_message"].as_str().unwrap().contains("sse:"),
        "{body}"
    );
}

/// Found by review: only a new subscription was held to the resume window (10,000 events), so
/// reopening an existing one without `Last-Event-ID` (or with an old one) replayed its whole
/// history from its start on every reconnect, through the store. It resumes at most 10,000
/// events back from the newest.
#[tokio::test]
async fn reopening_a_subscription_replays_at_most_the_resume_window() {
    let gw = serve().await;
    let mut first = Sse::open(&gw, "olaf-key", "/aaep/v1/events", None).await;
    let opened = first.next(Duration::from_secs(5)).await.unwrap();
    let sub = opened.data["subscription_id"].as_str().unwrap().to_string();
    drop(first);
    // 10,100 events since it opened (as a long history would leave them).
    gw.sql().exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10100) \
         INSERT INTO aaep_events (event_id, type, critical, subscription_id, approval_id, at, data) \
         SELECT 'evt_pad' || i, 'agent.state.changed', 1 = 0, NULL, NULL, 0, '{}' FROM n",
        &[],
    );
    gw.hold_write("/tmp/last").await;
    let mut again = Sse::open(
        &gw,
        "olaf-key",
        &format!("/aaep/v1/events?subscription_id={sub}"),
        None,
    )
    .await;
    let e = again.next(Duration::from_secs(5)).await.unwrap();
    let seq = e.data["sequence_number"].as_i64().unwrap();
    assert!(
        seq > 101,
        "resumed within the window, not at its start: {seq}"
    );
}

/// Found by review of AAEP retention: a reconnecting client whose `Last-Event-ID` names an
/// event retention has pruned got a subscription at the newest event, and the confirmations
/// raised since that event were never delivered to it. Such an id resumes as far back as
/// the resume window goes.
#[tokio::test]
async fn a_last_event_id_retention_pruned_still_delivers_the_confirmations_since() {
    let gw = serve().await;
    let (_, mut sse) = gw.listen().await;
    gw.hold_write("/tmp/p1").await;
    let seen = sse.expect(AWAITING).await;
    drop(sse);
    gw.hold_write("/tmp/p2").await;
    let id = seen.id.clone().unwrap();
    gw.sql().exec(
        "DELETE FROM aaep_events WHERE event_id = ?1",
        &[(&id).into()],
    );
    let mut again = Sse::open(&gw, "olaf-key", "/aaep/v1/events", Some(&id)).await;
    // The stream marks its subscription seen, which retention keeps.
    let opened = again.next(Duration::from_secs(5)).await.unwrap();
    let sub = opened.data["subscription_id"].as_str().unwrap().to_string();
    let seen = || {
        gw.sql().rows(
            "SELECT CAST(count(*) AS TEXT) FROM aaep_subscriptions WHERE id = ?1 AND last_seen_at IS NOT NULL",
            &[(&sub).into()],
        )[0][0]
            .clone()
    };
    let start = std::time::Instant::now();
    while seen() != "1" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never marked seen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut found = false;
    while let Some(m) = again.next(Duration::from_secs(5)).await {
        if m.data.to_string().contains("/tmp/p2") {
            found = true;
            break;
        }
    }
    assert!(
        found,
        "the confirmation raised since the pruned event was not delivered"
    );
}

/// A `subscription.request` of subscriber `who` with `capabilities` `caps`, posted with key
/// `key`: the status and body.
async fn subscribe_raw(
    gw: &crate::kit::Gw,
    key: &str,
    who: &str,
    caps: Value,
) -> (StatusCode, Value) {
    let req = json!({"type": "subscription.request", "aaep_version": "1.0.0",
                     "subscriber_id": who, "capabilities": caps});
    let r = gw
        .http
        .post(format!("{}/aaep/v1/subscriptions", gw.url))
        .bearer_auth(key)
        .json(&req)
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

/// Attack (found by review): subscriptions had no cap and their filter lists no length, and
/// every open one was read again on each change, so one operator key opening a thousand
/// subscriptions of 1,200 filters each stalled the store for every agent. A request listing
/// more than 64 filters, or longer than 16 KiB, is rejected; an operator keeps at most 16
/// subscriptions open, opening one more closing their oldest (its stream ends, `404` when
/// opened again); and one subscription has at most two streams open at once (a third ends
/// the oldest).
#[tokio::test]
async fn an_operator_holds_a_bounded_number_of_subscriptions_filters_and_streams() {
    let gw = serve().await;
    let many: Vec<String> = (0..65).map(|i| format!("aaep:evt.{i}")).collect();
    let caps = json!({"event_filters": {"include": many}});
    let (s, b) = subscribe_raw(&gw, OP, "fat", caps).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_valid(&handshake("subscription.rejected"), &b, "rejected");
    assert_says(&b, "reason_message", "at most 64");
    // Nor is a request padded past 16 KiB stored (it was, as sent, up to the body limit).
    let padded = json!({"x-pad": {"v": "a".repeat(20_000)}});
    let (s, b) = subscribe_raw(&gw, OP, "padded", padded).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_valid(&handshake("subscription.rejected"), &b, "rejected");
    assert_says(&b, "reason_message", "at most 16384");
    let mut ids = Vec::new();
    for i in 0..17 {
        let (s, b) = subscribe_raw(&gw, OP, &format!("s{i}"), json!({})).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        ids.push(b["subscription_id"].as_str().unwrap().to_string());
    }
    let path = |id: &str| format!("{}/aaep/v1/events?subscription_id={id}", gw.url);
    let open = |id: String| {
        let (http, url) = (gw.http.clone(), path(&id));
        async move { http.get(url).bearer_auth(OP).send().await.unwrap() }
    };
    assert_eq!(
        open(ids[0].clone()).await.status(),
        StatusCode::NOT_FOUND,
        "the oldest closed"
    );
    let closed = gw
        .sql()
        .int("SELECT count(*) FROM audit WHERE kind = 'aaep.closed'", &[]);
    assert_eq!(closed, 1);
    let (a, b) = (open(ids[16].clone()).await, open(ids[16].clone()).await);
    assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
    // A third takes the place of the oldest, which ends (a refusal would end a browser's
    // EventSource for good, and a half-open connection keeps its stream for minutes).
    let third = open(ids[16].clone()).await;
    assert_eq!(third.status(), StatusCode::OK);
    let ended = tokio::time::timeout(Duration::from_secs(10), a.bytes()).await;
    assert!(ended.is_ok(), "the oldest stream did not end");
    drop((b, third));
    gw.stop().await;
}

/// Attack (found by review): a confirmation raised while a subscriber was disconnected was
/// pushed out of its resume window by enough events after it — an agent proposing and
/// cancelling in a loop — so the reconnecting subscriber never saw it and its approving
/// default ran unseen. A resumption held to the window is first sent the confirmations still
/// pending from the part of the log it skipped. Found by review since: only the oldest 64 of
/// them were sent (one agent may hold 100 pending: 64 decoys hid the real one), and no
/// question still pending there; now every one is, page by page, before any live event.
#[tokio::test]
async fn a_resumption_past_the_window_still_gets_the_confirmations_pending_in_the_gap() {
    let gw = serve().await;
    let (_, mut sse) = gw.listen().await;
    gw.hold_write("/tmp/first").await;
    let seen = sse.expect(AWAITING).await;
    drop(sse);
    for i in 0..70 {
        gw.hold_write(&format!("/tmp/decoy-{i}")).await;
    }
    gw.hold_write("/tmp/in-the-gap").await;
    gw.ask(
        json!({"agent": "bot", "session_id": "s1", "question": "Asked-in-the-gap?",
                  "accepted_response_kinds": ["yes_no"]}),
    )
    .await;
    gw.sql().exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10100) \
         INSERT INTO aaep_events (event_id, type, critical, subscription_id, approval_id, at, data) \
         SELECT 'evt_flood' || i, 'agent.state.changed', 1 = 0, NULL, NULL, 0, '{}' FROM n",
        &[],
    );
    let last = seen.id.clone().unwrap();
    let mut again = Sse::open(&gw, OP, "/aaep/v1/events", Some(&last)).await;
    let (mut decoys, mut found, mut asked) = (0, false, false);
    while let Some(m) = again.next(Duration::from_secs(5)).await {
        let text = m.data.to_string();
        decoys += usize::from(text.contains("/tmp/decoy-"));
        found |= text.contains("/tmp/in-the-gap");
        asked |= text.contains("Asked-in-the-gap?");
        if found && asked {
            break;
        }
    }
    assert!(
        found,
        "the confirmation pending in the gap was not delivered"
    );
    assert!(asked, "the question pending in the gap was not delivered");
    assert_eq!(decoys, 70);
    // Then the live events, after what was caught up.
    gw.hold_write("/tmp/live").await;
    let live = again.expect(AWAITING).await;
    assert!(
        live.data.to_string().contains("/tmp/live"),
        "{:?}",
        live.data
    );
    gw.stop().await;
}
