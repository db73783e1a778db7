//! The stdio relay's shared state, in one place: [`State`] (the gateway client, the pin check,
//! the two ends' eras, the MCP tasks and every table of open requests) and [`Relay`] (the
//! state with the two outgoing lines, the handle each message handler works through), plus
//! the line writers. It holds no per-message logic: the handlers of `client`, `call`,
//! `tasks` and `upstream` do.

use super::ids::OpenIds;
use super::pins::PinCheck;
use crate::ask::UserAnswer;
use crate::ends::Ends;
use crate::gateway::Gateway;
use crate::kit::{Hold, HoldState, ProxyConfig};
use crate::tasks::TaskDone;
use rmcp::task_manager::TaskManager;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

/// A forwarded call waiting for its upstream response: the tool, the arguments it ran with,
/// and the approval it ran under.
pub(super) struct Forwarded {
    pub(super) tool: String,
    /// The arguments it ran with, as compact JSON text (parsed again for its report: found by
    /// review, parsed they held many times their text, past what the held-bytes bound counts
    /// and, once the client cancelled the call, past its given-up id's bound).
    pub(super) arguments: String,
    pub(super) approval_id: Option<String>,
    /// The MCP task awaiting this result, when the call became one.
    pub(super) task: Option<TaskDone>,
    /// The client's call's bytes, counted against [`super::held::MAX_HELD_BYTES`] until its
    /// result is reported or, the client having cancelled it, it is given up at the upstream
    /// ([`State::given_up`]). `None`: a call of the proxy's own, resuming an approval, or one
    /// given up.
    pub(super) held: Option<super::held::HeldGuard>,
    /// Counts the call as under way for the gateway client's settling
    /// ([`crate::gateway::Gateway::settle_proposals`]) until its result is reported: a
    /// front end whose client left waits for it (found by review: the proxy ended before a
    /// forwarded call's answer came, and its `call.result` was never reported). `None` once
    /// the client cancelled it (the upstream should not answer it then).
    pub(super) settling: Option<tokio_util::task::task_tracker::TaskTrackerToken>,
}

/// A modern client's retried call: the approval it resumes and the user's answer, if any.
pub(super) type Resume = Option<(String, Option<UserAnswer>)>;

/// A call waiting at the gateway, under its client's request id until its own job lets go of
/// it (forwarded, answered or stopped): its hold (the approval id once held), how to stop it
/// (taken by the first stop), and whether it became a task.
pub(super) struct Waiting {
    pub(super) approval: Arc<HoldState>,
    pub(super) cancel: Option<oneshot::Sender<Stop>>,
    /// Set once the call became a task (it then outlives the connection).
    pub(super) task: Arc<AtomicBool>,
}

/// Why a waiting call's job stops (its hold is [`Hold::Cancelled`] by then): its approval is
/// withdrawn at the gateway with `why` when it was held for one (`approval`); `why: None`
/// only stops it (withdrawn already).
#[derive(Default)]
pub(super) struct Stop {
    pub(super) why: Option<&'static str>,
    pub(super) approval: Option<String>,
}

/// What stopping a waiting call did ([`State::stop_waiting`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StopResult {
    /// No such call waits (any more).
    NotWaiting,
    /// Stopped: it is never forwarded (now, or by an earlier stop).
    Stopped,
    /// Too late: it is cleared and being forwarded (it runs to its end, and its result is
    /// reported as any other).
    Forwarding,
}

/// A cleared call's step to [`Hold::Forwarding`], in one step with a cancel
/// ([`crate::kit::cancel_unless_forwarded`]): `false` when its client cancelled it first (it must not be
/// forwarded).
pub(super) fn clear_to_forward(held: &HoldState) -> bool {
    crate::kit::hold_unless_cancelled(held, Hold::Forwarding)
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
    pub(super) pins: Arc<PinCheck>,
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
    pub(super) task_ids: super::task_names::TaskNames,
    /// The proxy's own elicitation requests waiting for the client's answer.
    pub(super) elicits: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Whether the client declared the tasks extension at initialize.
    pub(super) client_tasks: AtomicBool,
    /// Whether the client can be asked (elicitation).
    pub(super) client_elicits: AtomicBool,
    /// Ids (JSON text) of the requests written to the upstream and not answered yet: the
    /// only answers the upstream reader accepts, each once ([`OpenIds::note`] fills it).
    pub(super) upstream_open: Arc<OpenIds>,
    /// The upstream's own requests relayed to the client: the id the client saw (JSON text,
    /// `"assent-upstream-N"`) → the upstream's id, until the client answers.
    pub(super) from_upstream: Mutex<HashMap<String, Value>>,
    /// Numbers the upstream's requests as the client sees them (`assent-upstream-N`).
    pub(super) upstream_seq: AtomicU64,
    /// The bytes held by the client's calls in flight ([`super::held`]).
    pub(super) held_bytes: Arc<super::held::HeldBytes>,
    /// The upstream's open `input_required` rounds, which a client's `requestState` must
    /// name ([`super::rounds`]).
    pub(super) rounds: Mutex<super::rounds::Rounds>,
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
            pins: Arc::new(PinCheck::new()),
            ends: Arc::default(),
            tasks: TaskManager::new(),
            list_ids: Mutex::default(),
            init_ids: Mutex::default(),
            forwarded: Mutex::default(),
            waiting: Mutex::default(),
            task_ids: Default::default(),
            elicits: Mutex::default(),
            client_tasks: AtomicBool::new(false),
            client_elicits: AtomicBool::new(false),
            upstream_open: Arc::default(),
            from_upstream: Mutex::default(),
            upstream_seq: AtomicU64::new(0),
            held_bytes: super::held::HeldBytes::new(super::held::MAX_HELD_BYTES),
            rounds: Mutex::default(),
        })
    }
}

/// The relay's handle: the shared [`State`] and the two outgoing lines (each drained by one
/// writer, [`write_lines`]). Cloned into every task that answers a message.
#[derive(Clone)]
pub(super) struct Relay {
    pub(super) state: Arc<State>,
    /// Lines to the client (stdout).
    pub(super) to_client: super::lines::Lines,
    /// Lines to the upstream (its stdin, closed once every sender is gone).
    pub(super) to_upstream: super::lines::Lines,
    /// The client's answers waiting for room in the upstream's queue.
    pub(super) owed: Arc<std::sync::Mutex<super::lines::Owed>>,
}

impl Relay {
    /// Starts the pin check of the upstream's tools (the proxy's own `tools/list`), once.
    pub(super) fn ask_pins(&self) {
        self.state.pins.ask_once(&self.to_upstream);
    }
}

impl State {
    /// Forwarded request `key` (JSON text), which its client cancelled, was given up at the
    /// upstream ([`OpenIds`]: a receiver should not answer a cancelled request): its bytes no
    /// longer count against the calls in flight, what is kept of it being bounded with the
    /// given-up ids ([`super::ids::MAX_GONE_BYTES`]). Found by review: they stayed counted
    /// until an answer that should never come, so after 64 MiB of cancelled calls every call
    /// was refused. One past that bound stays counted (and in flight) until it is answered:
    /// what is kept of forwarded calls stays bounded.
    pub(super) fn given_up(&self, key: &str) {
        if let Some(f) = self.forwarded.lock().expect("forwarded").get_mut(key) {
            f.held = None;
        }
    }

    /// Stops the call waiting under `key` (only the one whose hold is `only`, when given):
    /// its hold set to [`Hold::Cancelled`] unless it is being forwarded, and its job told
    /// why (`why`, its approval withdrawn with it). The entry stays: it is its job's to
    /// remove, so that the id stays in use until that job let go of it (found by review: a
    /// cancel that removed it let a new request reuse the id while the cancelled call's job
    /// was still forwarding, and the one call's answer was recorded and held as the other's).
    pub(super) fn stop_waiting(
        &self,
        key: &str,
        only: Option<&Arc<HoldState>>,
        why: &'static str,
    ) -> StopResult {
        let mut waiting = self.waiting.lock().expect("waiting");
        let Some(w) = waiting
            .get_mut(key)
            .filter(|w| only.is_none_or(|h| Arc::ptr_eq(&w.approval, h)))
        else {
            return StopResult::NotWaiting;
        };
        match crate::kit::cancel_unless_forwarded(&w.approval, why) {
            Some(was) => {
                if let Some(tx) = w.cancel.take() {
                    let approval = was.approval();
                    let _ = tx.send(Stop {
                        why: Some(why),
                        approval,
                    });
                }
                StopResult::Stopped
            }
            None if *w.approval.borrow() == Hold::Forwarding => StopResult::Forwarding,
            None => StopResult::Stopped,
        }
    }
}

/// Writes each line from `rx` to `out` as `era(line)` and a newline (none when `era` says
/// `None`), until `rx` closes or `out` fails: one writer per direction, so concurrent tasks
/// never interleave lines, and every line crosses in its receiver's era ([`Ends`]); the
/// upstream's writer also notes each request's id as open there
/// ([`super::ids::OpenIds::note`]). The lines waiting when it wakes go out in one write (one
/// syscall, not two per line), then it flushes.
pub(super) fn write_lines<W: tokio::io::AsyncWrite + Unpin + Send + 'static>(
    mut rx: super::lines::LinesRx,
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
    mut rx: super::lines::LinesRx,
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
    rx: &mut super::lines::LinesRx,
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
            Some(next) => push(buf, next),
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::sync::watch;

    /// A relay whose gateway is nowhere (nothing here asks it), with the receivers of its
    /// lines to the client and to the upstream.
    async fn relay() -> (
        Relay,
        crate::relay::lines::LinesRx,
        crate::relay::lines::LinesRx,
    ) {
        let cfg = ProxyConfig {
            gateway_url: "http://127.0.0.1:9".into(),
            api_key: "k".into(),
            agent: "a".into(),
            server: "s".into(),
            session_id: "t".into(),
            on_behalf_of: None,
            command: Vec::new(),
            poll_seconds: 1,
            progress_seconds: 1,
            pass_ungated: false,
        };
        let state = Arc::new(State::new(cfg).await.unwrap());
        let (to_client, client) = crate::relay::lines::queue();
        let (to_upstream, upstream) = crate::relay::lines::queue();
        let relay = Relay {
            state,
            to_client,
            to_upstream,
            owed: Arc::default(),
        };
        (relay, client, upstream)
    }

    /// A call waiting under `key` as its job registers it, in `hold`: its hold and the
    /// receiver of its stop.
    fn waiting(st: &State, key: &str, hold: Hold) -> (Arc<HoldState>, oneshot::Receiver<Stop>) {
        let held = Arc::new(watch::Sender::new(hold));
        let (tx, rx) = oneshot::channel();
        let w = Waiting {
            approval: held.clone(),
            cancel: Some(tx),
            task: Arc::default(),
        };
        st.waiting.lock().unwrap().insert(key.into(), w);
        (held, rx)
    }

    fn cancel(id: Value) -> String {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": id, "reason": "x"}})
        .to_string()
    }

    /// Review finding: the client's cancel removed a waiting call's entry itself, so a request
    /// reusing the id right after was let in while the cancelled call's job could still be
    /// forwarding it — and one call's answer was recorded and held as the other's. A cancel
    /// only stops the call: the id stays in use until the call's job let go of it, the call
    /// is never forwarded after, and its job is told which approval to withdraw.
    #[tokio::test]
    async fn a_cancelled_calls_id_stays_in_use_until_its_job_lets_go() {
        let (relay, mut client, mut upstream) = relay().await;
        let st = &relay.state;
        let (held, mut stop) = waiting(st, "5", Hold::Approval("apr_1".into()));
        relay.on_client_line(cancel(json!(5)));
        relay.on_client_line(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                   "params": {"name": "t", "arguments": {}}})
            .to_string(),
        );
        let refused: Value = serde_json::from_str(&client.try_recv().unwrap()).unwrap();
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        assert_eq!(refused["id"], 5, "{refused}");
        assert!(st.waiting.lock().unwrap().contains_key("5"));
        assert_eq!(
            *held.borrow(),
            Hold::Cancelled("the MCP client cancelled the request")
        );
        assert!(!clear_to_forward(&held), "a cancelled call was cleared");
        let Stop { why, approval } = stop.try_recv().unwrap();
        assert_eq!(why, Some("the MCP client cancelled the request"));
        assert_eq!(approval.as_deref(), Some("apr_1"));
        assert!(upstream.try_recv().is_none(), "the cancel went upstream");
        // A second cancel finds it stopped already.
        assert_eq!(st.stop_waiting("5", None, "again"), StopResult::Stopped);
        assert!(upstream.try_recv().is_none());
    }

    /// A call its job cleared first (stepped to Forwarding) runs to its end: a cancel goes
    /// upstream as for a forwarded call, and its entry stays; a stop names only its own call.
    #[tokio::test]
    async fn a_cancel_after_the_step_to_forwarding_goes_upstream() {
        let (relay, _client, mut upstream) = relay().await;
        let st = &relay.state;
        let (held, mut stop) = waiting(st, "6", Hold::Nothing);
        assert!(clear_to_forward(&held));
        relay.on_client_line(cancel(json!(6)));
        let passed: Value = serde_json::from_str(&upstream.try_recv().unwrap()).unwrap();
        assert_eq!(passed["params"]["requestId"], 6, "{passed}");
        assert_eq!(*held.borrow(), Hold::Forwarding);
        assert!(stop.try_recv().is_err(), "a forwarded call was stopped");
        assert!(st.waiting.lock().unwrap().contains_key("6"));
        let other = Arc::new(watch::Sender::new(Hold::Nothing));
        let why = "the MCP client cancelled the task";
        assert_eq!(
            st.stop_waiting("6", Some(&other), why),
            StopResult::NotWaiting
        );
        assert_eq!(st.stop_waiting("7", None, why), StopResult::NotWaiting);
    }
}
