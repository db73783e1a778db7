//! The audit chain's `settlement.sealing` record (`sealing_marker.rs`) against a database
//! writer: a row planted outside the live chain does not stand in for it, the copy
//! retention carries forward cannot be dropped from the head unseen, a settlement between
//! the archive anchor and that copy is held to its seal, and the anchor's signed word
//! (`sealing_since`) holds the settlements when no record is left. Both backends.

use super::pgkit::both;
use super::{open, pending};
use crate::retention::{scalar, tamper, verify};
use assent_store::DecisionInput;
use assent_store::Store;
use assent_store::db::Database;
use assent_store::integrity::{Report, VerifyOptions, verify_database};
use std::path::Path;

const DAY: i64 = 86_400_000;

/// An approval held at `now` (Unix ms) and approved by `alice` a second later; its id.
fn settled(s: &Store, amount: i64, now: i64) -> String {
    let (id, _) = pending(s, amount, now, DAY, false);
    s.decide(&id, &DecisionInput::approve(), "alice", &[], now + 1_000)
        .unwrap();
    id
}

/// `audit verify` of the database `db` (data directory `dir`), as the CLI runs it.
fn check(db: &Database, dir: &Path) -> Report {
    verify_database(db, dir, &VerifyOptions::default()).unwrap()
}

/// The settlement `id`'s recorded reason forged and its seals cleared, the settlement's and
/// the terms', behind the store's back.
fn forge_and_clear(db: &Database, id: &str) {
    tamper(
        db,
        &format!(
            "UPDATE decisions SET reason = 'forged' WHERE approval_id = '{id}';
             UPDATE approvals SET settlement_seal = '', seal = '' WHERE id = '{id}'"
        ),
    );
}

/// Asserts that `audit verify` of `db` (data directory `dir`) names settlement `id`, and it
/// alone, as not holding its seal (`case` says which run).
fn names_alone(db: &Database, dir: &Path, id: &str, case: &str) {
    let rep = check(db, dir);
    let p = rep
        .problem
        .clone()
        .expect("the edited settlement is reported");
    assert!(
        rep.state_disagreements == 1
            && p.reason.contains(id)
            && p.reason.contains("does not hold its seal"),
        "{case}: {rep:?}"
    );
}

/// The `carried_from` of retention's copy of `settlement.sealing` (the original's place).
fn copy_names(db: &Database) -> i64 {
    let sql = "SELECT data FROM audit WHERE kind = 'settlement.sealing'";
    let data: serde_json::Value = serde_json::from_str(&scalar::<String>(db, sql, [])).unwrap();
    data["carried_from"].as_i64().expect("carried")
}

/// Attack (found by review): the `settlement.sealing` records were read wherever they
/// stood, also outside the live chain (`seq` 0 or less, or at or below the archive anchor),
/// where neither `audit verify` nor the checkpoint signer looks for them. Before the first
/// settlement a writer planted one there (at -5, and at the anchor), so that no settlement
/// wrote its own; after three settlements the writer deleted the planted row, cleared every
/// seal, the settlements' and the terms', and forged the last one's reason: no record was
/// left to hold them, and the edit passed `audit verify`. Now only the live chain counts:
/// the first settlement writes the record, and the edited settlement is named.
///
/// Attack (found by review, `lowered`): the live chain is told by the archive anchor, which
/// a writer can move. The writer deleted the `audit_archives` row (the anchor fell to 0) and
/// planted a record linked to the genesis hash at `seq` 1, so that no settlement wrote its
/// own; then put the row back and deleted the plant. Now a record spares a settlement only
/// when its HMAC, under a key the database never holds, holds at its place.
#[test]
fn a_sealing_record_planted_outside_the_live_chain_does_not_stand_in_for_it() {
    for planted in ["-5", "anchor", "lowered"] {
        both(|db| {
            let dir = tempfile::tempdir().unwrap();
            let s = open(dir.path(), db);
            // Notes on day 0, archived on day 10: the live chain starts past an anchor.
            for at in [1_000, 2_000] {
                s.append_audit("note", None, "test", &serde_json::json!({}), at)
                    .unwrap();
            }
            s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
                .unwrap();
            let arch = dir.path().join("archive");
            let a = s.archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None);
            let anchor = a.unwrap().expect("records were due").manifest.last_seq;
            let seq = match planted {
                "anchor" => anchor,
                "lowered" => 1,
                _ => -5,
            };
            if planted == "lowered" {
                let saved = "CREATE TABLE saved AS SELECT * FROM audit_archives";
                tamper(db, &format!("{saved}; DELETE FROM audit_archives"));
            }
            let genesis = assent_store::audit::GENESIS;
            tamper(
                db,
                &format!(
                    "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash)
                     VALUES ({seq}, 1000, 'settlement.sealing', NULL, 'system:settlement-seal',
                             '{{\"since_migration\":35}}', '{genesis}', 'x')"
                ),
            );
            let ids: Vec<String> = (1..=3)
                .map(|i| settled(&s, i, 10 * DAY + i * 10_000))
                .collect();
            if planted == "lowered" {
                let back = "INSERT INTO audit_archives SELECT * FROM saved";
                tamper(db, &format!("{back}; DROP TABLE saved"));
            }
            let live = format!("kind = 'settlement.sealing' AND seq > {anchor}");
            let n: i64 = scalar(db, &format!("SELECT count(*) FROM audit WHERE {live}"), []);
            assert_eq!(n, 1, "{planted}: the first settlement wrote the record");
            tamper(db, &format!("DELETE FROM audit WHERE seq = {seq}"));
            assert_eq!(check(db, dir.path()).problem, None, "{planted}");
            let seals = |id: &str| -> (String, String) {
                let sql = |c: &str| format!("SELECT {c} FROM approvals WHERE id = '{id}'");
                (
                    scalar(db, &sql("settlement_seal"), []),
                    scalar(db, &sql("seal"), []),
                )
            };
            let kept: Vec<_> = ids[..2].iter().map(|id| (id, seals(id))).collect();
            tamper(db, "UPDATE approvals SET settlement_seal = '', seal = ''");
            forge_and_clear(db, &ids[2]);
            let rep = check(db, dir.path());
            assert_eq!(
                rep.state_disagreements, 3,
                "{planted}: every one cleared: {rep:?}"
            );
            for (id, (settlement_seal, seal)) in kept {
                tamper(
                    db,
                    &format!(
                        "UPDATE approvals SET settlement_seal = '{settlement_seal}', seal = '{seal}' WHERE id = '{id}'"
                    ),
                );
            }
            names_alone(db, dir.path(), &ids[2], planted);
        });
    }
}

/// Three settlements on day 0 (the first writes `settlement.sealing`), an approval held
/// then for 100 days (its records, and all after them, stay live), a note and one more
/// settlement on day 10, then a retention run on day 11 keeping 5 days: the copy of
/// `settlement.sealing` it carries is the chain's head. Returns the store, the day-10
/// settlement (live, between the archive anchor and that copy) and the anchor's `seq`.
fn carried(dir: &Path, db: &Database) -> (Store, String, i64) {
    let s = open(dir, db);
    for i in 1..=3 {
        settled(&s, i, i * 10_000);
    }
    pending(&s, 9, 50_000, 100 * DAY, false);
    s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
        .unwrap();
    let live = settled(&s, 4, 10 * DAY + 1_000);
    let a = s.archive_audit(&dir.join("archive"), 5 * DAY, 1_000, 11 * DAY, None, None);
    let anchor = a.unwrap().expect("records were due").manifest.last_seq;
    let head = "SELECT kind FROM audit ORDER BY seq DESC LIMIT 1";
    assert_eq!(scalar::<String>(db, head, []), "settlement.sealing");
    assert_eq!(verify(&s, db).problem, None);
    (s, live, anchor)
}

/// Attack (found by review): the copy of `settlement.sealing` retention carries forward
/// stood at the chain's head with no checkpoint signed over it (a carried take-over has
/// one): a writer who deleted that one row left a chain that still verified and no word
/// that settlements are sealed, so the live settlements were no longer held to their seals
/// (and the next settlement wrote a fresh record after them). Now retention signs a
/// checkpoint over the head it carried the record to, in the same transaction: the copy
/// deleted, `audit verify` reports the signed checkpoint past the chain's end.
#[test]
fn the_carried_sealing_record_cannot_be_dropped_from_the_head_unseen() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let (s, _, _) = carried(dir.path(), db);
        let head: i64 = scalar(db, "SELECT max(seq) FROM audit", []);
        let signed: i64 = scalar(db, "SELECT max(seq) FROM audit_checkpoints", []);
        assert_eq!(signed, head, "a checkpoint is signed over the carried copy");
        tamper(db, &format!("DELETE FROM audit WHERE seq = {head}"));
        let p = verify(&s, db)
            .problem
            .expect("the dropped copy is reported");
        assert!(p.reason.contains(&head.to_string()), "{p:?}");
    });
}

/// Attack (found by review, untested until now): a settlement that stays live past a
/// retention run but precedes the copy of `settlement.sealing` it carries is held to its
/// seal only through the copy's `carried_from` (the original record's place). Its reason
/// forged and its seals cleared, `audit verify` names it.
#[test]
fn a_live_settlement_before_the_carried_sealing_record_is_held_to_its_seal() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let (_s, live, anchor) = carried(dir.path(), db);
        let from = copy_names(db);
        assert!((1..=anchor).contains(&from), "{from}");
        let settled_at: i64 = scalar(
            db,
            "SELECT min(seq) FROM audit WHERE approval_id = ?1 AND kind = 'decision'",
            [&live],
        );
        let copy: i64 = scalar(db, "SELECT max(seq) FROM audit", []);
        assert!(anchor < settled_at && settled_at < copy, "{settled_at}");
        assert_eq!(check(db, dir.path()).problem, None);
        forge_and_clear(db, &live);
        names_alone(db, dir.path(), &live, "live");
    });
}

/// Retention's copy of `settlement.sealing` (the chain's head) and the checkpoint over it,
/// deleted behind the store's back.
fn drop_copy(db: &Database) {
    let head: i64 = scalar(db, "SELECT max(seq) FROM audit", []);
    tamper(
        db,
        &format!(
            "DELETE FROM audit WHERE seq = {head}; DELETE FROM audit_checkpoints WHERE seq = {head}"
        ),
    );
}

/// Attack (found by review, left in SECURITY.md until now): a writer deleted retention's copy
/// of `settlement.sealing` together with the checkpoint signed over it, before the gateway
/// published that checkpoint: the chain still verified and held no record, so a live
/// settlement before the copy's place, its reason forged and its seals cleared, passed.
/// Now retention's signed manifest keeps the word (`sealing_since`), and `audit verify`
/// holds the settlement by it.
#[test]
fn the_sealing_word_outlives_the_carried_copy_and_its_checkpoint() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let (_s, live, _) = carried(dir.path(), db);
        let since: i64 = scalar(db, "SELECT sealing_since FROM audit_archives", []);
        assert_eq!(since, copy_names(db), "the anchor signs the word");
        drop_copy(db);
        let deleted = check(db, dir.path()).problem;
        assert_eq!(deleted, None, "the deletion itself shows nowhere");
        forge_and_clear(db, &live);
        names_alone(db, dir.path(), &live, "copy deleted");
        // The word is signed with the anchor: cleared, the anchor is reported.
        tamper(db, "UPDATE audit_archives SET sealing_since = NULL");
        let p = check(db, dir.path()).problem.expect("reported");
        assert_eq!(p.check, "archive", "{p:?}");
    });
}

/// Attack (found by review): the seal over a `settlement.sealing` record's own place stops a
/// planted record, not the gateway's own put back whole. With retention's copy and its
/// checkpoint deleted, a writer lowered the anchor (deleted the `audit_archives` row), put the
/// archived original back where it stood, from the export, so that no settlement wrote a
/// record; then restored the anchor and deleted the original again: no record was left, and
/// the settlements since, edited and every seal cleared, passed `audit verify`. The anchor's
/// signed word holds them.
#[test]
fn a_genuine_sealing_record_put_back_below_a_lowered_anchor_does_not_free_later_settlements() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let (s, _, anchor) = carried(dir.path(), db);
        let export = std::fs::read_dir(dir.path().join("archive")).unwrap();
        let export = export.map(|e| e.unwrap().path()).next().unwrap();
        let text = std::fs::read_to_string(export).unwrap();
        let original: serde_json::Value = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["kind"] == "settlement.sealing")
            .expect("the original is in the export");
        let at = original["seq"].as_i64().unwrap();
        assert!(at <= anchor);
        drop_copy(db);
        let saved = "CREATE TABLE saved AS SELECT * FROM audit_archives";
        tamper(db, &format!("{saved}; DELETE FROM audit_archives"));
        let col = |k: &str| original[k].as_str().unwrap().to_string();
        tamper(
            db,
            &format!(
                "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash)
                 VALUES ({at}, {}, 'settlement.sealing', NULL, '{}', '{}', '{}', '{}')",
                original["at"],
                col("actor"),
                col("data"),
                col("prev_hash"),
                col("hash")
            ),
        );
        let ids: Vec<String> = (1..=2)
            .map(|i| settled(&s, 10 + i, 12 * DAY + i * 10_000))
            .collect();
        let back = "INSERT INTO audit_archives SELECT * FROM saved";
        tamper(
            db,
            &format!("{back}; DROP TABLE saved; DELETE FROM audit WHERE seq = {at}"),
        );
        let n: i64 = scalar(
            db,
            &format!(
                "SELECT count(*) FROM audit WHERE kind = 'settlement.sealing' AND seq > {anchor}"
            ),
            [],
        );
        assert_eq!(n, 0, "the put-back original stood in for a new record");
        assert_eq!(check(db, dir.path()).problem, None);
        forge_and_clear(db, &ids[1]);
        tamper(db, "UPDATE approvals SET settlement_seal = '', seal = ''");
        let rep = check(db, dir.path());
        // The day-10 settlement and both since, every seal cleared: each is named; and so are
        // the three approvals whose records retention archived, which no longer have the
        // seals they had then.
        let p = rep
            .problem
            .clone()
            .expect("the cleared settlements are reported");
        assert!(
            rep.state_disagreements == 6 && p.reason.contains("seals it had"),
            "{rep:?}"
        );
    });
}
