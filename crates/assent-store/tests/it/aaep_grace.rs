//! The close of a bare AAEP stream's subscription after its grace (the server's
//! `aaep_streams::BARE_GRACE`), on both backends, with two `Store`s over one database standing
//! for two replicas: the close is one compare-and-close statement on the subscription's stream
//! marks, counted in the database, so no clock is compared and a reopen racing the close
//! either keeps it open or is refused.

use crate::pgkit::both;
use assent_store::Store;
use assent_store::db::Database;
use serde_json::json;

/// Two stores (replicas) over `db`, with one keys directory.
fn two(db: &Database) -> (tempfile::TempDir, Store, Store) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (crate::open(dir.path(), db), crate::open(dir.path(), db));
    (dir, a, b)
}

/// A bare stream's subscription of `alice` opened on `s` at `now`.
fn bare(s: &Store, now: i64) -> String {
    let req = json!({"type": "subscription.request", "subscriber_id": "sse:alice"});
    s.subscribe("alice", &req, &json!({}), None, now)
        .unwrap()
        .id
}

/// Whether subscription `id` is open.
fn open(s: &Store, id: &str) -> bool {
    s.subscription(id).unwrap().unwrap().closed_at.is_none()
}

/// Found by review: the close compared the time replica A's last stream ended (A's clock) with
/// the time replica B's stream reopening the subscription by id marked it seen (B's clock), so
/// with B's clock more than the grace's margin behind, A closed the subscription under B's live
/// stream. Here B's clock is 100 s behind A's: A's close leaves it open, and B's own close once
/// its stream ended goes ahead, whatever the clocks.
#[test]
fn a_bare_subscription_reopened_on_a_replica_whose_clock_is_behind_is_not_closed_under_it() {
    both(|db| {
        let (_dir, a, b) = two(db);
        let id = bare(&a, 1_000_000);
        assert!(a.touch_subscription(&id, 1_000_000).unwrap());
        let ended = a.stream_marks(&id).unwrap().expect("open");
        // B reopens it by id and marks it seen (its clock 100 s behind A's).
        assert!(b.touch_subscription(&id, 900_500).unwrap());
        assert!(
            !a.close_ended_stream(&id, "alice", ended, 1_031_000)
                .unwrap()
        );
        assert!(open(&a, &id), "closed under the stream reopened on B");
        // B's stream ends: its own grace close goes ahead.
        let ended = b.stream_marks(&id).unwrap().expect("open");
        assert!(b.close_ended_stream(&id, "alice", ended, 931_000).unwrap());
        assert!(!open(&a, &id));
        assert_eq!(a.stream_marks(&id).unwrap(), None);
    });
}

/// Found by review: a reopen by id at the very end of the grace could be accepted (the
/// subscription read as open) and the subscription then closed under the new stream. The
/// reopen marks it seen before it is accepted, in the database: marked first, the close leaves
/// it open; closed first, the reopen is refused (`false`: the server's `404`).
#[test]
fn a_reopen_racing_the_grace_close_is_either_kept_open_or_refused() {
    both(|db| {
        let (_dir, a, _b) = two(db);
        let id = bare(&a, 1_000);
        let ended = a.stream_marks(&id).unwrap().expect("open");
        assert!(a.touch_subscription(&id, 31_000).unwrap(), "the reopen");
        assert!(!a.close_ended_stream(&id, "alice", ended, 31_000).unwrap());
        assert!(
            open(&a, &id),
            "closed under the stream reopened in the grace"
        );
        let ended = a.stream_marks(&id).unwrap().expect("open");
        assert!(a.close_ended_stream(&id, "alice", ended, 61_000).unwrap());
        assert!(
            !a.touch_subscription(&id, 61_000).unwrap(),
            "a reopen after the close"
        );
        assert!(!open(&a, &id));
    });
}
