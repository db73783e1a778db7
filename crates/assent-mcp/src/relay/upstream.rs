//! Upstream → client: the reader of the upstream's stdout. It keeps the proxy's own
//! `tools/list` pages for the pin check (never relayed), lets the handshake be translated
//! between eras, advertises the tasks extension in the answer to `initialize`, filters the
//! client's `tools/list` to declared and pinned tools, and reports every forwarded call's
//! result (holding one over its `output_bytes` for an operator). Every other line passes
//! through unchanged.

use super::handshake::{Handshake, handshake};
use super::pins::PIN_ID_PREFIX;
use super::state::{Forwarded, State, ask_pins_once};
use crate::kit::{TASKS, apply_pins, denied_result, denied_value};
use rmcp::task_manager::TaskExit;
use serde_json::{Value, json};
use std::ops::ControlFlow;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// The reader's view of the relay: the shared state, the client's line, and a weak line to
/// the upstream (the reader must not keep the upstream's stdin open after the client left).
pub(super) struct UpstreamSide {
    pub(super) state: Arc<State>,
    pub(super) to_client: mpsc::UnboundedSender<String>,
    pub(super) to_upstream: mpsc::WeakUnboundedSender<String>,
}

impl UpstreamSide {
    /// Reads the upstream's lines until it closes its stdout (or the client's line is gone).
    pub(super) async fn read(self, out: tokio::process::ChildStdout) {
        let mut lines = BufReader::new(out).lines();
        // The proxy's own tools/list pages, accumulated until the last one.
        let mut own_pages: Vec<Value> = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if self.on_line(line, &mut own_pages).await.is_break() {
                break;
            }
        }
    }

    /// One line from the upstream: `Break` when the reader should stop.
    async fn on_line(&self, line: String, own_pages: &mut Vec<Value>) -> ControlFlow<()> {
        let parsed = serde_json::from_str::<Value>(&line).ok();
        let response = parsed
            .as_ref()
            .filter(|v| v.get("method").is_none() && v.get("id").is_some());
        let Some(v) = response else {
            return self.relay(line);
        };
        let key = v["id"].to_string();
        // The proxy's own tools/list: check the pins, never relay.
        if v["id"]
            .as_str()
            .is_some_and(|i| i.starts_with(PIN_ID_PREFIX))
        {
            return self.own_page(v, own_pages).await;
        }
        // The handshake, translated between eras where the two ends differ.
        let st = &self.state;
        match handshake(
            &st.ends,
            v,
            &key,
            &self.to_client,
            &self.to_upstream,
            &st.client_tasks,
        ) {
            Handshake::Relay => {}
            Handshake::Done { pins: ask } => {
                if let Some(tu) = self.to_upstream.upgrade().filter(|_| ask) {
                    ask_pins_once(&st.pins_asked, &tu);
                }
                return ControlFlow::Continue(());
            }
        }
        // The answer to initialize: the proxy serves the tasks extension itself.
        if st.init_ids.lock().expect("inits").remove(&key) {
            let mut v = v.clone();
            if let Some(caps) = v["result"]["capabilities"].as_object_mut() {
                let ext = caps.entry("extensions").or_insert_with(|| json!({}));
                if let Some(ext) = ext.as_object_mut() {
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
            Some(f) => match self.on_result(f, v, line) {
                Some(line) => self.relay(line),
                None => ControlFlow::Continue(()),
            },
            None => self.relay(line),
        }
    }

    /// Sends `line` to the client: `Break` when the client's line is gone.
    fn relay(&self, line: String) -> ControlFlow<()> {
        match self.to_client.send(line) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    }

    /// One page of the proxy's own `tools/list`: asks for the next page, or, at the last one,
    /// reports the whole list and publishes the pin check.
    async fn own_page(&self, v: &Value, own_pages: &mut Vec<Value>) -> ControlFlow<()> {
        own_pages.extend(v["result"]["tools"].as_array().cloned().unwrap_or_default());
        match v["result"]["nextCursor"].as_str() {
            Some(c) if own_pages.len() < 100_000 => {
                let n = own_pages.len();
                let Some(tu) = self.to_upstream.upgrade() else {
                    return ControlFlow::Break(());
                };
                let _ = tu.send(
                    json!({"jsonrpc": "2.0", "id": format!("{PIN_ID_PREFIX}{n}"),
                    "method": "tools/list", "params": {"cursor": c}})
                    .to_string(),
                );
            }
            _ => {
                let checked = if v.get("error").is_some() {
                    Err(format!("the upstream's tools/list failed: {}", v["error"]))
                } else {
                    self.state.gw.check_tools(own_pages).await
                };
                if let Err(e) = &checked {
                    tracing::warn!(error = %e, "tool list not verified: every call is refused");
                }
                self.state.pins.send_replace(Some(checked));
                own_pages.clear();
            }
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
                    self.state.pins.send_modify(|p| {
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

    /// A forwarded call's answer `v` (its text `line`): the result is reported (its
    /// `call.result` record committed, issue 13 §4: no answer before its record is durable;
    /// one over its limit also waits for an operator's release), and only then relayed, or
    /// handed to its task; a result whose report fails is withheld (fail closed). Always
    /// `None`: the line is sent by the task this spawns.
    fn on_result(&self, mut f: Forwarded, v: &Value, line: String) -> Option<String> {
        let result = v.get("result").map(Value::to_string).unwrap_or_default();
        let (gw, tc, v) = (self.state.gw.clone(), self.to_client.clone(), v.clone());
        let task = f.task.take();
        let report = async move {
            gw.release(&f.tool, &f.arguments, &result, f.approval_id.as_deref())
                .await
        };
        // A task's call: its result goes to the task, not to the client.
        if let Some(done) = task {
            tokio::spawn(async move {
                let reported = report.await;
                let outcome = match (v.get("result"), reported) {
                    (Some(_), Err(why)) => Ok(denied_value(&format!("result withheld: {why}"))),
                    (Some(r), Ok(())) => Ok(r.clone()),
                    (None, _) => Err(TaskExit::Error(
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
                Ok(()) => line,
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
