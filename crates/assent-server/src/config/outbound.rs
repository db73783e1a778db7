//! The outside world of the configuration: the MCP upstreams behind `/mcp`
//! (`mcp_upstreams`), outgoing webhooks (`webhooks[]`, their secrets resolved only at start)
//! and the `public_url` links point to. One validation step of [`crate::config`].

use super::principals::secret_flaw;
use super::raw::{ConfigError, RawConfig, RawUpstream, RawWebhook, at};
use super::urls::private_transport;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::path::Path;

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
    /// `url`: where events are POSTed (https; http to a loopback host only, see
    /// [`private_transport`]).
    pub url: String,
    /// `secret_env`: the environment variable holding the HMAC key.
    pub secret_env: String,
    /// The HMAC key, once resolved ([`Config::webhooks`](super::Config::webhooks)): at least
    /// [`MIN_KEY_CHARS`](super::principals::MIN_KEY_CHARS) characters.
    pub secret: String,
    /// `format`: `json` (default) or `slack`.
    pub format: WebhookFormat,
    /// `events`: any of `approval.requested`, `approval.resolved`, `approval.escalated` and `approval.vote` (a
    /// vote counted toward a quorum, issue 14 §1); default all three.
    pub events: Vec<String>,
    /// `max_attempts` before a delivery is dead-lettered (default 10).
    pub max_attempts: u32,
    /// `retry_initial_ms`: the first retry's delay; each later one doubles, up to 5 minutes
    /// (default 1000).
    pub retry_initial_ms: u64,
    /// The line of its entry in the config file, for the errors of what is read later (an
    /// unset `secret_env`); `None` for a webhook made otherwise.
    pub line: Option<u64>,
}

/// Every field but the resolved secret (shown `<redacted>`) and the config line. A reload
/// compares webhooks by this text (`config::restart_only`), so a field left out
/// here is a change a reload does not notice (found by review: a rotated `secret_env` answered
/// `needs_restart: []` while the old secret stayed in use).
impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret_env", &self.secret_env)
            .field("secret", &"<redacted>")
            .field("format", &self.format)
            .field("events", &self.events)
            .field("max_attempts", &self.max_attempts)
            .field("retry_initial_ms", &self.retry_initial_ms)
            .finish()
    }
}

/// One upstream MCP server of the gateway's `/mcp` endpoint (`mcp_upstreams.ALIAS`): a
/// command (spoken to over stdio) or a streamable HTTP `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpUpstream {
    /// The command and its arguments; empty for a `url` upstream.
    pub command: Vec<String>,
    /// Extra environment variables for the command.
    pub env: BTreeMap<String, String>,
    /// The streamable HTTP endpoint (`https://…`; `http://…` to a loopback host only, see
    /// [`private_transport`]).
    pub url: Option<String>,
    /// `bearer_token_env`: the environment variable holding the bearer token for a `url`
    /// upstream (read when the gateway starts; the token never appears in the config).
    pub bearer_token_env: Option<String>,
}

/// Whether `u` is an absolute http(s) URL with a host.
fn http_url(u: &str) -> bool {
    url::Url::parse(u).is_ok_and(|x| matches!(x.scheme(), "http" | "https") && x.host().is_some())
}

/// Outbound URL `u` as an error may show it: its scheme and host (with port), then `/…` when
/// it has more (a path, a query, credentials), which is never shown — a Slack incoming
/// webhook's path, or a token in an upstream's query, is its secret (found by review: the
/// whole URL went to stderr and CI logs). A URL without `://`, or with an odd scheme, is not
/// shown at all.
fn shown(u: &str) -> String {
    let Some((scheme, rest)) = u.split_once("://") else {
        return "(not shown)".into();
    };
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return "(not shown)".into();
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let more = if end < rest.len() || host.len() < authority.len() {
        "/…"
    } else {
        ""
    };
    format!("{scheme}://{host}{more}")
}

/// What to do about a plain-http `url` to another host (the message ends the error).
const USE_HTTPS: &str =
    "use https (plain http is allowed only to 127.0.0.1, ::1 or localhost on this machine)";

/// Checks `public_url` (an http(s) URL) and returns it without a trailing `/`.
pub(crate) fn public_url(path: &Path, raw: &RawConfig) -> Result<Option<String>, ConfigError> {
    let Some(u) = &raw.public_url else {
        return Ok(None);
    };
    let line = Some(u.referenced.line());
    let u = &u.value;
    if !http_url(u) {
        let why = format!("public_url `{u}` is not an http(s) URL");
        return Err(at(path, line, why));
    }
    // Links are made by appending paths (`/approvals/ID`): a query or fragment would swallow
    // them.
    if u.contains(['?', '#']) {
        let why = format!("public_url `{u}`: give the base URL, without a query or fragment");
        return Err(at(path, line, why));
    }
    Ok(Some(u.trim_end_matches('/').to_string()))
}

/// Checks `mcp_upstreams`: aliases `^[a-zA-Z_][a-zA-Z0-9_]*$`, each a `command` or an
/// https `url` (http to a loopback host only; not both), `bearer_token_env` for `url`
/// upstreams only.
pub(crate) fn mcp_upstreams(
    path: &Path,
    raw: &BTreeMap<String, Spanned<RawUpstream>>,
) -> Result<BTreeMap<String, McpUpstream>, ConfigError> {
    let mut out = BTreeMap::new();
    for (alias, u) in raw {
        let line = Some(u.referenced.line());
        upstream_ok(alias, &u.value).map_err(|m| at(path, line, m))?;
        out.insert(
            alias.clone(),
            McpUpstream {
                command: u.value.command.clone(),
                env: u.value.env.clone(),
                url: u.value.url.clone(),
                bearer_token_env: u.value.bearer_token_env.clone(),
            },
        );
    }
    Ok(out)
}

/// Why upstream `alias` is not valid, if it is not.
fn upstream_ok(alias: &str, u: &RawUpstream) -> Result<(), String> {
    let ok_alias = alias
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok_alias {
        return Err(format!(
            "mcp_upstreams: alias `{alias}` must match ^[a-zA-Z_][a-zA-Z0-9_]*$"
        ));
    }
    // The hub names tools `ALIAS__TOOL` and splits at the first `__`: an alias with `__` in
    // it, or ending in `_`, would make that split name another upstream or another tool.
    if alias.contains("__") || alias.ends_with('_') {
        return Err(format!(
            "mcp_upstreams: alias `{alias}` must not contain `__` nor end in `_` (tools are named ALIAS__TOOL)"
        ));
    }
    match (&u.url, u.command.is_empty()) {
        (Some(_), false) => {
            return Err(format!(
                "mcp_upstreams.{alias}: give `command` or `url`, not both"
            ));
        }
        (Some(url), true) if !http_url(url) => {
            return Err(format!(
                "mcp_upstreams.{alias}: url `{}` is not an http(s) URL",
                shown(url)
            ));
        }
        // Every URL upstream, token or not: over plain http anyone on the path reads the token
        // and the calls' arguments, and changes the tools and their results.
        (Some(url), true) if !private_transport(url) => {
            return Err(format!(
                "mcp_upstreams.{alias}: url `{}` is plain http to a host that is not this machine: anyone on the network path could read its bearer token and the calls, and change its tools and results; {USE_HTTPS}",
                shown(url)
            ));
        }
        (None, true) => {
            return Err(format!(
                "mcp_upstreams.{alias}: give `command` (the program and its arguments) or `url`"
            ));
        }
        (None, false) if u.command[0].is_empty() => {
            return Err(format!(
                "mcp_upstreams.{alias}: `command` must name the program"
            ));
        }
        _ => {}
    }
    if u.bearer_token_env.is_some() && u.url.is_none() {
        return Err(format!(
            "mcp_upstreams.{alias}: bearer_token_env applies to `url` upstreams only"
        ));
    }
    Ok(())
}

/// The events a webhook may subscribe to (default: all).
const EVENTS: [&str; 4] = [
    "approval.requested",
    "approval.resolved",
    "approval.vote",
    "approval.escalated",
];

/// Checks `webhooks[]`: unique names of letters, digits, `_` and `-`, a known `format` and
/// events, a `secret_env`, `max_attempts` 1–1000, `retry_initial_ms` 1–3,600,000, and an
/// https `url` (http to a loopback host only). Secrets are not read here (see
/// [`resolve_secrets`]).
pub(crate) fn webhooks(
    path: &Path,
    raw: &[Spanned<RawWebhook>],
) -> Result<Vec<Webhook>, ConfigError> {
    let mut out: Vec<Webhook> = Vec::new();
    for w in raw {
        let line = Some(w.referenced.line());
        let r = &w.value;
        if out.iter().any(|x| x.name == r.name) && name_ok(&r.name) {
            return Err(at(
                path,
                line,
                format!("webhooks `{}`: the name is used twice", r.name),
            ));
        }
        let hook = webhook(r).map_err(|m| at(path, line, format!("webhooks `{}`: {m}", r.name)))?;
        out.push(Webhook { line, ..hook });
    }
    Ok(out)
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// One webhook from `r`, or why it is not valid.
fn webhook(r: &RawWebhook) -> Result<Webhook, String> {
    if !name_ok(&r.name) {
        return Err("name must be letters, digits, `_` or `-`".into());
    }
    if !http_url(&r.url) {
        return Err(format!("url `{}` is not an http(s) URL", shown(&r.url)));
    }
    let format = match r.format.as_deref() {
        None | Some("json") => WebhookFormat::Json,
        Some("slack") => WebhookFormat::Slack,
        Some(other) => return Err(format!("format `{other}`: use json or slack")),
    };
    if let Some(e) = r.events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
        return Err(format!(
            "event `{e}`: use approval.requested, approval.resolved, approval.vote and/or approval.escalated"
        ));
    }
    if r.secret_env.is_empty() {
        return Err("secret_env must name an environment variable".into());
    }
    if r.max_attempts.is_some_and(|n| !(1..=1000).contains(&n)) {
        return Err("max_attempts must be from 1 to 1000".into());
    }
    if r.retry_initial_ms
        .is_some_and(|n| !(1..=3_600_000).contains(&n))
    {
        return Err("retry_initial_ms must be from 1 to 3600000 (one hour)".into());
    }
    if !private_transport(&r.url) {
        return Err(format!(
            "url `{}` is plain http to a host that is not this machine: anyone on the network path could read the events (one-time links, arguments) and answer in the receiver's place; {USE_HTTPS}",
            shown(&r.url)
        ));
    }
    Ok(Webhook {
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
        line: None,
    })
}

/// `webhooks` with their secrets read from `secret_env`; an unset or empty variable, or a
/// secret with a [`secret_flaw`] (whitespace, shorter than [`MIN_KEY_CHARS`](super::principals::MIN_KEY_CHARS), fewer than 8
/// distinct characters: one signed delivery lets anyone try weak keys offline, then sign
/// events of their own; found by review, 32 spaces passed), is an error of `file` naming it
/// (the secret itself is never printed). `--insecure-demo-keys` lifts none of these.
pub(crate) fn resolve_secrets(
    file: &Path,
    webhooks: &[Webhook],
) -> Result<Vec<Webhook>, ConfigError> {
    webhooks
        .iter()
        .map(|w| {
            let secret = std::env::var(&w.secret_env).unwrap_or_default();
            let why = if secret.is_empty() {
                format!(
                    "environment variable {} (secret_env) is not set or empty",
                    w.secret_env
                )
            } else if let Some((flaw, _)) = secret_flaw(&secret) {
                format!(
                    "the secret in {} (secret_env) {flaw}, and give the receiver the same",
                    w.secret_env
                )
            } else {
                return Ok(Webhook {
                    secret,
                    ..w.clone()
                });
            };
            Err(at(file, w.line, format!("webhooks `{}`: {why}", w.name)))
        })
        .collect()
}
