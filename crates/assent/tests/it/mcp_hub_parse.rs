//! What the MCP hub lets rmcp parse: a message too heavy to parse (`[0,0,…]` parsed holds some
//! 33 times its text) is weighed from its text first and refused unread, whether it comes from
//! an agent over `/mcp` on `assent serve`, from the stdio hub's client, or from a stdio
//! upstream, so that neither the gateway nor the stdio hub builds it.

use crate::hub_kit::{
    gateway_memory, hub_command, hub_gateway_with, hub_post, hub_session, lines_of, mcp_message,
    memory, py_text, py_tools, py_upstream,
};
use crate::mcp_held_settle::{answer, handshake};
use crate::spawn_piped;
use serde_json::{Value, json};
use std::io::Write;

const KEY: &str = "hub-parse-agent-key-0123456789abcdef0";

/// What a process's peak memory may reach in these tests: 300 MiB (one message of 16 MiB of
/// zeros parsed took some 0.5 GiB).
const PEAK: usize = 300 << 20;

/// One `/mcp` POST of `body` (text, sent as it is) in MCP session `session`: its status and
/// body.
fn post_text(url: &str, session: &str, body: String) -> (u16, String) {
    let r = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap()
        .post(format!("{url}/mcp"))
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session)
        .body(body)
        .send()
        // The whole error (its source chain: a reset, a broken pipe, a timeout), so that a
        // failure says what the connection met.
        .unwrap_or_else(|e| panic!("POST /mcp failed: {e:?}"));
    (r.status().as_u16(), r.text().unwrap_or_default())
}

/// `[0,0,…]` of `n` zeros, as text.
fn zeros(n: usize) -> String {
    format!("[{}0]", "0,".repeat(n - 1))
}

/// Attack (memory, found by review): with `max_arguments_bytes` raised, an agent POSTs
/// `tools/call`s to `/mcp` whose arguments are some 3.6 MB of `[0,0,…]` (under rmcp's own
/// 4 MiB body bound), which rmcp parsed whole (some 120 MiB each, several at once) in the
/// gateway process that serves every agent. Weighed first, each is answered at once, `200`
/// with a JSON-RPC error under its id naming the bound (`-32600`, "refused unread"), a heavy
/// notification `413` with a JSON body; the gateway stays small, and a normal call still runs.
/// So does a body refused for a key named twice before it is weighed.
#[test]
fn hub_posts_too_heavy_to_parse_are_refused_unread_and_the_gateway_stays_small() {
    const POSTS: usize = 4;
    let source = py_upstream(&py_tools("read"), &py_text("done"));
    let (_dir, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[read]"), &source)],
        "max_arguments_bytes: 16777216\n",
    );
    let (url, pid) = (server.url.clone(), server.child.id());
    let session = hub_session(&url, KEY);
    let (before, _) = memory(pid);
    let z = zeros(1_800_000);
    let threads: Vec<_> = (0..POSTS)
        .map(|i| {
            // Every other one with a key named twice ahead of its zeros: refused for that before
            // it is weighed, and its id read without building the rest (found by review: the
            // whole body was parsed to find it).
            let twice = if i % 2 == 1 { r#""a":1,"a":1,"# } else { "" };
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{{twice}"name":"up__read","arguments":{{"z":{z}}}}}}}"#
            );
            assert!(body.len() < 4 << 20, "{}", body.len());
            let (url, session) = (url.clone(), session.clone());
            std::thread::spawn(move || (i, post_text(&url, &session, body)))
        })
        .collect();
    let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let (_, peak) = gateway_memory(pid, before);
    assert!(
        peak < before + (96 << 20) && peak < PEAK,
        "the gateway grew from {} MiB to a peak of {} MiB",
        before >> 20,
        peak >> 20
    );
    for (i, (status, body)) in answers {
        let m = mcp_message(&body);
        let (want, says) = match i % 2 {
            0 => (200, "refused unread"),
            _ => (400, "DUPLICATE"),
        };
        assert_eq!((status, &m["id"]), (want, &json!(i)), "{body:.300}");
        assert_eq!(m["error"]["code"], -32600, "{body:.300}");
        let why = m["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains(says), "{body:.300}");
    }
    let note =
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":{z}}}}}"#);
    let (status, body) = post_text(&url, &session, note);
    assert_eq!(status, 413, "{body:.300}");
    assert!(
        mcp_message(&body)["error"]["message"]
            .as_str()
            .is_some_and(|w| w.contains("refused unread"))
    );
    let call = json!({"jsonrpc": "2.0", "id": "ok", "method": "tools/call",
                      "params": {"name": "up__read", "arguments": {"s": "x".repeat(1 << 20)}}});
    let r = hub_post(&url, KEY, Some(&session), call).text().unwrap();
    assert!(r.contains("done"), "{r:.300}");
}

/// Attack (memory, found by review): the stdio hub (`assent mcp --config`) read its client's
/// lines whole (a line with no newline grew without bound) and rmcp parsed each, so one line
/// of nearly 16 MiB of `[0,0,…]` made it build some 0.5 GiB, and one of 300 MB with no
/// newline was held whole. Now a line over 16 MiB is skipped unread and refused under no id,
/// one too heavy to parse refused unread under its own id (`-32600`, naming the bound); the
/// hub stays small, and a normal call still runs.
#[test]
fn stdio_hub_lines_too_long_or_too_heavy_are_refused_unread_and_the_hub_stays_small() {
    let source = py_upstream(&py_tools("read"), &py_text("done"));
    let (dir, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[read]"), &source)],
        "max_arguments_bytes: 16777216\n",
    );
    let (mut hub, mut stdin, out) = spawn_piped(&mut hub_command(&server.url, KEY, dir.path()));
    let lines = lines_of(out);
    handshake(&mut stdin, &lines);
    let heavy = format!(
        r#"{{"jsonrpc":"2.0","id":"heavy","method":"tools/call","params":{{"name":"up__read","arguments":{{"a":{}}}}}}}"#,
        zeros((8 << 20) - 1000)
    );
    assert!(heavy.len() < 16 << 20, "{}", heavy.len());
    writeln!(stdin, "{heavy}").unwrap();
    drop(heavy);
    let r = answer(&lines, &json!("heavy"));
    assert_eq!(r["error"]["code"], -32600, "{r:.300}");
    let why = r["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("refused unread"), "{r:.300}");
    let chunk = "0".repeat(1 << 20);
    for _ in 0..300 {
        stdin.write_all(chunk.as_bytes()).unwrap();
    }
    writeln!(stdin).unwrap();
    let r = answer(&lines, &Value::Null);
    assert_eq!(r["error"]["code"], -32600, "{r:.300}");
    let why = r["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("over 16 MiB"), "{r:.300}");
    let (_, peak) = memory(hub.id());
    eprintln!("the stdio hub peaked at {} MiB", peak >> 20);
    assert!(
        peak < 200 << 20,
        "the stdio hub peaked at {} MiB",
        peak >> 20
    );
    let call = json!({"jsonrpc": "2.0", "id": "ok", "method": "tools/call",
                      "params": {"name": "up__read", "arguments": {"s": "x"}}});
    writeln!(stdin, "{call}").unwrap();
    let r = answer(&lines, &json!("ok"));
    assert!(r.to_string().contains("done"), "{r:.300}");
    drop(stdin);
    let _ = hub.kill();
    let _ = hub.wait();
}

/// Attack (memory, found by review): a stdio upstream of the hub streams notifications of
/// nearly 16 MiB of `[0,0,…]` each (within rmcp's line bound), and answers a call with such a
/// result; rmcp parsed each line whole (some 0.5 GiB), in the gateway process that serves
/// every agent. Weighed first, the notifications are dropped unread and the answer becomes a
/// JSON-RPC error naming the bound; the gateway stays small and its calls still run.
#[test]
fn an_upstream_streaming_lines_too_heavy_to_parse_leaves_the_gateway_small() {
    let line = |head: &str| format!(r#"print('{head}'+"0,"*((7<<20))+'0]}}}}',flush=True)"#);
    let call = format!(
        "        if m[\"params\"][\"name\"]==\"zeros\":\n            {}; continue\n        for _ in range(3): {}\n{}",
        line(r#"{"jsonrpc":"2.0","id":'+json.dumps(i)+',"result":{"content":[],"z":["#),
        line(
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":["#
        ),
        py_text("done"),
    );
    let list = r#"        r={"tools":[{"name":"noisy","inputSchema":{"type":"object"}},{"name":"zeros","inputSchema":{"type":"object"}}]}"#;
    let source = py_upstream(list, &call);
    let (_dir, server) = hub_gateway_with(KEY, &[("up", Some("[noisy, zeros]"), &source)], "");
    let (url, pid) = (server.url.clone(), server.child.id());
    let session = hub_session(&url, KEY);
    let (before, _) = memory(pid);
    let noisy = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "up__noisy", "arguments": {}}});
    let r = hub_post(&url, KEY, Some(&session), noisy).text().unwrap();
    let (_, peak) = gateway_memory(pid, before);
    assert!(peak < PEAK, "the gateway peaked at {} MiB", peak >> 20);
    assert!(r.contains("done"), "{r:.300}");
    let heavy = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "up__zeros", "arguments": {}}});
    let r = hub_post(&url, KEY, Some(&session), heavy).text().unwrap();
    assert!(r.contains("refused unread"), "{r:.300}");
    let (_, peak) = memory(pid);
    assert!(peak < PEAK, "the gateway peaked at {} MiB", peak >> 20);
}
