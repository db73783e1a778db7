//! The typed client against a real gateway (started as the gateway's own tests start it: a
//! real SQLite store in a temporary directory, `assent_server::run` on a loopback port): the
//! approval's whole life — propose, hold, list, approve, long-poll, redeem — with each answer
//! also read raw and checked to round-trip through its type. The gateway kit (`Gw`, `start`)
//! is here; other routes are in `live_more.rs`.

use crate::round_trip;
use assent_api::approvals::{Approval, ApprovalList, DecisionRequest};
use assent_api::gate::{GateAnswer, ToolCallRequest, ToolResultRequest};
use assent_api::tokens::{RedeemRequest, Redeemed};
use assent_api::{ApiErrorBody, ApprovalStatus, Client, ClientError, DecisionKind, Method, error};
use assent_core::policy::Registry;
use assent_server::config::{Principal, PrincipalKind};
use assent_server::{AppState, Loopback, Settings};
use assent_store::Store;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Agent `bot` (`read`, `pay` held over 100, MCP server `fs`…): the server test kit's.
const AGENTS: &str = assent_testkit::fixtures::BOT_AGENT;
/// Governance `acme.test.rules-v1`: `pay` needs the finance role; a `read` result over 100
/// bytes is held.
fn gov() -> String {
    let rules =
        "- tool: pay\n  approvers: [finance]\n- tool: read\n  thresholds: {output_bytes: 100}\n";
    assent_testkit::fixtures::policy("acme.test.rules-v1", rules)
}

fn principal(name: &str, key: &str, kind: PrincipalKind) -> Principal {
    Principal::with_key(name, key, kind)
}

/// A running gateway: agent `bot` (key `bot-key`), operators `alice` (role `finance`) and
/// `olaf` (role `ops`).
pub(crate) struct Gw {
    pub(crate) url: String,
    served: Loopback,
    _dir: tempfile::TempDir,
}

pub(crate) async fn start() -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::load(
        &[("bot.agf.yaml".into(), AGENTS.into())],
        &[("gov.yaml".into(), gov())],
    )
    .unwrap();
    let operator = |roles: &[&str]| PrincipalKind::Operator {
        roles: roles.iter().map(|r| r.to_string()).collect(),
    };
    let principals = vec![
        principal("alice", "alice-key", operator(&["finance"])),
        principal("olaf", "olaf-key", operator(&["ops"])),
        principal(
            "bot",
            "bot-key",
            PrincipalKind::Agent {
                agent_id: "bot".into(),
            },
        ),
    ];
    let store = Store::open(
        dir.path(),
        300_000,
        std::sync::Arc::new(assent_server::WireEnvelopes),
    )
    .unwrap();
    let settings = Settings {
        approval_timeout_ms: Some(300_000),
        ..Settings::default()
    };
    let state = AppState::new(store, reg, principals, settings);
    let served = Loopback::start(state).await.unwrap();
    Gw {
        url: served.url.clone(),
        served,
        _dir: dir,
    }
}

impl Gw {
    /// A client with `key`.
    pub(crate) fn client(&self, key: &str) -> Client {
        Client::new(&self.url, key).unwrap()
    }
    pub(crate) async fn stop(self) {
        let _ = self.served.stop().await;
    }
}

/// The raw answer to `GET path` as `c`: checks it is a 2xx and that it round-trips as `T`.
pub(crate) async fn raw_get<T: Serialize + DeserializeOwned>(c: &Client, path: &str) -> T {
    let v = c.raw_ok(Method::GET, path, None).await.unwrap();
    round_trip(&v)
}

/// The raw answer to `POST path` with `body` as `c`: its status, and the body round-tripped
/// as `T`.
pub(crate) async fn raw_post<T: Serialize + DeserializeOwned>(
    c: &Client,
    path: &str,
    body: Value,
) -> (u16, T) {
    let r = c.raw(Method::POST, path, Some(&body)).await.unwrap();
    (r.status, round_trip(&r.body))
}

pub(crate) fn call(tool: &str, server: Option<&str>, arguments: Value) -> ToolCallRequest {
    ToolCallRequest::new("bot", "s1", tool, server.map(str::to_string), arguments)
}

/// Proposes `pay` of `amount` to bob and returns the held approval's id.
pub(crate) async fn hold_pay(bot: &Client, amount: u64) -> String {
    let a = bot
        .propose(&call("pay", None, json!({"amount": amount, "to": "bob"})))
        .await
        .unwrap();
    match a {
        GateAnswer::Pending(p) => p.approval_id,
        a => panic!("expected pending: {a:?}"),
    }
}

/// [`start`], with clients of agent `bot` and operator `alice` (role `finance`).
pub(crate) async fn start_bot_alice() -> (Gw, Client, Client) {
    let gw = start().await;
    let (bot, alice) = (gw.client("bot-key"), gw.client("alice-key"));
    (gw, bot, alice)
}

/// Starts `bot`'s long-poll of approval `id` until it is decided (30 s per request) and gives
/// it 200 ms to park, so that a decision made next wakes it.
async fn wait_in_background(
    bot: &Client,
    id: &str,
) -> tokio::task::JoinHandle<Result<Approval, ClientError>> {
    let (bot, id) = (bot.clone(), id.to_string());
    let waiter = tokio::spawn(async move { bot.wait_decided(&id, 30).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    waiter
}

/// `bot`'s report of a forwarded call's result in session `s1`: `output_bytes` long, hash
/// `ab…ab`, no preview, not held before.
pub(crate) fn result_report(
    tool: &str,
    server: Option<&str>,
    arguments: Value,
    output_bytes: u64,
) -> ToolResultRequest {
    ToolResultRequest {
        agent: "bot".into(),
        session_id: "s1".into(),
        tool: tool.into(),
        server: server.map(str::to_string),
        arguments,
        output_bytes,
        result_sha256: "ab".repeat(32),
        preview: None,
        approval_id: None,
        outcome: None,
        hub_token: None,
    }
}

#[tokio::test]
async fn propose_approve_long_poll_and_redeem_through_the_typed_client() {
    let (gw, bot, alice) = start_bot_alice().await;
    // Allowed, denied and held, each answer also read raw.
    let body = serde_json::to_value(call("read", None, json!({"x": 1}))).unwrap();
    let (s, a) = raw_post::<GateAnswer>(&bot, "/v1/tool-calls", body).await;
    assert!(matches!(a, GateAnswer::Allow(_)) && s == 200);
    let body = serde_json::to_value(call("launch", None, json!({}))).unwrap();
    let (s, a) = raw_post::<GateAnswer>(&bot, "/v1/tool-calls", body).await;
    assert_eq!(s, 403);
    match bot.propose(&call("launch", None, json!({}))).await.unwrap() {
        GateAnswer::Deny(d) => {
            assert_eq!(d.code, error::TOOL_DENIED);
            assert!(d.reason.contains("`launch` is not declared"), "{a:?}");
        }
        a => panic!("expected a denial: {a:?}"),
    }
    let body =
        serde_json::to_value(call("pay", None, json!({"amount": 500, "to": "bob"}))).unwrap();
    let (s, held) = raw_post::<GateAnswer>(&bot, "/v1/tool-calls", body).await;
    assert_eq!(s, 202);
    let GateAnswer::Pending(p) = held else {
        panic!("expected pending: {held:?}")
    };
    assert_eq!(p.message, "Pay 500 to bob?");
    let id = p.approval_id;

    // The operator's list, typed and raw.
    let list = alice
        .approvals(Some(ApprovalStatus::Pending), None)
        .await
        .unwrap();
    assert_eq!(list.approvals.len(), 1);
    assert_eq!(list.approvals[0].target(), "pay");
    let raw: ApprovalList = raw_get(&alice, "/v1/approvals?status=pending").await;
    assert_eq!(raw, list);
    raw_get::<Approval>(&bot, &format!("/v1/approvals/{id}")).await;

    // The agent long-polls; the operator approves; the agent wakes with its token.
    let waiter = wait_in_background(&bot, &id).await;
    let mut approve = DecisionRequest::new(DecisionKind::Approve);
    approve.reason = Some("ok".into());
    let decided = alice.decide(&id, &approve).await.unwrap();
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert!(decided.token.is_none(), "an operator never sees the token");
    let rec = waiter.await.unwrap().unwrap();
    assert_eq!(rec.status, ApprovalStatus::Approved);
    let token = rec.token.clone().expect("the agent gets its token");
    let agent_view: Approval = raw_get(&bot, &format!("/v1/approvals/{id}")).await;
    assert_eq!(agent_view.token.as_deref(), Some(token.as_str()));
    assert_eq!(agent_view.decisions[0].by, "alice");

    // Redeem once; the second time is a typed 409 TOKEN_USED.
    let redeem = RedeemRequest {
        token,
        tool: "pay".into(),
        server: None,
        arguments: json!({"amount": 500, "to": "bob"}),
        device_id: None,
    };
    let body = serde_json::to_value(&redeem).unwrap();
    let (s, r) = raw_post::<Redeemed>(&bot, "/v1/tokens/redeem", body.clone()).await;
    assert_eq!(
        (s, r.approval_id.as_str(), r.call_hash.len()),
        (200, id.as_str(), 64)
    );
    let (s, e) = raw_post::<ApiErrorBody>(&bot, "/v1/tokens/redeem", body).await;
    assert_eq!((s, e.code.as_str()), (409, error::TOKEN_USED));
    let e = bot.redeem(&redeem).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(409), Some(error::TOKEN_USED)));
    assert!(!e.is_transport());
    assert!(e.to_string().starts_with("TOKEN_USED: "), "{e}");
    // Deciding again: 409 ALREADY_DECIDED carrying the status, raw and typed.
    let body = serde_json::to_value(&approve).unwrap();
    let path = format!("/v1/approvals/{id}/decision");
    let (s, e) = raw_post::<ApiErrorBody>(&alice, &path, body).await;
    assert_eq!((s, e.status), (409, Some(ApprovalStatus::Approved)));
    let e = alice.decide(&id, &approve).await.unwrap_err();
    let body = e.api_error().expect("an error body");
    assert_eq!(
        (body.code.as_str(), body.status),
        (error::ALREADY_DECIDED, Some(ApprovalStatus::Approved))
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_denial_reaches_the_waiting_agent_with_its_reason() {
    let (gw, bot, alice) = start_bot_alice().await;
    let id = hold_pay(&bot, 700).await;
    let waiter = wait_in_background(&bot, &id).await;
    let mut deny = DecisionRequest::new(DecisionKind::Deny);
    deny.reason = Some("too much".into());
    alice.decide(&id, &deny).await.unwrap();
    let rec = waiter.await.unwrap().unwrap();
    assert_eq!(rec.status, ApprovalStatus::Rejected);
    assert_eq!(rec.code.as_deref(), Some(error::TOOL_DENIED));
    assert_eq!(
        rec.reason.as_deref(),
        Some("denied by an operator: too much")
    );
    assert!(rec.token.is_none() && rec.approval_token.is_none());
    raw_get::<Approval>(&bot, &format!("/v1/approvals/{id}")).await;
    // Another operator without the role is refused, typed.
    let olaf = gw.client("olaf-key");
    let id = hold_pay(&bot, 800).await;
    let e = olaf
        .decide(&id, &DecisionRequest::new(DecisionKind::Approve))
        .await
        .unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(403), Some(error::FORBIDDEN)));
    gw.stop().await;
}

#[tokio::test]
async fn an_unreachable_gateway_is_a_transport_error_and_odd_ids_never_change_the_route() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let c = Client::new(&url, "k").unwrap();
    let e = c.approval("a1").await.unwrap_err();
    assert!(e.is_transport() && e.status().is_none(), "{e:?}");
    assert!(
        e.to_string()
            .starts_with(&format!("cannot reach the gateway at {url} (")),
        "{e}"
    );
    // The errors under reqwest's own `error sending request` are named: a refused connection
    // reads as refused, not as a dropped one.
    assert!(e.to_string().contains("Connection refused"), "{e}");
    for bad in ["", ".", ".."] {
        let e = c.approval(bad).await.unwrap_err();
        assert!(matches!(e, assent_api::ClientError::Config(_)), "{e:?}");
    }
    assert!(Client::new("not a url", "k").is_err());

    let gw = start().await;
    let bot = gw.client("bot-key");
    // `/` and `?` in an id are encoded into the one path segment: a 404, not another route.
    for odd in ["a/b", "a?wait=60", "../grants"] {
        let e = bot.approval(odd).await.unwrap_err();
        assert_eq!(
            (e.status(), e.code()),
            (Some(404), Some(error::NOT_FOUND)),
            "{odd}"
        );
    }
    // A base URL with a trailing `/` is the same gateway.
    let c = Client::new(&format!("{}/", gw.url), "bot-key").unwrap();
    assert_eq!(c.base_url(), gw.url);
    assert_eq!(c.whoami().await.unwrap().agent_id(), Some("bot"));
    gw.stop().await;
}

#[tokio::test]
async fn a_result_over_its_threshold_is_held_released_and_redeemed_as_the_proxy_does() {
    let (gw, bot, alice) = start_bot_alice().await;
    match bot
        .propose(&call("read", None, json!({"path": "/big"})))
        .await
        .unwrap()
    {
        GateAnswer::Allow(a) => assert_eq!(a.output_bytes, Some(100)),
        a => panic!("expected allow: {a:?}"),
    }
    let hash = "ab".repeat(32);
    let mut report = result_report("read", None, json!({"path": "/big"}), 500);
    report.preview = Some("{\"content\"".into());
    let body = serde_json::to_value(&report).unwrap();
    let (s, held) = raw_post::<GateAnswer>(&bot, "/v1/tool-results", body).await;
    assert_eq!(s, 202);
    let id = held.approval_id().unwrap().to_string();
    alice
        .decide(&id, &DecisionRequest::new(DecisionKind::Approve))
        .await
        .unwrap();
    let rec = bot.wait_decided(&id, 5).await.unwrap();
    let result = rec.held_result().expect("a held result");
    assert_eq!(
        (result.result_sha256.as_str(), result.output_bytes),
        (hash.as_str(), 500)
    );
    assert_eq!(result.call.arguments, json!({"path": "/big"}));
    let redeem = RedeemRequest {
        token: rec.token.clone().unwrap(),
        tool: rec.call.tool.clone(),
        server: rec.call.server.clone(),
        arguments: rec.call.arguments.clone(),
        device_id: None,
    };
    assert_eq!(rec.call.tool, "result.read");
    bot.redeem(&redeem).await.unwrap();
    gw.stop().await;
}
