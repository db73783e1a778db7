//! The hub's MCP server side ([`HubHandler`], one per client session): the agent key (a stdio
//! client's, or an HTTP client's bearer), `tools/list` across the upstreams the agent declares
//! (checked against their pins, named `ALIAS__TOOL`), `tools/call` (the [`Call`], with
//! progress notifications and cancellation while it waits, or as a task), `tasks/get` and
//! `tasks/cancel`, and in-client approval by the client's means. Transports are
//! `transport`'s.

use super::call::{Call, denied_result, failed};
use super::state::{Declared, Hub, InFlight};
use super::stop::stop_unless_forwarded;
use super::tasks::{call_as_task, own_task};
use super::upstream::{Upstream, tool_json};
use crate::ask::{AskUser, Asker};
use crate::era;
use crate::kit::{Hold, apply_pins};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    DiscoverResult, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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
            .and_then(assent_api::bearer_credential)
            .map(str::to_string)
            .ok_or_else(|| {
                McpError::invalid_request("send the agent's key as Authorization: Bearer KEY", None)
            })
    }

    /// The session the gateway counts `agent`'s call in: an HTTP client's MCP session
    /// (`mcp-` and its `Mcp-Session-Id`); a stdio client's, this handler's; and for an HTTP
    /// client that keeps none — the 2026-07-28 revision is stateless, and rmcp makes a handler
    /// per request — the agent's current stateless session ([`Hub::stateless_session`]).
    fn session(&self, ctx: &RequestContext<RoleServer>, agent: &str) -> (String, Option<InFlight>) {
        let header = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|h| h.to_str().ok());
        match (header, &self.key) {
            (Some(s), _) => (format!("mcp-{s}"), None),
            (None, Some(_)) => (self.session.clone(), None),
            (None, None) => {
                let (id, mark) = self.hub.stateless_session(agent);
                (id, Some(mark))
            }
        }
    }

    /// The upstream alias, tool name and upstream that `ALIAS__TOOL` name `name` names; why
    /// not, when it names none of this gateway's.
    fn named<'a>(&'a self, name: &'a str) -> Result<(&'a str, &'a str, &'a Upstream), String> {
        let Some((alias, tool)) = name.split_once("__") else {
            return Err(format!(
                "`{name}` is not an ALIAS__TOOL name of this gateway"
            ));
        };
        match self.hub.upstreams.get(alias) {
            Some(up) => Ok((alias, tool, up)),
            None => Err(format!("no MCP upstream `{alias}` in this gateway")),
        }
    }

    /// Why `agent` (acting with `key`) may not call `tool` on upstream `alias` by its
    /// declarations ([`Hub::declared`]): `None` when it declares both.
    async fn undeclared(&self, key: &str, agent: &str, alias: &str, tool: &str) -> Option<String> {
        match self.hub.declared(key, agent, alias).await {
            Declared::Not => Some(format!(
                "MCP server `{alias}` is not declared by agent `{agent}`"
            )),
            Declared::Unknown(why) => Some(format!(
                "the gateway could not say whether agent `{agent}` declares MCP server `{alias}`: {why}"
            )),
            Declared::Tools(Some(tools)) if !tools.iter().any(|t| t == tool) => Some(format!(
                "`{tool}` is not declared by agent `{agent}` on MCP server `{alias}`"
            )),
            Declared::Tools(_) => None,
        }
    }
}

impl HubHandler {
    /// The call's arguments, taken from `request` (not cloned: kept once while it waits), and
    /// the weight of all the call keeps while it waits — its arguments, the request's `_meta`
    /// (`meta`, rmcp's copy of it in the request's context) and its modern round's
    /// `requestState` and `inputResponses` — counted for `agent` and in all
    /// ([`super::held::HeldCalls`]); a JSON-RPC error ([`super::held::BUSY`]) naming the bound
    /// when that would pass it. Found by review: only the arguments were counted, so `_meta`
    /// filling the body bound kept some 10 MiB per held call unweighed, 1–2 GiB per key.
    fn weigh(
        &self,
        agent: &str,
        request: &mut CallToolRequestParams,
        meta: &rmcp::model::RequestMetaObject,
    ) -> Result<(Value, super::held::CallWeight), McpError> {
        let args = Value::Object(request.arguments.take().unwrap_or_default());
        let weight_of = |v: serde_json::Result<Value>| v.map_or(0, |v| crate::kit::json_weight(&v));
        let kept = [
            weight_of(serde_json::to_value(meta)),
            weight_of(serde_json::to_value(&request.request_state)),
            weight_of(serde_json::to_value(&request.input_responses)),
        ];
        let weight = crate::kit::json_weight(&args).saturating_add(kept.iter().sum());
        match self.hub.held.take(agent, weight) {
            Ok(w) => Ok((args, w)),
            Err(why) => Err(McpError::new(
                rmcp::model::ErrorCode(super::held::BUSY),
                why,
                None,
            )),
        }
    }
}

/// The approval a modern client retrying with its in-client answer resumes, and that answer,
/// taken out of `request` (its round weighed once and not kept: found by review, a copy of it
/// lived through the whole wait beside the request's own).
fn resumed(
    request: &mut CallToolRequestParams,
) -> Option<(String, Option<crate::ask::UserAnswer>)> {
    let own_round = json!({"requestState": request.request_state.take(),
                           "inputResponses": request.input_responses.take()});
    era::resumed_approval(&own_round).map(|id| (id, era::input_answer(&own_round)))
}

/// A call answered `TOOL_DENIED: why`, never forwarded.
fn denied(why: &str) -> CallToolResponse {
    denied_result(why).into()
}

impl HubHandler {
    /// The instructions the hub gives a client in its `initialize` (or `server/discover`)
    /// answer: of each upstream the client's agent declares, its instructions as pinned, under
    /// a line naming the upstream (its tools are `ALIAS__TOOL` here). Each upstream's words
    /// (its instructions and server info, from its handshake with the hub) are reported first
    /// and checked against their pin (the pseudo-tool `(server)`, pinned for every agent as
    /// its tools are): unchanged or pinned on first use they are shown; changed, the ones
    /// pinned before are, until an operator accepts the new ones; with nothing pinned, or the
    /// gateway not to be asked, none are. The upstreams' server info is not shown (the hub is
    /// one server of its own), only pinned. `None` when there is nothing to show, or the
    /// client's key names no agent.
    async fn upstream_instructions(&self, ctx: &RequestContext<RoleServer>) -> Option<String> {
        let key = self.key(ctx).ok()?;
        let agent = self.hub.agent_of(&key).await.ok()?;
        let mut parts = Vec::new();
        for (alias, up) in &self.hub.upstreams {
            if !matches!(
                self.hub.declared(&key, &agent, alias).await,
                Declared::Tools(_)
            ) {
                continue;
            }
            let Some(words) = up.words() else {
                continue;
            };
            let pinned = match self.hub.check_handshake(&key, &agent, alias, &words).await {
                Ok(s) => {
                    if s.state == assent_api::tools::PinState::Held {
                        tracing::warn!(upstream = %alias, review_id = ?s.review_id,
                            "the upstream's instructions or server info changed: those pinned before are shown until an operator accepts the new ones");
                    }
                    s.pinned
                }
                Err(why) => {
                    tracing::warn!(upstream = %alias, reason = %why,
                        "the upstream's instructions could not be verified: none are shown");
                    None
                }
            };
            if let Some(text) = pinned.as_ref().and_then(|p| p["instructions"].as_str()) {
                // Every line of the upstream's text is quoted, so that it cannot write a
                // header of its own and pose as another upstream; other line breaks (U+2028,
                // U+0085, …) and controls are made visible (found by review).
                let quoted: Vec<String> = text
                    .split(['\n', '\r'])
                    .map(|l| format!("> {}", assent_core::template::visible(l)))
                    .collect();
                parts.push(format!(
                    "MCP server `{alias}` (its tools are named `{alias}__TOOL` here):\n{}",
                    quoted.join("\n")
                ));
            }
        }
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
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

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // No new session once the gateway is shutting down (its calls would be left behind).
        if self.hub.closing() {
            return Err(super::state::shutting_down_error());
        }
        ctx.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        info.instructions = self.upstream_instructions(&ctx).await;
        Ok(info)
    }

    async fn discover(&self, ctx: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        info.instructions = self.upstream_instructions(&ctx).await;
        let versions = self.supported_protocol_versions().into_owned();
        Ok(DiscoverResult::from_server_info(versions, info))
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
        let mut all = Vec::new();
        for (alias, up) in &self.hub.upstreams {
            let declared = match self.hub.declared(&key, &agent, alias).await {
                Declared::Tools(d) => d,
                Declared::Not => continue,
                Declared::Unknown(why) => {
                    tracing::warn!(upstream = %alias, %agent, %why, "declarations not known: the upstream's tools are not listed");
                    continue;
                }
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
            match self.hub.check_pins(&key, &agent, alias, &list).await {
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
        mut request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Nothing is proposed once the gateway is shutting down: a call proposed then would be
        // left pending (found by review). One that got past this check is stopped when it is
        // noted under way (`Hub::under_way`).
        if self.hub.closing() {
            return Err(super::state::shutting_down_error());
        }
        let key = self.key(&ctx)?;
        let agent = match self.hub.agent_of(&key).await {
            Ok(a) => a,
            Err(e) => return Ok(denied(&e)),
        };
        let name = request.name.clone();
        let (alias, tool, up) = match self.named(&name) {
            Ok(named) => named,
            Err(why) => return Ok(denied(&why)),
        };
        // The agent's declarations first: a server or tool it does not declare is not looked
        // at — found by review: the pin check ran first, so an agent that declares no `X` had
        // the hub fetch X's list, pin it on first use for every agent, and wait on its reviews.
        if let Some(why) = self.undeclared(&key, &agent, alias, tool).await {
            return Ok(denied(&why));
        }
        if up.peer.is_none() {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "upstream `{alias}` is unavailable: {}",
                up.error.as_deref().unwrap_or("not connected")
            ))])
            .into());
        }
        // A request rmcp stopped while it was being looked at (its client gone: found by
        // review, a call that reached this point after the stdio hub's last pass over its
        // session's calls was proposed and held as the process ended) is not started. From
        // here to the call's place among its session's calls nothing waits.
        if ctx.ct.is_cancelled() {
            return Err(McpError::invalid_request("cancelled by the client", None));
        }
        let (args, weight) = self.weigh(&agent, &mut request, &ctx.meta)?;
        let (session, stateless) = self.session(&ctx, &agent);
        let call = Call {
            hub: self.hub.clone(),
            gw: self.hub.gateway(&key, &agent, alias, &session),
            key: key.clone(),
            agent: agent.clone(),
            alias: alias.to_string(),
            tool: tool.to_string(),
            args,
            held: Arc::new(watch::Sender::new(Hold::Nothing)),
            result_slot: None,
            _stateless: stateless,
            weight,
        };
        let tasks = ctx
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        let ask = ask_user(&ctx, tasks);
        let resume = resumed(&mut request);
        if tasks {
            return call_as_task(&self.hub, (call, &session), ask, agent, &ctx).await;
        }

        // Without tasks: the request stays open while the call waits, with progress
        // notifications when the client sent a progress token.
        let (held, gw, name) = (call.held.clone(), call.gw.clone(), request.name.to_string());
        let ticker = progress(&ctx, &held, &name, self.hub.progress_seconds);
        // The copy of `_meta` read for the trace is dropped at once (it is not weighed twice).
        let span = {
            let meta = json!({"_meta": serde_json::to_value(&ctx.meta).unwrap_or_default()});
            crate::trace::call_span(&name, &meta)
        };
        // A task of its own, so that a call already forwarded runs to its end when the client
        // cancels: its result is reported and recorded (found by review: dropped with the
        // request, a call the upstream may have carried out left no `call.result`).
        let mut job = tokio::spawn(tracing::Instrument::instrument(call.run(ask, resume), span));
        // Stopped as if cancelled when the client is gone without a word (`Hub::client_gone`).
        let _under_way = self
            .hub
            .under_way(&session, held.clone(), gw.clone(), job.abort_handle());
        tokio::select! {
            r = &mut job => r.unwrap_or_else(|e| {
                tracing::error!(error = %e, "a hub call's task failed");
                Ok(failed("the call failed (the gateway's log says why)").into())
            }),
            _ = ticker => unreachable!("the ticker never ends"),
            _ = ctx.ct.cancelled() => {
                let why = "the MCP client cancelled the request";
                stop_unless_forwarded(&job.abort_handle(), &held, &gw, why).await;
                Err(McpError::invalid_request("cancelled by the client", None))
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        own_task(&self.hub, &self.key(&ctx)?, &request.task_id).await?;
        Ok(GetTaskResult::new(
            self.hub.tasks.get_task(&request.task_id)?,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        own_task(&self.hub, &self.key(&ctx)?, &request.task_id).await?;
        self.hub.tasks.cancel_task(&request.task_id)
    }
}

/// Progress notifications while a call waits, when the client sent a progress token (in
/// `ctx`): every `seconds` (at least 1), what its hold `held` says of tool `name`. Never ends.
async fn progress(
    ctx: &RequestContext<RoleServer>,
    held: &crate::kit::HoldState,
    name: &str,
    seconds: u64,
) {
    let Some(token) = ctx.meta.get_progress_token() else {
        return std::future::pending::<()>().await;
    };
    let mut n = 0.0;
    loop {
        tokio::time::sleep(Duration::from_secs(seconds.max(1))).await;
        n += 1.0;
        let mut p = ProgressNotificationParam::new(token.clone(), n);
        p.message = Some(held.borrow().describe(name));
        let _ = ctx.peer.notify_progress(p).await;
    }
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
            let schema = serde_json::from_value(crate::ask::elicitation_schema()).ok()?;
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
            crate::ask::user_answer(action, r.content.as_ref())
        })
    });
    Asker::Elicit(ask)
}
