//! Executors (issue 14 §6): a principal of kind `executor` redeems its agents' tokens for a
//! call on what it executes (its `servers` / `tools`), is refused — `403 NOT_EXECUTOR`,
//! audited — for anything else, and its key opens no other route.

use crate::gateway::{
    audit_actors, minted, minted_call, pay_body, redeem, redeem_pay, redeemed, refused, start,
};
use serde_json::{Value, json};

fn write_body(token: &str) -> Value {
    json!({"token": token, "tool": "write_file", "server": "fs",
           "arguments": {"path": "/tmp/x", "content": "hi"}})
}

#[tokio::test]
async fn an_executor_redeems_a_token_for_its_server_and_not_another() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let args = json!({"path": "/tmp/x", "content": "hi"});
    let (token, _, aid) = minted_call(&gw.url, "bot", "write_file", Some("fs"), args).await;
    // The executor of server `db`, and the one of tool `pay`: refused, audited under their
    // names; the token is not burnt.
    for who in ["db-runner", "pay-runner"] {
        let (s, b) = redeem(&gw.url, &format!("{who}-key"), write_body(&token)).await;
        assert_eq!((s, b["code"].as_str()), (403, Some("NOT_EXECUTOR")), "{b}");
        assert!(b["message"].as_str().unwrap().contains(who), "{b}");
    }
    assert_eq!(
        audit_actors(dir.path(), "token.refused"),
        ["db-runner", "pay-runner"]
    );
    // The executor of `fs` redeems it, once.
    let (s, b) = redeem(&gw.url, "fs-runner-key", write_body(&token)).await;
    assert_eq!(
        (s, b["approval_id"].as_str()),
        (200, Some(aid.as_str())),
        "{b}"
    );
    assert_eq!(audit_actors(dir.path(), "token.redeemed"), ["fs-runner"]);
    refused(
        redeem(&gw.url, "fs-runner-key", write_body(&token)).await,
        409,
        "TOKEN_USED",
    );
    // Neither may the agent itself now.
    assert_eq!(redeem(&gw.url, "bot-key", write_body(&token)).await.0, 409);
    let _ = gw.stop().await;
}

/// Found by review: tool names are each agent's own (its Agent Format file names them), so an
/// executor of `pay` redeemed the token of another agent's `pay` — one that agent could get
/// under a weaker rule, even approve in-client. An executor now redeems only the tokens of
/// the agents it names, and the answer says whose call it runs.
#[tokio::test]
async fn an_executor_of_a_tool_redeems_only_its_agents_tokens_for_that_tool_and_the_exact_call() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, _, _) = minted(&gw.url, 500).await;
    let (theirs, _, _) = minted_call(&gw.url, "other", "pay", None, json!({"amount": 7})).await;
    // Another call under the token: the binding holds for executors too.
    refused(
        redeem_pay(&gw.url, "pay-runner-key", &token, 501).await,
        403,
        "TOKEN_MISMATCH",
    );
    // A server executor for a local tool: not covered.
    refused(
        redeem_pay(&gw.url, "fs-runner-key", &token, 500).await,
        403,
        "NOT_EXECUTOR",
    );
    let (s, b) = redeem(&gw.url, "pay-runner-key", pay_body(&token, 500)).await;
    assert_eq!((s, b["agent"].as_str()), (200, Some("bot")), "{b}");
    // Another agent's `pay`: not this executor's to run, and the token is not burnt.
    let body = json!({"token": theirs, "tool": "pay", "arguments": {"amount": 7}});
    let (s, b) = redeem(&gw.url, "pay-runner-key", body.clone()).await;
    assert_eq!((s, b["code"].as_str()), (403, Some("NOT_EXECUTOR")), "{b}");
    let (s, b) = redeem(&gw.url, "other-pay-runner-key", body).await;
    assert_eq!((s, b["agent"].as_str()), (200, Some("other")), "{b}");
    let _ = gw.stop().await;
}

#[tokio::test]
async fn an_executor_key_opens_no_route_but_redeem_and_an_operator_may_not_redeem() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, _, aid) = minted(&gw.url, 500).await;
    let http = reqwest::Client::new();
    let send = async |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = http
            .request(method, format!("{}{path}", gw.url))
            .bearer_auth("pay-runner-key");
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().await.unwrap_or(Value::Null),
        )
    };
    use reqwest::Method;
    let call =
        json!({"agent": "bot", "session_id": "s", "tool": "pay", "arguments": {"amount": 1}});
    for (m, path, body) in [
        (Method::GET, "/v1/whoami".to_string(), None),
        (Method::GET, format!("/v1/approvals/{aid}"), None),
        (Method::GET, "/v1/approvals".to_string(), None),
        (Method::POST, "/v1/tool-calls".to_string(), Some(call)),
        (
            Method::POST,
            format!("/v1/approvals/{aid}/decision"),
            Some(json!({"decision": "approve"})),
        ),
        (
            Method::POST,
            format!("/v1/approvals/{aid}/cancel"),
            Some(json!({})),
        ),
        (Method::GET, "/v1/grants".to_string(), None),
    ] {
        let (s, b) = send(m, &path, body).await;
        assert_eq!(s, 403, "{path}: {b}");
        assert!(
            b["message"].as_str().unwrap().contains("executor"),
            "{path}: {b}"
        );
    }
    let (s, b) = redeem_pay(&gw.url, "alice-key", &token, 500).await;
    assert_eq!(s, 403, "{b}");
    redeemed(&gw.url, "bot-key", pay_body(&token, 500)).await;
    let _ = gw.stop().await;
}

/// Attack (found by review): an executor of server `fs` redeemed `bot`'s token releasing a
/// held result of `fs`'s `read_file` (the derived call `result.read_file` keeps server `fs`),
/// so the relay's own redemption failed `TOKEN_USED` and the result never reached the agent.
/// No executor runs a derived call: `403 NOT_EXECUTOR`, the token not burnt, and the agent
/// redeems it.
#[tokio::test]
async fn an_executor_of_a_server_never_redeems_its_held_results_release() {
    use assent_api::approvals::DecisionRequest;
    use assent_api::gate::{GateAnswer, ToolResultRequest};
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let bot = assent_api::Client::new(&gw.url, "bot-key").unwrap();
    let alice = assent_api::Client::new(&gw.url, "alice-key").unwrap();
    let report = ToolResultRequest {
        agent: "bot".into(),
        session_id: "s1".into(),
        tool: "read_file".into(),
        server: Some("fs".into()),
        arguments: json!({"path": "/tmp/x"}),
        output_bytes: 50,
        result_sha256: "ab".repeat(32),
        preview: None,
        approval_id: None,
        outcome: None,
        hub_token: None,
    };
    let GateAnswer::Pending(p) = bot.report_result(&report).await.unwrap() else {
        panic!("a result over 10 bytes is held")
    };
    let approve = DecisionRequest::new(assent_api::DecisionKind::Approve);
    alice.decide(&p.approval_id, &approve).await.unwrap();
    let a = bot.approval(&p.approval_id).await.unwrap();
    let token = a.token.expect("the agent gets its token");
    let body = json!({"token": token, "tool": a.call.tool, "server": "fs",
                      "arguments": a.call.arguments});
    assert_eq!(body["tool"], "result.read_file", "{body}");
    let (s, b) = redeem(&gw.url, "fs-runner-key", body.clone()).await;
    assert_eq!((s, b["code"].as_str()), (403, Some("NOT_EXECUTOR")), "{b}");
    let (s, b) = redeem(&gw.url, "bot-key", body).await;
    assert_eq!(
        (s, b["approval_id"].as_str()),
        (200, Some(a.id.as_str())),
        "{b}"
    );
    let _ = gw.stop().await;
}
