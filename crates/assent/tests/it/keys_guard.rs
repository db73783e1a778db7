//! One key set per database, never made or replaced by surprise (found by review): a replica
//! given a key set of its own (`assent keys init` run on its host) is not served over a
//! database checkpointed under another — on PostgreSQL (skipped with `ASSENT_TEST_NO_PG=1`)
//! as on SQLite, the same start-up check; `assent keys init --config` refuses new keys for a
//! database already served; `assent audit key` never makes a key; concurrent `keys init`
//! runs all print the key kept; an existing directory keeps its mode.

use crate::{
    BIN, BOT_KEY, OP_KEY, Server, free_port, ok, propose, run, serve_cmd, serve_with, stop,
    write_config,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `assent keys init --keys-dir DIR --json`: its report.
pub(crate) fn keys_init(dir: &Path) -> Value {
    let out = run(&[
        "keys",
        "init",
        "--json",
        "--keys-dir",
        dir.to_str().unwrap(),
    ]);
    serde_json::from_str(&ok(&out)).unwrap()
}

/// `cmd` (an `assent serve`) run with `env`, which must stop by itself within 60 s with a
/// failure status: its stderr. A gateway that serves instead fails the test.
#[track_caller]
pub(crate) fn start_refused(mut cmd: Command, env: &[(&str, &str)]) -> String {
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .env("TEST_ALICE_KEY", OP_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway started and kept serving");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{status}: {err}");
    err
}

/// The test config (port `port`) in `dir` with `keys_dir: KEYS` and `extra` lines.
pub(crate) fn config(dir: &Path, port: u16, keys: &str, extra: &str) -> std::path::PathBuf {
    write_config(dir, port, &format!("keys_dir: {keys}\n{extra}"))
}

/// `f` (a test's body taking a config's `extra` lines and the environment of every command)
/// over a throw-away PostgreSQL schema: the `database:` line and `ASSENT_DATABASE_URL`. Does
/// nothing where PostgreSQL is skipped (`ASSENT_TEST_NO_PG=1`).
pub(crate) fn on_postgres(f: impl FnOnce(&str, &[(&str, &str)])) {
    let Some(schema) = assent_testkit::pg::schema() else {
        return;
    };
    let url = format!("{}&application_name={}", schema.postgres_url, schema.name);
    f(
        "database: {url_env: ASSENT_DATABASE_URL}\n",
        &[("ASSENT_DATABASE_URL", &url)],
    );
}

/// A key set made by `assent keys init` in `keys/NAME` for each of `names`: their audit public
/// keys (hex), in that order.
pub(crate) fn key_sets<const N: usize>(keys: &Path, names: [&str; N]) -> [String; N] {
    names.map(|n| {
        let report = keys_init(&keys.join(n));
        report["audit_public_key"].as_str().unwrap().to_string()
    })
}

/// A gateway (on a free port) serving the test config in `dir` with `keys_dir: KEYS` and
/// `extra` lines, `env` set; waited for until healthy.
pub(crate) fn serve_keys(dir: &Path, keys: &str, extra: &str, env: &[(&str, &str)]) -> Server {
    let port = free_port();
    let mut cmd = serve_cmd(&config(dir, port, keys, extra));
    cmd.envs(env.iter().copied());
    serve_with(cmd, port)
}

/// `assent keys init --config CFG` with `env`.
pub(crate) fn keys_init_config(cfg: &Path, env: &[(&str, &str)]) -> std::process::Output {
    Command::new(BIN)
        .args(["keys", "init", "--config"])
        .arg(cfg)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A gateway serving `dir`'s config with keys `keys` (`keys/a`: key set A), an approval
/// proposed through it, then stopped (its shutdown checkpoint signs the chain under that key
/// set's audit key); `env` for every command.
fn served_once(dir: &Path, keys: &str, extra: &str, env: &[(&str, &str)]) {
    let s = serve_keys(dir, keys, extra, env);
    assert_eq!(propose(&s.url, 5000)["decision"], "pending");
    stop(s);
}

/// [`served_once`] under key set A.
fn served_once_under_a(dir: &Path, extra: &str, env: &[(&str, &str)]) {
    served_once(dir, "keys/a", extra, env);
}

/// Sets `path`'s mode (Unix).
pub(crate) fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The attack on `extra` (a database line, or none for SQLite) with `env`: keys A serve the
/// database; a second key set B, made by `assent keys init` as the missing-keys message said,
/// is refused, the error naming both public keys; so is `keys init --config` of an empty
/// keys directory, and (PostgreSQL) a start with one.
fn another_key_set_is_refused(extra: &str, env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let [a, b] = key_sets(&keys, ["a", "b"]);
    let (a, b) = (a.as_str(), b.as_str());
    assert_ne!(a, b);
    served_once_under_a(dir.path(), extra, env);
    let cfg = config(dir.path(), free_port(), "keys/b", extra);
    let err = start_refused(serve_cmd(&cfg), env);
    assert!(
        err.contains(a) && err.contains(b) && err.contains("copy keys_dir"),
        "{err}"
    );
    // `keys init --config` over the served database makes no new key set.
    let cfg = config(dir.path(), free_port(), "keys/c", extra);
    let out = keys_init_config(&cfg, env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("copy keys_dir"),
        "{err}"
    );
    for f in ["token.key", "audit.key"] {
        assert!(!keys.join("c").join(f).exists(), "{f} made");
    }
    if !extra.is_empty() {
        // A PostgreSQL replica without keys is told to copy them, not to make new ones.
        let err = start_refused(serve_cmd(&cfg), env);
        assert!(
            err.contains("copy keys_dir (token.key and audit.key) from an existing replica"),
            "{err}"
        );
    }
    // The keys the database was served with still serve it.
    served_once_under_a(dir.path(), extra, env);
    // Key A lost for good: B is accepted knowingly, A's public key written where the refusal
    // said — but not from a file another user may have planted (found by review: it was read
    // whatever its owner and mode, so in a shared sticky directory anyone could silence the
    // refusal): read as the keys are.
    let replaces = keys.join("b").join("audit-key-replaces");
    std::fs::write(&replaces, format!("{a}\n")).unwrap();
    chmod(&replaces, 0o666);
    let cfg = config(dir.path(), free_port(), "keys/b", extra);
    let err = start_refused(serve_cmd(&cfg), env);
    assert!(
        err.contains(replaces.to_str().unwrap()) && err.contains("0666"),
        "{err}"
    );
    chmod(&replaces, 0o600);
    // B serves and signs past A's checkpoints.
    served_once(dir.path(), "keys/b", extra, env);
    // A replica still given key set A is now refused (found by review: having signed once,
    // A was served with a warning whatever signed after it): B's checkpoint is newer.
    let cfg = config(dir.path(), free_port(), "keys/a", extra);
    let err = start_refused(serve_cmd(&cfg), env);
    assert!(
        err.contains(a) && err.contains(b) && err.contains("after the newest"),
        "{err}"
    );
    // B's own checkpoint is the newest: the acceptance is no longer needed.
    std::fs::remove_file(&replaces).unwrap();
    served_once(dir.path(), "keys/b", extra, env);
}

/// Attack (found by review): two replicas given key sets of their own over a fresh database
/// (no checkpoint yet, so neither start was refused) both served and signed, each refusing
/// the other's tokens and taking its seals for damage, until one restarted. The first start
/// claims the database for its key set: the second is refused at once, while the first
/// serves, naming both public keys; the first keeps serving and restarting.
fn two_key_sets_over_a_fresh_database(extra: &str, env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let [a, b] = key_sets(&keys, ["a", "b"]);
    let (a, b) = (a.as_str(), b.as_str());
    let sa = serve_keys(dir.path(), "keys/a", extra, env);
    let refused = || {
        let cfg = config(dir.path(), free_port(), "keys/b", extra);
        let err = start_refused(serve_cmd(&cfg), env);
        assert!(
            err.contains(a) && err.contains(b) && err.contains("signed none"),
            "{err}"
        );
    };
    refused();
    assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
    stop(sa);
    served_once_under_a(dir.path(), extra, env);
    refused();
}

#[test]
fn a_second_replica_with_its_own_key_set_over_a_fresh_database_is_refused_at_start_postgres() {
    on_postgres(two_key_sets_over_a_fresh_database);
}

#[test]
fn a_second_gateway_with_its_own_key_set_over_a_fresh_database_is_refused_at_start_sqlite() {
    two_key_sets_over_a_fresh_database("", &[]);
}

/// The race of [`two_key_sets_over_a_fresh_database`]: two replicas with key sets of their
/// own started at the same moment over a fresh PostgreSQL database. The claims are serialised
/// (the schema's write lock): exactly one serves, the other is refused naming both keys.
#[test]
fn two_replicas_with_their_own_key_sets_starting_at_once_over_a_fresh_database_one_serves() {
    let Some(schema) = assent_testkit::pg::schema() else {
        return;
    };
    let url = format!("{}&application_name={}", schema.postgres_url, schema.name);
    let extra = "database: {url_env: ASSENT_DATABASE_URL}\n";
    let dir = tempfile::tempdir().unwrap();
    let mut starts = Vec::new();
    for name in ["a", "b"] {
        let keys = dir.path().join("keys").join(name);
        let public = keys_init(&keys)["audit_public_key"].clone();
        let home = dir.path().join(name);
        std::fs::create_dir(&home).unwrap();
        let port = free_port();
        let cfg = config(&home, port, keys.to_str().unwrap(), extra);
        starts.push((cfg, port, public.as_str().unwrap().to_string()));
    }
    let mut kids: Vec<std::process::Child> = starts
        .iter()
        .map(|(cfg, _, _)| {
            serve_cmd(cfg)
                .env("ASSENT_DATABASE_URL", &url)
                .env("TEST_ALICE_KEY", OP_KEY)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let until = Instant::now() + Duration::from_secs(60);
    let out = loop {
        if let Some(i) = (0..2).find(|&i| kids[i].try_wait().unwrap().is_some()) {
            break i;
        }
        if Instant::now() > until {
            for k in &mut kids {
                let _ = k.kill();
                let _ = k.wait();
            }
            panic!("both replicas serve the database, each with its own key set");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let kept = 1 - out;
    let mut loser = kids.remove(out);
    let winner = kids.remove(0);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut loser.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!loser.wait().unwrap().success(), "{err}");
    assert!(
        err.contains(&starts[0].2) && err.contains(&starts[1].2) && err.contains("signed none"),
        "{err}"
    );
    let served = crate::Server {
        child: winner,
        url: format!("http://127.0.0.1:{}", starts[kept].1),
    };
    crate::wait_healthy(
        &served.url,
        Duration::from_secs(20),
        Duration::from_millis(50),
    );
    assert_eq!(propose(&served.url, 5000)["decision"], "pending");
    stop(served);
}

#[test]
fn a_replica_given_a_new_key_set_is_refused_over_a_database_checkpointed_under_another_sqlite() {
    another_key_set_is_refused("", &[]);
}

#[test]
fn a_replica_given_a_new_key_set_is_refused_over_a_database_checkpointed_under_another_postgres() {
    on_postgres(another_key_set_is_refused);
}

/// After a lost `audit.key` the gateway refuses to start; `assent audit key` (which the README
/// runs inline) made a new key, and the next start served under it. It now only reads.
#[test]
fn audit_key_never_makes_a_key_over_a_database_whose_key_was_lost() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), port, "");
    let s = serve_with(serve_cmd(&cfg), port);
    assert_eq!(propose(&s.url, 5000)["decision"], "pending");
    stop(s);
    let data = dir.path().join("data");
    let key = data.join("audit.key");
    std::fs::remove_file(&key).unwrap();
    let out = run(&["audit", "key", "--data-dir", data.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("put back the audit.key"),
        "{err}"
    );
    assert!(!key.exists(), "audit key made");
    let err = start_refused(serve_cmd(&cfg), &[]);
    assert!(err.contains("audit key is missing"), "{err}");
    assert!(!key.exists(), "audit key made");
    // An enrolment code is sealed with the audit key (the gateway takes no unsealed code):
    // without it, none is issued, and none is made.
    let out = run(&[
        "passkeys",
        "enrol",
        "alice",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("no audit.key in") && out.stdout.is_empty(),
        "{err}"
    );
    assert!(!key.exists(), "audit key made");
    // Nor in a directory with no database: nothing is made, the directory neither.
    let fresh = dir.path().join("fresh");
    let out = run(&["audit", "key", "--data-dir", fresh.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("assent keys init"),
        "{err}"
    );
    assert!(!fresh.exists());
}

/// Two `assent keys init` at once (init containers on a shared volume) checked, then wrote a
/// fixed temporary name renamed over the key: each printed a key, one of them replaced. Eight
/// at once, a few rounds: each prints the key kept, and one alone says it made each file.
#[test]
fn concurrent_keys_init_runs_all_print_the_one_key_kept() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..6 {
        let k = dir.path().join(format!("k{round}"));
        let ks = k.to_str().unwrap();
        let runs: Vec<_> = (0..8)
            .map(|_| {
                Command::new(BIN)
                    .args(["keys", "init", "--json", "--keys-dir", ks])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let kept = {
            let outs: Vec<Value> = runs
                .into_iter()
                .map(|c| serde_json::from_str(&ok(&c.wait_with_output().unwrap())).unwrap())
                .collect();
            let kept = ok(&run(&["audit", "key", "--keys-dir", ks]))
                .trim()
                .to_string();
            for o in &outs {
                assert_eq!(o["audit_public_key"], kept.as_str(), "round {round}: {o}");
            }
            for f in ["token.key", "audit.key"] {
                let makers = outs
                    .iter()
                    .filter(|o| o["created"].as_array().unwrap().iter().any(|c| c == f))
                    .count();
                assert_eq!(makers, 1, "round {round}: {f} made by {makers}");
            }
            kept
        };
        assert_eq!(kept.len(), 64);
        let mut names: Vec<_> = std::fs::read_dir(&k)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["audit.key", "token.key"], "round {round}");
    }
}

/// `sudo assent keys init --keys-dir /etc` made `/etc` root-only: an existing directory's mode
/// was set to 0700. It is now left as it is (the keys are 0600), and one others may write is
/// refused, nothing written in it.
#[cfg(unix)]
#[test]
fn keys_init_leaves_an_existing_directorys_mode_alone() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x");
    std::fs::create_dir(&x).unwrap();
    std::fs::set_permissions(&x, std::fs::Permissions::from_mode(0o755)).unwrap();
    keys_init(&x);
    assert_eq!(mode(&x), 0o755);
    for f in ["token.key", "audit.key"] {
        assert_eq!(mode(&x.join(f)), 0o600, "{f}");
    }
    let w = dir.path().join("w");
    std::fs::create_dir(&w).unwrap();
    std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o775)).unwrap();
    let out = run(&["keys", "init", "--keys-dir", w.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("chmod go-w"),
        "{err}"
    );
    assert_eq!(mode(&w), 0o775);
    assert_eq!(std::fs::read_dir(&w).unwrap().count(), 0);
    // A directory made now is private.
    let n = dir.path().join("n").join("keys");
    keys_init(&n);
    assert_eq!(mode(&n), 0o700);
}

/// The audit public key (hex) of the keys in data directory `data` (`assent audit key`).
pub(crate) fn audit_key_of(data: &Path) -> String {
    let key = ok(&run(&[
        "audit",
        "key",
        "--data-dir",
        data.to_str().unwrap(),
    ]));
    key.trim().to_string()
}

/// For `restore --force` of another gateway's backup (`backup.rs`): gateway B (data directory
/// `data_b`, config `extra`) now holding a copy of A's database (data directory `data_a`) is
/// not served under B's keys — refused, naming both audit public keys (a foreign copy forced
/// in is not served with a warning) — and is once A's `audit.key` and `token.key` are put
/// back (copied into `data_b`).
pub(crate) fn refused_until_its_keys_are_put_back(data_b: &Path, data_a: &Path, extra: &str) {
    let (a, b) = (audit_key_of(data_a), audit_key_of(data_b));
    let (a, b) = (a.as_str(), b.as_str());
    let b_dir = data_b.parent().unwrap();
    let err = start_refused(serve_cmd(&write_config(b_dir, free_port(), extra)), &[]);
    assert!(
        err.contains(a) && err.contains(b) && err.contains("signed none"),
        "{err}"
    );
    for k in ["audit.key", "token.key"] {
        std::fs::copy(data_a.join(k), data_b.join(k)).unwrap();
    }
    let port = free_port();
    stop(serve_with(
        serve_cmd(&write_config(b_dir, port, extra)),
        port,
    ));
}

/// `assent audit verify --data-dir DATA [EXTRA…]`.
fn audit_verify(data: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["audit", "verify", "--data-dir"])
        .arg(data)
        .args(extra)
        .output()
        .unwrap()
}

/// Attack (found by review): whoever can write the database plants a junk row (one that does
/// not verify) at record 0 of `audit_checkpoints` of a fresh database, before the first start:
/// the start's claim found the row taken and dropped that, the start-up check passed the junk
/// over, so the database was served claimed by no key set (a second replica with keys of its
/// own would serve it too), and `assent audit verify` never read record 0. Now the start is
/// refused naming the row and how to delete it; `audit verify` reports it, saying whether the
/// key it names is the one checked with (`--public-key`); once deleted, the start serves.
#[test]
fn a_junk_row_planted_at_record_0_before_the_first_start_is_refused_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ours = keys_init(&data)["audit_public_key"].clone();
    let ours = ours.as_str().unwrap();
    let other = keys_init(&dir.path().join("other"))["audit_public_key"].clone();
    let other = other.as_str().unwrap();
    ok(&run(&["migrate", "--data-dir", data.to_str().unwrap()]));
    let db = data.join("assent.db");
    let sql = |q: &str| {
        let out = Command::new("sqlite3").arg(&db).arg(q).output().unwrap();
        ok(&out);
    };
    sql(&format!(
        "INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) VALUES (0, '{}', 0, 1, '{ours}', '{}')",
        "0".repeat(64),
        "00".repeat(64)
    ));
    let cfg = write_config(dir.path(), free_port(), "");
    let err = start_refused(serve_cmd(&cfg), &[]);
    assert!(
        err.contains("row at record 0")
            && err.contains("DELETE FROM audit_checkpoints WHERE seq = 0")
            && err.contains(ours),
        "{err}"
    );
    let v = audit_verify(&data, &[]);
    let verr = String::from_utf8_lossy(&v.stderr);
    assert_eq!(v.status.code(), Some(1), "{verr}");
    assert!(
        verr.contains("row at record 0")
            && verr.contains(ours)
            && verr.contains("(the key this verification checks with)"),
        "{verr}"
    );
    let v = audit_verify(&data, &["--public-key", other]);
    let verr = String::from_utf8_lossy(&v.stderr);
    assert_eq!(v.status.code(), Some(1), "{verr}");
    assert!(
        verr.contains(&format!(
            "not the key this verification checks with, {other}"
        )),
        "{verr}"
    );
    // Deleted as the refusal says: the first start claims the database, and it verifies.
    sql("DELETE FROM audit_checkpoints WHERE seq = 0");
    let port = free_port();
    stop(serve_with(
        serve_cmd(&write_config(dir.path(), port, "")),
        port,
    ));
    ok(&audit_verify(&data, &[]));
}

/// `POST {url}/v1/tool-calls` as the agent: the status and the body.
pub(crate) fn propose_status(url: &str, amount: i64) -> (u16, Value) {
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/tool-calls"))
        .bearer_auth(BOT_KEY)
        .json(&json!({"agent": "treasury_bot", "session_id": "s", "tool": "transfer_funds", "arguments": {"amount": amount, "currency": "EUR", "recipient": "ext-1"}}))
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// `GET {url}/readyz` (no key): the status and the body.
pub(crate) fn readyz(url: &str) -> (u16, Value) {
    let r = reqwest::blocking::get(format!("{url}/readyz")).unwrap();
    (r.status().as_u16(), r.json().unwrap())
}

/// `assent audit verify --config CFG` with `env`.
pub(crate) fn verify(cfg: &Path, env: &[(&str, &str)]) -> std::process::Output {
    Command::new(BIN)
        .args(["audit", "verify", "--config"])
        .arg(cfg)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Attack (found by review): replica A serves under key set A; key A is taken for lost and
/// replica B starts with key set B and `audit-key-replaces` naming A (a take-over), while A
/// keeps running. A went on writing rows sealed under A and signing checkpoints with A until
/// it restarted. Now B's start records the take-over (an `audit.key_replaced` record and a
/// checkpoint of B past A's) in the write transaction every process serialises on, and from
/// then on every write through A is refused (`503`), A's `/readyz` is `503`
/// `audit_key_replaced` naming B, B serves, A's restart is refused, and the audit verifies.
fn a_replaced_key_writes_nothing_more(extra: &str, env: &[(&str, &str)]) {
    let extra =
        format!("{extra}audit_checkpoints: {{every_records: 1000000, every_seconds: 86400}}\n");
    let extra = extra.as_str();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let [a, b] = key_sets(&keys, ["a", "b"]);
    let (a, b) = (a.as_str(), b.as_str());
    let start = |keys: &str| serve_keys(dir.path(), keys, extra, env);
    let sa = start("keys/a");
    assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
    assert_eq!(readyz(&sa.url).0, 200);
    let replaces = keys.join("b").join("audit-key-replaces");
    std::fs::write(&replaces, format!("{a}\n")).unwrap();
    chmod(&replaces, 0o600);
    let sb = start("keys/b");
    // A, still running, writes nothing more: its call is refused, not held.
    let (status, body) = propose_status(&sa.url, 7000);
    assert_eq!(status, 503, "{body}");
    // `/readyz` answers from a check at most a second old.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let (status, body) = loop {
        let (status, body) = readyz(&sa.url);
        if status != 200 || std::time::Instant::now() > until {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["reason"], "audit_key_replaced", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(a) && message.contains(b), "{message}");
    // B serves.
    assert_eq!(propose(&sb.url, 6000)["decision"], "pending");
    assert_eq!(readyz(&sb.url).0, 200);
    let newest = crate::get_op(&sb.url, "/v1/audit/checkpoints");
    assert_eq!(newest["checkpoints"][0]["public_key"], b, "{newest}");
    // A's shutdown signs nothing either: B's checkpoint stays the newest.
    let mut sa = sa;
    let _ = Command::new("kill")
        .args(["-TERM", &sa.child.id().to_string()])
        .status();
    let _ = sa.child.wait();
    drop(sa);
    stop(sb);
    // A restarted is refused: B signed past it.
    let cfg_a = config(dir.path(), free_port(), "keys/a", extra);
    let err = start_refused(serve_cmd(&cfg_a), env);
    assert!(
        err.contains(a) && err.contains(b) && err.contains("after the newest"),
        "{err}"
    );
    // The audit verifies under B without the file: the take-over is recorded, signed by B.
    std::fs::remove_file(&replaces).unwrap();
    let cfg_b = config(dir.path(), free_port(), "keys/b", extra);
    let out = verify(&cfg_b, env);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains(&format!("by audit key {a}: taken over")),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sb = start("keys/b");
    assert_eq!(propose(&sb.url, 8000)["decision"], "pending");
    stop(sb);
}

#[test]
fn a_replica_whose_audit_key_was_taken_over_writes_nothing_more_sqlite() {
    a_replaced_key_writes_nothing_more("", &[]);
}

#[test]
fn a_replica_whose_audit_key_was_taken_over_writes_nothing_more_postgres() {
    on_postgres(a_replaced_key_writes_nothing_more);
}
