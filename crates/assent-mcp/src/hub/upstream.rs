//! The hub's upstream MCP servers: how to reach one ([`UpstreamSpec`], from `mcp_upstreams`
//! in the gateway config), connecting to it (a child process over stdio or a streamable HTTP
//! endpoint, within 30 s, side by side with the others) and its tool list (read page by page within bounds: pages, tools,
//! time, no cursor twice), cached for the pin check of a call and dropped when the upstream
//! says its tools changed. An upstream that fails to start is kept with its
//! error. Gating is not done here: the call is.

use super::child::ChildTransport;
use rmcp::ServiceExt;
use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::{Peer, RoleClient, RunningService};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// How to reach one upstream MCP server (`mcp_upstreams.ALIAS` in the gateway config).
#[derive(Clone)]
pub struct UpstreamSpec {
    /// The command and its arguments (a child process spoken to over stdio); empty when `url`
    /// is given.
    pub command: Vec<String>,
    /// Extra environment variables for it.
    pub env: BTreeMap<String, String>,
    /// A streamable HTTP upstream's endpoint URL, instead of a command.
    pub url: Option<String>,
    /// Bearer token sent to a `url` upstream (`Authorization: Bearer …`); never logged.
    pub bearer_token: Option<String>,
    /// Variables of the gateway's environment a `command` upstream does not inherit (those
    /// holding the gateway's secrets); one named in `env` is still given its value there.
    pub withheld_env: Vec<String>,
}

impl std::fmt::Debug for UpstreamSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSpec")
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// How long the hub reuses an upstream's tool list for the pin check of a call. A client's
/// `tools/list` always reads it afresh, and `notifications/tools/list_changed` from the
/// upstream drops it at once.
const TOOLS_FRESH: Duration = Duration::from_secs(30);

/// The hub's client side of one upstream: counts the upstream's announcements that its tools
/// changed, so that a list read before the latest one is never taken for current.
#[derive(Clone, Default)]
pub(super) struct Watch {
    changes: Arc<std::sync::atomic::AtomicU64>,
}

impl Watch {
    /// How many changes the upstream has announced so far.
    fn changes(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl rmcp::ClientHandler for Watch {
    async fn on_tool_list_changed(&self, _ctx: rmcp::service::NotificationContext<RoleClient>) {
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A tool list as read: when its reading began, how many changes the upstream had announced
/// by then ([`Watch::changes`]), and the tools.
struct Reading {
    began: std::time::Instant,
    changes: u64,
    /// Shared, not copied, by every call's pin check that reads it.
    list: Arc<Vec<Tool>>,
}

/// How long an upstream is given to start: its child spawned or its URL reached, and its
/// answer to `initialize`. Upstreams start side by side ([`super::state::Hub::start`]), so
/// stalled ones hold the gateway's start-up this long in all, not this long each.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Most upstreams started at once by [`start_all`].
const STARTING_AT_ONCE: usize = 16;

/// Starts every upstream of `specs`, up to [`STARTING_AT_ONCE`] side by side, each within its
/// own [`START_TIMEOUT`] (counted from its own start, not from its wait for a turn); their
/// outcomes are logged, and they are held, in the order of their aliases whichever answered
/// first. One that fails (or whose start panicked) is kept with its error. Found by review:
/// they were started one after another, so N upstreams that never answered `initialize`
/// held the gateway's start-up N × 30 s.
pub(super) async fn start_all(specs: BTreeMap<String, UpstreamSpec>) -> BTreeMap<String, Upstream> {
    let turns = Arc::new(tokio::sync::Semaphore::new(STARTING_AT_ONCE));
    let mut starting = tokio::task::JoinSet::new();
    let mut aliases = HashMap::new();
    for (alias, spec) in specs {
        let turns = turns.clone();
        let task = starting.spawn(async move {
            let _turn = turns.acquire_owned().await;
            Upstream::start(&spec).await
        });
        aliases.insert(task.id(), alias);
    }
    let mut outcomes = BTreeMap::new();
    while let Some(done) = starting.join_next_with_id().await {
        let (id, outcome) = match done {
            Ok((id, outcome)) => (id, outcome),
            Err(e) => (
                e.id(),
                Started::Failed(anyhow::anyhow!("its start failed: {e}")),
            ),
        };
        if let Some(alias) = aliases.remove(&id) {
            outcomes.insert(alias, outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|(alias, outcome)| {
            let up = Upstream::started(&alias, outcome);
            (alias, up)
        })
        .collect()
}

/// How an upstream's start ([`Upstream::start`]) ended.
pub(super) enum Started {
    /// It answered `initialize`.
    Up(RunningService<RoleClient, Watch>),
    /// It could not be spawned or reached, or its handshake failed.
    Failed(anyhow::Error),
    /// It said nothing within [`START_TIMEOUT`].
    Silent,
}

/// One upstream as the hub holds it: its peer when connected, else why not.
pub(super) struct Upstream {
    pub(super) peer: Option<Peer<RoleClient>>,
    pub(super) error: Option<String>,
    watch: Watch,
    /// The last tool list read (never locked across a wait).
    tools: std::sync::Mutex<Option<Reading>>,
    /// Held while the list is read: one reading at a time, which the requests waiting for
    /// it share ([`Upstream::tools`]); it holds the last reading's failure and when that
    /// reading began, until one succeeds.
    fetching: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
    /// Set once this hub has checked the upstream's whole tool list against the pins (so a
    /// server first seen through a call is pinned whole); later calls check just their tool.
    pub(super) whole_checked: tokio::sync::OnceCell<()>,
    /// The running connection, taken out when it is closed ([`Upstream::take_service`]).
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Watch>>>,
}

impl Upstream {
    /// Starts the upstream `spec` describes: spawns its child or reaches its URL, and waits at
    /// most [`START_TIMEOUT`] for its `initialize`. Logs nothing, so that upstreams started
    /// side by side ([`super::state::Hub::start`]) are reported in the order of their aliases
    /// by [`Upstream::started`], whichever answered first.
    pub(super) async fn start(spec: &UpstreamSpec) -> Started {
        let started = async {
            if let Some(url) = &spec.url {
                let mut config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(t) = &spec.bearer_token {
                    config = config.auth_header(t.clone());
                }
                config.retry_config = std::sync::Arc::new(reconnect_backoff());
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    super::http_weigh::WeighedClient::new(http_client(url)?),
                    config,
                );
                return anyhow::Ok(Watch::default().serve(transport).await?);
            }
            let (prog, args) = spec
                .command
                .split_first()
                .ok_or_else(|| anyhow::anyhow!("empty command"))?;
            let transport = ChildTransport::spawn(prog, args, &spec.env, &spec.withheld_env)?;
            let service = Watch::default().serve(transport).await?;
            anyhow::Ok(service)
        };
        match tokio::time::timeout(START_TIMEOUT, started).await {
            Ok(Ok(service)) => Started::Up(service),
            Ok(Err(e)) => Started::Failed(e),
            Err(_) => Started::Silent,
        }
    }

    /// Upstream `alias` as [`Upstream::start`] left it, its outcome logged: connected, or kept
    /// with why not.
    pub(super) fn started(alias: &str, outcome: Started) -> Self {
        match outcome {
            Started::Up(service) => {
                tracing::info!(upstream = %alias, "MCP upstream connected");
                Upstream {
                    peer: Some(service.peer().clone()),
                    error: None,
                    watch: service.service().clone(),
                    tools: std::sync::Mutex::new(None),
                    fetching: tokio::sync::Mutex::new(None),
                    whole_checked: tokio::sync::OnceCell::new(),
                    service: tokio::sync::Mutex::new(Some(service)),
                }
            }
            Started::Failed(e) => {
                // One plain line (found by review): an HTTP upstream's JSON-RPC error message
                // at start-up, up to a mebibyte with newlines, forged lines in the log.
                let e =
                    assent_core::template::plain_line(&format!("{e:#}"), MAX_TOLD_CHARS, "… (cut)");
                tracing::error!(upstream = %alias, error = %e, "MCP upstream failed to start");
                Self::failed("failed to start (the gateway's log says why)".into())
            }
            Started::Silent => {
                let secs = START_TIMEOUT.as_secs();
                tracing::error!(upstream = %alias, "MCP upstream did not initialise within {secs} s");
                Self::failed(format!("did not initialise within {secs} s"))
            }
        }
    }

    /// An upstream that could not be connected, with why.
    fn failed(error: String) -> Self {
        Upstream {
            peer: None,
            error: Some(error),
            watch: Watch::default(),
            tools: std::sync::Mutex::new(None),
            fetching: tokio::sync::Mutex::new(None),
            whole_checked: tokio::sync::OnceCell::new(),
            service: tokio::sync::Mutex::new(None),
        }
    }

    /// The upstream's tools: read afresh when `fresh`, when the cached list is old, or when
    /// the upstream has announced a change since its reading began. One reading at a time,
    /// and a reading that began after this request arrived answers it too (found by review:
    /// the cache's lock was held across the whole reading, and every `tools/list` read
    /// afresh, so one agent keeping lists in flight queued every agent's calls on that
    /// upstream behind a reading each). Found by review: a change was a flag the first
    /// request took down, so while its reading was under way other calls took the list from
    /// before the change for current and passed the pin check with a definition the
    /// upstream no longer served; now a list counts for a request only if its reading began
    /// after every change announced before the request arrived (not every change since:
    /// review found that an upstream announcing a change during each reading then made every
    /// waiting request read again, one after another).
    pub(super) async fn tools(&self, fresh: bool) -> Result<Arc<Vec<Tool>>, String> {
        let peer = self.peer.as_ref().ok_or("not connected")?;
        let (asked, seen) = (std::time::Instant::now(), self.watch.changes());
        let current = |r: &Reading| {
            r.changes >= seen
                && if fresh {
                    r.began >= asked
                } else {
                    r.began.elapsed() < TOOLS_FRESH
                }
        };
        if !fresh && let Some(list) = self.cached(current) {
            return Ok(list);
        }
        let mut failed = self.fetching.lock().await;
        if let Some(list) = self.cached(current) {
            return Ok(list);
        }
        // A reading that began after this request arrived and failed answers it too (found by
        // review: each waiter read again in turn, so a list that timed out after 30 s held N
        // waiters N × 30 s).
        if let Some((_, why)) = failed.as_ref().filter(|(at, _)| *at >= asked) {
            return Err(why.clone());
        }
        let (began, changes) = (std::time::Instant::now(), self.watch.changes());
        let list = match list_tools_bounded(peer).await {
            Ok(list) => Arc::new(list),
            Err(why) => {
                *failed = Some((began, why.clone()));
                return Err(why);
            }
        };
        *failed = None;
        let reading = Reading {
            began,
            changes,
            list: list.clone(),
        };
        *self.tools.lock().unwrap_or_else(|p| p.into_inner()) = Some(reading);
        Ok(list)
    }

    /// The running connection, taken out to be closed ([`super::state::Hub::close_upstreams`]);
    /// later requests fail as to a gone upstream. `None` when it never connected or was taken.
    pub(super) async fn take_service(&self) -> Option<RunningService<RoleClient, Watch>> {
        self.service.lock().await.take()
    }

    /// The upstream's own words from its handshake — `{"instructions"?, "serverInfo"?}` as
    /// its `initialize` answer gave them (read once, when the hub connected) — for their pin
    /// check; `None` when it is not connected.
    pub(super) fn words(&self) -> Option<serde_json::Value> {
        let info = self.peer.as_ref()?.peer_info()?;
        let mut w = serde_json::json!({
            "serverInfo": serde_json::to_value(&info.server_info).unwrap_or_default(),
        });
        if let Some(i) = &info.instructions {
            w["instructions"] = serde_json::json!(i);
        }
        Some(w)
    }

    /// The cached list when its reading passes `ok`.
    fn cached(&self, ok: impl Fn(&Reading) -> bool) -> Option<Arc<Vec<Tool>>> {
        let cache = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        cache.as_ref().filter(|r| ok(r)).map(|r| r.list.clone())
    }
}

/// The HTTP client of the streamable HTTP upstream at `url`: rmcp's default client (no idle
/// connections kept; same-origin 307 and 308 redirects followed, at most 10), sending straight
/// to `url` when its host is this machine ([`assent_api::loopback_host`]), without the
/// environment's `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`. Found by review: rmcp's default
/// client sent a plain-http upstream on loopback (allowed because no packet leaves the
/// machine) through an env proxy, with its bearer token and every call's arguments and
/// result in cleartext to wherever the proxy is. Other hosts keep the environment's proxies.
/// A TCP (and TLS) connection must be made within [`CONNECT_TIMEOUT`]. What bounds the rest:
/// rmcp's own limits on an answer (16 MiB for one SSE event, 1 MiB for a JSON body, 64 KiB
/// for one answering the hub's answer or notification; an answer past them refused, and each
/// SSE event weighed before it is parsed, by the [`super::http_weigh::WeighedClient`]
/// wrapping this client), the 30 s of [`START_TIMEOUT`] of [`Upstream::start`] for
/// `initialize`, [`LIST_TIMEOUT`] for a tool list and [`CALL_TIMEOUT`] for a call, and
/// rmcp's 5 s for the POST of an answer to the upstream's request; no read timeout, since a
/// call's answer may legitimately come late and the upstream's event stream may be quiet for
/// long.
/// Errors: the client cannot be built (its TLS backend fails to load).
fn http_client(url: &str) -> anyhow::Result<reqwest::Client> {
    let b = assent_api::http_builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects());
    let loopback = reqwest::Url::parse(url).is_ok_and(|u| assent_api::loopback_host(&u));
    let b = if loopback { b.no_proxy() } else { b };
    Ok(b.build()?)
}

/// How long connecting to a streamable HTTP upstream may take (TCP and TLS): 10 s. Found by
/// review: there was no bound but the operating system's (some two minutes for a host that
/// drops the handshake), so such an upstream took the whole 30 s of start-up it is given as
/// if it had connected and said nothing, and every call to one that became unreachable (each
/// POST opens a connection: none is kept idle) waited for the system's timeout to fail.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Most redirects [`same_origin_redirects`] follows for one request (rmcp's default).
const MAX_REDIRECTS: usize = 10;

/// rmcp's redirect policy for its default client (private there, so restated): only a 307 or
/// 308 (which keep the method and body) to the same origin is followed, at most
/// [`MAX_REDIRECTS`] times; any other redirect is returned as the answer (a cross-origin one
/// would replay the session id and bearer token to another host).
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// A tool's definition as JSON (for the pin check).
pub(super) fn tool_json(t: &Tool) -> serde_json::Value {
    serde_json::to_value(t).unwrap_or(serde_json::Value::Null)
}

/// What an agent is told of a failed request to an upstream: the message of an MCP error the
/// upstream answered with; of any other failure only that the connection failed, the whole
/// error going to the gateway's log. Found by review: the transport's text (rmcp wrapping
/// reqwest) names the upstream's URL with its path and query, where hosted MCP servers often
/// carry their credential, and agents were shown it. The upstream's message is made one plain
/// line of at most [`MAX_TOLD_CHARS`] characters (controls, newlines and bidirectional marks as
/// spaces): it is logged (`tools/list failed: …`) and relayed. Found by review: a hostile
/// upstream's error message of `\n` and a fake log line (and terminal escapes, up to 16 MiB)
/// was written raw into the gateway's log on every `tools/list`.
pub(super) fn told(e: &rmcp::ServiceError) -> String {
    let plain = |t: &str| assent_core::template::plain_line(t, MAX_TOLD_CHARS, "… (cut)");
    match e {
        rmcp::ServiceError::McpError(d) => {
            format!("the upstream answered: {}", plain(&d.message))
        }
        _ => {
            tracing::warn!(error = %plain(&e.to_string()), "an MCP upstream request failed");
            "the connection to the upstream failed (the gateway's log says why)".into()
        }
    }
}

/// The most characters of an upstream's error message [`told`] keeps.
const MAX_TOLD_CHARS: usize = 1_000;

use crate::kit::{LIST_TIMEOUT, MAX_LIST_BYTES, MAX_PAGES, MAX_TOOLS, json_weight, too_many_bytes};

/// How long the hub waits for an upstream's answer to a `tools/call` (a tool may take its
/// time; an upstream that never answers must not hold the call forever).
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// Reads `peer`'s tool list page by page (not rmcp's `list_all_tools`, which follows
/// `nextCursor` without end): at most [`MAX_PAGES`] pages, [`MAX_TOOLS`] tools and
/// [`MAX_LIST_BYTES`] of them, within [`LIST_TIMEOUT`]; a cursor seen twice ends it. Errors (for this upstream only): a failed
/// page, or a bound passed, named.
async fn list_tools_bounded(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, String> {
    let read = async {
        let mut tools = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let (mut cursor, mut bytes) = (None, 0);
        for _ in 0..MAX_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page = peer
                .list_tools(Some(params))
                .await
                .map_err(|e| format!("tools/list failed: {}", told(&e)))?;
            bytes += page.tools.iter().map(json_weight).sum::<usize>();
            bytes += page.next_cursor.as_ref().map_or(0, json_weight);
            tools.extend(page.tools);
            if tools.len() > MAX_TOOLS {
                return Err(format!("tools/list lists more than {MAX_TOOLS} tools"));
            }
            if bytes > MAX_LIST_BYTES {
                return Err(too_many_bytes());
            }
            match page.next_cursor {
                None => return Ok(tools),
                Some(c) if !seen.insert(c.clone()) => {
                    return Err("tools/list repeats a cursor".to_string());
                }
                Some(c) => cursor = Some(c),
            }
        }
        Err(format!("tools/list has more than {MAX_PAGES} pages"))
    };
    tokio::time::timeout(LIST_TIMEOUT, read)
        .await
        .map_err(|_| format!("tools/list did not end within {} s", LIST_TIMEOUT.as_secs()))?
}

/// How the hub reconnects a streamable HTTP upstream's event stream: rmcp's doubling backoff
/// from 1 s, each wait at most 30 s. Found by review: rmcp's default has no ceiling, and with
/// the 10 s connect bound each failed attempt came quickly, so after a ten-minute outage the
/// next attempt came some 8.5 minutes after the upstream was back (hours after a longer one),
/// its `list_changed` notifications missed meanwhile.
pub(crate) fn reconnect_backoff() -> rmcp::transport::common::client_side_sse::ExponentialBackoff {
    let mut backoff = rmcp::transport::common::client_side_sse::ExponentialBackoff::default();
    backoff.max_delay = Some(std::time::Duration::from_secs(30));
    backoff
}

#[cfg(test)]
mod backoff_tests {
    use rmcp::transport::common::client_side_sse::SseRetryPolicy;

    /// The reconnect waits double from 1 s and stop growing at 30 s; they never give up.
    #[test]
    fn reconnect_waits_are_capped_at_30_seconds() {
        let b = super::reconnect_backoff();
        let secs = |n| b.retry(n).map(|d| d.as_secs());
        assert_eq!((secs(0), secs(3), secs(5)), (Some(1), Some(8), Some(30)));
        assert_eq!((secs(40), secs(10_000)), (Some(30), Some(30)));
    }
}
