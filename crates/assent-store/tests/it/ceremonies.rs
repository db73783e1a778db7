//! Passkey ceremonies in the store (issue 14 §4): taken once, only by whoever started them,
//! and at most `MAX_CEREMONIES` in progress per principal (found by review: any operator key
//! could otherwise pile them up).

use super::fresh;
use assent_store::Store;
use assent_store::passkeys::{Ceremony, MAX_CEREMONIES};

fn ceremony(id: &str, who: &str) -> Ceremony {
    Ceremony {
        id: id.into(),
        principal: who.into(),
        purpose: "vote".into(),
        approval_id: Some("a1".into()),
        call_hash: Some("h".into()),
        decision: Some("approve".into()),
        nonce: Some("n".into()),
        state: "{}".into(),
        expires_at: 10_000,
    }
}

/// Whether `who` takes ceremony `id` for `purpose` (at 2 s, before it expires).
fn takes(s: &Store, id: &str, who: &str, purpose: &str) -> bool {
    s.take_ceremony(id, who, purpose, 2_000).unwrap().is_some()
}

#[test]
fn a_ceremony_is_taken_once_by_its_owner_and_their_number_is_bounded() {
    let (_dir, s) = fresh();
    s.put_ceremony(&ceremony("c0", "alice"), 1_000).unwrap();
    assert!(!takes(&s, "c0", "mallory", "vote"));
    assert!(!takes(&s, "c0", "alice", "register"));
    s.put_ceremony(&ceremony("c1", "alice"), 1_000).unwrap();
    assert!(takes(&s, "c1", "alice", "vote"));
    assert!(!takes(&s, "c1", "alice", "vote"));
    for i in 0..MAX_CEREMONIES {
        s.put_ceremony(&ceremony(&format!("x{i}"), "alice"), 1_000)
            .unwrap();
    }
    assert!(s.put_ceremony(&ceremony("over", "alice"), 1_000).is_err());
    s.put_ceremony(&ceremony("bob1", "bob"), 1_000).unwrap();
    // Once they expired, room again.
    s.put_ceremony(&ceremony("later", "alice"), 10_000).unwrap();
}
