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

/// Found by review: the hub asks its gateway on its private socket for each client (whose key
/// is it, the proposals, the results), and those requests carried the peer 127.0.0.1, so they
/// shared loopback's throttle with every local process. One that sent thirty wrong keys from
/// loopback locked it out, and every agent whose key had not authenticated from there since
/// the start got `429 AUTH_THROTTLED` for its hub calls, from wherever it came. They carry no
/// address now: the client's own was checked at `/mcp`. The gateway trusts 127.0.0.1 as a
/// proxy here, so the agent's requests can come from another client address.
#[cfg(unix)]
#[test]
fn wrong_keys_from_loopback_do_not_lock_every_agent_out_of_the_hub() {
    let source = pay();
    let upstreams = [("bank", Some("[pay]"), source.as_str())];
    let (dir, mut server) = hub_gateway_with(KEY, &upstreams, "trusted_proxies: [127.0.0.1]\n");
    let url = server.url.clone();
    // Nor can any other user reach the socket, whatever the umask (found by review).
    let socket = find_socket(dir.path()).expect("the hub's socket");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", socket.display());
    let http = reqwest::blocking::Client::new();
    let statuses: Vec<u16> = (0..30)
        .map(|n| {
            let wrong = format!("{n:08}-a-wrong-key-guessed-0123456789");
            let r = http.get(format!("{url}/v1/whoami")).bearer_auth(wrong);
            r.send().unwrap().status().as_u16()
        })
        .collect();
    assert_eq!(
        statuses.last(),
        Some(&429),
        "loopback locked out: {statuses:?}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use rmcp::ServiceExt;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let from = reqwest::header::HeaderValue::from_static("198.51.100.7");
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp"))
            .auth_header(KEY.to_string())
            .custom_headers([("x-forwarded-for".parse().unwrap(), from)].into());
        let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
        let client = ().serve(transport).await.expect("the hub answers initialize");
        let list = client.peer().list_tools(None).await.expect("tools/list");
        let names: Vec<_> = list.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["bank__pay"], "{list:?}");
        client.cancel().await.unwrap();
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// The hub's `hub-PID.sock` below `dir`, if any.
fn find_socket(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("hub-") && name.ends_with(".sock") {
            return Some(p);
        }
        if p.is_dir()
            && let Some(found) = find_socket(&p)
        {
            return Some(found);
        }
    }
    None
}
