//! The store executor (issue 13 §4): one thread that takes every store call queued
//! meanwhile (at most 64), runs the reads among them first in a batch answered at
//! once, then the rest as one [`Store::batch`] — one group commit, no hand-off between calls
//! — answering each only after that commit. Handlers reach
//! it through `AppState::store_task` (`store_call.rs`). Imports nothing of the server but the
//! error type.

use crate::error::ApiError;
use assent_store::Store;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc;

/// The most calls one batch runs: a longer queue is taken in turns, so the first call's
/// answer does not wait for an unbounded number of others.
const MAX_JOBS: usize = 64;

/// Hands a job's value to its caller once the batch's outcome is known: `Ok` (committed, or
/// nothing written), or `Err(why)`, when the value is withheld.
type Deliver = Box<dyn FnOnce(Result<(), String>) + Send>;

/// A store call queued for the executor: whether it only reads, and the call.
struct Job {
    read: bool,
    run: Box<dyn FnOnce(&Store) -> Deliver + Send>,
}

/// The store executor: a thread running the queued store calls in batches. It ends,
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
    ///
    /// `read`: the call only reads (a long-poll's look), so it runs before the writes queued
    /// with it, in a batch of reads that commits nothing and is answered at once instead of
    /// after the writes' commit. Marking a call that writes `read` costs no safety: a batch
    /// of reads that wrote is committed before it is answered like any other.
    pub(crate) async fn run<T, F>(&self, read: bool, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> T + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let run: Box<dyn FnOnce(&Store) -> Deliver + Send> = Box::new(move |s: &Store| {
            let value = f(s);
            Box::new(move |outcome: Result<(), String>| {
                let _ = answer.send(outcome.map(|()| value));
            })
        });
        let job = Job { read, run };
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
/// [`MAX_JOBS`]), runs the reads among them in one batch and answers them, then the others in
/// a second batch answered after its commit. A call that panics ends its batch there (its
/// caller gets `503`; the batch's outcome says whether the others' writes stand); the calls
/// after it run in the next round.
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
        let (mut reads, mut writes): (VecDeque<Job>, VecDeque<Job>) =
            waiting.drain(..take).partition(|j| j.read);
        run_batch(store, &mut reads);
        run_batch(store, &mut writes);
        // What a panic left unrun goes first next round, in its order.
        for job in writes.into_iter().rev().chain(reads.into_iter().rev()) {
            waiting.push_front(job);
        }
    }
}

/// Runs `jobs` from the front as one batch until they are done or one panics, and answers
/// those that ran with the batch's outcome.
fn run_batch(store: &Store, jobs: &mut VecDeque<Job>) {
    if jobs.is_empty() {
        return;
    }
    let run = || {
        store.batch(|| {
            let mut delivers = Vec::with_capacity(jobs.len());
            while let Some(job) = jobs.pop_front() {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.run)(store))) {
                    Ok(deliver) => delivers.push(deliver),
                    Err(_) => break,
                }
            }
            delivers
        })
    };
    // A panic past the jobs (ending the batch, the commit observer) drops the batch's answers
    // (their callers get 503) but never the thread: it would leave every later call without a
    // store.
    let Ok((delivers, outcome)) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
    else {
        tracing::error!("a store batch panicked while it ended; its calls were answered 503");
        return;
    };
    for deliver in delivers {
        deliver(outcome.clone());
    }
}
