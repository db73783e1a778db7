//! AAEP reply handling (§6.2.1, §6.2.2, §6.3.4): every check a reply must pass — schema, token,
//! timestamp, authentication, operator, subscription ownership, reply support, open
//! subscription — ignores a failing reply without saying why; a late duplicate gets the
//! courtesy notice; reply tokens are unique across confirmations and restarts. A reply is a
//! decision like any other: approver roles, separation of duties and passkeys hold it.

use super::kit::{AWAITING, Sse, confirm, core};
use crate::backend::audit_count;
use crate::kit::{Gw, OP, Param, Sql, serve, start};
use crate::quorum::{args, gateway_rules};
use crate::schemas::assert_valid;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn every_check_of_6_3_4_ignores_a_failing_reply_without_saying_why() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let (mute, _m) = gw.subscribe(OP, false, json!({})).await;
    let (olafs, _o) = gw.subscribe("olaf-key", true, json!({})).await;
    let (closed, _c) = gw.listen().await;
    assert_eq!(
        gw.reply(
            Some(OP),
            json!({"type": "subscription.close", "subscription_id": closed})
        )
        .await,
        StatusCode::NO_CONTENT
    );
    let (id, token) = gw.confirmation(&mut sse, "/tmp/b").await;
    let late_ts = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let late_ts = late_ts
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let mut no_ts = confirm(&token, &sub, "accept");
    no_ts.as_object_mut().unwrap().remove("timestamp");
    let mut extra_field = confirm(&token, &sub, "accept");
    extra_field["approve_anyway"] = json!(true);
    let accept = |sub: &str| confirm(&token, sub, "accept");
    let cases: Vec<(&str, Option<&str>, Value)> = vec![
        ("schema: missing timestamp", Some(OP), no_ts),
        ("schema: unknown field", Some(OP), extra_field),
        (
            "schema: decision not allowed",
            Some(OP),
            confirm(&token, &sub, "maybe"),
        ),
        (
            "unknown token",
            Some(OP),
            confirm("rpl_0123456789abcdef0123456789abcdef", &sub, "accept"),
        ),
        ("expired: timestamp after the timeout", Some(OP), {
            let mut r = accept(&sub);
            r["timestamp"] = json!(late_ts);
            r
        }),
        ("unauthenticated", None, accept(&sub)),
        ("wrong key", Some("nobody-key"), accept(&sub)),
        ("an agent, not an operator", Some("bot-key"), accept(&sub)),
        ("someone else's subscription", Some(OP), accept(&olafs)),
        (
            "subscription without reply support",
            Some(OP),
            accept(&mute),
        ),
        ("closed subscription", Some(OP), accept(&closed)),
        // Attacks found by review: text the decision stores, unbounded or with a NUL that
        // PostgreSQL cannot store, is ignored like every other failing reply.
        ("a NUL in the rationale", Some(OP), {
            let mut r = accept(&sub);
            r["decision_rationale"] = json!("fine\u{0}");
            r
        }),
        ("a rationale over 4096 bytes", Some(OP), {
            let mut r = accept(&sub);
            r["decision_rationale"] = json!("x".repeat(4097));
            r
        }),
        ("decided_by over 256 bytes", Some(OP), {
            let mut r = accept(&sub);
            r["decided_by"] = json!("y".repeat(257));
            r
        }),
        ("unknown subscription", Some(OP), accept("sub_0000")),
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
        .bearer_auth(OP)
        .body("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // A valid reject, then a late duplicate: the first wins; the late one gets the courtesy notice.
    let mut rej = confirm(&token, &sub, "reject");
    rej["decision_rationale"] = json!("reduce the amount first");
    assert_eq!(gw.reply(Some(OP), rej).await, StatusCode::NO_CONTENT);
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
        gw.reply(Some(OP), accept(&sub)).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(gw.status(&id).await["status"], "rejected");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_valid(&core("agent.state.changed"), &ev, "courtesy notice");
    assert_eq!(ev["extensions"]["assent"]["courtesy_notice"], true);
}

/// §6.3.4 "an authenticated operator", alone: an agent whose name is that of an open,
/// reply-capable subscription (an operator `other` subscribed, then a restart made `other` an
/// agent and start-up's closing of subscriptions, best effort, failed on a store error; made
/// here by hand) passes the ownership check, and a confirmation any operator may decide (no
/// `approvers`) the role check, with no roles: the operator check ignores its accept. (Agent
/// `other`: `bot`'s own accept would be a self-approval. The agent of `every_check_of_6_3_4…`
/// is also stopped by the ownership check.)
#[tokio::test]
async fn an_agent_replying_on_a_subscription_of_its_own_name_is_ignored_before_any_decision() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let (id, token) = gw.confirmation(&mut sse, "/tmp/agent").await;
    assert_eq!(
        gw.status(&id).await["approvers"],
        json!([]),
        "any operator may decide"
    );
    gw.sql().exec(
        "UPDATE aaep_subscriptions SET principal = 'other' WHERE id = ?1",
        &[Param::from(&sub)],
    );
    let accept = confirm(&token, &sub, "accept");
    assert_eq!(
        gw.reply(Some("other-key"), accept).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(gw.status(&id).await["status"], "pending");
    // Ignored before any decision is tried: the decision path's own check (the decider still
    // stands as an operator) would refuse it too, but audit a `decision.refused` blaming a
    // reload for an agent's reply.
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 0);
}

/// AAEP §6.2.1/§6.2.2: every confirmation gets its own reply token (`rpl_` + 32 hex), stored
/// with a unique index so that no token is issued twice, also across a restart; a decided
/// confirmation keeps its token, so it can never be handed out again.
#[tokio::test]
async fn reply_tokens_are_unique_across_confirmations_and_restarts_and_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let mut tokens = Vec::new();
    let read = |gw: &Gw| -> Vec<(String, String)> {
        gw.sql()
            .rows(
                "SELECT id, reply_token FROM approvals ORDER BY requested_at, id",
                &[],
            )
            .into_iter()
            .map(|r| (r[0].clone(), r[1].clone()))
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
                let (s, _) = gw.decide(&first, OP, "approve").await;
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
            t.len() == 48 && t.starts_with("rpl_") && t[4..].bytes().all(|c| c.is_ascii_hexdigit()),
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
    let again = Sql::open(dir.path()).try_exec(
        "UPDATE approvals SET reply_token = ?1 WHERE id = ?2",
        &[Param::from(&kept), Param::from(&tokens[1].0)],
    );
    assert!(
        again.is_err_and(|e| e.to_lowercase().contains("unique")),
        "a reply token could be issued twice"
    );
}

/// Attack (found by review): the database writer moves the reply token of the call the
/// operator is shown (`/tmp/shown`) onto another pending call (`/tmp/evil`): the operator's
/// accept, which names the approval by its token alone, approved the other call. The reply
/// token is sealed with the approval (migration 0034): the other call is not approved, and
/// neither is the shown one (its token is gone from it).
#[tokio::test]
async fn a_reply_token_moved_onto_another_call_approves_neither() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let (shown, token) = gw.confirmation(&mut sse, "/tmp/shown").await;
    let (evil, _) = gw.confirmation(&mut sse, "/tmp/evil").await;
    let set = "UPDATE approvals SET reply_token = ?2 WHERE id = ?1";
    for (id, to) in [(&shown, "rpl_moved"), (&evil, token.as_str())] {
        let params = [Param::from(id.as_str()), Param::from(to)];
        assert_eq!(gw.sql().exec(set, &params), 1);
    }
    assert_eq!(
        gw.reply(Some(OP), confirm(&token, &sub, "accept")).await,
        StatusCode::NO_CONTENT
    );
    for id in [&evil, &shown] {
        let st = gw.status(id).await;
        assert_eq!(st["status"], "pending", "{st}");
        assert!(st["approval_token"].is_null(), "{st}");
    }
}

/// A gateway under governance `rules` ([`gateway_rules`]) with the operators of `keys`
/// subscribed (reply support on), then a `pay` of `bot` held with `extra` (`on_behalf_of`…):
/// its data directory (keep it), the gateway, each operator's subscription id (with its
/// stream, kept open), the approval id and its reply token.
async fn held_for_replies(
    rules: &str,
    keys: &[&str],
    extra: Value,
) -> (tempfile::TempDir, Gw, Vec<(String, Sse)>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_rules(dir.path(), rules).await;
    let mut subs = Vec::new();
    for key in keys {
        subs.push(gw.subscribe(key, true, json!({})).await);
    }
    let (s, b) = gw.call("s1", "pay", args(), extra).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let token = subs[0].1.reply_token(AWAITING).await;
    (dir, gw, subs, id, token)
}

/// Posts `decision` on confirmation `token` with `key` on subscription `sub` (always `204`)
/// and answers the approval's status after it.
async fn reply_as(gw: &Gw, key: &str, sub: &str, token: &str, id: &str, decision: &str) -> Value {
    let reply = confirm(token, sub, decision);
    assert_eq!(gw.reply(Some(key), reply).await, StatusCode::NO_CONTENT);
    gw.status(id).await["status"].clone()
}

/// An AAEP reply is held to the approver roles the call needs, as every other door is
/// (`Store::decide`): olaf (ops) accepting or rejecting a payment only finance may decide is
/// refused, audited `decision.refused`, and the confirmation stays pending; alice (finance)
/// then decides it through the same door.
#[tokio::test]
async fn a_reply_from_an_operator_without_the_approver_role_is_refused() {
    let rules = "- tool: pay\n  approvers: [finance]\n";
    let (_dir, gw, subs, id, token) = held_for_replies(rules, &["olaf-key", OP], json!({})).await;
    let (olafs, alices) = (&subs[0].0, &subs[1].0);
    for decision in ["accept", "reject"] {
        let st = reply_as(&gw, "olaf-key", olafs, &token, &id, decision).await;
        assert_eq!(st, "pending", "olaf's {decision} was applied");
    }
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 2);
    let st = reply_as(&gw, OP, alices, &token, &id, "accept").await;
    assert_eq!(st, "approved");
    gw.stop().await;
}

/// Attack: the person the agent acts for (`on_behalf_of: alice`, a finance approver) accepts
/// the call through AAEP. Separation of duties refuses it (audited `decision.refused`), the
/// confirmation stays pending, and fred (finance) then approves it.
#[tokio::test]
async fn a_reply_from_the_person_a_call_acts_for_is_refused() {
    let rules = "- tool: pay\n  approvers: [finance]\n  separation_of_duties: true\n";
    let extra = json!({"on_behalf_of": "alice"});
    let (_dir, gw, subs, id, token) = held_for_replies(rules, &[OP, "fred-key"], extra).await;
    let (alices, freds) = (&subs[0].0, &subs[1].0);
    let st = reply_as(&gw, OP, alices, &token, &id, "accept").await;
    assert_eq!(st, "pending", "the person the call acts for approved it");
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 1);
    let st = reply_as(&gw, "fred-key", freds, &token, &id, "accept").await;
    assert_eq!(st, "approved");
    gw.stop().await;
}

/// An R4 call needs a passkey-signed approval (`require_passkey`, on by default for R4),
/// which a reply cannot carry: alice's accept is refused (audited `decision.refused`) and the
/// confirmation stays pending; saying no through AAEP stays open to her.
#[tokio::test]
async fn a_reply_cannot_accept_a_call_that_needs_a_passkey() {
    let rules = "- tool: pay\n  approvers: [finance]\n  risk_tier: R4\n";
    let (_dir, gw, subs, id, token) = held_for_replies(rules, &[OP], json!({})).await;
    let alices = &subs[0].0;
    assert_eq!(gw.status(&id).await["require_passkey"], true);
    let st = reply_as(&gw, OP, alices, &token, &id, "accept").await;
    assert_eq!(st, "pending", "accepted without a passkey");
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 1);
    let st = reply_as(&gw, OP, alices, &token, &id, "reject").await;
    assert_eq!(st, "rejected");
    gw.stop().await;
}

/// Found by review: a reply's `decided_by` is the subscriber's free text, yet the decision's
/// reason (what webhooks and Slack show) read "(decided_by bob)" on a reply alice sent, so a
/// reader could take alice's decision for bob's. A `decided_by` naming someone other than the
/// sender is kept as the subscriber's claim, beside the sender; one naming the sender is kept
/// as it is.
#[tokio::test]
async fn a_replys_decided_by_naming_someone_else_is_not_recorded_as_theirs() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let cases = [
        (
            "/tmp/bob",
            "bob",
            "(the subscriber says decided_by bob; sent by operator alice)",
        ),
        ("/tmp/alice", "user:alice", "(decided_by user:alice)"),
    ];
    for (path, by, shown) in cases {
        let (id, token) = gw.confirmation(&mut sse, path).await;
        let mut reply = confirm(&token, &sub, "accept");
        reply["decided_by"] = json!(by);
        assert_eq!(gw.reply(Some(OP), reply).await, StatusCode::NO_CONTENT);
        let st = gw.status(&id).await;
        assert_eq!(st["status"], "approved", "{st}");
        let reason = st["decisions"][0]["reason"].as_str().unwrap();
        assert!(reason.contains(shown), "{reason}");
        assert!(!reason.contains("(decided_by bob)"), "{reason}");
    }
    gw.stop().await;
}
