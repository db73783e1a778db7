//! `assent mcp` and `mcp_upstreams` through the real binary: the stdio proxy forwards nothing
//! it could not gate nor relays a result it could not record, and a URL upstream gets its
//! bearer token, which is never logged.

use crate::{BIN, free_port, serve_cmd, spawn_piped, wait_healthy};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_mcp_proxy_forwards_nothing_it_could_not_gate() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.log");
    // An upstream that records every line it receives and answers requests with an empty result.
    let upstream = format!(
        "import json,sys\nlog=open({:?},'a')\nfor line in sys.stdin:\n    log.write(line); log.flush()\n    try:\n        m=json.loads(line)\n    except Exception:\n        continue\n    if isinstance(m,dict) and 'id' in m:\n        print(json.dumps({{'jsonrpc':'2.0','id':m['id'],'result':{{}}}}), flush=True)\n",
        seen.display().to_string()
    );
    let (mut child, mut stdin, mut out) = spawn_piped(
        Command::new(BIN)
            .args([
                "mcp", "--agent", "a", "--server", "s", "--", "python3", "-c", &upstream,
            ])
            .env("ASSENT_URL", format!("http://127.0.0.1:{}", free_port()))
            .env("ASSENT_API_KEY", "k"),
    );
    let lines = [
        // Python's json accepts NaN, serde_json does not: must not reach the upstream.
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"w","arguments":{"x":NaN}}}"#,
        r#"[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"w","arguments":{}}}]"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"w","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"w","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
    ];
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    let mut replies = Vec::new();
    for _ in 0..4 {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        replies.push(serde_json::from_str::<Value>(&l).unwrap());
    }
    drop(stdin);
    child.wait().unwrap();
    let by_id = |id: Value| {
        replies
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(by_id(json!(4))["result"], json!({}), "{replies:?}");
    let denied = by_id(json!(3));
    assert_eq!(denied["result"]["isError"], true);
    assert!(
        denied["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("TOOL_DENIED:")
    );
    assert_eq!(
        replies
            .iter()
            .filter(|r| r["error"]["code"] == -32700 || r["error"]["code"] == -32600)
            .count(),
        2,
        "{replies:?}"
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(
        seen.lines()
            .filter(|l| !l.contains("\"id\":\"assent-pins-"))
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>(),
        vec![serde_json::from_str::<Value>(lines[4]).unwrap()],
        "the upstream saw only the ping (and the proxy's own tools/list): {seen}"
    );
}

#[test]
fn a_url_upstream_gets_its_bearer_token_which_is_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("auth.log");
    let up_port = free_port();
    // An upstream that records the Authorization header of every request and refuses it.
    let script = format!(
        "import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n    def do_POST(self):\n        open({:?},'a').write(str(self.headers.get('Authorization'))+'\\n')\n        self.send_response(401); self.end_headers()\n    do_GET = do_POST\n    def log_message(self, *a): pass\nhttp.server.HTTPServer(('127.0.0.1', {up_port}), H).serve_forever()\n",
        seen.display().to_string()
    );
    let mut upstream = Command::new("python3")
        .args(["-c", &script])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", up_port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "upstream did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let port = free_port();
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(
        &cfg,
        format!("listen: 127.0.0.1:{port}\ndata_dir: data\nmcp_upstreams:\n  remote: {{url: \"http://127.0.0.1:{up_port}/mcp\", bearer_token_env: TEST_UPSTREAM_TOKEN}}\n"),
    )
    .unwrap();
    // Unset: start-up stops naming the variable.
    let out = serve_cmd(&cfg)
        .env_remove("TEST_UPSTREAM_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("bearer_token_env `TEST_UPSTREAM_TOKEN` is not set")
    );
    // Set: the upstream receives it; the gateway keeps running without that upstream.
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let mut child = serve_cmd(&cfg)
        .env("TEST_UPSTREAM_TOKEN", "sekret-upstream-token")
        .env("ASSENT_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    wait_healthy(&url, Duration::from_secs(40), Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    upstream.kill().unwrap();
    upstream.wait().unwrap();
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert!(
        seen.lines().next() == Some("Bearer sekret-upstream-token"),
        "{seen}"
    );
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(
        log.contains("remote") && log.contains("failed to start"),
        "{log}"
    );
    assert!(
        !log.contains("sekret-upstream-token"),
        "the token was logged: {log}"
    );
}

/// Issue 13 §4: no answer before its record is durable. A forwarded call's result reaches the
/// client only once its `call.result` record is committed; when the gateway cannot record it
/// (here: killed while the upstream works), the result is withheld, never relayed unrecorded.
#[test]
fn a_result_the_gateway_could_not_record_is_withheld_from_the_client() {
    use std::io::{BufRead, Write};
    let s = crate::served("");
    let dir = tempfile::tempdir().unwrap();
    let (go, forwarded) = (dir.path().join("go"), dir.path().join("forwarded"));
    // An upstream with `read_file`; a call is answered only once the file `go` exists.
    let upstream = format!(
        r#"import json, os, sys, time
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m: continue
    r = {{}}
    if m["method"] == "tools/list":
        r = {{"tools": [{{"name": "read_file", "description": "Read a file.", "inputSchema": {{"type": "object"}}}}]}}
    elif m["method"] == "tools/call":
        open({forwarded:?}, "w").close()
        while not os.path.exists({go:?}): time.sleep(0.02)
        r = {{"content": [{{"type": "text", "text": "secret contents"}}]}}
    print(json.dumps({{"jsonrpc": "2.0", "id": m["id"], "result": r}}), flush=True)
"#,
        go = go.display().to_string(),
        forwarded = forwarded.display().to_string()
    );
    let (mut proxy, mut stdin, mut out) = spawn_piped(
        Command::new(BIN)
            .args([
                "mcp", "--agent", "fs_agent", "--server", "fs", "--", "python3", "-c",
            ])
            .arg(&upstream)
            .env("ASSENT_URL", &s.server.url)
            .env("ASSENT_API_KEY", crate::FS_KEY),
    );
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "read_file", "arguments": {"path": "/tmp/a.txt"}}});
    writeln!(stdin, "{call}").unwrap();
    // The call is allowed and forwarded (its call.allowed record committed); then the gateway
    // goes away before the result comes back.
    let mut gw = s.server;
    let start = Instant::now();
    while !forwarded.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "never forwarded");
        std::thread::sleep(Duration::from_millis(20));
    }
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    std::fs::write(&go, "").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], 7, "{v}");
    let text = v.to_string();
    assert!(text.contains("result withheld"), "{v}");
    assert!(
        !text.contains("secret contents"),
        "an unrecorded result reached the client: {v}"
    );
    proxy.kill().unwrap();
    proxy.wait().unwrap();
}

/// Issue 14 §2: `assent mcp --on-behalf-of NAME` (or `ASSENT_ON_BEHALF_OF`) sends the person
/// the agent acts for with every call, so separation of duties can refuse their approval.
#[test]
fn the_proxy_names_the_person_it_acts_for_on_every_call() {
    use std::io::Write;
    let s = crate::served("");
    let upstream = r#"import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m: continue
    r = {"tools": [{"name": "write_file", "description": "Write.", "inputSchema": {"type": "object"}}]}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
"#;
    let (mut proxy, mut stdin, _out) = spawn_piped(
        Command::new(BIN)
            .args([
                "mcp", "--agent", "fs_agent", "--server", "fs", "--", "python3", "-c",
            ])
            .arg(upstream)
            .env("ASSENT_URL", &s.server.url)
            .env("ASSENT_API_KEY", crate::FS_KEY)
            .env("ASSENT_ON_BEHALF_OF", "alice"),
    );
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "/tmp/x", "content": "y"}}});
    writeln!(stdin, "{call}").unwrap();
    let start = Instant::now();
    let held = loop {
        let list = crate::get_op(&s.server.url, "/v1/approvals?status=pending");
        if let Some(a) = list["approvals"].as_array().and_then(|l| l.first()) {
            break a.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never held: {list}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(held["on_behalf_of"], "alice", "{held}");
    proxy.kill().unwrap();
    proxy.wait().unwrap();
}

/// Attack (found by review): a `url` upstream whose URL carries its secret in the query
/// (`?token=…`, which the configuration's own messages hide) and which cannot be reached: the
/// HTTP client's error, logged as why the upstream failed to start, spelt the whole URL.
#[test]
fn an_unreachable_url_upstreams_query_token_is_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let (port, down) = (free_port(), free_port());
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(
        &cfg,
        format!("listen: 127.0.0.1:{port}\ndata_dir: data\nmcp_upstreams:\n  remote: {{url: \"http://127.0.0.1:{down}/mcp?token=SECRETQUERY\"}}\n"),
    )
    .unwrap();
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = serve_cmd(&cfg)
        .env("ASSENT_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_healthy(
        &format!("http://127.0.0.1:{port}"),
        Duration::from_secs(40),
        Duration::from_millis(100),
    );
    let start = Instant::now();
    let failed = || {
        std::fs::read_to_string(&log_path)
            .unwrap()
            .contains("failed to start")
    };
    while !failed() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("remote") && log.contains("failed to start"),
        "{log}"
    );
    assert!(
        !log.contains("SECRETQUERY"),
        "the query token was logged: {log}"
    );
}
