//! The cookie that holds a single sign-on in progress (see `super` and
//! `assent_store::oidc_logins`): the [`SignIn`] sealed by the store (AES-256-GCM under a key
//! every replica derives from the shared `keys_dir`), base64url, in a cookie of its own per
//! sign-in, so that sign-ins started in two tabs of one browser both finish.
//!
//! - Its name is `assent_oidc_` and the first 16 hex digits of the SHA-256 of the sign-in's
//!   `state` ([`name`]): the callback finds it from its `state`, and no character a query
//!   chose goes into a cookie name. Over https it is `__Host-` prefixed, `Secure`, `Path=/`;
//!   over plain http `Path=/ui/oidc` (`crate::dashboard::session::Jar`).
//! - `HttpOnly`, `SameSite=Lax` (the provider sends the browser back with a cross-site
//!   top-level `GET`, which `Strict` would send without it), `Max-Age` the sign-in's lifetime.
//! - One browser holds at most [`MAX_IN_BROWSER`]: a start past that expires the oldest the
//!   browser sent, so that the cookies a page can make a browser collect stay a few kilobytes
//!   (each at most [`MAX_COOKIE`] bytes, in practice under 2 KB: `next` is at most 512). So a
//!   page that sends a browser to four starts (top-level navigations) evicts a sign-in the
//!   browser had in progress, which then has to start again: no cap can prevent that.

use crate::dashboard::session::{Jar, cookies};
use crate::dashboard::sessions::digest;
use crate::state::AppState;
use assent_store::Store;
use assent_store::StoreError;
use assent_store::oidc_logins::SignIn;
use axum::http::HeaderMap;
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// What the name of every sign-in cookie begins with (without `__Host-`).
const PREFIX: &str = "assent_oidc_";
/// Hex digits of the `state`'s SHA-256 in a cookie's name.
const NAME_HEX: usize = 16;
/// The cookies' path over plain http.
const HTTP_PATH: &str = "/ui/oidc";
/// A cookie's attributes when it is cleared.
const CLEARED: &str = "HttpOnly; SameSite=Lax; Max-Age=0";

/// Most sign-ins in progress one browser holds at once (tabs started together).
pub const MAX_IN_BROWSER: usize = 4;
/// Longest sign-in cookie set, name and value, in bytes: below what a browser keeps (4,096),
/// so that [`MAX_IN_BROWSER`] of them stay under the 16 KB many proxies allow for all of a
/// request's headers. A sign-in that would seal larger is sealed with `next` `/ui` instead.
pub const MAX_COOKIE: usize = 3800;

/// The name (without `__Host-`) of the cookie of the sign-in whose `state` is `state`.
pub fn name(state: &str) -> String {
    format!("{PREFIX}{}", &digest(state)[..NAME_HEX])
}

/// The value of the cookie of sign-in `s`, sealed by `store`: base64url without padding.
/// Errors: the store's `Invalid` for fields too long to seal.
pub fn value(store: &Store, s: &SignIn) -> Result<String, StoreError> {
    Ok(URL_SAFE_NO_PAD.encode(store.seal_sign_in(s)?))
}

/// Adds to `r` the `Set-Cookie` of sign-in `s`, which lives `ttl`, for the browser that sent
/// `headers`, and expires the oldest sign-in cookies it sent beyond [`MAX_IN_BROWSER`] - 1.
/// A cookie longer than [`MAX_COOKIE`] is sealed with `next` `/ui` instead; `Invalid` if
/// still too long.
pub(crate) fn set(
    st: &AppState,
    headers: &HeaderMap,
    r: &mut Response,
    s: &SignIn,
    ttl: Duration,
) -> Result<(), StoreError> {
    let jar = Jar::of(st, headers);
    let full = jar.name(&name(&s.state));
    let mut value = value(&st.store, s)?;
    if full.len() + 1 + value.len() > MAX_COOKIE {
        let home = SignIn {
            next: "/ui".into(),
            ..s.clone()
        };
        value = self::value(&st.store, &home)?;
        if full.len() + 1 + value.len() > MAX_COOKIE {
            return Err(StoreError::Invalid(
                "the sign-in is too large for a cookie".into(),
            ));
        }
    }
    let mut held: Vec<String> = Vec::new();
    for (n, _) in cookies(headers) {
        if let Some(base) = held_name(jar, n)
            && !held.contains(&base)
        {
            held.push(base);
        }
    }
    let over = held.len().saturating_sub(MAX_IN_BROWSER - 1);
    for old in &held[..over] {
        jar.set(r, (old, HTTP_PATH), "", CLEARED);
    }
    let attrs = format!("HttpOnly; SameSite=Lax; Max-Age={}", ttl.as_secs());
    jar.set(r, (&name(&s.state), HTTP_PATH), &value, &attrs);
    Ok(())
}

/// The name without `__Host-` of request cookie `n` when it is a sign-in cookie under `jar`'s
/// naming.
fn held_name(jar: Jar, n: &str) -> Option<String> {
    let prefix = jar.name(PREFIX);
    let hex = n.strip_prefix(&prefix)?;
    let ok = hex.len() == NAME_HEX && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| format!("{PREFIX}{hex}"))
}

/// The sign-in in progress whose `state` is `state`, from its cookie in `headers` (under the
/// name in force only: over https never an un-prefixed one): sealed by this gateway's keys (on
/// any replica), whole, unexpired at `now` (Unix ms), and for this very `state`. `None`
/// otherwise: no cookie (another browser, or a callback the browser never started), a forged,
/// altered or expired one, or another sign-in's.
pub(crate) fn read(st: &AppState, headers: &HeaderMap, state: &str, now: i64) -> Option<SignIn> {
    let full = Jar::of(st, headers).name(&name(state));
    cookies(headers)
        .filter(|(n, _)| *n == full)
        .filter_map(|(_, v)| URL_SAFE_NO_PAD.decode(v).ok())
        .find_map(|sealed| {
            let s = st.store.open_sign_in(&sealed, now)?;
            bool::from(s.state.as_bytes().ct_eq(state.as_bytes())).then_some(s)
        })
}

/// Adds to `r` the `Set-Cookie` that clears the cookie of the sign-in whose `state` is `state`.
pub(crate) fn clear(st: &AppState, headers: &HeaderMap, r: &mut Response, state: &str) {
    Jar::of(st, headers).set(r, (&name(state), HTTP_PATH), "", CLEARED);
}
