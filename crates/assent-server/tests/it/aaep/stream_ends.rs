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

/// Found by review: when the close of a bare stream's subscription after its grace failed (the
/// database busy or unreachable at that moment), it was never tried again: the subscription
/// stayed open, counted against the operator's 16, until retention removed it. Here another
/// program holds the write lock from before the stream ends until well past its grace (its end
/// is noticed within a keep-alive, 15 s): once the lock is gone, the close is tried again and
/// goes ahead.
#[tokio::test]
async fn a_grace_close_that_failed_on_a_busy_database_is_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    gw.with_store(|s| s.set_busy_timeout(Duration::from_millis(200)))
        .unwrap();
    let (sse, sub) = bare(&gw, None).await;
    let blocker = crate::backend::block_writes(dir.path());
    drop(sse);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!closed(&gw, &sub), "closed while the database was locked");
    drop(blocker);
    until_closed(&gw, &sub).await;
    gw.stop().await;
}

/// Makes every close the store audits (`aaep.closed`) fail, in the database (a trigger on
/// either backend), until [`allow_closes`]; nothing else is refused.
fn refuse_closes(gw: &Gw) {
    let mut sql = gw.sql();
    if crate::backend::on_postgres() {
        sql.exec(
            "CREATE FUNCTION refuse_close() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
            &[],
        );
        sql.exec(
            "CREATE TRIGGER refuse_close BEFORE INSERT ON audit FOR EACH ROW \
             WHEN (NEW.kind = 'aaep.closed') EXECUTE FUNCTION refuse_close()",
            &[],
        );
    } else {
        sql.exec(
            "CREATE TRIGGER refuse_close BEFORE INSERT ON audit WHEN NEW.kind = 'aaep.closed' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
            &[],
        );
    }
}

/// Undoes [`refuse_closes`].
fn allow_closes(gw: &Gw) {
    let on = if crate::backend::on_postgres() {
        " ON audit"
    } else {
        ""
    };
    gw.sql()
        .exec(&format!("DROP TRIGGER refuse_close{on}"), &[]);
}

/// Found by review: a bare stream's subscription reopened by its id where its close was not
/// scheduled — on another replica, or here once the close had begun (here: its close failing,
/// past its grace) — was not known there as a bare stream's, so the end of that stream closed
/// nothing: the subscription stayed open until retention, counted against the operator's 16
/// and read again on every change. A stream reopened on a subscription whose subscriber is
/// `sse:{operator}` closes it when it ends, as the stream that opened it would.
#[tokio::test]
async fn a_bare_subscription_reopened_by_id_after_its_close_began_is_closed_when_that_stream_ends()
{
    let gw = serve().await;
    let (sse, sub) = bare(&gw, None).await;
    refuse_closes(&gw);
    drop(sse);
    // Its end is noticed within a keep-alive or two (15 s each), then the grace (30 s) passes:
    // the close has begun, and fails.
    tokio::time::sleep(Duration::from_secs(75)).await;
    assert!(!closed(&gw, &sub), "closed while closes failed");
    let resumed = by_id(&gw, &sub).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let mut resumed = Sse::from_response(resumed);
    allow_closes(&gw);
    gw.hold_write("/tmp/reopened").await;
    resumed.expect(AWAITING).await;
    assert!(!closed(&gw, &sub), "closed under the stream reopened by id");
    drop(resumed);
    until_closed(&gw, &sub).await;
    gw.stop().await;
}
