//! The rest of `/v1` through the typed client against a real gateway: scopes and grants,
//! batches and cancellations, the user's in-client decision, tool results, clarifications,
//! tool pinning and reviews, MPLP plans and Confirms, and the audit reads — each answer also
//! read raw and round-tripped through its type.

use crate::live::{call, hold_pay, raw_get, raw_post, result_report, start_bot_alice};
use assent_api::approvals::{
    Approval, ApprovalGroups, ApprovalRequestDoc, BatchDecisionRequest, BatchDecisionResponse,
    CancelRequest, DecisionRequest, SessionCancelled, UserDecisionRequest,
};
use assent_api::audit::{CheckpointList, DeadLetterList};
use assent_api::clarify::{
    AnswerRequest, AskRequest, Clarification, ClarificationList, ClarificationStatus,
};
use assent_api::gate::GateAnswer;
use assent_api::identity::{Health, WhoAmI};
use assent_api::plans::{
    ConfirmRequest, CreatePlanRequest, PipelineEvents, SubmitPlanRequest, UpdatePlanRequest,
};
use assent_api::tokens::{GrantList, RedeemRequest};
use assent_api::tools::{
    DeclaredTools, PinState, ReviewStatus, ToolCheckRequest, ToolCheckResponse, ToolPinList,
    ToolReview, ToolReviewList,
};
use assent_api::{ApprovalStatus, DecisionKind, error};
use serde_json::json;

#[tokio::test]
async fn a_session_scope_makes_a_grant_that_allows_with_a_token_until_revoked() {
    let (gw, bot, alice) = start_bot_alice().await;
    let id = hold_pay(&bot, 300).await;
    let mut d = DecisionRequest::new(DecisionKind::Approve);
    d.scope = Some("session".into());
    let a = alice.decide(&id, &d).await.unwrap();
    assert_eq!(a.scope.as_deref(), Some("session"));
    // The same call again: allowed by the grant, with a single-use token to redeem.
    let body = serde_json::to_value(call("pay", None, json!({"amount": 300, "to": "bob"})));
    let (s, answer) = raw_post::<GateAnswer>(&bot, "/v1/tool-calls", body.unwrap()).await;
    let GateAnswer::Allow(allowed) = answer else {
        panic!("expected allow: {answer:?}")
    };
    let g = allowed.grant.expect("a grant's allow");
    assert_eq!((s, g.grant_id.as_deref()), (200, a.grant_id.as_deref()));
    let redeem = RedeemRequest {
        token: g.token,
        tool: "pay".into(),
        server: None,
        arguments: json!({"amount": 300, "to": "bob"}),
        device_id: None,
    };
    bot.redeem(&redeem).await.unwrap();
    let grants = alice.grants(false).await.unwrap();
    assert_eq!(grants.grants.len(), 1);
    assert_eq!(
        raw_get::<GrantList>(&alice, "/v1/grants?all=false").await,
        grants
    );
    let gid = &grants.grants[0].id;
    alice.revoke_grant(gid).await.unwrap();
    let e = alice.revoke_grant(gid).await.unwrap_err();
    assert_eq!(e.code(), Some(error::NOT_FOUND));
    assert_eq!(alice.grants(true).await.unwrap().grants.len(), 1);
    raw_get::<GrantList>(&alice, "/v1/grants?all=true").await;
    let page = alice.learning_samples(None, None).await.unwrap();
    assert!(!page.samples.is_empty());
    assert_eq!(page.next, None, "one page holds them all");
    gw.stop().await;
}

#[tokio::test]
async fn batches_cancellations_and_the_users_decision() {
    let (gw, bot, alice) = start_bot_alice().await;
    let (a1, a2) = (hold_pay(&bot, 101).await, hold_pay(&bot, 102).await);
    raw_get::<ApprovalGroups>(&alice, "/v1/approvals?group=similar").await;
    let groups = alice.approval_groups(None, Some(10)).await.unwrap();
    assert_eq!(groups.groups[0].count, 2);
    let doc: ApprovalRequestDoc = alice.approval_request_doc(&a1).await.unwrap();
    assert_eq!(doc.status, ApprovalStatus::Pending);
    raw_get::<ApprovalRequestDoc>(
        &alice,
        &format!("/v1/approvals/{a1}?format=approval-request"),
    )
    .await;
    let mplp = alice.approval_mplp(&a1).await.unwrap();
    assert_eq!(mplp["confirm_id"], a1.as_str());
    // One approves, the other is decided already: 200 with a result each.
    alice
        .decide(&a2, &DecisionRequest::new(DecisionKind::Deny))
        .await
        .unwrap();
    let batch = BatchDecisionRequest {
        ids: vec![a1.clone(), a2.clone()],
        decision: DecisionRequest {
            reason: Some("batch".into()),
            ..DecisionRequest::new(DecisionKind::Approve)
        },
    };
    let body = serde_json::to_value(&batch).unwrap();
    let a3 = hold_pay(&bot, 103).await;
    let (s, r) = raw_post::<BatchDecisionResponse>(&alice, "/v1/approvals/decisions", body).await;
    assert_eq!(s, 200);
    assert!(r.results[0].ok && !r.results[1].ok);
    assert_eq!(r.results[1].code.as_deref(), Some(error::ALREADY_DECIDED));
    // The agent cancels one; the session cancel takes the rest.
    let a4 = hold_pay(&bot, 104).await;
    let reason = CancelRequest {
        reason: Some("withdrawn".into()),
    };
    let c = bot.cancel(&a3, &reason).await.unwrap();
    assert_eq!(
        (c.status, c.code.as_deref()),
        (ApprovalStatus::Cancelled, Some(error::TOOL_DENIED))
    );
    // No rule allows in-client approval: the user's decision is refused, typed.
    let e = bot
        .user_decision(&a4, &UserDecisionRequest::new(true, Some("fine".into())))
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(403), Some(error::IN_CLIENT_NOT_ALLOWED))
    );
    let a5 = hold_pay(&bot, 105).await;
    let (s, c) = raw_post::<Approval>(&bot, &format!("/v1/approvals/{a5}/cancel"), json!({})).await;
    assert_eq!((s, c.status), (200, ApprovalStatus::Cancelled));
    let (s, out) = raw_post::<SessionCancelled>(&alice, "/v1/sessions/s0/cancel", json!({})).await;
    assert!(s == 200 && out.cancelled.is_empty());
    let out = bot
        .cancel_session("s1", &CancelRequest::default())
        .await
        .unwrap();
    assert_eq!(
        (out.session_id.as_str(), out.cancelled.as_slice()),
        ("s1", [a4.clone()].as_slice())
    );
    raw_get::<Approval>(&bot, &format!("/v1/approvals/{a4}")).await;
    gw.stop().await;
}

#[tokio::test]
async fn results_clarifications_confirms_and_identities() {
    let (gw, bot, alice) = start_bot_alice().await;
    let result = result_report("read_file", Some("fs"), json!({"path": "/a"}), 10);
    let body = serde_json::to_value(&result).unwrap();
    let (s, a) = raw_post::<GateAnswer>(&bot, "/v1/tool-results", body).await;
    assert!(
        s == 200 && matches!(a, GateAnswer::Allow(ref x) if x.verdict.is_none()),
        "{a:?}"
    );
    assert!(matches!(
        bot.report_result(&result).await.unwrap(),
        GateAnswer::Allow(_)
    ));

    let ask = AskRequest {
        agent: "bot".into(),
        session_id: "s1".into(),
        question: "Go on?".into(),
        accepted_response_kinds: vec!["yes_no".into()],
        choices: Vec::new(),
        context: None,
        timeout_seconds: Some(60),
    };
    let (s, c) = raw_post::<Clarification>(
        &bot,
        "/v1/clarifications",
        serde_json::to_value(&ask).unwrap(),
    )
    .await;
    assert_eq!((s, c.status), (202, ClarificationStatus::Pending));
    let q = bot.ask(&ask).await.unwrap();
    let list: ClarificationList = raw_get(&alice, "/v1/clarifications?status=pending").await;
    assert_eq!(list, alice.clarifications(Some("pending")).await.unwrap());
    let e = alice
        .answer(
            &q.id,
            &AnswerRequest {
                response: json!("maybe"),
            },
        )
        .await
        .unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(422), Some(error::WRONG_KIND)));
    let done = alice
        .answer(
            &q.id,
            &AnswerRequest {
                response: json!(true),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, ClarificationStatus::Answered);
    let seen = bot.clarification(&q.id, 1).await.unwrap();
    assert_eq!(
        (seen.response, seen.answered_by.as_deref()),
        (Some(json!(true)), Some("alice"))
    );
    raw_get::<Clarification>(&bot, &format!("/v1/clarifications/{}", q.id)).await;

    let confirm = ConfirmRequest {
        agent: "bot".into(),
        session_id: "s1".into(),
        target_type: "context".into(),
        target_id: "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e5f".into(),
        reason: Some("new context".into()),
        target: None,
        trace_id: None,
        run_id: None,
    };
    assert!(matches!(
        bot.confirm(&confirm).await.unwrap(),
        GateAnswer::Pending(_)
    ));
    let e = bot
        .plan("5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e50")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(error::NOT_FOUND));

    raw_get::<WhoAmI>(&alice, "/v1/whoami").await;
    assert!(
        matches!(alice.whoami().await.unwrap(), WhoAmI::Operator { ref roles, .. } if roles == &["finance"])
    );
    assert_eq!(raw_get::<Health>(&bot, "/healthz").await.status, "ok");
    raw_get::<CheckpointList>(&alice, "/v1/audit/checkpoints").await;
    alice.checkpoints(Some(5), None).await.unwrap();
    raw_get::<DeadLetterList>(&alice, "/v1/webhooks/dead-letters").await;
    assert!(
        alice
            .dead_letters(None, None)
            .await
            .unwrap()
            .dead_letters
            .is_empty()
    );
    assert_eq!(bot.whoami().await.unwrap().agent_id(), Some("bot"));
    gw.stop().await;
}

#[tokio::test]
async fn tool_pinning_reviews_and_declared_tools() {
    let (gw, bot, alice) = start_bot_alice().await;
    let declared: DeclaredTools = raw_get(&bot, "/v1/agents/bot/mcp-servers/fs/tools").await;
    assert_eq!(
        declared.tools,
        Some(vec!["read_file".into(), "write_file".into()])
    );
    assert_eq!(bot.declared_tools("bot", "fs").await.unwrap(), declared);
    let def = |d: &str| json!({"name": "write_file", "description": d, "inputSchema": {"type": "object"}});
    let check = |d: &str| ToolCheckRequest {
        agent: "bot".into(),
        server: "fs".into(),
        tools: vec![def(d)],
        handshake: None,
        hub_token: None,
    };
    let first = bot.check_tools(&check("writes")).await.unwrap();
    assert_eq!(first.tools[0].state, PinState::FirstUse);
    let body = serde_json::to_value(check("writes anything")).unwrap();
    let (s, held) = raw_post::<ToolCheckResponse>(&bot, "/v1/tools/check", body).await;
    assert_eq!((s, held.tools[0].state), (200, PinState::Held));
    let rid = held.tools[0].review_id.clone().unwrap();
    let list: ToolReviewList = raw_get(&alice, "/v1/tools/reviews").await;
    assert_eq!(
        list,
        alice
            .tool_reviews(Some(ReviewStatus::Pending))
            .await
            .unwrap()
    );
    assert!(list.reviews[0].diff.is_some());
    raw_get::<ToolReview>(&bot, &format!("/v1/tools/reviews/{rid}")).await;
    let r = alice.decide_review(&rid, true).await.unwrap();
    assert_eq!(r.status, ReviewStatus::Accepted);
    let e = alice.decide_review(&rid, false).await.unwrap_err();
    assert_eq!(e.code(), Some(error::ALREADY_DECIDED));
    assert_eq!(
        bot.tool_review(&rid, 1).await.unwrap().status,
        ReviewStatus::Accepted
    );
    let pins: ToolPinList = raw_get(&alice, "/v1/tools/pins").await;
    assert_eq!(pins, alice.tool_pins().await.unwrap());
    assert_eq!(alice.tool_reviews(None).await.unwrap().reviews.len(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn a_plan_is_created_submitted_approved_and_read_through_the_typed_client() {
    let (gw, bot, alice) = start_bot_alice().await;
    let id = "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e60";
    let plan = json!({
        "meta": {"protocol_version": "1.0.0", "schema_version": "1.0.0"},
        "plan_id": id, "context_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e61",
        "title": "Rotate the database password", "objective": "Rotate it without downtime",
        "steps": [{"step_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e62",
                   "description": "rotate", "status": "pending", "order_index": 0}],
    });
    let create = CreatePlanRequest {
        agent: "bot".into(),
        session_id: Some("s1".into()),
        plan: plan.clone(),
        trace_id: None,
    };
    let created = bot.create_plan(&create).await.unwrap();
    assert_eq!(created["status"], "draft");
    let e = bot.create_plan(&create).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(409), Some(error::PLAN_EXISTS))
    );
    let update = UpdatePlanRequest {
        agent: "bot".into(),
        plan,
    };
    bot.update_plan(id, &update).await.unwrap();
    let submit = SubmitPlanRequest {
        agent: "bot".into(),
        session_id: None,
        run_id: None,
    };
    let held = bot.submit_plan(id, &submit).await.unwrap();
    let cid = held.approval_id().expect("a held Confirm").to_string();
    let a = alice
        .decide(&cid, &DecisionRequest::new(DecisionKind::Approve))
        .await
        .unwrap();
    assert_eq!((a.target_type.as_str(), a.target_id.as_str()), ("plan", id));
    assert_eq!(bot.plan(id).await.unwrap()["status"], "approved");
    let events: PipelineEvents = raw_get(&bot, &format!("/v1/plans/{id}/pipeline-events")).await;
    assert_eq!(events, bot.pipeline_events(id).await.unwrap());
    let e = bot.update_plan(id, &update).await.unwrap_err();
    assert_eq!(e.status(), Some(409));
    let e = bot.submit_plan(id, &submit).await.unwrap_err();
    assert_eq!(e.code(), Some(error::WRONG_STATE));
    gw.stop().await;
}

/// The MCP side's client retires an idle connection after `POOL_IDLE` (500 ms), before the
/// gateway's shortest idle keep-alive wait (1 s) can close it under a request being written (a
/// request lost so is not retried: seen in CI as a withheld result). A server counting its
/// connections: two requests 800 ms apart come on two connections, two at once on one.
#[tokio::test]
async fn an_idle_connection_is_not_reused_after_the_pool_idle_time() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let mut conn = conn.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                    if conn.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let second = std::time::Duration::from_secs(30);
    let c = assent_api::Client::with_timeouts(&url, "k", second, second).unwrap();
    let _ = c.whoami().await;
    let _ = c.whoami().await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "back to back: one connection"
    );
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let _ = c.whoami().await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "after 800 ms idle: a new one"
    );
}

/// Attack (found by review): `Client::raw` appended its path to the base URL as given, so a
/// path of `@evil.example/…` made the gateway's host the URL's user name and sent the bearer
/// key to `evil.example`. A path must start with one `/` and stay on the gateway's origin;
/// anything else is refused before any request is sent.
#[tokio::test]
async fn a_raw_path_that_leaves_the_gateways_origin_is_refused_unsent() {
    let c = assent_api::Client::new("http://127.0.0.1:9", "agent-key-0123456789abcdef").unwrap();
    for path in [
        "@evil.example/v1/whoami",
        "//evil.example/v1/whoami",
        "v1/whoami",
        ".evil.example/",
    ] {
        let e = c.raw(reqwest::Method::GET, path, None).await.unwrap_err();
        assert!(
            matches!(e, assent_api::ClientError::Config(_)),
            "{path}: {e:?}"
        );
    }
    // A path on the gateway is sent (here to a closed port: a transport error, not refused).
    let e = c
        .raw(reqwest::Method::GET, "/v1/whoami", None)
        .await
        .unwrap_err();
    assert!(e.is_transport(), "{e:?}");
}
