//! The stdio proxy (`assent mcp`, the real binary against a real gateway) when a call is
//! stopped or its tools cannot be checked: a cancelled resumed task never runs its approved
//! call, a call reusing a cancelled call's id is its own, the pin check's paging of a
//! misbehaving upstream's `tools/list` is bounded (a cursor given twice, pages without end, a
//! list paged past its deadline) and fails closed, an endless client line is refused, and a
//! flood of made-up task names resumes no more than the bound.

use crate::{BIN, cli, get_op, ok, spawn_piped};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const KEY: &str = "relay-cancel-agent-key-0123456789abc";

/// Agent `helper` on server `up`: `read` (no approval) and `echo` (always held).
const AGENT: &str = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [read, {name: echo, approval: true}]\n";

/// `echo` waits for operators (`ops`).
const RULES: &str = "- tool: echo\n  approvers: [ops]\n";

/// The upstream (Python), logging every line it receives to `log`: tools `echo` and `read`
/// (answered `Echo: MESSAGE` and `small`). Its `tools/list`, by `mode`: `plain` (one page);
/// `repeat` (every page names cursor `1` next); `endless` (every page names a fresh cursor
/// next); `slow` (as `endless`, each page answered after 0.4 s); `huge` (as `endless`, each
/// page's tool described in 1 MiB); `cursor` (no tools, each page's next cursor 1 MiB long).
fn upstream(log: &std::path::Path, mode: &str) -> String {
    format!(
        r#"import json,sys,time
mode={mode:?}
log=open({log:?},'a')
def out(m): print(json.dumps(m), flush=True)
tools=[{{"name":n,"description":"d","inputSchema":{{"type":"object"}}}} for n in ("echo","read")]
for line in sys.stdin:
    log.write(line); log.flush()
    m=json.loads(line)
    if "method" not in m or "id" not in m: continue
    i=m["id"]; meth=m["method"]
    def answer(r): out({{"jsonrpc":"2.0","id":i,"result":r}})
    if meth=="initialize":
        answer({{"protocolVersion":"2025-06-18","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"up","version":"1"}}}})
    elif meth=="tools/list" and mode=="plain":
        answer({{"tools":tools}})
    elif meth=="tools/list":
        n=int(((m.get("params") or {{}}).get("cursor") or "0").split("-")[0])
        if mode=="slow": time.sleep(0.4)
        d="x"*(1<<20) if mode=="huge" else "d"
        nxt="1" if mode=="repeat" else str(n+1)
        if mode=="cursor": answer({{"tools":[],"nextCursor":nxt+"-"+"x"*(1<<20)}})
        else: answer({{"tools":[{{"name":"t%d"%n,"description":d,"inputSchema":{{"type":"object"}}}}],"nextCursor":nxt}})
    elif meth=="tools/call" and m["params"]["name"]=="read":
        answer({{"content":[{{"type":"text","text":"small"}}]}})
    elif meth=="tools/call":
        answer({{"content":[{{"type":"text","text":"Echo: "+m["params"]["arguments"]["message"]}}]}})
    else:
        answer({{}})
"#
    )
}

/// A gateway for agent `helper`, and its directory.
struct Gateway {
    dir: tempfile::TempDir,
    server: crate::Server,
}

impl Gateway {
    fn start() -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let server = crate::serve_helper(
            dir.path(),
            (AGENT, KEY),
            ("acme.test.relay-cancel-v1", RULES),
        );
        Gateway { dir, server }
    }

    fn url(&self) -> &str {
        &self.server.url
    }

    /// Approval `id` as an operator reads it once it has left `pending` (polled for up to
    /// 20 s).
    fn settled(&self, id: &str) -> Value {
        let start = Instant::now();
        loop {
            let a = get_op(self.url(), &format!("/v1/approvals/{id}"));
            if a["status"] != "pending" {
                return a;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "{a}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A call of `echo` with `message` proposed by the agent itself (as through a proxy of a
    /// connection that is gone): its approval id.
    fn propose_echo(&self, message: &str) -> String {
        let held: Value = reqwest::blocking::Client::new()
            .post(format!("{}/v1/tool-calls", self.url()))
            .bearer_auth(KEY)
            .json(
                &json!({"agent": "helper", "session_id": "gone", "tool": "echo",
                          "server": "up", "arguments": {"message": message}}),
            )
            .send()
            .unwrap()
            .json()
            .unwrap();
        held["approval_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{held}"))
            .to_string()
    }

    /// The one pending approval of `echo` (polled for up to 20 s).
    fn pending_echo(&self) -> Value {
        let start = Instant::now();
        loop {
            let list = get_op(self.url(), "/v1/approvals?status=pending");
            let found = list["approvals"]
                .as_array()
                .and_then(|l| l.iter().find(|a| a["call"]["tool"] == "echo").cloned());
            if let Some(a) = found {
                return a;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "never held");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The proxy (as its client) in front of [`upstream`] in `mode`, which logs to a file of its
/// own in the gateway's directory.
struct Proxy {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    /// Every message the client received so far.
    seen: Vec<Value>,
    log: PathBuf,
}

impl Proxy {
    fn start(gw: &Gateway, mode: &str) -> Proxy {
        let log = gw.dir.path().join(format!("up-{mode}.log"));
        let (child, stdin, mut out) = spawn_piped(
            Command::new(BIN)
                .args(["mcp", "--agent", "helper", "--server", "up", "--"])
                .args(["python3", "-c", &upstream(&log, mode)])
                .env("ASSENT_URL", gw.url())
                .env("ASSENT_API_KEY", KEY),
        );
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut l = String::new();
            while out.read_line(&mut l).unwrap_or(0) > 0 {
                if tx.send(serde_json::from_str(&l).unwrap()).is_err() {
                    break;
                }
                l.clear();
            }
        });
        Proxy {
            child,
            stdin: Some(stdin),
            lines,
            seen: Vec::new(),
            log,
        }
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin.as_mut().unwrap(), "{v}").unwrap();
    }

    /// Reads messages (keeping each in `seen`) until one matches `pred`, which it returns;
    /// fails the test when none came within 60 s.
    fn recv(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let left = Duration::from_secs(60).saturating_sub(start.elapsed());
            let m = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer ({e}); seen: {:?}", self.seen));
            self.seen.push(m.clone());
            if pred(&m) {
                return m;
            }
        }
    }

    /// Sends request `method` with `params` under `id` and returns its answer.
    fn ask(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.recv(|m| m["id"] == id && m.get("method").is_none())
    }

    /// Calls `read` under `id`: the answer.
    fn call_read(&mut self, id: i64) -> Value {
        self.ask(
            json!(id),
            "tools/call",
            json!({"name": "read", "arguments": {}}),
        )
    }

    /// `initialize` (legacy era), answered; `notifications/initialized` too unless `only`.
    fn initialize(&mut self, only: bool) {
        let init = self.ask(
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}),
        );
        assert!(init["result"].is_object(), "{init}");
        if !only {
            self.initialized();
        }
    }

    fn initialized(&mut self) {
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// What the upstream was sent so far (one JSON message a line).
    fn upstream_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The number of `tools/list` requests the upstream was sent so far.
    fn lists_sent(&self) -> usize {
        self.upstream_log().matches("\"tools/list\"").count()
    }

    /// Closes the proxy's stdin and waits for it to exit (killed after 10 s): what the
    /// upstream was sent.
    fn stop(mut self) -> String {
        drop(self.stdin.take());
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.upstream_log()
    }
}

/// The text of a `tools/call` answer `m`.
fn text(m: &Value) -> String {
    m["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The status of the proxy's task `task`, polled (up to 20 s) until it has left `working`.
fn settled_task(p: &mut Proxy, task: &str, n: &mut i64) -> Value {
    let start = Instant::now();
    loop {
        *n += 1;
        let got = p.ask(json!(*n), "tasks/get", json!({"taskId": task}));
        if got["result"]["status"] != "working" {
            return got["result"]["status"].clone();
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{got}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Review finding: `tasks/cancel` of a task resumed from the gateway (`approval-ID`, made
/// through a connection that is gone) only asked the gateway to withdraw its approval — an
/// approval decided already stays so — and the task's call went on: it was redeemed and
/// forwarded once it passed its pin check. Cancelling it now stops it as a cancel stops a
/// held call: it is never forwarded, the task ends cancelled, and a pending approval is
/// withdrawn with the task's reason. Here the proxy has not been sent `initialized`, so the
/// pin check waits, and the resumed calls with it, until after the cancels.
#[test]
fn cancelling_a_resumed_task_stops_its_call_even_once_approved() {
    let gw = Gateway::start();
    let mut p = Proxy::start(&gw, "plain");
    p.initialize(true);
    let approved = gw.propose_echo("approved-from-a-gone-connection");
    ok(&cli(gw.url(), &["approve", &approved]));
    let pending = gw.propose_echo("pending-from-a-gone-connection");
    let mut n = 100;
    for id in [&approved, &pending] {
        let task = format!("approval-{id}");
        n += 1;
        let got = p.ask(json!(n), "tasks/get", json!({"taskId": task}));
        assert_eq!(got["result"]["status"], "working", "{got}");
        n += 1;
        let cancelled = p.ask(json!(n), "tasks/cancel", json!({"taskId": task}));
        assert!(cancelled.get("error").is_none(), "{cancelled}");
        assert_eq!(settled_task(&mut p, &task, &mut n), "cancelled");
    }
    // The pin check runs now (a call waits for it): a resumed call still going would pass it,
    // redeem its token and be forwarded.
    p.initialized();
    let read = p.call_read(1);
    assert_eq!(text(&read), "small", "{read}");
    std::thread::sleep(Duration::from_millis(1500));
    p.ask(json!(2), "ping", json!({}));
    let task = format!("approval-{approved}");
    assert_eq!(settled_task(&mut p, &task, &mut n), "cancelled");
    let withdrawn = gw.settled(&pending);
    assert_eq!(withdrawn["status"], "cancelled", "{withdrawn}");
    assert!(
        withdrawn
            .to_string()
            .contains("the MCP client cancelled the task"),
        "{withdrawn}"
    );
    let log = p.stop();
    assert!(!log.contains("from-a-gone-connection"), "{log}");
}

/// Review finding: a client's `notifications/cancelled` removed the call's entry from the
/// relay's table of waiting calls itself, so a new request reusing the id right after could
/// be let in while the cancelled call's job was still forwarding it, and the answer to one
/// call was recorded and held as the other's (a window of microseconds, which the relay's
/// own tests hold open: `a_cancelled_calls_id_stays_in_use_until_its_job_lets_go`). The
/// cancel only stops the call: its id is refused as in flight until the call's job let go of
/// it, then free; the new call's answer is its own, recorded as its own, and the cancelled
/// call never runs, its approval withdrawn.
#[test]
fn a_call_reusing_a_cancelled_calls_id_gets_its_own_answer() {
    let gw = Gateway::start();
    let mut p = Proxy::start(&gw, "plain");
    p.initialize(false);
    p.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                  "params": {"name": "echo", "arguments": {"message": "cancelled-call"}}}));
    let held = gw.pending_echo();
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "read", "arguments": {"path": "/a"}}});
    p.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 5, "reason": "changed my mind"}}),
    );
    p.send(call.clone());
    let start = Instant::now();
    let answer = loop {
        let m = p.recv(|m| m["id"] == 5);
        if m["error"]["code"] != -32600 {
            break m;
        }
        assert!(m.to_string().contains("in flight"), "{m}");
        assert!(start.elapsed() < Duration::from_secs(20), "never let in");
        std::thread::sleep(Duration::from_millis(20));
        p.send(call.clone());
    };
    assert_eq!(text(&answer), "small", "{answer}");
    let withdrawn = gw.settled(held["id"].as_str().unwrap());
    assert_eq!(withdrawn["status"], "cancelled", "{withdrawn}");
    assert!(
        withdrawn
            .to_string()
            .contains("the MCP client cancelled the request"),
        "{withdrawn}"
    );
    let log = p.stop();
    assert!(!log.contains("cancelled-call"), "{log}");
    let recorded = Command::new("sqlite3")
        .arg(gw.dir.path().join("data/assent.db"))
        .arg("SELECT data FROM audit WHERE kind = 'call.result';")
        .output()
        .unwrap();
    let recorded: Value = serde_json::from_str(&ok(&recorded)).unwrap();
    assert_eq!(recorded["tool"], "read", "{recorded}");
    let relayed = crate::hex_sha256(&answer["result"].to_string());
    assert_eq!(recorded["result_sha256"], relayed, "{recorded}");
}

/// Review finding: the pin check paged the upstream's `tools/list` with no bound on pages and
/// no check of its cursors, so an upstream naming the same cursor again, or a fresh one every
/// time, was paged for as long as it answered, and one page of up to 16 MiB after another was
/// held until the end. The check fails closed — every call is denied, naming why — on a
/// cursor given twice, after the hub's bound of 1,000 pages, and past 32 MiB of tool
/// definitions; no page more is asked for after that.
#[test]
fn a_pin_check_stops_at_a_repeated_cursor_or_after_1000_pages() {
    let gw = Gateway::start();
    for (mode, why, pages) in [
        ("repeat", "tools/list repeats a cursor", 2),
        ("endless", "tools/list has more than 1000 pages", 1000),
        ("huge", "bytes of tool definitions", 32),
        ("cursor", "bytes of tool definitions", 32),
    ] {
        let mut p = Proxy::start(&gw, mode);
        p.initialize(false);
        let call = p.call_read(1);
        let said = text(&call);
        assert!(
            said.starts_with("TOOL_DENIED:") && said.contains(why),
            "{call}"
        );
        std::thread::sleep(Duration::from_millis(300));
        p.ask(json!(2), "ping", json!({}));
        assert_eq!(p.lists_sent(), pages, "{mode}");
        p.stop();
    }
}

/// Review finding: the pin check had no deadline of its own: calls waiting for it failed
/// after 30 s each, while the proxy went on paging a slow upstream's endless list. The check
/// fails at 30 s from its start — calls are denied at once from then on, naming why — and
/// no page more is asked for.
#[test]
fn a_pin_check_paged_past_its_deadline_fails_closed_and_stops_paging() {
    let gw = Gateway::start();
    let mut p = Proxy::start(&gw, "slow");
    p.initialize(false);
    // The call's own wait (30 s) starts after the check's.
    std::thread::sleep(Duration::from_secs(1));
    let call = p.call_read(1);
    let why = "tools/list did not end within 30 s";
    assert!(text(&call).contains(why), "{call}");
    let asked = Instant::now();
    let again = p.call_read(2);
    assert!(text(&again).contains(why), "{again}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "not denied at once"
    );
    // A page asked for before the deadline is answered within 0.4 s; none is asked after.
    std::thread::sleep(Duration::from_millis(800));
    let pages = p.lists_sent();
    assert!((2..=80).contains(&pages), "{pages}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(p.lists_sent(), pages, "paged after the deadline");
    p.stop();
}

/// Review finding: the client's lines were read whole, so a client writing one endless line
/// grew the proxy's memory without bound. A line over 16 MiB is skipped to its end (never
/// held), refused with `-32600`, and the next line is read as usual.
#[test]
fn a_client_line_over_16_mib_is_refused_and_the_next_is_read() {
    let gw = Gateway::start();
    let mut p = Proxy::start(&gw, "plain");
    p.initialize(false);
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(17 * 1024 * 1024)
    );
    writeln!(p.stdin.as_mut().unwrap(), "{long}").unwrap();
    let refused = p.recv(|m| m.get("error").is_some());
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["id"].is_null(), "{refused}");
    let pong = p.ask(json!(8), "ping", json!({}));
    assert!(pong["result"].is_object(), "{pong}");
    let log = p.stop();
    assert!(
        !log.contains("\"id\": 7") && !log.contains("\"id\":7"),
        "{log}"
    );
}

/// Attack (found by review): a client flooding `tasks/get` for ever new made-up
/// `approval-…` ids. `tasks/*` is never refused as one request too many, and each unknown
/// name resumed a task from the gateway: a gateway read and a task each, none of it counted,
/// every ended task's result held against the process's task-result budget for a day and the
/// name never forgotten. Now the names are bounded (10,000 given in the last two days; then no
/// more tasks are resumed, `-32000`), as are the tasks running when one is resumed and the
/// withdrawals in flight; the client can still read what it started.
#[test]
fn a_flood_of_made_up_task_names_is_bounded() {
    let gw = Gateway::start();
    let mut p = Proxy::start(&gw, "plain");
    p.initialize(false);
    const NAMES: i64 = 10_000;
    for n in 1..=NAMES + 1 {
        p.send(json!({"jsonrpc": "2.0", "id": n, "method": "tasks/get",
                      "params": {"taskId": format!("approval-zz{n}")}}));
    }
    let last = p.recv(|m| m["id"] == NAMES + 1);
    assert_eq!(last["error"]["code"], -32000, "{last}");
    let why = last["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("10000 tasks were named"), "{last}");
    let answered: Vec<&Value> = p
        .seen
        .iter()
        .filter(|m| m["id"].as_i64().is_some_and(|n| (1..=NAMES).contains(&n)))
        .collect();
    assert_eq!(answered.len(), NAMES as usize);
    let refused: Vec<&&Value> = answered
        .iter()
        .filter(|m| !m["result"]["taskId"].is_string())
        .collect();
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        refused.first()
    );
    // A name the relay gave is still read.
    let first = p.ask(
        json!(NAMES + 2),
        "tasks/get",
        json!({"taskId": "approval-zz1"}),
    );
    assert_eq!(first["result"]["taskId"], "approval-zz1", "{first}");
    p.stop();
}
