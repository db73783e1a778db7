//! The insights page's suggestions (issue 16 §2, §4): the top suggestions of the range
//! ([`crate::suggestions::top`]) as rows to show — what, the evidence, the replay, the YAML —
//! and `GET /ui/insights/suggestions/{n}`, the one-click export of suggestion `n` as a YAML
//! file (nothing is applied).

use super::page::secured;
use super::session::Operator;
use crate::insights::{range_of, stamps};
use crate::state::{AppState, now_ms};
use crate::suggestions::{export, fingerprint, top};
use assent_core::suggest::{Suggestion, Unmined};
use assent_core::template::visible;
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

/// A tool left unmined as the page shows it: the tool and why.
pub(crate) struct UnminedRow {
    pub(crate) tool: String,
    pub(crate) reason: String,
}

/// The rows of `unmined` (agent-chosen names with what acts on the display made visible).
pub(crate) fn unmined_rows(unmined: &[Unmined]) -> Vec<UnminedRow> {
    unmined
        .iter()
        .map(|u| UnminedRow {
            tool: assent_core::template::visible(&match &u.server {
                Some(a) => format!("{a}/{}", u.tool),
                None => u.tool.clone(),
            })
            .into_owned(),
            reason: format!("{} decisions; {}", u.decisions, u.reason),
        })
        .collect()
}

/// `text` with what acts on the display made visible line by line ([`visible`] keeps no line
/// break; the YAML of an edit has several).
fn visible_lines(text: &str) -> String {
    text.split('\n').map(visible).collect::<Vec<_>>().join("\n")
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
                tool: assent_core::template::visible(&match &s.server {
                    Some(a) => format!("{a}/{}", s.tool),
                    None => s.tool.clone(),
                })
                .into_owned(),
                description: assent_core::template::visible(&s.description).into_owned(),
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
                    // Each may quote an agent-chosen tool name or argument value: what acts
                    // on the display made visible, as for the tool and the description
                    // (found by review: shown raw).
                    .map(|ed| EditRow {
                        file: visible(&ed.file).into_owned(),
                        location: visible(&ed.location).into_owned(),
                        yaml: visible_lines(&ed.yaml),
                    })
                    .collect(),
                export: format!(
                    "/ui/insights/suggestions/{}?{range}&of={}",
                    i + 1,
                    fingerprint(s)
                ),
            }
        })
        .collect()
}

/// The `of` fingerprint of an export link and the rest of its query (the range), or why
/// the query is refused (`of` missing, given twice, or not 32 hex digits).
fn split_of(raw: Option<&str>) -> Result<(String, Option<String>), &'static str> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or_default()).map_err(|_| "a bad query string")?;
    let (of, rest): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|(k, _)| k == "of");
    let [(_, of)] = <[_; 1]>::try_from(of).map_err(|_| "the link names no suggestion (`of`)")?;
    if of.len() != 32 || !of.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("`of` is not a suggestion's fingerprint (32 hex digits)");
    }
    let rest = serde_urlencoded::to_string(rest).map_err(|_| "a bad query string")?;
    Ok((of.to_ascii_lowercase(), (!rest.is_empty()).then_some(rest)))
}

/// `GET /ui/insights/suggestions/{n}?of=FINGERPRINT[&since=&until=]`: the suggestion of the
/// range whose [`fingerprint`] is `of` (the one the page showed as number `n`) as
/// `application/yaml`, downloaded as `assent-suggestion-N.yaml`. `400` for a bad range or
/// `of`; `409` when no suggestion of the range has that fingerprint any more (new decisions
/// or a policy reload changed them: the operator reloads the page and reviews again).
pub(crate) async fn export_suggestion(
    State(st): State<AppState>,
    Path(n): Path<usize>,
    RawQuery(q): RawQuery,
    _op: Operator,
) -> Response {
    let (of, q) = match split_of(q.as_deref()) {
        Ok(x) => x,
        Err(why) => return secured((StatusCode::BAD_REQUEST, format!("{why}\n")).into_response()),
    };
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
    let Some(s) = found
        .mined
        .suggestions
        .iter()
        .find(|s| fingerprint(s) == of)
    else {
        let why = "this suggestion is no longer among the suggestions of this range (new decisions or a policy reload changed them): reload the insights page and review it again\n";
        return secured((StatusCode::CONFLICT, why).into_response());
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
