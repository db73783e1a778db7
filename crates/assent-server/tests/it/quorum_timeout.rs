//! A call whose approval needs a quorum is never approved by its timeout (issue 14 §1, found
//! by review): the expiry sweep's `expire` is no vote, so an approving default would mint a
//! token with no approval counted. Its default is reject — whatever another covering rule's
//! `default_decision` says, after its last escalation step, and for a row held with an
//! approving default before this rule.

use crate::kit::{Gw, Param};
use crate::quorum::{args, gateway_rules};
use assent_core::VerdictKind;
use assent_core::approval::DefaultDecision;
use assent_core::canonical::CanonicalCall;
use assent_core::{ToolCall, Verdict};
use assent_store::{Proposal, Proposed};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A governance rule asking two finance approvers, whose deny needs a quorum too, beside
/// another rule covering `pay` that says `default_decision: approve` (a low tier).
const QUORUM_BESIDE_APPROVING_DEFAULT: &str = "- tool: pay\n  approvers: {roles: [finance], count: 2, deny: quorum}\n- tool: pay\n  risk_tier: R1\n  default_decision: approve\n";

/// Past the longest wait a rule may set (7 days) from now, Unix ms.
fn past_every_deadline() -> i64 {
    assent_server::state::now_ms() + 8 * 86_400_000
}

/// How many token rows approval `id` has.
fn tokens_of(gw: &Gw, id: &str) -> i64 {
    gw.sql().int(
        "SELECT count(*) FROM tokens WHERE approval_id = ?1",
        &[Param::from(id)],
    )
}

/// Runs the expiry sweep at `at` and checks that approval `id` expired rejected with no
/// token: as operators and the agent read it, and in the tokens table.
async fn assert_expired_rejected(gw: &Gw, id: &str, at: i64) {
    let changed = gw.with_store(|s| s.expire_due(at).unwrap());
    assert!(changed.contains(&id.to_string()), "{changed:?}");
    let (s, a) = gw.approval(id, "alice-key").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "expired", "{a}");
    let last = a["decisions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["by"], &last["default_applied"]),
        (&json!("system:expiry"), &json!("reject")),
        "{a}"
    );
    let seen: Value = gw.as_agent(id).await;
    assert!(seen.get("token").is_none_or(Value::is_null), "{seen}");
    assert_eq!(tokens_of(gw, id), 0, "no token minted");
}

/// The attack: nobody votes (or one finance person denies, which under `deny: quorum` does
/// not reject alone) and at the deadline the other rule's approving default approved the
/// call, minting a token with no approving vote: "no single operator can approve" became
/// "no operator at all".
#[tokio::test]
async fn a_quorum_call_is_never_approved_by_its_timeout_whatever_another_rules_default() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_rules(dir.path(), QUORUM_BESIDE_APPROVING_DEFAULT).await;
    let warned = gw.state.registry().warnings.clone();
    assert!(
        warned.iter().any(|w| w.contains("needs a quorum")),
        "the load warns of the pair: {warned:?}"
    );
    for deny_first in [false, true] {
        let id = gw.held(&format!("s-{deny_first}"), "pay", args()).await;
        let (_, a) = gw.approval(&id, "alice-key").await;
        assert!(a["quorum"].is_object(), "{a}");
        assert_eq!(a["default_decision"], "reject", "{a}");
        if deny_first {
            let (s, a) = gw.decide(&id, "alice-key", "deny").await;
            assert_eq!((s, &a["status"]), (StatusCode::OK, &json!("pending")));
        }
        assert_expired_rejected(&gw, &id, past_every_deadline()).await;
    }
    gw.stop().await;
}

/// Escalation steps end with "the default applies after the last": for a quorum call that
/// default is still reject, the steps taken or not.
#[tokio::test]
async fn a_quorum_call_is_not_approved_by_its_default_after_its_last_escalation_step() {
    let rules = format!(
        "{QUORUM_BESIDE_APPROVING_DEFAULT}  escalation: [{{after: 60, approvers: [security]}}]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_rules(dir.path(), &rules).await;
    let id = gw.held("s1", "pay", args()).await;
    let step = assent_server::state::now_ms() + 61_000;
    let changed = gw.with_store(|s| s.expire_due(step).unwrap());
    assert!(changed.contains(&id), "{changed:?}");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "pending", "escalated, still waiting: {a}");
    assert_eq!(a["schedule"]["steps"][0]["taken"], json!(true), "{a}");
    assert_expired_rejected(&gw, &id, past_every_deadline()).await;
    gw.stop().await;
}

/// A quorum call held, sealed, with an approving default (as before this rule, or from a
/// verdict composed otherwise): the sweep itself still rejects it at its timeout.
#[tokio::test]
async fn a_quorum_call_held_with_an_approving_default_is_rejected_by_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_rules(dir.path(), QUORUM_BESIDE_APPROVING_DEFAULT).await;
    let reg = gw.state.registry();
    let tool = ToolCall::new("pay", None, args()).unwrap();
    let call = CanonicalCall::new(tool.clone()).unwrap();
    let id = gw.with_store(|s| {
        let ttl = |_: &Verdict| 60_000;
        let now = assent_server::state::now_ms();
        let p = Proposal::for_call("bot", "s-legacy", &call, now, &ttl, 100);
        let (_, outcome) = s
            .propose(&p, |_| {
                let mut v = assent_core::evaluate(&reg, "bot", &tool);
                assert_eq!(v.kind, VerdictKind::Confirm);
                assert!(v.terms.quorum.is_some());
                v.terms.default_decision = DefaultDecision::Approve;
                v
            })
            .unwrap();
        match outcome {
            Proposed::Held { approval, .. } => approval.id.clone(),
            _ => panic!("not held"),
        }
    });
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(
        (&a["status"], &a["default_decision"]),
        (&json!("pending"), &json!("approve")),
        "{a}"
    );
    assert_expired_rejected(&gw, &id, past_every_deadline()).await;
    gw.stop().await;
}
