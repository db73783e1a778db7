//! A call as the server reads it from a request, before it is gated: its canonical form and
//! `call_hash` (`Canonical`, built in one place for proposals, delegations, held results,
//! plans, Confirms, edits and redemptions), the input checks every submission shares
//! (identifier and reason sizes, MPLP UUIDs, no U+0000 in anything stored as text)
//! and the real-path resolver of scope checks. Kit: imports only the error type; it neither
//! gates nor stores.

use crate::error::ApiError;
use assent_core::{CanonicalCall, CanonicalError, ToolCall};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
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

/// The longest path (bytes) and the most symbolic links [`resolve_real_path`] follows —
/// Linux's `PATH_MAX` and `MAXSYMLINKS` (the kernel refuses a longer path or more links) —
/// and the most components it walks in all.
const PATH_MAX_BYTES: usize = 4096;
const MAX_LINKS: usize = 40;
const MAX_STEPS: usize = 8192;

/// Resolves absolute path `p` as the kernel walks it, for the path scopes of seed 002
/// ([`assent_core::triggers::Observations::resolve_path`]): component by component from `/`,
/// `.` skipped, `..` the parent of what is resolved so far, a symbolic link replaced by its
/// target (read with `readlink`, also when the target does not exist: writing through a
/// dangling link creates its target), a component that does not exist taken as it is. `None`
/// when `p` is not absolute, the path or a link's target is longer than 4,096 bytes, more
/// than 40 links or 8,192 components are walked, a component cannot be looked at (no
/// permission: the gateway must see the tool's filesystem for a path scope to hold), a link
/// cannot be read, or a link lies under `/proc` (it would resolve as the gateway's process). Found by review:
/// the path was normalised lexically before its links were resolved, so `root/link/../x`
/// was checked as `root/x` while the kernel opens the `x` beside the link's target; and one
/// `canonicalize` per missing component made a long path cost quadratic time.
pub fn resolve_real_path(p: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::ffi::OsString;
    use std::path::{Component, Path, PathBuf};
    fn push_reversed(pending: &mut Vec<OsString>, p: &Path) {
        for c in p.components().rev() {
            match c {
                Component::ParentDir => pending.push("..".into()),
                Component::Normal(x) => pending.push(x.to_os_string()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    }
    if !p.is_absolute() || p.as_os_str().len() > PATH_MAX_BYTES {
        return None;
    }
    let mut pending = Vec::new();
    push_reversed(&mut pending, p);
    let (mut cur, mut links, mut steps) = (PathBuf::from("/"), 0, 0);
    while let Some(c) = pending.pop() {
        steps += 1;
        if steps > MAX_STEPS || cur.as_os_str().len() > PATH_MAX_BYTES {
            return None;
        }
        if c == ".." {
            cur.pop();
            continue;
        }
        cur.push(&c);
        let is_link = match std::fs::symlink_metadata(&cur) {
            Ok(m) => m.file_type().is_symlink(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            // Not seen (no permission, an I/O error): it may be a link the tool follows
            // (found by review: any error was taken as "not a link").
            Err(_) => return None,
        };
        if !is_link {
            continue;
        }
        if cur.starts_with("/proc") {
            // `/proc/self/…` and the like resolve as this process's, not the tool's.
            return None;
        }
        links += 1;
        let target = std::fs::read_link(&cur).ok()?;
        if links > MAX_LINKS || target.as_os_str().len() > PATH_MAX_BYTES {
            return None;
        }
        cur.pop();
        if target.is_absolute() {
            cur = PathBuf::from("/");
        }
        push_reversed(&mut pending, &target);
    }
    Some(cur)
}

/// Whether `s` is a lowercase, hyphenated UUID of version 4 and the RFC 4122 variant: MPLP's
/// identifier pattern (`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`,
/// `common/identifiers.schema.json`). Found by review: the variant was not checked, so an id
/// the pattern refuses was taken and emitted in MPLP events.
pub fn is_uuid_v4(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| {
        u.get_version_num() == 4 && u.get_variant() == uuid::Variant::RFC4122 && u.to_string() == s
    })
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

/// `400` unless `v` is 1 to [`MAX_ID_BYTES`] bytes long and holds no control character (U+0000
/// included).
pub(crate) fn check_name(what: &str, v: &str) -> Result<(), ApiError> {
    if v.is_empty() || v.len() > MAX_ID_BYTES {
        return Err(ApiError::bad_request(format!(
            "{what} must be 1 to {MAX_ID_BYTES} bytes (got {})",
            v.len()
        )));
    }
    check_text(what, v)?;
    // No id or name has a use for a control character, and one shown on an operator's
    // terminal (`assent pending`, `watch`) could move the cursor or rewrite the card.
    if v.chars().any(char::is_control) {
        let hidden = assent_core::template::first_hidden(v).unwrap_or_default();
        return Err(ApiError::bad_request(format!(
            "{what} must not contain control or invisible characters ({hidden})"
        )));
    }
    // Nor for an invisible or bidirectional one (found by review): a tool named
    // `transfer<U+200B>` or with a right-to-left override looks like another on every card.
    if v.chars().any(assent_core::template::is_invisible) {
        let hidden = assent_core::template::first_hidden(v).unwrap_or_default();
        return Err(ApiError::bad_request(format!(
            "{what} must not contain invisible or bidirectional formatting characters ({hidden})"
        )));
    }
    Ok(())
}

/// `400` when `reason` is over [`MAX_REASON_BYTES`] or holds U+0000.
pub(crate) fn check_reason(reason: &Option<String>) -> Result<(), ApiError> {
    match reason {
        Some(r) if r.len() > MAX_REASON_BYTES => Err(ApiError::bad_request(format!(
            "reason must be at most {MAX_REASON_BYTES} bytes (got {})",
            r.len()
        ))),
        Some(r) => check_text("reason", r),
        None => Ok(()),
    }
}

/// Why U+0000 is refused, after the field's name: no stored text may hold it (PostgreSQL's
/// `text` cannot, and no identifier, reason or answer has a use for it).
const NUL_REFUSED: &str = "contains U+0000 (NUL), which no identifier or text the gateway stores may hold (a call's arguments may)";

/// `400` naming `what` when `v` holds U+0000.
pub(crate) fn check_text(what: &str, v: &str) -> Result<(), ApiError> {
    if v.contains('\0') {
        return Err(ApiError::bad_request(format!("{what} {NUL_REFUSED}")));
    }
    Ok(())
}

/// Top-level members of a request body that are payload, not text the gateway stores as text:
/// a delegation's `input` and `skill_args` and a Confirm's `target` object become the
/// arguments of the call they are gated as. (A member named `arguments` is a call's arguments
/// at any depth: tool calls, held results, redemptions, a decision's edit, an AAEP
/// `modified_action`.) Both are kept only as canonical JSON text, where U+0000 is written
/// escaped, so they may hold it.
const PAYLOAD_MEMBERS: &[&str] = &["input", "skill_args", "target"];

/// `400` naming the member (as a JSON pointer) when the JSON body `bytes` holds U+0000 in an
/// object key or a string anywhere but in a call's payload (`arguments` at any depth, the
/// top-level objects of [`PAYLOAD_MEMBERS`]). Every JSON body the API reads goes through this
/// (`extract::parse_body`); a body without the escape `\u0000` is passed after one scan of its
/// bytes (JSON cannot carry U+0000 unescaped). A body that is not JSON is left to the strict
/// parser, which names its error.
pub fn refuse_nul_in_json(bytes: &[u8]) -> Result<(), ApiError> {
    let escaped = bytes
        .split(|&b| b == b'\\')
        .skip(1)
        .any(|rest| rest.starts_with(b"u0000"));
    if !escaped {
        return Ok(());
    }
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return Ok(());
    };
    let mut path = String::new();
    match first_nul(&v, &mut path, 0) {
        true => Err(ApiError::bad_request(format!(
            "`{}` {NUL_REFUSED}",
            if path.is_empty() { "/" } else { &path }
        ))),
        false => Ok(()),
    }
}

/// Whether `v` holds U+0000 outside the payload members; `path` is left at the JSON pointer
/// of the first one (a key holding it is named with `\u0000` written out).
fn first_nul(v: &Value, path: &mut String, depth: usize) -> bool {
    let len = path.len();
    let found = match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().enumerate().any(|(i, x)| {
            path.truncate(len);
            path.push_str(&format!("/{i}"));
            first_nul(x, path, depth + 1)
        }),
        Value::Object(o) => o.iter().any(|(k, x)| {
            path.truncate(len);
            path.push('/');
            path.push_str(
                &k.replace('~', "~0")
                    .replace('/', "~1")
                    .replace('\0', "\\u0000"),
            );
            let payload = k == "arguments"
                || (depth == 0 && PAYLOAD_MEMBERS.contains(&k.as_str()) && x.is_object());
            k.contains('\0') || (!payload && first_nul(x, path, depth + 1))
        }),
        _ => false,
    };
    if !found {
        path.truncate(len);
    }
    found
}

/// Largest form body the NUL check reads (the largest any config accepts: 64 MiB of
/// arguments and 64 KiB more); the edge has already refused anything over the configured
/// limit.
const MAX_FORM_BYTES: usize = 64 * 1024 * 1024 + 64 * 1024;

/// The first `&`-separated `key=value` pair of a URL-encoded text that holds U+0000 (`%00`,
/// or a raw zero byte), named by its key as sent.
fn nul_pair(text: &[u8]) -> Option<String> {
    text.split(|&b| b == b'&')
        .find(|p| p.contains(&0) || p.windows(3).any(|w| w == b"%00"))
        .map(|p| {
            let key = p.split(|&b| b == b'=').next().unwrap_or_default();
            String::from_utf8_lossy(key).into_owned()
        })
}

/// Middleware on every route: `400` when the request's path holds U+0000 once percent-decoded
/// (`%00`: an id the handler would look up or store), or a query parameter or a field of a
/// URL-encoded form body does (the dashboard's forms: reasons, scopes, answers), naming which.
/// JSON bodies are checked where they are parsed ([`refuse_nul_in_json`]).
pub async fn refuse_nul(req: Request, next: Next) -> Response {
    let refused = |what: String| ApiError::bad_request(format!("{what} {NUL_REFUSED}"));
    if req.uri().path().contains("%00") {
        return refused("the request path".into()).into_response();
    }
    if let Some(k) = req.uri().query().and_then(|q| nul_pair(q.as_bytes())) {
        return refused(format!("query parameter `{k}`")).into_response();
    }
    let form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_FORM_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                "the form body is larger than any gateway accepts",
            )
            .into_response();
        }
    };
    if let Some(k) = nul_pair(&bytes) {
        return refused(format!("form field `{k}`")).into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}
