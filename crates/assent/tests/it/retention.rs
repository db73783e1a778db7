//! Audit retention as a user runs it (issue 13 §3): `audit_retention_days` bounded with file
//! and line; `assent serve` archiving at start-up; `assent audit archive` and `assent audit
//! verify-export`; `assent audit verify` after both.

use super::*;
use assent_store::Store;
use assent_store::checkpoint::Due;

/// A data directory at `data` whose chain has three records of 1 January 1970 (older than
/// any retention period) and a checkpoint over them, then one record made now.
fn old_history(data: &Path) {
    let db = assent_store::db::Database::Sqlite {
        path: data.join("assent.db"),
    };
    old_history_in(data, &db);
}

/// [`old_history`] in `db`, with the keys in `data`.
fn old_history_in(data: &Path, db: &assent_store::db::Database) {
    let envelopes = std::sync::Arc::new(assent_server::WireEnvelopes);
    assent_store::keys::init(data).unwrap();
    let s = Store::open_database(data, data, db, 60_000, envelopes).unwrap();
    for i in 0..3 {
        s.append_audit("note", None, "test", &json!({"i": i}), 1_000 + i)
            .unwrap();
    }
    s.checkpoint_if_due(Due::NOW, 2_000).unwrap().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    s.append_audit("note", None, "test", &json!({"i": "now"}), now)
        .unwrap();
}

/// `assent audit archive --data-dir d --older-than-days 1` with the arguments `extra`.
fn archive_old(d: &str, extra: &[&str]) -> std::process::Output {
    let args = [
        "audit",
        "archive",
        "--data-dir",
        d,
        "--older-than-days",
        "1",
    ];
    run(&[&args[..], extra].concat())
}

/// [`old_history`] in `dir/data`, archived: the data directory and its one export.
fn archived(dir: &Path) -> (PathBuf, PathBuf) {
    let data = dir.join("data");
    old_history(&data);
    ok(&archive_old(data.to_str().unwrap(), &[]));
    let f = exports(&data).pop().expect("one export");
    (data, f)
}

/// The export files in `data/archive`.
fn exports(data: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(data.join("archive")) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn audit_retention_days_out_of_bounds_stops_start_up_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    start_up_refused(
        dir.path(),
        &[
            (
                "audit_retention_days: 0",
                "audit_retention_days is 0; it must be from 1 to 36500",
            ),
            (
                "audit_retention_days: 99999999",
                "audit_retention_days is 99999999; it must be from 1 to 36500",
            ),
            ("audit_retention_days: -1", "invalid u64"),
        ],
    );
}

#[test]
fn serve_archives_old_audit_records_at_start_up_and_both_still_verify() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    old_history(&data);
    let port = free_port();
    let cfg = write_config(dir.path(), port, "audit_retention_days: 1\n");
    let s = serve(&cfg, port);
    let start = Instant::now();
    while exports(&data).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nothing archived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    crate::stop(s);
    let files = exports(&data);
    assert_eq!(files.len(), 1);
    let text = ok(&audit_verify(&data, &[]));
    assert!(text.contains("records 1..3 were archived"), "{text}");
    let cfg_s = cfg.to_str().unwrap();
    let f = files[0].to_str().unwrap();
    let text = ok(&run(&["audit", "verify-export", f, "--config", cfg_s]));
    assert!(text.contains("records 1..3 (3 records)"), "{text}");
    // An export edited after the fact no longer verifies (exit 1).
    let edited = std::fs::read_to_string(f).unwrap().replacen(
        "\"actor\":\"test\"",
        "\"actor\":\"mallory\"",
        1,
    );
    std::fs::write(f, edited).unwrap();
    let out = run(&["audit", "verify-export", f, "--config", cfg_s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("altered"));
}

#[test]
fn audit_archive_command_archives_and_an_export_signed_by_another_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    old_history(&data);
    let d = data.to_str().unwrap();
    // Without a period there is nothing to go by.
    let out = run(&["audit", "archive", "--data-dir", d]);
    assert_eq!(out.status.code(), Some(1));
    let archive = || -> Value { serde_json::from_str(&ok(&archive_old(d, &["--json"]))).unwrap() };
    // A checkpoint file named but missing (a mistyped path, a volume not mounted) archives
    // nothing rather than archiving unchecked.
    let missing = dir.path().join("no-such-checkpoints.jsonl");
    let out = archive_old(d, &["--checkpoint", missing.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("does not exist; nothing archived"),
        "{err}"
    );
    let v = archive();
    assert_eq!(v["archived"][0]["manifest"]["last_seq"], 3, "{v}");
    let f = v["archived"][0]["path"].as_str().unwrap().to_string();
    // Again: nothing more is due.
    let again = archive();
    assert_eq!(again["archived"], json!([]));
    let rep: Value = serde_json::from_str(&ok(&audit_verify(&data, &["--json"]))).unwrap();
    assert_eq!(
        (rep["ok"].clone(), rep["archived_records"].clone()),
        (json!(true), json!(3))
    );
    let rep: Value = serde_json::from_str(&ok(&run(&[
        "audit",
        "verify-export",
        &f,
        "--data-dir",
        d,
        "--json",
    ])))
    .unwrap();
    assert_eq!(rep["ok"], true, "{rep}");
    // Another gateway's key does not verify it.
    let other = dir.path().join("other");
    ok(&run(&[
        "keys",
        "init",
        "--keys-dir",
        other.to_str().unwrap(),
    ]));
    let key = ok(&run(&[
        "audit",
        "key",
        "--data-dir",
        other.to_str().unwrap(),
    ]));
    let out = run(&["audit", "verify-export", &f, "--public-key", key.trim()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not verify under audit key"));
}

/// Review finding: `audit verify` never opened the exports, yet said the newest was checked,
/// so someone who can write `data_dir` could delete or edit the only copy of the archived
/// records unseen. With `--archive-dir` every anchor's export must be there, verify, and end
/// in the anchor's manifest: a removed, truncated or swapped export is reported.
#[test]
fn audit_verify_with_archive_dirs_catches_a_removed_or_edited_export() {
    let dir = tempfile::tempdir().unwrap();
    let (data, f) = archived(dir.path());
    let archive = data.join("archive");
    let dirs = ["--archive-dir", archive.to_str().unwrap()];
    let text = ok(&audit_verify(&data, &dirs));
    assert!(text.contains("their 1 exports verify"), "{text}");
    // Without the flag it says the exports were not opened.
    let text = ok(&audit_verify(&data, &[]));
    assert!(text.contains("not opened"), "{text}");
    let bytes = std::fs::read(&f).unwrap();
    let checks: [(&str, &dyn Fn()); 3] = [
        ("is in none of the archive directories", &|| {
            std::fs::remove_file(&f).unwrap()
        }),
        ("does not", &|| {
            // The first record line dropped, the manifest kept.
            let text = String::from_utf8(bytes.clone()).unwrap();
            let rest = text.split_once('\n').unwrap().1;
            std::fs::write(&f, rest).unwrap();
        }),
        ("is not the anchor the store keeps", &|| {
            // Another export signed by the same key (the same records, another run) under
            // the name: it verifies, but its manifest is not this anchor.
            let other = dir.path().join("other");
            std::fs::create_dir_all(&other).unwrap();
            for k in ["token.key", "audit.key"] {
                std::fs::copy(data.join(k), other.join(k)).unwrap();
            }
            old_history(&other);
            ok(&archive_old(other.to_str().unwrap(), &[]));
            std::fs::copy(exports(&other).pop().unwrap(), &f).unwrap();
        }),
    ];
    for (want, edit) in checks {
        std::fs::write(&f, &bytes).unwrap();
        edit();
        let out = audit_verify(&data, &dirs);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{want}: {err}");
        assert!(err.contains("audit archive") && err.contains(want), "{err}");
    }
}

/// Attack (found by review): `audit verify --archive-dir` followed symbolic links, so a link
/// in the archive directory named as an anchor's export made it read — and vouch for — a file
/// outside the directory (any file the verifier can read). A link is refused, naming it, even
/// when its target is the genuine export.
#[test]
fn audit_verify_refuses_an_export_that_is_a_symlink_out_of_the_archive_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (data, f) = archived(dir.path());
    let outside = dir.path().join("elsewhere.jsonl");
    std::fs::rename(&f, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &f).unwrap();
    let archive = data.join("archive");
    let out = audit_verify(&data, &["--archive-dir", archive.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    // Nor is a named pipe in its place waited on (the export is opened without following a
    // link and without blocking, then judged by its own handle: found by review, a link
    // swapped in between a check by path and the open was followed).
    std::fs::remove_file(&f).unwrap();
    let made = Command::new("mkfifo").arg(&f).status();
    assert!(made.unwrap().success(), "mkfifo");
    let out = audit_verify(&data, &["--archive-dir", archive.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
}

/// The same on PostgreSQL: `archive`, `verify` and `verify-export` through `--config` and its
/// `database: {url_env}`.
#[test]
fn audit_archive_and_verify_work_on_the_postgres_database_of_a_config() {
    let Some(url) = assent_testkit::pg::fresh_schema_url() else {
        return; // ASSENT_TEST_NO_PG=1: the SQLite tests above cover the commands.
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    old_history_in(
        &data,
        &assent_store::db::Database::Postgres { url: url.clone() },
    );
    let extra = "database: {url_env: ASSENT_DATABASE_URL}\n";
    let cfg = write_config(dir.path(), free_port(), extra);
    let c = cfg.to_str().unwrap();
    let pg = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("ASSENT_DATABASE_URL", &url)
            .output()
            .unwrap()
    };
    let v: Value = serde_json::from_str(&ok(&pg(&[
        "audit",
        "archive",
        "--config",
        c,
        "--older-than-days",
        "1",
        "--json",
    ])))
    .unwrap();
    assert_eq!(v["archived"][0]["manifest"]["last_seq"], 3, "{v}");
    let f = v["archived"][0]["path"].as_str().unwrap().to_string();
    assert!(f.starts_with(data.join("archive").to_str().unwrap()), "{f}");
    let rep: Value =
        serde_json::from_str(&ok(&pg(&["audit", "verify", "--config", c, "--json"]))).unwrap();
    assert_eq!(
        (rep["ok"].clone(), rep["archived_records"].clone()),
        (json!(true), json!(3)),
        "{rep}"
    );
    ok(&pg(&["audit", "verify-export", &f, "--config", c]));
    // The anchor deleted behind the gateway's back: the chain starts in the middle (exit 1).
    let conn = assent_store::db::Database::Postgres { url: url.clone() }
        .connect()
        .unwrap();
    conn.conn().batch("DELETE FROM audit_archives").unwrap();
    drop(conn);
    let out = pg(&["audit", "verify", "--config", c]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Found by review: `assent audit key` named its directory by `--data-dir` only, and read —
/// or created — an audit key there while a gateway whose config sets `keys_dir` signs with
/// the one in that directory: the key published to verifiers was not the gateway's. With
/// `--config` (or `--keys-dir`) it reads the keys directory's, and never makes one there.
#[test]
fn audit_key_reads_the_keys_dir_of_a_config_and_never_makes_one() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let k = keys.to_str().unwrap();
    ok(&run(&["keys", "init", "--keys-dir", k]));
    let expected = ok(&run(&["audit", "key", "--keys-dir", k]));
    assert_eq!(expected.trim().len(), 64, "{expected}");
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(&cfg, "data_dir: data\nkeys_dir: keys\n").unwrap();
    let got = ok(&run(&["audit", "key", "--config", cfg.to_str().unwrap()]));
    assert_eq!(got, expected);
    // Found by review of the fix: with no flag, ./assent.yaml's data_dir was used (and a key
    // made there), not its keys_dir.
    let here = std::process::Command::new(crate::BIN)
        .args(["audit", "key"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(ok(&here), expected);
    assert!(!dir.path().join("data").join("audit.key").exists());
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = run(&["audit", "key", "--keys-dir", empty.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("run `assent keys init"),
        "{err}"
    );
    assert!(!empty.join("audit.key").exists());
}

/// Found by review: the key-file check let root read keys another user owns everywhere, so a
/// gateway run as root took keys an unprivileged user could replace. An administration
/// command run by root still reads a service user's private keys (`assent audit key` on a
/// systemd `DynamicUser`'s directory); `assent serve` run by root refuses them. Only as root:
/// nobody else may give a file away.
#[cfg(unix)]
#[test]
fn root_reads_a_service_users_keys_to_administer_them_but_never_serves_with_them() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    if std::fs::metadata(dir.path()).unwrap().uid() != 0 {
        return;
    }
    let keys = dir.path().join("keys");
    let k = keys.to_str().unwrap();
    ok(&run(&["keys", "init", "--keys-dir", k]));
    for f in [keys.clone(), keys.join("token.key"), keys.join("audit.key")] {
        std::os::unix::fs::chown(&f, Some(4242), Some(4242)).unwrap();
    }
    let key = ok(&run(&["audit", "key", "--keys-dir", k]));
    assert_eq!(key.trim().len(), 64, "{key}");
    // The data directory's lock file root makes is the service user's (found by review:
    // created 0600 by root, it kept the service from starting).
    ok(&run(&["migrate", "--data-dir", k]));
    let out = archive_old(k, &[]);
    assert!(out.status.success(), "{out:?}");
    let lock = std::fs::metadata(keys.join("assent.lock")).unwrap();
    assert_eq!(lock.uid(), 4242, "mode {:o}", lock.mode());
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(&cfg, "listen: 127.0.0.1:0\ndata_dir: keys\n").unwrap();
    let mut gw = crate::serve_cmd(&cfg)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = gw.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = gw.kill();
            panic!("assent serve started with another user's keys");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut gw.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        !status.success() && (err.contains("4242") || err.contains("may replace the key files")),
        "{err}"
    );
}

/// Attack (found by review): `assent audit verify-export --data-dir` opened the database
/// read-write without the data directory's lock, so a verification set a restored file's
/// journal mode (writing its header) and could run in the middle of a restore. Now it opens
/// the file read-only beside the lock: it waits for a restore to end and writes nothing.
#[test]
fn verify_export_against_the_store_writes_nothing_and_waits_for_a_restore() {
    let dir = tempfile::tempdir().unwrap();
    let (data, f) = archived(dir.path());
    let db = data.join("assent.db");
    let sql = |q: &str| {
        let out = Command::new("sqlite3").arg(&db).arg(q).output().unwrap();
        ok(&out).trim().to_string()
    };
    assert_eq!(sql("PRAGMA journal_mode = DELETE;"), "delete");
    let before = std::fs::read(&db).unwrap();
    let lock = std::fs::File::open(data.join("assent.lock")).unwrap();
    lock.lock().unwrap();
    let mut child = Command::new(BIN)
        .args(["audit", "verify-export"])
        .arg(&f)
        .args(["--data-dir", data.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "verified during a restore"
    );
    lock.unlock().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the database was written"
    );
    assert_eq!(sql("PRAGMA journal_mode;"), "delete");
}

/// Found by review: the records retention archived are only in the signed exports under
/// `DATA_DIR/archive`, which neither `backup` nor `restore` copies, and nothing said so: a
/// backup restored on a new host lost them without a word. `backup` names the directory to
/// keep with it; `restore` warns when the data directory holds no archive.
#[test]
fn a_backup_names_the_archive_to_keep_and_a_restore_without_it_warns() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _export) = archived(dir.path());
    let copy = dir.path().join("copy.db");
    let d = data.to_str().unwrap();
    let out = ok(&run(&["backup", "--data-dir", d, copy.to_str().unwrap()]));
    let archive = data.join("archive");
    assert!(
        out.contains("audit records retention archived before its chain")
            && out.contains(archive.to_str().unwrap()),
        "{out}"
    );
    // On a new host: the keys kept with the backup, not the archive.
    let new = dir.path().join("new");
    std::fs::create_dir(&new).unwrap();
    for key in ["token.key", "audit.key"] {
        std::fs::copy(data.join(key), new.join(key)).unwrap();
    }
    let restored = run(&[
        "restore",
        "--data-dir",
        new.to_str().unwrap(),
        copy.to_str().unwrap(),
    ]);
    ok(&restored);
    let err = String::from_utf8_lossy(&restored.stderr);
    assert!(
        err.contains("audit records were archived by retention")
            && err.contains("holds none of their exports"),
        "{err}"
    );
    // Put back beside it, nothing to warn about.
    let again = dir.path().join("again");
    std::fs::create_dir(&again).unwrap();
    for key in ["token.key", "audit.key"] {
        std::fs::copy(data.join(key), again.join(key)).unwrap();
    }
    std::fs::create_dir(again.join("archive")).unwrap();
    let restored = run(&[
        "restore",
        "--data-dir",
        again.to_str().unwrap(),
        copy.to_str().unwrap(),
    ]);
    ok(&restored);
    assert!(!String::from_utf8_lossy(&restored.stderr).contains("holds none"));
}
