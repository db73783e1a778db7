//! A hub client gone without a word releases what it held, and a hub call whose upstream never
//! answered is recorded as such — not as a result.

use crate::hub_kit::{
    call_results, hub_command, hub_gateway_with, hub_post, hub_session, py_text, py_upstream,
    within,
};
use crate::spawn_piped;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const KEY: &str = "hub-gone-agent-key-0123456789abcdef";

/// A hub upstream (Python, stdio) with `pay` (held for an operator: the agent file asks for
/// approval) and `crash` (the upstream exits when it is called, answering nothing).
fn upstream() -> String {
    let list = r#"        r={"tools":[{"name":n,"description":n+".","inputSchema":{"type":"object"}} for n in ("pay","crash")]}"#;
    let call = format!(
        "        if m[\"params\"][\"name\"]==\"crash\": sys.exit(0)\n{}",
        py_text("paid")
    );
    py_upstream(list, &call)
}

/// What agent `helper` declares on `bank`.
const TOOLS: &str = "[crash, {name: pay, approval: true}]";

/// A gateway whose hub fronts [`upstream`] as `bank` (agent `helper` declaring [`TOOLS`]),
/// with `extra` config lines: its directory and server.
fn bank_gateway(extra: &str) -> (tempfile::TempDir, crate::Server) {
    let source = upstream();
    hub_gateway_with(KEY, &[("bank", Some(TOOLS), &source)], extra)
}

/// The stdio hub (`assent mcp --config`) of the gateway `server` in `dir`: the process, its
/// stdin and its output.
fn stdio_hub(
    dir: &tempfile::TempDir,
    server: &crate::Server,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
) {
    spawn_piped(&mut hub_command(&server.url, KEY, dir.path()))
}

/// The stdio hub's client gone once its call is held at the gateway at `url` (`stdin`
/// closed): the held approval, read the moment the hub has ended (within 60 s).
fn once_the_hub_ended(
    hub: &mut std::process::Child,
    stdin: std::process::ChildStdin,
    url: &str,
) -> Value {
    let id = held(url);
    drop(stdin);
    within(60, "the hub never ended", || hub.try_wait().unwrap());
    crate::get_op(url, &format!("/v1/approvals/{id}"))
}

/// The id of the one approval pending at the gateway at `url`, once there is one.
fn held(url: &str) -> String {
    within(20, "the call was never held", || {
        let list = crate::get_op(url, "/v1/approvals?status=pending");
        list["approvals"][0]["id"].as_str().map(str::to_string)
    })
}

/// Approval `id` at `url` once it has left `pending` (within `secs` seconds).
fn settled(url: &str, id: &str, secs: u64) -> Value {
    within(secs, "the held call was never released", || {
        let a = crate::get_op(url, &format!("/v1/approvals/{id}"));
        (a["status"] != "pending").then_some(a)
    })
}

/// Found by review: a hub client that went away without a cancel — its process ended, its
/// connections dropped — left its held call waiting until its MCP session idled out (and,
/// with a progress token, never: each progress notification kept the session busy), open to
/// an operator's approval for a client that would never take the answer. Once the session
/// has had no stream open for a while (time to resume one, as the transport allows), the
/// client is taken as gone and its held call is withdrawn, as a cancel would.
#[test]
fn a_hub_client_gone_without_a_cancel_releases_its_held_call() {
    let (_dir, server) = bank_gateway("");
    let url = server.url.clone();
    let (id, call) = held_over_http(&url);
    // …until the client is gone: its connection dropped, no cancel, no session ended.
    drop(call);
    let a = settled(&url, &id, 90);
    assert_eq!(a["status"], "cancelled", "{a}");
    assert!(a.to_string().contains("the MCP client disconnected"), "{a}");
    drop(server);
}

/// Attack (on availability): a laptop that sleeps drops its HTTP streams, and after a fixed
/// 30 s the hub withdrew its held calls, so an operator's approval found nothing to clear.
/// `mcp_client_gone_seconds` sets the time: here 5 s, and the call is withdrawn within it
/// (well before the 30 s default, so the setting is what counts), not left held.
#[test]
fn a_sleeping_hub_client_is_given_up_after_mcp_client_gone_seconds_not_a_fixed_30s() {
    let (_dir, server) = bank_gateway("mcp_client_gone_seconds: 5\n");
    let url = server.url.clone();
    let (id, call) = held_over_http(&url);
    let gone = Instant::now();
    drop(call);
    let a = settled(&url, &id, 20);
    assert!(
        gone.elapsed() >= Duration::from_secs(4),
        "withdrawn too soon"
    );
    assert_eq!(a["status"], "cancelled", "{a}");
    drop(server);
}

/// `mcp_client_gone_seconds` out of its bounds (5 … 86400) stops start-up naming the file and
/// line, like every bounded setting: a typo cannot make a held call withdrawn at once (0) or
/// held for ever.
#[test]
fn mcp_client_gone_seconds_out_of_bounds_stops_start_up_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    crate::start_up_refused(
        dir.path(),
        &[
            (
                "mcp_client_gone_seconds: 0",
                "mcp_client_gone_seconds is 0; it must be from 5 to 86400",
            ),
            (
                "mcp_client_gone_seconds: 86401",
                "mcp_client_gone_seconds is 86401; it must be from 5 to 86400",
            ),
            ("mcp_client_gone_seconds: -1", "invalid"),
        ],
    );
}

/// An HTTP client of the hub at `url` with a held call (a progress token, its answer's stream
/// open): the approval's id and the call's open response.
fn held_over_http(url: &str) -> (String, reqwest::blocking::Response) {
    let session = hub_session(url, KEY);
    // The call, with a progress token, its answer's stream open while it is held…
    let call = hub_post(
        url,
        KEY,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 1,
        "method": "tools/call", "params": {"name": "bank__pay", "arguments": {},
        "_meta": {"progressToken": "p"}}}),
    );
    (held(url), call)
}

/// As `a_hub_client_gone_without_a_cancel_releases_its_held_call`, over stdio (`assent mcp --config`): a client that closes stdin with a call held
/// had it withdrawn only by rmcp stopping the hub's requests 5 s later, racing the hub's own
/// end (which could leave the call held at the gateway until its approval expired). It is
/// withdrawn before the hub ends (and when the client left while the call was still being
/// proposed: `mcp_gone_proposing`).
#[test]
fn a_hub_stdio_client_gone_releases_its_held_call() {
    let (dir, server) = bank_gateway("");
    let (mut hub, mut stdin, mut out) = stdio_hub(&dir, &server);
    crate::hub_kit::initialize_and_call((&mut stdin, &mut out), "bank__pay", json!({}));
    // Withdrawn before the hub ends (rmcp itself gives its requests 5 s to end before it
    // stops them, and the hub then ended before a withdrawal could be sure to be made): read
    // once, the moment the process is gone.
    let a = once_the_hub_ended(&mut hub, stdin, &server.url);
    assert_eq!(a["status"], "cancelled", "{a}");
    assert!(a.to_string().contains("the MCP client disconnected"), "{a}");
    drop(server);
}

/// Found by review: the stdio hub's MCP tasks live in its process, and a client that closed
/// stdin with a call held as a task left its approval pending when the process ended — no
/// other connection could ever read that task, and an operator could still approve it. The
/// hub withdraws the held approvals of its tasks before it ends.
#[test]
fn a_stdio_hub_ending_withdraws_the_approvals_its_tasks_held() {
    use std::io::{BufRead, Write};
    let (dir, server) = bank_gateway("");
    let (mut hub, mut stdin, mut out) = stdio_hub(&dir, &server);
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "clientInfo": {"name": "t", "version": "1"}}}),
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "bank__pay", "arguments": {}}}));
    // Read up to the call's answer: a task, not a result.
    let answer = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the hub said nothing"
        );
        let m: Value = serde_json::from_str(&line).unwrap();
        if m["id"] == 1 {
            break m;
        }
    };
    assert!(
        answer.to_string().contains("taskId"),
        "not a task: {answer}"
    );
    let a = once_the_hub_ended(&mut hub, stdin, &server.url);
    assert_eq!(a["status"], "cancelled", "{a}");
    assert!(a.to_string().contains("the MCP client disconnected"), "{a}");
    drop(server);
}

/// Found by review: a hub call whose upstream connection failed (not an MCP error: no answer
/// at all) was reported through the result API as if the hub's own error text were the
/// tool's result — recorded as `call.result` with its hash and size, and its session marked
/// with what the tool's output brings, although nothing came back and the tool may not have
/// run. It is recorded as a call that got no answer, with no result.
#[test]
fn a_hub_call_whose_upstream_never_answered_is_recorded_as_no_answer() {
    let (dir, server) = bank_gateway("");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(async {
        let client = crate::hub_kit::hub_client(&server.url, KEY).await;
        let r = client
            .peer()
            .call_tool(rmcp::model::CallToolRequestParams::new("bank__crash"))
            .await
            .unwrap();
        client.cancel().await.unwrap();
        r
    });
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let recorded = within(10, "nothing was recorded", || {
        call_results(dir.path()).pop()
    });
    assert_eq!(recorded["outcome"], "no_answer", "{recorded}");
    assert_eq!(recorded["tool"], "crash", "{recorded}");
    assert!(recorded.get("result_sha256").is_none(), "{recorded}");
    // The hub of the gateway's own process reports as itself: an agent's word cannot silence it.
    assert_eq!(recorded["reported_by"], "hub", "{recorded}");
    drop(server);
}
