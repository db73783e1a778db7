//! `ApiError`: the one place HTTP status codes and the `{"code", "message"}` body are chosen.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

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
    /// Extra fields merged into the body.
    pub extra: Option<Value>,
}

impl ApiError {
    /// An error with any status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            extra: None,
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
    /// Adds the fields of the object `extra` to the body.
    pub fn with(mut self, extra: Value) -> Self {
        self.extra = Some(extra);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code, "message": self.message});
        if let (Some(Value::Object(extra)), Value::Object(b)) = (self.extra, &mut body) {
            for (k, v) in extra {
                b.entry(k).or_insert(v);
            }
        }
        (self.status, Json(body)).into_response()
    }
}
