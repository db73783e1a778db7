//! Learning samples (MPLP Confirm module §5): every settled approval — approved, denied,
//! edited, granted, expired either way, cancelled, and a plan's Confirms — exported as JSONL and
//! validated against the MPLP learning-sample schemas.

use crate::kit::{BOT, OP, approval_id, serve};
use crate::schemas::{assert_valid, validator};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn every_settled_approval_is_a_learning_sample_valid_against_the_mplp_schemas() {
    let gw = serve().await;
    let pay = |n: i64| json!({"amount": n, "to": "bob"});
    let decide = async |id: String, body: Value| {
        let (s, b) = gw.decide_with(&id, OP, body).await;
        assert_eq!(s, StatusCode::OK, "{b}");
    };
    let a = gw.pending("pay", pay(500)).await;
    decide(a, json!({"decision": "approve"})).await;
    let d = gw.pending("pay", pay(600)).await;
    decide(d, json!({"decision": "deny", "reason": "not this month"})).await;
    let e = gw.pending("pay", pay(700)).await;
    decide(e, json!({"decision": "approve", "arguments": pay(650)})).await;
    let g = gw.pending("pay", pay(900)).await;
    decide(g, json!({"decision": "approve", "scope": "session"})).await;
    let (_, granted) = gw.propose("pay", pay(900)).await;
    assert!(granted["token"].is_string(), "{granted}");
    let c = gw.pending("pay", pay(800)).await;
    gw.cancel(&c, BOT, None).await;
    let q = gw.pending("quick", json!({})).await;
    let l = gw.pending("lenient", json!({})).await;
    for x in [&q, &l] {
        let (_, b) = gw.approval(&format!("{x}?wait=5"), BOT).await;
        assert_eq!(b["status"], "expired", "{b}");
    }
    // A plan rejected, then approved.
    let pid = uuid::Uuid::new_v4().to_string();
    let plan = json!({"meta": {"protocol_version": "1.0.0", "schema_version": "1.0.0"},
        "plan_id": pid, "context_id": uuid::Uuid::new_v4().to_string(), "title": "Clean up",
        "objective": "Remove stale branches", "status": "draft",
        "steps": [{"step_id": uuid::Uuid::new_v4().to_string(), "description": "List them", "status": "pending"}]});
    gw.create_plan(plan).await;
    for verdict in ["deny", "approve"] {
        let (_, r) = gw.submit_plan(&pid).await;
        decide(
            approval_id(&r),
            json!({"decision": verdict, "reason": "reviewed"}),
        )
        .await;
    }
    // Still pending: not a sample.
    gw.propose("pay", pay(1000)).await;

    let resp = gw.get_raw("/v1/learning-samples", OP).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let text = resp.text().await.unwrap();
    let samples: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples.len(), 10, "{text}");
    let core = validator("mplp/schemas/v2/learning/mplp-learning-sample-core.schema.json");
    let intent = validator("mplp/schemas/v2/learning/mplp-learning-sample-intent.schema.json");
    for s in &samples {
        assert_valid(&core, s, "learning sample");
        if s["sample_family"] == "intent_resolution" {
            assert_valid(&intent, s, "intent_resolution sample");
        }
    }
    let labels: Vec<(String, String, String)> = samples
        .iter()
        .map(|s| {
            (
                s["sample_family"].as_str().unwrap().to_string(),
                s["feedback"]["type"].as_str().unwrap().to_string(),
                s["meta"]["human_feedback_label"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let count = |f: &str, t: &str, h: &str| {
        labels
            .iter()
            .filter(|(a, b, c)| a == f && b == t && c == h)
            .count()
    };
    assert_eq!(
        count("confirm_decision", "approval", "approved"),
        4,
        "{labels:?}"
    ); // a, e, g, grant
    assert_eq!(count("confirm_decision", "rejection", "rejected"), 1);
    assert_eq!(count("confirm_decision", "cancellation", "not_reviewed"), 1);
    assert_eq!(count("confirm_decision", "rejection", "not_reviewed"), 1); // quick expired
    assert_eq!(count("confirm_decision", "approval", "not_reviewed"), 1); // lenient expired
    assert_eq!(count("intent_resolution", "rejection", "rejected"), 1);
    assert_eq!(count("intent_resolution", "approval", "approved"), 1);
    let edited = samples
        .iter()
        .find(|s| s["output"]["arguments_changed"] == true)
        .unwrap();
    assert_eq!(edited["input"]["arguments"]["amount"], 700);
    assert_eq!(edited["output"]["arguments"]["amount"], 650);
    let denied = samples
        .iter()
        .find(|s| s["output"]["status"] == "rejected")
        .unwrap();
    assert_eq!(denied["feedback"]["details"], "not this month");
    // Stable ids: a second export is identical.
    let again = gw.get_text("/v1/learning-samples", OP).await;
    assert_eq!(again, text);
    let (s, _) = gw.get("/v1/learning-samples", BOT).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    gw.stop().await;
}
