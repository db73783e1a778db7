//! Batches (`Store::batch`, issue 13 §4), on both backends: the server's store executor runs every queued
//! request in one batch and answers them only after its one commit. What must hold: a batch's
//! calls read what it wrote, nobody else does before its commit (the attack: an answer given
//! from a write that is then lost), another thread's write joins it and returns only once it
//! is committed, and a write that panics inside a batch undoes every write of the batch and
//! says so, so no answer computed in it is given.

use crate::proposal;
use assent_core::canonical::CanonicalCall;
use assent_core::{ToolCall, Verdict};
use assent_store::Store;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The `test.batch` audit records (newest first), read through a store of its own (a connection that sees
/// only committed writes), after checking that the chain verifies.
fn committed(dir: &std::path::Path, db: &assent_store::db::Database) -> Vec<String> {
    let other = crate::open(dir, db);
    assert_eq!(other.verify_audit().unwrap().broken, None);
    other
        .audit_tail(1_000)
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == "test.batch")
        .map(|r| r.data)
        .collect()
}

fn append(s: &Store, n: i64) {
    s.append_audit("test.batch", None, "t", &json!({"n": n}), 1)
        .unwrap();
}

/// Inside a batch its own calls read its writes; another connection and another thread of
/// the same store see none of them until the batch ends: the other thread's read waits for
/// the commit. Then everything is committed once, in order.
#[test]
fn a_batchs_writes_are_read_by_its_own_calls_and_by_nobody_else_before_its_commit() {
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        assert!(s.runs_batches());
        let read_done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let ((), outcome) = s.batch(|| {
                append(&s, 1);
                append(&s, 2);
                let own: Vec<String> = s
                    .audit_tail(10)
                    .unwrap()
                    .into_iter()
                    .map(|r| r.kind)
                    .collect();
                assert_eq!(
                    own.iter().filter(|k| *k == "test.batch").count(),
                    2,
                    "read by its own calls"
                );
                assert!(committed(dir, db).is_empty(), "nothing committed yet");
                scope.spawn(|| {
                    let seen = s.audit_tail(10).unwrap();
                    read_done.store(true, Ordering::SeqCst);
                    assert_eq!(seen.iter().filter(|r| r.kind == "test.batch").count(), 2);
                });
                std::thread::sleep(Duration::from_millis(200));
                assert!(
                    !read_done.load(Ordering::SeqCst),
                    "another thread's read waits for the batch's commit"
                );
            });
            assert_eq!(outcome, Ok(()));
        });
        assert!(read_done.load(Ordering::SeqCst));
        assert_eq!(
            committed(dir, db),
            [r#"{"n":2}"#, r#"{"n":1}"#],
            "newest first"
        );
    });
}

/// Another thread's write during a batch joins the batch's group and returns only when the
/// batch committed; both are kept and chained.
#[test]
fn another_threads_write_during_a_batch_returns_only_after_its_commit() {
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let joined_done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let ((), outcome) = s.batch(|| {
                append(&s, 1);
                scope.spawn(|| {
                    append(&s, 2);
                    joined_done.store(true, Ordering::SeqCst);
                });
                std::thread::sleep(Duration::from_millis(200));
                assert!(
                    !joined_done.load(Ordering::SeqCst),
                    "not acknowledged before the commit"
                );
                assert!(committed(dir, db).is_empty());
            });
            assert_eq!(outcome, Ok(()));
        });
        assert!(joined_done.load(Ordering::SeqCst));
        assert_eq!(committed(dir, db).len(), 2);
    });
}

/// A write that panics inside a batch rolls back the whole batch, and the batch's outcome is
/// `Err`: the answers computed from its earlier writes must not be given (the executor
/// withholds them). The store stays usable.
#[test]
fn a_write_that_panics_in_a_batch_undoes_the_batch_and_fails_its_outcome() {
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let call =
            CanonicalCall::new(ToolCall::new("pay", None, json!({"amount": 5})).unwrap()).unwrap();
        let ttl = |_: &Verdict| 30_000;
        let p = proposal(&call, "s", 1, &ttl);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.batch(|| {
                append(&s, 1);
                // The gatekeeper's closure runs inside the proposal's write.
                let _ = s.propose_observed(&p, None, |_, _, _| -> Verdict { panic!("a bug") });
            })
        }));
        assert!(panicked.is_err(), "the panic reaches the batch's caller");
        let kept = committed(dir, db);
        if s.runs_batches() {
            assert!(kept.is_empty(), "nothing of the batch is kept: {kept:?}");
            let ((), outcome) = s.batch(|| {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    s.propose_observed(&p, None, |_, _, _| -> Verdict { panic!("a bug") })
                }));
                assert!(r.is_err());
            });
            assert!(outcome.is_err(), "a batch whose write panicked says so");
        } else {
            assert_eq!(
                kept.len(),
                1,
                "PostgreSQL: the write before the panic committed alone"
            );
        }
        // Usable afterwards.
        let ((), outcome) = s.batch(|| append(&s, 3));
        assert_eq!(outcome, Ok(()));
        assert!(committed(dir, db).contains(&r#"{"n":3}"#.to_string()));
    });
}

/// Review finding: a write of *another* thread that joins the batch's group and panics rolls
/// the whole group back; the batch's next write then opened a fresh group, and the batch
/// reported success — answering calls whose writes were gone (a token or a `call.allowed`
/// acknowledged, then lost). The batch now fails, and what it wrote after is rolled back too.
#[test]
fn a_joined_write_that_panics_on_another_thread_fails_the_whole_batch() {
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let ((), outcome) = s.batch(|| {
            append(&s, 1);
            std::thread::scope(|scope| {
                let other = scope.spawn(|| {
                    let call = CanonicalCall::new(
                        ToolCall::new("pay", None, json!({"amount": 5})).unwrap(),
                    )
                    .unwrap();
                    let ttl = |_: &Verdict| 30_000;
                    let p = proposal(&call, "s", 1, &ttl);
                    let _ = s.propose_observed(&p, None, |_, _, _| -> Verdict { panic!("a bug") });
                });
                assert!(other.join().is_err(), "the other thread's write panicked");
            });
            append(&s, 2);
        });
        assert!(
            outcome.is_err(),
            "the batch says its writes are not durable"
        );
        assert!(
            committed(dir, db).is_empty(),
            "nothing of the failed batch is kept"
        );
        let ((), outcome) = s.batch(|| append(&s, 3));
        assert_eq!(outcome, Ok(()));
        assert_eq!(committed(dir, db), [r#"{"n":3}"#]);
    });
}

/// Review finding: ending an operator's dashboard sessions (a reload that rotated their key)
/// ran a transaction of its own, which SQLite refuses inside a batch's open one ("cannot start
/// a transaction within a transaction"): the reload only logged it, and a leaked key's
/// sessions stayed signed in. Every store write now joins the batch.
#[test]
fn a_rotated_keys_sessions_end_even_inside_a_batch() {
    use assent_store::ui_sessions::UiSession;
    crate::both_stores(|_, s| {
        let session = UiSession {
            operator: "alice".into(),
            csrf: "cc".repeat(32),
            expires_at: i64::MAX,
        };
        let id = "ab".repeat(32);
        s.start_ui_session(&id, &session, &"00".repeat(32), 0)
            .unwrap();
        let (ended, outcome) = s.batch(|| {
            append(s, 1);
            s.end_ui_sessions_of("alice")
        });
        assert_eq!(outcome, Ok(()));
        assert_eq!(ended.unwrap(), 1);
        assert_eq!(s.ui_session(&id, 1).unwrap(), None, "signed out");
    });
}

/// The batch's first write runs without a savepoint of its own (two statements, two round
/// trips on Postgres, fewer): when it fails it rolls back the whole transaction, which held
/// nothing else, and the batch goes on — its later writes commit, and it does not fail.
#[test]
fn a_failed_first_write_of_a_batch_is_undone_alone() {
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let input = assent_store::DecisionInput::approve();
        let ((), outcome) = s.batch(|| {
            let missing = s.decide("no-such-approval", &input, "alice", &[], 1);
            assert!(missing.is_err());
            append(&s, 1);
        });
        assert_eq!(outcome, Ok(()));
        assert_eq!(committed(dir, db), [r#"{"n":1}"#]);
    });
}
