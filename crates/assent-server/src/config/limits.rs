//! The limits of the configuration: time-outs, sizes and counts (each within its bounds,
//! checked with the key's line), per-principal `rate_limits` and `trusted_proxies` (used by
//! [`crate::throttle`]), and when audit checkpoints are signed (`audit_checkpoints`). One
//! validation step of [`crate::config`].

use super::raw::{ConfigError, RawCheckpoints, RawConfig, RawRateLimits, at, bounded};
use serde_saphyr::Spanned;
use std::path::{Path, PathBuf};

/// Bounds of `approval_timeout_seconds` (and of a rule's `timeout_seconds`): 1 s … 7 days.
pub const TIMEOUT_BOUNDS: (u64, u64) = (1, 7 * 86_400);
/// Bounds of `token_ttl_seconds`: 1 s … 1 day.
pub const TOKEN_TTL_BOUNDS: (u64, u64) = (1, 86_400);
/// Bounds of `max_pending_per_agent`: 1 … 1,000,000.
pub const MAX_PENDING_BOUNDS: (u64, u64) = (1, 1_000_000);
/// Bounds of `aaep_max_timeout_extension_seconds`: 0 (no extensions) … 1 day.
pub const EXTENSION_BOUNDS: (u64, u64) = (0, 86_400);
/// Bounds of `max_arguments_bytes`: 1 KiB … 64 MiB.
pub const ARGUMENTS_BYTES_BOUNDS: (u64, u64) = (1024, 64 * 1024 * 1024);

/// Bounds of `session_grant_max_seconds`: 1 s … 30 days. Shorter is only stricter (a
/// `session` grant that lapses sooner); 1 s lets tests see one lapse.
pub const SESSION_GRANT_MAX_BOUNDS: (u64, u64) = (1, 30 * 86_400);
/// Default `session_grant_max_seconds`: 24 h.
pub const DEFAULT_SESSION_GRANT_MAX_SECONDS: u64 = 86_400;

/// Bounds of `audit_retention_days`: 1 day … 100 years (36,500 days).
pub const AUDIT_RETENTION_DAYS_BOUNDS: (u64, u64) = (1, 36_500);

/// Default `max_arguments_bytes`: 256 KiB.
pub const DEFAULT_MAX_ARGUMENTS_BYTES: usize = 256 * 1024;

/// `rate_limits` of the config.
#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    /// Requests per second one principal may make.
    pub requests_per_second: u32,
    /// Requests one principal may make in a burst.
    pub burst: u32,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            requests_per_second: 1000,
            burst: 2000,
        }
    }
}

/// The validated numeric limits of a configuration, defaults applied (see the fields of
/// [`super::Config`] of the same names).
pub(crate) struct Limits {
    pub(crate) approval_timeout_seconds: Option<u64>,
    pub(crate) token_ttl_seconds: u64,
    pub(crate) max_pending_per_agent: u64,
    pub(crate) aaep_max_timeout_extension_seconds: u64,
    pub(crate) max_arguments_bytes: usize,
    pub(crate) max_connections: usize,
    pub(crate) max_connections_per_address: usize,
    pub(crate) header_read_timeout_seconds: u64,
    pub(crate) body_read_timeout_seconds: u64,
    pub(crate) max_waiters_per_principal: usize,
    pub(crate) session_grant_max_seconds: u64,
    pub(crate) rate_limits: RateLimits,
    pub(crate) trusted_proxies: Vec<std::net::IpAddr>,
}

/// Checks the limits of `raw` (read from `path`): each number within its bounds, rate limits,
/// trusted proxies as IP addresses.
pub(crate) fn limits(path: &Path, raw: &RawConfig) -> Result<Limits, ConfigError> {
    let b = |key: &str, v: &Option<Spanned<u64>>, bounds| bounded(path, key, v, bounds);
    let approval_timeout_seconds = b(
        "approval_timeout_seconds",
        &raw.approval_timeout_seconds,
        TIMEOUT_BOUNDS,
    )?;
    let token_ttl_seconds = b(
        "token_ttl_seconds",
        &raw.token_ttl_seconds,
        TOKEN_TTL_BOUNDS,
    )?;
    let max_pending = b(
        "max_pending_per_agent",
        &raw.max_pending_per_agent,
        MAX_PENDING_BOUNDS,
    )?;
    let extension = b(
        "aaep_max_timeout_extension_seconds",
        &raw.aaep_max_timeout_extension_seconds,
        EXTENSION_BOUNDS,
    )?;
    let max_arguments_bytes = b(
        "max_arguments_bytes",
        &raw.max_arguments_bytes,
        ARGUMENTS_BYTES_BOUNDS,
    )?;
    let max_connections = b("max_connections", &raw.max_connections, (16, 1_000_000))?;
    let per_address = b(
        "max_connections_per_address",
        &raw.max_connections_per_address,
        (1, 1_000_000),
    )?;
    let header_read = b(
        "header_read_timeout_seconds",
        &raw.header_read_timeout_seconds,
        (1, 30),
    )?;
    let body_read = b(
        "body_read_timeout_seconds",
        &raw.body_read_timeout_seconds,
        (1, 30),
    )?;
    let max_waiters = b(
        "max_waiters_per_principal",
        &raw.max_waiters_per_principal,
        (1, 1_000_000),
    )?;
    let session_grant_max = b(
        "session_grant_max_seconds",
        &raw.session_grant_max_seconds,
        SESSION_GRANT_MAX_BOUNDS,
    )?;
    let rate_limits = rate_limits(path, &raw.rate_limits)?;
    let trusted_proxies = raw
        .trusted_proxies
        .iter()
        .map(|a| {
            // `::ffff:127.0.0.1` is 127.0.0.1, as the peer it will be compared with.
            let line = Some(a.referenced.line());
            let a = &a.value;
            a.parse::<std::net::IpAddr>()
                .map(|a| a.to_canonical())
                .map_err(|_| {
                    let why = format!(
                        "trusted_proxies: `{a}` is not an IP address (one address per entry; \
                         no ranges or names)"
                    );
                    at(path, line, why)
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Limits {
        approval_timeout_seconds,
        token_ttl_seconds: token_ttl_seconds.unwrap_or(300),
        max_pending_per_agent: max_pending.unwrap_or(100),
        aaep_max_timeout_extension_seconds: extension.unwrap_or(600),
        max_arguments_bytes: max_arguments_bytes
            .map_or(DEFAULT_MAX_ARGUMENTS_BYTES, |n| n as usize),
        max_connections: max_connections.map_or(10_000, |n| n as usize),
        max_connections_per_address: per_address.map_or(1_000, |n| n as usize),
        header_read_timeout_seconds: header_read.unwrap_or(30),
        body_read_timeout_seconds: body_read.unwrap_or(30),
        max_waiters_per_principal: max_waiters
            .map_or(crate::waiters::DEFAULT_MAX_WAITERS_PER_PRINCIPAL, |n| {
                n as usize
            }),
        session_grant_max_seconds: session_grant_max.unwrap_or(DEFAULT_SESSION_GRANT_MAX_SECONDS),
        rate_limits,
        trusted_proxies,
    })
}

/// Validates `rate_limits` (each 1 … 1,000,000).
fn rate_limits(
    file: &Path,
    raw: &Option<Spanned<RawRateLimits>>,
) -> Result<RateLimits, ConfigError> {
    let d = RateLimits::default();
    let Some(r) = raw else { return Ok(d) };
    let line = Some(r.referenced.line());
    let ok = |v: Option<u32>, k: &str, default: u32| match v {
        None => Ok(default),
        Some(n) if (1..=1_000_000).contains(&n) => Ok(n),
        Some(n) => Err(at(
            file,
            line,
            format!("rate_limits.{k} is {n}; it must be from 1 to 1000000"),
        )),
    };
    Ok(RateLimits {
        requests_per_second: ok(
            r.value.requests_per_second,
            "requests_per_second",
            d.requests_per_second,
        )?,
        burst: ok(r.value.burst, "burst", d.burst)?,
    })
}

/// `audit_checkpoints`: when the gateway signs an audit checkpoint, and where else it goes.
/// A checkpoint is signed once `every_records` records were appended since the previous one,
/// or `every_seconds` passed and the chain grew, and at shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCheckpoints {
    /// Records between checkpoints (1 to 1,000,000; default 1,000).
    pub every_records: u64,
    /// Seconds between checkpoints while the chain grows (1 to 86,400; default 60).
    pub every_seconds: u64,
    /// The append-only JSONL sink (one checkpoint per line), relative to the config file's
    /// directory; `None`: checkpoints go to the database and the log only.
    pub file: Option<PathBuf>,
}

impl Default for AuditCheckpoints {
    fn default() -> Self {
        Self {
            every_records: 1000,
            every_seconds: 60,
            file: None,
        }
    }
}

/// Validates `audit_checkpoints` (ranges, the file's directory exists).
pub(crate) fn audit_checkpoints(
    path: &Path,
    base: &Path,
    raw: Option<&Spanned<RawCheckpoints>>,
) -> Result<AuditCheckpoints, ConfigError> {
    let Some(raw) = raw else {
        return Ok(AuditCheckpoints::default());
    };
    let line = Some(raw.referenced.line());
    let r = &raw.value;
    let d = AuditCheckpoints::default();
    let within = |key: &str, v: Option<u64>, default: u64, hi: u64| match v.unwrap_or(default) {
        n if (1..=hi).contains(&n) => Ok(n),
        n => Err(at(
            path,
            line,
            format!("audit_checkpoints.{key} {n}: use 1 to {hi}"),
        )),
    };
    let every_records = within("every_records", r.every_records, d.every_records, 1_000_000)?;
    let every_seconds = within("every_seconds", r.every_seconds, d.every_seconds, 86_400)?;
    let file = match r.file.as_deref() {
        None => None,
        Some("") => return Err(at(path, line, "audit_checkpoints.file is empty")),
        Some(f) => {
            let f = base.join(f);
            let dir = f.parent().filter(|p| !p.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) || f.is_dir() {
                return Err(at(
                    path,
                    line,
                    format!(
                        "audit_checkpoints.file {}: not a file in an existing directory",
                        f.display()
                    ),
                ));
            }
            Some(f)
        }
    };
    Ok(AuditCheckpoints {
        every_records,
        every_seconds,
        file,
    })
}
