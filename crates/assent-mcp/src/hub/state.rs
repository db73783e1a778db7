//! The hub's shared state ([`Hub`]): the upstream connections, the gateway client
//! (`assent_api::Client`, one per process; each key's [`Gateway`] is it with that key) and
//! settings, the agent each key acts for (`GET /v1/whoami`, cached), the tools it declares
//! per upstream, and the calls that became MCP tasks with their owners. One per process, shared by every client session; the
//! per-request work is the handler's and the call's.

use super::upstream::{Upstream, UpstreamSpec};
use crate::gateway::Gateway;
use crate::kit::{ProxyConfig, failure, status_line};
use assent_api::identity::WhoAmI;
use assent_api::tools::{ToolCheckRequest, ToolCheckResponse, ToolState};
use assent_api::{Client, ClientError, Method};
use rmcp::model::CallToolRequestParams;
use rmcp::task_manager::TaskManager;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The upstream connections and the gateway client shared by every client session.
pub struct Hub {
    pub(super) upstreams: BTreeMap<String, Upstream>,
    /// The gateway client every key's [`Gateway`] shares (its connection pool and timeouts),
    /// with no key of its own.
    api: Client,
    poll_seconds: u64,
    pub(super) progress_seconds: u64,
    /// The agent of each key (by its SHA-256), and when the gateway said so
    /// ([`Hub::agent_of`]): kept [`DECLARED_FOR`].
    agents: Mutex<HashMap<String, (Instant, String)>>,
    /// The gateway's word on what the agent of each key (by its SHA-256) declares on each
    /// upstream alias, and when it was asked ([`Hub::declared`]): kept [`DECLARED_FOR`].
    declarations: Mutex<HashMap<(String, String), (Instant, Declared)>>,
    /// Calls that became MCP tasks (SEP-2663), and the agent each belongs to.
    pub(super) tasks: TaskManager,
    pub(super) task_owners: Mutex<super::owners::TaskOwners>,
    /// The bytes held for calls in flight, each agent's and in all ([`super::held`]).
    pub(super) held: super::held::HeldCalls,
    /// Each agent's current session for its calls from clients that keep none
    /// ([`Hub::stateless_session`]).
    stateless: Mutex<HashMap<String, Stateless>>,
    /// This process's hub token ([`assent_api::tools::hub_token`]): a gateway in the same
    /// process takes the hub's pin reports as the gateway's own, for every agent.
    hub_token: &'static str,
    /// The calls under way of each client session (by the session the gateway counts them
    /// in), withdrawn when the client is gone ([`Hub::client_gone`]).
    calls: Mutex<HashMap<String, Vec<SessionCall>>>,
    /// Numbers the calls of [`Hub::calls`].
    call_seq: std::sync::atomic::AtomicU64,
    /// Every gateway client's proposals on their way ([`Hub::settle_proposals`]).
    settling: tokio_util::task::TaskTracker,
    /// Set, once for good, when the process serving the hub is ending ([`Hub::shutting_down`]):
    /// no new session or call is taken from then on ([`Hub::closing`]).
    closing: std::sync::atomic::AtomicBool,
}

/// How long `assent serve`'s hub waits, as the process ends, for what its calls left on their
/// way ([`Hub::shutting_down`]): 15 s — past the gateway's 10 s wait for a busy database, and
/// with the server's 10 s drain of its connections, up to 5 s more for a webhook delivery in
/// flight and its last audit checkpoint, within the 30 s a service manager gives a stop
/// (`TimeoutStopSec=30s` in `deploy/assent.service`).
pub const SHUTDOWN_SETTLE: Duration = Duration::from_secs(15);

/// The JSON-RPC error code of a session or call refused because the gateway is shutting
/// down (as the stdio proxy's busy answer, `-32000`: a server error; try again later).
const SHUTTING_DOWN: i32 = -32000;

/// The error a new session or call gets once the hub is closing ([`Hub::closing`]).
pub(super) fn shutting_down_error() -> rmcp::ErrorData {
    rmcp::ErrorData::new(
        rmcp::model::ErrorCode(SHUTTING_DOWN),
        "assent: the gateway is shutting down; nothing was proposed or run: send it again once the gateway is back",
        None,
    )
}

/// The list of [`Hub::under_way`] that holds the calls that became MCP tasks (no client
/// session's id: those are never empty and never start with a NUL).
pub(super) const PROCESS_TASKS: &str = "\u{0}tasks";

/// How many withdrawals [`Hub::client_gone`] has in flight at once (each a gateway request).
const MAX_WITHDRAWING: usize = 16;

/// A call under way in a client session, as [`Hub::client_gone`] stops it.
struct SessionCall {
    id: u64,
    held: Arc<crate::kit::HoldState>,
    gw: Gateway,
    job: tokio::task::AbortHandle,
}

/// A call's place among its session's calls ([`Hub::under_way`]): dropped when the call ends.
pub(super) struct UnderWay {
    hub: Arc<Hub>,
    session: String,
    id: u64,
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        let mut all = self.hub.calls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = all.get_mut(&self.session) {
            list.retain(|c| c.id != self.id);
            if list.is_empty() {
                all.remove(&self.session);
            }
        }
    }
}

/// Where the hub reaches its gateway.
#[derive(Debug, Clone)]
pub enum GatewayAt {
    /// A gateway's URL (`assent mcp --hub`: a gateway elsewhere).
    Url(String),
    /// The Unix socket of the gateway in the same process (`assent serve`): its connections
    /// count against no client address's `max_connections_per_address` (found by review:
    /// over loopback TCP every agent's held hub call was a connection from 127.0.0.1, so a
    /// thousand held calls, or a local agent's idle streams, cut the hub off from its
    /// gateway for every agent), and no other user can open one.
    #[cfg(unix)]
    Socket(std::path::PathBuf),
}

impl Hub {
    /// Starts every upstream, side by side ([`super::upstream::start_all`]: stalled ones hold
    /// start-up 30 s in all, not 30 s each); one that cannot start is kept with its error
    /// (reported on `tools/call` and in the log) and does not stop the others. The gateway client (at
    /// `gateway`) gives up connecting after 5 s and on a request after `poll_seconds` + 30 s;
    /// errors when a URL is not a gateway URL or the client cannot be built.
    pub async fn start(
        specs: BTreeMap<String, UpstreamSpec>,
        gateway: GatewayAt,
        poll_seconds: u64,
        progress_seconds: u64,
    ) -> anyhow::Result<Arc<Self>> {
        let (connect, total) = (
            Duration::from_secs(5),
            Duration::from_secs(poll_seconds + 30),
        );
        let api = match &gateway {
            GatewayAt::Url(url) => Client::with_timeouts(url, "", connect, total)?,
            #[cfg(unix)]
            GatewayAt::Socket(path) => Client::over_unix_socket(path, "", connect, total)?,
        };
        // 244 random bits; a gateway in another process never holds the same.
        let hub_token = assent_api::tools::hub_token_init(|| {
            format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            )
        });
        let upstreams = super::upstream::start_all(specs).await;
        Ok(Arc::new(Self {
            upstreams,
            api,
            poll_seconds,
            progress_seconds,
            agents: Mutex::default(),
            declarations: Mutex::default(),
            tasks: TaskManager::new(),
            task_owners: Mutex::default(),
            held: super::held::HeldCalls::default(),
            stateless: Mutex::default(),
            hub_token,
            calls: Mutex::default(),
            call_seq: std::sync::atomic::AtomicU64::new(0),
            settling: tokio_util::task::TaskTracker::new(),
            closing: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Notes a call of client session `session` under way (its hold `held`, its gateway
    /// client `gw`, its task `job`) until the returned mark is dropped: the client gone, it is
    /// stopped ([`Hub::client_gone`]). Once the hub is closing ([`Hub::shutting_down`] swept its
    /// calls, or is about to: the flag is set under the same lock) the call is not noted but
    /// stopped at once, as the sweep would have: no call slips between the two.
    pub(super) fn under_way(
        self: &Arc<Self>,
        session: &str,
        held: Arc<crate::kit::HoldState>,
        gw: Gateway,
        job: tokio::task::AbortHandle,
    ) -> UnderWay {
        let id = self.call_seq.fetch_add(1, Ordering::SeqCst);
        let mut all = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if self.closing() {
            drop(all);
            let why = "the gateway is shutting down";
            drop(super::stop::stop_now(&job, &held, &gw, why));
        } else {
            let call = SessionCall { id, held, gw, job };
            all.entry(session.to_string()).or_default().push(call);
        }
        UnderWay {
            hub: self.clone(),
            session: session.to_string(),
            id,
        }
    }

    /// The client of session `session` is gone without cancelling its calls (its stdio closed,
    /// or its HTTP streams all dropped and not resumed: `transport`): each call still
    /// under way is stopped as a `notifications/cancelled` stops it — a held one withdrawn,
    /// one not forwarded yet never forwarded, one forwarded run to its end and recorded —
    /// found by review: it stayed held until the session idled out (or, over stdio, until its
    /// approval expired), open to an operator's approval for a client that would never take
    /// the answer. Calls that became tasks are not in the session's list: they outlive it.
    pub async fn client_gone(&self, session: &str) {
        let calls = self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session)
            .unwrap_or_default();
        if !calls.is_empty() {
            tracing::info!(
                session,
                calls = calls.len(),
                "an MCP client is gone: its calls under way are stopped"
            );
        }
        // Every call is marked stopped first (none is forwarded from now on), then their
        // approvals are withdrawn, [`MAX_WITHDRAWING`] at a time. Found by review: withdrawn
        // one after the other, each a gateway request (up to its busy timeout), a client gone
        // with many held calls left the last ones open to an operator's approval for N round
        // trips.
        let why = "the MCP client disconnected";
        let held: Vec<_> = calls
            .into_iter()
            .filter_map(|c| Some((super::stop::halt(&c.job, &c.held, why)?, c)))
            .collect();
        let mut withdrawing = tokio::task::JoinSet::new();
        for (approval, c) in held {
            while withdrawing.len() >= MAX_WITHDRAWING {
                withdrawing.join_next().await;
            }
            withdrawing.spawn(super::stop::withdraw(&c.job, &c.gw, &approval, why));
        }
        while withdrawing.join_next().await.is_some() {}
    }

    /// Waits, up to `bound`, for the proposals of every call still on its way to be answered
    /// and settled ([`Gateway::settle_proposals`]): the stdio hub calls it before its process
    /// ends, so that a call its client left while it was being proposed is withdrawn.
    pub async fn settle_proposals(&self, bound: std::time::Duration) -> bool {
        crate::gateway::settle_tracked(&self.settling, bound).await
    }

    /// The process serving this hub (`assent serve`) is ending: the hub closes first — no new
    /// session or call is taken ([`Hub::closing`]: refused with a JSON-RPC error saying so,
    /// nothing proposed) — then the calls under way of every client session, and of this
    /// process's MCP tasks (they live in the process and die with it), are stopped as if their
    /// clients were gone ([`Hub::client_gone`]), their withdrawals all at once, and what is
    /// still on its way — proposals and the withdrawals they leave, forwarded calls and their
    /// result reports — is waited for ([`Hub::settle_proposals`]), within `bound`
    /// ([`SHUTDOWN_SETTLE`] in `assent serve`) less the close's time (5 s, or `bound` when
    /// shorter); then, within that reserved time, the upstreams are closed
    /// ([`Hub::close_upstreams`]: a stdio upstream gets EOF, then `SIGTERM`, then `SIGKILL`). To be awaited while the gateway still serves
    /// (the hub reaches it over HTTP). Found by review: on SIGTERM a proposal in flight landed
    /// after the hub was gone and stayed pending, open to an operator's approval for a client
    /// long gone; then, that a call arriving during the settling was proposed and left pending,
    /// and that withdrawals awaited one after the other took the shutdown past its bound.
    /// `false` when some were still under way at the bound.
    pub async fn shutting_down(&self, bound: Duration) -> bool {
        let until = tokio::time::Instant::now() + bound;
        let calls = {
            let mut all = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            self.closing.store(true, Ordering::SeqCst);
            std::mem::take(&mut *all)
        };
        let n: usize = calls.values().map(Vec::len).sum();
        if n > 0 {
            tracing::info!(
                calls = n,
                "shutting down: the MCP hub's calls under way are stopped"
            );
        }
        let why = "the gateway is shutting down";
        for c in calls.into_values().flatten() {
            // Its withdrawal runs on the tracker the settling waits for.
            drop(super::stop::stop_now(&c.job, &c.held, &c.gw, why));
        }
        // The upstreams' close is given its own time out of `bound` (found by review: it had
        // what the settling left, none when a forwarded call ran to the bound, and the
        // upstreams were killed by the process's end without `SIGTERM`).
        let closing = super::child::CLOSE_WITHIN.min(bound);
        let settle_until = until.checked_sub(closing).unwrap_or(until);
        let left = settle_until.saturating_duration_since(tokio::time::Instant::now());
        let settled = self.settle_proposals(left).await;
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        self.close_upstreams(left.max(closing)).await;
        settled
    }

    /// Closes every upstream connection side by side, within `within`: a stdio upstream is
    /// ended gracefully — its stdin closed, then `SIGTERM`, then `SIGKILL`
    /// (`super::child::ChildTransport`'s `close`). One not closed in time is left to the
    /// process's end, which kills it. Found by review: the upstreams were always left to the
    /// process's end, so an upstream that saves its state on `SIGTERM` lost it at every stop.
    pub async fn close_upstreams(&self, within: Duration) {
        let mut closing = tokio::task::JoinSet::new();
        for up in self.upstreams.values() {
            if let Some(mut service) = up.take_service().await {
                closing.spawn(async move { service.close_with_timeout(within).await });
            }
        }
        while let Some(closed) = closing.join_next().await {
            if !matches!(closed, Ok(Ok(Some(_)))) {
                tracing::warn!("an MCP upstream did not close in time");
            }
        }
    }

    /// Whether the process serving the hub is ending ([`Hub::shutting_down`]): a new session
    /// or call is refused.
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// The calls of this process's MCP tasks still under way are stopped as if their client had
    /// cancelled them ([`Hub::client_gone`] of [`PROCESS_TASKS`]). Only the stdio hub calls it,
    /// as it ends: its tasks live in its process and die with it, so their held approvals are
    /// withdrawn rather than left for nobody to read (found by review). The hub in `assent
    /// serve` keeps its tasks for clients that come back on another connection.
    pub async fn tasks_gone(&self) {
        self.client_gone(PROCESS_TASKS).await;
    }

    /// A gateway client acting with agent key `key` for `agent`, on upstream `server`, in
    /// session `session` (sharing the hub's connection pool).
    pub(super) fn gateway(&self, key: &str, agent: &str, server: &str, session: &str) -> Gateway {
        Gateway::with_api(
            self.api.with_key(key),
            ProxyConfig {
                gateway_url: self.api.base_url().to_string(),
                api_key: key.to_string(),
                agent: agent.to_string(),
                server: server.to_string(),
                session_id: session.to_string(),
                // The hub serves many agents' people; it names none of them.
                on_behalf_of: None,
                command: Vec::new(),
                poll_seconds: self.poll_seconds,
                progress_seconds: self.progress_seconds,
                // The hub serves tools only.
                pass_ungated: false,
            },
        )
        .settling_on(self.settling.clone())
        .reporting_as_hub(self.hub_token)
    }

    /// Reports `alias`'s tool definitions for `agent` with its key `key` (`POST
    /// /v1/tools/check` with the hub token: the gateway of this process pins them for every
    /// agent, any other gateway for `agent` alone, as a relay's) and returns the gateway's
    /// word per tool name; `Err(why)` when it cannot be had (then nothing is verified: the
    /// tools are not shown and every call is refused).
    pub(super) async fn check_pins(
        &self,
        key: &str,
        agent: &str,
        alias: &str,
        tools: &[Value],
    ) -> Result<HashMap<String, ToolState>, String> {
        let report = ToolCheckRequest {
            agent: agent.to_string(),
            server: alias.to_string(),
            tools: tools.to_vec(),
            handshake: None,
            hub_token: Some(self.hub_token.to_string()),
        };
        let r = self.report(key, &report, "the tool list").await?;
        Ok(r.tools.into_iter().map(|t| (t.name.clone(), t)).collect())
    }

    /// Reports upstream `alias`'s own words from its handshake (`words`: `{"instructions"?,
    /// "serverInfo"?}`) for `agent` with its key `key`, as [`Hub::check_pins`] reports its
    /// tools, and returns the gateway's word on them (its `pinned` entry is what the hub may
    /// show); `Err(why)` when it cannot be had within
    /// [`crate::kit::HANDSHAKE_CHECK_TIMEOUT`] (then nothing of them is shown).
    pub(super) async fn check_handshake(
        &self,
        key: &str,
        agent: &str,
        alias: &str,
        words: &Value,
    ) -> Result<ToolState, String> {
        let report = ToolCheckRequest {
            agent: agent.to_string(),
            server: alias.to_string(),
            tools: Vec::new(),
            handshake: Some(words.clone()),
            hub_token: Some(self.hub_token.to_string()),
        };
        let what = "the server's instructions";
        let limit = crate::kit::HANDSHAKE_CHECK_TIMEOUT;
        let asked = tokio::time::timeout(limit, self.report(key, &report, what));
        let Ok(r) = asked.await else {
            return Err(format!(
                "the gateway did not check {what} within {} s",
                limit.as_secs()
            ));
        };
        let r = r?;
        r.handshake
            .ok_or_else(|| format!("the gateway did not check {what}"))
    }

    /// `POST /v1/tools/check` of `report` with key `key`: the gateway's answer, or why
    /// `what` (the tool list, the server's instructions) was not checked.
    async fn report(
        &self,
        key: &str,
        report: &ToolCheckRequest,
        what: &str,
    ) -> Result<ToolCheckResponse, String> {
        let body = serde_json::to_value(report).map_err(|e| e.to_string())?;
        let api = self.api.with_key(key);
        match api
            .raw_ok(Method::POST, "/v1/tools/check", Some(&body))
            .await
        {
            Ok(v) => serde_json::from_value::<ToolCheckResponse>(v)
                .map_err(|e| format!("the gateway's answer to {what} did not parse ({e})")),
            Err(e) => Err(failure(&e, |e| {
                format!("the gateway refused {what} ({})", status_line(e))
            })),
        }
    }

    /// The session `agent`'s calls from a client that keeps no MCP session are counted in (the
    /// 2026-07-28 revision is stateless): `mcp-stateless-` and a random id, the same while the
    /// agent keeps calling, a new one after [`STATELESS_IDLE`] without a call or
    /// [`STATELESS_LONGEST`] in all. Found by review: each such call was a session of its own,
    /// so no threshold counted earlier calls and untrusted content never raised the next
    /// call's risk; and one session per agent for ever (the first fix) made a "session" grant
    /// a grant for ever and a session's risk marks permanent.
    ///
    /// A session never idles out while a call of it is under way (held for a person, say),
    /// and its idle time counts from its last call's end: the returned [`InFlight`] marks the
    /// call, until it is dropped (found by review: a call held for 35 minutes was marked in
    /// a session its agent's next call had already left). [`STATELESS_LONGEST`] ends it
    /// however busy: the calls under way keep it, the next call starts another (found by
    /// review: an agent that always kept one call held kept its session, and a "session"
    /// grant in it, for ever).
    pub(super) fn stateless_session(&self, agent: &str) -> (String, InFlight) {
        self.stateless_session_at(agent, Instant::now())
    }

    /// [`Hub::stateless_session`] at `now`.
    fn stateless_session_at(&self, agent: &str, now: Instant) -> (String, InFlight) {
        let mut all = self.stateless.lock().expect("stateless sessions");
        let s = all
            .entry(agent.to_string())
            .or_insert_with(|| Stateless::new(now));
        let idle = s.usage.last.lock().expect("last call").to_owned();
        let busy = s.usage.inflight.load(Ordering::SeqCst) > 0;
        let idled_out = !busy && now.saturating_duration_since(idle) >= STATELESS_IDLE;
        if idled_out || now.saturating_duration_since(s.began) >= STATELESS_LONGEST {
            *s = Stateless::new(now);
        }
        *s.usage.last.lock().expect("last call") = now;
        s.usage.inflight.fetch_add(1, Ordering::SeqCst);
        (s.id.clone(), InFlight(s.usage.clone()))
    }

    /// Whether `alias` is one of the hub's upstreams.
    pub fn has_upstream(&self, alias: &str) -> bool {
        self.upstreams.contains_key(alias)
    }

    /// The tool definitions upstream `alias` advertises now (`tools/list` entries as JSON, the
    /// list the hub's pin check reads, reused for up to its freshness window): for the pin
    /// check of an operator's dry run. `Err` says why they could not be had.
    pub async fn upstream_tools(&self, alias: &str) -> Result<Vec<Value>, String> {
        let up = self
            .upstreams
            .get(alias)
            .ok_or_else(|| format!("no MCP upstream `{alias}`"))?;
        let list = up.tools(false).await?;
        Ok(list.iter().map(super::upstream::tool_json).collect())
    }

    /// Calls `tool` on upstream `alias` directly, not through the gate: for an operator's dry
    /// run of a held call (the rule's `dry_run_tool`), never for an agent. `Ok` is the
    /// `tools/call` result as JSON; `Err` says why it could not run.
    pub async fn call_upstream(
        &self,
        alias: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<Value, String> {
        let up = self
            .upstreams
            .get(alias)
            .ok_or_else(|| format!("no MCP upstream `{alias}`"))?;
        let peer = up.peer.as_ref().ok_or_else(|| {
            format!(
                "upstream `{alias}` is unavailable: {}",
                up.error.as_deref().unwrap_or("not connected")
            )
        })?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(m) = arguments {
            params = params.with_arguments(m.clone());
        }
        let r = tokio::time::timeout(Duration::from_secs(60), peer.call_tool(params))
            .await
            .map_err(|_| format!("`{tool}` on `{alias}` did not answer within 60 s"))?
            .map_err(|e| format!("`{tool}` on `{alias}` failed: {e}"))?;
        serde_json::to_value(r).map_err(|e| e.to_string())
    }

    /// The agent a key acts for (`GET /v1/whoami`), kept [`DECLARED_FOR`] per key (by its
    /// SHA-256: the hub holds no key it is not using). `Err(why)` when the key is not an
    /// agent's, is refused, or the gateway cannot be asked; such an answer is not kept. Found
    /// by review: kept for good, a key a reload gave to another agent had every call proposed
    /// for its old agent, refused by the gateway, until the hub restarted.
    pub(super) async fn agent_of(&self, key: &str) -> Result<String, String> {
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(key.as_bytes()));
        if let Some((when, a)) = self.agents.lock().expect("agents").get(&digest)
            && when.elapsed() < DECLARED_FOR
        {
            return Ok(a.clone());
        }
        match self.api.with_key(key).whoami().await {
            Ok(WhoAmI::Agent { agent_id, .. }) => {
                let mut all = self.agents.lock().expect("agents");
                all.retain(|_, (when, _)| when.elapsed() < DECLARED_FOR);
                all.insert(digest, (Instant::now(), agent_id.clone()));
                Ok(agent_id)
            }
            // A 2xx answer that names no agent.
            Ok(WhoAmI::Operator { .. }) | Err(ClientError::Body { .. }) => {
                Err("this key is not an agent's key".into())
            }
            Err(e) => Err(failure(&e, |e| {
                format!(
                    "the key was refused ({})",
                    e.code().unwrap_or("UNAUTHORIZED")
                )
            })),
        }
    }

    /// What `agent` declares on `alias` (`GET /v1/agents/{agent}/mcp-servers/{alias}/tools`
    /// with the caller's `key`, whose agent [`Hub::agent_of`] established): the gateway's
    /// answer is kept [`DECLARED_FOR`] per key and alias (found by review: every
    /// `tools/call` asked it again, one more request on the hot path), an answer that could
    /// not be had is not kept. The gateway checks the declaration again when the call is
    /// proposed, so a reload that removes one is in force there at once.
    pub(super) async fn declared(&self, key: &str, agent: &str, alias: &str) -> Declared {
        // Kept per key (its digest), not per agent: another key of the agent, revoked since,
        // gets its own answer from the gateway (found by review).
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(key.as_bytes()));
        let at = (digest, alias.to_string());
        if let Some((when, d)) = self.declarations.lock().expect("declarations").get(&at)
            && when.elapsed() < DECLARED_FOR
        {
            return d.clone();
        }
        let d = match self.api.with_key(key).declared_tools(agent, alias).await {
            Ok(d) => Declared::Tools(d.tools),
            Err(e) if e.status() == Some(404) => Declared::Not,
            Err(e) => {
                return Declared::Unknown(failure(&e, status_line));
            }
        };
        let mut all = self.declarations.lock().expect("declarations");
        all.retain(|_, (when, _)| when.elapsed() < DECLARED_FOR);
        all.insert(at, (Instant::now(), d.clone()));
        d
    }
}

/// How long the hub keeps the gateway's word on an agent's declarations, and on the agent a
/// key acts for: 5 s.
pub(super) const DECLARED_FOR: Duration = Duration::from_secs(5);

/// What an agent declares on one upstream, as the gateway said.
#[derive(Debug, Clone)]
pub(super) enum Declared {
    /// The upstream with these tools (`None`: all of them).
    Tools(Option<Vec<String>>),
    /// Not the upstream (404).
    Not,
    /// The gateway could not be asked, or refused: why (not kept).
    Unknown(String),
}

/// A stateless session ends after this long without a call of its agent.
pub(super) const STATELESS_IDLE: Duration = Duration::from_secs(30 * 60);
/// A stateless session ends this long after it began, however busy.
pub(super) const STATELESS_LONGEST: Duration = Duration::from_secs(8 * 60 * 60);

/// One agent's stateless session: its id, when it began, and its use.
struct Stateless {
    id: String,
    began: Instant,
    usage: Arc<Usage>,
}

/// A stateless session's calls under way and when its last call started or ended.
struct Usage {
    inflight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Stateless {
    fn new(now: Instant) -> Self {
        Stateless {
            id: format!("mcp-stateless-{}", uuid::Uuid::new_v4().simple()),
            began: now,
            usage: Arc::new(Usage {
                inflight: AtomicUsize::new(0),
                last: Mutex::new(now),
            }),
        }
    }
}

/// A call under way in a stateless session ([`Hub::stateless_session`]): while it lives the
/// session is not renewed; dropped, the session's idle time starts.
pub(super) struct InFlight(Arc<Usage>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hub with no upstreams and a gateway URL nothing is asked at.
    async fn hub() -> Arc<Hub> {
        let gw = GatewayAt::Url("http://127.0.0.1:9".into());
        Hub::start(BTreeMap::new(), gw, 30, 10).await.unwrap()
    }

    /// Attack (found by review): an agent that always kept one call held never let its
    /// stateless session renew, so a "session" grant in it lasted for ever. A session ends
    /// [`STATELESS_LONGEST`] after it began however busy; it does not idle out while busy.
    #[tokio::test]
    async fn a_stateless_session_ends_after_its_longest_however_busy() {
        let hub = hub().await;
        let t0 = Instant::now();
        let (first, held) = hub.stateless_session_at("a", t0);
        // Busy past the idle time: the same session.
        let later = t0 + STATELESS_IDLE * 2;
        let (same, _call) = hub.stateless_session_at("a", later);
        assert_eq!(same, first);
        // Past the longest, with a call still held: another.
        let (next, _) = hub.stateless_session_at("a", t0 + STATELESS_LONGEST);
        assert_ne!(next, first);
        drop(held);
    }
}
