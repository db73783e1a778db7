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
    };
    let alice = Decider {
        name: "alice",
        owns: &[],
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
