//! Attacks on configuration loading and live reload (found by review), through a real
//! configuration file on disk, `Config::load` (what `assent serve` and `assent check` run) and
//! `POST /v1/reload`: a governance glob matching a dangling link or a named pipe, a huge file
//! in a globbed directory, a pipe or directory at a plain configured path, files grown past
//! the total bound after the load (read again for `assent suggest` and replay), escape
//! sequences and line breaks quoted from an agent file, a reload turning the Prometheus
//! scrape key into an operator's key, a reload whose audit record cannot be written, the
//! configuration's directory read as a glob and globs matching dot-files, and single sign-on
//! settings that let a person pose as a role or as two operators (warned about). Each
//! refused file stops start-up with the file and why, and a refused reload keeps the old set
//! in force whole.

use crate::kit::{AGENTS, Gw, Param, audit_count, policy, sqlite_only, start_custom};
use crate::reload::principals;
use assent_server::config::{Config, ReloadSource};
use assent_server::{Live, Settings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::Arc;

/// The operators' and the agent's keys of [`everyone`].
const ALICE: &str = "alice-key";
const OLAF: &str = "olaf-key";
const FRED: &str = "fred-key";
/// The Prometheus scrape key of the gateways here (`metrics_key_env` at start-up).
const SCRAPE: &str = "scrape-key-for-prometheus-only-0123456789";

/// The organisation's rules: `pay` needs two of finance.
fn denials() -> String {
    policy(
        "acme.test.denials",
        "- tool: pay\n  approvers: {roles: [finance], count: 2}\n",
    )
}

/// Alice and fred (operators, finance), olaf (operator, ops) and bot (the agent).
fn everyone() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        ("alice", "kind: operator, roles: [finance]", ALICE),
        ("fred", "kind: operator, roles: [finance]", FRED),
        ("olaf", "kind: operator, roles: [ops]", OLAF),
        ("bot", "kind: agent, agent_id: bot", "bot-key"),
    ]
}

/// A configuration naming `bot.agf.yaml` and every `policies/*.yaml`, with `list`.
fn config_text(list: &[(&str, &str, &str)]) -> String {
    format!(
        "agents: [bot.agf.yaml]\ngovernance: [\"policies/*.yaml\"]\n{}",
        principals(list)
    )
}

/// A gateway whose principals, agents and policies come from `conf/assent.yaml` (with
/// [`denials`] as `conf/policies/denials.yaml`), that reloads that file, and whose scrape key
/// is [`SCRAPE`]: the temporary directory, the gateway and its `conf` directory.
async fn reloadable() -> (tempfile::TempDir, Gw, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(conf.join("policies")).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    std::fs::write(conf.join("policies/denials.yaml"), denials()).unwrap();
    let file = conf.join("assent.yaml");
    std::fs::write(&file, config_text(&everyone())).unwrap();
    let cfg = Config::load(&file).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let scrape: [u8; 32] = Sha256::digest(SCRAPE.as_bytes()).into();
    let gw = start_custom(
        &data,
        300_000,
        Settings::default(),
        AGENTS,
        &denials(),
        |st| {
            st.swap_live(Live::new(cfg.registry.clone(), cfg.principals().unwrap()));
            st.reload = Some(Arc::new(ReloadSource::new(&cfg, false)));
            st.metrics_key_sha256 = Some(Arc::new(scrape));
        },
    )
    .await;
    (dir, gw, conf)
}

/// `POST /v1/reload` as olaf, which must be refused (422) with an error whose file ends with
/// `file` and whose reason contains `why`: the answer.
async fn refused(gw: &Gw, file: &str, why: &str) -> Value {
    let (s, b) = gw.req("POST", "/v1/reload", Some(OLAF), None).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let hit = b["errors"].as_array().unwrap().iter().any(|e| {
        e["file"].as_str().is_some_and(|f| f.ends_with(file))
            && e["reason"].as_str().is_some_and(|r| r.contains(why))
    });
    assert!(hit, "expected `{file}`: `{why}` in {b}");
    b
}

/// The policy set still in force is the one the gateway started with: `pay` still needs two
/// of finance (one approval leaves it pending).
async fn denials_still_in_force(gw: &Gw) {
    let id = gw.pending("pay", json!({"amount": 9000, "to": "x"})).await;
    let (s, b) = gw.decide(&id, ALICE, "approve").await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{b}"
    );
}

/// Attack (found by review): a governance glob skipped a match that was not a regular file, so
/// a file of organisation denials behind a dangling symbolic link (a mount moved) — or a named
/// pipe planted in the directory — went missing without a word, at start-up and on reload,
/// and the gateway ran without those denials. Such a match stops start-up naming it and why,
/// and a reload is refused with the old set in force; a directory the glob matches is still
/// skipped.
#[tokio::test]
async fn a_dangling_link_or_a_pipe_in_a_governance_glob_stops_start_up_and_reload() {
    let (_dir, gw, conf) = reloadable().await;
    let file = conf.join("assent.yaml");
    std::fs::create_dir(conf.join("policies/old.yaml")).unwrap();
    assert!(Config::load(&file).is_ok(), "a directory match is skipped");
    let link = conf.join("policies/more.yaml");
    std::os::unix::fs::symlink("/nonexistent/mount/more.yaml", &link).unwrap();
    let e = Config::load(&file).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}:2: governance glob", file.display()))
            && e.contains("more.yaml")
            && e.contains("symbolic link whose target does not exist"),
        "{e}"
    );
    refused(
        &gw,
        "assent.yaml",
        "symbolic link whose target does not exist",
    )
    .await;
    denials_still_in_force(&gw).await;
    std::fs::remove_file(&link).unwrap();
    let fifo = conf.join("policies/pipe.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success(), "mkfifo");
    let e = Config::load(&file).unwrap_err().to_string();
    assert!(
        e.contains("pipe.yaml") && e.contains("not a regular file (a named pipe)"),
        "{e}"
    );
    refused(&gw, "assent.yaml", "not a regular file (a named pipe)").await;
    std::fs::remove_file(&fifo).unwrap();
    let (s, b) = gw.req("POST", "/v1/reload", Some(OLAF), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

/// Attack (found by review): files were read whole without a limit, and the policy-set hash
/// copied every text before validation, so a huge file dropped into a globbed directory
/// exhausted memory on the next reload and ended the running gateway. Each file is read
/// through its opened handle up to 4 MiB; a larger one stops start-up naming the file, its
/// size and the limit, and a reload is refused with the old set in force.
#[tokio::test]
async fn a_huge_file_in_a_governance_glob_is_refused_not_read() {
    let (_dir, gw, conf) = reloadable().await;
    let huge = conf.join("policies/huge.yaml");
    let size = assent_server::config::MAX_FILE_BYTES + 1;
    std::fs::File::create(&huge).unwrap().set_len(size).unwrap();
    let e = Config::load(&conf.join("assent.yaml"))
        .unwrap_err()
        .to_string();
    let why = format!("is {size} bytes, larger than the limit of 4194304 bytes");
    assert_eq!(e, format!("{}: {why}", huge.display()));
    refused(&gw, "huge.yaml", &why).await;
    denials_still_in_force(&gw).await;
    // The configuration file itself is read the same way.
    std::fs::remove_file(&huge).unwrap();
    let file = conf.join("assent.yaml");
    std::fs::File::options()
        .append(true)
        .open(&file)
        .unwrap()
        .set_len(size)
        .unwrap();
    refused(&gw, "assent.yaml", &why).await;
    gw.stop().await;
}

/// Attack (found by review): a configuration file swapped for a named pipe was opened before
/// it was checked, and opening a pipe waits for a writer, so the reload thread waited for
/// ever holding the reload lock (every reload after it refused). The file is opened without
/// waiting and refused; and the agent and governance files together are bounded (64 MiB),
/// not only each one (found by review: many files of 4 MiB each had no bound).
#[tokio::test]
async fn a_pipe_as_the_configuration_or_too_many_large_files_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("assent.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success(), "mkfifo");
    // On a thread of its own: one stuck opening the pipe must not keep the test from ending.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(Config::load(&fifo).map(drop)));
    let e = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("opening a pipe waited for a writer")
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a regular file (a named pipe)"), "{e}");
    let (_dir, gw, conf) = reloadable().await;
    let n =
        assent_server::config::MAX_TOTAL_BYTES as u64 / assent_server::config::MAX_FILE_BYTES + 1;
    for i in 0..n {
        let f = conf.join(format!("policies/big-{i}.yaml"));
        let text = format!(
            "# {}\n",
            "x".repeat(assent_server::config::MAX_FILE_BYTES as usize - 16)
        );
        std::fs::write(f, text).unwrap();
    }
    let e = Config::load(&conf.join("assent.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("together pass the limit of 67108864 bytes"),
        "{e}"
    );
    gw.stop().await;
}

/// Attack (found by review): start-up refuses a principal whose key is the Prometheus scrape
/// key (`metrics_key_env`), but a reload did not check, so a reload giving an operator the
/// scrape key (`key_env: ASSENT_METRICS_KEY`; here its digest) made the key every scraper's
/// configuration holds an operator's key. The reload is refused with a problem naming the
/// principal and the scrape key, the old principals stay, and the scrape key still reads
/// `/metrics` only.
#[tokio::test]
async fn a_reload_cannot_make_the_scrape_key_an_operator_key() {
    let (_dir, gw, conf) = reloadable().await;
    let mut list = everyone();
    list.push(("scraper", "kind: operator, roles: [finance]", SCRAPE));
    std::fs::write(conf.join("assent.yaml"), config_text(&list)).unwrap();
    let b = refused(
        &gw,
        "assent.yaml",
        "principal `scraper`: its key is the Prometheus scrape key in force",
    )
    .await;
    assert_eq!(b["errors"][0]["line"], 8, "the principal's line: {b}");
    let (s, b) = gw.req("POST", "/v1/reload", Some(SCRAPE), None).await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "the scrape key is no operator's: {b}"
    );
    let r = gw.raw("GET", "/metrics", Some(SCRAPE)).await;
    assert_eq!(r.status(), StatusCode::OK);
    // `metrics_key_env` applies at the next start: a variable this process lacks is a
    // warning, not a refusal of every reload (found by review of the first form).
    let text = format!(
        "metrics_key_env: ASSENT_TEST_NO_SUCH_SCRAPE_KEY\n{}",
        config_text(&everyone())
    );
    std::fs::write(conf.join("assent.yaml"), text).unwrap();
    let (s, b) = gw.req("POST", "/v1/reload", Some(OLAF), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(
        b["warnings"]
            .to_string()
            .contains("metrics_key_env, which applies at the next start"),
        "{b}"
    );
    gw.stop().await;
}

/// Attack (found by review): a reload ended the changed principals' sessions and withdrew their
/// votes before appending its audit record; when that write failed the reload answered 503
/// and kept the old principals in force — but their votes were already withdrawn, so a
/// failed reload changed who had approved. Now the withdrawals and the record are one
/// transaction: the failed reload changes nothing (alice's vote still counts), and the next
/// one withdraws it and records both, as before.
#[tokio::test]
async fn a_reload_whose_audit_record_fails_withdraws_no_vote() {
    if sqlite_only("the failure is injected with a SQLite trigger on the audit table") {
        return;
    }
    let (_dir, gw, conf) = reloadable().await;
    let id = gw
        .pending("pay", json!({"amount": 9000, "to": "mallory"}))
        .await;
    let (s, b) = gw.decide(&id, ALICE, "approve").await;
    assert_eq!((s, b["status"].as_str()), (StatusCode::OK, Some("pending")));
    let without_alice: Vec<_> = everyone().into_iter().filter(|p| p.0 != "alice").collect();
    std::fs::write(conf.join("assent.yaml"), config_text(&without_alice)).unwrap();
    gw.sql().exec(
        "CREATE TRIGGER fail_reload BEFORE INSERT ON audit WHEN NEW.kind = 'config.reloaded' \
         BEGIN SELECT RAISE(ABORT, 'injected'); END",
        &[],
    );
    let (s, b) = gw.req("POST", "/v1/reload", Some(OLAF), None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "decision.vote_withdrawn"), 0);
    let votes = gw.sql().int(
        "SELECT count(*) FROM votes WHERE approval_id = ?1 AND principal = 'alice'",
        &[Param::from(&id)],
    );
    assert_eq!(votes, 1, "the failed reload withdrew alice's vote");
    let (s, _) = gw.approval(&id, ALICE).await;
    assert_eq!(s, StatusCode::OK, "alice is still in force");
    gw.sql().exec("DROP TRIGGER fail_reload", &[]);
    let (s, b) = gw.req("POST", "/v1/reload", Some(OLAF), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "decision.vote_withdrawn"), 1);
    assert_eq!(audit_count(&gw.data_dir, "config.reloaded"), 1);
    let (s, b) = gw.decide(&id, FRED, "approve").await;
    assert_eq!((s, b["status"].as_str()), (StatusCode::OK, Some("pending")));
    gw.stop().await;
}

/// Attack (found by review): a plain (non-glob) `agents` or `governance` path that exists but
/// is a named pipe or a directory was reported as a file that "does not exist", hiding what
/// was planted there. Start-up and a reload now name what it is, as glob matches do, and a
/// missing file still does not exist.
#[tokio::test]
async fn a_pipe_or_a_directory_at_a_plain_configured_path_is_named_for_what_it_is() {
    let (_dir, gw, conf) = reloadable().await;
    let file = conf.join("assent.yaml");
    let agent = conf.join("bot.agf.yaml");
    std::fs::remove_file(&agent).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&agent).status();
    assert!(made.unwrap().success(), "mkfifo");
    let e = Config::load(&file).unwrap_err().to_string();
    let why = "agents file `bot.agf.yaml` is a named pipe, not a regular file";
    assert!(
        e.starts_with(&format!("{}:1: {why}", file.display())),
        "{e}"
    );
    refused(&gw, "assent.yaml", why).await;
    denials_still_in_force(&gw).await;
    std::fs::remove_file(&agent).unwrap();
    std::fs::create_dir(&agent).unwrap();
    let e = Config::load(&file).unwrap_err().to_string();
    assert!(
        e.contains("agents file `bot.agf.yaml` is a directory, not a regular file"),
        "{e}"
    );
    std::fs::remove_dir(&agent).unwrap();
    let e = Config::load(&file).unwrap_err().to_string();
    assert!(
        e.contains("agents file `bot.agf.yaml` does not exist"),
        "{e}"
    );
    gw.stop().await;
}

/// Attack (found by review): `assent suggest` and the replay and suggestion endpoints read the
/// configuration's agent and governance files a second time, after the load, each bounded
/// but not all together, so files that grew after the load — each under 4 MiB, together far
/// over 64 MiB — were read whole. [`Config::policy_files`], which they read through now,
/// applies the load's bounds: the 64 MiB total, the 4 MiB per file and regular files only.
#[tokio::test]
async fn files_grown_after_the_load_are_bounded_when_read_again_for_suggest_and_replay() {
    use assent_server::config::{MAX_FILE_BYTES, MAX_TOTAL_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path();
    std::fs::create_dir(conf.join("policies")).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    let n = MAX_TOTAL_BYTES as u64 / MAX_FILE_BYTES + 1;
    let files: Vec<PathBuf> = (0..n)
        .map(|i| conf.join(format!("policies/p-{i:02}.yaml")))
        .collect();
    for f in &files {
        std::fs::write(f, "policies: []\n").unwrap();
    }
    let file = conf.join("assent.yaml");
    std::fs::write(&file, config_text(&everyone())).unwrap();
    let cfg = Config::load(&file).unwrap();
    let read = cfg.policy_files().unwrap();
    assert_eq!((read.agents.len(), read.governance.len()), (1, n as usize));
    let text = format!("# {}\n", "x".repeat(MAX_FILE_BYTES as usize - 16));
    for f in &files {
        std::fs::write(f, &text).unwrap();
    }
    // (Not `unwrap_err`: on failure, not 68 MiB of text in the message.)
    let Err(e) = cfg.policy_files() else {
        panic!("the files were read past 64 MiB together")
    };
    let e = e.to_string();
    assert!(
        e.contains("together pass the limit of 67108864 bytes"),
        "{e}"
    );
    // A file swapped for a pipe since the load is refused at once, not waited on.
    std::fs::remove_file(&files[0]).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&files[0]).status();
    assert!(made.unwrap().success(), "mkfifo");
    let Err(e) = cfg.policy_files() else {
        panic!("a pipe was read")
    };
    let e = e.to_string();
    assert!(e.contains("is not a regular file (a named pipe)"), "{e}");
}

/// Attack (found by review): problem lines quoted ids and paths from the files as they were,
/// so an agent file written by another team could put terminal escape sequences (`\e[2J`
/// clears the operator's screen) and line breaks into start-up errors, logs and a reload's
/// answer — where a line break forged a problem of its own, naming any file and line. Such
/// characters now arrive escaped (`\u001b`, `\u000a`), in one problem line, and a place
/// quoted inside the reason (`assent.yaml:1: `) is not taken for the problem's own.
#[tokio::test]
async fn an_escape_sequence_or_a_line_break_in_an_agent_file_arrives_escaped() {
    let (_dir, gw, conf) = reloadable().await;
    let file = conf.join("assent.yaml");
    std::fs::write(
        conf.join("bot.agf.yaml"),
        "metadata:\n  id: \"bot\\e[2J\\nassent.yaml:1: forged\"\naction_space:\n  local_tools: [{alias: pay, approval: true}]\n",
    )
    .unwrap();
    let quoted = r"metadata.id `bot\u001b[2J\u000aassent.yaml:1: forged` must match";
    let e = Config::load(&file).unwrap_err().to_string();
    let raw = ['\u{1b}', '\n', '\u{202e}'];
    assert!(e.contains(quoted) && !e.contains(raw), "{e:?}");
    let b = refused(&gw, "bot.agf.yaml", quoted).await;
    let errors = b["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "one problem, none forged: {b}");
    assert_eq!(
        errors[0]["line"], 2,
        "the id's own line, none taken from its text: {b}"
    );
    assert!(!errors[0]["reason"].as_str().unwrap().contains(raw), "{b}");
    // A file name from a glob is quoted the same way, in a policy's problem and in a refused
    // match's.
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    let named = conf.join("policies/\u{1b}[2J\u{202e}.yaml");
    std::fs::write(&named, "policies: 7\n").unwrap();
    let e = Config::load(&file).unwrap_err().to_string();
    let shown = r"policies/\u001b[2J\u202e.yaml";
    assert!(
        e.contains(&format!("{shown}:1: ")) && !e.contains(raw),
        "{e:?}"
    );
    std::fs::remove_file(&named).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&named).status();
    assert!(made.unwrap().success(), "mkfifo");
    let e = Config::load(&file).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{shown}, which is not a regular file")) && !e.contains(raw),
        "{e:?}"
    );
    gw.stop().await;
}

/// Attack (found by review): a reload's answer read each problem's place back out of its
/// rendered line (`FILE:LINE: reason`, up to the first `: `), so a glob-matched policy file
/// named `assent.yaml:9: x.yaml` put its problem at line 9 of another file, `…/assent.yaml`.
/// The place now travels apart from the reason, as the loader found it.
#[tokio::test]
async fn a_file_name_holding_a_place_does_not_forge_the_place_of_its_problem() {
    let (_dir, gw, conf) = reloadable().await;
    let name = "assent.yaml:9: x.yaml";
    std::fs::write(conf.join("policies").join(name), "policies: 7\n").unwrap();
    let b = refused(&gw, name, "").await;
    let errors = b["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{b}");
    let file = errors[0]["file"].as_str().unwrap();
    assert!(file.ends_with(&format!("policies/{name}")), "{b}");
    assert_eq!(errors[0]["line"], 1, "the line of the file itself: {b}");
    assert!(
        !errors[0]["reason"].as_str().unwrap().contains(":1:"),
        "{b}"
    );
    denials_still_in_force(&gw).await;
    gw.stop().await;
}

/// Writes `DIR/assent.yaml` naming `agents/*.yaml` and `policies/*.yaml` (with
/// [`denials`]) and `DIR/agents/bot.yaml` (the agent `bot`); the agents [`Config::load`]
/// loads from it, by id.
fn agents_loaded_from(dir: &std::path::Path) -> Vec<String> {
    std::fs::create_dir_all(dir.join("agents")).unwrap();
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("agents/bot.yaml"), AGENTS).unwrap();
    std::fs::write(dir.join("policies/denials.yaml"), denials()).unwrap();
    let text = format!(
        "agents: [\"agents/*.yaml\"]\ngovernance: [\"policies/*.yaml\"]\n{}",
        principals(&everyone())
    );
    std::fs::write(dir.join("assent.yaml"), text).unwrap();
    let cfg = Config::load(&dir.join("assent.yaml")).unwrap_or_else(|e| panic!("{e}"));
    cfg.registry.agents.keys().cloned().collect()
}

/// An agent file of agent `id` that asks nothing of anyone.
fn permissive(id: &str) -> String {
    format!("metadata: {{id: {id}}}\naction_space:\n  local_tools:\n    - alias: pay\n")
}

/// Attack (found by review): the configuration's own directory was read as part of each
/// glob, so a configuration in `…/g[x]/` took its agents and policies from a sibling
/// `…/gx/` (`[x]` matches `x`). Only the configured pattern is a glob now: the files beside
/// the configuration load, the sibling's do not.
#[test]
fn the_configurations_directory_is_not_read_as_a_glob() {
    let root = tempfile::tempdir().unwrap();
    let sibling = root.path().join("gx");
    std::fs::create_dir_all(sibling.join("agents")).unwrap();
    std::fs::write(sibling.join("agents/evil.yaml"), permissive("evil")).unwrap();
    std::fs::create_dir_all(sibling.join("policies")).unwrap();
    std::fs::write(sibling.join("policies/denials.yaml"), denials()).unwrap();
    assert_eq!(agents_loaded_from(&root.path().join("g[x]")), ["bot"]);
}

/// Attack (found by review): globs matched names starting with `.`, so a file renamed
/// `.old.yaml` to disable it was still loaded, and an editor's dangling lock link
/// `.#bot.yaml` failed every start and reload. A `*` no longer matches a leading `.`.
#[test]
fn a_glob_does_not_match_dot_files() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join(".old.yaml"), permissive("old")).unwrap();
    std::os::unix::fs::symlink("user@host.1234:1", agents.join(".#bot.yaml")).unwrap();
    assert_eq!(agents_loaded_from(dir.path()), ["bot"]);
}

/// Attack (found by review): without `oidc.roles`, every group in the claim is a role of the
/// same name, and many providers let users name groups (GitLab group paths, Entra display
/// names): a user who creates a group `finance` signs in as an approver. Start-up warns with
/// the file and line; with a `roles` map it does not.
#[test]
fn oidc_without_a_roles_map_warns_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let bare = crate::sso::GOOD.replace(", roles: {fin: [finance], opsgroup: [ops]}", "");
    let file = crate::sso::write_config(dir.path(), &bare, "");
    let c = Config::load(&file).unwrap();
    let w = c.warnings.join("\n");
    assert!(w.contains("assent.yaml:3: oidc.roles is not set"), "{w}");
    let file = crate::sso::write_config(dir.path(), crate::sso::GOOD, "");
    let c = Config::load(&file).unwrap();
    assert!(!c.warnings.join("\n").contains("oidc."), "{:?}", c.warnings);
}

/// Attack (found by review): a list written with no value is YAML null, which serde read as
/// the key left out — "no restriction": an executor's `tools:` with its entries commented out
/// redeemed tokens for every tool of its servers, `oidc.roles:` left empty made every group in
/// the claim a role of the same name, and `slack.team_id:` honoured a signed click from any
/// workspace. Each stops start-up with the file and line.
#[test]
fn a_list_written_with_no_value_stops_start_up_instead_of_allowing_everything() {
    let dir = tempfile::tempdir().unwrap();
    let executor = "principals:\n  - {name: payments, kind: executor, key_env: PAY_KEY, agents: [bot], servers: [pay], tools: }\n";
    let file = crate::sso::write_config(dir.path(), "", executor);
    let err = format!("{:#}", Config::load(&file).unwrap_err());
    assert!(
        err.contains("assent.yaml:5") && err.contains("no value (null)"),
        "{err}"
    );
    let any_workspace = "slack: {signing_secret_env: SLACK_SECRET, team_id: }";
    let file = crate::sso::write_config(dir.path(), any_workspace, "");
    let err = format!("{:#}", Config::load(&file).unwrap_err());
    assert!(
        err.contains("assent.yaml:3") && err.contains("no value (null)"),
        "{err}"
    );
    let unmapped = crate::sso::GOOD.replace("roles: {fin: [finance], opsgroup: [ops]}", "roles: ~");
    let file = crate::sso::write_config(dir.path(), &unmapped, "");
    let err = format!("{:#}", Config::load(&file).unwrap_err());
    assert!(
        err.contains("assent.yaml:3") && err.contains("no value (null)"),
        "{err}"
    );
}

/// Attack (found by review): a session and a quorum vote are keyed by the operator's name, the
/// `name_claim`'s value; with a claim people may change (`preferred_username`), one person
/// votes, renames themselves and votes again as a new operator. Start-up warns with the file
/// and line unless the claim is `sub` or `email`.
#[test]
fn a_name_claim_people_may_change_warns_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    for (claim, warned) in [
        ("preferred_username", true),
        ("sub", false),
        ("email", false),
    ] {
        let oidc = crate::sso::GOOD.replace(
            "roles_claim:",
            &format!("name_claim: {claim}, roles_claim:"),
        );
        let file = crate::sso::write_config(dir.path(), &oidc, "");
        let w = Config::load(&file).unwrap().warnings.join("\n");
        let want =
            format!("assent.yaml:3: oidc.name_claim `{claim}` may be a claim people can change");
        assert_eq!(w.contains(&want), warned, "{claim}: {w}");
    }
}

/// Attack (found by review): replicas of one database whose files differed only in a
/// restart-only setting that decides what consent is worth counted as one configuration (the
/// generation's digest, `generations.rs`, left those settings out), so one replica started
/// without Slack's `team_id` took signed clicks from any workspace while the others refused
/// them, and one with `token_ttl_seconds: 86400` minted day-long tokens. Each such setting
/// changes [`assent_server::config::consent_settings`]; per-host ones (`listen`, `data_dir`,
/// connection limits, webhooks) do not.
#[test]
fn every_setting_that_decides_what_consent_is_worth_is_in_the_generation() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bot.agf.yaml"), AGENTS).unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(dir.path().join("policies/denials.yaml"), denials()).unwrap();
    let base = config_text(&everyone());
    let settings = |extra: &str| {
        let file = dir.path().join("assent.yaml");
        std::fs::write(&file, format!("{base}{extra}")).unwrap();
        assent_server::config::consent_settings(&Config::load(&file).unwrap())
    };
    let plain = settings("");
    let slack = "slack: {signing_secret_env: SLACK_SECRET}\n";
    let per_host = [
        "listen: 127.0.0.1:9999\ndata_dir: elsewhere\n",
        "max_connections: 500\nrate_limits: {requests_per_second: 5, burst: 10}\n",
        "body_read_timeout_seconds: 5\nheader_read_timeout_seconds: 5\n",
    ];
    for extra in per_host {
        assert_eq!(settings(extra), plain, "{extra}");
    }
    let deciding = [
        "token_ttl_seconds: 86400\n",
        "session_grant_max_seconds: 600\n",
        "approval_timeout_seconds: 30\n",
        "aaep_max_timeout_extension_seconds: 0\n",
        "max_pending_per_agent: 5\n",
        "max_arguments_bytes: 1024\n",
        "audit_retention_days: 1\n",
        "passkeys: {origin: \"https://assent.example.com\"}\n",
        slack,
    ];
    let mut seen = vec![plain.clone()];
    for extra in deciding {
        let s = settings(extra);
        assert!(!seen.contains(&s), "{extra} changes nothing: {s}");
        seen.push(s);
    }
    let workspace = settings(&format!(
        "{}, team_id: T0123ABCD}}\n",
        &slack[..slack.len() - 2]
    ));
    assert!(!seen.contains(&workspace), "{workspace}");
}
