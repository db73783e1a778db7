//! `GET /v1/webhooks/dead-letters` read page by page over HTTP: pages bounded in bytes say by
//! their `Link` header that more follow, so a client following it reads every dead letter.

use crate::kit::{listing_page, start};
use assent_store::outbox::{DEAD_LETTER_PAGE_BYTES, DeadLetter};
use std::collections::BTreeSet;

/// Attack (found by review): a page of `?limit=1000` ends early once it holds about a
/// mebibyte of bodies and errors, but said nothing of it; a client following "at most
/// `limit`" (a short page is the last) stopped after the first page and never saw the older
/// dead letters (an attacker filling the list with large ones hid the rest). A page with more
/// below it now has `Link: </v1/webhooks/dead-letters?limit=N&before_id=I>; rel="next"`:
/// following it reads every dead letter exactly once, and the last page has none, even when
/// it is full.
#[tokio::test]
async fn a_dead_letter_page_cut_by_bytes_links_to_the_next_so_none_is_missed() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let body = format!(
        "{{\"pad\":\"{}\"}}",
        "x".repeat(DEAD_LETTER_PAGE_BYTES * 2 / 5)
    );
    let planted: BTreeSet<i64> = gw.with_store(|s| {
        assert!(
            s.lease_webhook("planted", "me", 1, 60_000)
                .unwrap()
                .is_some()
        );
        for seq in 1..=7 {
            let d = DeadLetter {
                id: 0,
                webhook: "planted".into(),
                audit_seq: seq,
                event: "approval.requested".into(),
                body: body.clone(),
                attempts: 6,
                last_error: "refused".into(),
                failed_at: 1_000,
            };
            assert!(s.dead_letter(&d, "me").unwrap());
        }
        // Every id, read by the last id of each page until one comes back empty.
        let (mut ids, mut before) = (BTreeSet::new(), None);
        loop {
            let p = s.dead_letters(before, 1_000).unwrap();
            let Some(last) = p.letters.last() else {
                break ids;
            };
            before = Some(last.id);
            ids.extend(p.letters.iter().map(|d| d.id));
        }
    });
    assert_eq!(planted.len(), 7);

    let mut path = Some("/v1/webhooks/dead-letters?limit=1000".to_string());
    let (mut seen, mut pages) = (Vec::new(), 0);
    while let Some(p) = path.take() {
        let (_, v, next) = listing_page(&gw, &p).await;
        let list = v["dead_letters"].as_array().unwrap();
        assert!(!list.is_empty(), "a Link led to an empty page: {p}");
        seen.extend(list.iter().map(|d| d["id"].as_i64().unwrap()));
        pages += 1;
        if next.is_some() {
            assert!(list.len() < 1_000, "this page was cut by bytes");
        }
        path = next;
    }
    assert!(
        pages >= 3,
        "{pages} pages: a page cut by bytes had no Link rel=next"
    );
    assert_eq!(seen.len(), 7, "a dead letter was listed twice: {seen:?}");
    assert_eq!(seen.iter().copied().collect::<BTreeSet<_>>(), planted);
    assert!(
        seen.windows(2).all(|w| w[0] > w[1]),
        "not newest first: {seen:?}"
    );

    // A page full by `limit` links on while more follow, and not when none do.
    let (_, v, next) = listing_page(&gw, "/v1/webhooks/dead-letters?limit=1").await;
    let newest = v["dead_letters"][0]["id"].as_i64().unwrap();
    assert_eq!(
        next.as_deref(),
        Some(format!("/v1/webhooks/dead-letters?limit=1&before_id={newest}").as_str())
    );
    let oldest = planted.first().unwrap();
    let last = format!("/v1/webhooks/dead-letters?limit=1&before_id={}", oldest + 1);
    let (_, v, next) = listing_page(&gw, &last).await;
    assert_eq!(v["dead_letters"][0]["id"].as_i64(), Some(*oldest));
    assert_eq!(next, None, "the last page, though full, linked on");
    gw.stop().await;
}
