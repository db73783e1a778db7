//! Attack (issue 14, found by review): a grant or a pending approval made while the rules
//! asked for less must not stand in for what they ask after a reload — a call that now needs a
//! passkey-signed approval or a quorum is held on its own, not let through by the session
//! grant, and does not join the pending approval held under the weaker terms; nor is a call
//! whose approvers, tier or separation of duties a reload tightened.

use super::{fresh, pay, proposal};
use assent_core::CanonicalCall;
use assent_core::approval::GrantScope;
use assent_core::gatekeeper::Verdict;
use assent_store::{ApprovalRecord, DecisionInput, Proposed, Store};

/// `canon` under verdict `v`, proposed by `bot` in session `s1` at 1 s (a held call waits
/// `ttl`): its approval, which must be held.
#[track_caller]
fn held_at_1s(
    s: &Store,
    canon: &CanonicalCall,
    v: &Verdict,
    ttl: &dyn Fn(&Verdict) -> i64,
) -> ApprovalRecord {
    let p = proposal(canon, "s1", 1_000, ttl);
    let Proposed::Held { approval, .. } = s.propose(&p, |_| v.clone()).unwrap().1 else {
        panic!("held expected")
    };
    *approval
}

/// Sets `v`'s approvers to `first` and its escalation to one step adding `then` after `after`
/// seconds (`None`: at the approval's timeout), the last wait `last_wait` seconds.
pub(crate) fn escalating(
    v: &mut Verdict,
    first: &[&str],
    (after, then): (Option<u64>, &[&str]),
    last_wait: Option<u64>,
) {
    let names = |r: &[&str]| r.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    v.terms.approvers = names(first);
    v.terms.escalation = Some(assent_core::triggers::Escalation {
        steps: vec![assent_core::triggers::EscalationStep {
            after_seconds: after,
            approvers: names(then),
        }],
        last_wait_seconds: last_wait,
    });
}

/// Approval `id` approved at `at` by `who` holding `roles`, with a grant of `scope`.
fn approve_with_grant(s: &Store, id: &str, scope: GrantScope, who: &str, roles: &[&str], at: i64) {
    let input = DecisionInput {
        scope,
        ..DecisionInput::approve()
    };
    let roles: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
    s.decide(id, &input, who, &roles, at).unwrap();
}

#[test]
fn a_grant_or_a_weaker_pending_approval_does_not_cover_a_call_that_now_needs_a_passkey() {
    let (_dir, s) = fresh();
    let (call, v) = pay(5);
    let canon = CanonicalCall::new(call.clone()).unwrap();
    let ttl = |_: &Verdict| 60_000;
    let approval = held_at_1s(&s, &canon, &v, &ttl);
    approve_with_grant(&s, &approval.id, GrantScope::Session, "alice", &[], 2_000);
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
    let ttl = |_: &Verdict| 60_000;
    let approval = held_at_1s(&s, &canon, &v, &ttl);
    approve_with_grant(
        &s,
        &approval.id,
        GrantScope::Workspace,
        "olaf",
        &["ops"],
        2_000,
    );
    let mut at = 3_000;
    let mut propose = |verdict: &Verdict| {
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
    let (_dir, s) = fresh();
    let (call, mut v) = pay(5);
    escalating(&mut v, &["ops"], (Some(10), &["security"]), None);
    let canon = CanonicalCall::new(call).unwrap();
    let ttl = |_: &Verdict| 60_000;
    let approval = held_at_1s(&s, &canon, &v, &ttl);
    assert_eq!(s.expire_due(11_000).unwrap(), vec![approval.id.clone()]);
    let scope = GrantScope::Workspace;
    approve_with_grant(&s, &approval.id, scope, "sam", &["security"], 12_000);
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
    escalating(
        &mut later,
        &["cfo"],
        (Some(86_400), &["ops", "security"]),
        None,
    );
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
    let (_dir, s) = fresh();
    let (call, mut v) = pay(5);
    escalating(&mut v, &["cfo"], (None, &["ops"]), Some(600));
    let canon = CanonicalCall::new(call).unwrap();
    let five_minutes = |_: &Verdict| 300_000;
    let a_day = |_: &Verdict| 86_400_000;
    let approval = held_at_1s(&s, &canon, &v, &five_minutes);
    assert_eq!(s.expire_due(301_000).unwrap(), vec![approval.id.clone()]);
    let scope = GrantScope::Workspace;
    approve_with_grant(&s, &approval.id, scope, "olaf", &["ops"], 302_000);
    let p = proposal(&canon, "s2", 303_000, &five_minutes);
    let same = s.propose(&p, |_| v.clone()).unwrap().1;
    assert!(matches!(same, Proposed::Granted(_)), "{same:?}");
    let p = proposal(&canon, "s3", 304_000, &a_day);
    let later = s.propose(&p, |_| v.clone()).unwrap().1;
    assert!(matches!(later, Proposed::Held { .. }), "{later:?}");
    // An AAEP subscriber's timeout extension lengthens the wait, not the rules: still covered.
    let extended = |_: &Verdict| 420_000;
    let p = assent_store::Proposal {
        extension_ms: 120_000,
        ..proposal(&canon, "s4", 305_000, &extended)
    };
    let got = s.propose(&p, |_| v.clone()).unwrap().1;
    assert!(matches!(got, Proposed::Granted(_)), "{got:?}");
}
