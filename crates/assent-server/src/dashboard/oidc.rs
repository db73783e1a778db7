//! Single sign-on for the dashboard (issue 14 §7): OpenID Connect authorization code flow with
//! PKCE through the `openidconnect` crate.
//!
//! - `GET /ui/oidc/start[?next=PATH][&step_up=1]` discovers the provider (cached five
//!   minutes, and used up to `crate::config::oidc::METADATA_STALE` longer while discovering
//!   it again fails or runs, one discovery at a time off the request path; with none usable,
//!   an unreachable issuer is a `502` page naming it and why, with `Retry-After`, and
//!   its failure is remembered for `crate::config::oidc::DISCOVERY_RETRY`, so a dead provider
//!   is asked once per interval, not once per sign-in), seals the sign-in in
//!   progress — `state`, nonce, PKCE verifier, `next`, whether it is a step-up, when it started
//!   and expires ([`LOGIN_TTL`]) — into a cookie of the browser's ([`cookie`]: `HttpOnly`,
//!   `SameSite=Lax`, `__Host-` over https; sealed by the store with AES-256-GCM under a key
//!   every replica derives from the shared `keys_dir`), and sends the browser to the provider.
//!   `next` is a dashboard path of at most [`MAX_NEXT`] bytes (else `/ui`), and a cookie that
//!   would be larger than [`cookie::MAX_COOKIE`] is sealed with `/ui` instead (found by review:
//!   a page starting four sign-ins with a long `next` of `"`s made every request of the browser
//!   carry 16 KB of cookies, which proxies refuse).
//!   A start writes nothing on the server and is not limited: found by review, starts were
//!   rows capped per client network and limited per network, so anyone behind an office's NAT
//!   kept its people's sign-ins refused (`429`) with one start every 30 s.
//! - `step_up=1` is a step-up (a sensitive form asks for a recent sign-in): the provider is
//!   sent `max_age=0` (OpenID Connect Core §3.1.2.1), so it must
//!   authenticate the person again rather than reuse its own session, and the ID token's
//!   `auth_time` must be no older than the step-up's start (less [`AUTH_TIME_SKEW`]); absent or
//!   older, the callback is a `403` and starts no session.
//! - `GET /ui/oidc/callback?state&code` needs the cookie of that `state` from the same browser,
//!   whole, sealed by this gateway's keys and unexpired (else `403`, and neither the provider
//!   nor the store is asked: a callback carried to another browser — login CSRF — or a forged
//!   or altered cookie starts nothing), and a `state` not spent already (any replica: a
//!   replayed callback is a `403`). Then, before the provider is asked, the `state` is
//!   recorded as spent in the store (insert-if-absent on either backend: of two callbacks at
//!   once, one goes on), so each sign-in cookie is good for exactly one code exchange,
//!   whatever its outcome (found by review: spent only after a successful sign-in, one cookie
//!   drove unlimited token requests with junk codes). It redeems the code with the verifier,
//!   and has the library check the ID token's signature, issuer, audience, expiry and nonce.
//!   The `roles_claim` groups map to roles ([`OidcConfig::roles_for`]); they supersede the
//!   groups the person's earlier sign-ins decided with ([`regroup`]); no role is a `403` and
//!   no session. The session is `oidc:<name_claim>` (a prefix no configured principal may
//!   use) carrying its roles. The callback clears its cookie.
//!
//! Only code exchanges the provider refused and ID tokens that failed their checks count
//! against the client address, in an allowance of single sign-on's own; a locked-out address
//! is `429` before the provider is asked, with its cookie kept and nothing spent. At most
//! `crate::config::oidc::SSO_EXCHANGES` exchanges are in flight per replica, at most
//! [`places::PER_NETWORK`] of one client network's (an IPv4 address or an IPv6 /48,
//! [`places::network`]); a callback finding no place waits up to
//! [`PLACE_WAIT`] for one, and a freed place goes to the waiting network with the fewest in
//! flight ([`places`]), so junk callbacks from a few dozen networks cannot keep a quiet one
//! out (found by review). The provider's token endpoint has [`EXCHANGE_TIMEOUT`] to answer.
//! A callback refused before the provider is asked counts nothing, so a web page cannot lock
//! its visitors' address out ([`callback`] says why).
//!
//! Every answer of the provider (discovery, its keys, the token answer) is read through
//! [`fetch`]: at most [`fetch::MAX_ANSWER`] bytes within [`fetch::FETCH_TIMEOUT`]; a larger or
//! slower one fails the request (discovery: a `502` at the start, remembered like any failed
//! discovery; the token answer: a `502` at the callback, counting nothing).
//!
//! An ID token that fails its checks leaves the discovered metadata in place; only one naming
//! a key id the known keys lack has the provider's keys fetched again, at most once per
//! `crate::config::oidc::KEYS_REFRESH` (`Sso::client_with_key`).
//!
//! The session cookie is `SameSite=Strict`, so it is not sent on the provider's cross-site
//! redirect chain: the callback answers with a page that moves on to the dashboard itself.

pub mod cookie;
pub mod fetch;
pub mod places;
pub mod regroup;

use super::page::{Message, forbidden, page_with, secured};
use super::session::{Jar, next_path, set_session_cookie};
use super::sessions::{self, digest};
use crate::config::oidc::{Extra, NAME_PREFIX, OidcConfig, Sso, SsoClient, error_chain};
use crate::config::principals::sso_name_ok;
use crate::state::{AppState, now_ms};
use assent_store::oidc_logins::{MAX_NEXT, SignIn};
use assent_store::ui_sessions::SsoGrant;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use openidconnect::core::{
    CoreAuthenticationFlow, CoreGenderClaim, CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
};
use openidconnect::{
    AuthorizationCode, CsrfToken, IdToken, IdTokenClaims, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RequestTokenError, Scope, TokenResponse as _,
};
use std::collections::HashMap;
use std::time::Duration;

/// How long a sign-in at the provider may take.
const LOGIN_TTL: Duration = Duration::from_secs(600);
/// How far the provider's clock may be behind ours for a step-up's `auth_time`.
pub(crate) const AUTH_TIME_SKEW: Duration = Duration::from_secs(30);
/// How long a callback waits for a place for its code exchange ([`places`]) before it is a
/// `503`: longer than an exchange may take, so that a network served next gets a place.
pub const PLACE_WAIT: Duration = Duration::from_secs(6);
/// How long the provider's token endpoint may take to answer a code exchange.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// A page with `status`, `title` and `text` for someone not signed in.
fn refused(status: StatusCode, title: &str, text: &str) -> Response {
    page_with(
        status,
        &Message {
            title: title.into(),
            text: text.into(),
            who: String::new(),
            csrf: String::new(),
        },
    )
}

/// The query's fields; a field sent twice or a query that does not parse is `None`.
fn query(raw: Option<&str>) -> Option<HashMap<String, String>> {
    let v: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or("")).ok()?;
    let mut m = HashMap::new();
    for (k, val) in v {
        if m.insert(k, val).is_some() {
            return None;
        }
    }
    Some(m)
}

/// `GET /ui/oidc/start[?next=PATH][&step_up=1]`: sends the browser to the provider with the
/// sign-in sealed into its cookie (see the module doc).
pub(crate) async fn start(
    State(st): State<AppState>,
    dropped: Option<axum::Extension<super::session::DroppedSession>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let Some(sso) = st.oidc.clone() else {
        return refused(
            StatusCode::NOT_FOUND,
            "Single sign-on is off",
            "This gateway has no `oidc` provider configured; sign in with an operator key.",
        );
    };
    let Some(q) = query(raw.as_deref()).filter(|q| q.len() <= 4) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "Not understood",
            "The query could not be read.",
        );
    };
    let next = Some(next_path(q.get("next")))
        .filter(|n| n.len() <= MAX_NEXT)
        .unwrap_or_else(|| "/ui".into());
    let step_up = q.get("step_up").is_some_and(|v| v == "1");
    let client = match sso.client().await {
        Ok(c) => c,
        Err(u) => {
            let mut r = refused(
                StatusCode::BAD_GATEWAY,
                "Single sign-on unavailable",
                &u.why,
            );
            retry_after(&mut r, u.retry_after);
            return r;
        }
    };
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut req = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .set_pkce_challenge(challenge);
    if step_up {
        // `max_age=0` alone (OIDC Core §3.1.2.1: the provider must authenticate again and
        // return `auth_time`); `prompt=login` is not sent, as some providers refuse it.
        req = req.set_max_age(Duration::ZERO);
    }
    for s in &sso.config.scopes {
        req = req.add_scope(Scope::new(s.clone()));
    }
    let (url, state, nonce) = req.url();
    let now = now_ms();
    let sign_in = SignIn {
        state: state.secret().clone(),
        nonce: nonce.secret().clone(),
        pkce_verifier: verifier.secret().clone(),
        next,
        step_up,
        started_at: now,
        expires_at: now.saturating_add(LOGIN_TTL.as_millis() as i64),
        replaces: super::session::session_cookie(&st, &headers)
            .map(str::to_string)
            .or(dropped.map(|d| d.0.0))
            .filter(|id| super::sessions::well_formed(id)),
    };
    let mut r = secured(Redirect::to(url.as_str()).into_response());
    if let Err(e) = cookie::set(&st, &headers, &mut r, &sign_in, LOGIN_TTL) {
        tracing::warn!(error = %e, "an SSO sign-in could not be sealed");
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "The gateway cannot start a sign-in right now; try again.",
        );
    }
    r
}

/// Why a callback was refused (see [`callback`]).
struct Refusal {
    status: StatusCode,
    why: String,
    /// The provider refused the code exchange or its ID token failed the checks: counts against
    /// the client address ([`crate::throttle::Throttle::sso_exchange_failed`]).
    counts: bool,
    /// Nothing was spent and the sign-in may still finish (the gateway or this replica could
    /// not go on): its cookie is kept.
    keep: bool,
    /// `Retry-After`, for a `429` or a `503`.
    wait: Option<Duration>,
}

impl Refusal {
    /// Refused before the provider was asked (a bad query, the provider's `error=`, no valid
    /// sign-in cookie, a spent `state`) or after it answered for someone this gateway does
    /// not sign in: counts nothing.
    fn early(status: StatusCode, why: impl Into<String>) -> Self {
        Self {
            status,
            why: why.into(),
            counts: false,
            keep: false,
            wait: None,
        }
    }

    /// The code exchange or the ID token failed: `403`, counted.
    fn failed(why: impl Into<String>) -> Self {
        Self {
            counts: true,
            ..Self::early(StatusCode::FORBIDDEN, why)
        }
    }

    /// The gateway could not go on before anything was spent (`wait`: try again after it).
    fn retry(status: StatusCode, why: impl Into<String>, wait: Option<Duration>) -> Self {
        Self {
            keep: true,
            wait,
            ..Self::early(status, why)
        }
    }
}

/// `GET /ui/oidc/callback?state&code`: finishes the sign-in (see the module doc).
///
/// What counts against the client address (its single sign-on allowance in
/// `crate::throttle`, not the one of keys) is only a code exchange the provider refused or an
/// ID token that failed its checks. A callback refused before the provider is asked — a bad
/// or duplicated query, the provider's `error=`, no valid unexpired sign-in cookie of this
/// browser, a spent `state` — guesses nothing (the cookie cannot be forged, the `state` is
/// the gateway's), so it counts nothing: found by review, every refused callback counted, and
/// any web page firing `<img src=…/callback?state=x&code=y>` from its visitors' browsers
/// locked their office's address out of single sign-on and of key sign-in.
///
/// A callback with a valid, unspent cookie is subject to the lock-out of its address's
/// failed exchanges (`429` with `Retry-After`, the cookie kept and nothing spent). Cookies are
/// free to obtain, so something must bound the code exchanges one address makes the gateway
/// send to the provider with its client secret; counting the failed ones does, and only an
/// exchange can fail that way, which takes a `state` that the provider sent back, so a page
/// elsewhere cannot. At most [`crate::config::oidc::SSO_EXCHANGES`] exchanges are in flight per
/// replica, [`places::PER_NETWORK`] per client network, shared fairly ([`places`]; no place
/// within [`PLACE_WAIT`], or no room to wait: `503` with `Retry-After`, nothing spent), which
/// bounds what many addresses at once, or an address before its failures are counted, can
/// send, and keeps them from crowding others out.
pub(crate) async fn callback(
    State(st): State<AppState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let Some(sso) = st.oidc.clone() else {
        return forbidden("Single sign-on is off on this gateway.");
    };
    let addr = st.throttle.addr_from(peer.map(|p| p.0.0.ip()), &headers);
    let q = query(raw.as_deref());
    let mut f = match finish(&st, &sso, addr, &headers, q.as_ref()).await {
        Ok((id, next, replaces)) => {
            super::session::end_replaced(&st, &headers, None, &id).await;
            // The session the browser had at the start (found by review: the Strict session
            // cookie does not come back with the provider's redirect, so none was ended).
            if let Some(old) = replaces.filter(|old| *old != id) {
                super::sessions::end(&st, &old).await;
            }
            st.throttle.session_authenticated(addr, &id);
            let mut r = super::page::moving_on(&next, "Signed in. Continue to the dashboard");
            set_session_cookie(&mut r, &id, Jar::of(&st, &headers));
            clear_cookie(&st, &headers, &mut r, q.as_ref());
            return r;
        }
        Err(f) => f,
    };
    if f.counts
        && let Some(wait) = st.throttle.sso_exchange_failed(addr).await
    {
        (f.status, f.wait) = (StatusCode::TOO_MANY_REQUESTS, Some(wait));
    }
    let mut r = match (f.status, f.wait) {
        (StatusCode::TOO_MANY_REQUESTS, Some(wait)) => secured(crate::throttle::too_many(
            "AUTH_THROTTLED",
            "Too many refused sign-ins from this address; wait and try again.",
            wait,
        )),
        (status, wait) => {
            let text = format!("{} No session was started.", f.why);
            let mut r = refused(status, "Sign-in refused", &text);
            if let Some(w) = wait {
                retry_after(&mut r, w);
            }
            r
        }
    };
    if !f.keep {
        clear_cookie(&st, &headers, &mut r, q.as_ref());
    }
    r
}

/// Sets `Retry-After` on `r`: `wait` in whole seconds, rounded up, at least 1.
fn retry_after(r: &mut Response, wait: Duration) {
    let secs = (wait.as_secs()).saturating_add(u64::from(wait.subsec_nanos() > 0));
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
}

/// Clears the sign-in cookie of the callback's `state` (in query `q`), if it named one.
fn clear_cookie(
    st: &AppState,
    headers: &HeaderMap,
    r: &mut Response,
    q: Option<&HashMap<String, String>>,
) {
    if let Some(state) = q.and_then(|q| q.get("state")) {
        cookie::clear(st, headers, r, state);
    }
}

/// The checks of a callback with query `q` from client address `addr`, in order (see
/// [`callback`]); `Ok`: the new session's id and where to go.
async fn finish(
    st: &AppState,
    sso: &Sso,
    addr: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    q: Option<&HashMap<String, String>>,
) -> Result<(String, String, Option<String>), Refusal> {
    let (state, code) = state_and_code(q)?;
    // The lock-out first, in memory: a locked-out address costs no store read (found by
    // review: a replayed cookie cost a store job on every request, without end).
    if let Some(wait) = st.throttle.sso_locked_out(addr) {
        return Err(Refusal::retry(
            StatusCode::TOO_MANY_REQUESTS,
            "",
            Some(wait),
        ));
    }
    let login = sign_in_of(st, headers, state).await?;
    let client = sso
        .client()
        .await
        .map_err(|u| Refusal::retry(StatusCode::BAD_GATEWAY, u.why, Some(u.retry_after)))?;
    let net = addr.map(places::network);
    let Some(place) = sso.places.take(net, PLACE_WAIT).await else {
        tracing::warn!("OIDC callback refused: too many code exchanges in flight");
        return Err(Refusal::retry(
            StatusCode::SERVICE_UNAVAILABLE,
            "The gateway is finishing too many sign-ins right now; try again in a moment.",
            Some(Duration::from_secs(1)),
        ));
    };
    spend(st, state, login.expires_at).await?;
    let request = client
        .exchange_code(AuthorizationCode::new(code.to_string()))
        .map_err(|e| {
            let why = format!("The provider has no token endpoint: {e}.");
            Refusal::early(StatusCode::BAD_GATEWAY, why)
        })?
        .set_pkce_verifier(PkceCodeVerifier::new(login.pkce_verifier))
        .request_async(&sso.http);
    // Bounded, so that a slow provider holds a place for little time.
    let tokens = tokio::time::timeout(EXCHANGE_TIMEOUT, request)
        .await
        .map_err(|_| {
            tracing::warn!("OIDC code exchange timed out");
            Refusal::early(
                StatusCode::BAD_GATEWAY,
                "The provider did not redeem the code in time. Start again.",
            )
        })?
        .map_err(exchange_refused)?;
    drop(place);
    let id_token = tokens
        .id_token()
        .ok_or_else(|| Refusal::failed("The provider sent no ID token."))?;
    let claims = verified(sso, &client, id_token, &login.nonce).await?;
    let forbid = |m: String| Refusal::early(StatusCode::FORBIDDEN, m);
    let step_up_start = login.step_up.then_some(login.started_at);
    let auth_time = authenticated_at(claims, step_up_start).map_err(forbid)?;
    let (name, grant) = identity(&sso.config, claims).map_err(forbid)?;
    if st.principals().iter().any(|p| p.name == name) {
        return Err(forbid(
            "That name belongs to a configured principal.".into(),
        ));
    }
    // The groups the provider gives the person now supersede those their earlier sign-ins
    // decided with, a sign-in refused for no role included ([`regroup`]).
    let id = name.strip_prefix(NAME_PREFIX).unwrap_or(&name);
    if let Err(why) = regroup::supersede(st, id, grant.groups.clone()).await {
        tracing::error!(%why, "SSO sign-in refused: what the person's earlier sign-ins decided could not be weighed again");
        return Err(Refusal::early(
            StatusCode::SERVICE_UNAVAILABLE,
            "The gateway cannot record a sign-in right now; start again.",
        ));
    }
    if grant.roles.is_empty() {
        tracing::warn!(subject = %id, "SSO sign-in refused: no role");
        return Err(forbid(format!(
            "Your account's `{}` claim maps to no operator role on this gateway.",
            sso.config.roles_claim
        )));
    }
    let roles = grant.roles.clone();
    let (id, _) = sessions::start_sso(st, &name, grant, auth_time)
        .await
        .ok_or_else(|| {
            Refusal::early(
                StatusCode::SERVICE_UNAVAILABLE,
                "The gateway cannot record a sign-in right now; start again.",
            )
        })?;
    tracing::info!(operator = %name, roles = ?roles, "dashboard SSO sign-in");
    Ok((id, login.next, login.replaces))
}

/// The callback's `state` and `code` from its query `q`: at most 8 fields of at most 4 KiB;
/// the provider's `error=` or a field missing is refused (counting nothing).
fn state_and_code(q: Option<&HashMap<String, String>>) -> Result<(&str, &str), Refusal> {
    let q = q
        .filter(|q| q.len() <= 8 && q.values().all(|v| v.len() <= 4096))
        .ok_or_else(|| {
            Refusal::early(
                StatusCode::BAD_REQUEST,
                "The callback's query could not be read.",
            )
        })?;
    if let Some(e) = q.get("error") {
        let e: String = e.chars().filter(|c| !c.is_control()).take(200).collect();
        return Err(Refusal::early(
            StatusCode::FORBIDDEN,
            format!("The provider answered `{e}`."),
        ));
    }
    match (q.get("state"), q.get("code")) {
        (Some(state), Some(code)) => Ok((state, code)),
        _ => Err(Refusal::early(
            StatusCode::BAD_REQUEST,
            "The callback needs `state` and `code`.",
        )),
    }
}

/// The ID token the provider sent.
type SsoIdToken =
    IdToken<Extra, CoreGenderClaim, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm>;

/// The claims of `token` once the library checked its signature, issuer, audience, expiry and
/// `nonce`, with the keys of `client`, or, when `token` names a key id they lack, with the
/// provider's keys fetched again ([`Sso::client_with_key`]: at most once per
/// [`crate::config::oidc::KEYS_REFRESH`]). A refusal is counted ([`Refusal::failed`]). The
/// provider's metadata is kept whatever the outcome (found by review: a refused ID token made
/// the gateway discover the provider again, at the will of anyone who could sign in).
async fn verified<'t>(
    sso: &Sso,
    client: &SsoClient,
    token: &'t SsoIdToken,
    nonce: &str,
) -> Result<&'t IdTokenClaims<Extra, CoreGenderClaim>, Refusal> {
    let nonce = Nonce::new(nonce.to_string());
    let mut e = match token.claims(&client.id_token_verifier(), &nonce) {
        Ok(c) => return Ok(c),
        Err(e) => e,
    };
    if let Some(kid) = key_id(token)
        && let Some(fresh) = sso.client_with_key(&kid).await
    {
        match token.claims(&fresh.id_token_verifier(), &nonce) {
            Ok(c) => return Ok(c),
            Err(again) => e = again,
        }
    }
    tracing::warn!(error = %e, "OIDC ID token refused");
    Err(Refusal::failed(format!("The ID token was refused: {e}.")))
}

/// The key id (`kid`, at most 256 bytes) the header of `token` names, unverified.
fn key_id(token: &SsoIdToken) -> Option<String> {
    use base64::Engine as _;
    let jwt = token.to_string();
    let head = jwt.split('.').next()?;
    let head = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .ok()?;
    let head: serde_json::Value = serde_json::from_slice(&head).ok()?;
    Some(head.get("kid")?.as_str()?)
        .filter(|k| !k.is_empty() && k.len() <= 256)
        .map(str::to_string)
}

/// The refusal of a code exchange that failed with `e`: a counted `403` when the provider
/// refused the code (or answered what could not be read), a `502` counting nothing when it
/// could not be reached.
fn exchange_refused<RE, T>(e: RequestTokenError<RE, T>) -> Refusal
where
    RE: std::error::Error + 'static,
    T: openidconnect::ErrorResponse + 'static,
{
    let chain = error_chain(&e);
    tracing::warn!(error = %chain, "OIDC code exchange failed");
    match e {
        // The provider said no: the code, its verifier or its client were refused.
        RequestTokenError::ServerResponse(_) => {
            Refusal::failed(format!("The provider did not redeem the code: {chain}."))
        }
        // Unreachable, or an answer that is no OAuth answer (a 5xx page): the provider's
        // trouble, not the caller's guess, so it counts nothing (found by review: during a
        // provider incident an office's address was locked out).
        _ => Refusal::early(
            StatusCode::BAD_GATEWAY,
            format!("The provider could not redeem the code: {chain}. Start again."),
        ),
    }
}

/// The callback's refusal when the store did not answer.
fn unavailable<E>(_: E) -> Refusal {
    Refusal::retry(
        StatusCode::SERVICE_UNAVAILABLE,
        "The store did not answer.",
        None,
    )
}

/// What a callback's sign-in was refused for when it was spent already (on any replica).
const USED: &str = "This sign-in was used already.";

/// The sign-in in progress the callback with `state` finishes: its cookie from this browser
/// ([`cookie::read`]), and not spent already ([`spend`]; read here, so that a replay is refused
/// before anything else is asked). Refusals here count nothing ([`callback`]).
async fn sign_in_of(st: &AppState, headers: &HeaderMap, state: &str) -> Result<SignIn, Refusal> {
    let Some(login) = cookie::read(st, headers, state, now_ms()) else {
        tracing::warn!(
            "OIDC callback without its browser's valid, unexpired sign-in cookie refused"
        );
        return Err(Refusal::early(
            StatusCode::FORBIDDEN,
            "This sign-in is unknown or expired, or was started in another browser; start again from the sign-in page.",
        ));
    };
    let key = digest(state);
    let spent = st
        .store_task(move |s| s.oidc_state_spent(&key))
        .await
        .map_err(unavailable)?
        .map_err(unavailable)?;
    if spent {
        // Only the browser that started it holds the cookie (HttpOnly, cleared at its
        // callback), so no web page makes this happen: it counts, and a replay loop meets the
        // lock-out (found by review).
        tracing::warn!("OIDC callback replayed: its state was used already");
        return Err(Refusal {
            counts: true,
            ..Refusal::early(StatusCode::FORBIDDEN, USED)
        });
    }
    Ok(login)
}

/// Records sign-in `state` (expiring at `expires_at`, Unix ms) as spent, for every replica,
/// before its code is exchanged: each sign-in cookie is good for one exchange. `Err` when it
/// was already (a replayed callback racing its first).
///
/// Attack (found by review): spent only after a successful sign-in, a callback the provider
/// refused spent nothing, and one cookie replayed with `code=junk1`, `junk2`… had the gateway
/// post to the provider's token endpoint with its client secret without end (providers that
/// lock a client out after failed token requests then refuse single sign-on to everyone).
async fn spend(st: &AppState, state: &str, expires_at: i64) -> Result<(), Refusal> {
    let key = digest(state);
    let fresh = st
        .store_task(move |s| s.spend_oidc_state(&key, expires_at, now_ms()))
        .await
        .map_err(unavailable)?
        .map_err(unavailable)?;
    if !fresh {
        tracing::warn!("OIDC callback replayed: its state was used already");
        return Err(Refusal::early(StatusCode::FORBIDDEN, USED));
    }
    Ok(())
}

/// When the person authenticated at the provider (Unix ms, the ID token's `auth_time`; `0`
/// when it does not say). For a step-up begun at `step_up_start` (Unix ms) the provider must
/// have authenticated them since (less [`AUTH_TIME_SKEW`]); `Err` says why not (no
/// `auth_time`, or an older one: it reused its own session).
///
/// Attack (found by review): a step-up sent neither `max_age` nor `prompt`, so the provider's
/// session cookie signed in again without anyone typing a password, and whoever held the
/// browser (or the provider's cookie) passed the step-up a sensitive form asks for.
fn authenticated_at(
    claims: &IdTokenClaims<Extra, CoreGenderClaim>,
    step_up_start: Option<i64>,
) -> Result<i64, String> {
    let at = claims.auth_time().map(|t| t.timestamp_millis());
    let Some(start) = step_up_start else {
        return Ok(at.unwrap_or(0));
    };
    let earliest = start.saturating_sub(AUTH_TIME_SKEW.as_millis() as i64);
    match at {
        Some(at) if at >= earliest => Ok(at),
        Some(_) => {
            tracing::warn!("SSO step-up refused: the provider did not authenticate again");
            Err("The provider did not ask you to sign in again (its `auth_time` is older than this step-up); confirming it is you needs a fresh sign-in.".into())
        }
        None => {
            tracing::warn!("SSO step-up refused: the ID token has no auth_time");
            Err("The provider did not say when you signed in (no `auth_time` in the ID token); confirming it is you needs it.".into())
        }
    }
}

/// The operator's name (`oidc:` + the `name_claim`'s value) and what its groups grant
/// ([`OidcConfig::grant_for`]: no role when its groups map to none) from verified `claims`;
/// `Err` says why the person may not sign in (no usable name — one a configured `sso` could
/// not be, [`sso_name_ok`] — or an `email` name the provider does not mark
/// `email_verified: true`).
fn identity(
    c: &OidcConfig,
    claims: &IdTokenClaims<Extra, CoreGenderClaim>,
) -> Result<(String, SsoGrant), String> {
    let extra = &claims.additional_claims().0;
    let value = match c.name_claim.as_str() {
        "sub" => Some(claims.subject().to_string()),
        // An email the provider has not verified may be anyone's: whoever registers
        // `olga@example.com` unverified would sign in as her (and as `olga` where linked).
        "email" if claims.email_verified() != Some(true) => {
            tracing::warn!("SSO sign-in refused: the email is not verified");
            return Err(
                "The provider does not say your email address is verified (`email_verified`); \
                 this gateway names SSO operators by their email."
                    .into(),
            );
        }
        "email" => claims.email().map(|e| e.to_string()),
        "preferred_username" => claims.preferred_username().map(|u| u.to_string()),
        other => extra
            .get(other)
            .and_then(|v| v.as_str())
            .map(str::to_string),
    };
    let value = value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("The ID token has no usable `{}` claim.", c.name_claim))?;
    // Found by review: only control characters were refused, so `olga\u{200b}@x` missed the
    // link of `sso: olga@x`, exact and loose, and signed in unlinked looking like her.
    if !sso_name_ok(&value) {
        let shown = value
            .chars()
            .take(100)
            .collect::<String>()
            .escape_debug()
            .to_string();
        tracing::warn!(name = %shown, "SSO sign-in refused: the name has whitespace, control or invisible characters, or is too long");
        return Err(format!(
            "Your `{}` claim `{shown}` is not a name this gateway accepts: 1 to 200 bytes without whitespace, control or invisible characters.",
            c.name_claim
        ));
    }
    let groups: Vec<String> = match extra.get(&c.roles_claim) {
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .take(1000)
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    Ok((format!("{NAME_PREFIX}{value}"), c.grant_for(&groups)))
}
