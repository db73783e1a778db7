//! The session state of issue 16 §3 as the store keeps it, on both backends: a session begins
//! and is marked only when a call may run (allowed, or its held approval's token redeemed),
//! the first mark of each kind stays, a denied or rejected call marks nothing, and sessions
//! do not share marks.

use crate::both_stores;
use assent_core::VerdictKind;
use assent_core::session_risk::{Effects, SessionRisk};
use assent_store::{DecisionInput, Proposed, Store};

const T0: i64 = 1_800_000_000_000;

/// What a proposal of `tool` in `session` at `now` observes; the verdict is `kind` and the
/// call's effects `effects`. Returns the observed state and the outcome.
fn gate(
    s: &Store,
    session: &str,
    tool: &str,
    effects: Effects,
    kind: VerdictKind,
    now: i64,
) -> (SessionRisk, Proposed) {
    crate::gate_observed(s, session, (tool, effects), kind, now, 30_000)
}

/// What a harmless call in `session` at `now` observes (it is denied, so it marks nothing).
fn look(s: &Store, session: &str, now: i64) -> SessionRisk {
    gate(
        s,
        session,
        "look",
        Effects::default(),
        VerdictKind::Deny,
        now,
    )
    .0
}

fn untrusted() -> Effects {
    Effects {
        untrusted_output: true,
        ..Effects::default()
    }
}

#[test]
fn a_session_is_marked_when_a_call_may_run_and_its_first_mark_stays() {
    both_stores(|_, s| {
        // Denied: no beginning, no mark.
        gate(s, "a", "fetch", untrusted(), VerdictKind::Deny, T0);
        assert_eq!(look(s, "a", T0 + 1), SessionRisk::CLEAN);
        // Allowed: the session begins and takes the mark.
        gate(s, "a", "fetch", untrusted(), VerdictKind::Allow, T0 + 10);
        gate(s, "a", "browse", untrusted(), VerdictKind::Allow, T0 + 20);
        let seen = look(s, "a", T0 + 30);
        assert_eq!(seen.began_ms, Some(T0 + 10));
        let m = seen.untrusted.expect("marked");
        assert_eq!((m.tool.as_str(), m.at_ms), ("fetch", T0 + 10));
        assert!(seen.private_data.is_none() && seen.egress.is_none());
        // A call without effects begins a session but marks nothing.
        gate(
            s,
            "b",
            "plain",
            Effects::default(),
            VerdictKind::Allow,
            T0 + 40,
        );
        let b = look(s, "b", T0 + 50);
        assert_eq!(b.began_ms, Some(T0 + 40));
        assert!(b.untrusted.is_none());
        // Another session is untouched.
        assert_eq!(look(s, "c", T0 + 60), SessionRisk::CLEAN);
    });
}

#[test]
fn a_held_call_marks_its_session_when_its_token_is_redeemed_and_a_rejected_one_never() {
    both_stores(|_, s| {
        let private = Effects {
            private_data: true,
            ..Effects::default()
        };
        let id = |o: Proposed| match o {
            Proposed::Held { approval, .. } => approval,
            o => panic!("not held: {o:?}"),
        };
        let held = id(gate(s, "h", "read_inbox", private, VerdictKind::Confirm, T0).1);
        assert_eq!(
            look(s, "h", T0 + 1).private_data,
            None,
            "waiting marks nothing"
        );
        s.decide(&held.id, &DecisionInput::approve(), "op", &[], T0 + 2)
            .unwrap();
        assert_eq!(
            look(s, "h", T0 + 3).private_data,
            None,
            "approved, not yet run"
        );
        let token = s.token_string(&held.id).unwrap().expect("minted");
        s.redeem(&token, "bot", &held.call_hash, None, T0 + 4)
            .unwrap();
        let seen = look(s, "h", T0 + 5);
        assert_eq!(seen.began_ms, Some(T0 + 4));
        assert_eq!(seen.private_data.map(|m| m.tool), Some("read_inbox".into()));

        let held = id(gate(s, "r", "read_inbox", private, VerdictKind::Confirm, T0).1);
        s.decide(
            &held.id,
            &DecisionInput::deny(Some("no")),
            "op",
            &[],
            T0 + 2,
        )
        .unwrap();
        assert_eq!(look(s, "r", T0 + 3), SessionRisk::CLEAN);
    });
}

/// Review finding: the expiry sweep reads a held call's session to refuse its approving
/// default when the session took in more since it was held; a session record too damaged to
/// read (a mark's time written as text behind the gateway's back) made the sweep skip the
/// approval as a damaged row on every pass, so it stayed pending past its deadline for ever,
/// undecidable by anyone. Unreadable counts as having taken in: rejected at its timeout.
/// SQLite (the edit is made with rusqlite on the file).
#[test]
fn an_unreadable_session_record_rejects_an_approving_default_instead_of_stalling_it() {
    let (_dir, s) = crate::fresh();
    gate(&s, "s1", "fetch", untrusted(), VerdictKind::Allow, 500);
    let (id, _) = crate::pending(&s, 5, 1_000, 1_000, true);
    let db = rusqlite::Connection::open(s.db_path()).unwrap();
    db.execute("UPDATE session_risk SET untrusted_at = 'garbage'", [])
        .unwrap();
    let done = s.expire_due(5_000).unwrap();
    assert_eq!(done, std::slice::from_ref(&id), "settled, not skipped");
    let rec = s.get_approval(&id).unwrap().unwrap();
    assert_eq!(rec.status, assent_core::ApprovalStatus::Expired);
    let last = rec.decisions.last().unwrap();
    assert_eq!(
        last.default_applied,
        Some(assent_core::DefaultDecision::Reject),
        "{rec:?}"
    );
    assert!(s.token_string(&id).unwrap().is_none(), "no token minted");
}
