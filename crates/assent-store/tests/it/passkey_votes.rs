//! Passkey-signed approvals in the store (issue 14 §4), on both backends: a proof made the
//! way an authenticator makes one (P-256) by the decider's registered credential approves;
//! someone else's credential, a proof under another public key than the registered one, and a
//! proof made for another approval or another call are refused, and leave the approval
//! pending. Removing a passkey withdraws the pending quorum votes it signed and voids the unredeemed
//! tokens of the approvals that rest on it.

use crate::{both_stores, hold, pay};
use assent_core::ApprovalStatus;
use assent_core::passkey::{PasskeyProof, PublicJwk, vote_challenge};
use assent_core::quorum::parse_approvers;
use assent_store::passkeys::StoredPasskey;
use assent_store::{ApprovalRecord, DecideError, DecisionInput, RedeemError, Store};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::ecdsa::SigningKey;
use p256::ecdsa::signature::Signer;
use serde_json::json;
use sha2::{Digest, Sha256};

/// The relying party every proof here is made for.
const RP: &str = "assent.test";

/// The P-256 key made from `seed`.
fn key(seed: u8) -> SigningKey {
    SigningKey::from_slice(&[seed; 32]).unwrap()
}

/// `sk`'s public key as a JWK.
fn jwk(sk: &SigningKey) -> PublicJwk {
    let point = sk.verifying_key().to_encoded_point(false);
    PublicJwk {
        kty: "EC".into(),
        crv: "P-256".into(),
        x: B64.encode(point.x().unwrap()),
        y: Some(B64.encode(point.y().unwrap())),
    }
}

/// An assertion by `sk`, presented as credential `credential_id`, approving approval
/// `approval_id` of the call `call_hash` (user present and verified).
fn proof(sk: &SigningKey, credential_id: &str, approval_id: &str, call_hash: &str) -> PasskeyProof {
    let challenge = B64.encode(vote_challenge(approval_id, call_hash, "approve", "n1"));
    let client =
        format!(r#"{{"type":"webauthn.get","challenge":"{challenge}","origin":"https://{RP}"}}"#);
    let mut auth = Sha256::digest(RP.as_bytes()).to_vec();
    auth.push(0x05);
    auth.extend_from_slice(&[0, 0, 0, 1]);
    let mut signed = auth.clone();
    signed.extend_from_slice(&Sha256::digest(client.as_bytes()));
    let sig: p256::ecdsa::Signature = sk.sign(&signed);
    PasskeyProof {
        credential_id: credential_id.into(),
        public_key: jwk(sk),
        rp_id: RP.into(),
        nonce: "n1".into(),
        authenticator_data: B64.encode(&auth),
        client_data_json: B64.encode(client.as_bytes()),
        signature: B64.encode(sig.to_der().as_bytes()),
    }
}

/// Registers `sk` as `principal`'s passkey `credential_id`.
fn register(s: &Store, principal: &str, credential_id: &str, sk: &SigningKey) {
    s.add_passkey(&StoredPasskey {
        credential_id: credential_id.into(),
        principal: principal.into(),
        passkey: "{}".into(),
        public_key: jwk(sk),
        label: credential_id.into(),
        created_at: 500,
    })
    .unwrap();
}

/// A pending `pay` of `amount` that needs a passkey-signed approval.
fn needs_passkey(s: &Store, amount: i64) -> ApprovalRecord {
    let (call, mut v) = pay(amount);
    v.terms.require_passkey = true;
    let rec = hold(s, "s1", &call, &v, 1_000, 60_000);
    assert!(rec.terms.require_passkey);
    rec
}

/// A pending `pay` of `amount` that needs a passkey and two votes of `ops`.
fn quorum_of_two(s: &Store, amount: i64) -> ApprovalRecord {
    let (call, mut v) = pay(amount);
    let approvers = parse_approvers(&json!({"roles": ["ops"], "count": 2})).unwrap();
    v.terms.approvers = approvers.roles;
    v.terms.quorum = approvers.quorum;
    v.terms.require_passkey = true;
    hold(s, "s1", &call, &v, 1_000, 60_000)
}

/// `actor` (of role `ops`) votes to approve `rec` with an assertion of `sk` as
/// `credential_id`; the approval's status after it.
fn vote(
    s: &Store,
    rec: &ApprovalRecord,
    actor: &str,
    (sk, credential_id): (&SigningKey, &str),
) -> ApprovalStatus {
    let d = DecisionInput {
        passkey: Some(proof(sk, credential_id, &rec.id, &rec.call_hash)),
        ..DecisionInput::approve()
    };
    let ops = ["ops".to_string()];
    s.decide(&rec.id, &d, actor, &ops, 2_000).unwrap().status
}

/// `actor` approves `id` with proof `p`.
fn approve(
    s: &Store,
    id: &str,
    actor: &str,
    p: PasskeyProof,
) -> Result<ApprovalRecord, DecideError> {
    let d = DecisionInput {
        passkey: Some(p),
        ..DecisionInput::approve()
    };
    s.decide(id, &d, actor, &[], 2_000)
}

/// `actor`'s approval of `id` with `p` is refused as not passkey-signed, audited, and the
/// approval stays pending.
fn refused(s: &Store, id: &str, actor: &str, p: PasskeyProof, what: &str) {
    let r = approve(s, id, actor, p);
    assert!(
        matches!(r, Err(DecideError::PasskeyRequired(_))),
        "{what}: {r:?}"
    );
    let rec = s.get_approval(id).unwrap().unwrap();
    assert_eq!(rec.status, ApprovalStatus::Pending, "{what}");
    assert_eq!(crate::audit_kinds(s, 1), ["decision.refused"], "{what}");
}

#[test]
fn a_proof_by_the_deciders_registered_passkey_approves() {
    both_stores(|_, s| {
        let alice = key(1);
        register(s, "alice", "alice-key", &alice);
        let rec = needs_passkey(s, 1);
        let p = proof(&alice, "alice-key", &rec.id, &rec.call_hash);
        let done = approve(s, &rec.id, "alice", p.clone()).unwrap();
        assert_eq!(done.status, ApprovalStatus::Approved);
        assert!(s.token_string(&rec.id).unwrap().is_some());
        let stored = s.get_approval(&rec.id).unwrap().unwrap();
        assert_eq!(stored.decisions[0].actor, "alice");
        assert_eq!(stored.decisions[0].passkey.as_ref(), Some(&p));
    });
}

/// Bob's registered credential, with a genuine assertion of his for this approval, does not
/// sign alice's decision.
#[test]
fn someone_elses_registered_passkey_is_refused() {
    both_stores(|_, s| {
        let (alice, bob) = (key(1), key(2));
        register(s, "alice", "alice-key", &alice);
        register(s, "bob", "bob-key", &bob);
        let rec = needs_passkey(s, 1);
        let p = proof(&bob, "bob-key", &rec.id, &rec.call_hash);
        refused(s, &rec.id, "alice", p, "bob's passkey in alice's decision");
    });
}

/// A proof naming alice's credential but carrying (and signed with) another key than the one
/// registered: a key the attacker holds verifies its own signature.
#[test]
fn a_proof_under_another_key_than_the_registered_one_is_refused() {
    both_stores(|_, s| {
        register(s, "alice", "alice-key", &key(1));
        let rec = needs_passkey(s, 1);
        let p = proof(&key(9), "alice-key", &rec.id, &rec.call_hash);
        refused(s, &rec.id, "alice", p, "another public key");
    });
}

/// Alice's genuine assertion for one approval, or for another call, approves nothing else.
#[test]
fn a_proof_made_for_another_approval_or_call_is_refused() {
    both_stores(|_, s| {
        let alice = key(1);
        register(s, "alice", "alice-key", &alice);
        let (rec, other) = (needs_passkey(s, 1), needs_passkey(s, 2));
        let p = proof(&alice, "alice-key", &other.id, &other.call_hash);
        refused(s, &rec.id, "alice", p, "another approval's proof");
        let p = proof(&alice, "alice-key", &rec.id, &other.call_hash);
        refused(s, &rec.id, "alice", p, "another call's proof");
        // The proof made for it still approves it.
        let p = proof(&alice, "alice-key", &rec.id, &rec.call_hash);
        let done = approve(s, &rec.id, "alice", p).unwrap();
        assert_eq!(done.status, ApprovalStatus::Approved);
    });
}

/// Found by review: an operator who removed a lost or cloned authenticator still had the
/// pending vote it had signed counting towards the quorum. Removal withdraws the pending votes
/// whose proof names that credential (audited `decision.vote_withdrawn`), in its transaction;
/// a vote signed with another of their passkeys, and a settled approval's votes, stay.
#[test]
fn removing_a_passkey_withdraws_the_pending_votes_it_signed() {
    both_stores(|_, s| {
        let (alice, spare, bob) = (key(1), key(3), key(2));
        register(s, "alice", "alice-key", &alice);
        register(s, "alice", "alice-spare", &spare);
        register(s, "bob", "bob-key", &bob);
        let (open, other, settled) = (
            quorum_of_two(s, 1),
            quorum_of_two(s, 2),
            quorum_of_two(s, 3),
        );
        let pending = ApprovalStatus::Pending;
        assert_eq!(vote(s, &open, "alice", (&alice, "alice-key")), pending);
        assert_eq!(vote(s, &other, "alice", (&spare, "alice-spare")), pending);
        assert_eq!(vote(s, &settled, "alice", (&alice, "alice-key")), pending);
        let approved = vote(s, &settled, "bob", (&bob, "bob-key"));
        assert_eq!(approved, ApprovalStatus::Approved);
        assert!(s.remove_passkey("alice", "alice-key", 3_000).unwrap());
        assert_eq!(
            crate::audit_kinds(s, 3),
            ["token.voided", "decision.vote_withdrawn", "passkey.removed"]
        );
        let votes = |rec: &ApprovalRecord| s.get_approval(&rec.id).unwrap().unwrap().votes;
        assert!(
            votes(&open).is_empty(),
            "the removed passkey's vote is gone"
        );
        assert_eq!(votes(&other).len(), 1, "the spare passkey's vote stays");
        let kept = s.get_approval(&settled.id).unwrap().unwrap();
        assert_eq!(
            (kept.status, kept.votes.len()),
            (ApprovalStatus::Approved, 2)
        );
        // Its token is voided (see the test below).
        assert!(matches!(redeem(s, &settled), Err(RedeemError::Used)));
        // Bob's vote alone does not meet the quorum of two now.
        assert_eq!(vote(s, &open, "bob", (&bob, "bob-key")), pending);
    });
}

/// Redeems `rec`'s token for its call, as agent `bot`, at 3,500 ms.
fn redeem(s: &Store, rec: &ApprovalRecord) -> Result<assent_core::token::TokenClaims, RedeemError> {
    let t = s.token_string(&rec.id).unwrap().unwrap();
    s.redeem(&t, "bot", &rec.call_hash, None, 3_500)
}

/// Found by review: removing a lost or cloned authenticator withdrew only its pending votes; a
/// call it had approved alone, or with the vote that met a quorum, kept a token redeemable for
/// up to `token_ttl_seconds`, where removing the operator's key voids it. Removal voids the
/// unredeemed tokens that rest on the passkey (audited `token.voided` naming it; a quorum its
/// vote helped meet: the test above); one approved with another passkey, or by a quorum it
/// had no part in, keeps its token, and a redeemed token stays redeemed.
#[test]
fn removing_a_passkey_voids_the_unredeemed_tokens_it_approved() {
    both_stores(|_, s| {
        let (alice, spare, bob, carol) = (key(1), key(3), key(2), key(4));
        register(s, "alice", "alice-key", &alice);
        register(s, "alice", "alice-spare", &spare);
        register(s, "bob", "bob-key", &bob);
        register(s, "carol", "carol-key", &carol);
        let (alone, other) = (needs_passkey(s, 1), needs_passkey(s, 2));
        let p = proof(&alice, "alice-key", &alone.id, &alone.call_hash);
        approve(s, &alone.id, "alice", p).unwrap();
        let p = proof(&spare, "alice-spare", &other.id, &other.call_hash);
        approve(s, &other.id, "alice", p).unwrap();
        let redeemed = needs_passkey(s, 4);
        let p = proof(&alice, "alice-key", &redeemed.id, &redeemed.call_hash);
        approve(s, &redeemed.id, "alice", p).unwrap();
        redeem(s, &redeemed).unwrap();
        let carol_too = quorum_of_two(s, 5);
        vote(s, &carol_too, "bob", (&bob, "bob-key"));
        vote(s, &carol_too, "carol", (&carol, "carol-key"));
        assert!(s.remove_passkey("alice", "alice-key", 3_000).unwrap());
        assert_eq!(
            crate::audit_kinds(s, 2),
            ["token.voided", "passkey.removed"]
        );
        assert!(matches!(redeem(s, &alone), Err(RedeemError::Used)));
        assert!(redeem(s, &other).is_ok(), "approved with the spare passkey");
        assert!(redeem(s, &carol_too).is_ok(), "alice did not vote on it");
        // A vote its quorum needed: the quorum of two is not met without bob's.
        let needed = quorum_of_two(s, 6);
        vote(s, &needed, "bob", (&bob, "bob-key"));
        vote(s, &needed, "carol", (&carol, "carol-key"));
        assert!(s.remove_passkey("bob", "bob-key", 3_000).unwrap());
        assert!(matches!(redeem(s, &needed), Err(RedeemError::Used)));
    });
}

/// Attack (found by review): a database writer holding alice's operator key planted a passkey
/// row of their own as alice's — or copied her row under a credential id of theirs — and
/// signed her passkey-required approvals with it; and reset a counter so that a cloned
/// authenticator passed. A passkey row carries a seal (migration 0070): a planted or edited
/// one is not offered, signs nothing, and is not advanced, but is listed for removal; and the
/// planted id can be registered for real by its own principal only (replacing it, recorded
/// `passkey.removed`).
#[test]
fn a_passkey_planted_or_edited_in_the_database_signs_nothing() {
    both_stores(|db, s| {
        let (alice, mallory) = (key(1), key(9));
        register(s, "alice", "alice-key", &alice);
        let planted = serde_json::to_string(&jwk(&mallory)).unwrap();
        crate::retention::tamper(
            db,
            &format!(
                "INSERT INTO passkeys (credential_id, principal, passkey, public_key, label, created_at) VALUES ('planted', 'alice', '{{}}', '{planted}', 'x', 1)"
            ),
        );
        let ids: Vec<_> = s
            .passkeys_of("alice")
            .unwrap()
            .into_iter()
            .map(|p| p.credential_id)
            .collect();
        assert_eq!(ids, ["alice-key"], "the planted row is not offered");
        let rec = needs_passkey(s, 1);
        let p = proof(&mallory, "planted", &rec.id, &rec.call_hash);
        refused(s, &rec.id, "alice", p, "a planted passkey");
        assert!(
            !s.advance_passkey("planted", r#"{"cred": {"counter": 9}}"#, 9)
                .unwrap(),
            "a planted row is not advanced"
        );
        // Alice's own row with its counter (or anything it holds) edited signs nothing either.
        crate::retention::tamper(
            db,
            r#"UPDATE passkeys SET passkey = '{"cred": {"counter": 0}}' WHERE credential_id = 'alice-key'"#,
        );
        assert!(
            s.passkeys_of("alice").unwrap().is_empty(),
            "an edited row is not offered"
        );
        assert!(
            !s.advance_passkey("alice-key", r#"{"cred": {"counter": 1}}"#, 1)
                .unwrap()
        );
        let p = proof(&alice, "alice-key", &rec.id, &rec.call_hash);
        refused(s, &rec.id, "alice", p, "an edited passkey row");
        // Both are listed as signing nothing, for removal.
        let unsealed: Vec<_> = s
            .unsealed_passkeys_of("alice")
            .unwrap()
            .into_iter()
            .map(|u| u.0)
            .collect();
        assert_eq!(unsealed, ["planted", "alice-key"]);
        // Another principal cannot take the id over (its votes name it); registered for real
        // by its own principal, it replaces the row, recorded removed first.
        let bobs = StoredPasskey {
            credential_id: "planted".into(),
            principal: "bob".into(),
            passkey: "{}".into(),
            public_key: jwk(&key(2)),
            label: "planted".into(),
            created_at: 500,
        };
        assert!(matches!(
            s.add_passkey(&bobs),
            Err(assent_store::StoreError::Invalid(_))
        ));
        register(s, "alice", "planted", &key(2));
        assert_eq!(s.passkeys_of("alice").unwrap().len(), 1);
        assert_eq!(s.unsealed_passkeys_of("alice").unwrap().len(), 1);
        // Newest first.
        assert_eq!(
            crate::audit_kinds(s, 2),
            ["passkey.registered", "passkey.removed"]
        );
    });
}

/// A passkey's seal is made again when its counter moves: used, it still signs.
#[test]
fn a_used_passkey_still_signs() {
    both_stores(|_, s| {
        let alice = key(1);
        register(s, "alice", "alice-key", &alice);
        assert!(
            s.advance_passkey("alice-key", r#"{"cred": {"counter": 3}}"#, 3)
                .unwrap()
        );
        assert_eq!(s.passkeys_of("alice").unwrap().len(), 1);
        let rec = needs_passkey(s, 1);
        let p = proof(&alice, "alice-key", &rec.id, &rec.call_hash);
        let done = approve(s, &rec.id, "alice", p).unwrap();
        assert_eq!(done.status, ApprovalStatus::Approved);
    });
}
