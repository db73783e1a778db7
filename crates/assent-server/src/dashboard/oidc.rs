//! Single sign-on for the dashboard (issue 14 §7): OpenID Connect authorization code flow with
//! PKCE through the `openidconnect` crate.
//!
//! - `GET /ui/oidc/start[?next=PATH][&step_up=1]` discovers the provider (cached five
//!   minutes; an unreachable issuer is a `502` page naming it and why), keeps the `state`'s
//!   SHA-256, the nonce, the PKCE verifier and the SHA-256 of a fresh browser cookie
//!   (`__Host-assent_oidc` over https, `Path=/`; `assent_oidc`, `Path=/ui/oidc` over plain
//!   http: `super::session::Jar`; `HttpOnly`, `SameSite=Lax`, 10 minutes) in the store, and
//!   sends the browser to the provider. Starts are limited per client network
//!   ([`crate::throttle::Throttle::sso_start`]: `429 RATE_LIMITED` with `Retry-After`), and the
//!   store holds at most 64 in progress per network (`429` past it, across replicas), never
//!   replacing one.
//! - `step_up=1` is a step-up (a sensitive form asks for a recent sign-in): the provider is
//!   sent `max_age=0` (OpenID Connect Core §3.1.2.1), so it must
//!   authenticate the person again rather than reuse its own session, and the ID token's
//!   `auth_time` must be no older than the step-up's start (less [`AUTH_TIME_SKEW`]); absent or
//!   older, the callback is a `403` and starts no session.
//! - `GET /ui/oidc/callback?state&code` takes that record once (any replica; a replayed or
//!   expired `state`, or one started in another browser, is a `403` and starts nothing),
//!   redeems the code with the verifier, and has the library check the ID token's signature,
//!   issuer, audience, expiry and nonce. The `roles_claim` groups map to roles
//!   ([`OidcConfig::roles_for`]); no role is a `403` and no session. The session is
//!   `oidc:<name_claim>` (a prefix no configured principal may use) carrying its roles.
//!
//! Refused callbacks count against the client address in the failed-authentication throttle
//! (`crate::throttle`); a locked-out address is `429` before any request to the provider.
//!
//! The session cookie is `SameSite=Strict`, so it is not sent on the provider's cross-site
//! redirect chain: the callback answers with a page that moves on to the dashboard itself.

use super::page::{Message, forbidden, page_with, secured};
use super::session::{Jar, next_path, set_session_cookie};
use super::sessions::{self, digest, random_hex};
use crate::config::oidc::{Extra, NAME_PREFIX, OidcConfig, Sso, error_chain};
use crate::state::{AppState, now_ms};
use assent_store::oidc_logins::OidcLogin;
use assent_store::ui_sessions::SsoGrant;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use openidconnect::core::{CoreAuthenticationFlow, CoreGenderClaim};
use openidconnect::{
    AuthorizationCode, CsrfToken, IdTokenClaims, Nonce, PkceCodeChallenge, PkceCodeVerifier, Scope,
    TokenResponse as _,
};
use std::collections::HashMap;
use std::time::Duration;

/// The browser cookie's name without the `__Host-` prefix, and its path over plain http.
const BROWSER_COOKIE: (&str, &str) = ("assent_oidc", "/ui/oidc");
/// How long a sign-in at the provider may take.
const LOGIN_TTL: Duration = Duration::from_secs(600);
/// How far the provider's clock may be behind ours for a step-up's `auth_time`.
pub(crate) const AUTH_TIME_SKEW: Duration = Duration::from_secs(30);
/// What a step-up's nonce begins with, in the stored sign-in (the server's record, which the
/// browser cannot change; the ID token must carry the whole nonce back).
const STEP_UP_NONCE: &str = "step-up.";

// On one replica, a network's starts within a sign-in's lifetime stay below what the store
// lets one client hold, so a flood is answered by the throttle (with Retry-After); across
// replicas the store refuses (it never replaces a sign-in in progress).
const _: () = assert!(
    (crate::throttle::SSO_START_BURST as u64
        + LOGIN_TTL.as_secs() / crate::throttle::SSO_START_EVERY.as_secs())
        < assent_store::oidc_logins::MAX_PER_CLIENT as u64
);

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

/// `GET /ui/oidc/start[?next=PATH][&step_up=1]`: sends the browser to the provider (see the
/// module doc); `429 RATE_LIMITED` with `Retry-After` past the client network's allowance of
/// starts, before the provider or the store is asked anything.
pub(crate) async fn start(
    State(st): State<AppState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
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
    let addr = st.throttle.addr_from(peer.map(|p| p.0.0.ip()), &headers);
    if let Some(wait) = st.throttle.sso_start(addr) {
        tracing::warn!("SSO sign-in starts over the client network's allowance refused");
        return secured(crate::throttle::too_many(
            "RATE_LIMITED",
            "Too many single sign-on starts from this network; wait and try again.",
            wait,
        ));
    }
    let Some(q) = query(raw.as_deref()).filter(|q| q.len() <= 4) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "Not understood",
            "The query could not be read.",
        );
    };
    let next = next_path(q.get("next"));
    let step_up = q.get("step_up").is_some_and(|v| v == "1");
    let client = match sso.client().await {
        Ok(c) => c,
        Err(why) => return refused(StatusCode::BAD_GATEWAY, "Single sign-on unavailable", &why),
    };
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut req = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            move || match step_up {
                true => Nonce::new(format!("{STEP_UP_NONCE}{}", random_hex())),
                false => Nonce::new_random(),
            },
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
    let browser = random_hex();
    let login = OidcLogin {
        browser_sha256: digest(&browser),
        nonce: nonce.secret().clone(),
        pkce_verifier: verifier.secret().clone(),
        next,
        expires_at: now_ms().saturating_add(LOGIN_TTL.as_millis() as i64),
    };
    let key = digest(state.secret());
    let client = client_digest(addr);
    let stored = st
        .store_task(move |s| s.put_oidc_login(&key, &client, &login, now_ms()))
        .await;
    if matches!(stored, Ok(Ok(false))) {
        tracing::warn!("an SSO start refused: its network holds the most sign-ins in progress");
        return secured(crate::throttle::too_many(
            "RATE_LIMITED",
            "Too many single sign-on sign-ins are in progress from this network; finish one, or wait and try again.",
            Duration::from_secs(60),
        ));
    }
    if !matches!(stored, Ok(Ok(true))) {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "The gateway cannot record a sign-in right now; try again.",
        );
    }
    let mut r = secured(Redirect::to(url.as_str()).into_response());
    let attrs = format!("HttpOnly; SameSite=Lax; Max-Age={}", LOGIN_TTL.as_secs());
    Jar::of(&st, &headers).set(&mut r, BROWSER_COOKIE, &browser, &attrs);
    r
}

/// The digest a sign-in in progress is kept under for its client (`assent_store::oidc_logins::
/// MAX_PER_CLIENT` of them at most, none ever replaced): its network as
/// the throttles count it ([`crate::throttle::network`]: an IPv4 address whole, an IPv6
/// address by its /64), no address (a Unix socket) as one client.
///
/// Attack (found by review): clients were kept by their IPv6 /48, so anyone in the same /48 (a
/// hosting provider's neighbours) started 16 sign-ins and replaced the one a person had in
/// progress. How many a /48 holds at once is bounded by its start allowance
/// ([`crate::throttle::SSO_SITE_BURST`]).
fn client_digest(addr: Option<std::net::IpAddr>) -> String {
    let label = match addr {
        Some(a) => crate::throttle::network(a).to_string(),
        None => "local".into(),
    };
    digest(&format!("oidc-start:{label}"))
}

/// Why a callback was refused: the status and the page's text.
type Refusal = (StatusCode, String);

/// `GET /ui/oidc/callback?state&code`: finishes the sign-in (see the module doc). A refused
/// callback (4xx: a bad query, an unknown state, the provider's error, a code it did not
/// redeem, an ID token refused, no role) counts against the client address in the throttle
/// the API's bad keys use; from a locked-out address the callback is `429 AUTH_THROTTLED`
/// with `Retry-After` before the store or the provider is asked anything.
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
    let throttled = |wait| {
        secured(crate::throttle::too_many(
            "AUTH_THROTTLED",
            "Too many refused sign-ins from this address; wait and try again.",
            wait,
        ))
    };
    if let Some(wait) = st.throttle.locked_out(addr, "", false) {
        return throttled(wait);
    }
    let jar = Jar::of(&st, &headers);
    let mut r = match finish(&st, &sso, &headers, raw.as_deref()).await {
        Ok((id, next)) => {
            let mut r = moving_on(&next);
            set_session_cookie(&mut r, &id, jar);
            r
        }
        Err((status, why)) => {
            // Only the caller's failures count; the gateway's own (store, provider down) do not.
            let locked = match status.is_client_error() {
                true => st.throttle.failed_address(addr).await,
                false => None,
            };
            match locked {
                Some(wait) => throttled(wait),
                None => refused(
                    status,
                    "Sign-in refused",
                    &format!("{why} No session was started."),
                ),
            }
        }
    };
    jar.set(
        &mut r,
        BROWSER_COOKIE,
        "",
        "HttpOnly; SameSite=Lax; Max-Age=0",
    );
    r
}

/// A `200` page that moves the browser on to `next` (a dashboard path) by itself, so the
/// `SameSite=Strict` session cookie is sent (a redirect would still be part of the
/// provider's cross-site navigation).
fn moving_on(next: &str) -> Response {
    let esc = next
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Signed in</title>\
         <meta http-equiv=\"refresh\" content=\"0;url={esc}\"></head>\
         <body><p>Signed in. <a href=\"{esc}\">Continue to the dashboard</a>.</p></body></html>"
    );
    secured((StatusCode::OK, Html(html)).into_response())
}

/// The checks of a callback, in order; `Ok`: the new session's id and where to go.
async fn finish(
    st: &AppState,
    sso: &Sso,
    headers: &HeaderMap,
    raw: Option<&str>,
) -> Result<(String, String), Refusal> {
    let forbid = |m: &str| (StatusCode::FORBIDDEN, m.to_string());
    let q = query(raw)
        .filter(|q| q.len() <= 8 && q.values().all(|v| v.len() <= 4096))
        .ok_or((
            StatusCode::BAD_REQUEST,
            "The callback's query could not be read.".into(),
        ))?;
    if let Some(e) = q.get("error") {
        let e: String = e.chars().filter(|c| !c.is_control()).take(200).collect();
        return Err(forbid(&format!("The provider answered `{e}`.")));
    }
    let (Some(state), Some(code)) = (q.get("state"), q.get("code")) else {
        return Err((
            StatusCode::BAD_REQUEST,
            "The callback needs `state` and `code`.".into(),
        ));
    };
    let browser = Jar::of(st, headers)
        .get(headers, BROWSER_COOKIE.0)
        .unwrap_or("");
    let (key, bkey) = (digest(state), digest(browser));
    let unavailable = || {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "The store did not answer.".to_string(),
        )
    };
    let login = st
        .store_task(move |s| s.take_oidc_login(&key, &bkey, now_ms()))
        .await
        .map_err(|_| unavailable())?
        .map_err(|_| unavailable())?;
    let Some(login) = login else {
        tracing::warn!(
            "OIDC callback with an unknown, used, expired or other browser's state refused"
        );
        return Err(forbid(
            "This sign-in is unknown, was used already, expired, or was started in another browser.",
        ));
    };
    let client = sso
        .client()
        .await
        .map_err(|why| (StatusCode::BAD_GATEWAY, why))?;
    let exchange = client
        .exchange_code(AuthorizationCode::new(code.clone()))
        .map_err(|e| {
            (
                StatusCode::BAD_GATEWAY,
                format!("The provider has no token endpoint: {e}."),
            )
        })?
        .set_pkce_verifier(PkceCodeVerifier::new(login.pkce_verifier))
        .request_async(&sso.http)
        .await;
    let tokens = exchange.map_err(|e| {
        tracing::warn!(error = %error_chain(&e), "OIDC code exchange failed");
        forbid(&format!(
            "The provider did not redeem the code: {}.",
            error_chain(&e)
        ))
    })?;
    let id_token = tokens
        .id_token()
        .ok_or_else(|| forbid("The provider sent no ID token."))?;
    let step_up_start = login.nonce.starts_with(STEP_UP_NONCE).then(|| {
        login
            .expires_at
            .saturating_sub(LOGIN_TTL.as_millis() as i64)
    });
    let verifier = client.id_token_verifier();
    let claims = match id_token.claims(&verifier, &Nonce::new(login.nonce)) {
        Ok(c) => c,
        Err(e) => {
            sso.forget().await;
            tracing::warn!(error = %e, "OIDC ID token refused");
            return Err(forbid(&format!("The ID token was refused: {e}.")));
        }
    };
    let auth_time = authenticated_at(claims, step_up_start).map_err(|m| forbid(&m))?;
    let (name, grant) = identity(&sso.config, claims).map_err(|m| forbid(&m))?;
    if st.principals().iter().any(|p| p.name == name) {
        return Err(forbid("That name belongs to a configured principal."));
    }
    let roles = grant.roles.clone();
    let (id, _) = sessions::start_sso(st, &name, grant, auth_time)
        .await
        .ok_or((
            StatusCode::SERVICE_UNAVAILABLE,
            "The gateway cannot record a sign-in right now; try again.".to_string(),
        ))?;
    tracing::info!(operator = %name, roles = ?roles, "dashboard SSO sign-in");
    Ok((id, login.next))
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
/// ([`OidcConfig::grant_for`]) from verified `claims`; `Err` says why the person may not sign
/// in (no usable name, an `email` name the provider does not mark `email_verified: true`, or
/// groups that map to no role).
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
        .filter(|v| !v.is_empty() && v.len() <= 200 && v.chars().all(|ch| !ch.is_control()))
        .ok_or_else(|| format!("The ID token has no usable `{}` claim.", c.name_claim))?;
    let groups: Vec<String> = match extra.get(&c.roles_claim) {
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .take(1000)
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let grant = c.grant_for(&groups);
    if grant.roles.is_empty() {
        tracing::warn!(subject = %value, "SSO sign-in refused: no role");
        return Err(format!(
            "Your account's `{}` claim maps to no operator role on this gateway.",
            c.roles_claim
        ));
    }
    Ok((format!("{NAME_PREFIX}{value}"), grant))
}
