//! The HTTP API against a real server on a loopback port and a real SQLite file.

use assent_core::policy::Registry;
use assent_server::config::{Principal, PrincipalKind};
use assent_server::{AppState, Settings, run};
use assent_store::Store;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

mod aaep;
mod checkpoints;
mod delegation;
mod learning;
mod plans;
mod protocol;
mod schemas;
mod security;
mod tools;
mod webhooks;

const AGENTS: &str = r#"
metadata: {id: bot, name: Bot}
action_space:
  local_tools:
    - alias: read
    - alias: pay
      approval:
        message_template: "Pay {{tool_args.amount}} to {{tool_args.to}}?"
        condition: {args_match: {amount: {gt: 100}}}
    - alias: quick
    - alias: lenient
  mcp_servers:
    - alias: fs
      allowed_tools: [read_file, {name: write_file, approval: true}]
"#;
/// [`GOV`]'s `pay` rule with a side effect naming the card number, which `redact` masks.
const REDACTING_GOV: &str = r#"
policies:
  - id: acme.test.rules-v1
    selector: {agents: ["*"]}
    rules:
      - tool: pay
        approvers: [finance]
        side_effects: "Charges card {{tool_args.card.number}} for {{tool_args.amount}}."
        redact: [card.number]
        approval: {condition: {args_match: {card.number: {pattern: "^4"}}}}
"#;
const OTHER: &str =
    "metadata: {id: other}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";
const GOV: &str = r#"
policies:
  - id: acme.test.rules-v1
    selector: {agents: ["*"]}
    rules:
      - tool: pay
        approvers: [finance]
      - tool: quick
        approval: true
        timeout_seconds: 1
      - tool: lenient
        approval: true
        timeout_seconds: 1
        default_decision: approve
        risk_tier: R1
"#;

fn principal(name: &str, key: &str, kind: PrincipalKind) -> Principal {
    Principal {
        name: name.into(),
        kind,
        key_sha256: Sha256::digest(key.as_bytes()).into(),
    }
}

struct Gw {
    url: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    state: AppState,
}

async fn start_with(dir: &Path, token_ttl_ms: i64) -> Gw {
    start_opts(
        dir,
        token_ttl_ms,
        Settings {
            approval_timeout_ms: Some(300_000),
            ..Settings::default()
        },
    )
    .await
}

async fn start_opts(dir: &Path, token_ttl_ms: i64, settings: Settings) -> Gw {
    start_reg(dir, token_ttl_ms, settings, AGENTS, GOV).await
}

/// A gateway whose agent `bot` is declared by `agents` (and `other` by [`OTHER`]) under the
/// governance file `gov`.
async fn start_reg(
    dir: &Path,
    token_ttl_ms: i64,
    settings: Settings,
    agents: &str,
    gov: &str,
) -> Gw {
    start_custom(dir, token_ttl_ms, settings, agents, gov, |_| {}).await
}

/// [`start_reg`], with `customize` applied to the state before it serves (webhooks, links).
async fn start_custom(
    dir: &Path,
    token_ttl_ms: i64,
    settings: Settings,
    agents: &str,
    gov: &str,
    customize: impl FnOnce(&mut AppState),
) -> Gw {
    let reg = Registry::load(
        &[
            ("bot.agf.yaml".into(), agents.into()),
            ("other.agf.yaml".into(), OTHER.into()),
        ],
        &[("gov.yaml".into(), gov.into())],
    )
    .unwrap();
    let principals = vec![
        principal(
            "alice",
            "alice-key",
            PrincipalKind::Operator {
                roles: vec!["finance".into()],
            },
        ),
        principal(
            "olaf",
            "olaf-key",
            PrincipalKind::Operator {
                roles: vec!["ops".into()],
            },
        ),
        principal(
            "bot",
            "bot-key",
            PrincipalKind::Agent {
                agent_id: "bot".into(),
            },
        ),
        principal(
            "other",
            "other-key",
            PrincipalKind::Agent {
                agent_id: "other".into(),
            },
        ),
    ];
    let store = Store::open(dir, token_ttl_ms).unwrap();
    let mut state = AppState::new(store, reg, principals, settings);
    customize(&mut state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let st = state.clone();
    let task = tokio::spawn(async move {
        run(listener, st, async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    Gw {
        url,
        http: reqwest::Client::new(),
        stop: Some(tx),
        task,
        state,
    }
}

async fn start(dir: &Path) -> Gw {
    start_with(dir, 300_000).await
}

impl Gw {
    async fn req(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut r = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.url));
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let s = resp.status();
        (s, resp.json().await.unwrap_or(Value::Null))
    }
    async fn propose(&self, tool: &str, args: Value) -> (StatusCode, Value) {
        self.req(
            "POST",
            "/v1/tool-calls",
            Some("bot-key"),
            Some(json!({"agent": "bot", "session_id": "s1", "tool": tool, "arguments": args})),
        )
        .await
    }
    async fn decide(&self, id: &str, key: &str, d: &str) -> (StatusCode, Value) {
        self.req(
            "POST",
            &format!("/v1/approvals/{id}/decision"),
            Some(key),
            Some(json!({"decision": d, "reason": "test"})),
        )
        .await
    }
    /// Sends every body to `path` at once, each from its own task, and returns the replies.
    async fn post_all(
        &self,
        path: &str,
        key: &'static str,
        bodies: impl Iterator<Item = Value>,
    ) -> Vec<(StatusCode, Value)> {
        let futs = bodies.map(|body| {
            let (http, url) = (self.http.clone(), format!("{}{path}", self.url));
            tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let s = r.status();
                (s, r.json::<Value>().await.unwrap())
            })
        });
        futures::future::join_all(futs)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

#[tokio::test]
async fn allow_pending_and_deny_paths() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (s, b) = gw.propose("read", json!({"x": 1})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["decision"], "allow");
    assert_eq!(b["call_hash"].as_str().unwrap().len(), 64);

    let (s, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(
        (b["decision"].as_str(), b["code"].as_str()),
        (Some("pending"), Some("TOOL_BLOCKED_PENDING_APPROVAL"))
    );
    assert_eq!(b["message"], "Pay 500 to bob?");
    assert!(b["expires_at"].as_str().unwrap().ends_with('Z'));

    let (s, b) = gw.propose("launch", json!({})).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(
        (b["decision"].as_str(), b["code"].as_str()),
        (Some("deny"), Some("TOOL_DENIED"))
    );
    assert!(
        b["reason"]
            .as_str()
            .unwrap()
            .contains("`launch` is not declared"),
        "{b}"
    );

    // Only the listed MCP tools are declared.
    let (s, b) = gw.req("POST", "/v1/tool-calls", Some("bot-key"), Some(json!({"agent": "bot", "session_id": "s", "tool": "delete_file", "server": "fs", "arguments": {}}))).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("TOOL_DENIED"))
    );
    let (s, b) = gw
        .req(
            "GET",
            "/v1/agents/bot/mcp-servers/fs/tools",
            Some("bot-key"),
            None,
        )
        .await;
    assert_eq!(
        (s, b["tools"].clone()),
        (StatusCode::OK, json!(["read_file", "write_file"]))
    );

    let (s, b) = gw
        .req(
            "GET",
            "/v1/approvals?status=pending",
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let list = b["approvals"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    let a = &list[0];
    for k in [
        "id",
        "status",
        "agent",
        "session_id",
        "call",
        "call_hash",
        "message",
        "risk_tier",
        "irreversible",
        "reasons",
        "decisions",
        "requested_at",
        "expires_at",
    ] {
        assert!(a.get(k).is_some(), "approval record lacks {k}: {a}");
    }
    assert_eq!(
        a["call"],
        json!({"tool": "pay", "server": null, "arguments": {"amount": 500, "to": "bob"}})
    );
    assert!(a.get("token").is_none());
    let (s, b) = gw.req("GET", "/healthz", None, None).await;
    assert_eq!((s, b["status"].as_str()), (StatusCode::OK, Some("ok")));
    gw.stop().await;
}

#[tokio::test]
async fn approve_wakes_the_waiting_agent_and_the_token_runs_the_exact_call_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let args = json!({"amount": 500, "to": "bob"});
    let (_, b) = gw.propose("pay", args.clone()).await;
    let id = b["approval_id"].as_str().unwrap().to_string();
    let path = format!("/v1/approvals/{id}?wait=20");
    let started = std::time::Instant::now();
    let waiter = {
        let (http, url) = (gw.http.clone(), format!("{}{path}", gw.url));
        tokio::spawn(async move {
            http.get(url)
                .bearer_auth("bot-key")
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, d) = gw.decide(&id, "alice-key", "approve").await;
    assert_eq!(
        (s, d["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{d}"
    );
    assert!(d.get("token").is_none(), "operators never see the token");
    let rec = waiter.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the long-poll ended on the decision"
    );
    assert_eq!(rec["status"], "approved");
    assert_eq!(rec["decisions"][0]["by"], "alice");
    let token = rec["token"].as_str().unwrap().to_string();

    let redeem = |args: Value, key: &'static str, token: String| {
        let gw = &gw;
        async move {
            gw.req(
                "POST",
                "/v1/tokens/redeem",
                Some(key),
                Some(json!({"token": token, "tool": "pay", "arguments": args})),
            )
            .await
        }
    };
    let (s, b) = redeem(
        json!({"amount": 501, "to": "bob"}),
        "bot-key",
        token.clone(),
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("TOKEN_MISMATCH"))
    );
    let (s, _) = redeem(args.clone(), "other-key", token.clone()).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, b) = redeem(args.clone(), "alice-key", token.clone()).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("FORBIDDEN"))
    );
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    let (s, b) = redeem(args.clone(), "bot-key", forged).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("TOKEN_INVALID"))
    );
    // Key order does not matter: the hash is over canonical JSON.
    let (s, b) = redeem(
        json!({"to": "bob", "amount": 500.0}),
        "bot-key",
        token.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["approval_id"].as_str(), Some(id.as_str()));
    let (s, b) = redeem(args, "bot-key", token).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::CONFLICT, Some("TOKEN_USED"))
    );
    let rep = gw.state.store.verify_audit().unwrap();
    assert!(rep.broken.is_none());
    gw.stop().await;
}

#[tokio::test]
async fn deny_reaches_the_agent_and_mints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (_, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    let id = b["approval_id"].as_str().unwrap();
    let (s, d) = gw.decide(id, "alice-key", "deny").await;
    assert_eq!(
        (s, d["status"].as_str()),
        (StatusCode::OK, Some("rejected"))
    );
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some("bot-key"), None)
        .await;
    assert_eq!(
        (
            rec["status"].as_str(),
            rec["decisions"][0]["reason"].as_str()
        ),
        (Some("rejected"), Some("test"))
    );
    assert!(rec.get("token").is_none());
    let (s, b) = gw.decide(id, "alice-key", "approve").await;
    assert_eq!(
        (s, b["code"].as_str(), b["status"].as_str()),
        (
            StatusCode::CONFLICT,
            Some("ALREADY_DECIDED"),
            Some("rejected")
        )
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_of_50_concurrent_decisions_wins() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (_, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    let id = b["approval_id"].as_str().unwrap().to_string();
    let bodies = (0..50).map(|i| json!({"decision": if i % 2 == 0 { "approve" } else { "deny" }}));
    let results = gw
        .post_all(&format!("/v1/approvals/{id}/decision"), "alice-key", bodies)
        .await;
    let ok: Vec<_> = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .collect();
    let conflicts = results
        .iter()
        .filter(|(s, b)| *s == StatusCode::CONFLICT && b["code"] == "ALREADY_DECIDED")
        .count();
    assert_eq!(ok.len(), 1, "{results:?}");
    assert_eq!(
        conflicts, 49,
        "every other request is ALREADY_DECIDED, none is a 5xx: {results:?}"
    );
    let winner = ok[0].1["status"].as_str().unwrap().to_string();
    let (_, rec) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{id}"),
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(rec["status"].as_str(), Some(winner.as_str()));
    assert_eq!(rec["decisions"].as_array().unwrap().len(), 1);
    let db = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    let late: i64 = db
        .query_row(
            "SELECT count(*) FROM audit WHERE kind = 'decision.late'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(late, 49);
    gw.stop().await;
}

#[tokio::test]
async fn token_expires() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(dir.path(), 300).await;
    let args = json!({"amount": 500, "to": "bob"});
    let (_, b) = gw.propose("pay", args.clone()).await;
    let id = b["approval_id"].as_str().unwrap();
    gw.decide(id, "alice-key", "approve").await;
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some("bot-key"), None)
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (s, b) = gw
        .req(
            "POST",
            "/v1/tokens/redeem",
            Some("bot-key"),
            Some(json!({"token": rec["token"], "tool": "pay", "arguments": args})),
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::GONE, Some("TOKEN_EXPIRED"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn authentication_and_authorisation() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let body = json!({"agent": "bot", "session_id": "s", "tool": "read", "arguments": {}});
    let (s, b) = gw
        .req("POST", "/v1/tool-calls", None, Some(body.clone()))
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("UNAUTHENTICATED"))
    );
    let (s, _) = gw
        .req(
            "POST",
            "/v1/tool-calls",
            Some("wrong-key"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = gw.req("GET", "/v1/approvals", Some("nope"), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // An agent key cannot act for another agent id, and an operator cannot propose.
    let (s, b) = gw
        .req(
            "POST",
            "/v1/tool-calls",
            Some("other-key"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("FORBIDDEN"))
    );
    let (s, _) = gw
        .req("POST", "/v1/tool-calls", Some("alice-key"), Some(body))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    let (_, b) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    let id = b["approval_id"].as_str().unwrap();
    // An agent key cannot decide or list.
    let (s, _) = gw.decide(id, "bot-key", "approve").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = gw
        .req("GET", "/v1/approvals?status=pending", Some("bot-key"), None)
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // Another agent does not learn the approval exists.
    let (s, b) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{id}"),
            Some("other-key"),
            None,
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("NOT_FOUND"))
    );
    // An operator without the rule's approver role cannot decide.
    let (s, b) = gw.decide(id, "olaf-key", "approve").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(b["message"].as_str().unwrap().contains("finance"), "{b}");
    let (_, rec) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{id}"),
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(rec["status"], "pending");
    let (s, _) = gw.decide(id, "alice-key", "approve").await;
    assert_eq!(s, StatusCode::OK);
    gw.stop().await;
}

#[tokio::test]
async fn bad_input_gets_a_4xx_with_a_useful_message() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let send_raw = |body: &'static str| {
        let (http, url) = (gw.http.clone(), format!("{}/v1/tool-calls", gw.url));
        async move {
            let r = http
                .post(url)
                .bearer_auth("bot-key")
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let s = r.status();
            (s, r.json::<Value>().await.unwrap())
        }
    };
    let (s, b) = send_raw("{\"agent\": ").await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("BAD_REQUEST"))
    );
    assert!(
        b["message"].as_str().unwrap().contains("invalid JSON body"),
        "{b}"
    );
    let (s, b) =
        send_raw(r#"{"agent":"bot","session_id":"s","tool":"read","arguments":{},"colour":1}"#)
            .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `colour`"),
        "{b}"
    );
    let (s, b) =
        send_raw(r#"{"agent":"bot","session_id":"s","tool":"read","arguments":[1]}"#).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("arguments must be a JSON object"),
        "{b}"
    );
    let (s, b) = send_raw(r#"{"agent":"bot","session_id":"s","arguments":{}}"#).await;
    assert!(
        s == StatusCode::BAD_REQUEST
            && b["message"]
                .as_str()
                .unwrap()
                .contains("missing field `tool`"),
        "{b}"
    );
    let (s, _) = send_raw("").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, b) = gw
        .req(
            "POST",
            "/v1/approvals/x/decision",
            Some("alice-key"),
            Some(json!({"decision": "maybe"})),
        )
        .await;
    assert!(
        s == StatusCode::BAD_REQUEST
            && b["message"]
                .as_str()
                .unwrap()
                .contains("unknown variant `maybe`"),
        "{b}"
    );
    let (s, b) = gw
        .req("GET", "/v1/approvals?status=bogus", Some("alice-key"), None)
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("BAD_REQUEST"))
    );
    let (s, _) = gw
        .req(
            "GET",
            "/v1/approvals/nope?wait=abc",
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, b) = gw
        .req(
            "GET",
            "/v1/approvals/does-not-exist",
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("NOT_FOUND"))
    );
    let (s, b) = gw.req("GET", "/v2/nothing", None, None).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("NOT_FOUND"))
    );
    let (s, b) = gw.req("DELETE", "/v1/tool-calls", None, None).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("METHOD_NOT_ALLOWED"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn pending_approvals_survive_a_restart_and_tokens_stay_valid() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let args = json!({"amount": 500, "to": "bob"});
    let (_, b) = gw.propose("pay", args.clone()).await;
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (_, b2) = gw.propose("pay", json!({"amount": 700, "to": "eve"})).await;
    let id2 = b2["approval_id"].as_str().unwrap().to_string();
    gw.decide(&id2, "alice-key", "approve").await;
    let (_, rec2) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{id2}"),
            Some("bot-key"),
            None,
        )
        .await;
    gw.stop().await;

    let gw = start(dir.path()).await;
    let (_, b) = gw
        .req(
            "GET",
            "/v1/approvals?status=pending",
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(b["approvals"][0]["id"].as_str(), Some(id.as_str()));
    let (s, _) = gw.decide(&id, "alice-key", "approve").await;
    assert_eq!(s, StatusCode::OK);
    // A token minted before the restart still redeems: the key is in the data dir.
    let (s, b) = gw.req("POST", "/v1/tokens/redeem", Some("bot-key"), Some(json!({"token": rec2["token"], "tool": "pay", "arguments": {"amount": 700, "to": "eve"}}))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

#[tokio::test]
async fn expiry_while_the_server_was_down_applies_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (_, r) = gw.propose("quick", json!({})).await;
    let (_, l) = gw.propose("lenient", json!({"n": 1})).await;
    let (reject_id, approve_id) = (
        r["approval_id"].as_str().unwrap().to_string(),
        l["approval_id"].as_str().unwrap().to_string(),
    );
    // Stop the server before the timer can run and wait past the 1 s timeout.
    gw.stop().await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let db = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    let pending: i64 = db
        .query_row(
            "SELECT count(*) FROM approvals WHERE status = 'pending'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pending, 2, "nothing expired while the server was down");
    let gw = start(dir.path()).await;
    let (_, rec) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{reject_id}"),
            Some("bot-key"),
            None,
        )
        .await;
    assert_eq!(rec["status"], "expired");
    assert_eq!(rec["decisions"][0]["default_applied"], "reject");
    assert!(rec.get("token").is_none());
    let (_, rec) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{approve_id}"),
            Some("bot-key"),
            None,
        )
        .await;
    assert_eq!(
        (
            rec["status"].as_str(),
            rec["decisions"][0]["default_applied"].as_str()
        ),
        (Some("expired"), Some("approve"))
    );
    let (s, _) = gw
        .req(
            "POST",
            "/v1/tokens/redeem",
            Some("bot-key"),
            Some(json!({"token": rec["token"], "tool": "lenient", "arguments": {"n": 1}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = gw.decide(&reject_id, "alice-key", "approve").await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::CONFLICT, Some("ALREADY_DECIDED"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_store_that_cannot_be_written_allows_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    gw.state
        .store
        .set_busy_timeout(Duration::from_millis(200))
        .unwrap();
    // Another process holds the write lock past the busy timeout.
    let blocker = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (s, b) = gw.propose("read", json!({})).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("STORE_UNAVAILABLE"))
    );
    assert_ne!(b["decision"], "allow");
    let (s, _) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    blocker.execute_batch("ROLLBACK").unwrap();
    let (s, _) = gw.propose("read", json!({})).await;
    assert_eq!(s, StatusCode::OK);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_redeems_once_under_50_concurrent_redemptions() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let args = json!({"amount": 500, "to": "bob"});
    let (_, b) = gw.propose("pay", args.clone()).await;
    let id = b["approval_id"].as_str().unwrap().to_string();
    gw.decide(&id, "alice-key", "approve").await;
    let (_, rec) = gw
        .req("GET", &format!("/v1/approvals/{id}"), Some("bot-key"), None)
        .await;
    let body = json!({"token": rec["token"], "tool": "pay", "arguments": args});
    let results = gw
        .post_all(
            "/v1/tokens/redeem",
            "bot-key",
            (0..50).map(|_| body.clone()),
        )
        .await;
    assert_eq!(
        results.iter().filter(|(s, _)| *s == StatusCode::OK).count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results
            .iter()
            .filter(|(s, b)| *s == StatusCode::CONFLICT && b["code"] == "TOKEN_USED")
            .count(),
        49,
        "{results:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_running_server_expires_approvals_and_wakes_the_waiting_agent() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (_, b) = gw.propose("quick", json!({})).await;
    let id = b["approval_id"].as_str().unwrap();
    let started = std::time::Instant::now();
    let (s, rec) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{id}?wait=30"),
            Some("bot-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (
            rec["status"].as_str(),
            rec["decisions"][0]["default_applied"].as_str()
        ),
        (Some("expired"), Some("reject"))
    );
    assert_eq!(rec["decisions"][0]["by"], "system:expiry");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woke at the 1 s expiry, not the 30 s wait"
    );
    assert!(rec.get("token").is_none());
    gw.stop().await;
}
