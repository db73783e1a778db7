//! A cancelled session is over (AAEP §4.1.4, §6.8): its agent's calls in it are refused.

use super::env::env;
use crate::backend::{audit_count, audit_problem, sqlite_only};
use crate::kit::{BOT, OP, assert_error, assert_says, token_of};
use reqwest::StatusCode;
use serde_json::json;

/// Attack (found by review): an operator cancelled a runaway agent's session, and the agent
/// went on calling in it — its allowed calls ran, its held ones waited for approval again, and
/// AAEP subscribers saw events of a session already announced over. From the moment its
/// cancellation begins, every call of the agent in the session is refused `409
/// SESSION_CANCELLED` (audited `call.refused`), whatever the verdict, and so is a question;
/// another session is not.
/// A cancellation that leaves a call pending (an operator without its approver role) does not
/// end the session: that call is still to be decided, and could then run (found by review of
/// the fix); one that leaves nothing pending does.
#[tokio::test]
async fn a_call_in_a_cancelled_session_is_refused() {
    let e = env().await;
    let gw = &e.gw;
    // Olaf (ops) may not decide `esc` (finance): his cancel leaves it pending, s1 goes on.
    let esc = gw.held("s1", "esc", json!({})).await;
    let (s, b) = gw.cancel_session("s1", "olaf-key").await;
    assert_eq!((s, &b["refused"]), (StatusCode::OK, &json!([esc])), "{b}");
    let (s, b) = gw.call("s1", "search", json!({"q": 0}), json!({})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // Alice's cancels it (and announces it over); the agent's own ends its session s2.
    let (s, b) = gw.cancel_session("s1", "alice-key").await;
    assert_eq!((s, &b["cancelled"]), (StatusCode::OK, &json!([esc])), "{b}");
    let (s, b) = gw.cancel_session("s2", BOT).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    for (session, by) in [("s1", "alice"), ("s2", "bot")] {
        // An allowed call, a held one and a denied one: all refused.
        let calls = [
            ("search", json!({"q": 1})),
            ("send", json!({"n": 1})),
            ("wipe", json!({"target": "/"})),
        ];
        for (tool, args) in calls {
            let (s, b) = gw.call(session, tool, args, json!({})).await;
            assert_error(s, &b, StatusCode::CONFLICT, "SESSION_CANCELLED");
            assert_says(&b, "message", &format!("cancelled by `{by}`"));
        }
    }
    assert_eq!(audit_count(&gw.data_dir, "call.refused"), 6);
    // Nor does it ask a question any more.
    let ask = json!({"agent": "bot", "session_id": "s2", "question": "go on?",
                     "accepted_response_kinds": ["yes_no"]});
    let (s, b) = gw.post("/v1/clarifications", BOT, ask).await;
    assert_error(s, &b, StatusCode::CONFLICT, "SESSION_CANCELLED");
    assert_eq!(audit_count(&gw.data_dir, "clarification.refused"), 1);
    assert_eq!(audit_count(&gw.data_dir, "session.cancelled"), 2);
    gw.cancel_session("s1", "alice-key").await;
    assert_eq!(audit_count(&gw.data_dir, "session.cancelled"), 2);
    // Another session runs.
    let (s, b) = gw.call("s3", "search", json!({"q": 1}), json!({})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

/// Attack (found by review): with replicas, calls the agent kept proposing through one while
/// an operator's cancellation on another was cancelling the session's pending ones were held
/// after it had listed them, so they stayed pending, the session was never announced over and
/// went on. Its cancellation now marks the session over before it lists them, so no call is
/// held in it meanwhile: a trigger refusing to cancel a call of a session not yet marked over
/// lets the whole cancellation through, and it is announced once.
#[tokio::test]
async fn a_session_is_marked_over_before_its_pending_calls_are_cancelled() {
    if sqlite_only("a SQLite trigger checks the order of the cancellation's writes") {
        return;
    }
    let e = env().await;
    let gw = &e.gw;
    let held = [
        gw.held("s5", "send", json!({"n": 1})).await,
        gw.held("s5", "low", json!({})).await,
    ];
    gw.sql().exec(
        "CREATE TRIGGER over_first BEFORE UPDATE OF status ON approvals \
         WHEN NEW.status = 'cancelled' AND NOT EXISTS (SELECT 1 FROM cancelled_sessions c \
           WHERE c.agent = NEW.agent AND c.session_id = NEW.session_id) \
         BEGIN SELECT RAISE(ABORT, 'cancelled before the session was over'); END",
        &[],
    );
    let (s, b) = gw.cancel_session("s5", "alice-key").await;
    assert_eq!((s, &b["cancelled"]), (StatusCode::OK, &json!(held)), "{b}");
    assert_eq!(audit_count(&gw.data_dir, "session.cancelled"), 1);
}

/// Attack: a database writer deletes a cancelled session's row, so that the agent's calls in
/// it run again. `audit verify` names a `session.cancelled` record whose row is gone.
#[tokio::test]
async fn a_cancelled_sessions_row_deleted_behind_the_gateway_is_named_by_audit_verify() {
    let e = env().await;
    let gw = &e.gw;
    gw.held("s6", "send", json!({"n": 1})).await;
    let (s, b) = gw.cancel_session("s6", "olaf-key").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "session.cancelled"), 1);
    assert!(audit_problem(&gw.data_dir).is_none());
    gw.sql().exec(
        "DELETE FROM cancelled_sessions WHERE session_id = 's6'",
        &[],
    );
    let p = audit_problem(&gw.data_dir).expect("the deleted row is named");
    assert!(
        p.reason.contains("session s6 of agent bot was cancelled"),
        "{p:?}"
    );
}

/// Attack (found by review): while an operator's cancellation of a session was under way (its
/// mark written, its pending calls being cancelled one by one), another operator approved one
/// of them, and the agent redeemed the token before the cancellation's last write voided it:
/// the call ran in a session being stopped (a timeout's approving default or an in-client
/// answer the same). A token of a call in a session marked over redeems nothing, `409
/// SESSION_CANCELLED`; with the mark taken back (the cancellation left a call pending), it does.
#[tokio::test]
async fn a_token_of_a_session_whose_cancellation_is_under_way_redeems_nothing() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw.held("s7", "send", json!({"n": 1})).await;
    // The mark a cancellation writes first, as it stands while it cancels the pending calls
    // (and as a cancellation cut short by a crash leaves it).
    let mark = "INSERT INTO cancelled_sessions (agent, session_id, at, actor, announced) \
                VALUES ('bot', 's7', 1, 'olaf', 0)";
    gw.sql().exec(mark, &[]);
    let (s, d) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let token = token_of(&gw.as_agent(&id).await);
    let (s, r) = gw.redeem(&token, "send", json!({"n": 1}), None).await;
    assert_error(s, &r, StatusCode::CONFLICT, "SESSION_CANCELLED");
    assert_says(&r, "message", "session s7 was cancelled by `olaf`");
    assert_eq!(audit_count(&gw.data_dir, "token.refused"), 1);
    gw.sql().exec(
        "DELETE FROM cancelled_sessions WHERE session_id = 's7'",
        &[],
    );
    let (s, r) = gw.redeem(&token, "send", json!({"n": 1}), None).await;
    assert_eq!(s, StatusCode::OK, "{r}");
}
