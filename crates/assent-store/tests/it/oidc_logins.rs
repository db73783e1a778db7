//! Single sign-on state shared by replicas (issue 14 §7), on both backends: a sign-in started
//! on one replica is finished on another, once; it is bound to its browser and expires; an SSO
//! dashboard session carries its roles, a key's none.

use crate::pgkit::both;
use assent_store::oidc_logins::OidcLogin;
use assent_store::ui_sessions::{SignedInWith, SsoGrant, UiSession};

fn login(browser: &str, expires_at: i64) -> OidcLogin {
    OidcLogin {
        browser_sha256: browser.repeat(32),
        nonce: "nonce".into(),
        pkce_verifier: "v".repeat(43),
        next: "/ui/history".into(),
        expires_at,
    }
}

/// Attacks: a replayed callback (the state taken twice), one carried to another browser (the
/// state is spent by it), an expired one.
#[test]
fn an_sso_sign_in_is_taken_once_by_its_browser_on_any_replica() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (crate::open(dir.path(), db), crate::open(dir.path(), db));
        let (s1, s2, s3) = ("01".repeat(32), "02".repeat(32), "03".repeat(32));
        a.put_oidc_login(&s1, &"cc".repeat(32), &login("aa", 10_000), 0)
            .unwrap();
        assert_eq!(
            b.take_oidc_login(&s1, &"aa".repeat(32), 5_000).unwrap(),
            Some(login("aa", 10_000))
        );
        assert_eq!(
            b.take_oidc_login(&s1, &"aa".repeat(32), 5_000).unwrap(),
            None
        );
        assert_eq!(
            a.take_oidc_login(&s1, &"aa".repeat(32), 5_000).unwrap(),
            None
        );
        a.put_oidc_login(&s2, &"cc".repeat(32), &login("aa", 10_000), 0)
            .unwrap();
        assert_eq!(
            b.take_oidc_login(&s2, &"bb".repeat(32), 5_000).unwrap(),
            None
        );
        assert_eq!(
            a.take_oidc_login(&s2, &"aa".repeat(32), 5_000).unwrap(),
            None,
            "spent"
        );
        a.put_oidc_login(&s3, &"cc".repeat(32), &login("aa", 10_000), 0)
            .unwrap();
        assert_eq!(
            b.take_oidc_login(&s3, &"aa".repeat(32), 10_000).unwrap(),
            None,
            "expired"
        );
        // Only digests are keys; fields are bounded.
        assert!(
            a.put_oidc_login("state", &"cc".repeat(32), &login("aa", 1), 0)
                .is_err()
        );
        let mut long = login("aa", 1);
        long.next = "x".repeat(5000);
        assert!(a.put_oidc_login(&s1, &"cc".repeat(32), &long, 0).is_err());
    });
}

#[test]
fn an_sso_session_carries_its_grant_and_a_keys_its_key_binding() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::open(dir.path(), db);
        let s = UiSession {
            operator: "oidc:alice".into(),
            csrf: "cd".repeat(32),
            expires_at: 10_000,
        };
        let grant = SsoGrant {
            roles: vec!["finance".to_string(), "ops".to_string()],
            groups: vec!["fin".to_string()],
        };
        store
            .start_sso_ui_session(&"ab".repeat(32), &s, &grant, (0, 0))
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
            Some((s.clone(), SignedInWith::Sso(grant.clone())))
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
                    .start_sso_ui_session(&"12".repeat(32), &s, &bad, (0, 0))
                    .is_err(),
                "{why}"
            );
        }
    });
}

/// Attack: starting an SSO sign-in needs no key, so a flood of starts would grow the table
/// without end; past `MAX_IN_PROGRESS` live ones, new starts are refused until some expire.
#[test]
fn sign_ins_in_progress_are_bounded() {
    use assent_store::oidc_logins::MAX_IN_PROGRESS;
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::open(dir.path(), db);
        let conn = db.connect().unwrap();
        conn.conn()
            .execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
                 INSERT INTO oidc_logins (state_sha256, browser_sha256, nonce, pkce_verifier, next, expires_at) \
                 SELECT 'flood-' || i, 'b', 'n', 'v', '/ui', 10000 FROM n",
                [MAX_IN_PROGRESS],
            )
            .unwrap();
        let e = store.put_oidc_login(
            &"01".repeat(32),
            &"cc".repeat(32),
            &login("aa", 20_000),
            5_000,
        );
        assert!(e.is_err(), "the bound holds");
        // Once they expired, a sign-in starts again (and the expired ones are gone).
        store
            .put_oidc_login(
                &"01".repeat(32),
                &"cc".repeat(32),
                &login("aa", 20_000),
                10_000,
            )
            .unwrap();
    });
}

/// Attack (found by review): starting an SSO sign-in needs no key, and 10,000 starts from one
/// address filled the global bound, so every operator's SSO sign-in was refused; and when a
/// client's start past its share replaced its oldest, a neighbour sharing its address
/// replaced the sign-in a person had in progress. One client holds at most `MAX_PER_CLIENT`:
/// its next start is refused (nothing stored), none is replaced, and other clients' sign-ins
/// and starts are untouched.
#[test]
fn one_client_holds_at_most_its_share_of_sign_ins_in_progress() {
    use assent_store::oidc_logins::MAX_PER_CLIENT;
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::open(dir.path(), db);
        let (flooder, victim) = ("f0".repeat(32), "0a".repeat(32));
        let state = |i: i64| format!("{i:064x}");
        // The person's sign-in, begun first from the address the flooder shares.
        assert!(
            store
                .put_oidc_login(&"ee".repeat(32), &flooder, &login("bb", 10_000), 0)
                .unwrap()
        );
        let stored: Vec<bool> = (0..2 * MAX_PER_CLIENT)
            .map(|i| {
                store
                    .put_oidc_login(&state(i), &flooder, &login("aa", 10_000 + i), i)
                    .unwrap()
            })
            .collect();
        let kept = stored.iter().filter(|s| **s).count() as i64;
        assert_eq!(kept, MAX_PER_CLIENT - 1, "{stored:?}");
        // Another client still starts; the person's sign-in is still there.
        assert!(
            store
                .put_oidc_login(&"dd".repeat(32), &victim, &login("cc", 10_000), 1)
                .unwrap()
        );
        assert!(
            store
                .take_oidc_login(&"ee".repeat(32), &"bb".repeat(32), 1)
                .unwrap()
                .is_some(),
            "the person's sign-in was replaced"
        );
        // One finished: the client may start one more.
        assert!(
            store
                .put_oidc_login(&state(999), &flooder, &login("aa", 10_000), 2)
                .unwrap()
        );
    });
}

/// Found by review: a single sign-on session's authentication time (the provider's
/// `auth_time`, `0` when it sends none) also served as the time expired sessions were removed
/// by, so such sign-ins never removed any and an SSO-only gateway kept every expired row.
#[test]
fn an_sso_sign_in_without_auth_time_still_removes_expired_sessions() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::open(dir.path(), db);
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
            .start_sso_ui_session(&old, &session(1_000), &grant, (0, 0))
            .unwrap();
        store
            .start_sso_ui_session(&new, &session(90_000), &grant, (0, 5_000))
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
