//! `assent backup` and `assent restore` on real files through the binary: a backup taken while
//! the gateway serves and writes, restored into the stopped gateway's directory (the approvals
//! and the audit chain come back), and each refusal, named for what it protects against.

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Checkpoints signed often, so every backup has some to check keys against.
const SIGNING: &str = "audit_checkpoints: {every_records: 1, every_seconds: 1}\n";

/// `assent COMMAND FLAG FROM [EXTRA…] FILE` to its end (`backup --config` and `restore
/// --data-dir`).
fn with_file(command: [&str; 2], from: &Path, extra: &[&str], file: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(command)
        .arg(from)
        .args(extra)
        .arg(file)
        .output()
        .unwrap()
}

/// `assent backup --config CFG [EXTRA…] OUT`.
fn backup(cfg: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    with_file(["backup", "--config"], cfg, extra, out)
}

/// `assent restore --data-dir DATA [EXTRA…] IN`.
fn restore(data: &Path, input: &Path, extra: &[&str]) -> std::process::Output {
    with_file(["restore", "--data-dir"], data, extra, input)
}

/// Asserts that restoring `input` into `data` is refused, with `text` in stderr, both
/// without and with `--force` (which overrides only the audit-key check).
#[track_caller]
fn refused_even_forced(data: &Path, input: &Path, text: &str) {
    refused(&restore(data, input, &[]), text);
    refused(&restore(data, input, &["--force"]), text);
}

/// Asserts that `out` failed with exit status 1 and a stderr containing `text`.
#[track_caller]
fn refused(out: &std::process::Output, text: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(text), "{err}");
}

/// Asserts that `data` holds no set-aside database (`*before-restore*`) and no temporary
/// copy (`.assent-*`): a refused restore leaves nothing behind.
fn assert_nothing_set_aside(data: &Path) {
    let names: Vec<String> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let left = |n: &String| n.contains("before-restore") || n.starts_with(".assent-");
    assert!(!names.iter().any(left), "{names:?}");
}

/// `sqlite3 DB SQL`'s output, trimmed.
fn sqlite(db: &Path, sql: &str) -> String {
    let out = Command::new("sqlite3").arg(db).arg(sql).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The status of approval `id` as the gateway at `url` reports it (empty when unknown).
fn status(url: &str, id: &str) -> String {
    let v = get_op(url, &format!("/v1/approvals/{id}"));
    v["status"].as_str().unwrap_or_default().to_string()
}

/// Proposes a held call and approves it, over and over, until `stop`; counts the approvals.
fn writer(
    url: String,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let http = reqwest::blocking::Client::new();
        while !stop.load(Ordering::Relaxed) {
            let id = held(&url, 5000);
            let r = http
                .post(format!("{url}/v1/approvals/{id}/decision"))
                .bearer_auth(OP_KEY)
                .json(&json!({"decision": "approve"}))
                .send()
                .unwrap();
            assert!(r.status().is_success());
            done.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Whether the gateway at `url` has signed an audit checkpoint.
fn signed(url: &str) -> bool {
    let v = get_op(url, "/v1/audit/checkpoints");
    v["checkpoints"].as_array().is_some_and(|c| !c.is_empty())
}

/// The number of rows of `table` in the database file `db`.
fn count(db: &Path, table: &str) -> i64 {
    sqlite(db, &format!("SELECT count(*) FROM {table}"))
        .parse()
        .unwrap()
}

impl Served {
    /// `assent backup` of this gateway into the file `name` in its directory (it must
    /// succeed); the file's path.
    fn backup(&self, name: &str) -> PathBuf {
        let out = self.dir.path().join(name);
        ok(&backup(&self.cfg, &out, &[]));
        out
    }
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_backup_taken_while_the_gateway_writes_restores_its_approvals_and_a_chain_that_verifies() {
    let Served {
        dir,
        cfg,
        data,
        port,
        server: s,
    } = served(SIGNING);
    let before = approved(&s.url, 5000);
    // A dashboard session the backup will hold (signed out, say, after it was taken).
    let cookie = crate::replicas::sign_in(&s.url);
    let stop_writing = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let w = writer(s.url.clone(), stop_writing.clone(), written.clone());
    // Proposals and decisions are arriving, and the gateway has signed a checkpoint.
    while written.load(Ordering::Relaxed) < 3 || !signed(&s.url) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Two backups while proposals and decisions keep arriving.
    let out = dir.path().join("first.db");
    let text = ok(&backup(&cfg, &out, &[]));
    assert!(
        text.contains("backup written to") && text.contains("token.key"),
        "{text}"
    );
    let json_out = dir.path().join("second.db");
    let rep: Value = serde_json::from_str(&ok(&backup(&cfg, &json_out, &["--json"]))).unwrap();
    stop_writing.store(true, Ordering::Relaxed);
    w.join().unwrap();
    assert!(
        rep["records"].as_i64().unwrap() > 0 && rep["checkpoints"].as_u64().unwrap() > 0,
        "{rep}"
    );
    #[cfg(unix)]
    assert_eq!((mode(&out), mode(&json_out)), (0o600, 0o600));
    for f in [&out, &json_out] {
        assert_eq!(sqlite(f, "PRAGMA integrity_check"), "ok");
        assert_eq!(sqlite(f, "PRAGMA journal_mode"), "delete");
        assert!(!f.with_extension("db-wal").exists());
    }
    // Every approval in the copy is settled with its decision record: one snapshot.
    assert_eq!(
        sqlite(
            &json_out,
            "SELECT count(*) FROM approvals WHERE status = 'approved'"
        ),
        sqlite(
            &json_out,
            "SELECT count(*) FROM audit WHERE kind = 'decision'"
        )
    );

    // A passkey ceremony in progress when the backup was taken (one finished since, say):
    // restored, its challenge would answer a replayed assertion again.
    sqlite(
        &json_out,
        "INSERT INTO passkey_ceremonies (id, principal, purpose, state, expires_at) \
         VALUES ('c1', 'ops', 'register', '{}', 9999999999999)",
    );

    // After the backup: one more approval, decided; then the gateway stops.
    let after = approved(&s.url, 6000);
    stop(s);
    let live_approvals = count(&data.join("assent.db"), "approvals");

    // The backup holds tokens minted and not yet redeemed: one redeemed since could be
    // redeemed again, so a restore waits for them to expire unless forced.
    refused(
        &restore(&data, &json_out, &[]),
        "neither redeemed nor expired",
    );
    assert_nothing_set_aside(&data);
    let out = restore(&data, &json_out, &["--allow-outstanding-tokens"]);
    let text = ok(&out);
    assert!(
        text.contains("restored") && text.contains("kept as"),
        "{text}"
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let aside: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("assent.db.before-restore-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the replaced database is kept");
    assert_eq!(count(&aside[0].path(), "approvals"), live_approvals);
    assert_eq!(
        count(&data.join("assent.db"), "approvals"),
        count(&json_out, "approvals")
    );
    ok(&audit_verify(&data, &[]));
    // Found by review: the copy's dashboard sessions came back with it, a session signed out
    // after the backup among them. A restore ends them all: everyone signs in again.
    assert_eq!(count(&json_out, "ui_sessions"), 1);
    assert_eq!(count(&data.join("assent.db"), "ui_sessions"), 0);
    assert_eq!(count(&data.join("assent.db"), "passkey_ceremonies"), 0);

    // The restarted gateway serves the restored state: the approval decided before the backup
    // is approved, the one proposed after it is unknown.
    let s = serve(&cfg, port);
    assert_eq!(status(&s.url, &before), "approved");
    assert_eq!(status(&s.url, &after), "");
    assert_eq!(crate::replicas::queue_page(&s.url, &cookie).0, 303);
    stop(s);
    ok(&audit_verify(&data, &[]));
}

#[test]
fn restore_refuses_while_a_gateway_has_the_database_open() {
    let gw = served(SIGNING);
    let id = held(&gw.server.url, 5000);
    let out = gw.backup("b.db");
    let Served {
        data, server: s, ..
    } = gw;
    ok(&cli(&s.url, &["approve", &id]));
    refused_even_forced(&data, &out, "stop the gateway before restoring");
    // Nothing replaced, nothing set aside, and the gateway still serves what it wrote.
    assert_eq!(status(&s.url, &id), "approved");
    assert_nothing_set_aside(&data);
    stop(s);
}

/// Attack (found by review): a gateway started while a restore ran (a supervisor restarting
/// it) opened the old database, waited on its lock, and then served the file the restore had
/// just set aside — spending the restore's marker on it, so the restored copy's tokens were
/// never voided. A restore holds `DATA_DIR/assent.lock` exclusively and every store holds it
/// shared: the gateway waits for the restore to end, and a restore is refused while any
/// gateway or command has the directory open.
#[test]
fn a_gateway_started_during_a_restore_waits_for_it_to_end() {
    let Served {
        dir: _dir,
        cfg,
        data,
        port,
        server,
    } = served(SIGNING);
    stop(server);
    // A restore under way (this test holding the lock as one does).
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(data.join("assent.lock"))
        .unwrap();
    lock.lock().unwrap();
    let child = crate::spawn_quiet(serve_cmd(&cfg));
    let url = format!("http://127.0.0.1:{port}");
    std::thread::sleep(Duration::from_secs(2));
    let early = reqwest::blocking::get(format!("{url}/healthz"));
    assert!(early.is_err(), "served during a restore: {early:?}");
    lock.unlock().unwrap();
    wait_healthy(&url, Duration::from_secs(20), Duration::from_millis(50));
    stop(Server { child, url });
}

/// Attack (found by review): `assent passkeys enrol` and `assent migrate` opened the database
/// without the data directory's lock, so one run during a restore wrote its enrolment code
/// into the database the restore was setting aside (printed, yet never usable), or migrated a
/// file being replaced. Both now wait for the restore as a gateway does.
#[test]
fn an_enrolment_or_a_migration_during_a_restore_waits_for_it_to_end() {
    let Served {
        dir: _dir,
        data,
        server,
        ..
    } = served(SIGNING);
    stop(server);
    let lock = std::fs::File::open(data.join("assent.lock")).unwrap();
    lock.lock().unwrap();
    let d = data.to_str().unwrap();
    let mut enrol = Command::new(BIN)
        .args(["passkeys", "enrol", "alice", "--data-dir", d])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut migrate = Command::new(BIN)
        .args(["migrate", "--data-dir", d])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        enrol.try_wait().unwrap().is_none(),
        "enrolled during a restore"
    );
    assert!(
        migrate.try_wait().unwrap().is_none(),
        "migrated during a restore"
    );
    lock.unlock().unwrap();
    assert!(enrol.wait().unwrap().success());
    assert!(migrate.wait().unwrap().success());
}

#[test]
fn restore_refuses_files_that_are_not_assent_databases_or_are_newer_or_tampered() {
    let Served {
        dir,
        cfg,
        data,
        server: s,
        ..
    } = served(SIGNING);
    approved(&s.url, 5000);
    stop(s);
    let good = dir.path().join("good.db");
    ok(&backup(&cfg, &good, &[]));
    let live_before = std::fs::read(data.join("assent.db")).unwrap();

    let garbage = dir.path().join("garbage.db");
    std::fs::write(
        &garbage,
        b"this is not a database, it is a text file pretending to be one",
    )
    .unwrap();
    refused(
        &restore(&data, &garbage, &["--force"]),
        "is not an SQLite database",
    );

    let other = dir.path().join("other.db");
    sqlite(
        &other,
        "CREATE TABLE notes(x); INSERT INTO notes VALUES (1);",
    );
    refused(&restore(&data, &other, &["--force"]), "not an assent one");

    // Copies of the good backup, each edited after it was taken, each refused even forced:
    // - a schema newer than this build;
    // - a decision's actor rewritten: its chain is broken;
    // - an attack found by review: data that verifies, but a schema carrying a trigger that
    //   clears a token's redemption after it is redeemed (replayable tokens once restored),
    //   which the migrations do not create.
    for (name, sql, says) in [
        (
            "newer.db",
            "PRAGMA user_version = 99;",
            "schema version 99, newer than this assent",
        ),
        (
            "tampered.db",
            "UPDATE audit SET actor = 'mallory' WHERE kind = 'decision';",
            "does not verify (chain check at record",
        ),
        (
            "planted.db",
            "CREATE TRIGGER replay AFTER UPDATE OF used_at ON tokens BEGIN UPDATE tokens SET used_at = NULL WHERE rowid = NEW.rowid; END;",
            "has a trigger `replay` that this assent's migrations do not create",
        ),
    ] {
        let edited = dir.path().join(name);
        std::fs::copy(&good, &edited).unwrap();
        sqlite(&edited, sql);
        refused(&restore(&data, &edited, &["--force"]), says);
    }

    refused(
        &restore(&data, &dir.path().join("missing.db"), &[]),
        "no such file",
    );
    // None of them touched the database or left anything behind.
    assert_eq!(std::fs::read(data.join("assent.db")).unwrap(), live_before);
    assert_nothing_set_aside(&data);
    refused(&restore(&data, &good, &[]), "neither redeemed nor expired");
    ok(&restore(&data, &good, &["--allow-outstanding-tokens"]));
}

#[test]
fn backup_never_writes_over_an_existing_file_without_force() {
    let Served {
        dir,
        cfg,
        server: s,
        ..
    } = served("");
    propose(&s.url, 5000);
    let out = dir.path().join("precious.txt");
    std::fs::write(&out, "precious").unwrap();
    refused(
        &backup(&cfg, &out, &[]),
        "exists; choose another name, or --force",
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious");
    refused(&backup(&cfg, dir.path(), &[]), "is a directory");
    refused(
        &backup(&cfg, &dir.path().join("no/such/dir/b.db"), &[]),
        "no such directory",
    );
    assert!(!dir.path().join("no").exists());
    ok(&backup(&cfg, &out, &["--force"]));
    assert_eq!(sqlite(&out, "SELECT count(*) FROM approvals"), "1");
    // Nothing is left in the directory but the file itself.
    assert_nothing_set_aside(dir.path());
    // No database there: refused, nothing written.
    let (empty, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let none = elsewhere.path().join("none.db");
    refused(
        &run(&[
            "backup",
            "--data-dir",
            empty.path().to_str().unwrap(),
            none.to_str().unwrap(),
        ]),
        "no assent database here",
    );
    assert!(!none.exists());
    stop(s);
}

/// Found by review: `assent backup --force DATA/assent.db` renamed a copy over the live
/// database under the running gateway (and `assent export learning-samples --out` the JSONL
/// over it), and `--out DATA/token.key` replaced the token key. Neither writes into the data
/// directory, the keys directory or onto the checkpoint file now, however the path is spelt
/// (through a symbolic link to the directory, or `..`), and nothing there changes.
#[test]
fn a_backup_or_export_never_replaces_the_gateways_database_or_keys() {
    let ck = tempfile::tempdir().unwrap();
    let ck_file = ck.path().join("checkpoints.jsonl");
    let s = served(&format!(
        "audit_checkpoints: {{every_records: 1, every_seconds: 1, file: {}}}\n",
        ck_file.display()
    ));
    approved(&s.server.url, 5000);
    let link = s.dir.path().join("link");
    std::os::unix::fs::symlink(&s.data, &link).unwrap();
    let db = s.data.join("assent.db");
    let key = s.data.join("token.key");
    let key_before = std::fs::read(&key).unwrap();
    let sideways = s.data.join("..").join("data").join("assent.db");
    for out in [db.clone(), key.clone(), link.join("assent.db"), sideways] {
        refused(
            &backup(&s.cfg, &out, &["--force"]),
            "which holds the gateway's database",
        );
        let export = Command::new(BIN)
            .args(["export", "learning-samples", "--config"])
            .arg(&s.cfg)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        refused(&export, "which holds the gateway's database");
    }
    refused(
        &backup(&s.cfg, &ck_file, &["--force"]),
        "the audit checkpoint file",
    );
    assert_eq!(std::fs::read(&key).unwrap(), key_before);
    assert_eq!(sqlite(&db, "SELECT count(*) FROM approvals"), "1");
    stop(s.server);
    ok(&run(&[
        "audit",
        "verify",
        "--config",
        s.cfg.to_str().unwrap(),
    ]));
}

/// Two stopped gateways (their directories go when this is dropped): A, with a call approved,
/// backed up to `from_a` (in its directory), and B, with keys of its own and a call held,
/// whose database was `live_before` when it stopped.
struct TwoGateways {
    _dirs: [tempfile::TempDir; 2],
    a_data: PathBuf,
    b_data: PathBuf,
    from_a: PathBuf,
    live_before: Vec<u8>,
}

/// [`TwoGateways`], A's backup changed by `edit` before B starts.
fn a_backup_and_another_gateway(edit: impl FnOnce(&Path)) -> TwoGateways {
    let a = served(SIGNING);
    approved(&a.server.url, 5000);
    stop(a.server);
    let from_a = a.dir.path().join("a.db");
    ok(&backup(&a.cfg, &from_a, &[]));
    edit(&from_a);
    let b = served(SIGNING);
    propose(&b.server.url, 7000);
    stop(b.server);
    let live_before = std::fs::read(b.data.join("assent.db")).unwrap();
    TwoGateways {
        _dirs: [a.dir, b.dir],
        a_data: a.data,
        b_data: b.data,
        from_a,
        live_before,
    }
}

#[test]
fn restore_refuses_a_backup_signed_by_another_audit_key_unless_forced() {
    let t = a_backup_and_another_gateway(|_| {});
    let (data_b, from_a) = (&t.b_data, &t.from_a);
    let out = restore(data_b, from_a, &[]);
    refused(&out, "were signed by audit key");
    refused(&out, "put back the audit.key and token.key");
    assert_eq!(
        std::fs::read(data_b.join("assent.db")).unwrap(),
        t.live_before
    );

    // --force restores, warns, and `audit verify` under B's key then fails on the checkpoints.
    let out = restore(data_b, from_a, &["--force", "--allow-outstanding-tokens"]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("another audit key"));
    let v = audit_verify(data_b, &[]);
    assert_eq!(v.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&v.stderr).contains("checkpoint"),
        "{v:?}"
    );
    // B's gateway refuses it (the docs said it was served with a warning) until A's keys are
    // put back; then it verifies, and is served.
    crate::keys_guard::refused_until_its_keys_are_put_back(data_b, &t.a_data, SIGNING);
    ok(&audit_verify(data_b, &[]));
}

/// Attack (found by review): whoever can replace a backup file takes another gateway's copy
/// (or makes one up, with a consistent unkeyed chain), deletes its checkpoints, and has the
/// admin restore it: nothing named another key, so it was restored without `--force` or a
/// warning, bringing in what no seal covers (tool pins and reviews, passkeys). Refused unless
/// `--force`, saying nothing in it is sealed under this gateway's key; the gateway's own copy
/// stripped so is refused too (one intact seal proves nothing of the rest: restore_forged.rs).
#[test]
fn restore_refuses_another_gateways_backup_stripped_of_its_checkpoints_unless_forced() {
    let strip = |from_a: &Path| {
        sqlite(from_a, "DELETE FROM audit_checkpoints");
    };
    let t = a_backup_and_another_gateway(strip);
    let (b_data, from_a) = (&t.b_data, &t.from_a);
    let out = restore(b_data, from_a, &[]);
    refused(&out, "nothing in it is sealed under the audit key");
    assert_eq!(
        std::fs::read(b_data.join("assent.db")).unwrap(),
        t.live_before
    );
    assert_nothing_set_aside(b_data);
    let out = restore(b_data, from_a, &["--force", "--allow-outstanding-tokens"]);
    ok(&out);
    let tokens = "--allow-outstanding-tokens";
    let own = restore(&t.a_data, from_a, &[tokens]);
    refused(&own, "has no audit checkpoint signed by this gateway's");
    ok(&restore(&t.a_data, from_a, &["--force", tokens]));
}

#[test]
fn restore_after_kill_9_keeps_the_writes_only_the_write_ahead_log_held() {
    let gw = served(SIGNING);
    propose(&gw.server.url, 5000);
    let out = gw.backup("b.db");
    let Served {
        data,
        server: mut s,
        ..
    } = gw;
    // After the backup: an approval decided, then SIGKILL (no checkpoint of the log).
    let late = approved(&s.url, 6000);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    ok(&restore(&data, &out, &[]));
    assert_eq!(count(&data.join("assent.db"), "approvals"), 1);
    // The replaced database kept is whole: the decision the log held is in it.
    let aside = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("before-restore"))
        .unwrap();
    assert!(!data.join("assent.db-wal").exists());
    assert_eq!(
        sqlite(
            &aside,
            &format!("SELECT status FROM approvals WHERE id = '{late}'")
        ),
        "approved"
    );
    ok(&audit_verify(&data, &[]));
}

#[test]
fn a_token_redeemed_after_the_backup_is_not_made_redeemable_again_by_a_restore() {
    let gw = served("");
    let (s, data) = (&gw.server, &gw.data);
    let args = json!({"amount": 5000, "currency": "EUR", "recipient": "ext-1"});
    let id = approved(&s.url, 5000);
    let http = reqwest::blocking::Client::new();
    // The token the agent reads now from the gateway at `url`, and its redemption's status.
    let read_token = |url: &str| -> Value {
        let a: Value = http
            .get(format!("{url}/v1/approvals/{id}"))
            .bearer_auth(BOT_KEY)
            .send()
            .unwrap()
            .json()
            .unwrap();
        a["token"].clone()
    };
    let redeem_token = |url: &str, token: &Value| {
        http.post(format!("{url}/v1/tokens/redeem"))
            .bearer_auth(BOT_KEY)
            .json(&json!({"token": token, "tool": "transfer_funds", "arguments": args}))
            .send()
            .unwrap()
            .status()
    };
    let first = read_token(&s.url);
    let redeem = |url: &str| redeem_token(url, &first);
    let out = gw.backup("b.db");
    // Redeemed after the backup: in the backup the token is still unredeemed.
    assert!(redeem(&s.url).is_success());
    let Served {
        cfg, port, server, ..
    } = gw;
    stop(server);
    // Found by review: --force (another audit key) is no consent to replayable tokens.
    refused_even_forced(
        data,
        &out,
        "1 approval token(s) neither redeemed nor expired",
    );
    // Allowed: the outstanding token is voided at the next start. Found by review: replacing
    // token.key, as the refusal used to advise, did not stop a replay — the agent read its
    // approval again and got the token signed anew with the new key.
    ok(&restore(data, &out, &["--allow-outstanding-tokens"]));
    assert!(data.join(assent_store::voided::MARKER).exists());
    let s = serve(&cfg, port);
    assert!(!data.join(assent_store::voided::MARKER).exists());
    assert_eq!(redeem(&s.url), reqwest::StatusCode::CONFLICT);
    let again = read_token(&s.url);
    assert!(
        !redeem_token(&s.url, &again).is_success(),
        "the token read again after the restore ran the call again"
    );
    stop(s);
    ok(&audit_verify(data, &[]));
    // Found by review: the voided token set unused again in the database (its seal leaves
    // `used_at` out) is reported, as a redeemed one set back is.
    sqlite(&data.join("assent.db"), "UPDATE tokens SET used_at = NULL");
    let out = audit_verify(data, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("voided by a restore"), "{err}");
    // Found by review: a reason quotes ids read from the database, and was printed raw; an
    // escape sequence in a planted id could erase the failure line on the terminal.
    sqlite(
        &data.join("assent.db"),
        "UPDATE tokens SET token_id = token_id || char(27) || '[1A' || char(27) || '[2K'",
    );
    let out = audit_verify(data, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r"\u001b[2K") && !err.contains('\u{1b}'),
        "{err:?}"
    );
}
