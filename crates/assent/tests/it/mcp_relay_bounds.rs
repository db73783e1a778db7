//! The stdio proxy's bounds on what a client sends: requests in flight past the bound are
//! answered with an error (never queued without end, never dropped unanswered), the queue to
//! the upstream is bounded in bytes as well as lines, and a line of exactly the line bound
//! ending in `\r\n` is read as the line it is.

use crate::helper_proxy;
use serde_json::{Value, json};
use std::io::{BufRead, Write};

const KEY: &str = "relay-bounds-agent-key-0123456789";

/// Agent `helper` on server `up`.
const AGENT: &str = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n";

/// An upstream that reads every line and answers none (a slow upstream, at its slowest).
const SILENT: &str = "import sys\nfor line in sys.stdin: pass\n";

/// The proxy's bound on a client's requests in flight (`relay::client::MAX_IN_FLIGHT`).
const MAX_IN_FLIGHT: usize = 256;

/// A gateway for [`AGENT`] (key [`KEY`]) whose policy lets `read` through at R1, serving
/// from `dir` ([`crate::serve_helper`]).
fn bounds_gateway(dir: &std::path::Path) -> crate::Server {
    crate::serve_helper(
        dir,
        (AGENT, KEY),
        ("acme.test.bounds-v1", "- tool: read\n  risk_tier: R1\n"),
    )
}

/// Ends a proxy: closes its `stdin`, then kills `child` and waits for it.
fn stop_proxy(mut child: std::process::Child, stdin: std::process::ChildStdin) {
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}

/// The next line of `lines` (within 30 s; `so_far` refusals came before it), which must be a
/// JSON-RPC error `-32000` under a number id: that id and the error's message.
#[track_caller]
fn next_refusal(lines: &std::sync::mpsc::Receiver<String>, so_far: usize) -> (u64, String) {
    let line = lines
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{so_far} requests refused, then none"));
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line:?}"));
    assert_eq!(v["error"]["code"], -32000, "{v}");
    let id = v["id"].as_u64().unwrap_or_else(|| panic!("no id: {v}"));
    (
        id,
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Attack (memory): a client floods requests at an upstream that answers none. Each was
/// queued for the upstream and noted as open, without bound, so the proxy's memory grew with
/// the flood. Past the bound of requests in flight each is answered at once with a JSON-RPC
/// error under its own id (-32000), and the ones within it stay open upstream.
#[test]
fn a_client_flooding_requests_at_a_silent_upstream_is_answered_busy_past_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounds_gateway(dir.path());
    let (child, mut stdin, out) = helper_proxy((&server.url, KEY), &[], SILENT);
    let n = MAX_IN_FLIGHT + 500;
    let mut flood = String::new();
    for i in 0..n {
        flood.push_str(&json!({"jsonrpc": "2.0", "id": i, "method": "ping"}).to_string());
        flood.push('\n');
    }
    stdin.write_all(flood.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let lines = read_lines(out);
    let mut refused = Vec::new();
    for _ in 0..n - MAX_IN_FLIGHT {
        refused.push(next_refusal(&lines, refused.len()).0);
    }
    let want: Vec<u64> = (MAX_IN_FLIGHT as u64..n as u64).collect();
    assert_eq!(
        refused, want,
        "the requests past the bound, each under its id"
    );
    stop_proxy(child, stdin);
    drop(server);
}

/// Review finding: a request of exactly the line bound (16 MiB) ending in `\r\n` was refused
/// as a line over the bound, under id `null` (its `\r` counted against the bound), though
/// ending in `\n` it was read. It is read now, and answered under its own id.
#[test]
fn a_request_of_16_mib_ending_in_crlf_is_read_and_answered_under_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounds_gateway(dir.path());
    let (child, mut stdin, mut out) = helper_proxy((&server.url, KEY), &[], SILENT);
    let bound = 16 * 1024 * 1024;
    let head = json!({"jsonrpc": "2.0", "id": "big", "method": "bogus/method",
                      "params": {"pad": ""}})
    .to_string();
    let pad = "x".repeat(bound - head.len());
    let line = head.replace(r#""pad":"""#, &format!(r#""pad":"{pad}""#));
    assert_eq!(line.len(), bound);
    stdin.write_all(line.as_bytes()).unwrap();
    stdin.write_all(b"\r\n").unwrap();
    stdin.flush().unwrap();
    let mut answer = String::new();
    out.read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(v["id"], "big", "{v}");
    assert_eq!(v["error"]["code"], -32601, "{v}");
    stop_proxy(child, stdin);
    drop(server);
}

/// An upstream that answers only requests under a string id (`{}`), and nothing else: the
/// requests under a number stand for the ones a client cancels, which MCP says a receiver
/// should not answer.
const ANSWERS_STRING_IDS: &str = r#"import json,sys
for line in sys.stdin:
    m=json.loads(line)
    if "method" in m and isinstance(m.get("id"),str):
        print(json.dumps({"jsonrpc":"2.0","id":m["id"],"result":{}}), flush=True)
"#;

/// Review finding: every cancelled request held one of the client's 256 places in flight for
/// good (the upstream rightly never answers it, and only an answer freed its id), so after
/// 256 cancellations in a long session every request was refused `-32000` until the proxy
/// restarted. A request the upstream was told is cancelled no longer counts in flight: 300
/// requests each cancelled (in rounds of 100, each ended by a request the upstream answers,
/// so that every cancellation has reached it) are none refused, and a ping after them is
/// answered.
#[test]
fn cancelled_requests_the_upstream_never_answers_do_not_use_up_the_places_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounds_gateway(dir.path());
    let (child, mut stdin, out) = helper_proxy((&server.url, KEY), &[], ANSWERS_STRING_IDS);
    let lines = read_lines(out);
    let mut ask = |id: &str, before: &str| {
        let mut text = before.to_string();
        text.push_str(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string());
        text.push('\n');
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let got = lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no answer to {id}"));
        let v: Value = serde_json::from_str(&got).unwrap_or_else(|_| panic!("{got:?}"));
        assert_eq!(v["id"], id, "an answer before {id}'s: {v}");
        v
    };
    for round in 0..3 {
        let mut batch = String::new();
        for i in round * 100..(round + 1) * 100 {
            batch.push_str(&json!({"jsonrpc": "2.0", "id": i, "method": "ping"}).to_string());
            batch.push('\n');
            let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                "params": {"requestId": i, "reason": "gave up"}});
            batch.push_str(&cancel.to_string());
            batch.push('\n');
        }
        let synced = ask(&format!("round-{round}"), &batch);
        assert!(synced.get("error").is_none(), "{synced}");
    }
    let ping = ask("after", "");
    assert_eq!(ping["result"], json!({}), "{ping}");
    stop_proxy(child, stdin);
    drop(server);
}

/// `out`'s lines, read on a thread of their own (so that a missing answer fails a test at
/// its deadline rather than hanging it).
fn read_lines(out: impl BufRead + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = out;
        let mut line = String::new();
        while out.read_line(&mut line).is_ok_and(|k| k > 0) {
            if tx.send(std::mem::take(&mut line)).is_err() {
                break;
            }
        }
    });
    rx
}

/// Agent `helper` on server `up`: `echo`, always held for an operator.
const HELD_AGENT: &str = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [{name: echo, approval: true}]\n";

/// An upstream with tool `echo` that, asked `ping`, floods the client with 200,000
/// notifications (about 20 MB), and exits once its stdin or stdout closes.
const FLOODS: &str = r#"import json,sys
def out(m): sys.stdout.write(json.dumps(m)+"\n"); sys.stdout.flush()
tools=[{"name":"echo","description":"d","inputSchema":{"type":"object"}}]
for line in sys.stdin:
    m=json.loads(line)
    if "method" not in m or "id" not in m: continue
    i=m["id"]; meth=m["method"]
    if meth=="initialize":
        out({"jsonrpc":"2.0","id":i,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}})
    elif meth=="tools/list":
        out({"jsonrpc":"2.0","id":i,"result":{"tools":tools}})
    elif meth=="ping":
        note=json.dumps({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"*60}})+"\n"
        for _ in range(2000): sys.stdout.write(note*100); sys.stdout.flush()
"#;

/// Review finding: a client that died while its queue was full (it read none of what the
/// upstream sent) left the proxy waiting for room in that queue for ever: it never read the
/// end of stdin, never withdrew the approval it held for the client (still pending for people
/// to decide, and once approved forwarded for a client that is gone), and its upstream ran on.
/// The queue closes with its writer: the proxy exits within seconds (10 s at most here) and
/// the approval is withdrawn.
#[test]
fn a_client_gone_with_its_queue_full_has_the_proxy_exit_and_withdraw_its_approval() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::serve_helper(
        dir.path(),
        (HELD_AGENT, KEY),
        (
            "acme.test.bounds-held-v1",
            "- tool: echo\n  approvers: [ops]\n",
        ),
    );
    let mut child = std::process::Command::new(crate::BIN)
        .args(["mcp", "--agent", "helper", "--server", "up", "--"])
        .args(["python3", "-c", FLOODS])
        .env("ASSENT_URL", &server.url)
        .env("ASSENT_API_KEY", KEY)
        // The one line the test waits for: a reader paused on the client's full queue.
        .env("ASSENT_LOG", "assent_mcp::relay::lines=debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let logs = read_lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    let mut send = |v: Value| writeln!(stdin, "{v}").and_then(|()| stdin.flush()).unwrap();
    send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}}));
    let mut init = String::new();
    out.read_line(&mut init).unwrap();
    assert!(init.contains("\"result\""), "{init}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "held"}}}));
    let approval = pending_echo(&server.url);
    // The flood; the client reads nothing more, and its queue fills.
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = logs
            .recv_timeout(left)
            .expect("the client's queue never filled");
        if line.contains("a queue is full") {
            break;
        }
    }
    // One line more, read once the queue is full: the proxy reads on only once it has room
    // (the end of stdin, after it, too). Then the client dies.
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
    drop(stdin);
    drop(out);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        exited.is_some(),
        "the proxy did not exit once its client was gone"
    );
    let a = crate::get_op(&server.url, &format!("/v1/approvals/{approval}"));
    assert_eq!(a["status"], "cancelled", "{a}");
    drop(server);
}

/// The id of the one pending approval of `echo` at the gateway at `url` (polled for up to
/// 30 s).
fn pending_echo(url: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let list = crate::get_op(url, "/v1/approvals?status=pending");
        let found = list["approvals"]
            .as_array()
            .and_then(|l| l.iter().find(|a| a["call"]["tool"] == "echo").cloned());
        if let Some(a) = found {
            return a["id"].as_str().unwrap().to_string();
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "never held"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// An upstream that reads nothing (its stdin pipe fills at once) and exits once the proxy
/// that started it is gone.
const READS_NOTHING: &str =
    "import os,time\np=os.getppid()\nwhile os.getppid()==p: time.sleep(0.2)\n";

/// The proxy's byte bound on one queue (`relay::lines::MAX_QUEUED_BYTES`).
const MAX_QUEUED_BYTES: usize = 64 << 20;

/// Attack (memory): a client writes long requests (1 MiB each) at an upstream that reads
/// none. The queue to the upstream was bounded at 1,024 lines only, so it held a gigabyte of
/// them (16 GiB with lines of the 16 MiB line bound). Past 64 MiB queued, each further
/// request is answered at once with a JSON-RPC error under its own id (-32000, the upstream
/// is not reading), as past the line bound; the ones before it wait in the queue, unanswered.
#[test]
fn a_client_writing_long_requests_at_an_upstream_that_reads_none_is_refused_past_64_mib() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounds_gateway(dir.path());
    let (child, mut stdin, out) = helper_proxy((&server.url, KEY), &[], READS_NOTHING);
    let lines = read_lines(out);
    let pad = "x".repeat(1 << 20);
    let n = 100;
    // Written on a thread of its own: the proxy reads them all (its client's queue has room).
    let writer = std::thread::spawn(move || {
        for i in 0..n {
            let line = json!({"jsonrpc": "2.0", "id": i, "method": "ping",
                              "params": {"pad": pad}});
            writeln!(stdin, "{line}").unwrap();
        }
        stdin.flush().unwrap();
        stdin
    });
    let mut refused = Vec::new();
    // One request is with the writer (its pipe full), about 64 wait in the queue, and the
    // rest are refused: at least 30 of the 100.
    while refused.len() < 30 {
        let (id, message) = next_refusal(&lines, refused.len());
        assert!(message.contains("not reading"), "{message}");
        refused.push(id);
    }
    let first = refused[0] as usize;
    assert!(
        first * (1 << 20) >= MAX_QUEUED_BYTES - (2 << 20),
        "refused from request {first} on: before 64 MiB were queued"
    );
    let stdin = writer.join().unwrap();
    stop_proxy(child, stdin);
    drop(server);
}
