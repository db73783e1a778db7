//! A plan's row edited in the database while the gateway runs (`assent-store` `plans.rs`,
//! migration 0058): its seal no longer holds, so the plan reads as damaged — it runs no
//! calls, takes no change, is shown as `409 PLAN_DAMAGED` and stops the tokens of the calls
//! held under it — and an approval's plan ids, sealed with its terms, cannot be cleared to
//! release a call from its plan's stop. Either backend.

use crate::backend::audit_problem;
use crate::decide_guards::{approved_plan, held_in_plan};
use crate::kit::{
    BOT, Gw, OP, Param, assert_answer, assert_error, assert_says, audit_count, serve, token_of,
};
use crate::plans::{plan, uuid};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A gateway with one approved plan of agent `bot`: the gateway and the plan's id.
async fn serve_with_plan() -> (Gw, String) {
    let gw = serve().await;
    let pid = uuid();
    approved_plan(&gw, &pid).await;
    (gw, pid)
}

/// `pay(n)` held under plan `pid` and approved by the operator: its approval id and token.
async fn approved_in_plan(gw: &Gw, pid: &str, n: u64) -> (String, String) {
    let id = held_in_plan(gw, "pay", pay(n), pid).await;
    assert_eq!(gw.decide(&id, OP, "approve").await.0, StatusCode::OK);
    let token = token_of(&gw.as_agent(&id).await);
    (id, token)
}

fn pay(n: u64) -> Value {
    json!({"amount": n, "to": "bob"})
}

/// Cancels plan `pid` through the API as its agent.
async fn cancel(gw: &Gw, pid: &str) {
    let path = format!("/v1/plans/{pid}/cancel");
    let (s, p) = gw.post(&path, BOT, json!({"reason": "stop"})).await;
    assert_eq!(s, StatusCode::OK, "{p}");
}

/// The first problem `audit verify` reports, if any.
fn problem(gw: &Gw) -> Option<String> {
    audit_problem(&gw.data_dir).map(|p| p.reason)
}

/// Runs `sql` behind the gateway's back; it must change one row.
#[track_caller]
fn tamper(gw: &Gw, sql: &str) {
    assert_eq!(gw.sql().exec(sql, &[]), 1, "{sql}");
}

/// Attack (found by review): a database writer sets a cancelled plan's `status` back to
/// `approved`, and the token of a call approved under it before its stop redeems again, new
/// calls naming it run under it again. Now the plan's row does not hold its seal: the token
/// stays refused `409 PLAN_STOPPED` (naming the plan as damaged), a new call naming the plan
/// is denied, the plan reads `409 PLAN_DAMAGED`, and revising or cancelling it again is
/// answered the same way rather than shown as a plan. A plan never touched runs its calls as before.
#[tokio::test]
async fn a_cancelled_plan_set_back_to_approved_in_the_database_revives_nothing() {
    let (gw, pid) = serve_with_plan().await;
    let (_, token) = approved_in_plan(&gw, &pid, 501).await;
    cancel(&gw, &pid).await;
    let (s, b) = gw.redeem(&token, "pay", pay(501), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_STOPPED");
    tamper(
        &gw,
        &format!("UPDATE plans SET status = 'approved' WHERE plan_id = '{pid}'"),
    );
    let (s, b) = gw.redeem(&token, "pay", pay(501), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_STOPPED");
    assert_says(&b, "message", "damaged");
    let found = problem(&gw).expect("audit verify names the plan");
    assert!(found.contains(&pid), "{found}");
    let (s, b) = gw
        .call("s1", "pay", pay(502), json!({"plan_id": pid}))
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOOL_DENIED");
    assert_says(&b, "reason", "seal");
    for key in [BOT, OP] {
        let (s, b) = gw.get(&format!("/v1/plans/{pid}"), key).await;
        assert_error(s, &b, StatusCode::CONFLICT, "PLAN_DAMAGED");
        assert_says(&b, "message", &pid);
    }
    let put = json!({"agent": "bot", "plan": plan(&pid, &[(&uuid(), "Pay twice")])});
    let path = format!("/v1/plans/{pid}");
    let (s, b) = gw.req("PUT", &path, Some(BOT), Some(put)).await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_DAMAGED");
    let path = format!("/v1/plans/{pid}/cancel");
    let (s, b) = gw.post(&path, BOT, json!({"reason": "again"})).await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_DAMAGED");
    // Untouched, a plan runs its approved calls.
    let pid = uuid();
    approved_plan(&gw, &pid).await;
    let (_, token) = approved_in_plan(&gw, &pid, 503).await;
    let (s, b) = gw.redeem(&token, "pay", pay(503), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(
        problem(&gw).is_none_or(|p| !p.contains(&pid)),
        "an untouched plan"
    );
    assert_eq!(
        gw.get(&format!("/v1/plans/{pid}"), BOT).await.0,
        StatusCode::OK
    );
    gw.stop().await;
}

/// Attack (found by review): the plan stays cancelled, but a database writer clears the plan
/// ids recorded with a call approved under it (`confirm_context.plan_id`, `plan_owner`), so
/// its plan's stop no longer reaches it and its token redeems. Those ids are now sealed with
/// the approval's terms: the token is refused `409 SETTLEMENT_UNSEALED`, audited, and stays
/// unused (the ids put back, the plan's stop refuses it again).
#[tokio::test]
async fn a_call_cut_loose_from_its_stopped_plan_in_the_database_redeems_nothing() {
    let (gw, pid) = serve_with_plan().await;
    let (id, token) = approved_in_plan(&gw, &pid, 601).await;
    cancel(&gw, &pid).await;
    let refused = audit_count(&gw.data_dir, "token.refused");
    tamper(
        &gw,
        &format!(
            "UPDATE confirm_context SET plan_id = NULL, plan_owner = NULL WHERE approval_id = '{id}'"
        ),
    );
    let (s, b) = gw.redeem(&token, "pay", pay(601), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "SETTLEMENT_UNSEALED");
    assert_says(&b, "message", "seal");
    assert_eq!(audit_count(&gw.data_dir, "token.refused"), refused + 1);
    // Not consumed: with its plan ids put back, the plan's stop refuses it again.
    tamper(
        &gw,
        &format!(
            "UPDATE confirm_context SET plan_id = '{pid}', plan_owner = 'bot' WHERE approval_id = '{id}'"
        ),
    );
    let (s, b) = gw.redeem(&token, "pay", pay(601), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_STOPPED");
    gw.stop().await;
}

/// Attack: a seal cannot stop a row being put back as it was, seal and all. A database writer
/// keeps a copy of an approved plan's row and, after the plan is cancelled, puts it back: the
/// seal holds. `audit verify` names it: the plan reads `approved`, its newest record
/// (`plan.cancelled`) left it `cancelled`. Until then the row revived the tokens of the calls
/// approved under the plan (found by review): the stop now voids them, so they stay refused
/// (`409 TOKEN_USED`). A plan row deleted is named too (its records stay).
#[tokio::test]
async fn a_plan_row_put_back_whole_or_deleted_is_named_by_audit_verify() {
    let (gw, pid) = serve_with_plan().await;
    let (_, token) = approved_in_plan(&gw, &pid, 551).await;
    assert_eq!(problem(&gw), None);
    // The copy the database writer keeps aside: every column the gateway changes.
    let columns = "status, body, submitted, confirm_id, events, seal";
    let select =
        format!("SELECT {columns}, CAST(updated_at AS TEXT) FROM plans WHERE plan_id = ?1");
    let copy = gw
        .sql()
        .rows(&select, &[Param::from(pid.as_str())])
        .remove(0);
    cancel(&gw, &pid).await;
    let mut put_back: Vec<Param> = copy[..6].iter().map(Param::from).collect();
    put_back.push(Param::from(copy[6].parse::<i64>().unwrap()));
    put_back.push(Param::from(pid.as_str()));
    let update = "UPDATE plans SET status = ?1, body = ?2, submitted = ?3, confirm_id = ?4, events = ?5, seal = ?6, updated_at = ?7 WHERE plan_id = ?8";
    assert_eq!(gw.sql().exec(update, &put_back), 1);
    // Its seal holds: the row is the gateway's, as it was.
    let (s, b) = gw.get(&format!("/v1/plans/{pid}"), BOT).await;
    assert_answer(s, &b, "status", StatusCode::OK, "approved");
    let (s, b) = gw.redeem(&token, "pay", pay(551), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let found = problem(&gw).expect("a plan put back is named");
    assert!(
        found.contains(&pid) && found.contains("plan.cancelled"),
        "{found}"
    );
    tamper(&gw, &format!("DELETE FROM plans WHERE plan_id = '{pid}'"));
    let found = problem(&gw).expect("a deleted plan is named");
    assert!(found.contains(&pid) && found.contains("no row"), "{found}");
    gw.stop().await;
}

/// Attack: a database writer edits an approved plan's MPLP body (the steps a person approved
/// replaced with others) and leaves its status alone. The plan reads `409 PLAN_DAMAGED` and
/// runs nothing, and `audit verify` names its seal, which its status alone would not show.
#[tokio::test]
async fn a_plan_body_edited_in_the_database_is_damaged_and_named_by_audit_verify() {
    let (gw, pid) = serve_with_plan().await;
    let other = plan(&pid, &[(&uuid(), "Wire everything to eve")]).to_string();
    let edit = "UPDATE plans SET body = ?1 WHERE plan_id = ?2";
    let args = [Param::from(other.as_str()), Param::from(pid.as_str())];
    assert_eq!(gw.sql().exec(edit, &args), 1);
    let (s, b) = gw.get(&format!("/v1/plans/{pid}"), OP).await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_DAMAGED");
    let (s, b) = gw
        .call("s1", "pay", pay(701), json!({"plan_id": pid}))
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOOL_DENIED");
    let found = problem(&gw).expect("audit verify names the plan");
    assert!(found.contains(&pid) && found.contains("seal"), "{found}");
    gw.stop().await;
}

/// Attack (found by review): a database writer deletes a cancelled plan's row, and another
/// agent registers its id again with only its own API key (the id was free). The new row holds
/// its own seal and names the other agent, so the stop of the plan the call was held under no
/// longer reached it: the token of a call approved under the cancelled plan redeemed, and
/// `audit verify`, comparing each plan's row with its newest record only, named nothing. Now
/// a row naming another agent than the one recorded with the call is not its plan: the token
/// stays refused `409 PLAN_STOPPED` (the plan read as damaged), and `audit verify` names the
/// id created a second time.
#[tokio::test]
async fn a_stopped_plan_deleted_and_its_id_registered_by_another_agent_releases_nothing() {
    let (gw, pid) = serve_with_plan().await;
    let (_, token) = approved_in_plan(&gw, &pid, 801).await;
    cancel(&gw, &pid).await;
    tamper(&gw, &format!("DELETE FROM plans WHERE plan_id = '{pid}'"));
    let body = json!({"agent": "other", "plan": plan(&pid, &[(&uuid(), "Pay nobody")])});
    let (s, b) = gw.post("/v1/plans", "other-key", body).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = gw.redeem(&token, "pay", pay(801), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_STOPPED");
    assert_says(&b, "message", "damaged");
    let found = problem(&gw).expect("audit verify names the id created again");
    assert!(
        found.contains(&pid) && found.contains("created again"),
        "{found}"
    );
    gw.stop().await;
}

/// Attack (found by review): an operator approves a call held under a plan for the session (a
/// grant), and the grant lets the same call through again without naming the plan: its token
/// is minted. A database writer then clears the plan ids recorded with the grant's source call,
/// so the plan's stop no longer finds the grant to revoke it, and `bot` cancels its plan: the
/// token minted under the grant redeemed after the stop (its own call names no plan). The
/// redemption now checks the plans of the calls whose grants let its call through: the source
/// call's terms no longer hold their seal, and the token is refused `409 SETTLEMENT_UNSEALED`;
/// untouched, the stop voids it.
#[tokio::test]
async fn a_grants_source_call_cut_loose_from_its_plan_does_not_let_the_grants_tokens_outlive_the_stop()
 {
    let (gw, pid) = serve_with_plan().await;
    let minted = |n: u64| {
        let gw = &gw;
        let pid = pid.clone();
        async move {
            let held = held_in_plan(gw, "pay", pay(n), &pid).await;
            let session = json!({"decision": "approve", "scope": "session", "reason": "test"});
            let (s, d) = gw.decide_with(&held, OP, session).await;
            assert_eq!(s, StatusCode::OK, "{d}");
            let (s, c) = gw.call("s1", "pay", pay(n), json!({})).await;
            assert_eq!(s, StatusCode::OK, "the session grant covers the call: {c}");
            (held, c["token"].as_str().unwrap().to_string())
        }
    };
    let (held, token) = minted(901).await;
    let (_, untouched) = minted(902).await;
    tamper(
        &gw,
        &format!(
            "UPDATE confirm_context SET plan_id = NULL, plan_owner = NULL WHERE approval_id = '{held}'"
        ),
    );
    cancel(&gw, &pid).await;
    let (s, b) = gw.redeem(&token, "pay", pay(901), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "SETTLEMENT_UNSEALED");
    let (s, b) = gw.redeem(&untouched, "pay", pay(902), None).await;
    assert_eq!(s, StatusCode::CONFLICT, "voided by the stop: {b}");
    gw.stop().await;
}

/// Attack (found by review): on SQLite a database writer stores a blob in the plan agent
/// recorded with a call approved under an approved plan (`confirm_context.plan_owner`). The
/// plan's stop read every call held under it to void their tokens, the read of that row
/// failed, and with it the whole cancellation: the plan stayed approved (`503`), running its
/// calls. A call whose columns do not read is reached by the stop: the plan is cancelled, the
/// token refused. (SQLite only: a PostgreSQL `text` column holds no blob.)
#[tokio::test]
async fn a_call_row_made_unreadable_in_the_database_does_not_keep_its_plan_from_stopping() {
    if crate::backend::sqlite_only("a SQLite column takes a blob whatever its declared type") {
        return;
    }
    let (gw, pid) = serve_with_plan().await;
    let (id, token) = approved_in_plan(&gw, &pid, 951).await;
    tamper(
        &gw,
        &format!("UPDATE confirm_context SET plan_owner = X'01' WHERE approval_id = '{id}'"),
    );
    cancel(&gw, &pid).await;
    let (s, b) = gw.get(&format!("/v1/plans/{pid}"), BOT).await;
    assert_answer(s, &b, "status", StatusCode::OK, "cancelled");
    let (s, b) = gw.redeem(&token, "pay", pay(951), None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    gw.stop().await;
}

/// Found by review: a call naming a plan's step without the plan had that step recorded, and
/// shown as its Confirm's target and trace step, so a reviewer read any call as a step of an
/// approved plan (a plan named beside it is checked; a step alone was not). A step named
/// without its plan is not recorded.
#[tokio::test]
async fn a_step_named_without_its_plan_is_not_shown_as_the_calls_step() {
    let gw = serve().await;
    let (pid, step) = (uuid(), uuid());
    approved_plan(&gw, &pid).await;
    let body = json!({"agent": "bot", "session_id": "s1", "tool": "pay",
                      "arguments": {"amount": 900, "to": "mallory"}, "step_id": step});
    let (s, h) = gw.post("/v1/tool-calls", BOT, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{h}");
    let c = crate::plans::mplp(&gw, h["approval_id"].as_str().unwrap()).await;
    assert_ne!(c["target_id"].as_str(), Some(step.as_str()), "{c}");
    assert!(c["trace"]["attributes"].get("step_id").is_none(), "{c}");
    assert!(c["trace"]["attributes"].get("plan_id").is_none(), "{c}");
    // Nor beside a made-up plan id (found by review of that fix).
    let body = json!({"agent": "bot", "session_id": "s1", "tool": "pay",
                      "arguments": {"amount": 901, "to": "mallory"}, "plan_id": uuid(), "step_id": step});
    let (s, h) = gw.post("/v1/tool-calls", BOT, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{h}");
    let c = crate::plans::mplp(&gw, h["approval_id"].as_str().unwrap()).await;
    assert_ne!(c["target_id"].as_str(), Some(step.as_str()), "{c}");
    assert!(c["trace"]["attributes"].get("step_id").is_none(), "{c}");
    gw.stop().await;
}
