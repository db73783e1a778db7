//! AAEP confirmations (§6.2, §6.6): announced with a valid `agent.awaiting.confirmation`,
//! answered with a `confirmation.reply` and resolved with `agent.state.changed`; the first of
//! two racing replies wins (forwarded replies count); a `modified_action` is an approval with
//! modifications, and one that cannot be applied (a wrong shape, a threshold the held call did
//! not cross) a reject; redacted arguments never reach subscribers.

use super::kit::{AWAITING, confirm, core, handshake};
use crate::kit::{
    AGENTS, BOT, COST_RULE, Gw, OP, assert_error, audit_count, one_tool_agent, policy,
    redacting_gov, serve, serve_policy,
};
use crate::schemas::{assert_valid, validator};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// An `accept` reply to confirmation `token` (subscription `sub`) is taken (`204`) and decides
/// nothing: approval `id` stays pending, with no token. Its status, as read.
pub(super) async fn accept_decides_nothing(gw: &Gw, sub: &str, id: &str, token: &str) -> Value {
    let accept = confirm(token, sub, "accept");
    assert_eq!(gw.reply(Some(OP), accept).await, StatusCode::NO_CONTENT);
    let st = gw.status(id).await;
    assert_eq!(
        (st["status"].as_str(), st.get("approval_token")),
        (Some("pending"), None),
        "{st}"
    );
    st
}

/// A `reject` reply to confirmation `token` (subscription `sub`) is taken and rejects approval
/// `id`.
pub(super) async fn reject_is_taken(gw: &Gw, sub: &str, id: &str, token: &str) {
    let reject = confirm(token, sub, "reject");
    assert_eq!(gw.reply(Some(OP), reject).await, StatusCode::NO_CONTENT);
    assert_eq!(gw.status(id).await["status"], "rejected");
}

#[tokio::test]
async fn a_confirmation_is_announced_answered_and_resolved_with_valid_events() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let id = gw.hold_write("/tmp/a").await;
    let ev = sse.expect(AWAITING).await.data;
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
        token.len() == 48 && token[4..].chars().all(|c| c.is_ascii_hexdigit()),
        "{token}"
    );
    assert_eq!(
        (ev["urgency"].as_str(), ev["default_decision"].as_str()),
        (Some("critical"), Some("reject"))
    );
    assert!(ev["session_id"].as_str().unwrap().starts_with("sess_"));
    assert_eq!(ev["extra_context"]["approval_id"], json!(id));
    // Nothing is masked, so the call's hash is named (a masked call's is not: aaep::redacted).
    let (_, a) = gw.approval(&id, OP).await;
    assert_eq!(ev["extra_context"]["call_hash"], a["call_hash"], "{ev}");
    assert!(
        ev["consequence"]
            .as_str()
            .unwrap()
            .contains(r#"{"content":"x","path":"/tmp/a"}"#)
    );
    // The same call again while pending joins it: no second confirmation.
    let args = json!({"content": "x", "path": "/tmp/a"});
    let (s, b) = gw
        .call("s1", "write_file", args, json!({"server": "fs"}))
        .await;
    assert_eq!(
        (s, b["joined"].as_bool()),
        (StatusCode::ACCEPTED, Some(true))
    );
    sse.none_of(AWAITING, Duration::from_millis(300)).await;

    let reply = confirm(token, &sub, "accept");
    assert_valid(&handshake("confirmation.reply"), &reply, "our reply");
    assert_eq!(gw.reply(Some(OP), reply).await, StatusCode::NO_CONTENT);
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
    // It says which confirmation it resolves (found by review: only courtesy notices did, so
    // with two pending in one session a client could not tell which prompt to remove).
    assert_eq!(ev["extensions"]["assent"]["approval_id"], json!(id), "{ev}");
    assert_eq!(
        ev["extensions"]["assent"]["reply_token"],
        json!(token),
        "{ev}"
    );
    // sequence numbers increase
    assert!(ev["sequence_number"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn first_reply_wins_across_two_subscriptions_and_forwarded_replies_count() {
    let gw = serve().await;
    let (a, mut sa) = gw.listen().await;
    let (o, mut so) = gw.subscribe("olaf-key", true, json!({})).await;
    for round in 0..5 {
        let (id, token) = gw.confirmation(&mut sa, &format!("/tmp/race{round}")).await;
        assert_eq!(so.expect(AWAITING).await.data["reply_token"], json!(token));
        let (x, y) = tokio::join!(
            gw.reply(Some(OP), confirm(&token, &a, "accept")),
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
    let (id, token) = gw.confirmation(&mut sf, "/tmp/fwd").await;
    assert_eq!(
        gw.reply(Some(OP), confirm(&token, &a, "accept")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(gw.status(&id).await["status"], "approved");
    let n = audit_count(&gw.data_dir, "decision");
    assert_eq!(n, 6);
}

#[tokio::test]
async fn a_modified_action_is_an_approval_with_modifications() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    // Found by review: an accept with a modification of the wrong shape (here the spec's own
    // example's `{field, original_value, modified_value}`) was ignored, and the approval left
    // pending for an approving default to run unmodified. It is a reject (AAEP §6.3.2).
    let (wrong, token) = gw.confirmation(&mut sse, "/tmp/w").await;
    let mut r = confirm(&token, &sub, "accept");
    r["modified_action"] =
        json!({"field": "content", "original_value": "x", "modified_value": "y"});
    assert_eq!(gw.reply(Some(OP), r).await, StatusCode::NO_CONTENT);
    let rec = gw.status(&wrong).await;
    assert_eq!(rec["status"], "rejected", "{rec}");
    let reason = rec["decisions"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("taken as reject"), "{rec}");
    let (id, token) = gw.confirmation(&mut sse, "/tmp/m").await;
    let mut r = confirm(&token, &sub, "accept");
    r["modified_action"] = json!({"arguments": {"path": "/tmp/m", "content": "safer"}});
    assert_valid(&handshake("confirmation.reply"), &r, "modified reply");
    assert_eq!(gw.reply(Some(OP), r).await, StatusCode::NO_CONTENT);
    let (_, rec) = gw.approval(&id, BOT).await;
    assert_eq!(
        (rec["status"].as_str(), rec["arguments"]["content"].as_str()),
        (Some("approved"), Some("safer"))
    );
}

/// Found by review: a `modified_action` naming another tool (or server, or anything besides
/// `arguments`) was accepted with the extras ignored, approving the held tool with the new
/// arguments — not what the subscriber asked. It cannot be applied: a reject (§6.3.2). Naming
/// the held call's own tool and server is no change.
#[tokio::test]
async fn a_modified_action_changing_more_than_the_arguments_is_a_reject() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let args = |path: &str| json!({"path": path, "content": "safer"});
    for (n, extra) in [
        json!({"tool": "delete_file"}),
        json!({"server": "other"}),
        json!({"tool": "write_file", "server": "fs", "note": "x"}),
    ]
    .into_iter()
    .enumerate()
    {
        let path = format!("/tmp/t{n}");
        let (id, token) = gw.confirmation(&mut sse, &path).await;
        let mut m = extra.clone();
        m["arguments"] = args(&path);
        let mut r = confirm(&token, &sub, "accept");
        r["modified_action"] = m;
        assert_eq!(gw.reply(Some(OP), r).await, StatusCode::NO_CONTENT);
        let rec = gw.status(&id).await;
        assert_eq!(rec["status"], "rejected", "{extra}: {rec}");
        let reason = rec["decisions"][0]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("cannot be changed"), "{rec}");
    }
    let (id, token) = gw.confirmation(&mut sse, "/tmp/t").await;
    let mut r = confirm(&token, &sub, "accept");
    r["modified_action"] =
        json!({"tool": "write_file", "server": "fs", "arguments": args("/tmp/t")});
    assert_eq!(gw.reply(Some(OP), r).await, StatusCode::NO_CONTENT);
    let (_, rec) = gw.approval(&id, BOT).await;
    assert_eq!(
        (rec["status"].as_str(), rec["arguments"]["content"].as_str()),
        (Some("approved"), Some("safer")),
        "{rec}"
    );
}

#[tokio::test]
async fn an_edit_or_modified_action_cannot_cross_a_threshold_the_held_call_did_not() {
    // `pay` always needs a human; spending over 100 in a session is a threshold of its own.
    let agent = one_tool_agent("bot", "{alias: pay, approval: true}");
    let gw = serve_policy(&agent, &policy("t.edit-v1", COST_RULE)).await;
    let (sub, mut sse) = gw.listen().await;
    let (s, b) = gw.propose("pay", json!({"amount": 50})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let first = b["approval_id"].as_str().unwrap().to_string();
    let token = sse.reply_token(AWAITING).await;
    // An AAEP subscriber's modified_action of 5000 crosses the cost threshold: not applied,
    // and the accept is taken as a reject (nothing runs, neither 5000 nor 50).
    let mut r = confirm(&token, &sub, "accept");
    r["modified_action"] = json!({"arguments": {"amount": 5000}});
    assert_eq!(gw.reply(Some(OP), r).await, StatusCode::NO_CONTENT);
    let rec = gw.status(&first).await;
    assert_eq!(rec["status"], "rejected", "{rec}");
    assert!(
        rec["decisions"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("EDIT") || r.contains("threshold")),
        "the reason says why: {rec}"
    );
    let (s, b) = gw.propose("pay", json!({"amount": 50})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    // An operator's edit over the threshold is refused, with the reason.
    let (s, b) = gw.edit(&id, json!({"amount": 5000})).await;
    assert_error(
        s,
        &b,
        StatusCode::UNPROCESSABLE_ENTITY,
        "EDIT_OVER_THRESHOLD",
    );
    assert_eq!(b["triggers"], json!(["cost"]), "{b}");
    // Within the threshold it is approved, and later calls count the edited amount.
    let (s, b) = gw.edit(&id, json!({"amount": 90})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = gw.propose("pay", json!({"amount": 20})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["triggers"], json!(["cost"]), "90 + 20 is over 100: {b}");
}

#[tokio::test]
async fn redacted_arguments_never_reach_aaep_subscribers() {
    let gw = serve_policy(AGENTS, &redacting_gov()).await;
    let (_sub, mut sse) = gw.listen().await;
    let (s, b) = gw
        .propose(
            "pay",
            json!({"amount": 500, "to": "acme", "card": {"number": "4111111111111111"}}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let ev = sse.expect(AWAITING).await.data;
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

/// Attack (found by review): canonical JSON sorts keys, so an agent put 140 padding arguments
/// before the one that matters (`path`); every text of the confirmation
/// was cut before it, yet `accept` was offered and bound the whole call nobody had seen. A
/// confirmation that cannot show the whole call offers only `reject`, and an `accept` reply is
/// ignored; invisible characters in arguments are shown as escapes, never raw.
#[tokio::test]
async fn a_confirmation_too_long_to_show_whole_offers_only_reject() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let mut args = json!({"content": "x", "path": "/etc/attacker"});
    for i in 0..140 {
        args[format!("a{i:03}")] = json!("x".repeat(120));
    }
    let (s, b) = gw
        .call("s1", "write_file", args, json!({"server": "fs"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let ev = sse.expect(AWAITING).await.data;
    assert_valid(&core("agent.awaiting.confirmation"), &ev, "awaiting");
    let shown: Vec<&String> = ev
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.to_string().contains("/etc/attacker"))
        .map(|(k, _)| k)
        .collect();
    assert!(shown.is_empty(), "the payee is shown in {shown:?}");
    assert_eq!(ev["allowed_replies"], json!(["reject"]));
    let token = ev["reply_token"].as_str().unwrap();
    accept_decides_nothing(&gw, &sub, &id, token).await;
    reject_is_taken(&gw, &sub, &id, token).await;

    // A call short enough is offered whole, its right-to-left override as an escape.
    let args = json!({"content": "evil\u{202e}txt.exe", "path": "/tmp/b"});
    gw.call("s1", "write_file", args, json!({"server": "fs"}))
        .await;
    let ev = sse.expect(AWAITING).await.data;
    assert_eq!(ev["allowed_replies"], json!(["accept", "reject"]));
    let consequence = ev["consequence"].as_str().unwrap();
    assert!(
        consequence.contains(r"evil\u202etxt.exe") && !consequence.contains('\u{202e}'),
        "{consequence}"
    );
}
