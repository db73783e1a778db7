//! AAEP HTTP binding (Appendix B.1) of the producer side (chapters 5 and 6):
//! `POST /aaep/v1/subscriptions`, `GET /aaep/v1/events` (SSE with `Last-Event-ID`) and
//! `POST /aaep/v1/replies` (`confirmation.reply`, `clarification.reply`, `subscription.close`).
//!
//! Subscribers authenticate as operators. Replies are checked exactly as §6.3.4 says — schema,
//! known token, unused, unexpired, authenticated sender on an open subscription of theirs that
//! can reply, decision in `allowed_replies` — and every JSON body is answered `204`, so the
//! sender learns no reason (`400` only for a body that is not JSON). The reply token is never a
//! credential: the decision is made as the authenticated operator, with their roles.

use crate::api::blocking;
use crate::auth::authenticate;
use crate::config::Principal;
use crate::error::ApiError;
use crate::{AppState, now_ms};
use assent_core::ApprovalStatus;
use assent_store::aaep::{AAEP_VERSION, Subscription};
use assent_store::{DecideError, DecisionInput};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::OnceLock;
use std::time::Duration;

/// Routes of the AAEP binding.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/aaep/v1/subscriptions", post(subscribe))
        .route("/aaep/v1/events", get(events))
        .route("/aaep/v1/replies", post(replies))
}

fn schema(text: &'static str) -> jsonschema::Validator {
    let v: Value = serde_json::from_str(text).expect("vendored schema is JSON");
    jsonschema::options()
        .should_validate_formats(true)
        .build(&v)
        .expect("vendored schema compiles")
}

macro_rules! vendored {
    ($name:ident, $path:literal) => {
        fn $name() -> &'static jsonschema::Validator {
            static V: OnceLock<jsonschema::Validator> = OnceLock::new();
            V.get_or_init(|| schema(include_str!(concat!("../../../spec/aaep/schemas/", $path))))
        }
    };
}
vendored!(
    subscription_request,
    "handshake/subscription.request.schema.json"
);
vendored!(
    confirmation_reply,
    "handshake/confirmation.reply.schema.json"
);
vendored!(
    clarification_reply,
    "handshake/clarification.reply.schema.json"
);

fn operator(p: &Principal) -> Result<&[String], ApiError> {
    p.roles()
        .ok_or_else(|| ApiError::forbidden("AAEP subscribers authenticate as operators"))
}

/// The capabilities assent honours for a request: the standard ones as asked (with the
/// schema's defaults), and assent's timeout extension capped by the configuration.
fn honour(req: &Value, max_extension_s: u64) -> Value {
    let c = &req["capabilities"];
    let mut h = json!({
        "preferred_verbosity": c["preferred_verbosity"].as_str().unwrap_or("normal"),
        "languages": c.get("languages").cloned().unwrap_or(json!(["en-US"])),
        "supports_confirmation_reply": c["supports_confirmation_reply"] == true,
        "supports_clarification_reply": c["supports_clarification_reply"] == true,
        "supported_conformance_levels": [1, 2],
    });
    for k in [
        "max_events_per_second",
        "coalesce_boundaries",
        "event_filters",
        "cognitive_load",
        "pace_wpm",
    ] {
        if let Some(v) = c.get(k) {
            h[k] = v.clone();
        }
    }
    if let Some(s) = c["assent"]["timeout_extension_seconds"].as_u64() {
        h["assent"] = json!({"timeout_extension_seconds": s.min(max_extension_s)});
    }
    h
}

fn accepted(sub: &Subscription) -> Value {
    json!({
        "type": "subscription.accepted", "subscription_id": sub.id, "aaep_version": AAEP_VERSION,
        "producer": {"agent_id": "assent", "agent_name": "assent approval gateway"},
        "honored_capabilities": sub.honored,
        "negotiation_notes": "Critical events (confirmations, clarifications, errors) are never filtered or rate-limited. Closing this subscription does not apply default decisions: assent has other reply channels.",
    })
}

/// `POST /aaep/v1/subscriptions`: a `subscription.request` → `201` `subscription.accepted`
/// with `Location`; a request that does not match the schema is `400` with
/// `subscription.rejected`; another major version is `400` `version_unsupported`.
async fn subscribe(
    State(st): State<AppState>,
    headers: HeaderMap,
    crate::extract::ApiJson(req): crate::extract::ApiJson<Value>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    operator(&p)?;
    let reject = |code: &str, msg: String| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"type": "subscription.rejected", "reason_code": code, "reason_message": msg})),
        )
            .into_response()
    };
    if let Some(e) = subscription_request().iter_errors(&req).next() {
        return Ok(reject(
            "capabilities_incompatible",
            format!(
                "not a valid subscription.request: {e} at {}",
                e.instance_path()
            ),
        ));
    }
    if !req["aaep_version"]
        .as_str()
        .is_some_and(|v| v.starts_with("1."))
    {
        return Ok(reject(
            "version_unsupported",
            format!("assent speaks AAEP {AAEP_VERSION}"),
        ));
    }
    let honored = honour(&req, st.settings.aaep_max_timeout_extension_s);
    let s = st.store.clone();
    let sub = blocking(move || s.subscribe(&p.name, &req, &honored, now_ms()))
        .await?
        .map_err(ApiError::unavailable)?;
    st.refresh_extension().await;
    let mut resp = (StatusCode::CREATED, Json(accepted(&sub))).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/aaep/v1/events?subscription_id={}", sub.id)) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

/// `GET /aaep/v1/events[?subscription_id=sub_…]`: the SSE stream (`event: aaep.event`,
/// `id: evt_…`). Resumes after `Last-Event-ID`. Without `subscription_id` it opens a
/// subscription with default capabilities and announces it in a first
/// `event: aaep.subscription` message holding its `subscription.accepted`.
async fn events(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    operator(&p)?;
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let s = st.store.clone();
    let (sub, fresh) = match q.get("subscription_id") {
        Some(id) => {
            let id = id.clone();
            let sub = blocking(move || s.subscription(&id))
                .await?
                .map_err(ApiError::unavailable)?
                .filter(|x| x.principal == p.name && x.closed_at.is_none())
                .ok_or_else(|| {
                    ApiError::not_found("no open subscription with this id for this operator")
                })?;
            (sub, false)
        }
        None => {
            let req = json!({"type": "subscription.request", "aaep_version": AAEP_VERSION,
                             "subscriber_id": format!("sse:{}", p.name), "capabilities": {}});
            let honored = honour(&req, 0);
            let name = p.name.clone();
            let sub = blocking(move || s.subscribe(&name, &req, &honored, now_ms()))
                .await?
                .map_err(ApiError::unavailable)?;
            (sub, true)
        }
    };
    let mut after = sub.start_seq;
    if let Some(evt) = last {
        let s = st.store.clone();
        if let Some(seq) = blocking(move || s.event_seq(&evt))
            .await?
            .map_err(ApiError::unavailable)?
        {
            after = seq;
        }
    }
    let mut queue: VecDeque<Event> = VecDeque::new();
    if fresh {
        queue.push_back(
            Event::default()
                .event("aaep.subscription")
                .data(accepted(&sub).to_string()),
        );
    }
    let rx = st.changes.subscribe();
    let init = (st, sub, after, queue, rx);
    let stream =
        futures_util::stream::unfold(init, |(st, sub, mut after, mut queue, mut rx)| async move {
            loop {
                if let Some(e) = queue.pop_front() {
                    return Some((Ok::<_, Infallible>(e), (st, sub, after, queue, rx)));
                }
                let s = st.store.clone();
                let sub2 = sub.clone();
                let got = tokio::task::spawn_blocking(move || {
                    let open = s
                        .subscription(&sub2.id)
                        .ok()
                        .flatten()
                        .is_some_and(|x| x.closed_at.is_none());
                    (open, s.events_after(&sub2, after, 200))
                })
                .await;
                let Ok((open, Ok(events))) = got else {
                    return None; // the store failed: end the stream; the subscriber reconnects
                };
                if !open {
                    return None; // closed (§5.8.2: stop emitting)
                }
                for e in events {
                    after = e.seq;
                    if sub.wants(&e.ty, e.critical) {
                        queue.push_back(
                            Event::default()
                                .event("aaep.event")
                                .id(e.event_id)
                                .data(e.data.to_string()),
                        );
                    }
                }
                if queue.is_empty() {
                    let _ = tokio::time::timeout(Duration::from_secs(15), rx.changed()).await;
                }
            }
        });
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// Why a reply was ignored; logged, never told to the sender (§6.3.4).
pub(crate) type Ignored = &'static str;

/// Whether `msg` matches `clarification.reply.schema.json`.
pub(crate) fn clarification_reply_valid(msg: &Value) -> bool {
    clarification_reply().is_valid(msg)
}

/// `POST /aaep/v1/replies`: `204` for every JSON body; `400` only when it is not JSON.
async fn replies(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    // The sender is authenticated before the body is parsed; a reply without a valid key is
    // ignored like any other failing reply (§6.3.4: 204, no reason given).
    let Ok(p) = authenticate(&st.principals, &headers) else {
        tracing::info!(why = "unauthenticated", "AAEP reply ignored");
        return StatusCode::NO_CONTENT.into_response();
    };
    let p = Some(p.clone());
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return ApiError::bad_request("the body is not JSON").into_response();
    };
    // Ambiguous JSON (a duplicate key, a number a double would change) is ignored like any
    // other reply that fails a check: the sender learns nothing (§6.3.4).
    if let Err(e) = assent_core::json::check(&body) {
        tracing::info!(why = %e, "AAEP reply ignored");
        return StatusCode::NO_CONTENT.into_response();
    }
    let outcome = match msg["type"].as_str() {
        Some("confirmation.reply") => confirmation(&st, p, &msg).await,
        Some("clarification.reply") => crate::clarify::reply(&st, p, &msg).await,
        Some("subscription.close") => close(&st, p, &msg).await,
        _ => Err("unknown message type"),
    };
    match outcome {
        Ok(what) => tracing::info!(what, "AAEP reply applied"),
        Err(why) => tracing::info!(why, "AAEP reply ignored"),
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn close(st: &AppState, p: Option<Principal>, msg: &Value) -> Result<&'static str, Ignored> {
    let p = p.ok_or("unauthenticated")?;
    let id = msg["subscription_id"]
        .as_str()
        .ok_or("no subscription_id")?
        .to_string();
    let s = st.store.clone();
    let ok = blocking(move || s.close_subscription(&id, &p.name, now_ms()))
        .await
        .map_err(|_| "store")?
        .map_err(|_| "store")?;
    st.refresh_extension().await;
    st.changed();
    if ok {
        Ok("subscription closed")
    } else {
        Err("not an open subscription of the sender")
    }
}

/// Checks the sender of a reply: an authenticated operator, on an open subscription of theirs
/// that can reply (`confirmations`: `supports_confirmation_reply`, else clarifications).
pub(crate) async fn reply_sender(
    st: &AppState,
    p: Option<Principal>,
    msg: &Value,
    confirmations: bool,
) -> Result<(Principal, Subscription), Ignored> {
    let p = p.ok_or("unauthenticated sender")?;
    p.roles().ok_or("sender is not an operator")?;
    let id = msg["subscription_id"].as_str().unwrap_or("").to_string();
    let s = st.store.clone();
    let sub = blocking(move || s.subscription(&id))
        .await
        .map_err(|_| "store")?
        .map_err(|_| "store")?
        .ok_or("unknown subscription")?;
    if sub.principal != p.name || sub.closed_at.is_some() {
        return Err("subscription is not an open one of the sender");
    }
    let can = if confirmations {
        sub.replies_to_confirmations()
    } else {
        sub.replies_to_clarifications()
    };
    if !can {
        return Err("subscription did not declare it can reply");
    }
    Ok((p, sub))
}

/// Whether the reply's `timestamp` precedes `requested_at + timeout` (§6.3.4 step 4).
pub(crate) fn in_time(msg: &Value, requested_at: i64, expires_at: i64) -> bool {
    let Some(ts) = msg["timestamp"].as_str().and_then(|t| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    }) else {
        return false;
    };
    let ms = (ts.unix_timestamp_nanos() / 1_000_000) as i64;
    ms < expires_at && ms >= requested_at - 60_000 && now_ms() < expires_at
}

async fn confirmation(
    st: &AppState,
    p: Option<Principal>,
    msg: &Value,
) -> Result<&'static str, Ignored> {
    if !confirmation_reply().is_valid(msg) {
        return Err("does not match confirmation.reply.schema.json");
    }
    let token = msg["reply_token"].as_str().unwrap_or("").to_string();
    let s = st.store.clone();
    let t2 = token.clone();
    let a = blocking(move || s.approval_by_reply_token(&t2))
        .await
        .map_err(|_| "store")?
        .map_err(|_| "store")?
        .ok_or("unknown reply token")?;
    let (p, sub) = reply_sender(st, p, msg, true).await?;
    let roles = p.roles().unwrap_or_default().to_vec();
    let late = |st: AppState, a: assent_store::ApprovalRecord, sub: String, token: String| async move {
        let s = st.store.clone();
        let _ = blocking(move || s.courtesy_notice(&sub, &a, &token, now_ms())).await;
        st.changed();
    };
    if a.status != ApprovalStatus::Pending {
        late(st.clone(), a, sub.id, token).await;
        return Err("already resolved (courtesy notice sent)");
    }
    // Until the deadline announced in `timeout_seconds`, escalation included (issue 10 §5).
    if !in_time(msg, a.requested_at, a.announced_deadline()) {
        return Err("reply timestamp is after the confirmation's timeout");
    }
    let decision = msg["decision"].as_str().unwrap_or("");
    if !["accept", "reject"].contains(&decision) {
        return Err("decision not in allowed_replies");
    }
    let by = msg["decided_by"]
        .as_str()
        .map(|d| format!(" (decided_by {d})"))
        .unwrap_or_default();
    let rationale = msg["decision_rationale"]
        .as_str()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let mut input = if decision == "accept" {
        DecisionInput::approve()
    } else {
        DecisionInput::deny(None)
    };
    input.reason = Some(format!(
        "AAEP confirmation.reply on {}{by}{rationale}",
        sub.id
    ));
    if decision == "accept"
        && let Some(m) = msg.get("modified_action")
    {
        let args = m
            .get("arguments")
            .cloned()
            .ok_or("modified_action without arguments")?;
        let s = st.store.clone();
        let (agent, session, aid) = (a.agent.clone(), a.session_id.clone(), a.id.clone());
        let prior = blocking(move || s.session_calls(&agent, &session, Some(&aid)))
            .await
            .map_err(|_| "store")?
            .map_err(|_| "store")?;
        // Re-gated like a proposal, as an operator's edit is; refused means nothing runs.
        let (edited, limit) = crate::edits::regate(st, &a, args, &prior, &roles)
            .map_err(|_| "modified action refused by the gatekeeper")?;
        input.edited = Some(edited);
        input.edited_output_bytes = limit;
    }
    let s = st.store.clone();
    let (id, name) = (a.id.clone(), p.name.clone());
    let res = blocking(move || s.decide(&id, &input, &name, &roles, now_ms()))
        .await
        .map_err(|_| "store")?;
    match res {
        Ok(rec) => {
            st.settled(std::slice::from_ref(&rec.id));
            Ok(if decision == "accept" {
                "confirmation accepted"
            } else {
                "confirmation rejected"
            })
        }
        Err(DecideError::AlreadyDecided(_)) => {
            // Lost the race to another reply or channel: first reply wins (§6.7.1).
            let s = st.store.clone();
            let id = a.id.clone();
            if let Ok(Ok(Some(a))) = blocking(move || s.get_approval(&id)).await {
                late(st.clone(), a, sub.id, token).await;
            }
            Err("already resolved (courtesy notice sent)")
        }
        Err(_) => Err("decision refused (approver role, scope or store)"),
    }
}
