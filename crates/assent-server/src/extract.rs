//! The server's extractors, the kit at the bottom of every handler: who calls ([`Caller`],
//! [`Operator`], [`Agent`]: authorisation written once, as `FromRequestParts`), request bodies
//! as the API reads them (issue 10 §1, §2, §12, §14: only from a caller whose bearer key is
//! valid, so a request without one gets `401` before its body is parsed; the edge has already
//! read it within `body_read_timeout_seconds` and the body limit, see [`crate::edge`]; and as
//! strict JSON, [`assent_core::json`]: no duplicate keys, no number a double would change),
//! and the `?wait=` query of a long poll. It mounts no route and imports no handler module.

use crate::auth::authenticate;
use crate::calls::{check_reason, refuse_nul_in_json};
use crate::config::Principal;
use crate::error::ApiError;
use crate::state::AppState;
use assent_api::approvals::CancelRequest;
use assent_core::json::StrictJsonError;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::marker::PhantomData;

/// Longest `?wait=` long-poll, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// The `wait` query parameter of a long poll: whole seconds, 0 to [`MAX_WAIT_SECONDS`]; 0 when
/// absent; `400` naming the bound when it is not a whole number, and the value too when it is
/// one above the bound. A wait above it was cut to 60 s, so `?wait=600` silently became a
/// poll every minute; the bound is in the OpenAPI document (`maximum: 60`) and every client
/// of ours stays within it.
pub(crate) fn wait_seconds(q: &HashMap<String, String>) -> Result<u64, ApiError> {
    let Some(w) = q.get("wait") else {
        return Ok(0);
    };
    let must = format!("wait must be a whole number of seconds from 0 to {MAX_WAIT_SECONDS}");
    match w.parse::<u64>() {
        Ok(n) if n <= MAX_WAIT_SECONDS => Ok(n),
        Ok(n) => Err(ApiError::bad_request(format!("{must}, not {n}"))),
        Err(_) => Err(ApiError::bad_request(must)),
    }
}

/// `Ok` when every parameter of query `q` is one of `allowed`; else `400` naming the first
/// other one and the expected ones. Found by review: reads that ignored unknown parameters
/// turned a misspelt `?wiat=30` into an answer at once (a busy poll) and `?subscriptionid=`
/// into a subscription of its own.
pub(crate) fn only_keys(q: &HashMap<String, String>, allowed: &[&str]) -> Result<(), ApiError> {
    match q.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(ApiError::bad_request(format!(
            "unknown query parameter `{k}` (expected {})",
            allowed.join(", ")
        ))),
    }
}

/// A newest-first page of a list (`?limit=N&before_KEY=K`): `limit` 1–1000 (default 100) and
/// the key below which the page starts; `400` naming the parameter when either is not a whole
/// number, when `limit` is outside 1–1000 (found by review: it was clamped, so `limit=0`
/// answered a page of one), or for any other parameter.
pub(crate) fn page(
    q: &HashMap<String, String>,
    before: &'static str,
) -> Result<(Option<i64>, i64), ApiError> {
    only_keys(q, &["limit", before])?;
    let num = |k: &str| -> Result<Option<i64>, ApiError> {
        q.get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| ApiError::bad_request(format!("{k} must be an integer")))
            })
            .transpose()
    };
    let limit = num("limit")?.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be from 1 to 1000, not {limit}"
        )));
    }
    Ok((num(before)?, limit))
}

/// The authenticated caller, any principal (agent or operator), from the
/// `Authorization: Bearer KEY` header; `401 UNAUTHENTICATED` without a known key.
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        authenticate(&st.principals(), &parts.headers).map(|p| Caller(p.clone()))
    }
}

/// A read of one item that may long-poll, `GET /v1/…/{id}[?wait=S&…]` by any principal: the
/// caller ([`Caller`]: `401` first), the path's id, the query, and its `wait` in whole seconds
/// ([`wait_seconds`]: `400` when not a whole number from 0 to 60). A path or query that cannot
/// be read is a `400` with a JSON body naming it.
pub struct Polled {
    /// The authenticated caller.
    pub principal: Principal,
    /// The `{id}` path segment, percent-decoded.
    pub id: String,
    /// Every query parameter (e.g. `format`).
    pub query: HashMap<String, String>,
    /// How long to wait for a change, 0 to [`MAX_WAIT_SECONDS`].
    pub wait: u64,
}

impl FromRequestParts<AppState> for Polled {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        let Caller(principal) = Caller::from_request_parts(parts, st).await?;
        let Path(id) = Path::<String>::from_request_parts(parts, st)
            .await
            .map_err(|e| ApiError::bad_request(format!("path: {}", e.body_text())))?;
        let Query(query) = Query::<HashMap<String, String>>::from_request_parts(parts, st)
            .await
            .map_err(|e| ApiError::bad_request(format!("query: {}", e.body_text())))?;
        let wait = wait_seconds(&query)?;
        Ok(Polled {
            principal,
            id,
            query,
            wait,
        })
    }
}

/// A request to withdraw something, `POST /v1/{approvals|sessions|plans}/{id}/cancel` by any
/// principal: the caller ([`Caller`]: `401` first), the path's id, and the optional body
/// `{"reason"?}` (strict JSON, [`OptionalJson`]; a reason over 4096 bytes is `400`).
pub struct Cancelling {
    /// The authenticated caller.
    pub principal: Principal,
    /// The `{id}` path segment, percent-decoded.
    pub id: String,
    /// Why, if given.
    pub reason: Option<String>,
}

impl FromRequest<AppState> for Cancelling {
    type Rejection = ApiError;
    async fn from_request(req: Request, st: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let Caller(principal) = Caller::from_request_parts(&mut parts, st).await?;
        let Path(id) = Path::<String>::from_request_parts(&mut parts, st)
            .await
            .map_err(|e| ApiError::bad_request(format!("path: {}", e.body_text())))?;
        let req = Request::from_parts(parts, body);
        let OptionalJson(CancelRequest { reason }) = OptionalJson::from_request(req, st).await?;
        check_reason(&reason)?;
        Ok(Cancelling {
            principal,
            id,
            reason,
        })
    }
}

/// What a route answers a principal of the wrong kind: the message of its `403 FORBIDDEN`
/// (see the marker types below, one per route family).
pub trait Refusal {
    /// The `403 FORBIDDEN` message.
    const MESSAGE: &'static str;
}

/// An operator principal (one with roles): `401` without a known key, `403 FORBIDDEN` with
/// `R::MESSAGE` for an agent key.
pub struct Operator<R> {
    /// The operator.
    pub principal: Principal,
    refusal: PhantomData<R>,
}

impl<R> Operator<R> {
    /// The operator's name (the `decided_by` of what they do).
    pub fn name(&self) -> &str {
        &self.principal.name
    }
    /// The operator's roles (those an approval's approver roles are matched against).
    pub fn roles(&self) -> &[String] {
        self.principal.roles().unwrap_or_default()
    }
}

impl<R: Refusal> FromRequestParts<AppState> for Operator<R> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        let principals = st.principals();
        let p = authenticate(&principals, &parts.headers)?;
        p.roles().ok_or_else(|| ApiError::forbidden(R::MESSAGE))?;
        Ok(Operator {
            principal: p.clone(),
            refusal: PhantomData,
        })
    }
}

/// An agent principal (a key bound to one agent id): `401` without a known key,
/// `403 FORBIDDEN` with `R::MESSAGE` for an operator key. Whether it acts for the agent a
/// body or path names is [`Agent::acts_for`] or [`Agent::is`].
pub struct Agent<R> {
    /// The agent's principal.
    pub principal: Principal,
    /// The agent id the key is bound to.
    pub agent_id: String,
    refusal: PhantomData<R>,
}

impl<R: Refusal> Agent<R> {
    /// `Ok` when the key acts for `agent`; else `403 FORBIDDEN`
    /// "this key acts for agent `A`, not `agent`".
    pub fn acts_for(&self, agent: &str) -> Result<(), ApiError> {
        if self.agent_id == agent {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "this key acts for agent `{}`, not `{agent}`",
            self.agent_id
        )))
    }
    /// `Ok` when the key acts for `agent`; else `403 FORBIDDEN` with `R::MESSAGE` (the routes
    /// that give one message for both refusals).
    pub fn is(&self, agent: &str) -> Result<(), ApiError> {
        if self.agent_id == agent {
            return Ok(());
        }
        Err(ApiError::forbidden(R::MESSAGE))
    }
}

impl<R: Refusal> FromRequestParts<AppState> for Agent<R> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        let principals = st.principals();
        let p = authenticate(&principals, &parts.headers)?;
        let agent_id = p
            .agent_id()
            .ok_or_else(|| ApiError::forbidden(R::MESSAGE))?
            .to_string();
        Ok(Agent {
            principal: p.clone(),
            agent_id,
            refusal: PhantomData,
        })
    }
}

macro_rules! refusals {
    ($($(#[$m:meta])* $name:ident = $msg:literal;)*) => {$(
        $(#[$m])*
        pub struct $name;
        impl Refusal for $name {
            const MESSAGE: &'static str = $msg;
        }
    )*};
}

refusals! {
    /// `POST /v1/tool-calls` from an operator.
    ProposeCalls = "only an agent key may propose tool calls";
    /// Agent routes that name their agent (delegations, plans, confirms).
    AgentItself = "only the agent itself may do this";
    /// `POST /v1/tool-results` from anyone but the agent.
    ReportResults = "only the agent itself may report its tool results";
    /// `POST /v1/clarifications` from anyone but the agent.
    AskQuestions = "only the agent itself may ask its clarification questions";
    /// `POST /v1/tools/check` from anyone but the agent.
    ReportTools = "only the agent itself may report its upstream's tools";
    /// `POST /v1/tokens/redeem` from an operator.
    RedeemTokens = "only an agent key may redeem tokens";
    /// `POST /v1/approvals/{id}/user-decision` from an operator.
    RelayUserDecision = "only the agent that asked may relay its user's decision";
    /// `GET /v1/approvals` from an agent.
    ListApprovals = "only an operator may list approvals";
    /// Decisions (`/decision`, `/decisions`) from an agent.
    DecideApprovals = "only an operator may decide approvals";
    /// `GET /v1/learning-samples` from an agent.
    ExportLearning = "only an operator may export learning samples";
    /// `GET /v1/grants` from an agent.
    ListGrants = "only an operator may list grants";
    /// `DELETE /v1/grants/{id}` from an agent.
    RevokeGrants = "only an operator may revoke grants";
    /// `GET /v1/clarifications` from an agent.
    ListClarifications = "only an operator may list clarifications";
    /// `POST /v1/clarifications/{id}/answer` from an agent.
    AnswerClarifications = "only an operator may answer clarifications";
    /// `GET /v1/tools/reviews` from an agent.
    ListToolReviews = "only an operator may list tool reviews";
    /// Tool review accept/reject from an agent.
    ReviewTools = "only an operator may review tools";
    /// `GET /v1/tools/pins` from an agent.
    ListToolPins = "only an operator may list tool pins";
    /// `GET /v1/webhooks/dead-letters` from an agent.
    ReadDeadLetters = "only an operator may read webhook dead letters";
    /// `GET /v1/audit/checkpoints` from an agent.
    ReadCheckpoints = "only an operator may read audit checkpoints";
    /// `POST /v1/policies/replay` from an agent.
    ReplayPolicies = "only an operator may replay policies";
    /// AAEP subscriptions and event streams (Appendix B.1) from an agent.
    AaepSubscriber = "AAEP subscribers authenticate as operators";
}

/// A JSON body from an authenticated caller, parsed strictly into `T`. Rejections are JSON
/// [`ApiError`]s: `401 UNAUTHENTICATED` (checked first), `408 REQUEST_TIMEOUT`,
/// `413 PAYLOAD_TOO_LARGE`, `400 DUPLICATE_KEY` / `INEXACT_NUMBER` / `TOO_DEEP` naming the
/// JSON pointer, and `400 BAD_REQUEST` with serde's message (field, line, column).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, st: &AppState) -> Result<Self, Self::Rejection> {
        let bytes = authenticated_body(req, st).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::bad_request(
                "request body is empty; expected a JSON object",
            ));
        }
        parse_body(&bytes).map(ApiJson)
    }
}

/// [`ApiJson`] for a body that may be left out: an empty body is `T::default()`.
pub struct OptionalJson<T>(pub T);

impl<T: DeserializeOwned + Default> FromRequest<AppState> for OptionalJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, st: &AppState) -> Result<Self, Self::Rejection> {
        let bytes = authenticated_body(req, st).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        parse_body(&bytes).map(OptionalJson)
    }
}

/// Checks the bearer key, then takes the body (already buffered by the edge).
async fn authenticated_body(req: Request, st: &AppState) -> Result<Bytes, ApiError> {
    authenticate(&st.principals(), req.headers())?;
    read_body(req, st).await
}

/// Takes a request body (the edge read it within the body-read timeout; the router's body
/// limit still applies when the router is used without the edge).
pub(crate) async fn read_body(req: Request, st: &AppState) -> Result<Bytes, ApiError> {
    match Bytes::from_request(req, st).await {
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(too_large()),
        Err(e) => Err(ApiError::bad_request(format!("cannot read body: {e}"))),
        Ok(b) => Ok(b),
    }
}

/// `413 PAYLOAD_TOO_LARGE`: the body is over the router's limit.
pub(crate) fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        "the request body is larger than this gateway accepts (max_arguments_bytes plus 64 KiB)",
    )
}

/// Parses a JSON text strictly into `T` ([`assent_core::json::parse`]), as a 400 that names
/// what is wrong and where; a U+0000 in any key or string but a call's payload is a 400
/// naming the member ([`refuse_nul_in_json`]).
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let parsed = assent_core::json::parse(bytes).map_err(json_error)?;
    refuse_nul_in_json(bytes)?;
    Ok(parsed)
}

/// The API error for a refused JSON text: `400` with the error's own code
/// (`DUPLICATE_KEY`, `INEXACT_NUMBER`, `TOO_DEEP`), or `BAD_REQUEST` for a syntax or shape
/// error.
pub fn json_error(e: StrictJsonError) -> ApiError {
    match e {
        StrictJsonError::Syntax(m) => ApiError::bad_request(format!("invalid JSON body: {m}")),
        e => ApiError::new(StatusCode::BAD_REQUEST, e.code(), e.to_string()),
    }
}
