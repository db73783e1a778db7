//! The shapes an approval is rendered in: the seed 002 ApprovalRequest and the MPLP Confirm
//! (with its events, governance block and trace) validated in every state — pending, approved,
//! rejected, cancelled, expired — and a Confirm keeping the policy set it was held under after
//! the policies change (issue 10).

use super::env::env;
use crate::kit::{AGENTS, BOT, OP, Param, gov, pluck, redacting_gov, start_reg};
use crate::schemas::{assert_valid, validator};
use assent_server::Settings;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn approval_request_and_mplp_confirm_validate_in_every_state() {
    let e = env().await;
    let gw = &e.gw;
    let ar_schema = validator("docs/schemas/approval-request.schema.json");
    let confirm = validator("mplp/schemas/v2/mplp-confirm.schema.json");
    let pending = gw
        .held(
            "s1",
            "deploy",
            json!({"env": "prod", "note": "x".repeat(300)}),
        )
        .await;
    let approved = gw.held("s1", "send", json!({"n": 1})).await;
    let edited = json!({"decision": "approve", "arguments": {"n": 2}});
    gw.decide_with(&approved, OP, edited).await;
    let rejected = gw.held("s1", "send", json!({"n": 3})).await;
    gw.decide_with(&rejected, OP, json!({"decision": "deny", "reason": "no"}))
        .await;
    let cancelled = gw.held("s1", "send", json!({"n": 4})).await;
    gw.cancel(&cancelled, BOT, None).await;
    let expired = gw.held("s1", "esc", json!({})).await;
    gw.sql().exec(
        "UPDATE approvals SET expires_at = 0, escalation = NULL, escalation_schedule = NULL WHERE id = ?1",
        &[Param::from(&expired)],
    );
    for (id, status) in [
        (&pending, "pending"),
        (&approved, "approved"),
        (&rejected, "rejected"),
        (&cancelled, "cancelled"),
        (&expired, "rejected"),
    ] {
        let (s, ar) = gw.view(id, "approval-request").await;
        assert_eq!(s, StatusCode::OK);
        assert_valid(&ar_schema, &ar, &format!("ApprovalRequest ({status})"));
        // The summary shows only values present in the canonical call.
        let canonical = ar["toolCallCanonical"].as_str().unwrap();
        let summary = ar["humanSummary"].as_str().unwrap();
        let rec = gw.as_agent(id).await;
        for (k, v) in rec["call"]["arguments"].as_object().unwrap() {
            let shown = serde_json_canonicalizer::to_string(v).unwrap();
            let shown: String = shown.chars().take(120).collect();
            assert!(
                summary.contains(&format!("{k} = {shown}")) && canonical.contains(&shown),
                "{summary}"
            );
        }
        let (s, c) = gw.view(id, "mplp").await;
        assert_eq!(s, StatusCode::OK);
        assert_valid(&confirm, &c, &format!("MPLP Confirm ({status})"));
        assert_eq!(c["status"], status, "{c}");
        assert_eq!(c["target_type"], "other");
        let events = pluck(&c["events"], "event_type");
        assert_eq!(events[0], "confirm.requested");
        if status != "pending" {
            assert_eq!(events[1], format!("confirm.{status}"));
            assert_eq!(c["decisions"][0]["status"], status);
        }
        for ev in c["events"].as_array().unwrap() {
            assert_eq!(ev["trace_id"], c["trace"]["trace_id"]);
        }
        // The governance block names the policy set that governed it (issue 10).
        let hash = &gw.state.registry().policy_set_sha256;
        let phase = if status == "pending" {
            "review"
        } else {
            "decided"
        };
        assert_eq!(
            c["governance"],
            json!({"lifecyclePhase": phase, "truthDomain": format!("policy-set sha256:{hash}"),
                   "locked": status != "pending"}),
            "{c}"
        );
        assert_eq!(c["trace"]["attributes"]["policy_set_sha256"], hash.as_str());
        let policies = if id == &pending || id == &expired {
            json!(["acme.proto.rules-v1"])
        } else {
            json!([])
        };
        assert_eq!(
            c["trace"]["attributes"]["governance_policies"], policies,
            "{c}"
        );
    }
    let (_, c) = gw.view(&expired, "mplp").await;
    assert!(
        c["decisions"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("expired"),
        "{c}"
    );
    let (_, ar) = gw.view(&pending, "approval-request").await;
    assert_eq!(
        ar["suggestedAlternatives"],
        json!(["deploy to staging first"])
    );
    assert!(ar["humanSummary"].as_str().unwrap().contains('…'));
    let (s, _) = gw.view(&pending, "xml").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // A trace id the agent gives is used; one that is not a UUID v4 is refused.
    let tid = "6f1c2b9e-8d4a-4c3b-9a7e-1f2d3c4b5a69";
    let (s, b) = gw
        .call("s1", "send", json!({"n": 9}), json!({"trace_id": tid}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (_, c) = gw.view(b["approval_id"].as_str().unwrap(), "mplp").await;
    assert_eq!(c["trace"]["trace_id"], tid);
    let (s, _) = gw
        .call(
            "s1",
            "send",
            json!({"n": 9}),
            json!({"trace_id": "trace-1"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Found by review: the version was checked, not the variant, so a `c`/`d`/`e`/`f`
    // variant id (RFC 4122's are `8`–`b`) was taken and emitted in MPLP events that then broke
    // MPLP's identifier pattern (`-[89ab][0-9a-f]{3}-`). Refused, as the pattern says.
    for variant in ["c", "d", "e", "f", "0", "7"] {
        let id = format!("6f1c2b9e-8d4a-4c3b-{variant}a7e-1f2d3c4b5a69");
        let (s, b) = gw
            .call("s1", "send", json!({"n": 9}), json!({"trace_id": id}))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{id}: {b}");
    }
}

/// Issue 10: the Confirm says which policies governed a held call and the hash of the policy
/// set then loaded, even after the policies change (recorded when the call was held).
#[tokio::test]
async fn a_confirm_keeps_the_policy_set_it_was_held_under_after_the_policies_change() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_reg(dir.path(), 300_000, Settings::default(), AGENTS, &gov()).await;
    let before = gw.state.registry().policy_set_sha256.clone();
    assert_eq!(before.len(), 64);
    let old = gw
        .held("s1", "pay", json!({"amount": 500, "to": "bob"}))
        .await;
    gw.stop().await;
    let gw = start_reg(
        dir.path(),
        300_000,
        Settings::default(),
        AGENTS,
        &redacting_gov(),
    )
    .await;
    let after = gw.state.registry().policy_set_sha256.clone();
    assert_ne!(before, after);
    let new = gw
        .held("s2", "pay", json!({"amount": 600, "to": "bob"}))
        .await;
    let confirm = validator("mplp/schemas/v2/mplp-confirm.schema.json");
    for (id, hash) in [(&old, &before), (&new, &after)] {
        let (s, c) = gw.view(id, "mplp").await;
        assert_eq!(s, StatusCode::OK);
        assert_valid(&confirm, &c, "MPLP Confirm");
        assert_eq!(
            c["governance"]["truthDomain"],
            format!("policy-set sha256:{hash}")
        );
        assert_eq!(
            c["trace"]["attributes"]["governance_policies"],
            json!(["acme.test.rules-v1"])
        );
    }
    gw.stop().await;
}
