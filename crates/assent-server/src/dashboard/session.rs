//! Dashboard sign-in and sessions: operator keys start a session (a random 256-bit id in the
//! session cookie, 12 hours, stored by its SHA-256: `sessions.rs`), the sign-in form's
//! double-submit cookie, the signed-in `Operator` of a request, and the CSRF check of every
//! state-changing form (`operator_form`). It renders no queue or card. The cookies themselves
//! — their names over https and http, the [`Jar`] — are `session/cookies.rs`.

use crate::auth::principal_for_key;
use crate::config::Principal;
use crate::error::ApiError;
use crate::state::AppState;
use askama::Template;
use assent_store::ui_sessions::SignedInWith;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

mod cookies;

use self::cookies::{COOKIE, LOGIN_COOKIE};
pub(crate) use self::cookies::{
    Jar, cookies, drop_session_cookie, planted_session_cookies, session_cookie,
};
use super::page::{Message, forbidden, page_with, secured, to_login};
use super::sessions::{self, SESSION_TTL, Session, random_hex};
use std::collections::HashMap;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// A session cookie the edge took off a sign-in page's request without looking it up (its
/// address was locked out: `edge::dashboard_session`): the sign-in still ends it if it is a
/// live session, as it ends the one it replaces (found by review).
#[derive(Debug, Clone)]
pub(crate) struct DroppedSession(pub(crate) String);

/// The signed-in operator: the session and the principal it belongs to (a principal removed
/// from the config since is signed out).
#[derive(Clone)]
pub(crate) struct Operator {
    pub(crate) session: Session,
    pub(crate) principal: Principal,
    /// The single sign-on name (without `oidc:`) a session signed in by SSO was given;
    /// `None`: signed in with a key.
    pub(crate) signed_in_by_sso: Option<String>,
    /// A session signed in by SSO: the provider's groups that mapped to some role at sign-in
    /// (kept with its quorum votes, [`crate::decide::Decider::by_sso`]); empty otherwise.
    pub(crate) sso_groups: Vec<String>,
    /// A session signed in by SSO: the binding of the provider it signed in through
    /// ([`crate::config::oidc::OidcConfig::session_binding`], the one in force), kept with its
    /// decisions; empty otherwise.
    pub(crate) sso_provider: String,
}

impl Operator {
    /// How this operator's decisions reach the gateway, for their audit records: the
    /// dashboard, and the SSO name when signed in by SSO (a linked principal's name alone
    /// would not say which way in).
    pub(crate) fn via(&self) -> assent_store::Via {
        assent_store::Via::dashboard(self.signed_in_by_sso.clone())
    }
}

/// What the edge found of a dashboard request's session (`edge::dashboard_session`, the one
/// store lookup of it per request): the live session's operator, or `None`. The handlers read
/// it (as an extractor, or through [`Operator`]'s); only a state-changing form looks the cookie
/// up again, once its body was read ([`Posted`]). A request the edge did not mark (not a
/// dashboard path, no cookie, a cookie not of the form the gateway issues, one that signs no
/// one in) has no `SignedIn` and reads as signed in nowhere (fail closed).
///
/// Found by review: the edge looked the session up to throttle it, then every handler looked
/// it up again — two store reads per dashboard request, the second one never throttled (a
/// request with a bearer header skipped the edge's).
#[derive(Clone, Default)]
pub(crate) struct SignedIn(pub(crate) Option<std::sync::Arc<Operator>>);

impl SignedIn {
    /// The operator, if the edge found one.
    pub(crate) fn operator(&self) -> Option<Operator> {
        self.0.as_deref().cloned()
    }

    /// Whether the edge found a live session.
    pub(crate) fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// What the edge put into the request with `parts`; missing is signed in nowhere.
    fn of(parts: &Parts) -> SignedIn {
        parts
            .extensions
            .get::<SignedIn>()
            .cloned()
            .unwrap_or_default()
    }
}

/// A dashboard request's [`SignedIn`], as an extractor (never rejects).
impl FromRequestParts<AppState> for SignedIn {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Self::Rejection> {
        Ok(SignedIn::of(parts))
    }
}

/// The operator the session cookie of a request with `headers` signs in now, looked up in the
/// store again ([`signed_in_as`]; `None` also when the store did not answer): only for what
/// outlives its request's edge check (the dashboard's event stream, which ends once its session
/// no longer signs anyone in); a request's handlers read [`SignedIn`].
pub(crate) async fn still_signed_in(st: &AppState, headers: &HeaderMap) -> Option<Operator> {
    signed_in_as(st, session_cookie(st, headers)?)
        .await
        .ok()
        .flatten()
}

/// The signed-in operator of session cookie value `id`: it names a live session
/// of a principal that is (still) an operator — for a key's session, with the key it signed in
/// with ([`sessions::key_binding`], migration 0036): a key changed since signs no one in.
///
/// A single sign-on session (issue 14 §7) is an operator named `oidc:…` with the roles its
/// claims mapped to, owning no agent — or, when a configured operator names that identity as
/// its `sso`, that principal with those roles ([`sso_principal`]); it holds only while `oidc`
/// is configured with the issuer and client id it signed in through
/// ([`crate::config::oidc::OidcConfig::session_binding`]) and no configured principal has taken its name (a reload cannot make it
/// someone else), and acts only with the roles its groups still map to under the
/// `oidc.roles` map in force (a role taken from a group is gone at the next request; none
/// left signs it out).
///
/// `Ok(None)` when it signs no one in (not of the form the gateway issues: the store is not
/// asked), `Err(())` when the store did not answer. `edge.rs`' throttle counts the first as a
/// failed authentication, and answers the second `503`.
pub(crate) async fn signed_in_as(st: &AppState, id: &str) -> Result<Option<Operator>, ()> {
    let Some((session, how)) = sessions::lookup(st, id).await? else {
        return Ok(None);
    };
    Ok(operator_of(st, session, how))
}

/// The operator session `session`, signed in `how`, is now (see [`signed_in_as`]), if any.
fn operator_of(st: &AppState, session: Session, how: SignedInWith) -> Option<Operator> {
    let principals = st.principals();
    let by_sso = matches!(how, SignedInWith::Sso { .. });
    let mut sso_groups = Vec::new();
    let mut sso_provider = String::new();
    let principal = match how {
        // Still this name's key (found by review: a key rotated by a restart, or the name
        // removed and added again, left a stolen cookie signing in until the session ended).
        SignedInWith::Key { binding } => {
            let p = principals
                .iter()
                .find(|p| p.name == session.operator && p.roles().is_some())?;
            let now = sessions::key_binding(p);
            if !bool::from(now.as_bytes().ct_eq(binding.as_bytes())) {
                return None;
            }
            p.clone()
        }
        SignedInWith::Sso { grant, binding } => {
            let config = &st.oidc.as_ref()?.config;
            // Still the provider it signed in through.
            let now = config.session_binding();
            let roles = config.roles_now(&grant);
            if !same(&now, &binding)
                || roles.is_empty()
                || !session
                    .operator
                    .starts_with(crate::config::oidc::NAME_PREFIX)
                || principals.iter().any(|p| p.name == session.operator)
            {
                return None;
            }
            sso_groups = grant.groups;
            sso_provider = now;
            sso_principal(&principals, &session.operator, roles)?
        }
    };
    let signed_in_by_sso = by_sso
        .then(|| {
            session
                .operator
                .strip_prefix(crate::config::oidc::NAME_PREFIX)
        })
        .flatten()
        .map(str::to_string);
    Some(Operator {
        session,
        principal,
        signed_in_by_sso,
        sso_groups,
        sso_provider,
    })
}

/// The principal SSO operator `operator` (`oidc:<name>`) acts as, with `roles`: the configured
/// operator whose `sso` is `<name>` — its name (so a quorum counts the person once, whichever
/// way they signed in), `owns` and passkeys — else an operator of that name owning no agent.
///
/// Attack: a person owning an agent through their key's principal approved its calls from
/// the dashboard signed in by SSO, as someone owning nothing, and cast a second vote in a
/// quorum under their second name.
///
/// `None` (no session) when the name matches an operator's `sso` only when case, surrounding
/// whitespace, compatibility forms or look-alike letters are ignored (`Olga@Example.com` or
/// `оlga@example.com`, a Cyrillic `о`, for `olga@example.com`:
/// [`assent_core::duties::same_person`]): the link was meant and missed, or a look-alike is
/// posing as the person, and signing in unlinked would make one person two (found by review).
fn sso_principal(
    principals: &[Principal],
    operator: &str,
    roles: Vec<String>,
) -> Option<Principal> {
    let bare = operator.strip_prefix(crate::config::oidc::NAME_PREFIX);
    let linked = principals
        .iter()
        .find(|p| p.sso.is_some() && p.sso.as_deref() == bare && p.roles().is_some());
    let loose = |s: &str, b: &str| assent_core::duties::same_person(s, b);
    if linked.is_none()
        && let Some(b) = bare
        && let Some(p) = principals
            .iter()
            .find(|p| p.sso.as_deref().is_some_and(|s| loose(s, b)))
    {
        tracing::warn!(operator = %operator, principal = %p.name, "an SSO name matching a principal's sso only loosely is refused");
        return None;
    }
    Some(Principal {
        name: linked.map_or(operator, |p| &p.name).to_string(),
        kind: crate::config::PrincipalKind::Operator { roles },
        key_sha256: [0; 32],
        owns: linked.map(|p| p.owns.clone()).unwrap_or_default(),
        sso: bare.map(str::to_string),
        slack_user_id: None,
    })
}

/// A dashboard page's operator, as an extractor: the one the edge found ([`SignedIn`]), else
/// the page redirects to the sign-in form ([`to_login`]).
impl FromRequestParts<AppState> for Operator {
    type Rejection = Response;
    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Response> {
        SignedIn::of(parts).operator().ok_or_else(to_login)
    }
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The fields of a urlencoded form body, whatever its `Content-Type` says; `Err` names what was
/// wrong: a body that is not a form, a field sent twice, or a U+0000 in a name or value.
///
/// Attack (found by review): the NUL middleware (`calls::refuse_nul`) reads only bodies sent
/// as `application/x-www-form-urlencoded`, but this parses any body, so the same form sent as
/// `text/plain` carried a NUL into a stored reason. And a field sent twice was read as its last
/// value, while anything in front of the gateway that reads the first saw another form.
fn form(body: &Bytes) -> Result<HashMap<String, String>, String> {
    let fields = serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .map_err(|e| format!("the form could not be read: {e}"))?;
    let mut out = HashMap::with_capacity(fields.len());
    for (k, v) in fields {
        if k.contains('\0') || v.contains('\0') {
            return Err(format!(
                "form field `{}` contains U+0000 (NUL), which no text the gateway stores may hold.",
                k.replace('\0', "\\u0000")
            ));
        }
        if out.contains_key(&k) {
            return Err(format!("form field `{k}` is sent twice."));
        }
        out.insert(k, v);
    }
    Ok(out)
}

/// A state-changing dashboard form, as an extractor: its body, and the session it came with
/// looked up in the store again once the body was read ([`signed_in_as`]: the operator with
/// the roles in force now, and only while the session still signs in the operator the edge
/// found). A request the edge found signed in nowhere is not looked up. Rejected as `Bytes`
/// rejects, or `503 STORE_UNAVAILABLE` when the store did not answer (nothing was done).
///
/// Attack (found by review): the edge looks the session up when the request's headers arrive,
/// and the body may take up to `body_read_timeout_seconds` to follow, so a stolen cookie's
/// decision sent headers first was taken after its operator signed out (or a reload removed
/// the operator) in between. GETs keep the edge's one lookup.
pub(crate) struct Posted {
    signed: SignedIn,
    body: Bytes,
}

impl FromRequest<AppState> for Posted {
    type Rejection = Response;
    async fn from_request(req: Request, st: &AppState) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        let (edge, id) = (SignedIn::of(&parts), session_cookie(st, &parts.headers));
        let id = id.map(str::to_string);
        let body = Bytes::from_request(Request::from_parts(parts, body), st)
            .await
            .map_err(IntoResponse::into_response)?;
        let mut signed = SignedIn(None);
        if let (Some(was), Some(id)) = (edge.0, id) {
            match signed_in_as(st, &id).await {
                Ok(Some(now)) if now.principal.name == was.principal.name => {
                    signed = SignedIn(Some(Arc::new(now)));
                }
                Ok(_) => {
                    tracing::warn!(operator = %was.principal.name, "a form whose session ended while its body arrived refused")
                }
                Err(()) => {
                    let why = "the gateway could not check this dashboard session right now; nothing was done, try again";
                    let e =
                        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "STORE_UNAVAILABLE", why);
                    let mut r = secured(e.into_response());
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                    return Err(r);
                }
            }
        }
        Ok(Posted { signed, body })
    }
}

/// A state-changing form ([`Posted`], its session looked up again after its body): its
/// fields, once the session and the CSRF token were checked. Otherwise the page to send
/// (`403`; `400` for a body that is not a form), which says that `nothing` happened
/// (e.g. "Nothing was decided.").
pub(crate) fn operator_form(
    posted: &Posted,
    nothing: &str,
) -> Result<(Operator, HashMap<String, String>), Box<Response>> {
    let Some(op) = posted.signed.operator() else {
        return Err(Box::new(forbidden(
            "Sign in first: this form needs an operator's dashboard session.",
        )));
    };
    let f = form(&posted.body).map_err(|e| {
        Box::new(page_with(
            StatusCode::BAD_REQUEST,
            &Message {
                title: "Not understood".into(),
                text: format!("{e} Nothing was changed."),
                who: op.principal.name.clone(),
                csrf: op.session.csrf.clone(),
            },
        ))
    })?;
    if !same(
        f.get("csrf").map(String::as_str).unwrap_or(""),
        &op.session.csrf,
    ) {
        tracing::warn!(operator = %op.principal.name, "dashboard form without a valid CSRF token refused");
        return Err(Box::new(forbidden(&format!(
            "This form did not come from your dashboard session (CSRF token missing or wrong). {nothing}"
        ))));
    }
    Ok((op, f))
}

#[derive(Template)]
#[template(path = "login.html")]
struct Login {
    csrf: String,
    sso: bool,
    error: String,
    who: String,
    next: String,
}

/// Where to go after signing in: a dashboard path only (never another site), of visible
/// ASCII only (a control character cannot go into a `Location` header).
pub(crate) fn next_path(next: Option<&String>) -> String {
    match next {
        Some(n)
            if n.starts_with("/ui/")
                && !n.contains("//")
                && !n.contains('\\')
                && n.len() <= 2048
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n.clone()
        }
        _ => "/ui".into(),
    }
}

/// `GET /ui/login[?next=PATH]`: the sign-in form (a signed-in operator goes to `next`).
pub(crate) async fn login_page(
    State(st): State<AppState>,
    signed: SignedIn,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let next = next_path(q.get("next"));
    if signed.is_some() {
        return secured(Redirect::to(&next).into_response());
    }
    login_form(&st, &headers, StatusCode::OK, "", &next)
}

fn login_form(
    st: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    error: &str,
    next: &str,
) -> Response {
    let csrf = random_hex();
    let mut r = page_with(
        status,
        &Login {
            sso: st.oidc.is_some(),
            csrf: csrf.clone(),
            error: error.into(),
            who: String::new(),
            next: next.into(),
        },
    );
    let attrs = "HttpOnly; SameSite=Strict; Max-Age=600";
    Jar::of(st, headers).set(&mut r, LOGIN_COOKIE, &csrf, attrs);
    r
}

/// Whether a sign-in came from a page of the dashboard's own origin, as the browser says it:
/// its `Sec-Fetch-Site` (which no page can set), when sent, is `same-origin` or `none` (typed
/// or bookmarked); and its `Origin`, when sent, is not `null` and names this host and port
/// (the request's `Host`, or `public_url`'s). A client that sends neither (not a browser)
/// passes. Found by review: the sign-in form's double-submit cookie is not separated by port
/// (RFC 6265 §8.5), so over http a page on another port of the same host (a dev server an
/// agent started) could plant the cookie and post a matching form with an operator key of its
/// own, signing the operator's browser in as that operator; browsers send no `Sec-Fetch-*` to
/// a plain-http address other than `localhost`, but send `Origin` with every form `POST`.
fn from_this_origin(st: &AppState, headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").map(|v| v.as_bytes());
    if site.is_some_and(|v| v != b"same-origin" && v != b"none") {
        return false;
    }
    let Some(origin) = headers.get(axum::http::header::ORIGIN) else {
        return true;
    };
    let authority = |u: &str| {
        url::Url::parse(u).ok().and_then(|u| {
            let host = u.host_str()?.to_ascii_lowercase();
            Some(match u.port() {
                Some(p) => format!("{host}:{p}"),
                None => host,
            })
        })
    };
    let Some(from) = origin.to_str().ok().and_then(authority) else {
        return false; // `null`, or not a URL
    };
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    let public = st.public_url.as_deref().and_then(authority);
    host.as_deref() == Some(from.as_str()) || public.as_deref() == Some(from.as_str())
}

/// `POST /ui/login` (`key`, `csrf`): an operator's key starts a session; an agent's key or an
/// unknown one is refused (`401`, the form again). Failed sign-ins count toward the same
/// throttle as the API's (`429` once an address or key prefix used up its allowance).
pub(crate) async fn login(
    State(st): State<AppState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    dropped: Option<axum::Extension<DroppedSession>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let addr = st.throttle.addr_from(peer.map(|p| p.0.0.ip()), &headers);
    let Ok(f) = form(&body) else {
        return login_form(
            &st,
            &headers,
            StatusCode::BAD_REQUEST,
            "The form could not be read.",
            "/ui",
        );
    };
    let next = next_path(f.get("next"));
    let expected = Jar::of(&st, &headers)
        .get(&headers, LOGIN_COOKIE.0)
        .unwrap_or("");
    let sent = f.get("csrf").map(String::as_str).unwrap_or("");
    if expected.is_empty() || !same(expected, sent) || !from_this_origin(&st, &headers) {
        return forbidden(
            "The sign-in form expired or did not come from this dashboard. Reload it and sign in again.",
        );
    }
    let key = f.get("key").map(|k| k.trim()).unwrap_or("");
    let throttled = |wait| {
        secured(crate::throttle::too_many(
            "AUTH_THROTTLED",
            "Too many failed sign-ins from this address or for this key; wait and try again.",
            wait,
        ))
    };
    if let Some(wait) = st.throttle.locked_out(addr, key, false)
        && !st.throttle.passes_lockout(addr, key)
    {
        return throttled(wait);
    }
    let principals = st.principals();
    let Some(p) = principal_for_key(&principals, key).filter(|p| p.roles().is_some()) else {
        tracing::info!("dashboard sign-in refused");
        if let Some(wait) = st.throttle.wrong_key(addr, key).await {
            return throttled(wait);
        }
        return login_form(
            &st,
            &headers,
            StatusCode::UNAUTHORIZED,
            "That key is not an operator's key.",
            &next,
        );
    };
    // A right key is still held to its principal's rate (found by review: the dashboard
    // skipped `rate_limits`, and each sign-in is a stored row).
    if let Some(wait) = st.throttle.over_rate(&p.name) {
        return secured(crate::throttle::too_many(
            "RATE_LIMITED",
            "Too many requests for this operator (rate_limits); wait and try again.",
            wait,
        ));
    }
    let Some((id, _)) = sessions::start(&st, p).await else {
        return login_form(
            &st,
            &headers,
            StatusCode::SERVICE_UNAVAILABLE,
            "The gateway cannot record a sign-in right now; try again.",
            &next,
        );
    };
    st.throttle.authenticated(addr, key, &p.key_sha256);
    st.throttle.session_authenticated(addr, &id);
    end_replaced(&st, &headers, dropped.as_ref().map(|d| &d.0), &id).await;
    tracing::info!(operator = %p.name, "dashboard sign-in");
    let mut r = secured(Redirect::to(&next).into_response());
    set_session_cookie(&mut r, &id, Jar::of(&st, &headers));
    r
}

/// Ends the session whose cookie the request with `headers` presented, if any and not `new`:
/// a sign-in (key or single sign-on) that replaces the browser's session cookie with `new`.
///
/// Attack (found by review): signing in again overwrote the cookie but left the old session
/// live for the rest of its 12 hours, so a copy of the old cookie taken before kept working
/// after its owner had, to their eyes, started afresh. Best effort: the new sign-in stands if
/// the store does not record the end (logged).
pub(crate) async fn end_replaced(
    st: &AppState,
    headers: &HeaderMap,
    dropped: Option<&DroppedSession>,
    new: &str,
) {
    if let Some(old) = session_cookie(st, headers).or(dropped.map(|d| d.0.as_str()))
        && old != new
        && sessions::well_formed(old)
    {
        sessions::end(st, old).await;
    }
}

/// Adds the `Set-Cookie` of session `id` to `r`, named and flagged by `jar`.
pub(crate) fn set_session_cookie(r: &mut Response, id: &str, jar: Jar) {
    let attrs = format!(
        "HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL.as_secs()
    );
    jar.set(r, COOKIE, id, &attrs);
}

/// `POST /ui/logout` (`csrf`): ends the session and clears its cookie. When the store does
/// not record the end, `503` with a page saying the operator is still signed in, and the
/// cookie is kept (found by review: the failure was dropped, the cookie cleared and the
/// operator shown the sign-in form while the session stayed live, on every replica, for the
/// rest of its 12 hours).
pub(crate) async fn logout(
    State(st): State<AppState>,
    headers: HeaderMap,
    posted: Posted,
) -> Response {
    if !posted.signed.is_some() {
        return to_login();
    }
    let op = match operator_form(&posted, "You are still signed in.") {
        Ok((op, _)) => op,
        Err(r) => return *r,
    };
    if let Some(id) = session_cookie(&st, &headers)
        && !sessions::end(&st, id).await
    {
        return message(
            &op,
            StatusCode::SERVICE_UNAVAILABLE,
            "Not signed out",
            "The gateway could not end your session right now: you are still signed in. Try again.",
        );
    }
    let mut r = to_login();
    let jar = Jar::of(&st, &headers);
    jar.set(&mut r, COOKIE, "", "HttpOnly; SameSite=Strict; Max-Age=0");
    r
}

/// A [`Message`] page with `status` for the signed-in operator `op`.
pub(crate) fn message(op: &Operator, status: StatusCode, title: &str, text: &str) -> Response {
    page_with(
        status,
        &Message {
            title: title.into(),
            text: text.into(),
            who: op.principal.name.clone(),
            csrf: op.session.csrf.clone(),
        },
    )
}
