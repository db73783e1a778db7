//! Hub upstreams that stall, through the real `assent serve`: a streamable HTTP upstream whose
//! host drops the TCP handshake is given up within the 10 s connect bound, one that accepts
//! the connection and never answers `initialize` within the 30 s start-up bound, and the
//! gateway comes up without them (each call to them answered with why), the upstreams
//! started side by side: several stalled ones hold start-up about 30 s in all, not each. What bounds a
//! stalled upstream otherwise: a tool list 30 s, a call 600 s (then recorded `no_answer`), a
//! stdio upstream keeping a line of the hub's waiting 30 s (`mcp_hub_limits.rs`).

use crate::hub_kit::{hub_post, hub_session};
use crate::{Server, free_port, serve_cmd, spawn_quiet, wait_healthy, write_agent_config};
use serde_json::{Value, json};
use std::io::BufRead;
use std::time::{Duration, Instant};

/// Agent `helper`'s key.
const KEY: &str = "upstream-stalls-agent-key-0123456789ab";

/// Two listeners on loopback, their ports printed on one line: `dead`, whose accept queue is
/// full (listening with a backlog of 0, filled by connections of its own that are never
/// accepted), so the kernel drops every further handshake and a connection to it hangs; and
/// `silent`, which accepts every connection, holds it and says nothing.
const LISTENERS: &str = r#"import socket,threading,time
dead=socket.socket(); dead.bind(("127.0.0.1",0)); dead.listen(0)
fill=[]
for k in range(4):
    c=socket.socket(); c.setblocking(False)
    try: c.connect(dead.getsockname())
    except BlockingIOError: pass
    fill.append(c)
silent=socket.socket(); silent.bind(("127.0.0.1",0)); silent.listen(64)
held=[]
def hold():
    while True:
        c,_=silent.accept(); held.append(c)
threading.Thread(target=hold,daemon=True).start()
time.sleep(0.5)
print(dead.getsockname()[1], silent.getsockname()[1], flush=True)
time.sleep(600)
"#;

/// Found by review: the hub's HTTP client had no connect timeout, so a streamable HTTP
/// upstream whose host drops the TCP handshake (a firewall, a host gone) took the whole 30 s
/// start-up bound, as if it had connected and said nothing, and every later call to one that
/// became unreachable (each request opens a connection) waited some two minutes for the
/// system's connect timeout. Now the connection must be made within 10 s: the unreachable
/// upstream fails to start (not "did not initialise"), the silent one is given up after 30 s,
/// the gateway comes up without either, and a call to either is answered with an error
/// naming why.
///
/// Found by review as well: the upstreams were started one after another, so N upstreams
/// that never answer `initialize` held the gateway's start-up N × 30 s (here three silent
/// ones and the unreachable one: 100 s). Now they start side by side, and the gateway must
/// be serving within 2 × 30 s. That margin is no timing flake: a side-by-side start takes
/// the 30 s bound plus the gateway's own start (a second or two), so a busy machine would
/// have to add 30 s to fail it; a serial start takes at least 3 × 30 s + 10 s, which no
/// machine can make shorter than 60 s.
#[test]
fn unreachable_or_silent_http_upstreams_are_given_up_within_their_bounds_side_by_side() {
    let mut listeners = std::process::Command::new("python3")
        .args(["-c", LISTENERS])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ports = String::new();
    std::io::BufReader::new(listeners.stdout.take().unwrap())
        .read_line(&mut ports)
        .unwrap();
    let ports: Vec<u16> = ports
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (dead, silent) = (ports[0], ports[1]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = gateway_config(dir.path(), port, dead, silent);
    let started = Instant::now();
    let child = spawn_quiet(serve_cmd(&cfg));
    let url = format!("http://127.0.0.1:{port}");
    wait_healthy(&url, Duration::from_secs(150), Duration::from_millis(100));
    let took = started.elapsed();
    eprintln!("the gateway came up after {took:?}");
    assert!(
        took < 2 * START_BOUND,
        "four stalled upstreams held start-up {took:?}: started one after another?"
    );
    let server = Server { child, url };
    let session = hub_session(&server.url, KEY);
    let told = |tool: &str| {
        let call = json!({"jsonrpc": "2.0", "id": tool, "method": "tools/call",
                          "params": {"name": tool, "arguments": {}}});
        let body = hub_post(&server.url, KEY, Some(&session), call)
            .text()
            .unwrap();
        let r = message(&body);
        assert_eq!(r["result"]["isError"], true, "{body}");
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let dead_told = told("dead__x");
    assert!(
        dead_told.contains("upstream `dead` is unavailable: failed to start"),
        "{dead_told}"
    );
    for alias in SILENT {
        let silent_told = told(&format!("{alias}__x"));
        let why = format!("upstream `{alias}` is unavailable: did not initialise within 30 s");
        assert!(silent_told.contains(&why), "{silent_told}");
    }
    drop(server);
    let _ = listeners.kill();
    let _ = listeners.wait();
}

/// How long the hub gives an upstream to answer `initialize`.
const START_BOUND: Duration = Duration::from_secs(30);

/// The upstreams that accept the connection and say nothing, all on the `silent` listener.
const SILENT: [&str; 3] = ["silent", "silent2", "silent3"];

/// A gateway for agent `helper` (key [`KEY`], declaring tool `x` on every upstream) with the
/// hub in front of streamable HTTP upstreams `dead` on loopback port `dead` and each of
/// [`SILENT`] on port `silent`, written into `dir`, listening on `port`; the config's path.
fn gateway_config(dir: &std::path::Path, port: u16, dead: u16, silent: u16) -> std::path::PathBuf {
    let mut agent =
        "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: dead\n      allowed_tools: [x]\n".to_string();
    let mut upstreams =
        format!("mcp_upstreams:\n  dead: {{url: \"http://127.0.0.1:{dead}/mcp\"}}\n");
    for alias in SILENT {
        agent += &format!("    - alias: {alias}\n      allowed_tools: [x]\n");
        upstreams += &format!("  {alias}: {{url: \"http://127.0.0.1:{silent}/mcp\"}}\n");
    }
    write_agent_config(dir, port, (&agent, KEY), &upstreams)
}

/// The JSON-RPC message of an `/mcp` answer (plain JSON, or the first `data:` event of a
/// stream that is one).
fn message(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .find_map(|d| serde_json::from_str(d.trim()).ok())
            .unwrap_or(Value::Null)
    })
}
