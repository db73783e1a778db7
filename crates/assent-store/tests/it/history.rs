//! The recorded history read back for replay (issue 16 §1) on both backends: allowed, denied,
//! held and settled proposals in order, with who decided; pages; the time range; a record
//! altered behind the store's back counted as unreadable, never guessed at.

use super::{both_stores, pay};
use assent_core::replay::Was;
use assent_core::{ApprovalStatus, CanonicalCall, VerdictKind};
use assent_store::DecisionInput;
use assent_store::history::{MAX_PAGE, PAGE_BYTES, Query, for_each_offline};

#[test]
fn the_history_reads_back_every_proposal_in_order_with_its_outcome() {
    both_stores(|db, store| {
        let (call, confirm) = pay(10);
        let mut allow = confirm.clone();
        allow.kind = VerdictKind::Allow;
        let mut deny = confirm.clone();
        deny.kind = VerdictKind::Deny;
        store
            .record_verdict("bot", "s1", &call, "h", &allow, 1_000)
            .unwrap();
        store
            .record_verdict("bot", "s1", &call, "h", &deny, 2_000)
            .unwrap();
        let held = |now: i64| {
            let c = CanonicalCall::new(call.clone()).unwrap();
            let ttl = |_: &assent_core::Verdict| 60_000;
            let p = assent_store::Proposal::for_call("bot", "s2", &c, now, &ttl, u64::MAX);
            store.create_approval(&p, &confirm).unwrap().id
        };
        let (a, b, c) = (held(3_000), held(4_000), held(5_000));
        store
            .decide(&a, &DecisionInput::approve(), "alice", &[], 3_500)
            .unwrap();
        store
            .decide(&b, &DecisionInput::deny(Some("no")), "bob", &[], 4_500)
            .unwrap();
        let mut all = Vec::new();
        let unreadable = for_each_offline(db, None, None, &mut |page| {
            all.extend(page);
            true
        })
        .unwrap();
        assert_eq!(unreadable, 0);
        let was: Vec<&Was> = all.iter().map(|r| &r.was).collect();
        assert_eq!(was[0], &Was::Allowed);
        assert_eq!(was[1], &Was::Denied { blocked: false });
        assert_eq!(
            was[2],
            &Was::Held {
                status: ApprovalStatus::Approved,
                decided_by: Some("alice".into()),
                decided_at_ms: Some(3_500),
                edited: false,
            }
        );
        assert!(
            matches!(was[3], Was::Held { status: ApprovalStatus::Rejected, decided_by: Some(d), .. } if d == "bob")
        );
        assert!(matches!(
            was[4],
            Was::Held {
                status: ApprovalStatus::Pending,
                decided_by: None,
                ..
            }
        ));
        assert_eq!(all.len(), 5);
        assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
        assert_eq!(
            (all[3].agent.as_str(), all[3].session_id.as_str()),
            ("bot", "s2")
        );
        assert_eq!(all[3].call, call);
        let _ = c;

        // Pages of two, from where the last one stopped; the range in Unix ms.
        let mut q = Query {
            after_seq: 0,
            since_ms: Some(2_000),
            until_ms: Some(5_000),
            limit: 2,
        };
        let p1 = store.history_page(&q).unwrap();
        assert!(p1.full);
        assert_eq!(
            p1.recorded.iter().map(|r| r.at_ms).collect::<Vec<_>>(),
            [2_000, 3_000]
        );
        q.after_seq = p1.last_seq.unwrap();
        let p2 = store.history_page(&q).unwrap();
        assert_eq!(
            p2.recorded.iter().map(|r| r.at_ms).collect::<Vec<_>>(),
            [4_000]
        );
        assert!(!p2.full);

        // A record whose data was altered in the database is counted, not read.
        let conn = db.connect().unwrap();
        conn.conn()
            .execute(
                "UPDATE audit SET data = '{\"call\": 5}' WHERE at = 1000",
                assent_store::params![],
            )
            .unwrap();
        let mut n = 0;
        let unreadable = for_each_offline(db, None, None, &mut |page| {
            n += page.len();
            true
        })
        .unwrap();
        assert_eq!((n, unreadable), (4, 1));
    });
}

/// Found by review: a page read up to `MAX_PAGE` (2,000) records whatever their size, so calls
/// padded to the gateway's `max_arguments_bytes` made one page about 512 MB. A page stops at
/// `PAGE_BYTES` of stored record text (one record more at the most), says how many bytes it
/// read, and the next page goes on where it stopped.
#[test]
fn a_page_stops_at_its_bytes_and_the_next_goes_on() {
    both_stores(|db, store| {
        let (_, mut allow) = pay(10);
        allow.kind = VerdictKind::Allow;
        // Five calls of 2 MiB: four fill a page (8 MiB), the fifth is the next page's.
        for i in 0..5 {
            let pad = "x".repeat(2 << 20);
            let call =
                assent_core::ToolCall::new("read", None, serde_json::json!({"pad": pad})).unwrap();
            store
                .record_verdict("bot", "s1", &call, "h", &allow, 1_000 + i)
                .unwrap();
        }
        let mut q = Query {
            after_seq: 0,
            since_ms: None,
            until_ms: None,
            limit: MAX_PAGE,
        };
        let p1 = store.history_page(&q).unwrap();
        assert_eq!((p1.recorded.len(), p1.full), (4, true));
        assert!(p1.bytes >= PAGE_BYTES && p1.bytes < PAGE_BYTES + (3 << 20));
        q.after_seq = p1.last_seq.unwrap();
        let p2 = store.history_page(&q).unwrap();
        assert_eq!((p2.recorded.len(), p2.full, p2.unreadable), (1, false, 0));
        assert_eq!(p2.recorded[0].at_ms, 1_004);
        let mut n = 0;
        for_each_offline(db, None, None, &mut |page| {
            n += page.len();
            true
        })
        .unwrap();
        assert_eq!(n, 5);
    });
}
