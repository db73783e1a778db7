//! The MCP tasks flow (SEP-2663) on the hub at `/mcp`, driven by rmcp's own client declaring
//! the tasks extension, against an rmcp upstream reached over streamable HTTP that records
//! every call it receives.

use super::{BIN, cli, free_port, hex_sha256, serve};
use crate::hub_kit::{Notes, notes_upstream};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const KEY: &str = "tasks-bot-key";
const OTHER_KEY: &str = "other-bot-key";

fn text_of(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

fn pending(url: &str) -> Vec<Value> {
    let out = cli(url, &["pending", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["approvals"].as_array().cloned().unwrap_or_default()
}

/// A gateway whose agent `notes_bot` may `read` and must ask before `write` on server
/// `notes`, which is `upstream_url` when given (the hub at `/mcp`). Returns it and its URL.
fn gateway(dir: &std::path::Path, upstream_url: Option<&str>) -> super::Server {
    std::fs::create_dir(dir.join("agents")).unwrap();
    std::fs::write(
        dir.join("agents/notes.agf.yaml"),
        "metadata: {id: notes_bot, name: Notes, version: 1.0.0, description: tasks test}\naction_space:\n  mcp_servers:\n    - alias: notes\n      allowed_tools:\n        - read\n        - name: write\n          approval: {message_template: \"Write {{tool_args.text}}?\"}\n",
    )
    .unwrap();
    let port = free_port();
    let cfg = dir.join("assent.yaml");
    let upstreams = upstream_url
        .map(|u| format!("mcp_upstreams:\n  notes: {{url: \"{u}\"}}\n"))
        .unwrap_or_default();
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [\"agents/*.agf.yaml\"]\nprincipals:\n  - {{name: alice, kind: operator, roles: [ops], key_env: TEST_ALICE_KEY}}\n  - {{name: bot, kind: agent, agent_id: notes_bot, key_sha256: \"{}\"}}\n  - {{name: other, kind: agent, agent_id: other_bot, key_sha256: \"{}\"}}\n{upstreams}",
            hex_sha256(KEY),
            hex_sha256(OTHER_KEY)
        ),
    )
    .unwrap();
    serve(&cfg, port)
}

/// The tasks flow as a client sees it, through the hub (`prefix` `notes__`) or the stdio
/// proxy (no prefix): allowed calls answered at once; held ones become tasks that complete
/// after approval, end cancelled after `tasks/cancel` (the approval withdrawn), or complete
/// with the denial. `calls` reads what the upstream received.
async fn scenario(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    url: &str,
    prefix: &str,
    calls: &dyn Fn() -> Vec<String>,
) {
    let call = |tool: &str, text: &str| {
        CallToolRequestParams::new(format!("{prefix}{tool}"))
            .with_arguments(json!({"text": text}).as_object().unwrap().clone())
    };
    // Allowed: answered at once, no task.
    match peer.call_tool_once(call("read", "a")).await.unwrap() {
        CallToolResponse::Complete(r) => assert_eq!(text_of(&r), "read a: done"),
        other => panic!("an allowed call is answered at once: {other:?}"),
    }

    // Held: a task, working while it waits, with the approval in its status message.
    let task = match peer.call_tool_once(call("write", "b")).await.unwrap() {
        CallToolResponse::Task(t) => t.task,
        other => panic!("a held call becomes a task: {other:?}"),
    };
    assert_eq!(task.status, TaskStatus::Working);
    let held = pending(url);
    assert_eq!(held.len(), 1, "{held:?}");
    let approval = held[0]["id"].as_str().unwrap().to_string();
    let got = peer
        .get_task(GetTaskParams::new(task.task_id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(got.status(), TaskStatus::Working);
    assert!(
        got.task
            .status_message
            .as_deref()
            .is_some_and(|m| m.contains(&approval)),
        "{got:?}"
    );
    assert_eq!(calls(), vec!["read a".to_string()]);
    let out = cli(url, &["approve", &approval]);
    assert!(out.status.success(), "{out:?}");
    let done = poll_until_terminal(peer, &task.task_id).await;
    match done.payload {
        TaskPayload::Completed { result } => {
            let r: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
            assert_eq!(text_of(&r), "write b: done");
        }
        other => panic!("the approved task completes with the upstream's result: {other:?}"),
    }
    assert_eq!(calls(), vec!["read a".to_string(), "write b".to_string()]);

    // Cancelled by the client: the approval is withdrawn and the call never runs.
    let task = match peer.call_tool_once(call("write", "c")).await.unwrap() {
        CallToolResponse::Task(t) => t.task,
        other => panic!("a held call becomes a task: {other:?}"),
    };
    let approval = pending(url)[0]["id"].as_str().unwrap().to_string();
    peer.cancel_task(CancelTaskParams::new(task.task_id.clone()))
        .await
        .unwrap();
    let done = poll_until_terminal(peer, &task.task_id).await;
    assert_eq!(done.status(), TaskStatus::Cancelled, "{done:?}");
    let shown: Value =
        serde_json::from_slice(&cli(url, &["show", &approval, "--json"]).stdout).unwrap();
    assert_eq!(shown["status"], "cancelled", "{shown}");
    assert!(!cli(url, &["approve", &approval]).status.success());

    // Denied: the task completes with the denial; nothing reaches the upstream.
    let task = match peer.call_tool_once(call("write", "d")).await.unwrap() {
        CallToolResponse::Task(t) => t.task,
        other => panic!("a held call becomes a task: {other:?}"),
    };
    let approval = pending(url)[0]["id"].as_str().unwrap().to_string();
    assert!(
        cli(url, &["deny", &approval, "--reason", "not today"])
            .status
            .success()
    );
    match poll_until_terminal(peer, &task.task_id).await.payload {
        TaskPayload::Completed { result } => {
            let r: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
            assert_eq!(r.is_error, Some(true));
            assert!(text_of(&r).contains("not today"), "{}", text_of(&r));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        calls(),
        vec!["read a".to_string(), "write b".to_string()],
        "the upstream saw only the allowed and the approved call"
    );
}

#[test]
fn the_hub_turns_a_held_call_into_a_task_the_client_polls_and_can_cancel() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let upstream = Notes::default();
    let (up_port, _) = notes_upstream(&rt, upstream.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut server = gateway(dir.path(), Some(&format!("http://127.0.0.1:{up_port}/mcp")));
    let url = server.url.clone();
    rt.block_on(async {
        let client = connect(&url, KEY).await;
        let calls = || upstream.calls.lock().unwrap().clone();
        scenario(client.peer(), &url, "notes__", &calls).await;
        let last = match client
            .peer()
            .call_tool_once(
                CallToolRequestParams::new("notes__write")
                    .with_arguments(json!({"text": "e"}).as_object().unwrap().clone()),
            )
            .await
            .unwrap()
        {
            CallToolResponse::Task(t) => t.task.task_id,
            other => panic!("{other:?}"),
        };
        // Another agent's key can neither read nor cancel the task.
        let other = connect(&url, OTHER_KEY).await;
        let err = other
            .peer()
            .get_task(GetTaskParams::new(last.clone()))
            .await
            .expect_err("another agent's task is unknown");
        assert!(format!("{err:?}").contains("unknown task"), "{err:?}");
        assert!(
            other
                .peer()
                .cancel_task(CancelTaskParams::new(last.clone()))
                .await
                .is_err()
        );
        assert_eq!(pending(&url).len(), 1, "still waiting for a human");
        // Attack (found by review): another agent that learns an MCP session id acts in it
        // (a `notifications/cancelled` there withdrew the owner's held call: rmcp handles it
        // before any handler of ours). A session belongs to the key that opened it.
        let sid = raw_session(&url, KEY).await;
        let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#;
        assert_eq!(in_session(&url, OTHER_KEY, &sid, cancel).await, 404);
        let ready = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert!((200..300).contains(&in_session(&url, KEY, &sid, ready).await));
        // A body two parsers read differently never reaches the hub's handler: a duplicate
        // tool name is answered 400 with a JSON-RPC error naming the key, and runs nothing.
        let before = calls();
        let resp = reqwest::Client::new()
            .post(format!("{url}/mcp"))
            .bearer_auth(KEY)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"notes__write","name":"notes__read","arguments":{"text":"x"}}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let body: Value = resp.json().await.unwrap();
        assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (json!(9), json!(-32600)), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("/params/name"), "{body}");
        assert_eq!(calls(), before, "nothing ran");
        other.cancel().await.unwrap();
        client.cancel().await.unwrap();
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

#[test]
fn the_stdio_proxy_serves_tasks_itself_and_never_declares_them_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.log");
    // A stdio MCP server (no SDK) that records what it is sent: the initialize capabilities
    // and every tools/call.
    let upstream = format!(
        r#"import json,sys
log=open({seen:?},'a')
for line in sys.stdin:
    m=json.loads(line)
    if 'id' not in m or 'method' not in m: continue
    p=m.get('params') or {{}}
    if m['method']=='initialize':
        log.write('init '+json.dumps(p.get('capabilities',{{}}))+'\n'); log.flush()
        r={{'protocolVersion':p['protocolVersion'],'capabilities':{{'tools':{{}}}},'serverInfo':{{'name':'notes','version':'1'}}}}
    elif m['method']=='tools/list':
        s={{'type':'object','properties':{{'text':{{'type':'string'}}}}}}
        r={{'tools':[{{'name':'read','description':'Read a note.','inputSchema':s}},{{'name':'write','description':'Write a note.','inputSchema':s}}]}}
    elif m['method']=='tools/call':
        t=(p.get('arguments') or {{}}).get('text','')
        log.write('call '+p['name']+' '+t+'\n'); log.flush()
        r={{'content':[{{'type':'text','text':p['name']+' '+t+': done'}}]}}
    elif m['method']=='ping': r={{}}
    else:
        print(json.dumps({{'jsonrpc':'2.0','id':m['id'],'error':{{'code':-32601,'message':'no'}}}}),flush=True); continue
    print(json.dumps({{'jsonrpc':'2.0','id':m['id'],'result':r}}),flush=True)
"#,
        seen = seen.display().to_string()
    );
    let mut server = gateway(dir.path(), None);
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args([
            "mcp",
            "--agent",
            "notes_bot",
            "--server",
            "notes",
            "--",
            "python3",
            "-c",
        ])
        .arg(&upstream)
        .env("ASSENT_URL", &url)
        .env("ASSENT_API_KEY", KEY);
        let client = tasks_client(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await;
        assert!(
            client
                .peer()
                .peer_info()
                .is_some_and(|i| i.capabilities.supports_tasks()),
            "the proxy advertises the tasks extension"
        );
        let log = || std::fs::read_to_string(&seen).unwrap_or_default();
        let calls = || {
            log()
                .lines()
                .filter_map(|l| l.strip_prefix("call "))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        scenario(client.peer(), &url, "", &calls).await;
        let init = log();
        assert!(init.starts_with("init "), "{init}");
        assert!(
            !init.contains("io.modelcontextprotocol/tasks"),
            "the upstream never sees the tasks extension declared: {init}"
        );
        client.cancel().await.unwrap();
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// An rmcp client of the hub at `/mcp` acting with `key`, declaring the tasks extension.
async fn connect(
    url: &str,
    key: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    tasks_client(rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("{url}/mcp"),
        )
        .auth_header(key.to_string()),
    ))
    .await
}

/// A POST of `body` to the hub's `/mcp` with `key`, in MCP session `sid` when given.
async fn mcp_post(url: &str, key: &str, sid: Option<&str>, body: &str) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(sid) = sid {
        req = req.header("mcp-session-id", sid);
    }
    req.body(body.to_string()).send().await.unwrap()
}

/// A new MCP session opened on the hub with `key` (a raw `initialize`): its id.
async fn raw_session(url: &str, key: &str) -> String {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1.0.0"}}}"#;
    let resp = mcp_post(url, key, None, init).await;
    assert!(resp.status().is_success(), "{resp:?}");
    resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// The status of `body` posted with `key` in MCP session `sid`.
async fn in_session(url: &str, key: &str, sid: &str, body: &str) -> u16 {
    mcp_post(url, key, Some(sid), body).await.status().as_u16()
}

/// An rmcp client over `transport` that declares the tasks extension (30 s to initialise).
async fn tasks_client<T, E, A>(
    transport: T,
) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    tokio::time::timeout(
        Duration::from_secs(30),
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("tasks-test", "1.0.0"),
        )
        .serve(transport),
    )
    .await
    .expect("the server answers initialize")
    .expect("the client connects")
}

async fn poll_until_terminal(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    id: &str,
) -> rmcp::model::DetailedTask {
    let start = Instant::now();
    loop {
        let t = peer
            .get_task(GetTaskParams::new(id.to_string()))
            .await
            .unwrap()
            .task;
        if t.status().is_terminal() {
            return t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "task {id} never ended: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Review finding: an agent calling a tool of a `url` upstream that failed to start was
/// answered with the transport's error, which names the upstream's URL with its path and
/// query — where hosted MCP servers often carry their credential. The agent is told only
/// that it failed to start; the gateway's log has the rest.
#[test]
fn an_agent_never_sees_an_upstreams_url_in_an_unavailable_error() {
    let dir = tempfile::tempdir().unwrap();
    let closed = free_port();
    let up = format!("http://127.0.0.1:{closed}/s/path-secret-77/mcp?api_key=query-secret-88");
    let mut server = gateway(dir.path(), Some(&up));
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let text = rt.block_on(async {
        let client = connect(&url, KEY).await;
        let r = client
            .peer()
            .call_tool(
                CallToolRequestParams::new("notes__read")
                    .with_arguments(serde_json::from_value(json!({"text": "a"})).unwrap()),
            )
            .await
            .unwrap();
        client.cancel().await.unwrap();
        text_of(&r)
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert!(text.contains("failed to start"), "{text}");
    assert!(
        !text.contains("secret-77") && !text.contains("secret-88") && !text.contains("127.0.0.1"),
        "{text}"
    );
}
