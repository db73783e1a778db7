//! Request bodies as the API reads them (issue 10 §1, §2, §12, §14): only from a caller whose
//! bearer key is valid (a request without one gets `401` before its body is parsed; the edge
//! has already read it within `body_read_timeout_seconds` and the body limit, see
//! [`crate::edge`]), and as strict JSON
//! ([`assent_core::json`]: no duplicate keys, no number a double would change).

use crate::AppState;
use crate::auth::authenticate;
use crate::error::ApiError;
use assent_core::json::StrictJsonError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

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
    authenticate(&st.principals, req.headers())?;
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
/// what is wrong and where.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    assent_core::json::parse(bytes).map_err(json_error)
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
