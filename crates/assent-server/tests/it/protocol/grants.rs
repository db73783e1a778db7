//! Seed 002 grants: an approval widened to the session, a duration or the workspace covers
//! later identical calls (each with its own token) until revoked or lapsed; the workspace scope
//! on an R3 tool needs explicit confirmation; bad scopes are refused.

use super::env::env;
use crate::kit::{BOT, OP, assert_answer, assert_error, assert_says, token_of};
use crate::schemas::{assert_valid, validator};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn session_grant_covers_the_same_call_in_the_same_session_until_revoked() {
    let e = env().await;
    let gw = &e.gw;
    let token_schema = validator("docs/schemas/approval-token.schema.json");
    let id = gw.held("s1", "send", json!({"to": "ops", "n": 1})).await;
    let (s, b) = gw
        .decide_with(&id, OP, json!({"decision": "approve", "scope": "session"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (b["scope"].as_str(), b["grant_id"].is_string()),
        (Some("session"), true)
    );
    let rec = gw.as_agent(&id).await;
    assert_eq!(rec["scope"], "session");
    assert_valid(
        &token_schema,
        &rec["approval_token"],
        "token of a session approval",
    );
    assert_eq!(rec["approval_token"]["scope"], "session");
    let (s, _) = gw
        .redeem(&token_of(&rec), "send", json!({"to": "ops", "n": 1}), None)
        .await;
    assert_eq!(s, StatusCode::OK);

    // The same call again in the same session: allowed by the grant, with its own token.
    let (s, b) = gw
        .call("s1", "send", json!({"n": 1, "to": "ops"}), json!({}))
        .await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    assert_eq!(b["grant_id"], rec["grant_id"]);
    assert_ne!(b["approval_id"], json!(id));
    assert_valid(
        &token_schema,
        &b["approval_token"],
        "token of a granted call",
    );
    let t = token_of(&b);
    let redeem = || gw.redeem(&t, "send", json!({"to": "ops", "n": 1}), None);
    assert_eq!(redeem().await.0, StatusCode::OK);
    assert_eq!(redeem().await.0, StatusCode::CONFLICT);

    // Another session, or other arguments: not covered.
    let send = |session: &'static str, n: i64| {
        gw.call(session, "send", json!({"to": "ops", "n": n}), json!({}))
    };
    assert_eq!(send("s2", 1).await.0, StatusCode::ACCEPTED);
    assert_eq!(send("s1", 2).await.0, StatusCode::ACCEPTED);

    // Listed, then revoked: the same call is held again.
    let (_, g) = gw.get("/v1/grants", OP).await;
    let grants = g["grants"].as_array().unwrap();
    assert_eq!(grants.len(), 1, "{g}");
    let gid = grants[0]["id"].as_str().unwrap();
    assert_eq!(grants[0]["whole_tool"], false);
    assert_eq!(gw.get("/v1/grants", BOT).await.0, StatusCode::FORBIDDEN);
    let revoke = async || {
        gw.req("DELETE", &format!("/v1/grants/{gid}"), Some(OP), None)
            .await
    };
    assert_eq!(revoke().await.0, StatusCode::NO_CONTENT);
    assert_eq!(revoke().await.0, StatusCode::NOT_FOUND);
    assert_eq!(send("s1", 1).await.0, StatusCode::ACCEPTED);
    let (_, g) = gw.get("/v1/grants", OP).await;
    assert_eq!(g["grants"].as_array().unwrap().len(), 0);
    let (_, g) = gw.get("/v1/grants?all=true", OP).await;
    assert_eq!(g["grants"][0]["revoked_by"], "alice");
}

#[tokio::test]
async fn duration_grant_widened_to_the_tool_lapses_and_workspace_needs_confirmation_on_r3() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw.held("s1", "send", json!({"n": 1})).await;
    let decision = json!({"decision": "approve", "scope": "2s", "whole_tool": true});
    let (s, b) = gw.decide_with(&id, OP, decision).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // Other arguments, other session: covered while the grant lasts.
    let (s, b) = gw.call("s9", "send", json!({"n": 7}), json!({})).await;
    assert_answer(s, &b, "scope", StatusCode::OK, "2s");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(
        gw.call("s9", "send", json!({"n": 8}), json!({})).await.0,
        StatusCode::ACCEPTED
    );

    // workspace on an R3 tool: refused without the explicit flag, and nothing changes.
    let id = gw.held("s1", "deploy", json!({"env": "prod"})).await;
    let decision = json!({"decision": "approve", "scope": "workspace"});
    let (s, b) = gw.decide_with(&id, OP, decision).await;
    assert_error(
        s,
        &b,
        StatusCode::UNPROCESSABLE_ENTITY,
        "WORKSPACE_NEEDS_CONFIRMATION",
    );
    assert_eq!(gw.as_agent(&id).await["status"], "pending");
    let decision = json!({"decision": "approve", "scope": "workspace", "confirm_workspace": true});
    let (s, b) = gw.decide_with(&id, OP, decision).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, g) = gw.get("/v1/grants", OP).await;
    let g = g["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["tool"] == "deploy")
        .unwrap()
        .clone();
    assert_eq!(
        (g["discouraged"].as_bool(), g["scope"].as_str()),
        (Some(true), Some("workspace"))
    );
    let (s, _) = gw
        .call("s5", "deploy", json!({"env": "prod"}), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK);
    // Bad scopes are a 400.
    let id = gw.held("s1", "send", json!({"n": 3})).await;
    for scope in ["forever", "0m", "15x", "400d"] {
        let (s, b) = gw
            .decide_with(&id, OP, json!({"decision": "approve", "scope": scope}))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{scope}: {b}");
    }
    let (s, _) = gw
        .decide_with(&id, OP, json!({"decision": "deny", "scope": "session"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

/// Attack (found by review): "always for workspace" on an R3 tool needs explicit confirmation
/// (seed 002), but a timed grant of `366d` — bound to the agent and its tool like `workspace`,
/// in every session, for a year — passed without it and was not marked discouraged. A timed
/// grant longer than a `session` grant may last (24 h here) now needs the same confirmation,
/// and is recorded `discouraged`; one within it does not.
#[tokio::test]
async fn a_year_long_timed_grant_on_r3_needs_the_workspace_confirmation() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw.held("s1", "deploy", json!({"env": "prod"})).await;
    for scope in ["366d", "25h"] {
        let decision = json!({"decision": "approve", "scope": scope, "whole_tool": true});
        let (s, b) = gw.decide_with(&id, OP, decision).await;
        assert_error(
            s,
            &b,
            StatusCode::UNPROCESSABLE_ENTITY,
            "WORKSPACE_NEEDS_CONFIRMATION",
        );
        assert_says(&b, "message", &format!("scope `{scope}` on a R3 tool"));
        assert_eq!(gw.as_agent(&id).await["status"], "pending");
    }
    let decision = json!({"decision": "approve", "scope": "366d", "confirm_workspace": true});
    let (s, b) = gw.decide_with(&id, OP, decision).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, g) = gw.get("/v1/grants", OP).await;
    let g = &g["grants"][0];
    assert_eq!(
        (g["discouraged"].as_bool(), g["scope"].as_str()),
        (Some(true), Some("366d"))
    );
    // A day or less is a grant a session could have been: no confirmation, not discouraged.
    let id = gw.held("s2", "deploy", json!({"env": "staging"})).await;
    let decision = json!({"decision": "approve", "scope": "24h"});
    let (s, b) = gw.decide_with(&id, OP, decision).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, g) = gw.get("/v1/grants", OP).await;
    let day = g["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["scope"] == "1d");
    assert_eq!(day.unwrap()["discouraged"], false, "{g}");
}

/// Attack (found by review): an operator cancelled a session (AAEP §6.8) to stop an agent's
/// run, but the `session` grant made in it kept letting the agent's same call through with
/// nobody seeing it, and a call approved before the cancellation still redeemed its token.
/// Cancelling a session now revokes its `session` grants and voids the tokens of its calls not
/// yet redeemed; another session's token and a timed grant (consent beyond the session) stay.
#[tokio::test]
async fn cancelling_a_session_revokes_its_session_grants_and_voids_its_unredeemed_tokens() {
    let e = env().await;
    let gw = &e.gw;
    let approve = async |session: &str, n: i64, scope: &str| {
        let id = gw.held(session, "send", json!({"to": "ops", "n": n})).await;
        let body = json!({"decision": "approve", "scope": scope});
        let (s, b) = gw.decide_with(&id, OP, body).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        gw.as_agent(&id).await
    };
    let granted = approve("s9", 1, "session").await;
    let once = approve("s9", 2, "once").await;
    let elsewhere = approve("s10", 3, "once").await;
    let id = gw.held("s9", "send", json!({"n": 4})).await;
    let timed = json!({"decision": "approve", "scope": "1h"});
    assert_eq!(gw.decide_with(&id, OP, timed).await.0, StatusCode::OK);
    // The session grant covers its call again, and the covered call's token is kept unredeemed.
    let (s, covered) = gw
        .call("s9", "send", json!({"to": "ops", "n": 1}), json!({}))
        .await;
    assert_answer(
        s,
        &covered,
        "grant_id",
        StatusCode::OK,
        granted["grant_id"].as_str().unwrap(),
    );

    let (s, b) = gw.cancel_session("s9", OP).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["grants_revoked"], json!([granted["grant_id"]]), "{b}");
    // The session grant's own call, the once-approved call, the timed grant's call and the call
    // the session grant covered: four tokens not yet redeemed.
    assert_eq!(b["tokens_voided"], 4, "{b}");
    for (rec, n) in [(&granted, 1), (&once, 2), (&covered, 1)] {
        let (s, r) = gw
            .redeem(&token_of(rec), "send", json!({"to": "ops", "n": n}), None)
            .await;
        assert_error(s, &r, StatusCode::CONFLICT, "TOKEN_USED");
    }
    let (_, g) = gw.get("/v1/grants?all=true", OP).await;
    let revoked: Vec<_> = g["grants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| !g["revoked_at"].is_null())
        .collect();
    assert_eq!(revoked.len(), 1, "{g}");
    assert_eq!(
        (&revoked[0]["id"], &revoked[0]["revoked_by"]),
        (&granted["grant_id"], &json!("alice"))
    );
    // Another session's approved call still runs, and the timed grant still covers.
    let (s, r) = gw
        .redeem(
            &token_of(&elsewhere),
            "send",
            json!({"to": "ops", "n": 3}),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (s, b) = gw.call("s11", "send", json!({"n": 4}), json!({})).await;
    assert_answer(s, &b, "scope", StatusCode::OK, "1h");
}
