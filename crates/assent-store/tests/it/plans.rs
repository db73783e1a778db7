//! MPLP plans in the store, on both backends: a plan's Confirm binds the body a person reviews.

use crate::{both_stores, pay, proposal};
use assent_core::gatekeeper::Verdict;
use assent_core::{CanonicalCall, ToolCall};
use assent_store::{ConfirmTarget, Proposal, Proposed, StoreError};
use serde_json::{Value, json};

fn body(id: &str, step: &str) -> Value {
    json!({"plan_id": id, "context_id": "c0a8e5a4-1c55-4d8e-9a43-3c7f1e5b2d10", "title": "Rotate",
           "objective": "Rotate the password", "steps": [{"step_id": "s1", "description": step}]})
}

/// Plan `id` of agent `bot` with one step described `step`, created and submitted: its
/// Confirm, held.
fn submitted(s: &assent_store::Store, id: &str, step: &str) -> assent_store::ApprovalRecord {
    let plan = s
        .create_plan("bot", "s1", &body(id, step), None, 100, 1_000)
        .unwrap();
    let (_, v) = pay(500);
    let ttl = |_: &Verdict| 60_000;
    let call =
        CanonicalCall::new(ToolCall::new("mplp.plan", None, plan.reviewed()).unwrap()).unwrap();
    let p = Proposal {
        target: Some(ConfirmTarget {
            target_type: "plan",
            target_id: id,
            diff: None,
        }),
        ..proposal(&call, "s1", 2_000, &ttl)
    };
    let Ok((_, Proposed::Held { approval, .. })) = s.propose(&p, |_| v.clone()) else {
        panic!("the plan's Confirm is held");
    };
    *approval
}

/// Plan `id` as [`submitted`], its Confirm then approved by alice at 3 s: a plan that runs
/// calls. Its Confirm, approved.
fn approved_plan(s: &assent_store::Store, id: &str, step: &str) -> assent_store::ApprovalRecord {
    let confirm = submitted(s, id, step);
    let approve = assent_store::DecisionInput::approve();
    s.decide(&confirm.id, &approve, "alice", &[], 3_000)
        .unwrap();
    confirm
}

/// `call` under verdict `v`, proposed by `bot` in session `s1` at 4 s naming plan `id`
/// (a 60 s timeout): its approval, which must be held.
#[track_caller]
fn held_under(
    s: &assent_store::Store,
    id: &str,
    call: &CanonicalCall,
    v: &Verdict,
) -> assent_store::ApprovalRecord {
    let ttl = |_: &Verdict| 60_000;
    let p = Proposal {
        plan_id: Some(id),
        ..proposal(call, "s1", 4_000, &ttl)
    };
    let Ok((_, Proposed::Held { approval, .. })) = s.propose(&p, |_| v.clone()) else {
        panic!("the call under the plan is held");
    };
    *approval
}

/// The attack (found by review): the server built a plan's Confirm from its own read of the
/// plan, before the proposal's transaction; a revision (`PUT`) landing in between had a
/// person approve the old body while the plan kept the new one, served afterwards as
/// `approved`. The proposal's transaction refuses a Confirm that is not the stored plan's.
#[test]
fn a_plan_revised_during_submit_is_not_approved_with_the_revised_body() {
    both_stores(|_, s| {
        let id = "5f0c6a9e-2b1d-4c3e-8f7a-9d6b5c4a3e21";
        let first = s
            .create_plan("bot", "s1", &body(id, "Create it"), None, 100, 1_000)
            .unwrap();
        let shown = first.reviewed();
        s.update_plan("bot", &body(id, "Drop the database"), 2_000)
            .unwrap();
        let (_, v) = pay(500);
        let ttl = |_: &Verdict| 60_000;
        let propose = |args: Value| {
            let call = CanonicalCall::new(ToolCall::new("mplp.plan", None, args).unwrap()).unwrap();
            let target = ConfirmTarget {
                target_type: "plan",
                target_id: id,
                diff: None,
            };
            let p = Proposal {
                target: Some(target),
                ..proposal(&call, "s1", 3_000, &ttl)
            };
            s.propose(&p, |_| v.clone()).map(|(_, proposed)| proposed)
        };
        let r = propose(shown);
        assert!(
            matches!(&r, Err(StoreError::Invalid(m)) if m.contains("revised")),
            "{r:?}"
        );
        assert_eq!(s.plan(id).unwrap().unwrap().status, "draft");
        let now = s.plan(id).unwrap().unwrap().reviewed();
        let held = propose(now).expect("the stored body's Confirm is taken");
        assert!(matches!(held, Proposed::Held { .. }), "{held:?}");
        assert_eq!(s.plan(id).unwrap().unwrap().status, "proposed");
    });
}

/// Attack (found by review): each revision rewrote the plan's whole event list inside the
/// writer every agent shares, and nothing bounded it: an agent re-sending its plan in a loop
/// made every later write slower for everyone. The same body again is no revision (no event,
/// no audit record), and a plan holds at most `MAX_PLAN_EVENTS` events: the last revision
/// leaves room for its cancellation.
#[test]
fn revising_a_plan_is_bounded_and_the_same_body_is_no_revision() {
    use assent_core::approval::Canceller;
    use assent_store::plans::{MAX_PLAN_EVENTS, PlanError};
    both_stores(|_, s| {
        let id = "7a1d2c3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
        s.create_plan("bot", "s1", &body(id, "step 0"), None, 100, 1_000)
            .unwrap();
        let audit_before = s.audit_head_seq().unwrap();
        for _ in 0..3 {
            let p = s.update_plan("bot", &body(id, "step 0"), 2_000).unwrap();
            assert_eq!(p.events.len(), 1, "{:?}", p.events);
        }
        assert_eq!(s.audit_head_seq().unwrap(), audit_before);
        let mut n = 1;
        let refused = loop {
            match s.update_plan("bot", &body(id, &format!("step {n}")), 2_000 + n as i64) {
                Ok(p) => assert_eq!(p.events.len(), n + 1),
                Err(e) => break e,
            }
            n += 1;
            assert!(n <= MAX_PLAN_EVENTS, "never refused");
        };
        assert_eq!(n, MAX_PLAN_EVENTS - 1, "refused at {n}");
        assert!(
            matches!(&refused, PlanError::WrongState(_, m) if m.contains("create a new plan")),
            "{refused:?}"
        );
        let stored = s.plan(id).unwrap().unwrap();
        assert_eq!(stored.events.len(), MAX_PLAN_EVENTS - 1);
        assert_eq!(
            stored.body["steps"][0]["description"],
            format!("step {}", n - 1)
        );
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        let (cancelled, _) = s.cancel_plan(id, &bot, &[], None, 9_000).unwrap();
        assert_eq!(cancelled.events.len(), MAX_PLAN_EVENTS);
    });
}

/// Found by review: a plan's audit records did not name it — a draft never submitted has no
/// Confirm, so its `plan.cancelled` record was known only by the trace id the agent chose (and
/// may share across plans). Every record of a plan's life names it in its data.
#[test]
fn every_plan_record_names_its_plan() {
    both_stores(|_, s| {
        let id = "6f1a3c7e-2b4d-4e8f-9a1b-3c5d7e9f1a2b";
        s.create_plan("bot", "s1", &body(id, "step"), None, 100, 1_000)
            .unwrap();
        s.update_plan("bot", &body(id, "step 2"), 2_000).unwrap();
        let bot = assent_core::approval::Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        s.cancel_plan(id, &bot, &[], Some("stop"), 3_000).unwrap();
        let kinds = ["plan.created", "plan.updated", "plan.cancelled"];
        let records = s.audit_after(0, &kinds, 10).unwrap();
        let named: Vec<(String, Value)> = records
            .iter()
            .map(|r| {
                let data: Value = serde_json::from_str(&r.data).unwrap();
                (r.kind.clone(), data["data"]["plan_id"].clone())
            })
            .collect();
        let want: Vec<(String, Value)> = kinds.iter().map(|k| (k.to_string(), json!(id))).collect();
        assert_eq!(named, want);
    });
}

/// Attack (found by review): only revisions were bounded. An agent submitting its draft and
/// letting the Confirm expire (its deny default puts the plan back in `draft`) in a loop added
/// two events a round to the plan's list, rewritten whole inside the one writer every agent
/// shares, without bound. A submission that would leave no room for its own event, its
/// Confirm's decision and a cancellation is refused (the server's `409 WRONG_STATE`), naming
/// the bound; every decision is still recorded, and the plan never holds more than
/// `MAX_PLAN_EVENTS` events.
#[test]
fn submitting_a_plan_and_letting_its_confirm_expire_in_a_loop_is_bounded() {
    use assent_core::approval::Canceller;
    use assent_store::plans::MAX_PLAN_EVENTS;
    both_stores(|_, s| {
        let id = "2c4e6a8b-1d3f-4a5b-9c7d-8e0f2a4b6c8d";
        let plan = s
            .create_plan("bot", "s1", &body(id, "Pay it"), None, 100, 1_000)
            .unwrap();
        let (_, v) = pay(500);
        assert_eq!(v.terms.default_decision.as_str(), "reject");
        let ttl = |_: &Verdict| 1_000;
        let call =
            CanonicalCall::new(ToolCall::new("mplp.plan", None, plan.reviewed()).unwrap()).unwrap();
        let target = ConfirmTarget {
            target_type: "plan",
            target_id: id,
            diff: None,
        };
        let (mut now, mut rounds) = (2_000, 0);
        let refused = loop {
            let p = Proposal {
                target: Some(target),
                ..proposal(&call, "s1", now, &ttl)
            };
            let confirm = match s.propose(&p, |_| v.clone()) {
                Ok((_, Proposed::Held { approval, joined })) => {
                    assert!(!joined);
                    approval.id
                }
                Ok((_, other)) => panic!("{other:?}"),
                Err(e) => break e,
            };
            assert_eq!(s.expire_due(now + 1_000).unwrap(), vec![confirm.clone()]);
            let stored = s.plan(id).unwrap().unwrap();
            assert_eq!(stored.status, "draft");
            assert_eq!(stored.events.last().unwrap()["event_type"], "plan.rejected");
            assert!(stored.events.len() <= MAX_PLAN_EVENTS);
            (now, rounds) = (now + 2_000, rounds + 1);
            assert!(rounds <= MAX_PLAN_EVENTS, "never refused");
        };
        let bound = MAX_PLAN_EVENTS.to_string();
        assert!(
            matches!(&refused, StoreError::Invalid(m) if m.contains(&bound) && m.contains("create a new plan")),
            "{refused:?}"
        );
        let stored = s.plan(id).unwrap().unwrap();
        assert_eq!(stored.status, "draft");
        assert_eq!(rounds, (MAX_PLAN_EVENTS - 2) / 2, "refused after {rounds}");
        // The cancellation still has its room.
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        let (cancelled, _) = s.cancel_plan(id, &bot, &[], None, now).unwrap();
        assert_eq!(cancelled.status, "cancelled");
        assert!(cancelled.events.len() <= MAX_PLAN_EVENTS);
    });
}

/// Found by review: a cancel racing the submit could mark the plan `cancelled` while its
/// Confirm stayed pending (the cancel read `draft`, the submit landed, the cancel's write saw
/// `proposed`), and approving that Confirm later moved the cancelled plan to `approved`. Only
/// a plan waiting for its Confirm moves when it settles. The raced state is made here by hand,
/// which since plan rows are sealed (migration 0058) also breaks the row's seal: the plan then
/// reads `damaged`, and the Confirm's approval moves it no more than it moves a cancelled one.
#[test]
fn a_confirm_settled_after_its_plan_was_cancelled_leaves_the_plan_cancelled() {
    use assent_store::DecisionInput;
    both_stores(|db, s| {
        let id = "3e2d1c0b-9a8f-4e7d-8c6b-5a4f3e2d1c0b";
        let approval = submitted(s, id, "Create it");
        assert_eq!(s.plan(id).unwrap().unwrap().status, "proposed");
        db.connect()
            .unwrap()
            .conn()
            .execute(
                "UPDATE plans SET status = 'cancelled' WHERE plan_id = ?1",
                [id],
            )
            .unwrap();
        let decided = s
            .decide(&approval.id, &DecisionInput::approve(), "alice", &[], 4_000)
            .unwrap();
        assert_eq!(decided.status.as_str(), "approved");
        assert_eq!(
            s.plan(id).unwrap().unwrap().status,
            assent_store::plans::DAMAGED
        );
    });
}

/// Found by review: cancelling a plan cancelled only its own Confirm; a tool call held under
/// the plan while it was approved stayed pending, and an approval then ran it under the
/// cancelled plan. Cancelling the plan cancels its agent's calls held under it, whoever stops
/// it: its agent, or any operator (here one holding none of the call's approver roles); a call
/// of another agent naming the plan's id is not the plan's and stays held (a plan belongs to
/// the agent that registered it: `a_plan_id_squatted_by_another_agent_neither_blocks_nor_cancels_the_victims_calls`).
#[test]
fn cancelling_a_plan_cancels_the_calls_held_under_it() {
    use assent_core::approval::Canceller;
    let roles = ["ops".to_string()];
    let stoppers = [
        Canceller::Agent {
            name: "bot",
            agent: "bot",
        },
        Canceller::Operator {
            name: "olaf",
            roles: &roles,
        },
    ];
    both_stores(|_, s| {
        for (stopper, id) in stoppers.iter().zip([
            "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d",
            "8b7c6d5e-4f3a-4b2c-9d0e-1f2a3b4c5d6e",
        ]) {
            approved_plan(s, id, "Pay it");
            assert_eq!(s.plan(id).unwrap().unwrap().status, "approved");
            // The agent's call under the plan, which only finance may decide, and another
            // agent's naming the plan's id.
            let (call, mut v) = pay(700);
            v.terms.approvers = vec!["finance".into()];
            let call = CanonicalCall::new(call).unwrap();
            let ttl = |_: &Verdict| 60_000;
            let mut held = Vec::new();
            for agent in ["bot", "bot2"] {
                let p = Proposal {
                    plan_id: Some(id),
                    agent,
                    ..proposal(&call, "s1", 4_000, &ttl)
                };
                let Ok((_, Proposed::Held { approval, .. })) = s.propose(&p, |_| v.clone()) else {
                    panic!("the call under the plan is held");
                };
                held.push(approval.id);
            }
            let (_, cancelled) = s.cancel_plan(id, stopper, &[], None, 5_000).unwrap();
            assert_eq!(cancelled.len(), 1);
            for (aid, status) in held.iter().zip(["cancelled", "pending"]) {
                let after = s.get_approval(aid).unwrap().unwrap();
                assert_eq!(after.status.as_str(), status, "{after:?}");
            }
        }
    });
}

/// A timeout never approves what no operator may: calls whose default on timeout is
/// `approve`, held naming plan ids no plan had yet; one plan is then left a draft (it runs no
/// calls), the other approved. At the timeout the first default is overruled (expired
/// rejected, no token), the second applied (its token minted); so too for calls whose
/// escalation steps the same sweep takes first (each sealing the row again).
#[test]
fn a_timeout_does_not_approve_a_call_under_a_plan_that_runs_no_calls() {
    use assent_core::DefaultDecision::{Approve, Reject};
    use assent_core::approval::ApprovalStatus;
    use assent_core::triggers::{Escalation, EscalationStep};
    let step = |after: u64, role: &str| EscalationStep {
        after_seconds: Some(after),
        approvers: vec![role.to_string()],
    };
    const PLAIN: [&str; 2] = [
        "5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a",
        "6e5d4c3b-2a1f-4e0d-9c8b-7a6f5e4d3c2b",
    ];
    const CHAINED: [&str; 2] = [
        "7f6e5d4c-3b2a-4f1e-8d0c-9b8a7f6e5d4c",
        "8a7f6e5d-4c3b-4a2f-9e1d-0c9b8a7f6e5d",
    ];
    both_stores(|_, s| {
        let mut held = Vec::new();
        for (escalating, [draft, running]) in [(false, PLAIN), (true, CHAINED)] {
            for (id, applied) in [(draft, Reject), (running, Approve)] {
                let (call, mut v) = pay(700 + held.len() as i64);
                v.terms.default_decision = Approve;
                v.terms.escalation = escalating.then(|| Escalation {
                    steps: vec![step(100, "lead"), step(300, "cfo")],
                    last_wait_seconds: None,
                });
                let rec = held_under(s, id, &CanonicalCall::new(call).unwrap(), &v);
                held.push((rec.id, applied, if escalating { 2 } else { 0 }));
            }
            s.create_plan("bot", "s1", &body(draft, "Pay it"), None, 100, 1_000)
                .unwrap();
            approved_plan(s, running, "Pay it");
        }
        // The plain calls wait 60 s from 4 s; the chained ones take their steps at 104 s and
        // 304 s and then wait 60 s: all are due at 900 s, in one sweep.
        let expired = s.expire_due(900_000).unwrap();
        for (id, applied, steps) in &held {
            assert!(expired.contains(id), "{expired:?}");
            let after = s.get_approval(id).unwrap().unwrap();
            assert_eq!(after.status, ApprovalStatus::Expired, "{after:?}");
            assert_eq!(after.escalation_steps, *steps, "{after:?}");
            assert_eq!(
                after.decisions[0].default_applied,
                Some(*applied),
                "{after:?}"
            );
            assert_eq!(after.token.is_some(), *applied == Approve, "{after:?}");
        }
    });
}

/// Found by review: a call approved while its plan ran kept a redeemable token after the plan
/// was stopped. Redemption refuses a token whose call's plan no longer runs calls.
#[test]
fn a_token_of_a_call_under_a_stopped_plan_is_not_redeemed() {
    use assent_core::approval::Canceller;
    use assent_store::{DecisionInput, RedeemError};
    both_stores(|_, s| {
        let id = "9c8d7e6f-5a4b-4c3d-8e2f-1a0b9c8d7e6f";
        approved_plan(s, id, "Pay it");
        let (call, v) = pay(700);
        let held = held_under(s, id, &CanonicalCall::new(call).unwrap(), &v);
        s.decide(&held.id, &DecisionInput::approve(), "alice", &[], 5_000)
            .unwrap();
        let token = s.token_string(&held.id).unwrap().unwrap();
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        s.cancel_plan(id, &bot, &[], None, 6_000).unwrap();
        let e = s
            .redeem(&token, "bot", &held.call_hash, None, 7_000)
            .unwrap_err();
        assert!(matches!(e, RedeemError::PlanStopped { .. }), "{e:?}");
    });
}

/// The attack (found by review): plan ids are chosen by agents; any agent could register the
/// id another agent's calls had named (while no plan had it) and cancel the plan, cancelling
/// those calls and stopping the tokens approved for them. A plan belongs to the agent that
/// registered it: its cancellation reaches only that agent's calls, whatever the rows name
/// (calls recorded before the plan existed, or before this rule).
#[test]
fn a_plan_registered_under_an_id_another_agents_calls_named_neither_cancels_nor_stops_them() {
    use assent_core::approval::Canceller;
    use assent_store::DecisionInput;
    both_stores(|_, s| {
        let id = "0d9e8f7a-6b5c-4d4e-9f3a-2b1c0d9e8f7a";
        let ttl = |_: &Verdict| 60_000;
        let mut victim = Vec::new();
        for amount in [700, 800] {
            let (call, v) = pay(amount);
            let call = CanonicalCall::new(call).unwrap();
            let p = Proposal {
                plan_id: Some(id),
                agent: "bot2",
                ..proposal(&call, "s2", 1_000, &ttl)
            };
            let Ok((_, Proposed::Held { approval, .. })) = s.propose(&p, |_| v.clone()) else {
                panic!("the victim's call is held");
            };
            victim.push(*approval);
        }
        s.decide(
            &victim[1].id,
            &DecisionInput::approve(),
            "alice",
            &[],
            1_500,
        )
        .unwrap();
        let token = s.token_string(&victim[1].id).unwrap().unwrap();
        // The squatter registers the id, has it approved, and cancels it.
        approved_plan(s, id, "Squat");
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        let (plan, cancelled) = s.cancel_plan(id, &bot, &[], None, 4_000).unwrap();
        assert_eq!(plan.status, "cancelled");
        assert!(cancelled.is_empty(), "{cancelled:?}");
        let held = s.get_approval(&victim[0].id).unwrap().unwrap();
        assert_eq!(held.status.as_str(), "pending", "{held:?}");
        s.redeem(&token, "bot2", &victim[1].call_hash, None, 5_000)
            .expect("the victim's token still redeems");
    });
}

/// Agent `bot` declaring `helper` and `helper2` its local delegates, beside `intruder`, which
/// it does not declare: the relation the server reads from the operator's agent files.
fn orchestration() -> assent_core::policy::Delegations {
    let agent = |id: &str, locals: &str| {
        let accepts = "annotations: {assent/orchestrators: bot}";
        format!("metadata: {{id: {id}, {accepts}}}\naction_space:\n  local_agents: {locals}\n")
    };
    let files = [
        (
            "agents/bot.yaml".to_string(),
            agent(
                "bot",
                "[{alias: h, source: helper.yaml}, {alias: h2, source: helper2.yaml}]",
            ),
        ),
        ("agents/helper.yaml".to_string(), agent("helper", "[]")),
        ("agents/helper2.yaml".to_string(), agent("helper2", "[]")),
        ("agents/intruder.yaml".to_string(), agent("intruder", "[]")),
    ];
    let reg = assent_core::policy::Registry::load(&files, &[]).unwrap();
    reg.delegations().clone()
}

/// Restores what plans belonging to their agent took away, without reopening the squat: an
/// orchestrator's plan gates the calls of the local agents its agent file declares (the store
/// is told which, never by the request). While the plan is not approved a delegate's call
/// naming it is refused; once approved it is gated as usual; cancelling the plan cancels the
/// delegates' held calls and stops their tokens. An agent the orchestrator does not declare
/// is gated as if it named no plan, and its held call survives the cancellation. A delegate's
/// own pending Confirm on the plan blocks only that delegate, never the orchestrator or the
/// other delegates.
#[test]
fn an_orchestrators_plan_gates_and_cancels_its_declared_delegates_calls_only() {
    use assent_core::approval::Canceller;
    use assent_core::redeem::Presenter;
    use assent_store::{DecisionInput, RedeemError};
    let d = orchestration();
    both_stores(|_, s| {
        let id = "6b5a4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2d";
        let ttl = |_: &Verdict| 60_000;
        let propose = |agent: &str, amount: i64, target: Option<ConfirmTarget<'_>>| {
            let (call, v) = pay(amount);
            let call = CanonicalCall::new(call).unwrap();
            let p = Proposal {
                agent,
                plan_id: target.is_none().then_some(id),
                plans_of: d.orchestrators_of(agent),
                target,
                ..proposal(&call, agent, 4_000 + amount, &ttl)
            };
            s.propose(&p, |_| v.clone()).unwrap().1
        };
        let held = |p: Proposed| match p {
            Proposed::Held { approval, .. } => *approval,
            other => panic!("held: {other:?}"),
        };
        let denied = |p: Proposed| assert!(matches!(p, Proposed::Denied), "denied: {p:?}");
        let status = |aid: &str| s.get_approval(aid).unwrap().unwrap().status;
        let confirm = submitted(s, id, "Pay it");
        // Under review: the delegate's call is refused; the undeclared agent's is gated as if
        // it named no plan.
        denied(propose("helper", 701, None));
        let intruder = held(propose("intruder", 702, None));
        s.decide(&confirm.id, &DecisionInput::approve(), "alice", &[], 3_000)
            .unwrap();
        // Approved: the delegate's call is gated as usual, and approved it gets a token.
        let approved = held(propose("helper", 703, None));
        s.decide(&approved.id, &DecisionInput::approve(), "alice", &[], 5_000)
            .unwrap();
        let token = s.token_string(&approved.id).unwrap().unwrap();
        // helper's own Confirm on the plan blocks helper, not its orchestrator or sibling.
        let on_plan = ConfirmTarget {
            target_type: "context",
            target_id: id,
            diff: None,
        };
        held(propose("helper", 704, Some(on_plan)));
        denied(propose("helper", 705, None));
        let sibling = held(propose("helper2", 706, None));
        let own = held(propose("bot", 707, None));
        // Cancelled by its agent: the delegates' held calls and tokens go with it.
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        let (_, cancelled) = s
            .cancel_plan(id, &bot, d.delegates_of("bot"), None, 8_000)
            .unwrap();
        assert_eq!(cancelled.len(), 2, "{cancelled:?}");
        for (aid, want) in [(&sibling.id, "cancelled"), (&own.id, "cancelled")] {
            assert_eq!(status(aid).as_str(), want);
        }
        assert_eq!(status(&intruder.id).as_str(), "pending");
        let by = Presenter::Agent("helper");
        let e = s
            .redeem_as(&token, by, &approved.call_hash, None, 9_000, &d)
            .unwrap_err();
        assert!(matches!(e, RedeemError::PlanStopped { .. }), "{e:?}");
    });
}

/// Found by review: a stopped plan reached its delegates' held calls and tokens only as the
/// delegations configured at the stop (or redemption) said, so a reload removing the
/// delegation released them. The plan's agent is recorded with the call when the plan gates
/// it (`ConfirmContext::plan_owner`), and the plan's stop reaches what it gated then, with no
/// delegation left: the held call is cancelled, the token stays stopped. A call recorded under
/// a plan that did not exist yet keeps today's rule (the delegations now).
#[test]
fn a_stopped_plan_reaches_the_delegate_calls_it_gated_after_the_delegation_is_removed() {
    use assent_core::approval::Canceller;
    use assent_core::policy::NO_DELEGATIONS;
    use assent_core::redeem::Presenter;
    use assent_store::{DecisionInput, RedeemError};
    let d = orchestration();
    both_stores(|_, s| {
        let id = "7c6b5a4d-3e2f-4b1c-8d9e-0f1a2b3c4d5e";
        let early = "8d7c6b5a-4e3f-4a2b-9c0d-1e2f3a4b5c6d";
        let ttl = |_: &Verdict| 60_000;
        let propose = |plan_id: &str, amount: i64| {
            let (call, v) = pay(amount);
            let call = CanonicalCall::new(call).unwrap();
            let p = Proposal {
                agent: "helper",
                plan_id: Some(plan_id),
                plans_of: d.orchestrators_of("helper"),
                ..proposal(&call, "helper", 4_000 + amount, &ttl)
            };
            match s.propose(&p, |_| v.clone()).unwrap().1 {
                Proposed::Held { approval, .. } => *approval,
                other => panic!("held: {other:?}"),
            }
        };
        // Named before the plan existed: recorded without the plan's agent.
        let unowned = propose(early, 800);
        assert_eq!(s.confirm_context(&unowned.id).unwrap().plan_owner, None);
        approved_plan(s, id, "Pay it");
        let held = propose(id, 801);
        let ctx = s.confirm_context(&held.id).unwrap();
        assert_eq!(ctx.plan_owner.as_deref(), Some("bot"), "{ctx:?}");
        let approved = propose(id, 802);
        s.decide(&approved.id, &DecisionInput::approve(), "alice", &[], 5_000)
            .unwrap();
        let token = s.token_string(&approved.id).unwrap().unwrap();
        // The delegation is gone (a reload): `bot` declares no delegate now.
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        let (_, cancelled) = s.cancel_plan(id, &bot, &[], None, 8_000).unwrap();
        let ids: Vec<&str> = cancelled.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, [held.id.as_str()]);
        let e = s
            .redeem_as(
                &token,
                Presenter::Agent("helper"),
                &approved.call_hash,
                None,
                9_000,
                &NO_DELEGATIONS,
            )
            .unwrap_err();
        assert!(matches!(e, RedeemError::PlanStopped { .. }), "{e:?}");
        // The plan that did not exist when `unowned` was held: today's delegations decide.
        s.create_plan("bot", "s1", &body(early, "Later"), None, 100, 9_500)
            .unwrap();
        let (_, none) = s.cancel_plan(early, &bot, &[], None, 9_600).unwrap();
        assert!(none.is_empty(), "{none:?}");
        let status = s.get_approval(&unowned.id).unwrap().unwrap().status;
        assert_eq!(status.as_str(), "pending");
    });
}

/// Found by review: an operator's approval of a call held under a plan could land after the
/// plan's cancellation committed and before the calls held under it were cancelled (two
/// transactions); its `workspace` grant then covered the same call proposed again under no
/// plan, so the agent got out of its plan's stop. A grant whose approval was held under a plan
/// that runs no calls covers nothing. The plan's status is set in the database here, as the
/// cancellation's first transaction leaves it. Approving such a call is now refused
/// (`PlanStopped`); the grant of one approved just before the stop (its status set without
/// the revocation the stop does) still covers nothing.
#[test]
fn a_grant_made_after_its_plan_was_stopped_covers_nothing() {
    use assent_core::approval::GrantScope;
    use assent_store::DecisionInput;
    both_stores(|db, s| {
        let id = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
        approved_plan(s, id, "Pay it");
        let (call, mut v) = pay(5);
        v.terms.approvers = vec!["ops".into()];
        let canon = CanonicalCall::new(call).unwrap();
        let ttl = |_: &Verdict| 60_000;
        let approval = held_under(s, id, &canon, &v);
        let session = db.connect().unwrap();
        let set = |status: &str| {
            (session.conn())
                .write(|tx| {
                    tx.prepare_cached("UPDATE plans SET status = ?2 WHERE plan_id = ?1")?
                        .execute(assent_store::params![id, status])
                })
                .unwrap()
        };
        set("cancelled");
        let workspace = DecisionInput {
            scope: GrantScope::Workspace,
            ..DecisionInput::approve()
        };
        let ops = ["ops".to_string()];
        let refused = s.decide(&approval.id, &workspace, "olaf", &ops, 5_000);
        assert!(
            matches!(refused, Err(assent_store::DecideError::PlanStopped { .. })),
            "{refused:?}"
        );
        set("approved");
        s.decide(&approval.id, &workspace, "olaf", &ops, 5_000)
            .unwrap();
        set("cancelled");
        let again = proposal(&canon, "s2", 6_000, &ttl);
        let got = s.propose(&again, |_| v.clone()).unwrap().1;
        assert!(
            matches!(got, Proposed::Held { .. }),
            "the stopped plan's grant covered the call: {got:?}"
        );
    });
}
