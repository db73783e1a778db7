//! The audit chain's `settlement.sealing` record (`sealing_marker.rs`) against a database
//! writer: a row planted outside the live chain does not stand in for it. Both backends.

use super::pgkit::both;
use super::{open, pending};
use crate::retention::{scalar, tamper};
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

/// Attack (found by review): the `settlement.sealing` records were read wherever they
/// stood, also outside the live chain (`seq` 0 or less, or at or below the archive anchor),
/// where neither `audit verify` nor the checkpoint signer looks for them. Before the first
/// settlement a writer planted one there (at -5, and at the anchor), so that no settlement
/// wrote its own; after three settlements the writer deleted the planted row, cleared every
/// seal, the settlements' and the terms', and forged the last one's reason: no record was
/// left to hold them, and the edit passed `audit verify`. Now only the live chain counts:
/// the first settlement writes the record, and the edited settlement is named.
#[test]
fn a_sealing_record_planted_outside_the_live_chain_does_not_stand_in_for_it() {
    for planted in ["-5", "anchor"] {
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
            let a = s.archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None);
            let anchor = a.unwrap().expect("records were due").manifest.last_seq;
            let seq = if planted == "anchor" { anchor } else { -5 };
            tamper(
                db,
                &format!(
                    "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash)
                     VALUES ({seq}, 1000, 'settlement.sealing', NULL, 'system:settlement-seal',
                             '{{\"since_migration\":35}}', 'x', 'x')"
                ),
            );
            let ids: Vec<String> = (1..=3)
                .map(|i| settled(&s, i, 10 * DAY + i * 10_000))
                .collect();
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
            let rep = check(db, dir.path());
            let p = rep
                .problem
                .clone()
                .expect("the edited settlement is reported");
            assert!(
                rep.state_disagreements == 1
                    && p.reason.contains(&ids[2])
                    && p.reason.contains("does not hold its seal"),
                "{planted}: {rep:?}"
            );
        });
    }
}
