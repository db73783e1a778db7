//! The stdio proxy's upstream exits while calls are under way: what each call waited on is
//! withdrawn and what was forwarded is reported, so no approval stays open for a call nobody
//! can run and the audit does not stop at "cleared" (found by review).

use crate::mcp_not_run::{records, within};
use crate::{BIN, spawn_piped};
use serde_json::json;
use std::io::Write;
use std::process::Command;

const KEY: &str = "upstream-exit-agent-key-0123456789ab";

/// Agent `helper` on server `up`: `echo` always held, `quit` allowed outright.
const AGENT: &str = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [{name: echo, approval: true}, {name: quit}]\n";

/// `echo` waits for operators (`ops`).
const RULES: &str = "- tool: echo\n  approvers: [ops]\n";

/// An upstream (Python, stdio) with tools `echo` and `quit` that exits, answering nothing,
/// when it is sent a call of `quit`.
fn upstream() -> String {
    let head = "import os\ndef watched(lines):\n    for line in lines:\n        if '\"quit\"' in line and 'tools/call' in line: os._exit(3)\n        yield line\nsys.stdin=watched(sys.stdin)\n";
    let list = r#"        r={"tools":[{"name":"echo","description":"Echoes.","inputSchema":{"type":"object"}},{"name":"quit","description":"Quits.","inputSchema":{"type":"object"}}]}"#;
    crate::hub_kit::py_upstream_with(
        head,
        list,
        &crate::hub_kit::py_text("echoed"),
        "        r={}",
    )
}

/// Attack (or a crash): the upstream exits while one call is held for a person and another
/// was forwarded and not yet answered. Before the fix the held call stayed pending (an
/// operator could approve it, redeeming a token for a call written into a closed pipe), the
/// forwarded one was never reported, and the proxy lingered. Now the approval is withdrawn,
/// the forwarded call is recorded as `no_answer`, and the proxy exits.
#[test]
fn an_upstream_exiting_withdraws_held_calls_and_reports_forwarded_ones() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::serve_helper(dir.path(), (AGENT, KEY), ("acme.test.up-exit-v1", RULES));
    let (mut proxy, mut stdin, mut out) = spawn_piped(
        Command::new(BIN)
            .args(["mcp", "--agent", "helper", "--server", "up", "--"])
            .args(["python3", "-c", &upstream()])
            .env("ASSENT_URL", &server.url)
            .env("ASSENT_API_KEY", KEY),
    );
    crate::hub_kit::initialize_and_call((&mut stdin, &mut out), "echo", json!({"message": "held"}));
    let id = within(20, "the call was never held", || {
        let list = crate::get_op(&server.url, "/v1/approvals?status=pending");
        list["approvals"][0]["id"].as_str().map(str::to_string)
    });
    let quit = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "quit", "arguments": {}}});
    writeln!(stdin, "{quit}").unwrap();
    let status = within(20, "the held call's approval stayed pending", || {
        let a = crate::get_op(&server.url, &format!("/v1/approvals/{id}"));
        let s = a["status"].as_str().unwrap_or("").to_string();
        (s != "pending").then_some(s)
    });
    assert_eq!(status, "cancelled");
    let code = within(20, "the proxy did not exit", || proxy.try_wait().unwrap());
    assert!(!code.success(), "{code:?}");
    let results = records(dir.path(), "call.result");
    assert!(
        results
            .iter()
            .any(|(_, d)| d["tool"] == "quit" && d["outcome"] == "no_answer"),
        "{results:?}"
    );
    drop(server);
}
