//! Passkey-signed approvals through the HTTP API (issue 14 §4; the browser ceremony itself is
//! `tests/e2e/test_passkeys.py`, with Chromium's virtual authenticator): an approval that
//! needs a passkey is refused without one (`403 PASSKEY_REQUIRED`, audited), a vote of a
//! quorum too; saying no needs none; a rule may turn the R4 default off; a ceremony cannot be
//! started on a gateway without `passkeys` nor finished with an unknown ceremony.

use crate::backend::audit_count;
use crate::kit::{assert_answer, assert_error};
use crate::quorum::held_under;
use reqwest::StatusCode;
use serde_json::json;

/// Attack: an operator (or a stolen operator key) approves an R4 call over the API, without
/// the passkey the policy asks for.
#[tokio::test]
async fn an_r4_approval_without_a_passkey_is_refused_and_audited() {
    let (_dir, gw, id) = held_under("- tool: pay\n  approvers: [finance]\n  risk_tier: R4\n").await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["require_passkey"], true, "{a}");
    let (s, b) = gw.decide(&id, "alice-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "PASSKEY_REQUIRED");
    assert!(b["message"].as_str().unwrap().contains("passkey"), "{b}");
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 1);
    // A made-up ceremony is no passkey either.
    let forged = json!({"decision": "approve", "passkey": {"ceremony": "0123", "credential": {}}});
    let (s, b) = gw.decide_with(&id, "alice-key", forged).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}"); // no relying party configured here
    assert_eq!(b["code"], "PASSKEYS_OFF", "{b}");
    let (s, b) = gw
        .post(
            &format!("/v1/approvals/{id}/passkey"),
            "alice-key",
            json!({}),
        )
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "PASSKEYS_OFF");
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    // Saying no needs no passkey.
    let (s, b) = gw.decide(&id, "alice-key", "deny").await;
    assert_answer(s, &b, "status", StatusCode::OK, "rejected");
    gw.stop().await;
}

/// A quorum's approving vote needs the passkey too; a rule may turn the R4 default off, and
/// any tier on.
#[tokio::test]
async fn quorum_votes_need_it_too_and_rules_turn_it_on_or_off() {
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n  risk_tier: R2\n  require_passkey: true\n";
    let (_dir, gw, id) = held_under(rules).await;
    let (s, b) = gw.decide(&id, "fred-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "PASSKEY_REQUIRED");
    assert!(
        gw.approval(&id, "alice-key").await.1["votes"]["cast"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    gw.stop().await;
    let off = "- tool: pay\n  approvers: [finance]\n  risk_tier: R4\n  require_passkey: false\n";
    let (_dir, gw, id) = held_under(off).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert!(a.get("require_passkey").is_none(), "{a}");
    let (s, b) = gw.decide(&id, "alice-key", "approve").await;
    assert_answer(s, &b, "status", StatusCode::OK, "approved");
    gw.stop().await;
}

/// Found by review: a passkey assertion sent with a grant scope, `whole_tool` or an edit, on an
/// approval that needs no passkey, was stored and shown as "passkey-signed", though the
/// passkey signs the call as proposed, once — not the session grant or the edited call that
/// ran. Such a decision is refused before any ceremony is looked at.
#[tokio::test]
async fn a_passkey_never_vouches_for_a_grant_or_an_edit() {
    let (_dir, gw, id) = held_under("- tool: pay\n  approvers: [finance]\n").await;
    let passkey = json!({"ceremony": "0123", "credential": {}});
    let extras = [
        ("scope", json!("session")),
        ("whole_tool", json!(true)),
        ("arguments", json!({"amount": 1, "to": "acct-2"})),
    ];
    for (key, value) in extras {
        let mut body = json!({"decision": "approve", "passkey": passkey});
        body[key] = value;
        let (s, b) = gw.decide_with(&id, "alice-key", body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{key}: {b}");
        assert!(
            b["message"].as_str().unwrap().contains("as proposed, once"),
            "{key}: {b}"
        );
    }
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    gw.stop().await;
}
