//! MCP protocol eras and the translation between them (issue 11), as pure functions on
//! JSON-RPC messages.
//!
//! Two eras meet at the proxy and the hub:
//! - **legacy** (the `initialize` handshake, revisions 2024-11-05 … 2025-11-25): a session is
//!   set up once; results carry no `resultType`; the server may send requests to the client
//!   (elicitation, sampling, roots);
//! - **modern** (2026-07-28 and later): stateless; a client probes `server/discover`, every
//!   request carries an envelope in `params._meta` (`io.modelcontextprotocol/protocolVersion`,
//!   `…/clientInfo`, `…/clientCapabilities`), every result is tagged with `resultType`
//!   (`complete`, `input_required`, or `task` from the tasks extension) and list/read results
//!   carry caching hints (`ttlMs`, `cacheScope`); a server that needs the user's input answers
//!   with an `input_required` result instead of sending a request (SEP-2322).
//!
//! Each message crosses in its receiver's era: [`to_legacy_request`] / [`to_modern_request`]
//! for requests going upstream, [`to_modern_result`] / [`to_legacy_result`] for results going
//! back, [`discover_from_initialize`] / [`initialize_from_discover`] for the handshake, and
//! [`input_required`] / [`input_answer`] for an in-client approval asked of a modern client.

use crate::ask::UserAnswer;
use serde_json::{Map, Value, json};

/// The modern revision the proxy and the hub speak (2026-07-28).
pub const MODERN_VERSION: &str = "2026-07-28";
/// The newest handshake-era revision, offered in an `initialize` the proxy sends itself.
pub const LATEST_HANDSHAKE_VERSION: &str = "2025-11-25";
/// Every handshake-era revision the proxy accepts from a client.
pub const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// `_meta` key of a modern request's protocol version.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of a modern request's client name and version.
pub const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of a modern request's client capabilities.
pub const CLIENT_CAPS_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of a modern result's server name and version.
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";
/// The prefix of the `_meta` keys the protocol reserves for itself.
const RESERVED_PREFIX: &str = "io.modelcontextprotocol/";
/// JSON-RPC error code of a protocol version the server does not speak (`data.supported`
/// names the ones it does).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// The prefix of the `requestState` of an in-client approval asked by assent; what follows
/// is the approval id. A `requestState` without it belongs to the upstream.
pub const REQUEST_STATE_PREFIX: &str = "assent-approval:";
/// The `inputRequests` key of assent's in-client question.
pub const INPUT_KEY: &str = "assent-approval";

/// The argument under which a continuation's `inputResponses` are gated: the answers the
/// client gives the upstream's own questions are data the tool acts on, so the approver sees
/// them and the `call_hash` covers them. Found by review: they went upstream beside a call
/// gated on `{name, arguments}` alone, so an approver shown `pay {}` let an amount the agent
/// chose reach the tool. Reserved in a continuation's own arguments; an approval holding it
/// is never resumed ([`crate::gateway::Gateway::resume`]).
pub const INPUT_RESPONSES_ARG: &str = "$inputResponses";

/// A protocol era.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Era {
    /// The `initialize` handshake (revisions up to 2025-11-25).
    #[default]
    Legacy,
    /// The stateless per-request envelope (2026-07-28).
    Modern,
}

/// The era a client's message speaks, when it says: `server/discover`, or any request whose
/// `_meta` names a protocol version that is not a handshake one, is modern; `initialize` is
/// legacy; anything else (notifications, responses, requests without an envelope) says
/// nothing (`None`).
pub fn of_request(msg: &Value) -> Option<Era> {
    match msg.get("method").and_then(Value::as_str) {
        Some("server/discover") => return Some(Era::Modern),
        Some("initialize") => return Some(Era::Legacy),
        _ => {}
    }
    let v = msg
        .pointer("/params/_meta")?
        .get(PROTOCOL_VERSION_META)?
        .as_str()?;
    (!HANDSHAKE_VERSIONS.contains(&v)).then_some(Era::Modern)
}

/// The envelope of a modern request (`params._meta` keys `…/protocolVersion`, `…/clientInfo`,
/// `…/clientCapabilities`), to stamp on the requests the proxy sends a modern upstream itself.
pub fn envelope_of(msg: &Value) -> Map<String, Value> {
    let mut env = Map::new();
    if let Some(meta) = msg.pointer("/params/_meta").and_then(Value::as_object) {
        for k in [PROTOCOL_VERSION_META, CLIENT_INFO_META, CLIENT_CAPS_META] {
            if let Some(v) = meta.get(k) {
                env.insert(k.to_string(), v.clone());
            }
        }
    }
    env
}

/// The envelope a legacy client's `initialize` stands for on a modern upstream: its client
/// info and capabilities at [`MODERN_VERSION`].
pub fn envelope_from_initialize(init: &Value) -> Map<String, Value> {
    let p = &init["params"];
    let mut env = Map::new();
    env.insert(PROTOCOL_VERSION_META.into(), json!(MODERN_VERSION));
    env.insert(
        CLIENT_INFO_META.into(),
        p.get("clientInfo")
            .cloned()
            .unwrap_or_else(|| json!({"name": "assent", "version": env!("CARGO_PKG_VERSION")})),
    );
    env.insert(
        CLIENT_CAPS_META.into(),
        p.get("capabilities").cloned().unwrap_or_else(|| json!({})),
    );
    env
}

/// A modern request made fit for a legacy upstream: the reserved `io.modelcontextprotocol/*`
/// keys leave `params._meta` (others, such as `progressToken`, stay); an emptied `_meta` is
/// removed.
pub fn to_legacy_request(msg: &mut Value) {
    let Some(params) = msg.get_mut("params").and_then(Value::as_object_mut) else {
        return;
    };
    let emptied = match params.get_mut("_meta").and_then(Value::as_object_mut) {
        Some(meta) => {
            meta.retain(|k, _| !k.starts_with(RESERVED_PREFIX));
            meta.is_empty()
        }
        None => false,
    };
    if emptied {
        params.remove("_meta");
    }
}

/// A request made fit for a modern upstream: `envelope` is stamped into `params._meta` (keys
/// already there are kept).
pub fn to_modern_request(msg: &mut Value, envelope: &Map<String, Value>) {
    let Some(obj) = msg.as_object_mut() else {
        return;
    };
    let params = obj.entry("params").or_insert_with(|| json!({}));
    if !params.is_object() {
        return;
    }
    let meta = params
        .as_object_mut()
        .expect("object")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        for (k, v) in envelope {
            meta.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// Whether results of `method` carry caching hints on the modern revision.
fn cacheable(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "server/discover"
    )
}

/// A result going to a modern client: tagged `resultType: "complete"` when it has no tag, and,
/// for the cacheable methods, given the caching hints `ttlMs` 0 and `cacheScope` `private`
/// (never cached, never shared) in place of the upstream's: found by review, an upstream's own
/// hints (a day, `public`) stayed on the list the proxy had filtered and pinned, so a client
/// kept it, or shared it, past an operator's removal of a tool or a review's hold.
pub fn to_modern_result(result: &mut Value, method: Option<&str>) {
    let Some(r) = result.as_object_mut() else {
        return;
    };
    r.entry("resultType").or_insert_with(|| json!("complete"));
    if method.is_some_and(cacheable) {
        r.insert("ttlMs".into(), json!(0));
        r.insert("cacheScope".into(), json!("private"));
    }
}

/// A result going to a legacy client: `resultType: "complete"` and the caching hints are
/// removed (strict legacy clients reject unknown keys). `Err(why)` for a result a legacy
/// client cannot take (`input_required`).
pub fn to_legacy_result(result: &mut Value) -> Result<(), String> {
    let Some(r) = result.as_object_mut() else {
        return Ok(());
    };
    match r.get("resultType").and_then(Value::as_str) {
        Some("input_required") => {
            return Err(
                "the upstream asks for the user's input in a way this (pre-2026-07-28) client cannot answer"
                    .into(),
            );
        }
        Some("complete") => {
            r.remove("resultType");
        }
        _ => {}
    }
    r.remove("ttlMs");
    r.remove("cacheScope");
    Ok(())
}

/// The `server/discover` result a modern client gets for a legacy upstream, from the
/// upstream's `initialize` result: its capabilities, instructions and server info, at
/// [`MODERN_VERSION`]. `tasks` says whether to advertise the tasks extension (served by
/// assent itself).
pub fn discover_from_initialize(init: &Value, tasks: bool) -> Value {
    let mut caps = init["capabilities"].clone();
    if !caps.is_object() {
        caps = json!({});
    }
    // The 2025-11-25 experimental tasks capability has no meaning on the modern revision.
    if let Some(c) = caps.as_object_mut() {
        c.remove("tasks");
    }
    if tasks {
        crate::kit::offer_tasks(&mut caps);
    }
    let mut d = json!({
        "supportedVersions": [MODERN_VERSION],
        "capabilities": caps,
        "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
    });
    if let Some(i) = init.get("instructions").filter(|i| i.is_string()) {
        d["instructions"] = i.clone();
    }
    if let Some(s) = init.get("serverInfo").filter(|s| s.is_object()) {
        d["_meta"] = json!({ SERVER_INFO_META: s });
    }
    d
}

/// The `initialize` result a legacy client gets for a modern upstream, from its
/// `server/discover` result: the client's `requested` version when it is a handshake one
/// (else [`LATEST_HANDSHAKE_VERSION`]), the capabilities, instructions and server info.
pub fn initialize_from_discover(discover: &Value, requested: Option<&str>) -> Value {
    let version = requested
        .filter(|v| HANDSHAKE_VERSIONS.contains(v))
        .unwrap_or(LATEST_HANDSHAKE_VERSION);
    let mut caps = discover["capabilities"].clone();
    if !caps.is_object() {
        caps = json!({});
    }
    let info = discover
        .pointer(&format!("/_meta/{}", SERVER_INFO_META.replace('/', "~1")))
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"name": "upstream", "version": "0"}));
    let mut r = json!({"protocolVersion": version, "capabilities": caps, "serverInfo": info});
    if let Some(i) = discover.get("instructions").filter(|i| i.is_string()) {
        r["instructions"] = i.clone();
    }
    r
}

/// Whether a modern client's envelope (or a legacy client's capabilities) says it can answer
/// an elicitation form.
pub fn can_elicit(capabilities: &Value) -> bool {
    capabilities
        .get("elicitation")
        .is_some_and(Value::is_object)
}

/// The `input_required` result (SEP-2322) that asks a modern client's user the in-client
/// `question` about approval `approval_id`: one elicitation form under [`INPUT_KEY`], and the
/// approval named in `requestState` (checked against the gateway's record when the client
/// retries, never trusted).
pub fn input_required(question: &str, approval_id: &str) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": {
            "mode": "form", "message": question, "requestedSchema": crate::ask::elicitation_schema(),
        }}},
        "requestState": format!("{REQUEST_STATE_PREFIX}{approval_id}"),
    })
}

/// Whether `id` can be an approval id (1 to 128 ASCII letters, digits, `-` or `_`). Ids that
/// come from a client (a `requestState`, a task id) are checked before they go into a gateway
/// URL, so one can never name another path or add a query.
pub fn approval_id_ok(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The approval a retried `tools/call` resumes (its `params.requestState` is
/// [`REQUEST_STATE_PREFIX`] and an id that passes [`approval_id_ok`]), or `None` for a first
/// call, the upstream's own round, or a malformed state (the call is then gated as new).
pub fn resumed_approval(params: &Value) -> Option<String> {
    params
        .get("requestState")?
        .as_str()?
        .strip_prefix(REQUEST_STATE_PREFIX)
        .filter(|id| approval_id_ok(id))
        .map(str::to_string)
}

/// The user's answer in a retried `tools/call`'s `params.inputResponses[INPUT_KEY]` (an
/// elicitation result), as [`crate::user_answer`] reads it; `None` when there is none.
pub fn input_answer(params: &Value) -> Option<UserAnswer> {
    let r = params.get("inputResponses")?.get(INPUT_KEY)?;
    crate::ask::user_answer(r.get("action")?.as_str()?, r.get("content"))
}

/// Removes assent's own round (`inputResponses`, `requestState`) from a retried `tools/call`,
/// so the upstream sees the call as a first call.
pub fn strip_own_round(msg: &mut Value) {
    if let Some(p) = msg.get_mut("params").and_then(Value::as_object_mut)
        && p.get("requestState")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(REQUEST_STATE_PREFIX))
    {
        p.remove("requestState");
        p.remove("inputResponses");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modern(method: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": {
            PROTOCOL_VERSION_META: MODERN_VERSION, CLIENT_INFO_META: {"name": "c", "version": "1"},
            CLIENT_CAPS_META: {"elicitation": {}}, "progressToken": 7}}})
    }

    /// Found by review: `capabilities.extensions` of the upstream's making that is not an
    /// object was indexed as one, which panicked; it is replaced by one naming the tasks
    /// extension.
    #[test]
    fn an_upstreams_malformed_extensions_do_not_panic_the_discover_answer() {
        for ext in [json!("x"), json!([1]), json!(7)] {
            let init = json!({"capabilities": {"tools": {}, "extensions": ext}});
            let d = discover_from_initialize(&init, true);
            assert!(
                d["capabilities"]["extensions"][crate::kit::TASKS].is_object(),
                "{d}"
            );
        }
    }

    #[test]
    fn eras_are_read_from_the_handshake_or_the_envelope() {
        assert_eq!(of_request(&modern("server/discover")), Some(Era::Modern));
        assert_eq!(of_request(&modern("tools/call")), Some(Era::Modern));
        assert_eq!(
            of_request(&json!({"method": "initialize", "params": {}})),
            Some(Era::Legacy)
        );
        assert_eq!(of_request(&json!({"method": "tools/list"})), None);
        let old = json!({"method": "tools/list", "params": {"_meta": {PROTOCOL_VERSION_META: "2025-11-25"}}});
        assert_eq!(of_request(&old), None);
    }

    #[test]
    fn a_modern_request_loses_only_the_reserved_keys_for_a_legacy_upstream() {
        let mut m = modern("tools/call");
        to_legacy_request(&mut m);
        assert_eq!(m["params"]["_meta"], json!({"progressToken": 7}));
        let mut m = json!({"method": "tools/list", "params": {"_meta": {PROTOCOL_VERSION_META: MODERN_VERSION}}});
        to_legacy_request(&mut m);
        assert_eq!(m["params"], json!({}), "an emptied _meta is removed");
        // And back: the envelope is stamped, keys already there kept.
        let env = envelope_of(&modern("tools/call"));
        let mut m = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        to_modern_request(&mut m, &env);
        assert_eq!(m["params"]["_meta"][PROTOCOL_VERSION_META], MODERN_VERSION);
        assert_eq!(
            m["params"]["_meta"][CLIENT_CAPS_META],
            json!({"elicitation": {}})
        );
    }

    #[test]
    fn results_are_tagged_for_modern_clients_and_untagged_for_legacy_ones() {
        let mut r = json!({"content": []});
        to_modern_result(&mut r, Some("tools/call"));
        assert_eq!(r, json!({"content": [], "resultType": "complete"}));
        let mut l = json!({"tools": []});
        to_modern_result(&mut l, Some("tools/list"));
        assert_eq!(l["ttlMs"], 0);
        assert_eq!(l["cacheScope"], "private");
        // Attack (found by review): the upstream's own hints on a list the proxy filtered.
        let mut own = json!({"tools": [], "ttlMs": 86_400_000, "cacheScope": "public"});
        to_modern_result(&mut own, Some("tools/list"));
        assert_eq!(
            (&own["ttlMs"], &own["cacheScope"]),
            (&json!(0), &json!("private"))
        );
        to_legacy_result(&mut l).unwrap();
        assert_eq!(l, json!({"tools": []}));
        let mut task = json!({"resultType": "task", "task": {}});
        to_modern_result(&mut task, Some("tools/call"));
        assert_eq!(task["resultType"], "task", "an existing tag is kept");
        let mut ir = json!({"resultType": "input_required", "requestState": "x"});
        assert!(to_legacy_result(&mut ir).is_err());
    }

    #[test]
    fn the_handshakes_translate_both_ways() {
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": true},
            "tasks": {"list": {}}}, "serverInfo": {"name": "up", "version": "2"}, "instructions": "hi"});
        let d = discover_from_initialize(&init, true);
        assert_eq!(d["supportedVersions"], json!([MODERN_VERSION]));
        assert_eq!(d["capabilities"]["tools"], json!({"listChanged": true}));
        assert!(d["capabilities"].get("tasks").is_none());
        assert!(d["capabilities"]["extensions"][crate::kit::TASKS].is_object());
        assert_eq!(d["_meta"][SERVER_INFO_META]["name"], "up");
        assert_eq!(d["resultType"], "complete");
        let i = initialize_from_discover(&d, Some("2025-06-18"));
        assert_eq!(i["protocolVersion"], "2025-06-18");
        assert_eq!(i["serverInfo"]["name"], "up");
        assert_eq!(i["instructions"], "hi");
        let i = initialize_from_discover(&d, Some("2099-01-01"));
        assert_eq!(i["protocolVersion"], LATEST_HANDSHAKE_VERSION);
    }

    #[test]
    fn an_in_client_round_names_the_approval_and_reads_the_answer() {
        let ir = input_required("Approve?", "apr_1");
        assert_eq!(ir["resultType"], "input_required");
        assert_eq!(
            ir["inputRequests"][INPUT_KEY]["params"]["requestedSchema"]["required"],
            json!(["approve"])
        );
        let retry = json!({"name": "t", "requestState": ir["requestState"],
            "inputResponses": {INPUT_KEY: {"action": "accept", "content": {"approve": true, "reason": " ok "}}}});
        assert_eq!(resumed_approval(&retry).as_deref(), Some("apr_1"));
        let a = input_answer(&retry).unwrap();
        assert!(a.approve);
        assert_eq!(a.reason.as_deref(), Some("ok"));
        // The upstream's own round is not assent's.
        assert_eq!(resumed_approval(&json!({"requestState": "opaque"})), None);
        // A forged state naming another path or a query never reaches a gateway URL.
        for forged in ["../../v1/grants", "a?wait=60", "a/b", "", "é"] {
            let state = format!("{REQUEST_STATE_PREFIX}{forged}");
            assert_eq!(
                resumed_approval(&json!({"requestState": state})),
                None,
                "{forged}"
            );
        }
        assert!(approval_id_ok("7d0f2c1e-9a4b-4c1d-8e2f-0a1b2c3d4e5f"));
        let mut m = json!({"params": retry});
        strip_own_round(&mut m);
        assert!(m["params"].get("requestState").is_none());
        assert!(m["params"].get("inputResponses").is_none());
    }
}
