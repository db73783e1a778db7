//! Audit retention (issue 13 §3): old records archived into a signed export, then deleted;
//! the export and the remaining chain verify, and each way of tampering with either is
//! refused. Every test runs on SQLite and on Postgres ([`both`]).

use super::pgkit::both;
use super::{approved, open, pending, wire};
use assent_store::Store;
use assent_store::archive::{self as retention, verify_export};
use assent_store::checkpoint::Due;
use assent_store::db::{Database, FromValue, Params, tuple};
use assent_store::integrity::{Report, VerifyOptions, verify_on};
use assent_store::retention::ARCHIVE_DIR;
use assent_store::retention::Archived;
use std::path::{Path, PathBuf};

const DAY: i64 = 86_400_000;

/// The store's full verification under its own audit key.
pub(super) fn verify(s: &Store, db: &Database) -> Report {
    let conn = db.connect().unwrap();
    let opts = VerifyOptions {
        public_key: Some(s.audit_public_key()),
        checkpoint_file: None,
        ..Default::default()
    };
    verify_on(conn.conn(), &opts, "no key").unwrap()
}

/// The one value the query `sql` (with `params`) reads from `db`, through a session of its own.
pub(super) fn scalar<T: FromValue>(db: &Database, sql: &str, params: impl Params) -> T {
    db.connect()
        .unwrap()
        .conn()
        .query_row(sql, params, |r| r.get(0))
        .unwrap()
}

/// A store over `db` in a new temporary directory (kept while the `TempDir` lives) with one
/// approval approved on day 0 for each of `amounts` (see [`approved`]) and then one record on
/// day 10; with the path of its archive directory (not made yet).
fn aged(db: &Database, amounts: std::ops::Range<i64>) -> (tempfile::TempDir, Store, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), db);
    for i in amounts {
        approved(&s, i, 5_000, false);
    }
    s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
        .unwrap();
    let arch = dir.path().join(ARCHIVE_DIR);
    (dir, s, arch)
}

/// Runs `sql` on the database behind the store's back.
pub(super) fn tamper(db: &Database, sql: &str) {
    db.connect().unwrap().conn().batch(sql).unwrap();
}

/// Three approvals approved on day 0 (tokens long expired), a checkpoint, one approval still
/// pending from day 0, and one record on day 10; then a retention run on day 10 keeping 5 days.
fn archived_store(dir: &Path, db: &Database) -> (Store, Archived) {
    let s = open(dir, db);
    for i in 0..3 {
        approved(&s, i, 5_000, false);
    }
    s.checkpoint_if_due(Due::NOW, 3_000).unwrap().unwrap();
    let (held, _) = pending(&s, 9, 4_000, 100 * DAY, false);
    s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
        .unwrap();
    let before = verify(&s, db);
    assert_eq!(before.problem, None, "{before:?}");
    let a = s
        .archive_audit(&dir.join("archive"), 5 * DAY, 1_000, 10 * DAY, None, None)
        .unwrap()
        .expect("records were due");
    // The pending approval's records (and everything after them) stay.
    let first_held: i64 = scalar(
        db,
        "SELECT min(seq) FROM audit WHERE approval_id = ?1",
        [&held],
    );
    assert_eq!(a.manifest.last_seq, first_held - 1);
    (s, a)
}

#[test]
fn retention_archives_old_records_into_a_verified_export_and_the_rest_still_verifies() {
    crate::both_in_dirs(|db, dir| {
        let (s, a) = archived_store(dir, db);
        // Per approval: requested, confirm.requested, confirm.approved, decision, token.minted;
        // settlement.sealing with the first settlement.
        assert_eq!((a.manifest.first_seq, a.manifest.last_seq), (1, 16));
        assert!(!a.more);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&a.path), 0o600);
        assert_eq!(mode(&dir.join("archive")), 0o700);
        let exp = verify_export(&a.path, &s.audit_public_key()).unwrap();
        assert_eq!((exp.records, exp.problem.clone()), (16, None), "{exp:?}");
        assert_eq!(exp.manifest.as_ref(), Some(&a.manifest));
        let conn = db.connect().unwrap();
        assert_eq!(
            retention::against_store(conn.conn(), &a.manifest).unwrap(),
            None
        );
        let left: i64 = conn
            .conn()
            .query_row("SELECT count(*) FROM audit WHERE seq <= 16", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(left, 0);
        let rep = verify(&s, db);
        assert_eq!(rep.problem, None, "{rep:?}");
        // The pending approval's two, the note, and settlement.sealing carried forward.
        assert_eq!((rep.archived_records, rep.records), (16, 4));
        // Nothing more is due; the chain goes on, checkpoints are still signed over it, and
        // it still verifies (the checkpoint's record count includes the archived records).
        assert!(
            s.archive_audit(&dir.join("archive"), 5 * DAY, 1_000, 10 * DAY, None, None)
                .unwrap()
                .is_none()
        );
        s.append_audit("note", None, "test", &serde_json::json!({}), 11 * DAY)
            .unwrap();
        let cp = s.checkpoint_if_due(Due::NOW, 11 * DAY).unwrap().unwrap();
        assert_eq!((cp.seq, cp.record_count), (21, 21));
        assert_eq!(verify(&s, db).problem, None);
    });
}

#[test]
fn retention_archives_a_backlog_in_runs_that_chain() {
    both(|db| {
        let (_dir, s, arch) = aged(db, 0..4);
        let one = s
            .archive_audit(&arch, 5 * DAY, 8, 10 * DAY, None, None)
            .unwrap()
            .unwrap();
        assert!(one.more);
        let two = s
            .archive_audit(&arch, 5 * DAY, 8, 10 * DAY, None, None)
            .unwrap()
            .unwrap();
        let three = s
            .archive_audit(&arch, 5 * DAY, 8, 10 * DAY, None, None)
            .unwrap()
            .unwrap();
        assert_eq!(
            [
                one.manifest.last_seq,
                two.manifest.last_seq,
                three.manifest.last_seq
            ],
            // 4 × 5 records, settlement.sealing and the note; then its carried copy (day 10).
            [8, 16, 21]
        );
        assert_eq!(two.manifest.first_prev_hash, one.manifest.last_hash);
        for a in [&one, &two, &three] {
            let r = verify_export(&a.path, &s.audit_public_key()).unwrap();
            assert_eq!(r.problem, None);
        }
        assert_eq!(std::fs::read_dir(&arch).unwrap().count(), 3);
        assert_eq!(verify(&s, db).problem, None);
    });
}

/// Attack: whoever can write the database deletes a record of the remaining chain (the first
/// one after the anchor, or one in the middle).
#[test]
fn retention_refuses_a_record_deleted_from_the_remainder() {
    for victim in [17, 18] {
        crate::both_in_dirs(|db, dir| {
            let (s, _) = archived_store(dir, db);
            tamper(db, &format!("DELETE FROM audit WHERE seq = {victim}"));
            let p = verify(&s, db).problem.expect("detected");
            assert_eq!((p.check, p.seq), ("chain", Some(victim + 1)), "{p:?}");
        });
    }
}

/// Attack: deleting more records and moving the anchor over them (or removing the anchor).
#[test]
fn retention_refuses_an_edited_anchor() {
    crate::both_in_dirs(|db, dir| {
        let (s, a) = archived_store(dir, db);
        let next_hash: String = scalar(db, "SELECT hash FROM audit WHERE seq = 17", []);
        tamper(
            db,
            &format!(
                "DELETE FROM audit WHERE seq = 17; UPDATE audit_archives SET last_seq = 17, record_count = 17, last_hash = '{next_hash}'"
            ),
        );
        let p = verify(&s, db).problem.expect("detected");
        assert_eq!((p.check, p.seq), ("archive", Some(17)), "{p:?}");
        // Retention refuses to archive on top of the edited anchor.
        let again = s.archive_audit(&dir.join("archive"), 11 * DAY, 1_000, 11 * DAY, None, None);
        assert!(again.is_err(), "{again:?}");
        // The checkpoint signer checks only the records past its newest checkpoint, which
        // retention signed over the head it carried `settlement.sealing` to, past the
        // anchor: what it signs next does not hide the edit.
        s.append_audit("note", None, "test", &serde_json::json!({}), 11 * DAY)
            .unwrap();
        s.checkpoint_if_due(Due::NOW, 11 * DAY).unwrap();
        let p = verify(&s, db).problem.expect("still detected");
        assert_eq!((p.check, p.seq), ("archive", Some(17)), "{p:?}");
        // And removing the anchor leaves a chain that starts in the middle.
        tamper(db, "DELETE FROM audit_archives");
        let p = verify(&s, db).problem.expect("detected");
        assert_eq!(p.check, "chain", "{p:?}");
        let _ = a;
    });
}

/// Rewrites line `n` (from 0) of the export `path` with `f`.
fn edit_line(path: &Path, n: usize, f: impl Fn(&mut serde_json::Value)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut v: serde_json::Value = serde_json::from_str(&lines[n]).unwrap();
    f(&mut v);
    lines[n] = v.to_string();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Attack: an archived record is altered in the export (with its hash recomputed, and the
/// next record relinked, so the chain inside the file holds; the signed manifest does not).
#[test]
fn retention_refuses_an_edited_export_record() {
    crate::both_in_dirs(|db, dir| {
        let (s, a) = archived_store(dir, db);
        let key = s.audit_public_key();
        edit_line(&a.path, 3, |v| v["actor"] = "mallory".into());
        let r = verify_export(&a.path, &key).unwrap();
        assert!(r.problem.unwrap().contains("altered"));
        // Rehash the whole chain in the file from the edited record on.
        let text = std::fs::read_to_string(&a.path).unwrap();
        let mut prev = String::new();
        let mut out = String::new();
        for (i, line) in text.lines().enumerate() {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v.get("manifest").is_none() && i >= 3 {
                if i > 3 {
                    v["prev_hash"] = prev.clone().into();
                }
                let h = assent_store::audit::record_hash(
                    v["prev_hash"].as_str().unwrap(),
                    v["seq"].as_i64().unwrap(),
                    v["at"].as_i64().unwrap(),
                    v["kind"].as_str().unwrap(),
                    v["approval_id"].as_str(),
                    v["actor"].as_str().unwrap(),
                    v["data"].as_str().unwrap(),
                );
                v["hash"] = h.clone().into();
            }
            prev = v["hash"].as_str().unwrap_or_default().to_string();
            out.push_str(&v.to_string());
            out.push('\n');
        }
        std::fs::write(&a.path, out).unwrap();
        let r = verify_export(&a.path, &key).unwrap();
        let why = r.problem.expect("detected");
        assert!(why.contains("signed manifest does not match"), "{why}");
    });
}

/// Attack: an export re-signed (or made up) with another Ed25519 key, and the store's
/// anchor replaced by its manifest.
#[test]
fn retention_refuses_an_export_signed_by_another_key() {
    crate::both_in_dirs(|db, dir| {
        let (s, a) = archived_store(dir, db);
        let other = Store::open(&dir.join("other"), 60_000, wire()).unwrap();
        let r = verify_export(&a.path, &other.audit_public_key()).unwrap();
        assert!(r.problem.unwrap().contains("does not verify"));
        // A manifest signed by another key: edit the public key and signature in place.
        let forged = "ab".repeat(64);
        edit_line(&a.path, 16, |v| {
            v["manifest"]["public_key"] = hex::encode(other.audit_public_key().to_bytes()).into();
            v["manifest"]["signature"] = forged.clone().into();
        });
        let r = verify_export(&a.path, &s.audit_public_key()).unwrap();
        assert!(r.problem.unwrap().contains("does not verify"));
        tamper(
            db,
            &format!("UPDATE audit_archives SET signature = '{forged}'"),
        );
        let p = verify(&s, db).problem.expect("detected");
        assert_eq!(p.check, "archive", "{p:?}");
        // A retention run refuses to build on an anchor it cannot verify.
        let e = s
            .archive_audit(&dir.join("archive"), 20 * DAY, 1_000, 20 * DAY, None, None)
            .unwrap_err();
        assert!(e.to_string().contains("does not verify"), "{e}");
    });
}

/// Two runs racing (two replicas on one database, each with its own connection): exactly one
/// deletes the range and stores the anchor; the other deletes nothing and leaves no export.
#[test]
fn retention_runs_racing_delete_once() {
    both(|db| {
        let (dir, s, arch) = aged(db, 0..2);
        let replicas: Vec<Store> = (0..2).map(|_| open(dir.path(), db)).collect();
        let go = std::sync::Barrier::new(2);
        let done: Vec<Option<Archived>> = std::thread::scope(|t| {
            let runs: Vec<_> = replicas
                .iter()
                .map(|r| {
                    let (go, arch) = (&go, &arch);
                    t.spawn(move || {
                        go.wait();
                        r.archive_audit(arch, 5 * DAY, 1_000, 10 * DAY, None, None)
                            .unwrap()
                    })
                })
                .collect();
            runs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(done.iter().filter(|d| d.is_some()).count(), 1);
        assert_eq!(std::fs::read_dir(&arch).unwrap().count(), 1);
        let rep = verify(&s, db);
        assert_eq!((rep.problem, rep.archived_records), (None, 11));
    });
}

/// Attack: a record altered before its retention run: the run refuses to archive (and so
/// to delete the evidence of) a chain that does not verify, and leaves no export.
#[test]
fn retention_never_archives_an_altered_chain() {
    both(|db| {
        let (_dir, s, arch) = aged(db, 1..2);
        tamper(db, "UPDATE audit SET actor = 'mallory' WHERE seq = 2");
        let e = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap_err();
        assert!(e.to_string().contains("nothing archived"), "{e}");
        assert_eq!(std::fs::read_dir(&arch).unwrap().count(), 0);
        let left: i64 = scalar(db, "SELECT count(*) FROM audit", []);
        assert_eq!(left, 7);
    });
}

/// A store with two approvals approved on day 0, a checkpoint signed after them and written
/// to the checkpoint file `audit-checkpoints.jsonl` only (as the gateway does, and then no
/// stored one), a third approval and one record on day 10; with the archive directory, the
/// file's path and the checkpoint's record.
fn filed(db: &Database) -> (tempfile::TempDir, Store, PathBuf, PathBuf, i64) {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), db);
    approved(&s, 1, 5_000, false);
    approved(&s, 2, 5_000, false);
    let cp = s.checkpoint_if_due(Due::NOW, 3_000).unwrap().unwrap();
    let file = dir.path().join("audit-checkpoints.jsonl");
    assent_store::checkpoint::append_jsonl(&file, &cp).unwrap();
    tamper(db, "DELETE FROM audit_checkpoints");
    approved(&s, 3, 5_000, false);
    s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
        .unwrap();
    let arch = dir.path().join(ARCHIVE_DIR);
    (dir, s, arch, file, cp.seq)
}

/// Rewrites audit record 2's actor and recomputes every later hash as the gateway would: the
/// bare chain verifies again.
pub(super) fn rewrite_and_rechain(db: &Database) {
    let c = db.connect().unwrap();
    type Row = (i64, i64, String, Option<String>, String, String);
    let rows: Vec<Row> = c
        .conn()
        .query_map(
            "SELECT seq, at, kind, approval_id, actor, data FROM audit ORDER BY seq",
            [],
            tuple,
        )
        .unwrap();
    let mut prev = assent_store::audit::GENESIS.to_string();
    for (seq, at, kind, approval, mut actor, data) in rows {
        if seq == 2 {
            actor = "mallory".into();
        }
        let hash = assent_store::audit::record_hash(
            &prev,
            seq,
            at,
            &kind,
            approval.as_deref(),
            &actor,
            &data,
        );
        let sql = "UPDATE audit SET actor = ?1, prev_hash = ?2, hash = ?3 WHERE seq = ?4";
        c.conn()
            .execute(sql, assent_store::params![actor, prev, hash, seq])
            .unwrap();
        prev = hash;
    }
}

/// Attack: the database writer rewrites an old record, recomputes every later hash and
/// deletes the stored checkpoints, then waits for retention to sign the rewritten records
/// into an export and delete them, after which the checkpoint file's signature among them
/// matches nothing left to check. Retention checks the file's checkpoints among the records
/// it archives too (found by review: it checked only the stored ones) and archives only up to
/// the newest of them (found by review: with the file's checkpoints above the cut, records
/// below it went unchecked): the run is refused and nothing is deleted. Untouched, the same
/// store archives up to its file checkpoint; a configured file that is missing archives
/// nothing.
#[test]
fn retention_refuses_records_rewritten_under_a_checkpoint_in_the_file() {
    both(|db| {
        let (_dir, s, arch, file, at) = filed(db);
        let missing = file.with_extension("gone");
        let e = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, Some(&missing), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist; nothing archived"), "{e}");
        let a = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, Some(&file), None)
            .unwrap()
            .expect("records were due");
        // Due were the records of all three approvals; archived, those up to the checkpoint.
        assert_eq!((a.manifest.last_seq, a.more), (at, false), "{a:?}");
        let again = s.archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, Some(&file), None);
        assert!(
            again.unwrap().is_none(),
            "no checkpoint in the file beyond it"
        );
    });
    both(|db| {
        let (_dir, s, arch, file, _) = filed(db);
        rewrite_and_rechain(db);
        assert_eq!(
            verify(&s, db).problem,
            None,
            "the database alone looks whole"
        );
        let before: i64 = scalar(db, "SELECT count(*) FROM audit", []);
        let e = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, Some(&file), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the checkpoint in") && e.contains("rewritten"),
            "{e}"
        );
        assert!(e.contains("nothing archived"), "{e}");
        assert_eq!(std::fs::read_dir(&arch).unwrap().count(), 0);
        assert_eq!(scalar::<i64>(db, "SELECT count(*) FROM audit", []), before);
    });
}

/// Attack: the same rewrite while the gateway runs, then waiting for its next checkpoint:
/// checked only from the newest stored checkpoint (the attacker deleted the later ones), the
/// rewritten head was signed and appended to the file, and the file's newest checkpoint then
/// matched the rewritten chain. Checked also from the newest checkpoint the file has (found
/// by review), nothing is signed.
#[test]
fn a_rewritten_chain_is_not_signed_past_the_checkpoint_the_file_has() {
    both(|db| {
        let (_dir, s, _arch, file, _) = filed(db);
        let key = s.audit_public_key();
        let published = assent_store::checkpoint::newest_signed_in_jsonl(&file, &key)
            .unwrap()
            .expect("the file has one");
        rewrite_and_rechain(db);
        let e = s
            .checkpoint_if_due_after(Due::NOW, 11 * DAY, Some(&published))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no checkpoint signed"), "{e}");
        assert!(s.checkpoints().unwrap().is_empty(), "nothing stored");
        // From the stored checkpoints alone (none left) the rewritten head would be signed.
        assert!(s.checkpoint_if_due(Due::NOW, 11 * DAY).unwrap().is_some());
    });
}

/// Attack: once old records are archived, whoever can write the database plants rows whose
/// records "must have been archived": a grant dated day 0 that never ends (it would let calls
/// through), and a token dated day 0 that is neither used nor expired. Retention never
/// archives the records of anything live, so both are still refused.
#[test]
fn retention_does_not_excuse_a_planted_live_grant_or_token_as_archived() {
    crate::both_in_dirs(|db, dir| {
        let (s, _) = archived_store(dir, db);
        let aid: String = scalar(
            db,
            "SELECT min(id) FROM approvals WHERE status = 'approved'",
            [],
        );
        let discouraged = match db {
            Database::Sqlite { .. } => "0",
            Database::Postgres { .. } => "false",
        };
        tamper(
            db,
            &format!(
                "INSERT INTO grants (id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at)
                 VALUES ('g-planted', 'bot', NULL, 'pay', NULL, NULL, 'workspace', 'R1', {discouraged}, '{aid}', 'alice', 1000, NULL)"
            ),
        );
        let p = verify(&s, db).problem.expect("detected");
        assert!(
            p.reason
                .contains("grant g-planted has no grant.created record"),
            "{p:?}"
        );
        tamper(db, "DELETE FROM grants WHERE id = 'g-planted'");
        assert_eq!(verify(&s, db).problem, None);
        tamper(
            db,
            &format!(
                "UPDATE tokens SET used_at = NULL, expires_at = {} WHERE approval_id = '{aid}'",
                400 * DAY
            ),
        );
        let p = verify(&s, db).problem.expect("detected");
        assert!(p.reason.contains("has no token.minted record"), "{p:?}");
    });
}

/// Attack: a symbolic link planted where the archive directory goes, to have the gateway
/// write (and chmod) elsewhere: refused, nothing archived or deleted.
#[test]
fn retention_refuses_an_archive_directory_that_is_a_symlink() {
    both(|db| {
        let (_dir, s, arch) = aged(db, 1..2);
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &arch).unwrap();
        let e = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        assert_eq!(verify(&s, db).archived_records, 0);
    });
}

/// The retention sweep also prunes what the webhooks leave behind, which nothing pruned
/// before: card links expired by its run (used or not) and dead letters that failed before the
/// cut-off; a live link and a recent dead letter stay.
#[test]
fn retention_prunes_expired_card_links_and_old_dead_letters() {
    both(|db| {
        let (_dir, s, arch) = aged(db, 0..2);
        s.create_card_link(&"aa".repeat(32), "apr_gone", DAY)
            .unwrap();
        s.create_card_link(&"bb".repeat(32), "apr_live", 100 * DAY)
            .unwrap();
        for failed_at in [DAY, 9 * DAY] {
            tamper(
                db,
                &format!(
                    "INSERT INTO webhook_dead_letters (webhook, audit_seq, event, body, attempts, last_error, failed_at) VALUES ('ops', 1, 'approval.requested', '{{}}', 5, 'refused', {failed_at})"
                ),
            );
        }
        s.archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap();
        let links: i64 = scalar(db, "SELECT count(*) FROM card_links", []);
        let live: String = scalar(db, "SELECT approval_id FROM card_links", []);
        assert_eq!((links, live.as_str()), (1, "apr_live"));
        let dead: i64 = scalar(
            db,
            "SELECT count(*) FROM webhook_dead_letters WHERE failed_at = ?1",
            [9 * DAY],
        );
        let all: i64 = scalar(db, "SELECT count(*) FROM webhook_dead_letters", []);
        assert_eq!((dead, all), (1, 1));
    });
}

/// Attack (found by review): after retention archived the records of the settlements before
/// it, a database writer edits a later settlement (the reason its receipt gives) and clears its seals,
/// the settlement's and the terms': no live settlement holds a seal it could be placed after,
/// so only the audit chain's word that settlements are sealed (`settlement.sealing`, written
/// with the first settlement) tells that it was sealed. Retention carries that record
/// forward (once, naming its original place), and `audit verify` names the edited
/// settlement; settling again writes no second one.
#[test]
fn the_sealing_record_is_carried_by_retention_and_holds_later_settlements_to_their_seal() {
    crate::both_in_dirs(|db, dir| {
        let (s, a) = archived_store(dir, db);
        let kind = "kind = 'settlement.sealing'";
        let count = |db: &Database| -> i64 {
            scalar(db, &format!("SELECT count(*) FROM audit WHERE {kind}"), [])
        };
        assert_eq!(count(db), 1);
        let data: String = scalar(db, &format!("SELECT data FROM audit WHERE {kind}"), []);
        let data: serde_json::Value = serde_json::from_str(&data).unwrap();
        assert_eq!(data["since_migration"], 35, "{data}");
        let from = data["carried_from"].as_i64().expect("carried");
        assert!((1..=a.manifest.last_seq).contains(&from), "{data}");
        let held: String = scalar(db, "SELECT id FROM approvals WHERE status = 'pending'", []);
        s.decide(
            &held,
            &super::DecisionInput::approve(),
            "alice",
            &[],
            10 * DAY,
        )
        .unwrap();
        assert_eq!(count(db), 1, "one record, whatever the settlements since");
        let opts = VerifyOptions::default();
        let check = || assent_store::integrity::verify_database(db, dir, &opts).unwrap();
        assert_eq!(check().problem, None);
        tamper(
            db,
            &format!(
                "UPDATE decisions SET reason = 'forged' WHERE approval_id = '{held}';
                 UPDATE approvals SET settlement_seal = '', seal = '' WHERE id = '{held}'"
            ),
        );
        let p = check().problem.expect("reported");
        assert!(
            p.reason.contains(&held) && p.reason.contains("does not hold its seal"),
            "{p:?}"
        );
    });
}

/// Attack (found by review): an export's first record given `seq` i64::MAX, its hash
/// recomputed (that needs no key), overflowed the verifier's next expected `seq` (a panic in
/// a debug build). It is a finding, not a panic.
#[test]
fn an_export_record_at_the_largest_seq_is_a_finding_not_an_overflow() {
    crate::both_in_dirs(|db, dir| {
        let (s, a) = archived_store(dir, db);
        edit_line(&a.path, 0, |v| {
            v["seq"] = i64::MAX.into();
            let h = assent_store::audit::record_hash(
                v["prev_hash"].as_str().unwrap(),
                i64::MAX,
                v["at"].as_i64().unwrap(),
                v["kind"].as_str().unwrap(),
                v["approval_id"].as_str(),
                v["actor"].as_str().unwrap(),
                v["data"].as_str().unwrap(),
            );
            v["hash"] = h.into();
        });
        let r = verify_export(&a.path, &s.audit_public_key()).unwrap();
        assert!(r.problem.is_some(), "{r:?}");
    });
}
