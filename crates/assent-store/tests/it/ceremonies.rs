//! Passkey ceremonies in the store (issue 14 §4): taken once, only by whoever started them,
//! and at most `MAX_CEREMONIES` in progress per principal (found by review: any operator key
//! could otherwise pile them up); a passkey's signature counter only moves forward.

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
        code_sha256: None,
    }
}

/// `who`'s registration ceremony `id` (no approval, call, decision or nonce).
fn registration(id: &str, who: &str) -> Ceremony {
    Ceremony {
        purpose: "register".into(),
        approval_id: None,
        call_hash: None,
        decision: None,
        nonce: None,
        ..ceremony(id, who)
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

/// Found by review: `webauthn-rs` compares an assertion's signature counter with the one read
/// when its ceremony started, so a cloned authenticator's assertion inside a ceremony opened
/// before a genuine use passed with a counter already spent. The store takes a new counter
/// only past the stored one, in the transaction that stores it; a credential that never counts
/// (counter 0, as synced passkeys) stays usable.
#[test]
fn a_passkey_counter_only_moves_forward() {
    let (_dir, s) = fresh();
    let key = assent_core::passkey::PublicJwk {
        kty: "OKP".into(),
        crv: "Ed25519".into(),
        x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo".into(),
        y: None,
    };
    for (id, counter) in [("counting", 5), ("synced", 0)] {
        s.add_passkey(&assent_store::passkeys::StoredPasskey {
            credential_id: id.into(),
            principal: "alice".into(),
            passkey: format!(r#"{{"cred": {{"counter": {counter}}}}}"#),
            public_key: key.clone(),
            label: id.into(),
            created_at: 1_000,
        })
        .unwrap();
    }
    let at = |n: u32| format!(r#"{{"cred": {{"counter": {n}}}}}"#);
    assert!(
        !s.advance_passkey("counting", &at(5), 5).unwrap(),
        "the stored counter again"
    );
    assert!(
        !s.advance_passkey("counting", &at(3), 3).unwrap(),
        "a counter gone back"
    );
    assert!(
        !s.advance_passkey("counting", &at(0), 0).unwrap(),
        "a counting key at 0"
    );
    assert!(s.advance_passkey("counting", &at(6), 6).unwrap());
    assert!(
        !s.advance_passkey("counting", &at(6), 6).unwrap(),
        "6 is spent now"
    );
    assert!(s.advance_passkey("synced", &at(0), 0).unwrap());
    assert!(s.advance_passkey("synced", &at(0), 0).unwrap());
    assert!(!s.advance_passkey("unknown", &at(9), 9).unwrap());
}

/// Found by review: the one-time enrolment code was used up when a registration started, so a
/// cancelled browser prompt burnt it. It is used when the registration finishes, in the
/// transaction that stores the passkey: a ceremony started and abandoned leaves it usable, and
/// of two ceremonies started with one code (even finishing at once) one registers a passkey.
#[test]
fn an_enrolment_code_is_used_when_a_registration_finishes_and_only_once() {
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let code = "c0de".repeat(16);
        let conn = db.connect().unwrap();
        let key = assent_store::checkpoint::read_key(dir).unwrap().unwrap();
        let issue = assent_store::passkeys::issue_enrolment;
        issue(conn.conn(), &key, "alice", &code, 100_000, "admin", 1_000).unwrap();
        let reg = registration;
        assert!(
            s.start_registration(&reg("r1", "alice"), &code, 1_000)
                .unwrap()
        );
        assert!(
            s.start_registration(&reg("r2", "alice"), &code, 1_000)
                .unwrap(),
            "a started (abandoned) registration left the code usable"
        );
        assert!(
            !s.start_registration(&reg("m1", "mallory"), &code, 1_000)
                .unwrap(),
            "someone else's code"
        );
        let take = |id: &str| {
            s.take_ceremony(id, "alice", "register", 2_000)
                .unwrap()
                .unwrap()
        };
        let (c1, c2) = (take("r1"), take("r2"));
        assert_eq!(c1.code_sha256.as_deref(), Some(code.as_str()));
        let key = assent_core::passkey::PublicJwk {
            kty: "EC".into(),
            crv: "P-256".into(),
            x: "x".into(),
            y: Some("y".into()),
        };
        let pk = |id: &str| assent_store::passkeys::StoredPasskey {
            credential_id: id.into(),
            principal: "alice".into(),
            passkey: "{}".into(),
            public_key: key.clone(),
            label: id.into(),
            created_at: 2_000,
        };
        let finished: Vec<bool> = std::thread::scope(|scope| {
            let runs = [(c1, "k1"), (c2, "k2")].map(|(c, id)| {
                let (s, pk) = (&s, pk(id));
                scope.spawn(move || {
                    let code = c.code_sha256.unwrap();
                    s.add_enrolled_passkey(&pk, &code, 2_000).unwrap()
                })
            });
            runs.map(|r| r.join().unwrap()).to_vec()
        });
        assert_eq!(finished.iter().filter(|f| **f).count(), 1, "{finished:?}");
        assert_eq!(s.passkeys_of("alice").unwrap().len(), 1);
        assert!(
            !s.start_registration(&reg("r3", "alice"), &code, 3_000)
                .unwrap(),
            "the code is used up"
        );
    });
}

/// Attack (found by review): a database writer holding an operator's key planted an
/// enrolment row for a code of their own and registered their authenticator as that
/// operator, with a genuine `passkey.registered` record and `audit verify` passing. An
/// enrolment row is sealed with the audit key, which the database never holds: a planted row,
/// one moved to another operator or given a later expiry, is no code at all.
#[test]
fn a_planted_or_edited_enrolment_row_starts_no_registration() {
    use assent_store::params;
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let conn = db.connect().unwrap();
        let c = conn.conn();
        let (planted, moved) = ("9".repeat(64), "8".repeat(64));
        c.execute(
            "INSERT INTO passkey_enrolments (code_sha256, principal, issued_by, expires_at) VALUES (?1,?2,?3,?4)",
            params![planted, "alice", "cli:root", 100_000i64],
        )
        .unwrap();
        let reg = |id: &str| registration(id, "alice");
        assert!(!s.start_registration(&reg("p1"), &planted, 1_000).unwrap());
        // A sealed code of bob's, moved to alice; a sealed code of alice's, its expiry moved.
        let key = assent_store::checkpoint::read_key(dir).unwrap().unwrap();
        let issue = assent_store::passkeys::issue_enrolment;
        issue(c, &key, "bob", &moved, 100_000, "cli:root", 1_000).unwrap();
        let to_alice = "UPDATE passkey_enrolments SET principal = 'alice' WHERE code_sha256 = ?1";
        c.execute(to_alice, params![moved]).unwrap();
        assert!(!s.start_registration(&reg("p2"), &moved, 1_000).unwrap());
        let code = "7".repeat(64);
        issue(c, &key, "alice", &code, 100_000, "cli:root", 1_000).unwrap();
        let later = "UPDATE passkey_enrolments SET expires_at = 900000 WHERE code_sha256 = ?1";
        c.execute(later, params![code]).unwrap();
        assert!(!s.start_registration(&reg("p3"), &code, 1_000).unwrap());
        // As issued, it starts one.
        let back = "UPDATE passkey_enrolments SET expires_at = 100000 WHERE code_sha256 = ?1";
        c.execute(back, params![code]).unwrap();
        assert!(s.start_registration(&reg("p4"), &code, 1_000).unwrap());
    });
}

/// Attack (found by review): the enrolment code's row is sealed, but its digest is readable in
/// the database, and ceremony rows were not sealed: a writer holding an operator's key planted
/// a registration ceremony carrying a genuine code's digest and a challenge of their own, and
/// finished it with their authenticator. A ceremony row is sealed now: a planted one, or one
/// whose code or state was edited, is taken away, never returned.
#[test]
fn a_planted_or_edited_ceremony_is_not_taken() {
    use assent_store::params;
    crate::both_in_dirs(|db, dir| {
        let s = crate::open(dir, db);
        let conn = db.connect().unwrap();
        let c = conn.conn();
        let key = assent_store::checkpoint::read_key(dir).unwrap().unwrap();
        let code = "6".repeat(64);
        let issue = assent_store::passkeys::issue_enrolment;
        issue(c, &key, "alice", &code, 100_000, "cli:root", 1_000).unwrap();
        c.execute(
            "INSERT INTO passkey_ceremonies (id, principal, purpose, state, expires_at, code_sha256) VALUES ('planted', 'alice', 'register', '{}', 100000, ?1)",
            params![code],
        )
        .unwrap();
        assert_eq!(
            s.take_ceremony("planted", "alice", "register", 2_000)
                .unwrap(),
            None
        );
        let reg = |id: &str| registration(id, "alice");
        for edit in [
            "UPDATE passkey_ceremonies SET state = '{\"attacker\":1}'",
            "UPDATE passkey_ceremonies SET expires_at = 900000",
        ] {
            assert!(s.start_registration(&reg("r1"), &code, 1_000).unwrap());
            c.execute(edit, params![]).unwrap();
            assert_eq!(
                s.take_ceremony("r1", "alice", "register", 2_000).unwrap(),
                None,
                "{edit}"
            );
        }
        // Found by review: the id, as the row kept it, let whoever reads the database finish
        // a genuine ceremony in progress. The row keeps its SHA-256; only the id itself takes it.
        assert!(s.start_registration(&reg("r1"), &code, 1_000).unwrap());
        let stored: String = c
            .query_row("SELECT id FROM passkey_ceremonies", params![], |r| r.get(0))
            .unwrap();
        assert_ne!(stored, "r1");
        let taken = s
            .take_ceremony(&stored, "alice", "register", 2_000)
            .unwrap();
        assert_eq!(taken, None);
        assert!(
            s.take_ceremony("r1", "alice", "register", 2_000)
                .unwrap()
                .is_some()
        );
    });
}
