//! A stdio upstream's transport ([`ChildTransport`]): its child process, rmcp's line transport
//! over two pipes of the hub's own — the child's stdout weighed line by line before rmcp
//! parses it ([`weigh_upstream`]), the child's stdin written by [`to_child`], which passes
//! rmcp's lines and, between them, the hub's answers to upstream requests too heavy to parse —
//! and its end in a graceful order: stdin closed, then `SIGTERM`, then `SIGKILL`
//! ([`ChildTransport::close`]).

use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::DuplexStream;

/// The longest line read from a stdio upstream: one byte short of rmcp's own bound
/// (`DEFAULT_MAX_LINE_LENGTH`, 16 MiB with its newline); a longer one is skipped to its end,
/// never held whole, and dropped with a warning.
const MAX_UPSTREAM_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH - 1;

/// How many answers to the upstream's too-heavy requests wait to be written to its stdin; past
/// that (an upstream sending such requests without reading its stdin) one is dropped with a
/// warning.
const MAX_REFUSALS: usize = 64;

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
}

impl ChildTransport {
    /// Starts `prog` with `args` and extra environment `env`, its stdin and stdout piped (its
    /// stderr the gateway's). Errors: it cannot be started.
    pub(super) fn spawn(
        prog: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
    ) -> std::io::Result<Self> {
        use std::process::Stdio;
        let mut child = tokio::process::Command::new(prog)
            .args(args)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the upstream's stdio was not piped"));
        };
        let (rmcp_in, feed) = tokio::io::duplex(1 << 16);
        let (rmcp_out, drain) = tokio::io::duplex(1 << 16);
        let (refuse, refusals) = tokio::sync::mpsc::channel(MAX_REFUSALS);
        Ok(Self {
            rw: AsyncRwTransport::new(rmcp_in, rmcp_out),
            child,
            reader: tokio::spawn(weigh_upstream(stdout, feed, refuse)),
            writer: Some(tokio::spawn(to_child(drain, stdin, refusals))),
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

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.rw.send(item)
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
    /// saves its state on `SIGTERM` lost it at every gateway stop.
    async fn close(&mut self) -> Result<(), Self::Error> {
        let closed = self.rw.close().await;
        if let Some(mut writer) = self.writer.take()
            && tokio::time::timeout(AFTER_EOF, &mut writer).await.is_err()
        {
            writer.abort();
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

/// Writes rmcp's lines (read from `drain`) to the child's `stdin` as they come, and between
/// two lines each answer in `refusals` ([`weigh_upstream`]'s to the upstream's requests too
/// heavy to parse), so that no answer ever falls inside one of rmcp's messages. Ends (closing
/// `stdin`) when rmcp's end is closed or the child's stdin is.
async fn to_child(
    drain: DuplexStream,
    mut stdin: tokio::process::ChildStdin,
    mut refusals: tokio::sync::mpsc::Receiver<String>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut drain = tokio::io::BufReader::new(drain);
    let mut at_line_start = true;
    loop {
        let chunk = tokio::select! {
            biased;
            Some(error) = refusals.recv(), if at_line_start => {
                if stdin.write_all(format!("{error}\n").as_bytes()).await.is_err() {
                    break;
                }
                continue;
            }
            read = drain.fill_buf() => match read {
                Ok(buf) if !buf.is_empty() => {
                    let n = buf.iter().position(|b| *b == b'\n').map_or(buf.len(), |i| i + 1);
                    buf[..n].to_vec()
                }
                _ => break,
            },
        };
        drain.consume(chunk.len());
        at_line_start = chunk.last() == Some(&b'\n');
        if stdin.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Copies a stdio upstream's lines from `out` to `feed` (rmcp's end) until either ends: each
/// read within [`MAX_UPSTREAM_LINE`] (a longer one skipped unread and dropped) and weighed
/// before rmcp parses it ([`crate::weigh::raw_weight`]). A line too heavy to parse (past
/// [`crate::weigh::MAX_LINE_WEIGHT`]) is read for its id and method only
/// ([`crate::weigh::envelope`]) and never passed on: an answer becomes a JSON-RPC error under
/// its id naming the bound (so the call waiting for it learns why, as the stdio proxy does);
/// a request of the upstream's (sampling, roots, elicitation…) is answered on its stdin with
/// a `-32600` error under its id naming the bound, through `refuse` ([`to_child`]), as the
/// stdio proxy answers it (found by review: it was dropped, and the upstream waited for its
/// answer for ever); a notification or a line under no readable id is dropped with a warning.
async fn weigh_upstream(
    out: tokio::process::ChildStdout,
    mut feed: DuplexStream,
    refuse: tokio::sync::mpsc::Sender<String>,
) {
    use crate::weigh::{Envelope, Id};
    use tokio::io::AsyncWriteExt;
    let mut reader = tokio::io::BufReader::new(out);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = crate::relay::upstream::bounded_line(&mut reader, &mut buf, MAX_UPSTREAM_LINE);
        match read.await {
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
        let weight = crate::weigh::raw_weight(&buf);
        if weight > crate::weigh::MAX_LINE_WEIGHT {
            tracing::warn!(weight, "refused an upstream line too heavy to parse");
            let why = crate::weigh::too_heavy(weight);
            let (id, method) = match crate::weigh::envelope(&buf) {
                Some(Envelope {
                    id: Id::Is(id),
                    method,
                }) => (id, method),
                _ => continue,
            };
            if method {
                let error = serde_json::json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32600, "message": why}});
                if refuse.try_send(error.to_string()).is_err() {
                    tracing::warn!("dropped the answer to an upstream request too heavy to parse");
                }
                continue;
            }
            let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603,
                "message": format!("assent: the upstream's answer was refused: {why}")}});
            buf = error.to_string().into_bytes();
        }
        if feed.write_all(&buf).await.is_err() || feed.write_all(b"\n").await.is_err() {
            break;
        }
    }
}
