//! One approval's life cycle through the HTTP API: a call allowed, held or denied; approved
//! (waking the agent's long-poll) or denied; its token redeemed exactly once for the exact
//! call, or expired; an approval expired by the running server. Concurrency and restarts are in
//! `durability.rs`, authentication and bad input in `access.rs`.

use crate::kit::{BOT, OP, assert_answer, assert_error, assert_says, serve, start_with, token_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn allow_pending_and_deny_paths() {
    let gw = serve().await;
    let (s, b) = gw.propose("read", json!({"x": 1})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["decision"], "allow");
    assert_eq!(b["call_hash"].as_str().unwrap().len(), 64);

    let (s, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(
        (b["decision"].as_str(), b["code"].as_str()),
        (Some("pending"), Some("TOOL_BLOCKED_PENDING_APPROVAL"))
    );
    assert_eq!(b["message"], "Pay 500 to bob?");
    assert!(b["expires_at"].as_str().unwrap().ends_with('Z'));

    let (s, b) = gw.propose("launch", json!({})).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(
        (b["decision"].as_str(), b["code"].as_str()),
        (Some("deny"), Some("TOOL_DENIED"))
    );
    assert_says(&b, "reason", "`launch` is not declared");

    // Only the listed MCP tools are declared.
    let (s, b) = gw
        .call("s", "delete_file", json!({}), json!({"server": "fs"}))
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOOL_DENIED");
    let (s, b) = gw.get("/v1/agents/bot/mcp-servers/fs/tools", BOT).await;
    assert_eq!(
        (s, b["tools"].clone()),
        (StatusCode::OK, json!(["read_file", "write_file"]))
    );

    let (s, b) = gw.get("/v1/approvals?status=pending", OP).await;
    assert_eq!(s, StatusCode::OK);
    let list = b["approvals"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    let a = &list[0];
    for k in [
        "id",
        "status",
        "agent",
        "session_id",
        "call",
        "call_hash",
        "message",
        "risk_tier",
        "irreversible",
        "reasons",
        "decisions",
        "requested_at",
        "expires_at",
    ] {
        assert!(a.get(k).is_some(), "approval record lacks {k}: {a}");
    }
    assert_eq!(
        a["call"],
        json!({"tool": "pay", "server": null, "arguments": {"amount": 500, "to": "bob"}})
    );
    assert!(a.get("token").is_none());
    let (s, b) = gw.req("GET", "/healthz", None, None).await;
    assert_answer(s, &b, "status", StatusCode::OK, "ok");
    gw.stop().await;
}

/// Attack: a database writer sets a redeemed token's `used_at` back to NULL (the row is put
/// back as it was, seal and all) to run the approved call a second time. The redemption reads
/// the audit chain's `token.redeemed` record as well as the row: still `409 TOKEN_USED`, and
/// the refusal is audited.
#[tokio::test]
async fn a_redeemed_token_made_unused_again_does_not_redeem_twice() {
    let gw = serve().await;
    let args = json!({"amount": 500, "to": "bob"});
    let id = gw.pending("pay", args.clone()).await;
    let (s, d) = gw.decide(&id, OP, "approve").await;
    assert_answer(s, &d, "status", StatusCode::OK, "approved");
    let token = json!(token_of(&gw.as_agent(&id).await));
    let (s, b) = gw.redeem_as(BOT, &token, "pay", args.clone()).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(gw.sql().exec("UPDATE tokens SET used_at = NULL", &[]), 1);
    let (s, b) = gw.redeem_as(BOT, &token, "pay", args).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let tail = gw.with_store(|s| s.audit_tail(1)).unwrap();
    let last = &tail[0];
    assert_eq!(
        (last.kind.as_str(), last.actor.as_str()),
        ("token.refused", "bot")
    );
    gw.stop().await;
}

#[tokio::test]
async fn approve_wakes_the_waiting_agent_and_the_token_runs_the_exact_call_once() {
    let gw = serve().await;
    let args = json!({"amount": 500, "to": "bob"});
    let id = gw.pending("pay", args.clone()).await;
    let path = format!("/v1/approvals/{id}?wait=20");
    let started = std::time::Instant::now();
    let waiter = {
        let (http, url) = (gw.http.clone(), format!("{}{path}", gw.url));
        tokio::spawn(async move {
            http.get(url)
                .bearer_auth("bot-key")
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, d) = gw.decide(&id, OP, "approve").await;
    assert_answer(s, &d, "status", StatusCode::OK, "approved");
    assert!(d.get("token").is_none(), "operators never see the token");
    let rec = waiter.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the long-poll ended on the decision"
    );
    assert_eq!(rec["status"], "approved");
    assert_eq!(rec["decisions"][0]["by"], "alice");
    // The woken long-poll answered from the record its decision handed over (no store read);
    // a read answers exactly the same, token included (Ed25519 signs deterministically).
    let (s, read) = gw.approval(&id, BOT).await;
    assert_eq!((s, &read), (StatusCode::OK, &rec));
    let token = json!(token_of(&rec));

    let redeem = |args: Value, key: &'static str| gw.redeem_as(key, &token, "pay", args);
    let (s, b) = redeem(json!({"amount": 501, "to": "bob"}), BOT).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOKEN_MISMATCH");
    let (s, _) = redeem(args.clone(), "other-key").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, b) = redeem(args.clone(), OP).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "FORBIDDEN");
    let token = token_of(&rec);
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    let (s, b) = gw.redeem_as(BOT, &json!(forged), "pay", args.clone()).await;
    assert_error(s, &b, StatusCode::UNAUTHORIZED, "TOKEN_INVALID");
    // Key order does not matter: the hash is over canonical JSON.
    let (s, b) = redeem(json!({"to": "bob", "amount": 500.0}), BOT).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["approval_id"].as_str(), Some(id.as_str()));
    let (s, b) = redeem(args, BOT).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let rep = gw.with_store(|s| s.verify_audit()).unwrap();
    assert!(rep.broken.is_none());
    gw.stop().await;
}

#[tokio::test]
async fn deny_reaches_the_agent_and_mints_nothing() {
    let gw = serve().await;
    let id = gw.pending("pay", json!({"amount": 500, "to": "bob"})).await;
    let (s, d) = gw.decide(&id, OP, "deny").await;
    assert_answer(s, &d, "status", StatusCode::OK, "rejected");
    let (_, rec) = gw.approval(&id, BOT).await;
    assert_eq!(
        (
            rec["status"].as_str(),
            rec["decisions"][0]["reason"].as_str()
        ),
        (Some("rejected"), Some("test"))
    );
    assert!(rec.get("token").is_none());
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(
        (s, b["code"].as_str(), b["status"].as_str()),
        (
            StatusCode::CONFLICT,
            Some("ALREADY_DECIDED"),
            Some("rejected")
        )
    );
    gw.stop().await;
}

#[tokio::test]
async fn token_expires() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(dir.path(), 300).await;
    let args = json!({"amount": 500, "to": "bob"});
    let id = gw.pending("pay", args.clone()).await;
    gw.decide(&id, OP, "approve").await;
    let (_, rec) = gw.approval(&id, BOT).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (s, b) = gw.redeem_as(BOT, &rec["token"], "pay", args).await;
    assert_error(s, &b, StatusCode::GONE, "TOKEN_EXPIRED");
    gw.stop().await;
}

#[tokio::test]
async fn a_running_server_expires_approvals_and_wakes_the_waiting_agent() {
    let gw = serve().await;
    let id = gw.pending("quick", json!({})).await;
    let started = std::time::Instant::now();
    let (s, rec) = gw.approval(&format!("{id}?wait=30"), BOT).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (
            rec["status"].as_str(),
            rec["decisions"][0]["default_applied"].as_str()
        ),
        (Some("expired"), Some("reject"))
    );
    assert_eq!(rec["decisions"][0]["by"], "system:expiry");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woke at the 1 s expiry, not the 30 s wait"
    );
    assert!(rec.get("token").is_none());
    gw.stop().await;
}

/// A woken long-poll answers from the record its decision handed over, not from a read: for
/// an approval whose call the operator edited, that answer still carries the token of the
/// edited call (the one the token row binds), the same one a read gives.
#[tokio::test]
async fn a_woken_long_poll_of_an_edited_call_carries_the_edited_calls_token() {
    let gw = serve().await;
    let id = gw.pending("pay", json!({"amount": 700, "to": "bob"})).await;
    let waiter = {
        let (http, url) = (
            gw.http.clone(),
            format!("{}/v1/approvals/{id}?wait=20", gw.url),
        );
        tokio::spawn(async move {
            let r = http.get(url).bearer_auth("bot-key").send().await.unwrap();
            r.json::<Value>().await.unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let edited = json!({"amount": 650, "to": "bob"});
    let (s, d) = gw
        .decide_with(&id, OP, json!({"decision": "approve", "arguments": edited}))
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let woken = waiter.await.unwrap();
    let (s, read) = gw.approval(&id, BOT).await;
    assert_eq!((s, &read), (StatusCode::OK, &woken));
    let token = json!(token_of(&woken));
    let (s, b) = gw
        .redeem_as(BOT, &token, "pay", json!({"amount": 700, "to": "bob"}))
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOKEN_MISMATCH");
    let (s, b) = gw.redeem_as(BOT, &token, "pay", edited).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}
