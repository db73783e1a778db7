//! Rows sealed against the database (`assent-store` `seal.rs`), over HTTP against a real
//! gateway: a token or grant row planted or edited by whoever can write the database, but
//! holds no key, lets no call run. Before, the gateway signed a planted token row for its
//! agent and approved calls by a planted grant; `audit verify` found them only afterwards.

use crate::backend::Param;
use crate::kit::{Gw, OP, start, token_of};
use reqwest::StatusCode;
use serde_json::json;

/// The column `col` of approval `id`.
fn column(gw: &Gw, col: &str, id: &str) -> String {
    let sql = format!("SELECT {col} FROM approvals WHERE id = ?1");
    gw.sql().text(&sql, &[Param::from(id)])
}

/// A `pay` call held and approved by the operator; its approval id.
async fn approved(gw: &Gw, to: &str) -> String {
    let id = gw.held("s1", "pay", json!({"amount": 500, "to": to})).await;
    assert_eq!(gw.decide(&id, OP, "approve").await.0, StatusCode::OK);
    id
}

/// Plants a token row under approval `evil`, bound to its call, with the seal of `real`'s
/// genuine token copied in.
fn plant_token(gw: &Gw, real: &str, evil: &str) {
    let hash = column(gw, "call_hash", evil);
    let planted = format!(
        "INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at, scope, device_id, seal)
         SELECT 'planted', '{evil}', agent, '{hash}', issued_at, expires_at, scope, NULL, seal FROM tokens WHERE approval_id = '{real}'"
    );
    assert_eq!(gw.sql().exec(&planted, &[]), 1);
}

/// Attack: the database writer approves their own held call in the database and plants its
/// token row, with the seal of a genuine token copied in; or widens a genuine token to any
/// device. The agent reading the approval gets no token, and the widened one redeems nothing.
#[tokio::test]
async fn a_token_row_planted_or_edited_in_the_database_lets_no_call_run() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let extra = json!({"device_id": "laptop"});
    let (s, b) = gw
        .call("s1", "pay", json!({"amount": 500, "to": "x"}), extra)
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let real = b["approval_id"].as_str().unwrap().to_string();
    assert_eq!(gw.decide(&real, OP, "approve").await.0, StatusCode::OK);
    let real_token = token_of(&gw.as_agent(&real).await);
    let evil = gw
        .held("s1", "pay", json!({"amount": 1_000_000, "to": "me"}))
        .await;
    plant_token(&gw, &real, &evil);
    let approve = format!(
        "UPDATE approvals SET status = 'approved', decided_at = requested_at + 1 WHERE id = '{evil}'"
    );
    gw.sql().exec(&approve, &[]);
    let seen = gw.as_agent(&evil).await;
    assert_eq!(seen["status"], "approved", "{seen}");
    assert!(
        seen["token"].is_null(),
        "a planted token row is signed for no one: {seen}"
    );
    // Nor is it shown to anyone as a minted token (found by review of the seals): no
    // `approval_token` in the operator's view, no accepted AAEP response, and the record says
    // what is damaged.
    let (s, view) = gw.get(&format!("/v1/approvals/{evil}"), OP).await;
    assert_eq!(s, StatusCode::OK, "{view}");
    assert!(view["approval_token"].is_null(), "{view}");
    assert!(
        view["damaged"]
            .as_array()
            .is_some_and(|d| d.contains(&json!("tokens.seal"))),
        "{view}"
    );
    let (_, listed) = gw.get("/v1/approvals?status=approved", OP).await;
    let row = listed["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == evil.as_str())
        .cloned()
        .unwrap_or_default();
    assert!(row["approval_token"].is_null(), "{listed}");
    // The genuine token, bound to the agent's laptop, widened to any device in the database.
    let widen = format!("UPDATE tokens SET device_id = NULL WHERE approval_id = '{real}'");
    assert_eq!(gw.sql().exec(&widen, &[]), 1);
    let (s, b) = gw
        .redeem(&real_token, "pay", json!({"amount": 500, "to": "x"}), None)
        .await;
    assert_ne!(s, StatusCode::OK, "{b}");
    assert!(gw.as_agent(&real).await["token"].is_null());
    gw.stop().await;
}

/// Attack: a token row planted under a call still pending (the seal of a genuine token copied
/// in), which the operator then denies. Found by review: the denial's answer carried the
/// planted row as the approval's token, and its AAEP resolution told subscribers the action
/// was accepted and running. Now neither does.
#[tokio::test]
async fn a_token_planted_under_a_pending_call_is_not_shown_when_it_is_denied() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let real = approved(&gw, "x").await;
    let evil = gw
        .held("s1", "pay", json!({"amount": 1_000_000, "to": "me"}))
        .await;
    plant_token(&gw, &real, &evil);
    let (s, b) = gw.decide(&evil, OP, "deny").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["status"], "rejected", "{b}");
    assert!(b["approval_token"].is_null(), "{b}");
    let events = gw.sql().rows(
        "SELECT data FROM aaep_events WHERE approval_id = ?1 ORDER BY seq",
        &[Param::from(evil.as_str())],
    );
    let last: serde_json::Value = serde_json::from_str(&events.last().unwrap()[0]).unwrap();
    assert_eq!(last["type"], "aaep:agent.state.changed", "{last}");
    assert_eq!(last["to_state"], "thinking", "not running: {last}");
    gw.stop().await;
}

/// Attack: an approved call's genuine token row given to another agent in the database.
/// Found by review: the approval still read as carrying its token (the seal was checked with
/// the approval's agent), though nothing would sign or redeem it for either agent.
#[tokio::test]
async fn a_token_row_moved_to_another_agent_is_not_the_approvals_token() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let id = approved(&gw, "x").await;
    let view = |b: serde_json::Value| b["approval_token"].clone();
    assert!(!view(gw.get(&format!("/v1/approvals/{id}"), OP).await.1).is_null());
    let moved = format!("UPDATE tokens SET agent = 'mallory' WHERE approval_id = '{id}'");
    assert_eq!(gw.sql().exec(&moved, &[]), 1);
    let (s, b) = gw.get(&format!("/v1/approvals/{id}"), OP).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(view(b.clone()).is_null(), "{b}");
    assert!(gw.as_agent(&id).await["token"].is_null());
    gw.stop().await;
}

/// Attack: the database writer plants a grant of every `pay` call in the workspace, with the
/// seal of a genuine session grant copied in, or widens the genuine grant from one call to the
/// whole tool: the next `pay` calls are still held for a person.
#[tokio::test]
async fn a_grant_row_planted_or_edited_in_the_database_approves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let id = gw
        .held("s1", "pay", json!({"amount": 800, "to": "y"}))
        .await;
    let scope = json!({"decision": "approve", "scope": "session"});
    let (s, b) = gw.decide_with(&id, OP, scope).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = gw.propose("pay", json!({"amount": 800, "to": "y"})).await;
    assert_eq!(s, StatusCode::OK, "the genuine grant covers its call: {b}");
    let planted = "INSERT INTO grants (id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at, seal)
         SELECT 'planted', agent, NULL, tool, server, NULL, 'workspace', risk_tier, discouraged, approval_id, created_by, created_at, NULL, seal FROM grants";
    assert_eq!(gw.sql().exec(planted, &[]), 1);
    let (s, b) = gw
        .propose_in("s2", "pay", json!({"amount": 9_999, "to": "me"}))
        .await;
    assert_eq!(
        s,
        StatusCode::ACCEPTED,
        "a planted grant covers nothing: {b}"
    );
    // Nor is it listed as active (found by review); `?all=true` shows every row.
    let listed = |b: &serde_json::Value| b["grants"].as_array().unwrap().len();
    let (s, b) = gw.get("/v1/grants", OP).await;
    assert_eq!((s, listed(&b)), (StatusCode::OK, 1), "{b}");
    assert_ne!(b["grants"][0]["id"], "planted", "{b}");
    assert_eq!(listed(&gw.get("/v1/grants?all=true", OP).await.1), 2);
    let widen = "UPDATE grants SET call_hash = NULL WHERE id <> 'planted'";
    assert_eq!(gw.sql().exec(widen, &[]), 1);
    let (s, b) = gw
        .propose("pay", json!({"amount": 9_999, "to": "me"}))
        .await;
    assert_eq!(
        s,
        StatusCode::ACCEPTED,
        "a widened grant covers nothing: {b}"
    );
    let (s, b) = gw.propose("pay", json!({"amount": 800, "to": "y"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "nor its own call any more: {b}");
    assert_eq!(listed(&gw.get("/v1/grants", OP).await.1), 0);
    gw.stop().await;
}

/// Attack (found by review): the database writer turns a held `pay` call's stored default to
/// `approve` (and its passkey and irreversibility off) and its deadline to the past, so that
/// the expiry mints a genuine token with no one deciding. The approval's terms are sealed
/// when it is held: it expires rejected, and no token is given.
#[tokio::test]
async fn an_approvals_default_edited_in_the_database_never_approves_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let args = json!({"amount": 1_000_000, "to": "me"});
    let evil = gw.held("s1", "pay", args.clone()).await;
    let edit = format!(
        "UPDATE approvals SET default_decision = 'approve', irreversible = (1 = 0),
         require_passkey = (1 = 0), expires_at = requested_at + 1 WHERE id = '{evil}'"
    );
    assert_eq!(gw.sql().exec(&edit, &[]), 1);
    let seen = gw.as_agent(&evil).await;
    assert_ne!(seen["status"], "approved", "{seen}");
    assert!(seen["token"].is_null(), "{seen}");
    gw.stop().await;
}

/// Attack (found by review): the device binding removed from a pending call in the database,
/// so that the operator's approval would mint a token for any device. The approval's seal no
/// longer holds: the approval is refused as damaged (`409`), `audit verify` reports the edit,
/// and the approval can still be denied.
#[tokio::test]
async fn an_approvals_device_binding_removed_in_the_database_is_refused_as_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let args = json!({"amount": 500, "to": "x"});
    let (s, b) = gw
        .call("s1", "pay", args, json!({"device_id": "laptop"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let widen = format!("UPDATE approvals SET device_id = NULL WHERE id = '{id}'");
    assert_eq!(gw.sql().exec(&widen, &[]), 1);
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "APPROVAL_DAMAGED", "{b}");
    assert!(gw.as_agent(&id).await["token"].is_null());
    // `audit verify` names the edit too (it compared no device before).
    let db = crate::backend::database(&gw.data_dir);
    let report = crate::backend::off_runtime(|| {
        let opts = Default::default();
        assent_store::integrity::verify_database(&db, &gw.data_dir, &opts).unwrap()
    });
    let problem = format!("{:?}", report.problem.expect("the edit is reported"));
    assert!(problem.contains("device_id"), "{problem}");
    assert_eq!(gw.decide(&id, OP, "deny").await.0, StatusCode::OK);
    gw.stop().await;
}
