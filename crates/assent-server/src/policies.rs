//! `POST /v1/policies/replay` (issue 16 §1; an operator's key): a candidate policy — the
//! gateway's policy files as they are on disk now, with the body's files replacing the ones of
//! the same name or added — replayed against the recorded history with
//! [`assent_core::replay`], page by page from the store (each page its own read snapshot, so
//! the writer is never held for the whole history). At most [`MAX_REPLAYED`] proposals per
//! request and [`MAX_REPLAYED_BYTES`] of their stored text, the oldest first (`truncated` says
//! when more were left); `since`/`until` narrow it.

use crate::body::Body;
use crate::config::Config;
use crate::error::ApiError;
use crate::extract::{ApiJson, Operator, ReplayPolicies};
use crate::state::{AppState, now_ms};
use assent_api::error::{POLICY_INVALID, REPLAY_UNAVAILABLE};
use assent_api::policies::{PolicyFile, ReplayRequest, ReplayResponse};
use assent_core::Registry;
use assent_core::replay::{Options, Recorded, Replayer};
use assent_core::suggest::edit::PolicyFiles;
use assent_store::history::{MAX_PAGE, Query};
use assent_store::{Store, StoreError};
use axum::extract::State;
use axum::http::StatusCode;

/// Proposals one replay request reads at the most.
pub const MAX_REPLAYED: usize = 200_000;

/// Stored text of the proposals one replay request reads at the most: 1 GiB (`truncated`
/// past it). Found by review: read without a byte bound, calls an agent padded to
/// `max_arguments_bytes` made one replay read and parse up to [`MAX_REPLAYED`] × 256 KiB,
/// some 50 GiB, holding the one replay turn and a reader for minutes.
pub const MAX_REPLAYED_BYTES: u64 = 1 << 30;

/// Candidate files one replay request may carry (`agents` and `governance` together): `400`
/// past it. Found by review: some 11,000 one-character files fit the body's bound, each
/// matched against every file before it, tens of millions of steps on the one replay turn.
pub const MAX_CANDIDATE_FILES: usize = 256;

/// One replay at a time in this process (operators asking at once queue): each takes seconds
/// of a blocking thread at the most (B7).
static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// `POST /v1/policies/replay`: the [`ReplayResponse`]. `400` for a bad `since`/`until` or
/// more than [`MAX_CANDIDATE_FILES`] files,
/// `422 POLICY_INVALID` (every `FILE:LINE: reason`) when the candidate does not load,
/// `409 REPLAY_UNAVAILABLE` without a config file, `503` when the store cannot be read.
#[utoipa::path(post, path = "/v1/policies/replay", tag = "around",
    request_body = assent_api::policies::ReplayRequest,
    responses((status = 200, description = "What the candidate would have done to the recorded history", body = assent_api::policies::ReplayResponse)),
    security(("operator_key" = [])))]
pub(crate) async fn replay(
    State(st): State<AppState>,
    _op: Operator<ReplayPolicies>,
    ApiJson(b): ApiJson<ReplayRequest>,
) -> Result<Body<ReplayResponse>, ApiError> {
    let range = |name: &str, v: &Option<String>| -> Result<Option<i64>, ApiError> {
        v.as_deref()
            .map(|t| {
                assent_core::stamp::parse(t).ok_or_else(|| {
                    ApiError::bad_request(format!("{name}: {t:?} is not an RFC 3339 time"))
                })
            })
            .transpose()
    };
    let files = b.agents.len().saturating_add(b.governance.len());
    if files > MAX_CANDIDATE_FILES {
        return Err(ApiError::bad_request(format!(
            "agents and governance: {files} candidate files; at most {MAX_CANDIDATE_FILES} per replay"
        )));
    }
    let (since, until) = (range("since", &b.since)?, range("until", &b.until)?);
    // Found by review: an empty range answered a report of no change, which reads as "the
    // candidate changes nothing".
    if let (Some(s), Some(u)) = (since, until)
        && u <= s
    {
        return Err(ApiError::bad_request("until must be after since"));
    }
    let Some(source) = st.reload.clone() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            REPLAY_UNAVAILABLE,
            "this gateway was not started from a config file: it has no policy files to replay against",
        ));
    };
    let (file, strict) = (source.file.clone(), source.strict);
    // The permit goes with the work into the blocking pool (found by review: held here only,
    // a client that hung up freed it while the replay went on).
    let turn = ONE_AT_A_TIME
        .acquire()
        .await
        .map_err(ApiError::unavailable)?;
    let (reg, turn) = crate::store_call::blocking(move || {
        let reg = candidate(&file, strict, &b);
        (reg, turn)
    })
    .await?;
    let reg = reg?;
    let report = st
        .store_call_apart(move |s| {
            let _turn = turn;
            // The candidate would go in force now, beside the grants standing now.
            let now = now_ms();
            let grants = s.standing_grants(now)?;
            let mut r = Replayer::new(&reg, Options::default()).with_standing_grants(grants, now);
            // Each proposal is replayed and let go (a page at a time, `PAGE_BYTES`), never
            // held; the bytes in all are bounded for time, not memory.
            let read = read_history(
                s,
                since,
                until,
                MAX_REPLAYED,
                MAX_REPLAYED_BYTES,
                &mut |rec| r.push(rec),
            )?;
            Ok((r.finish(), read))
        })
        .await?;
    let (report, (unreadable, truncated)) = report;
    Ok(Body(ReplayResponse {
        prompts_removed: report.prompts_removed(),
        report,
        unreadable,
        truncated,
    }))
}

/// Reads the recorded proposals of `[since, until)` (Unix ms, `None` unbounded) from `s` in
/// order, page by page (each its own read snapshot), handing each to `each`, until `max` were
/// read or their stored text reached `max_bytes` (so a reader that keeps them holds at most
/// that plus one page, [`assent_store::history::PAGE_BYTES`]). Returns the unreadable records
/// counted and whether more were left.
///
/// Errors: the store cannot be read.
pub(crate) fn read_history(
    s: &Store,
    since: Option<i64>,
    until: Option<i64>,
    max: usize,
    max_bytes: u64,
    each: &mut dyn FnMut(&Recorded),
) -> Result<(u64, bool), StoreError> {
    let mut q = Query {
        after_seq: 0,
        since_ms: since,
        until_ms: until,
        limit: MAX_PAGE,
    };
    let (mut n, mut bytes, mut unreadable) = (0usize, 0u64, 0u64);
    loop {
        let page = s.history_page(&q)?;
        unreadable += page.unreadable;
        bytes = bytes.saturating_add(page.bytes);
        for rec in &page.recorded {
            each(rec);
        }
        n += page.recorded.len();
        match page.last_seq {
            Some(last) if page.full && n < max && bytes < max_bytes => q.after_seq = last,
            // At `max` (or `max_bytes`) on a full page: cut only if a proposal follows (found
            // by review: a range of exactly `max` proposals read as cut, and its suggestions
            // never came).
            Some(last) if page.full => {
                let next = Query {
                    after_seq: last,
                    limit: 1,
                    ..q
                };
                let more = s.history_page(&next)?;
                let cut = !more.recorded.is_empty() || more.unreadable > 0;
                return Ok((unreadable, cut));
            }
            _ => return Ok((unreadable, false)),
        }
    }
}

/// `422 POLICY_INVALID` naming `errors`.
fn invalid(errors: Vec<String>) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        POLICY_INVALID,
        format!("the candidate policy does not load: {}", errors.join("; ")),
    )
}

/// The policy files of config `file` as they are on disk now: `(path, text)` pairs, read
/// with [`Config::policy_files`] (regular files, 4 MiB each, 64 MiB together, as a load), and
/// whether a load of them is strict: `strict` (`assent serve --strict`) or the file's
/// `strict_agent_files`, as a reload's is (found by review: the file's setting was left out,
/// so a replay passed a candidate with an unknown agent-file field that a reload refuses).
///
/// Errors: `422 POLICY_INVALID` when the config or a file cannot be read.
pub(crate) fn policy_files(
    file: &std::path::Path,
    strict: bool,
) -> Result<(PolicyFiles, bool), ApiError> {
    let cfg = Config::load_with(file, strict).map_err(|e| invalid(vec![e.to_string()]))?;
    let files = cfg
        .policy_files()
        .map_err(|e| invalid(vec![e.to_string()]))?;
    Ok((files, strict || cfg.strict_agent_files))
}

/// The candidate registry: the config's policy files read now, the body's replacing those of
/// the same name (the listed path, or a unique base name) or added.
fn candidate(
    file: &std::path::Path,
    strict: bool,
    b: &ReplayRequest,
) -> Result<Registry, ApiError> {
    let (
        PolicyFiles {
            mut agents,
            mut governance,
        },
        strict,
    ) = policy_files(file, strict)?;
    substitute(&mut agents, &b.agents);
    substitute(&mut governance, &b.governance);
    Registry::load_with(&agents, &governance, strict)
        .map_err(|e| invalid(e.0.iter().map(ToString::to_string).collect()))
}

/// Replaces each of `files` named by one of `given` (its path, or its base name when only one
/// file has it) with the given text; adds the others.
fn substitute(files: &mut Vec<(String, String)>, given: &[PolicyFile]) {
    let base = |p: &str| {
        std::path::Path::new(p)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    };
    for g in given {
        let exact = files.iter().position(|(n, _)| *n == g.file);
        let by_base: Vec<usize> = (0..files.len())
            .filter(|&i| base(&files[i].0).as_deref() == Some(g.file.as_str()))
            .collect();
        let one = match by_base.as_slice() {
            [i] => Some(*i),
            _ => None,
        };
        match exact.or(one) {
            Some(i) => files[i].1 = g.text.clone(),
            None => files.push((g.file.clone(), g.text.clone())),
        }
    }
}
