//! Loading agent and governance files through the real binary (`assent check`, `assent
//! serve`): unknown Agent Format fields found in one pass and listed up to a cap, each at its
//! own line; governance policies that would apply to nobody (a typo'd selector, a rule's
//! `server` no agent declares) warned about or refused; a symlinked agent file loaded once.

use crate::BIN;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Writes `files` (`(name, text)`) and `assent.yaml` (`agents: [...]`, `governance: [...]`
/// from the names ending in `.agf.yaml` and the others) into `dir`; returns the config path.
fn write_files(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
    let (mut agents, mut gov) = (Vec::new(), Vec::new());
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
        let list = if name.ends_with(".agf.yaml") {
            &mut agents
        } else {
            &mut gov
        };
        list.push(format!("\"{name}\""));
    }
    let cfg = dir.join("assent.yaml");
    std::fs::write(
        &cfg,
        format!(
            "agents: [{}]\ngovernance: [{}]\n",
            agents.join(", "),
            gov.join(", ")
        ),
    )
    .unwrap();
    cfg
}

/// `assent check --config CFG --agent AGENT --tool pay EXTRA…`, killed (and the test failed)
/// when it has not ended within `limit`: its exit code and stderr.
fn check_within(cfg: &Path, agent: &str, extra: &[&str], limit: Duration) -> (i32, String) {
    let mut child = Command::new(BIN)
        .args(["check", "--config"])
        .arg(cfg)
        .args(["--agent", agent, "--tool", "pay"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`assent check` did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code().unwrap_or(-1), reader.join().unwrap())
}

/// `assent check` with a generous bound (the load takes well under a second).
fn check(cfg: &Path, agent: &str, extra: &[&str]) -> (i32, String) {
    check_within(cfg, agent, extra, Duration::from_secs(120))
}

/// Attack (found by review): each unknown agent-file field's line was found by scanning
/// every line of the file, building strings per line: 100k quoted unknown keys (`"k1": 1`,
/// ~1.5 MB) made ~10¹⁰ line checks, so start-up never came up and a reload held the reload
/// lock for minutes. Lines now come from the parser in one pass, and the warnings stop at
/// 100 per file with a count of the rest.
#[test]
fn a_hundred_thousand_unknown_agent_file_keys_load_in_one_pass_and_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let mut agent = String::from(
        "metadata: {id: bot}\naction_space:\n  local_tools: [{alias: pay, approval: true}]\n",
    );
    for i in 0..100_000 {
        agent.push_str(&format!("\"k{i}\": 1\n"));
    }
    let cfg = write_files(dir.path(), &[("bot.agf.yaml", &agent)]);
    let (code, err) = check(&cfg, "bot", &[]);
    assert_eq!(
        code,
        10,
        "the unknown keys are ignored: {}",
        &err[..err.len().min(2000)]
    );
    let listed = err
        .lines()
        .filter(|l| l.contains("unknown field `k"))
        .count();
    assert_eq!(listed, 100, "{}", &err[..err.len().min(2000)]);
    assert!(
        err.contains("bot.agf.yaml: 99900 more unknown fields not listed"),
        "{err}"
    );
    // `k0` is the first key in order, on line 4.
    assert!(err.contains("bot.agf.yaml:4: unknown field `k0`"), "{err}");
    // Strict: the same cap, as errors.
    let (code, err) = check(&cfg, "bot", &["--strict"]);
    assert_eq!(code, 2);
    assert!(
        err.lines()
            .filter(|l| l.contains("unknown field `k"))
            .count()
            == 100
            && err.contains("99900 more unknown fields not listed"),
        "{}",
        &err[..err.len().min(2000)]
    );
}

/// Attack (found by review): an unknown field was reported at the first `KEY:` anywhere in
/// the file, so `id` mistyped under `constraints.governance_policies[0]` pointed at
/// `metadata.id` — the operator looked at the wrong line. It is now at its own line.
#[test]
fn an_unknown_key_under_a_policy_reference_is_reported_at_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let agent = "metadata:\n  id: bot\naction_space:\n  local_tools: [{alias: pay}]\nconstraints:\n  governance_policies:\n    - policy_ref: acme.p-v1\n      id: acme.p-v1\n";
    let gov = "policies:\n  - id: acme.p-v1\n    selector: {agents: [bot]}\n    rules:\n      - {tool: pay, approval: true}\n";
    let cfg = write_files(dir.path(), &[("bot.agf.yaml", agent), ("gov.yaml", gov)]);
    let (code, err) = check(&cfg, "bot", &[]);
    assert_eq!(code, 10, "{err}");
    assert!(
        err.contains("bot.agf.yaml:8: unknown field `constraints.governance_policies[0].id`"),
        "{err}"
    );
}

/// The agent file of `payments-bot` (local tool `pay`, MCP server `bank`) and a governance
/// file whose one policy has `selector` and denies `pay` (on `server`, when given).
fn deny_policy(selector: &str, server: Option<&str>) -> [(&'static str, String); 2] {
    let agent = "metadata: {id: payments-bot}\naction_space:\n  local_tools: [{alias: pay}]\n  mcp_servers: [{alias: bank}]\n".to_string();
    let server = server.map(|s| format!(", server: {s}")).unwrap_or_default();
    let gov = format!(
        "policies:\n  - id: acme.deny-v1\n    selector: {selector}\n    rules:\n      - {{tool: pay, deny: true{server}}}\n"
    );
    [("payments.agf.yaml", agent), ("gov.yaml", gov)]
}

fn write_pair(dir: &Path, files: &[(&'static str, String); 2]) -> PathBuf {
    write_files(dir, &[(files[0].0, &files[0].1), (files[1].0, &files[1].1)])
}

/// Attack (found by review): a governance policy whose selector matches no loaded agent — a
/// typo, `agents: [paymnts-bot]` — loaded without a word, and its `deny` rules refused
/// nobody. Start-up and `check` now warn, naming the policy's file and line and the selector
/// entry that names no agent.
#[test]
fn a_deny_policy_whose_selector_names_no_loaded_agent_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_pair(dir.path(), &deny_policy("{agents: [paymnts-bot]}", None));
    let (code, err) = check(&cfg, "payments-bot", &[]);
    assert_eq!(code, 0, "the policy applies to nobody, as before: {err}");
    assert!(
        err.contains("gov.yaml:2: policy `acme.deny-v1` applies to no loaded agent"),
        "{err}"
    );
    assert!(
        err.contains(
            "gov.yaml:3: policy `acme.deny-v1` selector.agents: `paymnts-bot` names no loaded agent"
        ),
        "{err}"
    );
    // A label selector that picks no agent is warned about the same way.
    let cfg = write_pair(dir.path(), &deny_policy("{labels: {team: pay}}", None));
    let (_, err) = check(&cfg, "payments-bot", &[]);
    assert!(
        err.contains("gov.yaml:2: policy `acme.deny-v1` applies to no loaded agent"),
        "{err}"
    );
    // The selector fixed: the deny applies, and nothing is warned.
    let cfg = write_pair(dir.path(), &deny_policy("{agents: [payments-bot]}", None));
    let (code, err) = check(&cfg, "payments-bot", &[]);
    assert!(code == 11 && !err.contains("warning"), "{code} {err}");
}

/// Attack (found by review): `agents: [Payments-bot]` can never select an agent (ids are
/// `^[a-z0-9][a-z0-9_-]*$`, matched case-sensitively), yet loaded, its deny applying to
/// nobody. Such a selector entry — a literal or a glob whose literal characters cannot be in
/// an id, or (found by a later review) whose bracket expression admits no character an id
/// holds there (`[A-Z]*`), or that begins with `-` — is now a load error with the file and the
/// entry's line.
#[test]
fn a_selector_entry_that_can_never_be_an_agent_id_stops_the_load() {
    let dir = tempfile::tempdir().unwrap();
    for entry in ["Payments-bot", "Pay*", "payments.bot", "[A-Z]*", "-bot"] {
        let sel = format!("\n      agents:\n        - payments-bot\n        - \"{entry}\"");
        let cfg = write_pair(dir.path(), &deny_policy(&sel, None));
        let (code, err) = check(&cfg, "payments-bot", &[]);
        assert_eq!(code, 2, "{entry}: {err}");
        assert!(
            err.contains(&format!(
                "gov.yaml:6: policy `acme.deny-v1` selector.agents: `{entry}` can never match an agent id"
            )),
            "{entry}: {err}"
        );
    }
}

/// Attack (found by review): a rule limited to a `server` that no agent the policy applies
/// to declares (`server: bnak`) covers no call — a deny that refuses nothing, loaded in
/// silence. It is now warned about with the rule's line.
#[test]
fn a_rule_on_a_server_no_applicable_agent_declares_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_pair(
        dir.path(),
        &deny_policy("{agents: [payments-bot]}", Some("bnak")),
    );
    let (_, err) = check(&cfg, "payments-bot", &[]);
    assert!(
        err.contains("gov.yaml:5: policy `acme.deny-v1` rules[0]: server `bnak` is declared by none of the agents the policy applies to (payments-bot)"),
        "{err}"
    );
    let cfg = write_pair(
        dir.path(),
        &deny_policy("{agents: [payments-bot]}", Some("bank")),
    );
    let (_, err) = check(&cfg, "payments-bot", &[]);
    assert!(!err.contains("warning"), "{err}");
}

/// Attack (found by review): SIGHUP's handler was installed only once the gateway served, so
/// a SIGHUP during start-up (store open, migrations, bind, the MCP upstreams' start — a log
/// rotation's `kill -HUP` at the wrong moment) had its default action: the gateway died and
/// its upstream children were orphaned. It is now handled from the start, and reloads once
/// the gateway serves.
#[test]
fn a_sighup_while_the_upstreams_start_neither_kills_the_gateway_nor_orphans_them() {
    use crate::hub_kit::{py_text, py_tools, py_upstream};
    let dir = tempfile::tempdir().unwrap();
    let port = crate::free_port();
    let marker = dir.path().join("upstream-started");
    let marker_py = serde_json::to_string(&marker.display().to_string()).unwrap();
    // The upstream says it has started, then takes 2 s before it answers `initialize`.
    let source =
        format!("import pathlib,time\npathlib.Path({marker_py}).write_text('x')\ntime.sleep(2)\n")
            + &py_upstream(&py_tools("t"), &py_text("ok"));
    let command = serde_json::to_string(&["python3", "-c", &source]).unwrap();
    std::fs::write(
        dir.path().join("helper.agf.yaml"),
        "metadata: {id: helper}\naction_space:\n  mcp_servers: [{alias: up}]\n",
    )
    .unwrap();
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [helper.agf.yaml]\nprincipals:\n  - {{name: alice, kind: operator, roles: [ops], key_env: TEST_ALICE_KEY}}\nmcp_upstreams:\n  up: {{command: {command}}}\n"
        ),
    )
    .unwrap();
    let child = crate::spawn_quiet(crate::serve_cmd(&cfg));
    let mut server = crate::Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    crate::hub_kit::within(20, "the upstream did not start", || {
        marker.exists().then_some(())
    });
    crate::sighup(&server.child);
    let start = Instant::now();
    while reqwest::blocking::get(format!("{}/healthz", server.url)).is_err() {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("the gateway ended on a SIGHUP during start-up: {status}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the gateway did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Serving, and still serving after the kept SIGHUP's reload.
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.child.try_wait().unwrap().is_none());
    crate::stop(server);
}

/// `assent serve` of the test config with webhook `ops` (`hook`: its YAML flow mapping's
/// fields after name and url), with both test secrets set: its directory, config and server.
fn served_with_hook(hook: &str) -> (tempfile::TempDir, PathBuf, crate::Server) {
    let dir = tempfile::tempdir().unwrap();
    let port = crate::free_port();
    let cfg = crate::write_config(dir.path(), port, &webhooks(hook));
    let mut cmd = crate::serve_cmd(&cfg);
    cmd.env("C2_HOOK_SECRET_A", "hook-secret-a-0123456789abcdef0123")
        .env("C2_HOOK_SECRET_B", "hook-secret-b-0123456789abcdef0123");
    let server = crate::serve_with(cmd, port);
    (dir, cfg, server)
}

/// The `webhooks:` lines of webhook `ops` with `hook`'s fields.
fn webhooks(hook: &str) -> String {
    format!("webhooks:\n  - {{name: ops, url: \"http://127.0.0.1:9/h\", {hook}}}\n")
}

/// Attack (found by review): a reload compared webhooks by a text that left out
/// `secret_env`, `max_attempts` and `retry_initial_ms`, so an operator rotating a leaked
/// webhook secret (a new `secret_env`) and reloading was told `needs_restart: []` — done —
/// while the old secret kept signing. Such a change is now named as needing a restart.
#[test]
fn a_reload_that_rotates_a_webhook_secret_env_says_it_needs_a_restart() {
    for (before, after) in [
        (
            "secret_env: C2_HOOK_SECRET_A",
            "secret_env: C2_HOOK_SECRET_B",
        ),
        (
            "secret_env: C2_HOOK_SECRET_A",
            "secret_env: C2_HOOK_SECRET_A, max_attempts: 3",
        ),
        (
            "secret_env: C2_HOOK_SECRET_A",
            "secret_env: C2_HOOK_SECRET_A, retry_initial_ms: 50",
        ),
    ] {
        let (_dir, cfg, server) = served_with_hook(before);
        let text = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(&cfg, text.replace(&webhooks(before), &webhooks(after))).unwrap();
        let out = crate::ok(&crate::cli(&server.url, &["reload", "--json"]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(
            v["needs_restart"]
                .as_array()
                .is_some_and(|a| a.iter().any(|k| k == "webhooks")),
            "{after}: {v}"
        );
        crate::stop(server);
    }
}

/// Attack (found by review): only adjacent repeats of a configured file were dropped, so the
/// same agent file named twice apart (`[a, b, a]`) or through a symbolic link was read twice
/// and the load failed with "agent id `bot` is already defined in" that very file. Each file
/// is now read once, however it is named.
#[cfg(unix)]
#[test]
fn the_same_agent_file_named_twice_or_through_a_link_is_loaded_once() {
    let dir = tempfile::tempdir().unwrap();
    let bot = "metadata: {id: bot}\naction_space:\n  local_tools: [{alias: pay, approval: true}]\n";
    let fs = "metadata: {id: fs}\n";
    write_files(dir.path(), &[("bot.agf.yaml", bot), ("fs.agf.yaml", fs)]);
    std::os::unix::fs::symlink(
        dir.path().join("bot.agf.yaml"),
        dir.path().join("link.agf.yaml"),
    )
    .unwrap();
    let cfg = dir.path().join("assent.yaml");
    for agents in [
        "[bot.agf.yaml, fs.agf.yaml, bot.agf.yaml]",
        "[bot.agf.yaml, fs.agf.yaml, link.agf.yaml]",
        "[bot.agf.yaml, \"*.agf.yaml\"]",
    ] {
        std::fs::write(&cfg, format!("agents: {agents}\n")).unwrap();
        let (code, err) = check(&cfg, "bot", &[]);
        assert_eq!(code, 10, "{agents}: {err}");
    }
}

/// Attack (found by review): a bad or repeated `metadata.id` was reported without a line, and
/// an id starting with `_` or `-` was accepted though the message (and every other check of an
/// agent id) says `^[a-z0-9][a-z0-9_-]*$` — an agent no selector literal could name as the
/// message describes it. Both now stop the load at the id's line.
#[test]
fn a_bad_or_repeated_agent_id_stops_the_load_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for id in ["_bot", "-bot", "Bot"] {
        let agent = format!("schema_version: \"1.0.0\"\nmetadata:\n  id: \"{id}\"\n");
        let cfg = write_files(dir.path(), &[("bot.agf.yaml", &agent)]);
        let (code, err) = check(&cfg, "bot", &[]);
        assert!(
            code == 2
                && err.contains(&format!(
                    "bot.agf.yaml:3: metadata.id `{id}` must match ^[a-z0-9][a-z0-9_-]*$"
                )),
            "{id}: {err}"
        );
    }
    let cfg = write_files(
        dir.path(),
        &[
            ("a.agf.yaml", "metadata: {id: bot}\n"),
            ("b.agf.yaml", "\nmetadata: {id: bot}\n"),
        ],
    );
    let (code, err) = check(&cfg, "bot", &[]);
    assert!(
        code == 2 && err.contains("b.agf.yaml:2: agent id `bot` is already defined in"),
        "{err}"
    );
}

/// Found by review: `passkeys.origin` took any `http` origin, while each passkey assertion is
/// held to a secure origin of the relying party's domain (https, or http on localhost), so a
/// gateway configured with `http://dash.example` started and then refused every passkey
/// approval. Such an origin now stops start-up, naming the file and line.
#[test]
fn a_passkey_origin_no_browser_could_use_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(
        &cfg,
        "listen: 127.0.0.1:0\ndata_dir: data\npasskeys: {origin: \"http://dash.example\"}\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("assent.yaml:3") && err.contains("not a secure origin"),
        "{err}"
    );
}
