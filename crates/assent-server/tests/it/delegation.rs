//! Delegation approval (seed 004 "Approval on Agent Delegation"): `approval` on
//! `local_agents[]`, `remote_agents[]` and skill references gates `POST /v1/delegations`, with
//! `parent.input.*` condition keys and the delegation template variables.

use crate::kit::{BOT, Gw, OP, assert_error, assert_says, policy, serve_policy, token_of};
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

    // Approved like a tool call: the token binds the delegation's exact call.
    let id = pending["approval_id"].as_str().unwrap();
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
    let (s, _) = delegate(&gw, call(json!({"order": {"amount": 50000}}))).await;
    assert_eq!(s, StatusCode::ACCEPTED, "the nested amount is held");
    let (s, _) = delegate(&gw, call(json!({"order": {"amount": 5}}))).await;
    assert_eq!(s, StatusCode::OK);
    let hidden = json!({"order.amount": 5, "order": {"amount": 50000}});
    let (s, b) = delegate(&gw, call(hidden)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_says(&b, "message", "skill_args.order.amount");
}
