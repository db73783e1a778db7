//! What the MCP hub inside `assent serve` holds for an agent's calls in flight: each held
//! `tools/call` keeps its arguments parsed while it waits for a human (hours, perhaps), and
//! `[0,0,…]` parsed takes some 33 times its text, so the hub bounds the bytes (by weight) its
//! calls in flight hold, per agent and in all.

use crate::hub_kit::{
    hub_gateway, hub_post, hub_session, mcp_message, memory, py_text, py_upstream,
};
use crate::mcp_held_settle::approvals;
use serde_json::Value;
use std::sync::mpsc;
use std::time::Duration;

const KEY: &str = "hub-weight-agent-key-0123456789abcdef";

/// Attack (memory, found by review): an agent sends `tools/call`s held for a human, each with
/// arguments of zeros near the `/mcp` body bound (250 KB of text, some 4 MiB parsed), over two
/// MCP sessions; the hub kept every one parsed (twice: the request and a clone of its
/// arguments) for as long as it waited, bounded only by the gateway's pending approvals
/// (100 an agent by default, and none for calls that join one approval), so a few agents
/// could pin gigabytes in the gateway's own process. The bytes held for an agent's calls in
/// flight are bounded (64 MiB by weight): the calls past it are answered at once with a
/// JSON-RPC error naming the bound, never proposed. Found by a later review: only the
/// arguments were weighed, so zeros in a call's `_meta` were held unweighed; every other call
/// here carries them there.
#[test]
fn held_hub_calls_past_the_weight_bound_are_refused_not_held() {
    const CALLS: usize = 40;
    let source = py_upstream(
        r#"        r={"tools":[{"name":"echo","description":"Echo.","inputSchema":{"type":"object"}}]}"#,
        &py_text("done"),
    );
    let (_dir, server) = hub_gateway(
        KEY,
        &[("up", Some("[{name: echo, approval: true}]"), &source)],
    );
    let url = server.url.clone();
    let pid = server.child.id();
    let sessions = [hub_session(&url, KEY), hub_session(&url, KEY)];
    let (before, _) = memory(pid);
    let zeros = format!("[{}0]", "0,".repeat(125_000));
    let (tx, rx) = mpsc::channel();
    for i in 0..CALLS {
        let (url, session, tx) = (url.clone(), sessions[i % 2].clone(), tx.clone());
        // Every other call's zeros in its `_meta`, which rmcp keeps in the request's context.
        let params = match i % 2 {
            0 => format!(r#"{{"name":"up__echo","arguments":{{"n":{i},"z":{zeros}}}}}"#),
            _ => {
                format!(r#"{{"name":"up__echo","arguments":{{"n":{i}}},"_meta":{{"z":{zeros}}}}}"#)
            }
        };
        let body: Value = serde_json::from_str(&format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{params}}}"#
        ))
        .unwrap();
        std::thread::spawn(move || {
            let r = hub_post(&url, KEY, Some(&session), body);
            let _ = tx.send((i, mcp_message(&r.text().unwrap_or_default())));
        });
        // One at a time, so that the order they are held in is the order they were sent.
        std::thread::sleep(Duration::from_millis(150));
    }
    drop(tx);
    // The calls past the bound are answered at once; the others stay in flight (held, or on
    // their way to their hold). At most 64 MiB of them by weight (a call alone is always
    // taken), so at least the rest are refused: read until they are (120 s at most) before
    // the memory is read, so that no refused call is still being parsed then. Found as flaky
    // CI runs: reading until a 5 s quiet gap, or until half were refused, read the memory
    // while the last refused bodies were still being parsed.
    let sample: Value = serde_json::from_str(&format!(r#"{{"n":{CALLS},"z":{zeros}}}"#)).unwrap();
    let taken_at_most = (64 << 20) / assent_core::json::json_weight(&sample) + 1;
    let mut refused = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(120);
    while refused.len() < CALLS.saturating_sub(taken_at_most) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let Ok((i, m)) = rx.recv_timeout(left) else {
            break;
        };
        refused.push((i, m));
    }
    let in_flight = CALLS - refused.len();
    let (now, peak) = memory(pid);
    eprintln!(
        "{in_flight} in flight ({} held), {} refused; gateway RSS {} MiB before, {} MiB now, {} MiB at its peak",
        approvals(&url, "pending"),
        refused.len(),
        before >> 20,
        now >> 20,
        peak >> 20
    );
    assert!(in_flight >= 1, "no call was taken: {:?}", refused.first());
    assert!(
        in_flight < CALLS / 2,
        "{in_flight} calls of 4 MiB parsed were kept in flight"
    );
    for (i, m) in &refused {
        assert_eq!(m["error"]["code"], -32000, "call {i}: {m}");
        let why = m["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("bytes held for agent"), "call {i}: {m}");
    }
    // The memory is reported, not asserted: what the refused calls' parsing left behind, and
    // what the allocator keeps of it, depends on how many bodies a loaded machine parsed at
    // once (a CI run read 393 MiB with the bound holding). The bound is what the counts above
    // assert (with the bound switched off, every call was kept in flight).
}
