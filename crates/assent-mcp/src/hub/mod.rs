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

use crate::ask::{AskUser, Asker};
use crate::era;
use crate::gateway::Gateway;
use crate::kit::{Hold, HoldState, Outcome, ProxyConfig, apply_pins};
use crate::tasks::{task_options, task_run};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::task_manager::{TaskExit, TaskManager};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

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
    /// Set once this hub has checked the upstream's whole tool list against the pins (so a
    /// server first seen through a call is pinned whole); later calls check just their tool.
    whole_checked: tokio::sync::OnceCell<()>,
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
    /// Calls that became MCP tasks (SEP-2663), and the agent each belongs to.
    tasks: TaskManager,
    task_owners: Mutex<HashMap<String, String>>,
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
                        whole_checked: tokio::sync::OnceCell::new(),
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
                        whole_checked: tokio::sync::OnceCell::new(),
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
                        whole_checked: tokio::sync::OnceCell::new(),
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
            tasks: TaskManager::new(),
            task_owners: Mutex::default(),
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

    /// Whether `alias` is one of the hub's upstreams.
    pub fn has_upstream(&self, alias: &str) -> bool {
        self.upstreams.contains_key(alias)
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
    denied_result(why).into()
}

fn denied_result(why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("TOOL_DENIED: {why}"))])
}

impl ServerHandler for HubHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
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
            // Every tool is checked (a server is pinned whole the first time it is seen), the
            // declared ones shown.
            let mut list: Vec<Value> = tools.iter().map(tool_json).collect();
            let gw = self.hub.gateway(&key, &agent, alias, &session);
            match gw.check_tools(&list).await {
                Ok(states) => {
                    list.retain(|t| {
                        declared
                            .as_ref()
                            .is_none_or(|d| d.iter().any(|n| t["name"] == n.as_str()))
                    });
                    apply_pins(&mut list, &states);
                }
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
        if up.peer.is_none() {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "upstream `{alias}` is unavailable: {}",
                up.error.as_deref().unwrap_or("not connected")
            ))])
            .into());
        }
        let session = self.session(&ctx);
        let call = Call {
            hub: self.hub.clone(),
            gw: self.hub.gateway(&key, &agent, alias, &session),
            alias: alias.to_string(),
            tool: tool.to_string(),
            args: Value::Object(request.arguments.clone().unwrap_or_default()),
            held: Arc::new(watch::Sender::new(Hold::Nothing)),
        };
        let tasks = ctx
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        let ask = ask_user(&ctx, tasks);
        // A modern client retrying with its in-client answer resumes its approval.
        let own_round = json!({"requestState": request.request_state,
                               "inputResponses": request.input_responses});
        let resume =
            era::resumed_approval(&own_round).map(|id| (id, era::input_answer(&own_round)));
        if tasks {
            return self.call_as_task(call, ask, agent, &ctx).await;
        }

        // Without tasks: the request stays open while the call waits, with progress
        // notifications when the client sent a progress token.
        let (held, gw, name) = (call.held.clone(), call.gw.clone(), request.name.to_string());
        let token = ctx.meta.get_progress_token();
        let ticker = async {
            let Some(token) = token.clone() else {
                return std::future::pending::<()>().await;
            };
            let mut n = 0.0;
            loop {
                tokio::time::sleep(Duration::from_secs(self.hub.progress_seconds.max(1))).await;
                n += 1.0;
                let mut p = ProgressNotificationParam::new(token.clone(), n);
                p.message = Some(held.borrow().describe(&name));
                let _ = ctx.peer.notify_progress(p).await;
            }
        };
        tokio::select! {
            r = call.run(ask, resume) => Ok(r),
            _ = ticker => unreachable!("the ticker never ends"),
            _ = ctx.ct.cancelled() => {
                let approval = held.borrow().approval();
                if let Some(a) = approval {
                    gw.cancel(&a, "the MCP client cancelled the request").await;
                }
                Err(McpError::invalid_request("cancelled by the client", None))
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.own_task(&request.task_id, &ctx).await?;
        Ok(GetTaskResult::new(
            self.hub.tasks.get_task(&request.task_id)?,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.own_task(&request.task_id, &ctx).await?;
        self.hub.tasks.cancel_task(&request.task_id)
    }
}

impl HubHandler {
    /// `tools/call` for a client that declared the tasks extension (SEP-2663): a call that
    /// clears at once is answered at once; a call that waits for a human (an approval, or the
    /// review of a changed tool) becomes a task the client polls with `tasks/get`, whose
    /// status message says what it waits for. `tasks/cancel` withdraws the approval (or stops
    /// the wait for a review); a call already approved and forwarded completes anyway.
    async fn call_as_task(
        &self,
        call: Call,
        ask: Asker,
        agent: String,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let (held, gw) = (call.held.clone(), call.gw.clone());
        let name = format!("{}__{}", call.alias, call.tool);
        let mut job = tokio::spawn(async move {
            match call.run(ask, None).await {
                CallToolResponse::Complete(r) => r,
                _ => failed("the call asked for input a task cannot give"),
            }
        });
        let mut watch = held.subscribe();
        tokio::select! {
            r = &mut job => {
                return Ok(r.unwrap_or_else(|e| failed(&format!("the call failed: {e}"))).into());
            }
            _ = async { watch.wait_for(|h| matches!(h, Hold::Review(_) | Hold::Approval(_))).await.is_ok() } => {}
            _ = ctx.ct.cancelled() => {
                job.abort();
                let approval = held.borrow().approval();
                if let Some(a) = approval {
                    gw.cancel(&a, "the MCP client cancelled the request").await;
                }
                return Err(McpError::invalid_request("cancelled by the client", None));
            }
        }
        let status = held.borrow().describe(&name);
        let (done_tx, done_rx) = oneshot::channel();
        let abort = job.abort_handle();
        tokio::spawn(async move {
            let outcome = match job.await {
                Ok(r) => Ok(serde_json::to_value(r).unwrap_or_default()),
                Err(e) if e.is_cancelled() => Err(TaskExit::Cancelled),
                Err(e) => Err(TaskExit::Error(McpError::internal_error(
                    format!("the call failed: {e}"),
                    None,
                ))),
            };
            let _ = done_tx.send(outcome);
        });
        let task = self.hub.tasks.spawn(task_options(status), move |tctx| {
            let waits = held.clone();
            Box::pin(task_run(tctx, done_rx, held, name, move || {
                let now = waits.borrow().clone();
                match now {
                    Hold::Approval(a) => {
                        tokio::spawn(async move {
                            gw.cancel(&a, "the MCP client cancelled the task").await;
                        });
                    }
                    // Nothing was forwarded yet: stop the wait (for the review).
                    Hold::Nothing | Hold::Review(_) => abort.abort(),
                    // Already running upstream: it completes.
                    Hold::Forwarding => {}
                }
            }))
        });
        let mut owners = self.hub.task_owners.lock().expect("task owners");
        owners.retain(|id, _| self.hub.tasks.get_task(id).is_ok());
        owners.insert(task.task_id.clone(), agent);
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    /// `Ok` when `task_id` is a task of the agent whose key made this request; any other
    /// task is reported as unknown, as if it did not exist.
    async fn own_task(
        &self,
        task_id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let key = self.key(ctx)?;
        let agent = self
            .hub
            .agent_of(&key)
            .await
            .map_err(|e| McpError::invalid_request(e, None))?;
        let owner = self
            .hub
            .task_owners
            .lock()
            .expect("task owners")
            .get(task_id)
            .cloned();
        if owner.as_deref() == Some(agent.as_str()) {
            Ok(())
        } else {
            Err(McpError::invalid_params(
                format!("unknown task `{task_id}`"),
                None,
            ))
        }
    }
}

/// An error result that is not a denial (the call could not be completed).
fn failed(why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why.to_string())])
}

/// In-client approval: how the client's user can be asked. A modern (2026-07-28) client that
/// declared `elicitation` is asked in an `input_required` result (unless it uses tasks: it has
/// no request open to answer, so operators decide); a legacy one by an elicitation request.
fn ask_user(ctx: &RequestContext<RoleServer>, tasks: bool) -> Asker {
    let modern = ctx.protocol_version().is_some_and(|v| !v.has_initialize());
    let can_elicit = ctx
        .client_capabilities()
        .is_some_and(|c| c.elicitation.is_some());
    if !can_elicit {
        return Asker::Nobody;
    }
    if modern {
        return if tasks {
            Asker::Nobody
        } else {
            Asker::InputRequired
        };
    }
    let peer = ctx.peer.clone();
    let ask: AskUser = Arc::new(move |question: String| {
        let peer = peer.clone();
        Box::pin(async move {
            let schema = serde_json::from_value(crate::elicitation_schema()).ok()?;
            let params = rmcp::model::ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question,
                requested_schema: schema,
            };
            let r = peer.create_elicitation(params).await.ok()?;
            let action = match r.action {
                rmcp::model::ElicitationAction::Accept => "accept",
                rmcp::model::ElicitationAction::Decline => "decline",
                _ => return None,
            };
            crate::user_answer(action, r.content.as_ref())
        })
    });
    Asker::Elicit(ask)
}

/// One `tools/call` on its way through the hub, owning what it needs so that it can outlive
/// the request when it becomes a task.
struct Call {
    hub: Arc<Hub>,
    gw: Gateway,
    alias: String,
    tool: String,
    args: Value,
    /// What the call waits for, for progress, status and cancellation.
    held: Arc<HoldState>,
}

impl Call {
    /// The pin check of the tool as the upstream defines it now, the gateway (waiting for a
    /// human when held), the upstream, and the result report (holding a result over
    /// `output_bytes`). A denial is a `TOOL_DENIED:` error result; the call is then never
    /// forwarded. A modern client that may approve in the client gets an `input_required`
    /// question instead ([`era::input_required`]); its retry comes back as `resume` (the
    /// approval it names and the user's answer) and goes through [`Gateway::resume`].
    async fn run(
        self,
        ask: Asker,
        resume: Option<(String, Option<crate::UserAnswer>)>,
    ) -> CallToolResponse {
        let Call {
            hub,
            gw,
            alias,
            tool,
            args,
            held,
        } = self;
        let Some(up) = hub.upstreams.get(&alias) else {
            return failed(&format!("no MCP upstream `{alias}`")).into();
        };
        let Some(peer) = &up.peer else {
            return failed(&format!("upstream `{alias}` is unavailable")).into();
        };
        let list: Vec<Value> = match up.tools(false).await {
            Ok(list) => list.iter().map(tool_json).collect(),
            Err(e) => {
                return denied_result(&format!("upstream `{alias}` tools/list failed: {e}")).into();
            }
        };
        let Some(def) = list.iter().find(|t| t["name"] == tool.as_str()).cloned() else {
            return denied_result(&format!("`{tool}` is not a tool of upstream `{alias}`")).into();
        };
        // First the whole list, once (as `tools/list` does): a server first seen through a
        // call is pinned whole, so its other tools do not count as new later. Then the tool.
        let whole = up
            .whole_checked
            .get_or_try_init(|| async { gw.check_tools(&list).await.map(|_| ()) })
            .await;
        if let Err(e) = whole {
            return denied_result(&format!("the tool list could not be verified: {e}")).into();
        }
        match gw.check_tools(&[def]).await {
            Ok(states) => match states.get(&tool) {
                Some(s) if s.state == "held" => {
                    let review = s.review_id.clone().unwrap_or_default();
                    held.send_replace(Hold::Review(review.clone()));
                    if let Err(why) = gw.await_review(&review).await {
                        return denied_result(&why).into();
                    }
                }
                Some(_) => {}
                None => return denied_result(&format!("`{tool}` could not be verified")).into(),
            },
            Err(e) => {
                return denied_result(&format!("the tool list could not be verified: {e}")).into();
            }
        }
        let outcome = match resume {
            Some((id, answer)) => {
                gw.resume(&id, Some((&tool, &args)), answer.as_ref(), &held)
                    .await
                    .0
            }
            None => gw.gate_asking(&tool, &args, &held, ask).await,
        };
        let (edited, limit, approval_id) = match outcome {
            Outcome::Denied(why) => return denied_result(&why).into(),
            Outcome::AskClient {
                approval_id,
                question,
            } => {
                return match serde_json::from_value(era::input_required(&question, &approval_id)) {
                    Ok(ir) => CallToolResponse::InputRequired(ir),
                    Err(e) => failed(&format!("the in-client question failed: {e}")).into(),
                };
            }
            Outcome::Forward {
                edited,
                output_limit,
                approval_id,
            } => (edited, output_limit, approval_id),
        };
        held.send_replace(Hold::Forwarding);
        let run_with = edited.unwrap_or(args);
        let mut params = CallToolRequestParams::new(tool.clone());
        if let Value::Object(m) = &run_with {
            params = params.with_arguments(m.clone());
        }
        let mut result = match peer.call_tool(params).await {
            Ok(r) => r,
            Err(e) => return failed(&format!("upstream `{alias}` failed: {e}")).into(),
        };
        let text = serde_json::to_string(&result).unwrap_or_default();
        if limit.is_some_and(|l| text.len() as u64 > l) {
            if let Err(why) = gw
                .release(&tool, &run_with, &text, approval_id.as_deref())
                .await
            {
                return denied_result(&format!("result withheld: {why}")).into();
            }
        } else {
            tokio::spawn(async move {
                if let Err(e) = gw
                    .release(&tool, &run_with, &text, approval_id.as_deref())
                    .await
                {
                    tracing::warn!(error = %e, "result hash not recorded");
                }
            });
        }
        // Relayed in the client's era: tagged `complete` here (a legacy upstream sends no
        // tag); rmcp removes the tag again for a legacy client.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        result.into()
    }
}

/// Serves one stdio client (`assent mcp --agent … --config …`) until it disconnects.
pub async fn serve_stdio(hub: Arc<Hub>, key: String, session: String) -> anyhow::Result<()> {
    let service = HubHandler::stdio(hub, key, session)
        .serve(strict_stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}

/// Stdin and stdout for rmcp, with every client line read strictly first
/// ([`assent_core::json::check`]): a line with a duplicate key or a number a double would
/// change never reaches rmcp and is answered with a JSON-RPC error ([`crate::refusal`]).
/// Lines go out whole, so an error never interleaves with rmcp's own messages.
fn strict_stdio() -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (rmcp_in, mut feed) = tokio::io::duplex(1 << 16);
    let (rmcp_out, drain) = tokio::io::duplex(1 << 16);
    let (refused, mut refusals) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim().is_empty() {
                continue;
            }
            match assent_core::json::check(line.as_bytes()) {
                Ok(()) => {
                    let sent = feed.write_all(line.as_bytes()).await;
                    if sent.is_err() || feed.write_all(b"\n").await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = refused.send(crate::refusal(&line, &e));
                }
            }
        }
    });
    tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        let mut lines = BufReader::new(drain).lines();
        loop {
            let line = tokio::select! {
                l = lines.next_line() => match l { Ok(Some(l)) => l, _ => break },
                Some(e) = refusals.recv() => e,
            };
            if out.write_all(line.as_bytes()).await.is_err()
                || out.write_all(b"\n").await.is_err()
                || out.flush().await.is_err()
            {
                break;
            }
        }
    });
    (rmcp_in, rmcp_out)
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
