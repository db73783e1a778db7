//! A stdio client that goes away while its call is still being proposed — the hub
//! (`assent mcp --config`) and the stdio proxy (`assent mcp -- CMD`) alike: the approval the
//! proposal makes once it lands is withdrawn before the process ends, not left pending.

use crate::hub_kit::{hub_gateway, initialize, lines_of, lock_db, py_text, py_upstream, unlock_db};
use crate::{BIN, spawn_piped};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command};
use std::time::{Duration, Instant};

const KEY: &str = "gone-proposing-agent-key-0123456789ab";

/// An upstream (Python, stdio) with `pay`, which agent `helper` declares as held for approval.
fn upstream() -> String {
    let list = r#"        r={"tools":[{"name":"pay","description":"pay.","inputSchema":{"type":"object"}}]}"#;
    py_upstream(list, &py_text("paid"))
}

/// Waits (up to 60 s) for `child` to end.
fn ended(child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the process never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Through the stdio client end `(stdin, out)` of `assent mcp` (started with
/// `--progress-seconds 1`): the handshake, `tools/list` (so the tools are pinned before the
/// database is locked), then — the database locked — a call of `tool` with a progress
/// token, read up to its second progress notification (2 s: its pins were checked at the
/// list, so by then its proposal is on its way, waiting for the database). Then the client
/// goes away (stdin closed); the process must not end for the next 2 s, as it waits for the
/// proposal (before the fix it ended at once, and the approval was made after); the
/// database is unlocked and the process waited for.
fn leave_while_proposing(
    dir: &Path,
    mut hub: Child,
    mut stdin: ChildStdin,
    out: impl BufRead + Send + 'static,
    tool: &str,
) {
    // Lines as they come, `None` at the end of the output (the process gone).
    let lines = lines_of(out);
    let send = |stdin: &mut ChildStdin, v: Value| writeln!(stdin, "{v}").unwrap();
    let read = |what: &str, pred: &dyn Fn(&Value) -> bool| loop {
        let line = lines.recv_timeout(Duration::from_secs(60));
        let line = line.ok().flatten().unwrap_or_else(|| panic!("no {what}"));
        let m: Value = serde_json::from_str(&line).unwrap();
        if pred(&m) {
            return m;
        }
        assert!(m.get("id") != Some(&json!(1)), "the call was answered: {m}");
    };
    send(&mut stdin, initialize(json!(0)));
    read("initialize answer", &|m| m["id"] == 0);
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    let list = read("tools/list answer", &|m| m["id"] == 2);
    assert!(list.to_string().contains(tool), "{list}");
    let locked = lock_db(dir);
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": {}, "_meta": {"progressToken": "p"}}}),
    );
    for _ in 0..2 {
        let progress = read("progress", &|m| m["method"] == "notifications/progress");
        assert!(
            progress.to_string().contains("waiting for assent to clear"),
            "{progress}"
        );
    }
    // The client goes away with its call still being proposed; the process waits for the
    // proposal to land (and be withdrawn) before it ends.
    drop(stdin);
    let until = Instant::now() + Duration::from_secs(2);
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the process ended with its call's proposal on its way"),
            Err(_) => break,
        }
    }
    unlock_db(locked);
    ended(&mut hub);
}

/// The one approval the gateway at `url` holds, as an operator reads it.
fn only_approval(url: &str) -> Value {
    let list = crate::get_op(url, "/v1/approvals");
    let all = list["approvals"].as_array().unwrap();
    assert_eq!(all.len(), 1, "{list}");
    crate::get_op(
        url,
        &format!("/v1/approvals/{}", all[0]["id"].as_str().unwrap()),
    )
}

/// `assent mcp --agent helper --progress-seconds 1` with the further arguments `more` gives
/// it (the gateway's directory and the upstream's source), in front of a gateway whose
/// upstream `bank` holds `pay`: its client leaves while the call `tool` is being proposed
/// ([`leave_while_proposing`]); the one approval is cancelled, the client disconnected.
fn gone_while_proposing(tool: &str, more: impl FnOnce(&mut Command, &Path, &str)) {
    let source = upstream();
    let (dir, server) = hub_gateway(
        KEY,
        &[("bank", Some("[{name: pay, approval: true}]"), &source)],
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["mcp", "--agent", "helper", "--progress-seconds", "1"]);
    more(&mut cmd, dir.path(), &source);
    let (child, stdin, out) = spawn_piped(
        cmd.env("ASSENT_URL", &server.url)
            .env("ASSENT_API_KEY", KEY),
    );
    leave_while_proposing(dir.path(), child, stdin, out, tool);
    let a = only_approval(&server.url);
    assert_eq!(a["status"], "cancelled", "{a}");
    assert!(a.to_string().contains("the MCP client disconnected"), "{a}");
    drop(server);
}

/// Found by CI (a flaky test, its cause a race): a hub stdio client that closed stdin while its
/// held call's proposal was still on its way had the call's job aborted; the proposal's own
/// task would have withdrawn the approval it made, but the process ended first, and the
/// approval stayed pending, open to an operator's approval for a client long gone. The hub
/// waits for proposals on their way, and the approval is withdrawn before the process ends.
#[test]
fn a_hub_client_gone_while_its_call_is_proposed_leaves_no_approval_pending() {
    gone_while_proposing("bank__pay", |cmd, dir, _| {
        cmd.arg("--config").arg(dir.join("assent.yaml"));
    });
}

/// As [`a_hub_client_gone_while_its_call_is_proposed_leaves_no_approval_pending`], for the
/// stdio proxy in front of one upstream (`assent mcp --server bank -- CMD`).
#[test]
fn a_proxy_client_gone_while_its_call_is_proposed_leaves_no_approval_pending() {
    gone_while_proposing("pay", |cmd, _, source| {
        cmd.args(["--server", "bank", "--", "python3", "-c", source]);
    });
}
