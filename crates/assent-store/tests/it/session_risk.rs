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
