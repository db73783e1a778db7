//! Client → upstream: one line from the client, read strictly and routed. A line that is not
//! JSON, is ambiguous or is a batch is refused; the client's answers to the proxy's own
//! elicitations stay here, its answers to the upstream's requests go back under the
//! upstream's own ids, and any other answer is dropped; the tasks extension is taken out of what the upstream sees;
//! `initialize` is noted; then the message goes to its handler (`tools/call` to the gate, the
//! proxy's own tasks, the handshake, cancellation) or, unchanged in meaning, upstream. What
//! goes upstream is the serialisation of the value the proxy read, never the client's bytes;
//! a `tools/call` is rebuilt from what was gated (`super::call`).

use super::lines::{MAX_OWED, MAX_OWED_BYTES, Owed};
use super::state::{Relay, Resume, StopResult};
use crate::era::{self, Era};
use crate::kit::{TASKS, refusal, reply};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// Where a request carries its sender's capabilities (modern sessions).
const CLIENT_CAPS_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// The most requests one client has in flight through the relay (gated calls held or on
/// their way, requests queued for the upstream or open there); one more is answered
/// [`BUSY`].
pub(super) const MAX_IN_FLIGHT: usize = 256;

/// The JSON-RPC error code of a request refused as one too many (an implementation-defined
/// server error, JSON-RPC 2.0 §5.1).
pub(super) const BUSY: i32 = -32000;

impl Relay {
    /// Handles one line from the client.
    pub(super) fn on_client_line(&self, line: String) {
        if line.trim().is_empty() {
            return;
        }
        // Weighed before it is parsed (`super::weigh`): one too heavy is never built whole.
        let weight = crate::weigh::raw_weight(line.as_bytes());
        if weight > crate::weigh::MAX_LINE_WEIGHT {
            self.refuse_heavy(&line, weight);
            return;
        }
        // Fail closed: a line we cannot parse is never forwarded, since a more lenient
        // upstream parser might read a tools/call in it that was never gated; nor is one
        // that two parsers could read differently (a duplicate key, a number a double
        // would change).
        let msg: Value = match assent_core::json::parse_value(line.as_bytes()) {
            Ok(v) => v,
            Err(e) => {
                let _ = self.to_client.send(refusal(&line, &e));
                return;
            }
        };
        if msg.is_array() {
            let _ = self.to_client.send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "assent: JSON-RPC batches are not supported"}}).to_string());
            return;
        }
        // The client's answer to a request: the proxy's own or the upstream's, never another.
        if msg.get("method").is_none() {
            self.on_client_answer(msg);
            return;
        }
        // Refused before anything is noted under its id (found by review: an `initialize`
        // refused as reusing a call's id in flight had already claimed the id for its answer,
        // and the call's answer was relayed as the initialize's, past its record and hold).
        if let Some(id) = msg.get("id")
            && let Some(why) = self.id_in_use(id)
        {
            tracing::warn!(id = %id, "refused a client request: {why}");
            let _ = self
                .to_client
                .send(reply(id, Err(rmcp::ErrorData::invalid_request(why, None))));
            return;
        }
        if let Some(id) = msg.get("id")
            && let Some(why) = self.over_bound(&msg["method"])
        {
            tracing::warn!(id = %id, "refused a client request: {why}");
            let busy = rmcp::ErrorData::new(rmcp::model::ErrorCode(BUSY), why, None);
            let _ = self.to_client.send(reply(id, Err(busy)));
            return;
        }
        let mut msg = msg;
        // The proxy serves the tasks flow itself; the upstream never sees it declared.
        let declares_tasks = take_tasks_capability(&mut msg);
        self.state.ends.read_client(&msg);
        // A modern client retrying with its in-client answer resumes its approval; the
        // upstream sees a first call.
        let resume = (msg["method"] == "tools/call")
            .then(|| {
                era::resumed_approval(&msg["params"])
                    .map(|id| (id, era::input_answer(&msg["params"])))
            })
            .flatten();
        era::strip_own_round(&mut msg);
        if msg["method"] == "initialize" {
            self.note_initialize(&msg, declares_tasks);
        }
        self.route(msg, declares_tasks, resume);
    }

    /// A client line over `max` bytes (skipped to its end, never read whole): refused with
    /// `-32600` under no id (it was not read).
    pub(super) fn refuse_long_line(&self, max: usize) {
        tracing::warn!(max, "refused a client line over the limit");
        let why = format!("assent: a line over {} MiB was refused", max >> 20);
        let _ = self.to_client.send(
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": why}})
                .to_string(),
        );
    }

    /// A client line of `weight` past [`crate::weigh::MAX_LINE_WEIGHT`], never parsed whole
    /// (only its id and method are read, [`crate::weigh::envelope`]) and never forwarded or
    /// gated: a request is answered `-32600` naming the bound (under `null` when its id cannot
    /// be read), an answer to a request of the upstream's or the proxy's own is passed on as
    /// an error under its id (so that nothing waits for it), and a notification is dropped
    /// with a warning. The error answering an upstream's request may be [`Owed`] as any
    /// client answer is.
    fn refuse_heavy(&self, line: &str, weight: usize) {
        use crate::weigh::{Envelope, Id};
        let why = crate::weigh::too_heavy(weight);
        tracing::warn!(weight, "refused a client line too heavy to parse");
        let error = |id: &Value| json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": why}});
        match crate::weigh::envelope(line.as_bytes()) {
            Some(Envelope {
                id: Id::Absent,
                method: true,
            }) => tracing::warn!("dropped a client notification too heavy to parse"),
            Some(Envelope {
                id: Id::Is(id),
                method: false,
            }) => self.on_client_answer(error(&id)),
            Some(Envelope { method: false, .. }) => {
                tracing::warn!("dropped a client answer too heavy to parse");
            }
            Some(Envelope {
                id: Id::Is(id),
                method: true,
            }) => {
                let _ = self.to_client.send(error(&id).to_string());
            }
            Some(Envelope { id: Id::Odd, .. }) | None => {
                let _ = self.to_client.send(error(&Value::Null).to_string());
            }
        }
    }

    /// The client's answer `msg` (no method) to a request: to one of the proxy's own
    /// elicitations, kept here; to one of the upstream's requests, sent upstream under the
    /// upstream's own id — at once when that queue has room and nothing is owed before it,
    /// else added to the answers [`Owed`] (sent in order once the queue has room,
    /// [`Relay::pay_owed`]), or dropped with a warning past that list's bound; any other (no
    /// id, an id nobody asked under, one answered already) is dropped with a warning. Found by
    /// review: an answer finding the queue full was dropped, so the upstream waited for it for
    /// ever, and with it the call that asked (sampling, elicitation, roots); then, held
    /// until there was room with no further client line read, it kept the relay from seeing
    /// its client leave or cancel a held call, and an approval given later ran a call for a
    /// client that was gone. Now the relay reads on while answers are owed.
    fn on_client_answer(&self, mut msg: Value) {
        let st = &self.state;
        let own = msg["id"]
            .as_str()
            .and_then(|id| st.elicits.lock().expect("elicits").remove(id));
        if let Some(w) = own {
            let _ = w.send(msg);
            return;
        }
        let key = msg.get("id").map(Value::to_string).unwrap_or_default();
        let upstream_id = st.from_upstream.lock().expect("from upstream").remove(&key);
        let Some(id) = upstream_id else {
            tracing::warn!(id = %key, "dropped a client answer to no open request");
            return;
        };
        msg["id"] = id;
        if !self.upstream_full() {
            let _ = self.to_upstream.send(msg.to_string());
            return;
        }
        if self.owed.lock().expect("owed").push(msg.to_string()) {
            tracing::debug!(id = %key, "a client answer is owed to the upstream: its queue is full");
        } else {
            tracing::warn!(id = %key, "dropped a client answer: the upstream's queue is full and {MAX_OWED} answers or {} MiB are owed to it", MAX_OWED_BYTES >> 20);
        }
    }

    /// Whether the upstream takes no further client line now: its queue is full, or client
    /// answers are [`Owed`] to it (which go first, so that the client's lines keep their
    /// order).
    fn upstream_full(&self) -> bool {
        self.to_upstream.full() || self.owes()
    }

    /// Whether client answers are [`Owed`] to the upstream.
    pub(super) fn owes(&self) -> bool {
        !self.owed.lock().expect("owed").answers.is_empty()
    }

    /// Sends the answers [`Owed`] to the upstream, oldest first, while its queue has room;
    /// once its writer is gone (the upstream left), drops them all.
    pub(super) fn pay_owed(&self) {
        let mut owed = self.owed.lock().expect("owed");
        while !self.to_upstream.full() || self.to_upstream.closed() {
            let Some(answer) = owed.pop() else { return };
            if self.to_upstream.send(answer).is_err() {
                tracing::warn!("dropped a client answer: the upstream's stdin is closed");
            }
        }
    }

    /// Drops the answers [`Owed`] to the upstream (the client left), with a warning.
    pub(super) fn drop_owed(&self) {
        let mut owed = self.owed.lock().expect("owed");
        if !owed.answers.is_empty() {
            tracing::warn!(
                n = owed.answers.len(),
                "dropped the client's answers owed to the upstream: the client left"
            );
            *owed = Owed::default();
        }
    }

    /// Why a client request may not use `id`: one of the relay's own (`assent-…`, the
    /// prefix of its questions, the upstream's requests and its tasks), or one still in flight
    /// (held at the gateway, cleared and queued for the upstream, a `tools/list` whose answer
    /// is awaited, a `server/discover` relayed or parked, or open at the upstream) — an answer for one would be taken for the other,
    /// and a `call.result` recorded for the wrong answer (found by review: an id reused while
    /// its cleared call waited in the upstream's queue had the first call's result recorded
    /// and released under the second call's rules). `None`: free.
    fn id_in_use(&self, id: &Value) -> Option<&'static str> {
        let st = &self.state;
        if id.as_str().is_some_and(|s| s.starts_with("assent-")) {
            return Some("ids starting with assent- are the proxy's own");
        }
        // Found by review: `1` and `1.0` (or `1e0`) are two ids here but one number to most
        // upstreams, which answer both as `1`: the answer of one call was taken for the other's,
        // its result recorded and its output limit applied under the other's rules. JSON-RPC
        // ids should have no fractional part; a number is taken as an integer only.
        if id.is_number() && !(id.is_i64() || id.is_u64()) {
            return Some("a numeric id must be an integer");
        }
        let key = id.to_string();
        let held = st.waiting.lock().expect("waiting").contains_key(&key);
        let queued = st.forwarded.lock().expect("forwarded").contains_key(&key)
            || st.list_ids.lock().expect("ids").contains(&key)
            || st.init_ids.lock().expect("inits").contains_key(&key)
            || st.ends.parks_init(&key)
            || st.ends.holds_discover(&key);
        (held || queued || st.upstream_open.is_open(&key))
            .then_some("a request with this id is still in flight")
    }

    /// Why a client request (of `method`) is refused as one too many, if it is: more than
    /// [`MAX_IN_FLIGHT`] requests of the client in flight (gated calls held or on their way,
    /// requests queued for the upstream or open there), or the upstream's queue full
    /// ([`super::lines::MAX_QUEUED`]) or client answers [`Owed`] to it (which go first).
    /// Found by review: nothing bounded them, so a client
    /// flooding requests at a slow upstream grew the proxy's memory without bound. The
    /// proxy's own tasks (`tasks/*`, answered here from what it holds) are never refused here,
    /// so a client can still read and cancel what it started (what one about a task the
    /// process does not know starts is bounded in [`super::task_names`]).
    fn over_bound(&self, method: &Value) -> Option<String> {
        if method.as_str().is_some_and(|m| m.starts_with("tasks/")) {
            return None;
        }
        let st = &self.state;
        let in_flight = st.waiting.lock().expect("waiting").len() + st.upstream_open.in_use();
        if in_flight >= MAX_IN_FLIGHT {
            return Some(format!(
                "assent: {MAX_IN_FLIGHT} requests are in flight already; send more once some are answered"
            ));
        }
        self.upstream_full().then(|| {
            "assent: the upstream is not reading its requests; send more once it has".into()
        })
    }

    /// Sends the client's notification `line` upstream, unless the upstream's queue is full
    /// ([`super::lines::MAX_QUEUED`]) or client answers are [`Owed`] to it: then it is
    /// dropped with a warning (a notification has no answer to carry an error).
    fn notify_upstream(&self, line: String) {
        if self.upstream_full() {
            tracing::warn!("dropped a client notification: the upstream's queue is full");
            return;
        }
        let _ = self.to_upstream.send(line);
    }

    /// Notes what a client's `initialize` declares: elicitation, the tasks extension (its
    /// answer then advertises it) and its protocol version (for the handshake's translation).
    fn note_initialize(&self, msg: &Value, declares_tasks: bool) {
        let st = &self.state;
        let can = msg["params"]["capabilities"]["elicitation"].is_object();
        st.client_elicits.store(can, Ordering::SeqCst);
        st.client_tasks.store(declares_tasks, Ordering::SeqCst);
        if let Some(id) = msg.get("id") {
            st.init_ids
                .lock()
                .expect("inits")
                .insert(id.to_string(), declares_tasks);
        }
        if let Some(id) = msg.get("id") {
            st.ends.note_legacy_init(
                id.clone(),
                msg["params"]["protocolVersion"]
                    .as_str()
                    .map(str::to_string),
            );
        }
    }

    /// Answers client request `id` with `-32601` and `why`: a method the proxy does not relay.
    fn not_relayed(&self, id: &Value, why: String) {
        let code = rmcp::model::ErrorCode::METHOD_NOT_FOUND;
        let _ = self
            .to_client
            .send(reply(id, Err(rmcp::ErrorData::new(code, why, None))));
    }

    /// Routes a client message (read, gated where it must be) to its handler or upstream.
    fn route(&self, mut msg: Value, declares_tasks: bool, resume: Resume) {
        let st = &self.state;
        // A task-augmented call (2025-11-25 `params.task`) would have the upstream answer with
        // a task whose result (`tasks/result`) reaches the client past the proxy's record and
        // output hold (found by review). The proxy does not declare that capability, so the
        // call is taken as a plain one (a receiver that does not support task augmentation
        // processes the request normally), and its result passes through the proxy.
        if msg["method"] == "tools/call"
            && let Some(p) = msg.get_mut("params").and_then(Value::as_object_mut)
        {
            p.remove("task");
        }
        // What goes upstream is the serialisation of the value the proxy read and gated,
        // never the client's bytes.
        let line = msg.to_string();
        match (msg["method"].as_str(), msg.get("id")) {
            (Some("tools/call"), Some(id)) => {
                let id = id.clone();
                drop(line);
                self.on_tools_call(msg, id, declares_tasks, resume);
            }
            // A tools/call without an id gets no answer, so it is dropped, never forwarded.
            (Some("tools/call"), None) => {
                tracing::warn!("dropped a tools/call notification (no id)");
            }
            // The proxy's own tasks: read, cancelled, and (asking for no input) updated here.
            (Some(m @ ("tasks/get" | "tasks/cancel" | "tasks/update")), Some(id)) => {
                self.on_task_request(m, id, &msg);
            }
            // The upstream's own tasks are never the client's to read: the proxy makes none
            // upstream (above), and a task made otherwise would hand out a result the proxy
            // never recorded or checked against its limit.
            (Some(m @ ("tasks/result" | "tasks/list")), Some(id)) => {
                self.not_relayed(id, format!("{m}: the proxy serves no upstream tasks"));
            }
            // What no rule gates is not relayed unless asked for (found by review:
            // `resources/read` read through the proxy what a policy holds as a tool call).
            (Some(m), id) if ungated(m) => {
                if st.pass_ungated {
                    self.pass_on(id, line);
                } else if let Some(id) = id {
                    self.not_relayed(id, format!(
                        "{m}: assent mcp relays tools only (no rule gates or records this method); start it with --pass-ungated to relay it unchecked"
                    ));
                }
            }
            // Nor, ever, a method the proxy does not know (found by review: an upstream's own
            // `tools/execute` went upstream through the catch-all, around the gate).
            (Some(m), id) if !relayed(m, id.is_some()) => match id {
                Some(id) => self.not_relayed(id, format!(
                    "{m}: not a request assent mcp relays (tools and the protocol around them only: no rule gates or records anything else)"
                )),
                None => tracing::warn!(method = m, "dropped a notification the proxy does not relay"),
            },
            (Some("server/discover"), Some(id)) => match st.ends.discover(id) {
                Some(mut r) => {
                    super::handshake::offered(&mut r, st.pass_ungated);
                    let _ = self.to_client.send(reply(id, Ok(r)));
                }
                // Its id in use from here (found by review: sent bare, a call under the same
                // id could pass while the discover waited for the writer, and the upstream's
                // one answer under it was taken for either).
                None => self.pass_on(Some(id), line),
            },
            // The modern revision has no ping: answered here for a legacy client.
            (Some("ping"), Some(id)) if st.ends.upstream() == Some(Era::Modern) => {
                let _ = self.to_client.send(reply(id, Ok(json!({}))));
            }
            (Some("tools/list"), Some(id)) => {
                st.list_ids.lock().expect("ids").insert(id.to_string());
                let _ = self.to_upstream.send(line);
            }
            (Some("notifications/cancelled"), None) => self.on_client_cancel(&msg, line),
            (Some("notifications/initialized"), None) => {
                // A modern upstream has no handshake to finish.
                if st.ends.upstream() != Some(Era::Modern) {
                    self.notify_upstream(line);
                }
                // Read the upstream's tools to check them against their pins.
                self.ask_pins();
            }
            (Some(_), id) => self.pass_on(id, line),
            (None, _) => {}
        }
    }

    /// The client's `notifications/cancelled` `msg` (its text `line`): a call still held at the
    /// gateway is stopped there and never forwarded (its approval withdrawn), its id in use
    /// until its job has let go of it ([`super::state::State::stop_waiting`]); a request open
    /// upstream, or a call cleared and on its way there, has the cancellation passed on; one of
    /// the proxy's own (`assent-…`: its tool list, a task's or a resumed call) is not the
    /// client's to cancel, since a call cut off there would leave no `call.result` behind, and
    /// the cancellation is dropped.
    fn on_client_cancel(&self, msg: &Value, line: String) {
        let request = &msg["params"]["requestId"];
        if request.as_str().is_some_and(|r| r.starts_with("assent-")) {
            tracing::warn!("dropped a cancellation of one of the proxy's own requests");
            return;
        }
        let why = "the MCP client cancelled the request";
        match self.state.stop_waiting(&request.to_string(), None, why) {
            StopResult::Stopped => {}
            StopResult::NotWaiting | StopResult::Forwarding => {
                // A receiver should not answer a cancelled request: a proxy whose client left
                // does not wait for this one's result (its late answer is still reported). Its
                // bytes count no more once the upstream's writer gives it up
                // ([`super::state::State::given_up`]).
                let key = request.to_string();
                if let Some(f) = self
                    .state
                    .forwarded
                    .lock()
                    .expect("forwarded")
                    .get_mut(&key)
                {
                    f.settling = None;
                }
                self.notify_upstream(line);
            }
        }
    }

    /// Sends client message `line` (a request's `id`, if any, noted as open there) upstream.
    fn pass_on(&self, id: Option<&Value>, line: String) {
        match id {
            Some(id) => {
                self.state.upstream_open.queue(id.to_string());
                let _ = self.to_upstream.send(line);
            }
            None => self.notify_upstream(line),
        }
    }
}

/// Whether `method` is one no rule gates: resources, prompts and completions, relayed only
/// with [`crate::ProxyConfig::pass_ungated`].
fn ungated(method: &str) -> bool {
    method.starts_with("resources/")
        || method.starts_with("prompts/")
        || method == "completion/complete"
}

/// Whether the relay passes client method `method` on (a request when `request`, else a
/// notification): tools and the protocol around them — the requests `initialize`, `ping`,
/// `logging/setLevel`, `server/discover`, `subscriptions/listen`, `tools/list`, `tools/call`,
/// and the client's notifications `initialized`, `cancelled`, `progress` and
/// `roots/list_changed`. The proxy's own `tasks/*` and the [`ungated`] methods are routed
/// before this is asked. Anything else is answered `-32601` (a notification is dropped): an
/// allowlist, so that an upstream's own method to run a tool never goes around the gate.
fn relayed(method: &str, request: bool) -> bool {
    if request {
        matches!(
            method,
            "initialize"
                | "ping"
                | "logging/setLevel"
                | "server/discover"
                | "subscriptions/listen"
                | "tools/list"
                | "tools/call"
        )
    } else {
        matches!(
            method,
            "notifications/initialized"
                | "notifications/cancelled"
                | "notifications/progress"
                | "notifications/roots/list_changed"
        )
    }
}

/// Removes the tasks extension from the client capabilities `msg` declares (at `initialize`
/// or in a request's `_meta`), so that the upstream answers every forwarded call itself and
/// its result passes through the proxy. Returns whether it was declared.
fn take_tasks_capability(msg: &mut Value) -> bool {
    let mut declared = false;
    // `get_mut`, not indexing: indexing would add `"params": null` to every message.
    let Some(params) = msg.get_mut("params").filter(|p| p.is_object()) else {
        return false;
    };
    if let Some(ext) = params
        .pointer_mut("/capabilities/extensions")
        .and_then(Value::as_object_mut)
    {
        declared |= ext.remove(TASKS).is_some();
    }
    if let Some(ext) = params
        .get_mut("_meta")
        .and_then(|m| m.get_mut(CLIENT_CAPS_META))
        .and_then(|c| c.get_mut("extensions"))
        .and_then(Value::as_object_mut)
    {
        declared |= ext.remove(TASKS).is_some();
    }
    declared
}
