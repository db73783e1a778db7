//! The HTTP edge around every route (issue 10 §14, §17): the body limit, the URI length
//! limit, a JSON body for every error (also those axum and tower make themselves: a malformed
//! path or query string, a body over the limit, a wrong method), and a panic answered as a
//! JSON `500` instead of a dropped connection; and the [`throttle`] layer (rate limits and
//! failed-authentication lock-outs of [`crate::throttle`]) in front of every handler.

use crate::auth::{bearer_key, principal_for_key};
use crate::error::ApiError;
use crate::state::AppState;
use crate::throttle::too_many;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

/// Longest request URI (path and query) accepted, in bytes; longer is `414 URI_TOO_LONG`.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Extra body bytes allowed beyond `max_arguments_bytes` for the other fields of a request.
pub const BODY_OVERHEAD_BYTES: usize = 64 * 1024;

/// Wraps `router` with the edge layers; `max_body` is the largest request body in bytes (the
/// body itself is read by [`buffer_body`], inside the throttle, so that a wrong key is refused
/// before it is read).
pub fn wrap<S: Clone + Send + Sync + 'static>(router: Router<S>, max_body: usize) -> Router<S> {
    router
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(uri_limit))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                tracing::error!("a request handler panicked");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "INTERNAL",
                    "the gateway failed on this request; nothing was allowed",
                )
                .into_response()
            },
        ))
        .layer(middleware::from_fn(mcp_errors))
}

/// Marks a request whose bearer key [`throttle`] found to be a principal's, or whose
/// dashboard session cookie it found live ([`dashboard_session`]), so that [`buffer_body`]
/// does not look it up again: the principal's name, whose body budget its body takes
/// ([`crate::body_budget`]).
#[derive(Clone)]
struct KnownKey(String);

/// The largest body accepted from a request that has not shown who sends it (no known bearer
/// key, no live dashboard session): a sign-in form, an SSO or passkey step. A request that
/// has (or a Slack request, signed over its body and checked by its route, up to
/// [`SLACK_BODY_BYTES`]) may send up to the body limit.
pub const UNVERIFIED_BODY_BYTES: usize = 16 * 1024;

/// The largest body of a Slack interaction (checked against its signature by the route).
pub const SLACK_BODY_BYTES: usize = crate::slack::MAX_BODY;

/// The largest body of a request without a known bearer key or live dashboard session
/// ([`KnownKey`], which [`throttle`] set: a session that signs someone in now, its principal
/// and key still in force, found on a `/ui` path only; a wrong key never gets this far with
/// a body): up to [`SLACK_BODY_BYTES`] on the Slack route when Slack is configured, else
/// [`UNVERIFIED_BODY_BYTES`]; `path` is the request's path.
fn body_limit(st: &AppState, path: &str, max_body: usize) -> usize {
    if st.slack.is_some() && path == crate::slack::INTERACTIONS_PATH {
        return max_body.min(SLACK_BODY_BYTES);
    }
    max_body.min(UNVERIFIED_BODY_BYTES)
}

/// Reads the whole request body within the body-read timeout (`408 REQUEST_TIMEOUT`) and its
/// limit ([`body_limit`]: `413 PAYLOAD_TOO_LARGE`) before any handler sees it.
///
/// Attack (found by review): bodies were read in full before anyone's key was checked, so a
/// client with no key held up to the body limit (320 KiB by default) per connection —
/// 3,000 half-sent bodies took 1.7 GB. A body is now read in full only from a request that
/// shows who sends it; others get [`UNVERIFIED_BODY_BYTES`].
pub async fn buffer_body(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let max_body = st
        .settings
        .max_arguments_bytes
        .saturating_add(BODY_OVERHEAD_BYTES);
    let read_timeout = st.settings.body_read_timeout;
    let (parts, body) = req.into_parts();
    // No body (no length or chunks on HTTP/1.1, an ended stream on HTTP/2), or a known key
    // ([`throttle`] found it): the body limit alone.
    let sender = parts.extensions.get::<KnownKey>().map(|k| k.0.clone());
    let known = sender.is_some();
    let empty = axum::body::HttpBody::size_hint(&body).exact() == Some(0);
    let limit = if known || empty {
        max_body
    } else {
        body_limit(&st, parts.uri.path(), max_body)
    };
    // A declared length over the limit is refused, read only as [`read_body`] says.
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // A known sender's body past the limit is read to its end and dropped ([`DRAIN_BYTES`])
    // before the `413` is sent, so that the client reads it — unless the client waits for
    // `100 Continue` before it writes (then nothing is under way to break).
    let waits = parts
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let drain = if known && !waits {
        limit.saturating_add(DRAIN_BYTES)
    } else {
        0
    };
    // The sender's body bytes in flight, bounded ([`crate::body_budget`]); given back once read.
    let _held = match sender.filter(|_| !empty) {
        Some(name) => {
            let bytes = declared.map_or(limit, |d| usize::try_from(d).unwrap_or(limit).min(limit));
            match st.bodies.take(&name, bytes) {
                Some(h) => Some(h),
                None => return bodies_in_flight().into_response(),
            }
        }
        None => None,
    };
    let over = std::sync::atomic::AtomicBool::new(false);
    let read = read_body(body, declared, (limit, drain), &over);
    let outcome = match tokio::time::timeout(read_timeout, read).await {
        Ok(outcome) => outcome,
        // Over the limit, and its rest still arriving when the time ran out.
        Err(_) if over.load(std::sync::atomic::Ordering::Relaxed) => BodyRead::Over,
        Err(_) => {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "REQUEST_TIMEOUT",
                format!(
                    "the request body did not arrive within {} seconds",
                    read_timeout.as_secs()
                ),
            )
            .into_response();
        }
    };
    let path = parts.uri.path();
    match outcome {
        BodyRead::Whole(bytes) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
        // An AAEP reply that fails a check is ignored with no reason given (§6.3.4).
        _ if limit < max_body && path == crate::aaep::REPLIES_PATH => {
            StatusCode::NO_CONTENT.into_response()
        }
        BodyRead::Broken => ApiError::bad_request(
            "the request body could not be read: its framing (chunks or length) is broken",
        )
        .into_response(),
        BodyRead::Over if is_mcp(path) => mcp_too_large(limit, limit < max_body),
        BodyRead::Over if limit < max_body => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            format!(
                "a request that shows no API key or dashboard session may send at most {limit} bytes of body"
            ),
        )
        .into_response(),
        BodyRead::Over => crate::extract::too_large().into_response(),
    }
}

/// `429 TOO_MANY_BODIES`: the sender's request bodies in flight hold its whole budget.
fn bodies_in_flight() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        assent_api::error::TOO_MANY_BODIES,
        format!(
            "this principal's request bodies still arriving hold {} MiB, the most at once; finish or close some and retry",
            crate::body_budget::MAX_BODY_BYTES_IN_FLIGHT >> 20
        ),
    )
}

/// How many bytes past its limit a known sender's body ([`KnownKey`]) is read and dropped
/// before the `413` that refuses it (within the body-read timeout), so that the client, still
/// writing, reads the answer: 16 MiB. Found by CI: the `413` for a 7 MiB `/mcp` body was sent
/// unread and the connection closed under the writing client, which got a broken pipe, not
/// the answer naming `max_arguments_bytes`. A body declared longer than the limit plus this,
/// one from a sender that has shown no key, or one whose client waits for `100 Continue`, is
/// refused unread (a chunked one once past the bound: its connection is closed).
pub const DRAIN_BYTES: usize = 16 << 20;

/// What [`read_body`] made of a request body.
enum BodyRead {
    /// The whole body, within the limit.
    Whole(axum::body::Bytes),
    /// Past the limit (the rest read and dropped as far as the drain allowed).
    Over,
    /// A body that failed to read (broken chunk framing, a length not met before the end).
    Broken,
}

/// The body `body` (declared `declared` bytes long, if it says) when it is at most `limit`
/// bytes; else [`BodyRead::Over`], after reading and dropping the rest up to `drain` bytes in
/// all (none when the declared length is past `drain`); `over` is set once the body is known
/// to be past `limit`.
async fn read_body(
    body: axum::body::Body,
    declared: Option<u64>,
    (limit, drain): (usize, usize),
    over: &std::sync::atomic::AtomicBool,
) -> BodyRead {
    use futures_util::StreamExt;
    if declared.is_some_and(|n| n > limit as u64) {
        over.store(true, std::sync::atomic::Ordering::Relaxed);
        if declared.is_some_and(|n| n > drain as u64) {
            return BodyRead::Over;
        }
    }
    let mut stream = body.into_data_stream();
    // Room for what is declared, up to 64 KiB: a length declared is not yet a byte sent.
    let room = declared.map_or(0, |n| n.min(limit.min(64 * 1024) as u64) as usize);
    let mut kept = Vec::with_capacity(room);
    let mut seen: usize = 0;
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return BodyRead::Broken;
        };
        seen = seen.saturating_add(chunk.len());
        if seen > limit {
            over.store(true, std::sync::atomic::Ordering::Relaxed);
            kept = Vec::new();
            if seen > drain {
                return BodyRead::Over;
            }
        } else {
            kept.extend_from_slice(&chunk);
        }
    }
    if over.load(std::sync::atomic::Ordering::Relaxed) {
        BodyRead::Over
    } else {
        BodyRead::Whole(kept.into())
    }
}

/// Whether `path` is the MCP hub's (`/mcp`, streamable HTTP), which answers in JSON-RPC.
fn is_mcp(path: &str) -> bool {
    path == "/mcp" || path.starts_with("/mcp/")
}

/// `413` for a `/mcp` body past `limit` bytes ([`buffer_body`]): a JSON-RPC error object
/// under id `null` (`-32600`) naming the bound, which an MCP client can read; `unverified`:
/// the bound is that of a request that shows no known key ([`UNVERIFIED_BODY_BYTES`]), else
/// `max_arguments_bytes` plus [`BODY_OVERHEAD_BYTES`]. Found by review: such a body got the
/// API's `{"code", "message"}` body, no JSON-RPC message at all.
fn mcp_too_large(limit: usize, unverified: bool) -> Response {
    let message = if unverified {
        format!(
            "assent: a request that shows no agent's key may send at most {limit} bytes of body"
        )
    } else {
        format!(
            "assent: the request body is over {limit} bytes, the most this gateway accepts (max_arguments_bytes plus 64 KiB)"
        )
    };
    let error = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32600, "message": message}});
    (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(error)).into_response()
}

/// The largest error body on `/mcp` that [`mcp_errors`] reads to reword (the edge's own and
/// rmcp's are a few hundred bytes); a larger one (or one whose body fails) is worded by its
/// status's reason, its headers kept.
const MCP_ERROR_BYTES: usize = 64 * 1024;

/// Words every error response on `/mcp` (the outermost layer: the edge's `408`, `429`,
/// `414`, the panic's `500`, and rmcp's own plain-text refusals such as `406` and `404`) as
/// a JSON-RPC error object under id `null`, which an MCP client can read: `-32000` for
/// `408`, `429` and a `5xx` (try again later), else `-32600`; its message the API body's
/// `message`, or the text the response had, or its status's reason. The status and every
/// other header (`Retry-After`, `WWW-Authenticate`, the session's id) are kept; a body that
/// is JSON-RPC already, or is no JSON or text, passes as it
/// is. Found by review: those refusals had the API's `{"code", "message"}` body, and rmcp's
/// plain-text ones were rewritten into it, no JSON-RPC message at all.
async fn mcp_errors(req: Request, next: Next) -> Response {
    let mcp = is_mcp(req.uri().path());
    let resp = next.run(req).await;
    let status = resp.status();
    if !mcp || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let wordable = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|t| t.starts_with("application/json") || t.starts_with("text/plain"));
    if !wordable {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let reason = || status.canonical_reason().unwrap_or("refused").to_string();
    // A body over the bound, or one that fails, is worded by the status's reason; its
    // headers are kept all the same (found by review: they were dropped, `Retry-After` too).
    let message = match axum::body::to_bytes(body, MCP_ERROR_BYTES).await {
        Err(_) => reason(),
        Ok(bytes) => {
            let json = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
            if json.as_ref().is_some_and(|v| v.get("jsonrpc").is_some()) {
                return Response::from_parts(parts, axum::body::Body::from(bytes));
            }
            let text = String::from_utf8_lossy(&bytes);
            match json.as_ref().and_then(|v| v.get("message")?.as_str()) {
                Some(m) => m.to_string(),
                None if !text.trim().is_empty() => text.trim().to_string(),
                None => reason(),
            }
        }
    };
    let mut out = mcp_error(status, &message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    for (k, v) in parts.headers.iter() {
        out.headers_mut().append(k.clone(), v.clone());
    }
    out
}

/// A `/mcp` refusal of `status` as a JSON-RPC error object under id `null` ([`mcp_errors`]).
fn mcp_error(status: StatusCode, message: &str) -> Response {
    let later = matches!(
        status,
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS
    ) || status.is_server_error();
    let code = if later { -32000 } else { -32600 };
    let error = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": code, "message": message}});
    (status, axum::Json(error)).into_response()
}

/// `414 URI_TOO_LONG` for a URI over [`MAX_URI_BYTES`].
async fn uri_limit(req: Request, next: Next) -> Response {
    let len = req.uri().to_string().len();
    if len > MAX_URI_BYTES {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "URI_TOO_LONG",
            format!("the request URI is {len} bytes; at most {MAX_URI_BYTES} are accepted"),
        )
        .into_response();
    }
    next.run(req).await
}

/// The stable code for an error status that reached the client without one of ours.
fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "NOT_FOUND",
        StatusCode::METHOD_NOT_ALLOWED => "METHOD_NOT_ALLOWED",
        StatusCode::REQUEST_TIMEOUT => "REQUEST_TIMEOUT",
        StatusCode::PAYLOAD_TOO_LARGE => "PAYLOAD_TOO_LARGE",
        StatusCode::URI_TOO_LONG => "URI_TOO_LONG",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "UNSUPPORTED_MEDIA_TYPE",
        StatusCode::UNPROCESSABLE_ENTITY => "UNPROCESSABLE",
        StatusCode::TOO_MANY_REQUESTS => "TOO_MANY_REQUESTS",
        s if s.is_server_error() => "INTERNAL",
        _ => "BAD_REQUEST",
    }
}

/// Gives every error response without a JSON (or the dashboard's HTML) body the API's
/// `{"code", "message"}` body, keeping its status and the text it had as the message; not on
/// `/mcp`, whose refusals [`mcp_errors`] words in JSON-RPC.
async fn json_errors(req: Request, next: Next) -> Response {
    let mcp = is_mcp(req.uri().path());
    let resp = next.run(req).await;
    let status = resp.status();
    if mcp || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let typed = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json") || t.starts_with("text/html"));
    if typed {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_string()
    } else {
        text
    };
    let mut out = ApiError::new(status, code_for(status), message).into_response();
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out
}

/// Headers a reverse proxy sets to describe the client's connection (RFC 7239 and the
/// de-facto `X-Forwarded-*`).
const FORWARDED_HEADERS: [&str; 5] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
];

/// Removes every `Forwarded` / `X-Forwarded-*` / `X-Real-IP` header from a request whose TCP
/// peer is not one of `trusted_proxies` (or unknown), before anything reads them: a client
/// that talks to assent directly cannot pose as another address (the throttle) or as https
/// (the dashboard's `Secure` cookies). Behind a trusted proxy they pass as the proxy set them.
pub async fn forwarded_from_proxies(
    State(st): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    if !peer.is_some_and(|p| st.throttle.trusts(p)) {
        for h in FORWARDED_HEADERS {
            req.headers_mut().remove(h);
        }
    }
    next.run(req).await
}

/// The API's throttle, before any handler: a locked-out address or key prefix gets `429
/// AUTH_THROTTLED` (from a locked-out address only a long key that authenticated from there
/// before passes: [`crate::throttle::Throttle::passes_lockout`]); a wrong key is counted; a principal over its
/// rate gets `429 RATE_LIMITED`. A dashboard session cookie on a `/ui` path is checked
/// likewise ([`dashboard_session`]), whether or not a bearer key came with it. Requests
/// without either pass (handlers answer `401`).
///
/// Attack (found by review): a request with any `Authorization: Bearer` header took the
/// bearer key's branch alone, so its session cookie was never throttled here, and the
/// dashboard's handlers then looked it up in the store themselves: an agent's own key (never
/// counted as a failure) let made-up cookies on `GET /ui` be looked up as fast as it liked.
/// The cookie now gets the same treatment with a bearer key as without (not refused as a
/// mix: a proxy in front of the dashboard may add an `Authorization` header of its own), and
/// the handlers look nothing up (`dashboard::session::SignedIn`).
///
/// A known request is counted on its connection until its response body is dropped
/// (`serve_slots.rs`, `ConnSlot`): a full gateway never gives that connection's slot to
/// another (found by review: counting every request let keyless ones shield a flood).
pub async fn throttle(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    if let Err(r) = bearer_throttle(&st, &mut req).await {
        return r;
    }
    let planted =
        crate::dashboard::session::planted_session_cookies(&st, req.headers(), req.uri().path());
    if !planted.is_empty() {
        crate::dashboard::session::drop_session_cookie(&st, req.headers_mut());
    }
    if let Err(r) = dashboard_session(&st, &mut req).await {
        return r;
    }
    let known = match (
        req.extensions().get::<KnownKey>(),
        req.extensions().get::<crate::serve_slots::ConnSlot>(),
    ) {
        (Some(k), Some(slot)) => {
            let cap = crate::serve_slots::shield_cap(st.waiters.cap(), st.limits.max_connections);
            st.shields.shield(&slot.0, &k.0, cap)
        }
        _ => None,
    };
    // The executor takes calls in turns between lanes ([`crate::executor::Turns`]).
    let net = st.throttle.client_addr(&req).map(crate::throttle::network);
    let sender = req.extensions().get::<KnownKey>().map(|k| k.0.as_str());
    let lane = crate::executor::Lane::of(sender, net);
    let mut response = crate::executor::in_lane(lane, next.run(req)).await;
    for c in planted {
        response.headers_mut().append(header::SET_COOKIE, c);
    }
    match known {
        Some(known) => {
            response.map(|b| axum::body::Body::new(crate::serve_slots::Counted::new(b, known)))
        }
        None => response,
    }
}

/// [`throttle`] of a request's bearer key, if it sent one: `Err` is the answer to send (a
/// lock-out, a rate limit, a wrong key with a body); a known key marks the request
/// [`KnownKey`].
async fn bearer_throttle(st: &AppState, req: &mut Request) -> Result<(), Response> {
    let Some(key) = bearer_key(req.headers()) else {
        return Ok(());
    };
    let addr = st.throttle.client_addr(req);
    if let Some(wait) = st.throttle.locked_out(addr, key, false)
        && !st.throttle.passes_lockout(addr, key)
    {
        return Err(too_many(
            "AUTH_THROTTLED",
            "too many failed authentications from this address; wait and retry",
            wait,
        ));
    }
    // The scrape key is known, but only for what it may read: elsewhere it is a wrong key. It
    // has a rate of its own (found by review: it skipped every rate, so whoever read it from a
    // monitoring config could put a store call beside every agent's, as fast as they liked).
    // It is held to the address's lock-out as a principal's key is, and passes it likewise once
    // it was used from there (found by review: checked before the lock-out, it was answered
    // `200` from a locked-out address where every wrong key got an uncounted `429`, so it could
    // be guessed there at any rate).
    if req.uri().path() == "/metrics" && crate::scrape::is_scrape_key(st, key) {
        if let Some(wait) = st.throttle.over_scrape_rate() {
            return Err(too_many(
                "RATE_LIMITED",
                "the scrape key is over its request rate (rate_limits); scrape less often",
                wait,
            ));
        }
        st.throttle
            .authenticated(addr, key, &crate::throttle::digest(key));
        return Ok(());
    }
    match principal_for_key(&st.principals(), key) {
        None => {
            if let Some(wait) = st.throttle.wrong_key(addr, key).await {
                tracing::warn!(addr = ?addr, "authentication failures throttled");
                return Err(too_many(
                    "AUTH_THROTTLED",
                    "too many failed authentications from this address or for this key; wait and retry",
                    wait,
                ));
            }
            // A wrong key is refused before its body is read ([`buffer_body`]), as every route
            // that takes a body and a key would: `401`, or for an AAEP reply `204` with no
            // reason given (AAEP §6.3.4). `/mcp` answers in JSON-RPC itself, reading at most
            // the 16 KiB of a request that shows no known key.
            if !is_mcp(req.uri().path())
                && !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
            {
                if req.uri().path() == crate::aaep::REPLIES_PATH {
                    return Err(StatusCode::NO_CONTENT.into_response());
                }
                return Err(ApiError::unauthenticated().into_response());
            }
        }
        Some(p) => {
            if let Some(wait) = st.throttle.over_rate(&p.name) {
                return Err(too_many(
                    "RATE_LIMITED",
                    "this principal is over its request rate (rate_limits); slow down",
                    wait,
                ));
            }
            st.throttle.authenticated(addr, key, &p.key_sha256);
            req.extensions_mut().insert(KnownKey(p.name.clone()));
        }
    }
    Ok(())
}

/// Whether `path` is the dashboard's (`/ui`, `/ui/…`) and may need its session: not its
/// static files.
fn dashboard_path(path: &str) -> bool {
    (path == "/ui" || path.starts_with("/ui/")) && !path.starts_with("/ui/static/")
}

/// The throttle of a dashboard request's session cookie (on [`dashboard_path`]s only; the
/// name in force, `dashboard::session::session_cookie`), before any handler asks the store
/// for it: a value not of the form the gateway issues is left to the handlers, which refuse
/// it without asking the store; from a locked-out address `429 AUTH_THROTTLED` unless this
/// session signed someone in from there before
/// ([`crate::throttle::Throttle::passes_session_lockout`]); a cookie that signs no one in is
/// counted as a failed authentication of the address (its allowance spent: `429
/// AUTH_THROTTLED`; a store that did not answer counts nothing and is `503
/// STORE_UNAVAILABLE`); a live session's operator over its rate gets `429 RATE_LIMITED`, else
/// the request is marked [`KnownKey`] and carries its operator
/// ([`crate::dashboard::session::SignedIn`]), which page views read instead of asking the
/// store again (a form that changes something asks once more after its body has arrived:
/// `dashboard::session::Posted`). A request not so marked is signed in nowhere.
///
/// Found by review: a store that did not answer left the request unmarked, so a large edit
/// form met the body limit of a sender that shows no session (`413`, misreported), and the
/// handlers then looked the session up again on a guess. On the sign-in pages, which need no
/// session, the cookie is dropped instead, as one not looked up
/// ([`crate::dashboard::session::DroppedSession`]: the sign-in ends it if it was live).
///
/// Attack (found by review): a made-up cookie on any path was looked up in the store, as a
/// job of the one store executor marked as a write, never throttled nor counted, so a flood
/// from many keep-alive connections queued junk ahead of the agents' proposals and decisions;
/// and signed-in operators' requests skipped `rate_limits`.
async fn dashboard_session(st: &AppState, req: &mut Request) -> Result<(), Response> {
    use crate::dashboard::{session, sessions};
    if !dashboard_path(req.uri().path()) {
        return Ok(());
    }
    let Some(id) = session::session_cookie(st, req.headers()) else {
        return Ok(());
    };
    if !sessions::well_formed(id) {
        return Ok(());
    }
    let addr = st.throttle.client_addr(req);
    let throttled = |wait| {
        crate::dashboard::page::secured(too_many(
            "AUTH_THROTTLED",
            "too many failed authentications from this address; wait and retry",
            wait,
        ))
    };
    // On the sign-in pages a cookie that signs no one in is dropped, not refused: the sign-in
    // applies its own lock-out (a long key seen from here passes it). Found by review: a
    // browser holding a dead session cookie (pushed out by the cap, ended, its key rotated)
    // got `429` on the sign-in form itself while its network was locked out, with no way to
    // clear the `HttpOnly` cookie.
    let path = req.uri().path();
    let signing_in = path == "/ui/login" || path.starts_with("/ui/oidc/");
    if let Some(wait) = st.throttle.locked_out(addr, "", false)
        && !st.throttle.passes_session_lockout(addr, id)
    {
        if signing_in {
            // Not looked up here (the address is locked out), so perhaps live.
            drop_unchecked(st, req, id.to_string());
            return Ok(());
        }
        return Err(throttled(wait));
    }
    let op = match session::signed_in_as(st, id).await {
        Ok(Some(op)) => op,
        Ok(None) => {
            let over = st.throttle.failed_addr(addr).await;
            if signing_in {
                session::drop_session_cookie(st, req.headers_mut());
                return Ok(());
            }
            if let Some(wait) = over {
                tracing::warn!(addr = ?addr, "dashboard session cookies throttled");
                return Err(throttled(wait));
            }
            return Ok(());
        }
        Err(()) if signing_in => {
            drop_unchecked(st, req, id.to_string());
            return Ok(());
        }
        Err(()) => return Err(session_unavailable()),
    };
    if let Some(wait) = st.throttle.over_rate(&op.principal.name) {
        return Err(crate::dashboard::page::secured(too_many(
            "RATE_LIMITED",
            "this operator is over its request rate (rate_limits); slow down",
            wait,
        )));
    }
    st.throttle.session_authenticated(addr, id);
    req.extensions_mut()
        .insert(KnownKey(op.principal.name.clone()));
    req.extensions_mut()
        .insert(session::SignedIn(Some(std::sync::Arc::new(op))));
    Ok(())
}

/// Takes session cookie `id`, not looked up (perhaps live), off a sign-in page's request: the
/// request reads as one from a browser signed in nowhere, and the sign-in ends `id` as the
/// session it replaces ([`crate::dashboard::session::DroppedSession`]).
fn drop_unchecked(st: &AppState, req: &mut Request, id: String) {
    crate::dashboard::session::drop_session_cookie(st, req.headers_mut());
    req.extensions_mut()
        .insert(crate::dashboard::session::DroppedSession(id));
}

/// `503 STORE_UNAVAILABLE` (the dashboard's headers, a JSON body) for a dashboard request
/// whose session the store did not look up: nothing was done, and no handler ran on a guess.
fn session_unavailable() -> Response {
    let mut r = crate::dashboard::page::secured(
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "STORE_UNAVAILABLE",
            "the gateway could not check this dashboard session right now; nothing was done, try again",
        )
        .into_response(),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}
