//! A gateway with MCP hub upstreams and an rmcp client of its `/mcp`, for the hub's tests;
//! [`Notes`], an rmcp upstream over streamable HTTP; [`memory`], a process's resident memory.

use crate::{Server, free_port, serve, write_agent_config};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One hub upstream: its alias, the tools agent `helper` declares on it (a YAML flow list;
/// `None`: the agent does not declare the server) and the upstream's Python source.
pub(crate) type HubUpstream<'a> = (&'a str, Option<&'a str>, &'a str);

/// `assent serve` with the hub in front of `upstreams`, for agent `helper` with agent key
/// `key` and operator alice: its directory (kept alive by the caller) and server.
pub(crate) fn hub_gateway(key: &str, upstreams: &[HubUpstream<'_>]) -> (tempfile::TempDir, Server) {
    hub_gateway_with(key, upstreams, "")
}

/// [`hub_gateway`] with `extra` lines (YAML, each ending in a newline) in its config.
pub(crate) fn hub_gateway_with(
    key: &str,
    upstreams: &[HubUpstream<'_>],
    extra: &str,
) -> (tempfile::TempDir, Server) {
    let (dir, cfg, port) = hub_config(key, upstreams, extra);
    let server = serve(&cfg, port);
    (dir, server)
}

/// [`hub_gateway`] logging to the returned file at `filter` (an `ASSENT_LOG` filter), so a
/// test can wait for evidence of what the gateway is doing instead of sleeping.
pub(crate) fn hub_gateway_logged(
    key: &str,
    upstreams: &[HubUpstream<'_>],
    filter: &str,
) -> (tempfile::TempDir, Server, std::path::PathBuf) {
    let (dir, cfg, port) = hub_config(key, upstreams, "");
    let log = dir.path().join("serve.log");
    let child = crate::serve_cmd(&cfg)
        .env("TEST_ALICE_KEY", crate::OP_KEY)
        .env("ASSENT_LOG", filter)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let (limit, step) = (Duration::from_secs(20), Duration::from_millis(50));
    crate::wait_healthy(&url, limit, step);
    (dir, Server { child, url }, log)
}

/// The directory, config file and port of a gateway fronting `upstreams` for agent `helper`
/// (key `key`), with `extra` lines in its config.
fn hub_config(
    key: &str,
    upstreams: &[HubUpstream<'_>],
    extra: &str,
) -> (tempfile::TempDir, std::path::PathBuf, u16) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n".to_string();
    let mut config = format!("{extra}mcp_upstreams:\n");
    for (alias, tools, source) in upstreams {
        if let Some(tools) = tools {
            agent.push_str(&format!(
                "    - alias: {alias}\n      allowed_tools: {tools}\n"
            ));
        }
        let command = serde_json::to_string(&json!(["python3", "-c", source])).unwrap();
        config.push_str(&format!("  {alias}: {{command: {command}}}\n"));
    }
    let cfg = write_agent_config(dir.path(), port, (&agent, key), &config);
    (dir, cfg, port)
}

/// An rmcp client of the hub at `url` (the gateway's URL) with agent key `key`, initialised.
pub(crate) async fn hub_client(url: &str, key: &str) -> RunningService<RoleClient, ()> {
    use rmcp::ServiceExt;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("{url}/mcp"),
        )
        .auth_header(key.to_string()),
    );
    ().serve(transport)
        .await
        .expect("the hub answers initialize")
}

/// `call` through a fresh rmcp client of the hub at `url` (the gateway's URL) with agent key
/// `key`, on `rt`: its result (within 60 s) as JSON; the client is then closed.
pub(crate) fn hub_call(
    rt: &tokio::runtime::Runtime,
    url: &str,
    key: &str,
    call: CallToolRequestParams,
) -> serde_json::Value {
    rt.block_on(async {
        let client = hub_client(url, key).await;
        let timeout = std::time::Duration::from_secs(60);
        let r = tokio::time::timeout(timeout, client.peer().call_tool(call))
            .await
            .expect("the hub answers")
            .expect("tools/call succeeds");
        client.cancel().await.unwrap();
        serde_json::to_value(r).unwrap()
    })
}

/// The source of a hub upstream in Python (stdio, one JSON-RPC message a line): `initialize`
/// answered as protocol 2025-06-18 with tools, `tools/list` by the Python lines `list` and
/// `tools/call` by `call` (each indented eight spaces, setting `r`, or printing an answer of
/// their own and `continue`; `n` counts the lists, `time` is imported), anything else `{}`.
pub(crate) fn py_upstream(list: &str, call: &str) -> String {
    py_upstream_with("", list, call, "        r={}")
}

/// [`py_upstream`] with the Python lines `head` run first and the lines `other` (indented
/// eight spaces, as `call`) answering every other method.
pub(crate) fn py_upstream_with(head: &str, list: &str, call: &str, other: &str) -> String {
    format!(
        r#"import json,sys,time
n=0
{head}for line in sys.stdin:
    m=json.loads(line)
    if "method" not in m or "id" not in m: continue
    i=m["id"]; meth=m["method"]
    if meth=="initialize":
        r={{"protocolVersion":"2025-06-18","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"up","version":"1"}}}}
    elif meth=="tools/list":
        n+=1
{list}
    elif meth=="tools/call":
{call}
    else:
{other}
    print(json.dumps({{"jsonrpc":"2.0","id":i,"result":r}}), flush=True)
"#
    )
}

/// `r` set to a tool list of one tool `name` (any object as input) — a line for [`py_upstream`].
pub(crate) fn py_tools(name: &str) -> String {
    format!(
        r#"        r={{"tools":[{{"name":"{name}","description":"{name}.","inputSchema":{{"type":"object"}}}}]}}"#
    )
}

/// `r` set to a tool list of `names` (any object as input) — a line for [`py_upstream`].
pub(crate) fn py_list(names: &[&str]) -> String {
    let tools: Vec<_> = names
        .iter()
        .map(|n| json!({"name": n, "description": format!("{n}."), "inputSchema": {"type": "object"}}))
        .collect();
    format!("        r={}", json!({"tools": tools}))
}

/// `r` set to a text result `text` — a line for [`py_upstream`].
pub(crate) fn py_text(text: &str) -> String {
    format!(r#"        r={{"content":[{{"type":"text","text":"{text}"}}]}}"#)
}

/// An MCP `initialize` request under `id` (protocol 2025-06-18, no capabilities, client `t`).
pub(crate) fn initialize(id: serde_json::Value) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}})
}

/// An MCP session of the hub at `url` with agent key `key`: `initialize` (its answer read)
/// and `notifications/initialized`; the session's id.
pub(crate) fn hub_session(url: &str, key: &str) -> String {
    let init = hub_post(url, key, None, initialize(json!(0)));
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    drop(init.text().unwrap());
    hub_post(
        url,
        key,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    session
}

/// `assent mcp` as the stdio proxy for agent `helper` with agent key `key`, on the gateway at
/// `url`, in front of server `alias` run as `python3 -c source`.
pub(crate) fn proxy_command(
    url: &str,
    key: &str,
    alias: &str,
    source: &str,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(crate::BIN);
    cmd.args(["mcp", "--agent", "helper", "--server", alias])
        .args(["--", "python3", "-c", source])
        .env("ASSENT_URL", url)
        .env("ASSENT_API_KEY", key);
    cmd
}

/// `assent mcp --config` (the stdio hub) for agent `helper` with agent key `key`, on the
/// gateway at `url` whose directory is `dir` (its `assent.yaml`).
pub(crate) fn hub_command(url: &str, key: &str, dir: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(crate::BIN);
    cmd.args(["mcp", "--agent", "helper", "--config"])
        .arg(dir.join("assent.yaml"))
        .env("ASSENT_URL", url)
        .env("ASSENT_API_KEY", key);
    cmd
}

/// `out`'s lines, read on a thread of their own (`None` at its end).
pub(crate) fn lines_of(
    out: impl std::io::BufRead + Send + 'static,
) -> std::sync::mpsc::Receiver<Option<String>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            if tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    rx
}

/// Through a stdio MCP client end (`stdin`, `out`: an `assent mcp` proxy or hub): the
/// `initialize` handshake (its answer read), `notifications/initialized`, then `tools/call` of
/// `tool` with `arguments` under id 1 (its answer not read).
pub(crate) fn initialize_and_call(
    (stdin, out): (&mut impl std::io::Write, &mut impl std::io::BufRead),
    tool: &str,
    arguments: serde_json::Value,
) {
    let mut send = |v: serde_json::Value| writeln!(stdin, "{v}").unwrap();
    send(initialize(json!(0)));
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}));
}

/// The gateway's database under `dir` (`data/assent.db`) locked for writing (`BEGIN
/// IMMEDIATE` in a `sqlite3` process) until [`unlock_db`]: a proposal made meanwhile waits
/// inside the gateway (its 10 s busy timeout), still on its way.
pub(crate) fn lock_db(dir: &std::path::Path) -> (std::process::Child, std::process::ChildStdin) {
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new("sqlite3")
        .arg(dir.join("data/assent.db"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sqlite3 runs");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "BEGIN IMMEDIATE;\nSELECT 'locked';").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked", "the database could not be locked");
    (child, stdin)
}

/// Ends [`lock_db`]'s transaction and its process.
pub(crate) fn unlock_db((mut child, mut stdin): (std::process::Child, std::process::ChildStdin)) {
    use std::io::Write;
    writeln!(stdin, "COMMIT;").unwrap();
    drop(stdin);
    child.wait().unwrap();
}

/// One `/mcp` request to the gateway at `url` with agent key `key`, `body` (and the session
/// `session`), its answer unread (a stream, for a call).
pub(crate) fn hub_post(
    url: &str,
    key: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> reqwest::blocking::Response {
    let mut req = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap()
        .post(format!("{url}/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&body);
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    req.send()
        .unwrap_or_else(|e| panic!("POST /mcp failed: {e:?}"))
}

/// Ends a stdio client end's process: its stdin closed, then killed and reaped.
pub(crate) fn end(mut child: std::process::Child, stdin: std::process::ChildStdin) {
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends SIGTERM to `child` (with `kill`, which must succeed).
pub(crate) fn sigterm(child: &std::process::Child) {
    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
}

/// Polls `f` every 100 ms for up to `secs` seconds until it is `Some`; fails with `what`.
#[track_caller]
pub(crate) fn within<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The `call.result` records of the gateway whose data is under `dir`, read from its
/// database.
pub(crate) fn call_results(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let out = std::process::Command::new("sqlite3")
        .arg(dir.join("data/assent.db"))
        .arg("SELECT data FROM audit WHERE kind = 'call.result' ORDER BY seq;")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// [`memory`] of the gateway `pid` now and at its peak, printed beside `before` (its resident
/// memory before the test's load).
pub(crate) fn gateway_memory(pid: u32, before: usize) -> (usize, usize) {
    let (now, peak) = memory(pid);
    eprintln!(
        "gateway RSS {} MiB before, {} MiB now, {} MiB at its peak",
        before >> 20,
        now >> 20,
        peak >> 20
    );
    (now, peak)
}

/// The JSON-RPC message of an `/mcp` answer (plain JSON, or the first `data:` event of a
/// stream).
pub(crate) fn mcp_message(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|_| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .find_map(|d| serde_json::from_str(d.trim()).ok())
            .unwrap_or(serde_json::Value::Null)
    })
}

/// [`py_upstream`] reading its stdin on a thread of its own (into the queue `q`, `None` at
/// its end), so that a call can wait for the answers to requests of its own; `head` (Python
/// lines) run before the first message is read.
pub(crate) fn py_queued_upstream(head: &str, list: &str, call: &str) -> String {
    let reader = "import threading,queue\nq=queue.Queue()\ndef read():\n    for line in sys.stdin: q.put(line)\n    q.put(None)\nthreading.Thread(target=read,daemon=True).start()\n";
    let next = "while True:\n    line=q.get()\n    if line is None: break\n";
    let source = py_upstream(list, call);
    assert!(source.contains("for line in sys.stdin:\n"));
    source.replacen(
        "for line in sys.stdin:\n",
        &format!("{reader}{head}{next}"),
        1,
    )
}

/// The resident memory of process `pid` now and at its peak (`VmRSS`, `VmHWM`, from
/// `/proc/PID/status`), in bytes.
pub(crate) fn memory(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .unwrap()
            * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// A streamable HTTP MCP upstream with a `read` and a `write` tool (each taking `text`) that
/// answers `NAME TEXT: done` and records each call as `NAME TEXT`; served by
/// [`notes_upstream`].
#[derive(Clone, Default)]
pub(crate) struct Notes {
    /// The calls received so far, `NAME TEXT` each.
    pub(crate) calls: Arc<Mutex<Vec<String>>>,
}

impl ServerHandler for Notes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema: serde_json::Map<String, serde_json::Value> = serde_json::from_value(
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        )
        .unwrap();
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("read", "Read a note.", schema.clone()),
            Tool::new("write", "Write a note.", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_string();
        let call = format!("{} {text}", request.name);
        self.calls.lock().unwrap().push(call.clone());
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("{call}: done"))]).into())
    }
}

/// Serves `notes` at `http://127.0.0.1:PORT/mcp` on `rt`, recording the `Authorization`
/// header of every request (`""` when there is none); the port and the headers seen.
pub(crate) fn notes_upstream(
    rt: &tokio::runtime::Runtime,
    notes: Notes,
) -> (u16, Arc<Mutex<Vec<String>>>) {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let auth = Arc::new(Mutex::new(Vec::new()));
    let record = auth.clone();
    rt.spawn(async move {
        let svc = StreamableHttpService::new(
            move || Ok(notes.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router =
            axum::Router::new()
                .nest_service("/mcp", svc)
                .layer(axum::middleware::from_fn(
                    move |req: axum::extract::Request, next: axum::middleware::Next| {
                        let header = req.headers().get("authorization");
                        let header = header.and_then(|v| v.to_str().ok()).unwrap_or("");
                        record.lock().unwrap().push(header.to_string());
                        next.run(req)
                    },
                ));
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        axum::serve(listener, router).await.unwrap();
    });
    (port, auth)
}
