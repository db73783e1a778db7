//! The upstream's own `input_required` round (MCP 2026-07-28, SEP-2322) through the stdio
//! proxy: a client's continuation goes upstream only under a `requestState` the upstream
//! issued for that very call (same tool, same arguments), and only once.

use crate::{helper_proxy, serve_helper};
use serde_json::{Value, json};
use std::io::{BufRead, Write};

const KEY: &str = "rounds-agent-key-0123456789abcdef";

/// A modern-only upstream (Python, stdio) whose tool `book` asks for input first: a call
/// without `requestState` is answered `input_required` under state `op-N` (N counting the
/// calls), one with a state is answered `continued STATE`, and that state and the answers it
/// got (`inputResponses`, JSON) are written as a line to `LOG` — the continuations the
/// upstream acted on.
const UPSTREAM: &str = r#"import json,sys
n=0
def out(m): print(json.dumps(m), flush=True)
for line in sys.stdin:
    m=json.loads(line)
    if "method" not in m or "id" not in m: continue
    i=m["id"]; meth=m["method"]; p=m.get("params") or {}
    if meth=="initialize":
        out({"jsonrpc":"2.0","id":i,"error":{"code":-32022,"message":"unsupported protocol version","data":{"supported":["2026-07-28"]}}})
    elif meth=="server/discover":
        out({"jsonrpc":"2.0","id":i,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}})
    elif meth=="tools/list":
        out({"jsonrpc":"2.0","id":i,"result":{"tools":[{"name":"book","description":"d","inputSchema":{"type":"object"}}]}})
    elif meth=="tools/call" and "requestState" in p:
        with open(LOG,"a") as f: f.write(p["requestState"]+" "+json.dumps(p.get("inputResponses"),sort_keys=True)+"\n")
        out({"jsonrpc":"2.0","id":i,"result":{"resultType":"complete","content":[{"type":"text","text":"continued "+p["requestState"]}]}})
    elif meth=="tools/call":
        n+=1
        out({"jsonrpc":"2.0","id":i,"result":{"resultType":"input_required","requestState":"op-%d"%n,
             "inputRequests":{"seat":{"method":"elicitation/create","params":{"mode":"form","message":"Which seat?","requestedSchema":{"type":"object"}}}}}})
    else:
        out({"jsonrpc":"2.0","id":i,"result":{}})
"#;

/// The stdio proxy at the gateway `url` in front of [`UPSTREAM`], which logs the
/// continuations it acts on to a file in `dir`: that file's path, and the proxy.
fn proxy_logging(
    dir: &std::path::Path,
    url: &str,
) -> (
    std::path::PathBuf,
    (
        std::process::Child,
        std::process::ChildStdin,
        std::io::BufReader<std::process::ChildStdout>,
    ),
) {
    let log = dir.join("continued.log");
    let source = UPSTREAM.replace("LOG", &format!("{:?}", log.display().to_string()));
    (log, helper_proxy((url, KEY), &[], &source))
}

/// The `_meta` of a modern client's request that can elicit.
fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}})
}

/// The proxy's answer under `id` on its stdout `out`, skipping every other line.
fn answer_to(out: &mut impl BufRead, id: u32) -> Value {
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the proxy closed stdout"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            return v;
        }
    }
}

/// Attack (found by review): the proxy passed any `requestState` a client wrote upstream
/// beside a gated call, and no `call_hash` covers it, so against an upstream that keeps a
/// pending operation in an unsigned state the client could continue an operation other than
/// the one its `{name, arguments}` were approved for — one never gated at all (`op-99`), one
/// asked for other arguments, or the same one twice. Only the state the upstream issued for
/// this very call goes upstream, once; the others are refused with an error and never reach
/// the upstream (its log of continuations holds the one good one only).
#[test]
fn a_client_continues_only_the_round_the_upstream_opened_for_that_call() {
    let dir = tempfile::tempdir().unwrap();
    let agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [book]\n";
    let server = serve_helper(
        dir.path(),
        (agent, KEY),
        ("acme.test.rounds-v1", "- tool: book\n  risk_tier: R1\n"),
    );
    let (log, (mut child, mut stdin, mut out)) = proxy_logging(dir.path(), &server.url);
    let meta = modern_meta();
    let mut ask = |id: u32, arguments: Value, state: Option<&str>| -> Value {
        let mut params = json!({"name": "book", "arguments": arguments, "_meta": meta});
        if let Some(s) = state {
            params["requestState"] = json!(s);
            params["inputResponses"] =
                json!({"seat": {"action": "accept", "content": {"seat": "1A"}}});
        }
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        writeln!(stdin, "{call}").unwrap();
        answer_to(&mut out, id)
    };
    let flight = json!({"flight": "LH1"});
    let first = ask(1, flight.clone(), None);
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert_eq!(first["result"]["requestState"], "op-1", "{first}");
    // A state the upstream never issued.
    let forged = ask(2, flight.clone(), Some("op-99"));
    assert!(
        forged["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requestState"),
        "{forged}"
    );
    // The issued state under other arguments (and so used up).
    let second = ask(3, json!({"flight": "LH2"}), None);
    assert_eq!(second["result"]["requestState"], "op-2", "{second}");
    let moved = ask(4, json!({"flight": "LH9"}), Some("op-2"));
    assert!(moved["error"].is_object(), "{moved}");
    // The issued state for its own call: continued, once.
    let good = ask(5, flight.clone(), Some("op-1"));
    assert!(good.to_string().contains("continued op-1"), "{good}");
    let again = ask(6, flight, Some("op-1"));
    assert!(again["error"].is_object(), "{again}");
    drop(stdin);
    let _ = child.wait();
    let acted = std::fs::read_to_string(&log).unwrap();
    assert_eq!(acted.lines().count(), 1, "{acted}");
    assert!(
        acted.starts_with("op-1 ") && acted.contains("1A"),
        "{acted}"
    );
    drop(server);
}

/// The one pending approval of the gateway at `url` (waiting up to 30 s for it).
pub(crate) fn the_pending_one(url: &str) -> Value {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let list = crate::get_op(url, "/v1/approvals?status=pending");
        if let Some(a) = list["approvals"].as_array().and_then(|l| l.first()) {
            return a.clone();
        }
        assert!(
            std::time::Instant::now() < until,
            "nothing was held: {list}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Attack (found by review): the answers a client gives the upstream's own questions are data
/// the tool acts on — a payment tool that asks for its amount gets it there — but they went
/// upstream beside a call gated on its name and arguments alone, so the approver, shown
/// `book {"flight": "LH1"}` twice, never saw the seat the agent chose. A continuation's
/// answers are gated with its arguments under `$inputResponses`: the approver sees them, the
/// `call_hash` covers them, and the upstream gets them as its `inputResponses`, the arguments
/// without them. The first call is approved in the client (the rule allows it); the
/// continuation is not asked there — its retry could carry only one `requestState`, and the
/// upstream's was lost (found by review) — but held for operators, and a retry under assent's
/// own state answering for the user is refused.
#[test]
fn a_continuations_answers_are_shown_to_the_approver_and_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [book]\n      approval: true\n";
    let rules = "- tool: book\n  risk_tier: R1\n  in_client_approval: true\n";
    let server = serve_helper(dir.path(), (agent, KEY), ("acme.test.rounds-v1", rules));
    let (log, (mut child, mut stdin, mut out)) = proxy_logging(dir.path(), &server.url);
    let meta = modern_meta();
    let mut send = |id: u32, params: Value| {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        writeln!(stdin, "{call}").unwrap();
    };
    let mut read = |id: u32| answer_to(&mut out, id);
    let flight = json!({"flight": "LH1"});
    send(
        1,
        json!({"name": "book", "arguments": flight, "_meta": meta}),
    );
    let asked = read(1);
    let own = asked["result"]["requestState"].as_str().unwrap_or_default();
    assert!(own.starts_with("assent-approval:"), "{asked}");
    let yes = json!({"assent-approval": {"action": "accept", "content": {"approve": true}}});
    send(
        2,
        json!({"name": "book", "arguments": flight, "_meta": meta,
                   "requestState": own, "inputResponses": yes}),
    );
    let first = read(2);
    assert_eq!(first["result"]["requestState"], "op-1", "{first}");
    let seat = json!({"seat": {"action": "accept", "content": {"seat": "1A"}}});
    send(
        3,
        json!({"name": "book", "arguments": flight, "_meta": meta,
                   "requestState": "op-1", "inputResponses": seat}),
    );
    let held = the_pending_one(&server.url);
    assert_eq!(held["call"]["arguments"]["$inputResponses"], seat, "{held}");
    assert_eq!(held["call"]["arguments"]["flight"], "LH1", "{held}");
    // The client answers it as its user under assent's own state (found by review): refused,
    // still pending, undecided by the user.
    let held_id = held["id"].as_str().unwrap();
    send(
        4,
        json!({"name": "book", "arguments": held["call"]["arguments"], "_meta": meta,
                   "requestState": format!("assent-approval:{held_id}"), "inputResponses": yes}),
    );
    let refused = read(4);
    assert!(
        refused.to_string().contains("operators decide it"),
        "{refused}"
    );
    let still = crate::get_op(&server.url, &format!("/v1/approvals/{held_id}"));
    assert_eq!(still["status"], "pending", "{still}");
    crate::ok(&crate::cli(&server.url, &["approve", held_id]));
    let good = read(3);
    assert!(good.to_string().contains("continued op-1"), "{good}");
    drop(stdin);
    let _ = child.wait();
    let acted = std::fs::read_to_string(&log).unwrap();
    assert!(
        acted.starts_with("op-1 ") && acted.contains(r#""seat": "1A""#),
        "{acted}"
    );
    drop(server);
}
