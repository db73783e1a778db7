//! The MCP front ends' bounds at their edges, as an MCP peer meets them: the stdio proxy
//! answers an upstream's request too heavy to parse only under an id within the hub's 1 KiB
//! bound (never building and queueing an answer under an id of any length), and the hub's
//! `/mcp` answers a body past the gateway's body bound with a JSON-RPC error an MCP client
//! reads, not the API's `{"code", "message"}` body — nor does it for any other refusal of
//! the edge (a body that stalls, too many requests, a URI too long, a panic) or of rmcp.

use crate::hub_kit::{
    end, hub_gateway, hub_gateway_with, hub_post, hub_session, py_queued_upstream, py_text,
    py_tools, py_upstream,
};
use crate::mcp_held_settle::{KEY, answer, stdio_proxy};
use serde_json::{Value, json};
use std::io::Write;

/// An upstream with one tool `ask` which, called, sends the proxy three requests
/// (`sampling/createMessage`) too heavy to parse — some 6 MB of `[0,0,…]` each — under a
/// string id of 1025 bytes, one of 1024 bytes and `"short"`, then waits for the answers up to
/// that to `"short"` and returns, as its text result, what it got answers under: `len:N` for
/// an id of N bytes, or the id itself.
fn three_heavy_requests() -> String {
    let head = r#"heavy='"method":"sampling/createMessage","params":{"z":['+"0,"*(3<<20)+'0]}}\n'
"#;
    let call = r#"        for rid in ("a"*1025,"b"*1024,"short"):
            sys.stdout.write('{"jsonrpc":"2.0","id":"'+rid+'",'+heavy)
        sys.stdout.flush()
        got=[]
        try:
            while True:
                a=json.loads(q.get(timeout=30))
                if "method" in a: continue
                rid=str(a.get("id"))
                got.append(rid if len(rid)<100 else "len:%d" % len(rid))
                if rid=="short": break
        except Exception as e: got.append("gave up: %r" % e)
        r={"content":[{"type":"text","text":" ".join(got)}]}"#;
    py_queued_upstream(head, &py_tools("ask"), call)
}

/// Attack (memory, found by review): a stdio upstream sends the proxy requests too heavy to
/// parse under huge string ids (up to some 14 MiB within the 16 MiB line bound); the proxy
/// built an answer repeating each id whole and queued it for the upstream's stdin, which an
/// upstream that reads nothing never takes. The hub answered only under ids within 1 KiB;
/// the proxy now shares that bound: the request under a 1025-byte id is dropped unanswered,
/// the one under a 1024-byte id and the short one are answered (`-32600`), in order.
#[test]
fn an_upstreams_heavy_request_under_an_id_past_1_kib_is_not_answered_by_the_stdio_proxy() {
    let source = three_heavy_requests();
    let (_gw, server) = hub_gateway(KEY, &[("up", Some("[ask]"), &source)]);
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let call = json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
                      "params": {"name": "ask", "arguments": {}}});
    writeln!(stdin, "{call}").unwrap();
    let r = answer(&lines, &json!("ask"));
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text, "len:1024 short", "{r:.400}");
    end(proxy, stdin);
}

/// The JSON-RPC error object of a `413` `/mcp` answer `body`, checked for its shape: version
/// `2.0`, id `null`, code `-32600`; its message.
#[track_caller]
fn rpc_413(status: u16, body: &str) -> String {
    assert_eq!(status, 413, "{body:.300}");
    let v: Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    assert!(v.get("id").is_some(), "{v}");
    assert_eq!(v["error"]["code"], -32600, "{v}");
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Found by review: a `/mcp` body past the gateway's body bound (`max_arguments_bytes` plus
/// 64 KiB, or 16 KiB for a request that shows no known key) was refused by the edge with the
/// API's `{"code", "message"}` body, which an MCP client cannot read as a JSON-RPC message.
/// Both now get `413` with a JSON-RPC error object under id `null` (`-32600`) naming the
/// bound in bytes.
#[test]
fn a_hub_body_past_the_edge_bound_gets_a_json_rpc_error_an_mcp_client_reads() {
    let source = py_upstream(&py_tools("read"), &py_text("done"));
    let (_dir, server) = hub_gateway(KEY, &[("up", Some("[read]"), &source)]);
    let session = hub_session(&server.url, KEY);
    let over = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "up__read", "arguments": {"s": "x".repeat(400 << 10)}}});
    let r = hub_post(&server.url, KEY, Some(&session), over);
    let status = r.status().as_u16();
    let why = rpc_413(status, &r.text().unwrap());
    let bound = (256 << 10) + (64 << 10);
    assert!(why.contains(&format!("{bound} bytes")), "{why}");
    assert!(why.contains("max_arguments_bytes"), "{why}");
    let keyless = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"pad": "x".repeat(20 << 10)}});
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/mcp", server.url))
        .header("accept", "application/json, text/event-stream")
        .json(&keyless)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let why = rpc_413(status, &r.text().unwrap());
    assert!(why.contains(&format!("{} bytes", 16 << 10)), "{why}");
    let small = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "up__read", "arguments": {}}});
    let body = hub_post(&server.url, KEY, Some(&session), small)
        .text()
        .unwrap();
    assert!(body.contains("done"), "{body:.300}");
}

/// The JSON-RPC error object of a `/mcp` refusal `body` of `status`, checked for its shape:
/// version `2.0`, id `null`, code `code`; its message.
#[track_caller]
fn rpc_error(status: u16, want: u16, code: i64, body: &str) -> String {
    assert_eq!(status, want, "{body:.300}");
    let v: Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert!(v.get("id").is_some_and(Value::is_null), "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert!(v.get("code").is_none(), "the API's body: {v}");
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Found by review: the edge's other refusals on `/mcp` kept the API's `{"code", "message"}`
/// body, and rmcp's own plain-text ones were rewritten into it: no JSON-RPC message an MCP
/// client reads. A POST whose body stalls past `body_read_timeout_seconds` now gets `408`
/// with a JSON-RPC error (`-32000`, try again) under id `null`; a GET without
/// `text/event-stream` in its `Accept` gets rmcp's `406` as a JSON-RPC error (`-32600`).
#[test]
fn the_edges_refusals_on_mcp_are_json_rpc_errors_an_mcp_client_reads() {
    use std::io::Read;
    let source = py_upstream(&py_tools("read"), &py_text("done"));
    let extra = "body_read_timeout_seconds: 1\n";
    let (_dir, server) = hub_gateway_with(KEY, &[("up", Some("[read]"), &source)], extra);
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        tcp,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\""
    )
    .unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    let (head, body) = got.split_once("\r\n\r\n").expect("an HTTP answer");
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let why = rpc_error(status, 408, -32000, body);
    assert!(why.contains("did not arrive within 1 seconds"), "{why}");
    let r = reqwest::blocking::Client::new()
        .get(format!("{}/mcp", server.url))
        .bearer_auth(KEY)
        .header("accept", "application/json")
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let why = rpc_error(status, 406, -32600, &r.text().unwrap());
    assert!(why.contains("text/event-stream"), "{why}");
}
