//! Reads an agent can make heavy run beside the writer, on both backends: the audit chain's
//! verification and a page of an approval listing each finish while a commit holds the
//! writer's connection (the commit observer runs under it and waits for the read, at most
//! 20 s), as the learning export does (`readers.rs`).

use crate::both_stores;
use assent_core::ApprovalStatus;
use assent_store::Store;
use std::sync::{Mutex, mpsc};
use std::time::Duration;

/// Holds a commit of `s` open (its observer, under the writer's connection, waits) while
/// `read` runs on another thread: what `read` answered, `None` when it did not finish while
/// the commit waited (20 s).
fn beside_a_commit<T: Send + 'static>(
    s: &Store,
    read: impl Fn(&Store) -> T + Send + Sync,
) -> Option<T> {
    let (call, v) = crate::pay(7);
    for k in 0..3 {
        crate::hold(s, &format!("s{k}"), &call, &v, 1_000, 100_000);
    }
    let (committing, started) = mpsc::channel::<()>();
    let (read_tx, read_rx) = mpsc::channel::<T>();
    let read_rx = Mutex::new(read_rx);
    let (seen_tx, seen) = mpsc::channel::<Option<T>>();
    let seen_tx = Mutex::new(seen_tx);
    assert!(s.observe_commits(Box::new(move |_| {
        let _ = committing.send(());
        let got = read_rx
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(20));
        let _ = seen_tx.lock().unwrap().send(got.ok());
    })));
    let read = &read;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            started.recv().unwrap();
            let _ = read_tx.send(read(s));
        });
        crate::hold(s, "s-next", &call, &v, 3_000, 100_000);
    });
    seen.recv().unwrap()
}

/// Found by review: the audit chain's verification (the dashboard's audit page, on every
/// load) scanned the whole chain on the writer's connection, so every proposal and decision
/// waited for it. It reads in a snapshot beside the writer: it finishes while a commit holds
/// the writer's connection, and finds the chain whole.
#[test]
fn the_audit_chain_is_verified_without_waiting_for_the_writer() {
    both_stores(|_, s| {
        let before = s.verify_audit().unwrap().records;
        let seen = beside_a_commit(s, |s| s.verify_audit().unwrap());
        let report = seen.expect("the verification ran beside the commit");
        assert_eq!(report.broken, None);
        assert!(report.records > before, "{report:?}");
    });
}

/// Found by review: a listing of approvals read whole records on the writer's connection. A
/// page of [`Store::approval_page`] (and of its summaries) reads beside the writer.
#[test]
fn an_approval_listing_page_does_not_wait_for_the_writer() {
    both_stores(|_, s| {
        let pending = Some(ApprovalStatus::Pending);
        let seen = beside_a_commit(s, move |s| {
            let (page, _) = s.approval_page(pending, 100, None, 1 << 20).unwrap();
            let (summaries, _) = s.approval_summaries(pending, 100, None).unwrap();
            (page.len(), summaries.len())
        });
        // The observer runs once the commit is done, still holding the writer's connection:
        // the page finds the held call too.
        assert_eq!(seen, Some((4, 4)), "the listing ran beside the commit");
    });
}
