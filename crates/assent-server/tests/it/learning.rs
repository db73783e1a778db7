//! Learning samples (MPLP Confirm module §5): every settled approval — approved, denied,
//! edited, granted, expired either way, cancelled, and a plan's Confirms — exported as JSONL and
//! validated against the MPLP learning-sample schemas; the export read in bounded pages
//! (`?limit=N`, `Link: <…after=CURSOR>; rel="next"`), and what a rule redacts kept out of it.

use crate::kit::{
    AGENTS, BOT, GOV_RULES, Gw, OP, approval_id, assert_error, assert_says, policy, redacting_gov,
    serve, serve_policy,
};
use crate::schemas::{assert_valid, validator};
use assent_api::audit::next_cursor;
use assent_store::learning::PAGE_BYTES;
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
        3,
        "{labels:?}"
    ); // a, e, g
    assert_eq!(count("confirm_decision", "rejection", "rejected"), 1);
    assert_eq!(count("confirm_decision", "cancellation", "not_reviewed"), 1);
    assert_eq!(count("confirm_decision", "rejection", "not_reviewed"), 1); // quick expired
    // Lenient expired, and (attack, found by review) the call g's grant covered: no person
    // saw its arguments, so it is no "approved", "good" sample an agent could mint at will.
    assert_eq!(count("confirm_decision", "approval", "not_reviewed"), 2);
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

/// One page of the export at `path`: its NDJSON text and the `after` of its `Link`
/// `rel="next"` (`None` without one), after checking the status, the type and the `Link`'s
/// form.
async fn page(gw: &Gw, path: &str) -> (String, Option<String>) {
    let resp = gw.get_raw(path, OP).await;
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let link = resp
        .headers()
        .get("link")
        .map(|l| l.to_str().unwrap().to_string());
    if let Some(l) = &link {
        assert!(
            l.starts_with("</v1/learning-samples?limit=") && l.ends_with(">; rel=\"next\""),
            "{l}"
        );
    }
    (
        resp.text().await.unwrap(),
        link.and_then(|l| next_cursor(&l)),
    )
}

/// Every page of the export with `?limit=limit`, following each `Link` to the end: the pages'
/// texts in order.
async fn all_pages(gw: &Gw, limit: u32) -> Vec<String> {
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            None => format!("/v1/learning-samples?limit={limit}"),
            Some(c) => format!("/v1/learning-samples?limit={limit}&after={c}"),
        };
        let (text, next) = page(gw, &path).await;
        pages.push(text);
        match next {
            None => return pages,
            Some(c) => after = Some(c),
        }
        assert!(pages.len() < 1_000, "the pages never end");
    }
}

/// The `sample_id`s of NDJSON `text`, in order.
fn sample_ids(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["sample_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Attack (found by review): an unbounded export. An agent grows the settled history without
/// limit — it proposes calls with ~240 KiB of arguments and cancels each itself, in a loop —
/// and one export then built every sample (each holding the arguments twice) in memory and
/// answered them in one body, a multiple of the history, enough to kill the gateway. A page
/// now stops at `limit` samples and at about 8 MiB whatever the limit (here even at the
/// maximum, 10,000), with a `Link` to the next; following the links gives every sample once.
#[tokio::test]
async fn an_agent_cancelling_big_calls_in_a_loop_cannot_make_one_export_page_hold_the_history() {
    let gw = serve().await;
    let memo = "m".repeat(240 * 1024);
    for n in 0..24 {
        let id = gw
            .pending("pay", json!({"amount": 500 + n, "to": "bob", "memo": memo}))
            .await;
        let (s, b) = gw.cancel(&id, BOT, None).await;
        assert_eq!(s, StatusCode::OK, "{b}");
    }
    let (first, next) = page(&gw, "/v1/learning-samples?limit=10000").await;
    let biggest = first.lines().map(str::len).max().unwrap();
    assert!(
        biggest > 2 * 240 * 1024,
        "a sample holds the arguments twice"
    );
    assert!(
        first.len() <= PAGE_BYTES + biggest + 1,
        "one page of {} bytes",
        first.len()
    );
    assert!(first.lines().count() < 24);
    assert!(next.is_some(), "more follow");
    let pages = all_pages(&gw, 10_000).await;
    assert!(pages.len() >= 2);
    let ids: Vec<String> = pages.iter().flat_map(|p| sample_ids(p)).collect();
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (24, 24));
    gw.stop().await;
}

/// The pages of a small `limit` together are the export in one order, each sample once: the
/// first page without `after`, each next one from the previous `Link` (a bounded default
/// without `limit`: here all five fit), the last without a `Link`.
#[tokio::test]
async fn learning_sample_pages_follow_their_links_to_every_sample_once_in_order() {
    let gw = serve().await;
    for n in 0..5 {
        let id = gw
            .pending("pay", json!({"amount": 500 + n, "to": "bob"}))
            .await;
        let (s, _) = gw
            .decide(&id, OP, if n % 2 == 0 { "approve" } else { "deny" })
            .await;
        assert_eq!(s, StatusCode::OK);
    }
    let (whole, next) = page(&gw, "/v1/learning-samples").await;
    assert_eq!((whole.lines().count(), next), (5, None));
    let pages = all_pages(&gw, 2).await;
    let counts: Vec<usize> = pages.iter().map(|p| p.lines().count()).collect();
    assert_eq!(counts, [2, 2, 1]);
    assert_eq!(pages.concat(), whole);
    gw.stop().await;
}

/// Attack: asking for the unbounded export back. A page over the maximum, of none, a `limit`
/// that is not a number, a forged or altered `after` cursor, or an unknown parameter is `400`
/// with the JSON error body naming the parameter, as the other lists answer.
#[tokio::test]
async fn an_export_page_over_the_maximum_or_a_forged_cursor_is_refused_naming_the_parameter() {
    let gw = serve().await;
    for (query, names) in [
        ("limit=10001", "limit"),
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("limit=-1", "limit"),
        ("after=not-a-cursor", "after"),
        ("after=1.zz", "after"),
        ("after=01.61", "after"),
        ("limit=2&befor=3", "befor"),
    ] {
        let (s, b) = gw.get(&format!("/v1/learning-samples?{query}"), OP).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
        assert_says(&b, "message", names);
    }
    let (s, _) = gw.get("/v1/learning-samples?limit=10000", OP).await;
    assert_eq!(s, StatusCode::OK);
    gw.stop().await;
}

/// Attack (found by review): a secret leaking through the export's unmasked fields. A rule
/// redacts `card.number`; the operator rejects the call with a reason quoting it. Webhooks
/// mask the reason, the export sent it raw as `feedback.details`; now it is masked the same
/// way.
#[tokio::test]
async fn a_rejection_reason_quoting_a_redacted_argument_does_not_leak_into_the_learning_export() {
    let gw = serve_policy(AGENTS, &redacting_gov()).await;
    let card = "4111111111111111";
    let id = gw
        .pending(
            "pay",
            json!({"amount": 50, "to": "bob", "card": {"number": card}}),
        )
        .await;
    let no = json!({"decision": "deny", "reason": format!("card {card} is on the stolen list")});
    let (s, b) = gw.decide_with(&id, OP, no).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let text = gw.get_text("/v1/learning-samples", OP).await;
    assert!(!text.contains(card), "{text}");
    let sample: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(
        sample["feedback"]["details"],
        "card [redacted] is on the stolen list"
    );
    assert_eq!(sample["input"]["arguments"]["card"]["number"], "[redacted]");
    gw.stop().await;
}

/// Attack (found by review): a secret leaking through a plan's diff. A rule redacts a plan's
/// `objective`; the agent revises the objective after a rejection, and the second Confirm's
/// `diff_from_previous` (RFC 6902) carried the new objective raw while the sample's own copy
/// was masked. The diff of a plan whose rule redacts is left out (`null`).
#[tokio::test]
async fn a_revised_plans_diff_does_not_leak_a_redacted_value_into_the_learning_export() {
    let rules =
        format!("{GOV_RULES}- tool: mplp.plan\n  approvers: [finance]\n  redact: [objective]\n");
    let gw = serve_policy(AGENTS, &policy("acme.test.rules-v1", &rules)).await;
    let pid = uuid::Uuid::new_v4().to_string();
    let mut plan = json!({"meta": {"protocol_version": "1.0.0", "schema_version": "1.0.0"},
        "plan_id": pid, "context_id": uuid::Uuid::new_v4().to_string(), "title": "Rotate",
        "objective": "Rotate key sk-live-first-0001", "status": "draft",
        "steps": [{"step_id": uuid::Uuid::new_v4().to_string(), "description": "Do it", "status": "pending"}]});
    gw.create_plan(plan.clone()).await;
    for (verdict, objective) in [("deny", "Rotate key sk-live-second-0002"), ("approve", "")] {
        let (s, r) = gw.submit_plan(&pid).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{r}");
        let body = json!({"decision": verdict, "reason": "reviewed"});
        let (s, b) = gw.decide_with(&approval_id(&r), OP, body).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        if verdict == "deny" {
            plan["objective"] = json!(objective);
            let put = json!({"agent": "bot", "plan": plan});
            let (s, p) = gw
                .req("PUT", &format!("/v1/plans/{pid}"), Some(BOT), Some(put))
                .await;
            assert_eq!(s, StatusCode::OK, "{p}");
        }
    }
    let text = gw.get_text("/v1/learning-samples", OP).await;
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(!text.contains("sk-live"), "{text}");
    for line in text.lines() {
        let sample: Value = serde_json::from_str(line).unwrap();
        assert_eq!(sample["input"]["raw_request_summary"], "[redacted]");
        assert_eq!(sample["state"]["diff_from_previous"], Value::Null);
    }
    gw.stop().await;
}
