//! Approving from Slack (`slack:` in the config, issue 15 §4): the signing secret's variable,
//! the optional bot token's variable and channel, the Slack Web API's base URL, and which Slack
//! user is which operator (`principals[].slack_user_id`). One validation step of
//! [`crate::config`]; secrets are read only at start-up ([`resolve`]).

use super::raw::{ConfigError, RawPrincipal, RawSlack, at};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::path::Path;

/// Slack's Web API, the default `api_url`.
pub const DEFAULT_API_URL: &str = "https://slack.com/api";

/// `slack:` as validated (no secret in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackConfig {
    /// `signing_secret_env`: the variable holding the app's signing secret.
    pub signing_secret_env: String,
    /// `bot_token_env`: the variable holding the bot token (`xoxb-…`); with it, approvals are
    /// posted with `chat.postMessage` to `channel` and updated with every outcome, and deny
    /// opens a modal asking for a reason.
    pub bot_token_env: Option<String>,
    /// `channel`: where pending approvals are posted (needed with `bot_token_env`).
    pub channel: Option<String>,
    /// `api_url`: the Web API's base, without a trailing `/` (default [`DEFAULT_API_URL`]);
    /// https, or http on loopback (for tests).
    pub api_url: String,
    /// Slack user id → principal name, from `principals[].slack_user_id`.
    pub users: BTreeMap<String, String>,
    /// `team_id`: the Slack workspace (`T…`) whose clicks may decide; a signed interaction
    /// from any other workspace the app is installed in is refused (`403
    /// SLACK_WRONG_WORKSPACE`). `None`: any workspace of the app (start-up warns).
    pub team_id: Option<String>,
}

/// The Slack integration ready to run: its config and the secrets read at start-up.
#[derive(Clone)]
pub struct Slack {
    /// The validated config.
    pub config: SlackConfig,
    /// The signing secret (never logged).
    pub signing_secret: String,
    /// The bot token, when `bot_token_env` is set (never logged).
    pub bot_token: Option<String>,
}

impl std::fmt::Debug for Slack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slack")
            .field("config", &self.config)
            .field("signing_secret", &"<redacted>")
            .field("bot_token", &self.bot_token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Whether `s` looks like a Slack user id (`U…`/`W…`, then 2 to 31 capitals or digits).
pub fn slack_user_id_ok(s: &str) -> bool {
    (3..=32).contains(&s.len())
        && matches!(s.as_bytes()[0], b'U' | b'W')
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Whether `s` looks like a Slack workspace id (`T…`, then 2 to 31 capitals or digits).
pub fn slack_team_id_ok(s: &str) -> bool {
    (3..=32).contains(&s.len())
        && s.as_bytes()[0] == b'T'
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Checks `slack` of `path`: variables named, `channel` given with `bot_token_env` (1 to 64
/// letters, digits, `-`, `_`), `api_url` https (http on loopback) without query, `team_id` a
/// workspace id ([`slack_team_id_ok`]); and builds
/// the user map from `principals` (each `slack_user_id` on an operator, once). `None` when
/// the file has no `slack:`.
pub(crate) fn slack(
    path: &Path,
    raw: Option<&Spanned<RawSlack>>,
    principals: &[Spanned<RawPrincipal>],
) -> Result<Option<SlackConfig>, ConfigError> {
    let users = users(path, principals)?;
    let Some(s) = raw else { return Ok(None) };
    let line = Some(s.referenced.line());
    let r = &s.value;
    let err = |m: String| at(path, line, format!("slack: {m}"));
    if r.signing_secret_env.is_empty() {
        return Err(err("signing_secret_env must name a variable".into()));
    }
    if r.bot_token_env.as_deref() == Some("") {
        return Err(err("bot_token_env must name a variable".into()));
    }
    let channel_ok = |c: &str| {
        (1..=64).contains(&c.len())
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    match (&r.bot_token_env, &r.channel) {
        (Some(_), None) => return Err(err("bot_token_env needs a channel (its id)".into())),
        (None, Some(_)) => return Err(err("channel needs bot_token_env".into())),
        (Some(_), Some(c)) if !channel_ok(c) => {
            return Err(err(format!("channel `{c}` is not a Slack channel id")));
        }
        _ => {}
    }
    let api_url = match &r.api_url {
        None => DEFAULT_API_URL.to_string(),
        Some(u) => api_url(u).map_err(err)?,
    };
    if let Some(t) = r.team_id.as_deref().filter(|t| !slack_team_id_ok(t)) {
        return Err(err(format!(
            "team_id `{t}` is not a Slack workspace id (T, then capitals and digits)"
        )));
    }
    Ok(Some(SlackConfig {
        signing_secret_env: r.signing_secret_env.clone(),
        bot_token_env: r.bot_token_env.clone(),
        channel: r.channel.clone(),
        api_url,
        users,
        team_id: r.team_id.clone(),
    }))
}

/// `u` without a trailing `/` when it is https (http on loopback) without credentials,
/// query or fragment.
fn api_url(u: &str) -> Result<String, String> {
    super::urls::web_url("api_url", u).map(|_| u.trim_end_matches('/').to_string())
}

/// Slack user id → principal name: only operators have one, each id once.
fn users(
    path: &Path,
    principals: &[Spanned<RawPrincipal>],
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for p in principals {
        let Some(id) = &p.value.slack_user_id else {
            continue;
        };
        let line = Some(p.referenced.line());
        let name = &p.value.name;
        if p.value.kind != "operator" {
            return Err(at(
                path,
                line,
                format!("principal `{name}`: only an operator has a slack_user_id"),
            ));
        }
        if !slack_user_id_ok(id) {
            return Err(at(
                path,
                line,
                format!(
                    "principal `{name}`: slack_user_id `{id}` is not a Slack user id (U or W, then capitals and digits)"
                ),
            ));
        }
        if let Some(other) = out.insert(id.clone(), name.clone()) {
            return Err(at(
                path,
                line,
                format!("principal `{name}`: slack_user_id `{id}` is also `{other}`'s"),
            ));
        }
    }
    Ok(out)
}

/// The Slack integration with its secrets read from the environment: the signing secret and,
/// when named, the bot token must be set and non-empty, and the signing secret (Slack's are 32
/// hex digits) may have no [`secret_flaw`] (found by review: any non-empty text was taken,
/// so a pasted line break or a placeholder made every signed request look forged, or a
/// guessable secret let anyone sign button clicks). Errors name the variable only. Without
/// `team_id` it warns that any workspace of the app may decide.
pub(crate) fn resolve(file: &Path, c: &SlackConfig) -> Result<Slack, ConfigError> {
    let read = |var: &str, what: &str| match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(at(
            file,
            None,
            format!("slack: environment variable {var} ({what}) is not set or empty"),
        )),
    };
    let signing_secret = read(&c.signing_secret_env, "signing_secret_env")?;
    if let Some((flaw, _)) = super::principals::secret_flaw(&signing_secret) {
        return Err(at(
            file,
            None,
            format!(
                "slack: the signing secret in {} (signing_secret_env) {flaw}; copy it from the app's Basic Information page",
                c.signing_secret_env
            ),
        ));
    }
    if c.team_id.is_none() {
        tracing::warn!(
            "slack: no team_id: a signed click from any workspace the app is installed in is honoured; set slack.team_id"
        );
    }
    Ok(Slack {
        signing_secret,
        bot_token: c
            .bot_token_env
            .as_deref()
            .map(|v| read(v, "bot_token_env"))
            .transpose()?,
        config: c.clone(),
    })
}
