//! `/ui/insights` (issue 16 §4): what `GET /v1/insights` answers, for a signed-in operator, as
//! three server-drawn SVG charts ([`super::charts`]: prompts per day, approval rate by tool,
//! time to decision by tool) and tables with the same numbers (overall, per day, per tool, per
//! agent, per operator with rubber stamps, the calls that needed nobody). The range form takes
//! RFC 3339 times or plain dates (`YYYY-MM-DD`, midnight UTC); empty fields are the defaults.

use super::charts::{self, Chart};
use super::page::{page, page_with, secured};
use super::session::Operator;
use super::suggested::{SuggestionRow, UnminedRow, rows, unmined_rows};
use crate::insights::{range_of, read, stamps, wire};
use crate::state::{AppState, now_ms};
use askama::Template;
use assent_api::insights::{Figures, Insights};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// One row of a figures table, formatted.
struct Row {
    key: String,
    prompts: u64,
    approved: u64,
    rejected: u64,
    expired: u64,
    cancelled: u64,
    pending: u64,
    rate: String,
    median: String,
    p90: String,
    stamped: u64,
    stamped_share: String,
}

/// A figures table: its rows and how many keys there were.
struct Table {
    rows: Vec<Row>,
    total: u64,
}

#[derive(Template)]
#[template(path = "insights.html")]
struct InsightsPage {
    who: String,
    csrf: String,
    since: String,
    until: String,
    error: String,
    data: Option<Insights>,
    overall: Option<Row>,
    tools: Table,
    agents: Table,
    operators: Table,
    charts: Vec<Chart>,
    chart_tools: usize,
    suggestions: Vec<SuggestionRow>,
    /// Tools with decisions whose arguments were not mined, and why.
    unmined: Vec<UnminedRow>,
    min_decisions: u32,
    /// No suggestion was mined: the range holds more than is read for them, or an unreadable
    /// record ([`crate::suggestions::Top::withheld`]).
    suggestions_withheld: bool,
    max_history: usize,
    max_history_mib: u64,
}

/// `0.0` as `"—"` when absent, else with up to one decimal.
fn num(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(
        || "—".into(),
        |v| format!("{}{unit}", (v * 10.0).round() / 10.0),
    )
}

fn row(f: &Figures) -> Row {
    let decided = f.approved + f.rejected;
    Row {
        key: assent_core::template::visible(&f.key).into_owned(),
        prompts: f.prompts,
        approved: f.approved,
        rejected: f.rejected,
        expired: f.expired,
        cancelled: f.cancelled,
        pending: f.pending,
        rate: num(f.approval_rate.map(|r| r * 100.0), " %"),
        median: num(f.median_seconds, " s"),
        p90: num(f.p90_seconds, " s"),
        stamped: f.rubber_stamped,
        stamped_share: num(
            (decided > 0).then(|| f.rubber_stamped as f64 * 100.0 / decided as f64),
            " %",
        ),
    }
}

fn table(b: &assent_api::insights::Breakdown) -> Table {
    Table {
        rows: b.rows.iter().map(row).collect(),
        total: b.total,
    }
}

/// A form value as RFC 3339: empty is `None`, a plain date is its midnight UTC.
fn form_stamp(v: Option<String>) -> Option<String> {
    let v = v?.trim().to_string();
    match v.len() {
        0 => None,
        10 => Some(format!("{v}T00:00:00Z")),
        _ => Some(v),
    }
}

/// The three charts of `i`; a chart that cannot be drawn is logged and left out (its table
/// stays).
fn draw(i: &Insights) -> Vec<Chart> {
    [
        charts::prompts_per_day(&i.days),
        charts::approval_rate(&i.tools.rows),
        charts::time_to_decision(&i.tools.rows),
    ]
    .into_iter()
    .filter_map(|c| {
        c.map_err(|e| tracing::error!(error = %e, "insights chart not drawn"))
            .ok()
    })
    .collect()
}

/// `GET /ui/insights[?since=&until=]`: the insights page (default: the last 30 days); a bad
/// range is a `400` page that names the field.
pub(crate) async fn insights_page(
    State(st): State<AppState>,
    RawQuery(q): RawQuery,
    op: Operator,
) -> Response {
    let mut t = InsightsPage {
        who: op.principal.name,
        csrf: op.session.csrf,
        since: String::new(),
        until: String::new(),
        error: String::new(),
        data: None,
        overall: None,
        tools: Table {
            rows: vec![],
            total: 0,
        },
        agents: Table {
            rows: vec![],
            total: 0,
        },
        operators: Table {
            rows: vec![],
            total: 0,
        },
        charts: vec![],
        chart_tools: charts::CHART_TOOLS,
        suggestions: vec![],
        unmined: vec![],
        min_decisions: crate::suggestions::MIN_DECISIONS,
        suggestions_withheld: false,
        max_history: crate::suggestions::MAX_HISTORY,
        max_history_mib: crate::suggestions::MAX_HISTORY_BYTES >> 20,
    };
    let range = stamps(q.as_deref()).and_then(|(s, u)| {
        let (s, u) = (form_stamp(s), form_stamp(u));
        t.since = s.clone().unwrap_or_default();
        t.until = u.clone().unwrap_or_default();
        range_of(s.as_deref(), u.as_deref(), now_ms())
    });
    let (since, until) = match range {
        Ok(r) => r,
        Err(e) => {
            t.error = e.message;
            return page_with(StatusCode::BAD_REQUEST, &t);
        }
    };
    let mut found = match read(&st, since, until).await {
        Ok(i) => wire(&i),
        Err(e) => return secured(e.into_response()),
    };
    // Agent-chosen tool names with what acts on the display made visible, as in every table
    // (found by review: the calls that needed nobody showed them raw; the API answers them as
    // stored).
    for r in &mut found.outright.rows {
        r.tool = assent_core::template::visible(&r.tool).into_owned();
    }
    t.overall = Some(row(&found.overall));
    t.tools = table(&found.tools);
    t.agents = table(&found.agents);
    t.operators = table(&found.operators);
    t.charts = draw(&found);
    t.data = Some(found);
    match crate::suggestions::top(&st, since, until).await {
        Ok(found) => {
            t.suggestions = rows(&found.mined.suggestions, since, until);
            t.unmined = unmined_rows(&found.mined.unmined);
            t.suggestions_withheld = found.withheld;
        }
        Err(e) => return secured(e.into_response()),
    }
    page(&t)
}
