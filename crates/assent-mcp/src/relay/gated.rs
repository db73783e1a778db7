//! What goes upstream for a `tools/call` the gateway cleared: the call rebuilt from what was
//! gated, never the client's `params` passed on. The approval's `call_hash` covers the tool and
//! its arguments only, so every other key a client puts in `params` or `params._meta` stays in
//! the proxy unless the protocol needs it, and then only in the form the protocol gives it
//! (found by review: `params.overrides` and `_meta` entries of the client's choosing reached the
//! upstream beside an approved call).

use crate::era;
use assent_api::trace::valid_traceparent;
use serde_json::{Map, Value, json};

/// The longest `tracestate` passed on (W3C Trace Context: at most 32 entries of at most 256
/// characters each; 512 is what a vendor is asked to keep).
const MAX_TRACESTATE: usize = 512;

/// The `_meta` key of a modern request's log level (2026-07-28: it replaces
/// `logging/setLevel`).
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

/// The `tools/call` request sent upstream for client request `msg` (its `id`), of `tool` with
/// `arguments` (the operator's edit when there is one). `params` holds:
/// - `name` and `arguments`;
/// - the upstream's own `input_required` round, when the client answers one: `requestState`
///   (a string; assent's own was taken out before, and the relay checked this one is the
///   upstream's for this call, [`super::rounds`]) and `inputResponses` (an object), taken out
///   of `arguments`' [`INPUT_RESPONSES_ARG`], where they were gated ([`input_responses_of`]);
/// - from the client's `_meta`: `progressToken` (a string or an integer), `traceparent` (a
///   valid W3C one), `tracestate` (a string of at most [`MAX_TRACESTATE`] bytes), and, when
///   the upstream speaks the modern revision (`modern`), the envelope (protocol version and
///   log level as strings, client info and capabilities as objects).
///
/// Anything else — another key, a value of another shape — is left out.
pub(super) fn gated_call(msg: &Value, tool: &str, arguments: &Value, modern: bool) -> Value {
    let mut params = Map::new();
    params.insert("name".into(), json!(tool));
    let mut arguments = arguments.clone();
    let client = msg.get("params").and_then(Value::as_object);
    if let Some(p) = client
        && let Some(state) = p.get("requestState").filter(|s| s.is_string())
    {
        params.insert("requestState".into(), state.clone());
        let gated = arguments
            .as_object_mut()
            .map(|a| a.remove(INPUT_RESPONSES_ARG));
        if let Some(Some(r)) = gated.filter(|r| r.as_ref().is_some_and(Value::is_object)) {
            params.insert("inputResponses".into(), r);
        }
    }
    params.insert("arguments".into(), arguments);
    if let Some(meta) = client
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    {
        let kept: Map<String, Value> = meta
            .iter()
            .filter(|(k, v)| passes(k, v, modern))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            params.insert("_meta".into(), Value::Object(kept));
        }
    }
    json!({"jsonrpc": "2.0", "id": msg["id"], "method": "tools/call", "params": params})
}

pub(super) use crate::era::INPUT_RESPONSES_ARG;

/// Takes the `inputResponses` of continuation `msg` (see [`kept_of_call`]) out of it, to be
/// gated with `arguments` under [`INPUT_RESPONSES_ARG`] ([`fold_input_responses`]): `None`
/// when it gives none (absent or empty). Checked before the upstream's round is used up, so
/// that a refused continuation can be sent again. Errors: the refusal's words when the
/// arguments are not an object or hold that name (whether or not it gives answers).
pub(super) fn input_responses_of(
    msg: &mut Value,
    arguments: &Value,
) -> Result<Option<Value>, &'static str> {
    let Some(args) = arguments.as_object() else {
        return Err("a continuation's arguments must be an object");
    };
    if args.contains_key(INPUT_RESPONSES_ARG) {
        return Err(
            "a continuation's arguments may not hold `$inputResponses`: its inputResponses are gated under that name",
        );
    }
    Ok(msg["params"]
        .as_object_mut()
        .and_then(|p| p.remove("inputResponses"))
        .filter(|r| r.as_object().is_some_and(|r| !r.is_empty())))
}

/// Puts a continuation's `responses` ([`input_responses_of`]) into its `arguments` (an
/// object, checked there) under [`INPUT_RESPONSES_ARG`].
pub(super) fn fold_input_responses(arguments: &mut Value, responses: Option<Value>) {
    if let (Some(r), Some(args)) = (responses, arguments.as_object_mut()) {
        args.insert(INPUT_RESPONSES_ARG.into(), r);
    }
}

/// What the relay keeps of client `tools/call` request `msg` while the call is gated: its
/// arguments, moved out and returned (`{}` when it has none), and `msg` cut down in place to
/// what [`gated_call`] and the call's trace span read — `id`, `params.name`, the upstream's own
/// input round, and the `_meta` entries that may go upstream (those a modern upstream gets,
/// the most that go). Found by review: the whole parsed request was kept with a clone of its
/// arguments beside it, while the bound on what calls in flight hold counted its text once —
/// `[0,0,…]` parsed holds some 35 times its text, and keys the gateway never sees were kept.
pub(super) fn kept_of_call(msg: &mut Value) -> Value {
    let mut params = match msg.get_mut("params").map(Value::take) {
        Some(Value::Object(p)) => p,
        _ => Map::new(),
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(a) => a,
    };
    let mut kept = Map::new();
    if let Some(name) = params.remove("name") {
        kept.insert("name".into(), name);
    }
    if let Some(state) = params.remove("requestState").filter(Value::is_string) {
        kept.insert("requestState".into(), state);
        if let Some(r) = params.remove("inputResponses").filter(Value::is_object) {
            kept.insert("inputResponses".into(), r);
        }
    }
    if let Some(Value::Object(meta)) = params.remove("_meta") {
        let meta: Map<String, Value> = meta
            .into_iter()
            .filter(|(k, v)| passes(k, v, true))
            .collect();
        if !meta.is_empty() {
            kept.insert("_meta".into(), Value::Object(meta));
        }
    }
    let id = msg.get_mut("id").map(Value::take).unwrap_or_default();
    *msg = json!({"id": id, "params": kept});
    arguments
}

/// Whether `_meta` entry `key: value` of a client's call goes upstream with it (see
/// [`gated_call`]).
fn passes(key: &str, value: &Value, modern: bool) -> bool {
    match key {
        "progressToken" => value.is_string() || value.is_i64() || value.is_u64(),
        "traceparent" => value.as_str().is_some_and(valid_traceparent),
        "tracestate" => value.as_str().is_some_and(|s| s.len() <= MAX_TRACESTATE),
        era::PROTOCOL_VERSION_META | LOG_LEVEL_META => modern && value.is_string(),
        era::CLIENT_INFO_META | era::CLIENT_CAPS_META => modern && value.is_object(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn only_the_gated_call_and_the_protocols_entries_in_their_shapes_go_upstream() {
        let msg = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "other", "arguments": {"a": 1}, "overrides": {"a": 2}, "task": {},
            "_meta": {"progressToken": 3, "traceparent": TP, "tracestate": "k=v",
                      "com.example/run_as": "root",
                      era::PROTOCOL_VERSION_META: era::MODERN_VERSION,
                      era::CLIENT_INFO_META: {"name": "c", "version": "1"},
                      LOG_LEVEL_META: "debug"}}});
        let legacy = gated_call(&msg, "t", &json!({"a": 5}), false);
        assert_eq!(
            legacy,
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                "name": "t", "arguments": {"a": 5},
                "_meta": {"progressToken": 3, "traceparent": TP, "tracestate": "k=v"}}})
        );
        let modern = gated_call(&msg, "t", &json!({"a": 5}), true);
        let meta = modern["params"]["_meta"].as_object().unwrap();
        assert_eq!(meta.len(), 6, "{modern}");
        assert!(meta.get("com.example/run_as").is_none());
    }

    #[test]
    fn entries_of_another_shape_are_left_out() {
        let msg = json!({"id": 1, "params": {"name": "t", "_meta": {
            "progressToken": {"path": "/etc/shadow"}, "traceparent": {"x": 1},
            "tracestate": "x".repeat(MAX_TRACESTATE + 1),
            era::CLIENT_INFO_META: "root", era::CLIENT_CAPS_META: []}}});
        let up = gated_call(&msg, "t", &json!({}), true);
        assert!(up["params"].get("_meta").is_none(), "{up}");
        let bad_tp = json!({"id": 1, "params": {"_meta": {"traceparent": "00-zz"}}});
        assert!(
            gated_call(&bad_tp, "t", &json!({}), false)["params"]
                .get("_meta")
                .is_none()
        );
    }

    /// A continuation's answers are gated with its arguments and go upstream as its
    /// `inputResponses`, never beside what was gated; a stray one (no `requestState`) is left
    /// out, and a continuation whose own arguments hold the reserved name is refused.
    #[test]
    fn the_upstreams_own_input_round_is_answered_with_what_was_gated() {
        let mut msg = json!({"id": 1, "params": {"name": "t", "requestState": "up-1",
            "inputResponses": {"q": {"action": "accept"}}}});
        let mut args = json!({"a": 1});
        let responses = input_responses_of(&mut msg, &args).unwrap();
        fold_input_responses(&mut args, responses);
        assert_eq!(args[INPUT_RESPONSES_ARG]["q"]["action"], "accept");
        assert!(msg["params"].get("inputResponses").is_none(), "{msg}");
        let up = gated_call(&msg, "t", &args, true);
        assert_eq!(up["params"]["requestState"], "up-1");
        assert_eq!(up["params"]["inputResponses"]["q"]["action"], "accept");
        assert_eq!(up["params"]["arguments"], json!({"a": 1}), "{up}");
        let edited = json!({"a": 1, INPUT_RESPONSES_ARG: {"q": {"action": "decline"}}});
        let up = gated_call(&msg, "t", &edited, true);
        assert_eq!(up["params"]["inputResponses"]["q"]["action"], "decline");
        let stray = json!({"id": 1, "params": {"name": "t", "inputResponses": {"q": {}}}});
        let up = gated_call(&stray, "t", &json!({}), true);
        assert!(up["params"].get("inputResponses").is_none(), "{up}");
        let squat = json!({INPUT_RESPONSES_ARG: {"q": {"action": "accept"}}});
        for given in [json!({"q": {}}), json!({})] {
            let mut msg = json!({"id": 1, "params": {"name": "t", "requestState": "up-1",
                "inputResponses": given}});
            assert!(input_responses_of(&mut msg, &squat).is_err());
            assert!(input_responses_of(&mut msg, &json!([1])).is_err());
        }
    }

    /// Review finding: the relay kept the whole parsed request (every `params` key, the client's
    /// `_meta` of any size) and a clone of its arguments while a call waited. What it keeps is
    /// the arguments (moved out) and what goes upstream: the same call is rebuilt from it.
    #[test]
    fn a_held_call_keeps_only_what_goes_upstream() {
        let mut msg = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "t", "arguments": {"a": [0, 0, 0]}, "pad": "x".repeat(1000),
            "requestState": "up-1", "inputResponses": {"q": {}},
            "_meta": {"progressToken": 3, "com.example/pad": "y".repeat(1000),
                      era::CLIENT_INFO_META: {"name": "c", "version": "1"}}}});
        let whole = msg.clone();
        let args = kept_of_call(&mut msg);
        assert_eq!(args, json!({"a": [0, 0, 0]}));
        assert!(msg.to_string().len() < 200, "{msg}");
        for modern in [false, true] {
            assert_eq!(
                gated_call(&msg, "t", &args, modern),
                gated_call(&whole, "t", &args, modern)
            );
        }
        let mut bare = json!({"id": "b", "method": "tools/call", "params": {"name": "t"}});
        assert_eq!(kept_of_call(&mut bare), json!({}));
        assert_eq!(bare, json!({"id": "b", "params": {"name": "t"}}));
    }

    /// Review finding: the held-bytes bound counted a call's text, while `[0,0,…]` parsed holds
    /// some 35 times it. What is kept of a call is weighed as it is held: far more than its text.
    #[test]
    fn a_call_of_zeros_weighs_far_more_than_its_text() {
        let text = format!(
            r#"{{"id":1,"params":{{"name":"t","arguments":{{"z":[{}0]}}}}}}"#,
            "0,".repeat(10_000)
        );
        let mut msg: Value = serde_json::from_str(&text).unwrap();
        let args = kept_of_call(&mut msg);
        let weight = crate::kit::json_weight(&args) + crate::kit::json_weight(&msg);
        assert!(
            weight > 25 * text.len(),
            "{weight} for {} bytes",
            text.len()
        );
    }
}
