//! The `assent` binary as a user runs it: `serve` killed with SIGKILL and restarted, `check`
//! exit codes, config errors, and `audit verify` after a row is altered with `sqlite3`.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod audit;
mod in_client;
mod security;
mod tasks;
mod watch;

const BIN: &str = env!("CARGO_BIN_EXE_assent");
const OP_KEY: &str = "operator-test-key-0123456789abcdef";
const BOT_KEY: &str = "bot-test-key";
const FS_KEY: &str = "fs-test-key";

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_config(dir: &Path, port: u16) -> PathBuf {
    let bot = hex_sha256(BOT_KEY);
    let ex = examples();
    let cfg = format!(
        "listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [\"{}/agents/*.agf.yaml\"]\ngovernance: [\"{}/governance/*.yaml\"]\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance-admin], key_env: TEST_ALICE_KEY}}\n  - {{name: bot, kind: agent, agent_id: treasury_bot, key_sha256: \"{bot}\"}}\n  - {{name: fs, kind: agent, agent_id: fs_agent, key_sha256: \"{fs}\"}}\n",
        ex.display(),
        ex.display(),
        fs = hex_sha256(FS_KEY),
    );
    let p = dir.join("assent.yaml");
    std::fs::write(&p, cfg).unwrap();
    p
}

fn hex_sha256(s: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(s.as_bytes())?;
            c.wait_with_output()
        });
    String::from_utf8(out.unwrap().stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

pub(crate) struct Server {
    child: Child,
    url: String,
}

fn serve(config: &Path, port: u16) -> Server {
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(config)
        .env("TEST_ALICE_KEY", OP_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while reqwest::blocking::get(format!("{url}/healthz")).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Server { child, url }
}

fn cli(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("ASSENT_URL", url)
        .env("ASSENT_API_KEY", OP_KEY)
        .output()
        .unwrap()
}

fn propose(url: &str, amount: i64) -> Value {
    reqwest::blocking::Client::new()
        .post(format!("{url}/v1/tool-calls"))
        .bearer_auth(BOT_KEY)
        .json(&json!({"agent": "treasury_bot", "session_id": "s", "tool": "transfer_funds", "arguments": {"amount": amount, "currency": "EUR", "recipient": "ext-1"}}))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

#[test]
fn a_pending_approval_survives_kill_9_and_is_decided_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), port);
    let mut s = serve(&cfg, port);
    let b = propose(&s.url, 5000);
    assert_eq!(b["decision"], "pending", "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let out = cli(&s.url, &["pending"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&id)
            && text.contains(r#"{"amount":5000,"currency":"EUR","recipient":"ext-1"}"#),
        "{text}"
    );
    assert!(
        text.contains("R3 (high), irreversible") && text.contains("left"),
        "{text}"
    );
    // SIGKILL: no graceful shutdown.
    s.child.kill().unwrap();
    s.child.wait().unwrap();

    let mut s = serve(&cfg, port);
    let out = cli(&s.url, &["pending", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["approvals"][0]["id"].as_str(), Some(id.as_str()));
    let out = cli(&s.url, &["approve", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&s.url, &["approve", &id]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ALREADY_DECIDED") && err.lines().count() == 1,
        "{err}"
    );
    let out = cli(&s.url, &["show", "00000000-0000-4000-8000-000000000000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOT_FOUND"));

    // The chain verifies on the live database, then fails naming the row altered with sqlite3.
    let data = dir.path().join("data");
    let out = Command::new(BIN)
        .args(["audit", "verify", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let db = data.join("assent.db");
    let st = Command::new("sqlite3")
        .arg(&db)
        .arg("UPDATE audit SET actor = 'mallory' WHERE seq = 2;")
        .status()
        .unwrap();
    assert!(st.success());
    let out = Command::new(BIN)
        .args(["audit", "verify", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken at record 2"), "{err}");
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

fn check(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["check", "--config"];
    let cfg = examples().join("assent.yaml");
    let cfg = cfg.to_str().unwrap().to_string();
    all.push(&cfg);
    all.extend_from_slice(args);
    let out = Command::new(BIN).args(&all).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn check_exit_codes_and_json() {
    let (c, out, _) = check(&["--agent", "treasury_bot", "--tool", "get_balance", "--json"]);
    assert_eq!(c, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "allow");
    for r in v["reasons"].as_array().unwrap() {
        assert!(r.get("file").is_some() && r.get("rule").is_some() && r.get("text").is_some());
    }
    let (c, out, _) = check(&[
        "--agent",
        "treasury_bot",
        "--tool",
        "transfer_funds",
        "--args",
        r#"{"amount": 5000, "currency": "EUR", "recipient": "bob"}"#,
        "--json",
    ]);
    assert_eq!(c, 10, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "confirm");
    assert!(
        v["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["file"].as_str().unwrap().ends_with("finance.yaml"))
    );
    // The rule's side effects and rollback note, rendered like the message.
    assert_eq!(
        v["side_effects"][0],
        "Moves 5000 EUR from the treasury account to bob."
    );
    assert!(v["rollback"][0].as_str().unwrap().contains("24 h"), "{v}");
    let (_, text, _) = check(&[
        "--agent",
        "treasury_bot",
        "--tool",
        "transfer_funds",
        "--args",
        r#"{"amount": 5000, "currency": "EUR", "recipient": "bob"}"#,
    ]);
    assert!(
        text.contains("side effects: Moves 5000 EUR from the treasury account to bob."),
        "{text}"
    );
    let (c, out, _) = check(&["--agent", "treasury_bot", "--tool", "drop_tables"]);
    assert_eq!(c, 11);
    assert!(
        out.starts_with("deny") && out.contains("drop_tables"),
        "{out}"
    );
    let (c, _, err) = check(&["--agent", "treasury_bot", "--tool", "x", "--args", "{"]);
    assert_eq!(c, 2);
    assert!(err.contains("--args"), "{err}");
    let (c, _, _) = check(&["--agent", "treasury_bot"]);
    assert_eq!(c, 2, "a missing flag is bad input");
}

#[test]
fn a_bad_config_stops_start_up_with_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    std::fs::write(
        &p,
        "listen: 127.0.0.1:0\nprincipals:\n  - {name: a, kind: wizard, key_env: X}\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:3:", p.display())) && err.contains("unknown kind `wizard`"),
        "{err}"
    );
    std::fs::write(&p, "listen: 127.0.0.1:0\nlisten_typo: 1\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains(":2") && err.contains("listen_typo"),
        "{err}"
    );
    // key_env that is not set.
    std::fs::write(&p, "listen: 127.0.0.1:0\nprincipals:\n  - {name: a, kind: operator, key_env: ASSENT_TEST_UNSET_VAR}\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&p)
        .env_remove("ASSENT_TEST_UNSET_VAR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1)
            && err.contains("ASSENT_TEST_UNSET_VAR")
            && err.contains(":3:"),
        "{err}"
    );
    // MCP upstreams: each mistake names the alias and the line.
    for (cfg, why) in [
        (
            "mcp_upstreams:\n  fs: {url: \"ftp://x\"}\n",
            "not an http(s) URL",
        ),
        (
            "mcp_upstreams:\n  fs: {command: [a], url: \"http://x\"}\n",
            "not both",
        ),
        ("mcp_upstreams:\n  fs: {}\n", "give `command`"),
        (
            "mcp_upstreams:\n  bad-alias: {command: [a]}\n",
            "must match",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"ftp://x\", secret_env: S}\n",
            "webhooks `ops`: url `ftp://x` is not an http(s) URL",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"http://x\", secret_env: S, events: [approval.created]}\n",
            "event `approval.created`",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"http://x\", secret_env: S, format: teams}\n",
            "format `teams`",
        ),
        (
            "audit_checkpoints:\n  every_records: 0\n",
            "audit_checkpoints.every_records 0: use 1 to 1000000",
        ),
        (
            "audit_checkpoints:\n  every_seconds: 100000\n",
            "audit_checkpoints.every_seconds 100000: use 1 to 86400",
        ),
        (
            "audit_checkpoints:\n  file: /nonexistent/dir/checkpoints.jsonl\n",
            "not a file in an existing directory",
        ),
    ] {
        std::fs::write(&p, format!("listen: 127.0.0.1:0\n{cfg}")).unwrap();
        let out = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&p)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(1) && err.contains(":3:") && err.contains(why),
            "{cfg}: {err}"
        );
    }
    // A webhook secret that is not set: start-up stops naming the variable.
    std::fs::write(&p, "listen: 127.0.0.1:0\nwebhooks:\n  - {name: ops, url: \"http://127.0.0.1:9/h\", secret_env: ASSENT_TEST_UNSET_SECRET}\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&p)
        .env_remove("ASSENT_TEST_UNSET_SECRET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1)
            && err.contains("ASSENT_TEST_UNSET_SECRET (secret_env) is not set"),
        "{err}"
    );
    assert!(
        !dir.path().join(".assent").exists(),
        "nothing is created when the config is bad"
    );
}

#[test]
fn the_mcp_proxy_forwards_nothing_it_could_not_gate() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.log");
    // An upstream that records every line it receives and answers requests with an empty result.
    let upstream = format!(
        "import json,sys\nlog=open({:?},'a')\nfor line in sys.stdin:\n    log.write(line); log.flush()\n    try:\n        m=json.loads(line)\n    except Exception:\n        continue\n    if isinstance(m,dict) and 'id' in m:\n        print(json.dumps({{'jsonrpc':'2.0','id':m['id'],'result':{{}}}}), flush=True)\n",
        seen.display().to_string()
    );
    let mut child = Command::new(BIN)
        .args([
            "mcp", "--agent", "a", "--server", "s", "--", "python3", "-c", &upstream,
        ])
        .env("ASSENT_URL", format!("http://127.0.0.1:{}", free_port()))
        .env("ASSENT_API_KEY", "k")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
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

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn operator_commands_edit_batch_deny_grant_revoke_and_answer() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), port);
    let mut s = serve(&cfg, port);
    let url = s.url.clone();
    let id_of = |v: &Value| v["approval_id"].as_str().unwrap().to_string();

    // Approve with modifications: the token binds the edited call, the line says so.
    let a = id_of(&propose(&url, 5000));
    let text = ok(&cli(
        &url,
        &[
            "approve",
            &a,
            "--args",
            r#"{"amount": 4000, "currency": "EUR", "recipient": "ext-1"}"#,
        ],
    ));
    assert!(
        text.contains("approved with arguments {\"amount\":4000"),
        "{text}"
    );
    let shown = ok(&cli(&url, &["show", &a]));
    assert!(
        shown.contains("approved arguments: {\"amount\":4000"),
        "{shown}"
    );

    // Two ids denied in one batch, each with the reason.
    let (b, c) = (id_of(&propose(&url, 6000)), id_of(&propose(&url, 6001)));
    let text = ok(&cli(&url, &["deny", &b, &c, "--reason", "over budget"]));
    assert_eq!(text.matches(" rejected").count(), 2, "{text}");
    for id in [&b, &c] {
        let v: Value = serde_json::from_str(&ok(&cli(&url, &["show", id, "--json"]))).unwrap();
        assert_eq!(v["status"], "rejected");
        assert_eq!(v["decisions"][0]["reason"], "over budget");
    }

    // An irreversible transfer is approved once: a session scope is refused.
    let d = id_of(&propose(&url, 7000));
    let out = cli(&url, &["approve", &d, "--scope", "session"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("irreversible"));
    ok(&cli(&url, &["approve", &d]));
    // A session grant lets the same (reversible) call through; revoking it holds it again.
    let write = || {
        reqwest::blocking::Client::new()
            .post(format!("{url}/v1/tool-calls"))
            .bearer_auth(FS_KEY)
            .json(&json!({"agent": "fs_agent", "session_id": "s", "tool": "write_file", "server": "fs", "arguments": {"path": "/tmp/x", "content": "y"}}))
            .send()
            .unwrap()
            .json::<Value>()
            .unwrap()
    };
    let w = id_of(&write());
    let text = ok(&cli(&url, &["approve", &w, "--scope", "session"]));
    assert!(text.contains("(scope session, grant "), "{text}");
    let again = write();
    assert_eq!(again["decision"], "allow", "{again}");
    assert!(again["token"].is_string(), "{again}");
    let grants: Value = serde_json::from_str(&ok(&cli(&url, &["grants", "--json"]))).unwrap();
    let grant = grants["grants"][0]["id"].as_str().unwrap().to_string();
    assert!(ok(&cli(&url, &["grants"])).contains(&grant));
    assert!(ok(&cli(&url, &["revoke", &grant])).contains("revoked"));
    assert_eq!(write()["decision"], "pending");
    assert!(ok(&cli(&url, &["grants"])).contains("no grants"));

    // A clarification: listed, a wrong-kind answer refused before it is sent, then answered.
    let q: Value = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/clarifications"))
        .bearer_auth(BOT_KEY)
        .json(
            &json!({"agent": "treasury_bot", "session_id": "s", "question": "Pay the late fee too?",
                      "accepted_response_kinds": ["yes_no"]}),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let qid = q["id"].as_str().unwrap().to_string();
    let listed = ok(&cli(&url, &["clarifications"]));
    assert!(
        listed.contains(&qid) && listed.contains("Pay the late fee too?"),
        "{listed}"
    );
    let out = cli(&url, &["answer", &qid, "maybe"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("accepts yes_no"));
    let text = ok(&cli(&url, &["answer", &qid, "yes"]));
    assert!(text.contains("answered with true"), "{text}");
    let out = cli(&url, &["answer", &qid, "no"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("ALREADY_ANSWERED"));
    assert!(ok(&cli(&url, &["clarifications"])).contains("no pending clarifications"));

    // Learning samples straight from the database while the gateway runs: one per settled
    // approval (edited a, denied b and c, approved d, granted w and its grant use), as the API
    // gives them.
    let out = Command::new(BIN)
        .args(["export", "learning-samples", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let jsonl = ok(&out);
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "{jsonl}");
    assert!(
        lines
            .iter()
            .all(|l| l["sample_family"] == "confirm_decision")
    );
    let api = reqwest::blocking::Client::new()
        .get(format!("{url}/v1/learning-samples"))
        .bearer_auth(OP_KEY)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(api, jsonl);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

#[test]
fn unknown_agent_file_fields_warn_and_strict_makes_them_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("typo.agf.yaml"),
        "schema_version: \"1.0.0\"\nmetadata: {id: typo_bot}\naction_space:\n  local_tools:\n    - alias: pay\n      aproval: true\n",
    )
    .unwrap();
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(&cfg, "agents: [\"typo.agf.yaml\"]\n").unwrap();
    let run = |strict: bool| {
        let mut c = Command::new(BIN);
        c.args(["check", "--config"])
            .arg(&cfg)
            .args(["--agent", "typo_bot", "--tool", "pay"]);
        if strict {
            c.arg("--strict");
        }
        c.output().unwrap()
    };
    let out = run(false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the typo is ignored: {err}");
    assert!(
        err.contains("typo.agf.yaml:6: unknown field `action_space.local_tools[0].aproval`"),
        "{err}"
    );
    let out = run(true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("typo.agf.yaml:6") && err.contains("aproval"),
        "{err}"
    );
    // The same through the config file key, for `serve`.
    std::fs::write(
        &cfg,
        "agents: [\"typo.agf.yaml\"]\nstrict_agent_files: true\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("aproval"));
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
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
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
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("TEST_UPSTREAM_TOKEN", "sekret-upstream-token")
        .env("ASSENT_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while reqwest::blocking::get(format!("{url}/healthz")).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
