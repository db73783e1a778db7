//! Long-poll waiters, woken per key (issue 10 §13): a decision on approval `A` wakes only the
//! requests waiting on `A` (key `approval:A`; questions and tool reviews have their own keys),
//! instead of every long-poll doing a store trip on every change. Each principal may hold at
//! most `max_waiters_per_principal` waits at once (`429 TOO_MANY_WAITERS` past it).

use crate::error::ApiError;
use axum::http::StatusCode;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// One look at what a long poll waits for (see [`Waiters::long_poll`]).
pub(crate) enum Look<T> {
    /// Settled: answer this now.
    Done(T),
    /// Still pending: answer this at the deadline; look again on a wake, after the given
    /// time (e.g. at its own expiry) or at the deadline, whichever comes first.
    Pending(T, Duration),
}

/// Default `max_waiters_per_principal`.
pub const DEFAULT_MAX_WAITERS_PER_PRINCIPAL: usize = 1024;

/// How long a long-poll on an item still pending past its expiry waits before it looks
/// again: the expiry sweep left it (a damaged row the sweep skips, or a sweep not yet run).
pub(crate) const OVERDUE_RECHECK: Duration = Duration::from_secs(1);

/// When a long-poll on an item pending until `expires_at` (Unix ms) looks again at `now`: 5 ms
/// after the expiry, or [`OVERDUE_RECHECK`] once it is past. Found by review: past the
/// expiry the wait was 5 ms, so a long-poll on a damaged row (which the sweep skips, leaving
/// it pending) read the store — an expiry sweep and its write transaction — 200 times a
/// second for its whole wait. Never overflows on an edited `expires_at`.
pub(crate) fn recheck_after(expires_at: i64, now: i64) -> Duration {
    match expires_at.saturating_sub(now) {
        left if left > 0 => Duration::from_millis(left as u64 + 5),
        _ => OVERDUE_RECHECK,
    }
}

/// The waiter key of approval `id`.
pub(crate) fn approval_key(id: &str) -> String {
    format!("approval:{id}")
}

/// The waiter key of clarification `id`.
pub(crate) fn clarification_key(id: &str) -> String {
    format!("clarification:{id}")
}

/// The waiter key of tool review `id`.
pub(crate) fn review_key(id: &str) -> String {
    format!("review:{id}")
}

/// What settled a key, handed to its waiters with the wake ([`Waiters::wake_with`]).
pub(crate) type Settled = Arc<dyn Any + Send + Sync>;

/// The waiters of one key: their wake-up, how many they are, and what settled the key when
/// the wake said so.
#[derive(Default)]
struct Slot {
    notify: Arc<Notify>,
    count: usize,
    settled: Option<Settled>,
    /// When the wake that handed `settled` over was given (for the executor's probe).
    woken: Option<std::time::Instant>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("count", &self.count)
            .field("settled", &self.settled.is_some())
            .finish()
    }
}

/// Who waits on what.
#[derive(Debug)]
pub struct Waiters {
    keys: Mutex<HashMap<String, Slot>>,
    principals: Mutex<HashMap<String, usize>>,
    cap: usize,
}

impl Default for Waiters {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_WAITERS_PER_PRINCIPAL)
    }
}

impl Waiters {
    /// Waiters with at most `cap` concurrent waits per principal.
    pub fn new(cap: usize) -> Self {
        Self {
            keys: Mutex::default(),
            principals: Mutex::default(),
            cap: cap.max(1),
        }
    }

    /// The most waits one principal may hold at once (`max_waiters_per_principal`).
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Starts waiting on `key` for `principal`; the wait ends when the returned [`Wait`] is
    /// dropped. Errors: `429 TOO_MANY_WAITERS` when the principal already holds `cap` waits.
    pub fn register(self: &Arc<Self>, key: &str, principal: &str) -> Result<Wait, ApiError> {
        {
            let mut p = self.principals.lock().unwrap_or_else(|e| e.into_inner());
            let n = p.entry(principal.to_string()).or_insert(0);
            if *n >= self.cap {
                let cap = self.cap;
                drop(p);
                return Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "TOO_MANY_WAITERS",
                    format!(
                        "`{principal}` already holds {cap} waiting requests (max_waiters_per_principal); wait without ?wait= or let some finish"
                    ),
                ));
            }
            *n += 1;
        }
        let notify = {
            let mut k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            let slot = k.entry(key.to_string()).or_default();
            slot.count += 1;
            slot.notify.clone()
        };
        Ok(Wait {
            waiters: self.clone(),
            key: key.to_string(),
            principal: principal.to_string(),
            notify,
        })
    }

    /// A long poll of `seconds` (0: one look) by `principal` on `key`: looks, and while the
    /// look is [`Look::Pending`] and the deadline has not passed, waits for a wake of `key`
    /// (registered before each look, so none is lost) or the look's own recheck time. Errors:
    /// the look's, and `429 TOO_MANY_WAITERS` (see [`Waiters::register`]).
    pub(crate) async fn long_poll<T, F, Fut>(
        self: &Arc<Self>,
        key: &str,
        principal: &str,
        seconds: u64,
        mut look: F,
    ) -> Result<T, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Look<T>, ApiError>>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        // Only a long-poll registers (and counts toward the principal's cap).
        let waiting = match seconds {
            0 => None,
            _ => Some(self.register(key, principal)?),
        };
        loop {
            let notified = waiting.as_ref().map(|w| w.notify().notified());
            tokio::pin!(notified);
            if let Some(n) = notified.as_mut().as_pin_mut() {
                n.enable();
            }
            let (v, recheck) = match look().await? {
                Look::Done(v) => return Ok(v),
                Look::Pending(v, recheck) => (v, recheck),
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(v);
            }
            let sleep = (deadline - now).min(recheck);
            match notified.as_mut().as_pin_mut() {
                Some(n) => {
                    let _ = tokio::time::timeout(sleep, n).await;
                }
                None => tokio::time::sleep(sleep).await,
            }
        }
    }

    /// How many requests wait in a long-poll now (every principal's).
    pub fn waiting(&self) -> usize {
        let p = self.principals.lock().unwrap_or_else(|e| e.into_inner());
        p.values().sum()
    }

    /// Wakes every request waiting on `key` (no-op when none waits).
    pub fn wake(&self, key: &str) {
        let k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = k.get(key) {
            slot.notify.notify_waiters();
        }
    }

    /// Wakes every request waiting on `key` with what settled it (`settled()` is called only
    /// when someone waits): their next look may answer from it without a store trip
    /// ([`Waiters::settled`]). Call it only with the committed, final state of the key (it
    /// stays until the last waiter of the key is gone).
    pub(crate) fn wake_with(&self, key: &str, settled: impl FnOnce() -> Settled) {
        let waited = {
            let k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            k.contains_key(key)
        };
        if !waited {
            return;
        }
        // Built outside the lock (a record may be large); a waiter that left meanwhile leaves
        // nothing to hand it to, and one that came meanwhile is woken with it too.
        let value = settled();
        let mut k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = k.get_mut(key) {
            slot.settled = Some(value);
            slot.woken = Some(std::time::Instant::now());
            slot.notify.notify_waiters();
        }
    }

    /// What settled `key`, when a wake handed it over ([`Waiters::wake_with`]) and someone
    /// still waits on it.
    pub(crate) fn settled(&self, key: &str) -> Option<Settled> {
        let k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        k.get(key).and_then(|slot| slot.settled.clone())
    }

    /// When the wake that handed `key`'s settled value over was given (see
    /// [`Waiters::settled`]): for the latency probe (`executor::probe`).
    pub(crate) fn woken_at(&self, key: &str) -> Option<std::time::Instant> {
        let k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        k.get(key).and_then(|slot| slot.woken)
    }

    /// Wakes every waiter to look again: after this replica's listener reconnected to the
    /// database, when changes made meanwhile by other replicas were not heard.
    pub fn wake_all(&self) {
        let k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        for slot in k.values() {
            slot.notify.notify_waiters();
        }
    }
}

/// One open wait (see [`Waiters::register`]).
pub struct Wait {
    waiters: Arc<Waiters>,
    key: String,
    principal: String,
    notify: Arc<Notify>,
}

impl Wait {
    /// The notification to await. Create it (and `enable` it) before reading the state it
    /// waits for, so a wake in between is not lost.
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        {
            let mut k = self.waiters.keys.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = k.get_mut(&self.key) {
                slot.count -= 1;
                if slot.count == 0 {
                    k.remove(&self.key);
                }
            }
        }
        let mut p = self
            .waiters
            .principals
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = p.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                p.remove(&self.principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_poll_looks_again_just_after_the_expiry_and_slowly_past_it() {
        assert_eq!(recheck_after(10_000, 4_000), Duration::from_millis(6_005));
        assert_eq!(recheck_after(10_000, 9_999), Duration::from_millis(6));
        // Past the expiry (the sweep left it pending): not every 5 ms.
        for now in [10_000, 10_001, 99_999_999] {
            assert_eq!(recheck_after(10_000, now), OVERDUE_RECHECK);
        }
        // Edited expiries at the ends of the range neither panic nor wrap.
        assert_eq!(recheck_after(i64::MIN, i64::MAX), OVERDUE_RECHECK);
        assert!(recheck_after(i64::MAX, i64::MIN) > Duration::from_secs(1 << 40));
    }
}
