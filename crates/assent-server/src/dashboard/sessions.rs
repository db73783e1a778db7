//! The dashboard's signed-in sessions (12 hours) over the store's `ui_sessions`, so that a
//! session works whichever replica a request reaches (issue 13 §2): the cookie's value is 256
//! random bits, and only its SHA-256 is stored. The random tokens sessions are made of are
//! here too. Sign-in and CSRF checks are [`super::session`]; single sign-on is [`super::oidc`].

use crate::config::Principal;
use crate::state::{AppState, now_ms};
use assent_store::ui_sessions::{SignedInWith, SsoGrant, UiSession};
use std::time::Duration;

/// How long a dashboard session lasts.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// How recent a session's sign-in must be for a sensitive form (removing a passkey): the
/// step-up window, like GitHub's "sudo mode". A stolen session cookie alone is older.
pub(crate) const STEP_UP: Duration = Duration::from_secs(10 * 60);

/// One signed-in operator (the store's record).
pub(crate) type Session = UiSession;

/// 256 random bits as 64 hex digits (session ids, CSRF tokens).
pub(crate) fn random_hex() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source");
    hex::encode(b)
}

/// SHA-256 of `s` in hex: sessions are kept by the digest of their id.
pub(crate) fn digest(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

/// The binding of a session to the key operator `p` signs in with (64 hex): SHA-256 over a
/// tag of its own and the key's digest. A session keeps the binding of its sign-in, and
/// [`super::session::signed_in_as`] compares it with the principal's current key's, so a key
/// rotated by a restart, or a name removed and added again with another key, ends it.
pub(crate) fn key_binding(p: &Principal) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"assent/ui-session/key-binding/v1\0");
    h.update(p.key_sha256);
    hex::encode(h.finalize())
}

/// Starts a session for operator `p`, bound to its key ([`key_binding`]): its id (the
/// cookie's value) and the session; `None` when the store could not record it (the sign-in
/// then fails: no session that only one replica knows).
pub(crate) async fn start(st: &AppState, p: &Principal) -> Option<(String, Session)> {
    let binding = key_binding(p);
    store_new(st, &p.name, SignedInWith::Key { binding }, now_ms()).await
}

/// Starts a single sign-on session (issue 14 §7) for `operator` (`oidc:…`) with what its
/// claims were granted, bound to the configured provider
/// ([`crate::config::oidc::OidcConfig::session_binding`];
/// `None` without one), like [`start`]. `authenticated_at` (Unix ms) is when the person last
/// authenticated at the provider (the ID token's `auth_time`, at most now; `0` when it did
/// not say), which [`recently_authenticated`] holds to the step-up window: a sign-in that
/// rode an old provider session is not a step-up.
pub(crate) async fn start_sso(
    st: &AppState,
    operator: &str,
    grant: SsoGrant,
    authenticated_at: i64,
) -> Option<(String, Session)> {
    let at = authenticated_at.clamp(0, now_ms());
    let binding = st.oidc.as_ref()?.config.session_binding();
    store_new(st, operator, SignedInWith::Sso { grant, binding }, at).await
}

/// A new session of `operator`, signed in `how` and authenticated at `at` (Unix ms), stored
/// before it is answered; `None` (logged) when the store could not.
async fn store_new(
    st: &AppState,
    operator: &str,
    how: SignedInWith,
    at: i64,
) -> Option<(String, Session)> {
    let id = random_hex();
    let s = Session {
        operator: operator.to_string(),
        csrf: random_hex(),
        expires_at: now_ms().saturating_add(SESSION_TTL.as_millis() as i64),
    };
    let (key, stored) = (digest(&id), s.clone());
    let stored = st
        .store_task(move |store| match &how {
            SignedInWith::Key { binding } => store.start_ui_session(&key, &stored, binding, at),
            SignedInWith::Sso { grant, binding } => {
                store.start_sso_ui_session(&key, &stored, grant, binding, (at, now_ms()))
            }
        })
        .await;
    match stored {
        Ok(Ok(())) => Some((id, s)),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "dashboard session could not be stored");
            None
        }
        Err(_) => None,
    }
}

/// Whether `id` has the form of a session id this gateway issues ([`random_hex`]: 64
/// lowercase hex digits). Anything else names no session and is refused without asking the
/// store (found by review: any cookie value was looked up).
pub(crate) fn well_formed(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The live session with id `id` and how it signed in: `Ok(None)` when unknown, ended, or not
/// of the form ([`well_formed`]: the store is not asked); `Err(())` when the store did not
/// answer. A read beside the store executor (`AppState::store_call_apart`; on PostgreSQL on a
/// read session beside the writer): a flood of lookups does not queue ahead of, or inside,
/// the agents' writes.
pub(crate) async fn lookup(st: &AppState, id: &str) -> Result<Option<(Session, SignedInWith)>, ()> {
    if !well_formed(id) {
        return Ok(None);
    }
    let key = digest(id);
    st.store_call_apart(move |store| store.ui_session_with_roles(&key, now_ms()))
        .await
        .map_err(drop)
}

/// Ends session `id`: `false` (logged) when the store did not record it, and the session
/// may still be live.
pub(crate) async fn end(st: &AppState, id: &str) -> bool {
    let key = digest(id);
    match st.store_call(move |store| store.end_ui_session(&key)).await {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = ?e, "dashboard session could not be ended");
            false
        }
    }
}

/// Whether live session `id` signed in within [`STEP_UP`] of now (the time is the store's,
/// written at sign-in; nothing the client sends; for single sign-on, the provider's
/// `auth_time`: [`start_sso`]). `false` when unknown, ended, older, or the
/// store did not answer (fail closed).
pub(crate) async fn recently_authenticated(st: &AppState, id: &str) -> bool {
    let key = digest(id);
    let now = now_ms();
    match st
        .store_apart(move |store| store.ui_session_authenticated_at(&key, now))
        .await
    {
        Ok(Ok(Some(at))) => now.saturating_sub(at) <= STEP_UP.as_millis() as i64,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_of_the_issued_form_are_looked_up() {
        assert!(well_formed(&random_hex()));
        assert!(!well_formed(&random_hex().to_uppercase()));
        assert!(!well_formed(&random_hex()[..63]));
        assert!(!well_formed(&format!("{}0", random_hex())));
        assert!(!well_formed(&"g".repeat(64)));
        assert!(!well_formed(""));
    }
}
