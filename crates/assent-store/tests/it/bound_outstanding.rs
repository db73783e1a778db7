//! [`assent_store::Store::binding_outstanding`]: what a single sign-on asks before weighing an
//! identity's earlier decisions again, on SQLite and on Postgres.

use super::pgkit::both;
use super::{open, pending};
use assent_store::DecisionInput;

/// The binding a single sign-on decision of `id` keeps (as the server writes it).
fn sso(id: &str) -> String {
    format!(
        "sso:{{\"id\":{},\"groups\":[\"fin\"],\"provider\":\"p\"}}",
        serde_json::json!(id)
    )
}

/// The start of every binding of `id`.
fn prefix(id: &str) -> String {
    format!("sso:{{\"id\":{},", serde_json::json!(id))
}

/// An unredeemed token of a call an identity approved by single sign-on is outstanding for
/// that identity alone (not for one whose name it starts with, nor for a name holding the
/// characters `LIKE` would take as patterns), until the token is past its expiry; an identity
/// with nothing outstanding reads `false`, so its sign-in weighs nothing on the writer.
#[test]
fn a_decisions_unredeemed_token_is_outstanding_for_its_identity_alone() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), db);
        let (id, _) = pending(&s, 5, 1_000, 100_000, false);
        let input = DecisionInput {
            decider_key: Some(sso("alice@example.com")),
            ..DecisionInput::approve()
        };
        s.decide(&id, &input, "oidc:alice@example.com", &[], 2_000)
            .unwrap();
        let out = |who: &str, now: i64| s.binding_outstanding(&prefix(who), now).unwrap();
        assert!(out("alice@example.com", 3_000));
        for other in ["alice", "alice@example.co", "%", "_lice@example.com", "bob"] {
            assert!(!out(other, 3_000), "{other}");
        }
        assert!(!out("alice@example.com", i64::MAX / 2), "the token expired");
    });
}
