//! What the MCP front ends build before a bound is checked, and how long they take to let go:
//! a line too heavy to parse (from the client or the upstream) is refused unread, an
//! operator's edit cannot push the stdio proxy's held bytes past their bound, and the stdio
//! hub withdraws a vanished client's held calls side by side, not one after the other.

use crate::hub_kit::{
    end, hub_command, hub_gateway, hub_gateway_with, memory, py_list, py_text, py_upstream, within,
};
use crate::mcp_held_settle::{KEY, answer, stdio_proxy};
use crate::spawn_piped;
use serde_json::{Value, json};
use std::io::Write;
use std::time::{Duration, Instant};

/// What the proxy's peak memory may reach in these tests: 200 MiB (a line of 16 MiB of zeros
/// parsed took some 0.5 GiB).
const PEAK: usize = 200 << 20;

/// Attack (memory, found by review): a client sends one line of nearly 16 MiB (within the line
/// bound) whose arguments are `[0,0,…]`, which the proxy parsed whole before weighing it: some
/// 0.5 GiB. Weighed first, it is refused unread under its own id (`-32600`, naming the bound)
/// and the proxy's peak memory stays under 200 MiB; a legitimate call of 10 MiB (a string: its
/// weight within the bound) still runs.
#[test]
fn a_client_line_of_16_mib_of_zeros_is_refused_unparsed_and_the_proxy_stays_small() {
    let source = py_upstream(&py_list(&["read"]), &py_text("done"));
    let (_gw, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[read]"), &source)],
        "max_arguments_bytes: 16777216\n",
    );
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let zeros = format!("[{}0]", "0,".repeat((8 << 20) - 1000));
    let heavy = format!(
        r#"{{"jsonrpc":"2.0","id":"heavy","method":"tools/call","params":{{"name":"read","arguments":{{"a":{zeros}}}}}}}"#
    );
    assert!(heavy.len() < 16 << 20, "{}", heavy.len());
    writeln!(stdin, "{heavy}").unwrap();
    drop((heavy, zeros));
    let r = answer(&lines, &json!("heavy"));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let why = r["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("refused unread"), "{r}");
    let (_, peak) = memory(proxy.id());
    assert!(peak < PEAK, "the proxy peaked at {} MiB", peak >> 20);
    let big = json!({"jsonrpc": "2.0", "id": "big", "method": "tools/call",
                     "params": {"name": "read", "arguments": {"s": "x".repeat(10 << 20)}}});
    writeln!(stdin, "{big}").unwrap();
    let r = answer(&lines, &json!("big"));
    assert!(r.to_string().contains("done"), "{r:.300}");
    end(proxy, stdin);
}

/// Attack (memory, found by review): an upstream answers a forwarded call with one line of
/// nearly 16 MiB of `[0,0,…]`, which the proxy parsed whole (some 0.5 GiB) before anything
/// bounded it. Weighed first, it is refused unread: the client gets a JSON-RPC error under its
/// call's id naming the bound, and the proxy's peak memory stays under 200 MiB.
#[test]
fn an_upstream_result_of_16_mib_of_zeros_is_refused_unparsed_and_the_proxy_stays_small() {
    let call = r#"        print(json.dumps({"jsonrpc":"2.0","id":i,"result":{"content":[],"z":[0]*((8<<20)-1000)}},separators=(",",":")),flush=True); continue"#;
    let source = py_upstream(&py_list(&["zeros"]), call);
    let (_gw, server) = hub_gateway(KEY, &[("up", Some("[zeros]"), &source)]);
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let call = json!({"jsonrpc": "2.0", "id": "z", "method": "tools/call",
                      "params": {"name": "zeros", "arguments": {}}});
    writeln!(stdin, "{call}").unwrap();
    let r = answer(&lines, &json!("z"));
    assert_eq!(r["error"]["code"], -32603, "{r:.300}");
    let why = r["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("refused unread"), "{r:.300}");
    let (_, peak) = memory(proxy.id());
    assert!(peak < PEAK, "the proxy peaked at {} MiB", peak >> 20);
    end(proxy, stdin);
}

/// Attack (memory, found by review): an operator's edit grew a held call as it was forwarded,
/// and the proxy counted the edited arguments whatever the total, so edits pushed the bytes
/// held for calls in flight past their 64 MiB bound. A call holding some 57 MiB (zeros) and a
/// small one are held; the small one approved with 8 MiB of edited arguments would pass the
/// bound beside the first: it is not run, its client told why (`-32000`), and it is recorded
/// as not run.
#[test]
fn an_operators_edit_past_the_held_bytes_bound_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let call = format!(
        "        open({mark:?},'a').write('x\\n')\n{}",
        py_text("done")
    );
    let source = py_upstream(&py_list(&["echo"]), &call);
    let (_gw, server) = hub_gateway_with(
        KEY,
        &[("up", Some("[{name: echo, approval: true}]"), &source)],
        "max_arguments_bytes: 16777216\n",
    );
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let zeros = format!("[{}0]", "0,".repeat(900_000));
    let first = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"z":{zeros}}}}}}}"#
    );
    writeln!(stdin, "{first}").unwrap();
    // Held one after the other, so that the small one is the newest (listed first).
    let pending = || {
        let list = crate::get_op(&server.url, "/v1/approvals?status=pending&limit=1");
        list["approvals"][0]["id"].as_str().map(str::to_string)
    };
    let zeros_held = within(120, "the call of zeros was never held", pending);
    let small = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"n": 2}}});
    writeln!(stdin, "{small}").unwrap();
    let id = within(60, "the small call was never held", || {
        pending().filter(|id| *id != zeros_held)
    });
    let edit = json!({"decision": "approve", "arguments": {"s": "x".repeat(8 << 20)}});
    let decided = reqwest::blocking::Client::new()
        .post(format!("{}/v1/approvals/{id}/decision", server.url))
        .bearer_auth(crate::OP_KEY)
        .json(&edit)
        .send()
        .unwrap();
    assert!(decided.status().is_success(), "{:?}", decided.text());
    let r = answer(&lines, &json!(2));
    assert_eq!(r["error"]["code"], -32000, "{r:.300}");
    let why = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("as approved") && why.contains("not run"),
        "{r:.300}"
    );
    assert!(!mark.exists(), "the upstream ran the edited call");
    end(proxy, stdin);
}

/// A child process killed (and reaped) when dropped, a test's panic included.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An HTTP proxy (Python) in front of the gateway at `url` that holds every withdrawal
/// (`POST …/cancel`) 2 s before passing it on: a slow gateway. Its process and URL.
fn slow_withdrawals(url: &str) -> (KillOnDrop, String) {
    let source = r#"import sys,time,urllib.request,urllib.error
from http.server import ThreadingHTTPServer,BaseHTTPRequestHandler
up=sys.argv[1]
class H(BaseHTTPRequestHandler):
    def log_message(self,*a): pass
    def go(self):
        n=int(self.headers.get("content-length") or 0)
        body=self.rfile.read(n) if n else None
        if self.path.split("?")[0].endswith("/cancel"): time.sleep(2)
        req=urllib.request.Request(up+self.path,data=body,method=self.command)
        for k in ("authorization","content-type","accept"):
            if self.headers.get(k): req.add_header(k,self.headers[k])
        try: r=urllib.request.urlopen(req,timeout=120); code=r.status
        except urllib.error.HTTPError as e: r=e; code=e.code
        data=r.read()
        self.send_response(code)
        self.send_header("content-type",r.headers.get("content-type","application/json"))
        self.send_header("content-length",str(len(data)))
        self.end_headers(); self.wfile.write(data)
    do_GET=go; do_POST=go; do_PUT=go; do_DELETE=go
s=ThreadingHTTPServer(("127.0.0.1",0),H)
print(s.server_address[1],flush=True)
s.serve_forever()
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", source, url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut port,
    )
    .unwrap();
    let url = format!("http://127.0.0.1:{}", port.trim());
    (KillOnDrop(child), url)
}

/// Attack (on availability, found by review): the stdio hub withdrew a vanished client's held
/// calls one after the other, each a gateway request, so with many held calls (and a slow
/// gateway: 2 s a withdrawal here) the last stayed open to an operator's approval for N round
/// trips — 16 s for 8 calls. They are withdrawn side by side: all 8 within 9 s.
#[test]
fn a_stdio_hub_client_gone_with_many_held_calls_has_them_withdrawn_side_by_side() {
    let list = r#"        r={"tools":[{"name":"pay","description":"pay.","inputSchema":{"type":"object"}}]}"#;
    let source = py_upstream(list, &py_text("paid"));
    let (dir, server) = hub_gateway(
        KEY,
        &[("bank", Some("[{name: pay, approval: true}]"), &source)],
    );
    let (slow, slow_url) = slow_withdrawals(&server.url);
    let mut cmd = hub_command(&server.url, KEY, dir.path());
    cmd.env("ASSENT_URL", &slow_url);
    let (mut hub, mut stdin, out) = spawn_piped(&mut cmd);
    let lines = crate::hub_kit::lines_of(out);
    crate::mcp_held_settle::handshake(&mut stdin, &lines);
    let n = 8;
    for i in 0..n {
        let call = json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                          "params": {"name": "bank__pay", "arguments": {"n": i}}});
        writeln!(stdin, "{call}").unwrap();
    }
    let pending = |status: &str| -> Vec<Value> {
        let list = crate::get_op(&server.url, &format!("/v1/approvals?status={status}"));
        list["approvals"].as_array().cloned().unwrap_or_default()
    };
    within(60, "the calls were never all held", || {
        (pending("pending").len() == n).then_some(())
    });
    let gone = Instant::now();
    drop(stdin);
    within(
        9,
        "the held calls were not all withdrawn within 9 s",
        || (pending("cancelled").len() == n).then_some(()),
    );
    let took = gone.elapsed();
    assert!(took < Duration::from_secs(9), "{took:?}");
    within(60, "the hub never ended", || hub.try_wait().unwrap());
    drop(slow);
    drop(server);
}

/// Found by review (availability, and a result lost after its tool ran): the line weight
/// charged 64 bytes an escape, so a tool's text result of pretty-printed JSON (all `\"` and
/// `\n`) of some 7 MiB weighed past the 64 MiB bound and the proxy answered `-32603` although
/// the tool had run. A string weighs its bytes and one value: the client gets the whole
/// result and the gateway records it.
#[test]
fn an_upstream_result_of_7_mib_of_json_as_text_is_relayed_not_refused() {
    let call = r#"        big=json.dumps({"rows":[{"id":k,"name":"row %d"%k,"tags":["a","b"],"ok":True} for k in range(50000)]},indent=2)
        r={"content":[{"type":"text","text":big}]}"#;
    let source = py_upstream(&py_list(&["dump"]), call);
    let (gw, server) = hub_gateway(KEY, &[("up", Some("[dump]"), &source)]);
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let call = json!({"jsonrpc": "2.0", "id": "dump", "method": "tools/call",
                      "params": {"name": "dump", "arguments": {}}});
    writeln!(stdin, "{call}").unwrap();
    let r = answer(&lines, &json!("dump"));
    assert!(r.get("error").is_none(), "{r:.300}");
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let rows: Value = serde_json::from_str(text).unwrap();
    assert_eq!(rows["rows"][49999]["name"], "row 49999", "{r:.300}");
    let line = r.to_string().len();
    assert!(line > 7 << 20, "{line}");
    let escapes = r.to_string().matches('\\').count();
    assert!(escapes * 64 > 64 << 20, "{escapes} escapes");
    let recorded = within(20, "the result was never recorded", || {
        crate::hub_kit::call_results(gw.path()).pop()
    });
    let relayed = crate::hex_sha256(&r["result"].to_string());
    assert_eq!(recorded["result_sha256"], relayed, "{recorded}");
    end(proxy, stdin);
}

/// The upstream's line for a `tools/call` echoed back as the call's text (`py_upstream`).
const ECHO: &str = r#"        r={"content":[{"type":"text","text":line}]}"#;

/// The arguments the upstream received, as the text it read, from its echo in `said`.
fn received_arguments(said: &Value) -> String {
    let text = said.to_string();
    let line = said["result"]["content"][0]["text"]
        .as_str()
        .or_else(|| said["content"][0]["text"].as_str())
        .unwrap_or_else(|| panic!("no echo in {text}"));
    let at = line.find(r#""arguments":"#).expect("arguments sent");
    let rest = &line[at + r#""arguments":"#.len()..];
    rest[..=rest.find('}').expect("an object")].to_string()
}

/// Attack (found by review): a client spells a number so that its value hashes as the
/// approver saw it but its type does not reach the upstream so — `-0` (shown `0`, sent `-0.0`,
/// a float to a Python or Go tool), `1.0` and `1e2` (shown `1` and `100`, sent as floats).
/// The stdio proxy and the hub send the arguments spelt as the `call_hash` reads them.
#[test]
fn an_upstream_gets_the_numbers_spelt_as_the_approver_saw_them() {
    let source = py_upstream(&py_list(&["read"]), ECHO);
    let (_gw, server) = hub_gateway(KEY, &[("up", Some("[read]"), &source)]);
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let call = r#"{"jsonrpc":"2.0","id":"n","method":"tools/call","params":{"name":"read","arguments":{"a":-0,"b":1.0,"c":1e2,"d":1.5}}}"#;
    writeln!(stdin, "{call}").unwrap();
    let r = answer(&lines, &json!("n"));
    assert_eq!(
        received_arguments(&r),
        r#"{"a":0,"b":1,"c":100,"d":1.5}"#,
        "{r}"
    );
    end(proxy, stdin);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let args = json!({"a": -0.0, "b": 1.0, "d": 1.5});
    let call = rmcp::model::CallToolRequestParams::new("up__read")
        .with_arguments(args.as_object().unwrap().clone());
    let said = crate::hub_kit::hub_call(&rt, &server.url, KEY, call);
    assert_eq!(
        received_arguments(&said),
        r#"{"a":0,"b":1,"d":1.5}"#,
        "{said}"
    );
}

/// Attack (found by review): the upstream — the party being gated — inherited the proxy's
/// environment, the agent's key (`ASSENT_API_KEY`) with it, so it could approve its own held
/// calls in the client, redeem tokens and read the agent's approvals. It starts without it.
#[test]
fn the_upstream_does_not_get_the_agents_key() {
    let call = r#"        r={"content":[{"type":"text","text":"key="+__import__("os").environ.get("ASSENT_API_KEY","")+";"}]}"#;
    let source = py_upstream(&py_list(&["read"]), call);
    let (_gw, server) = hub_gateway(KEY, &[("up", Some("[read]"), &source)]);
    let (proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let call = json!({"jsonrpc": "2.0", "id": "k", "method": "tools/call",
                      "params": {"name": "read", "arguments": {}}});
    writeln!(stdin, "{call}").unwrap();
    let r = answer(&lines, &json!("k"));
    assert!(r.to_string().contains("key=;"), "{r}");
    assert!(!r.to_string().contains(KEY), "{r}");
    end(proxy, stdin);
}

/// Attack (found by review): a stdio upstream started by `assent serve` inherited the
/// gateway's whole environment, an operator's key (`key_env`) among it, so the party being
/// gated could decide its own held calls as that operator. The variables the config names as
/// holding secrets are withheld; an upstream's own `env` still reaches it.
#[test]
fn a_hub_upstream_does_not_get_the_gateways_secrets() {
    let call = r#"        r={"content":[{"type":"text","text":"op="+__import__("os").environ.get("TEST_ALICE_KEY","")+";own="+__import__("os").environ.get("OWN","")+";"}]}"#;
    let source = py_upstream(&py_list(&["read"]), call);
    let command = serde_json::to_string(&json!(["python3", "-c", source])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = crate::free_port();
    let agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [read]\n";
    let extra = format!("mcp_upstreams:\n  up: {{command: {command}, env: {{OWN: given}}}}\n");
    let cfg = crate::write_agent_config(dir.path(), port, (agent, KEY), &extra);
    let server = crate::serve(&cfg, port);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let said = crate::hub_kit::hub_call(
        &rt,
        &server.url,
        KEY,
        rmcp::model::CallToolRequestParams::new("up__read"),
    );
    assert!(said.to_string().contains("op=;own=given;"), "{said}");
    assert!(!said.to_string().contains(crate::OP_KEY), "{said}");
}
