//! The stdio relay's shared state, in one place: [`State`] (the gateway client, the pin check,
//! the two ends' eras, the MCP tasks and every table of open requests) and [`Relay`] (the
//! state with the two outgoing lines, the handle each message handler works through), plus
//! the line writers. It holds no per-message logic: the handlers of `client`, `call`,
//! `tasks` and `upstream` do.

use super::ids::OpenIds;
use super::pins::{PIN_ID_PREFIX, Pins};
use crate::ask::UserAnswer;
use crate::ends::Ends;
use crate::gateway::Gateway;
use crate::kit::{HoldState, ProxyConfig};
use crate::tasks::TaskDone;
use rmcp::task_manager::TaskManager;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch};

/// A forwarded call waiting for its upstream response: the tool, the arguments it ran with,
/// and the approval it ran under.
pub(super) struct Forwarded {
    pub(super) tool: String,
    pub(super) arguments: Value,
    pub(super) approval_id: Option<String>,
    /// The MCP task awaiting this result, when the call became one.
    pub(super) task: Option<TaskDone>,
}

/// A modern client's retried call: the approval it resumes and the user's answer, if any.
pub(super) type Resume = Option<(String, Option<UserAnswer>)>;

/// A call waiting at the gateway: the approval id once held, and how to stop the wait:
/// `Some(reason)` cancels its approval with that reason, `None` only stops (the approval was
/// cancelled already).
pub(super) struct Waiting {
    pub(super) approval: Arc<HoldState>,
    pub(super) cancel: oneshot::Sender<Option<&'static str>>,
    /// Set once the call became a task (it then outlives the connection).
    pub(super) task: Arc<AtomicBool>,
}

/// Everything the relay's handlers share, for the life of one proxy process. Tables are keyed
/// by a JSON-RPC id's JSON text (`"7"`, `"\"a\""`).
pub(super) struct State {
    pub(super) gw: Arc<Gateway>,
    /// Between progress notifications while a call waits (at least 1 s).
    pub(super) progress_every: Duration,
    /// The tools the agent declares for this server (`None`: all).
    pub(super) declared: Option<Vec<String>>,
    /// The pin check of the upstream's tools.
    pub(super) pins: Pins,
    /// The era of each end and the translation between them (issue 11).
    pub(super) ends: Arc<Ends>,
    /// MCP tasks (SEP-2663) the proxy serves itself.
    pub(super) tasks: TaskManager,
    /// Ids of the client's `tools/list` requests (their answers are filtered).
    pub(super) list_ids: Mutex<HashSet<String>>,
    /// Whether `resources/*`, `prompts/*` and `completion/complete` are relayed
    /// ([`crate::ProxyConfig::pass_ungated`]).
    pub(super) pass_ungated: bool,
    /// Ids of the client's `initialize` requests, each with whether the client declared the
    /// tasks extension (the answer then advertises it); every answer loses the upstream's
    /// 2025-11-25 `tasks` capability, which the proxy does not serve.
    pub(super) init_ids: Mutex<HashMap<String, bool>>,
    /// Calls forwarded upstream, by the id their answer comes under.
    pub(super) forwarded: Mutex<HashMap<String, Forwarded>>,
    /// Calls waiting at the gateway, by the client's request id.
    pub(super) waiting: Mutex<HashMap<String, Waiting>>,
    /// Tasks named after their approval (`approval-ID`), which a later proxy process can
    /// resume from the gateway: the external id → the task manager's id.
    pub(super) task_ids: Mutex<HashMap<String, String>>,
    /// The proxy's own elicitation requests waiting for the client's answer.
    pub(super) elicits: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Whether the client declared the tasks extension at initialize.
    pub(super) client_tasks: AtomicBool,
    /// Whether the client can be asked (elicitation).
    pub(super) client_elicits: AtomicBool,
    /// Whether the proxy's own tools/list was sent (after `initialized`, or at the first call).
    pub(super) pins_asked: AtomicBool,
    /// Whether the upstream said its tools changed while a pin check was under way: the
    /// check runs again once that one ends.
    pub(super) pins_stale: AtomicBool,
    /// When the last check again ([`ask_pins_again`]) started, or is to start.
    pub(super) pins_rechecked_at: Mutex<Option<std::time::Instant>>,
    /// Ids (JSON text) of the requests written to the upstream and not answered yet: the
    /// only answers the upstream reader accepts, each once ([`OpenIds::note`] fills it).
    pub(super) upstream_open: Arc<OpenIds>,
    /// The upstream's own requests relayed to the client: the id the client saw (JSON text,
    /// `"assent-upstream-N"`) → the upstream's id, until the client answers.
    pub(super) from_upstream: Mutex<HashMap<String, Value>>,
    /// Numbers the upstream's requests as the client sees them (`assent-upstream-N`).
    pub(super) upstream_seq: AtomicU64,
}

impl State {
    /// The state of a new proxy for `cfg`: reads the declared tools from the gateway (`None`
    /// when it cannot); errors when the gateway URL is not one or the HTTP client cannot be
    /// built.
    pub(super) async fn new(cfg: ProxyConfig) -> anyhow::Result<Self> {
        let progress_every = Duration::from_secs(cfg.progress_seconds.max(1));
        let pass_ungated = cfg.pass_ungated;
        let gw = Arc::new(Gateway::new(cfg)?);
        let declared = gw.declared_tools().await;
        Ok(Self {
            gw,
            progress_every,
            pass_ungated,
            declared,
            pins: watch::channel(None).0,
            ends: Arc::default(),
            tasks: TaskManager::new(),
            list_ids: Mutex::default(),
            init_ids: Mutex::default(),
            forwarded: Mutex::default(),
            waiting: Mutex::default(),
            task_ids: Mutex::default(),
            elicits: Mutex::default(),
            client_tasks: AtomicBool::new(false),
            client_elicits: AtomicBool::new(false),
            pins_asked: AtomicBool::new(false),
            pins_stale: AtomicBool::new(false),
            pins_rechecked_at: Mutex::default(),
            upstream_open: Arc::default(),
            from_upstream: Mutex::default(),
            upstream_seq: AtomicU64::new(0),
        })
    }
}

/// The relay's handle: the shared [`State`] and the two outgoing lines (each drained by one
/// writer, [`write_lines`]). Cloned into every task that answers a message.
#[derive(Clone)]
pub(super) struct Relay {
    pub(super) state: Arc<State>,
    /// Lines to the client (stdout).
    pub(super) to_client: mpsc::UnboundedSender<String>,
    /// Lines to the upstream (its stdin, closed once every sender is gone).
    pub(super) to_upstream: mpsc::UnboundedSender<String>,
}

impl Relay {
    /// Sends the proxy's own `tools/list` (for the pin check), once.
    pub(super) fn ask_pins(&self) {
        ask_pins_once(&self.state.pins_asked, &self.to_upstream);
    }
}

/// Sends the proxy's own `tools/list` (for the pin check) once.
pub(super) fn ask_pins_once(asked: &AtomicBool, tu: &mpsc::UnboundedSender<String>) {
    if !asked.swap(true, Ordering::SeqCst) {
        ask_pins(tu);
    }
}

/// The least time between the starts of two checks again, when the upstream says its tools
/// changed (found by review: an upstream sending `notifications/tools/list_changed` after
/// every answer drove `POST /v1/tools/check` under the agent's key as fast as it could answer,
/// spending the agent's rate limit). The first check again starts at once (an upstream may say
/// so once as it starts: its calls wait for no timer).
pub(super) const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// Sends the proxy's own `tools/list` (its first page) for a check again: at once, or
/// [`RECHECK_EVERY`] after the last check again started (`rechecked_at`, updated).
pub(super) fn ask_pins_again(
    rechecked_at: &Mutex<Option<std::time::Instant>>,
    tu: mpsc::UnboundedSender<String>,
) {
    let now = std::time::Instant::now();
    let mut last = rechecked_at.lock().unwrap_or_else(|p| p.into_inner());
    let start = last.map_or(now, |t| (t + RECHECK_EVERY).max(now));
    *last = Some(start);
    drop(last);
    let wait = start.saturating_duration_since(now);
    if wait.is_zero() {
        ask_pins(&tu);
    } else {
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            ask_pins(&tu);
        });
    }
}

/// Sends the proxy's own `tools/list` (its first page).
pub(super) fn ask_pins(tu: &mpsc::UnboundedSender<String>) {
    let _ = tu.send(
        json!({"jsonrpc": "2.0", "id": format!("{PIN_ID_PREFIX}0"), "method": "tools/list"})
            .to_string(),
    );
}

/// Writes each line from `rx` to `out` as `era(line)` and a newline (none when `era` says
/// `None`), until `rx` closes or `out` fails: one writer per direction, so concurrent tasks
/// never interleave lines, and every line crosses in its receiver's era ([`Ends`]); the
/// upstream's writer also notes each request's id as open there
/// ([`super::ids::OpenIds::note`]). The lines waiting when it wakes go out in one write (one
/// syscall, not two per line), then it flushes.
pub(super) fn write_lines<W: tokio::io::AsyncWrite + Unpin + Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<String>,
    mut out: W,
    era: impl Fn(String) -> Option<String> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = Vec::new();
        while let Some(line) = rx.recv().await {
            buf.clear();
            take_lines(&mut buf, line, &mut rx, &era);
            if buf.is_empty() {
                continue;
            }
            if out.write_all(&buf).await.is_err() {
                break;
            }
            let _ = out.flush().await;
        }
    })
}

/// [`write_lines`] to the process's stdout, on a thread of its own with blocking writes (not
/// `tokio::io::stdout`, whose every write and flush is a hop through the runtime's blocking
/// pool and back: two or three per answer). The receiver completes when the writer ends
/// (`rx` closed and drained, or stdout failed).
pub(super) fn write_stdout_lines(
    mut rx: mpsc::UnboundedReceiver<String>,
    era: impl Fn(String) -> Option<String> + Send + 'static,
) -> oneshot::Receiver<()> {
    let (done, ended) = oneshot::channel();
    std::thread::spawn(move || {
        use std::io::Write as _;
        let mut buf = Vec::new();
        let mut out = std::io::stdout().lock();
        while let Some(line) = rx.blocking_recv() {
            buf.clear();
            take_lines(&mut buf, line, &mut rx, &era);
            if buf.is_empty() {
                continue;
            }
            if out.write_all(&buf).and_then(|()| out.flush()).is_err() {
                break;
            }
        }
        let _ = done.send(());
    });
    ended
}

/// Appends `era(line)` and a newline to `buf`, then every line already waiting in `rx` the
/// same way (at most 64 KiB more, so one slow writer does not gather without bound).
fn take_lines(
    buf: &mut Vec<u8>,
    line: String,
    rx: &mut mpsc::UnboundedReceiver<String>,
    era: &impl Fn(String) -> Option<String>,
) {
    let push = |buf: &mut Vec<u8>, line: String| {
        if let Some(line) = era(line) {
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
    };
    push(buf, line);
    while buf.len() < 64 * 1024 {
        match rx.try_recv() {
            Ok(next) => push(buf, next),
            Err(_) => break,
        }
    }
}
