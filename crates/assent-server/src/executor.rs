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
use std::time::Instant;

/// The most calls one batch runs: a longer queue is taken in turns, so the first call's
/// answer does not wait for an unbounded number of others.
const MAX_JOBS: usize = 64;

/// Hands a job's value to its caller once the batch's outcome is known: `Ok` (committed, or
/// nothing written), or `Err(why)`, when the value is withheld.
type Deliver = Box<dyn FnOnce(Result<(), String>) + Send>;

/// A store call queued for the executor: whether it only reads, the call, and when it was
/// queued (for [`probe`]).
struct Job {
    read: bool,
    run: Box<dyn FnOnce(&Store) -> Deliver + Send>,
    queued: Instant,
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
        self.run_settled(read, f, |_| {}).await
    }

    /// [`Executor::run`], and `settle` run on the executor thread once the batch's commit
    /// ended — with whether it committed — before any later call runs: for a write whose
    /// effects outside the store must not outlive a commit that failed (a reload puts its
    /// configuration in force in `f` and takes it back in `settle(false)`; found by review: it
    /// was taken back only when the reload's own task next ran, and calls of the next batch
    /// were judged by a configuration never recorded). `settle(false)` when `f` or the batch's
    /// end panicked.
    pub(crate) async fn run_settled<T, F, S>(
        &self,
        read: bool,
        f: F,
        settle: S,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> T + Send + 'static,
        S: FnOnce(bool) + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let run: Box<dyn FnOnce(&Store) -> Deliver + Send> = Box::new(move |s: &Store| {
            // Settled `false` if dropped unsettled: `f` or the batch's end panicked (found by
            // review: the delivery was dropped and `settle` never ran).
            let settle = Settle(Some(settle));
            let value = f(s);
            Box::new(move |outcome: Result<(), String>| {
                settle.done(outcome.is_ok());
                let _ = answer.send(outcome.map(|()| value));
            })
        });
        let job = Job {
            read,
            run,
            queued: Instant::now(),
        };
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

/// A call's `settle` ([`Executor::run_settled`]), run once: with the commit's outcome, or
/// with `false` when dropped before (a panic unwinding past it).
struct Settle<S: FnOnce(bool)>(Option<S>);

impl<S: FnOnce(bool)> Settle<S> {
    fn done(mut self, committed: bool) {
        if let Some(s) = self.0.take() {
            s(committed);
        }
    }
}

impl<S: FnOnce(bool)> Drop for Settle<S> {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s(false);
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
/// those that ran with the batch's outcome as soon as its commit ended
/// ([`Store::batch_then`]: the WAL housekeeping the commit made due runs after the answers).
fn run_batch(store: &Store, jobs: &mut VecDeque<Job>) {
    if jobs.is_empty() {
        return;
    }
    let times = probe::on().then(|| probe::Batch::new(jobs));
    let run = || {
        store.batch_then(
            || {
                let mut delivers = Vec::with_capacity(jobs.len());
                while let Some(job) = jobs.pop_front() {
                    let ran =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.run)(store)));
                    match ran {
                        Ok(deliver) => delivers.push(deliver),
                        Err(_) => break,
                    }
                }
                probe::mark(&times, probe::Step::Ran);
                delivers
            },
            |delivers, outcome| {
                probe::mark(&times, probe::Step::Committed);
                // Each on its own: one panicking does not drop the others unsettled (found by
                // review: their `settle` then ran `false` for a commit that stood).
                for deliver in delivers {
                    let outcome = outcome.clone();
                    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                        deliver(outcome)
                    }));
                    if done.is_err() {
                        tracing::error!("a store call's answer panicked");
                    }
                }
            },
        )
    };
    // A panic past the jobs (ending the batch, the commit observer) drops the answers not yet
    // given (their callers get 503) but never the thread: it would leave every later call
    // without a store.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err() {
        tracing::error!("a store batch panicked while it ended; calls not answered got 503");
    }
    if let Some(t) = times {
        t.done();
    }
}

/// The decision-path probe (issue 13 §4): with `ASSENT_LATENCY_LOG=FILE` in the environment at
/// start, the executor appends one line per batch to `FILE` (`b r|w jobs=N wait=µs ran=µs
/// commit=µs tidy=µs`: the oldest job's time in the queue, running the jobs, the commit, the
/// WAL housekeeping after the answers) and the long-poll one per answer from a handed-over
/// record (`lp woke=µs`: the decision's wake to the answer's body). Off (the default) it costs
/// one load of a `OnceLock` per batch. Lines are buffered and written every 0.5 s, so the
/// last half second of a killed process is lost. `FILE` is made 0600 and opened without
/// following a link (one that is a link turns the probe off). For measurements only.
pub(crate) mod probe {
    use super::Job;
    use std::cell::Cell;
    use std::collections::VecDeque;
    use std::io::Write;
    use std::sync::{Mutex, OnceLock};
    use std::time::{Duration, Instant};

    /// The open log: its buffer and when it was last written out.
    struct Log {
        file: std::fs::File,
        buf: Vec<u8>,
        flushed: Instant,
    }

    fn log() -> &'static Option<Mutex<Log>> {
        static LOG: OnceLock<Option<Mutex<Log>>> = OnceLock::new();
        LOG.get_or_init(|| {
            let path = std::env::var_os("ASSENT_LATENCY_LOG")?;
            // 0600 and never through a link: a gateway run by root with the log in a shared
            // directory appends to nothing another user planted there.
            let file = std::os::unix::fs::OpenOptionsExt::custom_flags(
                std::os::unix::fs::OpenOptionsExt::mode(
                    std::fs::OpenOptions::new().create(true).append(true),
                    0o600,
                ),
                rustix::fs::OFlags::NOFOLLOW.bits() as i32,
            )
            .open(path)
            .ok()?;
            Some(Mutex::new(Log {
                file,
                buf: Vec::new(),
                flushed: Instant::now(),
            }))
        })
    }

    /// Whether the probe is on.
    pub(crate) fn on() -> bool {
        log().is_some()
    }

    /// Appends `line` (and a newline) when the probe is on.
    pub(crate) fn line(line: impl FnOnce() -> String) {
        let Some(log) = log() else { return };
        let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
        l.buf.extend_from_slice(line().as_bytes());
        l.buf.push(b'\n');
        if l.flushed.elapsed() >= Duration::from_millis(500) {
            let buf = std::mem::take(&mut l.buf);
            let _ = l.file.write_all(&buf);
            l.flushed = Instant::now();
        }
    }

    /// The steps of a batch the probe times.
    pub(crate) enum Step {
        /// Its jobs ran.
        Ran,
        /// Its commit ended (answers about to be given).
        Committed,
    }

    /// One batch's times.
    pub(crate) struct Batch {
        read: bool,
        jobs: usize,
        wait: Duration,
        start: Instant,
        ran: Cell<Option<Instant>>,
        committed: Cell<Option<Instant>>,
    }

    impl Batch {
        /// A batch of `jobs` starting now.
        pub(super) fn new(jobs: &VecDeque<Job>) -> Self {
            let start = Instant::now();
            let oldest = jobs.iter().map(|j| j.queued).min().unwrap_or(start);
            Self {
                read: jobs.front().is_some_and(|j| j.read),
                jobs: jobs.len(),
                wait: start - oldest,
                start,
                ran: Cell::new(None),
                committed: Cell::new(None),
            }
        }

        /// The batch is over (its answers given, its housekeeping done): writes its line.
        pub(crate) fn done(self) {
            let end = Instant::now();
            let ran = self.ran.get().unwrap_or(end);
            let committed = self.committed.get().unwrap_or(end);
            let us = |d: Duration| d.as_micros();
            line(|| {
                format!(
                    "b {} jobs={} wait={} ran={} commit={} tidy={}",
                    if self.read { "r" } else { "w" },
                    self.jobs,
                    us(self.wait),
                    us(ran - self.start),
                    us(committed.saturating_duration_since(ran)),
                    us(end.saturating_duration_since(committed)),
                )
            });
        }
    }

    /// Marks `step` of the batch `times` (nothing when the probe is off).
    pub(crate) fn mark(times: &Option<Batch>, step: Step) {
        if let Some(t) = times {
            let now = Some(Instant::now());
            match step {
                Step::Ran => t.ran.set(now),
                Step::Committed => t.committed.set(now),
            }
        }
    }
}
