//! What the MCP front ends hold and leave behind: the stdio proxy bounds the bytes of the calls
//! it holds in flight; a forwarded call still running upstream when its client leaves has its
//! result reported before the proxy or the stdio hub ends; and `assent serve` settles its
//! hub's proposals before it stops serving.

use crate::hub_kit::{
    call_results, hub_command, hub_gateway, hub_gateway_logged, hub_post, hub_session, initialize,
    lines_of, lock_db, proxy_command, py_text, py_upstream, unlock_db, within,
};
use crate::spawn_piped;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Child, ChildStdin, Command};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub(crate) const KEY: &str = "held-settle-agent-key-0123456789abcd";

/// The next message of `lines` with id `id` (within 60 s), skipping notifications.
#[track_caller]
pub(crate) fn answer(lines: &std::sync::mpsc::Receiver<Option<String>>, id: &Value) -> Value {
    message_with_id(lines, id, true)
}

/// The next message of `lines` with id `id` (within 60 s), skipping every other; with
/// `notifications_only`, asserting each skipped one is a notification or a request.
#[track_caller]
pub(crate) fn message_with_id(
    lines: &std::sync::mpsc::Receiver<Option<String>>,
    id: &Value,
    notifications_only: bool,
) -> Value {
    loop {
        let line = lines.recv_timeout(Duration::from_secs(60));
        let line = line
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no answer to {id}"));
        let m: Value = serde_json::from_str(&line).unwrap();
        if m.get("id") == Some(id) {
            return m;
        }
        assert!(
            !notifications_only || m.get("method").is_some(),
            "another answer before {id}'s: {m}"
        );
    }
}

/// The `initialize` handshake through a stdio client end.
pub(crate) fn handshake(stdin: &mut impl Write, lines: &std::sync::mpsc::Receiver<Option<String>>) {
    writeln!(stdin, "{}", initialize(json!("init"))).unwrap();
    answer(lines, &json!("init"));
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
}

/// The stdio proxy (agent key [`KEY`]) on the gateway at `url` in front of server `up` run as
/// `python3 -c source`, past its handshake: the process, its stdin and its output's lines.
pub(crate) fn stdio_proxy(
    url: &str,
    source: &str,
) -> (Child, ChildStdin, Receiver<Option<String>>) {
    let (proxy, mut stdin, out) = spawn_piped(&mut proxy_command(url, KEY, "up", source));
    let lines = lines_of(out);
    handshake(&mut stdin, &lines);
    (proxy, stdin, lines)
}

/// A `tools/call` line of `tool` under `id` (its arguments `{"n": id}`, so that no two are
/// one call to the gateway), padded to exactly `len` bytes in its `_meta` client info (which
/// the gateway never sees and the proxy keeps, for a modern upstream: a key it drops would no
/// longer be held).
fn padded_call(id: &Value, tool: &str, len: usize) -> String {
    let head = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": {"n": id}, "_meta": {
                          "io.modelcontextprotocol/clientInfo": {"name": "t", "pad": ""}}}})
    .to_string();
    let line = head.replace(
        r#""pad":"""#,
        &format!(r#""pad":"{}""#, "x".repeat(len - head.len())),
    );
    assert_eq!(line.len(), len);
    line
}

/// How many approvals the gateway at `url` holds with status `status`.
pub(crate) fn approvals(url: &str, status: &str) -> usize {
    let list = crate::get_op(url, &format!("/v1/approvals?status={status}"));
    list["approvals"].as_array().map_or(0, Vec::len)
}

/// Attack (memory): a client sends calls held for a human, each with megabytes of request
/// (arguments, or `params` keys the gateway never sees), hoping the proxy keeps them all: only
/// their number was bounded (256), so 256 calls of 16 MiB pinned 4 GiB. The bytes held for
/// calls in flight are bounded at 64 MiB: eight calls of nearly 8 MiB are held, the ninth —
/// and a call of 64 KiB while they are — is answered at once with a JSON-RPC error naming the
/// bound; once the held calls are withdrawn, a small call goes through.
#[test]
fn calls_held_past_64_mib_are_refused_until_the_held_ones_are_withdrawn() {
    let list = r#"        r={"tools":[{"name":n,"description":n+".","inputSchema":{"type":"object"}} for n in ("read","echo")]}"#;
    let source = py_upstream(list, &py_text("done"));
    let (_dir, server) = hub_gateway(
        KEY,
        &[("up", Some("[read, {name: echo, approval: true}]"), &source)],
    );
    let (mut proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    // Eight calls of 8 MiB less 8 KiB (each weighs a little more than its text: 32 bytes a
    // piece of JSON and a B-tree node an object; 64 MiB less some 32 KiB in all), then a
    // ninth: written on a thread of its own (the proxy reads them as it goes).
    let writer = std::thread::spawn(move || {
        for i in 0..9 {
            let line = padded_call(&json!(i), "echo", (8 << 20) - 8192);
            writeln!(stdin, "{line}").unwrap();
        }
        stdin.flush().unwrap();
        stdin
    });
    let refused = answer(&lines, &json!(8));
    let mut stdin = writer.join().unwrap();
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("64 MiB bound on the bytes held for calls in flight"),
        "{refused}"
    );
    within(60, "the eight calls were never all held", || {
        (approvals(&server.url, "pending") == 8).then_some(())
    });
    // A call of 64 KiB (more than is left) is refused while they are held…
    let small = |id: &str| padded_call(&json!(id), "read", 1024);
    writeln!(
        stdin,
        "{}",
        padded_call(&json!("small-0"), "read", 64 << 10)
    )
    .unwrap();
    let r = answer(&lines, &json!("small-0"));
    assert_eq!(r["error"]["code"], -32000, "{r}");
    // …and goes through once they are withdrawn (their bytes let go of as each call ends).
    for i in 0..8 {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": i, "reason": "gave up"}});
        writeln!(stdin, "{cancel}").unwrap();
    }
    within(60, "the held calls were never withdrawn", || {
        (approvals(&server.url, "cancelled") == 8).then_some(())
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = (1..)
        .map(|k| {
            let id = format!("small-{k}");
            writeln!(stdin, "{}", small(&id)).unwrap();
            answer(&lines, &json!(id))
        })
        .find(|r| {
            let refused = r["error"]["code"] == -32000;
            assert!(refused || r.get("result").is_some(), "{r}");
            if refused {
                assert!(Instant::now() < deadline, "still refused: {r}");
                std::thread::sleep(Duration::from_millis(200));
            }
            !refused
        })
        .unwrap();
    assert!(done.to_string().contains("done"), "{done}");
    drop(stdin);
    let _ = proxy.kill();
    let _ = proxy.wait();
    drop(server);
}

/// An upstream with `slow`, which notes that it was called (creating file `mark`), then
/// answers 6 s later — after the 5 s the stdio front ends gave their upstream and rmcp its
/// requests once the client had left.
fn slow_upstream(mark: &std::path::Path) -> String {
    let list = r#"        r={"tools":[{"name":"slow","description":"slow.","inputSchema":{"type":"object"}}]}"#;
    let call = format!(
        "        open({mark:?},'w').close(); time.sleep(6)\n{}",
        py_text("slowly done")
    );
    py_upstream(list, &call)
}

/// Through `front` (an `assent mcp` command for agent `helper` on the gateway at `url`, server
/// `bank` with tool `slow` as `tool`): the handshake, then a call of `tool`; once the upstream
/// has it, the client leaves (stdin closed); the front end must end (within 60 s) only once
/// the call's result is reported.
fn leave_while_forwarded(front: &mut Command, mark: &std::path::Path, tool: &str) {
    let (mut child, mut stdin, out) = spawn_piped(front);
    let lines = lines_of(out);
    handshake(&mut stdin, &lines);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": {}}});
    writeln!(stdin, "{call}").unwrap();
    within(30, "the upstream was never called", || {
        mark.exists().then_some(())
    });
    drop(stdin);
    within(60, "the front end never ended", || {
        child.try_wait().unwrap()
    });
}

/// A gateway with server `bank` (tool `slow`, see [`slow_upstream`]), and through the front
/// end `front` makes of its URL, directory and upstream source, [`leave_while_forwarded`] with
/// `tool`: the call's result is recorded once, with its hash, as the agent's report.
fn result_recorded_after_leaving(
    front: impl FnOnce(&str, &std::path::Path, &str) -> Command,
    tool: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("called");
    let source = slow_upstream(&mark);
    let (gw_dir, server) = hub_gateway(KEY, &[("bank", Some("[slow]"), &source)]);
    leave_while_forwarded(&mut front(&server.url, gw_dir.path(), &source), &mark, tool);
    let recorded = call_results(gw_dir.path());
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["tool"], "slow", "{recorded:?}");
    assert!(recorded[0].get("result_sha256").is_some(), "{recorded:?}");
    // The proxy and the stdio hub (its own hub token, not the gateway's) hold the agent's key
    // alone: their report is the agent's word.
    assert_eq!(recorded[0]["reported_by"], "agent", "{recorded:?}");
    drop(server);
}

/// Found by review: a stdio proxy whose client closed stdin while a forwarded call was still
/// running upstream gave the upstream 5 s to exit, then killed it: a call answered later was
/// never reported, and the audit ended at the call's clearance with no `call.result`. The
/// proxy waits (within its 30 s bound) for the result and reports it before it ends.
#[test]
fn a_proxy_call_answered_after_its_client_left_still_has_its_result_recorded() {
    result_recorded_after_leaving(
        |url, _, source| proxy_command(url, KEY, "bank", source),
        "slow",
    );
}

/// As [`a_proxy_call_answered_after_its_client_left_still_has_its_result_recorded`], for the
/// stdio hub (`assent mcp --config`): rmcp gives a request 5 s once its client has left, and
/// the hub ended with a call still running upstream, its `call.result` never reported.
#[test]
fn a_hub_call_answered_after_its_client_left_still_has_its_result_recorded() {
    result_recorded_after_leaving(|url, dir, _| hub_command(url, KEY, dir), "bank__slow");
}

/// Found by review: `assent serve` stopped (SIGTERM) while its MCP hub's call was being
/// proposed — the database busy — left the approval its proposal made pending, open to an
/// operator's approval for a client long gone: the stdio front ends settle their proposals
/// before they end, the hub inside `assent serve` did not. It stops its calls and waits for
/// what is on its way while it still serves: the gateway ends only once the approval is
/// withdrawn. A call sent after the signal is refused (nothing proposed), as is a new session.
#[test]
fn serve_stopped_while_a_hub_call_is_proposed_leaves_no_approval_pending() {
    let list = r#"        r={"tools":[{"name":"pay","description":"pay.","inputSchema":{"type":"object"}}]}"#;
    let source = py_upstream(list, &py_text("paid"));
    let (dir, mut server, log) = hub_gateway_logged(
        KEY,
        &[("bank", Some("[{name: pay, approval: true}]"), &source)],
        "info,assent_mcp::gateway=debug",
    );
    let url = server.url.clone();
    let session = hub_session(&url, KEY);
    let s = Some(session.as_str());
    // The tools pinned before the database is locked.
    let listed = hub_post(
        &url,
        KEY,
        s,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    assert!(listed.text().unwrap().contains("bank__pay"));
    let locked = lock_db(dir.path());
    let call = hub_post(
        &url,
        KEY,
        s,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bank__pay", "arguments": {}, "_meta": {"progressToken": "p"}}}),
    );
    // The call's proposal on its way, waiting for the database (its busy timeout is 10 s: all
    // that follows fits in it). Found flaky: a fixed 2 s wait was, under load, sometimes
    // before the hub had begun to propose; then it had nothing to settle and ended at once.
    within(30, "the hub never began to propose the call", || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("proposing the call to the gateway")
            .then_some(())
    });
    assert_eq!(
        statuses(dir.path()),
        "",
        "an approval made with the database locked"
    );
    crate::hub_kit::sigterm(&server.child);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the gateway ended with its hub's proposal on its way"
    );
    // Found by review: a call that came while the hub settled was proposed and left pending.
    // From the signal on, a new call, and a new session, are refused, saying why.
    let late = hub_post(
        &url,
        KEY,
        s,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "bank__pay", "arguments": {"late": true}}}),
    )
    .text()
    .unwrap();
    assert!(late.contains("the gateway is shutting down"), "{late}");
    assert!(late.contains("-32000"), "{late}");
    let fresh = hub_post(&url, KEY, None, initialize(json!(0)))
        .text()
        .unwrap();
    assert!(fresh.contains("the gateway is shutting down"), "{fresh}");
    unlock_db(locked);
    within(60, "the gateway never ended", || {
        server.child.try_wait().unwrap()
    });
    drop(call);
    assert_eq!(statuses(dir.path()), "cancelled", "the approvals' statuses");
}

/// The statuses of the approvals in the gateway's database under `dir`, one a line.
fn statuses(dir: &std::path::Path) -> String {
    let out = Command::new("sqlite3")
        .arg(dir.join("data/assent.db"))
        .arg("SELECT status FROM approvals;")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
