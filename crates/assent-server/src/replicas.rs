//! Replicas on one PostgreSQL database (issue 13 §2): how this process learns of what the
//! others committed. The store NOTIFYs one channel per kind of change at every commit, the
//! payload only an id ([`Change`]); [`hear`] starts the store's listener thread and turns each
//! notification into the same wake-ups a local write causes: the long-polls (and MCP holds)
//! waiting on that approval, question or review, and the event streams (AAEP, dashboard,
//! webhooks), which re-read the shared event log from their own `Last-Event-ID`. After the
//! listener (re)connects ([`Heard::Resync`]) everything waiting looks again, because
//! notifications sent while it was away are lost. Nothing is decided here; SQLite needs none
//! of it (one process).

use crate::extension::TimeoutExtension;
use crate::waiters::{Waiters, approval_key, clarification_key, review_key};
use assent_store::Store;
use assent_store::db::{Change, DbError, Heard, Listener, listen};
use std::sync::Arc;
use tokio::sync::watch;

/// Starts hearing the changes committed to the database at `url` (by any replica, this one
/// included: a spare wake-up costs one look) and waking the server state's parts: `waiters`
/// per key, the streams' `changes` signal, and `extension` (the AAEP timeout extension, ms)
/// re-read from `store` when subscriptions change. The returned listener stops its thread
/// when dropped. Errors: `Unusable` when the thread cannot be started (connection failures
/// are retried by the thread with backoff, not reported here).
pub(crate) fn hear(
    url: &str,
    waiters: Arc<Waiters>,
    changes: Arc<watch::Sender<u64>>,
    store: Arc<Store>,
    extension: Arc<TimeoutExtension>,
) -> Result<Listener, DbError> {
    let streams = move || changes.send_modify(|v| *v += 1);
    let refresh_extension = move || extension.refresh(|| store.timeout_extension_ms());
    listen(url, move |heard| match heard {
        Heard::Changed(change) => {
            match &change {
                Change::Approval(id) => waiters.wake(&approval_key(id)),
                Change::Clarification(id) => waiters.wake(&clarification_key(id)),
                Change::Review(id) => waiters.wake(&review_key(id)),
                Change::Subscriptions => refresh_extension(),
                Change::Events => {}
            }
            streams();
        }
        Heard::Resync => {
            waiters.wake_all();
            refresh_extension();
            streams();
        }
    })
}
