//! Operator listings that history makes long, paged on both backends: grants
//! (`GET /v1/grants`, `?all=true` with every revoked and expired one), tool reviews
//! (`GET /v1/tools/reviews?status=all`, bounded in bytes of definitions too) and the approvals
//! listing's byte budget with pending calls. Each page holds at most `limit`, links to the next
//! with `Link: <…&before=CURSOR>; rel="next"`, and following the links gives every item once.

use crate::kit::*;
use assent_server::approvals::LIST_PAGE_BYTES;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One page at `path` read as operator: its body's length, the `id`s of its `list` key and the
/// path of its `Link` `rel="next"` (`None` without one).
async fn page(gw: &Gw, path: &str, list: &str) -> (usize, Vec<String>, Option<String>) {
    let (len, body, next) = listing_page(gw, path).await;
    let ids = pluck(&body[list], "id").into_iter().map(str::to_string);
    (len, ids.collect(), next)
}

/// Every page from `path` on, following the links: the ids in order, the number of pages,
/// and the largest page's length in bytes.
async fn every_page(gw: &Gw, path: &str, list: &str) -> (Vec<String>, usize, usize) {
    let (mut ids, mut pages, mut largest) = (Vec::new(), 0, 0);
    let mut next = Some(path.to_string());
    while let Some(p) = next {
        let (len, more, after) = page(gw, &p, list).await;
        ids.extend(more);
        (pages, largest) = (pages + 1, largest.max(len));
        assert!(pages < 100, "the pages never end");
        next = after;
    }
    (ids, pages, largest)
}

/// `400` naming `what` for `GET path`.
async fn refused(gw: &Gw, path: &str, what: &str) {
    let (s, b) = gw.get(path, OP).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", what);
}

/// The ids of every grant in the database, newest first.
fn grant_ids(gw: &Gw) -> Vec<String> {
    let rows = gw.sql().rows(
        "SELECT id FROM grants ORDER BY created_at DESC, rowid DESC",
        &[],
    );
    rows.into_iter().map(|r| r[0].clone()).collect()
}

/// Attack (found by review): every scoped approval leaves a grant behind, revoked or expired
/// ones included, and `GET /v1/grants?all=true` read every one ever made, whole, on the
/// writer's connection: the answer and the gateway's memory grew with history. It is paged
/// now (`limit`, `before`, `Link rel=next`), and paging does not hide an active grant behind a
/// page of revoked ones, nor list one whose seal fails as active.
#[tokio::test]
async fn a_history_of_revoked_grants_is_listed_in_pages_and_hides_no_active_grant() {
    let gw = serve().await;
    for k in 0..5 {
        let id = gw
            .held(
                &format!("s{k}"),
                "pay",
                json!({"amount": 500 + k, "to": "bob"}),
            )
            .await;
        let scope = json!({"decision": "approve", "scope": "session"});
        let (s, b) = gw.decide_with(&id, OP, scope).await;
        assert_eq!(s, StatusCode::OK, "{b}");
    }
    let all = grant_ids(&gw);
    assert_eq!(all.len(), 5);
    // The three newest are revoked: a page of one would hold only revoked ones.
    for gid in &all[..3] {
        let (s, b) = gw
            .req("DELETE", &format!("/v1/grants/{gid}"), Some(OP), None)
            .await;
        assert_eq!(s, StatusCode::NO_CONTENT, "{b}");
    }
    let (ids, pages, _) = every_page(&gw, "/v1/grants?all=true&limit=2", "grants").await;
    assert_eq!((&ids, pages), (&all, 3), "every grant once, newest first");
    let (_, first, next) = page(&gw, "/v1/grants?all=true&limit=2", "grants").await;
    assert_eq!(first.len(), 2);
    assert!(next.is_some_and(|n| n.starts_with("/v1/grants?all=true&limit=2&before=")));
    let (_, first, _) = page(&gw, "/v1/grants?limit=1", "grants").await;
    assert_eq!(
        first,
        all[3..4],
        "the newest active grant comes first, not a revoked one"
    );
    let (active, _, _) = every_page(&gw, "/v1/grants?limit=1", "grants").await;
    assert_eq!(
        active,
        all[3..],
        "the active grants, none behind the revoked ones"
    );
    // The default page lists them all, with no link.
    let (_, ids, next) = page(&gw, "/v1/grants", "grants").await;
    assert_eq!((ids, next), (all[3..].to_vec(), None));
    // A grant edited behind the gateway's back fails its seal: never listed as active.
    let edited = &all[3];
    gw.sql().exec(
        "UPDATE grants SET session_id = 'elsewhere' WHERE id = ?1",
        &[edited.as_str().into()],
    );
    let (active, _, _) = every_page(&gw, "/v1/grants?limit=1", "grants").await;
    assert_eq!(active, all[4..]);
    let (ids, _, _) = every_page(&gw, "/v1/grants?all=true&limit=1", "grants").await;
    assert_eq!(ids, all);
    for bad in ["limit=0", "limit=1001", "limit=x", "limit=-1"] {
        refused(&gw, &format!("/v1/grants?{bad}"), "limit").await;
    }
    for forged in ["1.2.3", "x", "01.2", "1.-0"] {
        refused(&gw, &format!("/v1/grants?before={forged}"), "before").await;
    }
    refused(&gw, "/v1/grants?all=yes", "all").await;
    refused(&gw, "/v1/grants?lmit=2", "lmit").await;
    gw.stop().await;
}

/// A tool definition named `name` whose description is `description`.
fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}})
}

/// Agent `bot` reports `tools` of its server `fs`: the answer's tool states.
async fn report(gw: &Gw, tools: Vec<Value>) -> Value {
    let body = json!({"agent": "bot", "server": "fs", "tools": tools});
    let (s, b) = gw.post("/v1/tools/check", BOT, body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b["tools"].clone()
}

/// Attack (found by review): an upstream that changes its tools over and over leaves a
/// review behind each time, accepted and rejected ones included, each with its definitions,
/// and `GET /v1/tools/reviews?status=all` read every one ever made, whole. It is paged now:
/// at most `limit` reviews and about [`LIST_PAGE_BYTES`] of definitions a page, whatever the
/// `limit`, with a `Link` to the next; following the links gives every review once.
#[tokio::test]
async fn an_upstream_changing_big_tools_cannot_make_the_review_listing_hold_them_all() {
    let gw = serve().await;
    let names: Vec<String> = (0..7).map(|k| format!("tool_{k}")).collect();
    let small = names.iter().map(|n| tool(n, "Small.")).collect();
    report(&gw, small).await;
    let mut reviews = Vec::new();
    for (k, n) in names.iter().enumerate() {
        let big = format!("{k}{}", "d".repeat(200 * 1024));
        let states = report(&gw, vec![tool(n, &big)]).await;
        reviews.push(states[0]["review_id"].as_str().unwrap().to_string());
    }
    for (id, verb) in [(&reviews[0], "accept"), (&reviews[1], "reject")] {
        let (s, b) = gw
            .post(&format!("/v1/tools/reviews/{id}/{verb}"), OP, json!({}))
            .await;
        assert_eq!(s, StatusCode::OK, "{b}");
    }
    let newest_first: Vec<String> = reviews.iter().rev().cloned().collect();
    let path = "/v1/tools/reviews?status=all&limit=1000";
    let (_, first, next) = page(&gw, path, "reviews").await;
    assert!(first.len() < 7, "one page held {} big reviews", first.len());
    assert!(next.is_some_and(|n| n.contains("status=all&limit=1000&before=")));
    let (ids, pages, largest) = every_page(&gw, path, "reviews").await;
    assert_eq!(ids, newest_first, "every review once, newest first");
    assert!(pages > 1);
    assert!(
        largest <= 4 * LIST_PAGE_BYTES,
        "one page of {largest} bytes"
    );
    // The pending ones by default, paged by `limit` too.
    let (ids, pages, _) = every_page(&gw, "/v1/tools/reviews?limit=2", "reviews").await;
    assert_eq!((ids, pages), (newest_first[..5].to_vec(), 3));
    for bad in ["limit=0", "limit=1001", "limit=x"] {
        refused(&gw, &format!("/v1/tools/reviews?{bad}"), "limit").await;
    }
    for forged in ["1.2.3", "x", "01.2"] {
        refused(&gw, &format!("/v1/tools/reviews?before={forged}"), "before").await;
    }
    refused(&gw, "/v1/tools/reviews?stats=all", "stats").await;
    gw.stop().await;
}

/// Agent `bot` holds seven `pay` calls with ~200 KiB of arguments each (other arguments each
/// time, so they do not join one approval): their ids, oldest first.
async fn big_pending_calls(gw: &Gw) -> Vec<String> {
    let memo = "m".repeat(200 * 1024);
    let mut ids = Vec::new();
    for k in 0..7 {
        let args = json!({"amount": 500 + k, "to": "bob", "memo": format!("{k}{memo}")});
        ids.push(gw.held(&format!("s{k}"), "pay", args).await);
    }
    ids
}

/// Attack: an agent holds calls with ~200 KiB of arguments each and leaves them pending
/// (other arguments each time, so they do not join one approval); the operator's listing of
/// pending approvals, asked for up to 1,000, would hold every one. A page ends after about
/// [`LIST_PAGE_BYTES`] of call text with a `Link` to the next, and following the links gives
/// every pending approval once, newest first.
#[tokio::test]
async fn pending_calls_with_big_arguments_end_a_listing_page_early_and_none_is_lost() {
    let gw = serve().await;
    let ids = big_pending_calls(&gw).await;
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    let path = "/v1/approvals?status=pending&limit=1000";
    let (_, first, next) = page(&gw, path, "approvals").await;
    assert!(first.len() < 7, "one page held {} big calls", first.len());
    let next = next.expect("a page that ended early links to the next");
    assert!(next.contains("status=pending&limit=1000&before="), "{next}");
    let (all, pages, largest) = every_page(&gw, path, "approvals").await;
    assert_eq!(
        all, newest_first,
        "every pending approval once, newest first"
    );
    assert!(pages > 1);
    assert!(
        largest <= 3 * LIST_PAGE_BYTES,
        "one page of {largest} bytes"
    );
    gw.stop().await;
}

/// The typed client's `approval_groups` (`group=similar`) read one page: with big pending
/// calls a page ends early, so a group of similar calls showed only its newest few. It follows
/// the pages and makes a group spanning them one again: all seven, oldest first.
#[tokio::test]
async fn the_clients_grouped_listing_follows_pages_and_joins_a_group_split_across_them() {
    let gw = serve().await;
    let ids = big_pending_calls(&gw).await;
    let first = gw
        .get_raw("/v1/approvals?group=similar&limit=1000", OP)
        .await;
    assert!(
        first.headers().contains_key("link"),
        "the first page ends early"
    );
    let client = assent_api::Client::new(&gw.url, OP).unwrap();
    let pending = Some(assent_api::kit::ApprovalStatus::Pending);
    let groups = client.approval_groups(pending, Some(1000)).await.unwrap();
    assert_eq!(groups.groups.len(), 1, "{groups:?}");
    let g = &groups.groups[0];
    let listed: Vec<&str> = g.approvals.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(
        (g.count, listed),
        (7, ids.iter().map(String::as_str).collect())
    );
    // Asked for fewer, it reads no more than that: the newest three.
    let groups = client.approval_groups(pending, Some(3)).await.unwrap();
    let listed: Vec<&str> = groups.groups[0]
        .approvals
        .iter()
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(
        listed,
        ids[4..].iter().map(String::as_str).collect::<Vec<_>>()
    );
    gw.stop().await;
}
