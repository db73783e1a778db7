//! Delegation approval (seed 004 "Approval on Agent Delegation"): `approval` on
//! `local_agents[]`, `remote_agents[]` and skill references gates `POST /v1/delegations`, with
//! `parent.input.*` condition keys and the delegation template variables; and an
//! orchestrator's plan over its local delegates' calls across a reload of the delegation.

use crate::kit::{BOT, Gw, OP, assert_error, assert_says, policy, serve_policy, token_of};
use crate::plans::{a_token, delegate_pays, orchestrating_bot, plan, reload_bot, reloadable, uuid};
use reqwest::StatusCode;
use serde_json::{Value, json};

const AGENTS: &str = r#"
metadata: {id: bot, name: Bot}
action_space:
  local_agents:
    - alias: financial_executor
      source: agents/executor.agf.yaml
      approval:
        message_template: "Delegate to financial executor for {{parent.input.action}}?"
        condition:
          args_match:
            parent.input.risk_level: { in: ["high", "critical"] }
    - alias: summariser
      source: agents/summariser.agf.yaml
    - alias: archiver
      source: agents/archiver.agf.yaml
  remote_agents:
    - alias: payments
      approval:
        message_template: "Ask {{remote_agent_alias}} ({{agent_alias}} for {{agent_id}}) in {{parent.input.env}}"
        condition: {args_match: {parent.input.env: prod}}
      allowed_skills:
        - lookup
        - id: process-payment
          approval:
            message_template: "{{remote_agent_alias}}: {{skill_id}} of {{skill_args.amount}} ({{skill_args}})"
            condition: {args_match: {amount: {gt: 100}}}
"#;

/// `delegate.archiver` is denied with a message; `delegate.summariser` at most once a minute
/// per session.
const RULES: &str = r#"- tool: delegate.archiver
  deny: {message_template: "archiving is frozen"}
- tool: delegate.summariser
  thresholds: {rate: {max: 1, per_seconds: 60}}"#;

async fn delegate(gw: &Gw, body: Value) -> (StatusCode, Value) {
    let mut b = json!({"agent": "bot", "session_id": "s1"});
    b.as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    gw.post("/v1/delegations", BOT, b).await
}

#[tokio::test]
async fn delegations_are_gated_by_the_references_approval_skills_and_governance() {
    let gw = serve_policy(AGENTS, &policy("acme.delegation.rules-v1", RULES)).await;

    // parent.input.risk_level decides; the template sees parent.input.
    let mut pending = Value::Null;
    for (risk, status, decision) in [
        ("low", StatusCode::OK, "allow"),
        ("high", StatusCode::ACCEPTED, "pending"),
    ] {
        let input = json!({"action": "sell", "risk_level": risk});
        let (s, b) = delegate(&gw, json!({"target": "financial_executor", "input": input})).await;
        assert_eq!((s, b["decision"].as_str()), (status, Some(decision)), "{b}");
        pending = b;
    }
    assert_eq!(
        pending["message"],
        "Delegate to financial executor for sell?"
    );
    // A missing key cannot be evaluated: approval is required (fail closed).
    let (s, _) = delegate(
        &gw,
        json!({"target": "financial_executor", "input": {"action": "sell"}}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED);

    // No approval declared: allowed. Undeclared target, local agent with a skill: denied.
    let (s, _) = delegate(&gw, json!({"target": "summariser", "input": {}})).await;
    assert_eq!(s, StatusCode::OK);
    for (body, why) in [
        (
            json!({"target": "launcher", "input": {}}),
            "not declared in action_space.local_agents",
        ),
        (
            json!({"target": "summariser", "skill_id": "x"}),
            "remote agents only",
        ),
        (
            json!({"target": "payments", "skill_id": "refund", "skill_args": {}}),
            "not in allowed_skills",
        ),
        (json!({"target": "archiver"}), "archiving is frozen"),
    ] {
        let (s, b) = delegate(&gw, body).await;
        assert_error(s, &b, StatusCode::FORBIDDEN, "TOOL_DENIED");
        assert_says(&b, "reason", why);
    }

    // A skill's approval looks at the skill's input; its template at skill variables.
    let (s, _) = delegate(&gw, json!({"target": "payments", "input": {"env": "dev"}, "skill_id": "process-payment", "skill_args": {"amount": 50}})).await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = delegate(&gw, json!({"target": "payments", "input": {"env": "dev"}, "skill_id": "process-payment", "skill_args": {"amount": 500}})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(
        b["message"],
        r#"payments: process-payment of 500 ({"amount":500})"#
    );
    // The remote agent's own approval, with agent_alias = the sub-agent, agent_id = the parent.
    let (s, b) = delegate(
        &gw,
        json!({"target": "payments", "input": {"env": "prod"}, "skill_id": "lookup"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["message"], "Ask payments (payments for bot) in prod");

    // Found by review: an edit of a delegation was re-gated as a tool call no agent declares
    // and refused as one the policy denies (`422 EDIT_DENIED`), which said nothing of why. It
    // is refused as an edit that cannot be made, and the delegation is still pending.
    let id = pending["approval_id"].as_str().unwrap();
    let edit = json!({"decision": "approve", "arguments": {"input": {"action": "hold", "risk_level": "high"}}});
    let (s, e) = gw.decide_with(id, OP, edit).await;
    assert_error(s, &e, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&e, "message", "only a tool call's arguments can be edited");
    assert_eq!(gw.approval(id, OP).await.1["status"], "pending");

    // Approved like a tool call: the token binds the delegation's exact call.
    let (s, d) = gw.decide(id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let (_, a) = gw.approval(id, BOT).await;
    let token = json!(token_of(&a));
    let tool = "delegate.financial_executor";
    let other = json!({"input": {"action": "buy", "risk_level": "high"}});
    let (s, _) = gw.redeem_as(BOT, &token, tool, other).await;
    assert_ne!(s, StatusCode::OK, "a token never covers another delegation");
    let same = json!({"input": {"action": "sell", "risk_level": "high"}});
    let (s, r) = gw.redeem_as(BOT, &token, tool, same).await;
    assert_eq!(s, StatusCode::OK, "{r}");

    // Bad bodies are 400s that say what is wrong.
    let (s, b) = delegate(&gw, json!({"target": "payments", "skill_args": {"a": 1}})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_says(&b, "message", "skill_id");
    let (s, _) = delegate(&gw, json!({"target": "payments", "input": [1]})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    gw.stop().await;
}

/// Found by review: a delegation was evaluated with nothing observed, so the session's
/// earlier delegations were never counted — a `rate` on `delegate.*` never fired — and what
/// the session had taken in never raised a delegation's risk. They are observed as a tool
/// call's are.
#[tokio::test]
async fn a_delegations_thresholds_count_the_sessions_earlier_delegations() {
    let gw = serve_policy(AGENTS, &policy("acme.delegation.rules-v1", RULES)).await;
    let body = |n: i64| json!({"session_id": "rated", "target": "summariser", "input": {"n": n}});
    let (s, b) = delegate(&gw, body(1)).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = delegate(&gw, body(2)).await;
    assert_eq!(
        (s, b["triggers"].clone()),
        (StatusCode::ACCEPTED, json!(["rate"])),
        "{b}"
    );
    // Another session starts its own count.
    let (s, b) = delegate(
        &gw,
        json!({"session_id": "other", "target": "summariser", "input": {}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

/// Found by review: a skill's condition is read from `skill_args` as its root, literal key
/// first, while the remote skill reads the nested value, so `{"order.amount": 5, "order":
/// {"amount": 50000}}` showed the condition `order.amount > 100` a 5 and was allowed unasked.
/// Such arguments are refused, naming the key, as at the top level of a tool call's.
#[tokio::test]
async fn a_dotted_skill_argument_cannot_hide_the_nested_value_from_the_skills_condition() {
    let agents = r#"
metadata: {id: bot, name: Bot}
action_space:
  remote_agents:
    - alias: payments
      allowed_skills:
        - id: process-payment
          approval:
            condition: {args_match: {order.amount: {gt: 100}}}
"#;
    let gw = serve_policy(agents, &policy("acme.delegation.dotted-v1", "[]")).await;
    let call = |args: Value| json!({"target": "payments", "skill_id": "process-payment", "skill_args": args});
    dotted_amount_refused(&gw, call, "skill_args.order.amount").await;
}

/// Delegations `call(order)` of `gw` whose condition holds an `order.amount` over 100: a
/// nested 50,000 is held, a nested 5 passes, and a dotted `order.amount` beside the nested
/// one is refused `400` naming `key`.
async fn dotted_amount_refused(gw: &Gw, call: impl Fn(Value) -> Value, key: &str) {
    let (s, _) = delegate(gw, call(json!({"order": {"amount": 50000}}))).await;
    assert_eq!(s, StatusCode::ACCEPTED, "the nested amount is held");
    let (s, _) = delegate(gw, call(json!({"order": {"amount": 5}}))).await;
    assert_eq!(s, StatusCode::OK);
    for hidden in [
        json!({"order.amount": 5, "order": {"amount": 50000}}),
        json!({"order.amount": 50000, "order": {"amount": 5}}),
    ] {
        let (s, b) = delegate(gw, call(hidden)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
        assert_says(&b, "message", key);
    }
}

/// Found by review: a reference's condition reads `parent.input.order.amount` through the
/// nested objects, so an `input` of `{"order.amount": 50000, "order": {"amount": 1}}` showed
/// it a 1 and passed unasked, while the sub-agent was given both. Such an `input` is refused,
/// naming the key under `input.`.
#[tokio::test]
async fn a_dotted_input_key_cannot_hide_a_value_from_the_references_condition() {
    let agents = r#"
metadata: {id: bot, name: Bot}
action_space:
  local_agents:
    - alias: executor
      source: agents/executor.agf.yaml
      approval:
        condition: {args_match: {parent.input.order.amount: {gt: 100}}}
"#;
    let gw = serve_policy(agents, &policy("acme.delegation.dotted-input-v1", "[]")).await;
    let call = |input: Value| json!({"target": "executor", "input": input});
    dotted_amount_refused(&gw, call, "input.order.amount").await;
}

/// `bot`'s plan `pid`, created, submitted and approved by the operator: it runs calls.
async fn approved_plan(gw: &Gw) -> String {
    let pid = uuid();
    approve_plan(gw, &pid).await;
    pid
}

/// Creates `bot`'s plan `pid` (one step), submits it, and has the operator approve it.
async fn approve_plan(gw: &Gw, pid: &str) {
    let s1 = uuid();
    let (s, p) = gw.create_plan(plan(pid, &[(&s1, "Pay the bill")])).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (s, r) = gw.submit_plan(pid).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let confirm = r["approval_id"].as_str().unwrap();
    assert_eq!(gw.decide(confirm, OP, "approve").await.0, StatusCode::OK);
}

/// The approval id of `other`'s `pay` of `amount` naming plan `pid`, held (`202`).
async fn delegate_held(gw: &Gw, pid: &str, amount: u64) -> String {
    let (s, h) = delegate_pays(gw, pid, amount).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{h}");
    h["approval_id"].as_str().unwrap().to_string()
}

/// Asserts approval `id` was cancelled and that approving it now is refused.
async fn stays_cancelled(gw: &Gw, id: &str) {
    let (s, a) = gw.approval(id, OP).await;
    assert_eq!(
        (s, a["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{a}"
    );
    let (s, d) = gw.decide(id, OP, "approve").await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a cancelled call is not approved: {d}"
    );
}

/// Found by review: a delegate's held calls and tokens were judged by the delegation as
/// configured at the plan's stop or at redemption, not as it was when the plan gated them, so
/// an operator reload removing `bot`'s declaration of `other` (or an agent file edited and
/// reloaded) released `other`'s calls from `bot`'s plan: cancelling the plan left the
/// delegate's held call pending, to be approved, and its token approved under the plan
/// redeemed although the plan was stopped. The plan's agent is recorded with the call when the
/// plan gates it, and the plan's stop reaches what it gated then.
#[tokio::test]
async fn a_reload_removing_a_delegation_does_not_release_a_stopped_plans_held_delegate_call() {
    let (dir, gw) = reloadable(&orchestrating_bot()).await;
    let pid = approved_plan(&gw).await;
    let pending = delegate_held(&gw, &pid, 601).await;
    let approved = delegate_held(&gw, &pid, 602).await;
    assert_eq!(gw.decide(&approved, OP, "approve").await.0, StatusCode::OK);
    let token = a_token(&gw, &approved).await;
    // The delegation goes; then the orchestrator stops its plan.
    reload_bot(&gw, &dir, crate::kit::AGENTS).await;
    gw.cancel_plan(&pid, json!({"reason": "stop"})).await;
    stays_cancelled(&gw, &pending).await;
    let args = json!({"amount": 602, "to": "bob"});
    let (s, e) = gw.redeem_as("other-key", &token, "pay", args).await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_STOPPED");
    // A call `other` makes now naming the plan is no longer gated by it (as if it named no
    // plan): what a reload changes is the calls from then on.
    let later = delegate_held(&gw, &pid, 603).await;
    assert_eq!(gw.decide(&later, OP, "approve").await.0, StatusCode::OK);
    gw.stop().await;
}

/// The same hole in the other order: the plan stopped first (its delegate's token stopped
/// with it), the delegation removed by a reload afterwards; the token stays stopped.
#[tokio::test]
async fn a_reload_removing_a_delegation_after_the_plans_stop_does_not_revive_its_delegates_token() {
    let (dir, gw) = reloadable(&orchestrating_bot()).await;
    let pid = approved_plan(&gw).await;
    let approved = delegate_held(&gw, &pid, 701).await;
    assert_eq!(gw.decide(&approved, OP, "approve").await.0, StatusCode::OK);
    let token = a_token(&gw, &approved).await;
    gw.cancel_plan(&pid, json!({})).await;
    reload_bot(&gw, &dir, crate::kit::AGENTS).await;
    let args = json!({"amount": 701, "to": "bob"});
    let (s, e) = gw.redeem_as("other-key", &token, "pay", args).await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_STOPPED");
    gw.stop().await;
}

/// The attack: the owner of one agent file (`bot`'s) names another file's agent (`other`) its
/// local delegate, so that `bot`'s plans gate `other`'s calls and cancelling one stops
/// `other`'s held calls and tokens. A delegation holds only when the delegate's own file
/// accepts the orchestrator (`metadata.annotations` `assent/orchestrators`): here `other`'s
/// file names no orchestrator, and `bot`'s file claiming `other`'s namespace (found by review,
/// against a namespace check) changes nothing — a load warning, and `other`'s calls naming
/// `bot`'s plan are gated as if they named none.
#[tokio::test]
async fn an_agent_file_cannot_make_another_files_agent_its_delegate_without_its_consent() {
    let (dir, gw) = reloadable(crate::kit::AGENTS).await;
    let other = crate::kit::one_tool_agent("other", "{alias: pay, approval: true}").replacen(
        "{id: other}",
        "{id: other, namespace: team-b}",
        1,
    );
    std::fs::write(dir.path().join("conf/other.agf.yaml"), other).unwrap();
    let bot = orchestrating_bot().replacen("name: Bot}", "name: Bot, namespace: team-b}", 1);
    assert_ne!(
        bot,
        orchestrating_bot(),
        "the fixture's metadata line changed"
    );
    reload_bot(&gw, &dir, &bot).await;
    let warnings = gw.state.registry().warnings.clone();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("agent `other` does not accept `bot` as its orchestrator")),
        "{warnings:?}"
    );
    let pid = approved_plan(&gw).await;
    let pending = delegate_held(&gw, &pid, 801).await;
    let approved = delegate_held(&gw, &pid, 802).await;
    assert_eq!(gw.decide(&approved, OP, "approve").await.0, StatusCode::OK);
    let token = a_token(&gw, &approved).await;
    gw.cancel_plan(&pid, json!({"reason": "reach into another file's agent"}))
        .await;
    let (s, a) = gw.approval(&pending, OP).await;
    assert_eq!(
        (s, a["status"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{a}"
    );
    let args = json!({"amount": 802, "to": "bob"});
    let (s, r) = gw.redeem_as("other-key", &token, "pay", args).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    gw.stop().await;
}

/// Attack (found by review): `POST /v1/tool-calls` took a tool named like a derived call
/// (`delegate.…`, `result.…`, `mplp.…`): gated as a plain tool — a delegation's skill rules
/// skipped — its token bound the same `call_hash` as the real delegation's, held result's
/// release or plan's. Refused (`400`), nothing stored.
#[tokio::test]
async fn a_proposal_naming_a_derived_call_is_refused() {
    let gw = serve_policy(AGENTS, &policy("acme.delegation.rules-v1", RULES)).await;
    let records = || gw.sql().int("SELECT count(*) FROM audit", &[]);
    let before = records();
    let call =
        |tool: &str| json!({"agent": "bot", "session_id": "s1", "tool": tool, "arguments": {}});
    for tool in ["delegate.financial_executor", "result.read", "mplp.plan"] {
        let (s, b) = gw.post("/v1/tool-calls", BOT, call(tool)).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
        assert_says(&b, "message", "the gateway's own");
    }
    assert_eq!(records(), before, "nothing was stored");
    gw.stop().await;
}

/// Attack (found by review): stopping a plan revokes the grants made by approving calls held
/// under it, but the revocation looked only at the plan's agent recorded with each call — and
/// a delegate's call that named the plan's id before the plan existed recorded none. `other`
/// names `bot`'s plan early; the plan is then made and approved, an operator approves the
/// held call for the session (a grant), the grant covers the same call made again without the
/// plan, and `bot` cancels its plan: the grant stood and its token redeemed after the stop.
/// The revocation reaches the delegates of the plan's agent now, as the stop of held calls and
/// tokens does: the token is void.
#[tokio::test]
async fn cancelling_an_orchestrators_plan_voids_the_tokens_of_a_delegates_grant_made_before_the_plan_existed()
 {
    let (_dir, gw) = reloadable(&orchestrating_bot()).await;
    let pid = uuid();
    let held = delegate_held(&gw, &pid, 801).await;
    approve_plan(&gw, &pid).await;
    let session = json!({"decision": "approve", "scope": "session", "reason": "test"});
    let (s, d) = gw.decide_with(&held, OP, session).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let args = json!({"amount": 801, "to": "bob"});
    let again = json!({"agent": "other", "session_id": "o1", "tool": "pay", "arguments": args});
    let (s, c) = gw.post("/v1/tool-calls", "other-key", again).await;
    assert_eq!(s, StatusCode::OK, "the session grant covers the call: {c}");
    gw.cancel_plan(&pid, json!({"reason": "stop"})).await;
    let (s, e) = gw.redeem_as("other-key", &c["token"], "pay", args).await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "the grant's token redeemed after the stop: {e}"
    );
    gw.stop().await;
}

/// Attack (found by review): a reload that froze delegations to a sub-agent (a governance
/// `deny` on `delegate.helper`) left a delegation held before it approvable, and the
/// sub-agent ran. Asked again as a delegation under the rules in force, its approval is `409
/// RULES_TIGHTENED`.
#[tokio::test]
async fn a_delegation_held_before_a_reload_denied_it_cannot_be_approved() {
    let (dir, gw) = reloadable(&orchestrating_bot()).await;
    let rules = |rule: &str| {
        let gov = policy(
            "acme.test.rules-v1",
            &format!("- tool: delegate.helper\n{rule}"),
        );
        std::fs::write(dir.path().join("conf/gov.yaml"), gov).unwrap();
    };
    rules("  approval: true\n");
    reload_bot(&gw, &dir, &orchestrating_bot()).await;
    let (s, b) = delegate(&gw, json!({"target": "helper", "input": {"task": "sell"}})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let held = crate::kit::approval_id(&b);
    rules("  deny: {message_template: frozen}\n");
    reload_bot(&gw, &dir, &orchestrating_bot()).await;
    let (s, b) = gw.decide(&held, OP, "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
    assert_says(&b, "message", "deny it (frozen)");
    gw.stop().await;
}
