//! Escalation chains (issue 14 §3) in the store: each step widens who may decide at its time,
//! moves `expires_at` to the next step, is audited; a sweep that was away catches up step by
//! step; the default decision applies after the last step; a row written before chains keeps
//! its one `on_timeout` step.

use super::{both_stores, edited_behind, fresh, hold, pay};
use assent_core::ApprovalStatus;
use assent_core::triggers::{Escalation, EscalationStep};
use assent_store::{DecideError, DecisionInput, Store};

fn step(after: u64, role: &str) -> EscalationStep {
    EscalationStep {
        after_seconds: Some(after),
        approvers: vec![role.to_string()],
    }
}

/// A held `pay` call raised at 1 s by approvers `finance`, escalating to `lead` at 100 s and
/// `cfo` at 300 s after the raise; the last group then has the 50 s timeout.
fn chained(s: &Store, session: &str) -> String {
    let (call, mut v) = pay(1);
    v.terms.approvers = vec!["finance".into()];
    v.terms.escalation = Some(Escalation {
        steps: vec![step(100, "lead"), step(300, "cfo")],
        last_wait_seconds: None,
    });
    hold(s, session, &call, &v, 1_000, 51_000).id
}

fn escalations(s: &Store) -> Vec<serde_json::Value> {
    s.audit_tail(50)
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == "approval.escalated")
        .map(|r| serde_json::from_str(&r.data).unwrap())
        .collect()
}

#[test]
fn each_step_widens_the_approvers_at_its_time_and_the_default_applies_after_the_last() {
    both_stores(|db, s| {
        let id = chained(s, "s1");
        let rec = s.get_approval(&id).unwrap().unwrap();
        // The first wait ends at the first step, not at the 50 s timeout.
        assert_eq!(rec.expires_at, 101_000);
        assert_eq!(rec.announced_deadline(), 351_000);
        assert!(s.expire_due(100_999).unwrap().is_empty());
        // Before its step, the cfo may not decide.
        let cfo = vec!["cfo".to_string()];
        let early = s.decide(&id, &DecisionInput::approve(), "carol", &cfo, 50_000);
        assert!(
            matches!(early, Err(DecideError::NotApprover(_))),
            "{early:?}"
        );
        assert_eq!(s.expire_due(101_000).unwrap(), vec![id.clone()]);
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Pending);
        assert_eq!(rec.terms.approvers, ["finance", "lead"]);
        assert_eq!((rec.expires_at, rec.escalation_steps), (301_000, 1));
        assert_eq!(rec.announced_deadline(), 351_000);
        let after_lead = s.decide(&id, &DecisionInput::approve(), "carol", &cfo, 200_000);
        assert!(matches!(after_lead, Err(DecideError::NotApprover(_))));
        assert_eq!(s.expire_due(301_000).unwrap(), vec![id.clone()]);
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.terms.approvers, ["finance", "lead", "cfo"]);
        assert_eq!((rec.expires_at, rec.escalation_steps), (351_000, 2));
        let audited = escalations(s);
        assert_eq!(audited.len(), 2, "{audited:?}");
        assert_eq!(audited[0]["step"], 2);
        assert_eq!(audited[0]["added"], serde_json::json!(["cfo"]));
        assert_eq!(audited[0]["expires_at"], 351_000);
        assert!(s.expire_due(350_999).unwrap().is_empty());
        assert_eq!(s.expire_due(351_000).unwrap(), vec![id.clone()]);
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Expired);
        // Regression (found by review): the approvers escalation widened are the newest
        // `approval.escalated` record's, not a difference from `approval.requested`.
        let conn = db.connect().unwrap();
        let found = assent_store::integrity::cross_check_on(conn.conn()).unwrap();
        assert!(found.is_empty(), "{found:?}");
    });
}

#[test]
fn the_cfo_decides_once_the_last_step_is_taken() {
    both_stores(|_, s| {
        let id = chained(s, "s2");
        s.expire_due(301_000).unwrap();
        let cfo = vec!["cfo".to_string()];
        let rec = s
            .decide(&id, &DecisionInput::approve(), "carol", &cfo, 302_000)
            .unwrap();
        assert_eq!(rec.status, ApprovalStatus::Approved);
    });
}

/// A sweep that ran late (the server was down) takes every due step, in order, each audited,
/// and expires the approval too when its deadline has passed.
#[test]
fn a_late_sweep_takes_every_due_step_in_order() {
    both_stores(|_, s| {
        let id = chained(s, "s3");
        assert_eq!(s.expire_due(320_000).unwrap(), vec![id.clone()]);
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Pending);
        assert_eq!(rec.escalation_steps, 2);
        let steps: Vec<_> = escalations(s).iter().map(|e| e["step"].clone()).collect();
        assert_eq!(steps, [2, 1]);
        let late = chained(s, "s4");
        assert_eq!(s.expire_due(900_000).unwrap(), vec![late.clone(), id]);
        let rec = s.get_approval(&late).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Expired);
        assert_eq!(rec.escalation_steps, 2);
    });
}

/// Attack (found by review): an approval's escalation edited behind the gateway's back — here
/// into the form of a row from before escalation chains (its `on_timeout` in `escalate_to` and
/// `escalate_after_ms`, no schedule), which the reader still understands — so that its step
/// adds the writer's role to the approvers. Its seal no longer holds: the sweep takes no step
/// (no `approval.escalated` record names the role) and expires it rejected at its first wait's
/// end. (Rows really from before chains were pending before migration 0033, which voided their
/// seals: they end the same way.)
#[test]
fn an_escalation_edited_in_the_database_is_not_taken() {
    let (_dir, s) = fresh();
    let (call, mut v) = pay(1);
    v.terms.approvers = vec!["finance".into()];
    v.terms.default_decision = assent_core::DefaultDecision::Approve;
    let id = hold(&s, "s1", &call, &v, 1_000, 101_000).id;
    let rec = edited_behind(
        &s,
        "UPDATE approvals SET escalate_to = '[\"ops\"]', escalate_after_ms = 100000 WHERE id = ?1",
        &id,
    );
    assert!(rec.damaged.is_empty(), "{:?}", rec.damaged);
    assert_eq!(rec.announced_deadline(), 201_000);
    assert_eq!(s.expire_due(101_000).unwrap(), vec![id.clone()]);
    let rec = s.get_approval(&id).unwrap().unwrap();
    assert_eq!(rec.terms.approvers, ["finance"]);
    assert_eq!(rec.escalation_steps, 0);
    assert!(escalations(&s).is_empty());
    assert_eq!(rec.status, ApprovalStatus::Expired);
    let applied = rec.decisions[0].default_applied;
    assert_eq!(applied, Some(assent_core::DefaultDecision::Reject));
}

/// Attack (found by review): whoever can write the database nulls a chained approval's
/// schedule (every step and the real deadline would be skipped: it expired at its first step
/// with its default), or moves `expires_at` earlier than the schedule's next moment. Either
/// makes the approval damaged: nobody decides it and the sweep leaves it alone.
#[test]
fn a_nulled_or_reshaped_escalation_schedule_damages_the_approval() {
    for edit in [
        "UPDATE approvals SET escalation_schedule = NULL WHERE id = ?1",
        "UPDATE approvals SET expires_at = expires_at - 50000 WHERE id = ?1",
        "UPDATE approvals SET escalation_steps = 2 WHERE id = ?1",
    ] {
        let (_dir, s) = fresh();
        let id = chained(&s, "s1");
        let rec = edited_behind(&s, edit, &id);
        assert_eq!(rec.damaged, ["escalation_schedule"], "{edit}");
        assert!(s.expire_due(400_000).unwrap().is_empty(), "{edit}");
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Pending, "{edit}");
    }
}

/// Attacks (found by review): an approval that needs a passkey, or an irreversible one,
/// stored with `default_decision: approve` (by an older gateway, or edited) would be approved
/// by its timeout with no passkey, no one's consent. The sweep rejects both.
#[test]
fn an_approval_that_needs_a_passkey_or_is_irreversible_expires_rejected_whatever_its_stored_default()
 {
    for (passkey, irreversible) in [(true, false), (false, true)] {
        let (_dir, s) = fresh();
        let (call, mut v) = pay(1);
        v.terms.require_passkey = passkey;
        v.terms.irreversible = irreversible;
        v.terms.default_decision = assent_core::DefaultDecision::Approve;
        let id = hold(&s, "s1", &call, &v, 1_000, 2_000).id;
        assert_eq!(s.expire_due(2_000).unwrap(), vec![id.clone()]);
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Expired);
        assert!(s.token_string(&id).unwrap().is_none(), "no token minted");
    }
}

/// Attack (a database edited behind the gateway's back; found by review): an approval's
/// `requested_at` set to the smallest BIGINT made the countdown pre-filter's arithmetic
/// overflow, which PostgreSQL fails, so every sweep's countdowns failed. The row is left to its
/// seal check, and the other approvals' countdowns still go out.
#[test]
fn an_approval_edited_to_an_impossible_time_does_not_stop_the_countdowns() {
    both_stores(|db, s| {
        let (call, v) = pay(1);
        let edited = hold(s, "s1", &call, &v, 1_000, 201_000);
        let (call, v) = pay(2);
        hold(s, "s1", &call, &v, 1_000, 201_000);
        let raw = db.connect().unwrap();
        raw.conn()
            .execute(
                "UPDATE approvals SET requested_at = ?1 WHERE id = ?2",
                assent_store::params![i64::MIN, edited.id],
            )
            .unwrap();
        assert_eq!(s.emit_countdowns(101_000).unwrap(), 1);
    });
}
