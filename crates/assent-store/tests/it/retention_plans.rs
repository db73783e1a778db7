//! Audit retention and MPLP plans (`retention_carry.rs` `carry_plans`), on both backends: a
//! run writes each plan's newest record again at the chain's end before deleting it, so
//! `audit verify` compares every plan's row with its newest record after any number of runs.

use super::retention::verify;
use super::retention_tools::archive;
use super::{open, pay, proposal};
use assent_core::approval::Canceller;
use assent_core::gatekeeper::Verdict;
use assent_core::{CanonicalCall, ToolCall};
use assent_store::Store;
use assent_store::{ConfirmTarget, Proposal, Proposed};
use serde_json::json;

const PLAN: &str = "6f1a3c7e-2b4d-4e8f-9a1b-3c5d7e9f1a2b";

/// Plan [`PLAN`] of `bot`, created and submitted on day 0 and its Confirm approved by alice.
fn approved_plan(s: &Store) {
    let body = json!({"plan_id": PLAN, "context_id": "c0a8e5a4-1c55-4d8e-9a43-3c7f1e5b2d10",
        "title": "Rotate", "objective": "Rotate the password",
        "steps": [{"step_id": "s1", "description": "rotate"}]});
    let plan = s.create_plan("bot", "s1", &body, None, 100, 1_000).unwrap();
    let (_, v) = pay(500);
    let ttl = |_: &Verdict| 60_000;
    let call =
        CanonicalCall::new(ToolCall::new("mplp.plan", None, plan.reviewed()).unwrap()).unwrap();
    let target = ConfirmTarget {
        target_type: "plan",
        target_id: PLAN,
        diff: None,
    };
    let p = Proposal {
        target: Some(target),
        ..proposal(&call, "s1", 2_000, &ttl)
    };
    let Ok((_, Proposed::Held { approval, .. })) = s.propose(&p, |_| v.clone()) else {
        panic!("the plan's Confirm is held");
    };
    let approve = assent_store::DecisionInput::approve();
    s.decide(&approval.id, &approve, "alice", &[], 3_000)
        .unwrap();
}

/// Attack (found by review): a database writer keeps a copy of an approved plan's row, and
/// once the plan was cancelled and its records archived, puts the copy back, seal and all:
/// the plan reads approved again and calls naming its steps are no longer refused. `audit
/// verify` compared the row with nothing (its records were gone) and passed. The plan's
/// newest record (`plan.cancelled`) is carried by every run, so the row put back is named,
/// after one run and after a second that archives the first one's copy.
#[test]
fn a_cancelled_plans_row_put_back_after_retention_is_named_by_audit_verify() {
    crate::both_in_dirs(|db, dir| {
        let s = open(dir, db);
        approved_plan(&s);
        // The copy the database writer keeps aside: every column the gateway changes.
        type Row = (
            String,
            String,
            Option<String>,
            Option<String>,
            String,
            Option<String>,
            i64,
        );
        let copy: Row = db
            .connect()
            .unwrap()
            .conn()
            .query_row(
                "SELECT status, body, submitted, confirm_id, events, seal, updated_at FROM plans WHERE plan_id = ?1",
                [PLAN],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)),
            )
            .unwrap();
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        s.cancel_plan(PLAN, &bot, &[], Some("stop"), 4_000).unwrap();
        archive(&s, dir, 10);
        let rep = verify(&s, db);
        assert_eq!(rep.problem, None, "{rep:?}");
        assert!(rep.archived_records > 0, "{rep:?}");
        archive(&s, dir, 30);
        assert_eq!(verify(&s, db).problem, None);
        let (status, body, submitted, confirm_id, events, seal, updated_at) = copy;
        let put_back = db.connect().unwrap().conn().execute(
            "UPDATE plans SET status = ?1, body = ?2, submitted = ?3, confirm_id = ?4, events = ?5, seal = ?6, updated_at = ?7 WHERE plan_id = ?8",
            assent_store::params![status, body, submitted, confirm_id, events, seal, updated_at, PLAN],
        );
        assert_eq!(put_back.unwrap(), 1);
        assert_eq!(s.plan(PLAN).unwrap().unwrap().status, "approved");
        let found = format!(
            "{:?}",
            verify(&s, db).problem.expect("the row put back is named")
        );
        assert!(
            found.contains(PLAN) && found.contains("plan.cancelled"),
            "{found}"
        );
        // Carried with its original place and time.
        let tail = s.audit_after(0, &["plan.cancelled"], 10).unwrap();
        let d: serde_json::Value =
            serde_json::from_str(&tail.first().expect("carried").data).unwrap();
        assert_eq!(
            (d["data"]["plan_id"].as_str(), d["carried_at"].as_i64()),
            (Some(PLAN), Some(4_000))
        );
    });
}
