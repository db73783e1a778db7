//! What the MCP front ends hold for calls in flight, and how long they take to let go: a
//! forwarded call its client cancelled no longer counts against the stdio proxy's held-bytes
//! bound; a call is weighed by what it holds parsed; a forwarded call's result is still read
//! after its client's stdout is gone; and `assent serve` stops within a service manager's 30 s
//! with a hub call still running upstream.

use crate::hub_kit::{
    call_results, end, hub_gateway, hub_gateway_with, hub_post, hub_session, memory, proxy_command,
    py_list, py_text, py_upstream,
};
use crate::mcp_held_settle::{KEY, answer, approvals, stdio_proxy};
use crate::spawn_piped;
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

/// Attack (memory, found by review): the bytes of a forwarded call stayed counted against the
/// 64 MiB bound until its answer came, and a cancelled request should not be answered — so
/// after some 64 MiB of forwarded calls the client cancelled, every later call was refused
/// (`-32000`) for the rest of the session. Five calls of 15 MiB to a tool that never answers,
/// each cancelled once the upstream has it: a small call after them still gets its result.
/// What the proxy keeps of them stays bounded all the same: past the bound on given-up
/// requests (64 MiB) a cancelled call still counts, and more such calls are refused.
#[test]
fn cancelled_forwarded_calls_never_answered_do_not_use_up_the_held_bytes_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("got");
    let call = format!(
        "        if m[\"params\"][\"name\"]==\"hang\": open({mark:?},'a').write('x\\n'); continue\n{}",
        py_text("done")
    );
    let source = py_upstream(&py_list(&["hang", "read"]), &call);
    let (_gw, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[hang, read]"), &source)],
        "max_arguments_bytes: 16777216\n",
    );
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let got = || std::fs::read_to_string(&mark).map_or(0, |s| s.lines().count());
    // Call `i` of 15 MiB, cancelled once the upstream has it: `Some(answer)` when it is
    // answered instead (refused).
    let hang = |stdin: &mut std::process::ChildStdin, i: usize| {
        let pad = "x".repeat(15 << 20);
        let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                          "params": {"name": "hang", "arguments": {"n": i, "pad": pad}}});
        writeln!(stdin, "{call}").unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got() <= i {
            assert!(Instant::now() < deadline, "the upstream never got call {i}");
            if let Ok(Some(line)) = lines.recv_timeout(Duration::from_millis(50)) {
                let m: serde_json::Value = serde_json::from_str(&line).unwrap();
                if m["id"] == i {
                    return Some(m);
                }
            }
        }
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": i, "reason": "gave up"}});
        writeln!(stdin, "{cancel}").unwrap();
        None
    };
    for i in 0..5 {
        assert_eq!(hang(&mut stdin, i), None, "call {i} was answered");
    }
    let small = json!({"jsonrpc": "2.0", "id": "small", "method": "tools/call",
                       "params": {"name": "read", "arguments": {}}});
    writeln!(stdin, "{small}").unwrap();
    let r = answer(&lines, &json!("small"));
    assert!(r.get("error").is_none(), "{r}");
    assert!(r.to_string().contains("done"), "{r}");
    // Four given up (60 MiB), the fifth and the next three still count (60 MiB): the ninth
    // is refused.
    let refused = (5..12).find_map(|i| hang(&mut stdin, i));
    let refused = refused.expect("cancelled calls past the given-up bound were never refused");
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert_eq!(refused["id"], 8, "{refused}");
    end(proxy, stdin);
}

/// Attack (memory, found by review): the held-bytes bound counted a call's text, while the
/// proxy held it parsed — the whole request, and a clone of its arguments — and `[0,0,…]`
/// parsed takes some 35 times its text, twice: six held calls of 2 MiB of zeros took over a
/// gigabyte. A call is weighed by what it holds parsed: the first is held (a call alone always
/// is), the others are refused at once naming the bound, and the proxy's memory stays low.
#[test]
fn held_calls_of_zeros_are_weighed_parsed_and_the_proxy_memory_stays_bounded() {
    let source = py_upstream(&py_list(&["echo"]), &py_text("done"));
    let (_gw, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[{name: echo, approval: true}]"), &source)],
        "max_arguments_bytes: 4194304\n",
    );
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let zeros = format!("[{}0]", "0,".repeat(900_000));
    for i in 0..6 {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{i},"z":{zeros}}}}}}}"#
        );
        writeln!(stdin, "{call}").unwrap();
    }
    stdin.flush().unwrap();
    for i in 1..6 {
        let r = answer(&lines, &json!(i));
        assert_eq!(r["error"]["code"], -32000, "call {i}: {r}");
        let why = r["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("bytes held for calls in flight"), "{r}");
    }
    crate::hub_kit::within(60, "the first call was never held", || {
        (approvals(&server.url, "pending") == 1).then_some(())
    });
    let (used, _) = memory(proxy.id());
    assert!(
        used < 600 << 20,
        "the proxy holds {} MiB for one held call",
        used >> 20
    );
    end(proxy, stdin);
}

/// Found by review: once the client's stdout was gone the proxy's upstream reader stopped at
/// the first line it relayed, so a forwarded call's result coming after a log notification was
/// never read: no `call.result`, and the proxy waited its whole 30 s for it. The upstream logs
/// twice before its result, after the client has closed stdin and stdout: the result is still
/// recorded, and the proxy ends well within its bound.
#[test]
fn a_result_after_log_lines_is_recorded_when_the_client_closed_stdin_and_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("called");
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                     "params": {"level": "info", "data": "working"}});
    let call = format!(
        "        open({mark:?},'w').close()\n        for _ in range(2): time.sleep(1); print(json.dumps({log}), flush=True)\n        time.sleep(1)\n{}",
        py_text("logged and done")
    );
    let source = py_upstream(&py_list(&["slow"]), &call);
    let (gw_dir, server) = hub_gateway(KEY, &[("bank", Some("[slow]"), &source)]);
    let (mut proxy, mut stdin, mut out) =
        spawn_piped(&mut proxy_command(&server.url, KEY, "bank", &source));
    crate::hub_kit::initialize_and_call((&mut stdin, &mut out), "slow", json!({}));
    crate::hub_kit::within(30, "the upstream was never called", || {
        mark.exists().then_some(())
    });
    let left = Instant::now();
    drop((stdin, out));
    crate::hub_kit::within(60, "the proxy never ended", || proxy.try_wait().unwrap());
    let recorded = call_results(gw_dir.path());
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["tool"], "slow", "{recorded:?}");
    assert!(
        left.elapsed() < Duration::from_secs(20),
        "the proxy took {:?}",
        left.elapsed()
    );
    drop(server);
}

/// Found by review: `assent serve`'s shutdown waited 30 s for its hub to settle (a forwarded
/// call holds the settling until its result is reported), then drained connections for 10 s —
/// past systemd's `TimeoutStopSec=30s`, which then kills it before its last audit checkpoint.
/// With a hub call running upstream for a minute, SIGTERM ends the process within 30 s.
#[test]
fn serve_stopped_with_a_long_hub_call_running_ends_within_the_service_stop_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("called");
    let call = format!(
        "        open({mark:?},'w').close(); time.sleep(60)\n{}",
        py_text("late")
    );
    let source = py_upstream(&py_list(&["slow"]), &call);
    let (_gw, mut server) = hub_gateway(KEY, &[("bank", Some("[slow]"), &source)]);
    let url = server.url.clone();
    let session = hub_session(&url, KEY);
    let s = Some(session.as_str());
    let call = hub_post(
        &url,
        KEY,
        s,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bank__slow", "arguments": {}}}),
    );
    crate::hub_kit::within(30, "the upstream was never called", || {
        mark.exists().then_some(())
    });
    crate::hub_kit::sigterm(&server.child);
    let signalled = Instant::now();
    crate::hub_kit::within(60, "the gateway never ended", || {
        server.child.try_wait().unwrap()
    });
    let took = signalled.elapsed();
    drop(call);
    assert!(took < Duration::from_secs(30), "the shutdown took {took:?}");
}
