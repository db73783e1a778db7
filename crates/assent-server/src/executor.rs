//! The store executor (issue 13 §4): one thread that takes every store call queued
//! meanwhile, runs the reads among a batch of them (at most 64) first, answered at
//! once, then the rest as one [`Store::batch`] — one group commit, no hand-off between calls
//! — answering each only after that commit. A batch is taken in turns between the
//! [`Lane`]s with calls waiting — one principal's, one address's, the gateway's own — one call
//! of each in turn, so one principal's backlog delays another's call by at most a batch or
//! two, not by the whole backlog ([`Turns`]). Handlers reach it through
//! `AppState::store_task` (`store_call.rs`); the request's lane is set around its handler by
//! `edge::throttle` ([`in_lane`]). Imports nothing of the server but the error type.

use crate::error::ApiError;
use assent_store::Store;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

/// The most calls one batch runs: a longer queue is taken in turns, so the first call's
/// answer does not wait for an unbounded number of others.
const MAX_JOBS: usize = 64;

/// Hands a job's value to its caller once the batch's outcome is known: `Ok` (committed, or
/// nothing written), or `Err(why)`, when the value is withheld.
type Deliver = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Whose a store call is, for the executor's turns ([`Turns`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    /// A request of a principal whose bearer key or dashboard session `edge::throttle` found,
    /// by name: all its keys, agents and sessions share one lane.
    Principal(Arc<str>),
    /// A request that showed no known key or session (a sign-in, an SSO or passkey step, a
    /// Slack click, a wrong key without a body), by client network ([`Lane::of`]; `None`: not
    /// known).
    Address(Option<IpAddr>),
    /// The gateway's own work — the sweeps, webhook deliveries, a reload by signal — and any
    /// call made outside a request's handler (a task spawned off it, a stream's body).
    Gateway,
}

impl Lane {
    /// The lane of a request: its principal's (`known`, the name `edge::throttle` found), else
    /// its client's network's (`net`: the address, an IPv6 one's /64, as the throttle counts
    /// them — found by review: by address, one host rotating through its /64 took a lane, and
    /// a turn, per address).
    pub(crate) fn of(known: Option<&str>, net: Option<IpAddr>) -> Lane {
        match known {
            Some(name) => Lane::Principal(name.into()),
            None => Lane::Address(net),
        }
    }
}

tokio::task_local! {
    /// The lane of the store calls the current task makes ([`in_lane`]).
    static LANE: Lane;
}

/// Runs `f` with its store calls in `lane` (calls made by tasks it spawns are not: they are
/// the [`Lane::Gateway`]'s).
pub(crate) async fn in_lane<F: std::future::Future>(lane: Lane, f: F) -> F::Output {
    LANE.scope(lane, f).await
}

/// `stream` with its store calls in the lane of the task that builds it: a response body's
/// (an AAEP or dashboard event stream's reads) is polled after its handler returned, outside
/// [`in_lane`], and its calls would be the gateway's.
pub(crate) fn stream_in_lane<S: futures_util::Stream>(stream: S) -> InLane<S> {
    InLane {
        lane: current_lane(),
        inner: Box::pin(stream),
    }
}

/// A stream whose store calls are in `lane` ([`stream_in_lane`]).
pub(crate) struct InLane<S> {
    lane: Lane,
    inner: std::pin::Pin<Box<S>>,
}

impl<S: futures_util::Stream> futures_util::Stream for InLane<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let this = &mut *self;
        LANE.sync_scope(this.lane.clone(), || this.inner.as_mut().poll_next(cx))
    }
}

/// The lane of a store call made now: the task's ([`in_lane`]), else the gateway's.
fn current_lane() -> Lane {
    LANE.try_with(Clone::clone).unwrap_or(Lane::Gateway)
}

/// A store call queued for the executor: its lane, whether it only reads, the call, and when
/// it was queued (for [`probe`]).
struct Job {
    lane: Lane,
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
            lane: current_lane(),
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

/// The executor's loop: waits for a call, takes every call queued meanwhile into its lane
/// ([`Turns`]), takes a batch of at most [`MAX_JOBS`] in turns between the lanes, runs the
/// reads among them in one batch and answers them, then the others in a second batch answered
/// after its commit. A call that panics ends its batch there (its caller gets `503`; the
/// batch's outcome says whether the others' writes stand); the calls after it go back to the
/// front of their lanes.
fn serve_jobs(store: &Store, queue: &mpsc::Receiver<Job>) {
    let mut turns = Turns::default();
    loop {
        if turns.is_empty() {
            match queue.recv() {
                Ok(job) => turns.push(job),
                Err(_) => return,
            }
        }
        // Every call queued meanwhile (each caller has one in flight: the queue is as long as
        // the requests waiting on the store), so that a lane that just got a call has its turn
        // in this batch.
        while let Ok(job) = queue.try_recv() {
            turns.push(job);
        }
        let (mut reads, mut writes): (VecDeque<Job>, VecDeque<Job>) =
            turns.take(MAX_JOBS).into_iter().partition(|j| j.read);
        run_batch(store, &mut reads);
        run_batch(store, &mut writes);
        // What a panic left unrun goes first next round, in its order.
        for job in writes.into_iter().rev().chain(reads.into_iter().rev()) {
            turns.push_front(job);
        }
    }
}

/// The calls waiting for the executor, by lane: each lane's in the order they came, and the
/// lanes with calls in the order their turns come ([`Turns::take`]). Attack (found by review
/// of issue 13's fairness): the calls were taken first come, first served, so one agent key
/// at its request rate (the default `rate_limits`, 1,000/s, is above what one writer serves
/// here) or holding many requests in flight queued hundreds of calls ahead of every other
/// principal's proposal, decision and long-poll look.
#[derive(Default)]
struct Turns {
    lanes: HashMap<Lane, VecDeque<Job>>,
    /// The lanes with calls waiting, next turn first; each once.
    ring: VecDeque<Lane>,
}

impl Turns {
    /// Whether no call waits.
    fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Queues `job` last in its lane; a lane that had none takes its turn after the others.
    fn push(&mut self, job: Job) {
        let q = self.lanes.entry(job.lane.clone()).or_default();
        if q.is_empty() {
            self.ring.push_back(job.lane.clone());
        }
        q.push_back(job);
    }

    /// Queues `job` first in its lane (a call a panic left unrun); a lane that had none takes
    /// the next turn.
    fn push_front(&mut self, job: Job) {
        let q = self.lanes.entry(job.lane.clone()).or_default();
        if q.is_empty() {
            self.ring.push_front(job.lane.clone());
        }
        q.push_front(job);
    }

    /// Takes at most `max` calls, one of each lane in turn: the first of the lane whose turn
    /// it is, which then waits behind the others if it has more.
    fn take(&mut self, max: usize) -> Vec<Job> {
        let mut batch = Vec::with_capacity(max.min(MAX_JOBS));
        while batch.len() < max {
            let Some(lane) = self.ring.pop_front() else {
                break;
            };
            let Some(q) = self.lanes.get_mut(&lane) else {
                continue;
            };
            if let Some(job) = q.pop_front() {
                batch.push(job);
            }
            if q.is_empty() {
                self.lanes.remove(&lane);
            } else {
                self.ring.push_back(lane);
            }
        }
        batch
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

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
