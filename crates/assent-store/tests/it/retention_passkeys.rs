//! Retention and passkeys: a standing passkey's `passkey.registered` record is carried to the
//! chain's end before it is archived, so `audit verify` never excuses a row by its own date;
//! a registration a removal followed is not carried. Both backends.

use super::retention::{scalar, tamper, verify};
use super::{approved, open};
use assent_store::retention::ARCHIVE_DIR;

const DAY: i64 = 86_400_000;

/// The public key every passkey here is registered with.
fn a_key() -> assent_core::passkey::PublicJwk {
    assent_core::passkey::PublicJwk {
        kty: "OKP".into(),
        crv: "Ed25519".into(),
        x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo".into(),
        y: None,
    }
}

/// Attack (review finding): once retention has run, a database writer plants their own
/// authenticator as alice's passkey with `created_at` before the cut-off, hoping the missing
/// `passkey.registered` record passes as archived. Retention writes a standing registration
/// again before archiving it, so the check never excuses a row by its own date: the real
/// passkey still verifies after its record was archived, the planted one is reported.
#[test]
fn a_passkey_backdated_before_the_archive_cut_off_is_still_caught() {
    crate::both_in_dirs(|db, dir| {
        let s = open(dir, db);
        let key = a_key();
        s.add_passkey(&assent_store::passkeys::StoredPasskey {
            credential_id: "real-cred".into(),
            principal: "alice".into(),
            passkey: "{}".into(),
            public_key: key,
            label: "laptop".into(),
            created_at: 1_000,
        })
        .unwrap();
        approved(&s, 0, 5_000, false);
        s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
            .unwrap();
        let a = s
            .archive_audit(&dir.join(ARCHIVE_DIR), 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap()
            .expect("records were due");
        assert!(
            a.manifest.first_seq == 1 && a.manifest.last_seq >= 2,
            "{a:?}"
        );
        let rep = verify(&s, db);
        assert_eq!(
            rep.problem, None,
            "the real passkey still verifies: {rep:?}"
        );
        tamper(
            db,
            "INSERT INTO passkeys (credential_id, principal, passkey, public_key, label, created_at) VALUES ('planted', 'alice', '{}', '{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"AAAA\"}', 'x', 1)",
        );
        let rep = verify(&s, db);
        let p = rep.problem.expect("the planted passkey is reported");
        assert!(
            format!("{p:?}").contains("passkey planted of alice"),
            "{p:?}"
        );
    });
}

/// Attack (found by review): a removed passkey's row put back in the database (its old seal
/// with it) had its registration carried past its removal by retention, and `audit verify`
/// then found it standing. A registration a removal followed is not carried: the row put back
/// is reported.
#[test]
fn a_removed_passkey_put_back_is_not_vouched_for_by_retention() {
    crate::both_in_dirs(|db, dir| {
        let s = open(dir, db);
        let key = a_key();
        s.add_passkey(&assent_store::passkeys::StoredPasskey {
            credential_id: "lost-cred".into(),
            principal: "alice".into(),
            passkey: "{}".into(),
            public_key: key,
            label: "lost".into(),
            created_at: 1_000,
        })
        .unwrap();
        let col = |c: &str| -> String {
            scalar(
                db,
                &format!("SELECT {c} FROM passkeys WHERE credential_id = 'lost-cred'"),
                [],
            )
        };
        let row = (
            col("principal"),
            col("passkey"),
            col("public_key"),
            col("label"),
            col("seal"),
        );
        assert!(s.remove_passkey("alice", "lost-cred", 2_000).unwrap());
        let (who, pk, jwk, label, seal) = row;
        tamper(
            db,
            &format!(
                "INSERT INTO passkeys (credential_id, principal, passkey, public_key, label, created_at, seal) VALUES ('lost-cred', '{who}', '{pk}', '{jwk}', '{label}', 1000, '{seal}')"
            ),
        );
        approved(&s, 0, 5_000, false);
        s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
            .unwrap();
        s.archive_audit(&dir.join(ARCHIVE_DIR), 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap()
            .expect("records were due");
        let p = verify(&s, db)
            .problem
            .expect("the row put back is reported");
        assert!(format!("{p:?}").contains("lost-cred"), "{p:?}");
    });
}
