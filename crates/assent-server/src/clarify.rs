//! Clarifications (AAEP §4.4.2, §6.5): an agent asks a question with
//! `POST /v1/clarifications` and waits with `GET /v1/clarifications/{id}?wait=S`; subscribers
//! get `aaep:agent.awaiting.clarification`; operators answer with `clarification.reply` or
//! `POST /v1/clarifications/{id}/answer` (`assent answer ID VALUE`). Replies are validated by
//! kind (§6.5.5): a reply of the wrong kind counts as no reply. Unanswered ones expire.
//! Routes are mounted by [`crate::router`](mod@crate::router).

use crate::agent_json::{AgentJson, AgentJsonOneRefusal};
use crate::approvals::LIST_PAGE_BYTES;
use crate::body::{self, Body, to_value};
use crate::calls::check_name;
use crate::config::Principal;
use crate::error::ApiError;
use crate::extract::Polled;
use crate::extract::{AnswerClarifications, ApiJson, AskQuestions};
use crate::extract::{ListClarifications, Operator};
use crate::replies::{Ignored, ReplyTo, in_time, replied_to, reply_sender};
use crate::state::{AppState, now_ms};
use crate::waiters::{Look, clarification_key};
use assent_api::clarify::{AnswerRequest, AskRequest, ClarificationList};
use assent_core::clarification::{Clarification, ClarificationStatus, RESPONSE_KINDS};
use assent_store::{AskRefused, Store};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use std::collections::HashMap;

/// `POST /v1/clarifications` (the agent itself): asks a question (`202` with it).
#[utoipa::path(post, path = "/v1/clarifications", tag = "propose",
    request_body = assent_api::clarify::AskRequest,
    responses((status = 202, description = "The question, pending", body = assent_api::schema::Clarification)),
    security(("agent_key" = [])))]
pub(crate) async fn ask(
    State(st): State<AppState>,
    AgentJson(_, b): AgentJsonOneRefusal<AskQuestions, AskRequest>,
) -> Result<Response, ApiError> {
    // Found by review: the session id skipped the checks every other route applies (a
    // 100 KB id with terminal escapes was stored, and `POST /v1/sessions/{id}/cancel` could
    // then not name it), and `context` had no bound of its own.
    check_name("session_id", &b.session_id)?;
    if b.question.is_empty() || b.question.len() > 16_384 {
        return Err(ApiError::bad_request("question must be 1 to 16384 bytes"));
    }
    if b.context.as_ref().is_some_and(|c| c.len() > 16_384) {
        return Err(ApiError::bad_request("context must be at most 16384 bytes"));
    }
    if b.accepted_response_kinds.is_empty()
        || b.accepted_response_kinds.len() > 4
        || b.accepted_response_kinds
            .iter()
            .any(|k| !RESPONSE_KINDS.contains(&k.as_str()))
    {
        return Err(ApiError::bad_request(
            "accepted_response_kinds: 1 to 4 of freetext, yes_no, multiple_choice, numeric",
        ));
    }
    let mc = b
        .accepted_response_kinds
        .iter()
        .any(|k| k == "multiple_choice");
    let choices_ok = b.choices.iter().all(|c| {
        c.as_object().is_some_and(|o| o.len() == 2)
            && c["value"]
                .as_str()
                .is_some_and(|v| !v.is_empty() && v.len() <= 256)
            && c["label"]
                .as_str()
                .is_some_and(|v| !v.is_empty() && v.len() <= 1024)
    });
    if !choices_ok || (mc && !(2..=32).contains(&b.choices.len())) || (!mc && !b.choices.is_empty())
    {
        return Err(ApiError::bad_request(
            "choices: 2 to 32 {value, label} objects, given only with multiple_choice",
        ));
    }
    let timeout = b.timeout_seconds.unwrap_or(300);
    if !(1..=86_400).contains(&timeout) {
        return Err(ApiError::bad_request("timeout_seconds must be 1 to 86400"));
    }
    let max_pending = st.settings.max_pending_per_agent;
    let agent = b.agent.clone();
    let c = st.store_call(move |s| {
        let now = now_ms();
        s.create_clarification(
            &b.agent,
            &b.session_id,
            &b.question,
            &b.accepted_response_kinds,
            &b.choices,
            b.context.as_deref(),
            now,
            now + timeout as i64 * 1000,
            max_pending,
        )
    })
    .await?
    .map_err(|refused| match refused {
        AskRefused::TooMany(limit) => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TOO_MANY_PENDING",
            format!(
                "agent `{agent}` already has {limit} approvals and questions waiting (max_pending_per_agent); wait for answers or cancel some"
            ),
        ),
        AskRefused::SessionCancelled { at, by } => {
            ApiError::session_cancelled(&agent, (at, &by), "asks no question")
        }
    })?;
    st.changed();
    Ok(body::with_status(StatusCode::ACCEPTED, c))
}

/// `GET /v1/clarifications[?status=S]` (operators): newest first, at most
/// [`assent_store::MAX_CLARIFICATIONS_LISTED`] and, unless `status=pending`, about
/// [`LIST_PAGE_BYTES`] of questions, `truncated` when more were left off. `400`
/// naming the parameter for an unknown one or an unknown status (found by review:
/// `?status=answerd` answered an empty list, and the list was cut at 500 without a word).
#[utoipa::path(get, path = "/v1/clarifications", operation_id = "list_clarifications", tag = "propose",
    params(("status" = Option<String>, Query, pattern = "^(pending|answered|expired|cancelled|all)$", description = "`pending`, `answered`, `expired`, `cancelled` or `all` (the default)")),
    responses((status = 200, description = "OK", body = assent_api::clarify::ClarificationList)),
    security(("operator_key" = [])))]
pub(crate) async fn list(
    State(st): State<AppState>,
    _op: Operator<ListClarifications>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Body<ClarificationList>, ApiError> {
    crate::extract::only_keys(&q, &["status"])?;
    let status = match q.get("status").map(String::as_str) {
        None | Some("all") => None,
        Some(s @ ("pending" | "answered" | "expired" | "cancelled")) => Some(s.to_string()),
        Some(s) => {
            return Err(ApiError::bad_request(format!(
                "status `{s}` is not one of pending, answered, expired, cancelled, all"
            )));
        }
    };
    st.store_call(|s| s.expire_clarifications(now_ms())).await?;
    // Beside the writer, by an index, and past the pending ones at most a page of bytes
    // (found by review: the whole history was sorted on the writer, and 500 questions of
    // 75 KB answered at once). The pending ones, each agent's capped by
    // `max_pending_per_agent`, are all listed (found by review of that bound: one agent's 14
    // large questions hid every other agent's from the list).
    let bytes = match status.as_deref() {
        Some("pending") => usize::MAX,
        _ => LIST_PAGE_BYTES,
    };
    let (clarifications, truncated) = st
        .store_call_apart(move |s| s.list_clarifications(status.as_deref(), bytes))
        .await?;
    Ok(Body(ClarificationList {
        clarifications,
        truncated,
    }))
}

/// `GET /v1/clarifications/{id}[?wait=S]` (its agent or an operator), long-polled.
#[utoipa::path(get, path = "/v1/clarifications/{id}", operation_id = "read_clarification", tag = "propose",
    params(("id" = String, Path, description = "The item's id"), ("wait" = Option<u64>, Query, maximum = 60, description = "Long-poll: seconds to wait for a change (0 to 60)")),
    responses((status = 200, description = "OK", body = assent_api::schema::Clarification)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn read(State(st): State<AppState>, r: Polled) -> Result<Json<Value>, ApiError> {
    crate::extract::only_keys(&r.query, &["wait"])?;
    let (st, id, p, wait) = (&st, &r.id, &r.principal, r.wait);
    let look = || async move {
        let id2 = id.clone();
        let (expired, c) = st
            .store_call(move |s| {
                let c = s.clarification(&id2, false)?;
                let overdue = c.as_ref().is_some_and(|c| {
                    c.status == ClarificationStatus::Pending && c.expires_at <= now_ms()
                });
                if overdue {
                    return Ok((
                        s.expire_clarifications(now_ms())?,
                        s.clarification(&id2, false)?,
                    ));
                }
                Ok((0, c))
            })
            .await?;
        if expired > 0 {
            st.changed();
        }
        let c = c
            .filter(|c| p.sees(&c.agent))
            .ok_or_else(|| ApiError::not_found(format!("no clarification `{id}`")))?;
        if c.status != ClarificationStatus::Pending {
            return Ok(Look::Done(to_value(&c)));
        }
        let until = crate::waiters::recheck_after(c.expires_at, now_ms());
        Ok(Look::Pending(to_value(&c), until))
    };
    let body = st
        .waiters
        .long_poll(&clarification_key(id), &p.name, wait, look)
        .await?;
    Ok(Json(body))
}

/// `POST /v1/clarifications/{id}/answer` (operator): `{"response": VALUE}`; a response of the
/// wrong kind is `422 WRONG_KIND`; `409 ALREADY_ANSWERED` when it is no longer pending.
#[utoipa::path(post, path = "/v1/clarifications/{id}/answer", tag = "propose",
    params(("id" = String, Path, description = "The item's id")),
    request_body = assent_api::clarify::AnswerRequest,
    responses((status = 200, description = "OK", body = assent_api::schema::Clarification)),
    security(("operator_key" = [])))]
pub(crate) async fn answer(
    State(st): State<AppState>,
    op: Operator<AnswerClarifications>,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<AnswerRequest>,
) -> Result<Body<Clarification>, ApiError> {
    let c = answer_as(&st, op.principal.name, id, b.response).await?;
    Ok(Body(c))
}

/// Operator `name` answers clarification `id` with `response` (the REST API and the
/// dashboard, which have checked that the caller is an operator). Errors: 404,
/// 422 `WRONG_KIND`, 409 `ALREADY_ANSWERED`.
pub(crate) async fn answer_as(
    st: &AppState,
    name: String,
    id: String,
    response: Value,
) -> Result<Clarification, ApiError> {
    let id2 = id.clone();
    let c = st
        .store_call(move |s| s.clarification(&id2, false))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no clarification `{id}`")))?;
    c.check_response(&response)
        .map_err(|m| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "WRONG_KIND", m))?;
    let res = st
        .store_call(move |s| s.answer_clarification(&id, &response, &name, now_ms()))
        .await?;
    match res {
        Some(c) => {
            st.waiters.wake(&clarification_key(&c.id));
            st.changed();
            Ok(c)
        }
        // Refused: said as it stands now, read again (found by review: the status read before
        // the update said "pending" to an operator another had beaten, or to one answering
        // past the deadline before the sweep marked it).
        None => {
            let id = c.id.clone();
            let now = st
                .store_call(move |s| s.clarification(&id, false))
                .await?
                .unwrap_or(c);
            let status = match now.status {
                ClarificationStatus::Pending if now.expires_at <= now_ms() => "expired",
                s => s.as_str(),
            };
            Err(ApiError::new(
                StatusCode::CONFLICT,
                "ALREADY_ANSWERED",
                format!("clarification is {status}"),
            ))
        }
    }
}

/// A `clarification.reply` (§6.5): the checks of §6.3.4 plus the response kind (§6.5.5).
pub(crate) async fn reply(
    st: &AppState,
    p: Option<Principal>,
    msg: &Value,
) -> Result<&'static str, Ignored> {
    let find = |s: &Store, t: &str| s.clarification(t, true);
    let (_, c) = replied_to(st, msg, ReplyTo::Clarification, find).await?;
    let (p, _sub) = reply_sender(st, p, msg, false).await?;
    if c.status != ClarificationStatus::Pending {
        return Err("already resolved");
    }
    if !in_time(msg, c.requested_at, c.expires_at) {
        return Err("reply timestamp is after the clarification's timeout");
    }
    c.check_response(&msg["response"])
        .map_err(|_| "response of the wrong kind (treated as no reply)")?;
    let response = msg["response"].clone();
    let id = c.id.clone();
    let done = st
        .store_call(move |s| s.answer_clarification(&id, &response, &p.name, now_ms()))
        .await
        .map_err(|_| "store")?;
    st.waiters.wake(&clarification_key(&c.id));
    st.changed();
    done.map(|_| "clarification answered")
        .ok_or("already resolved")
}
