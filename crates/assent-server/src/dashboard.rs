//! The operator dashboard (issue 5; seed 002 "operator UX"): server-rendered pages under
//! `/ui`, no JavaScript build step (one small script for the live queue, count-downs and the
//! JSON editor's check).
//!
//! - Sign-in with an operator key (`POST /ui/login`) starts a session: a random 256-bit id in
//!   the `assent_ui` cookie (`HttpOnly`, `SameSite=Strict`, `Path=/ui`, `Secure` behind an
//!   HTTPS proxy that sends `X-Forwarded-Proto: https`), valid 12 hours, kept in memory (a
//!   restart signs everyone out). Every form carries the session's CSRF token, checked in
//!   constant time; a post without it is `403` and changes nothing. The sign-in form itself
//!   is protected by a double-submit cookie.
//! - `/ui`: the queue of pending approvals (similar calls grouped, each decided on its own)
//!   and pending clarification questions, refreshed when the server signals a change over
//!   SSE (`/ui/events`), with count-downs to expiry and an `aria-live` announcement.
//! - `/ui/approvals/{id}`: the card — the exact canonical arguments, risk tier, the rules
//!   that triggered, predicted side effects and rollback notes (rule keys `side_effects`,
//!   `rollback`), the rendered message, and the decision options (once, session, a duration,
//!   workspace with its warning, an edit of the arguments checked before submit, deny with a
//!   reason).
//! - `/ui/history` (filters: agent, tool, status, decided by) and `/ui/audit` (whether the
//!   audit chain verifies, and its newest records).
//!
//! Decisions go through the same code as `POST /v1/approvals/{id}/decision`, so roles,
//! scopes and edits are checked exactly as there, and the decision is recorded under the
//! signed-in operator's name.

use crate::auth::principal_for_key;
use crate::config::Principal;
use crate::decide::{DecisionBody, decide_as};
use crate::error::ApiError;
use crate::formats::rfc3339;
use crate::store_call::blocking;
use crate::{AppState, now_ms};
use askama::Template;
use assent_core::approval::ApprovalStatus;
use assent_core::approval::DecisionKind;
use assent_store::ApprovalRecord;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};

use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// How long a dashboard session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
const COOKIE: &str = "assent_ui";
const LOGIN_COOKIE: &str = "assent_ui_login";

/// One signed-in operator.
#[derive(Clone)]
struct Session {
    operator: String,
    csrf: String,
    expires: Instant,
}

/// The dashboard's sessions, by the SHA-256 of the cookie's value.
#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<[u8; 32], Session>>,
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source");
    hex::encode(b)
}

fn digest(s: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).into()
}

impl Sessions {
    fn start(&self, operator: &str) -> (String, Session) {
        let id = random_hex();
        let s = Session {
            operator: operator.to_string(),
            csrf: random_hex(),
            expires: Instant::now() + SESSION_TTL,
        };
        let mut map = self.by_id.lock().expect("sessions");
        map.retain(|_, s| s.expires > Instant::now());
        map.insert(digest(&id), s.clone());
        (id, s)
    }

    fn get(&self, id: &str) -> Option<Session> {
        let map = self.by_id.lock().expect("sessions");
        map.get(&digest(id))
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }

    fn end(&self, id: &str) {
        self.by_id.lock().expect("sessions").remove(&digest(id));
    }
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The signed-in operator: the session and the principal it belongs to (a principal removed
/// from the config since is signed out).
struct Operator {
    session: Session,
    principal: Principal,
}

fn signed_in(st: &AppState, headers: &HeaderMap) -> Option<Operator> {
    let session = st.ui.get(cookie(headers, COOKIE)?)?;
    let principal = st
        .principals
        .iter()
        .find(|p| p.name == session.operator && p.roles().is_some())?
        .clone();
    Some(Operator { session, principal })
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Headers every dashboard response carries: no caching, no framing, no referrer (a
/// single-use link must not leak), scripts and styles only from the gateway itself.
fn secured(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn page(t: &impl Template) -> Response {
    page_with(StatusCode::OK, t)
}

fn page_with(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => secured((status, Html(html)).into_response()),
        Err(e) => {
            tracing::error!(error = %e, "dashboard template failed");
            secured(ApiError::unavailable("the page could not be rendered").into_response())
        }
    }
}

fn to_login() -> Response {
    secured(Redirect::to("/ui/login").into_response())
}

/// A refused form: `403` with a page that says why; nothing was changed.
fn forbidden(why: &str) -> Response {
    let t = Message {
        title: "Refused".into(),
        text: why.into(),
        who: String::new(),
        csrf: String::new(),
    };
    page_with(StatusCode::FORBIDDEN, &t)
}

pub(crate) async fn script() -> Response {
    secured(
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            include_str!("../static/app.js"),
        )
            .into_response(),
    )
}

pub(crate) async fn style() -> Response {
    secured(
        (
            [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
            include_str!("../static/app.css"),
        )
            .into_response(),
    )
}

/// The fields of a urlencoded form body; `Err` names what was wrong.
fn form(body: &Bytes) -> Result<HashMap<String, String>, String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .map(|v| v.into_iter().collect())
        .map_err(|e| format!("the form could not be read: {e}"))
}

/// A state-changing form from a signed-in operator: its fields, once the session and the CSRF
/// token were checked. Otherwise the page to send (`403`; `400` for a body that is not a form),
/// which says that `nothing` happened
/// (e.g. "Nothing was decided.").
fn operator_form(
    st: &AppState,
    headers: &HeaderMap,
    body: &Bytes,
    nothing: &str,
) -> Result<(Operator, HashMap<String, String>), Box<Response>> {
    let Some(op) = signed_in(st, headers) else {
        return Err(Box::new(forbidden(
            "Sign in first: this form needs an operator's dashboard session.",
        )));
    };
    let f = form(body).map_err(|e| {
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
#[template(path = "message.html")]
struct Message {
    title: String,
    text: String,
    who: String,
    csrf: String,
}

#[derive(Template)]
#[template(path = "login.html")]
struct Login {
    csrf: String,
    error: String,
    who: String,
    next: String,
}

/// Where to go after signing in: a dashboard path only (never another site), of visible
/// ASCII only (a control character cannot go into a `Location` header).
fn next_path(next: Option<&String>) -> String {
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

pub(crate) async fn login_page(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let next = next_path(q.get("next"));
    if signed_in(&st, &headers).is_some() {
        return secured(Redirect::to(&next).into_response());
    }
    login_form(StatusCode::OK, "", &next)
}

fn login_form(status: StatusCode, error: &str, next: &str) -> Response {
    let csrf = random_hex();
    let mut r = page_with(
        status,
        &Login {
            csrf: csrf.clone(),
            error: error.into(),
            who: String::new(),
            next: next.into(),
        },
    );
    let c =
        format!("{LOGIN_COOKIE}={csrf}; Path=/ui/login; HttpOnly; SameSite=Strict; Max-Age=600");
    if let Ok(v) = HeaderValue::from_str(&c) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

fn secure_attr(headers: &HeaderMap) -> &'static str {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    if https { "; Secure" } else { "" }
}

/// `POST /ui/login` (`key`, `csrf`): an operator's key starts a session; an agent's key or an
/// unknown one is refused (`401`, the form again). Failed sign-ins count toward the same
/// throttle as the API's (`429` once an address or key prefix used up its allowance).
pub(crate) async fn login(
    State(st): State<AppState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let addr = st.throttle.addr_from(peer.map(|p| p.0.0.ip()), &headers);
    let Ok(f) = form(&body) else {
        return login_form(
            StatusCode::BAD_REQUEST,
            "The form could not be read.",
            "/ui",
        );
    };
    let next = next_path(f.get("next"));
    let expected = cookie(&headers, LOGIN_COOKIE).unwrap_or("");
    let sent = f.get("csrf").map(String::as_str).unwrap_or("");
    if expected.is_empty() || !same(expected, sent) {
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
    if let Some(wait) = st.throttle.locked_out(addr, key, false) {
        return throttled(wait);
    }
    let Some(p) = principal_for_key(&st.principals, key).filter(|p| p.roles().is_some()) else {
        tracing::info!("dashboard sign-in refused");
        let locked = st.throttle.locked_out(addr, key, true);
        if let Some(wait) = locked.or_else(|| st.throttle.failed(addr, key)) {
            return throttled(wait);
        }
        return login_form(
            StatusCode::UNAUTHORIZED,
            "That key is not an operator's key.",
            &next,
        );
    };
    let (id, _) = st.ui.start(&p.name);
    tracing::info!(operator = %p.name, "dashboard sign-in");
    let mut r = secured(Redirect::to(&next).into_response());
    let c = format!(
        "{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_TTL.as_secs(),
        secure_attr(&headers)
    );
    if let Ok(v) = HeaderValue::from_str(&c) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

pub(crate) async fn logout(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if signed_in(&st, &headers).is_none() {
        return to_login();
    }
    if let Err(r) = operator_form(&st, &headers, &body, "You are still signed in.") {
        return *r;
    }
    if let Some(id) = cookie(&headers, COOKIE) {
        st.ui.end(id);
    }
    let mut r = to_login();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"
    )) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// One pending approval in the queue.
#[derive(Clone)]
struct Item {
    id: String,
    agent: String,
    target: String,
    risk_tier: String,
    risk_level: String,
    irreversible: bool,
    message: String,
    expires_at: String,
    expires_ms: i64,
    left: String,
}

/// Similar pending approvals (same agent, server, tool and rules), shown together.
struct Group {
    title: String,
    items: Vec<Item>,
}

/// A pending clarification question.
struct Question {
    id: String,
    agent: String,
    question: String,
    context: String,
    yes_no: bool,
    numeric: bool,
    choices: Vec<(String, String)>,
    expires_at: String,
    expires_ms: i64,
    left: String,
}

fn left(expires_ms: i64) -> String {
    let s = (expires_ms - now_ms()) / 1000;
    if s <= 0 {
        "expired".into()
    } else if s >= 60 {
        format!("{}m {}s left", s / 60, s % 60)
    } else {
        format!("{s}s left")
    }
}

fn target(a: &ApprovalRecord) -> String {
    match &a.call.server {
        Some(s) => format!("{s}/{}", a.call.tool),
        None => a.call.tool.clone(),
    }
}

fn level(tier: assent_core::RiskTier) -> String {
    tier.risk_level().to_string()
}

fn item(a: &ApprovalRecord) -> Item {
    Item {
        id: a.id.clone(),
        agent: a.agent.clone(),
        target: target(a),
        risk_tier: a.risk_tier.to_string(),
        risk_level: level(a.risk_tier),
        irreversible: a.irreversible,
        message: a.message.clone(),
        expires_at: rfc3339(a.expires_at),
        expires_ms: a.expires_at,
        left: left(a.expires_at),
    }
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    who: String,
    csrf: String,
    groups: Vec<Group>,
    questions: Vec<Question>,
    count: usize,
}

#[derive(Template)]
#[template(path = "queue_items.html")]
struct QueueItems {
    csrf: String,
    groups: Vec<Group>,
    questions: Vec<Question>,
    count: usize,
}

async fn pending(st: &AppState) -> Result<(Vec<Group>, Vec<Question>, usize), ApiError> {
    let s = st.store.clone();
    let (list, questions) = blocking(move || {
        s.expire_due(now_ms())?;
        Ok::<_, assent_store::StoreError>((
            s.list_approvals(Some(ApprovalStatus::Pending), 500)?,
            s.list_clarifications(Some("pending"))?,
        ))
    })
    .await?
    .map_err(ApiError::unavailable)?;
    let count = list.len();
    // Oldest first (most urgent), grouped by similarity in order of first appearance.
    let mut groups: Vec<(String, Group)> = Vec::new();
    for a in list.iter().rev() {
        match groups.iter_mut().find(|(k, _)| *k == a.group_key) {
            Some((_, g)) => g.items.push(item(a)),
            None => groups.push((
                a.group_key.clone(),
                Group {
                    title: format!("{} → {}", a.agent, target(a)),
                    items: vec![item(a)],
                },
            )),
        }
    }
    let questions = questions
        .into_iter()
        .map(|c| Question {
            yes_no: c.kinds.iter().any(|k| k == "yes_no"),
            numeric: c.kinds.iter().any(|k| k == "numeric"),
            choices: c
                .choices
                .iter()
                .map(|ch| {
                    let v = match &ch["value"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let l = ch["label"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.clone());
                    (v, l)
                })
                .collect(),
            id: c.id,
            agent: c.agent,
            question: c.question,
            context: c.context.unwrap_or_default(),
            expires_at: rfc3339(c.expires_at),
            expires_ms: c.expires_at,
            left: left(c.expires_at),
        })
        .collect();
    Ok((
        groups.into_iter().map(|(_, g)| g).collect(),
        questions,
        count,
    ))
}

pub(crate) async fn queue_page(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let Some(op) = signed_in(&st, &headers) else {
        return to_login();
    };
    match pending(&st).await {
        Ok((groups, questions, count)) => page(&QueuePage {
            who: op.principal.name,
            csrf: op.session.csrf,
            groups,
            questions,
            count,
        }),
        Err(e) => secured(e.into_response()),
    }
}

/// The queue's contents alone, for the live refresh.
pub(crate) async fn queue_fragment(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let Some(op) = signed_in(&st, &headers) else {
        return secured(ApiError::unauthenticated().into_response());
    };
    match pending(&st).await {
        Ok((groups, questions, count)) => page(&QueueItems {
            csrf: op.session.csrf,
            groups,
            questions,
            count,
        }),
        Err(e) => secured(e.into_response()),
    }
}

/// `GET /ui/events`: an SSE stream with a `changed` event whenever an approval or
/// clarification changes (and a comment every 15 s to keep proxies from closing it).
pub(crate) async fn events(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if signed_in(&st, &headers).is_none() {
        return secured(ApiError::unauthenticated().into_response());
    }
    let rx = st.changes.subscribe();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        let n = *rx.borrow_and_update();
        Some((
            Ok::<_, std::convert::Infallible>(
                Event::default().event("changed").data(n.to_string()),
            ),
            rx,
        ))
    });
    secured(
        Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response(),
    )
}

#[derive(Template)]
#[template(path = "card.html")]
struct Card {
    who: String,
    csrf: String,
    error: String,
    id: String,
    status: String,
    pending: bool,
    agent: String,
    session_id: String,
    target: String,
    arguments: String,
    canonical_arguments: String,
    call_hash: String,
    risk_tier: String,
    risk_level: String,
    irreversible: bool,
    message: String,
    human_summary: String,
    reasons: Vec<(String, String)>,
    triggers: Vec<String>,
    side_effects: Vec<String>,
    rollback: Vec<String>,
    alternatives: Vec<String>,
    approvers: Vec<String>,
    default_decision: String,
    expires_at: String,
    expires_ms: i64,
    left: String,
    decisions: Vec<String>,
    scope: String,
    edited: String,
    similar: Vec<Item>,
    dry_run_tool: String,
    /// The dry-run button is offered: a rule names a dry-run tool, the call's server is an
    /// MCP upstream of this gateway, and the approval is pending.
    dry_run_available: bool,
    /// The newest dry run: who ran it and when, and its result (or error).
    dry_run_by: String,
    dry_run_result: String,
}

/// An approval with what its card shows besides: similar pending calls, the newest dry run.
struct Loaded {
    rec: ApprovalRecord,
    similar: Vec<Item>,
    dry_run: Option<assent_store::audit::AuditRecord>,
}

async fn load(st: &AppState, id: &str) -> Result<Option<Loaded>, ApiError> {
    let s = st.store.clone();
    let id = id.to_string();
    let (rec, pending, dry_run) = blocking(move || {
        s.expire_due(now_ms())?;
        Ok::<_, assent_store::StoreError>((
            s.get_approval(&id)?,
            s.list_approvals(Some(ApprovalStatus::Pending), 500)?,
            s.last_dry_run(&id)?,
        ))
    })
    .await?
    .map_err(ApiError::unavailable)?;
    Ok(rec.map(|r| {
        let similar = pending
            .iter()
            .filter(|a| a.group_key == r.group_key && a.id != r.id)
            .map(item)
            .collect();
        Loaded {
            rec: r,
            similar,
            dry_run,
        }
    }))
}

fn card(st: &AppState, op: &Operator, l: &Loaded, error: &str) -> Card {
    let (a, similar) = (&l.rec, l.similar.clone());
    let dry_run_available = a.status == ApprovalStatus::Pending
        && a.dry_run_tool.is_some()
        && a.call
            .server
            .as_deref()
            .is_some_and(|s| st.dry_run.as_ref().is_some_and(|d| d.serves(s)));
    let (dry_run_by, dry_run_result) = match &l.dry_run {
        Some(r) => {
            let data: Value = serde_json::from_str(&r.data).unwrap_or(Value::Null);
            let shown = match data.get("error") {
                Some(e) => format!("failed: {}", e.as_str().unwrap_or("")),
                None => serde_json::to_string_pretty(
                    data.get("result")
                        .or(data.get("result_truncated"))
                        .unwrap_or(&Value::Null),
                )
                .unwrap_or_default(),
            };
            (format!("{} at {}", r.actor, rfc3339(r.at)), shown)
        }
        None => (String::new(), String::new()),
    };
    let pretty = serde_json::to_string_pretty(&a.call.arguments).unwrap_or_default();
    Card {
        who: op.principal.name.clone(),
        csrf: op.session.csrf.clone(),
        error: error.to_string(),
        id: a.id.clone(),
        status: a.status.as_str().to_string(),
        pending: a.status == ApprovalStatus::Pending,
        agent: a.agent.clone(),
        session_id: a.session_id.clone(),
        target: target(a),
        arguments: pretty,
        canonical_arguments: a.canonical_arguments(),
        call_hash: a.call_hash.clone(),
        risk_tier: a.risk_tier.to_string(),
        risk_level: level(a.risk_tier),
        irreversible: a.irreversible,
        message: a.message.clone(),
        human_summary: a.human_summary.clone(),
        reasons: a
            .reasons
            .iter()
            .map(|r| {
                let src = if r.file.is_empty() {
                    r.rule.clone()
                } else {
                    format!("{} {}", r.file, r.rule)
                };
                (src, r.text.clone())
            })
            .collect(),
        triggers: a.triggers.clone(),
        side_effects: a.side_effects.clone(),
        rollback: a.rollback.clone(),
        alternatives: a.suggested_alternatives.clone(),
        approvers: a.approvers.clone(),
        default_decision: a.default_decision.as_str().to_string(),
        expires_at: rfc3339(a.expires_at),
        expires_ms: a.expires_at,
        left: left(a.expires_at),
        decisions: a
            .decisions
            .iter()
            .map(|d| {
                let mut line = format!("{} by {} at {}", d.decision, d.actor, rfc3339(d.at));
                if let Some(r) = d.reason.as_deref().filter(|r| !r.is_empty()) {
                    line.push_str(&format!(": {r}"));
                }
                line
            })
            .collect(),
        scope: a.scope.map(|s| s.to_wire()).unwrap_or_default(),
        edited: a
            .edited
            .as_ref()
            .map(|e| e.canonical_arguments.clone())
            .unwrap_or_default(),
        similar,
        dry_run_tool: a.dry_run_tool.clone().unwrap_or_default(),
        dry_run_available,
        dry_run_by,
        dry_run_result,
    }
}

pub(crate) async fn card_page(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(op) = signed_in(&st, &headers) else {
        return to_login();
    };
    match load(&st, &id).await {
        Ok(Some(l)) => page(&card(&st, &op, &l, "")),
        Ok(None) => not_found(&op, "No such approval."),
        Err(e) => secured(e.into_response()),
    }
}

fn not_found(op: &Operator, text: &str) -> Response {
    page_with(
        StatusCode::NOT_FOUND,
        &Message {
            title: "Not found".into(),
            text: text.into(),
            who: op.principal.name.clone(),
            csrf: op.session.csrf.clone(),
        },
    )
}

/// `POST /ui/approvals/{id}/decide`: `decision` (`approve`|`deny`), `csrf`, and for approve
/// `scope` (`once`|`session`|`duration` with `duration`|`workspace` with
/// `confirm_workspace`), `whole_tool` (the grant covers any arguments) and `arguments` (JSON; an
/// edit when its canonical form differs), for deny `reason` (required).
pub(crate) async fn decide_form(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let (op, f) = match operator_form(&st, &headers, &body, "Nothing was decided.") {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let field = |k: &str| f.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
    let Some(loaded) = (match load(&st, &id).await {
        Ok(r) => r,
        Err(e) => return secured(e.into_response()),
    }) else {
        return not_found(&op, "No such approval.");
    };
    let rec = &loaded.rec;
    let again = |status: StatusCode, why: &str| page_with(status, &card(&st, &op, &loaded, why));
    let body = match field("decision").as_str() {
        "approve" => {
            let scope = match field("scope").as_str() {
                "" | "once" => None,
                "session" => Some("session".to_string()),
                "workspace" => Some("workspace".to_string()),
                "duration" => match field("duration") {
                    d if d.is_empty() => {
                        return again(
                            StatusCode::BAD_REQUEST,
                            "Give a duration such as 15m or 2h.",
                        );
                    }
                    d => Some(d),
                },
                other => {
                    return again(
                        StatusCode::BAD_REQUEST,
                        &format!("Unknown scope `{other}`."),
                    );
                }
            };
            let text = f.get("arguments").cloned().unwrap_or_default();
            let arguments = if text.trim().is_empty() {
                None
            } else {
                match assent_core::json::parse_value(text.as_bytes()) {
                    Ok(v) if v.is_object() => {
                        let same_call = assent_core::canonical::canonical_value(&v).ok()
                            == Some(rec.canonical_arguments());
                        (!same_call).then_some(v)
                    }
                    Ok(_) => {
                        return again(
                            StatusCode::BAD_REQUEST,
                            "The arguments must be a JSON object.",
                        );
                    }
                    Err(e) => {
                        return again(
                            StatusCode::BAD_REQUEST,
                            &format!("The edited arguments are not valid JSON: {e}."),
                        );
                    }
                }
            };
            DecisionBody {
                decision: DecisionKind::Approve,
                reason: Some(field("reason")).filter(|r| !r.is_empty()),
                scope,
                whole_tool: f.contains_key("whole_tool"),
                confirm_workspace: f.contains_key("confirm_workspace"),
                arguments,
            }
        }
        "deny" => {
            let reason = field("reason");
            if reason.is_empty() {
                return again(
                    StatusCode::BAD_REQUEST,
                    "Say why the call is denied: the agent is told the reason.",
                );
            }
            DecisionBody {
                decision: DecisionKind::Deny,
                reason: Some(reason),
                scope: None,
                whole_tool: false,
                confirm_workspace: false,
                arguments: None,
            }
        }
        _ => return again(StatusCode::BAD_REQUEST, "Choose approve or deny."),
    };
    match decide_as(
        &st,
        &op.principal.name,
        op.principal.roles().unwrap_or_default(),
        id.clone(),
        body,
    )
    .await
    {
        Ok(_) => secured(Redirect::to(&format!("/ui/approvals/{id}")).into_response()),
        Err(e) => again(e.status, &e.message),
    }
}

/// `POST /ui/clarifications/{id}/answer`: `kind` (`yes_no`|`numeric`|`multiple_choice`|
/// `freetext`), `response`, `csrf`.
pub(crate) async fn answer_form(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let (op, f) = match operator_form(&st, &headers, &body, "Nothing was answered.") {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let field = |k: &str| f.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
    let text = field("response");
    let response = match field("kind").as_str() {
        "yes_no" => Value::Bool(text == "yes" || text == "true"),
        "numeric" => match text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            Some(n) => Value::Number(n),
            None => {
                return message(
                    &op,
                    StatusCode::BAD_REQUEST,
                    "Not answered",
                    "The answer must be a number.",
                );
            }
        },
        _ => Value::String(text),
    };
    match crate::clarify::answer_as(&st, op.principal.name.clone(), id, response).await {
        Ok(_) => secured(Redirect::to("/ui").into_response()),
        Err(e) => message(&op, e.status, "Not answered", &e.message),
    }
}

fn message(op: &Operator, status: StatusCode, title: &str, text: &str) -> Response {
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

/// History filters (`/ui/history?agent=&tool=&status=&decided_by=`); empty means any.
#[derive(Deserialize, Default)]
pub(crate) struct Filters {
    #[serde(default)]
    agent: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    decided_by: String,
}

struct Row {
    id: String,
    requested_at: String,
    agent: String,
    target: String,
    risk_tier: String,
    status: String,
    decided_by: String,
    reason: String,
}

#[derive(Template)]
#[template(path = "history.html")]
struct History {
    who: String,
    csrf: String,
    agent: String,
    tool: String,
    status: String,
    decided_by: String,
    statuses: Vec<&'static str>,
    rows: Vec<Row>,
}

pub(crate) async fn history_page(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Filters>,
) -> Response {
    let Some(op) = signed_in(&st, &headers) else {
        return to_login();
    };
    let s = st.store.clone();
    let list = match blocking(move || s.list_approvals(None, 1000)).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return secured(ApiError::unavailable(e).into_response()),
        Err(e) => return secured(e.into_response()),
    };
    let want = |filter: &str, value: &str| filter.is_empty() || filter == value;
    let rows = list
        .iter()
        .filter_map(|a| {
            let last = a.decisions.last();
            let by = last.map(|d| d.actor.clone()).unwrap_or_default();
            let keep = want(&q.agent, &a.agent)
                && (q.tool.is_empty() || q.tool == a.call.tool || q.tool == target(a))
                && want(&q.status, a.status.as_str())
                && want(&q.decided_by, &by);
            keep.then(|| Row {
                id: a.id.clone(),
                requested_at: rfc3339(a.requested_at),
                agent: a.agent.clone(),
                target: target(a),
                risk_tier: a.risk_tier.to_string(),
                status: a.status.as_str().to_string(),
                decided_by: by,
                reason: last.and_then(|d| d.reason.clone()).unwrap_or_default(),
            })
        })
        .take(500)
        .collect();
    page(&History {
        who: op.principal.name,
        csrf: op.session.csrf,
        agent: q.agent,
        tool: q.tool,
        status: q.status,
        decided_by: q.decided_by,
        statuses: vec!["pending", "approved", "rejected", "expired", "cancelled"],
        rows,
    })
}

struct AuditRow {
    seq: i64,
    at: String,
    kind: String,
    approval_id: String,
    actor: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct Audit {
    who: String,
    csrf: String,
    verifies: bool,
    records: i64,
    head: String,
    broken: String,
    rows: Vec<AuditRow>,
}

pub(crate) async fn audit_page(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let Some(op) = signed_in(&st, &headers) else {
        return to_login();
    };
    let s = st.store.clone();
    let res = blocking(move || {
        Ok::<_, assent_store::StoreError>((s.verify_audit()?, s.audit_tail(200)?))
    })
    .await;
    let (report, tail) = match res {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return secured(ApiError::unavailable(e).into_response()),
        Err(e) => return secured(e.into_response()),
    };
    page(&Audit {
        who: op.principal.name,
        csrf: op.session.csrf,
        verifies: report.broken.is_none(),
        records: report.records,
        head: report.head,
        broken: report
            .broken
            .map(|(seq, why)| format!("record {seq}: {why}"))
            .unwrap_or_default(),
        rows: tail
            .into_iter()
            .map(|r| AuditRow {
                seq: r.seq,
                at: rfc3339(r.at),
                kind: r.kind,
                approval_id: r.approval_id.unwrap_or_default(),
                actor: r.actor,
            })
            .collect(),
    })
}

/// `GET /ui/l/{token}`: a single-use link from a notification. A valid, unused, unexpired
/// link is used up and opens the approval's card (through the sign-in when needed: deciding
/// still takes an operator); any other is `410` with a page that says so.
pub(crate) async fn open_link(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let hash = assent_core::canonical::sha256_hex(token.as_bytes());
    let s = st.store.clone();
    let found = match blocking(move || s.use_card_link(&hash, now_ms())).await {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => return secured(ApiError::unavailable(e).into_response()),
        Err(e) => return secured(e.into_response()),
    };
    let Some(id) = found else {
        let who = signed_in(&st, &headers);
        return page_with(
            StatusCode::GONE,
            &Message {
                title: "Link used or expired".into(),
                text: "This link opens a card once, until the approval expires. Open the queue instead.".into(),
                who: who.as_ref().map(|o| o.principal.name.clone()).unwrap_or_default(),
                csrf: who.map(|o| o.session.csrf).unwrap_or_default(),
            },
        );
    };
    let card = format!("/ui/approvals/{id}");
    if signed_in(&st, &headers).is_some() {
        secured(Redirect::to(&card).into_response())
    } else {
        secured(Redirect::to(&format!("/ui/login?next={card}")).into_response())
    }
}

/// `POST /ui/approvals/{id}/dry-run` (`csrf`): runs the rule's `dry_run_tool` with the held
/// call's arguments on its MCP upstream, records it in the audit log (`dry_run`, with the
/// result's hash) and shows the result on the card. The held call itself does not run.
pub(crate) async fn dry_run_form(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let op = match operator_form(&st, &headers, &body, "Nothing was run.") {
        Ok((op, _)) => op,
        Err(r) => return *r,
    };
    let Some(loaded) = (match load(&st, &id).await {
        Ok(r) => r,
        Err(e) => return secured(e.into_response()),
    }) else {
        return not_found(&op, "No such approval.");
    };
    let a = &loaded.rec;
    let unavailable = || {
        page_with(
            StatusCode::CONFLICT,
            &card(&st, &op, &loaded, "No dry run is available for this call."),
        )
    };
    let (Some(tool), Some(server), Some(runner)) = (
        a.dry_run_tool.clone(),
        a.call.server.clone(),
        st.dry_run.clone(),
    ) else {
        return unavailable();
    };
    if a.status != ApprovalStatus::Pending || !runner.serves(&server) {
        return unavailable();
    }
    let outcome = runner.run(&server, &tool, &a.call.arguments).await;
    tracing::info!(approval_id = %id, operator = %op.principal.name, tool = %tool, ok = outcome.is_ok(), "dry run");
    let (s, name, id2) = (st.store.clone(), op.principal.name.clone(), id.clone());
    match blocking(move || s.record_dry_run(&id2, &name, &tool, &outcome, now_ms())).await {
        Ok(Ok(())) => secured(Redirect::to(&format!("/ui/approvals/{id}#dry-run")).into_response()),
        Ok(Err(e)) => secured(ApiError::unavailable(e).into_response()),
        Err(e) => secured(e.into_response()),
    }
}
