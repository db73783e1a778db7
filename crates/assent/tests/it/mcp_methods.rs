//! Which client methods the stdio proxy (`assent mcp`) relays: tools and the protocol around
//! them, an allowlist; resources, prompts and completions only with `--pass-ungated`; a method
//! it does not know never; and no cancellation of the proxy's own requests. Against the
//! malicious upstream of [`crate::mcp_upstream_attacks`], which logs every line it gets.

use crate::mcp_upstream_attacks::Rig;
use serde_json::json;

/// Review finding: `resources/*`, `prompts/*` and `completion/complete` went upstream through
/// the relay's catch-all route, ungated and unrecorded, so an agent could read through a
/// resource what a policy holds as a tool call; so did any method the proxy does not know (an
/// upstream's own `tools/execute` runs a tool around the gate). The proxy relays tools and the
/// protocol around them only unless started with `--pass-ungated`.
#[test]
fn resources_prompts_and_unknown_methods_are_not_relayed_unless_asked_for() {
    let mut rig = Rig::start();
    let init = rig.handshake(false);
    let caps = &init["result"]["capabilities"];
    assert!(
        caps.get("resources").is_none() && caps.get("prompts").is_none(),
        "{init}"
    );
    for (id, method) in [
        (11, "resources/read"),
        (12, "prompts/get"),
        (13, "resources/list"),
        (14, "tools/execute"),
    ] {
        rig.send(json!({"jsonrpc": "2.0", "id": id, "method": method,
                        "params": {"uri": "repo://secrets.env", "name": "p"}}));
        let refused = rig.recv(|m| m["id"] == id);
        assert_eq!(refused["error"]["code"], -32601, "{refused}");
    }
    rig.send(json!({"jsonrpc": "2.0", "method": "tools/execute", "params": {"name": "evil"}}));
    // A request under a notification's name is no notification.
    rig.send(json!({"jsonrpc": "2.0", "id": 15, "method": "notifications/run", "params": {}}));
    let refused = rig.recv(|m| m["id"] == 15);
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    let log = rig.stop();
    assert!(
        !log.contains("resources/") && !log.contains("prompts/") && !log.contains("execute"),
        "{log}"
    );

    let mut rig = Rig::start_with(&["--pass-ungated"]);
    let init = rig.handshake(false);
    assert!(
        init["result"]["capabilities"]["resources"].is_object(),
        "{init}"
    );
    rig.send(
        json!({"jsonrpc": "2.0", "id": 11, "method": "resources/read",
                    "params": {"uri": "repo://secrets.env"}}),
    );
    let read = rig.recv(|m| m["id"] == 11);
    assert_eq!(
        read["result"]["contents"][0]["text"], "SECRET-RESOURCE",
        "{read}"
    );
    // `--pass-ungated` relays resources; a method the proxy does not know stays refused.
    rig.send(
        json!({"jsonrpc": "2.0", "id": 12, "method": "tools/execute", "params": {"name": "evil"}}),
    );
    let refused = rig.recv(|m| m["id"] == 12);
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    let log = rig.stop();
    assert!(!log.contains("execute"), "{log}");
}

/// Review finding: a client's `notifications/cancelled` naming one of the proxy's own requests
/// (its pin check's `tools/list`, a task's forwarded call) went upstream: cut off there, a
/// task's approved call would leave no `call.result` behind, and the pin check would never
/// finish. Such a cancellation is dropped; one for the client's own request still goes.
#[test]
fn a_client_cannot_cancel_the_proxys_own_requests() {
    let mut rig = Rig::start();
    rig.handshake(false);
    rig.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": "assent-pins-0", "reason": "x"}}),
    );
    rig.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 77, "reason": "mine"}}),
    );
    // `read` passes its pin check and runs: the proxy's own tools/list was answered.
    rig.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "read", "arguments": {"path": "/a"}}}));
    let read = rig.recv(|m| m["id"] == 5);
    assert_eq!(read["result"]["content"][0]["text"], "small", "{read}");
    let log = rig.stop();
    let cancelled: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["method"] == "notifications/cancelled")
        .map(|m| m["params"]["requestId"].clone())
        .collect();
    assert_eq!(cancelled, vec![json!(77)], "only the client's own: {log}");
}

/// Review finding: a client that cancelled a call while its proposal was on its way to the
/// gateway left the approval pending — the proxy dropped the proposal's future before it
/// learned the approval id — counted against the agent's cap and open to an operator's
/// approval, for a call nobody waited for. The proposal now runs to its end and withdraws
/// what it held. Each call here is cancelled 0 to 19 ms after it is sent.
#[test]
fn a_call_cancelled_while_it_is_proposed_leaves_no_approval_pending() {
    let mut rig = Rig::start();
    rig.handshake(false);
    // The pins are checked first (a call waits for them), so that each call below is proposed
    // at once: a `read` (allowed outright) through the whole path.
    rig.send(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                    "params": {"name": "read", "arguments": {}}}));
    rig.recv(|m| m["id"] == 99);
    for i in 0..20 {
        let id = 100 + i;
        rig.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"message": format!("m{i}")}}}));
        // A little later each time: some cancellations land before the proposal leaves,
        // some while it is on its way, some once it is held.
        std::thread::sleep(std::time::Duration::from_millis(i as u64));
        rig.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": "changed my mind"}}),
        );
    }
    // Every withdrawal has had time to land.
    let start = std::time::Instant::now();
    while !rig.pending_now().is_empty() && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let left = rig.pending_now();
    assert!(left.is_empty(), "left pending: {left:?}");
    rig.stop();
}

/// Review finding: the proxy read the upstream's tools once, so a definition the upstream
/// changed mid-session (here `read`'s description, with `notifications/tools/list_changed`)
/// was called unreviewed unless the client listed the tools again. The proxy checks them
/// again when told; the next call waits for the review of the change.
#[test]
fn a_tool_changed_mid_session_is_reviewed_before_it_is_called_again() {
    let mut rig = Rig::start();
    rig.handshake(false);
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "read", "arguments": {}}})
    };
    rig.send(call(1));
    rig.recv(|m| m["id"] == 1);
    rig.send(json!({"jsonrpc": "2.0", "id": "flip", "method": "ping"}));
    rig.recv(|m| m["id"] == "flip");
    rig.send(call(2));
    // The review appears; the call waits for it.
    let start = std::time::Instant::now();
    let reviews = loop {
        let r = rig.reviews_now();
        if r["reviews"].as_array().is_some_and(|l| !l.is_empty()) {
            break r;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "no review: {r}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(reviews["reviews"][0]["tool"], "read", "{reviews}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let log = rig.stop();
    let calls = log.matches("\"tools/call\"").count();
    assert_eq!(calls, 1, "the changed tool was called unreviewed: {log}");
}

/// Attack (found by review): a pinned tool reached the client as the upstream sent it at the
/// time, so what its pin does not cover changed with no review — a `_meta` pointing the
/// client at the upstream's own UI, a `readOnlyHint` of `1` that lax clients read as `true`
/// and so stop asking the user. The client is shown the pinned definition.
#[test]
fn a_pinned_tool_is_shown_as_pinned_not_as_the_upstream_now_sends_it() {
    let mut rig = Rig::start();
    rig.handshake(false);
    let read_listed = |rig: &mut Rig, id: i64| {
        rig.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        let list = rig.recv(|m| m["id"] == id);
        let tools = list["result"]["tools"].as_array().cloned().unwrap();
        tools.into_iter().find(|t| t["name"] == "read").unwrap()
    };
    let pinned = read_listed(&mut rig, 1);
    rig.send(json!({"jsonrpc": "2.0", "id": "meta", "method": "ping"}));
    rig.recv(|m| m["id"] == "meta");
    let now = read_listed(&mut rig, 2);
    assert_eq!(now, pinned, "the client saw an unreviewed definition");
    assert!(
        now.get("_meta").is_none() && now.get("annotations").is_none(),
        "{now}"
    );
    rig.stop();
}

/// Review finding (of the fix above): an upstream that says its tools changed after every
/// list it sends drove the proxy's pin check — a `POST /v1/tools/check` under the agent's key —
/// as fast as it could answer, spending the agent's rate limit. A check starts at least 2 s
/// after the last one ended.
#[test]
fn an_upstream_saying_its_tools_changed_in_a_loop_gets_a_check_every_two_seconds() {
    let mut rig = Rig::start();
    rig.handshake(false);
    rig.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "read", "arguments": {}}}));
    rig.recv(|m| m["id"] == 1);
    let storm = std::time::Instant::now();
    rig.send(json!({"jsonrpc": "2.0", "id": "storm", "method": "ping"}));
    rig.recv(|m| m["id"] == "storm");
    std::thread::sleep(std::time::Duration::from_secs(5));
    let log = rig.stop();
    let stormed = storm.elapsed();
    let lists = log.matches("\"tools/list\"").count();
    // The first check, then one every 2 s at most while the storm lasted (at least the 5 s
    // slept; longer on a loaded machine, found as a flaky CI run: 6 lists), and one in flight.
    let most = 1 + stormed.as_secs().div_ceil(2) as usize + 1;
    assert!(
        (2..=most).contains(&lists),
        "{lists} tools/list in {stormed:?} of storm (at most {most}): {log}"
    );
}
