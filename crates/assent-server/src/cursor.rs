//! The audit log as a leased event stream, shared by the outgoing webhooks (`webhooks.rs`)
//! and the Slack bot's messages (`slack/outbox.rs`): each reader has a named cursor in the
//! store's webhook delivery state, and only the holder of its lease (renewed before every
//! attempt, [`LEASE`] without renewal) delivers, so replicas deliver each event once and none
//! is lost while the receiver is down or the gateway restarts. Store failures are logged and
//! read as "nothing now" (the loop looks again); a record is passed only once it was
//! delivered or dead-lettered.

use crate::state::{AppState, now_ms};
use assent_store::audit::AuditRecord;
use assent_store::{ApprovalRecord, Store, StoreError};
use std::future::Future;
use std::time::Duration;

/// How long a cursor's lease lasts without renewal: longer than one delivery attempt (15 s
/// timeout), so a slow receiver does not lose it mid-attempt.
pub const LEASE: Duration = Duration::from_secs(30);

/// Runs `f` with the store on the blocking pool ([`AppState::store_task`]); a failure is
/// logged and `None` (the delivery loop tries again later).
pub(crate) async fn store<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Option<T> {
    match st.store_task(f).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "delivery: store access failed");
            None
        }
        Err(_) => None,
    }
}

/// Reads approval `id` for a delivery, its `damaged` naming what no seal vouches for too
/// ([`assent_store::Store::checked_approval`]): `Ok(Some)`; `Ok(None)` when there is none, or when
/// its row is damaged (a value of another type than the gateway writes: no later read would
/// do better, so it is logged and skipped rather than holding back every later event);
/// `Err(())` when the store failed, after a pause of a second — the caller answers `false`
/// and [`follow`] offers the same record again (found by review: a failed read was taken for
/// "no approval" and the event skipped, though the module promises none is lost).
pub(crate) async fn approval_for_delivery(
    st: &AppState,
    id: String,
) -> Result<Option<ApprovalRecord>, ()> {
    let read = st.store_task(move |s| s.checked_approval(&id)).await;
    match read {
        Ok(Ok(a)) => Ok(a),
        Ok(Err(e)) if e.is_damaged_row() => {
            tracing::error!(error = %e, "delivery: an approval's row is damaged; its event is skipped");
            Ok(None)
        }
        failed => {
            if let Ok(Err(e)) = failed {
                tracing::error!(error = %e, "delivery: store access failed; the event is tried again");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(())
        }
    }
}

/// Takes or renews `holder`'s lease of cursor `name`: the cursor (an audit `seq`) when held.
/// A cursor new to the database starts at the end of the log. `None` while this replica is
/// superseded (its store would refuse the write): the newest replicas deliver.
pub(crate) async fn take_lease(st: &AppState, name: &str, holder: &str) -> Option<i64> {
    if st.generation.superseded().is_some() {
        return None;
    }
    let (name, holder) = (name.to_string(), holder.to_string());
    let ms = LEASE.as_millis() as i64;
    store(st, move |s| s.lease_webhook(&name, &holder, now_ms(), ms))
        .await
        .flatten()
}

/// Waits `delay` between two attempts at one event while keeping `holder`'s lease of cursor
/// `name`: renewed now and every third of [`LEASE`] (found by review: the backoff outgrew
/// the lease — up to 300 s against 30 — so another replica took the cursor mid-wait and began
/// the event again at attempt 1, back and forth, and a failing event was never dead-lettered
/// but retried and re-sent forever). `false` when the lease was lost.
pub(crate) async fn hold_through(st: &AppState, name: &str, holder: &str, delay: Duration) -> bool {
    let mut left = delay;
    loop {
        if take_lease(st, name, holder).await.is_none() {
            return false;
        }
        if left.is_zero() {
            // Stopping meanwhile: no new attempt begins (found by review).
            return !*st.stopping.borrow();
        }
        let step = left.min(LEASE / 3);
        // A stopping gateway leaves the wait: the next holder goes on from the cursor.
        if stopped_within(st, step).await {
            return false;
        }
        left -= step;
    }
}

/// Moves cursor `name` past `seq`; whether `holder` still holds its lease.
pub(crate) async fn advance(st: &AppState, name: &str, holder: &str, seq: i64) -> bool {
    let (name, holder) = (name.to_string(), holder.to_string());
    store(st, move |s| s.advance_webhook(&name, &holder, seq))
        .await
        .unwrap_or(false)
}

/// Takes or renews `holder`'s lease of cursor `name` for delivering audit record `seq`:
/// whether `holder` holds it and the cursor is still before `seq`. A cursor at or past `seq`
/// means another replica delivered (or gave up on) the record while this one had lost the
/// lease: it is not sent again, out of order (found by review: the cursor the lease returned
/// was ignored); the caller answers `false` and [`follow`] goes on from the cursor.
pub(crate) async fn lease_for(st: &AppState, name: &str, holder: &str, seq: i64) -> bool {
    take_lease(st, name, holder).await.is_some_and(|c| c < seq)
}

/// Counts one more attempt at delivering audit record `seq` on cursor `name` under `holder`'s
/// lease, renewing it for [`LEASE`] from then so the attempt runs inside it
/// ([`assent_store::Store::count_webhook_attempt`]): the attempt's number, kept in the
/// database across restarts and lease take-overs; `None` when `holder` may not deliver it (or
/// the store failed: the caller stops, and the cursor's next holder goes on counting).
pub(crate) async fn count_attempt(
    st: &AppState,
    name: &str,
    holder: &str,
    seq: i64,
) -> Option<u32> {
    let (name, holder) = (name.to_string(), holder.to_string());
    let lease = (now_ms(), LEASE.as_millis() as i64);
    store(st, move |s| {
        s.count_webhook_attempt(&name, &holder, seq, lease)
    })
    .await
    .flatten()
}

/// Whether `holder` should try cursor `name`'s lease now, and the cursor to read past
/// otherwise. Read without a write: `Ok(())` when `holder` holds the lease, its lease is free
/// or lapsed (judged by the database's clock on PostgreSQL; a lease ending more than 2 ×
/// [`LEASE`] ahead, which no replica writes, is lapsed), or the cursor was never
/// started; `Err(Some(cursor))` while another replica's lease runs; `Err(None)` when the store
/// failed.
async fn worth_a_lease(st: &AppState, name: &str, holder: &str) -> Result<(), Option<i64>> {
    let (n, h) = (name.to_string(), holder.to_string());
    let ms = LEASE.as_millis() as i64;
    match store(st, move |s| s.webhook_cursor(&n, now_ms(), ms)).await {
        None => Err(None),
        Some(None) => Ok(()),
        Some(Some(c)) if c.free || c.holder.as_deref() == Some(h.as_str()) => Ok(()),
        Some(Some(c)) => Err(Some(c.last_seq)),
    }
}

/// Follows cursor `name` for `holder` until the gateway stops ([`AppState::stopping`]):
/// whenever an audit record of `kinds` lies past it and the lease is held, hands the records
/// in order (100 at a time) to `deliver`, which delivers one and moves the cursor, answering
/// `false` when the lease was lost (the new holder goes on from the cursor). Between batches it
/// waits for a change, or 2 s (a holder that died leaves its lease to run out). Stopping, it
/// lets the delivery in flight end — its answer recorded and the cursor moved, so the event is
/// not sent again after a restart — and begins none more; a backoff's wait
/// ([`hold_through`]) ends at once, the cursor left where it is.
///
/// A replica that does not hold the lease reads the shared cursor (a read, no transaction)
/// and follows it; it tries the lease — a write under the database's write lock — only when
/// records lie past the shared cursor and the lease is free or lapsed (found by review: it
/// tried the lease at every wake-up, at every write and `NOTIFY` of every replica, for each
/// webhook and the Slack bot: a write storm growing with replicas × followers).
pub(crate) async fn follow<F, Fut>(
    st: &AppState,
    name: &str,
    holder: &str,
    kinds: &'static [&'static str],
    mut deliver: F,
) where
    F: FnMut(AuditRecord) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut changes = st.changes.subscribe();
    let mut stop = st.stopping.subscribe();
    // The cursor as last read: records past it are worth a look (the lease gives the truth).
    let mut seen = match take_lease(st, name, holder).await {
        Some(c) => c,
        None => match worth_a_lease(st, name, holder).await {
            Err(Some(c)) => c,
            _ => 0,
        },
    };
    while !*stop.borrow() {
        let any = store(st, move |s| s.audit_after(seen, kinds, 1))
            .await
            .is_some_and(|b| !b.is_empty());
        let lease = match any {
            true => match worth_a_lease(st, name, holder).await {
                Ok(()) => take_lease(st, name, holder).await,
                Err(Some(shared)) => {
                    seen = shared;
                    None
                }
                Err(None) => None,
            },
            false => None,
        };
        let Some(cursor) = lease else {
            tokio::select! {
                _ = tokio::time::timeout(Duration::from_secs(2), changes.changed()) => {}
                _ = stop.changed() => {}
            }
            continue;
        };
        seen = cursor;
        let batch = store(st, move |s| s.audit_after(cursor, kinds, 100))
            .await
            .unwrap_or_default();
        for rec in batch {
            let seq = rec.seq;
            // Stopping: the delivery in flight ended above; none more begins.
            if *stop.borrow() || !deliver(rec).await {
                break;
            }
            seen = seq;
        }
    }
}

/// Sleeps `d`, or less when the gateway starts stopping ([`AppState::stopping`]): whether it
/// is stopping.
async fn stopped_within(st: &AppState, d: Duration) -> bool {
    let mut stop = st.stopping.subscribe();
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}
