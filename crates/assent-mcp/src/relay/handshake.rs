//! The upstream's answers to the handshake, translated where the two ends speak different eras
//! (issue 11): a modern client's `server/discover` answered from a legacy upstream's
//! `initialize`, and a legacy client's `initialize` answered from a modern upstream's
//! `server/discover`. Everything else the upstream says is relayed by the upstream reader.

use crate::ends::{self, Ends};
use crate::era::{self, Era};
use crate::kit::reply;
use serde_json::{Value, json};

/// What [`handshake`] did with an upstream response.
pub(super) enum Handshake {
    /// Not part of a translated handshake: relay it as usual.
    Relay,
    /// Handled; `pins`: the upstream is ready, so its tools may be checked now.
    Done { pins: bool },
}

/// Takes out of an upstream's `initialize` or `server/discover` result `r` the capabilities
/// the proxy does not serve: the 2025-11-25 task-augmented requests (the proxy takes
/// `params.task` off every call) and, unless `pass_ungated`, resources, prompts and
/// completions ([`crate::ProxyConfig::pass_ungated`]).
pub(super) fn offered(r: &mut Value, pass_ungated: bool) {
    if let Some(caps) = r["capabilities"].as_object_mut() {
        caps.remove("tasks");
        if !pass_ungated {
            for c in ["resources", "prompts", "completions"] {
                caps.remove(c);
            }
        }
    }
}

/// The upstream's answers to the handshake, translated where the two ends speak different
/// eras (issue 11):
/// - the answer to a modern client's `server/discover`: a modern upstream's is relayed (with
///   the tasks extension the proxy serves); any other (a legacy upstream's error) makes the
///   proxy `initialize` the upstream itself and answer the discover from that;
/// - the answer to a legacy client's `initialize`: an `UNSUPPORTED_PROTOCOL_VERSION` error (a
///   modern-only upstream) makes the proxy `server/discover` it and answer from that.
pub(super) fn handshake(
    ends: &Ends,
    v: &Value,
    key: &str,
    tc: &super::lines::Lines,
    tu: &super::lines::WeakLines,
    client_tasks: &std::sync::atomic::AtomicBool,
    pass_ungated: bool,
) -> Handshake {
    // Weak, as the reader's: the upstream's stdin closes once the client has left.
    let to_upstream = |msg: Value| {
        if let Some(tu) = tu.upgrade() {
            let _ = tu.send(msg.to_string());
        }
    };
    let with_tasks = |mut r: Value, tasks: bool| {
        offered(&mut r, pass_ungated);
        if tasks && let Some(caps) = r.get_mut("capabilities") {
            crate::kit::offer_tasks(caps);
        }
        r
    };
    if let Some(id) = ends.take_probe(key) {
        let modern = v["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == era::MODERN_VERSION));
        if modern {
            ends.set_upstream(Era::Modern);
            let _ = tc.send(reply(&id, Ok(with_tasks(v["result"].clone(), true))));
            return Handshake::Done { pins: true };
        }
        tracing::info!(
            "the upstream speaks the handshake era: assent initialises it for the client"
        );
        ends.park_discover(id);
        let init = json!({"jsonrpc": "2.0", "id": ends::OWN_INIT_ID, "method": "initialize",
            "params": {"protocolVersion": era::LATEST_HANDSHAKE_VERSION, "capabilities": {},
                       "clientInfo": ends.client_info()}});
        to_upstream(init);
        return Handshake::Done { pins: false };
    }
    if v["id"] == ends::OWN_INIT_ID {
        let result = v.get("result").cloned();
        let parked = ends.initialised(result.clone().unwrap_or(Value::Null));
        if let Some(id) = parked {
            let answer = match &result {
                Some(r) => {
                    let mut d = era::discover_from_initialize(r, true);
                    offered(&mut d, pass_ungated);
                    Ok(d)
                }
                None => Err(rmcp::ErrorData::internal_error(
                    format!("the upstream refused initialize: {}", v["error"]),
                    None,
                )),
            };
            let _ = tc.send(reply(&id, answer));
        }
        if result.is_some() {
            to_upstream(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        }
        return Handshake::Done {
            pins: result.is_some(),
        };
    }
    if v["id"] == ends::OWN_DISCOVER_ID {
        if let Some((id, version)) = ends.take_parked_init() {
            let answer = match v.get("result") {
                Some(r) => Ok(with_tasks(
                    era::initialize_from_discover(r, version.as_deref()),
                    client_tasks.load(std::sync::atomic::Ordering::SeqCst),
                )),
                None => Err(rmcp::ErrorData::internal_error(
                    format!("the upstream refused server/discover: {}", v["error"]),
                    None,
                )),
            };
            let _ = tc.send(reply(&id, answer));
        }
        return Handshake::Done { pins: false };
    }
    if let Some((id, version)) = ends.take_legacy_init(key) {
        if v["error"]["code"] == era::UNSUPPORTED_PROTOCOL_VERSION {
            tracing::info!(
                "the upstream speaks only the modern era: assent discovers it for the client"
            );
            ends.set_upstream(Era::Modern);
            // Answered when the discover is.
            ends.park_init(id, version);
            to_upstream(json!({"jsonrpc": "2.0", "id": ends::OWN_DISCOVER_ID,
                               "method": "server/discover"}));
            return Handshake::Done { pins: false };
        }
        ends.set_upstream(Era::Legacy);
    }
    Handshake::Relay
}
