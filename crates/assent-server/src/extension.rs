//! The longest AAEP timeout extension (AAEP §6.4.2) honoured for an open subscription, as this
//! process last read it from the store: added to each new approval's timeout
//! (`gate::propose_in_store`) without a store round trip. Re-read after every subscription
//! change, here or on another replica (`crate::replicas`), and after the listener reconnects.
//!
//! Found by review: the re-reads (the listener's thread and the request that opened or closed
//! a subscription) each read the store and then stored what they read, unordered, so one that
//! read before another replica closed a subscription could store its value after the
//! listener's newer one, and approvals kept the extension until the next change. Each re-read
//! now takes a ticket before it reads ([`TimeoutExtension::ask`]) and its answer stands only if
//! no later-asked re-read answered first ([`TimeoutExtension::answer`]): a change is followed
//! by a re-read asked after it, whose answer no earlier-asked one can overwrite.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The extension in force (ms) and the ordering of its re-reads (see the module doc).
#[derive(Debug, Default)]
pub struct TimeoutExtension {
    asked: AtomicU64,
    /// The ticket of the answer in force, and that answer (ms).
    now: Mutex<(u64, i64)>,
}

/// A re-read's place in line, taken before it reads the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

impl TimeoutExtension {
    /// The extension in force, in ms (0 without an open subscription that was honoured one).
    pub fn ms(&self) -> i64 {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).1
    }

    /// Takes the next ticket; call it before reading the store.
    pub fn ask(&self) -> Ticket {
        Ticket(self.asked.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Puts `ms`, read under `ticket`, in force unless a re-read asked later answered already;
    /// whether it did.
    pub fn answer(&self, ticket: Ticket, ms: i64) -> bool {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        let newer = ticket.0 > now.0;
        if newer {
            *now = (ticket.0, ms);
        }
        newer
    }

    /// Re-reads the extension with `read` (the store's `timeout_extension_ms`), in line; a
    /// failed read keeps the extension in force and is logged.
    pub fn refresh<E: std::fmt::Display>(&self, read: impl FnOnce() -> Result<i64, E>) {
        let ticket = self.ask();
        self.settle(ticket, read());
    }

    /// Settles the re-read asked under `ticket` with what it `read`: [`TimeoutExtension::answer`]
    /// for a value; a failure keeps the extension in force and is logged.
    pub fn settle<E: std::fmt::Display>(&self, ticket: Ticket, read: Result<i64, E>) {
        match read {
            Ok(ms) => {
                self.answer(ticket, ms);
            }
            Err(e) => {
                tracing::warn!(error = %e, "the AAEP timeout extension could not be re-read; the one in force stays")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TimeoutExtension;

    /// Review finding: a re-read that read before another replica closed a subscription
    /// stored its (longer) extension after the listener's newer answer. An answer asked
    /// earlier never overwrites one asked later, in whichever order they arrive.
    #[test]
    fn an_earlier_asked_re_read_never_overwrites_a_later_one() {
        let x = TimeoutExtension::default();
        assert_eq!(x.ms(), 0);
        let (early, late) = (x.ask(), x.ask());
        assert!(x.answer(late, 0), "the later one answers first");
        assert!(
            !x.answer(early, 3_600_000),
            "the earlier one arrives after it"
        );
        assert_eq!(x.ms(), 0);
        let next = x.ask();
        assert!(x.answer(next, 600_000));
        assert_eq!(x.ms(), 600_000);
        x.refresh(|| Err::<i64, _>("the store is down"));
        assert_eq!(x.ms(), 600_000, "a failed read keeps what is in force");
        x.refresh(|| Ok::<_, String>(0));
        assert_eq!(x.ms(), 0);
    }
}
