//! Unit tests of the approval seal's forms (`approval_seal.rs`).

use super::*;
use crate::seal::Sealed;

fn terms<'a>(approvers: &'a str, expires_at: i64) -> Terms<'a> {
    Terms {
        id: "a1",
        agent: "bot",
        session_id: "s1",
        device_id: None,
        call_hash: "ab",
        canonical: "{}",
        risk_tier: "R2",
        irreversible: false,
        default_decision: "reject",
        quorum: None,
        require_passkey: false,
        separation_of_duties: false,
        in_client: false,
        on_behalf_of: None,
        target_type: "other",
        target_id: "t1",
        requested_at: 1,
        reply_token: Some("rpl_a"),
        governance: (None, None),
        plan: (None, None, None),
        shown: Shown {
            message: Some("Delete the production database?"),
            human_summary: Some("drop_database(name = \"prod\")"),
            side_effects: Some(r#"["Deletes every table of prod"]"#),
            ..Shown::default()
        },
        standing: Standing {
            approvers,
            expires_at,
            escalate_to: "[]",
            escalate_after_ms: None,
            escalated_at: None,
            escalation: None,
            escalation_schedule: None,
            escalation_steps: 0,
        },
    }
}

#[test]
fn the_seal_covers_the_terms_and_who_may_decide_and_when() {
    let key = SealKey::of(
        &ed25519_dalek::SigningKey::from_bytes(&[3; 32]),
        Sealed::Approval,
    );
    let held = terms(r#"["finance"]"#, 100);
    let seal = held.seal(&key);
    assert!(held.sealed_by(&key, &seal));
    assert!(!terms(r#"["finance","ops"]"#, 100).sealed_by(&key, &seal));
    assert!(!terms(r#"["finance"]"#, 99).sealed_by(&key, &seal));
    let mut edited = terms(r#"["finance"]"#, 100);
    edited.default_decision = "approve";
    assert!(!edited.sealed_by(&key, &seal));
    let mut stepped = terms(r#"["finance"]"#, 100);
    stepped.standing.escalation_steps = 1;
    assert!(!stepped.sealed_by(&key, &seal));
    let mut moved = terms(r#"["finance"]"#, 100);
    moved.reply_token = Some("rpl_b");
    assert!(!moved.sealed_by(&key, &seal));
}

/// The governance a call was held under (the policies its receipt names) is sealed with
/// it since migration 0035 (found by review: it was unsealed, so a pending call's policies
/// edited in the database were signed into its receipt); a seal of 0034's form still lets
/// a call held before be decided, and vouches for no receipt.
#[test]
fn the_governance_is_sealed_and_an_older_seal_serves_deciding_only() {
    let key = SealKey::of(
        &ed25519_dalek::SigningKey::from_bytes(&[3; 32]),
        Sealed::Approval,
    );
    let mut t = terms(r#"["finance"]"#, 100);
    t.governance = (Some(r#"["payments"]"#), Some("ab"));
    let seal = t.seal(&key);
    assert!(t.sealed_by(&key, &seal) && t.form_held(&key, &seal) == Some(Form::Plan));
    let mut edited = terms(r#"["finance"]"#, 100);
    edited.governance = (Some(r#"["other"]"#), Some("ab"));
    assert!(!edited.sealed_by(&key, &seal) && edited.form_held(&key, &seal).is_none());
    let old = key.seal(&t.columns_0034());
    assert!(t.form_held(&key, &old) == Some(Form::Standing) && !t.sealed_by(&key, &old));
    let mut moved = terms(r#"["finance"]"#, 100);
    moved.risk_tier = "R1";
    assert!(moved.form_held(&key, &old).is_none());
}

/// Found by review: an escalation step sealed the row anew in today's form over the
/// governance as read then, vouching for policies edited behind the gateway's back (of a
/// call sealed before migration 0035, or between the check and the new seal). The new
/// seal keeps the form that held and the governance that was checked.
#[test]
fn an_escalations_new_seal_keeps_the_form_and_governance_that_held() {
    let key = SealKey::of(
        &ed25519_dalek::SigningKey::from_bytes(&[3; 32]),
        Sealed::Approval,
    );
    let mut stepped = terms(r#"["finance","lead"]"#, 300);
    stepped.governance = (Some(r#"["forged"]"#), None);
    let old = Holding {
        form: Form::Standing,
        governance: (None, None),
        plan: (None, None, None),
        agent: String::new(),
    };
    let seal = old.seal_of(&stepped, &key);
    assert!(stepped.form_held(&key, &seal).is_some());
    assert!(!stepped.sealed_by(&key, &seal), "vouches for no receipt");
    let checked = Holding {
        form: Form::Shown,
        governance: (Some(r#"["payments"]"#.into()), Some("ab".into())),
        plan: (None, None, None),
        agent: String::new(),
    };
    let seal = checked.seal_of(&stepped, &key);
    assert!(
        !stepped.sealed_by(&key, &seal),
        "the forged governance is not sealed"
    );
    let mut genuine = stepped;
    genuine.governance = (Some(r#"["payments"]"#), Some("ab"));
    assert!(genuine.sealed_by(&key, &seal));
}

/// Found by review: what an approver is shown beside the call (its message, summary, side
/// effects…) was not sealed, so a database writer made a held destructive call read as a
/// harmless one on the card. Today's seal covers it; a seal of migration 0035's form (a
/// call held before) still serves deciding and its receipt.
#[test]
fn what_an_approver_is_shown_is_sealed_and_a_0035_seal_still_serves() {
    let key = SealKey::of(
        &ed25519_dalek::SigningKey::from_bytes(&[3; 32]),
        Sealed::Approval,
    );
    let t = terms(r#"["finance"]"#, 100);
    let seal = t.seal(&key);
    let edits: [fn(&mut Shown<'_>); 4] = [
        |v| v.message = Some("Run the test suite?"),
        |v| v.human_summary = Some("run_tests()"),
        |v| v.side_effects = Some("[]"),
        |v| v.dry_run_tool = Some("drop_database"),
    ];
    for edit in edits {
        let mut edited = t;
        edit(&mut edited.shown);
        assert!(edited.form_held(&key, &seal).is_none());
    }
    let before = key.seal(&t.columns_0035());
    assert_eq!(t.form_held(&key, &before), Some(Form::Governance));
    assert!(t.sealed_by(&key, &before), "its receipt still holds");
    let stepped = Holding {
        form: Form::Governance,
        governance: (None, None),
        plan: (None, None, None),
        agent: String::new(),
    };
    let again = stepped.seal_of(&t, &key);
    assert_eq!(t.form_held(&key, &again), Some(Form::Governance));
}

/// Found by review: the plan ids recorded with a held call (by which a plan's stop reaches
/// the call and its token) were not sealed, so clearing `plan_id` or `plan_owner` on one
/// approval released its token from the plan's stop. Today's seal covers them; a seal of
/// the form before (a call held before migration 0058) still serves.
#[test]
fn the_plan_ids_recorded_with_a_call_are_sealed_and_an_earlier_seal_still_serves() {
    let key = SealKey::of(
        &ed25519_dalek::SigningKey::from_bytes(&[3; 32]),
        Sealed::Approval,
    );
    let mut t = terms(r#"["finance"]"#, 100);
    t.plan = (Some("p1"), Some("s1"), Some("bot"));
    let seal = t.seal(&key);
    assert_eq!(t.form_held(&key, &seal), Some(Form::Plan));
    for plan in [
        (None, Some("s1"), Some("bot")),
        (Some("p1"), Some("s1"), None),
        (Some("p1"), None, Some("bot")),
        (None, None, None),
        (Some("p2"), Some("s1"), Some("bot")),
    ] {
        let edited = Terms { plan, ..t };
        assert!(edited.form_held(&key, &seal).is_none(), "{plan:?}");
    }
    let before = key.seal(&t.columns_shown());
    assert_eq!(t.form_held(&key, &before), Some(Form::Shown));
    let cleared = Terms {
        plan: (None, None, None),
        ..t
    };
    assert_eq!(cleared.form_held(&key, &before), Some(Form::Shown));
}
