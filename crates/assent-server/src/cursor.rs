//! The audit log as a leased event stream, shared by the outgoing webhooks (`webhooks.rs`)
//! and the Slack bot's messages (`slack/outbox.rs`): each reader has a named cursor in the
//! store's webhook delivery state, and only the holder of its lease (renewed before every
//! attempt, [`LEASE`] without renewal) delivers, so replicas deliver each event once and none
//! is lost while the receiver is down or the gateway restarts. Store failures are logged and
//! read as "nothing now" (the loop looks again).

use crate::state::{AppState, now_ms};
use assent_store::audit::AuditRecord;
use assent_store::{Store, StoreError};
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

/// Takes or renews `holder`'s lease of cursor `name`: the cursor (an audit `seq`) when held.
/// A cursor new to the database starts at the end of the log.
pub(crate) async fn take_lease(st: &AppState, name: &str, holder: &str) -> Option<i64> {
    let (name, holder) = (name.to_string(), holder.to_string());
    let ms = LEASE.as_millis() as i64;
    store(st, move |s| s.lease_webhook(&name, &holder, now_ms(), ms))
        .await
        .flatten()
}

/// Moves cursor `name` past `seq`; whether `holder` still holds its lease.
pub(crate) async fn advance(st: &AppState, name: &str, holder: &str, seq: i64) -> bool {
    let (name, holder) = (name.to_string(), holder.to_string());
    store(st, move |s| s.advance_webhook(&name, &holder, seq))
        .await
        .unwrap_or(false)
}

/// Follows cursor `name` for `holder` forever: whenever an audit record of `kinds` lies past
/// it and the lease is held, hands the records in order (100 at a time) to `deliver`, which
/// delivers one and moves the cursor, answering `false` when the lease was lost (the new
/// holder goes on from the cursor). Between batches it waits for a change, or 2 s (a holder
/// that died leaves its lease to run out).
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
    // The cursor as last read: a hint for when to take the lease (the lease gives the truth).
    let mut seen = take_lease(st, name, holder).await.unwrap_or(0);
    loop {
        let any = store(st, move |s| s.audit_after(seen, kinds, 1))
            .await
            .is_some_and(|b| !b.is_empty());
        let lease = match any {
            true => take_lease(st, name, holder).await,
            false => None,
        };
        let Some(cursor) = lease else {
            let _ = tokio::time::timeout(Duration::from_secs(2), changes.changed()).await;
            continue;
        };
        seen = cursor;
        let batch = store(st, move |s| s.audit_after(cursor, kinds, 100))
            .await
            .unwrap_or_default();
        for rec in batch {
            let seq = rec.seq;
            if !deliver(rec).await {
                break;
            }
            seen = seq;
        }
    }
}
