//! The relay's two outgoing queues (to the client's stdout, to the upstream's stdin), each
//! drained by one writer, with how many lines wait in it ([`Lines::depth`]). Found by review:
//! the queues were unbounded, so a client flooding requests at an upstream that reads slowly
//! (or an upstream flooding a client that reads slowly) grew the proxy's memory without
//! bound. At most [`MAX_QUEUED`] lines wait in one before the relay stops adding to it: a
//! client request is then answered with an error ([`super::client`]), a client notification
//! dropped with a warning, and the readers wait for room ([`Lines::room`]) before reading on
//! (the pipe behind them fills, and the writer at its far end waits).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Notify, mpsc};

/// Lines one queue holds before the relay adds no more (each at most 16 MiB, the line bound).
pub(super) const MAX_QUEUED: usize = 1024;

/// How many lines wait in one queue, and a wake-up each time one is taken.
#[derive(Default)]
struct Depth {
    n: AtomicUsize,
    taken: Notify,
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

    /// Waits until fewer than [`MAX_QUEUED`] lines wait in the queue.
    pub(super) async fn room(&self) {
        loop {
            let taken = self.depth.taken.notified();
            if !self.full() {
                return;
            }
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
}
