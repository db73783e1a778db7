//! `GET /v1/insights` (issue 16 §4): the store's insights ([`assent_store::insights`]) over a
//! range given as RFC 3339 `since` and `until` (default: the 30 days before now; at most 366
//! days), as [`assent_api::insights::Insights`]. The range parsing and the wire form are
//! shared with the dashboard's `/ui/insights`.

use crate::body::Body;
use crate::error::ApiError;
use crate::extract::{Operator, Refusal};
use crate::formats::rfc3339;
use crate::state::{AppState, now_ms};
use assent_api::insights as api;
use assent_store::insights::{self as store, DAY_MS, LIST_CAP, MAX_RANGE_MS, RUBBER_STAMP_MS};
use axum::extract::{RawQuery, State};

/// `GET /v1/insights` from an agent key: `403` with this message.
pub struct ReadInsights;

impl Refusal for ReadInsights {
    const MESSAGE: &'static str = "only an operator may read insights";
}

/// The range when none is given: the last 30 days.
pub const DEFAULT_RANGE_MS: i64 = 30 * DAY_MS;

/// The longest query string read (two RFC 3339 stamps fit many times over).
const MAX_QUERY: usize = 512;

/// The range `[since, until)` (Unix ms) of query string `raw` (`since`, `until`, RFC 3339;
/// both optional: `until` defaults to `now`, `since` to 30 days before `until`). `400
/// BAD_REQUEST` naming the parameter for a malformed stamp, an unknown or repeated
/// parameter, `until` not after `since`, or a range over 366 days.
pub fn parse_range(raw: Option<&str>, now: i64) -> Result<(i64, i64), ApiError> {
    let (since, until) = stamps(raw)?;
    range_of(since.as_deref(), until.as_deref(), now)
}

/// The `since` and `until` values of query string `raw`, as given; `400` for a query over 512
/// bytes, one that is not `application/x-www-form-urlencoded`, an unknown parameter or one
/// given twice.
pub fn stamps(raw: Option<&str>) -> Result<(Option<String>, Option<String>), ApiError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_QUERY {
        return Err(ApiError::bad_request("the query string is too long"));
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw)
        .map_err(|e| ApiError::bad_request(format!("the query string: {e}")))?;
    let (mut since, mut until) = (None, None);
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "since" => &mut since,
            "until" => &mut until,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter `{}`: only since and until",
                    k.chars().take(40).collect::<String>()
                )));
            }
        };
        if slot.is_some() {
            return Err(ApiError::bad_request(format!("{k} is given twice")));
        }
        *slot = Some(v);
    }
    Ok((since, until))
}

/// The range of RFC 3339 `since` and `until` (see [`parse_range`]).
pub fn range_of(
    since: Option<&str>,
    until: Option<&str>,
    now: i64,
) -> Result<(i64, i64), ApiError> {
    let stamp = |k: &str, v: Option<&str>| -> Result<Option<i64>, ApiError> {
        v.map(|v| {
            assent_core::stamp::parse(v).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{k} must be an RFC 3339 time, e.g. 2026-01-31T00:00:00Z"
                ))
            })
        })
        .transpose()
    };
    let until = stamp("until", until)?.unwrap_or(now);
    let since = stamp("since", since)?.unwrap_or(until.saturating_sub(DEFAULT_RANGE_MS));
    if until <= since {
        return Err(ApiError::bad_request("until must be after since"));
    }
    if until - since > MAX_RANGE_MS {
        return Err(ApiError::bad_request(
            "since: the range from since to until is longer than 366 days",
        ));
    }
    Ok((since, until))
}

/// The store's insights as the wire body.
pub fn wire(i: &store::Insights) -> api::Insights {
    api::Insights {
        since: rfc3339(i.since),
        until: rfc3339(i.until),
        rubber_stamp_seconds: RUBBER_STAMP_MS as f64 / 1000.0,
        list_cap: LIST_CAP as u32,
        days: i
            .days
            .iter()
            .map(|d| api::DayPrompts {
                day: rfc3339(d.day).chars().take(10).collect(),
                prompts: d.prompts,
            })
            .collect(),
        overall: figures(&i.overall),
        tools: breakdown(&i.tools),
        agents: breakdown(&i.agents),
        operators: breakdown(&i.operators),
        outright: api::OutrightList {
            rows: i
                .outright
                .iter()
                .map(|o| api::Outright {
                    tool: o.tool.clone(),
                    allowed: o.allowed,
                    denied: o.denied,
                    granted: o.granted,
                })
                .collect(),
            total: i.outright_total,
            truncated: i.outright_truncated,
        },
        suggestions: Vec::new(),
        unmined: Vec::new(),
        suggestions_withheld: false,
    }
}

fn breakdown(b: &store::Breakdown) -> api::Breakdown {
    api::Breakdown {
        rows: b.rows.iter().map(figures).collect(),
        total: b.total,
    }
}

fn figures(f: &store::Figures) -> api::Figures {
    let secs = |ms: Option<i64>| ms.map(|m| m as f64 / 1000.0);
    api::Figures {
        key: f.key.clone(),
        prompts: f.prompts,
        approved: f.approved,
        rejected: f.rejected,
        expired: f.expired,
        cancelled: f.cancelled,
        pending: f.pending,
        approval_rate: f.approval_rate(),
        rubber_stamped: f.rubber_stamped,
        median_seconds: secs(f.median_ms),
        p90_seconds: secs(f.p90_ms),
    }
}

/// One computation of insights at a time in this process: on a large history one takes
/// seconds of a core (measured: about 3 s for 100,000 approvals and 200,000 audit records on
/// SQLite), so operators asking at once queue here instead of taking every core from gating.
static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Reads the insights over `[since, until)` on the blocking pool, one request at a time
/// (`ONE_AT_A_TIME`; `503` when the store fails).
pub async fn read(st: &AppState, since: i64, until: i64) -> Result<store::Insights, ApiError> {
    // The permit goes with the work (found by review: held here only, a client that hung up
    // freed it while the reading went on, and several piled up).
    let turn = ONE_AT_A_TIME
        .acquire()
        .await
        .map_err(ApiError::unavailable)?;
    st.store_call_apart(move |s| {
        let _turn = turn;
        s.insights(since, until)
    })
    .await
}

/// `GET /v1/insights[?since=RFC3339&until=RFC3339]` (operators): prompts per day, outcomes,
/// approval rate, time to decision and rubber stamps per tool, agent and operator, and the
/// calls that needed nobody, and the top suggestions (default range: the last 30 days; at most
/// 366).
#[utoipa::path(get, path = "/v1/insights", tag = "around",
    params(("since" = Option<String>, Query, description = "Start, RFC 3339 (default: 30 days before until)"),
           ("until" = Option<String>, Query, description = "End, RFC 3339, exclusive (default: now)")),
    responses((status = 200, description = "OK", body = assent_api::insights::Insights)),
    security(("operator_key" = [])))]
pub(crate) async fn insights(
    State(st): State<AppState>,
    _op: Operator<ReadInsights>,
    RawQuery(q): RawQuery,
) -> Result<Body<api::Insights>, ApiError> {
    let (since, until) = parse_range(q.as_deref(), now_ms())?;
    let mut body = wire(&read(&st, since, until).await?);
    let top = crate::suggestions::top(&st, since, until).await?;
    (body.suggestions, body.unmined) = (top.mined.suggestions, top.mined.unmined);
    body.suggestions_withheld = top.withheld;
    Ok(Body(body))
}
