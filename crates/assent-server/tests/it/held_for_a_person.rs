//! A call held by a trigger — session risk, a `cost` or `rate` threshold, a `paths` scope — is
//! held so a person decides (found by review), over the HTTP API on either backend: a covering
//! rule's `default_decision: approve` does not approve it at its timeout (its default is
//! `reject`, a reason says why, and the expiry sweep rejects a row stored with an approving
//! default too), and `in_client_approval` does not let the agent's own user approve it
//! (`POST /v1/approvals/{id}/user-decision`). And a delegation to a remote agent declaring
//! `allowed_skills` that names no `skill_id` needs a person: the remote agent would pick the
//! skill from the message, past the list and each skill's approval; it is held by the trigger
//! `skill_unnamed`, so neither an approving default, a grant nor the client releases it. A
//! held result (trigger `output_bytes`) shows the `reject` its timeout applies.

use crate::kit::{BOT, Gw, OP, assert_answer, assert_error, assert_says, policy, serve_policy};
use assent_core::approval::DefaultDecision;
use assent_core::canonical::CanonicalCall;
use assent_core::triggers::Observations;
use assent_core::{ToolCall, Verdict, VerdictKind};
use assent_store::{Proposal, Proposed};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Agent `bot`: the tools the rules below cover, and remote agents `payments` (declaring
/// `allowed_skills`, one of them under approval) and `search` (declaring none).
const AGENT: &str = r#"metadata: {id: bot}
action_space:
  local_tools:
    - alias: fetch_url
    - alias: send_email
    - alias: pay
    - alias: write_file
    - alias: note
  remote_agents:
    - alias: payments
      allowed_skills:
        - lookup
        - id: process-payment
          approval:
            condition: {args_match: {amount: {gt: 100}}}
    - alias: search
"#;

/// A team's lenient rules: every one says `default_decision: approve`, a wait of `wait`
/// seconds and `in_client_approval: true`; what holds `send_email`, `pay` and `write_file` is a
/// trigger only (untrusted output then egress; a cost total; a path outside the root).
fn rules(root: &str, wait: u64) -> String {
    format!(
        "- tool: fetch_url
  untrusted_output: true
- tool: send_email
  egress: true
  default_decision: approve
  timeout_seconds: {wait}
  in_client_approval: true
- tool: pay
  default_decision: approve
  timeout_seconds: {wait}
  in_client_approval: true
  thresholds: {{cost: {{argument: amount, max_per_session: 100}}}}
- tool: write_file
  default_decision: approve
  timeout_seconds: {wait}
  in_client_approval: true
  scope: {{paths: {{arguments: [path], roots: [\"{root}\"]}}}}
- tool: note
  approval: true
  default_decision: approve
  timeout_seconds: {wait}
  in_client_approval: true
"
    )
}

/// The gateway under [`AGENT`] and [`rules`] with waits of `wait` seconds, its `write_file`
/// root a directory of its own (kept alive by the returned guard).
async fn gateway(wait: u64) -> (Gw, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let gov = policy(
        "t.held-for-a-person-v1",
        &rules(&root_path.to_string_lossy(), wait),
    );
    (serve_policy(AGENT, &gov).await, root)
}

/// Proposes `tool(args)` in `session`; asserts it is allowed outright.
async fn allowed(gw: &Gw, session: &str, tool: &str, args: Value) {
    let (s, b) = gw.propose_in(session, tool, args).await;
    assert_eq!(
        (s, &b["decision"]),
        (StatusCode::OK, &json!("allow")),
        "{tool}: {b}"
    );
}

/// The session reads untrusted content: `fetch_url` of an outside page, allowed.
async fn read_untrusted(gw: &Gw, session: &str) {
    let url = json!({"url": "https://evil.example"});
    allowed(gw, session, "fetch_url", url).await;
}

/// Past the longest wait a rule may set (7 days) from now, Unix ms.
fn past_every_deadline() -> i64 {
    assent_server::state::now_ms() + 8 * 86_400_000
}

/// How a pending approval is let time out.
enum Lapse {
    /// Its one-second wait passes; reading the overdue approval settles it.
    Wait,
    /// The expiry sweep runs past every deadline.
    Sweep,
}

/// The one sequence every test here ends with: asserts approval `id` is pending and shows
/// `default_decision: shown`, lets it time out (`lapse`), and asserts it expired with the
/// default `reject` applied (read by an operator) and no token seen by its agent. Returns the
/// pending approval as the operator read it.
async fn pending_then_expired_rejected(gw: &Gw, id: &str, shown: &str, lapse: Lapse) -> Value {
    let (s, a) = gw.approval(id, OP).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    let seen = (&a["status"], &a["default_decision"]);
    assert_eq!(seen, (&json!("pending"), &json!(shown)), "{a}");
    match lapse {
        Lapse::Wait => tokio::time::sleep(std::time::Duration::from_millis(1_500)).await,
        Lapse::Sweep => {
            let changed = gw.with_store(|s| s.expire_due(past_every_deadline()).unwrap());
            assert!(changed.iter().any(|c| c == id), "{changed:?}");
        }
    }
    let (_, e) = gw.approval(id, OP).await;
    assert_eq!(e["status"], "expired", "not approved by the timeout: {e}");
    let last = e["decisions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["default_applied"], "reject", "{e}");
    let seen = gw.as_agent(id).await;
    assert!(seen.get("token").is_none_or(Value::is_null), "{seen}");
    a
}

/// Asserts approval `id`, held by `trigger`, is pending with `default_decision: reject` and
/// a reason naming the trigger, and that its one-second timeout rejects it
/// ([`pending_then_expired_rejected`]).
async fn assert_held_then_expired_rejected(gw: &Gw, id: &str, trigger: &str) {
    let a = pending_then_expired_rejected(gw, id, "reject", Lapse::Wait).await;
    assert!(a["triggers"].to_string().contains(trigger), "{a}");
    let why = a["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "triggers");
    assert!(
        why.is_some_and(|r| r["text"].as_str().unwrap().contains(trigger)),
        "{trigger}: {a}"
    );
}

/// The attack: the session read untrusted content (`fetch_url`, allowed), so its `send_email`
/// is held at R3 "so a person decides"; nobody looks, and at the one-second timeout the rule's
/// `default_decision: approve` approved it and its token redeemed. Its default is reject.
#[tokio::test]
async fn a_timeout_never_approves_egress_held_for_untrusted_session_content() {
    let (gw, _root) = gateway(1).await;
    read_untrusted(&gw, "u1").await;
    let id = gw
        .held("u1", "send_email", json!({"to": "x@example.com"}))
        .await;
    assert_held_then_expired_rejected(&gw, &id, "session_untrusted").await;
    gw.stop().await;
}

/// The same for a `cost` threshold (an amount over the session's total) and a `paths` scope
/// (a path outside the root): held by the trigger only, never approved by the timeout.
#[tokio::test]
async fn a_timeout_never_approves_a_call_held_by_a_threshold_or_a_scope() {
    let (gw, _root) = gateway(1).await;
    let id = gw.held("c1", "pay", json!({"amount": 500})).await;
    assert_held_then_expired_rejected(&gw, &id, "cost").await;
    let id = gw
        .held("p1", "write_file", json!({"path": "/etc/passwd"}))
        .await;
    assert_held_then_expired_rejected(&gw, &id, "paths").await;
    // A call its rule holds with no trigger keeps the rule's approving default.
    let (_, b) = gw.propose_in("n1", "note", json!({})).await;
    let (_, a) = gw.approval(b["approval_id"].as_str().unwrap(), OP).await;
    assert_eq!(a["default_decision"], "approve", "{a}");
    gw.stop().await;
}

/// The attack (found by review): `note` is held with no trigger under its rule's approving
/// default; then its session reads untrusted content (`fetch_url`, allowed). Nobody has
/// weighed the call since, and its default was chosen before: the sweep approved it at its
/// timeout. A session that took in, since the call was held, what can raise its risk refuses
/// its approving default: rejected. The same call in a session that took in nothing is
/// approved by its default as before.
#[tokio::test]
async fn a_timeout_does_not_approve_a_call_whose_session_took_in_untrusted_content_since() {
    let (gw, _root) = gateway(300).await;
    let id = gw.held("n2", "note", json!({})).await;
    read_untrusted(&gw, "n2").await;
    pending_then_expired_rejected(&gw, &id, "approve", Lapse::Sweep).await;
    let calm = gw.held("n3", "note", json!({})).await;
    let changed = gw.with_store(|s| s.expire_due(past_every_deadline()).unwrap());
    assert!(changed.iter().any(|c| c == &calm), "{changed:?}");
    let (_, e) = gw.approval(&calm, OP).await;
    let last = e["decisions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["default_applied"], "approve", "{e}");
    gw.stop().await;
}

/// A row held by a trigger and stored with an approving default (before this rule, or from a
/// verdict composed otherwise): the sweep itself still rejects it at its timeout.
#[tokio::test]
async fn a_row_held_by_a_trigger_with_an_approving_default_is_rejected_by_the_sweep() {
    let (gw, _root) = gateway(300).await;
    let id = store_held(&gw, "legacy", |v| v.terms.in_client_approval = false);
    pending_then_expired_rejected(&gw, &id, "approve", Lapse::Sweep).await;
    gw.stop().await;
}

/// The attack: a rule says `default_decision: approve` and `thresholds.output_bytes`; a
/// result over the limit is held for an operator (trigger `output_bytes`), and
/// `GET /v1/approvals/{id}` showed its call's `approve` — "nobody need look" — while the sweep
/// rejects it. What is shown is what happens: `reject`, a reason naming the trigger, and its
/// timeout rejects it.
#[tokio::test]
async fn a_held_result_shows_the_reject_its_timeout_applies_not_its_calls_approve() {
    let rules = "- tool: note
  default_decision: approve
  timeout_seconds: 1
  thresholds: {output_bytes: 100}
";
    let gw = serve_policy(AGENT, &policy("t.held-result-v1", rules)).await;
    allowed(&gw, "r1", "note", json!({})).await;
    let report = json!({"agent": "bot", "session_id": "r1", "tool": "note", "arguments": {},
                        "output_bytes": 5000, "result_sha256": "ab".repeat(32)});
    let (s, b) = gw.post("/v1/tool-results", BOT, report).await;
    assert_answer(s, &b, "decision", StatusCode::ACCEPTED, "pending");
    assert_eq!(b["triggers"], json!(["output_bytes"]), "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    assert_held_then_expired_rejected(&gw, &id, "output_bytes").await;
    gw.stop().await;
}

/// Holds `write_file` outside the root through the store directly in `session`, its verdict
/// (held by the `paths` trigger) forced to an approving default and then changed by `tune`, as
/// a row stored before this rule would be; returns the approval id.
fn store_held(gw: &Gw, session: &str, tune: impl FnOnce(&mut Verdict) + Send) -> String {
    let reg = gw.state.registry();
    let tool = ToolCall::new("write_file", None, json!({"path": "/etc/passwd"})).unwrap();
    let call = CanonicalCall::new(tool.clone()).unwrap();
    gw.with_store(|s| {
        let ttl = |_: &Verdict| 60_000;
        let now = assent_server::state::now_ms();
        let p = Proposal::for_call("bot", session, &call, now, &ttl, 100);
        let (_, outcome) = s
            .propose(&p, |_| {
                let obs = Observations::none(now);
                let mut v = assent_core::evaluate_in(&reg, "bot", &tool, None, &obs);
                assert_eq!(v.kind, VerdictKind::Confirm);
                assert_eq!(v.terms.triggers, ["paths"]);
                v.terms.default_decision = DefaultDecision::Approve;
                tune(&mut v);
                v
            })
            .unwrap();
        match outcome {
            Proposed::Held { approval, .. } => approval.id.clone(),
            _ => panic!("not held"),
        }
    })
}

/// Approves approval `id` as the agent's own user (`POST /v1/approvals/{id}/user-decision`).
async fn user_approves(gw: &Gw, id: &str) -> (StatusCode, Value) {
    let path = format!("/v1/approvals/{id}/user-decision");
    gw.post(&path, BOT, json!({"decision": "approve"})).await
}

/// The attack: a rule says `in_client_approval: true`; a call it covers held by a trigger (a
/// path outside the root, a cost total, untrusted content in the session) was offered to the
/// agent's own user — for a REST agent, the agent approving its own call. Not offered, and
/// refused (`403`), also for a row stored offering it; a call the rule holds with no trigger
/// is still approved in the client.
#[tokio::test]
async fn the_agents_user_cannot_approve_a_call_held_by_a_trigger_in_the_client() {
    let (gw, _root) = gateway(300).await;
    read_untrusted(&gw, "u1").await;
    let mut held = Vec::new();
    for (session, tool, args) in [
        ("p1", "write_file", json!({"path": "/etc/passwd"})),
        ("c1", "pay", json!({"amount": 500})),
        ("u1", "send_email", json!({"to": "x@example.com"})),
    ] {
        let (s, b) = gw.propose_in(session, tool, args).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        held.push((b["approval_id"].as_str().unwrap().to_string(), b));
    }
    let legacy = store_held(&gw, "legacy", |v| v.terms.in_client_approval = true);
    held.push((legacy, json!({"in_client_approval": false})));
    for (id, answer) in &held {
        // Refused by the gateway (`IN_CLIENT_NOT_ALLOWED`) or, for a row stored offering it,
        // by the store's own check: never approved, still pending.
        let (s, b) = user_approves(&gw, id).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
        let (_, a) = gw.approval(id, OP).await;
        assert_eq!(a["status"], "pending", "{a}");
        assert_eq!(answer["in_client_approval"], false, "not offered: {answer}");
    }
    let (s, b) = user_approves(&gw, &held[0].0).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "IN_CLIENT_NOT_ALLOWED");
    let (s, b) = gw.propose_in("n1", "note", json!({})).await;
    assert_eq!(
        (s, &b["in_client_approval"]),
        (StatusCode::ACCEPTED, &json!(true)),
        "{b}"
    );
    let (s, a) = user_approves(&gw, b["approval_id"].as_str().unwrap()).await;
    assert_answer(s, &a, "status", StatusCode::OK, "approved");
    gw.stop().await;
}

/// Delegates as `bot` in session `d1` with `body`'s fields (`target`, `input`, `skill_id`…).
async fn delegate(gw: &Gw, body: Value) -> (StatusCode, Value) {
    let mut b = json!({"agent": "bot", "session_id": "d1"});
    b.as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    gw.post("/v1/delegations", BOT, b).await
}

/// Delegates a payment to `payments` naming no skill: asserts it is held (`202 pending`) and
/// returns the answer.
async fn held_unnamed_skill(gw: &Gw) -> Value {
    let pay = json!({"text": "process a payment of 5000 to acct 1"});
    let (s, b) = delegate(gw, json!({"target": "payments", "input": pay})).await;
    assert_answer(s, &b, "decision", StatusCode::ACCEPTED, "pending");
    b
}

/// The attack: `payments` allows `lookup` freely and `process-payment` only under approval;
/// a delegation naming no `skill_id` was allowed, and the remote agent picked
/// `process-payment` from the message. With no skill id it needs a person, the reason says
/// why; a named allowed skill, and a remote agent declaring no `allowed_skills`, are as before.
#[tokio::test]
async fn a_delegation_naming_no_skill_cannot_skip_allowed_skills_and_their_approval() {
    let (gw, _root) = gateway(300).await;
    let b = held_unnamed_skill(&gw).await;
    let (_, a) = gw.approval(b["approval_id"].as_str().unwrap(), OP).await;
    assert!(
        a["reasons"]
            .to_string()
            .contains("asked with no skill id; it declares allowed_skills"),
        "{a}"
    );
    let (s, b) = delegate(
        &gw,
        json!({"target": "payments", "input": {}, "skill_id": "lookup"}),
    )
    .await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    let (s, b) = delegate(&gw, json!({"target": "search", "input": {}})).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    let (s, b) = delegate(&gw, json!({"target": "payments", "skill_id": "refund"})).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOOL_DENIED");
    assert_says(&b, "reason", "not in allowed_skills");
    gw.stop().await;
}

/// The attack: a delegation naming no skill was held "so a person decides" with no trigger,
/// so a lenient catch-all rule (`tool: "*"`, `default_decision: approve`,
/// `in_client_approval: true`) let it through with nobody deciding: offered to the agent's own
/// user, and approved at its timeout. It is held by the trigger `skill_unnamed`: not offered
/// in the client (refused, `403`), its default is reject, and its timeout approves nothing.
#[tokio::test]
async fn a_lenient_default_never_releases_a_delegation_naming_no_skill() {
    let lenient = "- tool: \"*\"
  default_decision: approve
  timeout_seconds: 1
  in_client_approval: true
";
    let gw = serve_policy(AGENT, &policy("t.skill-unnamed-v1", lenient)).await;
    let b = held_unnamed_skill(&gw).await;
    assert_eq!(b["in_client_approval"], false, "not offered: {b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (s, a) = user_approves(&gw, &id).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{a}");
    let (_, a) = gw.approval(&id, OP).await;
    assert_eq!(a["in_client_approval"], false, "{a}");
    assert_held_then_expired_rejected(&gw, &id, "skill_unnamed").await;
    gw.stop().await;
}

/// The agent's user's approval in the client is checked against what the session has taken in
/// twice: by the gateway when the answer comes (untrusted output since the call was held: it
/// now needs an operator, `403`), and again by the store under the decision's write lock,
/// against the state that check read (a session that took in more in between: `409
/// SESSION_CHANGED`, shown at the store on both backends by
/// `a_decision_checked_against_a_session_that_took_in_more_since_is_refused`: the interleaving
/// cannot be forced over HTTP). A session unchanged in between, marks and all, is approved and
/// its token minted.
#[tokio::test]
async fn an_in_client_approval_is_checked_against_the_session_it_was_read_with() {
    let rules = "- tool: fetch_url
  untrusted_output: true
- tool: note
  approval: true
  in_client_approval: true
- tool: send_email
  egress: true
  approval: true
  in_client_approval: true
";
    let gw = serve_policy(AGENT, &policy("t.in-client-session-v1", rules)).await;
    let held = |session: &'static str, tool: &'static str| {
        let gw = &gw;
        async move {
            let (s, b) = gw
                .propose_in(session, tool, json!({"to": "x@example.com"}))
                .await;
            assert_eq!(
                (s, &b["in_client_approval"]),
                (StatusCode::ACCEPTED, &json!(true)),
                "{b}"
            );
            b["approval_id"].as_str().unwrap().to_string()
        }
    };
    // Taken in after the call was held: the egress now needs an operator.
    let id = held("r1", "send_email").await;
    read_untrusted(&gw, "r1").await;
    let (s, b) = user_approves(&gw, &id).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "IN_CLIENT_NOT_ALLOWED");
    let (_, a) = gw.approval(&id, OP).await;
    assert_eq!(a["status"], "pending", "{a}");
    // A session with a mark that did not move between the check and the write: approved.
    let id = held("r1", "note").await;
    let (s, a) = user_approves(&gw, &id).await;
    assert_answer(s, &a, "status", StatusCode::OK, "approved");
    crate::kit::token_of(&gw.as_agent(&id).await);
    let id = held("r2", "send_email").await;
    let (s, a) = user_approves(&gw, &id).await;
    assert_answer(s, &a, "status", StatusCode::OK, "approved");
    gw.stop().await;
}

/// Found by review: a call whose timeout *rejected* it — its stored default was approve, but
/// the session took in untrusted output meanwhile — still counted toward the session's cost
/// threshold as if it had run, because the count read the stored default, not the one
/// applied; the session's later calls were held for money never spent. It counts no more.
#[tokio::test]
async fn a_call_its_timeout_rejected_does_not_count_toward_a_cost_threshold() {
    const AGENT2: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: fetch_url\n    - alias: pay_held\n    - alias: pay_now\n";
    let rules = "- tool: fetch_url
  untrusted_output: true
- tool: \"pay_*\"
  thresholds: {cost: {argument: amount, max_per_session: 100}}
- tool: pay_held
  approval: true
  default_decision: approve
  timeout_seconds: 300
";
    let gw = serve_policy(AGENT2, &policy("t.rejected-cost-v1", rules)).await;
    let id = gw.held("k1", "pay_held", json!({"amount": 80})).await;
    read_untrusted(&gw, "k1").await;
    pending_then_expired_rejected(&gw, &id, "approve", Lapse::Sweep).await;
    allowed(&gw, "k1", "pay_now", json!({"amount": 30})).await;
    gw.stop().await;
}
