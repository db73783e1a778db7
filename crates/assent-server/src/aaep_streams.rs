//! The AAEP SSE streams of `GET /aaep/v1/events` (Appendix B.1, §5.8): what one open stream
//! reads and sends ([`stream`]), the streams open on each subscription in this process
//! ([`StreamSlot`]: at most [`MAX_STREAMS_PER_SUBSCRIPTION`]), and the closing of a *bare*
//! stream's subscription (one the stream opened itself, without a `subscription_id`) once its
//! last stream here has ended and none came back within [`BARE_GRACE`]. The handler that opens
//! a stream is [`crate::aaep::events`]; this file imports nothing of it.

use crate::state::{AppState, now_ms};
use assent_store::aaep::Subscription;
use axum::response::sse::Event;
use futures_util::stream::unfold;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

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

/// How often an open stream marks its subscription seen (`last_seen_at`).
const TOUCH_EVERY: Duration = Duration::from_secs(3600);

/// How often a stream on a bare stream's subscription (`subscriber_id` `sse:…`) marks it seen:
/// well within [`BARE_GRACE`], so that the replica whose bare stream ended sees this one alive
/// when its grace is over (found by review: reopened by id on another replica, it was marked
/// seen once, at its opening, and closed under its stream 30 s after the first one ended).
const BARE_TOUCH_EVERY: Duration = Duration::from_secs(5);

/// How long a bare stream's subscription stays open after its last stream in this process
/// ended: a client that learnt its id from the `aaep.subscription` announcement may reopen it
/// by id (with `Last-Event-ID`) meanwhile and resume on it. After that it is closed
/// (`aaep.closed`, [`assent_store::Store::close_ended_stream`]); a plain SSE client reconnects
/// to the bare URL with its `Last-Event-ID`, which opens a new subscription after that event,
/// so nothing is lost. Found by review: a bare stream's subscription stayed open for good,
/// counted against the operator's 16 and was read again on every change.
pub(crate) const BARE_GRACE: Duration = Duration::from_secs(30);

/// A bare stream's subscription, to close when its streams have ended: the state to close it
/// with and the operator who owns it.
#[derive(Clone)]
pub(crate) struct Bare {
    /// The gateway's state (its store).
    pub(crate) st: AppState,
    /// The operator who opened it.
    pub(crate) principal: String,
}

/// The streams open on one subscription in this process, oldest first (each its number and
/// the signal that ends it); for a bare stream's subscription, what closes it, and how many
/// times its last stream ended (a close waiting out [`BARE_GRACE`] goes ahead only if no
/// stream came and went meanwhile).
#[derive(Default)]
struct Streams {
    list: VecDeque<(u64, Arc<Ending>)>,
    bare: Option<Bare>,
    ends: u64,
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
    /// A slot on subscription `id` (`bare`: it is a bare stream's, closed when its streams
    /// have ended); when it has [`MAX_STREAMS_PER_SUBSCRIPTION`] already, its oldest stream is
    /// told to end ([`StreamSlot::ended`]) and this one takes its place.
    pub(crate) fn take(id: &str, bare: Option<Bare>) -> Self {
        let mut open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        let entry = open.entry(id.to_string()).or_default();
        if bare.is_some() {
            entry.bare = bare;
        }
        while entry.list.len() >= MAX_STREAMS_PER_SUBSCRIPTION {
            if let Some((_, oldest)) = entry.list.pop_front() {
                oldest.ended.store(true, Ordering::SeqCst);
                oldest.notify.notify_one();
            }
        }
        let number = SLOT_NUMBERS.fetch_add(1, Ordering::SeqCst);
        let ending = Arc::new(Ending::default());
        entry.list.push_back((number, ending.clone()));
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
        entry.list.retain(|(n, _)| *n != self.number);
        if !entry.list.is_empty() {
            return;
        }
        let runtime = tokio::runtime::Handle::try_current();
        let (Some(bare), Ok(rt)) = (entry.bare.clone(), runtime) else {
            // Not bare, or no runtime to close it on (retention removes it).
            open.remove(&self.sub);
            return;
        };
        entry.ends += 1;
        let forget = Forget {
            sub: self.sub.clone(),
            ends: entry.ends,
        };
        // Spawned without the lock: a runtime shutting down drops the task (and `forget`,
        // which takes the lock) at once.
        drop(open);
        rt.spawn(close_bare_later(bare, forget, now_ms()));
    }
}

/// Closes the bare stream subscription of `forget` after [`BARE_GRACE`] unless a stream on it
/// opened in this process meanwhile (its own end schedules the close again: `forget.ends`
/// changed) or in another (the store keeps one seen after `ended_at`, Unix ms).
async fn close_bare_later(bare: Bare, forget: Forget, ended_at: i64) {
    tokio::time::sleep(BARE_GRACE).await;
    if !forget.release() {
        return;
    }
    let sub = forget.sub.clone();
    let Bare { st, principal } = bare;
    let closed = st
        .store_call(move |s| s.close_ended_stream(&sub, &principal, ended_at, now_ms()))
        .await;
    // No stream is woken: none is left on it here, and one elsewhere would have kept it open
    // (found by review: every close woke every stream of every replica).
    if let Err(e) = closed {
        tracing::warn!(error = %e.message, "a bare AAEP stream's subscription not closed");
    }
}

/// The close of a bare stream's subscription waiting out [`BARE_GRACE`]: forgets its entry in
/// [`STREAMS`] when it goes ahead, and when it is dropped unfinished (the runtime shut down),
/// so no entry (and the state it holds) outlives it.
struct Forget {
    sub: String,
    ends: u64,
}

impl Forget {
    /// Removes the entry of `sub` if no stream is open on it and none came and went since
    /// (its `ends` is still this close's); whether it did.
    fn release(&self) -> bool {
        let mut open = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        let idle = open
            .get(&self.sub)
            .is_some_and(|e| e.list.is_empty() && e.ends == self.ends);
        if idle {
            open.remove(&self.sub);
        }
        idle
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

/// The events of subscription `sub` after sequence `after`, `queue` first: read from the
/// store on every change (or every 15 s); ends when the subscription is closed (§5.8.2), the
/// store fails (the subscriber reconnects), or no operator holds the key `key` (SHA-256) it was
/// opened with any more ([`still_holds`]).
pub(crate) fn stream(
    st: AppState,
    sub: (Subscription, StreamSlot),
    key: [u8; 32],
    after: i64,
    queue: VecDeque<Event>,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    let rx = st.changes.subscribe();
    let init = (st, sub, after, queue, rx, key, None);
    unfold(
        init,
        |(st, (sub, slot), mut after, mut queue, mut rx, key, mut touched)| async move {
            loop {
                if !still_holds(&st, &key) || slot.ended() {
                    return None; // revoked by a reload, or a newer stream took its place
                }
                if let Some(e) = queue.pop_front() {
                    let state = (st, (sub, slot), after, queue, rx, key, touched);
                    return Some((Ok::<_, Infallible>(e), state));
                }
                let sub2 = sub.clone();
                // Seen when it opens and hourly, so retention keeps it ([`Store::prune_aaep`]);
                // the time is taken here, before the stream can end, so a bare stream's own
                // mark is never later than its end ([`close_bare_later`]).
                let every = match sub.subscriber_id.starts_with("sse:") {
                    true => BARE_TOUCH_EVERY,
                    false => TOUCH_EVERY,
                };
                let touch = touched.is_none_or(|t: std::time::Instant| t.elapsed() > every);
                let touch = touch.then(|| {
                    touched = Some(std::time::Instant::now());
                    now_ms()
                });
                let got = st
                    .store_task(move |s| {
                        if let Some(at) = touch
                            && let Err(e) = s.touch_subscription(&sub2.id, at)
                        {
                            tracing::warn!(error = %e, "AAEP subscription not marked seen");
                        }
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
                    // A stream that must mark itself seen every 5 s wakes that often (found by
                    // review: it marked itself only as often as it woke, every 15 s).
                    let idle = every.min(Duration::from_secs(15));
                    tokio::select! {
                        _ = tokio::time::timeout(idle, rx.changed()) => {}
                        () = slot.ending.notify.notified() => {}
                    }
                    // Changes coming meanwhile are read together at the next read.
                    tokio::time::sleep(READ_EVERY).await;
                }
            }
        },
    )
}
