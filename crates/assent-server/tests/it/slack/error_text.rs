//! What the gateway keeps of Slack's `error` text (issue 15 §4): a few words' worth, on one
//! line, in its logs and dead letters.

use super::{FakeSlack, PAY, args, gateway};
use crate::kit::OP;
use serde_json::json;
use std::time::{Duration, Instant};

/// Attack (found by review): a `slack.api_url` answering `200 {"ok":false,"error":"<1 MiB
/// with newlines>"}` (under the 1 MiB answer bound) had the whole text logged at every attempt (six per event, forging log
/// lines) and kept in the event's dead letter (1 MiB per event, kept, and read whole by every
/// listing). Slack's `error` is now cut to 200 characters with control characters replaced,
/// and a dead letter's `last_error` is kept to 2,000 characters. Also (found by review): a
/// right-to-left override (U+202E) or other bidirectional control in the error was kept and
/// reversed how the rest of the line reads where an operator reads it; they are replaced too.
#[tokio::test]
async fn a_mebibyte_slack_error_with_newlines_or_bidi_overrides_is_cut_to_one_plain_line() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let bidi = ['\u{202e}', '\u{2066}', '\u{200f}', '\u{061c}', '\u{feff}'];
    let error = "forged\u{202e}\n2025-01-01T00:00:00Z INFO \u{2066}approved\u{200f} by\u{061c} alice\u{feff}\r\n"
        .repeat(15_000);
    let answer = json!({"ok": false, "error": error}).to_string();
    let app = axum::Router::new().fallback(move || {
        let answer = answer.clone();
        async move { answer }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let fake = FakeSlack {
        url,
        ..FakeSlack::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &fake, PAY).await;
    let id = gw.held("s1", "pay", args()).await;
    let start = Instant::now();
    let dead = loop {
        let (s, v) = gw.get("/v1/webhooks/dead-letters?limit=1000", OP).await;
        assert_eq!(s, reqwest::StatusCode::OK, "{v}");
        let list = v["dead_letters"].as_array().cloned().unwrap_or_default();
        if let Some(d) = list.into_iter().find(|d| d["webhook"] == "slack:bot") {
            break d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "not dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(dead["body"]["approval_id"], id.as_str());
    let why = dead["last_error"].as_str().unwrap_or_default();
    let shown: String = why.chars().take(300).collect();
    assert!(why.starts_with("chat.postMessage: forged"), "{shown}");
    assert!(
        !why.contains(['\n', '\r']),
        "a line break was kept: {shown:?}"
    );
    assert!(
        !why.contains(bidi),
        "a bidirectional override or mark was kept: {shown:?}"
    );
    // Slack's 200 characters, the method's name and the mark of the cut.
    assert!(why.chars().count() <= 220, "{} characters kept", why.len());
}
