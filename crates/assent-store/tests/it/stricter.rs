//! Attack (issue 14, found by review): a grant or a pending approval made while the rules
//! asked for less must not stand in for what they ask after a reload — a call that now needs a
//! passkey-signed approval or a quorum is held on its own, not let through by the session
//! grant, and does not join the pending approval held under the weaker terms; nor is a call
//! whose approvers, tier or separation of duties a reload tightened.

use super::{fresh, pay, proposal};
use assent_core::CanonicalCall;
use assent_core::approval::GrantScope;
use assent_store::{DecisionInput, Proposed};

#[test]
fn a_grant_or_a_weaker_pending_approval_does_not_cover_a_call_that_now_needs_a_passkey() {
    let (_dir, s) = fresh();
    let (call, v) = pay(5);
    let canon = CanonicalCall::new(call.clone()).unwrap();
    let ttl = |_: &assent_core::gatekeeper::Verdict| 60_000;
    let p = proposal(&canon, "s1", 1_000, &ttl);
    let (_, held) = s.propose(&p, |_| v.clone()).unwrap();
    let Proposed::Held { approval, .. } = held else {
        panic!("held expected")
    };
    let session = DecisionInput {
        scope: GrantScope::Session,
        ..DecisionInput::approve()
    };
    s.decide(&approval.id, &session, "alice", &[], 2_000)
        .unwrap();
    // The session grant covers the same call under the same rules ...
    let p = proposal(&canon, "s1", 3_000, &ttl);
    let (_, again) = s.propose(&p, |_| v.clone()).unwrap();
    assert!(matches!(again, Proposed::Granted(_)), "{again:?}");
    // ... but not once the rules ask for a passkey (or a quorum).
    let mut strict = v.clone();
    strict.terms.require_passkey = true;
    let p = proposal(&canon, "s1", 4_000, &ttl);
    let (_, now) = s.propose(&p, |_| strict.clone()).unwrap();
    let Proposed::Held {
        approval: first,
        joined,
    } = now
    else {
        panic!("held expected: {now:?}")
    };
    assert!(!joined && first.terms.require_passkey);
    let mut quorum = v.clone();
    quorum.terms.quorum = assent_core::quorum::parse_approvers(&serde_json::json!({"count": 2}))
        .unwrap()
        .quorum;
    let p = proposal(&canon, "s1", 5_000, &ttl);
    let (_, q) = s.propose(&p, |_| quorum.clone()).unwrap();
    assert!(matches!(q, Proposed::Held { joined: false, .. }), "{q:?}");
    // A pending approval held under weaker terms is not joined by the stricter call.
    let (other, weak) = pay(7);
    let canon = CanonicalCall::new(other).unwrap();
    let p = proposal(&canon, "s2", 6_000, &ttl);
    let (_, w) = s.propose(&p, |_| weak.clone()).unwrap();
    let Proposed::Held {
        approval: weak_held,
        ..
    } = w
    else {
        panic!("held expected")
    };
    let mut strict = weak.clone();
    strict.terms.require_passkey = true;
    let p = proposal(&canon, "s2", 7_000, &ttl);
    let (_, st) = s.propose(&p, |_| strict.clone()).unwrap();
    let Proposed::Held { approval, joined } = st else {
        panic!("held expected")
    };
    assert!(!joined && approval.id != weak_held.id && approval.terms.require_passkey);
    // The same stricter call again joins the stricter one.
    let p = proposal(&canon, "s2", 8_000, &ttl);
    let (_, j) = s.propose(&p, |_| strict.clone()).unwrap();
    assert!(
        matches!(&j, Proposed::Held { joined: true, approval: a } if a.id == approval.id),
        "{j:?}"
    );
}

/// Attack (found by review): a workspace grant an `ops` operator made kept covering the tool
/// after a reload asked for `security`, turned on separation of duties or raised the tier —
/// the policy tightened, and the calls it already covered ran without the people it now
/// names. A grant stands in only for what the approval it came from was held under, on every
/// axis a joining call is compared on ([`assent_core::grant::origin_covers`]).
#[test]
fn a_grant_does_not_cover_a_call_whose_approvers_tier_or_duties_a_reload_tightened() {
    let (_dir, s) = fresh();
    let (call, mut v) = pay(5);
    v.terms.approvers = vec!["ops".into()];
    let canon = CanonicalCall::new(call).unwrap();
    let ttl = |_: &assent_core::gatekeeper::Verdict| 60_000;
    let p = proposal(&canon, "s1", 1_000, &ttl);
    let (_, held) = s.propose(&p, |_| v.clone()).unwrap();
    let Proposed::Held { approval, .. } = held else {
        panic!("held expected")
    };
    let workspace = DecisionInput {
        scope: GrantScope::Workspace,
        ..DecisionInput::approve()
    };
    s.decide(&approval.id, &workspace, "olaf", &["ops".into()], 2_000)
        .unwrap();
    let mut at = 3_000;
    let mut propose = |verdict: &assent_core::gatekeeper::Verdict| {
        at += 1_000;
        let p = proposal(&canon, "s2", at, &ttl);
        s.propose(&p, |_| verdict.clone()).unwrap().1
    };
    // The same rules: the grant covers the call.
    let same = propose(&v);
    assert!(matches!(same, Proposed::Granted(_)), "{same:?}");
    let mut security = v.clone();
    security.terms.approvers = vec!["security".into()];
    let mut duties = v.clone();
    duties.terms.separation_of_duties = true;
    let mut higher = v.clone();
    higher.terms.risk_tier = assent_core::RiskTier::R3;
    for (what, tightened) in [
        ("approvers", security),
        ("duties", duties),
        ("tier", higher),
    ] {
        let got = propose(&tightened);
        assert!(
            matches!(got, Proposed::Held { .. }),
            "{what}: the grant no longer stands in: {got:?}"
        );
    }
}

/// The rule above keeps grants of the same rules standing: one made by a role that joined at
/// an escalation step (its approval's stored approvers widened) covers the next call held
/// under the same schedule (found by review of the rule: its first form compared the widened
/// approvers with the new call's first ones and refused every such grant), but not once a
/// reload drops the escalation role.
#[test]
fn a_grant_made_after_an_escalation_step_covers_the_same_rules_calls() {
    use assent_core::triggers::{Escalation, EscalationStep};
    let (_dir, s) = fresh();
    let (call, mut v) = pay(5);
    v.terms.approvers = vec!["ops".into()];
    v.terms.escalation = Some(Escalation {
        steps: vec![EscalationStep {
            after_seconds: Some(10),
            approvers: vec!["security".into()],
        }],
        last_wait_seconds: None,
    });
    let canon = CanonicalCall::new(call).unwrap();
    let ttl = |_: &assent_core::gatekeeper::Verdict| 60_000;
    let p = proposal(&canon, "s1", 1_000, &ttl);
    let Proposed::Held { approval, .. } = s.propose(&p, |_| v.clone()).unwrap().1 else {
        panic!("held expected")
    };
    assert_eq!(s.expire_due(11_000).unwrap(), vec![approval.id.clone()]);
    let workspace = DecisionInput {
        scope: GrantScope::Workspace,
        ..DecisionInput::approve()
    };
    s.decide(
        &approval.id,
        &workspace,
        "sam",
        &["security".into()],
        12_000,
    )
    .unwrap();
    let p = proposal(&canon, "s2", 13_000, &ttl);
    let again = s.propose(&p, |_| v.clone()).unwrap().1;
    assert!(matches!(again, Proposed::Granted(_)), "{again:?}");
    let mut dropped = v.clone();
    dropped.terms.escalation = None;
    let p = proposal(&canon, "s3", 14_000, &ttl);
    let now = s.propose(&p, |_| dropped.clone()).unwrap().1;
    assert!(matches!(now, Proposed::Held { .. }), "{now:?}");
    // Security sooner than before: still covered.
    let mut sooner = v.clone();
    sooner.terms.escalation.as_mut().unwrap().steps[0].after_seconds = Some(5);
    let p = proposal(&canon, "s4", 15_000, &ttl);
    let got = s.propose(&p, |_| sooner.clone()).unwrap().1;
    assert!(matches!(got, Proposed::Granted(_)), "{got:?}");
    // Found by review of the rule: `cfo` alone for a day, `ops` and `security` after. Ops
    // could decide the grant's approval at once; under these rules not for a day: held.
    let mut later = v.clone();
    later.terms.approvers = vec!["cfo".into()];
    later.terms.escalation = Some(Escalation {
        steps: vec![EscalationStep {
            after_seconds: Some(86_400),
            approvers: vec!["ops".into(), "security".into()],
        }],
        last_wait_seconds: None,
    });
    let p = proposal(&canon, "s5", 16_000, &ttl);
    let got = s.propose(&p, |_| later.clone()).unwrap().1;
    assert!(matches!(got, Proposed::Held { .. }), "{got:?}");
}

/// Found by review of the rule above: an `on_timeout` step (at the approval's timeout, not
/// at a fixed time) compared as "never" on both sides, so a grant ops made after a 5-minute
/// timeout kept covering calls whose rules a reload gave a day's timeout before ops. Its
/// time is taken from the approval's stored schedule and the new call's timeout.
#[test]
fn a_grant_made_at_an_on_timeout_step_does_not_cover_a_call_with_a_longer_timeout() {
    use assent_core::triggers::{Escalation, EscalationStep};
    let (_dir, s) = fresh();
    let (call, mut v) = pay(5);
    v.terms.approvers = vec!["cfo".into()];
    v.terms.escalation = Some(Escalation {
        steps: vec![EscalationStep {
            after_seconds: None,
            approvers: vec!["ops".into()],
        }],
        last_wait_seconds: Some(600),
    });
    let canon = CanonicalCall::new(call).unwrap();
    let five_minutes = |_: &assent_core::gatekeeper::Verdict| 300_000;
    let a_day = |_: &assent_core::gatekeeper::Verdict| 86_400_000;
    let p = proposal(&canon, "s1", 1_000, &five_minutes);
    let Proposed::Held { approval, .. } = s.propose(&p, |_| v.clone()).unwrap().1 else {
        panic!("held expected")
    };
    assert_eq!(s.expire_due(301_000).unwrap(), vec![approval.id.clone()]);
    let workspace = DecisionInput {
        scope: GrantScope::Workspace,
        ..DecisionInput::approve()
    };
    s.decide(&approval.id, &workspace, "olaf", &["ops".into()], 302_000)
        .unwrap();
    let p = proposal(&canon, "s2", 303_000, &five_minutes);
    let same = s.propose(&p, |_| v.clone()).unwrap().1;
    assert!(matches!(same, Proposed::Granted(_)), "{same:?}");
    let p = proposal(&canon, "s3", 304_000, &a_day);
    let later = s.propose(&p, |_| v.clone()).unwrap().1;
    assert!(matches!(later, Proposed::Held { .. }), "{later:?}");
    // An AAEP subscriber's timeout extension lengthens the wait, not the rules: still covered.
    let extended = |_: &assent_core::gatekeeper::Verdict| 420_000;
    let p = assent_store::Proposal {
        extension_ms: 120_000,
        ..proposal(&canon, "s4", 305_000, &extended)
    };
    let got = s.propose(&p, |_| v.clone()).unwrap().1;
    assert!(matches!(got, Proposed::Granted(_)), "{got:?}");
}
