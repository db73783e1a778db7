//! Attacks through the real binary (issue 10): an MCP client that sends JSON two parsers read
//! differently, against an upstream whose parser keeps the first duplicate key.

use crate::{BIN, free_port, hex_sha256, serve};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
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

#[test]
fn a_duplicate_tool_name_cannot_run_a_tool_other_than_the_one_gated() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let ex = crate::examples();
    let cfg = dir.path().join("assent.yaml");
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
    let mut server = serve(&cfg, port);
    let log = dir.path().join("upstream.log");
    let mut child = Command::new(BIN)
        .args([
            "mcp", "--agent", "fs_agent", "--server", "fs", "--", "python3", "-c",
        ])
        .arg(first_wins_upstream(&log))
        .env("ASSENT_URL", &server.url)
        .env("ASSENT_API_KEY", FS_KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
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
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    let ran: Vec<&str> = log.lines().filter_map(|l| l.strip_prefix("RAN ")).collect();
    assert_eq!(ran, vec![r#"["read_file", {"path": "/tmp/a"}]"#], "{log}");
    assert!(
        !log.contains(spaced),
        "the client's bytes were forwarded: {log}"
    );
    let forwarded: Vec<Value> = log
        .lines()
        .filter_map(|l| l.strip_prefix("LINE "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(
        forwarded,
        vec![
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "/tmp/a"}}})
        ],
        "{log}"
    );
}
