//! MPLP plans and Confirms on context, extension and other targets (MPLP Confirm module §2.3,
//! §4; seed 001 §4.3; the Gatekeeper duty of seed 000), against a real server and SQLite file.
//! Every plan, Confirm and pipeline_stage event is validated against the MPLP schemas.

use crate::kit::{
    AGENTS, BOT, GOV_RULES, Gw, OP, assert_answer, assert_error, assert_says, audit_count, gov,
    pluck, policy, serve, serve_policy, token_of,
};
use crate::schemas::{assert_valid, validator};
use reqwest::StatusCode;
use serde_json::{Value, json};

pub(crate) fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(crate) fn plan(id: &str, steps: &[(&str, &str)]) -> Value {
    json!({
        "meta": {"protocol_version": "1.0.0", "schema_version": "1.0.0"},
        "plan_id": id, "context_id": uuid(), "title": "Rotate the database password",
        "objective": "Rotate the production database password without downtime",
        "status": "draft",
        "steps": steps.iter().enumerate().map(|(i, (sid, d))| json!({
            "step_id": sid, "description": d, "status": "pending", "order_index": i,
        })).collect::<Vec<_>>(),
    })
}

async fn call_in_plan(
    gw: &Gw,
    plan_id: Option<&str>,
    step_id: Option<&str>,
) -> (StatusCode, Value) {
    let mut body =
        json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {"x": 1}});
    if let Some(p) = plan_id {
        body["plan_id"] = json!(p);
    }
    if let Some(s) = step_id {
        body["step_id"] = json!(s);
    }
    gw.post("/v1/tool-calls", BOT, body).await
}

async fn plan_now(gw: &Gw, id: &str) -> Value {
    let (s, p) = gw.get(&format!("/v1/plans/{id}"), BOT).await;
    assert_eq!(s, StatusCode::OK, "{p}");
    assert_valid(
        &validator("mplp/schemas/v2/mplp-plan.schema.json"),
        &p,
        "plan",
    );
    p
}

pub(crate) async fn mplp(gw: &Gw, confirm: &str) -> Value {
    let (s, c) = gw
        .get(&format!("/v1/approvals/{confirm}?format=mplp"), OP)
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_valid(
        &validator("mplp/schemas/v2/mplp-confirm.schema.json"),
        &c,
        "confirm",
    );
    c
}

#[tokio::test]
async fn a_plan_is_submitted_rejected_revised_and_approved_and_blocks_its_calls_until_then() {
    let gw = serve().await;
    let (pid, s1, s2) = (uuid(), uuid(), uuid());
    let body = plan(
        &pid,
        &[
            (&s1, "Create the new password"),
            (&s2, "Switch the app over"),
        ],
    );

    // Not an MPLP plan: refused with where it is wrong; not a draft: refused.
    let mut bad = body.clone();
    bad.as_object_mut().unwrap().remove("steps");
    let (s, e) = gw.create_plan(bad).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_says(&e, "message", "steps");
    let mut approved = body.clone();
    approved["status"] = json!("approved");
    let (s, _) = gw.create_plan(approved).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Attack (found by review): two steps under one `step_id` ("read the report", "wire the
    // funds"), approved as one; a call naming it was shown as that step of an approved plan,
    // either one. Refused when the plan is written.
    let twice = plan(
        &uuid(),
        &[(&s1, "Read the report"), (&s1, "Wire the funds")],
    );
    let (s, e) = gw.create_plan(twice).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    assert_says(&e, "message", "is named by more than one step");

    let (s, p) = gw
        .post(
            "/v1/plans",
            BOT,
            json!({"agent": "bot", "session_id": "s1", "plan": body}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    assert_eq!(p["status"], "draft");
    let (s, _) = gw.create_plan(body.clone()).await;
    assert_eq!(s, StatusCode::CONFLICT);

    // A draft plan's calls are blocked (gatekeeper duty), as are a step's.
    let (s, d) = call_in_plan(&gw, Some(&pid), None).await;
    assert_error(s, &d, StatusCode::FORBIDDEN, "TOOL_DENIED");
    assert_says(&d, "reason", "is draft");

    // Submit: proposed, with a pending Confirm on the plan.
    let (s, r) = gw.submit_plan(&pid).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let confirm = r["approval_id"].as_str().unwrap().to_string();
    assert_eq!(plan_now(&gw, &pid).await["status"], "proposed");
    let c = mplp(&gw, &confirm).await;
    assert_eq!(
        (c["target_type"].as_str(), c["target_id"].as_str()),
        (Some("plan"), Some(pid.as_str()))
    );
    assert_eq!(c["status"], "pending");
    let (s, _) = gw.submit_plan(&pid).await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a proposed plan cannot be submitted twice"
    );
    let (s, d) = call_in_plan(&gw, Some(&pid), Some(&s1)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_says(&d, "reason", "pending Confirm");
    // A plan Confirm is decided once, as submitted.
    let once = json!({"decision": "approve", "scope": "session"});
    let (s, _) = gw.decide_with(&confirm, OP, once).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // Rejected: back to draft, the reason reaches the agent, a plan_rejected stage event.
    let no = json!({"decision": "deny", "reason": "switch over at night"});
    let (s, _) = gw.decide_with(&confirm, OP, no).await;
    assert_eq!(s, StatusCode::OK);
    let p = plan_now(&gw, &pid).await;
    assert_eq!(p["status"], "draft");
    let last = p["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["event_type"].as_str(), last["data"]["reason"].as_str()),
        (Some("plan.rejected"), Some("switch over at night"))
    );
    assert_eq!(mplp(&gw, &confirm).await["status"], "rejected");

    // Revised and resubmitted: the new Confirm carries the RFC 6902 diff.
    let revised = plan(
        &pid,
        &[
            (&s1, "Create the new password"),
            (&s2, "Switch the app over at 02:00"),
        ],
    );
    let mut revised = revised;
    revised["context_id"] = body["context_id"].clone();
    let (s, p) = gw
        .req(
            "PUT",
            &format!("/v1/plans/{pid}"),
            Some(BOT),
            Some(json!({"agent": "bot", "plan": revised})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{p}");
    let (s, r) = gw.submit_plan(&pid).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let confirm2 = r["approval_id"].as_str().unwrap().to_string();
    let (_, req) = gw.view(&confirm2, "approval-request").await;
    assert_valid(
        &validator("docs/schemas/approval-request.schema.json"),
        &req,
        "ApprovalRequest",
    );
    assert_eq!(
        req["diff"],
        json!([{"op": "replace", "path": "/steps/1/description",
                                     "value": "Switch the app over at 02:00"}]),
        "{req}"
    );

    // Approved: the plan is approved and its calls go through the gatekeeper as usual.
    let (s, _) = gw.decide(&confirm2, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(plan_now(&gw, &pid).await["status"], "approved");
    assert_eq!(mplp(&gw, &confirm2).await["status"], "approved");
    let (s, d) = call_in_plan(&gw, Some(&pid), Some(&s2)).await;
    assert_answer(s, &d, "decision", StatusCode::OK, "allow");

    // One pipeline_stage event per decision, valid against the MPLP schema.
    let (_, ev) = gw
        .get(&format!("/v1/plans/{pid}/pipeline-events"), OP)
        .await;
    let ev = ev["events"].as_array().unwrap().clone();
    let kinds: Vec<&str> = ev
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["plan_rejected", "plan_approved"]);
    let v = validator("mplp/schemas/v2/events/mplp-pipeline-stage-event.schema.json");
    for e in &ev {
        assert_valid(&v, e, "pipeline_stage event");
        assert_eq!(e["pipeline_id"], pid.as_str());
    }
    assert_eq!(ev[0]["payload"]["confirm_id"], confirm.as_str());

    // Another agent cannot see or submit it.
    let (s, _) = gw.get(&format!("/v1/plans/{pid}"), "other-key").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    gw.stop().await;
}

#[tokio::test]
async fn confirms_on_context_extension_and_other_targets_and_cancelled_plans() {
    let gw = serve().await;
    let confirm = |t: &str, id: &str| {
        json!({"agent": "bot", "session_id": "s1", "target_type": t, "target_id": id,
               "reason": format!("May I change this {t}?"), "target": {"name": t}})
    };
    let ctx = uuid();
    let (s, r) = gw.post("/v1/confirms", BOT, confirm("context", &ctx)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let cid = r["approval_id"].as_str().unwrap().to_string();
    let c = mplp(&gw, &cid).await;
    assert_eq!(
        (c["target_type"].as_str(), c["target_id"].as_str()),
        (Some("context"), Some(ctx.as_str()))
    );
    gw.decide(&cid, OP, "approve").await;
    assert_eq!(mplp(&gw, &cid).await["status"], "approved");

    let (_, r) = gw
        .post("/v1/confirms", BOT, confirm("extension", &uuid()))
        .await;
    let eid = r["approval_id"].as_str().unwrap().to_string();
    gw.decide(&eid, OP, "deny").await;
    let c = mplp(&gw, &eid).await;
    assert_eq!(
        (c["target_type"].as_str(), c["status"].as_str()),
        (Some("extension"), Some("rejected"))
    );

    // A pending Confirm on a step blocks the calls that name that step.
    let step = uuid();
    let (_, r) = gw.post("/v1/confirms", BOT, confirm("other", &step)).await;
    let oid = r["approval_id"].as_str().unwrap().to_string();
    let (s, _) = call_in_plan(&gw, None, Some(&step)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    gw.decide(&oid, OP, "approve").await;
    let (s, _) = call_in_plan(&gw, None, Some(&step)).await;
    assert_eq!(s, StatusCode::OK);

    // Bad requests name what is wrong.
    for (body, what) in [
        (confirm("plan", &uuid()), "/v1/plans"),
        (confirm("database", &uuid()), "target_type"),
        (confirm("context", "ctx-1"), "target_id"),
    ] {
        let (s, e) = gw.post("/v1/confirms", BOT, body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(e["message"].as_str().unwrap().contains(what), "{e}");
    }

    // Cancelling a proposed plan cancels its Confirm.
    let pid = uuid();
    gw.create_plan(plan(&pid, &[(&uuid(), "Do it")])).await;
    let (_, r) = gw.submit_plan(&pid).await;
    let pc = r["approval_id"].as_str().unwrap().to_string();
    gw.cancel_plan(&pid, json!({"reason": "not needed"})).await;
    assert_eq!(plan_now(&gw, &pid).await["status"], "cancelled");
    let c = mplp(&gw, &pc).await;
    assert_eq!(c["status"], "cancelled");
    let (s, _) = call_in_plan(&gw, Some(&pid), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    gw.stop().await;
}

/// Attack: an operator says no to a plan they may not decide by cancelling it instead (found
/// by the issue 12 review; cancelling is saying no, as for approvals). `olaf` (ops) lacks the
/// plan rule's `finance` role: `403`, audited `decision.refused`, the plan stays `proposed`
/// and its Confirm `pending`; `alice` (finance) may cancel it.
#[tokio::test]
async fn an_operator_cannot_say_no_to_a_plan_by_cancelling_it_without_its_approver_role() {
    let rules = format!("{GOV_RULES}- tool: mplp.plan\n  approvers: [finance]\n");
    let gov = policy("acme.test.rules-v1", &rules);
    let gw = serve_policy(AGENTS, &gov).await;
    let pid = uuid();
    gw.create_plan(plan(&pid, &[(&uuid(), "Do it")])).await;
    let (s, r) = gw.submit_plan(&pid).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let pc = r["approval_id"].as_str().unwrap().to_string();
    let path = format!("/v1/plans/{pid}/cancel");
    let (s, e) = gw.post(&path, "olaf-key", json!({"reason": "no"})).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
    assert_says(&e, "message", "finance");
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 1);
    assert_eq!(plan_now(&gw, &pid).await["status"], "proposed");
    assert_eq!(mplp(&gw, &pc).await["status"], "pending");
    let (s, p) = gw.post(&path, OP, json!({})).await;
    assert_eq!(s, StatusCode::OK, "{p}");
    assert_eq!(plan_now(&gw, &pid).await["status"], "cancelled");
    assert_eq!(mplp(&gw, &pc).await["status"], "cancelled");
    gw.stop().await;
}

/// Attack: an oversized field. Every cancel route bounds its `reason` at 4096 bytes (it is
/// stored, audited and sent to subscribers); the plan's cancel route did not, so a megabyte
/// reason was written into the plan's events and the audit chain. Now it is a `400` that
/// names the limit and the plan stays as it was; a reason of 4096 bytes still cancels.
#[tokio::test]
async fn a_plan_cancel_with_a_reason_over_4096_bytes_is_refused_and_changes_nothing() {
    let gw = serve_policy(AGENTS, &gov()).await;
    let pid = uuid();
    gw.create_plan(plan(&pid, &[(&uuid(), "Do it")])).await;
    let path = format!("/v1/plans/{pid}/cancel");
    let (s, e) = gw
        .post(&path, BOT, json!({"reason": "x".repeat(4097)}))
        .await;
    assert_error(s, &e, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    assert_says(&e, "message", "4096 bytes");
    assert_eq!(plan_now(&gw, &pid).await["status"], "draft");
    let (s, p) = gw
        .post(&path, BOT, json!({"reason": "y".repeat(4096)}))
        .await;
    assert_eq!(s, StatusCode::OK, "{p}");
    assert_eq!(plan_now(&gw, &pid).await["status"], "cancelled");
    gw.stop().await;
}

/// Issue 10: a held tool call that names its plan and step keeps that link. Its Confirm is
/// `target_type: other` with the step as `target_id`, the plan and step in
/// `trace.attributes`, and every `confirm.*` event's `data` names both.
#[tokio::test]
async fn a_held_call_of_a_plan_step_names_the_step_and_plan_in_its_confirm_and_events() {
    let gw = serve().await;
    let (pid, step) = (uuid(), uuid());
    let (s, p) = gw
        .post(
            "/v1/plans",
            BOT,
            json!({"agent": "bot", "session_id": "s1", "plan": plan(&pid, &[(&step, "Pay")])}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (_, r) = gw.submit_plan(&pid).await;
    let (s, _) = gw
        .decide(r["approval_id"].as_str().unwrap(), OP, "approve")
        .await;
    assert_eq!(s, StatusCode::OK);
    // Found by review: a made-up step of the approved plan was not checked, and the call's
    // Confirm and trace named it as a step of a plan someone had approved.
    let made_up = json!({"agent": "bot", "session_id": "s1", "tool": "pay",
        "arguments": {"amount": 500, "to": "bob"}, "plan_id": pid, "step_id": uuid()});
    let (s, d) = gw.post("/v1/tool-calls", BOT, made_up).await;
    assert_error(s, &d, StatusCode::FORBIDDEN, "TOOL_DENIED");
    assert_says(&d, "reason", "is not a step of plan");
    let body = json!({"agent": "bot", "session_id": "s1", "tool": "pay",
                      "arguments": {"amount": 500, "to": "bob"}, "plan_id": pid, "step_id": step});
    let (s, h) = gw.post("/v1/tool-calls", BOT, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{h}");
    let id = h["approval_id"].as_str().unwrap().to_string();
    let c = mplp(&gw, &id).await;
    assert_eq!(
        (c["target_type"].as_str(), c["target_id"].as_str()),
        (Some("other"), Some(step.as_str())),
        "{c}"
    );
    assert_eq!(c["trace"]["attributes"]["plan_id"], pid.as_str());
    assert_eq!(c["trace"]["attributes"]["step_id"], step.as_str());
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    let c = mplp(&gw, &id).await;
    let events = c["events"].as_array().unwrap();
    let kinds = pluck(&c["events"], "event_type");
    assert_eq!(kinds, ["confirm.requested", "confirm.approved"], "{c}");
    for e in events {
        assert_eq!(
            (e["data"]["plan_id"].as_str(), e["data"]["step_id"].as_str()),
            (Some(pid.as_str()), Some(step.as_str())),
            "{e}"
        );
    }
    assert_eq!(events[0]["data"]["target_id"], step.as_str());
    // A call without a plan keeps its own target id and names no plan.
    let (_, h) = gw.propose("pay", json!({"amount": 700, "to": "eve"})).await;
    let c = mplp(&gw, h["approval_id"].as_str().unwrap()).await;
    assert_ne!(c["target_id"], step.as_str());
    assert!(c["trace"]["attributes"].get("plan_id").is_none(), "{c}");
    gw.stop().await;
}

/// Review finding: the plan gate counted any pending Confirm naming the plan or step, whoever
/// raised it, so one agent could raise Confirms on another agent's plan and step ids and keep
/// that agent's calls blocked (`403`) for as long as it kept one pending. Only the calling
/// agent's Confirms and the plan owner's count; the agent's own Confirm on its step still
/// blocks.
#[tokio::test]
async fn a_confirm_on_another_agents_plan_or_step_does_not_block_its_calls() {
    let gw = serve().await;
    let (pid, s1) = (uuid(), uuid());
    let (s, p) = gw
        .create_plan(plan(&pid, &[(&s1, "Create the new password")]))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (_, r) = gw.submit_plan(&pid).await;
    let confirm = r["approval_id"].as_str().unwrap().to_string();
    assert_eq!(gw.decide(&confirm, OP, "approve").await.0, StatusCode::OK);
    let (s, a) = call_in_plan(&gw, Some(&pid), Some(&s1)).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    for target in [&pid, &s1] {
        let body = json!({"agent": "other", "session_id": "o1", "target_type": "other",
                          "target_id": target});
        let (s, c) = gw.post("/v1/confirms", "other-key", body).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{c}");
    }
    let (s, a) = call_in_plan(&gw, Some(&pid), Some(&s1)).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "another agent's Confirms block nothing: {a}"
    );
    let own = json!({"agent": "bot", "session_id": "s1", "target_type": "other", "target_id": s1});
    let (s, c) = gw.post("/v1/confirms", BOT, own).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{c}");
    let (s, d) = call_in_plan(&gw, Some(&pid), Some(&s1)).await;
    assert_error(s, &d, StatusCode::FORBIDDEN, "TOOL_DENIED");
    assert_says(&d, "reason", "pending Confirm");
    gw.stop().await;
}

/// The attack (found by review): plan ids are chosen by agents and leak (logs, tickets,
/// prompts); any agent could register an unused plan id another agent's calls named, then
/// keep those calls blocked (its plan a draft), or cancel the calls held under it and stop the
/// tokens approved under it, knowing only the id. A plan belongs to the agent that registered
/// it: another agent's plan is ignored, as if the call named no plan (refusing the call would
/// hand the squatter the denial of service), it is not shown on the call's Confirm, and its
/// cancellation reaches none of the calls, held before or after the squat; the victim cannot
/// revise, submit or cancel the squatter's plan either (`409 PLAN_OWNER_MISMATCH`).
#[tokio::test]
async fn a_plan_id_squatted_by_another_agent_neither_blocks_nor_cancels_the_victims_calls() {
    let gw = serve().await;
    let (pid, step) = (uuid(), uuid());
    let args = |amount: u64| json!({"amount": amount, "to": "bob"});
    let pay = |amount: u64| {
        json!({"agent": "bot", "session_id": "s1", "tool": "pay", "arguments": args(amount),
               "plan_id": pid, "step_id": step})
    };
    let held = |(s, h): (StatusCode, Value)| {
        assert_eq!(s, StatusCode::ACCEPTED, "{h}");
        h["approval_id"].as_str().unwrap().to_string()
    };
    // Before the squat: one call held under the id, one approved with its token.
    let early = held(gw.post("/v1/tool-calls", BOT, pay(501)).await);
    let approved = held(gw.post("/v1/tool-calls", BOT, pay(502)).await);
    assert_eq!(gw.decide(&approved, OP, "approve").await.0, StatusCode::OK);
    let token = token_of(&gw.as_agent(&approved).await);
    let squat = json!({"agent": "other", "session_id": "o1",
                       "plan": plan(&pid, &[(&step, "Squat")])});
    let (s, p) = gw.post("/v1/plans", "other-key", squat).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    // The squatter's draft blocks nothing of the victim's, and is not shown on its Confirm.
    let (s, a) = call_in_plan(&gw, Some(&pid), Some(&step)).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "another agent's draft blocks nothing: {a}"
    );
    let late = held(gw.post("/v1/tool-calls", BOT, pay(503)).await);
    let c = mplp(&gw, &late).await;
    assert!(c["trace"]["attributes"].get("plan_id").is_none(), "{c}");
    assert!(c["trace"]["attributes"].get("step_id").is_none(), "{c}");
    // The victim cannot take the id or change the squatter's plan.
    let (s, e) = gw.create_plan(plan(&pid, &[(&step, "Mine")])).await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_EXISTS");
    let put = json!({"agent": "bot", "plan": plan(&pid, &[(&step, "Mine")])});
    let (s, e) = gw
        .req("PUT", &format!("/v1/plans/{pid}"), Some(BOT), Some(put))
        .await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_OWNER_MISMATCH");
    let (s, e) = gw.submit_plan(&pid).await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_OWNER_MISMATCH");
    let cancel = format!("/v1/plans/{pid}/cancel");
    let (s, e) = gw.post(&cancel, BOT, json!({})).await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_OWNER_MISMATCH");
    assert_eq!(
        gw.get(&format!("/v1/plans/{pid}"), BOT).await.0,
        StatusCode::NOT_FOUND
    );
    // The squatter cancels its plan: the victim's calls stay held, its token still redeems.
    let (s, p) = gw
        .post(&cancel, "other-key", json!({"reason": "squat"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{p}");
    for id in [&early, &late] {
        let (s, a) = gw.approval(id, OP).await;
        assert_eq!(
            (s, a["status"].as_str()),
            (StatusCode::OK, Some("pending")),
            "{a}"
        );
    }
    let (s, r) = gw.redeem(&token, "pay", args(502), None).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    gw.stop().await;
}

/// The kit's agent `bot`, declaring the kit's agent `other` (file `other.agf.yaml`, beside its
/// own) a local delegate: `bot` orchestrates, `other` is its sub-agent.
pub(crate) fn orchestrating_bot() -> String {
    format!("{AGENTS}  local_agents:\n    - {{alias: helper, source: ./other.agf.yaml}}\n")
}

/// `other`'s `pay` of `amount` naming plan `pid` (its `pay` is always held).
pub(crate) async fn delegate_pays(gw: &Gw, pid: &str, amount: u64) -> (StatusCode, Value) {
    let body = json!({"agent": "other", "session_id": "o1", "tool": "pay",
                      "arguments": {"amount": amount, "to": "bob"}, "plan_id": pid});
    gw.post("/v1/tool-calls", "other-key", body).await
}

/// Restores, safely, what plans belonging to their agent took away: an orchestrator's plan
/// gates the calls of the sub-agents its agent file declares (`local_agents[]`, the operator's
/// configuration, never the request). Its declared delegate's call naming the plan is refused
/// while the plan is a draft or under review, gated as usual once it is approved (the plan is
/// shown on its Confirm), and cancelling the plan cancels the delegate's held call and stops
/// the token approved under it. The delegate cannot revise, submit or cancel its
/// orchestrator's plan (`409 PLAN_OWNER_MISMATCH`), and the relation is one way: the
/// delegate's own plan is ignored by the orchestrator's calls.
#[tokio::test]
async fn an_orchestrators_plan_gates_and_cancels_its_declared_delegates_calls() {
    let gw = serve_policy(&orchestrating_bot(), &gov()).await;
    assert!(
        gw.state.registry().warnings.is_empty(),
        "{:?}",
        gw.state.registry().warnings
    );
    let (pid, s1) = (uuid(), uuid());
    let (s, p) = gw.create_plan(plan(&pid, &[(&s1, "Pay the bill")])).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (s, d) = delegate_pays(&gw, &pid, 501).await;
    assert_error(s, &d, StatusCode::FORBIDDEN, "TOOL_DENIED");
    assert_says(&d, "reason", "is draft");
    let (s, r) = gw.submit_plan(&pid).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let (s, d) = delegate_pays(&gw, &pid, 502).await;
    assert_error(s, &d, StatusCode::FORBIDDEN, "TOOL_DENIED");
    let confirm = r["approval_id"].as_str().unwrap().to_string();
    assert_eq!(gw.decide(&confirm, OP, "approve").await.0, StatusCode::OK);
    // Approved: the delegate's calls are gated as usual, under the plan.
    let held = |(s, h): (StatusCode, Value)| {
        assert_eq!(s, StatusCode::ACCEPTED, "{h}");
        h["approval_id"].as_str().unwrap().to_string()
    };
    let pending = held(delegate_pays(&gw, &pid, 503).await);
    assert_eq!(
        mplp(&gw, &pending).await["trace"]["attributes"]["plan_id"],
        json!(pid)
    );
    let approved = held(delegate_pays(&gw, &pid, 504).await);
    assert_eq!(gw.decide(&approved, OP, "approve").await.0, StatusCode::OK);
    let token = a_token(&gw, &approved).await;
    // The delegate cannot change its orchestrator's plan, nor read it.
    let put = json!({"agent": "other", "plan": plan(&pid, &[(&s1, "Pay me")])});
    let path = format!("/v1/plans/{pid}");
    let (s, e) = gw.req("PUT", &path, Some("other-key"), Some(put)).await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_OWNER_MISMATCH");
    let cancel = format!("/v1/plans/{pid}/cancel");
    let submit = (format!("{path}/submit"), json!({"agent": "other"}));
    for (path, body) in [submit, (cancel.clone(), json!({}))] {
        let (s, e) = gw.post(&path, "other-key", body).await;
        assert_error(s, &e, StatusCode::CONFLICT, "PLAN_OWNER_MISMATCH");
    }
    assert_eq!(gw.get(&path, "other-key").await.0, StatusCode::NOT_FOUND);
    // One way: the delegate's draft does not gate its orchestrator's calls.
    let (theirs, t1) = (uuid(), uuid());
    let mine = json!({"agent": "other", "session_id": "o1", "plan": plan(&theirs, &[(&t1, "x")])});
    let (s, p) = gw.post("/v1/plans", "other-key", mine).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (s, a) = call_in_plan(&gw, Some(&theirs), None).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    // The orchestrator cancels its plan: the delegate's held call and token stop with it.
    let (s, p) = gw.post(&cancel, BOT, json!({"reason": "stop"})).await;
    assert_eq!(s, StatusCode::OK, "{p}");
    let (s, a) = gw.approval(&pending, OP).await;
    assert_eq!(
        (s, a["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{a}"
    );
    let args = json!({"amount": 504, "to": "bob"});
    let (s, e) = gw.redeem_as("other-key", &token, "pay", args).await;
    assert_error(s, &e, StatusCode::CONFLICT, "PLAN_STOPPED");
    gw.stop().await;
}

/// The token of approved approval `id`, as its agent `other` reads it.
pub(crate) async fn a_token(gw: &Gw, id: &str) -> Value {
    let (s, a) = gw.approval(id, "other-key").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    json!(token_of(&a))
}

/// A gateway whose configuration is read from files and reloaded by `POST /v1/reload`
/// ([`reload_bot`]): `conf/bot.agf.yaml` holds `bot_file`, `conf/other.agf.yaml` the agent
/// `other` whose `pay` is always held, `conf/gov.yaml` [`gov`]; operator `alice` (finance),
/// agents `bot` and `other` (keys as the kit's). The directory is returned with it: keep it
/// until the gateway stops.
pub(crate) async fn reloadable(bot_file: &str) -> (tempfile::TempDir, Gw) {
    use assent_server::config::Config;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(conf.join("subs")).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), bot_file).unwrap();
    let other = crate::kit::other_agent();
    std::fs::write(conf.join("other.agf.yaml"), other).unwrap();
    std::fs::write(conf.join("gov.yaml"), gov()).unwrap();
    let principals = crate::reload::principals(&[
        ("alice", "kind: operator, roles: [finance]", OP),
        ("bot", "kind: agent, agent_id: bot", BOT),
        ("other", "kind: agent, agent_id: other", "other-key"),
    ]);
    let file = conf.join("assent.yaml");
    let text =
        format!("agents: [bot.agf.yaml, other.agf.yaml]\ngovernance: [gov.yaml]\n{principals}");
    std::fs::write(&file, text).unwrap();
    let cfg = Config::load(&file).unwrap();
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let gw = crate::kit::start_reloading(&data, &gov(), &cfg).await;
    (dir, gw)
}

/// Writes `bot_file` as `bot`'s agent file of the [`reloadable`] gateway over `dir` and
/// reloads the configuration (`POST /v1/reload` by an operator; asserts `200`).
pub(crate) async fn reload_bot(gw: &Gw, dir: &tempfile::TempDir, bot_file: &str) {
    std::fs::write(dir.path().join("conf/bot.agf.yaml"), bot_file).unwrap();
    let (s, r) = gw.req("POST", "/v1/reload", Some(OP), None).await;
    assert_eq!(s, StatusCode::OK, "{r}");
}

/// A reload puts a changed delegation in force at once (it is resolved from the agent files
/// when they load, never kept from before): `bot`'s file, read from disk, declares `other` a
/// local delegate, so `bot`'s draft plan refuses `other`'s call naming it; once the
/// declaration is removed and the configuration reloaded, the plan no longer gates `other`'s
/// calls (gated as if it named no plan), and declaring it again gates them again.
#[tokio::test]
async fn a_reload_puts_a_changed_delegation_in_force() {
    let (dir, gw) = reloadable(&orchestrating_bot().replace("./", "subs/../")).await;
    let (pid, s1) = (uuid(), uuid());
    let (s, p) = gw.create_plan(plan(&pid, &[(&s1, "Pay the bill")])).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (s, d) = delegate_pays(&gw, &pid, 501).await;
    assert_error(s, &d, StatusCode::FORBIDDEN, "TOOL_DENIED");
    reload_bot(&gw, &dir, AGENTS).await;
    let (s, d) = delegate_pays(&gw, &pid, 502).await;
    assert_eq!(s, StatusCode::ACCEPTED, "no longer a delegate: {d}");
    reload_bot(&gw, &dir, &orchestrating_bot()).await;
    let (s, d) = delegate_pays(&gw, &pid, 503).await;
    assert_error(s, &d, StatusCode::FORBIDDEN, "TOOL_DENIED");
    gw.stop().await;
}

/// Attack (found by review): a declared delegate's call naming a plan id its orchestrator had
/// not registered yet was held; the orchestrator then registered the plan as a draft, and the
/// operator approved the call (a timeout approving by default would too): the decision's
/// plan check knew no delegation, only the plan agent recorded with the call, and none was.
/// SECURITY.md promises `409 PLAN_STOPPED`: the store's plan checks now take the delegations
/// in force, as redemption does. Denying still works.
#[tokio::test]
async fn a_delegates_call_held_before_its_orchestrators_draft_plan_cannot_be_approved() {
    let gw = serve_policy(&orchestrating_bot(), &gov()).await;
    let pid = uuid();
    let (s, d) = delegate_pays(&gw, &pid, 501).await;
    assert_eq!(s, StatusCode::ACCEPTED, "no plan of that id yet: held {d}");
    let id = d["approval_id"].as_str().unwrap().to_string();
    let (s, p) = gw
        .create_plan(plan(&pid, &[(&uuid(), "Pay the bill")]))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "PLAN_STOPPED");
    assert_says(&b, "message", "draft");
    let (s, b) = gw.decide(&id, OP, "deny").await;
    assert_answer(s, &b, "status", StatusCode::OK, "rejected");
    gw.stop().await;
}
