//! A stdio upstream's transport ([`ChildTransport`]): its child process, rmcp's line transport
//! over two pipes of the hub's own — the child's stdout weighed line by line before rmcp
//! parses it ([`weigh_upstream`]), the child's stdin written by [`to_child`], which passes
//! rmcp's lines and, between them, the hub's answers to upstream requests too heavy to parse
//! or past [`MAX_REPLIES`] (bounded in count, bytes and id length), and which lets a child that
//! keeps a line waiting [`STALL`] go as gone — and its end in a graceful order: stdin closed,
//! then `SIGTERM`, then `SIGKILL` ([`ChildTransport::close`]).

use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::DuplexStream;
use tokio_util::sync::CancellationToken;

/// The longest line read from a stdio upstream: one byte short of rmcp's own bound
/// (`DEFAULT_MAX_LINE_LENGTH`, 16 MiB with its newline); a longer one is skipped to its end,
/// never held whole, and dropped with a warning.
const MAX_UPSTREAM_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH - 1;

/// How many answers to the upstream's too-heavy requests wait to be written to its stdin; past
/// that (an upstream sending such requests without reading its stdin) one is dropped with a
/// warning.
const MAX_REFUSALS: usize = 64;

/// The most bytes those answers may take while they wait (1 MiB), whatever their count; past
/// it one is dropped with a warning.
const MAX_REFUSAL_BYTES: usize = 1 << 20;

/// How long the child may keep a line of the hub's waiting — not yet taken whole, counting only
/// the time spent waiting on the child, not on rmcp — before it is taken for gone: 30 s. Its
/// stdin and stdout are then let go ([`to_child`]), which fails rmcp's sends blocked behind that
/// line (so they no longer hold their messages) and ends the connection as a dead upstream's
/// ends. Found by review: a child that stopped reading held every later call's arguments in
/// rmcp's queued sends past the call's end.
const STALL: Duration = Duration::from_secs(30);

/// How many of rmcp's answers to the upstream's own requests (`ping`, sampling, roots…) may
/// wait to be written to its stdin before [`weigh_upstream`] hands rmcp no further request
/// of the upstream's: 64. Past it, each request is answered `-32000` ("busy") through the
/// refusals' queue (bounded: [`MAX_REFUSALS`], [`MAX_REFUSAL_BYTES`]), or dropped with a
/// warning when that is full; the upstream's answers and notifications still pass, and its
/// stdout is read on. Found by review: rmcp answers each request in a task of its own, not
/// awaited, so an upstream that wrote pings as fast as it could while reading its stdin slowly
/// (never slowly enough for [`STALL`]) had the gateway hold an answer for each, without bound
/// ([`Replies`]); then, that stopping to read its stdout there could deadlock a
/// single-threaded upstream (its stdout write blocked while the hub's write to its stdin
/// waited behind a big call), taken for gone after [`STALL`].
const MAX_REPLIES: usize = 64;

/// How long a closing upstream is given to end once its stdin is closed, then again once it
/// was sent `SIGTERM`, before it is killed (`SIGKILL`): 1 s and 2 s, so that closing every
/// upstream (side by side) fits in [`CLOSE_WITHIN`].
const AFTER_EOF: Duration = Duration::from_secs(1);
const AFTER_SIGTERM: Duration = Duration::from_secs(2);

/// How long closing a stdio upstream takes at most ([`ChildTransport::close`]): its stdin
/// flushed and closed (within [`AFTER_EOF`]), [`AFTER_EOF`] to end, [`AFTER_SIGTERM`] after
/// `SIGTERM`, and a moment for `SIGKILL`.
pub(super) const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// A stdio upstream's transport: its child process (killed when this is dropped), rmcp's line
/// transport reading the child's stdout as [`weigh_upstream`] passes it on and writing to the
/// child's stdin through [`to_child`]. Found by review: rmcp's `TokioChildProcess` parsed
/// every line of up to 16 MiB, and `[0,0,…]` parsed holds some 33 times its text, so an
/// upstream streaming such notifications drove the gateway (which serves every agent) out of
/// memory.
pub(super) struct ChildTransport {
    rw: AsyncRwTransport<RoleClient, DuplexStream, DuplexStream>,
    child: tokio::process::Child,
    /// The task copying the child's stdout to `rw`, line by line, weighed.
    reader: tokio::task::JoinHandle<()>,
    /// The task writing `rw`'s lines and the hub's refusals to the child's stdin; it closes
    /// stdin when it ends.
    writer: Option<tokio::task::JoinHandle<()>>,
    /// Cancelled to end both tasks: by [`ChildTransport::close`] (stdin closed whatever rmcp's
    /// sends hold), or by the writer when the child stalls ([`STALL`]).
    stop: CancellationToken,
    /// rmcp's answers to the upstream's requests not yet written ([`MAX_REPLIES`]).
    replies: Arc<Replies>,
}

impl ChildTransport {
    /// Starts `prog` with `args` and extra environment `env`, its stdin and stdout piped, and
    /// its stderr piped into the gateway's log line by line ([`log_stderr`]). Errors: it
    /// cannot be started.
    pub(super) fn spawn(
        prog: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        withheld: &[String],
    ) -> std::io::Result<Self> {
        use std::process::Stdio;
        let mut command = tokio::process::Command::new(prog);
        for var in withheld {
            command.env_remove(var);
        }
        let mut child = command
            .args(args)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(log_stderr(stderr, prog.to_string()));
        }
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the upstream's stdio was not piped"));
        };
        let (rmcp_in, feed) = tokio::io::duplex(1 << 16);
        let (rmcp_out, drain) = tokio::io::duplex(1 << 16);
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_REFUSALS);
        let queued = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let refuse = Refusals {
            tx,
            queued: queued.clone(),
        };
        let refusals = (rx, queued);
        let replies = Arc::new(Replies::default());
        let reader = weigh_upstream(stdout, feed, (refuse, replies.clone()), stop.clone());
        Ok(Self {
            rw: AsyncRwTransport::new(rmcp_in, rmcp_out),
            child,
            reader: tokio::spawn(reader),
            writer: Some(tokio::spawn(to_child(drain, stdin, refusals, stop.clone()))),
            stop,
            replies,
        })
    }

    /// Sends `SIGTERM` to the child (still unreaped: its pid is its own); failures are logged.
    fn sigterm(&self) {
        #[cfg(unix)]
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p.try_into().ok()?))
            && let Err(e) = rustix::process::kill_process(pid, rustix::process::Signal::TERM)
        {
            tracing::warn!(error = %e, "could not send SIGTERM to an MCP upstream");
        }
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(w) = &self.writer {
            w.abort();
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    /// Sends `item` through rmcp's line transport; an answer (a result or an error) is
    /// counted among the [`Replies`] waiting until it is written (or its send dropped).
    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        use rmcp::model::JsonRpcMessage;
        let answer = matches!(item, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_));
        let waiting = answer.then(|| Waiting::new(&self.replies));
        let send = self.rw.send(item);
        async move {
            let sent = send.await;
            drop(waiting);
            sent
        }
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleClient>>> + Send {
        self.rw.receive()
    }

    /// Ends the child gracefully, as rmcp's own child transport does: its stdin closed (what
    /// was written flushed first, within [`AFTER_EOF`]), [`AFTER_EOF`] to end; then `SIGTERM`
    /// and [`AFTER_SIGTERM`]; then killed. Found by review: this transport, written to weigh
    /// the child's stdout, went from a closed stdin straight to `SIGKILL`, so an upstream that
    /// saves its state on `SIGTERM` lost it at every gateway stop. Then, that rmcp's own close
    /// waits for its write lock, which a send blocked on a child that reads nothing holds for
    /// ever, so neither EOF nor `SIGTERM` was sent: now rmcp's close and the flush share
    /// [`AFTER_EOF`], and past it the writer is stopped (stdin dropped: EOF) whatever rmcp holds.
    async fn close(&mut self) -> Result<(), Self::Error> {
        let flushed_by = tokio::time::Instant::now() + AFTER_EOF;
        let closed = tokio::time::timeout_at(flushed_by, self.rw.close())
            .await
            .unwrap_or(Ok(()));
        if let Some(mut writer) = self.writer.take()
            && tokio::time::timeout_at(flushed_by, &mut writer)
                .await
                .is_err()
        {
            self.stop.cancel();
            writer.abort();
            let _ = writer.await;
        }
        if ended(&mut self.child, AFTER_EOF).await {
            return closed;
        }
        self.sigterm();
        if !ended(&mut self.child, AFTER_SIGTERM).await {
            tracing::warn!("an MCP upstream did not end on SIGTERM: killed");
            let _ = self.child.kill().await;
        }
        closed
    }
}

/// Whether `child` ends within `wait`.
async fn ended(child: &mut tokio::process::Child, wait: Duration) -> bool {
    tokio::time::timeout(wait, child.wait()).await.is_ok()
}

/// rmcp's answers to the upstream's requests that wait to be written ([`ChildTransport`]'s
/// `send`).
#[derive(Default)]
struct Replies {
    waiting: AtomicUsize,
}

impl Replies {
    /// Whether [`MAX_REPLIES`] answers or more wait to be written.
    fn full(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) >= MAX_REPLIES
    }
}

/// One answer counted among the [`Replies`] while it waits to be written.
struct Waiting(Arc<Replies>);

impl Waiting {
    fn new(replies: &Arc<Replies>) -> Self {
        replies.waiting.fetch_add(1, Ordering::SeqCst);
        Self(replies.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The refusals' queue as [`weigh_upstream`] fills it: at most [`MAX_REFUSALS`] answers
/// taking at most [`MAX_REFUSAL_BYTES`] between them (`queued`, which [`to_child`] lowers as it
/// writes them).
struct Refusals {
    tx: tokio::sync::mpsc::Sender<String>,
    queued: Arc<AtomicUsize>,
}

impl Refusals {
    /// Queues `answer`; `false` (and nothing queued) past either bound.
    fn queue(&self, answer: String) -> bool {
        let n = answer.len();
        if self.queued.fetch_add(n, Ordering::SeqCst) + n > MAX_REFUSAL_BYTES
            || self.tx.try_send(answer).is_err()
        {
            self.queued.fetch_sub(n, Ordering::SeqCst);
            return false;
        }
        true
    }
}

/// How a write to the child's stdin went ([`put`]).
enum Put {
    /// Written whole, after waiting this long on the child.
    Done(Duration),
    /// The child's stdin is closed, or `stop` was cancelled.
    Ended,
    /// The child did not take it whole within what was left of [`STALL`].
    Stalled,
}

/// Writes `bytes` to `stdin` within `budget`, or until `stop` is cancelled.
async fn put(
    stdin: &mut tokio::process::ChildStdin,
    bytes: &[u8],
    budget: Duration,
    stop: &CancellationToken,
) -> Put {
    use tokio::io::AsyncWriteExt;
    let started = tokio::time::Instant::now();
    tokio::select! {
        () = stop.cancelled() => Put::Ended,
        wrote = tokio::time::timeout(budget, stdin.write_all(bytes)) => match wrote {
            Ok(Ok(())) => Put::Done(started.elapsed()),
            Ok(Err(_)) => Put::Ended,
            Err(_) => Put::Stalled,
        },
    }
}

/// Writes rmcp's lines (read from `drain`) to the child's `stdin` as they come, and between
/// two lines each answer in `refusals` ([`weigh_upstream`]'s to the upstream's requests too
/// heavy to parse, with the bytes they take), so that no answer ever falls inside one of rmcp's
/// messages. Ends (closing `stdin`) when rmcp's end is closed, the child's stdin is, or `stop`
/// is cancelled ([`ChildTransport::close`]); and when the child keeps a line waiting past
/// [`STALL`], logged, `stop` cancelled so that [`weigh_upstream`] ends too and rmcp sees the
/// connection end, as a dead upstream's does.
async fn to_child(
    drain: DuplexStream,
    mut stdin: tokio::process::ChildStdin,
    (mut refusals, queued): (tokio::sync::mpsc::Receiver<String>, Arc<AtomicUsize>),
    stop: CancellationToken,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut drain = tokio::io::BufReader::new(drain);
    // The time the line being written has waited on the child so far.
    let mut waited = Duration::ZERO;
    loop {
        let at_line_start = waited.is_zero();
        let (line, chunk) = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            Some(error) = refusals.recv(), if at_line_start => {
                let n = error.len();
                let line = format!("{error}\n").into_bytes();
                drop(error);
                queued.fetch_sub(n, Ordering::SeqCst);
                (true, line)
            }
            read = drain.fill_buf() => match read {
                Ok(buf) if !buf.is_empty() => {
                    let n = buf.iter().position(|b| *b == b'\n').map_or(buf.len(), |i| i + 1);
                    let chunk = buf[..n].to_vec();
                    drain.consume(n);
                    (chunk.last() == Some(&b'\n'), chunk)
                }
                _ => break,
            },
        };
        match put(&mut stdin, &chunk, STALL.saturating_sub(waited), &stop).await {
            Put::Done(_) if line => waited = Duration::ZERO,
            // Never zero mid-line: it marks a line's start.
            Put::Done(took) => waited += took.max(Duration::from_nanos(1)),
            Put::Ended => return,
            Put::Stalled => {
                tracing::warn!(
                    stall_secs = STALL.as_secs(),
                    "an MCP upstream kept a line of the hub's waiting on its stdin too long: taken for gone"
                );
                stop.cancel();
                return;
            }
        }
    }
    let _ = stdin.shutdown().await;
}

/// Copies a stdio upstream's lines from `out` to `feed` (rmcp's end) until either ends or
/// `stop` is cancelled: each read within [`MAX_UPSTREAM_LINE`] (a longer one skipped unread
/// and dropped) and weighed before rmcp parses it ([`crate::weigh::raw_weight`]). A line too
/// heavy to parse (past [`crate::weigh::MAX_LINE_WEIGHT`]) is read for its id and method only
/// ([`crate::weigh::envelope`]) and never passed on: an answer becomes a JSON-RPC error under
/// its id naming the bound (so the call waiting for it learns why, as the stdio proxy does);
/// a request of the upstream's (sampling, roots, elicitation…) is answered on its stdin with
/// a `-32600` error under its id naming the bound, through `refuse` ([`to_child`]), as the
/// stdio proxy answers it (found by review: it was dropped, and the upstream waited for its
/// answer for ever); a notification, a line under no usable id or under one longer than
/// [`crate::weigh::MAX_ANSWER_ID`] ([`crate::weigh::answerable`]), or an answer past the
/// refusals' bounds, is dropped with a warning. Every line has one leading UTF-8 byte order
/// mark taken off first ([`crate::weigh::without_bom`]), so that the hub judges the text rmcp
/// parses, and rmcp is fed the line without it. A line within the weight is read for its id
/// and method first ([`crate::weigh::upstream_line`]): one `envelope` cannot read, or a
/// request under an id rmcp's answer could not repeat cheaply, is dropped with a warning
/// (fail closed); a request is passed on only while fewer than [`MAX_REPLIES`] of rmcp's
/// answers wait to be written (`replies`), and past that answered `-32000` ("busy") through
/// `refuse` (or dropped with a warning when its queue is full). The child's stdout is read
/// on all along: its answers and notifications are never held back.
async fn weigh_upstream(
    out: tokio::process::ChildStdout,
    mut feed: DuplexStream,
    (refuse, replies): (Refusals, Arc<Replies>),
    stop: CancellationToken,
) {
    use tokio::io::AsyncWriteExt;
    let mut reader = tokio::io::BufReader::new(out);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = crate::relay::upstream::bounded_line(&mut reader, &mut buf, MAX_UPSTREAM_LINE);
        let read = tokio::select! {
            () = stop.cancelled() => break,
            read = read => read,
        };
        match read {
            Ok(Some(true)) => {}
            Ok(Some(false)) => {
                tracing::warn!(
                    max = MAX_UPSTREAM_LINE,
                    "dropped an upstream line over the limit"
                );
                continue;
            }
            Ok(None) | Err(_) => break,
        }
        if buf.starts_with(b"\xEF\xBB\xBF") {
            let n = buf.len() - crate::weigh::without_bom(&buf).len();
            buf.drain(..n);
        }
        if buf.trim_ascii().is_empty() {
            continue;
        }
        let weight = crate::weigh::raw_weight(&buf);
        if weight > crate::weigh::MAX_LINE_WEIGHT {
            tracing::warn!(weight, "refused an upstream line too heavy to parse");
            let Some((id, method)) = crate::weigh::answerable(&buf, true) else {
                continue;
            };
            let why = crate::weigh::too_heavy(weight);
            if method {
                let error = serde_json::json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32600, "message": why}});
                if !refuse.queue(error.to_string()) {
                    tracing::warn!("dropped the answer to an upstream request too heavy to parse");
                }
                continue;
            }
            let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603,
                "message": format!("assent: the upstream's answer was refused: {why}")}});
            buf = error.to_string().into_bytes();
        } else if !passes(&buf, &refuse, &replies) {
            continue;
        }
        let fed = tokio::select! {
            () = stop.cancelled() => break,
            fed = async { feed.write_all(&buf).await?; feed.write_all(b"\n").await } => fed,
        };
        if fed.is_err() {
            break;
        }
    }
}

/// Whether the upstream's line `text`, within the weight, goes on to rmcp
/// ([`crate::weigh::upstream_line`]): an answer or a notification does, and a request while
/// fewer than [`MAX_REPLIES`] of rmcp's answers wait (`replies`); a request past that is
/// answered `-32000` ("busy") through `refuse`, or dropped with a warning when its queue is
/// full; a line `envelope` cannot read, or a request under an id it does not take, is
/// dropped (logged there).
fn passes(text: &[u8], refuse: &Refusals, replies: &Replies) -> bool {
    use crate::weigh::Line;
    match crate::weigh::upstream_line(text) {
        Line::Unanswerable => false,
        Line::Request(id) if replies.full() => {
            let busy = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000,
                "message": format!("assent: busy: {MAX_REPLIES} answers wait for the upstream to read them")}});
            if !refuse.queue(busy.to_string()) {
                tracing::warn!(
                    max = MAX_REPLIES,
                    "dropped an upstream request: too many answers wait for it to read"
                );
            }
            false
        }
        Line::Request(_) | Line::Other => true,
    }
}

/// The most characters of one stderr line of an upstream the log keeps ([`log_stderr`]).
const MAX_STDERR_CHARS: usize = 1000;

/// Writes each line the upstream started as `prog` writes to its stderr into the gateway's log
/// (`info`, with `upstream_command`), as one plain line of at most [`MAX_STDERR_CHARS`]
/// characters ([`assent_core::template::plain_line`]: controls, newlines and bidirectional
/// marks as spaces); the rest of a longer line is read and dropped, so an endless line holds
/// no more than that in memory. Until the stderr closes. Found by review: the upstream's stderr
/// was the gateway's, so a hostile upstream wrote lines shaped like the gateway's own (a
/// forged "approval decided by alice") and terminal escapes into its log.
async fn log_stderr(stderr: tokio::process::ChildStderr, prog: String) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::new();
    let cap = MAX_STDERR_CHARS * 4;
    let emit = |line: &[u8]| {
        let text = String::from_utf8_lossy(line);
        let text = assent_core::template::plain_line(&text, MAX_STDERR_CHARS, "… (cut)");
        tracing::info!(upstream_command = %prog, "upstream stderr: {text}");
    };
    loop {
        let buf = match reader.fill_buf().await {
            Ok(b) if !b.is_empty() => b,
            _ => break,
        };
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = cap.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = newline.map_or(buf.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            emit(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}
