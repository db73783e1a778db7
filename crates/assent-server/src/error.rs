//! `ApiError`: the one place HTTP status codes and the error body are chosen; the body is
//! `assent_api::ApiErrorBody` (`{"code", "message"}` and, for a few codes, `status`,
//! `damaged`, `reasons`, `triggers`).

use crate::body::Body;
use assent_api::ApiErrorBody;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An API error: a status, a stable `code`, a human message and optional extra fields.
/// 5xx errors hide their detail from the client and log it instead.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`TOOL_DENIED`, `ALREADY_DECIDED`, …).
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
    /// The body's extra fields (its `code` and `message` are the ones above).
    pub extra: Box<ApiErrorBody>,
}

impl ApiError {
    /// An error with any status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            extra: Box::new(ApiErrorBody::new(code, "")),
        }
    }
    /// 400 `BAD_REQUEST`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }
    /// 401 `UNAUTHENTICATED`.
    pub fn unauthenticated() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "missing or unknown API key (send Authorization: Bearer KEY)",
        )
    }
    /// 409 `SESSION_CANCELLED` (AAEP §4.1.4): agent `agent`'s session was cancelled by `by` at
    /// `at` (Unix ms), so it `refuses` (what the session does no more, e.g. "runs no call").
    pub fn session_cancelled(agent: &str, (at, by): (i64, &str), refuses: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            assent_api::error::SESSION_CANCELLED,
            format!(
                "this session of agent `{agent}` was cancelled by `{by}` at {}: it {refuses} any more; start a new session",
                crate::formats::rfc3339(at)
            ),
        )
    }
    /// 403 `FORBIDDEN`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "FORBIDDEN", message)
    }
    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }
    /// The store could not be read or written: the caller must fail closed.
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "store unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "STORE_UNAVAILABLE",
            "the approval store is unavailable; nothing was allowed",
        )
    }
    /// `ALREADY_DECIDED`'s `status`: the status the approval already has.
    pub fn with_status(mut self, status: assent_core::ApprovalStatus) -> Self {
        self.extra.status = Some(status);
        self
    }
    /// `APPROVAL_DAMAGED`'s `damaged`: the stored columns that cannot be read.
    pub fn with_damaged(mut self, columns: Vec<String>) -> Self {
        self.extra.damaged = Some(columns);
        self
    }
    /// An edit refused by the gatekeeper: the edited call's `reasons` and `triggers`.
    pub fn with_verdict(mut self, reasons: &[assent_core::Reason], triggers: &[String]) -> Self {
        self.extra.reasons = Some(reasons.to_vec());
        self.extra.triggers = Some(triggers.to_vec());
        self
    }
    /// The error body: `code`, `message` and the extra fields set.
    pub fn body(&self) -> ApiErrorBody {
        ApiErrorBody {
            code: self.code.to_string(),
            message: self.message.clone(),
            ..(*self.extra).clone()
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Body(self.body())).into_response()
    }
}
