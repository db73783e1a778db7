//! What the webhooks' dead letters keep and one listing page reads (on both backends): a
//! `last_error` of at most `MAX_LAST_ERROR` characters on one line, pages of about
//! `DEAD_LETTER_PAGE_BYTES` that say whether more follow; and a delivery lease planted far in
//! the future, which is taken as lapsed. And the clarification list's bound, which says when
//! it left older questions off.

use assent_store::outbox::{DEAD_LETTER_PAGE_BYTES, DeadLetter, MAX_LAST_ERROR};

/// A dead letter of audit record `seq` for webhook `hook` with `body` and `last_error`.
fn letter(hook: &str, seq: i64, body: String, last_error: String) -> DeadLetter {
    DeadLetter {
        id: 0,
        webhook: hook.into(),
        audit_seq: seq,
        event: "approval.requested".into(),
        body,
        attempts: 6,
        last_error,
        failed_at: 1_000,
    }
}

/// Leases webhook `hook` to `me` (at 1 s, for a minute) and dead-letters `letters` under that
/// lease.
fn dead_lettered(s: &assent_store::Store, letters: &[DeadLetter]) {
    assert!(
        s.lease_webhook("hook", "me", 1_000, 60_000)
            .unwrap()
            .is_some()
    );
    for d in letters {
        assert!(s.dead_letter(d, "me").unwrap());
    }
}

/// Attack (found by review): a receiver's (or Slack's) error text of a mebibyte with line
/// breaks was kept whole in each dead letter, and `GET /v1/webhooks/dead-letters?limit=1000`
/// read up to a thousand of them whole. The error is kept to 2,000 characters on one line
/// (without bidirectional overrides, which reversed how the line reads: found by review), and
/// a page ends once it holds about a mebibyte (at least one dead letter), saying whether more
/// follow (a page cut by bytes gave no sign, and a client taking a short page for the last
/// stopped early: found by review).
#[test]
fn a_mebibyte_error_is_kept_short_and_a_dead_letter_page_is_bounded_in_bytes() {
    crate::both_stores(|_, s| {
        let huge = "line\r\nforged \u{202e}lmth.exe\u{2066}\u{200e}\u{feff} ".repeat(100_000);
        let body = "x".repeat(DEAD_LETTER_PAGE_BYTES / 2);
        let letters: Vec<DeadLetter> = (1..=4)
            .map(|seq| letter("hook", seq, format!("\"{body}\""), huge.clone()))
            .collect();
        dead_lettered(s, &letters);
        let first = s.dead_letters(None, 1_000).unwrap();
        let page = &first.letters;
        assert_eq!(page.len(), 2, "a page ends once it holds about a mebibyte");
        assert_eq!(
            first.next,
            Some(page[1].id),
            "a page cut by bytes says more follow"
        );
        for d in page {
            assert!(d.last_error.chars().count() <= MAX_LAST_ERROR);
            assert!(
                !d.last_error.contains(['\n', '\r']),
                "a line break was kept"
            );
            assert!(
                !d.last_error
                    .contains(['\u{202e}', '\u{2066}', '\u{200e}', '\u{feff}']),
                "a bidirectional override or mark was kept"
            );
        }
        // The next page goes on below the last id.
        let next = s.dead_letters(first.next, 1_000).unwrap();
        assert_eq!(next.letters.len(), 2);
        assert!(next.letters.iter().all(|d| d.id < page[1].id));
        assert_eq!(
            next.next, None,
            "the last page, though cut by bytes, says none follow"
        );
        // A page full by `limit` says more follow only while some do.
        let full = s.dead_letters(None, 1).unwrap();
        assert_eq!(full.next, Some(page[0].id));
        let oldest = next.letters[1].id;
        let last = s.dead_letters(Some(oldest + 1), 1).unwrap();
        assert_eq!((last.letters.len(), last.next), (1, None));
    });
}

/// Attack (found by review): a database writer planting `holder = 'ghost', lease_until = 9e18`
/// on a webhook's (or the Slack bot's) cursor stopped its delivery silently for ever: no
/// replica's lease check ever saw the lease run out. A lease ending more than twice the lease
/// length ahead (which no holder writes) is lapsed: the read says it is free and a replica
/// takes it; a lease within that bound still runs.
#[test]
fn a_lease_planted_far_in_the_future_is_lapsed_and_taken() {
    crate::both_stores(|db, s| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let lease = 30_000;
        assert!(s.lease_webhook("hook", "me", now, lease).unwrap().is_some());
        let raw = db.connect().unwrap();
        let plant = |until: i64| {
            raw.conn()
                .execute(
                    "UPDATE webhook_cursors SET holder = 'ghost', lease_until = ?1 WHERE webhook = 'hook'",
                    assent_store::params![until],
                )
                .unwrap();
        };
        // An honest lease of another holder, running: neither free nor taken.
        plant(now + lease);
        assert!(!s.webhook_cursor("hook", now, lease).unwrap().unwrap().free);
        assert!(s.lease_webhook("hook", "me", now, lease).unwrap().is_none());
        // Planted to end in 292 million years.
        plant(9_000_000_000_000_000_000);
        let c = s.webhook_cursor("hook", now, lease).unwrap().unwrap();
        assert_eq!(c.holder.as_deref(), Some("ghost"));
        assert!(c.free, "a lease planted far in the future read as running");
        assert!(
            s.lease_webhook("hook", "me", now, lease).unwrap().is_some(),
            "a lease planted far in the future was not taken"
        );
        let c = s.webhook_cursor("hook", now, lease).unwrap().unwrap();
        assert_eq!(c.holder.as_deref(), Some("me"));
    });
}

/// Attack (found by review): a database writer moving a webhook's cursor past the end of the
/// audit log (`last_seq = 9e18`) silenced it for good: the records after it never came, and
/// cursors only move forward. Taking the lease brings such a cursor back to the end of the
/// log (nothing lies past it), so the next event is delivered; a cursor within the log is
/// left where it is.
#[test]
fn a_cursor_planted_past_the_log_is_brought_back_to_its_end() {
    crate::both_stores(|db, s| {
        let now = 1_000;
        let head = s.lease_webhook("hook", "me", now, 60_000).unwrap().unwrap();
        let raw = db.connect().unwrap();
        let plant = |seq: i64| {
            raw.conn()
                .execute(
                    "UPDATE webhook_cursors SET last_seq = ?1 WHERE webhook = 'hook'",
                    assent_store::params![seq],
                )
                .unwrap();
        };
        plant(9_000_000_000_000_000_000);
        let back = s.lease_webhook("hook", "me", now, 60_000).unwrap();
        assert_eq!(back, Some(head), "the planted cursor was kept");
        if head > 0 {
            plant(head - 1);
            let kept = s.lease_webhook("hook", "me", now, 60_000).unwrap();
            assert_eq!(kept, Some(head - 1));
        }
    });
}

/// Attack (found by review): a dead letter whose `last_error` holds a right-to-left override
/// (written before errors were cleaned, or by another database writer) reversed how the rest
/// of its line reads in the listing. The listing shows it cleaned, as new ones are kept.
#[test]
fn a_stored_bidi_override_in_a_dead_letter_error_is_not_listed() {
    crate::both_stores(|db, s| {
        dead_lettered(s, &[letter("hook", 1, "{}".into(), "refused".into())]);
        db.connect()
            .unwrap()
            .conn()
            .execute(
                "UPDATE webhook_dead_letters SET last_error = ?1",
                ["refused \u{202e}exe.txt\nforged"],
            )
            .unwrap();
        let page = s.dead_letters(None, 10).unwrap();
        assert_eq!(page.letters[0].last_error, "refused  exe.txt forged");
    });
}

/// Found by review: the clarification list stopped at 500 rows and said nothing, so an
/// operator's `assent clarifications --all` silently lost the oldest questions. It answers at
/// most [`assent_store::MAX_CLARIFICATIONS_LISTED`], newest first, and says when more matched;
/// a status filter counts only its own.
#[test]
fn the_clarification_list_says_when_it_left_older_ones_off() {
    crate::both_stores(|_, s| {
        const DAY: i64 = 86_400_000;
        let max = assent_store::MAX_CLARIFICATIONS_LISTED;
        let kinds = ["freetext".to_string()];
        let ask = |k: usize| {
            let at = 1_000 + k as i64;
            s.create_clarification("bot", "s", "q?", &kinds, &[], None, at, at + DAY, u64::MAX)
                .unwrap()
                .unwrap()
                .id
        };
        let ids: Vec<String> = (0..=max).map(ask).collect();
        let (list, truncated) = s.list_clarifications(None, usize::MAX).unwrap();
        assert!(truncated);
        assert_eq!(list.len(), max);
        assert_eq!(list[0].id, ids[max], "newest first");
        assert!(
            list.iter().all(|c| c.id != ids[0]),
            "the oldest is left off"
        );
        let (answered, truncated) = s.list_clarifications(Some("answered"), usize::MAX).unwrap();
        assert!(answered.is_empty() && !truncated);
        s.answer_clarification(&ids[0], &serde_json::json!("x"), "alice", 2_000)
            .unwrap()
            .expect("pending");
        let (answered, truncated) = s.list_clarifications(Some("answered"), usize::MAX).unwrap();
        assert_eq!((answered.len(), truncated), (1, false));
    });
}

/// Found by review: an agent asking questions of 16 KiB with 16 KiB of context, each timing
/// out at once, grew the list an operator reads by 75 KB a second, and the list answered 500
/// of them (37 MB) at once. It stops once the questions read reach the byte budget (always
/// listing the first), and says more matched.
#[test]
fn the_clarification_list_stops_at_its_byte_budget() {
    crate::both_stores(|_, s| {
        const DAY: i64 = 86_400_000;
        let kinds = ["freetext".to_string()];
        let big = "q".repeat(16 * 1024);
        let context = Some("c".repeat(16 * 1024));
        for k in 0..10 {
            let at = 1_000 + k;
            s.create_clarification(
                "bot",
                "s",
                &big,
                &kinds,
                &[],
                context.as_deref(),
                at,
                at + DAY,
                u64::MAX,
            )
            .unwrap()
            .unwrap();
        }
        let (list, truncated) = s.list_clarifications(None, 100 * 1024).unwrap();
        assert_eq!((list.len(), truncated), (4, true));
        let (list, truncated) = s.list_clarifications(Some("pending"), 1).unwrap();
        assert_eq!((list.len(), truncated), (1, true));
        let (list, truncated) = s.list_clarifications(None, usize::MAX).unwrap();
        assert_eq!((list.len(), truncated), (10, false));
    });
}
