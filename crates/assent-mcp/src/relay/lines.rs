//! The relay's two outgoing queues (to the client's stdout, to the upstream's stdin), each
//! drained by one writer, with how many lines and bytes wait in it ([`Lines::depth`],
//! [`Lines::bytes`]). Found by review: the queues were unbounded, so a client flooding
//! requests at an upstream that reads slowly (or an upstream flooding a client that reads
//! slowly) grew the proxy's memory without bound. At most [`MAX_QUEUED`] lines, or
//! [`MAX_QUEUED_BYTES`] bytes of text, wait in one before the relay stops adding to it: a
//! client request is then answered with an error ([`super::client`]), a client notification
//! dropped with a warning, a client's answer to an upstream's request owed until there is room
//! ([`Owed`]: the upstream waits for it; the relay reads the client on meanwhile),
//! and the readers wait for room ([`Lines::room`]) before reading on
//! (the pipe behind them fills, and the writer at its far end waits). Found by review: the
//! bound was in lines only, and a line may be 16 MiB, so one queue could hold 16 GiB. Both
//! bounds are checked before a line is added, never while it is: a queue under them takes
//! one more line of any size (so a line larger than the byte bound still passes once the
//! queue has drained below it, and nothing waits for room that can never come), and holds at
//! most the bound plus that one line. Once a queue's writer
//! is gone (its end closed, or a write failed) the queue is closed: [`Lines::room`] returns
//! at once and what is sent is dropped (found by review: a client that died with its queue
//! full left both readers waiting for room for ever, so the proxy never read stdin's end,
//! never withdrew the approvals it held, and never stopped its upstream).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::{Notify, mpsc};

/// `line` holding no more memory than its text: a line read or serialised into a buffer
/// that grew by doubling holds up to twice its length. Found by the memory test of a client
/// answering a flood of an upstream's requests with 1 MiB each: the queue and the answers
/// [`Owed`] counted their lines' lengths, so each held close to twice its byte bound (the
/// proxy peaked near 300 MiB for 80 MiB of bounds). Shrinking a large buffer gives its tail
/// back without copying the text.
pub(super) fn held(mut line: String) -> String {
    line.shrink_to_fit();
    line
}

/// Lines one queue holds before the relay adds no more (each at most 16 MiB, the line bound).
pub(super) const MAX_QUEUED: usize = 1024;

/// Bytes one queue holds (the lines' buffers, [`held`]: their UTF-8, before any era
/// translation) before the relay adds no more: 64 MiB, four lines of the 16 MiB line bound. With the one line a
/// queue under the bound still takes, one queue holds at most 80 MiB (and a little more for
/// the proxy's own short answers, which are not refused).
pub(super) const MAX_QUEUED_BYTES: usize = 64 << 20;

/// How many lines and bytes wait in one queue, a wake-up each time one is taken, and whether
/// its writer is gone (set once, with a wake-up, when its [`LinesRx`] is dropped).
#[derive(Default)]
struct Depth {
    n: AtomicUsize,
    bytes: AtomicUsize,
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
    /// The line is [`held`] first: what the queue counts is the memory it keeps.
    pub(super) fn send(&self, line: String) -> Result<(), mpsc::error::SendError<String>> {
        let line = held(line);
        let len = line.capacity();
        self.depth.n.fetch_add(1, Ordering::SeqCst);
        self.depth.bytes.fetch_add(len, Ordering::SeqCst);
        self.tx.send(line).inspect_err(|_| {
            self.depth.n.fetch_sub(1, Ordering::SeqCst);
            self.depth.bytes.fetch_sub(len, Ordering::SeqCst);
        })
    }

    /// How many lines wait in the queue.
    pub(super) fn depth(&self) -> usize {
        self.depth.n.load(Ordering::SeqCst)
    }

    /// How many bytes the lines waiting in the queue hold (their buffers, [`held`]).
    pub(super) fn bytes(&self) -> usize {
        self.depth.bytes.load(Ordering::SeqCst)
    }

    /// Whether [`MAX_QUEUED`] lines or more, or [`MAX_QUEUED_BYTES`] bytes or more, wait in
    /// the queue.
    pub(super) fn full(&self) -> bool {
        self.depth() >= MAX_QUEUED || self.bytes() >= MAX_QUEUED_BYTES
    }

    /// Whether the queue's writer is gone (nothing sent is written any more).
    pub(super) fn closed(&self) -> bool {
        self.depth.closed.load(Ordering::SeqCst)
    }

    /// Waits until the queue is not [`Lines::full`] (fewer than [`MAX_QUEUED`] lines and
    /// [`MAX_QUEUED_BYTES`] bytes wait in it), or its writer is gone ([`Lines::closed`]: no
    /// line will be taken any more, and waiting would be for ever). An empty queue is never
    /// full, whatever the size of the line to come.
    pub(super) async fn room(&self) {
        loop {
            let taken = self.depth.taken.notified();
            if !self.full() || self.closed() {
                return;
            }
            tracing::debug!(
                depth = self.depth(),
                bytes = self.bytes(),
                "a queue is full: reading paused"
            );
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
    /// Counts one line (and its bytes) out of the queue.
    fn took(&self, line: Option<String>) -> Option<String> {
        if let Some(l) = &line {
            self.depth.n.fetch_sub(1, Ordering::SeqCst);
            self.depth.bytes.fetch_sub(l.capacity(), Ordering::SeqCst);
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

/// Bytes of client lines the thread reading stdin holds ahead of the relay (16 MiB, one line
/// of the line bound): past it, the thread reads no further line until the relay took some
/// ([`ReadAhead`]). Found by review: the lines read ahead were bounded at 64 in number only,
/// 16 MiB each, so a client that read no answers (pausing the relay, its queue full) while
/// writing long lines had the proxy hold a gigabyte.
pub(super) const MAX_READ_AHEAD_BYTES: usize = 16 << 20;

/// How many bytes of lines are read ahead, between a reading thread (which waits, blocking,
/// for room: [`ReadAhead::add_blocking`]) and the relay that takes them
/// ([`ReadAhead::took`]); closed (nothing waits any more) once the relay stops taking.
pub(super) struct ReadAhead {
    /// Bytes read ahead, and whether the relay stopped taking lines.
    held: std::sync::Mutex<(usize, bool)>,
    taken: std::sync::Condvar,
    max: usize,
}

impl ReadAhead {
    /// Nothing read ahead; at most `max` bytes (and one line more) held.
    pub(super) fn new(max: usize) -> Self {
        Self {
            held: std::sync::Mutex::new((0, false)),
            taken: std::sync::Condvar::new(),
            max,
        }
    }

    /// Blocks the reading thread until fewer than `max` bytes are read ahead, then counts a
    /// line of `len` bytes (a line of any size passes when fewer are held: none is refused,
    /// and none waits for room that cannot come). `false` once [`ReadAhead::close`]d: the
    /// thread should stop reading.
    pub(super) fn add_blocking(&self, len: usize) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        while held.0 >= self.max && !held.1 {
            held = match self.taken.wait(held) {
                Ok(h) => h,
                Err(_) => return false,
            };
        }
        if held.1 {
            return false;
        }
        held.0 = held.0.saturating_add(len);
        true
    }

    /// The relay took a line of `len` bytes: its room is free again.
    pub(super) fn took(&self, len: usize) {
        if let Ok(mut held) = self.held.lock() {
            held.0 = held.0.saturating_sub(len);
        }
        self.taken.notify_all();
    }

    /// The relay takes no more lines: a thread waiting for room wakes and stops.
    pub(super) fn close(&self) {
        if let Ok(mut held) = self.held.lock() {
            held.1 = true;
        }
        self.taken.notify_all();
    }

    /// How many bytes are read ahead now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.lock().map_or(0, |h| h.0)
    }
}

/// The client's answers to the upstream's open requests (sampling, elicitation, roots; each
/// its line under the upstream's own id) that found the upstream's queue full, oldest first,
/// sent there in order once it has room (`Relay::pay_owed`) while the relay reads on. At
/// most [`MAX_OWED`] answers and [`MAX_OWED_BYTES`] bytes (one answer always fits an empty
/// list); one more is dropped with a warning. Dropped whole when the client leaves.
#[derive(Default)]
pub(super) struct Owed {
    pub(super) answers: std::collections::VecDeque<String>,
    bytes: usize,
}

/// Client answers [`Owed`] to the upstream at most.
pub(super) const MAX_OWED: usize = 64;

/// Bytes of client answers [`Owed`] to the upstream at most (16 MiB, one line of the line
/// bound: any one answer fits an empty list).
pub(super) const MAX_OWED_BYTES: usize = 16 << 20;

impl Owed {
    /// Adds `answer` behind those owed, unless the list is at its bound; `false`: dropped.
    pub(super) fn push(&mut self, answer: String) -> bool {
        let answer = held(answer);
        let over = self.answers.len() >= MAX_OWED
            || (!self.answers.is_empty() && self.bytes + answer.capacity() > MAX_OWED_BYTES);
        if over {
            return false;
        }
        self.bytes += answer.capacity();
        self.answers.push_back(answer);
        true
    }

    /// The oldest answer owed.
    pub(super) fn pop(&mut self) -> Option<String> {
        let answer = self.answers.pop_front()?;
        self.bytes -= answer.capacity();
        Some(answer)
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

    /// Attack (memory): a client (or upstream) writes long lines faster than the far end
    /// reads, hoping the proxy queues them all: the line bound alone let one queue hold
    /// 1,024 lines of 16 MiB. Past the byte bound the queue is full (requests refused,
    /// readers paused) though few lines wait; it has room again once a line is taken.
    #[tokio::test]
    async fn a_queue_of_few_long_lines_is_full_at_the_byte_bound() {
        let (tx, mut rx) = queue();
        let line = "x".repeat(MAX_QUEUED_BYTES / 4);
        for _ in 0..3 {
            tx.send(line.clone()).unwrap();
            assert!(!tx.full(), "{} bytes in {} lines", tx.bytes(), tx.depth());
        }
        tx.send(line.clone()).unwrap();
        assert!(tx.full(), "{} bytes in 4 lines is the bound", tx.bytes());
        assert_eq!(tx.bytes(), MAX_QUEUED_BYTES);
        let waiter = tokio::spawn({
            let tx = tx.clone();
            async move { tx.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "room while full");
        assert_eq!(rx.recv().await.map(|l| l.len()), Some(line.len()));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("room once a line was taken")
            .unwrap();
        assert_eq!(tx.bytes(), 3 * line.len());
    }

    /// Attack (memory): lines read or serialised into buffers grown by doubling hold up to
    /// twice their text; the queue and the answers owed counted the text, so each held up
    /// to twice its bound. A line is kept shrunk to its text, and what is counted is what it
    /// holds: the bytes counted in and out are its buffer's.
    #[tokio::test]
    async fn a_line_is_counted_by_the_memory_it_holds_and_holds_no_more_than_its_text() {
        let text = "z".repeat((1 << 20) + 60);
        let mut line = String::with_capacity(2 << 20);
        line.push_str(&text);
        let (tx, mut rx) = queue();
        tx.send(line).unwrap();
        let counted = tx.bytes();
        let out = rx.recv().await.unwrap();
        assert_eq!((counted, tx.bytes()), (out.capacity(), 0));
        assert!(out.capacity() < text.len() + 64, "{}", out.capacity());
        let mut owed = Owed::default();
        let mut answer = String::with_capacity(2 << 20);
        answer.push_str(&text);
        assert!(owed.push(answer));
        assert!(owed.bytes < text.len() + 64, "{}", owed.bytes);
        assert_eq!(owed.bytes, owed.answers[0].capacity());
        let back = owed.pop().unwrap();
        assert_eq!((owed.bytes, back), (0, text));
    }

    /// A line larger than the byte bound passes an empty queue (nothing would ever make room
    /// for it), and the queue is full after it until it is taken; no deadlock.
    #[tokio::test]
    async fn a_line_over_the_byte_bound_passes_an_empty_queue_then_fills_it() {
        let (tx, mut rx) = queue();
        assert!(!tx.full());
        tokio::time::timeout(std::time::Duration::from_secs(5), tx.room())
            .await
            .expect("an empty queue has room");
        tx.send("y".repeat(MAX_QUEUED_BYTES + 1)).unwrap();
        assert!(tx.full());
        assert_eq!(rx.try_recv().map(|l| l.len()), Some(MAX_QUEUED_BYTES + 1));
        assert_eq!((tx.depth(), tx.bytes()), (0, 0));
        assert!(!tx.full());
    }

    /// Attack (memory): a client pauses the relay (reading none of its answers) and writes
    /// long lines, which the stdin thread read ahead, 64 of them, whatever their size. The
    /// thread now waits at the byte bound until the relay takes a line, and stops once the
    /// relay is gone.
    #[test]
    fn the_stdin_thread_reads_ahead_at_most_the_byte_bound() {
        let ahead = Arc::new(ReadAhead::new(100));
        assert!(ahead.add_blocking(60));
        assert!(
            ahead.add_blocking(500),
            "a long line passes under the bound"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn({
            let ahead = ahead.clone();
            move || tx.send(ahead.add_blocking(10)).unwrap()
        });
        let waited = rx.recv_timeout(std::time::Duration::from_millis(200));
        assert!(waited.is_err(), "read on past the bound: {waited:?}");
        ahead.took(500);
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(5)), Ok(true));
        t.join().unwrap();
        assert_eq!(ahead.held(), 70);
        assert!(ahead.add_blocking(40));
        let t = std::thread::spawn({
            let ahead = ahead.clone();
            move || ahead.add_blocking(1)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        ahead.close();
        assert!(!t.join().unwrap(), "a closed read-ahead stops its thread");
    }
}
