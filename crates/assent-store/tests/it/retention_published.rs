//! Retention held to the checkpoint the running gateway published (`archive_audit`'s
//! `published`): a chain rewritten since is never archived, on SQLite and on Postgres.

use super::pgkit::both;
use super::retention::{rewrite_and_rechain, scalar, tamper, verify};
use super::{approved, open};
use assent_store::checkpoint::Due;
use assent_store::db::Database;
use assent_store::retention::ARCHIVE_DIR;

const DAY: i64 = 86_400_000;

/// Leases webhook `hook` at 1 s and dead-letters the first audit record's delivery, failed
/// at 1 s: state the retention sweep prunes once it is older than the cut.
fn dead_letter(s: &assent_store::Store) {
    let leased = s.lease_webhook("hook", "me", 1_000, 60_000).unwrap();
    assert!(leased.is_some());
    let letter = assent_store::outbox::DeadLetter {
        id: 0,
        webhook: "hook".into(),
        audit_seq: 1,
        event: "approval.requested".into(),
        body: "{}".into(),
        attempts: 6,
        last_error: "refused".into(),
        failed_at: 1_000,
    };
    assert!(s.dead_letter(&letter, "me").unwrap());
}

/// The number of webhook dead letters stored.
fn letters(db: &Database) -> i64 {
    scalar(db, "SELECT count(*) FROM webhook_dead_letters", [])
}

/// Attack (found by review): with no checkpoint file, a database writer rewrites an old record
/// that is due for retention, recomputes every later hash and deletes the stored
/// checkpoints. The gateway's checkpoint timer refuses to sign that chain, since it no longer
/// extends the checkpoint the gateway published, but its retention checked the records only
/// against the stored checkpoints (gone): it signed the forged records into an export, and a
/// checkpoint at the forged head, making the rewrite permanent signed evidence. Given the
/// checkpoint the gateway published, the run is refused and nothing is archived or deleted
/// (not even the dead letters the sweep bounds); an untouched chain is archived as before.
#[test]
fn a_chain_rewritten_since_the_published_checkpoint_is_not_archived() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), db);
        approved(&s, 1, 5_000, false);
        approved(&s, 2, 5_000, false);
        let published = s.checkpoint_if_due(Due::NOW, 3_000).unwrap().unwrap();
        approved(&s, 3, 5_000, false);
        s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
            .unwrap();
        // A webhook's dead letter as old as the records due: a sound run would prune it.
        dead_letter(&s);
        let arch = dir.path().join(ARCHIVE_DIR);
        rewrite_and_rechain(db);
        tamper(db, "DELETE FROM audit_checkpoints");
        assert_eq!(
            verify(&s, db).problem,
            None,
            "the database alone looks whole"
        );
        let before: i64 = scalar(db, "SELECT count(*) FROM audit", []);
        let e = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, Some(&published))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("audit chain altered since the checkpoint this gateway published"),
            "{e}"
        );
        assert!(e.contains("nothing archived"), "{e}");
        assert!(!arch.exists() || std::fs::read_dir(&arch).unwrap().count() == 0);
        assert_eq!(scalar::<i64>(db, "SELECT count(*) FROM audit", []), before);
        let anchors: i64 = scalar(db, "SELECT count(*) FROM audit_archives", []);
        assert_eq!(anchors, 0);
        // Found by review: the refused run had pruned the state the sweep bounds (dead
        // letters, AAEP events, session state) before it checked the chain, and logged
        // "nothing deleted"; what it held may be what an investigation needs.
        assert_eq!(letters(db), 1, "a refused run deleted a dead letter");
    });
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), db);
        approved(&s, 1, 5_000, false);
        let published = s.checkpoint_if_due(Due::NOW, 3_000).unwrap().unwrap();
        approved(&s, 2, 5_000, false);
        s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
            .unwrap();
        let arch = dir.path().join(ARCHIVE_DIR);
        let a = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, Some(&published))
            .unwrap()
            .expect("records were due");
        assert!(a.manifest.record_count > 0, "{a:?}");
        assert_eq!(verify(&s, db).problem, None);
    });
}

/// Found by review of the fix above: the sweep still pruned before the checks that walk the
/// chain — with no published checkpoint (the CLI's `assent audit archive`, a restarted
/// gateway), a record rewritten under a stored checkpoint was refused only once the export
/// walked it, after the dead letters were gone. A refused run prunes nothing; a run that
/// failed otherwise (an I/O error) still prunes.
#[test]
fn a_run_refused_for_a_chain_rewritten_under_a_stored_checkpoint_prunes_nothing() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), db);
        approved(&s, 1, 5_000, false);
        approved(&s, 2, 5_000, false);
        s.checkpoint_if_due(Due::NOW, 3_000).unwrap().unwrap();
        s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
            .unwrap();
        dead_letter(&s);
        rewrite_and_rechain(db);
        let arch = dir.path().join(ARCHIVE_DIR);
        let e = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nothing archived"), "{e}");
        assert_eq!(letters(db), 1, "a refused run deleted a dead letter");
    });
    // Untampered, the same run prunes it.
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), db);
        approved(&s, 1, 5_000, false);
        dead_letter(&s);
        let arch = dir.path().join(ARCHIVE_DIR);
        s.archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap();
        assert_eq!(
            letters(db),
            0,
            "a sound run kept a dead letter past the cut"
        );
    });
    // A run that fails for another reason (its archive directory cannot be made) still prunes:
    // the tables stay bounded while an operator mends it.
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), db);
        approved(&s, 1, 5_000, false);
        dead_letter(&s);
        std::fs::write(dir.path().join("blocker"), "a file").unwrap();
        let arch = dir.path().join("blocker/archive");
        let e = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap_err();
        assert!(matches!(e, assent_store::StoreError::Io { .. }), "{e:?}");
        assert_eq!(
            letters(db),
            0,
            "a run failing on its directory kept a dead letter"
        );
    });
}
