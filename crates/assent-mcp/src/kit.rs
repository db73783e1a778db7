//! The crate's shared kit, at the bottom of its module graph: the proxy's settings
//! ([`ProxyConfig`]), what became of a call at the gateway ([`Outcome`]), what a call waits for
//! ([`Hold`]), the JSON-RPC lines every end builds (a reply, a `TOOL_DENIED:` result, the
//! refusal of an ambiguous line, a `tools/list` with its pins applied) and the proxy's words
//! for a failed gateway call (from an [`assent_api::ClientError`]). It does no I/O and holds
//! no state; the gateway client, the relay and the hub build on it.

use assent_api::ClientError;
use assent_api::tools::{PinState, ToolState};
use serde_json::{Value, json};
use std::collections::HashMap;
use tokio::sync::watch;

/// The MCP tasks extension (SEP-2663).
pub(crate) const TASKS: &str = "io.modelcontextprotocol/tasks";

/// Adds the tasks extension to `caps` (a capabilities object): `extensions` is made an object
/// when the upstream gave something else. Nothing when `caps` is not an object. Written with
/// `as_object_mut`, never by indexing, which panics on a value of the upstream's making that is
/// not an object (found by review: `"extensions": "x"` ended the relay).
pub(crate) fn offer_tasks(caps: &mut Value) {
    let Some(c) = caps.as_object_mut() else {
        return;
    };
    let ext = c.entry("extensions").or_insert_with(|| json!({}));
    if !ext.is_object() {
        *ext = json!({});
    }
    if let Some(e) = ext.as_object_mut() {
        e.insert(TASKS.into(), json!({}));
    }
}

/// How long the proxy and the hub wait for the gateway's word on an upstream's handshake
/// words (`POST /v1/tools/check` with `handshake`) before they show none of them (fail
/// closed): 10 s, not the HTTP client's full request timeout (`poll_seconds` + 30 s), which
/// held the client's `initialize` that long when the gateway stalled.
pub const HANDSHAKE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How the proxy is set up (`assent mcp --agent ID --server ALIAS -- COMMAND ARGS...`). Its
/// `Debug` shows `api_key` as `<withheld>`.
#[derive(Clone)]
pub struct ProxyConfig {
    /// Base URL of the gateway, e.g. `http://127.0.0.1:7878`.
    pub gateway_url: String,
    /// The agent's API key (`ASSENT_API_KEY`).
    pub api_key: String,
    /// Agent id the proxy acts for.
    pub agent: String,
    /// MCP server alias in the agent file.
    pub server: String,
    /// Session id sent with every call.
    pub session_id: String,
    /// The person the agent acts for, sent with every call as `on_behalf_of` (issue 14 §2).
    pub on_behalf_of: Option<String>,
    /// Upstream command and arguments.
    pub command: Vec<String>,
    /// Seconds per long-poll request while a call is held (at most 60).
    pub poll_seconds: u64,
    /// Seconds between progress notifications while a call waits (when the client gave a
    /// progress token).
    pub progress_seconds: u64,
    /// Relay the upstream's `resources/*`, `prompts/*` and `completion/complete` unchecked
    /// (`--pass-ungated`; a method the proxy does not know is refused either way). Off by default: no rule gates, records or bounds them, so an
    /// agent could read through a resource what a policy holds as a tool call; the client is
    /// then offered tools only.
    pub pass_ungated: bool,
}

impl std::fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("gateway_url", &self.gateway_url)
            .field("api_key", &"<withheld>")
            .field("agent", &self.agent)
            .field("server", &self.server)
            .field("session_id", &self.session_id)
            .field("command", &self.command)
            .finish_non_exhaustive()
    }
}

/// What became of one `tools/call` at the gateway.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Forward the call upstream.
    Forward {
        /// `Some(arguments)` when an operator approved it with modified arguments (the token
        /// was redeemed for those).
        edited: Option<Value>,
        /// The `thresholds.output_bytes` covering the call: a larger result is held.
        output_limit: Option<u64>,
        /// The approval it ran under, when it was held or granted.
        approval_id: Option<String>,
    },
    /// Answer the client with `TOOL_DENIED: reason`.
    Denied(String),
    /// Ask the client's user in an `input_required` result (a modern client, SEP-2322): the
    /// call is held as `approval_id`, the client retries with the answer ([`crate::era::input_required`]).
    AskClient {
        /// The approval the retried call resumes.
        approval_id: String,
        /// The in-client question ([`crate::in_client_question`]).
        question: String,
    },
}

/// What a call is waiting for, shared between the call and whatever watches it (progress
/// notifications, cancellation, an MCP task's status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Hold {
    /// Not held (yet): the gateway is deciding.
    #[default]
    Nothing,
    /// The tool's changed definition waits for an operator's review (the review id).
    Review(String),
    /// The call waits for a human's decision (the approval id).
    Approval(String),
    /// Cleared: the call is being forwarded to the upstream (no longer cancellable).
    Forwarding,
    /// Its client cancelled it (or went away) before it was forwarded: it is never forwarded
    /// (set and read with `send_if_modified`, so that a cancel and the step to
    /// [`Hold::Forwarding`] cannot both happen). Why: the reason an approval the call holds,
    /// or one its proposal still on its way makes, is withdrawn with (`the MCP client
    /// disconnected`).
    Cancelled(&'static str),
}

impl Hold {
    /// The approval id while the call waits for one.
    pub fn approval(&self) -> Option<String> {
        match self {
            Hold::Approval(a) => Some(a.clone()),
            _ => None,
        }
    }

    /// A progress / status line for the client, e.g. `waiting for a human to approve
    /// write_file (assent approval apr_…)`.
    pub fn describe(&self, tool: &str) -> String {
        match self {
            Hold::Nothing => format!("waiting for assent to clear {tool}"),
            Hold::Review(r) => format!(
                "waiting for an operator to review the changed definition of {tool} (assent tool review {r})"
            ),
            Hold::Approval(a) => {
                format!("waiting for a human to approve {tool} (assent approval {a})")
            }
            Hold::Forwarding => format!("running {tool}"),
            Hold::Cancelled(_) => format!("{tool} was cancelled"),
        }
    }
}

/// At most this many tools are read from one upstream's list (the hub's, and one pin check of
/// the stdio proxy); a list past it fails closed.
pub(crate) const MAX_TOOLS: usize = 100_000;

/// At most this many pages of one upstream's tool list are read.
pub(crate) const MAX_PAGES: usize = 1_000;

/// At most this much of tool definitions and cursors is read from one upstream's list (32 MiB
/// by [`json_weight`]: the text plus 32 bytes a piece, about what it holds parsed); a list
/// past it fails closed (found by review: 1,000 pages of up to 16 MiB each could be held as
/// parsed JSON, gigabytes on the gateway's host; then, that cursors were not counted, and that
/// `[0,0,…]` held 16 times its text).
pub(crate) const MAX_LIST_BYTES: usize = 32 * 1024 * 1024;

/// Why a list past [`MAX_LIST_BYTES`] failed (the hub's and the stdio proxy's words).
pub(crate) fn too_many_bytes() -> String {
    format!("tools/list holds more than {MAX_LIST_BYTES} bytes of tool definitions")
}

pub(crate) use assent_core::json::json_weight;

/// One upstream's whole tool list is read within this long (30 s).
pub(crate) const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a stdio front end whose client is gone waits for the proposals still on their way
/// to be answered and settled before its process ends ([`crate::gateway::Gateway::settle_proposals`]):
/// 30 s, past the gateway's 10 s wait for a busy database.
pub(crate) const PROPOSALS_SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// A call's [`Hold`], observable by its watchers.
pub type HoldState = watch::Sender<Hold>;

/// Sets `held` to `to` unless its client cancelled the call ([`Hold::Cancelled`], which
/// stays: found by review, a plain overwrite turned a cancel that had just landed back into a
/// wait); `false` when it was cancelled.
pub fn hold_unless_cancelled(held: &HoldState, to: Hold) -> bool {
    let mut to = Some(to);
    held.send_if_modified(|h| {
        let go = !matches!(h, Hold::Cancelled(_));
        if go && let Some(t) = to.take() {
            *h = t;
        }
        go
    })
}

/// Sets `held` to [`Hold::Cancelled`] (`why`) unless the call was forwarded (or cancelled)
/// already, in one step with the call's own step to [`Hold::Forwarding`]
/// ([`hold_unless_cancelled`]): the hold it replaced, or `None` when it was not replaced. The
/// hub's and the stdio proxy's cancels both go through it.
pub fn cancel_unless_forwarded(held: &HoldState, why: &'static str) -> Option<Hold> {
    let mut was = None;
    held.send_if_modified(|h| {
        let stop = !matches!(h, Hold::Forwarding | Hold::Cancelled(_));
        if stop {
            was = Some(std::mem::replace(h, Hold::Cancelled(why)));
        }
        stop
    });
    was
}

pub(crate) fn denied_result(id: &Value, reason: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": denied_value(reason)}).to_string()
}

/// The `tools/call` result of a denial: an error result whose text starts `TOOL_DENIED:`.
pub(crate) fn denied_value(reason: &str) -> Value {
    json!({"content": [{"type": "text", "text": format!("TOOL_DENIED: {reason}")}], "isError": true})
}

/// The JSON-RPC error (one line of JSON) for a client message that was refused before
/// anything was gated (the stdio proxy, and the hub over stdio and HTTP):
/// `-32700` when it is not JSON, `-32600` (invalid request) when it is ambiguous (a duplicate
/// key, an inexact number, too deep), naming the JSON pointer. The request's `id` is echoed
/// when the line has one unambiguous top-level `id`, so the client's call fails at once. The
/// id is read without building the rest ([`crate::weigh::envelope`]):
/// found by review, the whole body was parsed to find it, before the hub over HTTP had
/// weighed it, so a duplicate key near the start of a body of zeros built some 33 times its
/// size (2 GiB for one request under a raised `max_arguments_bytes`).
pub fn refusal(line: &str, e: &assent_core::json::StrictJsonError) -> String {
    use assent_core::json::StrictJsonError;
    let code = match e {
        StrictJsonError::Syntax(_) => -32700,
        _ => -32600,
    };
    let id = match e {
        // An id two parsers could read differently is no id to answer under: named twice, or
        // a number a double would change (echoed as the double, it could name another call).
        StrictJsonError::DuplicateKey { path } | StrictJsonError::InexactNumber { path, .. }
            if path == "/id" =>
        {
            Value::Null
        }
        StrictJsonError::Syntax(_) => Value::Null,
        _ => match crate::weigh::envelope(line.as_bytes()).map(|e| e.id) {
            Some(crate::weigh::Id::Is(i)) if i.is_number() || i.is_string() => i,
            _ => Value::Null,
        },
    };
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": format!("assent: {} ({e})", e.code())}}).to_string()
}

/// A JSON-RPC reply line to request `id`: `result`, or `error` as its error object.
pub(crate) fn reply(id: &Value, r: Result<Value, rmcp::ErrorData>) -> String {
    match r {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
    }
    .to_string()
}

/// Why a gateway call got no answer, in the proxy's words: `the assent gateway cannot be
/// reached (CAUSE)` (transport: refused, timed out, dropped) or `the assent gateway cannot be
/// asked (WHY)` (a URL that cannot be formed); `None` when the gateway answered (a non-2xx
/// status, or a 2xx body that did not parse).
pub(crate) fn unanswered(e: &ClientError) -> Option<String> {
    match e {
        ClientError::Transport { cause, .. } => {
            Some(format!("the assent gateway cannot be reached ({cause})"))
        }
        ClientError::Config(why) => Some(format!("the assent gateway cannot be asked ({why})")),
        _ => None,
    }
}

/// Why a gateway call failed, as one line for the client or the log: [`unanswered`] when
/// nothing was answered, else `answered(e)`, the caller's words for the gateway's answer
/// (see [`status_code`], [`status_line`]).
pub(crate) fn failure(e: &ClientError, answered: impl FnOnce(&ClientError) -> String) -> String {
    unanswered(e).unwrap_or_else(|| answered(e))
}

/// `STATUS CODE` of an answer the proxy does not take (e.g. `404 NOT_FOUND`); the code is
/// empty when the body was not an error body (a 2xx body that did not parse: `200 `).
pub(crate) fn status_code(e: &ClientError) -> String {
    let status = e.status().map(|s| s.to_string()).unwrap_or_default();
    format!("{status} {}", e.code().unwrap_or(""))
}

/// `STATUS CODE: MESSAGE` of an answer the proxy does not take (the message empty when the
/// body was not an error body).
pub(crate) fn status_line(e: &ClientError) -> String {
    format!("{}: {}", status_code(e), e.message().unwrap_or(""))
}

/// Rewrites a `tools/list` result for the client: a pinned or held tool shows its pinned
/// definition, the one an operator (or its first use) accepted, and a held tool never pinned
/// is left out; a tool pinned now (first use) shows what was pinned, the upstream's; a name
/// listed twice is left out whole (the gateway refuses such a list; which of the two its
/// word is about could not be told). Found by review: a pinned tool showed the upstream's
/// definition of the moment, so what the fingerprint does not cover (`_meta`, an annotation
/// hint that is not a boolean, fields it does not know) changed unreviewed on the client.
pub(crate) fn apply_pins(tools: &mut Vec<Value>, states: &HashMap<String, ToolState>) {
    let mut count: HashMap<String, usize> = HashMap::new();
    for t in tools.iter() {
        *count
            .entry(t["name"].as_str().unwrap_or("").to_string())
            .or_default() += 1;
    }
    tools.retain_mut(|t| {
        let name = t["name"].as_str().unwrap_or("").to_string();
        if count.get(&name).is_some_and(|n| *n > 1) {
            return false;
        }
        match states.get(&name) {
            Some(s) if s.state == PinState::FirstUse => true,
            Some(s) => match &s.pinned {
                Some(p) => {
                    *t = p.clone();
                    true
                }
                None => false,
            },
            None => false,
        }
    });
}
