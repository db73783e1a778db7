//! The configuration file as written (`assent.yaml`): the serde types of its sections, each
//! with the line it starts on, and the error type every validation step reports with file and
//! line ([`ConfigError`], `at`, `bounded`). Kit of [`crate::config`]: it validates nothing
//! beyond the YAML's shape.

use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::path::Path;

/// A configuration error: its problems, each with the place it names, kept apart from the
/// reason (found by review: a reload's answer parsed the place back out of the rendered text,
/// so a glob-matched file whose name held `: ` chose the file and line the answer named).
/// Rendered one problem per line, `FILE:LINE: reason` (or `FILE: reason`, or `reason`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError(pub Vec<Problem>);

/// One problem of a configuration: `file` and `line` where it is known, and what is wrong.
/// Each text is made [`visible`](assent_core::template::visible) (control and invisible
/// characters as `\uXXXX` escapes) when the problem is built: they quote names, paths and values
/// from files another team may write.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Problem {
    /// The file at fault, if named.
    pub file: Option<String>,
    /// Its line (1-based), if named.
    pub line: Option<u64>,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    /// An error that names no file (a failure beside the file, such as building an HTTP
    /// client): `reason` alone, made visible.
    pub fn new(reason: impl std::fmt::Display) -> Self {
        let reason = assent_core::template::visible(&reason.to_string()).into_owned();
        ConfigError(vec![Problem {
            file: None,
            line: None,
            reason,
        }])
    }
}

impl std::fmt::Display for ConfigError {
    /// One problem per line, `FILE:LINE: reason`, `FILE: reason` or `reason`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match (&p.file, p.line) {
                (Some(file), Some(l)) => write!(f, "{file}:{l}: {}", p.reason)?,
                (Some(file), None) => write!(f, "{file}: {}", p.reason)?,
                (None, _) => write!(f, "{}", p.reason)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl From<assent_core::policy::LoadErrors> for ConfigError {
    /// Each of the policy loader's errors, its file and line kept apart from its message.
    fn from(e: assent_core::policy::LoadErrors) -> Self {
        let visible = |t: &str| assent_core::template::visible(t).into_owned();
        ConfigError(
            e.0.iter()
                .map(|e| Problem {
                    file: Some(visible(&e.file)),
                    line: e.line,
                    reason: visible(&e.message),
                })
                .collect(),
        )
    }
}

/// The error `msg` at line `line` of `file` (or of the file as a whole), on one line made
/// [`visible`](assent_core::template::visible) (control and invisible characters as `\uXXXX`
/// escapes): messages quote names, paths and values from files another team may write (found
/// by review: they reached the operator's terminal and logs as they were, escape sequences
/// and line breaks included, so a file could clear the screen or forge a problem line of a
/// reload's answer).
pub(crate) fn at(file: &Path, line: Option<u64>, msg: impl std::fmt::Display) -> ConfigError {
    let visible = |t: &str| assent_core::template::visible(t).into_owned();
    ConfigError(vec![Problem {
        file: Some(visible(&file.display().to_string())),
        line,
        reason: visible(&msg.to_string()),
    }])
}

/// The value of an optional number `key` when it lies within `bounds` (inclusive); else the
/// error names the file, the key's line and the bounds.
pub(crate) fn bounded(
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

/// The whole file.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawConfig {
    pub(crate) listen: Option<String>,
    pub(crate) data_dir: Option<String>,
    /// `keys_dir`: where `token.key` and `audit.key` are (default `data_dir`).
    pub(crate) keys_dir: Option<String>,
    pub(crate) agents: Vec<Spanned<String>>,
    pub(crate) governance: Vec<Spanned<String>>,
    pub(crate) principals: Vec<Spanned<RawPrincipal>>,
    pub(crate) passkeys: Option<Spanned<RawPasskeys>>,
    pub(crate) oidc: Option<Spanned<RawOidc>>,
    pub(crate) approval_timeout_seconds: Option<Spanned<u64>>,
    pub(crate) token_ttl_seconds: Option<Spanned<u64>>,
    pub(crate) session_grant_max_seconds: Option<Spanned<u64>>,
    pub(crate) max_pending_per_agent: Option<Spanned<u64>>,
    pub(crate) aaep_max_timeout_extension_seconds: Option<Spanned<u64>>,
    pub(crate) max_arguments_bytes: Option<Spanned<u64>>,
    pub(crate) max_connections: Option<Spanned<u64>>,
    pub(crate) max_connections_per_address: Option<Spanned<u64>>,
    pub(crate) header_read_timeout_seconds: Option<Spanned<u64>>,
    pub(crate) body_read_timeout_seconds: Option<Spanned<u64>>,
    pub(crate) max_waiters_per_principal: Option<Spanned<u64>>,
    pub(crate) rate_limits: Option<Spanned<RawRateLimits>>,
    pub(crate) trusted_proxies: Vec<Spanned<String>>,
    pub(crate) metrics_key_env: Option<Spanned<String>>,
    pub(crate) strict_agent_files: bool,
    pub(crate) mcp_upstreams: BTreeMap<String, Spanned<RawUpstream>>,
    pub(crate) mcp_allowed_hosts: Vec<String>,
    pub(crate) mcp_allowed_origins: Vec<String>,
    pub(crate) mcp_client_gone_seconds: Option<Spanned<u64>>,
    pub(crate) public_url: Option<Spanned<String>>,
    pub(crate) webhooks: Vec<Spanned<RawWebhook>>,
    pub(crate) audit_checkpoints: Option<Spanned<RawCheckpoints>>,
    pub(crate) audit_retention_days: Option<Spanned<u64>>,
    pub(crate) database: Option<Spanned<RawDatabase>>,
    pub(crate) slack: Option<Spanned<RawSlack>>,
}

/// `slack` as written (approving from Slack, issue 15 §4; checked by `config::slack`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSlack {
    pub(crate) signing_secret_env: String,
    #[serde(default)]
    pub(crate) bot_token_env: Option<String>,
    #[serde(default)]
    pub(crate) channel: Option<String>,
    #[serde(default)]
    pub(crate) api_url: Option<String>,
    #[serde(default, deserialize_with = "assent_core::json::written")]
    pub(crate) team_id: Option<String>,
}

/// `database`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDatabase {
    pub(crate) url_env: String,
}

/// `audit_checkpoints`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawCheckpoints {
    pub(crate) every_records: Option<u64>,
    pub(crate) every_seconds: Option<u64>,
    pub(crate) file: Option<String>,
}

/// `rate_limits`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawRateLimits {
    pub(crate) requests_per_second: Option<u32>,
    pub(crate) burst: Option<u32>,
}

/// One of `webhooks[]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWebhook {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) secret_env: String,
    #[serde(default)]
    pub(crate) format: Option<String>,
    #[serde(default)]
    pub(crate) events: Vec<String>,
    #[serde(default)]
    pub(crate) max_attempts: Option<u32>,
    #[serde(default)]
    pub(crate) retry_initial_ms: Option<u64>,
}

/// One of `mcp_upstreams`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawUpstream {
    pub(crate) command: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) url: Option<String>,
    pub(crate) bearer_token_env: Option<String>,
}

/// One of `principals[]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrincipal {
    pub(crate) name: String,
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) roles: Vec<String>,
    #[serde(default)]
    pub(crate) agent_id: Option<String>,
    #[serde(default)]
    pub(crate) key_env: Option<String>,
    #[serde(default)]
    pub(crate) key_sha256: Option<String>,
    #[serde(default)]
    pub(crate) owns: Vec<String>,
    /// An executor's MCP server aliases (issue 14 §6).
    #[serde(default, deserialize_with = "assent_core::json::written")]
    pub(crate) servers: Option<Vec<String>>,
    /// An executor's tool names (issue 14 §6).
    #[serde(default, deserialize_with = "assent_core::json::written")]
    pub(crate) tools: Option<Vec<String>>,
    /// The agent ids whose tokens an executor redeems (required of an executor).
    #[serde(default, deserialize_with = "assent_core::json::written")]
    pub(crate) agents: Option<Vec<String>>,
    /// An operator's Slack user id (issue 15 §4).
    #[serde(default)]
    pub(crate) slack_user_id: Option<String>,
    /// An operator's single sign-on name (the value of `oidc.name_claim`).
    #[serde(default)]
    pub(crate) sso: Option<String>,
}

/// `passkeys` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPasskeys {
    #[serde(default)]
    pub(crate) origin: Option<String>,
    #[serde(default)]
    pub(crate) rp_id: Option<String>,
}

/// `oidc` as written (dashboard single sign-on, issue 14 §7; checked by `config::oidc`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOidc {
    pub(crate) issuer: String,
    pub(crate) client_id: String,
    pub(crate) client_secret_env: String,
    pub(crate) roles_claim: String,
    #[serde(default, deserialize_with = "assent_core::json::written")]
    pub(crate) roles: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    pub(crate) name_claim: Option<String>,
    #[serde(default)]
    pub(crate) redirect_url: Option<String>,
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
}
