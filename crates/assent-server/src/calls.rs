//! A call as the server reads it from a request, before it is gated: its canonical form and
//! `call_hash` (`Canonical`, built in one place for proposals, delegations, held results,
//! plans, Confirms, edits and redemptions), the input checks every submission shares
//! (identifier and reason sizes, MPLP UUIDs) and the real-path resolver of scope checks.
//! Kit: imports only the error type; it neither gates nor stores.

use crate::error::ApiError;
use assent_core::{CanonicalCall, CanonicalError, ToolCall};
use serde_json::Value;

/// Longest identifier accepted (`session_id`, `tool`, `server`, `run_id`, `device_id`,
/// `agent`), in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Longest `reason` of a decision or cancellation accepted, in bytes.
pub const MAX_REASON_BYTES: usize = 4096;

/// `400 BAD_REQUEST` for a call that is not well formed.
fn bad(e: CanonicalError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

/// The one builder of a request's call: [`CanonicalCall`] (the call, the RFC 8785 canonical
/// JSON of its arguments and of the whole call, and its `call_hash`, computed once in core),
/// with a call that is not well formed answered `400 BAD_REQUEST`.
pub(crate) struct Canonical;

impl Canonical {
    /// Canonicalises `call` (the result of [`ToolCall::new`] or
    /// [`assent_core::delegation_call`]): `400` when it is not well formed (empty tool,
    /// arguments not an object, integers beyond ±2^53).
    pub(crate) fn of(call: Result<ToolCall, CanonicalError>) -> Result<CanonicalCall, ApiError> {
        CanonicalCall::new(call.map_err(bad)?).map_err(bad)
    }

    /// [`CanonicalCall::parse`] the call `tool` on `server` with `arguments`; `400` when it is
    /// not well formed.
    pub(crate) fn call(
        tool: String,
        server: Option<String>,
        arguments: Value,
    ) -> Result<CanonicalCall, ApiError> {
        CanonicalCall::parse(tool, server, arguments).map_err(bad)
    }
}

/// The `call_hash` of the call `tool` on `server` with `arguments`; `400` when it is not well
/// formed.
pub(crate) fn call_hash(
    tool: String,
    server: Option<String>,
    arguments: Value,
) -> Result<String, ApiError> {
    Ok(Canonical::call(tool, server, arguments)?
        .call_hash()
        .to_string())
}

/// Resolves symlinks in an absolute, lexically normalised path: the real path of its longest
/// existing prefix joined with the rest (scope checks of seed 002).
pub fn resolve_real_path(p: &std::path::Path) -> std::path::PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return out;
        }
        match (
            existing.file_name().map(|f| f.to_os_string()),
            existing.parent(),
        ) {
            (Some(f), Some(parent)) => {
                rest.push(f);
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Whether `s` is a lowercase UUID v4 (the MPLP identifier pattern).
pub fn is_uuid_v4(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.get_version_num() == 4 && u.to_string() == s)
}

/// `400` unless the optional `trace_id` is a lowercase UUID v4 (MPLP identifiers).
pub(crate) fn check_trace_id(trace_id: Option<&str>) -> Result<(), ApiError> {
    if trace_id.is_some_and(|t| !is_uuid_v4(t)) {
        return Err(ApiError::bad_request(
            "trace_id must be a lowercase UUID v4 (MPLP identifiers)",
        ));
    }
    Ok(())
}

/// `400` unless the optional identifier `v` is 1 to [`MAX_ID_BYTES`] bytes long.
pub(crate) fn check_id(what: &str, v: &Option<String>) -> Result<(), ApiError> {
    match v {
        Some(s) => check_name(what, s),
        None => Ok(()),
    }
}

/// `400` unless `v` is 1 to [`MAX_ID_BYTES`] bytes long.
pub(crate) fn check_name(what: &str, v: &str) -> Result<(), ApiError> {
    if v.is_empty() || v.len() > MAX_ID_BYTES {
        return Err(ApiError::bad_request(format!(
            "{what} must be 1 to {MAX_ID_BYTES} bytes (got {})",
            v.len()
        )));
    }
    Ok(())
}

/// `400` when `reason` is over [`MAX_REASON_BYTES`].
pub(crate) fn check_reason(reason: &Option<String>) -> Result<(), ApiError> {
    match reason {
        Some(r) if r.len() > MAX_REASON_BYTES => Err(ApiError::bad_request(format!(
            "reason must be at most {MAX_REASON_BYTES} bytes (got {})",
            r.len()
        ))),
        _ => Ok(()),
    }
}
