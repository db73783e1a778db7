//! AAEP clarifications (§6.2): a question of each response kind (freetext, yes/no, numeric,
//! multiple choice) accepts only replies of that kind, through AAEP or the API; an answered
//! question cannot be answered again, an unanswered one expires, and bad questions or other
//! agents are refused.

use super::kit::{core, handshake, now};
use crate::kit::{BOT, OP, serve};
use crate::schemas::assert_valid;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn clarifications_of_each_kind_accept_only_replies_of_that_kind() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    let cases = [
        (json!(["freetext"]), json!([]), json!(42), json!("at 67")),
        (json!(["yes_no"]), json!([]), json!("yes"), json!(true)),
        (json!(["numeric"]), json!([]), json!("67"), json!(67)),
        (
            json!(["multiple_choice"]),
            json!([{"value": "65", "label": "At 65"}, {"value": "67", "label": "At 67"}]),
            json!("66"),
            json!("67"),
        ),
    ];
    for (kinds, choices, wrong, right) in cases {
        let mut q = json!({"agent": "bot", "session_id": "s1", "question": "When do you retire?",
                           "accepted_response_kinds": kinds, "timeout_seconds": 120});
        if choices != json!([]) {
            q["choices"] = choices;
        }
        let id = gw.ask(q).await;
        let ev = sse.expect("aaep:agent.awaiting.clarification").await.data;
        assert_valid(
            &core("agent.awaiting.clarification"),
            &ev,
            "awaiting.clarification",
        );
        let token = ev["reply_token"].as_str().unwrap();
        let reply = |resp: &Value| {
            json!({"type": "clarification.reply", "reply_token": token, "response": resp,
                                          "subscription_id": sub, "timestamp": now(), "decided_by": "user:test"})
        };
        assert_valid(&handshake("clarification.reply"), &reply(&wrong), "reply");
        // The wrong kind counts as no reply; the agent keeps waiting.
        assert_eq!(
            gw.reply(Some(OP), reply(&wrong)).await,
            StatusCode::NO_CONTENT
        );
        let (_, c) = gw.clarification(&id, BOT).await;
        assert_eq!(c["status"], "pending", "{kinds}: {wrong} was accepted");
        let (s, _) = gw.answer(&id, wrong).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            gw.reply(Some(OP), reply(&right)).await,
            StatusCode::NO_CONTENT
        );
        let (_, c) = gw.clarification(&format!("{id}?wait=5"), BOT).await;
        assert_eq!(
            (c["status"].as_str(), &c["response"]),
            (Some("answered"), &right),
            "{kinds}"
        );
        sse.expect("aaep:agent.state.changed").await;
    }
    // Found by review: a text answer through the API was bounded only by the body limit; it is
    // held to the AAEP schema's 16,384 characters, as a reply is.
    let id = gw.ask(json!({"agent": "bot", "session_id": "s1", "question": "Why?", "accepted_response_kinds": ["freetext"]})).await;
    let (s, e) = gw.answer(&id, json!("a".repeat(16_385))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("at most 16384"),
        "{e}"
    );
    let (s, _) = gw.answer(&id, json!("a".repeat(16_384))).await;
    assert_eq!(s, StatusCode::OK);
    // Answered through the API; an unanswered one expires.
    let id = gw.ask(json!({"agent": "bot", "session_id": "s1", "question": "Proceed?", "accepted_response_kinds": ["yes_no"]})).await;
    let (s, c) = gw.answer(&id, json!(false)).await;
    assert_eq!((s, c["response"].clone()), (StatusCode::OK, json!(false)));
    let (s, _) = gw.answer(&id, json!(true)).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let id = gw.ask(json!({"agent": "bot", "session_id": "s1", "question": "Quick?", "accepted_response_kinds": ["yes_no"], "timeout_seconds": 1})).await;
    let (_, c) = gw.clarification(&format!("{id}?wait=5"), BOT).await;
    assert_eq!(c["status"], "expired");
    // Answered past its deadline, before or after the sweep marks it: said so (found by
    // review: before the sweep, the refusal read "clarification is pending").
    let late = json!({"agent": "bot", "session_id": "s1", "question": "Late?", "accepted_response_kinds": ["yes_no"], "timeout_seconds": 1});
    let id = gw.ask(late).await;
    tokio::time::sleep(std::time::Duration::from_millis(1_050)).await;
    let (s, e) = gw.answer(&id, json!(true)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{e}");
    assert!(e["message"].as_str().unwrap().contains("expired"), "{e}");
    // Bad questions are 400s; another agent cannot ask for bot or read its questions.
    for bad in [
        json!({"agent": "bot", "session_id": "s1", "question": "?", "accepted_response_kinds": ["essay"]}),
        json!({"agent": "bot", "session_id": "s1", "question": "?", "accepted_response_kinds": ["multiple_choice"]}),
        json!({"agent": "bot", "session_id": "s1", "question": "", "accepted_response_kinds": ["yes_no"]}),
    ] {
        assert_eq!(
            gw.post("/v1/clarifications", BOT, bad).await.0,
            StatusCode::BAD_REQUEST
        );
    }
    assert_eq!(
        gw.clarification(&id, "other-key").await.0,
        StatusCode::NOT_FOUND
    );
}

/// Found by review: a multiple-choice question's label is the agent's text and so is the
/// value recorded under the operator's name, and the dashboard showed the label alone — "No"
/// could record `delete_prod`. A label that is not its value is shown with the value, on the
/// dashboard and (found by review: a subscriber showed "No") in the AAEP event.
#[tokio::test]
async fn a_choice_whose_label_hides_its_value_is_shown_with_it() {
    let gw = serve().await;
    let (_sub, mut sse) = gw.listen().await;
    let q = json!({"agent": "bot", "session_id": "s1", "question": "Keep the database?",
                   "accepted_response_kinds": ["multiple_choice"], "timeout_seconds": 120,
                   "choices": [{"value": "keep", "label": "keep"},
                               {"value": "delete_prod", "label": "No"}]});
    gw.ask(q).await;
    let ev = sse.expect("aaep:agent.awaiting.clarification").await.data;
    let labels: Vec<&str> = ev["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["keep", "No (records “delete_prod”)"], "{ev}");
    let cookie = gw.dashboard_session().await;
    let page = gw.dashboard_page("/ui", &cookie).await;
    assert!(
        page.contains("No (records &#8220;delete_prod&#8221;)")
            || page.contains("No (records “delete_prod”)"),
        "{page}"
    );
    assert!(page.contains(">keep</option>"), "{page}");
}
