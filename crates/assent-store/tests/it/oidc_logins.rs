//! Single sign-on state shared by replicas (issue 14 §7), on both backends: a sign-in in
//! progress sealed by one replica is opened by another (their keys come from one `keys_dir`),
//! whole and unexpired only, and by no store with other keys; a finished sign-in's `state` is
//! spent once across replicas; an SSO dashboard session carries its roles, a key's none.

use assent_store::oidc_logins::{SPENT_KEPT_MS, SignIn};
use assent_store::ui_sessions::{SignedInWith, SsoGrant, UiSession};

// PostgreSQL removes spent states by its own clock: times here are the real clock's.
use crate::now_ms;

fn sign_in(state: &str, expires_at: i64) -> SignIn {
    SignIn {
        state: state.into(),
        nonce: "nonce".into(),
        pkce_verifier: "v".repeat(43),
        next: "/ui/history".into(),
        step_up: true,
        started_at: 1_000,
        expires_at,
        replaces: None,
    }
}

/// Attacks on the browser's sealed sign-in: one altered anywhere, cut short, sealed by a store
/// with other keys, or expired, opens as nothing; fields past their bounds are not sealed. A
/// sealed sign-in is opened by every replica reading the same keys, and two seals of one
/// sign-in differ (each has its own random key material and nonce).
#[test]
fn a_sealed_sign_in_opens_on_any_replica_only_whole_and_unexpired() {
    crate::both_in_dirs(|db, dir| {
        let (a, b) = (crate::open(dir, db), crate::open(dir, db));
        let s = sign_in("st-1", 10_000);
        let sealed = a.seal_sign_in(&s).unwrap();
        assert_ne!(sealed, a.seal_sign_in(&s).unwrap());
        assert_eq!(b.open_sign_in(&sealed, 9_999), Some(s.clone()));
        assert_eq!(b.open_sign_in(&sealed, 10_000), None, "expired");
        for at in 0..sealed.len() {
            let mut x = sealed.clone();
            x[at] ^= 0x80;
            assert_eq!(a.open_sign_in(&x, 0), None, "byte {at} altered");
        }
        assert_eq!(a.open_sign_in(&sealed[..sealed.len() - 1], 0), None);
        assert_eq!(a.open_sign_in(&[], 0), None);
        let elsewhere = tempfile::tempdir().unwrap();
        // Another key set over the database is refused at open (its claim is a's), unless
        // accepted knowingly over a's key.
        let theirs = assent_store::checkpoint::public_key_hex(&a.audit_public_key());
        let replaces = elsewhere
            .path()
            .join(assent_store::keys::AUDIT_KEY_REPLACES_FILE);
        std::fs::write(replaces, theirs).unwrap();
        let other = crate::open(elsewhere.path(), db);
        assert_eq!(other.open_sign_in(&sealed, 0), None, "other keys");
        // A `next` of at most 512 bytes: four cookies a page makes a browser hold stay small.
        let mut long = s.clone();
        long.next = "\"".repeat(assent_store::oidc_logins::MAX_NEXT);
        assert!(a.seal_sign_in(&long).is_ok());
        long.next.push('"');
        assert!(a.seal_sign_in(&long).is_err());
        let mut long = s;
        long.pkce_verifier = "v".repeat(257);
        assert!(a.seal_sign_in(&long).is_err());
    });
}

/// Attack (found by review): one sign-in cookie replayed with junk codes, each callback posting
/// to the provider's token endpoint. The state is spent before the exchange, and of callbacks
/// racing with one cookie on two replicas exactly one spends it: the others are refused.
#[test]
fn of_callbacks_racing_with_one_sign_in_exactly_one_spends_it() {
    crate::both_in_dirs(|db, dir| {
        let stores = [crate::open(dir, db), crate::open(dir, db)];
        for round in 0..5u8 {
            let state = format!("{round:02x}").repeat(32);
            let barrier = std::sync::Barrier::new(8);
            let fresh = std::thread::scope(|t| {
                let racing: Vec<_> = (0..8)
                    .map(|i| {
                        let (store, state, barrier) = (&stores[i % 2], &state, &barrier);
                        t.spawn(move || {
                            barrier.wait();
                            store.spend_oidc_state(state, i64::MAX / 2, 1).unwrap()
                        })
                    })
                    .collect();
                racing
                    .into_iter()
                    .filter_map(|r| r.join().unwrap().then_some(()))
                    .count()
            });
            assert_eq!(fresh, 1, "round {round}: spent {fresh} times");
        }
    });
}

/// Attack: a replayed callback. A finished sign-in's `state` is spent once whichever replica
/// finishes it, and stays spent until `SPENT_KEPT_MS` after its expiry; records past that are
/// removed by the next spend. Times are the real clock's, as PostgreSQL removes by its own.
#[test]
fn a_finished_sign_in_is_spent_once_on_every_replica() {
    crate::both_in_dirs(|db, dir| {
        let (a, b) = (crate::open(dir, db), crate::open(dir, db));
        let t = now_ms();
        let [s1, s2, s3, s4] = ["01", "02", "03", "04"].map(|h| h.repeat(32));
        assert!(!b.oidc_state_spent(&s1).unwrap());
        assert!(a.spend_oidc_state(&s1, t + 10_000, t).unwrap());
        assert!(b.oidc_state_spent(&s1).unwrap());
        assert!(
            !b.spend_oidc_state(&s1, t + 10_000, t).unwrap(),
            "spent twice"
        );
        assert!(
            !a.spend_oidc_state(&s1, t + 10_000, t).unwrap(),
            "spent twice"
        );
        // Kept past its expiry, for replicas whose clocks run behind; then removed.
        let kept = t - SPENT_KEPT_MS + 120_000;
        assert!(a.spend_oidc_state(&s2, kept, t).unwrap());
        let soon = t - SPENT_KEPT_MS + 1_500;
        assert!(a.spend_oidc_state(&s3, soon, t).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(1_600));
        assert!(
            b.oidc_state_spent(&s3).unwrap(),
            "removed by the next spend only"
        );
        assert!(a.spend_oidc_state(&s4, t + 10_000, t + 2_000).unwrap());
        assert!(!b.oidc_state_spent(&s3).unwrap(), "kept past its time");
        // Attack (found by review): on a replica whose clock runs over SPENT_KEPT_MS slow, a
        // replayed callback's cookie still opens. Its record would be gone at once, each replay
        // removing the last one's, so each reached the code exchange. Now it is spent.
        for _ in 0..3 {
            let late = a.spend_oidc_state(&s3, t - SPENT_KEPT_MS - 1_000, t + 2_000);
            assert!(
                !late.unwrap(),
                "a sign-in whose record would be gone is spent"
            );
        }
        assert!(b.oidc_state_spent(&s1).unwrap() && b.oidc_state_spent(&s2).unwrap());
        assert!(a.spend_oidc_state("state", 1, 0).is_err(), "not a digest");
        assert!(
            a.oidc_state_spent(&"AB".repeat(32)).is_err(),
            "not a digest"
        );
    });
}

/// Attack (found by review): replica A's clock runs ten minutes fast. Its spends removed the
/// spent states of sign-ins whose cookies replica B, on time, still accepted, so a replayed
/// callback reached B's code exchange once more. On PostgreSQL (the only backend replicas
/// share: SQLite's one process has one clock) spent states are removed by the database's
/// clock, whatever the replica's.
#[test]
fn a_replica_whose_clock_runs_fast_keeps_the_spent_states_of_live_sign_ins() {
    crate::both_in_dirs(|db, dir| {
        if !matches!(db, assent_store::db::Database::Postgres { .. }) {
            return;
        }
        let (a, b) = (crate::open(dir, db), crate::open(dir, db));
        let t = now_ms();
        let (live, other) = ("05".repeat(32), "06".repeat(32));
        assert!(b.spend_oidc_state(&live, t + 60_000, t).unwrap());
        assert!(a.spend_oidc_state(&other, t + 60_000, t + 600_000).unwrap());
        assert!(b.oidc_state_spent(&live).unwrap(), "still spent for B");
    });
}

#[test]
fn an_sso_session_carries_its_grant_and_a_keys_its_key_binding() {
    crate::both_stores(|db, store| {
        let s = UiSession {
            operator: "oidc:alice".into(),
            csrf: "cd".repeat(32),
            expires_at: i64::MAX,
        };
        let grant = SsoGrant {
            roles: vec!["finance".to_string(), "ops".to_string()],
            groups: vec!["fin".to_string()],
        };
        store
            .start_sso_ui_session(&"ab".repeat(32), &s, &grant, &"cd".repeat(32), (0, 0))
            .unwrap();
        store
            .start_ui_session(&"ef".repeat(32), &s, &"01".repeat(32), 0)
            .unwrap();
        assert!(
            store
                .start_ui_session(&"ee".repeat(32), &s, "not hex", 0)
                .is_err()
        );
        assert_eq!(
            store.ui_session_with_roles(&"ab".repeat(32), 1).unwrap(),
            Some((
                s.clone(),
                SignedInWith::Sso {
                    grant: grant.clone(),
                    binding: "cd".repeat(32)
                }
            ))
        );
        assert_eq!(
            store.ui_session_with_roles(&"ef".repeat(32), 1).unwrap(),
            Some((
                s.clone(),
                SignedInWith::Key {
                    binding: "01".repeat(32)
                }
            ))
        );
        // The binding is under the seal: one rewritten behind the gateway's back is no session.
        db.connect()
            .unwrap()
            .conn()
            .execute(
                "UPDATE ui_sessions SET key_binding = ?1 WHERE id_sha256 = ?2",
                ["02".repeat(32), "ef".repeat(32)],
            )
            .unwrap();
        assert_eq!(
            store.ui_session_with_roles(&"ef".repeat(32), 1).unwrap(),
            None
        );
        let no_role = SsoGrant {
            roles: vec![],
            ..grant.clone()
        };
        let many_groups = SsoGrant {
            groups: vec!["g".to_string(); 1001],
            ..grant.clone()
        };
        let empty_group = SsoGrant {
            groups: vec![String::new()],
            ..grant
        };
        // A session stored before its groups were kept (a bare array of roles) signs no one
        // in: its roles could not be mapped again under the map in force.
        let conn = db.connect().unwrap();
        conn.conn()
            .execute(
                "UPDATE ui_sessions SET roles = '[\"finance\"]' WHERE id_sha256 = ?1",
                ["ab".repeat(32)],
            )
            .unwrap();
        assert_eq!(
            store.ui_session_with_roles(&"ab".repeat(32), 1).unwrap(),
            None
        );
        for (bad, why) in [
            (no_role, "no role"),
            (many_groups, "1,001 groups"),
            (empty_group, "an empty group"),
        ] {
            assert!(
                store
                    .start_sso_ui_session(&"12".repeat(32), &s, &bad, &"cd".repeat(32), (0, 0))
                    .is_err(),
                "{why}"
            );
        }
    });
}

/// Found by review: a single sign-on session's authentication time (the provider's
/// `auth_time`, `0` when it sends none) also served as the time expired sessions were removed
/// by, so such sign-ins never removed any and an SSO-only gateway kept every expired row.
#[test]
fn an_sso_sign_in_without_auth_time_still_removes_expired_sessions() {
    crate::both_stores(|db, store| {
        let session = |expires_at| UiSession {
            operator: "oidc:alice".into(),
            csrf: "cd".repeat(32),
            expires_at,
        };
        let grant = SsoGrant {
            roles: vec!["ops".to_string()],
            groups: vec![],
        };
        let (old, new) = ("aa".repeat(32), "ab".repeat(32));
        store
            .start_sso_ui_session(&old, &session(1_000), &grant, &"cd".repeat(32), (0, 0))
            .unwrap();
        store
            .start_sso_ui_session(
                &new,
                &session(i64::MAX),
                &grant,
                &"cd".repeat(32),
                (0, 5_000),
            )
            .unwrap();
        let conn = db.connect().unwrap();
        let left: i64 = crate::pgkit::value(
            conn.conn(),
            "SELECT COUNT(*) FROM ui_sessions WHERE id_sha256 = ?1",
            [&old],
        );
        assert_eq!(left, 0, "the expired session was kept");
        assert_eq!(
            store.ui_session_authenticated_at(&new, 6_000).unwrap(),
            Some(0)
        );
    });
}
