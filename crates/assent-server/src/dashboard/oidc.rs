//! Single sign-on for the dashboard (issue 14 §7): OpenID Connect authorization code flow with
//! PKCE through the `openidconnect` crate.
//!
//! - `GET /ui/oidc/start[?next=PATH]` discovers the provider (cached five minutes; an
//!   unreachable issuer is a `502` page naming it and why), keeps the `state`'s SHA-256, the
//!   nonce, the PKCE verifier and the SHA-256 of a fresh browser cookie (`assent_oidc`,
//!   `HttpOnly`, `SameSite=Lax`, `Path=/ui/oidc`, 10 minutes) in the store, and sends the
//!   browser to the provider.
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
use super::session::{cookie, next_path, secure_attr, set_session_cookie};
use super::sessions::{self, digest, random_hex};
use crate::config::oidc::{Extra, NAME_PREFIX, OidcConfig, Sso, error_chain};
use crate::state::{AppState, now_ms};
use assent_store::oidc_logins::OidcLogin;
use assent_store::ui_sessions::SsoGrant;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use openidconnect::core::{CoreAuthenticationFlow, CoreGenderClaim};
use openidconnect::{
    AuthorizationCode, CsrfToken, IdTokenClaims, Nonce, PkceCodeChallenge, PkceCodeVerifier, Scope,
    TokenResponse as _,
};
use std::collections::HashMap;
use std::time::Duration;

const BROWSER_COOKIE: &str = "assent_oidc";
/// How long a sign-in at the provider may take.
const LOGIN_TTL: Duration = Duration::from_secs(600);

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

/// `"; Secure"` when the dashboard is reached over https (a https redirect URL, or
/// [`secure_attr`]: a https `public_url` or a trusted proxy's word).
fn secure(st: &AppState, sso: &Sso, headers: &HeaderMap) -> &'static str {
    if sso.config.redirect_url.starts_with("https://") {
        "; Secure"
    } else {
        secure_attr(st, headers)
    }
}

/// `GET /ui/oidc/start[?next=PATH]`: sends the browser to the provider (see the module doc).
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
    let Some(q) = query(raw.as_deref()).filter(|q| q.len() <= 4) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "Not understood",
            "The query could not be read.",
        );
    };
    let next = next_path(q.get("next"));
    let client = match sso.client().await {
        Ok(c) => c,
        Err(why) => return refused(StatusCode::BAD_GATEWAY, "Single sign-on unavailable", &why),
    };
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut req = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .set_pkce_challenge(challenge);
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
    let client = client_digest(st.throttle.addr_from(peer.map(|p| p.0.0.ip()), &headers));
    let stored = st
        .store_task(move |s| s.put_oidc_login(&key, &client, &login, now_ms()))
        .await;
    if !matches!(stored, Ok(Ok(()))) {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "The gateway cannot record a sign-in right now; try again.",
        );
    }
    let mut r = secured(Redirect::to(url.as_str()).into_response());
    let c = format!(
        "{BROWSER_COOKIE}={browser}; Path=/ui/oidc; HttpOnly; SameSite=Lax; Max-Age={}{}",
        LOGIN_TTL.as_secs(),
        secure(&st, &sso, &headers)
    );
    if let Ok(v) = HeaderValue::from_str(&c) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// The digest a sign-in in progress is kept under for its client (`assent_store::oidc_logins::
/// MAX_PER_CLIENT` of them at most): an IPv4 address whole, an IPv6 address by its /48 (one
/// site's prefix: an attacker given a /48 has 2^80 addresses but one allowance), no address
/// (a Unix socket) as one client.
fn client_digest(addr: Option<std::net::IpAddr>) -> String {
    use std::net::IpAddr;
    let label = match addr {
        Some(IpAddr::V4(a)) => a.to_string(),
        Some(IpAddr::V6(a)) => {
            let s = a.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
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
    let secure = secure(&st, &sso, &headers);
    let mut r = match finish(&st, &sso, &headers, raw.as_deref()).await {
        Ok((id, next)) => {
            let mut r = moving_on(&next);
            set_session_cookie(&mut r, &id, secure);
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
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{BROWSER_COOKIE}=; Path=/ui/oidc; HttpOnly; SameSite=Lax; Max-Age=0{secure}"
    )) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
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
    let browser = cookie(headers, BROWSER_COOKIE).unwrap_or("");
    let (key, bkey) = (digest(state), digest(browser));
    let login = st
        .store_task(move |s| s.take_oidc_login(&key, &bkey, now_ms()))
        .await
        .map_err(|_| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "The store did not answer.".to_string(),
            )
        })?
        .map_err(|_| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "The store did not answer.".to_string(),
            )
        })?;
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
    let verifier = client.id_token_verifier();
    let claims = match id_token.claims(&verifier, &Nonce::new(login.nonce)) {
        Ok(c) => c,
        Err(e) => {
            sso.forget().await;
            tracing::warn!(error = %e, "OIDC ID token refused");
            return Err(forbid(&format!("The ID token was refused: {e}.")));
        }
    };
    let (name, grant) = identity(&sso.config, claims).map_err(|m| forbid(&m))?;
    if st.principals().iter().any(|p| p.name == name) {
        return Err(forbid("That name belongs to a configured principal."));
    }
    let roles = grant.roles.clone();
    let (id, _) = sessions::start_sso(st, &name, grant).await.ok_or((
        StatusCode::SERVICE_UNAVAILABLE,
        "The gateway cannot record a sign-in right now; try again.".to_string(),
    ))?;
    tracing::info!(operator = %name, roles = ?roles, "dashboard SSO sign-in");
    Ok((id, login.next))
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
