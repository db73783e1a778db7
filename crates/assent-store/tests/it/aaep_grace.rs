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

/// Found by review: every open bare stream marked its subscription seen on its own every 5 s,
/// one write transaction each through the one write lock, so 1,000 open streams cost some 200
/// serialised writes a second. A gateway now marks all of its streams' subscriptions in one
/// write per interval: here 1,000 subscriptions (more than one statement's worth) in exactly one
/// commit, each marked once, a closed one left alone.
#[test]
fn marking_many_open_streams_costs_one_commit_per_interval() {
    both(|db| {
        let (_dir, a, _b) = two(db);
        let commits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = commits.clone();
        assert!(a.observe_commits(Box::new(move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })));
        let req = |i: usize| json!({"type": "subscription.request", "subscriber_id": format!("sse:op{}", i % 50)});
        let mut ids: Vec<String> = (0..1000)
            .map(|i| {
                let (p, r) = (format!("op{}", i % 50), req(i));
                a.subscribe(&p, &r, &json!({}), None, 1_000).unwrap().id
            })
            .collect();
        // Each of 50 operators holds at most 16 open: the rest were closed by the cap.
        let open_now: Vec<String> = ids.iter().filter(|id| open(&a, id)).cloned().collect();
        assert_eq!(open_now.len(), 50 * 16);
        ids.push("sub_unknown".into());
        let before = commits.load(std::sync::atomic::Ordering::SeqCst);
        let marked = a.touch_subscriptions(&ids, 5_000).unwrap();
        let after = commits.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(after - before, 1, "one commit for every stream's mark");
        assert_eq!(marked, open_now.len());
        for id in &ids[..1000] {
            let want = open(&a, id).then_some(1);
            assert_eq!(a.stream_marks(id).unwrap(), want, "{id}");
        }
    });
}

/// Found by review: a gateway that died during a bare stream's grace (its close waiting in
/// memory) left the subscription open until retention, counted against the operator's 16.
/// Every gateway's sweep reads the open bare subscriptions' stream marks twice, longer than
/// the grace apart, and closes those whose marks did not move (no stream anywhere): one
/// compare-and-close, so with both replicas sweeping it is closed, and audited, exactly once;
/// one a stream marked in between, and one a client opened on purpose (not `sse:`), stay open.
#[test]
fn a_bare_subscription_left_by_a_dead_gateway_is_swept_exactly_once_across_replicas() {
    both(|db| {
        let (_dir, a, b) = two(db);
        let dead = bare(&a, 1_000);
        let live = bare(&a, 1_000);
        let posted = json!({"type": "subscription.request", "subscriber_id": "app"});
        let kept = a
            .subscribe("alice", &posted, &json!({}), None, 1_000)
            .unwrap()
            .id;
        assert!(
            a.touch_subscriptions(&[dead.clone(), live.clone()], 2_000)
                .unwrap()
                == 2
        );
        let read_a = a.bare_stream_marks(100).unwrap();
        let read_b = b.bare_stream_marks(100).unwrap();
        assert_eq!(read_a.len(), 2, "{read_a:?}");
        assert!(read_a.iter().all(|(id, p, _)| *id != kept && p == "alice"));
        // A stream on `live` (on B) marks it before the next sweep.
        assert_eq!(
            b.touch_subscriptions(std::slice::from_ref(&live), 7_000)
                .unwrap(),
            1
        );
        let why = "swept";
        let by_b = b.close_unstreamed(&read_b, why, 50_000).unwrap();
        let by_a = a.close_unstreamed(&read_a, why, 50_001).unwrap();
        assert_eq!(by_b, vec![dead.clone()]);
        assert!(by_a.is_empty(), "closed twice: {by_a:?}");
        assert!(!open(&a, &dead));
        assert!(open(&a, &live), "closed under a stream that marked it");
        assert!(open(&a, &kept));
        let closes = a.audit_after(0, &["aaep.closed"], 1000).unwrap().len();
        assert_eq!(closes, 1);
    });
}

/// Found by review: an AAEP event row whose `data` was edited to a JSON array or string made
/// setting its `sequence_number` panic, ending every stream that reached it, again at each
/// resume from before it. It is passed on marked damaged, and the events after it follow.
#[test]
fn an_event_row_edited_to_no_json_object_is_passed_on_damaged_not_a_panic() {
    use assent_store::params;
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let sub = s.subscription(&bare(&s, 1_000)).unwrap().unwrap();
        let conn = db.connect().unwrap();
        let c = conn.conn();
        let insert = "INSERT INTO aaep_events (event_id, type, critical, at, data) VALUES (?1, 'aaep:agent.state.changed', ?3, 2000, ?2)";
        for (i, data) in ["[1]", "\"text\"", r#"{"type": "aaep:agent.state.changed"}"#]
            .iter()
            .enumerate()
        {
            c.execute(insert, params![format!("evt_{i:032}"), *data, false])
                .unwrap();
        }
        let got = s.events_after(&sub, 0, 10).unwrap();
        assert_eq!(got.len(), 3, "{got:?}");
        for e in &got[..2] {
            assert_eq!(
                e.data["damaged"], "the stored event is not a JSON object",
                "{e:?}"
            );
            assert_eq!(e.data["sequence_number"], e.seq);
        }
        assert_eq!(got[2].data["type"], "aaep:agent.state.changed");
    });
}
