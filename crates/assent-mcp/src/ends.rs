//! What the stdio proxy knows of its two ends (issue 11): the era each speaks, the envelope
//! stamped on requests to a modern upstream, the method of each client request still
//! unanswered, and the handshake it translates. Every line passes through
//! [`Ends::to_client`] or [`Ends::to_upstream`] on its way out, so each message crosses in
//! its receiver's era (see [`crate::era`]); when both ends are legacy, lines pass untouched
//! and unparsed.

use crate::era::{self, Era};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Mutex;

/// At most this many client requests are remembered while unanswered (for the translation
/// of their results); a client that leaves more open gets untranslated results beyond it.
const MAX_OPEN_REQUESTS: usize = 10_000;

/// The id of the proxy's own `initialize` to a legacy upstream (for a modern client).
pub const OWN_INIT_ID: &str = "assent-init";
/// The id of the proxy's own `server/discover` to a modern upstream (for a legacy client).
pub const OWN_DISCOVER_ID: &str = "assent-discover";

/// Whether JSON-RPC id `id` is the one whose serialisation is `key`.
fn same_id(id: &Value, key: &str) -> bool {
    serde_json::to_string(id).is_ok_and(|s| s == key)
}

/// The proxy's view of both ends; shared by its tasks.
#[derive(Default)]
pub struct Ends {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    client: Option<Era>,
    upstream: Option<Era>,
    envelope: Map<String, Value>,
    open: HashMap<String, String>,
    /// The client's `server/discover` relayed as the probe of the upstream's era (its id).
    probe: Option<Value>,
    /// A modern client's discover waiting for the proxy's own `initialize` of a legacy
    /// upstream (its id).
    discover_waiting: Option<Value>,
    /// A legacy upstream's `initialize` result (answers later `server/discover` requests).
    init_result: Option<Value>,
    /// A legacy client's `initialize`: its id and requested version, until answered.
    legacy_init: Option<(Value, Option<String>)>,
    /// That `initialize`, parked while the proxy discovers a modern-only upstream.
    init_waiting: Option<(Value, Option<String>)>,
}

impl Ends {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client's era, once a message said it.
    pub fn client(&self) -> Option<Era> {
        self.lock().client
    }

    /// The upstream's era, once its handshake said it.
    pub fn upstream(&self) -> Option<Era> {
        self.lock().upstream
    }

    /// Records the upstream's era.
    pub fn set_upstream(&self, e: Era) {
        self.lock().upstream = Some(e);
    }

    /// Reads a client message (after its tasks extension was taken out): its era, its
    /// envelope (a modern request's, or a legacy `initialize`'s) and, for a request, its
    /// method under its id.
    pub fn read_client(&self, msg: &Value) {
        let mut i = self.lock();
        if let Some(e) = era::of_request(msg) {
            i.client = Some(e);
            let env = match e {
                Era::Modern => era::envelope_of(msg),
                Era::Legacy => era::envelope_from_initialize(msg),
            };
            if !env.is_empty() {
                i.envelope = env;
            }
        }
        // Only a modern client's results need their method (for the caching hints).
        if let (Some(m), Some(id)) = (msg.get("method").and_then(Value::as_str), msg.get("id"))
            && i.client == Some(Era::Modern)
            && i.open.len() < MAX_OPEN_REQUESTS
        {
            i.open.insert(id.to_string(), m.to_string());
        }
    }

    /// The client capabilities the client declared (modern: in its last envelope; legacy: at
    /// `initialize`).
    pub fn client_capabilities(&self) -> Value {
        self.lock()
            .envelope
            .get(era::CLIENT_CAPS_META)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// The client info to introduce the proxy with to a legacy upstream.
    pub fn client_info(&self) -> Value {
        self.lock()
            .envelope
            .get(era::CLIENT_INFO_META)
            .cloned()
            .unwrap_or_else(|| json!({"name": "assent", "version": env!("CARGO_PKG_VERSION")}))
    }

    /// A client's `server/discover` (id `id`): `Some(result)` when the proxy answers it itself
    /// (a legacy upstream it initialised already), else `None` and the request is relayed as
    /// the probe of the upstream's era.
    pub fn discover(&self, id: &Value) -> Option<Value> {
        let mut i = self.lock();
        match (&i.upstream, &i.init_result) {
            (Some(Era::Legacy), Some(init)) => Some(era::discover_from_initialize(init, true)),
            _ => {
                i.probe = Some(id.clone());
                None
            }
        }
    }

    /// Whether upstream response `key` (a JSON id) answers the client's discover probe (still
    /// awaited).
    pub fn is_probe(&self, key: &str) -> bool {
        self.lock().probe.as_ref().is_some_and(|p| same_id(p, key))
    }

    /// Whether upstream response `key` (a JSON id) answers the client's discover probe; it is
    /// then no longer awaited.
    pub fn take_probe(&self, key: &str) -> Option<Value> {
        let mut i = self.lock();
        let hit = i.probe.as_ref().is_some_and(|p| same_id(p, key));
        if hit { i.probe.take() } else { None }
    }

    /// Whether a client's `server/discover` of id `key` (JSON text) is still unanswered: the
    /// probe relayed to the upstream, or the one parked while the proxy initialises a legacy
    /// upstream. A client request may not reuse its id meanwhile (found by review: a call
    /// under a parked discover's id was forwarded, and the client got two answers under one
    /// id, the call's unrecorded if taken for the discover's).
    pub fn holds_discover(&self, key: &str) -> bool {
        let i = self.lock();
        [&i.probe, &i.discover_waiting]
            .into_iter()
            .any(|d| d.as_ref().is_some_and(|id| same_id(id, key)))
    }

    /// Parks a modern client's discover (id `id`) until the proxy's own `initialize` of the
    /// legacy upstream is answered.
    pub fn park_discover(&self, id: Value) {
        self.lock().discover_waiting = Some(id);
    }

    /// The legacy upstream answered the proxy's `initialize` with `result`: kept for later
    /// discovers; returns the parked discover's id.
    pub fn initialised(&self, result: Value) -> Option<Value> {
        let mut i = self.lock();
        i.upstream = Some(Era::Legacy);
        i.init_result = Some(result);
        i.discover_waiting.take()
    }

    /// Notes a legacy client's `initialize` (id, requested version) until it is answered.
    pub fn note_legacy_init(&self, id: Value, version: Option<String>) {
        self.lock().legacy_init = Some((id, version));
    }

    /// Whether upstream response `key` answers the legacy client's `initialize`: its id and
    /// requested version.
    pub fn take_legacy_init(&self, key: &str) -> Option<(Value, Option<String>)> {
        let mut i = self.lock();
        let hit = i
            .legacy_init
            .as_ref()
            .is_some_and(|(id, _)| same_id(id, key));
        if hit { i.legacy_init.take() } else { None }
    }

    /// Parks the legacy client's `initialize` while the proxy discovers a modern-only upstream.
    pub fn park_init(&self, id: Value, version: Option<String>) {
        self.lock().init_waiting = Some((id, version));
    }

    /// Whether the parked legacy `initialize` (not yet answered) has the id `key` (its JSON
    /// text): a request may not reuse it meanwhile.
    pub fn parks_init(&self, key: &str) -> bool {
        self.lock()
            .init_waiting
            .as_ref()
            .is_some_and(|(id, _)| serde_json::to_string(id).is_ok_and(|t| t == key))
    }

    /// The parked legacy `initialize` (id, requested version), once.
    pub fn take_parked_init(&self) -> Option<(Value, Option<String>)> {
        self.lock().init_waiting.take()
    }

    /// A line on its way to the client, in the client's era: a result is tagged for a modern
    /// client ([`era::to_modern_result`]) or untagged for a legacy one facing a modern
    /// upstream ([`era::to_legacy_result`]; one it cannot take becomes a JSON-RPC error).
    pub fn to_client(&self, line: String) -> String {
        let (client, upstream) = {
            let i = self.lock();
            (i.client, i.upstream)
        };
        if client != Some(Era::Modern) && upstream != Some(Era::Modern) {
            return line;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&line) else {
            return line;
        };
        if v.get("method").is_some() || v.get("id").is_none() {
            return line;
        }
        let method = self.lock().open.remove(&v["id"].to_string());
        if v.get("result").is_none() {
            return line;
        }
        let result = v.get_mut("result").expect("result");
        match client {
            Some(Era::Modern) => era::to_modern_result(result, method.as_deref()),
            _ => {
                if let Err(why) = era::to_legacy_result(result) {
                    return json!({"jsonrpc": "2.0", "id": v["id"],
                        "error": {"code": -32603, "message": format!("assent: {why}")}})
                    .to_string();
                }
            }
        }
        v.to_string()
    }

    /// A line on its way to the upstream, in the upstream's era: a request to a modern
    /// upstream carries the envelope ([`era::to_modern_request`]); a modern client's request
    /// to a legacy upstream loses the reserved `_meta` keys ([`era::to_legacy_request`]).
    /// `initialize` and `server/discover` go as they are.
    pub fn to_upstream(&self, line: String) -> String {
        let (client, upstream, envelope) = {
            let i = self.lock();
            let env = (i.upstream == Some(Era::Modern)).then(|| i.envelope.clone());
            (i.client, i.upstream, env)
        };
        let modern_up = upstream == Some(Era::Modern);
        let strip = upstream == Some(Era::Legacy) && client == Some(Era::Modern);
        if !modern_up && !strip {
            return line;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&line) else {
            return line;
        };
        match v.get("method").and_then(Value::as_str) {
            None | Some("initialize" | "server/discover") => return line,
            Some(_) => {}
        }
        match envelope {
            Some(env) if v.get("id").is_some() => era::to_modern_request(&mut v, &env),
            Some(_) => return line,
            None => era::to_legacy_request(&mut v),
        }
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_on_both_ends_passes_lines_untouched() {
        let ends = Ends::default();
        ends.read_client(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}));
        ends.set_upstream(Era::Legacy);
        let line = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}"#;
        assert_eq!(ends.to_client(line.into()), line);
        let req = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        assert_eq!(ends.to_upstream(req.into()), req);
    }

    #[test]
    fn a_modern_client_before_a_legacy_upstream_gets_tagged_results() {
        let ends = Ends::default();
        let env =
            json!({era::PROTOCOL_VERSION_META: era::MODERN_VERSION, era::CLIENT_CAPS_META: {}});
        ends.read_client(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": env}}),
        );
        ends.set_upstream(Era::Legacy);
        let up = ends.to_upstream(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": env}})
                .to_string(),
        );
        assert_eq!(
            serde_json::from_str::<Value>(&up).unwrap()["params"],
            json!({})
        );
        let back: Value = serde_json::from_str(
            &ends.to_client(r#"{"jsonrpc":"2.0","id":5,"result":{"tools":[]}}"#.into()),
        )
        .unwrap();
        assert_eq!(back["result"]["resultType"], "complete");
        assert_eq!(back["result"]["ttlMs"], 0);
    }

    #[test]
    fn a_legacy_client_before_a_modern_upstream_sends_the_envelope_and_gets_untagged_results() {
        let ends = Ends::default();
        ends.read_client(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "clientInfo": {"name": "old", "version": "1"},
            "capabilities": {"elicitation": {}}}}),
        );
        ends.set_upstream(Era::Modern);
        ends.read_client(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x"}}),
        );
        let up: Value = serde_json::from_str(&ends.to_upstream(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#.into(),
        ))
        .unwrap();
        assert_eq!(
            up["params"]["_meta"][era::PROTOCOL_VERSION_META],
            era::MODERN_VERSION
        );
        assert_eq!(up["params"]["_meta"][era::CLIENT_INFO_META]["name"], "old");
        let back: Value = serde_json::from_str(&ends.to_client(
            r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","content":[]}}"#.into(),
        ))
        .unwrap();
        assert_eq!(back["result"], json!({"content": []}));
        let ir = ends.to_client(
            r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"input_required","requestState":"s"}}"#.into(),
        );
        assert!(ir.contains("\"error\""), "{ir}");
    }
}
