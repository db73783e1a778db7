//! Separation of duties (issue 14 §2): the owner of an agent and the person a call acts for
//! may not approve it; saying no stays open to them.

use assent_core::approval::DecisionKind::{Approve, Deny};
use assent_core::duties::{Decider, self_approval};

#[test]
fn separation_of_duties_refuses_the_owner_and_the_requester_approving_not_denying() {
    let owns = vec!["bot".to_string()];
    let owner = Decider {
        name: "olga",
        owns: &owns,
        aka: &[],
    };
    let alice = Decider {
        name: "alice",
        owns: &[],
        aka: &[],
    };
    assert!(
        self_approval(true, Approve, "bot", None, &owner)
            .unwrap()
            .contains("owns agent `bot`")
    );
    assert!(
        self_approval(true, Approve, "bot", Some("alice"), &alice)
            .unwrap()
            .contains("on behalf of `alice`")
    );
    assert_eq!(
        self_approval(true, Deny, "bot", Some("alice"), &owner),
        None,
        "saying no stays open"
    );
    assert_eq!(
        self_approval(false, Approve, "bot", Some("alice"), &owner),
        None
    );
    assert_eq!(
        self_approval(true, Approve, "other", Some("bob"), &owner),
        None
    );
}

/// Attack: the person a call acts for approves it under another of their names — the single
/// sign-on operator `oidc:alice@example.com` approving a call made `on_behalf_of:
/// alice@example.com`, or a key's principal approving a call made for its linked SSO name.
#[test]
fn separation_of_duties_knows_a_person_by_every_name_they_go_by() {
    let sso = vec!["alice@example.com".to_string()];
    let signed_on = Decider {
        name: "oidc:alice@example.com",
        owns: &[],
        aka: &sso,
    };
    let why = self_approval(true, Approve, "bot", Some("alice@example.com"), &signed_on).unwrap();
    assert!(
        why.contains("`alice@example.com` (signed in as `oidc:alice@example.com`)"),
        "{why}"
    );
    let linked = vec!["alice@example.com".into(), "oidc:alice@example.com".into()];
    let keyed = Decider {
        name: "alice",
        owns: &[],
        aka: &linked,
    };
    for who in ["alice", "alice@example.com", "oidc:alice@example.com"] {
        assert!(
            self_approval(true, Approve, "bot", Some(who), &keyed).is_some(),
            "{who}"
        );
    }
    assert_eq!(
        self_approval(true, Approve, "bot", Some("bob@example.com"), &keyed),
        None
    );
    assert_eq!(
        self_approval(true, Deny, "bot", Some("alice@example.com"), &signed_on),
        None
    );
}
