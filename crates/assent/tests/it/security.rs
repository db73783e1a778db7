//! Attacks through the real binary (issue 10): an MCP client that sends JSON two parsers read
//! differently, against an upstream whose parser keeps the first duplicate key.

use crate::{
    BIN, OP_KEY, free_port, hex_sha256, serve, serve_cmd, spawn_piped, start_up_refused,
    write_config,
};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};

const FS_KEY: &str = "fs-agent-test-key-0123456789abcdef";

/// An MCP upstream in Python whose JSON parser keeps the FIRST of duplicate keys (as some
/// parsers do), and which writes every line it receives, and every tool it runs, to `log`.
fn first_wins_upstream(log: &std::path::Path) -> String {
    format!(
        r#"import json,sys
log=open({log:?},'a')
def first(pairs):
    d={{}}
    for k,v in pairs:
        d.setdefault(k,v)
    return d
tools=[{{"name":n,"inputSchema":{{"type":"object"}}}} for n in ("read_file","write_file")]
for line in sys.stdin:
    log.write("LINE "+line); log.flush()
    m=json.loads(line, object_pairs_hook=first)
    if "id" not in m or "method" not in m: continue
    if m["method"]=="initialize":
        r={{"protocolVersion":"2025-06-18","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"first-wins","version":"1"}}}}
    elif m["method"]=="tools/list":
        r={{"tools":tools}}
    elif m["method"]=="tools/call":
        log.write("RAN "+json.dumps([m["params"]["name"],m["params"].get("arguments")])+"\n"); log.flush()
        r={{"content":[{{"type":"text","text":"ran "+m["params"]["name"]}}]}}
    else:
        r={{}}
    print(json.dumps({{"jsonrpc":"2.0","id":m["id"],"result":r}}), flush=True)
"#
    )
}

/// The gateway with agent `fs_agent` (example policies) and the stdio proxy in front of a
/// [`first_wins_upstream`] logging to `upstream.log` in `dir`: (gateway, proxy, its stdin,
/// its stdout, the log's path).
fn fs_proxy(
    dir: &std::path::Path,
) -> (
    crate::Server,
    std::process::Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
    std::path::PathBuf,
) {
    let port = free_port();
    let ex = crate::examples();
    let cfg = dir.join("assent.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [\"{}/agents/*.agf.yaml\"]\ngovernance: [\"{}/governance/*.yaml\"]\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance-admin], key_env: TEST_ALICE_KEY}}\n  - {{name: fs, kind: agent, agent_id: fs_agent, key_sha256: \"{}\"}}\n",
            ex.display(),
            ex.display(),
            hex_sha256(FS_KEY)
        ),
    )
    .unwrap();
    let server = serve(&cfg, port);
    let log = dir.join("upstream.log");
    let (child, stdin, out) = spawn_piped(
        Command::new(BIN)
            .args([
                "mcp", "--agent", "fs_agent", "--server", "fs", "--", "python3", "-c",
            ])
            .arg(first_wins_upstream(&log))
            .env("ASSENT_URL", &server.url)
            .env("ASSENT_API_KEY", FS_KEY),
    );
    (server, child, stdin, out, log)
}

/// The `tools/call` requests the upstream's `log` says it received, in order.
fn calls_in(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| l.strip_prefix("LINE "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/call")
        .collect()
}

#[test]
fn a_duplicate_tool_name_cannot_run_a_tool_other_than_the_one_gated() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut child, mut stdin, mut out, log) = fs_proxy(dir.path());
    let mut send = |l: &str| writeln!(stdin, "{l}").unwrap();
    let mut recv = || {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        serde_json::from_str::<Value>(&l).unwrap()
    };
    send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    assert!(recv()["result"].is_object());
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // serde_json (last wins) would gate `read_file`, which needs no approval; a first-wins
    // upstream would run `write_file`. Refused, naming the key; never forwarded.
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","name":"read_file","arguments":{"path":"/etc/passwd","content":"x"}}}"#,
    );
    let r = recv();
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("DUPLICATE_KEY")
            && r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("/params/name"),
        "{r}"
    );
    // A number that rounds is refused the same way.
    send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/tmp/a","offset":18446744073709551616}}}"#,
    );
    let r = recv();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(2), json!(-32600)),
        "{r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("INEXACT_NUMBER"),
        "{r}"
    );
    // An allowed call runs, and the upstream gets the proxy's serialisation of what it gated,
    // not the client's bytes (spacing and key order here are the client's own).
    let spaced = r#"{ "params" : { "arguments" : { "path" : "/tmp/a" } , "name" : "read_file" } , "method" : "tools/call" , "id" : 3 , "jsonrpc" : "2.0" }"#;
    send(spaced);
    let r = recv();
    assert_eq!(r["id"], 3, "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "ran read_file", "{r}");
    drop(stdin);
    child.wait().unwrap();
    server.kill9();
    let log = std::fs::read_to_string(&log).unwrap();
    let ran: Vec<&str> = log.lines().filter_map(|l| l.strip_prefix("RAN ")).collect();
    assert_eq!(ran, vec![r#"["read_file", {"path": "/tmp/a"}]"#], "{log}");
    assert!(
        !log.contains(spaced),
        "the client's bytes were forwarded: {log}"
    );
    let forwarded = calls_in(&log);
    assert_eq!(
        forwarded,
        vec![
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "/tmp/a"}}})
        ],
        "{log}"
    );
}

/// Review finding (MCP relay): the stdio proxy forwarded the client's whole `params`, so keys
/// outside the call it gated (`params.overrides`, `_meta` entries other than the protocol's)
/// reached the upstream although no `call_hash` covers them: a channel around the approval for
/// an upstream that reads them. What goes upstream is `{name, arguments}` and the `_meta`
/// entries of the protocol (envelope, progress token, trace context).
#[test]
fn a_client_cannot_smuggle_params_or_meta_past_the_gated_call() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut child, mut stdin, mut out, log) = fs_proxy(dir.path());
    let mut send = |l: Value| writeln!(stdin, "{l}").unwrap();
    let mut recv = || {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        serde_json::from_str::<Value>(&l).unwrap()
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    );
    assert!(recv()["result"].is_object());
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": "/tmp/a"},
        "overrides": {"path": "/etc/shadow"},
        "_meta": {"progressToken": "p1", "com.example/run_as": "root", "traceparent": {"x": 1},
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "run_as": "root"}}}}),
    );
    let r = recv();
    assert_eq!(r["result"]["content"][0]["text"], "ran read_file", "{r}");
    // An entry the protocol has, in a shape it does not give it, stays too.
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": "/tmp/b"},
        "_meta": {"progressToken": {"path": "/etc/shadow"}}}}),
    );
    let r = recv();
    assert_eq!(r["result"]["content"][0]["text"], "ran read_file", "{r}");
    drop(stdin);
    child.wait().unwrap();
    server.kill9();
    let log = std::fs::read_to_string(&log).unwrap();
    let forwarded = calls_in(&log);
    assert_eq!(
        forwarded,
        vec![
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "read_file", "arguments": {"path": "/tmp/a"}, "_meta": {"progressToken": "p1"}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "read_file", "arguments": {"path": "/tmp/b"}}})
        ],
        "{log}"
    );
}

/// `assent serve` started under `ulimit -Sn 1024` (a common default), with `extra` appended
/// to the test config.
fn serve_low_nofile(dir: &std::path::Path, port: u16, extra: &str) -> crate::Server {
    let cfg = write_config(dir, port, extra);
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!(
        "ulimit -Sn 1024 && exec {BIN} serve --config {}",
        cfg.display()
    ));
    crate::serve_with(cmd, port)
}

/// `n` sockets open to the gateway on `port` from 127.0.0.1 that never send a byte.
fn idle_sockets(port: u16, n: usize) -> Vec<std::net::TcpStream> {
    (0..n)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect()
}

#[test]
fn eleven_hundred_idle_sockets_do_not_starve_health_checks_or_operators() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // All from one address here: its own cap is lifted (see the test below for it).
    let mut server = serve_low_nofile(
        dir.path(),
        port,
        "header_read_timeout_seconds: 2\nmax_connections_per_address: 100000\n",
    );
    // 1,100 unauthenticated sockets that never send a byte (more than the 1,024 files the
    // server was started with).
    let idle = idle_sockets(port, 1100);
    std::thread::sleep(Duration::from_millis(300));
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let t = Instant::now();
    let health = http.get(format!("{}/healthz", server.url)).send().unwrap();
    assert_eq!(health.status(), 200);
    let list = http
        .get(format!("{}/v1/approvals", server.url))
        .bearer_auth(OP_KEY)
        .send()
        .unwrap();
    assert_eq!(list.status(), 200);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // An idle socket is closed once the header-read timeout passes.
    let mut one = idle.into_iter().next().unwrap();
    one.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 16];
    let t = Instant::now();
    let n = one.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without a reply");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    server.kill9();
}

/// Attack (found by review): one address held every connection slot with idle sockets,
/// re-opened every header-read timeout, and the gateway answered everyone else `503`. One
/// address may hold `max_connections_per_address`; past it that address alone is refused, and
/// another (here 127.0.0.2) is served at once.
#[test]
fn idle_sockets_from_one_address_do_not_shut_out_the_others() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), port, "max_connections_per_address: 20\n");
    // Readiness is checked from 127.0.0.3 (found by a CI run): a connection of 127.0.0.1's
    // that the gateway has not yet seen closed would hold one of its 20 slots a moment longer.
    let from = Some(std::net::IpAddr::from([127, 0, 0, 3]));
    let mut server = crate::serve_checked_from(crate::serve_cmd(&cfg), port, from);
    let idle = idle_sockets(port, 20);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut over = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    over.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut reply = String::new();
    let _ = over.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("max_connections_per_address"), "{reply}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut c = s
            .connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        out
    });
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    drop(idle);
    server.kill9();
}

/// Attack (found by review): a client that sent requests and never read the answers kept its
/// connection for ever: the header-read timeout does not run while the gateway waits to
/// write, so a few addresses could hold every slot without reconnecting. A response that
/// gets no byte taken for `header_read_timeout_seconds` (here 2) ends its connection: the
/// address's one slot (`max_connections_per_address: 1`) is free again.
#[test]
fn a_client_that_never_reads_its_answers_loses_its_connection() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = "max_connections_per_address: 1\nheader_read_timeout_seconds: 2\n";
    let cfg = write_config(dir.path(), port, extra);
    let from = Some(std::net::IpAddr::from([127, 0, 0, 3]));
    let mut server = crate::serve_checked_from(crate::serve_cmd(&cfg), port, from);
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let ask = "GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n".repeat(2_000);
    stalled.write_all(ask.as_bytes()).unwrap();
    let health = || {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        let mut reply = String::new();
        let _ = c.read_to_string(&mut reply);
        reply
    };
    let first = health();
    assert!(
        first.starts_with("HTTP/1.1 503"),
        "the slot is held: {first}"
    );
    let start = std::time::Instant::now();
    loop {
        let reply = health();
        if reply.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "the stalled connection still holds the slot: {reply}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    drop(stalled);
    server.kill9();
}

#[test]
fn a_short_operator_key_stops_start_up_unless_demo_keys_are_asked_for_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), port, "");
    let run = |args: &[&str], key: &str| {
        let mut c = serve_cmd(&cfg);
        c.args(args);
        c.env("TEST_ALICE_KEY", key)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    };
    // A guessable key is refused with file, line and reason.
    let out = run(&[], "alice-demo-key").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:6:", cfg.display())) && err.contains("at least 32"),
        "{err}"
    );
    // --insecure-demo-keys serves it, on loopback only.
    let out = run(
        &["--insecure-demo-keys", "--listen", "0.0.0.0:0"],
        "alice-demo-key",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
    let mut child = run(&["--insecure-demo-keys"], "alice-demo-key")
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let start = std::time::Instant::now();
    let ok = loop {
        if let Ok(r) = reqwest::blocking::Client::new()
            .get(format!("{url}/v1/whoami"))
            .bearer_auth("alice-demo-key")
            .send()
        {
            break r.status();
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(ok, 200);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_duration_that_would_wrap_stops_start_up_instead_of_approving_at_once() {
    // 2^64 - 1 seconds wrapped to a negative wait: the approval expired at once and its
    // default applied. Every duration and count is range-checked with file and line.
    let dir = tempfile::tempdir().unwrap();
    start_up_refused(
        dir.path(),
        &[
            (
                "approval_timeout_seconds: 18446744073709551615",
                "approval_timeout_seconds is 18446744073709551615; it must be from 1 to 604800",
            ),
            (
                "token_ttl_seconds: 0",
                "token_ttl_seconds is 0; it must be from 1 to 86400",
            ),
            ("max_pending_per_agent: 9999999999", "max_pending_per_agent"),
            ("max_arguments_bytes: 10", "max_arguments_bytes is 10"),
            (
                "header_read_timeout_seconds: 3600",
                "header_read_timeout_seconds",
            ),
            (
                "rate_limits: {requests_per_second: 0}",
                "rate_limits.requests_per_second is 0",
            ),
        ],
    );
}

/// Found by review: reqwest sends through the environment's proxy (`HTTP_PROXY`) even to a
/// loopback host, so `--url http://127.0.0.1:…` — plain http allowed because no packet leaves
/// the machine — carried the operator's key in clear text to whatever proxy the shell named.
/// A gateway on this machine is reached directly; the proxy (a listener standing in for a
/// remote one) is never asked.
#[test]
fn a_loopback_gateway_is_reached_directly_not_through_the_environments_proxy() {
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noted = asked.clone();
    std::thread::spawn(move || {
        for mut c in proxy.incoming().flatten() {
            noted.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = c.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let closed = free_port();
    for url in [
        format!("http://127.0.0.1:{closed}"),
        format!("http://localhost:{closed}"),
    ] {
        let out = Command::new(BIN)
            .args(["pending", "--url", &url])
            .env("ASSENT_API_KEY", "alice-key-0123456789abcdef0123456789")
            .env("HTTP_PROXY", &proxy_url)
            .env("http_proxy", &proxy_url)
            .env("ALL_PROXY", &proxy_url)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{url}: {err}");
        assert!(
            !asked.load(std::sync::atomic::Ordering::SeqCst),
            "{url}: the proxy was asked"
        );
    }
}

/// Found by review: the only way to give a key on the command line was `--api-key KEY`, which
/// every user of the machine reads in the process list (`ps`). `--api-key-file FILE` (or
/// `ASSENT_API_KEY_FILE`) reads it from a file instead; a file that holds more than the key
/// (a second line), nothing, or more than 4 KiB is refused naming the file, and a key given
/// both ways is refused rather than one of them picked — all before anything is sent.
#[test]
fn a_key_read_from_a_file_stays_out_of_the_process_list() {
    let s = crate::served("");
    let url = format!("http://127.0.0.1:{}", s.port);
    let file = s.dir.path().join("operator.key");
    std::fs::write(&file, format!("{OP_KEY}\n")).unwrap();
    let pending = |file: &std::path::Path, key: Option<&str>| {
        let mut c = Command::new(BIN);
        c.args(["pending", "--url", &url, "--api-key-file"])
            .arg(file)
            .env_remove("ASSENT_API_KEY");
        if let Some(k) = key {
            c.env("ASSENT_API_KEY", k);
        }
        c.output().unwrap()
    };
    crate::ok(&pending(&file, None));
    let cases: [(&str, String); 3] = [
        ("two lines", format!("{OP_KEY}\nnote: alice's key\n")),
        ("empty", " \n".into()),
        ("too large", "k".repeat(5000)),
    ];
    for (what, text) in cases {
        std::fs::write(&file, text).unwrap();
        let out = pending(&file, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("operator.key"), "{what}: {err}");
    }
    std::fs::write(&file, OP_KEY).unwrap();
    let out = pending(&file, Some(OP_KEY));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("given twice"), "{err}");
    crate::stop(s.server);
}

/// Found by review: the latency probe (`ASSENT_LATENCY_LOG=FILE`, for measurements) opened its
/// file following links and with the default mode, so a gateway run by root with the log in a
/// shared directory appended to whatever file another user linked at that name. The log is made
/// 0600 and never opened through a link: the planted link's target is left as it was, while the
/// same probe at a plain name writes its lines (so the check above would see a write).
#[test]
fn the_latency_log_is_never_written_through_a_link_planted_at_its_name() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "untouched\n").unwrap();
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let plain = dir.path().join("plain.log");
    for log in [&link, &plain] {
        let port = free_port();
        let home = dir.path().join(port.to_string());
        std::fs::create_dir(&home).unwrap();
        let cfg = write_config(&home, port, "");
        let mut cmd = serve_cmd(&cfg);
        cmd.env("ASSENT_LATENCY_LOG", log);
        let s = crate::serve_with(cmd, port);
        // Two proposals half a second apart: the second batch writes out the buffered lines.
        crate::propose(&s.url, 5000);
        std::thread::sleep(std::time::Duration::from_millis(600));
        crate::propose(&s.url, 5000);
        crate::stop(s);
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    let written = std::fs::read_to_string(&plain).unwrap();
    assert!(written.contains("jobs="), "{written}");
    let mode = std::fs::metadata(&plain).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// Attack (found by review): `GET /v1/keys` and `/.well-known/jwks.json` need no key, yet each
/// request ran as a job of the one store executor, taking a place in its batches ahead of the
/// decisions, redemptions and proposals queued with it: a keyless flood thinned every group
/// commit. The key set is built beside the executor: 300 requests make no batch of it (the
/// latency probe logs every batch; one proposal afterwards writes the log out).
#[test]
fn a_keyless_flood_of_key_set_requests_never_reaches_the_store_executor() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("latency.log");
    let port = free_port();
    let cfg = write_config(dir.path(), port, "");
    let mut cmd = serve_cmd(&cfg);
    cmd.env("ASSENT_LATENCY_LOG", &log);
    let s = crate::serve_with(cmd, port);
    let http = reqwest::blocking::Client::new();
    for k in 0..300 {
        let path = ["/v1/keys", "/.well-known/jwks.json"][k % 2];
        let r = http.get(format!("{}{path}", s.url)).send().unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    std::thread::sleep(std::time::Duration::from_millis(600));
    crate::propose(&s.url, 5000);
    crate::stop(s);
    let text = std::fs::read_to_string(&log).unwrap();
    let batches = text.lines().filter(|l| l.starts_with("b ")).count();
    assert!(
        (1..50).contains(&batches),
        "{batches} executor batches for 300 key set requests and one proposal:\n{text}"
    );
}
