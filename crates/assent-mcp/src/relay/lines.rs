//! The relay's two outgoing queues (to the client's stdout, to the upstream's stdin), each
//! drained by one writer, with how many lines wait in it ([`Lines::depth`]). Found by review:
//! the queues were unbounded, so a client flooding requests at an upstream that reads slowly
//! (or an upstream flooding a client that reads slowly) grew the proxy's memory without
//! bound. At most [`MAX_QUEUED`] lines wait in one before the relay stops adding to it: a
//! client request is then answered with an error ([`super::client`]), a client notification
//! dropped with a warning, and the readers wait for room ([`Lines::room`]) before reading on
//! (the pipe behind them fills, and the writer at its far end waits). Once a queue's writer
//! is gone (its end closed, or a write failed) the queue is closed: [`Lines::room`] returns
//! at once and what is sent is dropped (found by review: a client that died with its queue
//! full left both readers waiting for room for ever, so the proxy never read stdin's end,
//! never withdrew the approvals it held, and never stopped its upstream).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::{Notify, mpsc};

/// Lines one queue holds before the relay adds no more (each at most 16 MiB, the line bound).
pub(super) const MAX_QUEUED: usize = 1024;

/// How many lines wait in one queue, a wake-up each time one is taken, and whether its
/// writer is gone (set once, with a wake-up, when its [`LinesRx`] is dropped).
#[derive(Default)]
struct Depth {
    n: AtomicUsize,
    taken: Notify,
    closed: AtomicBool,
}

/// The sending end of one queue (cloned into every task that writes to that end).
#[derive(Clone)]
pub(super) struct Lines {
    tx: mpsc::UnboundedSender<String>,
    depth: Arc<Depth>,
}

/// A [`Lines`] that does not keep its queue open (the writer ends once every [`Lines`] is
/// gone).
#[derive(Clone)]
pub(super) struct WeakLines {
    tx: mpsc::WeakUnboundedSender<String>,
    depth: Arc<Depth>,
}

/// The receiving end of one queue (its writer's).
pub(super) struct LinesRx {
    rx: mpsc::UnboundedReceiver<String>,
    depth: Arc<Depth>,
}

/// A new queue: its sending and receiving ends.
pub(super) fn queue() -> (Lines, LinesRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let depth = Arc::new(Depth::default());
    (
        Lines {
            tx,
            depth: depth.clone(),
        },
        LinesRx { rx, depth },
    )
}

impl Lines {
    /// Queues `line` (one JSON-RPC message, no newline); `Err` with it when the writer is
    /// gone. Never refuses for depth: the callers that must bound it ask [`Lines::full`].
    pub(super) fn send(&self, line: String) -> Result<(), mpsc::error::SendError<String>> {
        self.depth.n.fetch_add(1, Ordering::SeqCst);
        self.tx.send(line).inspect_err(|_| {
            self.depth.n.fetch_sub(1, Ordering::SeqCst);
        })
    }

    /// How many lines wait in the queue.
    pub(super) fn depth(&self) -> usize {
        self.depth.n.load(Ordering::SeqCst)
    }

    /// Whether [`MAX_QUEUED`] lines or more wait in the queue.
    pub(super) fn full(&self) -> bool {
        self.depth() >= MAX_QUEUED
    }

    /// Whether the queue's writer is gone (nothing sent is written any more).
    pub(super) fn closed(&self) -> bool {
        self.depth.closed.load(Ordering::SeqCst)
    }

    /// Waits until fewer than [`MAX_QUEUED`] lines wait in the queue, or its writer is gone
    /// ([`Lines::closed`]: no line will be taken any more, and waiting would be for ever).
    pub(super) async fn room(&self) {
        loop {
            let taken = self.depth.taken.notified();
            if !self.full() || self.closed() {
                return;
            }
            tracing::debug!(depth = self.depth(), "a queue is full: reading paused");
            taken.await;
        }
    }

    /// This queue's [`WeakLines`].
    pub(super) fn downgrade(&self) -> WeakLines {
        WeakLines {
            tx: self.tx.downgrade(),
            depth: self.depth.clone(),
        }
    }
}

impl WeakLines {
    /// The queue's [`Lines`], while one is still held elsewhere.
    pub(super) fn upgrade(&self) -> Option<Lines> {
        Some(Lines {
            tx: self.tx.upgrade()?,
            depth: self.depth.clone(),
        })
    }
}

/// The writer is gone: the queue closes ([`Lines::closed`]) and every [`Lines::room`]
/// waiting wakes.
impl Drop for LinesRx {
    fn drop(&mut self) {
        self.rx.close();
        self.depth.closed.store(true, Ordering::SeqCst);
        self.depth.taken.notify_waiters();
    }
}

impl LinesRx {
    /// Counts one line out of the queue.
    fn took(&self, line: Option<String>) -> Option<String> {
        if line.is_some() {
            self.depth.n.fetch_sub(1, Ordering::SeqCst);
            self.depth.taken.notify_waiters();
        }
        line
    }

    /// The next line; `None` once every sender is gone and the queue is empty.
    pub(super) async fn recv(&mut self) -> Option<String> {
        let line = self.rx.recv().await;
        self.took(line)
    }

    /// [`LinesRx::recv`], blocking the thread (not for async code).
    pub(super) fn blocking_recv(&mut self) -> Option<String> {
        let line = self.rx.blocking_recv();
        self.took(line)
    }

    /// The next line when one waits now.
    pub(super) fn try_recv(&mut self) -> Option<String> {
        let line = self.rx.try_recv().ok();
        self.took(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_depth_counts_lines_in_the_queue_and_room_waits_for_one_taken() {
        let (tx, mut rx) = queue();
        for n in 0..MAX_QUEUED {
            tx.send(n.to_string()).unwrap();
        }
        assert!(tx.full());
        let waiter = tokio::spawn({
            let tx = tx.clone();
            async move { tx.room().await }
        });
        assert_eq!(rx.recv().await.as_deref(), Some("0"));
        waiter.await.unwrap();
        assert_eq!(tx.depth(), MAX_QUEUED - 1);
        assert_eq!(rx.try_recv().as_deref(), Some("1"));
        assert_eq!(tx.depth(), MAX_QUEUED - 2);
    }

    /// Review finding: a writer that ended with its queue full (its end closed) left every
    /// `room` waiting for ever. Dropping the receiver closes the queue: a waiting `room`
    /// returns, a later one returns at once, and a line sent after is refused.
    #[tokio::test]
    async fn a_full_queue_whose_writer_is_gone_has_room_and_takes_no_line() {
        let (tx, rx) = queue();
        for n in 0..MAX_QUEUED {
            tx.send(n.to_string()).unwrap();
        }
        let waiter = tokio::spawn({
            let tx = tx.clone();
            async move { tx.room().await }
        });
        tokio::task::yield_now().await;
        drop(rx);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("room returned once the writer was gone")
            .unwrap();
        assert!(tx.closed());
        tx.room().await;
        assert!(tx.send("late".into()).is_err());
    }
}
