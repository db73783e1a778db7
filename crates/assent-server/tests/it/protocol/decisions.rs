//! Seed 002 decisions and what they mint: approve with modifications (the token binds the
//! edited call; an edit the policy denies or widens out of scope is refused), a deny reason
//! reaching the agent, device-bound tokens, every Token field, batch decisions over grouped
//! approvals, and cancelling approvals and sessions.

use super::env::env;
use crate::kit::{BOT, OP, assert_answer, assert_error, assert_says, audit_count, token_of};
use crate::schemas::{assert_valid, validator};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn approve_with_modifications_binds_the_edited_call_and_audits_both() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw
        .held("s1", "send", json!({"to": "everyone", "n": 1}))
        .await;
    let (s, b) = gw.edit(&id, json!({"to": "team", "n": 1})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let rec = gw.as_agent(&id).await;
    assert_eq!(
        (rec["arguments_changed"].as_bool(), &rec["arguments"]),
        (Some(true), &json!({"to": "team", "n": 1}))
    );
    assert_eq!(
        rec["diff"],
        json!([{"op": "replace", "path": "/to", "value": "team"}])
    );
    let t = token_of(&rec);
    let (s, b) = gw
        .redeem(&t, "send", json!({"to": "everyone", "n": 1}), None)
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "TOKEN_MISMATCH");
    assert_eq!(
        gw.redeem(&t, "send", json!({"n": 1, "to": "team"}), None)
            .await
            .0,
        StatusCode::OK
    );
    let (_, ar) = gw.view(&id, "approval-request").await;
    assert_valid(
        &validator("docs/schemas/approval-request.schema.json"),
        &ar,
        "edited ApprovalRequest",
    );
    assert_eq!(ar["diff"][0]["path"], "/to");

    // An edit the policy denies is refused and the approval stays pending.
    let id = gw.held("s1", "wipe", json!({"target": "/tmp/x"})).await;
    let (s, b) = gw.edit(&id, json!({"target": "/"})).await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "EDIT_DENIED");
    assert_says(&b, "message", "never wipe /");
    assert_eq!(gw.as_agent(&id).await["status"], "pending");
    // The unedited call is denied outright.
    let (s, b) = gw
        .call("s1", "wipe", json!({"target": "/"}), json!({}))
        .await;
    assert_answer(s, &b, "reason", StatusCode::FORBIDDEN, "never wipe /");
    // An edit that widens a path beyond the roots is refused too.
    let inside = e.root.path().join("a.txt");
    let id = gw
        .held("s1", "read_path", json!({"path": "relative.txt"}))
        .await;
    let (s, b) = gw.edit(&id, json!({"path": "/etc/passwd"})).await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "EDIT_OUT_OF_SCOPE");
    let (s, _) = gw.edit(&id, json!({"path": inside})).await;
    assert_eq!(s, StatusCode::OK);

    gw.with_store(|s| s.verify_audit()).unwrap();
    let data = gw.sql().text("SELECT data FROM audit WHERE kind = 'decision' AND data LIKE '%modified_call%' ORDER BY seq LIMIT 1", &[]);
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["original_call"]["arguments"]["to"], "everyone");
    assert_eq!(data["modified_call"]["arguments"]["to"], "team");
    assert_ne!(
        data["original_call"]["call_hash"],
        data["modified_call"]["call_hash"]
    );
}

#[tokio::test]
async fn a_deny_reason_reaches_the_agent() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw.held("s1", "send", json!({"n": 1})).await;
    let decision = json!({"decision": "deny", "reason": "use the staging queue"});
    let (s, _) = gw.decide_with(&id, OP, decision).await;
    assert_eq!(s, StatusCode::OK);
    let rec = gw.as_agent(&id).await;
    assert_eq!(rec["code"], "TOOL_DENIED");
    assert_says(&rec, "reason", "use the staging queue");
    assert!(rec.get("token").is_none());
}

#[tokio::test]
async fn a_token_bound_to_a_device_is_refused_from_any_other() {
    let e = env().await;
    let gw = &e.gw;
    let extra = json!({"device_id": "laptop-7", "run_id": "run-1"});
    let (s, b) = gw.call("s1", "send", json!({"n": 1}), extra).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let id = b["approval_id"].as_str().unwrap();
    gw.decide_with(id, OP, json!({"decision": "approve"})).await;
    let rec = gw.as_agent(id).await;
    assert_eq!(rec["approval_token"]["issuedToClientDeviceId"], "laptop-7");
    let t = token_of(&rec);
    for dev in [None, Some("phone-1")] {
        let (s, b) = gw.redeem(&t, "send", json!({"n": 1}), dev).await;
        assert_eq!(
            (s, b["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("DEVICE_MISMATCH")),
            "{dev:?}"
        );
    }
    assert_eq!(
        gw.redeem(&t, "send", json!({"n": 1}), Some("laptop-7"))
            .await
            .0,
        StatusCode::OK
    );
    let (_, ar) = gw.view(id, "approval-request").await;
    assert_eq!(ar["runId"], "run-1");
}

/// Seed 002 Token: every field of a minted token says what it binds — its own UUID v4
/// `tokenId`, the approval, the call's hash, the expiry the agent is told, single use, the
/// scope and the device — and it validates against the schema.
#[tokio::test]
async fn a_token_carries_every_seed_002_field_with_the_values_it_binds() {
    let e = env().await;
    let gw = &e.gw;
    let extra = json!({"device_id": "phone-1"});
    let (s, b) = gw.call("s1", "send", json!({"n": 9}), extra).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (s, _) = gw
        .decide_with(&id, OP, json!({"decision": "approve"}))
        .await;
    assert_eq!(s, StatusCode::OK);
    let rec = gw.as_agent(&id).await;
    let t = &rec["approval_token"];
    assert_valid(
        &validator("docs/schemas/approval-token.schema.json"),
        t,
        "token",
    );
    let token_id = t["tokenId"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(token_id).is_ok_and(|u| u.get_version_num() == 4));
    assert_eq!(t["approvalId"], id.as_str());
    assert_eq!(t["toolCallHash"], rec["call_hash"]);
    assert_eq!(t["expiresAt"], rec["token_expires_at"]);
    assert_eq!(t["singleUse"], true);
    assert_eq!(t["scope"], "once");
    assert_eq!(t["issuedToClientDeviceId"], "phone-1");
    let other = gw.held("s1", "send", json!({"n": 10})).await;
    gw.decide_with(&other, OP, json!({"decision": "approve"}))
        .await;
    assert_ne!(
        gw.as_agent(&other).await["approval_token"]["tokenId"],
        token_id
    );
}

#[tokio::test]
async fn similar_approvals_are_grouped_and_decided_together_each_with_its_own_token() {
    let e = env().await;
    let gw = &e.gw;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(gw.held("s1", "send", json!({"n": n})).await);
    }
    gw.held("s1", "deploy", json!({})).await;
    let (s, g) = gw
        .get("/v1/approvals?status=pending&group=similar", OP)
        .await;
    assert_eq!(s, StatusCode::OK);
    let groups = g["groups"].as_array().unwrap();
    assert_eq!(
        groups
            .iter()
            .map(|g| (g["tool"].as_str().unwrap(), g["count"].as_u64().unwrap()))
            .collect::<Vec<_>>(),
        [("send", 3), ("deploy", 1)]
    );
    // A batch edits nothing: arguments are refused before anything is decided.
    let (s, b) = gw
        .post(
            "/v1/approvals/decisions",
            OP,
            json!({"ids": ids, "decision": "approve", "arguments": {"to": "mallory"}}),
        )
        .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&b, "message", "cannot edit arguments");
    let mut body_ids = ids.clone();
    body_ids.push("no-such-id".into());
    let (s, b) = gw
        .post(
            "/v1/approvals/decisions",
            OP,
            json!({"ids": body_ids, "decision": "approve"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let r = b["results"].as_array().unwrap();
    assert_eq!(
        r.iter()
            .map(|x| x["ok"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        [true, true, true, false]
    );
    assert_eq!(r[3]["code"], "NOT_FOUND");
    let mut tokens = std::collections::HashSet::new();
    for (n, id) in ids.iter().enumerate() {
        let rec = gw.as_agent(id).await;
        assert!(
            tokens.insert(
                rec["approval_token"]["tokenId"]
                    .as_str()
                    .unwrap()
                    .to_string()
            )
        );
        // Each token binds its own call only.
        let (s, _) = gw
            .redeem(&token_of(&rec), "send", json!({"n": (n + 1) % 3}), None)
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        assert_eq!(
            gw.redeem(&token_of(&rec), "send", json!({"n": n}), None)
                .await
                .0,
            StatusCode::OK
        );
    }
    let n = audit_count(&gw.data_dir, "decision");
    assert_eq!(n, 3);
}

#[tokio::test]
async fn agents_and_operators_cancel_approvals_and_sessions() {
    let e = env().await;
    let gw = &e.gw;
    let a = gw.held("s1", "send", json!({"n": 1})).await;
    // Another agent cannot see or cancel it.
    let (s, _) = gw.cancel(&a, "other-key", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, b) = gw
        .cancel(&a, BOT, Some(json!({"reason": "plan changed"})))
        .await;
    assert_answer(s, &b, "status", StatusCode::OK, "cancelled");
    let (s, _) = gw.decide_with(&a, OP, json!({"decision": "approve"})).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let b1 = gw.held("s1", "send", json!({"n": 2})).await;
    let b2 = gw.held("s1", "deploy", json!({})).await;
    let other = gw.held("s2", "send", json!({"n": 2})).await;
    let (s, b) = gw.cancel_session("s1", OP).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let mut got: Vec<String> = serde_json::from_value(b["cancelled"].clone()).unwrap();
    got.sort();
    let mut want = vec![b1, b2];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(gw.as_agent(&other).await["status"], "pending");
    let rec = gw.as_agent(&want[0]).await;
    assert_eq!(
        (rec["status"].as_str(), rec["code"].as_str()),
        (Some("cancelled"), Some("TOOL_DENIED"))
    );
}
