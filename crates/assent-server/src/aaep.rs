//! AAEP HTTP binding (Appendix B.1) of the producer side (chapters 5 and 6):
//! `POST /aaep/v1/subscriptions`, `GET /aaep/v1/events` (SSE with `Last-Event-ID`) and
//! `POST /aaep/v1/replies` (`confirmation.reply`, `clarification.reply`, `subscription.close`).
//!
//! Subscribers authenticate as operators. Replies are checked exactly as §6.3.4 says — schema,
//! known token, unused, unexpired, authenticated sender on an open subscription of theirs that
//! can reply, decision in `allowed_replies` — and every JSON body is answered `204`, so the
//! sender learns no reason (`400` only for a body that is not JSON). The reply token is never a
//! credential: the decision is made as the authenticated operator, with their roles. The
//! checks shared with clarifications are in [`crate::replies`]; an open SSE stream (and the
//! closing of a bare stream's subscription) is `aaep_streams.rs`; routes are mounted by
//! [`crate::router`](mod@crate::router).

use crate::aaep_streams::{Bare, StreamSlot, stream};
use crate::auth::authenticate;
use crate::calls::MAX_REASON_BYTES;
use crate::config::Principal;
use crate::envelopes::AAEP_VERSION;
use crate::error::ApiError;
use crate::extract::{AaepSubscriber, ApiJson, Operator};
use crate::replies::subscription_request;
use crate::replies::{Ignored, ReplyTo, in_time, replied_to, reply_sender};
use crate::state::{AppState, now_ms};
use assent_core::ApprovalStatus;
use assent_store::aaep::Subscription;
use assent_store::{ApprovalRecord, DecideError, DecisionInput, Store};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};

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

/// The most filters a subscription's `event_filters.include` (or `exclude`) lists.
const MAX_EVENT_FILTERS: usize = 64;

/// The longest subscription request accepted, in bytes of its compact JSON: it is stored with
/// the subscription (found by review: a request padded to the body limit, 320 KiB, was stored
/// as sent, one row per request).
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// `POST /aaep/v1/subscriptions`: a `subscription.request` → `201` `subscription.accepted`
/// with `Location`; a request that does not match the schema, or whose `subscriber_id` starts
/// with `sse:` (the gateway's own, for bare streams), is `400` with `subscription.rejected`;
/// another major version is `400` `version_unsupported`.
#[utoipa::path(post, path = "/aaep/v1/subscriptions", tag = "aaep",
    request_body = Object,
    responses((status = 201, description = "`subscription.accepted`", body = Object), (status = 400, description = "`subscription.rejected`", body = Object)),
    security(("operator_key" = [])))]
pub(crate) async fn subscribe(
    State(st): State<AppState>,
    op: Operator<AaepSubscriber>,
    ApiJson(req): ApiJson<Value>,
) -> Result<Response, ApiError> {
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
    // Found by review: the schema bounds each filter's length but not how many there are,
    // and the list was kept, and read again on every change, as sent (300 KB a subscription).
    for list in ["include", "exclude"] {
        let n = req["capabilities"]["event_filters"][list]
            .as_array()
            .map_or(0, Vec::len);
        if n > MAX_EVENT_FILTERS {
            return Ok(reject(
                "capabilities_incompatible",
                format!(
                    "capabilities.event_filters.{list} lists {n} filters; at most {MAX_EVENT_FILTERS}"
                ),
            ));
        }
    }
    let bytes = req.to_string().len();
    if bytes > MAX_REQUEST_BYTES {
        return Ok(reject(
            "capabilities_incompatible",
            format!("the request is {bytes} bytes of JSON; at most {MAX_REQUEST_BYTES}"),
        ));
    }
    // `sse:` names the subscription a bare stream opens for its operator, which the streams
    // keeper closes once no stream marks it: a posted one would be closed under its
    // subscriber (found by review).
    if req["subscriber_id"]
        .as_str()
        .is_some_and(|id| id.starts_with("sse:"))
    {
        return Ok(reject(
            "capabilities_incompatible",
            "subscriber_id `sse:…` is the gateway's own for bare streams; choose another".into(),
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
    let sub = st
        .store_call(move |s| s.subscribe(op.name(), &req, &honored, None, now_ms()))
        .await?;
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
/// `event: aaep.subscription` message holding its `subscription.accepted`; that bare stream's
/// subscription is closed (`aaep.closed`) 30 s after its last stream in this process ended,
/// unless one reopened it by id meanwhile (a plain reconnect with `Last-Event-ID` opens a new
/// one after that event, missing nothing). Any other query parameter is `400` (found by
/// review: a misspelt `?subscriptionid=` opened a subscription of its own).
#[utoipa::path(get, path = "/aaep/v1/events", tag = "aaep",
    params(("subscription_id" = Option<String>, Query, description = "A subscription (absent: open one with default capabilities)"), ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event")),
    responses((status = 200, description = "Server-sent events (`event: aaep.event`)", content_type = "text/event-stream", body = String)),
    security(("operator_key" = [])))]
pub(crate) async fn events(
    State(st): State<AppState>,
    op: Operator<AaepSubscriber>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    crate::extract::only_keys(&q, &["subscription_id"])?;
    let name = op.name().to_string();
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // The event `Last-Event-ID` names, if it is one of ours. One of our ids no longer in the
    // log (retention pruned it) resumes as far back as any resumption may go
    // (`RESUME_WINDOW` events, `assent_store::subscriptions`), not at the newest event: the
    // confirmations raised since are delivered.
    let resume = match last.clone() {
        Some(evt) => {
            let ours = evt.starts_with("evt_");
            let seq = st.store_call(move |s| s.event_seq(&evt)).await?;
            seq.or(ours.then_some(0))
        }
        None => None,
    };
    let (sub, fresh) = match q.get("subscription_id") {
        Some(id) => {
            let sub = reopen(&st, name, id.clone()).await?;
            (sub, false)
        }
        None => {
            let req = json!({"type": "subscription.request", "aaep_version": AAEP_VERSION,
                             "subscriber_id": format!("sse:{name}"), "capabilities": {}});
            let honored = honour(&req, 0);
            // A reconnecting client resumes after the event it last had (no gap).
            let sub = st
                .store_call(move |s| s.subscribe(&name, &req, &honored, resume, now_ms()))
                .await?;
            // Opening it may have closed one with a timeout extension (the cap).
            st.refresh_extension().await;
            (sub, true)
        }
    };
    // A bare stream's subscription is its own: closed once its streams have ended (after a
    // grace for a reconnect by id, `aaep_streams::BARE_GRACE`; found by review: it stayed open).
    // So is one reopened by id whose subscriber is `sse:{operator}` (a bare stream opened it):
    // its stream's end here schedules the close too (found by review: reopened on another
    // replica, or here after its close had begun, it was not known as bare there, so its end
    // closed nothing and it stayed open until retention, counted against the operator's 16).
    let bare_id = format!("sse:{}", op.name());
    let bare = (fresh || sub.subscriber_id == bare_id).then(|| Bare {
        st: st.clone(),
        principal: op.name().to_string(),
    });
    let slot = StreamSlot::take(&st, &sub, bare);
    let after = if fresh {
        resume.unwrap_or(sub.start_seq)
    } else {
        let s = sub.clone();
        st.store_call(move |store| store.resume_point(&s, resume))
            .await?
    };
    let mut queue: VecDeque<Event> = VecDeque::new();
    if fresh {
        queue.push_back(
            Event::default()
                .event("aaep.subscription")
                .data(accepted(&sub).to_string()),
        );
    }
    // A resumption held to the window skips part of the log: the confirmations and questions
    // still waiting from it come first, all of them, page by page (`Store::still_awaiting`).
    // A subscription reopened by its id never had the events before its start.
    let skipped_from = if fresh {
        resume
    } else {
        Some(resume.unwrap_or(sub.start_seq).max(sub.start_seq))
    };
    let resumes_at = after.max(sub.start_seq);
    let gap = skipped_from
        .filter(|f| *f < resumes_at)
        .map(|from| (from, resumes_at));
    let key = op.principal.key_sha256;
    let events = stream(st, (sub, slot), key, (after, gap), queue);
    let mut resp = Sse::new(crate::executor::stream_in_lane(events))
        .keep_alive(KeepAlive::default())
        .into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// Subscription `id` of operator `name` reopened by id: marked seen before it is accepted, in
/// the database, so a bare stream's close waiting out its grace then leaves it open, or closed
/// it first and this is a `404` (found by review: a reopen at the very end of the grace was
/// accepted, then closed under its stream). `404` too for a closed one or another operator's.
async fn reopen(st: &AppState, name: String, id: String) -> Result<Subscription, ApiError> {
    st.store_call(move |s| match s.subscription(&id)? {
        Some(x) if x.principal == name && x.closed_at.is_none() => {
            Ok(s.touch_subscription(&x.id, now_ms())?.then_some(x))
        }
        _ => Ok(None),
    })
    .await?
    .ok_or_else(|| ApiError::not_found("no open subscription with this id for this operator"))
}

/// The path AAEP replies are posted to ([`replies`]; `router.rs` mounts it as a literal,
/// which the OpenAPI test reads).
pub(crate) const REPLIES_PATH: &str = "/aaep/v1/replies";

/// `POST /aaep/v1/replies`: `204` for every JSON body; `400` only when it is not JSON.
#[utoipa::path(post, path = "/aaep/v1/replies", tag = "aaep",
    request_body = Object,
    responses((status = 204, description = "Received (a reply that fails a check is ignored, §6.3.4)")),
    security((), ("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn replies(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // The sender is authenticated before the body is parsed; a reply without a valid key is
    // ignored like any other failing reply (§6.3.4: 204, no reason given).
    let principals = st.principals();
    let Ok(p) = authenticate(&principals, &headers) else {
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
    // A NUL in any text a reply stores (a rationale, decided_by, a clarification's answer) is
    // refused as on every other route, but silently (§6.3.4); `modified_action.arguments`
    // keeps it, as a call's arguments do.
    if let Err(e) = crate::calls::refuse_nul_in_json(&body) {
        tracing::info!(why = %e.message, "AAEP reply ignored");
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

/// `subscription.close` (§5.8.2) from `p`: an operator closes one of their own open
/// subscriptions. Only a close that closed one re-reads the timeout extensions and wakes the
/// streams (found by review: any key, an agent's too, made every close a store write, a
/// re-read of every open subscription and a wake of every stream, at its rate limit).
async fn close(st: &AppState, p: Option<Principal>, msg: &Value) -> Result<&'static str, Ignored> {
    let p = p.ok_or("unauthenticated")?;
    if p.roles().is_none() {
        return Err("not an operator");
    }
    let id = msg["subscription_id"]
        .as_str()
        .ok_or("no subscription_id")?
        .to_string();
    let ok = st
        .store_call(move |s| s.close_subscription(&id, &p.name, now_ms()))
        .await
        .map_err(|_| "store")?;
    if !ok {
        return Err("not an open subscription of the sender");
    }
    st.refresh_extension().await;
    st.changed();
    Ok("subscription closed")
}

/// Tells subscription `sub` that the approval `a` its reply (`token`) was for is resolved
/// already (§6.7.1 courtesy notice), once per subscription and approval (`Store::courtesy_notice`;
/// found by review: every late reply sent one more).
async fn late(st: &AppState, a: ApprovalRecord, sub: String, token: String) {
    let sent = st
        .store_call(move |s| s.courtesy_notice(&sub, &a, &token, now_ms()))
        .await;
    if matches!(sent, Ok(true)) {
        st.changed();
    }
}

/// The decision a valid, timely `confirmation.reply` on subscription `sub` asks for:
/// `accept` approves (with `modified_action` re-gated by [`crate::edits::edit`] for an
/// operator holding `roles`), `reject` denies; the reason names the subscription, `decided_by`
/// ([`claimed_by`], beside the reply's `sender`) and the rationale.
async fn reply_input(
    st: &AppState,
    msg: &Value,
    a: &ApprovalRecord,
    sub: &str,
    (sender, roles): (&str, &[String]),
) -> Result<DecisionInput, Ignored> {
    let decision = msg["decision"].as_str().unwrap_or("");
    if !["accept", "reject"].contains(&decision) {
        return Err("decision not in allowed_replies");
    }
    // Bounded as a REST decision's reason is (4,096 bytes) and an id is (256).
    let (decided_by, rationale) = (
        msg["decided_by"].as_str(),
        msg["decision_rationale"].as_str(),
    );
    if decided_by.is_some_and(|d| d.len() > 256) {
        return Err("decided_by over 256 bytes");
    }
    if rationale.is_some_and(|r| r.len() > MAX_REASON_BYTES) {
        return Err("decision_rationale over 4096 bytes");
    }
    let by = decided_by
        .map(|d| claimed_by(d, sender))
        .unwrap_or_default();
    let rationale = rationale.map(|r| format!(": {r}")).unwrap_or_default();
    let mut input = if decision == "accept" {
        DecisionInput::approve()
    } else {
        DecisionInput::deny(None)
    };
    input.reason = Some(format!("AAEP confirmation.reply on {sub}{by}{rationale}"));
    if decision == "accept"
        && let Some(m) = msg.get("modified_action")
    {
        // An accept of a modification that cannot be applied — not `{"arguments": {...}}`, or
        // arguments the gatekeeper refuses — is taken as a reject (§6.3.2: a producer that does
        // not support a modification MUST treat the reply as "reject"). Found by review: it was
        // ignored, the approval stayed pending, and an approving default then ran the call
        // unmodified, which the operator had not accepted.
        let refused = |why: &str| {
            let mut no = DecisionInput::deny(None);
            no.reason = Some(format!(
                "AAEP confirmation.reply on {sub}{by}: accept with a modified_action that could not be applied ({why}); taken as reject (AAEP §6.3.2){rationale}"
            ));
            no
        };
        let Some(args) = m.get("arguments").filter(|a| a.is_object()).cloned() else {
            return Ok(refused("it has no `arguments` object"));
        };
        if let Some(k) = foreign_key(m, a) {
            return Ok(refused(&format!(
                "`{k}` cannot be changed; only `arguments` can"
            )));
        }
        // Re-gated like a proposal, as an operator's edit is; refused means nothing runs.
        match crate::edits::edit(st, a, args, roles).await {
            Ok((edited, limit, seen)) => {
                input.edited = Some(edited);
                input.edited_output_bytes = limit;
                seen.into_input(&mut input);
            }
            Err(e) if e.status == StatusCode::SERVICE_UNAVAILABLE => return Err("store"),
            Err(e) => return Ok(refused(&e.message)),
        }
    }
    Ok(input)
}

/// The first key of `modified_action` `m` other than `arguments`, unless it is `tool` or
/// `server` naming approval `a`'s own. Found by review: `{"tool": "refund_partial",
/// "arguments": {…}}` approved the held tool with the new arguments, not what the subscriber
/// asked for; a modification naming anything else cannot be applied (§6.3.2: a reject).
fn foreign_key<'m>(m: &'m Value, a: &ApprovalRecord) -> Option<&'m str> {
    let own = |k: &str, v: &Value| match k {
        "arguments" => true,
        "tool" => v.as_str() == Some(a.call.tool.as_str()),
        "server" => v.as_str() == a.call.server.as_deref(),
        _ => false,
    };
    m.as_object()?
        .iter()
        .find(|(k, v)| !own(k, v))
        .map(|(k, _)| k.as_str())
}

/// What a decision's reason says of a reply's `decided_by` `d` (the subscriber's free text)
/// sent by operator `sender`: ` (decided_by alice)` when it names the sender (`alice` or
/// `user:alice`); otherwise marked as the subscriber's claim beside the sender's name. Found
/// by review: the reason read "(decided_by alice)" on a reply bob sent, so a webhook or Slack
/// reader could take bob's decision for alice's.
fn claimed_by(d: &str, sender: &str) -> String {
    if d == sender || d.strip_prefix("user:") == Some(sender) {
        format!(" (decided_by {d})")
    } else {
        format!(" (the subscriber says decided_by {d}; sent by operator {sender})")
    }
}

/// Decides `a` with `input` as the reply's sender `p` (holding `roles`) through AAEP, the
/// reply token `token` recorded: who decides and how filled in as every door does, the
/// expiries and escalation steps due settled first (found by review: a reply from the
/// operator a due step adds was refused for up to a second, and dropped). `Err("store")` when
/// the store did not answer.
async fn decide_reply(
    st: &AppState,
    a: &ApprovalRecord,
    mut input: DecisionInput,
    (p, token, roles): (&Principal, &str, &[String]),
) -> Result<Result<ApprovalRecord, DecideError>, Ignored> {
    let duties = st.duties_of(&p.name);
    (input.decider_owns, input.decider_aka) = duties.clone();
    let via = assent_store::Via::channel("aaep");
    let who = crate::decide::Decider::new(p, roles, via.clone());
    input.still_stands = Some(crate::decide::still_stands(st, &who, duties));
    input.decider_key = Some(p.vote_key_binding());
    input.via = Some(via);
    input.reply_token = Some(token.to_string());
    let (id, name) = (a.id.clone(), p.name.clone());
    crate::decide::settled_decide(st, id, input, name, roles.to_vec())
        .await
        .map_err(|_| "store")
}

async fn confirmation(
    st: &AppState,
    p: Option<Principal>,
    msg: &Value,
) -> Result<&'static str, Ignored> {
    let find = |s: &Store, t: &str| s.approval_by_reply_token(t);
    let (token, a) = replied_to(st, msg, ReplyTo::Confirmation, find).await?;
    let (p, sub) = reply_sender(st, p, msg, true).await?;
    let roles = p.roles().unwrap_or_default().to_vec();
    if a.status != ApprovalStatus::Pending {
        late(st, a, sub.id, token).await;
        return Err("already resolved (courtesy notice sent)");
    }
    // Until the deadline announced in `timeout_seconds`, escalation included (issue 10 §5).
    if !in_time(msg, a.requested_at, a.announced_deadline()) {
        return Err("reply timestamp is after the confirmation's timeout");
    }
    let accept = msg["decision"] == "accept";
    if accept && !crate::envelopes::aaep::shows_whole(&a) {
        return Err(
            "accept is not in allowed_replies: the confirmation could not show the whole call",
        );
    }
    let input = reply_input(st, msg, &a, &sub.id, (&p.name, &roles)).await?;
    let reply = (&p, token.as_str(), roles.as_slice());
    let mut res = decide_reply(st, &a, input, reply).await?;
    // An accept's `modified_action` was re-gated against the session as it was read; the
    // session took in more before the write (`SESSION_CHANGED`). Found by review: the reply
    // was then dropped, the approval left pending for an approving default to run the call
    // unmodified. Re-gated once against the session as it is now; moved again, the accept is
    // taken as a reject, as one whose modification cannot be applied is (AAEP §6.3.2).
    if matches!(res, Err(DecideError::SessionChanged)) {
        let input = reply_input(st, msg, &a, &sub.id, (&p.name, &roles)).await?;
        res = decide_reply(st, &a, input, reply).await?;
    }
    if matches!(res, Err(DecideError::SessionChanged)) {
        let mut no = DecisionInput::deny(None);
        no.reason = Some(format!(
            "AAEP confirmation.reply on {}: accept with a modified_action the session kept moving under while it was applied; taken as reject (AAEP §6.3.2)",
            sub.id
        ));
        res = decide_reply(st, &a, no, reply).await?;
    }
    match res {
        Ok(rec) if rec.status == ApprovalStatus::Pending => {
            // A vote toward a quorum (issue 14 §1): the confirmation stays open.
            st.decided(&rec);
            Ok("vote counted; the quorum is not met yet")
        }
        Ok(rec) => {
            st.decided(&rec);
            // What was settled, not what was asked: an accept can end rejected (§6.3.2).
            Ok(if rec.status == ApprovalStatus::Approved {
                "confirmation accepted"
            } else {
                "confirmation rejected"
            })
        }
        Err(DecideError::AlreadyDecided(_)) => {
            // Lost the race to another reply or channel: first reply wins (§6.7.1).
            let id = a.id.clone();
            if let Ok(Some(a)) = st.store_call(move |s| s.get_approval(&id)).await {
                late(st, a, sub.id, token).await;
            }
            Err("already resolved (courtesy notice sent)")
        }
        Err(DecideError::AlreadyVoted(_)) => {
            Err("this sender has already voted (a quorum counts each person once)")
        }
        Err(_) => Err("decision refused (approver role, scope or store)"),
    }
}
