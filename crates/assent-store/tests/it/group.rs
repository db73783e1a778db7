//! Group commit (issue 13 §4), on both backends: concurrent writers share transactions, every
//! acknowledged write is committed (read back through another connection), a member's error
//! undoes its own writes only, an audited refusal is kept, a member that panics fails its
//! group without losing what others committed, and the audit chain verifies after a burst.

use crate::Refused;
use crate::pgkit::{both, both_connected};
use assent_store::db::{Database, DbError};
use assent_store::{DecideError, DecisionInput, Store};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// [`crate::open`] in `dir`.
fn open(dir: &tempfile::TempDir, db: &Database) -> Store {
    crate::open(dir.path(), db)
}

/// The `data` of every audit record of `kind`, read through a store of its own (a connection
/// that sees only committed writes).
fn committed(dir: &tempfile::TempDir, db: &Database, kind: &str) -> Vec<Value> {
    let other = open(dir, db);
    let report = other.verify_audit().unwrap();
    assert_eq!(report.broken, None, "the audit chain verifies");
    other
        .audit_tail(100_000)
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == kind)
        .map(|r| serde_json::from_str(&r.data).unwrap())
        .collect()
}

/// 48 threads append 8 records each at once: every one is committed exactly once, and the
/// chain they form verifies.
#[test]
fn concurrent_writers_all_find_their_writes_committed_and_chained() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(&dir, db);
        std::thread::scope(|scope| {
            for t in 0..48 {
                let s = &s;
                scope.spawn(move || {
                    for k in 0..8 {
                        s.append_audit("test.write", None, "t", &json!({"t": t, "k": k}), 1)
                            .unwrap();
                    }
                });
            }
        });
        let got: BTreeSet<(i64, i64)> = committed(&dir, db, "test.write")
            .iter()
            .map(|d| (d["t"].as_i64().unwrap(), d["k"].as_i64().unwrap()))
            .collect();
        let want: BTreeSet<(i64, i64)> =
            (0..48).flat_map(|t| (0..8).map(move |k| (t, k))).collect();
        assert_eq!(got, want);
        assert_eq!(s.audit_head_seq().unwrap(), 48 * 8);
    });
}

/// The kernel's members of one transaction: a member's error undoes its writes only (the
/// transaction stays usable, on Postgres too), an error that keeps its writes keeps them,
/// and one commit holds the rest.
#[test]
fn a_failing_member_undoes_only_its_own_writes_and_a_refusal_keeps_them() {
    both_connected(|db, c| {
        c.batch("CREATE TABLE member_test (v TEXT NOT NULL)")
            .unwrap();
        let insert = |v: &'static str| {
            move |tx: &assent_store::db::Tx<'_>| -> Result<(), DbError> {
                tx.execute("INSERT INTO member_test (v) VALUES (?1)", [v])?;
                Ok(())
            }
        };
        c.begin_write().unwrap();
        let (first, _) = c.member(false, insert("first"));
        first.unwrap();
        let (failed, changes) = c.member(true, |tx| -> Result<(), DbError> {
            tx.execute("INSERT INTO member_test (v) VALUES ('failed')", [])?;
            tx.changed(assent_store::db::Change::Events);
            // A statement that fails: on Postgres it aborts the transaction, which the
            // savepoint restores.
            tx.execute("INSERT INTO no_such_table (v) VALUES ('x')", [])?;
            Ok(())
        });
        assert!(failed.is_err());
        assert!(changes.is_empty(), "an undone member reports no change");
        let (refused, _) = c.member(true, |tx| -> Result<(), Refused> {
            tx.execute("INSERT INTO member_test (v) VALUES ('refused')", [])?;
            Err(Refused::Audited)
        });
        assert!(matches!(refused, Err(Refused::Audited)));
        let (last, _) = c.member(true, insert("last"));
        last.unwrap();
        c.commit_write(&[]).unwrap();
        let other = db.connect().unwrap();
        let mut rows: Vec<String> = other
            .conn()
            .query_map("SELECT v FROM member_test", [], |r| r.get(0))
            .unwrap();
        rows.sort();
        assert_eq!(rows, ["first", "last", "refused"]);
    });
}

/// A burst of concurrent decisions on one approval, with other writers: the first decision
/// wins, every late one is refused and its `decision.late` record kept (an audited refusal
/// commits), the other writers' records are all there and the chain verifies.
#[test]
fn audited_refusals_in_a_burst_are_kept_with_everyone_elses_writes() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(&dir, db);
        let (call, v) = crate::pay(5);
        let id = crate::hold(&s, "s1", &call, &v, 1_000, 60_000).id;
        let outcomes: Vec<Result<(), DecideError>> = std::thread::scope(|scope| {
            let deciders: Vec<_> = (0..16)
                .map(|_| {
                    let (s, id) = (&s, &id);
                    scope.spawn(move || {
                        s.decide(id, &DecisionInput::approve(), "alice", &[], 2_000)
                            .map(|_| ())
                    })
                })
                .collect();
            for t in 0..16 {
                let s = &s;
                scope.spawn(move || {
                    s.append_audit("test.write", None, "t", &json!({"t": t}), 2_000)
                        .unwrap()
                });
            }
            deciders.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Ok(()) | Err(DecideError::AlreadyDecided(_)))),
            "{outcomes:?}"
        );
        assert_eq!(committed(&dir, db, "decision.late").len(), 15);
        assert_eq!(committed(&dir, db, "test.write").len(), 16);
        assert_eq!(committed(&dir, db, "decision").len(), 1);
    });
}

/// A writer that panics inside its write while others write: exactly the writes that were
/// acknowledged are committed (a member of the panicking writer's group is told its write
/// failed, and its record is absent), and the store goes on writing.
#[test]
fn a_writer_panicking_in_a_group_leaves_exactly_the_acknowledged_writes() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(&dir, db);
        let acknowledged: BTreeSet<i64> = std::thread::scope(|scope| {
            let panicker = {
                let s = &s;
                scope.spawn(move || {
                    let (call, v) = crate::pay(5);
                    let c = assent_core::CanonicalCall::new(call.clone()).unwrap();
                    let ttl = |_: &assent_core::gatekeeper::Verdict| 60_000;
                    let p = assent_store::Proposal {
                        max_pending: 10,
                        ..crate::proposal(&c, "s", 1, &ttl)
                    };
                    let _ = s.propose(&p, |_| -> assent_core::gatekeeper::Verdict {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        panic!("the evaluator fails");
                    });
                    drop(v);
                })
            };
            let writers: Vec<_> = (0..32)
                .map(|t| {
                    let s = &s;
                    scope.spawn(move || {
                        s.append_audit("test.write", None, "t", &json!({"t": t}), 1)
                            .is_ok()
                            .then_some(t)
                    })
                })
                .collect();
            assert!(panicker.join().is_err(), "the panic reaches its caller");
            writers
                .into_iter()
                .filter_map(|h| h.join().unwrap())
                .collect()
        });
        let got: BTreeSet<i64> = committed(&dir, db, "test.write")
            .iter()
            .map(|d| d["t"].as_i64().unwrap())
            .collect();
        assert_eq!(got, acknowledged);
        s.append_audit("test.after", None, "t", &json!({}), 2)
            .unwrap();
        assert_eq!(committed(&dir, db, "test.after").len(), 1);
    });
}
