//! Calls out to Slack (issue 15 §4) under the webhooks' outbound rules: only URLs the
//! configuration names (the Web API at `slack.api_url`) or that Slack's signed payload names
//! and that lie on Slack's own host (`response_url` on `https://hooks.slack.com`, or on the
//! configured `api_url`'s origin), 5 s to connect and 15 s in all, no redirects followed. Web
//! API methods are POSTed as JSON with the bot token; an answer larger than [`MAX_ANSWER`] is
//! an error read no further, and one whose `ok` is not `true` is an error naming Slack's
//! `error`.

use crate::config::slack::Slack;
use serde_json::Value;
use std::sync::OnceLock;
use std::time::Duration;

/// The HTTP clients for Slack (no redirects; 5 s to connect, 15 s per request): the first
/// through the environment's proxies, the second straight (for a loopback `api_url`, whose
/// bot token and messages would otherwise cross the network in clear text to the proxy; the
/// rule of `assent_api::direct_to_loopback`, chosen per URL).
fn http(url: &str) -> Option<&'static reqwest::Client> {
    static CLIENTS: OnceLock<[Option<reqwest::Client>; 2]> = OnceLock::new();
    let build = |direct: bool| {
        let b = assent_api::http_builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .redirect(reqwest::redirect::Policy::none());
        let b = if direct { b.no_proxy() } else { b };
        b.build().ok()
    };
    let clients = CLIENTS.get_or_init(|| [build(false), build(true)]);
    let direct = url::Url::parse(url).is_ok_and(|u| assent_api::loopback_host(&u));
    clients[usize::from(direct)].as_ref()
}

/// Why a Web API call failed (network error, HTTP status, or Slack's `error`), and the wait
/// Slack asked for before the next call (the `Retry-After` of its `429`,
/// [`crate::deliveries::retry_after`]).
#[derive(Debug)]
pub struct Failed {
    /// What went wrong, for logs and dead letters.
    pub why: String,
    /// The wait Slack asked for, at most 60 s.
    pub retry_after: Option<Duration>,
    /// Slack refused this message itself ([`REFUSED_FOR_GOOD`]): the same call is refused
    /// again, so it is not retried.
    pub for_good: bool,
}

/// Slack's `error` codes that refuse the message sent, not the moment or the connection: a
/// retry of the same call gets the same answer. Found by review: they were retried six times
/// over about half a minute, and every other approval's message waited behind them on the
/// bot's one cursor. (Auth and channel errors are kept retrying: fixing the configuration
/// mends them.)
pub const REFUSED_FOR_GOOD: [&str; 8] = [
    "invalid_blocks",
    "invalid_blocks_format",
    "msg_too_long",
    "msg_blocks_too_long",
    "no_text",
    "message_not_found",
    "cant_update_message",
    "edit_window_closed",
];

impl From<String> for Failed {
    fn from(why: String) -> Self {
        Failed {
            why,
            retry_after: None,
            for_good: false,
        }
    }
}

impl From<&str> for Failed {
    fn from(why: &str) -> Self {
        why.to_string().into()
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// Calls Web API `method` (e.g. `chat.postMessage`) with `body`: Slack's answer when it says
/// `ok: true`; else why not ([`Failed`]). Needs the bot token.
pub async fn call(slack: &Slack, method: &str, body: &Value) -> Result<Value, Failed> {
    let token = slack.bot_token.as_deref().ok_or("no bot token")?;
    let url = format!("{}/{method}", slack.config.api_url);
    let http = http(&url).ok_or("no HTTP client")?;
    let r = http
        .post(&url)
        .bearer_auth(token)
        .header("content-type", "application/json; charset=utf-8")
        .header("user-agent", "assent-slack")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if !r.status().is_success() {
        return Err(Failed {
            why: format!("{method}: HTTP {}", r.status().as_u16()),
            retry_after: crate::deliveries::retry_after(&r),
            for_good: false,
        });
    }
    let v = read_answer(r, method).await?;
    if v["ok"] != Value::Bool(true) {
        let error = v["error"].as_str().unwrap_or("not ok");
        return Err(Failed {
            why: format!("{method}: {}", short_error(error)),
            retry_after: None,
            for_good: REFUSED_FOR_GOOD.contains(&error),
        });
    }
    Ok(v)
}

/// The most characters of Slack's `error` kept (its real codes are a few words:
/// `channel_not_found`, `ratelimited`).
pub const MAX_ERROR_CHARS: usize = 200;

/// Slack's `error` text as logs and dead letters keep it: one plain line
/// ([`plain_line`]: control and invisible characters replaced by spaces), cut to
/// [`MAX_ERROR_CHARS`] (then `…`). Attack (found by review): an `api_url` answering
/// `{"ok":false,"error":"<1 MiB with newlines>"}` had the whole text logged at every attempt
/// (forging log lines) and kept in each dead letter; one holding U+202E reversed how the rest
/// of the line reads in a terminal or the dashboard.
///
/// [`plain_line`]: assent_core::template::plain_line
fn short_error(e: &str) -> String {
    assent_core::template::plain_line(e, MAX_ERROR_CHARS, "…")
}

/// The most bytes of a Web API answer read: far above any real one (`chat.postMessage` answers
/// with the message it posted, a few KiB at most).
pub const MAX_ANSWER: usize = 1 << 20;

/// The JSON answer `r` of Web API `method`, read at most [`MAX_ANSWER`] bytes: an answer
/// larger — said by its `Content-Length` or found while reading — is a failure ("answer too
/// large") when it is found, before more is read, retried and dead-lettered as any other.
///
/// Attack (found by review): the answer was read whole into memory; a mis-configured or
/// compromised `slack.api_url` (or a hostile network path to it) answering with an endless
/// body exhausted the gateway's memory. A body dripped slowly ends at the client's 15 s.
async fn read_answer(mut r: reqwest::Response, method: &str) -> Result<Value, Failed> {
    let too_large = || {
        Failed::from(format!(
            "{method}: answer too large (over {MAX_ANSWER} bytes)"
        ))
    };
    if r.content_length().is_some_and(|n| n > MAX_ANSWER as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = r
        .chunk()
        .await
        .map_err(|e| format!("{method}: {}", e.without_url()))?
    {
        if body.len().saturating_add(chunk.len()) > MAX_ANSWER {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body)
        .map_err(|e| format!("{method}: the answer is not JSON ({e})").into())
}

/// Whether `url` is a `response_url` the gateway may POST to: `https://hooks.slack.com/…`
/// (no credentials, default port), or a URL on the origin of the configured `api_url` (a
/// Slack-compatible host the operator chose, e.g. a test's).
pub fn response_url_ok(slack: &Slack, url: &str) -> bool {
    let Ok(u) = url::Url::parse(url) else {
        return false;
    };
    if !u.username().is_empty() || u.password().is_some() {
        return false;
    }
    let slack_host =
        u.scheme() == "https" && u.host_str() == Some("hooks.slack.com") && u.port().is_none();
    let api_origin = url::Url::parse(&slack.config.api_url)
        .is_ok_and(|api| api.origin() == u.origin() && api.host_str() != Some("slack.com"));
    slack_host || api_origin
}

/// POSTs `body` to `response_url` (Slack's reply channel for one interaction), if it is one
/// the gateway may reach ([`response_url_ok`]); a failure is logged (the decision, if any,
/// stands).
pub async fn respond(slack: &Slack, response_url: &str, body: &Value) {
    if !response_url_ok(slack, response_url) {
        tracing::warn!("slack: response_url is not on Slack's host; no reply sent");
        return;
    }
    let Some(http) = http(response_url) else {
        return;
    };
    let sent = http
        .post(response_url)
        .header("content-type", "application/json")
        .header("user-agent", "assent-slack")
        .body(body.to_string())
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => tracing::warn!(status = r.status().as_u16(), "slack: response_url refused"),
        Err(e) => tracing::warn!(error = %e.without_url(), "slack: response_url unreachable"),
    }
}
