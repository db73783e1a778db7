//! The gateway these tests verify tokens of: a real SQLite store in a directory of the
//! test's, `assent_server::run` on a loopback port (as the API client's live tests start
//! it). Agent `bot` (`pay` over 100 held for role `finance`; MCP server `fs` with
//! `write_file` always held, a `read_file` result over 10 bytes held), agent `other`, operator `alice` (`finance`), and three
//! executors: `fs-runner` (`servers: [fs]`), `db-runner` (`servers: [db]`) and `pay-runner`
//! (`tools: [pay]`). Every key is `NAME-key`.

use assent_api::approvals::DecisionRequest;
use assent_api::gate::{GateAnswer, ToolCallRequest};
use assent_api::{Client, DecisionKind};
use assent_core::policy::Registry;
use assent_server::config::{Principal, PrincipalKind};
use assent_server::{AppState, Loopback, Settings};
use assent_store::Store;
use serde_json::{Value, json};
use std::path::Path;

fn principal(name: &str, kind: PrincipalKind) -> Principal {
    Principal::with_key(name, &format!("{name}-key"), kind)
}

fn principals() -> Vec<Principal> {
    let agent = |id: &str| PrincipalKind::Agent {
        agent_id: id.into(),
    };
    vec![
        principal(
            "alice",
            PrincipalKind::Operator {
                roles: vec!["finance".into()],
            },
        ),
        principal("bot", agent("bot")),
        principal("other", agent("other")),
        principal(
            "fs-runner",
            PrincipalKind::Executor {
                agents: vec!["bot".into(), "other".into()],
                servers: Some(vec!["fs".into()]),
                tools: None,
            },
        ),
        principal(
            "db-runner",
            PrincipalKind::Executor {
                agents: vec!["bot".into(), "other".into()],
                servers: Some(vec!["db".into()]),
                tools: None,
            },
        ),
        principal(
            "pay-runner",
            PrincipalKind::Executor {
                agents: vec!["bot".into()],
                servers: None,
                tools: Some(vec!["pay".into()]),
            },
        ),
        principal(
            "other-pay-runner",
            PrincipalKind::Executor {
                agents: vec!["other".into()],
                servers: None,
                tools: Some(vec!["pay".into()]),
            },
        ),
    ]
}

/// A running gateway over `dir`, tokens living `token_ttl_ms`.
pub(crate) async fn start(dir: &Path, token_ttl_ms: i64) -> Loopback {
    let gov = assent_testkit::fixtures::policy(
        "acme.test.pay-v1",
        "- tool: pay\n  approvers: [finance]\n- tool: read_file\n  approvers: [finance]\n  thresholds: {output_bytes: 10}\n",
    );
    let other = "metadata: {id: other}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";
    let reg = Registry::load(
        &[
            (
                "bot.agf.yaml".into(),
                assent_testkit::fixtures::BOT_AGENT.into(),
            ),
            ("other.agf.yaml".into(), other.into()),
        ],
        &[("gov.yaml".into(), gov)],
    )
    .unwrap();
    let store = Store::open(
        dir,
        token_ttl_ms,
        std::sync::Arc::new(assent_server::WireEnvelopes),
    )
    .unwrap();
    let settings = Settings {
        approval_timeout_ms: Some(300_000),
        ..Settings::default()
    };
    Loopback::start(AppState::new(store, reg, principals(), settings))
        .await
        .unwrap()
}

/// A token minted for `agent`'s call `tool(arguments)` on `server`: proposed by the agent,
/// approved by `alice`, read by the agent. Returns (token, canonical call, approval id).
pub(crate) async fn minted_call(
    url: &str,
    agent: &str,
    tool: &str,
    server: Option<&str>,
    arguments: Value,
) -> (String, String, String) {
    let me = Client::new(url, &format!("{agent}-key")).unwrap();
    let alice = Client::new(url, "alice-key").unwrap();
    let call = ToolCallRequest::new(agent, "s1", tool, server.map(str::to_string), arguments);
    let GateAnswer::Pending(p) = me.propose(&call).await.unwrap() else {
        panic!("{tool} should be held")
    };
    alice
        .decide(&p.approval_id, &DecisionRequest::new(DecisionKind::Approve))
        .await
        .unwrap();
    let a = me.approval(&p.approval_id).await.unwrap();
    (
        a.token.expect("the agent gets its token"),
        a.canonical,
        a.id,
    )
}

/// A token minted for `bot`'s `pay(amount, to: bob)`.
pub(crate) async fn minted(url: &str, amount: u64) -> (String, String, String) {
    minted_call(
        url,
        "bot",
        "pay",
        None,
        json!({"amount": amount, "to": "bob"}),
    )
    .await
}

/// `GET path` without any key: status and body.
pub(crate) async fn get_open(url: &str, path: &str) -> (u16, String) {
    let r = reqwest::get(format!("{url}{path}")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// `POST /v1/tokens/redeem` with `key` and `body`: status and JSON body.
pub(crate) async fn redeem(url: &str, key: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/tokens/redeem"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Asserts `(status, body)` is `status` with error `code`.
#[track_caller]
pub(crate) fn refused((s, b): (u16, Value), status: u16, code: &str) {
    assert_eq!((s, b["code"].as_str()), (status, Some(code)), "{b}");
}

/// `POST /v1/tokens/redeem` with `key` of `token` for `bot`'s `pay(amount, to: bob)`.
pub(crate) async fn redeem_pay(url: &str, key: &str, token: &str, amount: u64) -> (u16, Value) {
    redeem(url, key, pay_body(token, amount)).await
}

/// Redeems `body` with `key` and asserts it is accepted (200): the answer.
pub(crate) async fn redeemed(url: &str, key: &str, body: Value) -> Value {
    let (s, b) = redeem(url, key, body).await;
    assert_eq!(s, 200, "{b}");
    b
}

/// The body redeeming `token` for `bot`'s `pay(amount, to: bob)`.
pub(crate) fn pay_body(token: &str, amount: u64) -> Value {
    json!({"token": token, "tool": "pay", "arguments": {"amount": amount, "to": "bob"}})
}

/// How many audit records of `kind` the database in `dir` holds, and the actors of them.
pub(crate) fn audit_actors(dir: &Path, kind: &str) -> Vec<String> {
    let c = rusqlite::Connection::open(dir.join("assent.db")).unwrap();
    let mut s = c
        .prepare("SELECT actor FROM audit WHERE kind = ?1 ORDER BY seq")
        .unwrap();
    s.query_map([kind], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

pub(crate) fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}
