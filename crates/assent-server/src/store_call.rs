//! The one store-call helper: every handler reaches the (blocking) store through
//! `AppState::store_call` or `AppState::store_task`, which turn a failure into
//! `503 STORE_UNAVAILABLE` (fail closed). On SQLite they run on the store executor
//! ([`Executor`]): one thread that takes every call queued meanwhile and runs them as one
//! [`Store::batch`] — one group commit, no hand-off between calls — and answers each only
//! after that commit (issue 13 §4); on PostgreSQL, and for the heavy calls that read much or
//! open connections of their own (`AppState::store_apart`), on tokio's blocking pool. Kit:
//! imports nothing but the state and the error type.

use crate::error::ApiError;
use crate::state::AppState;
use assent_store::{Store, StoreError};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc;

/// Runs a blocking closure on tokio's blocking pool; a task that panicked or was cancelled is
/// `503 STORE_UNAVAILABLE`.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::unavailable)
}

/// The most calls one batch runs: a longer queue is taken in turns, so the first call's
/// answer does not wait for an unbounded number of others.
const MAX_JOBS: usize = 64;

/// Hands a job's value to its caller once the batch's outcome is known: `Ok` (committed, or
/// nothing written), or `Err(why)`, when the value is withheld.
type Deliver = Box<dyn FnOnce(Result<(), String>) + Send>;

/// A store call queued for the executor.
type Job = Box<dyn FnOnce(&Store) -> Deliver + Send>;

/// The store executor (SQLite): a thread running the queued store calls in batches. It ends,
/// with its store handle, when the last clone of its state is dropped.
#[derive(Clone)]
pub struct Executor {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Executor")
    }
}

impl Executor {
    /// Starts the executor thread of `store`. Errors: the thread could not be started.
    pub fn start(store: Arc<Store>) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("assent-store".into())
            .spawn(move || serve_jobs(&store, &queue))?;
        Ok(Self { jobs })
    }

    /// Runs `f` on the executor; its value once its batch committed. `503` when the batch's
    /// commit failed (the value rested on writes that are not durable), `f` panicked, or the
    /// executor is gone.
    async fn run<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> T + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |s: &Store| {
            let value = f(s);
            Box::new(move |outcome: Result<(), String>| {
                let _ = answer.send(outcome.map(|()| value));
            })
        });
        self.jobs
            .send(job)
            .map_err(|_| ApiError::unavailable("the store executor has stopped"))?;
        match answered.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(why)) => Err(ApiError::unavailable(format!(
                "the batch's commit failed: {why}"
            ))),
            Err(_) => Err(ApiError::unavailable("the store call panicked")),
        }
    }
}

/// The executor's loop: waits for a call, takes every call queued meanwhile (at most
/// [`MAX_JOBS`]), runs them in one batch and answers them after its commit. A call that
/// panics ends its batch there (its caller gets `503`; the batch's outcome says whether the
/// others' writes stand); the calls after it run in the next batch.
fn serve_jobs(store: &Store, queue: &mpsc::Receiver<Job>) {
    let mut waiting: VecDeque<Job> = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match queue.recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => return,
            }
        }
        while waiting.len() < MAX_JOBS {
            match queue.try_recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => break,
            }
        }
        let take = waiting.len().min(MAX_JOBS);
        let (delivers, outcome) = store.batch(|| {
            let mut delivers = Vec::with_capacity(take);
            for _ in 0..take {
                let Some(job) = waiting.pop_front() else {
                    break;
                };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(store))) {
                    Ok(deliver) => delivers.push(deliver),
                    Err(_) => break,
                }
            }
            delivers
        });
        for deliver in delivers {
            deliver(outcome.clone());
        }
    }
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
            Some(e) => e.run(f).await,
            None => self.store_apart(f).await,
        }
    }

    /// [`AppState::store_task`] on tokio's blocking pool, beside the executor: for calls
    /// that read much (insights, replay, exports) or open connections of their own (the
    /// readiness check takes the write lock on a fresh one), which must not hold up the
    /// executor's batches or run inside one.
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
