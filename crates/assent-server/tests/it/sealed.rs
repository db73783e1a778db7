//! Rows sealed against the database (`assent-store` `seal.rs`), over HTTP against a real
//! gateway: a token or grant row planted or edited by whoever can write the database, but
//! holds no key, lets no call run. Before, the gateway signed a planted token row for its
//! agent and approved calls by a planted grant; `audit verify` found them only afterwards.

use crate::backend::Param;
use crate::kit::{Gw, OP, serve, token_of};
use reqwest::StatusCode;
use serde_json::json;

/// The column `col` of approval `id`.
fn column(gw: &Gw, col: &str, id: &str) -> String {
    let sql = format!("SELECT {col} FROM approvals WHERE id = ?1");
    gw.sql().text(&sql, &[Param::from(id)])
}

/// Rewrites approval `id`'s row behind the gateway's back (`UPDATE approvals SET {set}`),
/// which must find the row.
#[track_caller]
fn tamper(gw: &Gw, id: &str, set: &str) {
    let sql = format!("UPDATE approvals SET {set} WHERE id = '{id}'");
    assert_eq!(gw.sql().exec(&sql, &[]), 1, "{sql}");
}

/// Asserts that `key` approving approval `id` is refused `409 APPROVAL_DAMAGED` (`what` names
/// the case) and that the agent was minted no token.
async fn approving_is_refused_as_damaged(gw: &Gw, id: &str, key: &str, what: &str) {
    let (s, b) = gw.decide(id, key, "approve").await;
    assert_eq!(s, StatusCode::CONFLICT, "{what}: {b}");
    assert_eq!(b["code"], "APPROVAL_DAMAGED", "{what}: {b}");
    assert!(gw.as_agent(id).await["token"].is_null(), "{what}");
}

/// `GET /v1/approvals/{id}/receipt` as the operator: the status and the body.
async fn receipt(gw: &Gw, id: &str) -> (StatusCode, serde_json::Value) {
    gw.get(&format!("/v1/approvals/{id}/receipt"), OP).await
}

/// Asserts that approval `id`'s receipt is refused `409 APPROVAL_DAMAGED` with no signature:
/// the parts it names damaged.
async fn receipt_refused_as_damaged(gw: &Gw, id: &str) -> serde_json::Value {
    let (s, r) = receipt(gw, id).await;
    assert_eq!(
        (s, r["code"].as_str()),
        (StatusCode::CONFLICT, Some("APPROVAL_DAMAGED")),
        "{r}"
    );
    assert!(r.get("signature").is_none(), "{r}");
    r["damaged"].clone()
}

/// `pay(amount, to)` held in session `s1`: its approval id.
async fn held_pay(gw: &Gw, amount: u64, to: &str) -> String {
    gw.held("s1", "pay", json!({"amount": amount, "to": to}))
        .await
}

/// A `pay` call held and approved by the operator; its approval id.
async fn approved(gw: &Gw, to: &str) -> String {
    let id = held_pay(gw, 500, to).await;
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
    let gw = serve().await;
    let extra = json!({"device_id": "laptop"});
    let (s, b) = gw
        .call("s1", "pay", json!({"amount": 500, "to": "x"}), extra)
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let real = b["approval_id"].as_str().unwrap().to_string();
    assert_eq!(gw.decide(&real, OP, "approve").await.0, StatusCode::OK);
    let real_token = token_of(&gw.as_agent(&real).await);
    let evil = held_pay(&gw, 1_000_000, "me").await;
    plant_token(&gw, &real, &evil);
    tamper(
        &gw,
        &evil,
        "status = 'approved', decided_at = requested_at + 1",
    );
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
    let gw = serve().await;
    let real = approved(&gw, "x").await;
    let evil = held_pay(&gw, 1_000_000, "me").await;
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
    let gw = serve().await;
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
    let gw = serve().await;
    let id = held_pay(&gw, 800, "y").await;
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
    let gw = serve().await;
    let args = json!({"amount": 1_000_000, "to": "me"});
    let evil = gw.held("s1", "pay", args.clone()).await;
    tamper(
        &gw,
        &evil,
        "default_decision = 'approve', irreversible = (1 = 0),
         require_passkey = (1 = 0), expires_at = requested_at + 1",
    );
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
    let gw = serve().await;
    let args = json!({"amount": 500, "to": "x"});
    let (s, b) = gw
        .call("s1", "pay", args, json!({"device_id": "laptop"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    tamper(&gw, &id, "device_id = NULL");
    approving_is_refused_as_damaged(&gw, &id, OP, "device_id removed").await;
    // `audit verify` names the edit too (it compared no device before).
    let problem = crate::backend::audit_problem(&gw.data_dir);
    let problem = format!("{:?}", problem.expect("the edit is reported"));
    assert!(problem.contains("device_id"), "{problem}");
    assert_eq!(gw.decide(&id, OP, "deny").await.0, StatusCode::OK);
    gw.stop().await;
}

/// Attack (found by review): the database writer rewrites what the approver is shown beside a
/// held call — its message, reasons, summary, side effects — so that a destructive call reads
/// as a harmless one on the card and is approved. The approval's seal covers them now: the
/// approval is refused as damaged (`409`) and mints nothing, `audit verify` reports the edited
/// message, and the call can still be denied.
#[tokio::test]
async fn what_an_approver_is_shown_edited_in_the_database_is_refused_as_damaged() {
    let gw = serve().await;
    let edits = [
        "message = 'Run the nightly report?'",
        "human_summary = 'report()'",
        "side_effects = '[\"Nothing leaves the account\"]'",
        "dry_run_tool = 'pay'",
    ];
    for edit in edits {
        let id = held_pay(&gw, 500, "x").await;
        tamper(&gw, &id, edit);
        approving_is_refused_as_damaged(&gw, &id, OP, edit).await;
        if edit.starts_with("message") {
            let problem = crate::backend::audit_problem(&gw.data_dir);
            let problem = format!("{:?}", problem.expect("the edit is reported"));
            assert!(
                problem.contains("message, reasons or triggers"),
                "{problem}"
            );
        }
        assert_eq!(gw.decide(&id, OP, "deny").await.0, StatusCode::OK, "{edit}");
    }
    gw.stop().await;
}

/// Attack: a denied call whose default is `approve` (`lenient`, R1) set back to `pending` in
/// the database with its deadline passed. The seal of its terms still holds — they are as
/// they were when it was held — so the expiry sweep applied the default and minted a genuine
/// token with no one deciding, after an operator had said no. Settling leaves what a pending
/// approval never has (a decision row, a `decided_at`): such an approval is damaged
/// (`status.settled`), the sweep leaves it alone and no one may approve it. Undoing the decision row
/// as well puts the row back exactly as it was, which no seal can stop: `audit verify`
/// reports it (the chain holds the denial).
#[tokio::test]
async fn a_denied_call_set_back_to_pending_is_not_approved_by_its_default() {
    let gw = serve().await;
    let id = gw.pending("lenient", json!({"n": 1})).await;
    assert_eq!(gw.decide(&id, OP, "deny").await.0, StatusCode::OK);
    tamper(&gw, &id, "status = 'pending', decided_at = NULL");
    let later = assent_server::state::now_ms() + 60_000;
    let expired = gw.with_store(|s| s.expire_due(later).unwrap());
    assert!(!expired.contains(&id), "the sweep settled it: {expired:?}");
    let seen = gw.as_agent(&id).await;
    assert!(seen["token"].is_null(), "{seen}");
    let (_, view) = gw.get(&format!("/v1/approvals/{id}"), OP).await;
    assert_eq!(view["status"], "pending", "{view}");
    assert!(
        view["damaged"]
            .as_array()
            .is_some_and(|d| d.contains(&json!("status.settled"))),
        "{view}"
    );
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "APPROVAL_DAMAGED", "{b}");
    // The whole settlement undone, decision row and all: what `audit verify` is for.
    let forget = format!("DELETE FROM decisions WHERE approval_id = '{id}'");
    assert_eq!(gw.sql().exec(&forget, &[]), 1);
    gw.with_store(|s| s.expire_due(later).unwrap());
    let problem = crate::backend::audit_problem(&gw.data_dir);
    let problem = format!("{:?}", problem.expect("the rollback is reported"));
    assert!(problem.contains(&id), "{problem}");
    gw.stop().await;
}

/// Attack: the database writer adds the `ops` role to a held `pay` call's approvers (only
/// `finance` may decide it), so that olaf, an operator without `finance`, approves it; or moves
/// its deadline. The seal of an approval covers who may decide it and when (its approvers,
/// `expires_at` and escalation columns, re-sealed only by the gateway's own escalation steps):
/// olaf's approval is refused as damaged and mints nothing, as is anyone's until the row is put
/// back.
#[tokio::test]
async fn an_approver_role_added_in_the_database_lets_no_one_else_approve() {
    let gw = serve().await;
    let id = held_pay(&gw, 900, "me").await;
    tamper(&gw, &id, "approvers = '[\"finance\",\"ops\"]'");
    approving_is_refused_as_damaged(&gw, &id, "olaf-key", "ops added to the approvers").await;
    // The call retried is held anew, not joined to an approval nobody may approve.
    let retried = held_pay(&gw, 900, "me").await;
    assert_ne!(retried, id);
    tamper(&gw, &id, "approvers = '[\"finance\"]'");
    tamper(&gw, &id, "expires_at = expires_at + 1");
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::CONFLICT, "a moved deadline: {b}");
    tamper(&gw, &id, "expires_at = expires_at - 1");
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "put back as held, it is approved: {b}");
    gw.stop().await;
}

/// Attack (found by review): a token row planted under a pending call whose default is
/// `approve`. Its mint failed on the unique approval id, so the expiry sweep failed on every
/// tick (and every decision waits for the sweep). A row under the approval's own agent now
/// has the expiry reject it; one under another agent (which no read of the approval sees) is
/// removed when the genuine token is minted, and the removal recorded.
#[tokio::test]
async fn a_token_row_planted_under_a_pending_call_does_not_stop_the_expiry_sweep() {
    let gw = serve().await;
    let later = assent_server::state::now_ms() + 60_000;
    for (n, agent, expired_as) in [(1, "bot", "reject"), (2, "mallory", "approve")] {
        let id = gw.pending("lenient", json!({"n": n})).await;
        let plant = format!(
            "INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at, scope, device_id, seal)
             SELECT 'planted-{n}', id, '{agent}', call_hash, 1, 4102444800000, 'once', NULL, '' FROM approvals WHERE id = '{id}'"
        );
        assert_eq!(gw.sql().exec(&plant, &[]), 1);
        let swept = gw.with_store(|s| s.expire_due(later));
        assert!(swept.is_ok(), "{agent}: {swept:?}");
        let seen = gw.as_agent(&id).await;
        assert_eq!(seen["status"], "expired", "{seen}");
        assert_eq!(
            seen["decisions"][0]["default_applied"], expired_as,
            "{seen}"
        );
        assert_eq!(seen["token"].is_null(), expired_as == "reject", "{seen}");
    }
    let record = gw.sql().text(
        "SELECT data FROM audit WHERE kind = 'token.minted' ORDER BY seq DESC LIMIT 1",
        &[],
    );
    assert!(record.contains("\"removed_foreign_rows\":1"), "{record}");
    gw.stop().await;
}

/// Attack (found by review): a row planted or edited in the database — a call marked approved,
/// its terms changed — got a receipt signed with the audit key, which `assent receipt verify`
/// accepted as the gateway's evidence. A receipt is signed only for a row that holds its seal:
/// an edited or unsealed one is `409 APPROVAL_DAMAGED` naming `seal`, and nothing is signed.
#[tokio::test]
async fn a_receipt_is_signed_only_for_an_approval_row_that_holds_its_seal() {
    let gw = serve().await;
    let edited = approved(&gw, "alice").await;
    let unsealed = approved(&gw, "bob").await;
    for id in [&edited, &unsealed] {
        let (s, r) = receipt(&gw, id).await;
        assert_eq!(
            (s, r["approval_id"].as_str()),
            (StatusCode::OK, Some(id.as_str())),
            "{r}"
        );
    }
    tamper(&gw, &edited, "risk_tier = 'R1'");
    tamper(&gw, &unsealed, "seal = ''");
    for id in [&edited, &unsealed] {
        let damaged = receipt_refused_as_damaged(&gw, id).await;
        assert!(
            damaged.as_array().unwrap().contains(&json!("seal")),
            "{damaged}"
        );
    }
    gw.stop().await;
}

/// Attack: the database writer turns a rejected call into an approved one (its `status` and
/// decision row), names someone else as the operator who approved a call, or drops the edit
/// an operator approved a call with, then asks for the receipt as evidence. The settlement carries a seal of its own (migration 0035): neither
/// gets a receipt (`409 APPROVAL_DAMAGED` naming `settlement_seal`; the terms still hold
/// theirs), and the approval put back as the gateway settled it gets its receipt again.
#[tokio::test]
async fn a_receipt_is_signed_only_for_a_settlement_that_holds_its_seal() {
    let gw = serve().await;
    let rejected = held_pay(&gw, 500, "mallory").await;
    assert_eq!(gw.decide(&rejected, OP, "deny").await.0, StatusCode::OK);
    let approved = approved(&gw, "alice").await;
    let edited = held_pay(&gw, 900, "bob").await;
    let (s, b) = gw.edit(&edited, json!({"amount": 90, "to": "bob"})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, r) = receipt(&gw, &rejected).await;
    assert_eq!(
        (s, r["status"].as_str()),
        (StatusCode::OK, Some("rejected")),
        "{r}"
    );
    let (s, r) = receipt(&gw, &edited).await;
    assert!(
        s == StatusCode::OK && r["approved_call_hash"].is_string(),
        "{r}"
    );
    let (s, r) = receipt(&gw, &approved).await;
    assert_eq!(
        (s, r["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{r}"
    );
    let by = r["decisions"][0]["by"].as_str().unwrap().to_string();
    let decision = |id: &str| {
        let sql = "SELECT decision FROM decisions WHERE approval_id = ?1";
        gw.sql().text(sql, &[Param::from(id)])
    };
    let approve = decision(&approved);
    let flips = [
        format!("UPDATE approvals SET status = 'approved' WHERE id = '{rejected}'"),
        format!("UPDATE decisions SET decision = '{approve}' WHERE approval_id = '{rejected}'"),
        format!("UPDATE decisions SET actor = 'eve' WHERE approval_id = '{approved}'"),
        // The edit dropped: the receipt would say the call was approved as proposed.
        format!("UPDATE approvals SET edited_arguments = NULL WHERE id = '{edited}'"),
    ];
    for sql in &flips {
        assert_eq!(gw.sql().exec(sql, &[]), 1, "{sql}");
    }
    for id in [&rejected, &approved, &edited] {
        let damaged = receipt_refused_as_damaged(&gw, id).await;
        assert_eq!(damaged, json!(["settlement_seal"]), "{id}");
    }
    // A pending call's receipt with an edit planted on it (found by review: signed as its
    // `approved_call_hash`): damaged as settled yet pending, no receipt.
    let pending = held_pay(&gw, 700, "carol").await;
    tamper(
        &gw,
        &pending,
        "edited_arguments = arguments, edited_canonical = canonical, edited_hash = call_hash",
    );
    let (s, r) = receipt(&gw, &pending).await;
    assert_eq!(
        (s, &r["damaged"]),
        (StatusCode::CONFLICT, &json!(["status.settled"])),
        "{r}"
    );
    let back = format!("UPDATE decisions SET actor = '{by}' WHERE approval_id = '{approved}'");
    assert_eq!(gw.sql().exec(&back, &[]), 1);
    let (s, r) = receipt(&gw, &approved).await;
    assert_eq!(
        (s, r["decisions"][0]["by"].as_str()),
        (StatusCode::OK, Some(by.as_str())),
        "{r}"
    );
    gw.stop().await;
}
