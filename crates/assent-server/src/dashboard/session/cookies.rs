//! The dashboard's cookies: reading them from a request's `Cookie` headers, the [`Jar`] that
//! names, scopes and flags them for a request, the session cookie's and the sign-in form's
//! names ([`COOKIE`], [`LOGIN_COOKIE`]), taking a session cookie off a request
//! ([`drop_session_cookie`]), and whether the dashboard is reached over https ([`https`]).
//! It looks nothing up in the store; `super` (`session.rs`) signs operators in with them.
//!
//! **Cookie names** ([`Jar`]): over https the dashboard's cookies are `__Host-assent_ui` (the
//! session), `__Host-assent_ui_login` (the sign-in form's) and `__Host-assent_oidc_<16 hex>`
//! (a single sign-on in progress, one per sign-in: `crate::dashboard::oidc::cookie`), each
//! `Secure`, `Path=/` and without `Domain`, so the browser takes them from this host only: a
//! sibling subdomain cannot plant one (login CSRF into its own account, session fixation),
//! and only the prefixed name is read. Over plain http (a loopback gateway) a browser refuses
//! `__Host-` cookies, so they are `assent_ui` (`Path=/ui`), `assent_ui_login`
//! (`Path=/ui/login`) and `assent_oidc_<16 hex>` (`Path=/ui/oidc`).

use crate::state::AppState;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;

/// The session cookie's name without the `__Host-` prefix, and its path over plain http.
pub(crate) const COOKIE: (&str, &str) = ("assent_ui", "/ui");
/// The sign-in form's double-submit cookie, likewise.
pub(crate) const LOGIN_COOKIE: (&str, &str) = ("assent_ui_login", "/ui/login");

/// The value of cookie `name` in the request's `Cookie` headers (the exact name: no other
/// spelling or prefix is read).
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    cookies(headers).find(|(k, _)| *k == name).map(|(_, v)| v)
}

/// Every `(name, value)` in the request's `Cookie` headers, in the order sent (a browser sends
/// the cookies of one path oldest first).
pub(crate) fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
}

/// How the dashboard's cookies are named, scoped and flagged for one request (see the module
/// doc): `https` when the dashboard is reached over https ([`https`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Jar {
    /// `__Host-` names, `Secure`, `Path=/`.
    pub(crate) https: bool,
}

impl Jar {
    /// The jar of a request with `headers` to gateway `st`.
    pub(crate) fn of(st: &AppState, headers: &HeaderMap) -> Jar {
        Jar {
            https: https(st, headers),
        }
    }

    /// The name cookie `base` (e.g. `assent_ui`) has in this jar.
    pub(crate) fn name(self, base: &str) -> String {
        match self.https {
            true => format!("__Host-{base}"),
            false => base.to_string(),
        }
    }

    /// The value of cookie `base` under this jar's name only: over https an un-prefixed
    /// cookie, which any sibling subdomain can set, is never read.
    pub(crate) fn get<'a>(self, headers: &'a HeaderMap, base: &str) -> Option<&'a str> {
        cookie(headers, &self.name(base))
    }

    /// Appends to `r` the `Set-Cookie` of cookie `(base, http_path)` with `value` and
    /// `attrs` (e.g. `"HttpOnly; SameSite=Lax; Max-Age=600"`): over https `__Host-base`,
    /// `Path=/` and `Secure`; over http `base` with `Path=http_path`. Never a `Domain`.
    pub(crate) fn set(
        self,
        r: &mut Response,
        (base, http_path): (&str, &str),
        value: &str,
        attrs: &str,
    ) {
        let (path, secure) = match self.https {
            true => ("/", "; Secure"),
            false => (http_path, ""),
        };
        let c = format!("{}={value}; Path={path}; {attrs}{secure}", self.name(base));
        if let Ok(v) = HeaderValue::from_str(&c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
}

/// The id of the request's dashboard session: its session cookie under the name in force
/// ([`Jar`]), if it sent one.
pub(crate) fn session_cookie<'a>(st: &AppState, headers: &'a HeaderMap) -> Option<&'a str> {
    Jar::of(st, headers).get(headers, COOKIE.0)
}

/// Removes the request's session cookie ([`session_cookie`]'s name in force) from its
/// `Cookie` headers, keeping every other cookie (the sign-in form's own among them): the
/// request then reads as one from a browser signed in nowhere. The edge does so on the sign-in
/// pages for a cookie that signs no one in (`edge::dashboard_session`).
pub(crate) fn drop_session_cookie(st: &AppState, headers: &mut HeaderMap) {
    let name = Jar::of(st, headers).name(COOKIE.0);
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty() && c.split('=').next() != Some(name.as_str()))
        .map(str::to_string)
        .collect();
    headers.remove(header::COOKIE);
    if let Ok(v) = HeaderValue::from_str(&kept.join("; "))
        && !kept.is_empty()
    {
        headers.insert(header::COOKIE, v);
    }
}

/// Over plain http, when the request carries the session cookie's name more than once: the
/// `Set-Cookie` values that expire it on every path above `path` but the session's own
/// (`Path=/ui`), so that the planted copies go; empty otherwise. The edge then drops them all
/// from the request: it reads as one signed in nowhere. Attack (found by review): a browser
/// keeps cookies apart by host, not by port, so a page on another port of a plain-http
/// gateway's host set `assent_ui=<the attacker's live session>; Path=/ui/approvals`; the
/// browser sent it first on the cards' pages, whose forms then ran as the attacker and carried
/// the attacker's CSRF token, so the victim's decisions were recorded as the attacker's (login
/// CSRF past the sign-in form's origin check). Over https the `__Host-` name allows one
/// cookie, `Path=/`, set by this origin alone.
pub(crate) fn planted_session_cookies(
    st: &AppState,
    headers: &HeaderMap,
    path: &str,
) -> Vec<HeaderValue> {
    let jar = Jar::of(st, headers);
    let name = jar.name(COOKIE.0);
    let dashboard = path == COOKIE.1 || path.starts_with("/ui/");
    if jar.https || !dashboard || cookies(headers).filter(|(k, _)| *k == name).count() < 2 {
        return Vec::new();
    }
    // At most the first four segments, each of plain characters (found by review of this
    // fix: 8,000 `/` made 33 MB of headers from an 8 KB request, and `;Path=/ui` in the path
    // was written into the header as an attribute, expiring the operator's own session).
    let plain = |seg: &str| {
        !seg.is_empty()
            && seg.len() <= 64
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    let mut above = vec!["/".to_string()];
    let mut at = String::new();
    for seg in path.split('/').skip(1).take(4).take_while(|s| plain(s)) {
        at = format!("{at}/{seg}");
        above.extend([at.clone(), format!("{at}/")]);
    }
    above
        .iter()
        .filter(|p| p.as_str() != COOKIE.1)
        .filter_map(|p| HeaderValue::from_str(&format!("{name}=; Path={p}; Max-Age=0")).ok())
        .collect()
}

/// Whether the dashboard is reached over https: the configured `public_url` is an
/// `https://` URL, or the single sign-on `redirect_url` is, or a trusted proxy's
/// `X-Forwarded-Proto` (the only one left on a request, `edge.rs`) says `https`. Found by
/// review: only the proxy's header earned `Secure`, so a gateway published over https behind a
/// proxy missing from `trusted_proxies` let the browser send its session cookie over plain
/// http too.
pub(crate) fn https(st: &AppState, headers: &HeaderMap) -> bool {
    let is_https = |u: &str| u.starts_with("https://");
    st.public_url.as_deref().is_some_and(is_https)
        || st
            .oidc
            .as_ref()
            .is_some_and(|s| is_https(&s.config.redirect_url))
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}
