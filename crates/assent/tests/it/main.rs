//! The `assent` binary as a user runs it: `serve` killed with SIGKILL and restarted, and
//! `audit verify` after a row is altered with `sqlite3`; the other groups are in the modules
//! below (`operator`: the operator commands and `check`; `config`: config errors; `mcp`: the
//! stdio proxy and URL upstreams; …). This file also holds the helpers they share: a test
//! config, `serve` and waiting for health, the CLI against a URL, a proposal, a piped child.

use serde_json::{Value, json};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

mod aaep_restart;
mod audit;
mod backup;
mod config;
mod config_load;
mod connection_slots;
mod data_file_modes;
mod https;
mod hub_kit;
mod in_client;
mod key_takeover;
mod keys_guard;
mod mcp;
mod mcp_edge_bounds;
mod mcp_gone_proposing;
mod mcp_held_bounds;
mod mcp_held_settle;
mod mcp_http_upstream_bounds;
mod mcp_hub_cancel;
mod mcp_hub_connections;
mod mcp_hub_declared;
mod mcp_hub_gone;
mod mcp_hub_limits;
mod mcp_hub_lists;
mod mcp_hub_parse;
mod mcp_hub_weight;
mod mcp_methods;
mod mcp_not_run;
mod mcp_relay_bounds;
mod mcp_relay_cancel;
mod mcp_relay_parse;
mod mcp_relay_results;
mod mcp_server_words;
mod mcp_upstream_attacks;
mod mcp_upstream_exit;
mod mcp_upstream_requests;
mod mcp_upstream_rounds;
mod mcp_upstream_stalls;
mod migrate;
mod operator;
mod outbound_cleartext;
mod outbound_no_roots;
mod outbound_proxy;
mod paged_lists;
mod policy_warnings;
mod receipt;
mod reload;
mod replay;
mod replica_configs;
mod replica_leases;
mod replicas;
mod replicas_aaep;
mod restore_forged;
mod retention;
mod security;
mod tasks;
mod terminal;
mod token_keys;
mod watch;

const BIN: &str = env!("CARGO_BIN_EXE_assent");
const OP_KEY: &str = "operator-test-key-0123456789abcdef";
const BOT_KEY: &str = "bot-test-key";
const FS_KEY: &str = "fs-test-key";

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A port of 127.0.0.1 free now and never handed out before in this test process (the
/// kernel may give a port it gave a moment ago: two gateways of concurrent tests would then
/// race for it, and the loser's test would talk to the other's gateway).
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Writes the test config into `dir` (`assent.yaml`: listening on `port`, data in `data/`, the
/// example agents and governance, operator alice and agents bot and fs) with the YAML lines
/// `extra` appended, and returns its path.
fn write_config(dir: &Path, port: u16, extra: &str) -> PathBuf {
    let bot = hex_sha256(BOT_KEY);
    let ex = examples();
    let cfg = format!(
        "listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [\"{}/agents/*.agf.yaml\"]\ngovernance: [\"{}/governance/*.yaml\"]\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance-admin], key_env: TEST_ALICE_KEY}}\n  - {{name: bot, kind: agent, agent_id: treasury_bot, key_sha256: \"{bot}\"}}\n  - {{name: fs, kind: agent, agent_id: fs_agent, key_sha256: \"{fs}\"}}\n",
        ex.display(),
        ex.display(),
        fs = hex_sha256(FS_KEY),
    ) + extra;
    let p = dir.join("assent.yaml");
    std::fs::write(&p, cfg).unwrap();
    p
}

/// Serves a gateway for one agent from `dir` on a free port ([`write_helper_config`]), once
/// healthy.
fn serve_helper(dir: &Path, agent: (&str, &str), policy: (&str, &str)) -> Server {
    let port = free_port();
    serve(&write_helper_config(dir, port, agent, policy), port)
}

/// Writes a gateway for one agent into `dir`: its agent file `agent` (`helper.agf.yaml`, id
/// `helper`, key `key`), governance `policy_id` holding `rules` (`gov.yaml`), operator alice
/// (roles `[ops]`, key from `TEST_ALICE_KEY`), listening on `port`; returns the config's path.
fn write_helper_config(
    dir: &Path,
    port: u16,
    (agent, key): (&str, &str),
    (policy_id, rules): (&str, &str),
) -> PathBuf {
    std::fs::write(
        dir.join("gov.yaml"),
        assent_testkit::fixtures::policy(policy_id, rules),
    )
    .unwrap();
    write_agent_config(dir, port, (agent, key), "governance: [gov.yaml]\n")
}

/// Writes a gateway for agent `helper` into `dir`: its agent file `agent` (`helper.agf.yaml`,
/// key `key`), operator alice (roles `[ops]`, key from `TEST_ALICE_KEY`), listening on `port`,
/// with the YAML lines `extra` (each ending in a newline) appended; returns the config's path.
fn write_agent_config(dir: &Path, port: u16, (agent, key): (&str, &str), extra: &str) -> PathBuf {
    std::fs::write(dir.join("helper.agf.yaml"), agent).unwrap();
    let cfg = dir.join("assent.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [helper.agf.yaml]\nprincipals:\n  - {{name: alice, kind: operator, roles: [ops], key_env: TEST_ALICE_KEY}}\n  - {{name: helper, kind: agent, agent_id: helper, key_sha256: \"{}\"}}\n{extra}",
            hex_sha256(key)
        ),
    )
    .unwrap();
    cfg
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

/// A test that ends (or panics) with its gateway running stops it: without this every run of the
/// suite left `assent serve` processes behind.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running gateway of the test config over a fresh directory.
struct Served {
    /// The directory of the config and `data/`, removed when this is dropped.
    dir: tempfile::TempDir,
    /// The config file.
    cfg: PathBuf,
    /// The gateway's data directory (`data/` in `dir`).
    data: PathBuf,
    /// The port the gateway listens on.
    port: u16,
    /// The running `assent serve`.
    server: Server,
}

/// [`write_config`] (with `extra`) over a fresh directory and a free port, then [`serve`].
fn served(extra: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    // A port free when [`free_port`] looked can be taken before the gateway binds it (any
    // test's outgoing connection draws its local port from the same range): a gateway that
    // exits before it answers is started again on another port, at most three times (seen in
    // CI: "server did not start").
    let mut tries = 0;
    let (port, cfg, server) = loop {
        let port = free_port();
        let cfg = write_config(dir.path(), port, extra);
        match start(serve_cmd(&cfg), port, None) {
            Ok(server) => break (port, cfg, server),
            Err(why) if tries < 2 => eprintln!("port {port}: {why}; again on another port"),
            Err(why) => panic!("{why}"),
        }
        tries += 1;
    };
    Served {
        data: dir.path().join("data"),
        dir,
        cfg,
        port,
        server,
    }
}

/// The stdout of a command that must have succeeded (else the test fails with its exit code
/// and stderr).
#[track_caller]
fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `assent audit verify --data-dir DATA ARGS…` to its end.
fn audit_verify(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["audit", "verify", "--data-dir"])
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

/// Sends SIGHUP to `child` (with `kill`, which must succeed).
fn sighup(child: &Child) {
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
}

/// `assent check --config CONFIG --agent bot --tool pay` run to its end.
fn check_bot_pay(config: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(["check", "--config"])
        .arg(config)
        .args(["--agent", "bot", "--tool", "pay"])
        .output()
        .unwrap()
}

/// `assent serve --config CONFIG`, not yet run: callers add the environment and run it.
fn serve_cmd(config: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["serve", "--config"]).arg(config);
    c
}

/// Waits until `{url}/healthz` answers, trying every `step`; fails the test ("server did not
/// start") once `limit` has passed.
fn wait_healthy(url: &str, limit: Duration, step: Duration) {
    wait_healthy_from(url, None, limit, step);
}

/// [`wait_healthy`], its requests sent from the local address `from` when given (a gateway
/// counts connections per client address, and notices a closed one only a moment later).
fn wait_healthy_from(url: &str, from: Option<std::net::IpAddr>, limit: Duration, step: Duration) {
    let client = health_client(from);
    let start = Instant::now();
    while client.get(format!("{url}/healthz")).send().is_err() {
        assert!(start.elapsed() < limit, "server did not start");
        std::thread::sleep(step);
    }
}

/// The client that asks a gateway's `/healthz`, from the local address `from` when given, and
/// keeping no connection open between its requests.
fn health_client(from: Option<std::net::IpAddr>) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .local_address(from)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// `assent serve` on `config` (listening on `port`) with alice's operator key, once healthy.
fn serve(config: &Path, port: u16) -> Server {
    serve_with(serve_cmd(config), port)
}

/// Runs `cmd` (an `assent serve`, perhaps wrapped) with alice's operator key and its output
/// discarded, and waits up to 20 s for it to answer on `port`.
fn serve_with(cmd: Command, port: u16) -> Server {
    serve_checked_from(cmd, port, None)
}

/// [`serve_with`], its readiness checked from the local address `from` when given.
fn serve_checked_from(cmd: Command, port: u16, from: Option<std::net::IpAddr>) -> Server {
    start(cmd, port, from).unwrap_or_else(|why| panic!("{why}"))
}

/// Spawns `cmd` ([`spawn_quiet`]) and waits up to 20 s for it to answer on `port` (asked from
/// `from` when given); `Err` saying so when it exited first (the port taken, a bad config) or
/// never answered.
fn start(cmd: Command, port: u16, from: Option<std::net::IpAddr>) -> Result<Server, String> {
    let mut child = spawn_quiet(cmd);
    let url = format!("http://127.0.0.1:{port}");
    let client = health_client(from);
    let begun = Instant::now();
    while client.get(format!("{url}/healthz")).send().is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            return Err(format!(
                "the gateway on port {port} exited ({status}) before it answered"
            ));
        }
        if begun.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return Err("server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(status) = child.try_wait().unwrap() {
        return Err(format!(
            "the gateway on port {port} exited ({status}) yet something answered there"
        ));
    }
    Ok(Server { child, url })
}

/// `assent mcp --agent helper --server up EXTRA… -- python3 -c UPSTREAM` against the gateway
/// at `url` with agent key `key` ([`serve_helper`]'s agent), spawned by [`spawn_piped`].
fn helper_proxy(
    (url, key): (&str, &str),
    extra: &[&str],
    upstream: &str,
) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    spawn_piped(
        Command::new(BIN)
            .args(["mcp", "--agent", "helper", "--server", "up"])
            .args(extra)
            .args(["--", "python3", "-c", upstream])
            .env("ASSENT_URL", url)
            .env("ASSENT_API_KEY", key),
    )
}

/// Spawns `cmd` (an `assent mcp` proxy) with stdin and stdout piped and stderr discarded:
/// the child, its stdin, and its stdout to read lines from.
fn spawn_piped(cmd: &mut Command) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, stdin, out)
}

/// Stops a gateway with SIGTERM (its shutdown checkpoint signs the whole chain).
pub(crate) fn stop(mut s: Server) {
    let st = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = s.child.wait().unwrap();
    assert!(status.success(), "the gateway at {} ended {status}", s.url);
}

fn cli(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("ASSENT_URL", url)
        .env("ASSENT_API_KEY", OP_KEY)
        // Cards printed to a pipe are hung to `$COLUMNS` (else 80): the tests that read a
        // card's lines whole print it wide; terminal.rs tests the hanging itself.
        .env("COLUMNS", "100000")
        .output()
        .unwrap()
}

/// `assent ARGS…` to its end.
fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// `GET {url}{path}` with alice's operator key: the JSON body.
fn get_op(url: &str, path: &str) -> Value {
    get_as(url, path, OP_KEY).json().unwrap()
}

/// `GET {url}{path}` with `key`: the response.
fn get_as(url: &str, path: &str, key: &str) -> reqwest::blocking::Response {
    reqwest::blocking::Client::new()
        .get(format!("{url}{path}"))
        .bearer_auth(key)
        .send()
        .unwrap()
}

/// Writes each `(line, why)` of `cases` as a config (`listen: 127.0.0.1:0` then `line`) in
/// `dir` and asserts that `assent serve` stops with exit status 1 and a stderr naming the
/// file and line 2 (`FILE:2:`) and `why`.
#[track_caller]
fn start_up_refused(dir: &Path, cases: &[(&str, &str)]) {
    for (line, why) in cases {
        let p = dir.join("assent.yaml");
        std::fs::write(&p, format!("listen: 127.0.0.1:0\n{line}\n")).unwrap();
        let out = serve_cmd(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(1)
                && err.contains(&format!("{}:2:", p.display()))
                && err.contains(why),
            "{line}: {err}"
        );
    }
}

/// The agent bot proposes a transfer of `amount` EUR to `ext-1`: the gateway's answer.
fn propose(url: &str, amount: i64) -> Value {
    propose_to(url, amount, "ext-1")
}

/// The agent bot proposes a transfer of `amount` EUR to `recipient`: the gateway's answer.
fn propose_to(url: &str, amount: i64, recipient: &str) -> Value {
    reqwest::blocking::Client::new()
        .post(format!("{url}/v1/tool-calls"))
        .bearer_auth(BOT_KEY)
        .json(&json!({"agent": "treasury_bot", "session_id": "s", "tool": "transfer_funds", "arguments": {"amount": amount, "currency": "EUR", "recipient": recipient}}))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

#[test]
fn a_pending_approval_survives_kill_9_and_is_decided_after_restart() {
    let Served {
        dir: _dir,
        cfg,
        data,
        port,
        server: mut s,
    } = served("");
    let id = held(&s.url, 5000);
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
    ok(&cli(&s.url, &["approve", &id]));
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
    ok(&audit_verify(&data, &[]));
    let db = data.join("assent.db");
    let st = Command::new("sqlite3")
        .arg(&db)
        .arg("UPDATE audit SET actor = 'mallory' WHERE seq = 2;")
        .status()
        .unwrap();
    assert!(st.success());
    let out = audit_verify(&data, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken at record 2"), "{err}");
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

/// [`propose`] (a transfer of `amount`, held for `finance-admin` from 1000 up): the approval id
/// of the pending answer (the test fails on any other answer).
#[track_caller]
fn held(url: &str, amount: i64) -> String {
    let b = propose(url, amount);
    assert_eq!(b["decision"], "pending", "{b}");
    b["approval_id"].as_str().unwrap().to_string()
}

/// [`held`], then approved by alice through `assent approve` (which must succeed): the
/// approval id.
#[track_caller]
fn approved(url: &str, amount: i64) -> String {
    let id = held(url, amount);
    ok(&cli(url, &["approve", &id]));
    id
}

impl Server {
    /// Kills the gateway (`SIGKILL`: no shutdown runs) and waits for it to end.
    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// Spawns `cmd` (an `assent serve`, perhaps wrapped) with alice's operator key and its output
/// discarded; does not wait for it to serve.
fn spawn_quiet(mut cmd: Command) -> Child {
    cmd.env("TEST_ALICE_KEY", OP_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}
