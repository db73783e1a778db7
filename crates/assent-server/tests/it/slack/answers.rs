//! What the gateway reads of Slack's Web API answers (issue 15 §4): at most
//! `slack::api::MAX_ANSWER` bytes, against a fake Slack whose `chat.postMessage` answers are
//! larger.

use super::{held_behind, slack_dead_letter};
use crate::kit::OP;
use axum::body::Body;
use axum::response::Response;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A `chat.postMessage` answer of `ok: true` padded past 2 MiB: sent whole with its
/// `Content-Length` on odd attempts, and in 64 KiB chunks with none on even ones.
fn huge_answer(attempt: u32) -> Response {
    let pad = "x".repeat(2 << 20);
    let body = json!({"ok": true, "channel": "C0APPROVE", "ts": "1700000000.000100", "pad": pad})
        .to_string()
        .into_bytes();
    if attempt % 2 == 1 {
        return Response::new(Body::from(body));
    }
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(64 << 10).map(|c| Ok(c.to_vec())).collect();
    Response::new(Body::from_stream(futures::stream::iter(chunks)))
}

/// Attack (found by review): the bot read Slack's answers whole into memory, so a
/// mis-configured or compromised `slack.api_url` (or a hostile path to it) could answer
/// `chat.postMessage` with an endless body and exhaust the gateway's memory, once per
/// message. An answer over 1 MiB — said by its `Content-Length` or found while reading — is
/// a failed delivery ("answer too large"), retried and then dead-lettered like any other; the
/// gateway keeps serving and no message reference is stored from it.
#[tokio::test]
async fn a_slack_answer_over_a_mebibyte_is_a_failed_delivery_not_read_whole() {
    let attempts = Arc::new(AtomicU32::new(0));
    let n = attempts.clone();
    let app = axum::Router::new().fallback(move || {
        let n = n.clone();
        async move { huge_answer(n.fetch_add(1, Ordering::SeqCst) + 1) }
    });
    let (gw, _dir, id) = held_behind(app).await;
    let dead = slack_dead_letter(&gw).await;
    assert_eq!(dead["body"]["approval_id"], id.as_str(), "{dead}");
    assert_eq!(dead["attempts"], 6, "{dead}");
    let why = dead["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("answer too large"), "{dead}");
    assert!(attempts.load(Ordering::SeqCst) >= 6);
    // Nothing was taken from the answers: no message reference, and the gateway serves.
    let store = gw.state.store.clone();
    let stored = crate::backend::off_runtime(|| store.slack_message(&id).unwrap());
    assert_eq!(stored, None);
    let (s, a) = gw.approval(&id, OP).await;
    assert_eq!(
        (s, a["status"].as_str()),
        (reqwest::StatusCode::OK, Some("pending"))
    );
    gw.stop().await;
}
