//! Every typed body against JSON shaped as the gateway's handlers write it (`json!` in
//! `api.rs`, `formats.rs`, `clarify.rs`, `tools.rs`, `checkpoints.rs`, `webhooks.rs`) and as
//! its tests send it: read, written back, compared. A renamed field, a `null` turned into an
//! omission or the reverse fails here.

use crate::round_trip;
use assent_api::approvals::{
    Approval, ApprovalGroups, ApprovalList, ApprovalRequestDoc, BatchDecisionRequest,
    BatchDecisionResponse, CancelRequest, DecisionRequest, SessionCancelled, Settlement,
    UserDecisionRequest,
};
use assent_api::audit::{CheckpointList, DeadLetterList};
use assent_api::clarify::{AnswerRequest, AskRequest, Clarification, ClarificationList};
use assent_api::gate::{
    DelegationRequest, GateAnswer, HeldResult, ToolCallRequest, ToolResultRequest, VerdictEcho,
};
use assent_api::identity::{Health, WhoAmI};
use assent_api::plans::{
    ConfirmRequest, CreatePlanRequest, PipelineEvents, SubmitPlanRequest, UpdatePlanRequest,
};
use assent_api::tokens::{GrantList, RedeemRequest, Redeemed};
use assent_api::tools::{
    DeclaredTools, PinState, ToolCheckRequest, ToolCheckResponse, ToolPinList, ToolReview,
    ToolReviewList,
};
use assent_api::{ApiErrorBody, ApprovalStatus, DecisionKind, RiskTier};
use serde_json::{Value, json};

const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn reasons() -> Value {
    json!([{"file": "gov.yaml", "rule": "policies[0].rules[0]", "text": "pay needs finance"},
           {"file": "", "rule": "risk_tier", "text": "R2 by default"}])
}

fn token_doc() -> Value {
    json!({"tokenId": "6f1c", "approvalId": "a1", "toolCallHash": HASH,
           "expiresAt": "2026-01-01T00:05:00Z", "singleUse": true, "scope": "once",
           "issuedToClientDeviceId": null})
}

/// `approval_json` of a pending approval: every always-present field, the optional ones out.
fn pending_approval() -> Value {
    json!({
        "id": "a1", "status": "pending", "agent": "bot", "session_id": "s1",
        "run_id": null, "device_id": null,
        "call": {"tool": "pay", "server": null, "arguments": {"amount": 500, "to": "bob"}},
        "call_hash": HASH, "canonical": "{\"arguments\":{\"amount\":500,\"to\":\"bob\"},\"tool\":\"pay\"}",
        "message": "Pay 500 to bob?", "human_summary": "pay 500 to bob",
        "risk_tier": "R2", "risk_level": "medium", "irreversible": false,
        "reasons": reasons(), "triggers": [], "approvers": ["finance"],
        "default_decision": "reject", "suggested_alternatives": [],
        "escalation": null, "escalated_at": null, "output_bytes": null, "decisions": [],
        "requested_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-01T00:05:00.5Z",
        "decided_at": null, "scope": null, "grant_id": null, "arguments_changed": false,
        "target_type": "other", "target_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e5f",
        "in_client_approval": false, "side_effects": [], "rollback": [],
        "dry_run_tool": null, "redact": [],
    })
}

#[test]
fn approvals_in_every_state_write_back_what_they_read() {
    let a: Approval = round_trip(&pending_approval());
    assert_eq!(
        (a.status, a.terms.risk_tier),
        (ApprovalStatus::Pending, RiskTier::R2)
    );
    // Approved with an edit, read by its agent: token, edit, diff, escalation, scope.
    let mut v = pending_approval();
    let o = v.as_object_mut().unwrap();
    for (k, x) in [
        ("status", json!("approved")),
        ("run_id", json!("r1")),
        ("device_id", json!("d1")),
        (
            "escalation",
            json!({"steps": [{"after_seconds": 300, "approvers": ["cfo"]}],
                   "last_wait_seconds": null}),
        ),
        ("escalated_at", json!("2026-01-01T00:05:00Z")),
        (
            "schedule",
            json!({"steps": [{"at": "2026-01-01T00:05:00Z", "approvers": ["cfo"], "taken": true}],
                   "deadline": "2026-01-01T00:07:00Z"}),
        ),
        ("output_bytes", json!(4096)),
        (
            "decisions",
            json!([{"decision": "approve", "reason": null, "by": "alice",
                              "at": "2026-01-01T00:01:00Z", "default_applied": null}]),
        ),
        ("decided_at", json!("2026-01-01T00:01:00Z")),
        ("scope", json!("15m")),
        ("grant_id", json!("g1")),
        ("arguments_changed", json!(true)),
        ("arguments", json!({"amount": 50, "to": "bob"})),
        ("approved_call_hash", json!(HASH)),
        (
            "diff",
            json!([{"op": "replace", "path": "/amount", "value": 50}]),
        ),
        ("approval_token", token_doc()),
        ("token", json!("v1.abc.def")),
        ("token_expires_at", json!("2026-01-01T00:06:00Z")),
        ("dry_run_tool", json!("preview_pay")),
    ] {
        o.insert(k.into(), x);
    }
    let a: Approval = round_trip(&v);
    assert_eq!(a.effective_arguments(), &json!({"amount": 50, "to": "bob"}));
    // Rejected by the agent's user, a damaged column; expired with a default applied.
    let mut v = pending_approval();
    let o = v.as_object_mut().unwrap();
    o.insert("status".into(), json!("rejected"));
    o.insert(
        "decisions".into(),
        json!([{"decision": "deny", "reason": "in the MCP client: no",
        "by": "user-of:bot", "at": "2026-01-01T00:01:00Z", "default_applied": null}]),
    );
    o.insert("code".into(), json!("TOOL_DENIED"));
    o.insert(
        "reason".into(),
        json!("denied by the agent's user: in the MCP client: no"),
    );
    o.insert("damaged".into(), json!(["approvers"]));
    o.insert("diff".into(), Value::Null);
    round_trip::<Approval>(&v);
    let mut v = pending_approval();
    v["status"] = json!("expired");
    v["decisions"] = json!([{"decision": "expire", "reason": "no decision", "by": "system:expiry",
                             "at": "2026-01-01T00:05:00Z", "default_applied": "reject"}]);
    let a: Approval = round_trip(&v);
    assert_eq!(a.decisions[0].decision, Settlement::Expire);
    round_trip::<ApprovalList>(&json!({"approvals": [pending_approval(), v]}));
    round_trip::<ApprovalGroups>(&json!({"groups": [{"agent": "bot", "server": null,
        "tool": "pay", "reasons": reasons(), "count": 1, "approvals": [pending_approval()]}]}));
}

#[test]
fn the_seed_002_approval_request_writes_back_what_it_reads() {
    let mut v = json!({"approvalId": "a1", "sessionId": "s1", "runId": null,
        "toolCallCanonical": "{}", "toolCallHash": HASH, "humanSummary": "pay",
        "riskTier": "R3", "requestedAt": "2026-01-01T00:00:00Z",
        "expiresAt": "2026-01-01T00:05:00Z", "status": "pending"});
    round_trip::<ApprovalRequestDoc>(&v);
    v["diff"] = json!([{"op": "add", "path": "/x", "value": 1}]);
    v["suggestedAlternatives"] = json!(["pay less"]);
    round_trip::<ApprovalRequestDoc>(&v);
}

fn echo() -> Value {
    json!({"call_hash": HASH, "reasons": reasons(), "risk_tier": "R2", "triggers": ["rate"]})
}

fn with_echo(mut v: Value) -> Value {
    for (k, x) in echo().as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn gate_answers_write_back_what_they_read() {
    let a: GateAnswer = round_trip(&with_echo(
        json!({"decision": "allow", "output_bytes": null}),
    ));
    assert!(matches!(&a, GateAnswer::Allow(x) if x.grant.is_none() && x.verdict.is_some()));
    // A tool result within its threshold: no verdict echo at all.
    let a: GateAnswer = round_trip(&json!({"decision": "allow", "output_bytes": 1000}));
    assert!(matches!(&a, GateAnswer::Allow(x) if x.verdict.is_none()));
    let granted = with_echo(
        json!({"decision": "allow", "approval_id": "a1", "grant_id": "g1",
        "scope": "session", "token": "v1.x.y", "approval_token": token_doc(),
        "token_expires_at": "2026-01-01T00:05:00Z", "output_bytes": null}),
    );
    let a: GateAnswer = round_trip(&granted);
    assert_eq!((a.approval_id(), a.http_status()), (Some("a1"), 200));
    let denied = with_echo(json!({"decision": "deny", "code": "TOOL_DENIED",
        "reason": "`launch` is not declared", "message": "`launch` is not declared"}));
    assert_eq!(round_trip::<GateAnswer>(&denied).http_status(), 403);
    let pending = with_echo(json!({"decision": "pending",
        "code": "TOOL_BLOCKED_PENDING_APPROVAL", "approval_id": "a1", "joined": false,
        "expires_at": "2026-01-01T00:05:00Z", "message": "Pay 500 to bob?",
        "human_summary": "pay", "in_client_approval": true,
        "suggested_alternatives": ["pay 50"], "side_effects": ["charges a card"],
        "rollback": []}));
    let a: GateAnswer = round_trip(&pending);
    assert_eq!((a.approval_id(), a.http_status()), (Some("a1"), 202));
    round_trip::<VerdictEcho>(&echo());
    let held = json!({"call": {"tool": "read_file", "server": "fs", "arguments": {"path": "/a"}},
        "output_bytes": 70000, "result_sha256": HASH, "preview": null});
    round_trip::<HeldResult>(&held);
    let mut v = pending_approval();
    v["call"] = json!({"tool": "result.read_file", "server": "fs", "arguments": held});
    let a: Approval = round_trip(&v);
    assert_eq!(a.held_result().unwrap().result_sha256, HASH);
    assert!(
        round_trip::<Approval>(&pending_approval())
            .held_result()
            .is_none()
    );
}

/// The attack: a gateway answer (a broken or hostile gateway, or a proxy in between) that
/// would let a call through without redeeming its token — an `allow` carrying a grant's
/// token but no `approval_id`, or a grant part that does not parse. Serde's flattened
/// `Option<Granted>` read either as a plain allow; it must be a parse error, which the MCP
/// proxy answers with a denial.
#[test]
fn an_allow_with_a_token_but_no_approval_is_refused_not_a_plain_allow() {
    let tokened = with_echo(json!({"decision": "allow", "output_bytes": null,
        "token": "v1.x.y", "approval_token": token_doc(),
        "token_expires_at": "2026-01-01T00:05:00Z"}));
    let err = serde_json::from_value::<GateAnswer>(tokened).unwrap_err();
    assert!(err.to_string().contains("no `approval_id`"), "{err}");
    let bare = json!({"decision": "allow", "output_bytes": 10, "token": "v1.x.y"});
    assert!(serde_json::from_value::<GateAnswer>(bare).is_err());
    let broken = with_echo(json!({"decision": "allow", "output_bytes": null,
        "approval_id": "a1", "grant_id": "g1", "scope": "session", "token": 7,
        "approval_token": null, "token_expires_at": null}));
    assert!(serde_json::from_value::<GateAnswer>(broken).is_err());
    // Nulls are no grant: a plain allow still reads as one.
    let nulls = with_echo(json!({"decision": "allow", "output_bytes": null, "token": null}));
    let a: GateAnswer = serde_json::from_value(nulls).unwrap();
    assert!(matches!(&a, GateAnswer::Allow(x) if x.grant.is_none()));
}

/// Found by review: an `allow` with a grant's `approval_id` but no `token` (or a `null` one)
/// read as a grant with no token, and the MCP proxy forwarded it as a plain allow: the call
/// ran and nothing was redeemed for it. The gateway answers `409 APPROVAL_DAMAGED` when a
/// grant's token cannot be given; an answer that lacks it does not parse, so the proxy denies.
#[test]
fn a_grants_allow_without_its_token_is_refused_not_forwarded_unredeemed() {
    for token in [None, Some(json!(null))] {
        let mut granted = with_echo(json!({"decision": "allow", "output_bytes": null,
            "approval_id": "a1", "grant_id": "g1", "scope": "session",
            "approval_token": null, "token_expires_at": null}));
        if let Some(t) = token {
            granted["token"] = t;
        }
        let read = serde_json::from_value::<GateAnswer>(granted.clone());
        assert!(read.is_err(), "{read:?}: {granted}");
    }
}

#[test]
fn error_bodies_write_back_what_they_read() {
    let e: ApiErrorBody = round_trip(&json!({"code": "NOT_FOUND", "message": "no such approval"}));
    assert_eq!(
        e,
        ApiErrorBody::new(assent_api::error::NOT_FOUND, "no such approval")
    );
    round_trip::<ApiErrorBody>(&json!({"code": "ALREADY_DECIDED",
        "message": "already approved", "status": "approved"}));
    round_trip::<ApiErrorBody>(&json!({"code": "APPROVAL_DAMAGED", "message": "damaged",
        "damaged": ["approvers", "decisions.decision"]}));
    round_trip::<ApiErrorBody>(&json!({"code": "EDIT_RAISES_RISK", "message": "no",
        "reasons": reasons(), "triggers": []}));
}

#[test]
fn a_status_error_displays_as_the_cli_prints_it() {
    let e = assent_api::ClientError::Status {
        status: 502,
        error: None,
    };
    assert_eq!(
        (e.to_string(), e.code(), e.status()),
        ("ERROR: ".into(), None, Some(502))
    );
    let e = assent_api::ClientError::Status {
        status: 404,
        error: Some(Box::new(ApiErrorBody::new("NOT_FOUND", "no approval `x`"))),
    };
    assert_eq!(e.to_string(), "NOT_FOUND: no approval `x`");
}

#[test]
fn decisions_cancellations_and_their_answers_write_back_what_they_read() {
    let d: DecisionRequest = round_trip(&json!({"decision": "approve", "reason": "ok",
        "scope": "15m", "whole_tool": true, "confirm_workspace": false,
        "arguments": {"amount": 5}}));
    assert_eq!(d.decision, DecisionKind::Approve);
    round_trip::<DecisionRequest>(&json!({"decision": "deny", "whole_tool": false,
        "confirm_workspace": false}));
    // What the server accepts: fields left out, `null` for an option.
    let d: DecisionRequest =
        serde_json::from_value(json!({"decision": "deny", "reason": null})).unwrap();
    assert_eq!(d, DecisionRequest::new(DecisionKind::Deny));
    assert!(
        serde_json::from_value::<DecisionRequest>(json!({"decision": "deny", "x": 1})).is_err()
    );
    let b: BatchDecisionRequest = round_trip(&json!({"ids": ["a1", "a2"],
        "decision": "approve", "scope": "session", "whole_tool": false,
        "confirm_workspace": true}));
    assert_eq!((b.ids.len(), b.decision.arguments), (2, None));
    // A batch is as strict as one decision: no unknown key, no edit, ids required.
    for (body, says) in [
        (
            json!({"ids": ["a1"], "decision": "deny", "x": 1}),
            "unknown field `x`",
        ),
        (
            json!({"ids": ["a1"], "decision": "approve", "arguments": {}}),
            "cannot edit",
        ),
        (json!({"decision": "deny"}), "missing field `ids`"),
        (json!({"ids": [1], "decision": "deny"}), "expected a string"),
    ] {
        let e = serde_json::from_value::<BatchDecisionRequest>(body).unwrap_err();
        assert!(e.to_string().contains(says), "{e}");
    }
    round_trip::<BatchDecisionResponse>(&json!({"results": [
        {"id": "a1", "ok": true, "approval": pending_approval()},
        {"id": "a2", "ok": false, "code": "ALREADY_DECIDED", "message": "already rejected"}]}));
    round_trip::<CancelRequest>(&json!({"reason": "the client withdrew"}));
    assert_eq!(
        round_trip::<CancelRequest>(&json!({})),
        CancelRequest::default()
    );
    round_trip::<UserDecisionRequest>(&json!({"decision": "approve", "reason": "fine"}));
    assert_eq!(
        serde_json::to_value(UserDecisionRequest::new(false, None)).unwrap(),
        json!({"decision": "deny"})
    );
    round_trip::<SessionCancelled>(&json!({"session_id": "s1", "cancelled": ["a1"],
        "refused": ["a2"], "clarifications": [], "grants_revoked": ["g1"], "tokens_voided": 2}));
    // An older gateway's answer, without the consent it withdrew, reads as none withdrawn.
    let older: SessionCancelled = serde_json::from_value(json!({"session_id": "s1",
        "cancelled": [], "refused": [], "clarifications": []}))
    .unwrap();
    assert_eq!((older.grants_revoked.len(), older.tokens_voided), (0, 0));
}

#[test]
fn submissions_write_back_what_they_read() {
    round_trip::<ToolCallRequest>(&json!({"agent": "bot", "session_id": "s1", "tool": "pay",
        "arguments": {"amount": 500, "to": "bob"}}));
    round_trip::<ToolCallRequest>(&json!({"agent": "bot", "session_id": "s1",
        "tool": "write_file", "server": "fs", "arguments": {}, "run_id": "r", "device_id": "d",
        "trace_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e5f",
        "plan_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e50",
        "step_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e51"}));
    assert!(
        serde_json::from_value::<ToolCallRequest>(json!({"agent": "bot",
        "session_id": "s", "tool": "t", "arguments": {}, "extra": 1}))
        .is_err()
    );
    let d: DelegationRequest = round_trip(&json!({"agent": "bot", "session_id": "s1",
        "target": "helper", "skill_id": "sum", "skill_args": {"n": 2}}));
    assert!(d.input.is_null());
    round_trip::<DelegationRequest>(&json!({"agent": "bot", "session_id": "s1",
        "target": "helper", "input": {"q": "x"}}));
    round_trip::<ToolResultRequest>(&json!({"agent": "bot", "session_id": "s1",
        "tool": "read_file", "server": "fs", "arguments": {"path": "/a"},
        "output_bytes": 70000, "result_sha256": HASH, "preview": "{\"content\"",
        "approval_id": "a1"}));
    round_trip::<RedeemRequest>(&json!({"token": "v1.x.y", "tool": "pay",
        "arguments": {"amount": 500, "to": "bob"}, "device_id": "d1"}));
    round_trip::<Redeemed>(
        &json!({"call_hash": HASH, "approval_id": "a1", "token_id": "t1",
        "agent": "bot", "arguments": {"amount": 500, "to": "bob"}}),
    );
}

#[test]
fn grants_and_identities_write_back_what_they_read() {
    round_trip::<GrantList>(&json!({"grants": [
        {"id": "g1", "agent": "bot", "session_id": "s1", "tool": "pay", "server": null,
         "call_hash": HASH, "whole_tool": false, "scope": "session", "risk_tier": "R2",
         "discouraged": false, "approval_id": "a1", "created_by": "alice",
         "created_at": "2026-01-01T00:00:00Z", "expires_at": null, "revoked_at": null,
         "revoked_by": null},
        {"id": "g2", "agent": "bot", "session_id": null, "tool": "write_file", "server": "fs",
         "call_hash": null, "whole_tool": true, "scope": "workspace", "risk_tier": "R4",
         "discouraged": true, "approval_id": "a2", "created_by": "alice",
         "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-01T00:15:00Z",
         "revoked_at": "2026-01-01T00:01:00Z", "revoked_by": "olaf"}]}));
    let w: WhoAmI = round_trip(&json!({"name": "bot", "kind": "agent", "agent_id": "bot"}));
    assert_eq!(w.agent_id(), Some("bot"));
    round_trip::<WhoAmI>(&json!({"name": "alice", "kind": "operator", "roles": ["finance"]}));
    round_trip::<Health>(&json!({"status": "ok"}));
}

fn clarification() -> Value {
    json!({"id": "c1", "agent": "bot", "session_id": "s1", "question": "Which account?",
        "accepted_response_kinds": ["multiple_choice", "freetext"],
        "choices": [{"value": "a", "label": "Account A"}, {"value": "b", "label": "B"}],
        "context": null, "status": "pending", "response": null, "answered_by": null,
        "answered_at": null, "requested_at": "2026-01-01T00:00:00Z",
        "expires_at": "2026-01-01T00:05:00Z"})
}

#[test]
fn clarifications_write_back_what_they_read() {
    let c: Clarification = round_trip(&clarification());
    assert_eq!(c.choice_values(), ["a", "b"]);
    let mut v = clarification();
    v["status"] = json!("answered");
    v["response"] = json!("a");
    v["answered_by"] = json!("alice");
    v["answered_at"] = json!("2026-01-01T00:01:00Z");
    v["context"] = json!("for the invoice");
    let list = json!({"clarifications": [clarification(), v], "truncated": true});
    assert!(round_trip::<ClarificationList>(&list).truncated);
    round_trip::<AskRequest>(
        &json!({"agent": "bot", "session_id": "s1", "question": "Go?",
        "accepted_response_kinds": ["yes_no"], "timeout_seconds": 60}),
    );
    round_trip::<AskRequest>(
        &json!({"agent": "bot", "session_id": "s1", "question": "Which?",
        "accepted_response_kinds": ["multiple_choice"],
        "choices": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}],
        "context": "ctx"}),
    );
    round_trip::<AnswerRequest>(&json!({"response": true}));
}

#[test]
fn plan_bodies_write_back_what_they_read() {
    let plan = json!({"plan_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e5f", "title": "t"});
    round_trip::<CreatePlanRequest>(&json!({"agent": "bot", "session_id": "s1",
        "plan": plan, "trace_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e50"}));
    round_trip::<UpdatePlanRequest>(&json!({"agent": "bot", "plan": plan}));
    round_trip::<SubmitPlanRequest>(&json!({"agent": "bot"}));
    round_trip::<SubmitPlanRequest>(&json!({"agent": "bot", "session_id": "s2", "run_id": "r"}));
    round_trip::<ConfirmRequest>(&json!({"agent": "bot", "session_id": "s1",
        "target_type": "context", "target_id": "5b0d7f4e-3c1a-4d2b-9e8f-0a1b2c3d4e5f",
        "reason": "why", "target": {"k": 1}}));
    round_trip::<PipelineEvents>(&json!({"events": [{"event_type": "pipeline_stage"}]}));
}

#[test]
fn tool_pinning_bodies_write_back_what_they_read() {
    let def = json!({"name": "write_file", "description": "writes",
                     "inputSchema": {"type": "object"}});
    round_trip::<ToolCheckRequest>(&json!({"agent": "bot", "server": "fs", "tools": [def]}));
    round_trip::<ToolCheckRequest>(&json!({"agent": "bot", "server": "fs", "tools": [def]}));
    round_trip::<ToolCheckRequest>(
        &json!({"agent": "bot", "server": "fs", "tools": [], "hub_token": "t"}),
    );
    let r: ToolCheckResponse = round_trip(&json!({"tools": [
        {"name": "read_file", "state": "pinned", "review_id": null, "review_status": null,
         "pinned": def},
        {"name": "write_file", "state": "held", "review_id": "r1", "review_status": "pending",
         "pinned": null},
        {"name": "new", "state": "first_use", "review_id": null, "review_status": null,
         "pinned": def}]}));
    assert_eq!(r.tools[2].state, PinState::FirstUse);
    let review = json!({"id": "r1", "agent": null, "server": "fs", "tool": "write_file",
        "fingerprint": HASH, "definition": def, "pinned": null, "status": "pending",
        "seen_at": "2026-01-01T00:00:00Z", "seen_by": "bot", "decided_by": null,
        "decided_at": null});
    let mut changed = review.clone();
    changed["pinned"] = json!({"name": "write_file"});
    changed["diff"] = json!([{"op": "add", "path": "/description", "value": "writes"}]);
    changed["status"] = json!("accepted");
    changed["agent"] = json!("bot");
    changed["decided_by"] = json!("alice");
    changed["decided_at"] = json!("2026-01-01T00:01:00Z");
    round_trip::<ToolReview>(&changed);
    round_trip::<ToolReviewList>(&json!({"reviews": [review, changed]}));
    round_trip::<ToolPinList>(
        &json!({"pins": [{"agent": null, "server": "fs", "tool": "read_file",
        "fingerprint": HASH, "definition": def, "pinned_at": "2026-01-01T00:00:00Z",
        "pinned_by": "trust-on-first-use"}]}),
    );
    round_trip::<DeclaredTools>(&json!({"agent": "bot", "server": "fs",
        "tools": ["read_file", "write_file"]}));
    round_trip::<DeclaredTools>(&json!({"agent": "bot", "server": "web", "tools": null}));
}

#[test]
fn audit_bodies_write_back_what_they_read() {
    round_trip::<CheckpointList>(&json!({"public_key": "ab".repeat(32), "checkpoints": [
        {"seq": 7, "head_hash": HASH, "record_count": 7, "time": 1767225600000_i64,
         "public_key": "ab".repeat(32), "signature": "cd".repeat(64),
         "at": "2026-01-01T00:00:00Z"}]}));
    round_trip::<DeadLetterList>(&json!({"dead_letters": [
        {"id": 1, "webhook": "ops", "audit_seq": 3, "event": "approval.requested",
         "body": {"event": "approval.requested"}, "attempts": 5, "last_error": "HTTP 500",
         "failed_at": "2026-01-01T00:00:00Z"},
        {"id": 2, "webhook": "ops", "audit_seq": 4, "event": "approval.resolved",
         "body": null, "attempts": 1, "last_error": "connection refused",
         "failed_at": "2026-01-01T00:00:01Z"}]}));
}
