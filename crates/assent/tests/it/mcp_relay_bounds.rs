//! The stdio proxy's bounds on what a client sends: requests in flight past the bound are
//! answered with an error (never queued without end, never dropped unanswered), and a line of
//! exactly the line bound ending in `\r\n` is read as the line it is.

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

/// Attack (memory): a client floods requests at an upstream that answers none. Each was
/// queued for the upstream and noted as open, without bound, so the proxy's memory grew with
/// the flood. Past the bound of requests in flight each is answered at once with a JSON-RPC
/// error under its own id (-32000), and the ones within it stay open upstream.
#[test]
fn a_client_flooding_requests_at_a_silent_upstream_is_answered_busy_past_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::serve_helper(
        dir.path(),
        (AGENT, KEY),
        ("acme.test.bounds-v1", "- tool: read\n  risk_tier: R1\n"),
    );
    let (mut child, mut stdin, out) = helper_proxy((&server.url, KEY), &[], SILENT);
    let n = MAX_IN_FLIGHT + 500;
    let mut flood = String::new();
    for i in 0..n {
        flood.push_str(&json!({"jsonrpc": "2.0", "id": i, "method": "ping"}).to_string());
        flood.push('\n');
    }
    stdin.write_all(flood.as_bytes()).unwrap();
    stdin.flush().unwrap();
    // Read on a thread of its own, so that answers that never come fail the test at a
    // deadline rather than hang it.
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
    let mut refused = Vec::new();
    for _ in 0..n - MAX_IN_FLIGHT {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{} requests answered, then none", refused.len()));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line:?}"));
        assert_eq!(v["error"]["code"], -32000, "{v}");
        refused.push(v["id"].as_u64().unwrap_or_else(|| panic!("no id: {v}")));
    }
    let want: Vec<u64> = (MAX_IN_FLIGHT as u64..n as u64).collect();
    assert_eq!(
        refused, want,
        "the requests past the bound, each under its id"
    );
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    drop(server);
}

/// Review finding: a request of exactly the line bound (16 MiB) ending in `\r\n` was refused
/// as a line over the bound, under id `null` (its `\r` counted against the bound), though
/// ending in `\n` it was read. It is read now, and answered under its own id.
#[test]
fn a_request_of_16_mib_ending_in_crlf_is_read_and_answered_under_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::serve_helper(
        dir.path(),
        (AGENT, KEY),
        ("acme.test.bounds-v1", "- tool: read\n  risk_tier: R1\n"),
    );
    let (mut child, mut stdin, mut out) = helper_proxy((&server.url, KEY), &[], SILENT);
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
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    drop(server);
}
