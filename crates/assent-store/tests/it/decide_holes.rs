//! Attacks on deciding found by review, through the store API on both backends: a decision
//! after the deadline before the expiry sweep ran, an operator's cancel under `deny: quorum`,
//! an identical call joining an approval held under weaker terms, an in-client decision
//! on an approval held for operators, and a decision whose session took in more since it was
//! checked against it.

use super::{audit_kinds, both_stores, fresh, hold, pay, pending, proposal};
use crate::stricter::escalating;
use assent_core::ToolCall;
use assent_core::approval::{AlreadyDecided, Canceller};
use assent_core::canonical::canonical_value;
use assent_core::quorum::parse_approvers;
use assent_core::session_risk::TRIGGER_UNTRUSTED;
use assent_core::{ApprovalStatus, CanonicalCall, RiskTier};
use assent_store::{DecideError, DecisionInput, EditedCall, Proposed};
use serde_json::json;

/// The attack: an in-client approval whose default is reject has passed its deadline; the
/// sweep has not run yet, and the agent's user (or an operator) approves it. Refused as late
/// at the deadline itself, for anyone; the sweep then applies the default.
#[test]
fn a_decision_at_or_after_the_deadline_is_refused_before_the_sweep() {
    both_stores(|_, s| {
        let (call, mut v) = pay(1);
        v.terms.in_client_approval = true;
        let id = hold(s, "s1", &call, &v, 1_000, 11_000).id;
        for (actor, at) in [("user-of:bot", 11_000), ("alice", 60_000)] {
            let late = s.decide(&id, &DecisionInput::approve(), actor, &[], at);
            assert!(
                matches!(
                    late,
                    Err(DecideError::AlreadyDecided(AlreadyDecided(
                        ApprovalStatus::Expired
                    )))
                ),
                "{actor}: {late:?}"
            );
            assert_eq!(audit_kinds(s, 1), ["decision.late"]);
        }
        let deny = s.decide(&id, &DecisionInput::deny(None), "alice", &[], 11_000);
        assert!(
            matches!(deny, Err(DecideError::AlreadyDecided(_))),
            "{deny:?}"
        );
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Pending);
        assert!(s.token_string(&id).unwrap().is_none(), "no token minted");
        assert_eq!(s.expire_due(11_000).unwrap(), vec![id.clone()]);
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Expired);
        // A millisecond before the deadline a decision is on time.
        let on_time = hold(s, "s2", &call, &v, 1_000, 11_000).id;
        let rec = s
            .decide(
                &on_time,
                &DecisionInput::approve(),
                "user-of:bot",
                &[],
                10_999,
            )
            .unwrap();
        assert_eq!(rec.status, ApprovalStatus::Approved);
    });
}

/// An escalated approval's deadline is its schedule's: past its first wait (`expires_at`, the
/// step) but before the deadline, its approvers still decide; at the deadline nobody does.
#[test]
fn an_escalated_approval_is_decided_until_its_schedules_deadline() {
    both_stores(|_, s| {
        let (call, mut v) = pay(1);
        escalating(&mut v, &["finance"], (Some(100), &["lead"]), None);
        let finance = vec!["finance".to_string()];
        // Raised at 1 s, step at 101 s, deadline 50 s after it.
        let a = hold(s, "s1", &call, &v, 1_000, 51_000);
        assert_eq!((a.expires_at, a.announced_deadline()), (101_000, 151_000));
        let rec = s
            .decide(&a.id, &DecisionInput::approve(), "alice", &finance, 120_000)
            .unwrap();
        assert_eq!(rec.status, ApprovalStatus::Approved);
        let b = hold(s, "s2", &call, &v, 1_000, 51_000).id;
        let late = s.decide(&b, &DecisionInput::approve(), "alice", &finance, 151_000);
        assert!(
            matches!(late, Err(DecideError::AlreadyDecided(_))),
            "{late:?}"
        );
    });
}

/// The attack: with `deny: quorum`, one operator's deny vote leaves the approval pending; their
/// cancel must not settle it alone (refused, audited `decision.refused`). The agent's own
/// cancel stays allowed; so does an operator's under a quorum whose one deny settles, if they
/// fit one of its groups.
#[test]
fn an_operators_cancel_under_deny_quorum_is_refused() {
    both_stores(|_, s| {
        let (call, mut v) = pay(1);
        let approvers =
            parse_approvers(&json!({"roles": ["ops"], "count": 2, "deny": "quorum"})).unwrap();
        v.terms.approvers = approvers.roles;
        v.terms.quorum = approvers.quorum;
        let ops = vec!["ops".to_string()];
        let id = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        let rec = s
            .decide(&id, &DecisionInput::deny(None), "olaf", &ops, 2_000)
            .unwrap();
        assert_eq!(rec.status, ApprovalStatus::Pending);
        let olaf = Canceller::Operator {
            name: "olaf",
            roles: &ops,
        };
        let cancel = s.cancel_as(&id, &olaf, Some("no"), 3_000);
        assert!(
            matches!(cancel, Err(DecideError::NotApprover(_))),
            "{cancel:?}"
        );
        assert_eq!(audit_kinds(s, 1), ["decision.refused"]);
        assert_eq!(
            s.get_approval(&id).unwrap().unwrap().status,
            ApprovalStatus::Pending
        );
        let bot = Canceller::Agent {
            name: "bot",
            agent: "bot",
        };
        let rec = s.cancel_as(&id, &bot, None, 4_000).unwrap();
        assert_eq!(rec.status, ApprovalStatus::Cancelled);
        // `deny: any`: one operator's no settles it, so may their cancel.
        v.terms.quorum = parse_approvers(&json!({"roles": ["ops"], "count": 2}))
            .unwrap()
            .quorum;
        let other = hold(s, "s2", &call, &v, 1_000, 60_000).id;
        let rec = s.cancel_as(&other, &olaf, None, 5_000).unwrap();
        assert_eq!(rec.status, ApprovalStatus::Cancelled);
        // Found by review: approvers widened (another covering rule's escalation added
        // `intern`) beyond the quorum's groups. The intern may not vote, so may not cancel.
        v.terms.approvers = vec!["ops".into(), "intern".into()];
        let widened = hold(s, "s3", &call, &v, 1_000, 60_000).id;
        let interns = vec!["intern".to_string()];
        let ivy = Canceller::Operator {
            name: "ivy",
            roles: &interns,
        };
        let cancel = s.cancel_as(&widened, &ivy, None, 6_000);
        assert!(
            matches!(cancel, Err(DecideError::NotApprover(_))),
            "{cancel:?}"
        );
        assert_eq!(audit_kinds(s, 1), ["decision.refused"]);
        let vote = s.decide(&widened, &DecisionInput::deny(None), "ivy", &interns, 6_000);
        assert!(vote.is_err(), "{vote:?}");
        let rec = s.cancel_as(&widened, &olaf, None, 7_000).unwrap();
        assert_eq!(rec.status, ApprovalStatus::Cancelled);
    });
}

/// The attack: an in-client approval held before the session took in untrusted output; the
/// identical call proposed now (R3, `session_untrusted`, no in-client approval) is held on
/// its own, not joined to it. The same call again joins the new one.
#[test]
fn an_identical_call_does_not_join_an_approval_held_under_weaker_terms() {
    both_stores(|_, s| {
        let (call, mut v) = pay(1);
        v.terms.in_client_approval = true;
        let canon = CanonicalCall::new(call).unwrap();
        let ttl = |_: &assent_core::gatekeeper::Verdict| 60_000;
        let held = |now: i64, v: &assent_core::gatekeeper::Verdict| {
            let p = proposal(&canon, "s1", now, &ttl);
            match s.propose(&p, |_| v.clone()).unwrap().1 {
                Proposed::Held { approval, joined } => (approval.id, joined),
                other => panic!("held expected: {other:?}"),
            }
        };
        let (old, _) = held(1_000, &v);
        let mut tainted = v.clone();
        tainted.terms.in_client_approval = false;
        tainted.terms.risk_tier = RiskTier::R3;
        tainted.terms.triggers = vec![TRIGGER_UNTRUSTED.to_string()];
        let (new, joined) = held(2_000, &tainted);
        assert!(!joined && new != old, "joined the in-client approval");
        assert_eq!(held(3_000, &tainted), (new, true));
        // The untainted call still joins the oldest approval that covers it.
        assert_eq!(held(4_000, &v), (old, true));
    });
}

/// The attack (found by review): `in_client` set on a held call's row for the server's check
/// of the agent's user's decision, and put back before the store's transaction, so that the
/// user approved a call held for operators (with no approver roles, any decider's roles
/// fit), or its `agent`, so that another agent's user approved it. The store checks the row it
/// settles: a user's decision on an approval not held for in-client approval, or not their
/// agent's, is refused and audited.
#[test]
fn an_in_client_decision_is_checked_on_the_row_it_settles() {
    both_stores(|_, s| {
        let user = DecisionInput {
            in_client: Some("bot".into()),
            ..DecisionInput::approve()
        };
        let (call, v) = pay(1);
        assert!(!v.terms.in_client_approval && v.terms.approvers.is_empty());
        let id = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        let r = s.decide(&id, &user, "user-of:bot", &[], 2_000);
        assert!(matches!(r, Err(DecideError::NotApprover(_))), "{r:?}");
        assert_eq!(audit_kinds(s, 1), ["decision.refused"]);
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.status, ApprovalStatus::Pending);
        let (call, mut v) = pay(2);
        v.terms.in_client_approval = true;
        let id = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        // Another agent's user (its row's agent edited for the server's read) is refused.
        let other = DecisionInput {
            in_client: Some("mallory".into()),
            ..DecisionInput::approve()
        };
        let r = s.decide(&id, &other, "user-of:mallory", &[], 2_000);
        assert!(matches!(r, Err(DecideError::NotApprover(_))), "{r:?}");
        let rec = s.decide(&id, &user, "user-of:bot", &[], 2_000).unwrap();
        assert_eq!(rec.status, ApprovalStatus::Approved);
        // Found by review: terms holding both in-client approval and a quorum (stored before
        // the gatekeeper stopped offering such a call in the client) took the user's deny as
        // a vote, which under `deny: any` settled it. Refused, as for a passkey.
        let approvers = parse_approvers(&json!({"roles": ["ops"], "count": 2})).unwrap();
        let (call, mut v) = pay(3);
        v.terms.in_client_approval = true;
        v.terms.quorum = approvers.quorum;
        let quorum = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        let (call, mut v) = pay(4);
        v.terms.in_client_approval = true;
        v.terms.require_passkey = true;
        let passkey = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        let deny = DecisionInput {
            in_client: Some("bot".into()),
            ..DecisionInput::deny(None)
        };
        for id in [quorum, passkey] {
            let r = s.decide(&id, &deny, "user-of:bot", &[], 2_000);
            assert!(matches!(r, Err(DecideError::NotApprover(_))), "{r:?}");
            let rec = s.get_approval(&id).unwrap().unwrap();
            assert_eq!(rec.status, ApprovalStatus::Pending);
        }
    });
}

/// The attack (found by review): one due approval's `expires_at` stored as a real, or its id
/// as a blob (SQLite keeps what it is given), made every run of the expiry sweep fail — and
/// every decision and listing waits on the sweep — and every listing of approvals fail. That
/// approval is skipped; the others expire and are listed.
#[test]
fn a_row_of_the_wrong_type_does_not_stop_the_expiry_sweep() {
    let (_dir, s) = fresh();
    let (planted, _) = pending(&s, 1, 1_000, 10_000, false);
    let (blob, _) = pending(&s, 2, 1_000, 10_000, false);
    let (due, _) = pending(&s, 3, 1_000, 10_000, false);
    let db = rusqlite::Connection::open(s.db_path()).unwrap();
    let real = "UPDATE approvals SET expires_at = 0.5 WHERE id = ?1";
    db.execute(real, [&planted]).unwrap();
    db.execute(
        "UPDATE approvals SET id = CAST(id AS BLOB) WHERE id = ?1",
        [&blob],
    )
    .unwrap();
    assert_eq!(s.expire_due(20_000).unwrap(), vec![due.clone()]);
    // Nor does it fail the listings (the queue, the dashboard): it is left out of them.
    let pending = s
        .list_approvals(Some(ApprovalStatus::Pending), 100)
        .unwrap();
    assert!(pending.is_empty(), "{pending:?}");
    assert_eq!(s.list_approvals(None, 100).unwrap().len(), 1);
    let rec = s.get_approval(&due).unwrap().unwrap();
    assert_eq!(rec.status, ApprovalStatus::Expired);
    let d = s.decide(&due, &DecisionInput::approve(), "alice", &[], 20_001);
    assert!(matches!(d, Err(DecideError::AlreadyDecided(_))), "{d:?}");
    // `audit verify`'s cross-check names the planted row and goes on (it stopped at it).
    let found = assent_store::integrity::cross_check(&db).unwrap();
    let damaged: Vec<&String> = found
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.contains("is damaged: column"))
        .collect();
    assert_eq!(damaged.len(), 1, "{found:?}");
    assert!(damaged[0].contains(&planted), "{found:?}");
    assert!(
        found.iter().any(|(_, m)| m.contains(&blob)),
        "the blob id's row is named too: {found:?}"
    );
}

/// The attack (found by review): the server builds an operator's edit from its own read of
/// the approval, before the decision's transaction; a tool swapped in the database for that
/// read had the token minted for the edit's hash — a call of another tool than the one held.
/// The store refuses an edit that is not the held call's tool and server.
#[test]
fn an_edit_of_another_tool_than_the_held_one_is_refused() {
    both_stores(|_, s| {
        let (call, v) = pay(1);
        let id = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        let arguments = json!({"amount": 1});
        let swapped = ToolCall::new("drop_database", None, arguments.clone()).unwrap();
        let (canonical, call_hash) = swapped.canonical_and_hash().unwrap();
        let edit = |canonical: String, call_hash: String| DecisionInput {
            edited: Some(EditedCall {
                canonical_arguments: canonical_value(&arguments).unwrap(),
                arguments: arguments.clone(),
                canonical,
                call_hash,
            }),
            ..DecisionInput::approve()
        };
        let r = s.decide(&id, &edit(canonical, call_hash), "alice", &[], 2_000);
        assert!(matches!(r, Err(DecideError::Invalid(_))), "{r:?}");
        assert!(s.token_string(&id).unwrap().is_none());
        let held = ToolCall::new("pay", None, arguments.clone()).unwrap();
        let (canonical, call_hash) = held.canonical_and_hash().unwrap();
        let rec = s.decide(&id, &edit(canonical, call_hash), "alice", &[], 2_000);
        assert_eq!(rec.unwrap().status, ApprovalStatus::Approved);
    });
}

/// The attack (found by review): an AAEP reply names its approval by the reply token alone;
/// the server looks the approval up by it, then decides in another transaction. A token moved
/// onto another pending call for that look-up, and put back before the decision, had the
/// reply approve that call. The store checks the token on the row it settles.
#[test]
fn a_reply_is_taken_only_on_the_approval_its_token_names() {
    both_stores(|_, s| {
        let (call, v) = pay(1);
        let rec = hold(s, "s1", &call, &v, 1_000, 60_000);
        let (call, v) = pay(2);
        let other = hold(s, "s1", &call, &v, 1_000, 60_000);
        let reply = |t: &Option<String>| DecisionInput {
            reply_token: t.clone(),
            ..DecisionInput::approve()
        };
        let r = s.decide(&rec.id, &reply(&other.reply_token), "alice", &[], 2_000);
        assert!(
            matches!(&r, Err(DecideError::Damaged(c)) if c == &["reply_token"]),
            "{r:?}"
        );
        assert_eq!(audit_kinds(s, 1), ["decision.refused"]);
        let r = s.decide(&rec.id, &reply(&rec.reply_token), "alice", &[], 2_000);
        assert_eq!(r.unwrap().status, ApprovalStatus::Approved);
    });
}

/// The attack (found by review): the server re-gates an agent's user's in-client approval, or
/// an operator's edit, against what the held call's session has taken in, then writes the
/// decision; a `POST /v1/tool-results` of untrusted output landing between the two raised the
/// session's risk, and the decision committed anyway. The state the check read travels with the
/// decision (`session_seen`) and the store reads it again under the write lock: moved since,
/// the decision is refused (`SessionChanged`, audited), nothing approved, no token minted. A
/// session merely beginning in between does not move it.
#[test]
fn a_decision_checked_against_a_session_that_took_in_more_since_is_refused() {
    use assent_core::VerdictKind;
    use assent_core::session_risk::Effects;
    both_stores(|_, s| {
        let (call, mut v) = pay(1);
        v.terms.in_client_approval = true;
        let run = |session: &str, effects: Effects, now: i64| {
            crate::gate_observed(s, session, ("fetch", effects), VerdictKind::Allow, now, 1);
        };
        let refused = |id: &str, d: &DecisionInput, actor: &str| {
            let r = s.decide(id, d, actor, &[], 3_000);
            assert!(matches!(r, Err(DecideError::SessionChanged)), "{r:?}");
            assert_eq!(audit_kinds(s, 1), ["decision.refused"]);
            let rec = s.get_approval(id).unwrap().unwrap();
            assert_eq!(rec.status, ApprovalStatus::Pending);
            assert!(s.token_string(id).unwrap().is_none(), "no token minted");
        };
        // The user's approval in the client: read, untrusted output taken in, then the write.
        let id = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        let seen = s.session_risk("bot", "s1", &call).unwrap();
        let untrusted = Effects {
            untrusted_output: true,
            ..Effects::default()
        };
        run("s1", untrusted, 2_000);
        let user = |seen| DecisionInput {
            in_client: Some("bot".into()),
            session_seen: Some(seen),
            ..DecisionInput::approve()
        };
        refused(&id, &user(seen), "user-of:bot");
        // Checked against the state as it is now, the decision is taken.
        let now = s.session_risk("bot", "s1", &call).unwrap();
        let rec = s
            .decide(&id, &user(now), "user-of:bot", &[], 3_000)
            .unwrap();
        assert_eq!(rec.status, ApprovalStatus::Approved);

        // An operator's edit: read, private data taken in, then the write.
        let id = hold(s, "s2", &call, &v, 1_000, 60_000).id;
        let seen = s.session_risk("bot", "s2", &call).unwrap();
        let private = Effects {
            private_data: true,
            ..Effects::default()
        };
        run("s2", private, 2_000);
        let arguments = json!({"amount": 1});
        let edited = ToolCall::new("pay", None, arguments.clone()).unwrap();
        let (canonical, call_hash) = edited.canonical_and_hash().unwrap();
        let edit = DecisionInput {
            edited: Some(EditedCall {
                canonical_arguments: canonical_value(&arguments).unwrap(),
                arguments,
                canonical,
                call_hash,
            }),
            session_seen: Some(seen),
            ..DecisionInput::approve()
        };
        refused(&id, &edit, "alice");

        // A session that merely began (a call without effects ran) has not moved.
        let id = hold(s, "s3", &call, &v, 1_000, 60_000).id;
        let seen = s.session_risk("bot", "s3", &call).unwrap();
        run("s3", Effects::default(), 2_000);
        let rec = s
            .decide(&id, &user(seen), "user-of:bot", &[], 3_000)
            .unwrap();
        assert_eq!(rec.status, ApprovalStatus::Approved);
    });
}

/// The attack (found by review): an operator's edit was checked against the agent's cost and
/// rate windows as read before the decision's write; a call of the agent committing in between
/// (allowed by the total that still held the edit's old amount) took the session past its
/// threshold, and no one was asked. How many calls the agent had made lately travels with the
/// decision (`calls_seen`) and the store counts again under the write lock: more since, the
/// decision is refused (`SessionChanged`, audited); counted again, it is taken.
#[test]
fn a_decision_checked_against_calls_the_agent_has_added_to_since_is_refused() {
    use assent_core::VerdictKind;
    use assent_core::session_risk::Effects;
    use assent_core::triggers::window::WindowNeeds;
    both_stores(|_, s| {
        let (call, v) = pay(1);
        let id = hold(s, "s1", &call, &v, 1_000, 60_000).id;
        let other = hold(s, "s1", &pay(2).0, &pay(2).1, 1_000, 60_000).id;
        let none = WindowNeeds::default();
        let seen = |now| {
            s.edit_observations(("bot", "s1"), Some(&id), &call, (&none, &none), now)
                .unwrap()
                .calls
        };
        let run = |session: &str, now| {
            let fetch = ("fetch", Effects::default());
            crate::gate_observed(s, session, fetch, VerdictKind::Allow, now, 1);
        };
        let with = |calls| DecisionInput {
            calls_seen: Some(calls),
            ..DecisionInput::approve()
        };
        let refused = |calls| {
            let r = s.decide(&id, &with(calls), "alice", &[], 3_000);
            assert!(matches!(r, Err(DecideError::SessionChanged)), "{r:?}");
            assert_eq!(audit_kinds(s, 1), ["decision.refused"]);
        };
        // A call of the session since: refused.
        let before = seen(2_000);
        run("s1", 2_500);
        refused(before);
        // Another of its approvals decided since (an edit changes what a call counts for
        // without adding one): refused.
        let before = seen(2_600);
        s.decide(&other, &DecisionInput::approve(), "bob", &[], 2_700)
            .unwrap();
        refused(before);
        // A call in another session, when no rule counts per agent: not in its windows.
        let before = seen(2_800);
        run("s9", 2_900);
        let rec = s.decide(&id, &with(before), "alice", &[], 3_000).unwrap();
        assert_eq!(rec.status, ApprovalStatus::Approved);
    });
}
