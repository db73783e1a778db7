//! What the webhooks' dead letters keep and one listing page reads (on both backends): a
//! `last_error` of at most `MAX_LAST_ERROR` characters on one line, and pages of about
//! `DEAD_LETTER_PAGE_BYTES`.

use crate::pgkit::both;
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

/// Attack (found by review): a receiver's (or Slack's) error text of a mebibyte with line
/// breaks was kept whole in each dead letter, and `GET /v1/webhooks/dead-letters?limit=1000`
/// read up to a thousand of them whole. The error is kept to 2,000 characters on one line,
/// and a page ends once it holds about a mebibyte (at least one dead letter).
#[test]
fn a_mebibyte_error_is_kept_short_and_a_dead_letter_page_is_bounded_in_bytes() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = crate::open(dir.path(), db);
        assert!(
            s.lease_webhook("hook", "me", 1_000, 60_000)
                .unwrap()
                .is_some()
        );
        let huge = "line\r\nforged ".repeat(100_000);
        let body = "x".repeat(DEAD_LETTER_PAGE_BYTES / 2);
        for seq in 1..=4 {
            let d = letter("hook", seq, format!("\"{body}\""), huge.clone());
            assert!(s.dead_letter(&d, "me").unwrap());
        }
        let page = s.dead_letters(None, 1_000).unwrap();
        assert_eq!(page.len(), 2, "a page ends once it holds about a mebibyte");
        for d in &page {
            assert!(d.last_error.chars().count() <= MAX_LAST_ERROR);
            assert!(
                !d.last_error.contains(['\n', '\r']),
                "a line break was kept"
            );
        }
        // The next page goes on below the last id.
        let next = s.dead_letters(Some(page[1].id), 1_000).unwrap();
        assert_eq!(next.len(), 2);
        assert!(next.iter().all(|d| d.id < page[1].id));
    });
}
