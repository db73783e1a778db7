//! `ApiError`: the one place HTTP status codes and the `{"code", "message"}` body are chosen.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An API error: a status, a stable `code`, a human message and optional extra fields.
/// 5xx errors hide their detail from the client and log it instead.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub extra: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            extra: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }
    pub fn unauthenticated() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "missing or unknown API key (send Authorization: Bearer KEY)",
        )
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "FORBIDDEN", message)
    }
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
