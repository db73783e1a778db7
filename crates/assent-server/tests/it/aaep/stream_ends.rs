//! What outlives an AAEP stream, and what a late reply may cost (found by review): a *bare*
//! stream's subscription (`GET /aaep/v1/events` without a `subscription_id`) is closed
//! (`aaep.closed`) once its streams have ended and none came back within the grace (30 s), while
//! a reconnect — by id within the grace, or to the bare URL with `Last-Event-ID` after it —
//! still resumes without a gap; and a courtesy notice (§6.3.5) is sent at most once per
//! subscription and approval, across restarts.

use super::kit::{AWAITING, Sse, confirm};
use crate::kit::{Gw, OP, serve, start};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

/// Longer than the grace a bare stream's subscription is kept after its last stream ended
/// (`aaep_streams::BARE_GRACE`, 30 s), with room for a loaded machine.
const PAST_GRACE: Duration = Duration::from_secs(90);

/// Whether subscription `sub` is closed in the store.
fn closed(gw: &Gw, sub: &str) -> bool {
    let n = gw.sql().int(
        "SELECT count(*) FROM aaep_subscriptions WHERE id = ?1 AND closed_at IS NOT NULL",
        &[sub.into()],
    );
    n == 1
}

/// Waits (polling the store) until subscription `sub` is closed; panics after [`PAST_GRACE`].
async fn until_closed(gw: &Gw, sub: &str) {
    let start = Instant::now();
    while !closed(gw, sub) {
        assert!(start.elapsed() < PAST_GRACE, "{sub} was never closed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Opens a bare stream (no `subscription_id`) as operator alice; the stream and the id of the
/// subscription it announces.
async fn bare(gw: &Gw, last: Option<&str>) -> (Sse, String) {
    let mut sse = Sse::open(gw, OP, "/aaep/v1/events", last).await;
    let first = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.event, "aaep.subscription");
    let sub = first.data["subscription_id"].as_str().unwrap().to_string();
    (sse, sub)
}

/// `GET /aaep/v1/events?subscription_id={sub}` as alice: the response (not read).
async fn by_id(gw: &Gw, sub: &str) -> reqwest::Response {
    let url = format!("{}/aaep/v1/events?subscription_id={sub}", gw.url);
    gw.http.get(url).bearer_auth(OP).send().await.unwrap()
}

/// Attack (found by review): every bare stream left its subscription open for good — each
/// counted against the operator's 16 open subscriptions and was read again on every change, so
/// a client reconnecting in a loop kept the operator's cap full of dead subscriptions. Once
/// its stream has ended (and the grace has passed) the subscription is closed, audited as
/// every close is; a plain SSE client reconnecting with `Last-Event-ID` still gets the
/// confirmation raised while it was away (AAEP B.1.5).
#[tokio::test]
async fn a_bare_stream_that_ended_leaves_no_open_subscription_behind() {
    let gw = serve().await;
    let (mut sse, sub) = bare(&gw, None).await;
    gw.hold_write("/tmp/before").await;
    let seen = sse.expect(AWAITING).await;
    drop(sse);
    gw.hold_write("/tmp/while-away").await;
    until_closed(&gw, &sub).await;
    let audited = gw.sql().int(
        "SELECT count(*) FROM audit WHERE kind = 'aaep.closed' AND data LIKE ?1",
        &[format!("%{sub}%stream ended%").as_str().into()],
    );
    assert_eq!(audited, 1, "the close is audited, saying why");
    assert_eq!(by_id(&gw, &sub).await.status(), StatusCode::NOT_FOUND);
    // The standard reconnect (the same URL with Last-Event-ID) misses nothing.
    let (mut again, fresh) = bare(&gw, seen.id.as_deref()).await;
    assert_ne!(fresh, sub);
    let e = again.expect(AWAITING).await;
    let what = e.data["consequence"].as_str().unwrap();
    assert!(what.contains("/tmp/while-away"), "{what}");
    drop(again);
    gw.stop().await;
}

/// A client that reopens a bare stream's subscription by its id within the grace resumes on it
/// and keeps it open for as long as that stream lasts (closing it would end that stream and
/// break the resumption it was promised); its end starts the grace again. The second bare
/// stream dropped after the reopen serves as a clock: once it is closed, the first
/// subscription's own grace has passed too.
#[tokio::test]
async fn a_bare_subscription_reopened_by_id_within_the_grace_stays_open_while_streamed() {
    let gw = serve().await;
    let (sse, sub) = bare(&gw, None).await;
    drop(sse);
    let resumed = by_id(&gw, &sub).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let mut resumed = Sse::from_response(resumed);
    let (clock, marker) = bare(&gw, None).await;
    drop(clock);
    until_closed(&gw, &marker).await;
    assert!(!closed(&gw, &sub), "closed under a stream reopened by id");
    gw.hold_write("/tmp/still-open").await;
    let e = resumed.expect(AWAITING).await;
    assert!(e.data.to_string().contains("/tmp/still-open"));
    drop(resumed);
    until_closed(&gw, &sub).await;
    gw.stop().await;
}

/// Attack (found by review): each late `confirmation.reply` to a resolved confirmation sent
/// one more courtesy notice, a whole resolution envelope appended to the event log and pushed
/// to the subscriber, so a subscriber could grow the log (and wake every stream) as fast as it
/// posted one small reply. It is sent once per subscription and approval, by every replica
/// and across a restart.
#[tokio::test]
async fn repeating_a_late_reply_gets_one_courtesy_notice_per_subscription_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (sub, mut sse) = gw.listen().await;
    let (other, _other_sse) = gw.listen().await;
    let (id, token) = gw.confirmation(&mut sse, "/tmp/once").await;
    let reject = confirm(&token, &sub, "reject");
    assert_eq!(gw.reply(Some(OP), reject).await, StatusCode::NO_CONTENT);
    assert_eq!(gw.status(&id).await["status"], "rejected");
    let notices = |gw: &Gw, s: &str| {
        gw.sql().int(
            "SELECT count(*) FROM aaep_events WHERE subscription_id = ?1",
            &[s.into()],
        )
    };
    for s in [&sub, &sub, &sub, &other, &other, &sub] {
        let late = confirm(&token, s, "accept");
        assert_eq!(gw.reply(Some(OP), late).await, StatusCode::NO_CONTENT);
    }
    assert_eq!((notices(&gw, &sub), notices(&gw, &other)), (1, 1));
    // The rejection's own `agent.state.changed` comes first, then the one courtesy notice.
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "thinking", "{ev:#}");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["extensions"]["assent"]["courtesy_notice"], true);
    drop((sse, _other_sse));
    gw.stop().await;
    let gw = start(dir.path()).await;
    let late = confirm(&token, &sub, "accept");
    assert_eq!(gw.reply(Some(OP), late).await, StatusCode::NO_CONTENT);
    assert_eq!(notices(&gw, &sub), 1, "sent again after a restart");
    gw.stop().await;
}
