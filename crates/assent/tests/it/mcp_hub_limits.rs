//! The hub's limits where they meet rmcp's and an upstream's: a call rmcp's own body bound
//! refused although the configuration allowed it, a stdio upstream's request too heavy to
//! parse left unanswered (or answered under ids of any length, queued without end), a stdio
//! upstream killed without `SIGTERM` at the gateway's stop (also when a send waits on its
//! stdin), one that stops reading its stdin holding the hub's sends for ever, and an
//! operator's edit the hub held uncounted.

use crate::hub_kit::{
    gateway_memory, hub_gateway_with, hub_post, hub_session, memory, py_queued_upstream, py_text,
    py_tools, py_upstream, sigterm, within,
};
use serde_json::json;
use std::time::Duration;

const KEY: &str = "hub-limits-agent-key-0123456789abcdef0";

/// The tool's answer (its text) in an `/mcp` answer body, or the whole body.
fn text_of(body: &str) -> String {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .map_or_else(|| body.to_string(), |m| m.to_string())
}

/// Found by review: rmcp reads an `/mcp` body within its own bound, 4 MiB by default, so with
/// `max_arguments_bytes` raised to 6 MiB a call with 5 MiB of arguments passed the gateway's
/// edge and was refused by rmcp with a bare `413` — the configuration did not work through the
/// hub. Now the call reaches the upstream and its answer comes back; a body past the
/// configured bound is still refused, `413` with a JSON body naming `max_arguments_bytes`
/// (never rmcp's bare text); and the hub's own body bound is never below the edge's largest.
#[test]
fn a_call_over_rmcps_4_mib_body_bound_runs_when_max_arguments_bytes_allows_it() {
    let edge_max = assent_server::config::limits::ARGUMENTS_BYTES_BOUNDS.1 as usize
        + assent_server::edge::BODY_OVERHEAD_BYTES;
    assert!(assent_mcp::hub::MAX_BODY_BYTES >= edge_max);
    let call = r#"        r={"content":[{"type":"text","text":"got %d" % len(m["params"]["arguments"]["s"])}]}"#;
    let source = py_upstream(&py_tools("read"), call);
    let (_dir, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[read]"), &source)],
        "max_arguments_bytes: 6291456\n",
    );
    let session = hub_session(&server.url, KEY);
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "up__read", "arguments": {"s": "x".repeat(5 << 20)}}});
    let r = hub_post(&server.url, KEY, Some(&session), big);
    let status = r.status().as_u16();
    let body = r.text().unwrap();
    assert_eq!(status, 200, "{body:.300}");
    assert!(
        text_of(&body).contains(&format!("got {}", 5 << 20)),
        "{body:.300}"
    );
    let over = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "up__read", "arguments": {"s": "x".repeat(7 << 20)}}});
    let r = hub_post(&server.url, KEY, Some(&session), over);
    let status = r.status().as_u16();
    let body = r.text().unwrap();
    assert_eq!(status, 413, "{body:.300}");
    let why: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert!(
        why.to_string().contains("max_arguments_bytes"),
        "{body:.300}"
    );
}

/// Attack (found by review): a stdio upstream sends the hub a request (here
/// `sampling/createMessage`) too heavy to parse — some 6 MB of `[0,0,…]` — while a call
/// waits for it. The hub dropped it unread, and the upstream waited for its answer for ever
/// (the call with it). Now the hub answers it on the upstream's stdin, a JSON-RPC `-32600`
/// error under its id naming the bound, and the call completes.
#[test]
fn an_upstreams_request_too_heavy_to_parse_is_answered_not_left_waiting() {
    let list = r#"        r={"tools":[{"name":"ask","inputSchema":{"type":"object"}}]}"#;
    let call = r#"        print('{"jsonrpc":"2.0","id":"heavy","method":"sampling/createMessage","params":{"z":['+"0,"*(3<<20)+'0]}}',flush=True)
        got="no answer"
        try:
            while True:
                a=json.loads(q.get(timeout=20))
                if a.get("id")=="heavy":
                    got="code %s: %s" % (a["error"]["code"], a["error"]["message"][:400]) if "error" in a else "answered"
                    break
        except Exception: pass
        r={"content":[{"type":"text","text":got}]}"#;
    let source = py_queued_upstream("", list, call);
    let (_dir, server) = hub_gateway_with(KEY, &[("up", Some("[ask]"), &source)], "");
    let session = hub_session(&server.url, KEY);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "up__ask", "arguments": {}}});
    let body = hub_post(&server.url, KEY, Some(&session), call)
        .text()
        .unwrap();
    let text = text_of(&body);
    assert!(text.contains("code -32600"), "{body:.400}");
    assert!(text.contains("refused unread"), "{body:.400}");
}

/// Found by review: the hub's stdio upstreams were ended at the gateway's stop without a
/// `SIGTERM` — killed outright — so an upstream that saves its state on `SIGTERM` lost it
/// (rmcp's own child transport, which the hub's weighed one replaced, sent it). An upstream
/// that ignores the end of its stdin but traps `SIGTERM` (writing a mark) gets it when
/// `assent serve` is stopped with SIGTERM.
#[test]
fn a_stdio_upstream_gets_sigterm_when_the_gateway_stops() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("terminated");
    let read = r#"[{"name":"read","inputSchema":{"type":"object"}}]"#;
    let source = traps_sigterm(&mark, read, "        r={}", "time.sleep(60)\n");
    let (_gw, mut server) = hub_gateway_with(KEY, &[("up", Some("[read]"), &source)], "");
    let session = hub_session(&server.url, KEY);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let body = hub_post(&server.url, KEY, Some(&session), list)
        .text()
        .unwrap();
    assert!(body.contains("up__read"), "{body:.300}");
    let got = sigterm_then_mark(&mut server, &mark);
    assert_eq!(got, "TERM");
}

/// Attack (memory, found by review): the hub counted a held call by the arguments its agent
/// sent, and an operator's edit replaced them uncounted, so edits could take an agent's held
/// bytes past the 64 MiB bound (and the hub's past 256 MiB). A call of 900,000 zeros (some
/// 57 MiB parsed) and a small one are held; the small one approved with 10 MiB of edited
/// arguments would pass the agent's bound beside the others: it is not run, its client told
/// why (`-32000`, naming the bound), as the stdio proxy does with such an edit.
#[test]
fn an_operators_edit_past_the_hubs_held_bytes_bound_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let call = format!(
        "        open({mark:?},'a').write('x\\n')\n{}",
        py_text("done")
    );
    let source = py_upstream(&py_tools("echo"), &call);
    let (_gw, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[{name: echo, approval: true}]"), &source)],
        "max_arguments_bytes: 16777216\n",
    );
    let url = server.url.clone();
    let session = hub_session(&url, KEY);
    let pending = || {
        let list = crate::get_op(&url, "/v1/approvals?status=pending&limit=1");
        list["approvals"][0]["id"].as_str().map(str::to_string)
    };
    let zeros: serde_json::Value =
        serde_json::from_str(&format!("[{}0]", "0,".repeat(899_999))).unwrap();
    let mut held = Vec::new();
    let mut seen = Vec::new();
    let calls = [json!({"z": zeros}), json!({"n": 3})];
    for (i, arguments) in calls.into_iter().enumerate() {
        let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                          "params": {"name": "up__echo", "arguments": arguments}});
        let (url, session) = (url.clone(), session.clone());
        held.push(std::thread::spawn(move || {
            hub_post(&url, KEY, Some(&session), call)
                .text()
                .unwrap_or_default()
        }));
        let id = within(120, "a call was never held", || {
            let done = held.last().is_some_and(|t| t.is_finished());
            assert!(
                !done,
                "call {i} was answered: {}",
                held.pop().unwrap().join().unwrap()
            );
            pending().filter(|id| !seen.contains(id))
        });
        seen.push(id);
    }
    let small = seen.last().unwrap();
    let edit = json!({"decision": "approve", "arguments": {"s": "x".repeat(10 << 20)}});
    let decided = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
        .post(format!("{url}/v1/approvals/{small}/decision"))
        .bearer_auth(crate::OP_KEY)
        .json(&edit)
        .send()
        .unwrap();
    assert!(decided.status().is_success(), "{:?}", decided.text());
    let body = held.pop().unwrap().join().unwrap();
    let answer = text_of(&body);
    assert!(answer.contains("-32000"), "{body:.400}");
    assert!(
        answer.contains("as approved") && answer.contains("not run"),
        "{body:.400}"
    );
    assert!(!mark.exists(), "the upstream ran the edited call");
    drop(server);
}

/// What the gateway's memory may peak at in [`an_upstream_refused_under_huge_ids_while_reading_nothing_leaves_the_gateway_small`]:
/// 300 MiB (the queued answers took it to some 930 MiB).
const PEAK: usize = 300 << 20;

/// Attack (memory, found by review): a stdio upstream that reads nothing of its stdin prints 80
/// requests of nearly 16 MiB each, each under a 13 MiB string id with parameters too heavy to
/// parse. Each was refused, and its answer — repeating the whole id — queued for the stdin it
/// never reads: 64 of them, some 930 MiB, in the gateway that serves every agent. Now a line
/// under an id over 1 KiB is dropped unanswered and the queue holds at most 1 MiB: the
/// gateway's peak stays small and the call that set it off completes (a short id is still
/// answered: `an_upstreams_request_too_heavy_to_parse_is_answered_not_left_waiting`).
#[test]
fn an_upstream_refused_under_huge_ids_while_reading_nothing_leaves_the_gateway_small() {
    let call = format!(
        "        big='{{\"jsonrpc\":\"2.0\",\"id\":\"'+'a'*(13<<20)+'\",\"method\":\"sampling/createMessage\",\"params\":{{\"z\":['+'0,'*1100000+'0]}}}}\\n'\n        for _ in range(80): sys.stdout.write(big)\n        sys.stdout.flush(); big=None\n{}",
        py_text("done")
    );
    let source = py_upstream(&py_tools("flood"), &call);
    let (_dir, server) = hub_gateway_with(KEY, &[("up", Some("[flood]"), &source)], "");
    let (url, pid) = (server.url.clone(), server.child.id());
    let session = hub_session(&url, KEY);
    let (before, _) = memory(pid);
    let flood = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "up__flood", "arguments": {}}});
    // Its answer comes after the 80 lines on the upstream's stdout: all were read by then.
    let body = hub_post(&url, KEY, Some(&session), flood).text().unwrap();
    let (_, peak) = gateway_memory(pid, before);
    assert!(text_of(&body).contains("done"), "{body:.300}");
    assert!(peak < PEAK, "the gateway peaked at {} MiB", peak >> 20);
}

/// A stdio upstream (Python) writing `TERM` to `mark` on `SIGTERM`: `tools/list` answered
/// with `tools` (a JSON list), `tools/call` by the Python lines `call` (indented eight spaces,
/// setting `r`), anything else `{}`; the lines `after` run once its stdin ends.
fn traps_sigterm(mark: &std::path::Path, tools: &str, call: &str, after: &str) -> String {
    format!(
        r#"import json,sys,signal,time
def term(*a):
    open({mark:?},'w').write('TERM')
    sys.exit(0)
signal.signal(signal.SIGTERM,term)
for line in sys.stdin:
    m=json.loads(line)
    if "id" not in m or "method" not in m: continue
    if m["method"]=="initialize":
        r={{"protocolVersion":"2025-06-18","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"up","version":"1"}}}}
    elif m["method"]=="tools/list":
        r={{"tools":{tools}}}
    elif m["method"]=="tools/call":
{call}
    else:
        r={{}}
    print(json.dumps({{"jsonrpc":"2.0","id":m["id"],"result":r}}),flush=True)
{after}"#
    )
}

/// The gateway stopped with SIGTERM (ended within 40 s), then what its upstream wrote to
/// `mark` (within 5 s).
fn sigterm_then_mark(server: &mut crate::Server, mark: &std::path::Path) -> String {
    sigterm(&server.child);
    within(40, "the gateway never ended", || {
        server.child.try_wait().unwrap()
    });
    within(5, "the upstream never got SIGTERM", || {
        std::fs::read_to_string(mark).ok()
    })
}

/// A stdio upstream with a `sleep` tool that sleeps `secs` s without reading its stdin (having
/// written `busy`) and a `read` tool, writing `TERM` to `mark` on `SIGTERM`.
fn sleeper(mark: &std::path::Path, busy: &std::path::Path, secs: u32) -> String {
    let tools = r#"[{"name":"sleep","inputSchema":{"type":"object"}},{"name":"read","inputSchema":{"type":"object"}}]"#;
    let call = format!(
        r#"        if m["params"]["name"]=="sleep":
            open({busy:?},'w').write('1')
            time.sleep({secs})
        r={{"content":[{{"type":"text","text":"done"}}]}}"#
    );
    traps_sigterm(mark, tools, &call, "")
}

/// Starts, on threads, a call of `sleep` (once the upstream is in it, see [`sleeper`]) and a
/// call of `read` with 300 KiB of arguments, which the upstream does not read: more than the
/// pipes between hold, so the hub's send of it waits on the upstream's stdin. With
/// `hang_up`, each client gives up its request after 5 s (the calls, forwarded, run on).
fn a_send_blocked_on_stdin(
    url: &str,
    session: &str,
    busy: &std::path::Path,
    hang_up: bool,
) -> Vec<std::thread::JoinHandle<String>> {
    let calls = [
        ("up__sleep", json!({})),
        ("up__read", json!({"s": "x".repeat(300 << 10)})),
    ];
    let mut threads = Vec::new();
    for (i, (name, arguments)) in calls.into_iter().enumerate() {
        let call = json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments}});
        let (url, session) = (url.to_string(), session.to_string());
        threads.push(std::thread::spawn(move || {
            if !hang_up {
                return hub_post(&url, KEY, Some(&session), call)
                    .text()
                    .unwrap_or_default();
            }
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let sent = client
                .post(format!("{url}/mcp"))
                .bearer_auth(KEY)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18")
                .header("mcp-session-id", &session)
                .json(&call)
                .send()
                .and_then(|r| r.text());
            sent.unwrap_or_else(|e| e.to_string())
        }));
        if i == 0 {
            within(30, "the upstream never began the sleep", || {
                busy.exists().then_some(())
            });
        }
    }
    // The second call forwarded (no approval: at once) and its send blocked.
    std::thread::sleep(Duration::from_secs(2));
    threads
}

/// Found by review: a send of the hub's blocked on a stdio upstream's stdin (the upstream busy
/// in a long call, reading nothing, sent 300 KiB it does not take) held rmcp's write lock, and
/// the close waited for that lock first, so the upstream got neither EOF nor `SIGTERM`; and the
/// close had only what the settling left of its 15 s, none while a forwarded call ran (its
/// client gone, nothing else kept the process alive). Now the close has 5 s of its own and
/// closes stdin whatever rmcp holds: the upstream gets `SIGTERM`.
#[test]
fn a_stdio_upstream_busy_in_a_call_with_a_send_blocked_on_its_stdin_gets_sigterm_at_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (mark, busy) = (dir.path().join("terminated"), dir.path().join("busy"));
    let source = sleeper(&mark, &busy, 60);
    let (_gw, mut server) = hub_gateway_with(
        KEY,
        &[("up", Some("[sleep, read]"), &source)],
        "max_arguments_bytes: 1048576\n",
    );
    let session = hub_session(&server.url, KEY);
    for call in a_send_blocked_on_stdin(&server.url, &session, &busy, true) {
        call.join().unwrap();
    }
    let got = sigterm_then_mark(&mut server, &mark);
    assert_eq!(got, "TERM");
}

/// Attack (memory, found by review): a stdio upstream that stops reading its stdin pinned every
/// call forwarded to it: rmcp's sends queue behind the one blocked on the child's stdin, each
/// holding its whole message, still after the call ends at its 600 s bound and its weight is
/// let go. Now a line the child keeps waiting 30 s lets the upstream go, as a dead one: the
/// blocked sends fail (freeing what they held), the calls under way are answered that no
/// answer came, the child is ended (`SIGTERM`), and a later call is refused at once.
#[test]
fn an_upstream_that_stops_reading_its_stdin_is_let_go_after_30_s() {
    let dir = tempfile::tempdir().unwrap();
    let (mark, busy) = (dir.path().join("terminated"), dir.path().join("busy"));
    let source = sleeper(&mark, &busy, 120);
    let (_gw, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[sleep, read]"), &source)],
        "max_arguments_bytes: 1048576\n",
    );
    let session = hub_session(&server.url, KEY);
    let started = std::time::Instant::now();
    let calls = a_send_blocked_on_stdin(&server.url, &session, &busy, false);
    for call in calls {
        let body = call.join().unwrap();
        let text = text_of(&body);
        assert!(text.contains("upstream `up` failed"), "{body:.400}");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(50), "answered after {took:?}");
    let got = within(10, "the upstream was never ended", || {
        std::fs::read_to_string(&mark).ok()
    });
    assert_eq!(got, "TERM");
    let later = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                       "params": {"name": "up__read", "arguments": {}}});
    let body = hub_post(&server.url, KEY, Some(&session), later)
        .text()
        .unwrap();
    assert!(!text_of(&body).contains("done"), "{body:.400}");
}
