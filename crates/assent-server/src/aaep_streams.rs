//! The AAEP SSE streams of `GET /aaep/v1/events` (Appendix B.1, §5.8): what one open stream
//! reads and sends ([`stream`]), the streams open on each subscription in this process
//! ([`StreamSlot`]: at most [`MAX_STREAMS_PER_SUBSCRIPTION`]), and the closing of a *bare*
//! stream's subscription (one the stream opened itself, without a `subscription_id`) once its
//! last stream here has ended and none came back within [`BARE_GRACE`]. The handler that opens
//! a stream is [`crate::aaep::events`]; this file imports nothing of it. Each gateway runs one
//! [`keep`] task: it marks the subscriptions of all the streams open in the process seen in
//! one write per [`BARE_TOUCH_EVERY`], and closes the bare streams' subscriptions no stream
//! marked for [`SWEEP_EVERY`] (their gateway died during the grace).

use crate::state::{AppState, now_ms};
use assent_store::aaep::Subscription;
use axum::response::sse::Event;
use futures_util::stream::unfold;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// The most streams open at once on one subscription in this process: one more ends the
/// oldest (a half-open connection — a laptop put to sleep — keeps its stream until TCP gives
/// up, and a refusal would end a browser's `EventSource` for good).
pub(crate) const MAX_STREAMS_PER_SUBSCRIPTION: usize = 2;

/// The most events a stream reads from the store at a time (an event is at most about 280 KB:
/// four texts of 16,384 characters; a full read is followed by the next at once), and how
/// long a stream that has caught up waits after a change before reading (changes in between
/// are read together). Found by review: a stream read 200 events at a time on every
/// change, so a stream that stopped reading held some 50 MB, and each of N streams read the
/// store on every agent's call.
const READ_EVENTS: u32 = 32;
/// See [`READ_EVENTS`].
const READ_EVERY: Duration = Duration::from_millis(250);
/// How long a stream that has caught up waits for a change before it reads again anyway (it
/// sees its subscription closed by then at the latest).
const IDLE_READ: Duration = Duration::from_secs(15);

/// How often an open stream's subscription is marked seen (`last_seen_at`), well within any
/// retention period (a day at least).
const TOUCH_EVERY: Duration = Duration::from_secs(3600);

/// How often a bare stream's subscription (`subscriber_id` `sse:…`) with a stream open here is
/// marked seen: well within [`BARE_GRACE`], so that the replica whose bare stream ended sees
/// this one alive when its grace is over (found by review: reopened by id on another replica,
/// it was marked seen once, at its opening, and closed under its stream 30 s after the first
/// one ended). The marks of every stream open in the process are written together, in one
/// write per interval ([`keep`]).
pub(crate) const BARE_TOUCH_EVERY: Duration = Duration::from_secs(5);

/// How long apart [`keep`]'s sweep reads the stream marks of the open bare stream
/// subscriptions: one whose marks did not change in between has no stream open on any
/// replica (an open one is marked every [`BARE_TOUCH_EVERY`]) and is closed. Longer than
/// [`BARE_GRACE`] plus one marking interval, so that a stream that ended is given its whole
/// grace even when its gateway died meanwhile.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(45);

/// The most open bare stream subscriptions one sweep reads (at most
/// [`assent_store::subscriptions::MAX_OPEN_PER_OPERATOR`] per operator are open).
const SWEEP_MAX: i64 = 10_000;

/// How long a bare stream's subscription stays open after its last stream in this process
/// ended: a client that learnt its id from the `aaep.subscription` announcement may reopen it
/// by id (with `Last-Event-ID`) meanwhile and resume on it. After that it is closed
/// (`aaep.closed`, [`assent_store::Store::close_ended_stream`]); a plain SSE client reconnects
/// to the bare URL with its `Last-Event-ID`, which opens a new subscription after that event,
/// so nothing is lost. Found by review: a bare stream's subscription stayed open for good,
/// counted against the operator's 16 and was read again on every change.
pub(crate) const BARE_GRACE: Duration = Duration::from_secs(30);

/// A bare stream's subscription (`subscriber_id` `sse:{operator}`, opened by a stream without a
/// `subscription_id`, or reopened by its id), to close when its streams here have ended: the
/// state to close it with and the operator who owns it.
#[derive(Clone)]
pub(crate) struct Bare {
    /// The gateway's state (its store).
    pub(crate) st: AppState,
    /// The operator who opened it.
    pub(crate) principal: String,
}

/// The streams open on one subscription in this process, oldest first (each its number and
/// the signal that ends it); for a bare stream's subscription, what closes it, and the number
/// of the slot whose end last left it without streams (a close waiting out [`BARE_GRACE`]
/// goes ahead only if it is still its own: no stream came and went meanwhile; slot numbers
/// are unique in the process, so a close never takes an entry made after its own was
/// removed); the marks being written for it ([`Touching`]); whether it is marked every
/// [`BARE_TOUCH_EVERY`] (a bare stream's subscription) or every [`TOUCH_EVERY`], and when it
/// was last marked here. Each stream is listed with the store it was opened on ([`owner`]):
/// that gateway's [`keep`] marks it.
#[derive(Default)]
struct Streams {
    list: VecDeque<(u64, Arc<Ending>, usize)>,
    bare: Option<Bare>,
    last_end: Option<u64>,
    touching: Arc<Touching>,
    quick: bool,
    touched: Option<std::time::Instant>,
}

/// The store `st` serves, told apart from the other gateways' of this process (tests run
/// several): its address, stable while a stream of it (which holds `st`) is listed.
fn owner(st: &AppState) -> usize {
    Arc::as_ptr(&st.store) as usize
}

/// How many marks ([`assent_store::Store::touch_subscriptions`]) of one subscription here are
/// being written now ([`keep`]). A write outlives the stream it marks, so a bare stream's
/// close reads the subscription's stream marks only once none is under way (found by review:
/// a mark landing after the read made the close fail, and the subscription stayed open until
/// retention).
struct Touching(watch::Sender<usize>);

impl Default for Touching {
    fn default() -> Self {
        Touching(watch::Sender::new(0))
    }
}

impl Touching {
    /// One mark about to be written: hold it until written.
    fn touch(self: &Arc<Self>) -> Touch {
        self.0.send_modify(|n| *n += 1);
        Touch(self.clone())
    }

    /// Waits until no mark is being written.
    async fn settled(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// One mark being written, counted in [`Touching`] until dropped (when the write is done, or
/// when the task that would have written it is dropped unrun).
pub(crate) struct Touch(Arc<Touching>);

impl Drop for Touch {
    fn drop(&mut self) {
        self.0.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The streams open on each subscription in this process, by subscription id.
static STREAMS: std::sync::LazyLock<std::sync::Mutex<HashMap<String, Streams>>> =
    std::sync::LazyLock::new(Default::default);

/// The numbers [`StreamSlot`]s are told apart by.
static SLOT_NUMBERS: AtomicU64 = AtomicU64::new(0);

/// Tells a stream that a newer one on its subscription took its place.
#[derive(Default)]
pub(crate) struct Ending {
    ended: AtomicBool,
    notify: tokio::sync::Notify,
}

/// One stream counted on its subscription until dropped.
pub(crate) struct StreamSlot {
    sub: String,
    number: u64,
    ending: Arc<Ending>,
}

impl StreamSlot {
    /// A slot on subscription `sub` of gateway `st` (`bare`: it is a bare stream's, closed
    /// when its streams here have ended, whether this stream opened it or reopened it by id);
    /// when it has [`MAX_STREAMS_PER_SUBSCRIPTION`] already, its oldest stream is told to end
    /// ([`StreamSlot::ended`]) and this one takes its place. While listed, `st`'s [`keep`]
    /// marks the subscription seen: every [`BARE_TOUCH_EVERY`] when its subscriber is
    /// `sse:…`, else every [`TOUCH_EVERY`] (it was marked when reopened by id).
    pub(crate) fn take(st: &AppState, sub: &Subscription, bare: Option<Bare>) -> Self {
        let id = sub.id.as_str();
        let mut open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        let entry = open.entry(id.to_string()).or_default();
        if bare.is_some() {
            entry.bare = bare;
        }
        entry.quick |= sub.subscriber_id.starts_with("sse:");
        entry.touched.get_or_insert_with(std::time::Instant::now);
        while entry.list.len() >= MAX_STREAMS_PER_SUBSCRIPTION {
            if let Some((_, oldest, _)) = entry.list.pop_front() {
                oldest.ended.store(true, Ordering::SeqCst);
                oldest.notify.notify_one();
            }
        }
        let number = SLOT_NUMBERS.fetch_add(1, Ordering::SeqCst);
        let ending = Arc::new(Ending::default());
        entry.list.push_back((number, ending.clone(), owner(st)));
        StreamSlot {
            sub: id.to_string(),
            number,
            ending,
        }
    }

    /// Whether a newer stream took this one's place.
    fn ended(&self) -> bool {
        self.ending.ended.load(Ordering::SeqCst)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = open.get_mut(&self.sub) else {
            return;
        };
        entry.list.retain(|(n, _, _)| *n != self.number);
        if !entry.list.is_empty() {
            return;
        }
        let runtime = tokio::runtime::Handle::try_current();
        let (Some(bare), Ok(rt)) = (entry.bare.clone(), runtime) else {
            // Not bare, or no runtime to close it on (retention removes it).
            open.remove(&self.sub);
            return;
        };
        entry.last_end = Some(self.number);
        let forget = Forget {
            sub: self.sub.clone(),
            end: self.number,
            touching: entry.touching.clone(),
            released: AtomicBool::new(false),
        };
        // Spawned without the lock: a runtime shutting down drops the task (and `forget`,
        // which takes the lock) at once.
        drop(open);
        rt.spawn(close_bare_later(bare, forget));
    }
}

/// The first wait before a failed step of a bare stream's close is tried again; each failure
/// doubles it, up to [`BARE_GRACE`], each wait drawn between half and one and a half times
/// that (so closes that failed together, the database down, are not all tried again at once).
const RETRY_FIRST: Duration = Duration::from_secs(1);

/// How long after its last stream here ended a bare stream's close is given, failures and
/// retries included: after that it is given up (logged), and retention removes the
/// subscription ([`assent_store::Store::prune_aaep`]). Found by review: it was tried again
/// for as long as the process ran, every 30 s, in step with every other one that failed.
const GIVE_UP: Duration = Duration::from_secs(600);

/// Closes the bare stream subscription of `forget` once [`BARE_GRACE`] has passed since its
/// last stream here ended, unless a stream on it opened in this process meanwhile (its own
/// end schedules the close again) or anywhere marked it seen: its stream marks, counted in the
/// database, are no longer those read when the grace began
/// ([`assent_store::Store::close_ended_stream`], one compare-and-close statement comparing no
/// clock, so no replica's clock skew closes a live subscription). The marks are read once the
/// ended streams' own marks are written ([`Touching`]). A failed read or close (the database
/// busy or unreachable) is tried again ([`retrying`]) until a newer end of the subscription
/// takes its place or [`GIVE_UP`] has passed (found by review: a failed close was never tried
/// again; only retention removed the subscription, long after).
async fn close_bare_later(bare: Bare, forget: Forget) {
    let Bare { st, principal } = bare;
    let sub = forget.sub.clone();
    let deadline = tokio::time::Instant::now() + GIVE_UP;
    if tokio::time::timeout_at(deadline, forget.touching.settled())
        .await
        .is_err()
    {
        return gave_up(&sub);
    }
    let marks = retrying(&forget, deadline, || {
        let sub = sub.clone();
        st.store_call(move |s| s.stream_marks(&sub))
    })
    .await;
    let Some(Some(marks)) = marks else {
        return; // superseded, given up, or closed already
    };
    tokio::time::sleep(BARE_GRACE).await;
    if !forget.release() {
        return;
    }
    // No stream is woken: none is left on it here, and one elsewhere would have kept it open
    // (found by review: every close woke every stream of every replica).
    retrying(&forget, deadline, || {
        let (sub, principal) = (sub.clone(), principal.clone());
        st.store_call(move |s| s.close_ended_stream(&sub, &principal, marks, now_ms()))
    })
    .await;
}

/// Logs (once per close) that the close of bare stream subscription `sub` was given up.
fn gave_up(sub: &str) {
    tracing::warn!(
        subscription = sub,
        "a bare AAEP stream's subscription not closed after \
        its stream ended (the database kept failing); retention removes it"
    );
}

/// Runs `step` until it succeeds (its value), waiting [`RETRY_FIRST`] after the first failure
/// and twice as long after each next one, up to [`BARE_GRACE`], with jitter; `None` once
/// `forget`'s close is superseded (checked before each attempt: a newer end of the
/// subscription schedules its own) or the next attempt would come after `deadline` (logged).
async fn retrying<T, F, Fut>(
    forget: &Forget,
    deadline: tokio::time::Instant,
    mut step: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::error::ApiError>>,
{
    let mut wait = RETRY_FIRST;
    loop {
        if forget.superseded() {
            return None;
        }
        let e = match step().await {
            Ok(v) => return Some(v),
            Err(e) => e,
        };
        let pause = jittered(wait);
        if tokio::time::Instant::now() + pause > deadline {
            gave_up(&forget.sub);
            return None;
        }
        tracing::debug!(error = %e.message, retry_in_ms = pause.as_millis() as u64,
            "a bare AAEP stream's subscription not closed yet; trying again");
        tokio::time::sleep(pause).await;
        wait = (wait * 2).min(BARE_GRACE);
    }
}

/// `d` times a random factor between one half and one and a half (`d` itself when the OS
/// random source fails).
fn jittered(d: Duration) -> Duration {
    let mut b = [0u8; 2];
    match getrandom::fill(&mut b) {
        Ok(()) => d.mul_f64(0.5 + f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX)),
        Err(_) => d,
    }
}

/// The close of a bare stream's subscription waiting out [`BARE_GRACE`]: forgets its entry in
/// [`STREAMS`] when it goes ahead, and when it is dropped unfinished (the runtime shut down),
/// so no entry (and the state it holds) outlives it.
struct Forget {
    sub: String,
    /// The number of the slot whose end scheduled it.
    end: u64,
    /// The marks the subscription's streams here are writing.
    touching: Arc<Touching>,
    /// Whether it removed the entry ([`Forget::release`]).
    released: AtomicBool,
}

impl Forget {
    /// Removes the entry of `sub` if no stream is open on it and none came and went since
    /// (its last end is still this close's); whether it did.
    fn release(&self) -> bool {
        if self.released.load(Ordering::SeqCst) {
            return false;
        }
        let mut open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        let idle = open
            .get(&self.sub)
            .is_some_and(|e| e.list.is_empty() && e.last_end == Some(self.end));
        if idle {
            open.remove(&self.sub);
            self.released.store(true, Ordering::SeqCst);
        }
        idle
    }

    /// Whether a stream on `sub` opened here since this close was scheduled: its end (if
    /// bare) schedules a close of its own, which takes this one's place.
    fn superseded(&self) -> bool {
        let open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        let entry = open.get(&self.sub);
        match self.released.load(Ordering::SeqCst) {
            true => entry.is_some(),
            false => entry.is_none_or(|e| !e.list.is_empty() || e.last_end != Some(self.end)),
        }
    }
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether an operator in force now holds the key whose SHA-256 is `key` (issue 14 §8: a
/// reload that removed or re-keyed them ends what they opened).
fn still_holds(st: &AppState, key: &[u8; 32]) -> bool {
    let principals = st.principals();
    principals
        .iter()
        .any(|p| &p.key_sha256 == key && p.roles().is_some())
}

/// The events of subscription `sub` after sequence `after`, `queue` first, then — when the
/// stream resumes past a part of the log it skipped, `gap` (`(from, to]` in `seq`) — the
/// confirmations and questions still waiting from that part, page by page
/// ([`assent_store::Store::still_awaiting`]): read from the store on every change (or every
/// 15 s); ends when the subscription is closed (§5.8.2), the store fails (the subscriber
/// reconnects), or no operator holds the key `key` (SHA-256) it was opened with any more
/// ([`still_holds`]).
pub(crate) fn stream(
    st: AppState,
    sub: (Subscription, StreamSlot),
    key: [u8; 32],
    (after, gap): (i64, Option<(i64, i64)>),
    queue: VecDeque<Event>,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    let rx = st.changes.subscribe();
    let init = (st, sub, (after, gap), queue, rx, key);
    unfold(
        init,
        |(st, (sub, slot), (mut after, mut gap), mut queue, mut rx, key)| async move {
            loop {
                if !still_holds(&st, &key) || slot.ended() {
                    return None; // revoked by a reload, or a newer stream took its place
                }
                if let Some(e) = queue.pop_front() {
                    let state = (st, (sub, slot), (after, gap), queue, rx, key);
                    return Some((Ok::<_, Infallible>(e), state));
                }
                if let Some((from, to)) = gap {
                    let Ok(Ok(waiting)) = st
                        .store_task(move |s| s.still_awaiting(from, to, READ_EVENTS))
                        .await
                    else {
                        return None; // the store failed: end the stream; the subscriber reconnects
                    };
                    let full = waiting.len() == READ_EVENTS as usize;
                    gap = waiting.last().filter(|_| full).map(|e| (e.seq, to));
                    queue.extend(waiting.into_iter().map(|e| {
                        Event::default()
                            .event("aaep.event")
                            .id(e.event_id)
                            .data(e.data.to_string())
                    }));
                    continue;
                }
                // Marked seen by the gateway's keeper ([`keep`]), with every other stream here.
                let sub2 = sub.clone();
                let got = st
                    .store_task(move |s| {
                        let open = s
                            .subscription(&sub2.id)
                            .ok()
                            .flatten()
                            .is_some_and(|x| x.closed_at.is_none());
                        (open, s.events_after(&sub2, after, READ_EVENTS))
                    })
                    .await;
                let Ok((open, Ok(events))) = got else {
                    return None; // the store failed: end the stream; the subscriber reconnects
                };
                if !open {
                    return None; // closed (§5.8.2: stop emitting)
                }
                let read = events.len();
                for e in events {
                    after = e.seq;
                    if sub.wants(&e.ty, e.critical) {
                        queue.push_back(
                            Event::default()
                                .event("aaep.event")
                                .id(e.event_id)
                                .data(e.data.to_string()),
                        );
                    }
                }
                // A full read may have more behind it (found by review: a read whose events the
                // subscription's filters all left out waited for the next change).
                if queue.is_empty() && read < READ_EVENTS as usize {
                    tokio::select! {
                        _ = tokio::time::timeout(IDLE_READ, rx.changed()) => {}
                        () = slot.ending.notify.notified() => {}
                    }
                    // Changes coming meanwhile are read together at the next read.
                    tokio::time::sleep(READ_EVERY).await;
                }
            }
        },
    )
}

/// The streams keeper of gateway `st` (started by [`crate::run_with`], aborted at shutdown):
/// every [`BARE_TOUCH_EVERY`] it marks the subscriptions of the streams open on `st` seen, all
/// in one write ([`touch_open`]); at start and every [`SWEEP_EVERY`] it closes the bare stream
/// subscriptions no stream marked since the previous sweep ([`sweep`]).
pub(crate) fn keep(st: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(BARE_TOUCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep: Option<tokio::time::Instant> = None;
        let mut seen = HashMap::new();
        loop {
            every.tick().await;
            touch_open(&st).await;
            if last_sweep.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
                last_sweep = Some(tokio::time::Instant::now());
                seen = sweep(&st, seen).await;
            }
        }
    })
}

/// Marks seen, in one write ([`assent_store::Store::touch_subscriptions`]), the subscriptions
/// with a stream of `st` open here that are due: a bare stream's (`sse:…`) every time, any
/// other once every [`TOUCH_EVERY`]. Each one's [`Touching`] counts the write until it is
/// done, so a close that begins meanwhile reads the marks after it. A failure is logged: the
/// next interval marks them again.
async fn touch_open(st: &AppState) {
    let me = owner(st);
    let (ids, writing): (Vec<String>, Vec<Touch>) = {
        let mut open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        open.iter_mut()
            .filter(|(_, e)| e.list.iter().any(|(_, _, o)| *o == me))
            .filter(|(_, e)| e.quick || e.touched.is_none_or(|t| t.elapsed() >= TOUCH_EVERY))
            .map(|(id, e)| {
                e.touched = Some(std::time::Instant::now());
                (id.clone(), e.touching.touch())
            })
            .unzip()
    };
    if ids.is_empty() {
        return;
    }
    let marked = st
        .store_call(move |s| s.touch_subscriptions(&ids, now_ms()))
        .await;
    drop(writing);
    if let Err(e) = marked {
        tracing::warn!(error = %e.message, "AAEP subscriptions not marked seen");
    }
}

/// Why [`sweep`] closes a subscription (its `aaep.closed` record).
const SWEPT: &str = "no stream marked it for a while: its stream ended (a stream opened \
    without a subscription_id) and its gateway stopped before the grace was over";

/// One sweep of the bare stream subscriptions: reads the stream marks of the open ones and
/// closes those whose marks are still what the previous sweep (`before`, by id) read
/// ([`assent_store::Store::close_unstreamed`], a compare-and-close, so exactly once across
/// replicas), leaving alone those with a stream here or a close of their own waiting out its
/// grace ([`STREAMS`]). Returns this sweep's marks, for the next. A failure is logged; the
/// next sweep starts over.
async fn sweep(st: &AppState, before: HashMap<String, i64>) -> HashMap<String, i64> {
    let read = st.store_call(|s| s.bare_stream_marks(SWEEP_MAX)).await;
    let now = match read {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e.message, "AAEP bare subscriptions not swept");
            return HashMap::new();
        }
    };
    let idle: Vec<(String, String, i64)> = {
        let open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        now.iter()
            .filter(|(id, _, marks)| before.get(id) == Some(marks) && !open.contains_key(id))
            .cloned()
            .collect()
    };
    let marks = now.into_iter().map(|(id, _, m)| (id, m)).collect();
    if idle.is_empty() {
        return marks;
    }
    match st
        .store_call(move |s| s.close_unstreamed(&idle, SWEPT, now_ms()))
        .await
    {
        Ok(closed) if !closed.is_empty() => {
            tracing::info!(
                closed = closed.len(),
                "AAEP bare stream subscriptions closed"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e.message, "AAEP bare subscriptions not swept"),
    }
    marks
}
