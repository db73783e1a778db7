//! Operator reads an agent can make heavy, on both backends: approval listings (the API's
//! pages, bounded in bytes with a `Link` to the next; the dashboard's queue, history and a
//! card's similar calls, read as summaries) and the audit page's chain verification (beside
//! the writer, one at a time: the store's `heavy_reads` tests show it does not wait for the
//! writer).

use crate::kit::*;
use assent_server::approvals::LIST_PAGE_BYTES;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One page of `GET /v1/approvals` at `path`: its body's length, its approvals' ids (none for
/// a grouped page) and the
/// path of its `Link` `rel="next"` (`None` without one).
async fn listing(gw: &Gw, path: &str) -> (usize, Vec<String>, Option<String>) {
    let (len, body, next) = listing_page(gw, path).await;
    // A grouped page (`{groups}`) lists no ids here.
    let ids = match &body["approvals"] {
        Value::Null => Vec::new(),
        list => pluck(list, "id").into_iter().map(str::to_string).collect(),
    };
    (len, ids, next)
}

/// Agent `bot` proposes `n` `pay` calls with ~240 KiB of arguments each (held), cancelling
/// each at once when `cancel`: their ids, oldest first.
async fn big_calls(gw: &Gw, n: usize, cancel: bool) -> Vec<String> {
    let memo = "m".repeat(240 * 1024);
    let mut ids = Vec::new();
    for k in 0..n {
        let args = json!({"amount": 500 + k, "to": "bob", "memo": memo});
        let id = gw.held(&format!("s{}", k % 3), "pay", args).await;
        if cancel {
            let (s, b) = gw.cancel(&id, BOT, None).await;
            assert_eq!(s, StatusCode::OK, "{b}");
        }
        ids.push(id);
    }
    ids
}

/// Attack (found by review): an agent proposes calls with ~240 KiB of arguments and cancels
/// each at once, in a loop; a listing (`GET /v1/approvals`, status `all` by default, then up
/// to 5,000) read every one whole on the store's executor and copied it into one answer, so
/// an operator's listing held a multiple of the history in memory and stalled the gateway. A
/// page now ends after about [`LIST_PAGE_BYTES`] of call text whatever its `limit` (here the
/// maximum, 1,000), with a `Link` to the next; following the links gives every approval once,
/// newest first. Over 1,000 is refused, naming `limit`; a forged cursor is refused, naming
/// `before`.
#[tokio::test]
async fn an_agent_cancelling_big_calls_in_a_loop_cannot_make_an_approval_listing_hold_them() {
    let gw = serve().await;
    let ids = big_calls(&gw, 12, true).await;
    let (len, first, next) = listing(&gw, "/v1/approvals?limit=1000").await;
    assert!(first.len() < 12, "one page held {} calls", first.len());
    assert!(len <= 3 * LIST_PAGE_BYTES, "one page of {len} bytes");
    let mut seen = first;
    let mut next = next.expect("a page that ended early links to the next");
    let mut pages = 1;
    loop {
        let (len, more, after) = listing(&gw, &next).await;
        assert!(len <= 3 * LIST_PAGE_BYTES, "one page of {len} bytes");
        seen.extend(more);
        pages += 1;
        match after {
            Some(n) => next = n,
            None => break,
        }
        assert!(pages < 100, "the pages never end");
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first);
    // Grouped pages end early too.
    let (_, _, grouped) = listing(&gw, "/v1/approvals?group=similar&limit=1000").await;
    assert!(grouped.is_some_and(|l| l.contains("group=similar&before=")));
    let (s, b) = gw.get("/v1/approvals?limit=5000", OP).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "limit");
    for forged in ["1.2.3", "x", "01.2", "1.-0"] {
        let (s, b) = gw.get(&format!("/v1/approvals?before={forged}"), OP).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
        assert_says(&b, "message", "before");
    }
    gw.stop().await;
}

/// Attack (found by review): the dashboard's queue (re-read up to twice a second per open
/// tab), History and every card read their lists whole. They read summaries, without the
/// calls' arguments and with messages cut (`pay`'s message template quotes its `to`, which
/// the agent makes ~240 KiB): the queue shows every pending call in a page of a few KiB,
/// History every call, and a card its own whole arguments, its message (rendered to at most
/// 64 KiB) and its similar calls.
#[tokio::test]
async fn the_dashboard_lists_big_calls_without_reading_their_arguments() {
    let gw = serve().await;
    let done = big_calls(&gw, 3, true).await;
    let mut waiting = big_calls(&gw, 5, false).await;
    let to = "t".repeat(240 * 1024);
    let args = json!({"amount": 700, "to": to});
    waiting.push(gw.held("s0", "pay", args).await);
    let cookie = gw.dashboard_session().await;
    let queue = gw.dashboard_page("/ui", &cookie).await;
    assert!(queue.contains("6 waiting"), "{queue}");
    assert!(waiting.iter().all(|id| queue.contains(id.as_str())));
    assert!(!queue.contains("mmmm"));
    assert!(
        queue.len() < 64 * 1024,
        "a queue page of {} bytes",
        queue.len()
    );
    let card = gw
        .dashboard_page(&format!("/ui/approvals/{}", waiting[5]), &cookie)
        .await;
    // The message quoting it is cut at 64 KiB, saying so; the arguments are shown whole.
    assert!(
        card.contains(&format!("Pay 700 to {}", &to[..60 * 1024])),
        "the card's message"
    );
    assert!(!card.contains(&format!("Pay 700 to {to}?")));
    assert!(card.contains("cut: the rendered text is too long to show"));
    assert!(card.contains(&to), "the card shows its arguments whole");
    let history = gw.dashboard_page("/ui/history", &cookie).await;
    assert!(
        done.iter()
            .chain(&waiting)
            .all(|id| history.contains(id.as_str()))
    );
    assert!(!history.contains("mmmm"));
    let card = gw
        .dashboard_page(&format!("/ui/approvals/{}", waiting[0]), &cookie)
        .await;
    assert!(
        card.contains(&"m".repeat(240 * 1024)),
        "the card shows its arguments"
    );
    assert!(card.contains("Similar calls waiting"));
    assert!(waiting[1..].iter().all(|id| card.contains(id.as_str())));
    gw.stop().await;
}

/// The audit page verifies the chain (beside the writer, one verification at a time) and
/// says so with the count the store's own verification gives; pages loaded at once all answer.
#[tokio::test]
async fn the_audit_page_verifies_the_chain_beside_the_writer() {
    let gw = serve().await;
    big_calls(&gw, 2, true).await;
    let cookie = gw.dashboard_session().await;
    let pages =
        futures::future::join_all((0..4).map(|_| gw.dashboard_page("/ui/audit", &cookie))).await;
    let records = gw.with_store(|s| s.verify_audit()).unwrap().records;
    for p in pages {
        assert!(p.contains("The chain verifies:"), "{p}");
    }
    let page = gw.dashboard_page("/ui/audit", &cookie).await;
    assert!(
        page.contains(&format!("The chain verifies: {records} records")),
        "{page}"
    );
    gw.stop().await;
}
