//! Input the API used to take without a word (found by review): a misspelt query parameter,
//! an unknown status, a page limit out of range and a replay range that ends before it starts
//! each answered `200` as if asked something else; the dashboard recorded any yes/no answer
//! but `yes` as No and rounded a number a double cannot hold. Each is now a `400` naming what
//! was wrong, and the question stays unanswered.

use crate::kit::{BOT, OP, csrf_of, serve};
use assent_core::clarification::ClarificationStatus;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Asks a question of `kinds` as the agent; its id.
async fn ask(gw: &crate::kit::Gw, kinds: Value) -> String {
    let ask = json!({"agent": "bot", "session_id": "s", "question": "How many?",
        "accepted_response_kinds": kinds});
    let (s, b) = gw.post("/v1/clarifications", BOT, ask).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    b["id"].as_str().unwrap().to_string()
}

/// Attack: a client (or an operator's script) misspells a parameter — `?wiat=30` turned a
/// long poll into a busy poll, `?subscriptionid=` opened a subscription of its own, `?status=
/// answerd` listed nothing — or pages with `limit=0` (a page of one) or a replay range turned
/// round (a report of no change). Each is a `400` with a JSON body naming the parameter.
#[tokio::test]
async fn misspelt_or_out_of_range_query_parameters_are_refused_not_ignored() {
    let gw = serve().await;
    let qid = ask(&gw, json!(["freetext"])).await;
    let bad = [
        (
            "/v1/clarifications?status=answerd".to_string(),
            "status `answerd`",
        ),
        ("/v1/clarifications?limit=1".to_string(), "`limit`"),
        (format!("/v1/clarifications/{qid}?wiat=30"), "`wiat`"),
        ("/v1/tools/reviews/r1?wiat=30".to_string(), "`wiat`"),
        // Was cut to 60 s: a client asking for ten minutes polled every minute unawares.
        (
            format!("/v1/clarifications/{qid}?wait=61"),
            "from 0 to 60, not 61",
        ),
        (
            "/v1/approvals/a1?wait=18446744073709551616".to_string(),
            "from 0 to 60",
        ),
        (
            "/aaep/v1/events?subscriptionid=sub_x".to_string(),
            "`subscriptionid`",
        ),
        (
            "/v1/audit/checkpoints?limit=0".to_string(),
            "limit must be from 1 to 1000",
        ),
        (
            "/v1/webhooks/dead-letters?limit=5000".to_string(),
            "not 5000",
        ),
    ];
    for (path, says) in &bad {
        let (s, b) = gw.get(path, OP).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {b}");
        assert_eq!(b["code"], "BAD_REQUEST", "{path}: {b}");
        let msg = b["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{path}: {b}");
    }
    let (s, b) = gw
        .get(&format!("/v1/clarifications/{qid}?wait=0"), OP)
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    for status in ["pending", "all"] {
        let (s, b) = gw
            .get(&format!("/v1/clarifications?status={status}"), OP)
            .await;
        assert_eq!(s, StatusCode::OK, "{b}");
        assert_eq!(b["clarifications"][0]["id"], qid.as_str(), "{b}");
        assert_eq!(b["truncated"], false, "{b}");
    }
    let turned = json!({"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"});
    let (s, b) = gw.post("/v1/policies/replay", OP, turned).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("until must be after since"),
        "{b}"
    );
    gw.stop().await;
}

/// Attack: a scripted dashboard post answers a yes/no question with `maybe` (recorded as
/// No) or a numeric one with `9007199254740993` (recorded as `9007199254740992`). Both are
/// `400` and the question stays pending; `yes` and an exact number are recorded as given.
#[tokio::test]
async fn a_dashboard_answer_that_is_not_yes_no_or_an_exact_number_is_refused() {
    let gw = serve().await;
    let cookie = gw.dashboard_session().await;
    let csrf = csrf_of(&gw.dashboard_page("/ui", &cookie).await);
    let form = "application/x-www-form-urlencoded";
    let post = |qid: String, fields: &'static str| {
        let (gw, cookie, csrf) = (&gw, cookie.clone(), csrf.clone());
        async move {
            let path = format!("/ui/clarifications/{qid}/answer");
            let body = format!("csrf={csrf}&{fields}");
            gw.dashboard_post(&path, &cookie, form, body).await
        }
    };
    let status = |qid: &str| {
        let q = gw.with_store(|s| s.clarification(qid, false)).unwrap();
        q.unwrap()
    };
    let yes_no = ask(&gw, json!(["yes_no"])).await;
    for fields in [
        "kind=yes_no&response=maybe",
        "kind=yes_no&response=",
        "kind=yes_no",
    ] {
        let r = post(yes_no.clone(), fields).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{fields}");
        assert!(
            r.text().await.unwrap().contains("Choose yes or no"),
            "{fields}"
        );
        assert_eq!(status(&yes_no).status, ClarificationStatus::Pending);
    }
    let numeric = ask(&gw, json!(["numeric"])).await;
    for fields in [
        "kind=numeric&response=9007199254740993",
        "kind=numeric&response=1e400",
    ] {
        let r = post(numeric.clone(), fields).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{fields}");
        assert!(
            r.text().await.unwrap().contains("a double holds exactly"),
            "{fields}"
        );
        assert_eq!(status(&numeric).status, ClarificationStatus::Pending);
    }
    let r = post(yes_no.clone(), "kind=yes_no&response=yes").await;
    assert!(!r.status().is_client_error(), "{:?}", r.status());
    assert_eq!(status(&yes_no).response, Some(json!(true)));
    // A browser's number field submits `.5` as typed: taken as 0.5.
    let half = ask(&gw, json!(["numeric"])).await;
    let r = post(half.clone(), "kind=numeric&response=-.5").await;
    assert!(!r.status().is_client_error(), "{:?}", r.status());
    assert_eq!(status(&half).response, Some(json!(-0.5)));
    let r = post(numeric.clone(), "kind=numeric&response=9007199254740991").await;
    assert!(!r.status().is_client_error(), "{:?}", r.status());
    assert_eq!(status(&numeric).response, Some(json!(9007199254740991_u64)));
    gw.stop().await;
}
