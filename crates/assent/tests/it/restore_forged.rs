//! `assent restore` of a backup someone rewrote or added to: an attacker who can write the
//! backup file (not the keys) re-chains the history they changed — the hash chain has no key —
//! and the restore must refuse the copy, since the gateway would sign it as its own once it
//! serves. `assent backup` signs a checkpoint at the copy's head with the gateway's audit key;
//! `restore` refuses, unless `--force`, a copy whose head no checkpoint of that key covers.

use super::*;

/// Checkpoints signed after every record, no checkpoint file: `restore --data-dir` has only
/// what is in the copy to go by.
const SIGNING: &str = "audit_checkpoints: {every_records: 1, every_seconds: 1}\n";

/// Tokens of the approvals are neither redeemed nor expired: a separate consent.
const TOKENS: &str = "--allow-outstanding-tokens";

/// `sqlite3 DB SQL`'s output (it must succeed).
fn sqlite(db: &Path, opts: &[&str], q: &str) -> String {
    let out = Command::new("sqlite3")
        .args(opts)
        .arg(db)
        .arg(q)
        .output()
        .unwrap();
    ok(&out)
}

/// `assent restore --data-dir DATA [EXTRA…] IN`.
fn restore(data: &Path, input: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["restore", "--data-dir"])
        .arg(data)
        .args(extra)
        .arg(input)
        .output()
        .unwrap()
}

/// `assent backup --config CFG TO`.
fn backup(cfg: &Path, to: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(["backup", "--config"])
        .arg(cfg)
        .arg(to)
        .output()
        .unwrap()
}

/// A stopped gateway that approved three calls (alice deciding each) and `assent backup
/// --config` of it at `honest`; the directory goes when this is dropped.
struct Backed {
    _dir: tempfile::TempDir,
    cfg: PathBuf,
    data: PathBuf,
    honest: PathBuf,
}

fn backed_up() -> Backed {
    let Served {
        dir,
        cfg,
        data,
        server,
        ..
    } = served(SIGNING);
    for amount in [5000, 6000, 7000] {
        approved(&server.url, amount);
    }
    stop(server);
    let honest = dir.path().join("honest.db");
    let out = backup(&cfg, &honest);
    ok(&out);
    Backed {
        _dir: dir,
        cfg,
        data,
        honest,
    }
}

/// A copy of `from` at `name` beside it.
fn copy_of(from: &Path, name: &str) -> PathBuf {
    let to = from.with_file_name(name);
    std::fs::copy(from, &to).unwrap();
    to
}

/// In the copy `db`: the middle approval's decision is put on `mallory` — its `decision`
/// record's actor and its `decisions` row — and every record from it on is hashed again
/// with the gateway's own `record_hash`, so the bare chain and the state tables agree.
fn put_the_middle_decision_on_mallory(db: &Path) {
    let rows = sqlite(
        db,
        &["-json"],
        "SELECT seq, at, kind, approval_id, actor, data, prev_hash FROM audit ORDER BY seq;",
    );
    let rows: Vec<Value> = serde_json::from_str(&rows).unwrap();
    let decisions: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i]["kind"] == "decision")
        .collect();
    assert_eq!(decisions.len(), 3, "{rows:?}");
    let target = decisions[1];
    let aid = rows[target]["approval_id"].as_str().unwrap().to_string();
    let prev = rows[target]["prev_hash"].as_str().unwrap();
    let edits = rechained(&rows, target, prev, |i, r| {
        let actor = if i == target {
            "mallory"
        } else {
            r["actor"].as_str().unwrap()
        };
        (actor.to_string(), r["data"].as_str().unwrap().to_string())
    });
    let script = format!(
        "BEGIN;\nUPDATE decisions SET actor = 'mallory' WHERE approval_id = '{aid}';\n{edits}COMMIT;\n"
    );
    sqlite(db, &[], &script);
}

/// The `UPDATE audit` statements that give the records of `rows` (`seq`, `at`, `kind`,
/// `approval_id`, `actor` and `data` of each, as `sqlite3 -json` reads them) from index `from`
/// on the actor and data `edit` makes of each (its index and row), every one hashed again with
/// the gateway's own `record_hash`, chained on from `prev`: the bare chain verifies after them.
pub(crate) fn rechained(
    rows: &[Value],
    from: usize,
    prev: &str,
    edit: impl Fn(usize, &Value) -> (String, String),
) -> String {
    let mut prev = prev.to_string();
    let mut script = String::new();
    for (i, r) in rows.iter().enumerate().skip(from) {
        let (actor, data) = edit(i, r);
        let seq = r["seq"].as_i64().unwrap();
        let hash = assent_store::audit::record_hash(
            &prev,
            seq,
            r["at"].as_i64().unwrap(),
            r["kind"].as_str().unwrap(),
            r["approval_id"].as_str(),
            &actor,
            &data,
        );
        script.push_str(&format!(
            "UPDATE audit SET actor = '{}', data = '{}', prev_hash = '{prev}', hash = '{hash}' WHERE seq = {seq};\n",
            actor.replace('\'', "''"),
            data.replace('\'', "''")
        ));
        prev = hash;
    }
    script
}

/// Asserts that `out` failed with exit status 1 and a stderr naming each of `wants`.
#[track_caller]
fn refused(out: &std::process::Output, wants: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for w in wants {
        assert!(err.contains(w), "{w}: {err}");
    }
}

/// Attack (found by review): the backup's checkpoints deleted, a decision in the middle of
/// its history put on someone else (record and row), the chain re-hashed. Nothing in the copy
/// gave the rewrite away (one intact sealed approval was taken as proof the copy was the
/// gateway's), so it was restored and the gateway signed the forged history. Now refused,
/// naming the missing checkpoint; `--force` restores it and says so; an honest backup of the
/// same gateway restores without `--force`, and quietly.
#[test]
fn a_backup_rewritten_and_stripped_of_its_checkpoints_is_not_restored_without_force() {
    let s = backed_up();
    let honest = &s.honest;
    let forged = copy_of(honest, "forged.db");
    sqlite(&forged, &[], "DELETE FROM audit_checkpoints;");
    put_the_middle_decision_on_mallory(&forged);
    let live_before = std::fs::read(s.data.join("assent.db")).unwrap();
    let out = restore(&s.data, &forged, &[TOKENS]);
    refused(
        &out,
        &[
            "has no audit checkpoint signed by this gateway's audit key",
            "--force",
        ],
    );
    assert_eq!(
        std::fs::read(s.data.join("assent.db")).unwrap(),
        live_before
    );
    // Forced: restored, with a warning naming what was taken unchecked.
    let out = restore(&s.data, &forged, &["--force", TOKENS]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("restored with --force") && err.contains("covered by no checkpoint"),
        "{err}"
    );
    let who = sqlite(
        &s.data.join("assent.db"),
        &[],
        "SELECT actor FROM decisions;",
    );
    assert!(
        who.contains("mallory"),
        "the forged copy is what was restored: {who}"
    );
    // The honest backup: restored without --force, no warning.
    let out = restore(&s.data, honest, &[TOKENS]);
    ok(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let who = sqlite(
        &s.data.join("assent.db"),
        &[],
        "SELECT actor FROM decisions;",
    );
    assert!(!who.contains("mallory"), "{who}");
    ok(&audit_verify(&s.data, &[]));
}

/// Attack (found by review): the backup's checkpoints left alone, a passkey (row and
/// `passkey.registered` record, chained onto the head) planted after the newest of them, so
/// that whoever holds it signs votes as alice once restored: the records after the newest
/// checkpoint were restored without complaint. Now refused, naming how many no checkpoint
/// vouches for.
#[test]
fn a_record_appended_after_the_backups_signed_head_is_not_restored_without_force() {
    let s = backed_up();
    let honest = &s.honest;
    let planted = copy_of(honest, "planted.db");
    let head = sqlite(
        &planted,
        &["-json"],
        "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1;",
    );
    let head = &serde_json::from_str::<Vec<Value>>(&head).unwrap()[0];
    let seq = head["seq"].as_i64().unwrap() + 1;
    let data = r#"{"credential_id":"AAAA","public_key":{"kty":"EC"}}"#;
    let at = 4_000_000_000_000_i64;
    let hash = assent_store::audit::record_hash(
        head["hash"].as_str().unwrap(),
        seq,
        at,
        "passkey.registered",
        None,
        "alice",
        data,
    );
    sqlite(
        &planted,
        &[],
        &format!(
            "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash) VALUES ({seq}, {at}, 'passkey.registered', NULL, 'alice', '{data}', '{}', '{hash}');
             INSERT INTO passkeys (credential_id, principal, passkey, public_key, label, created_at) VALUES ('AAAA', 'alice', '{{}}', '{{\"kty\":\"EC\"}}', 'planted', {at});",
            head["hash"].as_str().unwrap()
        ),
    );
    let out = restore(&s.data, &planted, &[TOKENS]);
    refused(
        &out,
        &[
            &format!("goes on to record {seq}"),
            "its last 1 records are vouched for by no signature",
        ],
    );
    assert_eq!(
        sqlite(
            &s.data.join("assent.db"),
            &[],
            "SELECT count(*) FROM passkeys;"
        ),
        "0\n"
    );
    // The copy as backed up restores.
    ok(&restore(&s.data, honest, &[TOKENS]));
}

/// An honest backup taken between two checkpoints of the gateway (signed rarely here): the
/// records after the gateway's newest checkpoint are covered by the one `assent backup`
/// signs at the copy's head, so it restores without `--force` and without a warning, and the
/// restored gateway's chain verifies and goes on from it.
#[test]
fn an_honest_backup_taken_between_checkpoints_restores_without_force() {
    let Served {
        dir,
        cfg,
        data,
        server,
        port,
    } = served("audit_checkpoints: {every_records: 100000, every_seconds: 86400}\n");
    approved(&server.url, 5000);
    approved(&server.url, 6000);
    let honest = dir.path().join("honest.db");
    let out = backup(&cfg, &honest);
    let text = ok(&out);
    stop(server);
    let out = restore(&data, &honest, &[TOKENS]);
    ok(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("its head is covered by a checkpoint"),
        "{text}"
    );
    // The gateway's own checkpoints in the copy (none yet, or its first soon after its first
    // record) stop short of the copy's head: the one at the head is the backup's.
    let seqs = sqlite(
        &honest,
        &[],
        "SELECT seq FROM audit_checkpoints ORDER BY seq;",
    );
    let seqs: Vec<i64> = seqs.lines().map(|l| l.parse().unwrap()).collect();
    let head: i64 = sqlite(&honest, &[], "SELECT max(seq) FROM audit;")
        .trim()
        .parse()
        .unwrap();
    let (last, gateways) = seqs.split_last().unwrap();
    assert!(
        *last == head && gateways.iter().all(|&s| s < head),
        "{seqs:?} {head}"
    );
    ok(&audit_verify(&data, &[]));
    let s = serve(&cfg, port);
    approved(&s.url, 7000);
    stop(s);
    ok(&audit_verify(&data, &[]));
}

/// Attack: the live database itself rewritten and re-chained, its stored checkpoints deleted,
/// before the next `assent backup --config`. Signing the copy's head as it stood would vouch
/// for the rewrite; like the gateway's signer, the backup checks the chain against the newest
/// checkpoint of the checkpoint file, and signs nothing (and writes no file) when the chain no
/// longer reaches it.
#[test]
fn a_backup_does_not_sign_a_chain_rewritten_under_the_checkpoint_file() {
    let Served {
        dir,
        cfg,
        data,
        server,
        ..
    } = served(
        "audit_checkpoints: {every_records: 1, every_seconds: 1, file: checkpoints.jsonl}\n",
    );
    for amount in [5000, 6000, 7000] {
        approved(&server.url, amount);
    }
    stop(server);
    let db = data.join("assent.db");
    sqlite(&db, &[], "DELETE FROM audit_checkpoints;");
    put_the_middle_decision_on_mallory(&db);
    let out_file = dir.path().join("b.db");
    let out = backup(&cfg, &out_file);
    refused(
        &out,
        &["audit chain altered since the checkpoint at record"],
    );
    assert!(!out_file.exists());
}

/// Attack (found by review): a fresh database of another gateway — then only its key set's
/// claim at record 0, no audit record — was restored without `--force` (no checkpoint of a
/// record to be "signed by another key", no head to cover), and the next start refused it as
/// another key set's: the operator's database had been replaced first. The claim counts as
/// signed by another key; a first start now also records its configuration (`config.loaded`,
/// checkpointed under that key). Refused, naming both keys, nothing restored; `--force`
/// restores it, and the gateway refuses it until the other gateway's keys are put back.
#[test]
fn another_gateways_fresh_database_is_not_restored_without_force() {
    let b = served("");
    stop(b.server);
    let fresh = b.dir.path().join("fresh.db");
    ok(&backup(&b.cfg, &fresh));
    let records = sqlite(&fresh, &[], "SELECT count(*) FROM audit;");
    let claims = sqlite(&fresh, &[], "SELECT count(*) FROM audit_checkpoints;");
    assert_eq!((records.trim(), claims.trim()), ("1", "2"));
    let key_of = crate::keys_guard::audit_key_of;
    let a = tempfile::tempdir().unwrap();
    let data_a = a.path().join("data");
    ok(&run(&[
        "keys",
        "init",
        "--keys-dir",
        data_a.to_str().unwrap(),
    ]));
    let out = restore(&data_a, &fresh, &[]);
    refused(&out, &["signed by", &key_of(&b.data), &key_of(&data_a)]);
    assert!(!data_a.join("assent.db").exists());
    let out = restore(&data_a, &fresh, &["--force"]);
    ok(&out);
    crate::keys_guard::refused_until_its_keys_are_put_back(&data_a, &b.data, "");
}

/// Attack (found by review): a backup whose settled approval was edited where only its seal
/// vouches for it — a decision's reason, the scope it was approved for — was verified with no
/// audit key (the staging directory's), so its seals went unchecked and `assent restore` put
/// it in place of the sound database without `--force`. Now the copy is checked under the
/// gateway's keys: refused, the live database left as it was.
#[test]
fn a_backup_with_an_edited_settlement_is_not_restored() {
    let b = backed_up();
    for edit in [
        "UPDATE decisions SET reason = 'the CFO said yes' WHERE rowid = 2;",
        "UPDATE approvals SET scope = 'workspace' WHERE rowid = 2;",
    ] {
        let edited = copy_of(&b.honest, "edited.db");
        sqlite(&edited, &[], edit);
        let live = std::fs::read(b.data.join("assent.db")).unwrap();
        let out = restore(&b.data, &edited, &[TOKENS]);
        refused(&out, &["seal"]);
        assert_eq!(
            std::fs::read(b.data.join("assent.db")).unwrap(),
            live,
            "{edit}"
        );
    }
    ok(&restore(&b.data, &b.honest, &[TOKENS]));
    // Nor is such a database backed up as verified.
    sqlite(
        &b.data.join("assent.db"),
        &[],
        "UPDATE decisions SET reason = 'x' WHERE rowid = 2;",
    );
    refused(
        &backup(&b.cfg, &b.data.with_file_name("again.db")),
        &["seal"],
    );
}

/// Runs `assent restore --data-dir DATA [EXTRA…] IN`, killed (and the test failed) if it has not
/// ended within 20 s.
fn restore_within(data: &Path, input: &Path, extra: &[&str]) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(["restore", "--data-dir"])
        .arg(data)
        .args(extra)
        .arg(input)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("the restore of {} did not end", input.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Attack (found by review): `assent restore` let SQLite open the input by path, so root
/// restoring a file from a directory another user may write opened that user's `-wal` beside
/// it and created (or opened read-write, through a hard link planted at its name) its `-shm`
/// there, and a FIFO at the input's name held the restore — and the data directory's lock —
/// for ever. Now the input and its `-wal` are copied, as regular files read without blocking,
/// into the private staging directory, and SQLite opens only that copy.
#[test]
fn a_restore_opens_nothing_beside_its_input_and_never_waits_on_a_fifo() {
    let b = backed_up();
    let dir = b.honest.parent().unwrap().join("incoming");
    std::fs::create_dir(&dir).unwrap();
    let fifo = dir.join("fifo.db");
    ok(&Command::new("mkfifo").arg(&fifo).output().unwrap());
    refused(
        &restore_within(&b.data, &fifo, &[TOKENS]),
        &["not a regular file"],
    );
    // The backup with a `-wal` beside it: its `-shm` a hard link to another file.
    let input = dir.join("b.db");
    std::fs::copy(&b.honest, &input).unwrap();
    std::fs::write(dir.join("b.db-wal"), [0u8; 64]).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::hard_link(&victim, dir.join("b.db-shm")).unwrap();
    ok(&restore_within(&b.data, &input, &[TOKENS]));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    // Without one, none is made there.
    std::fs::remove_file(dir.join("b.db-shm")).unwrap();
    ok(&restore_within(&b.data, &input, &[TOKENS]));
    let beside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!beside.iter().any(|n| n.ends_with("-shm")), "{beside:?}");
    // A `-wal` beside it that is not a regular file is refused.
    std::fs::remove_file(dir.join("b.db-wal")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("b.db-wal")).unwrap();
    refused(
        &restore_within(&b.data, &input, &[TOKENS]),
        &["not a regular file"],
    );
}

/// Attack (found by review): `assent restore` judged a copy's schema by its `user_version`
/// alone, while the gateway's migration runner also reads `assent_schema`, its record of the
/// migrations applied; a copy whose record claimed a newer version, or an edited migration,
/// was restored (the sound database set aside) and the gateway then refused to start. Refused
/// now, even forced, the live database left as it was.
#[test]
fn a_backup_whose_migration_record_was_edited_is_not_restored() {
    let b = backed_up();
    let live = std::fs::read(b.data.join("assent.db")).unwrap();
    for (edit, says) in [
        (
            "INSERT INTO assent_schema (version, name, sha256, applied_at) VALUES (999, 'x', 'y', 0);",
            "schema version 999, newer than this assent",
        ),
        (
            "UPDATE assent_schema SET sha256 = 'ab' WHERE version = 1;",
            "a released migration was edited",
        ),
    ] {
        let edited = copy_of(&b.honest, "edited.db");
        sqlite(&edited, &[], edit);
        refused(&restore(&b.data, &edited, &[TOKENS, "--force"]), &[says]);
        assert_eq!(
            std::fs::read(b.data.join("assent.db")).unwrap(),
            live,
            "{edit}"
        );
    }
}

/// The input's `-wal` is copied with it (found by review: a test with a 64-byte `-wal` beside
/// a file not in WAL mode could not tell), beside the file itself when the input is a link
/// (`latest.db`), as SQLite reads it: a copy of a killed gateway's files, whose last decision
/// only its log holds, restores with that decision.
#[test]
fn a_restore_takes_the_writes_only_its_inputs_write_ahead_log_holds() {
    let Served {
        dir,
        data,
        server: mut s,
        ..
    } = served(SIGNING);
    approved(&s.url, 5000);
    let late = approved(&s.url, 6000);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let incoming = dir.path().join("incoming");
    std::fs::create_dir(&incoming).unwrap();
    for side in ["", "-wal"] {
        let from = data.join(format!("assent.db{side}"));
        assert!(from.exists(), "{}", from.display());
        std::fs::copy(&from, incoming.join(format!("x.db{side}"))).unwrap();
    }
    let latest = dir.path().join("latest.db");
    std::os::unix::fs::symlink(incoming.join("x.db"), &latest).unwrap();
    ok(&restore(&data, &latest, &[TOKENS, "--force"]));
    let q = format!("SELECT status FROM approvals WHERE id = '{late}';");
    assert_eq!(sqlite(&data.join("assent.db"), &[], &q).trim(), "approved");
}
