//! The server configuration file (`assent.yaml`): parsed once, validated into [`Config`]; any
//! error stops start-up with file, line and reason.

use assent_core::policy::Registry;
use serde::Deserialize;
use serde_saphyr::Spanned;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A configuration error, rendered as `FILE:LINE: reason` (or `FILE: reason`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn at(file: &Path, line: Option<u64>, msg: impl std::fmt::Display) -> ConfigError {
    match line {
        Some(l) => ConfigError(format!("{}:{l}: {msg}", file.display())),
        None => ConfigError(format!("{}: {msg}", file.display())),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    listen: Option<String>,
    #[serde(default)]
    data_dir: Option<String>,
    #[serde(default)]
    agents: Vec<String>,
    #[serde(default)]
    governance: Vec<String>,
    #[serde(default)]
    principals: Vec<Spanned<RawPrincipal>>,
    #[serde(default)]
    approval_timeout_seconds: Option<Spanned<u64>>,
    #[serde(default)]
    token_ttl_seconds: Option<Spanned<u64>>,
    #[serde(default)]
    max_pending_per_agent: Option<Spanned<u64>>,
    #[serde(default)]
    aaep_max_timeout_extension_seconds: Option<Spanned<u64>>,
    #[serde(default)]
    max_arguments_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    max_connections: Option<Spanned<u64>>,
    #[serde(default)]
    header_read_timeout_seconds: Option<Spanned<u64>>,
    #[serde(default)]
    body_read_timeout_seconds: Option<Spanned<u64>>,
    #[serde(default)]
    max_waiters_per_principal: Option<Spanned<u64>>,
    #[serde(default)]
    rate_limits: Option<Spanned<RawRateLimits>>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default)]
    strict_agent_files: bool,
    #[serde(default)]
    mcp_upstreams: BTreeMap<String, Spanned<RawUpstream>>,
    #[serde(default)]
    mcp_allowed_hosts: Vec<String>,
    #[serde(default)]
    mcp_allowed_origins: Vec<String>,
    #[serde(default)]
    public_url: Option<String>,
    #[serde(default)]
    webhooks: Vec<Spanned<RawWebhook>>,
    #[serde(default)]
    audit_checkpoints: Option<Spanned<RawCheckpoints>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckpoints {
    #[serde(default)]
    every_records: Option<u64>,
    #[serde(default)]
    every_seconds: Option<u64>,
    #[serde(default)]
    file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimits {
    #[serde(default)]
    requests_per_second: Option<u32>,
    #[serde(default)]
    burst: Option<u32>,
}

/// Validates `rate_limits` (each 1 … 1,000,000).
fn rate_limits(
    file: &Path,
    raw: &Option<Spanned<RawRateLimits>>,
) -> Result<crate::throttle::RateLimits, ConfigError> {
    let d = crate::throttle::RateLimits::default();
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
    Ok(crate::throttle::RateLimits {
        requests_per_second: ok(
            r.value.requests_per_second,
            "requests_per_second",
            d.requests_per_second,
        )?,
        burst: ok(r.value.burst, "burst", d.burst)?,
    })
}

/// Shortest key accepted from `key_env`, in characters (issue 10 §15).
pub const MIN_KEY_CHARS: usize = 32;

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
fn audit_checkpoints(
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
    let every_records = r.every_records.unwrap_or(d.every_records);
    if !(1..=1_000_000).contains(&every_records) {
        return Err(at(
            path,
            line,
            format!("audit_checkpoints.every_records {every_records}: use 1 to 1000000"),
        ));
    }
    let every_seconds = r.every_seconds.unwrap_or(d.every_seconds);
    if !(1..=86_400).contains(&every_seconds) {
        return Err(at(
            path,
            line,
            format!("audit_checkpoints.every_seconds {every_seconds}: use 1 to 86400"),
        ));
    }
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    name: String,
    url: String,
    secret_env: String,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    events: Vec<String>,
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    retry_initial_ms: Option<u64>,
}

/// The body a webhook receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookFormat {
    /// assent's own JSON event (`event`, `approval`, `links`).
    Json,
    /// A Slack-compatible message (`text` and `blocks`), for Slack incoming webhooks.
    Slack,
}

/// One outgoing webhook (`webhooks[]` in the config; issue 5). Its secret is read from
/// `secret_env` at start-up and never logged.
#[derive(Clone)]
pub struct Webhook {
    /// `name`: unique; it names the webhook's place in the audit log and its dead letters.
    pub name: String,
    /// `url`: where events are POSTed (http or https).
    pub url: String,
    /// `secret_env`: the environment variable holding the HMAC key.
    pub secret_env: String,
    /// The HMAC key, once resolved ([`Config::webhooks`]).
    pub secret: String,
    /// `format`: `json` (default) or `slack`.
    pub format: WebhookFormat,
    /// `events`: `approval.requested` and/or `approval.resolved` (default both).
    pub events: Vec<String>,
    /// `max_attempts` before a delivery is dead-lettered (default 10).
    pub max_attempts: u32,
    /// `retry_initial_ms`: the first retry's delay; each later one doubles, up to 5 minutes
    /// (default 1000).
    pub retry_initial_ms: u64,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("format", &self.format)
            .field("events", &self.events)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    bearer_token_env: Option<String>,
}

/// One upstream MCP server of the gateway's `/mcp` endpoint (`mcp_upstreams.ALIAS`): a
/// command (spoken to over stdio) or a streamable HTTP `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpUpstream {
    /// The command and its arguments; empty for a `url` upstream.
    pub command: Vec<String>,
    /// Extra environment variables for the command.
    pub env: BTreeMap<String, String>,
    /// The streamable HTTP endpoint (`http://…` or `https://…`).
    pub url: Option<String>,
    /// `bearer_token_env`: the environment variable holding the bearer token for a `url`
    /// upstream (read when the gateway starts; the token never appears in the config).
    pub bearer_token_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    name: String,
    kind: String,
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    key_env: Option<String>,
    #[serde(default)]
    key_sha256: Option<String>,
}

/// What a principal is allowed to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalKind {
    /// A human operator with roles; may decide approvals.
    /// An operator: `roles` are matched against a rule's `approvers`.
    Operator {
        /// Role names.
        roles: Vec<String>,
    },
    /// An agent bound to one agent id; may propose calls and redeem tokens for that id only.
    /// An agent: `agent_id` is the only agent it may act for.
    Agent {
        /// `metadata.id` of the agent.
        agent_id: String,
    },
}

/// An authenticated identity from the config. The key is kept only as its SHA-256.
#[derive(Debug, Clone)]
pub struct Principal {
    /// `name`, unique; recorded as the actor of decisions.
    pub name: String,
    /// Operator or agent.
    pub kind: PrincipalKind,
    /// SHA-256 of the key.
    pub key_sha256: [u8; 32],
}

/// Where a principal's key comes from, before it is resolved.
#[derive(Debug, Clone)]
enum KeySource {
    Env(String),
    Sha256([u8; 32]),
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub file: PathBuf,
    /// `listen`: the socket address to bind (`--listen` overrides it).
    pub listen: String,
    /// `data_dir`: the store's directory (`--data-dir` overrides it).
    pub data_dir: PathBuf,
    /// The agents and governance policies, validated.
    pub registry: Registry,
    /// Time an approval waits, in seconds, when no rule names `timeout_seconds`. `None` (the
    /// default): by risk — high 300 s, medium 120 s, low 60 s.
    pub approval_timeout_seconds: Option<u64>,
    /// `max_pending_per_agent`: pending approvals one agent may have (default 100); more
    /// proposals get `429 TOO_MANY_PENDING`.
    pub max_pending_per_agent: u64,
    /// `aaep_max_timeout_extension_seconds`: the longest timeout extension an AAEP subscriber
    /// may obtain (default 600; 0 disables extensions).
    pub aaep_max_timeout_extension_seconds: u64,
    /// How long a minted approval token can be redeemed, in seconds.
    pub token_ttl_seconds: u64,
    /// `max_arguments_bytes`: the largest canonical `arguments` of a call (default 256 KiB).
    pub max_arguments_bytes: usize,
    /// `max_connections`: concurrent connections served (default 10,000, and always 64 below
    /// the open-file limit); more are answered `503` and closed.
    pub max_connections: usize,
    /// `header_read_timeout_seconds`: how long a client has to send a request's headers, and
    /// the longest idle keep-alive wait (default 30).
    pub header_read_timeout_seconds: u64,
    /// `body_read_timeout_seconds`: how long a client has to send a request body (default 30).
    pub body_read_timeout_seconds: u64,
    /// `max_waiters_per_principal`: long-polls one principal may hold at once (default 1024);
    /// more are `429 TOO_MANY_WAITERS`.
    pub max_waiters_per_principal: usize,
    /// `rate_limits: {requests_per_second, burst}`: per principal (default 1,000/s, 2,000).
    pub rate_limits: crate::throttle::RateLimits,
    /// `trusted_proxies`: addresses of reverse proxies whose `X-Forwarded-For` names the client
    /// (for the failed-authentication throttle); empty by default.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Keys from `key_env` shorter than [`MIN_KEY_CHARS`] are allowed (`serve
    /// --insecure-demo-keys`, loopback only); false by default.
    pub insecure_demo_keys: bool,
    /// Files the registry was loaded from.
    pub agent_files: Vec<PathBuf>,
    /// Governance files the registry was loaded from.
    pub governance_files: Vec<PathBuf>,
    /// Start-up warnings: globs that match nothing, then the registry's warnings.
    pub warnings: Vec<String>,
    /// `mcp_upstreams`: the MCP servers behind `/mcp`, by alias.
    pub mcp_upstreams: BTreeMap<String, McpUpstream>,
    /// `public_url`: how people reach this gateway (`https://assent.example.com`), for the
    /// dashboard links in webhooks; without it, webhooks carry no links.
    pub public_url: Option<String>,
    /// `webhooks`: outgoing notifications (secrets not yet resolved; see [`Config::webhooks`]).
    pub webhooks: Vec<Webhook>,
    /// `mcp_allowed_hosts`: `Host` values `/mcp` answers (empty: loopback names only).
    pub mcp_allowed_hosts: Vec<String>,
    /// `mcp_allowed_origins`: browser `Origin`s `/mcp` accepts (empty: no Origin check).
    pub mcp_allowed_origins: Vec<String>,
    /// `audit_checkpoints`: signed audit checkpoints.
    pub audit_checkpoints: AuditCheckpoints,
    principals: Vec<(String, PrincipalKind, KeySource, Option<u64>)>,
}

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

/// The value of an optional number `key` when it lies within `bounds` (inclusive); else the
/// error names the file, the key's line and the bounds.
fn bounded(
    file: &Path,
    key: &str,
    v: &Option<Spanned<u64>>,
    (lo, hi): (u64, u64),
) -> Result<Option<u64>, ConfigError> {
    match v {
        None => Ok(None),
        Some(s) if (lo..=hi).contains(&s.value) => Ok(Some(s.value)),
        Some(s) => Err(at(
            file,
            Some(s.referenced.line()),
            format!("{key} is {}; it must be from {lo} to {hi}", s.value),
        )),
    }
}

/// Default `listen` address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

fn expand(
    base: &Path,
    file: &Path,
    patterns: &[String],
    what: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::new();
    for p in patterns {
        let full = base.join(p);
        let s = full.to_string_lossy().to_string();
        let is_glob = p.contains(['*', '?', '[']);
        if !is_glob {
            if !full.is_file() {
                return Err(at(
                    file,
                    None,
                    format!("{what} file `{p}` does not exist ({})", full.display()),
                ));
            }
            out.push(full);
            continue;
        }
        let mut found: Vec<PathBuf> = glob::glob(&s)
            .map_err(|e| at(file, None, format!("{what} glob `{p}`: {e}")))?
            .filter_map(Result::ok)
            .filter(|f| f.is_file())
            .collect();
        found.sort();
        if found.is_empty() {
            warnings.push(format!(
                "{}: {what} glob `{p}` matches no file",
                file.display()
            ));
        }
        out.extend(found);
    }
    out.dedup();
    Ok(out)
}

fn read_all(files: &[PathBuf]) -> Result<Vec<(String, String)>, ConfigError> {
    files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .map(|t| (f.display().to_string(), t))
                .map_err(|e| ConfigError(format!("{}: {e}", f.display())))
        })
        .collect()
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64
        || !s
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        return None;
    }
    let v = hex::decode(s).ok()?;
    v.try_into().ok()
}

impl Config {
    /// Reads and validates `path`. Relative paths in it (`data_dir`, `agents`, `governance`)
    /// are relative to the file's directory. Principal keys are not resolved here (see
    /// [`Config::principals`]), so `assent check` works without the key variables set.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with(path, false)
    }

    /// [`Config::load`]; with `strict` (or `strict_agent_files: true` in the file) a field an
    /// agent file has that Agent Format 1.0 does not define stops start-up instead of warning.
    pub fn load_with(path: &Path, strict: bool) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| at(path, None, e))?;
        let raw: RawConfig = serde_saphyr::from_str(&text).map_err(|e| {
            let line = e.location().map(|l| l.line());
            at(
                path,
                line,
                e.to_string().lines().next().unwrap_or("invalid YAML"),
            )
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base
        };
        let mut warnings = Vec::new();
        let agent_files = expand(&base, path, &raw.agents, "agents", &mut warnings)?;
        let governance_files = expand(&base, path, &raw.governance, "governance", &mut warnings)?;
        let registry = Registry::load_with(
            &read_all(&agent_files)?,
            &read_all(&governance_files)?,
            strict || raw.strict_agent_files,
        )
        .map_err(|e| ConfigError(e.to_string()))?;
        warnings.extend(registry.warnings.iter().cloned());
        let mut principals = Vec::new();
        let mut names = BTreeSet::new();
        for p in &raw.principals {
            let line = Some(p.referenced.line());
            let r = &p.value;
            if !names.insert(r.name.clone()) {
                return Err(at(
                    path,
                    line,
                    format!("principal name `{}` is used twice", r.name),
                ));
            }
            let kind = match r.kind.as_str() {
                "operator" => {
                    if r.agent_id.is_some() {
                        return Err(at(
                            path,
                            line,
                            format!("principal `{}`: an operator has no agent_id", r.name),
                        ));
                    }
                    PrincipalKind::Operator {
                        roles: r.roles.clone(),
                    }
                }
                "agent" => match &r.agent_id {
                    Some(a) => {
                        if !r.roles.is_empty() {
                            return Err(at(
                                path,
                                line,
                                format!("principal `{}`: an agent has no roles", r.name),
                            ));
                        }
                        PrincipalKind::Agent {
                            agent_id: a.clone(),
                        }
                    }
                    None => {
                        return Err(at(
                            path,
                            line,
                            format!("principal `{}`: kind agent needs agent_id", r.name),
                        ));
                    }
                },
                other => {
                    return Err(at(
                        path,
                        line,
                        format!(
                            "principal `{}`: unknown kind `{other}` (expected operator or agent)",
                            r.name
                        ),
                    ));
                }
            };
            let key = match (&r.key_env, &r.key_sha256) {
                (Some(v), None) => KeySource::Env(v.clone()),
                (None, Some(h)) => KeySource::Sha256(parse_hex32(h).ok_or_else(|| {
                    at(
                        path,
                        line,
                        format!(
                            "principal `{}`: key_sha256 must be 64 lowercase hex characters",
                            r.name
                        ),
                    )
                })?),
                _ => {
                    return Err(at(
                        path,
                        line,
                        format!(
                            "principal `{}`: give exactly one of key_env or key_sha256",
                            r.name
                        ),
                    ));
                }
            };
            principals.push((r.name.clone(), kind, key, line));
        }
        let approval_timeout_seconds = bounded(
            path,
            "approval_timeout_seconds",
            &raw.approval_timeout_seconds,
            TIMEOUT_BOUNDS,
        )?;
        let token_ttl_seconds = bounded(
            path,
            "token_ttl_seconds",
            &raw.token_ttl_seconds,
            TOKEN_TTL_BOUNDS,
        )?;
        let max_pending_per_agent = bounded(
            path,
            "max_pending_per_agent",
            &raw.max_pending_per_agent,
            MAX_PENDING_BOUNDS,
        )?;
        let aaep_max_timeout_extension_seconds = bounded(
            path,
            "aaep_max_timeout_extension_seconds",
            &raw.aaep_max_timeout_extension_seconds,
            EXTENSION_BOUNDS,
        )?;
        let max_arguments_bytes = bounded(
            path,
            "max_arguments_bytes",
            &raw.max_arguments_bytes,
            ARGUMENTS_BYTES_BOUNDS,
        )?;
        let max_connections = bounded(
            path,
            "max_connections",
            &raw.max_connections,
            (16, 1_000_000),
        )?;
        let header_read_timeout_seconds = bounded(
            path,
            "header_read_timeout_seconds",
            &raw.header_read_timeout_seconds,
            (1, 30),
        )?;
        let body_read_timeout_seconds = bounded(
            path,
            "body_read_timeout_seconds",
            &raw.body_read_timeout_seconds,
            (1, 30),
        )?;
        let max_waiters_per_principal = bounded(
            path,
            "max_waiters_per_principal",
            &raw.max_waiters_per_principal,
            (1, 1_000_000),
        )?;
        let rate_limits = rate_limits(path, &raw.rate_limits)?;
        let trusted_proxies = raw
            .trusted_proxies
            .iter()
            .map(|a| {
                a.parse::<std::net::IpAddr>().map_err(|_| {
                    at(
                        path,
                        None,
                        format!("trusted_proxies: `{a}` is not an IP address"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut mcp_upstreams = BTreeMap::new();
        for (alias, u) in &raw.mcp_upstreams {
            let line = Some(u.referenced.line());
            let ok_alias = alias
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok_alias {
                return Err(at(
                    path,
                    line,
                    format!("mcp_upstreams: alias `{alias}` must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
                ));
            }
            match (&u.value.url, u.value.command.is_empty()) {
                (Some(_), false) => {
                    return Err(at(
                        path,
                        line,
                        format!("mcp_upstreams.{alias}: give `command` or `url`, not both"),
                    ));
                }
                (Some(url), true) => {
                    let ok = url::Url::parse(url).is_ok_and(|x| {
                        matches!(x.scheme(), "http" | "https") && x.host().is_some()
                    });
                    if !ok {
                        return Err(at(
                            path,
                            line,
                            format!("mcp_upstreams.{alias}: url `{url}` is not an http(s) URL"),
                        ));
                    }
                }
                (None, true) => {
                    return Err(at(
                        path,
                        line,
                        format!(
                            "mcp_upstreams.{alias}: give `command` (the program and its arguments) or `url`"
                        ),
                    ));
                }
                (None, false) if u.value.command[0].is_empty() => {
                    return Err(at(
                        path,
                        line,
                        format!("mcp_upstreams.{alias}: `command` must name the program"),
                    ));
                }
                (None, false) => {}
            }
            if u.value.bearer_token_env.is_some() && u.value.url.is_none() {
                return Err(at(
                    path,
                    line,
                    format!(
                        "mcp_upstreams.{alias}: bearer_token_env applies to `url` upstreams only"
                    ),
                ));
            }
            mcp_upstreams.insert(
                alias.clone(),
                McpUpstream {
                    command: u.value.command.clone(),
                    env: u.value.env.clone(),
                    url: u.value.url.clone(),
                    bearer_token_env: u.value.bearer_token_env.clone(),
                },
            );
        }
        if let Some(u) = &raw.public_url {
            let ok = url::Url::parse(u)
                .is_ok_and(|x| matches!(x.scheme(), "http" | "https") && x.host().is_some());
            if !ok {
                return Err(at(
                    path,
                    None,
                    format!("public_url `{u}` is not an http(s) URL"),
                ));
            }
        }
        let mut webhooks: Vec<Webhook> = Vec::new();
        for w in &raw.webhooks {
            let line = Some(w.referenced.line());
            let r = &w.value;
            let bad = |m: String| Err(at(path, line, format!("webhooks `{}`: {m}", r.name)));
            let ok_name = !r.name.is_empty()
                && r.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !ok_name {
                return bad("name must be letters, digits, `_` or `-`".into());
            }
            if webhooks.iter().any(|x| x.name == r.name) {
                return bad("the name is used twice".into());
            }
            let ok_url = url::Url::parse(&r.url)
                .is_ok_and(|x| matches!(x.scheme(), "http" | "https") && x.host().is_some());
            if !ok_url {
                return bad(format!("url `{}` is not an http(s) URL", r.url));
            }
            let format = match r.format.as_deref() {
                None | Some("json") => WebhookFormat::Json,
                Some("slack") => WebhookFormat::Slack,
                Some(other) => return bad(format!("format `{other}`: use json or slack")),
            };
            const EVENTS: [&str; 2] = ["approval.requested", "approval.resolved"];
            if let Some(e) = r.events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
                return bad(format!(
                    "event `{e}`: use approval.requested and/or approval.resolved"
                ));
            }
            if r.secret_env.is_empty() {
                return bad("secret_env must name an environment variable".into());
            }
            if r.max_attempts.is_some_and(|n| !(1..=1000).contains(&n)) {
                return bad("max_attempts must be from 1 to 1000".into());
            }
            if r.retry_initial_ms
                .is_some_and(|n| !(1..=3_600_000).contains(&n))
            {
                return bad("retry_initial_ms must be from 1 to 3600000 (one hour)".into());
            }
            webhooks.push(Webhook {
                name: r.name.clone(),
                url: r.url.clone(),
                secret_env: r.secret_env.clone(),
                secret: String::new(),
                format,
                events: if r.events.is_empty() {
                    EVENTS.iter().map(|e| e.to_string()).collect()
                } else {
                    r.events.clone()
                },
                max_attempts: r.max_attempts.unwrap_or(10),
                retry_initial_ms: r.retry_initial_ms.unwrap_or(1000).max(1),
            });
        }
        let audit_checkpoints = audit_checkpoints(path, &base, raw.audit_checkpoints.as_ref())?;
        Ok(Config {
            file: path.to_path_buf(),
            audit_checkpoints,
            public_url: raw
                .public_url
                .clone()
                .map(|u| u.trim_end_matches('/').to_string()),
            webhooks,
            mcp_upstreams,
            mcp_allowed_hosts: raw.mcp_allowed_hosts.clone(),
            mcp_allowed_origins: raw.mcp_allowed_origins.clone(),
            listen: raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_string()),
            data_dir: base.join(raw.data_dir.unwrap_or_else(|| ".assent".into())),
            registry,
            approval_timeout_seconds,
            max_pending_per_agent: max_pending_per_agent.unwrap_or(100),
            aaep_max_timeout_extension_seconds: aaep_max_timeout_extension_seconds.unwrap_or(600),
            token_ttl_seconds: token_ttl_seconds.unwrap_or(300),
            max_arguments_bytes: max_arguments_bytes
                .map_or(crate::DEFAULT_MAX_ARGUMENTS_BYTES, |n| n as usize),
            max_connections: max_connections.map_or(10_000, |n| n as usize),
            header_read_timeout_seconds: header_read_timeout_seconds.unwrap_or(30),
            body_read_timeout_seconds: body_read_timeout_seconds.unwrap_or(30),
            rate_limits,
            trusted_proxies,
            insecure_demo_keys: false,
            max_waiters_per_principal: max_waiters_per_principal
                .map_or(crate::waiters::DEFAULT_MAX_WAITERS_PER_PRINCIPAL, |n| {
                    n as usize
                }),
            agent_files,
            governance_files,
            warnings,
            principals,
        })
    }

    /// Resolves every principal's key: `key_env` reads the variable (the key itself), which
    /// must be set and non-empty; `key_sha256` is used as is. Two principals with the same key
    /// are an error. Keys are never logged.
    pub fn principals(&self) -> Result<Vec<Principal>, ConfigError> {
        let mut out: Vec<Principal> = Vec::new();
        for (name, kind, src, line) in &self.principals {
            let key_sha256 = match src {
                KeySource::Sha256(h) => *h,
                KeySource::Env(var) => match std::env::var(var) {
                    Ok(k)
                        if k.chars().count() < MIN_KEY_CHARS
                            && !k.is_empty()
                            && !self.insecure_demo_keys =>
                    {
                        return Err(at(
                            &self.file,
                            *line,
                            format!(
                                "principal `{name}`: the key in {var} (key_env) is {} characters; use at least {MIN_KEY_CHARS} (e.g. `openssl rand -hex 32`), or `assent serve --insecure-demo-keys` on a loopback address for a demo",
                                k.chars().count()
                            ),
                        ));
                    }
                    Ok(k) if !k.is_empty() => Sha256::digest(k.as_bytes()).into(),
                    _ => {
                        return Err(at(
                            &self.file,
                            *line,
                            format!(
                                "principal `{name}`: environment variable {var} (key_env) is not set or empty"
                            ),
                        ));
                    }
                },
            };
            if let Some(o) = out.iter().find(|p| p.key_sha256 == key_sha256) {
                return Err(at(
                    &self.file,
                    *line,
                    format!("principal `{name}` has the same key as `{}`", o.name),
                ));
            }
            if let PrincipalKind::Agent { agent_id } = kind
                && !self.registry.agents.contains_key(agent_id)
            {
                tracing::warn!(principal = %name, agent_id = %agent_id, "principal is bound to an agent id that no agent file declares");
            }
            out.push(Principal {
                name: name.clone(),
                kind: kind.clone(),
                key_sha256,
            });
        }
        Ok(out)
    }

    /// The webhooks with their secrets read from `secret_env`; an unset or empty variable
    /// stops start-up naming it (the secret itself is never printed).
    pub fn webhooks(&self) -> Result<Vec<Webhook>, ConfigError> {
        self.webhooks
            .iter()
            .map(|w| match std::env::var(&w.secret_env) {
                Ok(secret) if !secret.is_empty() => Ok(Webhook {
                    secret,
                    ..w.clone()
                }),
                _ => Err(at(
                    &self.file,
                    None,
                    format!(
                        "webhooks `{}`: environment variable {} (secret_env) is not set or empty",
                        w.name, w.secret_env
                    ),
                )),
            })
            .collect()
    }
}
