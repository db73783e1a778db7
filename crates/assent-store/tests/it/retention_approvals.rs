//! Audit retention and the approvals whose records it archived (migration 0061): each run
//! records them with their seals and signs the list, and `audit verify` excuses the missing
//! records of those alone, held to the seals they had. Both backends.

use super::retention::{scalar, tamper, verify};
use assent_store::checkpoint::Due;
use assent_store::db::Database;
use assent_store::integrity::{VerifyOptions, verify_database};
use std::path::Path;

const DAY: i64 = 86_400_000;

/// A store in `dir` with three approvals approved on day 0 (a checkpoint after them when
/// `signed`) and one record on day 10; the three approvals' ids.
fn three_approved(dir: &Path, db: &Database, signed: bool) -> (assent_store::Store, Vec<String>) {
    let s = super::open(dir, db);
    let ids: Vec<String> = (0..3)
        .map(|i| super::approved(&s, i, 5_000, false).0)
        .collect();
    if signed {
        s.checkpoint_if_due(Due::NOW, 3_000).unwrap().unwrap();
    }
    s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
        .unwrap();
    (s, ids)
}

/// The run on day 10 keeping 5 days is refused naming approval `aid` as not holding its
/// seal, and deletes nothing.
fn refused_naming(s: &assent_store::Store, db: &Database, dir: &Path, aid: &str) {
    let before: i64 = scalar(db, "SELECT count(*) FROM audit", []);
    let e = s
        .archive_audit(&dir.join("archive"), 5 * DAY, 1_000, 10 * DAY, None, None)
        .expect_err("refused");
    let e = e.to_string();
    assert!(
        e.contains(aid) && e.contains("does not hold its seal"),
        "{e}"
    );
    assert_eq!(scalar::<i64>(db, "SELECT count(*) FROM audit", []), before);
}

/// [`three_approved`] (signed), their records archived by a run on day 10 keeping 5 days.
fn archived(dir: &Path, db: &Database) -> (assent_store::Store, Vec<String>) {
    let (s, ids) = three_approved(dir, db, true);
    let a = s
        .archive_audit(&dir.join("archive"), 5 * DAY, 1_000, 10 * DAY, None, None)
        .unwrap()
        .expect("records were due");
    assert!(a.manifest.approvals_sha256.is_some(), "{:?}", a.manifest);
    (s, ids)
}

/// The first problem of the full verification under the gateway's own keys (seals checked).
fn full(db: &Database, dir: &Path) -> Option<String> {
    let opts = VerifyOptions::default();
    let rep = verify_database(db, dir, &opts).unwrap();
    rep.problem.map(|p| p.reason)
}

/// Attack (found by review): once retention archived an approval's records, a database writer
/// edits it — renames the approving operator, clears its settlement seal and breaks its terms'
/// seal so that it passes for one settled before the seals existed — or plants a settled
/// approval with times before the cut-off. `audit verify` excused both as archived. Now each
/// run records the approvals it archived with their seals (signed in its manifest): the edit
/// is caught with the gateway's key and without it, the planted one has no record, and
/// downgrading the run's list to "unsealed" breaks its signed digest.
#[test]
fn an_approval_edited_or_planted_after_retention_archived_its_records_is_caught() {
    crate::both_in_dirs(|db, dir| {
        let (s, ids) = archived(dir, db);
        let recorded: i64 = scalar(
            db,
            "SELECT count(*) FROM archived_approvals WHERE seals <> ''",
            [],
        );
        assert_eq!(recorded, 3);
        assert_eq!(verify(&s, db).problem, None);
        assert_eq!(full(db, dir), None);
        let aid = &ids[1];
        let seals: (String, String) = (
            scalar(db, "SELECT seal FROM approvals WHERE id = ?1", [aid]),
            scalar(
                db,
                "SELECT settlement_seal FROM approvals WHERE id = ?1",
                [aid],
            ),
        );
        // The approver renamed, the seals cleared: caught with and without the key.
        tamper(
            db,
            &format!(
                "UPDATE decisions SET actor = 'mallory' WHERE approval_id = '{aid}';
             UPDATE approvals SET settlement_seal = '', seal = '' WHERE id = '{aid}'"
            ),
        );
        let p = verify(&s, db).problem.expect("caught without the key");
        assert!(
            p.reason.contains(aid.as_str()) && p.reason.contains("seals it had"),
            "{p:?}"
        );
        let p = full(db, dir).expect("caught with the key");
        assert!(p.contains(aid.as_str()), "{p}");
        // The seals put back, the rename kept: the key finds it.
        tamper(
            db,
            &format!(
                "UPDATE approvals SET seal = '{}', settlement_seal = '{}' WHERE id = '{aid}'",
                seals.0, seals.1
            ),
        );
        let p = full(db, dir).expect("caught with the key");
        assert!(
            p.contains(aid.as_str()) && p.contains("does not hold its seal"),
            "{p}"
        );
        tamper(
            db,
            &format!("UPDATE decisions SET actor = 'alice' WHERE approval_id = '{aid}'"),
        );
        assert_eq!(full(db, dir), None);
        // A settled approval planted with the times of an archived one.
        let planted = "6f1c0000-0000-4000-8000-000000000009";
        let copy = match db {
            Database::Sqlite { .. } => format!(
                "CREATE TEMP TABLE t AS SELECT * FROM approvals WHERE id = '{aid}';
                 UPDATE t SET id = '{planted}', reply_token = 'p' || reply_token;
                 INSERT INTO approvals SELECT * FROM t;"
            ),
            Database::Postgres { .. } => format!(
                "CREATE TEMP TABLE t AS SELECT * FROM approvals WHERE id = '{aid}';
                 UPDATE t SET id = '{planted}', reply_token = 'p' || reply_token, rowid = rowid + 1000;
                 INSERT INTO approvals OVERRIDING SYSTEM VALUE SELECT * FROM t;"
            ),
        };
        tamper(db, &copy);
        let p = verify(&s, db)
            .problem
            .expect("the planted approval is caught");
        assert!(
            p.reason.contains(planted) && p.reason.contains("no approval.requested record"),
            "{p:?}"
        );
        tamper(db, &format!("DELETE FROM approvals WHERE id = '{planted}'"));
        assert_eq!(verify(&s, db).problem, None);
        // The run's list downgraded, so that the approval would pass for one unsealed then.
        tamper(
            db,
            &format!("UPDATE archived_approvals SET seals = '' WHERE approval_id = '{aid}'"),
        );
        let p = verify(&s, db)
            .problem
            .expect("the list no longer fits its signature");
        assert_eq!(p.check, "archive", "{p:?}");
        assert!(p.reason.contains("signed manifest"), "{p:?}");
    });
}

/// Attack (found by review): the same edit made before the approval's records age out — its
/// approver renamed, its seals cleared so that it passes for a settlement from before the
/// seals — had the next run record it as unsealed, and `audit verify` excused it from then on.
/// The run now refuses: settled after the chain's word that settlements are sealed, it must
/// hold its seal; nothing is archived.
#[test]
fn a_run_refuses_to_archive_an_approval_whose_seals_were_cleared() {
    crate::both_in_dirs(|db, dir| {
        let (s, ids) = three_approved(dir, db, false);
        let aid = &ids[2];
        tamper(
            db,
            &format!(
                "UPDATE decisions SET actor = 'mallory' WHERE approval_id = '{aid}';
             UPDATE approvals SET settlement_seal = '', seal = '' WHERE id = '{aid}'"
            ),
        );
        refused_naming(&s, db, dir, aid);
        assert!(full(db, dir).is_some_and(|p| p.contains(aid.as_str())));
    });
}

/// A run naming more approvals than one judging chunk (256) and one `INSERT` (200) holds the
/// store's connection per chunk and stores them in several statements: every approval is
/// recorded once, with its seals, and the chain and the approvals still verify.
#[test]
fn a_run_naming_many_approvals_records_each_once() {
    crate::both_in_dirs(|db, dir| {
        let s = super::open(dir, db);
        for i in 0..300 {
            super::approved(&s, i, 5_000, false);
        }
        s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
            .unwrap();
        let a = s
            .archive_audit(&dir.join("archive"), 5 * DAY, 100_000, 10 * DAY, None, None)
            .unwrap()
            .expect("records were due");
        assert!(!a.more, "{:?}", a.manifest);
        let sql = "SELECT count(DISTINCT approval_id) FROM archived_approvals WHERE seals <> ''";
        assert_eq!(scalar::<i64>(db, sql, []), 300);
        assert_eq!(verify(&s, db).problem, None);
        assert_eq!(full(db, dir), None);
    });
}

/// Attack (found by review; SQLite only: PostgreSQL's TEXT column cannot hold a blob): once
/// retention recorded an approval, a database writer stores a blob that is not UTF-8 in its
/// settlement seal. Read as text, it failed `audit verify` (and every later retention run
/// whose records named the approval) with a database error that named nothing; now verify
/// names the approval and the seals it had, and with the seal put back passes again.
#[test]
fn a_seal_turned_into_a_blob_is_named_not_a_database_error() {
    crate::both_in_dirs(|db, dir| {
        if matches!(db, Database::Postgres { .. }) {
            return;
        }
        let (s, ids) = archived(dir, db);
        let aid = &ids[1];
        let sql = "SELECT settlement_seal FROM approvals WHERE id = ?1";
        let kept: String = scalar(db, sql, [aid]);
        tamper(
            db,
            &format!("UPDATE approvals SET settlement_seal = x'00ff' WHERE id = '{aid}'"),
        );
        let p = verify(&s, db).problem.expect("the blob is caught");
        assert!(
            p.reason.contains(aid.as_str()) && p.reason.contains("seals it had"),
            "{p:?}"
        );
        assert!(full(db, dir).is_some_and(|p| p.contains(aid.as_str())));
        tamper(
            db,
            &format!("UPDATE approvals SET settlement_seal = '{kept}' WHERE id = '{aid}'"),
        );
        assert_eq!(verify(&s, db).problem, None);
    });
}

/// Attack (found by review; SQLite only: PostgreSQL's TEXT column cannot hold a blob): before
/// retention first records an approval, a database writer stores a blob that is not UTF-8 in
/// its settlement seal. Read as text to ask whether it carries a seal, it stopped every
/// retention run with a database error that named no approval; now the run is refused naming
/// the approval, nothing is archived, and with the seal put back the run goes through.
#[test]
fn a_seal_turned_into_a_blob_before_retention_is_named_and_nothing_is_archived() {
    crate::both_in_dirs(|db, dir| {
        if matches!(db, Database::Postgres { .. }) {
            return;
        }
        let (s, ids) = three_approved(dir, db, false);
        let aid = &ids[1];
        let sql = "SELECT settlement_seal FROM approvals WHERE id = ?1";
        let kept: String = scalar(db, sql, [aid]);
        tamper(
            db,
            &format!("UPDATE approvals SET settlement_seal = x'00ff' WHERE id = '{aid}'"),
        );
        refused_naming(&s, db, dir, aid);
        tamper(
            db,
            &format!("UPDATE approvals SET settlement_seal = '{kept}' WHERE id = '{aid}'"),
        );
        s.archive_audit(&dir.join("archive"), 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap()
            .expect("records were due");
        assert_eq!(verify(&s, db).problem, None);
    });
}
