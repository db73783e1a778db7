//! Upstream → client: the reader of the upstream's stdout. It hands the proxy's own
//! `tools/list` pages to the pin check (never relayed), lets the handshake be translated
//! between eras, advertises the tasks extension in the answer to `initialize`, filters the
//! client's `tools/list` to declared and pinned tools, and reports every forwarded call's
//! result (holding one over its `output_bytes` for an operator). Lines are read strictly and
//! relayed as the proxy's serialisation of what it read; an answer is taken only under an id
//! the relay sent and has not seen answered, and the upstream's own requests reach the client
//! under ids of the relay's (see `ids`).

use super::handshake::{Handshake, handshake};
use super::ids::{MAX_FROM_UPSTREAM, UPSTREAM_ID_PREFIX};
use super::pins::PIN_ID_PREFIX;
use super::state::{Forwarded, State};
use super::words::Shape;
use crate::kit::{TASKS, apply_pins, denied_result, denied_value};
use rmcp::task_manager::TaskExit;
use serde_json::{Value, json};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The longest upstream line read (16 MiB, the hub's bound per message); a longer one is
/// skipped to its end, never held whole.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// What [`whole_line`] found in one bounded read of a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Line {
    /// A whole line within the bound (its `\n` or `\r\n` taken off).
    Whole,
    /// A line over the bound, read to its end (its newline too): nothing to skip.
    OverEnded,
    /// A line over the bound whose rest is still to be skipped.
    Over,
}

/// The bytes one bounded read of a line holds at most: `max`, and its `\r\n` (found by
/// review: a line of `max` bytes ending in `\r\n` was read as `max + 1` bytes with no
/// newline and refused as over the bound, though the same line ending in `\n` passed).
pub(super) fn read_limit(max: usize) -> u64 {
    u64::try_from(max).unwrap_or(u64::MAX).saturating_add(2)
}

/// What `buf`, read up to a newline or [`read_limit`] bytes, holds: a whole line of at most
/// `max` bytes once its `\n` or `\r\n` is taken off (or the stream's last line within
/// `max`), or a line over `max`. The stdio proxy's two readers (the client's, blocking; the
/// upstream's, async) share it.
pub(super) fn whole_line(buf: &mut Vec<u8>, max: usize) -> Line {
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        return if buf.len() <= max {
            Line::Whole
        } else {
            Line::OverEnded
        };
    }
    if buf.len() <= max {
        Line::Whole
    } else {
        Line::Over
    }
}

/// Reads one line of `r` into `buf` (without its `\n` or `\r\n`), holding at most `max + 2`
/// bytes of it: `Some(true)` a line, `Some(false)` a line over `max` (skipped to its end,
/// `buf` emptied), `None` at the end of the stream.
pub(crate) async fn bounded_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    use tokio::io::AsyncReadExt as _;
    if (&mut *r)
        .take(read_limit(max))
        .read_until(b'\n', buf)
        .await?
        == 0
    {
        return Ok(None);
    }
    match whole_line(buf, max) {
        Line::Whole => return Ok(Some(true)),
        Line::OverEnded => {
            buf.clear();
            return Ok(Some(false));
        }
        Line::Over => {}
    }
    loop {
        buf.clear();
        let n = (&mut *r).take(64 * 1024).read_until(b'\n', buf).await?;
        if n == 0 || buf.last() == Some(&b'\n') {
            break;
        }
    }
    buf.clear();
    Ok(Some(false))
}

/// The reader's view of the relay: the shared state, the client's line, and a weak line to
/// the upstream (the reader must not keep the upstream's stdin open after the client left).
pub(super) struct UpstreamSide {
    pub(super) state: Arc<State>,
    pub(super) to_client: super::lines::Lines,
    pub(super) to_upstream: super::lines::WeakLines,
}

impl UpstreamSide {
    /// Reads the upstream's lines until it closes its stdout (or the client's line is gone).
    pub(super) async fn read(self, out: tokio::process::ChildStdout) {
        let mut reader = BufReader::new(out);
        let mut buf = Vec::new();
        loop {
            // Read on only once the client's queue has room (super::lines): an upstream
            // flooding a client that reads slowly waits, its pipe full, and holds no memory here.
            self.to_client.room().await;
            buf.clear();
            match bounded_line(&mut reader, &mut buf, MAX_LINE).await {
                Ok(Some(true)) => {}
                Ok(Some(false)) => {
                    tracing::warn!(max = MAX_LINE, "dropped an upstream line over the limit");
                    continue;
                }
                Ok(None) | Err(_) => break,
            }
            // One leading BOM off, as the hub takes it (`crate::weigh::without_bom`): the
            // strict parse below refuses one, so such a line was dropped, never passed on;
            // now an upstream writing one (some Windows tools do) is read, and judged whole.
            if buf.starts_with(b"\xEF\xBB\xBF") {
                let n = buf.len() - crate::weigh::without_bom(&buf).len();
                buf.drain(..n);
            }
            let Ok(line) = String::from_utf8(std::mem::take(&mut buf)) else {
                tracing::warn!("dropped an upstream line that is not UTF-8");
                continue;
            };
            if self.on_line(line).await.is_break() {
                break;
            }
        }
    }

    /// One line from the upstream: `Break` when the reader should stop. A request or a
    /// notification is relayed (a request under an id of the relay's); an answer only under
    /// an id the relay sent and that is still open ([`super::ids::OpenIds`]), once; anything
    /// else is dropped with a warning.
    async fn on_line(&self, line: String) -> ControlFlow<()> {
        let Some(v) = self.read_line(&line) else {
            return ControlFlow::Continue(());
        };
        match (v.get("method"), v.get("id")) {
            (Some(Value::String(_)), Some(_)) => return self.upstream_request(v),
            (Some(Value::String(_)), None) => return self.upstream_notification(v),
            (None, Some(_)) => {}
            _ => {
                tracing::warn!("dropped an upstream line that is no JSON-RPC message");
                return ControlFlow::Continue(());
            }
        }
        let key = v["id"].to_string();
        if !self.state.upstream_open.take(&key) {
            tracing::warn!(id = %key, "dropped an upstream answer to no open request");
            return ControlFlow::Continue(());
        }
        self.on_answer(&v, key).await
    }

    /// One line from the upstream, read strictly ([`assent_core::json::parse_value`]: no
    /// duplicate key, no number a double would change), as one JSON object. An answer that
    /// fails that becomes a JSON-RPC error under its id (so whoever waits for it learns why);
    /// any other such line is dropped: `None`.
    fn read_line(&self, line: &str) -> Option<Value> {
        if line.trim().is_empty() {
            return None;
        }
        // Weighed before it is parsed (`super::weigh`): one too heavy is never built whole.
        let weight = crate::weigh::raw_weight(line.as_bytes());
        if weight > crate::weigh::MAX_LINE_WEIGHT {
            return self.refuse_heavy(line, weight);
        }
        let why = match assent_core::json::parse_value(line.as_bytes()) {
            Ok(v) if v.is_object() => return Some(v),
            Ok(_) => "not one JSON-RPC message (a batch?)".to_string(),
            Err(e) => e.to_string(),
        };
        tracing::warn!(reason = %why, "refused an upstream line");
        let lenient = serde_json::from_str::<Value>(line).ok()?;
        let id = lenient
            .get("id")
            .filter(|_| lenient.get("method").is_none())?;
        Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603,
            "message": format!("assent: the upstream's answer was refused: {why}")}}))
    }

    /// An upstream line of `weight` past [`crate::weigh::MAX_LINE_WEIGHT`], never parsed
    /// whole (only its id and method are read, [`crate::weigh::envelope`]) and never relayed:
    /// an answer becomes a JSON-RPC error under its id naming the bound (so whoever waits for
    /// it learns why, and a forwarded call has it reported as its result); a request of the
    /// upstream's is answered with that error, when its queue has room and its id is within
    /// [`crate::weigh::MAX_ANSWER_ID`] (the hub's bound, [`crate::weigh::answerable`]: found
    /// by review, it was answered under an id of any length); anything else is dropped with
    /// a warning.
    fn refuse_heavy(&self, line: &str, weight: usize) -> Option<Value> {
        let why = crate::weigh::too_heavy(weight);
        tracing::warn!(weight, "refused an upstream line too heavy to parse");
        let (id, method) = crate::weigh::answerable(line.as_bytes(), false)?;
        if method {
            let error =
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": why}});
            if let Some(up) = self.to_upstream.upgrade().filter(|u| !u.full()) {
                let _ = up.send(error.to_string());
            }
            return None;
        }
        Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603,
            "message": format!("assent: the upstream's answer was refused: {why}")}}))
    }

    /// One of the upstream's own requests (sampling, elicitation, ping…), relayed to the
    /// client under an id of the relay's (`assent-upstream-N`), so that it can never name one
    /// of the relay's own requests; the client's answer goes back under the upstream's id.
    /// With [`MAX_FROM_UPSTREAM`] open already, or under an id that is no `null`, integer or
    /// string of at most [`crate::weigh::MAX_ANSWER_ID`] bytes ([`crate::weigh::answerable_id`],
    /// the hub's rule), it is dropped (with a warning). Found by review: an id of any type and
    /// length was kept, so 10,000 open requests under 16 MiB ids (or objects of up to 64 MiB)
    /// were held, and each answer repeating one queued for an upstream that read nothing.
    fn upstream_request(&self, mut v: Value) -> ControlFlow<()> {
        if !crate::weigh::answerable_id(&v["id"]) {
            tracing::warn!(
                max_id_bytes = crate::weigh::MAX_ANSWER_ID,
                "dropped an upstream request: its id is no integer or string of at most 1 KiB"
            );
            return ControlFlow::Continue(());
        }
        let st = &self.state;
        let mut open = st.from_upstream.lock().expect("from upstream");
        if open.len() >= MAX_FROM_UPSTREAM {
            // Dropped, not answered: an upstream flooding requests while it reads nothing
            // would otherwise grow the queue of error replies to it without bound.
            drop(open);
            tracing::warn!("too many upstream requests open at the client: one dropped");
            return ControlFlow::Continue(());
        }
        let n = st.upstream_seq.fetch_add(1, Ordering::SeqCst);
        let ours = json!(format!("{UPSTREAM_ID_PREFIX}{n}"));
        open.insert(ours.to_string(), v["id"].take());
        drop(open);
        v["id"] = ours;
        self.relay(v.to_string())
    }

    /// One of the upstream's notifications, relayed; its cancellation of one of its own
    /// requests names that request by the id the client saw (and is dropped when the client
    /// never saw it).
    fn upstream_notification(&self, mut v: Value) -> ControlFlow<()> {
        if v["method"] == "notifications/tools/list_changed" {
            self.state.pins.changed(self.to_upstream.upgrade());
        }
        if v["method"] == "notifications/cancelled" {
            let theirs = v["params"]["requestId"].clone();
            let mut open = self.state.from_upstream.lock().expect("from upstream");
            let ours = open
                .iter()
                .find(|(_, id)| **id == theirs)
                .map(|(k, _)| k.clone());
            let Some(ours) = ours else {
                tracing::warn!("dropped the upstream's cancellation of no open request");
                return ControlFlow::Continue(());
            };
            open.remove(&ours);
            drop(open);
            // `params` may be no object (an id of `null` matches the missing `requestId`):
            // indexing it would panic (found by review); such a notification is dropped.
            let Some(p) = v.get_mut("params").and_then(Value::as_object_mut) else {
                return ControlFlow::Continue(());
            };
            p.insert(
                "requestId".into(),
                serde_json::from_str(&ours).unwrap_or_default(),
            );
        }
        self.relay(v.to_string())
    }

    /// The upstream's answer `v` under open id `key` (its JSON text), routed: the proxy's own
    /// requests, the handshake, `initialize`, a client's `tools/list`, a forwarded call's
    /// result, or relayed as it was read.
    async fn on_answer(&self, v: &Value, key: String) -> ControlFlow<()> {
        // The proxy's own tools/list: check the pins, never relay.
        let st = &self.state;
        if v["id"]
            .as_str()
            .is_some_and(|i| i.starts_with(PIN_ID_PREFIX))
        {
            st.pins.page(v, &st.gw, self.to_upstream.upgrade()).await;
            return ControlFlow::Continue(());
        }
        // A handshake answer shows the client only the upstream's words pinned, checked
        // before anything of it is answered or kept (`super::words`).
        let presented;
        let v = match self.handshake_shape(v, &key) {
            Some(shape) => {
                let mut p = v.clone();
                super::words::present(&st.gw, &mut p["result"], shape).await;
                presented = p;
                &presented
            }
            // Any other answer carrying the server's words anyway (an overlapping discover's,
            // a legacy upstream's probe answer) loses them: they were never checked.
            None if super::words::carries(&v["result"]) => {
                let mut p = v.clone();
                super::words::strip_unchecked(&mut p["result"], st.gw.server());
                presented = p;
                &presented
            }
            None => v,
        };
        // The handshake, translated between eras where the two ends differ.
        match handshake(
            &st.ends,
            v,
            &key,
            &self.to_client,
            &self.to_upstream,
            &st.client_tasks,
            st.pass_ungated,
        ) {
            Handshake::Relay => {}
            Handshake::Done { pins: ask } => {
                // The client's `initialize` under this id is answered by the translation: its
                // mark goes (found by review: left behind, it made the answer to a later call
                // reusing the id pass as the answer to `initialize`, unrecorded and unheld).
                st.init_ids.lock().expect("inits").remove(&key);
                if let Some(tu) = self.to_upstream.upgrade().filter(|_| ask) {
                    st.pins.ask_once(&tu);
                }
                return ControlFlow::Continue(());
            }
        }
        // The answer to initialize: the proxy serves the tasks extension itself (to a client
        // that declared it), and not the upstream's 2025-11-25 task-augmented requests.
        let init = st.init_ids.lock().expect("inits").remove(&key);
        if let Some(declared) = init {
            let mut v = v.clone();
            if v["result"].is_object() {
                super::handshake::offered(&mut v["result"], st.pass_ungated);
            }
            // Read with `get_mut`: indexing a `result` that is not an object (the upstream's
            // to choose) would panic (found by review).
            let caps = v.get_mut("result").and_then(|r| r.get_mut("capabilities"));
            if let Some(caps) = caps.and_then(Value::as_object_mut) {
                let ext = caps.entry("extensions").or_insert_with(|| json!({}));
                if let Some(ext) = ext.as_object_mut().filter(|_| declared) {
                    ext.insert(TASKS.into(), json!({}));
                }
            }
            return self.relay(v.to_string());
        }
        // A client's tools/list: declared tools only, pinned definitions only.
        if st.list_ids.lock().expect("ids").remove(&key) {
            let v = self.client_tools_list(v.clone()).await;
            return self.relay(v.to_string());
        }
        // A forwarded call's result: reported (its record committed) before it is relayed;
        // over its limit, held for an operator.
        let entry = st.forwarded.lock().expect("forwarded").remove(&key);
        match entry {
            Some(f) => match self.on_result(f, v) {
                Some(line) => self.relay(line),
                None => ControlFlow::Continue(()),
            },
            None => self.relay(v.to_string()),
        }
    }

    /// Where upstream answer `v` under open id `key` carries the upstream's own words, when
    /// it is a handshake answer with a result: to the proxy's own `initialize` or
    /// `server/discover`, to the client's `initialize`, or to the client's discover probe when
    /// the upstream speaks the modern era (a legacy upstream's answer to it is no handshake:
    /// the proxy then initialises it, and that answer carries the words).
    fn handshake_shape(&self, v: &Value, key: &str) -> Option<Shape> {
        let st = &self.state;
        let r = v.get("result").filter(|r| r.is_object())?;
        if v["id"] == crate::ends::OWN_INIT_ID {
            return Some(Shape::Initialize);
        }
        if v["id"] == crate::ends::OWN_DISCOVER_ID {
            return Some(Shape::Discover);
        }
        if st.ends.is_probe(key) {
            let modern = r["supportedVersions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == crate::era::MODERN_VERSION));
            return modern.then_some(Shape::Discover);
        }
        st.init_ids
            .lock()
            .expect("inits")
            .contains_key(key)
            .then_some(Shape::Initialize)
    }

    /// Sends `line` to the client. When the client's line is gone, `line` is dropped, and
    /// the reader reads on (`Continue`) while forwarded calls wait for their results, else
    /// stops (`Break`): found by review, it stopped at the first line relayed once the client's
    /// stdout was gone, so a forwarded call's result after a progress or log notification was
    /// never read, and the proxy waited its whole settling bound for a report that never came.
    fn relay(&self, line: String) -> ControlFlow<()> {
        if self.to_client.send(line).is_ok() {
            return ControlFlow::Continue(());
        }
        if self.state.forwarded.lock().expect("forwarded").is_empty() {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// The answer to a client's `tools/list`, rewritten: declared tools only, held tools in
    /// their pinned definition (none at all when the list cannot be verified).
    async fn client_tools_list(&self, mut v: Value) -> Value {
        if let Some(tools) = v["result"]["tools"].as_array_mut() {
            if let Some(allowed) = &self.state.declared {
                tools.retain(|t| {
                    t["name"]
                        .as_str()
                        .is_some_and(|n| allowed.iter().any(|a| a == n))
                });
            }
            match self.state.gw.check_tools(tools).await {
                Ok(states) => {
                    apply_pins(tools, &states);
                    self.state.pins.result.send_modify(|p| {
                        if let Some(Ok(map)) = p {
                            map.extend(states);
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "tool list not verified: no tool is shown");
                    tools.clear();
                }
            }
        }
        v
    }

    /// A forwarded call's answer `v`: the result is reported (its
    /// `call.result` record committed, issue 13 §4: no answer before its record is durable;
    /// one over its limit also waits for an operator's release), and only then relayed, or
    /// handed to its task; a result whose report fails is withheld (fail closed). What is
    /// relayed is `v`'s `result`, or when it has none its `error`, alone under `v`'s id: that
    /// is what is measured, hashed and held. Found by review: only `result` was measured, so
    /// an error answer (its message and `data` of any size, which clients hand the model as
    /// the tool's output), or an error beside a small result, went past `output_bytes`
    /// unreviewed, recorded as 0 bytes. Always `None`: the line is sent by the task this
    /// spawns.
    fn on_result(&self, mut f: Forwarded, v: &Value) -> Option<String> {
        let v = one_outcome(v);
        self.note_round(&f, &v);
        let result = v.get("result").or(v.get("error")).map(Value::to_string);
        let result = result.unwrap_or_default();
        let (gw, tc) = (self.state.gw.clone(), self.to_client.clone());
        let task = f.task.take();
        // The call's bytes and its mark for the settling are let go of once it is reported.
        let report = async move {
            // The text this proxy wrote from a value parses back to that value.
            let arguments: Value = serde_json::from_str(&f.arguments).unwrap_or_default();
            let reported = gw
                .release(&f.tool, &arguments, &result, f.approval_id.as_deref())
                .await;
            drop((f.held, f.settling));
            reported
        };
        // A task's call: its result goes to the task, not to the client.
        if let Some(done) = task {
            tokio::spawn(async move {
                let reported = report.await;
                let outcome = match (v.get("result"), reported) {
                    (_, Err(why)) => Ok(denied_value(&format!("result withheld: {why}"))),
                    (Some(r), Ok(())) => Ok(r.clone()),
                    (None, Ok(())) => Err(TaskExit::Error(
                        serde_json::from_value(v["error"].clone()).unwrap_or_else(|_| {
                            rmcp::ErrorData::internal_error("the upstream failed", None)
                        }),
                    )),
                };
                let _ = done.send(outcome);
            });
            return None;
        }
        tokio::spawn(async move {
            let out = match report.await {
                Ok(()) => v.to_string(),
                Err(why) => {
                    tracing::info!(reason = %why, "result withheld");
                    denied_result(&v["id"], &format!("result withheld: {why}"))
                }
            };
            let _ = tc.send(out);
        });
        None
    }
}

impl UpstreamSide {
    /// Remembers the `requestState` of answer `v` to forwarded call `f` when it asks for
    /// input (`resultType: input_required`), with the call's tool and arguments: the only
    /// continuation a client may send upstream ([`super::rounds`]).
    fn note_round(&self, f: &Forwarded, v: &Value) {
        let r = &v["result"];
        if r["resultType"] != "input_required" {
            return;
        }
        if let (Some(state), Ok(mut arguments)) = (
            r["requestState"].as_str(),
            serde_json::from_str::<Value>(&f.arguments),
        ) {
            // The client continues with the call's own arguments, without the answers it
            // gave to an earlier round (gated beside them).
            if let Some(a) = arguments.as_object_mut() {
                a.remove(super::gated::INPUT_RESPONSES_ARG);
            }
            let mut rounds = self.state.rounds.lock().expect("rounds");
            rounds.note(state, &f.tool, &arguments);
        }
    }
}

/// An upstream's answer `v` with one outcome: its `result` alone, else its `error` alone (an
/// answer with neither is an internal error), under `v`'s id.
fn one_outcome(v: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("jsonrpc".into(), "2.0".into());
    out.insert("id".into(), v["id"].clone());
    match (v.get("result"), v.get("error")) {
        (Some(r), _) => out.insert("result".into(), r.clone()),
        (None, Some(e)) => out.insert("error".into(), e.clone()),
        (None, None) => out.insert(
            "error".into(),
            serde_json::json!({"code": -32603, "message": "the upstream answered with neither a result nor an error"}),
        ),
    };
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::bounded_line;

    /// Attack: an upstream writes one endless line, hoping the relay holds it whole until it
    /// runs out of memory. A line over the limit is skipped to its end; the next still reads.
    #[tokio::test]
    async fn a_line_over_the_limit_is_skipped_not_held() {
        let input = format!("short\n{}\nnext\r\nlast", "X".repeat(200_000));
        let mut r = tokio::io::BufReader::new(input.as_bytes());
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(whole) = bounded_line(&mut r, &mut buf, 10).await.unwrap() {
            assert!(buf.len() <= 12, "held {} bytes", buf.len());
            got.push((whole, String::from_utf8(std::mem::take(&mut buf)).unwrap()));
        }
        let want = [(true, "short"), (false, ""), (true, "next"), (true, "last")];
        let want: Vec<(bool, String)> = want.iter().map(|(w, s)| (*w, s.to_string())).collect();
        assert_eq!(got, want);
    }
}
