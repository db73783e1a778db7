//! A cleared call that never reaches the MCP server still ends in the audit: its client
//! cancelled it after its approval's token was redeemed, and the gateway is told it did not
//! run (`call.result` with `outcome: not_run`), so the record does not stop at "approved,
//! redeemed".

use crate::{BIN, cli, ok, spawn_piped};
use serde_json::{Value, json};
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const KEY: &str = "not-run-agent-key-0123456789abcdef";

/// Agent `helper` on server `up`: `echo`, always held.
const AGENT: &str = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [{name: echo, approval: true}]\n";

/// `echo` waits for operators (`ops`).
const RULES: &str = "- tool: echo\n  approvers: [ops]\n";

/// An upstream (Python, stdio) logging every line it receives to `log`, with one tool `echo`.
fn upstream(log: &Path) -> String {
    let head = format!(
        "log=open({log:?},'a')\ndef logged(lines):\n    for line in lines:\n        log.write(line); log.flush()\n        yield line\nsys.stdin=logged(sys.stdin)\n"
    );
    let list = r#"        r={"tools":[{"name":"echo","description":"Echoes.","inputSchema":{"type":"object"}}]}"#;
    crate::hub_kit::py_upstream_with(
        &head,
        list,
        &crate::hub_kit::py_text("echoed"),
        "        r={}",
    )
}

/// A TCP relay on a port of its own in front of the gateway at `port`, holding back for
/// `delay` the answer to every request whose head names `slow` (HTTP/1.1: one request at a
/// time on a connection): the request reaches the gateway at once, its answer comes late.
/// Returns its URL.
fn slow_answers(port: u16, slow: &'static str, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { break };
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let held = Arc::new(AtomicBool::new(false));
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let flag = held.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = c_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if String::from_utf8_lossy(&buf[..n]).contains(slow) {
                        flag.store(true, Ordering::SeqCst);
                    }
                    if s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = s_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if held.swap(false, Ordering::SeqCst) {
                        std::thread::sleep(delay);
                    }
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    url
}

/// The audit records of `kind` in the gateway's database under `dir`: `(approval_id, data)`.
pub(crate) fn records(dir: &Path, kind: &str) -> Vec<(String, Value)> {
    let out = Command::new("sqlite3")
        .arg(dir.join("data/assent.db"))
        .arg(format!(
            "SELECT coalesce(approval_id, ''), data FROM audit WHERE kind = '{kind}' ORDER BY seq;"
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(a, d)| (a.to_string(), serde_json::from_str(d).unwrap()))
        .collect()
}

/// Polls `f` every 50 ms for up to `secs` seconds until it is `Some`.
#[track_caller]
pub(crate) fn within<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Found by review: a held call's client cancelled it just as it was approved — the proxy had
/// redeemed its token, and the gateway's answer was on its way — and the call was rightly
/// never run, but the gateway was told nothing of it: the audit read "approved, redeemed" and
/// stopped there, as if the call might have run. The proxy now waits for its redemption to
/// end and reports the call as not run. The gateway's answer to the redemption is held back
/// here, so the cancel lands after the token was redeemed and before the call could go on.
/// Through the client end (`stdin`, `out`) of a proxy or hub in front of the gateway at
/// `url` (data in `dir`): initialises, calls `tool`, approves the held call, waits for its
/// token to be redeemed, then cancels the call. The approval id, and the approval and data of
/// the `call.result` record that follows.
fn cancelled_after_redeem(
    url: &str,
    dir: &Path,
    (stdin, out): (&mut impl Write, &mut impl BufRead),
    tool: &str,
) -> (String, String, Value) {
    crate::hub_kit::initialize_and_call(
        (&mut *stdin, &mut *out),
        tool,
        json!({"message": "never"}),
    );
    let id = within(20, "the call was never held", || {
        let list = crate::get_op(url, "/v1/approvals?status=pending");
        list["approvals"][0]["id"].as_str().map(str::to_string)
    });
    ok(&cli(url, &["approve", &id]));
    within(20, "the token was never redeemed", || {
        (!records(dir, "token.redeemed").is_empty()).then_some(())
    });
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 1, "reason": "the user pressed stop"}});
    writeln!(stdin, "{cancel}").unwrap();
    let (linked, data) = within(20, "no outcome was recorded", || {
        records(dir, "call.result").pop()
    });
    (id, linked, data)
}

#[test]
fn a_call_cancelled_after_its_token_was_redeemed_is_recorded_as_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::serve_helper(dir.path(), (AGENT, KEY), ("acme.test.not-run-v1", RULES));
    let port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    let slow = slow_answers(port, "POST /v1/tokens/redeem", Duration::from_secs(3));
    let log = dir.path().join("up.log");
    let (mut proxy, mut stdin, mut out) = spawn_piped(
        Command::new(BIN)
            .args(["mcp", "--agent", "helper", "--server", "up", "--"])
            .args(["python3", "-c", &upstream(&log)])
            .env("ASSENT_URL", &slow)
            .env("ASSENT_API_KEY", KEY),
    );
    let (id, linked, data) =
        cancelled_after_redeem(&server.url, dir.path(), (&mut stdin, &mut out), "echo");
    assert_eq!(linked, id, "{data}");
    assert_eq!(data["outcome"], "not_run", "{data}");
    assert_eq!(data["tool"], "echo", "{data}");
    assert!(data.get("result_sha256").is_none(), "{data}");
    // Never run, and nothing answered: the client cancelled it.
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    )
    .unwrap();
    let answers: Vec<Value> = std::iter::from_fn(|| {
        let mut l = String::new();
        (out.read_line(&mut l).unwrap_or(0) > 0).then(|| serde_json::from_str(&l).unwrap())
    })
    .take_while(|m: &Value| m["id"] != 2)
    .collect();
    assert!(answers.iter().all(|m| m["id"] != 1), "{answers:?}");
    drop(stdin);
    let _ = proxy.wait();
    let upstream_got = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!upstream_got.contains("never"), "{upstream_got}");
    drop(server);
}

/// As above, through the hub (`assent mcp --config`, over stdio): the call cancelled while its
/// token was being redeemed was aborted, the redemption's answer dropped, and nothing said
/// what became of the call. It is reported as not run.
#[test]
fn a_hub_call_cancelled_after_its_token_was_redeemed_is_recorded_as_not_run() {
    let log_dir = tempfile::tempdir().unwrap();
    let source = upstream(&log_dir.path().join("up.log"));
    let (dir, server) = crate::hub_kit::hub_gateway(
        KEY,
        &[("up", Some("[{name: echo, approval: true}]"), &source)],
    );
    let port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    let slow = slow_answers(port, "POST /v1/tokens/redeem", Duration::from_secs(3));
    let (mut hub, mut stdin, mut out) = spawn_piped(
        Command::new(BIN)
            .args(["mcp", "--agent", "helper", "--config"])
            .arg(dir.path().join("assent.yaml"))
            .env("ASSENT_URL", &slow)
            .env("ASSENT_API_KEY", KEY),
    );
    let (id, linked, data) =
        cancelled_after_redeem(&server.url, dir.path(), (&mut stdin, &mut out), "up__echo");
    assert_eq!(linked, id, "{data}");
    assert_eq!(data["outcome"], "not_run", "{data}");
    drop(stdin);
    let _ = hub.wait();
    let upstream_got = std::fs::read_to_string(log_dir.path().join("up.log")).unwrap_or_default();
    assert!(!upstream_got.contains("never"), "{upstream_got}");
    drop(server);
}
