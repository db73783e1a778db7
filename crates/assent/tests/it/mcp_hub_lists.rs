//! The MCP hub reads an upstream's tool list once for the requests waiting for it, and never
//! holds a call up behind another client's list readings.

use crate::hub_kit::{hub_client, hub_gateway, py_text, py_tools, py_upstream};
use std::time::{Duration, Instant};

const KEY: &str = "hub-lists-agent-key-0123456789";

/// A hub upstream (Python, stdio) with one tool, `hello`, whose `tools/list` takes 300 ms.
fn slow_lists() -> String {
    let list = format!("        time.sleep(0.3)\n{}", py_tools("hello"));
    py_upstream(&list, &py_text("hello"))
}

/// Found by review: the hub held an upstream's tool-list cache locked across each reading,
/// and every client `tools/list` read afresh, so one client keeping lists in flight queued
/// every call on that upstream behind a 300 ms reading each (30 lists: 9 s). Now readings
/// are shared and a call with a fresh list waits for none.
#[test]
fn a_call_is_not_held_up_behind_another_clients_tool_list_readings() {
    let (_dir, mut server) = hub_gateway(KEY, &[("slow", Some("[hello]"), &slow_lists())]);
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let took = rt.block_on(async {
        let (lister, caller) = (hub_client(&url, KEY).await, hub_client(&url, KEY).await);
        // A first call: the list is read and pinned.
        let hello = || rmcp::model::CallToolRequestParams::new("slow__hello");
        caller.peer().call_tool(hello()).await.unwrap();
        // One client keeps 30 lists in flight; the other calls meanwhile.
        let peer = lister.peer().clone();
        let mut lists = tokio::task::JoinSet::new();
        for _ in 0..30 {
            let peer = peer.clone();
            lists.spawn(async move { peer.list_tools(None).await });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = Instant::now();
        let r = caller.peer().call_tool(hello()).await.unwrap();
        let took = t.elapsed();
        assert_ne!(r.is_error, Some(true), "{r:?}");
        for l in lists.join_all().await {
            assert_eq!(l.unwrap().tools.len(), 1);
        }
        lister.cancel().await.unwrap();
        caller.cancel().await.unwrap();
        took
    });
    assert!(took < Duration::from_secs(2), "the call waited {took:?}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// A hub upstream whose `tools/list` fails after two seconds, once it has answered once.
fn failing_lists() -> String {
    let fail = r#"        if n>1:
            time.sleep(2)
            print(json.dumps({"jsonrpc":"2.0","id":i,"error":{"code":-32603,"message":"down"}}), flush=True)
            continue"#;
    let list = format!("{fail}\n{}", py_tools("hello"));
    py_upstream(&list, &py_text("hello"))
}

/// Found by review: a failed reading was not shared, so each client waiting for it read
/// again in turn; an upstream whose list fails (or times out after 30 s) held the sixth of
/// six waiting lists six readings long. A reading's failure now answers every request that
/// arrived before it began.
#[test]
fn a_failed_tool_list_reading_answers_every_list_waiting_for_it() {
    let (_dir, mut server) = hub_gateway(KEY, &[("failing", Some("[hello]"), &failing_lists())]);
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let took = rt.block_on(async {
        let client = hub_client(&url, KEY).await;
        // The first list is read (and pinned); from then on every reading fails after 2 s.
        assert_eq!(client.peer().list_tools(None).await.unwrap().tools.len(), 1);
        let t = Instant::now();
        let mut lists = tokio::task::JoinSet::new();
        for _ in 0..6 {
            let peer = client.peer().clone();
            lists.spawn(async move { peer.list_tools(None).await });
        }
        for l in lists.join_all().await {
            // The upstream's tools are left out of the answer, not an error.
            assert_eq!(l.unwrap().tools.len(), 0);
        }
        let took = t.elapsed();
        client.cancel().await.unwrap();
        took
    });
    // Two readings at most (one under way when a request came, then one for it), not six.
    assert!(took < Duration::from_secs(9), "six lists took {took:?}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
