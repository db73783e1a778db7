//! `GET /v1/learning-samples` (operators): every settled approval as an MPLP learning sample
//! (seed 001 §5), one JSON object per line (`application/x-ndjson`). The samples are built by
//! the store; the route is mounted by [`crate::router`](mod@crate::router).

use crate::error::ApiError;
use crate::extract::{ExportLearning, Operator};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

/// One learning export at a time in this process (operators asking at once queue).
static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// `GET /v1/learning-samples` (operators): `200` NDJSON, one sample per line.
#[utoipa::path(get, path = "/v1/learning-samples", tag = "around",
    responses((status = 200, description = "MPLP learning samples, one JSON object a line", content_type = "application/x-ndjson", body = String)),
    security(("operator_key" = [])))]
pub(crate) async fn learning_samples(
    State(st): State<AppState>,
    _op: Operator<ExportLearning>,
) -> Result<Response, ApiError> {
    // One export at a time in this process, for as long as its reading runs (the permit is
    // moved into the blocking work: a client that hangs up does not free it early). Found by
    // review: exports read beside the writer ran without bound side by side, each holding the
    // whole history twice in memory and a read snapshot the WAL could not checkpoint past.
    let permit = ONE_AT_A_TIME
        .acquire()
        .await
        .map_err(ApiError::unavailable)?;
    let list = st
        .store_call_apart(move |s| {
            let _permit = permit;
            s.learning_samples()
        })
        .await?;
    let mut body = String::new();
    for v in list {
        body.push_str(&v.to_string());
        body.push('\n');
    }
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        body,
    )
        .into_response())
}
