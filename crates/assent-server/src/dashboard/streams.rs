//! The dashboard's live streams (`GET /ui/events`) of each session: at most
//! [`MAX_STREAMS_PER_SESSION`] at once, a newer one ending the oldest (a tab closed long ago
//! whose connection lingers). Found by review: one signed-in browser could open streams without
//! bound, each reading the store every 10 s and on every change.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use tokio::sync::Notify;

/// The most `/ui/events` streams one dashboard session keeps open.
pub(crate) const MAX_STREAMS_PER_SESSION: usize = 8;

/// A stream's end, told by a newer stream of its session.
#[derive(Default)]
struct Ending {
    ended: AtomicBool,
    notify: Notify,
}

/// The open streams of each session (by the SHA-256 of its cookie's value): number and end.
type Open = HashMap<[u8; 32], VecDeque<(u64, Arc<Ending>)>>;

static OPEN: LazyLock<Mutex<Open>> = LazyLock::new(Mutex::default);
static NUMBERS: AtomicU64 = AtomicU64::new(0);

/// One stream counted on its session until dropped.
pub(crate) struct StreamSlot {
    session: [u8; 32],
    number: u64,
    ending: Arc<Ending>,
}

impl StreamSlot {
    /// A slot of the session whose cookie's value is `session_id`; when it has
    /// [`MAX_STREAMS_PER_SESSION`] already, its oldest stream is told to end.
    pub(crate) fn take(session_id: &str) -> Self {
        let session: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(session_id).into();
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        let list = open.entry(session).or_default();
        while list.len() >= MAX_STREAMS_PER_SESSION {
            if let Some((_, oldest)) = list.pop_front() {
                oldest.ended.store(true, Ordering::SeqCst);
                oldest.notify.notify_one();
            }
        }
        let number = NUMBERS.fetch_add(1, Ordering::SeqCst);
        let ending = Arc::new(Ending::default());
        list.push_back((number, ending.clone()));
        StreamSlot {
            session,
            number,
            ending,
        }
    }

    /// Completes when a newer stream of the session took this one's place (at once if it did
    /// already).
    pub(crate) async fn ended(&self) {
        loop {
            if self.ending.ended.load(Ordering::SeqCst) {
                return;
            }
            self.ending.notify.notified().await;
        }
    }

    /// Whether a newer stream of the session took this one's place.
    pub(crate) fn is_ended(&self) -> bool {
        self.ending.ended.load(Ordering::SeqCst)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = open.get_mut(&self.session) {
            list.retain(|(n, _)| *n != self.number);
            if list.is_empty() {
                open.remove(&self.session);
            }
        }
    }
}
