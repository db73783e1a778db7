//! The insights page's suggestions (issue 16 §2, §4): the top suggestions of the range
//! ([`crate::suggestions::top`]) as rows to show — what, the evidence, the replay, the YAML —
//! and `GET /ui/insights/suggestions/{n}`, the one-click export of suggestion `n` as a YAML
//! file (nothing is applied).

use super::page::secured;
use super::session::Operator;
use crate::insights::{range_of, stamps};
use crate::state::{AppState, now_ms};
use crate::suggestions::{export, top};
use assent_core::suggest::Suggestion;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One edit of a suggestion: the file, the place in it, the YAML.
pub(crate) struct EditRow {
    pub(crate) file: String,
    pub(crate) location: String,
    pub(crate) yaml: String,
}

/// One suggestion as the page shows it.
pub(crate) struct SuggestionRow {
    pub(crate) tool: String,
    pub(crate) description: String,
    pub(crate) evidence: String,
    pub(crate) replay: String,
    pub(crate) edits: Vec<EditRow>,
    /// The export link (range included).
    pub(crate) export: String,
}

/// The rows of `found` for the range `[since, until)` (Unix ms).
pub(crate) fn rows(found: &[Suggestion], since: i64, until: i64) -> Vec<SuggestionRow> {
    let range = serde_urlencoded::to_string([
        ("since", crate::formats::rfc3339(since)),
        ("until", crate::formats::rfc3339(until)),
    ])
    .unwrap_or_default();
    found
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (e, r) = (&s.evidence, &s.replay);
            SuggestionRow {
                tool: match &s.server {
                    Some(a) => format!("{a}/{}", s.tool),
                    None => s.tool.clone(),
                },
                description: s.description.clone(),
                evidence: format!(
                    "{} decisions by {} from {} to {}; {} on the other side, none covered",
                    e.decisions,
                    e.deciders.join(", "),
                    crate::formats::rfc3339(e.first),
                    crate::formats::rfc3339(e.last),
                    e.other_side
                ),
                replay: format!(
                    "Replayed over this range: prompts {} → {}, calls newly denied {}, refused calls let through {}",
                    r.prompts_before, r.prompts_after, r.to_deny, r.loosened
                ),
                edits: s
                    .edits
                    .iter()
                    .map(|ed| EditRow {
                        file: ed.file.clone(),
                        location: ed.location.clone(),
                        yaml: ed.yaml.clone(),
                    })
                    .collect(),
                export: format!("/ui/insights/suggestions/{}?{range}", i + 1),
            }
        })
        .collect()
}

/// `GET /ui/insights/suggestions/{n}[?since=&until=]`: suggestion `n` (1-based) of the range
/// as `application/yaml`, downloaded as `assent-suggestion-N.yaml`. `400` for a bad range,
/// `404` for no such suggestion.
pub(crate) async fn export_suggestion(
    State(st): State<AppState>,
    Path(n): Path<usize>,
    RawQuery(q): RawQuery,
    _op: Operator,
) -> Response {
    let range =
        stamps(q.as_deref()).and_then(|(s, u)| range_of(s.as_deref(), u.as_deref(), now_ms()));
    let (since, until) = match range {
        Ok(r) => r,
        Err(e) => return secured(e.into_response()),
    };
    let found = match top(&st, since, until).await {
        Ok(f) => f,
        Err(e) => return secured(e.into_response()),
    };
    let Some(s) = n.checked_sub(1).and_then(|i| found.get(i)) else {
        return secured(
            (StatusCode::NOT_FOUND, "no such suggestion in this range\n").into_response(),
        );
    };
    let mut r = export(n, s).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "attachment; filename=\"assent-suggestion-{n}.yaml\""
    )) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    secured(r)
}
