//! Approval receipts (issue 14 §5): `GET /v1/approvals/{id}/receipt` answers a receipt that
//! validates against `docs/schemas/approval-receipt.schema.json` and checks offline under the
//! gateway's audit public key — and stops checking after any change to the call, a vote or
//! the decision, or a signature by another key.

use crate::kit::assert_answer;
use crate::quorum::{held_under, two_of_finance};
use crate::schemas::{assert_valid, validator};
use assent_core::receipt::{Receipt, ReceiptError};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn a_receipt_verifies_offline_and_fails_after_any_change_to_the_call_or_a_vote() {
    let (_dir, gw, id) = two_of_finance().await;
    gw.decide(&id, "alice-key", "approve").await;
    gw.decide(&id, "fred-key", "approve").await;
    let (s, v) = gw
        .get(&format!("/v1/approvals/{id}/receipt"), "alice-key")
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_valid(
        &validator("docs/schemas/approval-receipt.schema.json"),
        &v,
        "receipt",
    );
    let key = assent_store::checkpoint::read_key(&gw.data_dir)
        .unwrap()
        .unwrap()
        .verifying_key();
    let r: Receipt = serde_json::from_value(v.clone()).unwrap();
    r.check(&key).unwrap();
    assert_eq!(r.status, assent_core::ApprovalStatus::Approved);
    let voters: Vec<&str> = r.votes.iter().map(|v| v.by.as_str()).collect();
    assert_eq!(voters, ["alice", "fred"]);
    assert_eq!(r.policies, ["acme.test.quorum"]);
    assert_eq!(r.decisions[0].by, "fred");

    // Attack: each edit of a receipt someone hopes to pass off as the gateway's.
    let tampered = |path: &[&str], value: Value| {
        let mut t = v.clone();
        let mut at = &mut t;
        for p in path {
            at = if let Ok(i) = p.parse::<usize>() {
                &mut at[i]
            } else {
                &mut at[*p]
            };
        }
        *at = value;
        serde_json::from_value::<Receipt>(t).unwrap()
    };
    let bigger = tampered(&["call", "arguments", "amount"], json!(501));
    assert!(matches!(bigger.check(&key), Err(ReceiptError::Call(_))));
    // The call, its canonical form and its hash changed together: the signature fails.
    let mut moved = r.clone();
    moved.call.arguments["amount"] = json!(501);
    let c = assent_core::canonical::CanonicalCall::new(moved.call.clone()).unwrap();
    (moved.canonical, moved.call_hash) = (c.canonical().into(), c.call_hash().into());
    assert_eq!(moved.check(&key), Err(ReceiptError::Signature));
    for (path, value) in [
        (&["votes", "0", "by"][..], json!("mallory")),
        (&["votes", "1", "decision"][..], json!("deny")),
        (&["decisions", "0", "by"][..], json!("mallory")),
        (&["status"][..], json!("rejected")),
        (&["policies"][..], json!([])),
    ] {
        let t = tampered(path, value);
        assert_eq!(t.check(&key), Err(ReceiptError::Signature), "{path:?}");
    }
    // Re-signed by another key (naming it in `public_key`): not the gateway's.
    let other = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let forged = bigger.clone().signed(&other);
    assert!(
        forged.check(&other.verifying_key()).is_err(),
        "the call still mismatches"
    );
    let forged = moved.signed(&other);
    assert_eq!(forged.check(&key), Err(ReceiptError::Signature));
    // Attack (found by review): an approval that needed a passkey, its proofs gone (a database
    // edited behind the gateway's back, then a receipt signed): it does not check.
    let signer = assent_store::checkpoint::read_key(&gw.data_dir)
        .unwrap()
        .unwrap();
    let mut bare = r.clone();
    bare.require_passkey = true;
    let bare = bare.signed(&signer);
    assert!(
        matches!(bare.check(&key), Err(ReceiptError::Passkey(by, _)) if by == "alice"),
        "{:?}",
        bare.check(&key)
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_receipt_is_for_operators_and_the_agent_that_asked() {
    let (_dir, gw, id) = held_under("- tool: pay\n  approvers: [finance]\n").await;
    let path = format!("/v1/approvals/{id}/receipt");
    let (s, r) = gw.get(&path, "bot-key").await;
    assert_answer(s, &r, "status", StatusCode::OK, "pending");
    assert_eq!(r["votes"], json!([]));
    let (s, b) = gw.get(&path, "other-key").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "another agent: {b}");
    let (s, _) = gw.get("/v1/approvals/nope/receipt", "alice-key").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    gw.stop().await;
}

/// Attack: on a settled quorum approval the database writer renames a voter, or edits the
/// policies recorded as holding the call, or deletes a vote, then asks for the receipt. Each
/// vote row's seal, the terms' seal (which covers the recorded governance since migration
/// 0035) and the settlement's seal (which lists the votes) refuse it: `409 APPROVAL_DAMAGED`
/// naming `votes.seal`, `seal` and `settlement_seal`; put back, the receipt is signed again.
#[tokio::test]
async fn a_receipt_is_refused_for_a_renamed_voter_edited_policies_or_a_deleted_vote() {
    let (_dir, gw, id) = two_of_finance().await;
    gw.decide(&id, "alice-key", "approve").await;
    gw.decide(&id, "fred-key", "approve").await;
    let path = format!("/v1/approvals/{id}/receipt");
    let (s, v) = gw.get(&path, "alice-key").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let policies = v["policies"].to_string();
    let refused = |(s, v): (StatusCode, Value), named: &str| {
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        assert_eq!(v["code"], "APPROVAL_DAMAGED", "{v}");
        assert_eq!(v["damaged"], json!([named]), "{v}");
    };
    let rename = "UPDATE votes SET principal = 'eve' WHERE principal = 'alice'";
    let name_back = "UPDATE votes SET principal = 'alice' WHERE principal = 'eve'";
    let other = "UPDATE confirm_context SET policies = '[\"acme.other\"]'";
    let policies_back = format!("UPDATE confirm_context SET policies = '{policies}'");
    let edits = [
        (rename, name_back, "votes.seal"),
        (other, policies_back.as_str(), "seal"),
    ];
    for (edit, back, named) in edits {
        assert_eq!(gw.sql().exec(edit, &[]), 1, "{edit}");
        refused(gw.get(&path, "alice-key").await, named);
        assert_eq!(gw.sql().exec(back, &[]), 1, "{back}");
        let (s, again) = gw.get(&path, "alice-key").await;
        assert_eq!(
            (s, &again["votes"]),
            (StatusCode::OK, &v["votes"]),
            "{again}"
        );
    }
    let delete = "DELETE FROM votes WHERE principal = 'alice'";
    assert_eq!(gw.sql().exec(delete, &[]), 1);
    refused(gw.get(&path, "alice-key").await, "settlement_seal");
    gw.stop().await;
}

/// Attack (found by review): a call approved for the workspace read, in its receipt, as one
/// call approved — the receipt named no scope — while the grant it made let every matching
/// call of the agent through until revoked. The receipt now carries the scope, under its
/// signature; a call approved once carries none.
#[tokio::test]
async fn a_receipt_says_when_the_approval_let_more_than_its_call_through() {
    let (_dir, gw, id) = held_under("- tool: pay\n  approvers: [finance]\n").await;
    let d = json!({"decision": "approve", "scope": "workspace", "reason": "standing"});
    let (s, b) = gw.decide_with(&id, "alice-key", d).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, v) = gw
        .get(&format!("/v1/approvals/{id}/receipt"), "alice-key")
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_valid(
        &validator("docs/schemas/approval-receipt.schema.json"),
        &v,
        "receipt",
    );
    assert_eq!(v["scope"], "workspace", "{v}");
    let key = assent_store::checkpoint::read_key(&gw.data_dir)
        .unwrap()
        .unwrap()
        .verifying_key();
    let r = Receipt::check_text(&v, &key).unwrap();
    // Shown as once (the scope dropped or narrowed), it no longer verifies.
    for narrowed in [Value::Null, json!("session")] {
        let mut t = v.clone();
        match narrowed {
            Value::Null => t.as_object_mut().unwrap().remove("scope"),
            n => t.as_object_mut().unwrap().insert("scope".into(), n),
        };
        assert!(Receipt::check_text(&t, &key).is_err(), "{t}");
    }
    assert_eq!(r.scope.as_deref(), Some("workspace"));
    // Other arguments: the grant covers only its own call.
    let once = gw
        .held("s1", "pay", json!({"amount": 501, "to": "acme"}))
        .await;
    gw.decide(&once, "alice-key", "approve").await;
    let (_, v) = gw
        .get(&format!("/v1/approvals/{once}/receipt"), "alice-key")
        .await;
    assert!(v.get("scope").is_none(), "{v}");
    // For every call of the tool (whole_tool): said so, under the signature.
    let any = gw
        .held("s1", "pay", json!({"amount": 502, "to": "acme"}))
        .await;
    let d = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    let (s, b) = gw.decide_with(&any, "alice-key", d).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, v) = gw
        .get(&format!("/v1/approvals/{any}/receipt"), "alice-key")
        .await;
    assert_eq!(
        (&v["scope"], &v["whole_tool"]),
        (&json!("workspace"), &json!(true)),
        "{v}"
    );
    let mut t = v.clone();
    t.as_object_mut().unwrap().remove("whole_tool");
    assert!(Receipt::check_text(&t, &key).is_err(), "{t}");
    Receipt::check_text(&v, &key).unwrap();
    // The first grant widened in the database to every call: no receipt says either.
    let widen = format!("UPDATE grants SET call_hash = NULL WHERE approval_id = '{id}'");
    assert_eq!(gw.sql().exec(&widen, &[]), 1);
    let (s, v) = gw
        .get(&format!("/v1/approvals/{id}/receipt"), "alice-key")
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["damaged"], json!(["grant.seal"]), "{v}");
    // The whole-tool grant deleted: its receipt cannot say which it was, so none is signed.
    let gone = format!("DELETE FROM grants WHERE approval_id = '{any}'");
    assert_eq!(gw.sql().exec(&gone, &[]), 1);
    let (s, v) = gw
        .get(&format!("/v1/approvals/{any}/receipt"), "alice-key")
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["damaged"], json!(["grant.missing"]), "{v}");
    gw.stop().await;
}
