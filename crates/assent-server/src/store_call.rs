//! The one store-call helper: every handler reaches the (blocking) store through
//! `AppState::store_call` or `AppState::store_task`, which turn a failure into
//! `503 STORE_UNAVAILABLE` (fail closed). They run on the store executor
//! ([`crate::executor`]): one thread that takes every call queued meanwhile and runs them as
//! one batch — one group commit, no hand-off between calls — and answers each only after that
//! commit (issue 13 §4); the heavy calls that read much or must not run inside a batch
//! (`AppState::store_apart`) on tokio's blocking pool, as every call did before (and does
//! with `ASSENT_STORE_EXECUTOR=off`). Kit: imports nothing but the state, the executor and
//! the error type.

use crate::error::ApiError;
use crate::state::AppState;
use assent_store::{Store, StoreError};

/// Runs a blocking closure on tokio's blocking pool; a task that panicked or was cancelled is
/// `503 STORE_UNAVAILABLE`.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::unavailable)
}

impl AppState {
    /// Runs `f` with the store (see the module doc): `Ok` is its value; a
    /// [`StoreError`] (or a lost task) is `503 STORE_UNAVAILABLE`, logged.
    pub(crate) async fn store_call<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        self.store_task(f).await?.map_err(ApiError::unavailable)
    }

    /// Runs `f` with the store (see the module doc) and hands back its result as it is (for
    /// calls whose errors carry their own meaning: decisions, redemptions, plans); only a lost
    /// task is `503 STORE_UNAVAILABLE`.
    pub(crate) async fn store_task<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> T + Send + 'static,
    {
        match &self.executor {
            Some(e) => e.run(false, f).await,
            None => self.store_apart(f).await,
        }
    }

    /// [`AppState::store_task`] of a write with effects outside the store: `settle` runs once
    /// its commit ended, with whether it committed, before any later store call
    /// ([`crate::executor::Executor::run_settled`]; without the executor, right after `f`,
    /// whose writes committed or failed in it).
    pub(crate) async fn store_task_settled<T, F, S>(&self, f: F, settle: S) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> T + Send + 'static,
        S: FnOnce(bool) + Send + 'static,
    {
        match &self.executor {
            Some(e) => e.run_settled(false, f, settle).await,
            None => {
                let done = self.store_apart(f).await;
                settle(done.is_ok());
                done
            }
        }
    }

    /// [`AppState::store_call`] for a call that only reads: on the executor it runs ahead of
    /// the writes queued with it and is answered without waiting for their commit (see
    /// [`crate::executor`]). A long-poll's look is one: a decision's waiter is then answered
    /// one batch sooner.
    pub(crate) async fn store_read<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        let answer = match &self.executor {
            Some(e) => e.run(true, f).await?,
            None => self.store_apart(f).await?,
        };
        answer.map_err(ApiError::unavailable)
    }

    /// [`AppState::store_call`] beside the executor ([`AppState::store_apart`]).
    pub(crate) async fn store_call_apart<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        self.store_apart(f).await?.map_err(ApiError::unavailable)
    }

    /// [`AppState::store_task`] on tokio's blocking pool, beside the executor: for calls
    /// that read much (insights, replay, the audit chain's verification, exports, unbounded
    /// lists), which must not hold up every request queued behind them in a batch, and for
    /// those that must not run inside a batch's open transaction (the readiness check takes
    /// and releases the write lock with `BEGIN IMMEDIATE` on the store's connection).
    pub(crate) async fn store_apart<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> T + Send + 'static,
    {
        let s = self.store.clone();
        blocking(move || f(&s)).await
    }
}

/// The approvals a request's store call expired on its way (`Store::expire_due` before a
/// decision or a read), collected inside the blocking closure and handed to
/// [`AppState::expired`] after it, so they are counted and traced like the sweep's.
#[derive(Clone, Default)]
pub(crate) struct Expired(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Expired {
    /// Applies expiry at `now` (Unix ms) with `s`, remembering what it settled.
    pub(crate) fn sweep(&self, s: &Store, now: i64) -> Result<(), StoreError> {
        let ids = s.expire_due(now)?;
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend(ids);
        Ok(())
    }

    /// What the sweeps settled, taken out.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
