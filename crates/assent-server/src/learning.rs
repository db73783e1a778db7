//! `GET /v1/learning-samples[?limit=N&after=CURSOR]` (operators): the settled approvals as MPLP
//! learning samples (seed 001 §5), one JSON object per line (`application/x-ndjson`), one page
//! at a time, oldest decision first. The samples and their pages are built by the store
//! (`assent_store::learning`); the route is mounted by [`crate::router`](mod@crate::router).
//!
//! Paging (keyset): `limit` samples at most (default
//! [`LEARNING_SAMPLES_DEFAULT_LIMIT`], 1 to [`LEARNING_SAMPLES_MAX_LIMIT`]), and about
//! [`PAGE_BYTES`] of text whatever the limit; when more may follow, the answer carries
//! `Link: </v1/learning-samples?limit=N&after=CURSOR>; rel="next"` (RFC 8288) with an opaque
//! cursor, and the last page has none. Found by review: the export answered the whole history
//! in one body, built in memory beside a list of every sample, so an agent that proposed large
//! calls and cancelled them in a loop could make one export exhaust the gateway's memory.

use crate::error::ApiError;
use crate::extract::{ExportLearning, Operator};
use crate::state::AppState;
use assent_api::audit::{LEARNING_SAMPLES_DEFAULT_LIMIT, LEARNING_SAMPLES_MAX_LIMIT};
use assent_store::learning::{PAGE_BYTES, SampleCursor};
use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;

/// One learning export at a time in this process (operators asking at once queue).
static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// The query of `GET /v1/learning-samples`: the cursor to start after (`None`: the first
/// page) and the page's `limit`. `400 BAD_REQUEST` naming the parameter for a `limit` that is
/// not a whole number from 1 to [`LEARNING_SAMPLES_MAX_LIMIT`], an `after` that is not a
/// cursor this gateway gave, or any other parameter.
fn page_query(q: &HashMap<String, String>) -> Result<(Option<SampleCursor>, u32), ApiError> {
    crate::extract::only_keys(q, &["limit", "after"])?;
    let limit = match q.get("limit") {
        None => LEARNING_SAMPLES_DEFAULT_LIMIT,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=LEARNING_SAMPLES_MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "limit must be an integer from 1 to {LEARNING_SAMPLES_MAX_LIMIT}"
                ))
            })?,
    };
    let after = match q.get("after") {
        None => None,
        Some(a) => Some(SampleCursor::parse(a).ok_or_else(|| {
            ApiError::bad_request(
                "after must be the cursor of a previous page's Link rel=\"next\" (as given)",
            )
        })?),
    };
    Ok((after, limit))
}

/// `GET /v1/learning-samples[?limit=N&after=CURSOR]` (operators): `200` NDJSON, one sample a
/// line, with a `Link` `rel="next"` header while more may follow (see the module
/// documentation); `400` for a bad `limit` or `after` ([`page_query`]).
#[utoipa::path(get, path = "/v1/learning-samples", tag = "around",
    params(("limit" = Option<u32>, Query, minimum = 1, maximum = 10000, description = "At most this many samples (default 1000); a page also stops after about 8 MiB"),
           ("after" = Option<String>, Query, description = "The opaque cursor of the next page, from the previous answer's `Link` header (`rel=\"next\"`)")),
    responses((status = 200, description = "MPLP learning samples, one JSON object a line, oldest decision first", content_type = "application/x-ndjson", body = String,
        headers(("Link" = String, description = "`</v1/learning-samples?limit=N&after=CURSOR>; rel=\"next\"` while more may follow; absent on the last page")))),
    security(("operator_key" = [])))]
pub(crate) async fn learning_samples(
    State(st): State<AppState>,
    _op: Operator<ExportLearning>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let (after, limit) = page_query(&q)?;
    // One export at a time in this process, for as long as its reading runs (the permit is
    // moved into the blocking work: a client that hangs up does not free it early). Found by
    // review: exports read beside the writer ran without bound side by side, each holding a
    // read snapshot the WAL could not checkpoint past.
    let permit = ONE_AT_A_TIME
        .acquire()
        .await
        .map_err(ApiError::unavailable)?;
    let page = st
        .store_call_apart(move |s| {
            let _permit = permit;
            s.learning_samples(after.as_ref(), limit)
        })
        .await?;
    let mut body = Vec::with_capacity(PAGE_BYTES.min(1 << 20));
    for v in &page.samples {
        serde_json::to_writer(&mut body, v).map_err(ApiError::unavailable)?;
        body.push(b'\n');
    }
    drop(page.samples);
    let mut resp = ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response();
    if let Some(next) = page.next {
        // The cursor's text is digits, `-`, `.` and hex: a valid header value and URL as is.
        let link = format!("</v1/learning-samples?limit={limit}&after={next}>; rel=\"next\"");
        let value = HeaderValue::from_str(&link).map_err(ApiError::unavailable)?;
        resp.headers_mut().insert(header::LINK, value);
    }
    Ok(resp)
}
