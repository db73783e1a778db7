//! The MCP hub inside `assent serve` reaches its gateway on a private Unix socket
//! (`DATA_DIR/hub-PID.sock`): its held calls are not connections of any client address.

use crate::hub_kit::{hub_client, hub_gateway_with, py_text, py_upstream};
use serde_json::Value;
use std::time::{Duration, Instant};

const KEY: &str = "hub-connections-agent-key-0123456789";

/// A hub upstream (Python, stdio) with one tool, `pay` (an integer `n`), answering at once.
fn pay() -> String {
    let list = r#"        r={"tools":[{"name":"pay","description":"Pay.","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}}}]}"#;
    py_upstream(list, &py_text("paid"))
}

/// Held calls waiting for a person: alice's pending list.
fn pending(url: &str) -> Vec<Value> {
    let out = crate::cli(url, &["pending", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["approvals"].as_array().cloned().unwrap_or_default()
}

/// Found by review: the hub called its own gateway over loopback TCP, so every agent's held
/// hub call was one more connection from 127.0.0.1 against `max_connections_per_address`
/// (1,000 by default): a thousand held calls, or a local agent's idle streams, cut the hub
/// off from its gateway for every agent. With room for the clients' own connections but not
/// for the hub's as well, four held calls are all proposed, approved and answered.
#[cfg(unix)]
#[test]
fn held_hub_calls_do_not_use_up_the_loopback_address_connections() {
    const CALLS: usize = 4;
    let source = pay();
    let upstreams = [(
        "bank",
        Some("[{name: pay, approval: {message_template: \"Pay?\"}}]"),
        source.as_str(),
    )];
    // The calls' own connections, the client's stream, alice's requests, and some to spare
    // (fewer than the hub's held calls would need besides).
    let extra = format!("max_connections_per_address: {}\n", CALLS + 4);
    let (_dir, mut server) = hub_gateway_with(KEY, &upstreams, &extra);
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = hub_client(&url, KEY).await;
        let mut calls = tokio::task::JoinSet::new();
        for n in 0..CALLS {
            let peer = client.peer().clone();
            // Each call its own (the same call again would join the first's approval).
            let args = serde_json::json!({"n": n}).as_object().unwrap().clone();
            let call = rmcp::model::CallToolRequestParams::new("bank__pay").with_arguments(args);
            calls.spawn(async move { peer.call_tool(call).await });
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let held = loop {
            let url = url.clone();
            let held = tokio::task::spawn_blocking(move || pending(&url))
                .await
                .unwrap();
            if held.len() == CALLS || Instant::now() > deadline {
                break held;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(held.len(), CALLS, "{held:?}");
        for a in &held {
            let id = a["id"].as_str().unwrap().to_string();
            let url = url.clone();
            let out = tokio::task::spawn_blocking(move || crate::cli(&url, &["approve", &id]))
                .await
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        for r in calls.join_all().await {
            let r = r.expect("the call is answered");
            assert_ne!(r.is_error, Some(true), "{r:?}");
        }
        client.cancel().await.unwrap();
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
