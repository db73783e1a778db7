//! What the gateway keeps of Slack's `error` text (issue 15 §4): a few words' worth, on one
//! line, in its logs and dead letters.

use super::{held_behind, slack_dead_letter};
use serde_json::json;

/// Attack (found by review): a `slack.api_url` answering `200 {"ok":false,"error":"<1 MiB
/// with newlines>"}` (under the 1 MiB answer bound) had the whole text logged at every attempt (six per event, forging log
/// lines) and kept in the event's dead letter (1 MiB per event, kept, and read whole by every
/// listing). Slack's `error` is now cut to 200 characters with control characters replaced,
/// and a dead letter's `last_error` is kept to 2,000 characters. Also (found by review): a
/// right-to-left override (U+202E) or other bidirectional control in the error was kept and
/// reversed how the rest of the line reads where an operator reads it; they are replaced too.
#[tokio::test]
async fn a_mebibyte_slack_error_with_newlines_or_bidi_overrides_is_cut_to_one_plain_line() {
    let bidi = ['\u{202e}', '\u{2066}', '\u{200f}', '\u{061c}', '\u{feff}'];
    let error = "forged\u{202e}\n2025-01-01T00:00:00Z INFO \u{2066}approved\u{200f} by\u{061c} alice\u{feff}\r\n"
        .repeat(15_000);
    let answer = json!({"ok": false, "error": error}).to_string();
    let app = axum::Router::new().fallback(move || {
        let answer = answer.clone();
        async move { answer }
    });
    let (gw, _dir, id) = held_behind(app).await;
    let dead = slack_dead_letter(&gw).await;
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
