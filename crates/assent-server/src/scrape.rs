//! `GET /metrics` (issue 15 §2): the OpenMetrics text exposition
//! (`application/openmetrics-text; version=1.0.0`, which Prometheus reads) of [`crate::metrics`], for an operator key or the scrape key in
//! `metrics_key_env` (which reads nothing else); `401` without a known key, `403` for an
//! agent's or executor's, with the API's JSON error body. The scrape key is held to an
//! address's failed-authentication lock-out as a principal's key is, passing it where it
//! scraped from before (`crate::edge::throttle`).

use crate::auth::{bearer_key, principal_for_key};
use crate::config::PrincipalKind;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// Whether the request may read the metrics: an operator's key, or the scrape key
/// (`metrics_key_env`, compared by SHA-256 in constant time). `401` without a known key,
/// `403` for an agent's or executor's.
fn may_read(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let key = bearer_key(headers).ok_or_else(ApiError::unauthenticated)?;
    if is_scrape_key(st, key) {
        return Ok(());
    }
    let all = st.principals();
    let p = principal_for_key(&all, key).ok_or_else(ApiError::unauthenticated)?;
    match p.kind {
        PrincipalKind::Operator { .. } => Ok(()),
        _ => Err(ApiError::forbidden(
            "the metrics need an operator key or the scrape key (metrics_key_env)",
        )),
    }
}

/// Whether `key` is the scrape key of `metrics_key_env`.
pub fn is_scrape_key(st: &AppState, key: &str) -> bool {
    use sha2::{Digest, Sha256};
    let Some(want) = &st.metrics_key_sha256 else {
        return false;
    };
    let got: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    bool::from(got.ct_eq(want.as_ref()))
}

/// `GET /metrics`: the text exposition. `503` when the store cannot be read for the pending
/// counts.
#[utoipa::path(get, path = "/metrics", tag = "around",
    description = "Prometheus metrics in the OpenMetrics text format (docs/operations.md). An operator key, or the scrape key of `metrics_key_env` (which reads nothing else); 403 for an agent's or executor's key.",
    responses((status = 200, description = "The OpenMetrics text exposition", content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String)),
    security(("operator_key" = [])))]
pub async fn scrape(State(st): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    may_read(&st, &headers)?;
    // A read: ahead of the writes queued with it, never waiting for their commit.
    let pending = st.store_read(|s| s.pending_by_tier()).await?;
    let body = st.metrics.render(&pending, st.waiters.waiting());
    let mut r = body.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok(r)
}
