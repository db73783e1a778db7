//! A hub call the client cancels after it was forwarded runs to its end and is recorded.

use crate::hub_kit::{hub_client, hub_gateway, py_text, py_tools, py_upstream};
use std::time::{Duration, Instant};

const KEY: &str = "hub-cancel-agent-key-0123456789";

/// A hub upstream (Python, stdio) whose one tool, `slow`, creates the file `marker` when it
/// is called and answers three seconds later.
fn slow(marker: &std::path::Path) -> String {
    let path = serde_json::to_string(&marker.display().to_string()).unwrap();
    let call = format!(
        "        open({path},\"w\").close()\n        time.sleep(3)\n{}",
        py_text("done")
    );
    py_upstream(&py_tools("slow"), &call)
}

/// The `call.result` records in the gateway's database under `dir`.
fn results(dir: &std::path::Path) -> i64 {
    let out = std::process::Command::new("sqlite3")
        .arg(dir.join("data/assent.db"))
        .arg("SELECT count(*) FROM audit WHERE kind = 'call.result';")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Found by review: a call the client cancelled while the upstream ran it was dropped with
/// the request, so the upstream may have carried it out but no `call.result` (its size and
/// SHA-256) was ever recorded. A forwarded call now runs to its end and is recorded.
#[test]
fn a_call_cancelled_while_the_upstream_runs_it_is_still_recorded() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("called");
    let source = slow(&marker);
    let (dir, mut server) = hub_gateway(KEY, &[("up", Some("[slow]"), &source)]);
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = hub_client(&url, KEY).await;
        let call = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(
            rmcp::model::CallToolRequestParams::new("up__slow"),
        ));
        let handle = client
            .peer()
            .send_cancellable_request(call, rmcp::service::PeerRequestOptions::no_options())
            .await
            .unwrap();
        // Allowed outright, forwarded: cancelled once the upstream has it (three seconds
        // before it answers).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !marker.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(marker.exists(), "the call never reached the upstream");
        handle
            .cancel(Some("the user pressed stop".into()))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while results(dir.path()) == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            results(dir.path()),
            1,
            "the forwarded call's result was not recorded"
        );
        client.cancel().await.unwrap();
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
