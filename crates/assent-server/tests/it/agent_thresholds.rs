//! Attacks on the rate and cost thresholds through a fresh session id (found by review): the
//! agent chooses its `session_id`, so a count per session is the agent's to reset. A REST agent
//! sending each call under a new one never tripped `rate: {max: 5, per_seconds: 60}`, and
//! `cost: {max_per_session: …}` saw one call at a time. `rate.per: agent` and
//! `cost.max_per_agent` (over `per_seconds`) count the agent's calls in all its sessions; the
//! default `per: session` keeps its meaning.

use crate::kit::{Gw, assert_answer, assert_error, one_tool_agent, policy, serve_policy};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A gateway whose one agent `bot` may call `pay` under the rule `rule`.
async fn gateway(rule: &str) -> Gw {
    let agent = one_tool_agent("bot", "alias: pay");
    serve_policy(&agent, &policy("t.agent-wide-v1", rule)).await
}

/// Proposes `pay(args)` as `bot` in session `session` and asserts that it is allowed.
async fn allowed(gw: &Gw, session: &str, args: Value) {
    let (s, b) = gw.propose_in(session, "pay", args).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
}

/// Proposes `pay(args)` as `bot` in session `session` and asserts that it is held (202),
/// naming exactly `triggers`.
async fn held_for(gw: &Gw, session: &str, args: Value, triggers: Value) {
    let (s, b) = gw.propose_in(session, "pay", args).await;
    assert_eq!(
        (s, b["triggers"].clone()),
        (StatusCode::ACCEPTED, triggers),
        "{b}"
    );
}

#[tokio::test]
async fn a_fresh_session_id_cannot_reset_a_per_agent_rate() {
    let gw =
        gateway("- tool: pay\n  thresholds: {rate: {max: 1, per_seconds: 60, per: agent}}\n").await;
    allowed(&gw, "s-1", json!({"amount": 1})).await;
    held_for(&gw, "s-2", json!({"amount": 1}), json!(["rate"])).await;
    gw.stop().await;
}

/// The default (`per: session`) counts each session alone, as before `per` existed.
#[tokio::test]
async fn a_per_session_rate_still_counts_each_session_alone() {
    let gw = gateway("- tool: pay\n  thresholds: {rate: {max: 1, per_seconds: 60}}\n").await;
    for session in ["s-1", "s-2"] {
        allowed(&gw, session, json!({"amount": 1})).await;
    }
    held_for(&gw, "s-2", json!({"amount": 1}), json!(["rate"])).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_fresh_session_id_cannot_reset_a_per_agent_cost_total() {
    let gw = gateway(
        "- tool: pay\n  thresholds: {cost: {argument: amount, max_per_agent: 100, per_seconds: 3600}}\n",
    )
    .await;
    allowed(&gw, "s-1", json!({"amount": 60})).await;
    held_for(&gw, "s-2", json!({"amount": 60}), json!(["cost"])).await;
    // A missing amount cannot be counted: held, as under a session total.
    held_for(&gw, "s-3", json!({}), json!(["cost"])).await;
    gw.stop().await;
}

/// The default session total checks each fresh session alone, as before.
#[tokio::test]
async fn a_per_session_cost_total_still_counts_each_session_alone() {
    let gw =
        gateway("- tool: pay\n  thresholds: {cost: {argument: amount, max_per_session: 100}}\n")
            .await;
    for session in ["s-1", "s-2"] {
        allowed(&gw, session, json!({"amount": 60})).await;
    }
    held_for(&gw, "s-2", json!({"amount": 60}), json!(["cost"])).await;
    gw.stop().await;
}

/// Attack: a call held for a person (under the agent's total then) is edited to a larger
/// amount that, with the agent's calls in its other sessions, crosses the agent-wide total.
/// The edit is re-gated with the agent's window and refused.
#[tokio::test]
async fn an_edit_cannot_push_the_agents_total_over_through_another_session() {
    let gw = gateway(
        "- tool: pay\n  approval: true\n  thresholds: {cost: {argument: amount, max_per_agent: 100, per_seconds: 3600}}\n",
    )
    .await;
    let first = gw.held("s-1", "pay", json!({"amount": 60})).await;
    let second = gw.held("s-2", "pay", json!({"amount": 30})).await;
    let (s, b) = gw.edit(&second, json!({"amount": 50})).await;
    assert_error(
        s,
        &b,
        StatusCode::UNPROCESSABLE_ENTITY,
        "EDIT_OVER_THRESHOLD",
    );
    // Within the total the edit goes through; the first call is left to its own decision.
    let (s, b) = gw.edit(&second, json!({"amount": 40})).await;
    assert_answer(s, &b, "status", StatusCode::OK, "approved");
    assert!(!first.is_empty());
    gw.stop().await;
}
