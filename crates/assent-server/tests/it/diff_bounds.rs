//! RFC 6902 diffs the gateway computes from what an agent sent (a tool definition's review, a
//! plan's revision) stay within a bound of the documents' size, over the HTTP API.

use crate::kit::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Agent `bot` reports `tools` of its server `server` (`fs`): the answer's tool states.
async fn report(gw: &Gw, server: &str, tools: Vec<Value>) -> Value {
    let body = json!({"agent": "bot", "server": server, "tools": tools});
    let (s, b) = gw.post("/v1/tools/check", BOT, body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b["tools"].clone()
}

/// A tool `probe` whose input schema holds, under a property named by `key`, an enum of
/// `n` copies of `value`.
fn probe(key: &str, n: usize, value: u8) -> Value {
    let values = vec![json!(value); n];
    json!({"name": "probe", "description": "Probe.",
           "inputSchema": {"type": "object", "properties": {key: {"enum": values}}}})
}

/// Attack (found by review): `json_patch::diff` writes one operation per array element, each
/// with its whole JSON pointer, so an agent that reported a tool with a long property name over
/// a long array, then the array changed element by element, made the review's diff hundreds of
/// times its definitions' size (about 100 MB here; some 12 GB within a request's size) whenever
/// it or an operator read the review. The diff is now the whole replacement past its bound; a
/// small change is still a fine-grained patch.
#[tokio::test]
async fn a_tool_changed_element_by_element_under_a_long_name_cannot_blow_up_its_reviews_diff() {
    let gw = serve().await;
    let key = "k".repeat(5 * 1024);
    let other = |d: &str| json!({"name": "other", "description": d});
    report(&gw, "fs", vec![probe(&key, 20_000, 0), other("A.")]).await;
    let states = report(&gw, "fs", vec![probe(&key, 20_000, 1), other("B.")]).await;
    let review_of = |k: usize| {
        states[k]["review_id"]
            .as_str()
            .expect("a review")
            .to_string()
    };
    let resp = gw
        .get_raw(&format!("/v1/tools/reviews/{}", review_of(0)), BOT)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    assert!(text.len() < 1 << 20, "the review is {} bytes", text.len());
    let review: Value = serde_json::from_str(&text).unwrap();
    let diff = review["diff"].as_array().expect("a diff");
    assert_eq!(diff.len(), 1, "one whole replacement");
    assert_eq!(diff[0]["op"], "replace");
    assert_eq!(diff[0]["path"], "");
    assert_eq!(diff[0]["value"], probe(&key, 20_000, 1));

    // A small change of a small definition is still shown op by op.
    let (s, review) = gw
        .get(&format!("/v1/tools/reviews/{}", review_of(1)), OP)
        .await;
    assert_eq!(s, StatusCode::OK, "{review}");
    assert_eq!(
        review["diff"],
        json!([{"op": "replace", "path": "/description", "value": "B."}])
    );
    gw.stop().await;
}

/// Found by review: each diff was bounded on its own (at least 4 MiB), so an agent reporting
/// 100 tools — its pending-review cap — each under that bound (a long property name over an
/// array, changed element by element) made one page of the operators' review listing up to
/// some 200 MB (60 MB with the definitions here, which fit one report). A diff is now bounded by its own documents (4 × their text plus 16 KiB), so the
/// page stays within a few times its definitions.
#[tokio::test]
async fn a_hundred_tools_changed_element_by_element_cannot_blow_up_the_review_listing() {
    let gw = serve().await;
    let key = "k".repeat(1_000);
    let named = |i: usize, value: u8| {
        let mut t = probe(&key, 600, value);
        t["name"] = json!(format!("probe{i}"));
        t
    };
    report(&gw, "fs", (0..100).map(|i| named(i, 0)).collect()).await;
    let states = report(&gw, "fs", (0..100).map(|i| named(i, 1)).collect()).await;
    assert!(
        states
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["review_id"].is_string())
    );
    let resp = gw.get_raw("/v1/tools/reviews?limit=100", OP).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    assert!(text.len() < 8 << 20, "one page is {} bytes", text.len());
    let page: Value = serde_json::from_str(&text).unwrap();
    assert!(!page["reviews"].as_array().unwrap().is_empty());
    gw.stop().await;
}
