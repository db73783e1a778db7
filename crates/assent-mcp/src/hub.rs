//! The MCP hub: one MCP endpoint in front of many upstream MCP servers (issue 4), built on
//! rmcp. Clients connect over streamable HTTP (`/mcp` on `assent serve`, the bearer key
//! naming the agent) or over stdio (`assent mcp --agent ID --config assent.yaml`); upstreams
//! run as child processes from `mcp_upstreams` in the gateway config.
//!
//! - `tools/list`: for each upstream alias the agent declares (`action_space.mcp_servers`), the
//!   upstream's tools (only its `allowed_tools` when it lists them), checked against their
//!   pins exactly as the stdio proxy does, named `ALIAS__TOOL`.
//! - `tools/call ALIAS__TOOL`: the pin check, then the gateway (`POST /v1/tool-calls`, waiting
//!   for a human with progress notifications when the client sent a progress token, the
//!   approval cancelled when the client cancels or disconnects), then the upstream; the result
//!   is reported (and held over `output_bytes`) as in the stdio proxy.
//! - An upstream that fails to start, or dies, is reported (its tools are missing and its calls
//!   answer an error naming it); the others keep working.

use crate::{AskUser, Gateway, Outcome, ProxyConfig, apply_pins};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
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

/// The hub's client side of one upstream: drops the cached tool list when the upstream says
/// its tools changed.
#[derive(Clone, Default)]
struct Watch {
    stale: Arc<std::sync::atomic::AtomicBool>,
}

impl rmcp::ClientHandler for Watch {
    async fn on_tool_list_changed(&self, _ctx: rmcp::service::NotificationContext<RoleClient>) {
        self.stale.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

struct Upstream {
    peer: Option<Peer<RoleClient>>,
    error: Option<String>,
    watch: Watch,
    tools: tokio::sync::Mutex<Option<(std::time::Instant, Vec<Tool>)>>,
    _service: Option<RunningService<RoleClient, Watch>>,
}

impl Upstream {
    /// The upstream's tools: fresh when `fresh` or the cached copy is old or stale.
    async fn tools(&self, fresh: bool) -> Result<Vec<Tool>, String> {
        let peer = self.peer.as_ref().ok_or("not connected")?;
        let mut cache = self.tools.lock().await;
        let stale = self
            .watch
            .stale
            .swap(false, std::sync::atomic::Ordering::SeqCst);
        if !fresh
            && !stale
            && let Some((at, list)) = cache.as_ref()
            && at.elapsed() < TOOLS_FRESH
        {
            return Ok(list.clone());
        }
        let list = peer.list_all_tools().await.map_err(|e| e.to_string())?;
        *cache = Some((std::time::Instant::now(), list.clone()));
        Ok(list)
    }
}

/// The upstream connections and the gateway client shared by every client session.
pub struct Hub {
    upstreams: BTreeMap<String, Upstream>,
    http: reqwest::Client,
    gateway_url: String,
    poll_seconds: u64,
    progress_seconds: u64,
    agents: Mutex<HashMap<String, String>>,
}

impl Hub {
    /// Starts every upstream; one that cannot start is kept with its error (reported on
    /// `tools/call` and in the log) and does not stop the others.
    pub async fn start(
        specs: BTreeMap<String, UpstreamSpec>,
        gateway_url: String,
        poll_seconds: u64,
        progress_seconds: u64,
    ) -> anyhow::Result<Arc<Self>> {
        let mut upstreams = BTreeMap::new();
        for (alias, spec) in specs {
            let started = async {
                if let Some(url) = &spec.url {
                    let mut config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                    if let Some(t) = &spec.bearer_token {
                        config = config.auth_header(t.clone());
                    }
                    let transport =
                        rmcp::transport::StreamableHttpClientTransport::from_config(config);
                    return anyhow::Ok(Watch::default().serve(transport).await?);
                }
                let (prog, args) = spec
                    .command
                    .split_first()
                    .ok_or_else(|| anyhow::anyhow!("empty command"))?;
                let cmd = tokio::process::Command::new(prog).configure(|c| {
                    c.args(args).envs(&spec.env);
                });
                let transport = TokioChildProcess::new(cmd)?;
                let service = Watch::default().serve(transport).await?;
                anyhow::Ok(service)
            };
            let up = match tokio::time::timeout(Duration::from_secs(30), started).await {
                Ok(Ok(service)) => {
                    tracing::info!(upstream = %alias, "MCP upstream connected");
                    Upstream {
                        peer: Some(service.peer().clone()),
                        error: None,
                        watch: service.service().clone(),
                        tools: tokio::sync::Mutex::new(None),
                        _service: Some(service),
                    }
                }
                Ok(Err(e)) => {
                    tracing::error!(upstream = %alias, error = %e, "MCP upstream failed to start");
                    Upstream {
                        peer: None,
                        error: Some(format!("failed to start: {e}")),
                        watch: Watch::default(),
                        tools: tokio::sync::Mutex::new(None),
                        _service: None,
                    }
                }
                Err(_) => {
                    tracing::error!(upstream = %alias, "MCP upstream did not initialise within 30 s");
                    Upstream {
                        peer: None,
                        error: Some("did not initialise within 30 s".into()),
                        watch: Watch::default(),
                        tools: tokio::sync::Mutex::new(None),
                        _service: None,
                    }
                }
            };
            upstreams.insert(alias, up);
        }
        Ok(Arc::new(Self {
            upstreams,
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(poll_seconds + 30))
                .build()?,
            gateway_url,
            poll_seconds,
            progress_seconds,
            agents: Mutex::default(),
        }))
    }

    fn gateway(&self, key: &str, agent: &str, server: &str, session: &str) -> Gateway {
        Gateway::with_client(
            self.http.clone(),
            ProxyConfig {
                gateway_url: self.gateway_url.clone(),
                api_key: key.to_string(),
                agent: agent.to_string(),
                server: server.to_string(),
                session_id: session.to_string(),
                command: Vec::new(),
                poll_seconds: self.poll_seconds,
                progress_seconds: self.progress_seconds,
            },
        )
    }

    /// The agent a key acts for (`GET /v1/whoami`), cached.
    async fn agent_of(&self, key: &str) -> Result<String, String> {
        if let Some(a) = self.agents.lock().expect("agents").get(key) {
            return Ok(a.clone());
        }
        let resp = self
            .http
            .get(format!(
                "{}/v1/whoami",
                self.gateway_url.trim_end_matches('/')
            ))
            .bearer_auth(key)
            .send()
            .await
            .map_err(|e| format!("the assent gateway cannot be reached ({})", e.without_url()))?;
        let ok = resp.status().is_success();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        match v["agent_id"].as_str() {
            Some(a) if ok => {
                self.agents
                    .lock()
                    .expect("agents")
                    .insert(key.to_string(), a.to_string());
                Ok(a.to_string())
            }
            _ if ok => Err("this key is not an agent's key".into()),
            _ => Err(format!(
                "the key was refused ({})",
                v["code"].as_str().unwrap_or("UNAUTHORIZED")
            )),
        }
    }

    /// Tools declared for `agent` on `alias` (`Ok(None)`: all), `Err` when not declared.
    async fn declared(
        &self,
        key: &str,
        agent: &str,
        alias: &str,
    ) -> Result<Option<Vec<String>>, ()> {
        let url = format!(
            "{}/v1/agents/{agent}/mcp-servers/{alias}/tools",
            self.gateway_url.trim_end_matches('/')
        );
        let resp = self
            .http
            .get(url)
            .bearer_auth(key)
            .send()
            .await
            .map_err(|_| ())?;
        if !resp.status().is_success() {
            return Err(());
        }
        let v: Value = resp.json().await.map_err(|_| ())?;
        Ok(serde_json::from_value(v["tools"].clone()).ok().flatten())
    }
}

/// One client's view of the hub. `key`: the agent key of a stdio client; HTTP clients send
/// theirs as `Authorization: Bearer KEY` on every request.
#[derive(Clone)]
pub struct HubHandler {
    hub: Arc<Hub>,
    key: Option<String>,
    session: String,
}

impl HubHandler {
    /// A handler for HTTP clients (the key comes with each request).
    pub fn http(hub: Arc<Hub>) -> Self {
        Self {
            hub,
            key: None,
            session: format!("mcp-{}", uuid::Uuid::new_v4()),
        }
    }

    /// A handler for one stdio client acting with `key`, in session `session`.
    pub fn stdio(hub: Arc<Hub>, key: String, session: String) -> Self {
        Self {
            hub,
            key: Some(key),
            session,
        }
    }

    fn key(&self, ctx: &RequestContext<RoleServer>) -> Result<String, McpError> {
        if let Some(k) = &self.key {
            return Ok(k.clone());
        }
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(|k| k.trim().to_string())
            .ok_or_else(|| {
                McpError::invalid_request("send the agent's key as Authorization: Bearer KEY", None)
            })
    }

    /// The MCP session of an HTTP client (its `Mcp-Session-Id`), else this handler's.
    fn session(&self, ctx: &RequestContext<RoleServer>) -> String {
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|h| h.to_str().ok())
            .map(|s| format!("mcp-{s}"))
            .unwrap_or_else(|| self.session.clone())
    }
}

fn tool_json(t: &Tool) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn denied(why: &str) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(format!("TOOL_DENIED: {why}"))]).into()
}

impl ServerHandler for HubHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let key = self.key(&ctx)?;
        let agent = self
            .hub
            .agent_of(&key)
            .await
            .map_err(|e| McpError::invalid_request(e, None))?;
        let session = self.session(&ctx);
        let mut all = Vec::new();
        for (alias, up) in &self.hub.upstreams {
            let Ok(declared) = self.hub.declared(&key, &agent, alias).await else {
                continue;
            };
            if up.peer.is_none() {
                tracing::warn!(upstream = %alias, error = ?up.error, "upstream unavailable: its tools are not listed");
                continue;
            }
            let tools = match up.tools(true).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(upstream = %alias, error = %e, "upstream tools/list failed");
                    continue;
                }
            };
            let mut list: Vec<Value> = tools
                .iter()
                .filter(|t| {
                    declared
                        .as_ref()
                        .is_none_or(|d| d.iter().any(|n| n == t.name.as_ref()))
                })
                .map(tool_json)
                .collect();
            let gw = self.hub.gateway(&key, &agent, alias, &session);
            match gw.check_tools(&list).await {
                Ok(states) => apply_pins(&mut list, &states),
                Err(e) => {
                    tracing::warn!(upstream = %alias, error = %e, "tool list not verified: not shown");
                    continue;
                }
            }
            for mut t in list {
                let name = t["name"].as_str().unwrap_or("").to_string();
                t["name"] = json!(format!("{alias}__{name}"));
                if let Ok(tool) = serde_json::from_value::<Tool>(t) {
                    all.push(tool);
                }
            }
        }
        Ok(ListToolsResult::with_all_items(all))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let key = self.key(&ctx)?;
        let agent = match self.hub.agent_of(&key).await {
            Ok(a) => a,
            Err(e) => return Ok(denied(&e)),
        };
        let Some((alias, tool)) = request.name.split_once("__") else {
            return Ok(denied(&format!(
                "`{}` is not an ALIAS__TOOL name of this gateway",
                request.name
            )));
        };
        let Some(up) = self.hub.upstreams.get(alias) else {
            return Ok(denied(&format!(
                "no MCP upstream `{alias}` in this gateway"
            )));
        };
        let Some(peer) = &up.peer else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "upstream `{alias}` is unavailable: {}",
                up.error.as_deref().unwrap_or("not connected")
            ))])
            .into());
        };
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let session = self.session(&ctx);
        let gw = self.hub.gateway(&key, &agent, alias, &session);

        let approval: Mutex<Option<String>> = Mutex::new(None);
        // In-client approval: ask the client's user by elicitation when it can be asked.
        let can_elicit = ctx
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.elicitation.is_some());
        let ask: Option<AskUser> = can_elicit.then(|| {
            let peer = ctx.peer.clone();
            let ask: AskUser = Arc::new(move |question: String| {
                let peer = peer.clone();
                Box::pin(async move {
                    let schema =
                        serde_json::from_value(json!({"type": "object", "required": ["approve"],
                        "properties": {"approve": {"type": "boolean", "title": "Approve this call?",
                            "description": "Only this one call, with exactly these arguments."}}}))
                        .ok()?;
                    let params = rmcp::model::ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message: question,
                        requested_schema: schema,
                    };
                    let r = peer.create_elicitation(params).await.ok()?;
                    match r.action {
                        rmcp::model::ElicitationAction::Accept => {
                            Some(r.content.as_ref().is_some_and(|c| c["approve"] == true))
                        }
                        rmcp::model::ElicitationAction::Decline => Some(false),
                        _ => None,
                    }
                })
            });
            ask
        });
        let decide = async {
            // The pin check of the tool as the upstream defines it now.
            let def = match up.tools(false).await {
                Ok(list) => list.into_iter().find(|t| t.name == tool),
                Err(e) => {
                    return Outcome::Denied(format!("upstream `{alias}` tools/list failed: {e}"));
                }
            };
            let Some(def) = def else {
                return Outcome::Denied(format!("`{tool}` is not a tool of upstream `{alias}`"));
            };
            match gw.check_tools(&[tool_json(&def)]).await {
                Ok(states) => match states.get(tool) {
                    Some(s) if s.state == "held" => {
                        if let Err(why) =
                            gw.await_review(s.review_id.as_deref().unwrap_or("")).await
                        {
                            return Outcome::Denied(why);
                        }
                    }
                    Some(_) => {}
                    None => return Outcome::Denied(format!("`{tool}` could not be verified")),
                },
                Err(e) => {
                    return Outcome::Denied(format!("the tool list could not be verified: {e}"));
                }
            }
            gw.gate_asking(tool, &args, &approval, ask).await
        };
        let token = ctx.meta.get_progress_token();
        let ticker = async {
            let Some(token) = token.clone() else {
                return std::future::pending::<()>().await;
            };
            let mut n = 0.0;
            loop {
                tokio::time::sleep(Duration::from_secs(self.hub.progress_seconds.max(1))).await;
                n += 1.0;
                let what = match approval.lock().expect("approval").clone() {
                    Some(a) => format!(
                        "waiting for a human to approve {alias}__{tool} (assent approval {a})"
                    ),
                    None => format!("waiting for assent to clear {alias}__{tool}"),
                };
                let mut p = ProgressNotificationParam::new(token.clone(), n);
                p.message = Some(what);
                let _ = ctx.peer.notify_progress(p).await;
            }
        };
        let outcome = tokio::select! {
            o = decide => Some(o),
            _ = ticker => None,
            _ = ctx.ct.cancelled() => None,
        };
        let (edited, limit, approval_id) = match outcome {
            None => {
                let held = approval.lock().expect("approval").clone();
                if let Some(a) = held {
                    gw.cancel(&a, "the MCP client cancelled the request").await;
                }
                return Err(McpError::invalid_request("cancelled by the client", None));
            }
            Some(Outcome::Denied(why)) => return Ok(denied(&why)),
            Some(Outcome::Forward {
                edited,
                output_limit,
                approval_id,
            }) => (edited, output_limit, approval_id),
        };
        let run_with = edited.unwrap_or(args);
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(m) = &run_with {
            params = params.with_arguments(m.clone());
        }
        let result = match peer.call_tool(params).await {
            Ok(r) => r,
            Err(e) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "upstream `{alias}` failed: {e}"
                ))])
                .into());
            }
        };
        let text = serde_json::to_string(&result).unwrap_or_default();
        let over = limit.is_some_and(|l| text.len() as u64 > l);
        if over {
            if let Err(why) = gw
                .release(tool, &run_with, &text, approval_id.as_deref())
                .await
            {
                return Ok(denied(&format!("result withheld: {why}")));
            }
        } else {
            let (tool, gw) = (tool.to_string(), gw);
            tokio::spawn(async move {
                if let Err(e) = gw
                    .release(&tool, &run_with, &text, approval_id.as_deref())
                    .await
                {
                    tracing::warn!(error = %e, "result hash not recorded");
                }
            });
        }
        Ok(result.into())
    }
}

/// Serves one stdio client (`assent mcp --agent … --config …`) until it disconnects.
pub async fn serve_stdio(hub: Arc<Hub>, key: String, session: String) -> anyhow::Result<()> {
    let service = HubHandler::stdio(hub, key, session)
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}

/// The streamable HTTP service for `/mcp` (mount with `Router::nest_service`). Only requests
/// whose `Host` is in `allowed_hosts` (loopback names when empty) are served, and, when
/// `allowed_origins` is not empty, only browser requests from those origins (DNS-rebinding
/// protection).
pub fn http_service(
    hub: Arc<Hub>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    HubHandler,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let mut config = StreamableHttpServerConfig::default();
    if !allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(allowed_hosts);
    }
    if !allowed_origins.is_empty() {
        config = config.with_allowed_origins(allowed_origins);
    }
    StreamableHttpService::new(
        move || Ok(HubHandler::http(hub.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
