//! `Body<T>`: a `/v1` response written from its `assent-api` type. The type is serialised
//! through a `serde_json::Value` (whose objects keep their keys sorted, as this workspace's
//! serde_json has no `preserve_order`), so a typed body comes out byte for byte as the
//! `json!` literal it replaces did. Kit: it knows no route, no store and no policy.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

/// A response body of an `assent-api` type `T`, answered `200 OK` (pair it with a status for
/// another one: `(StatusCode::ACCEPTED, Body(x))`).
pub struct Body<T>(pub T);

/// `T` as a JSON value with its object keys sorted (the wire form of every `/v1` body).
/// Serialising an `assent-api` type cannot fail (no map with non-string keys); should it ever,
/// the value is `null` and the failure is logged.
pub fn to_value<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot serialise a response body");
        Value::Null
    })
}

impl<T: Serialize> IntoResponse for Body<T> {
    fn into_response(self) -> Response {
        Json(to_value(&self.0)).into_response()
    }
}

/// `(status, body)`: an `assent-api` body answered with `status`.
pub fn with_status<T: Serialize>(status: StatusCode, t: T) -> Response {
    (status, Body(t)).into_response()
}
