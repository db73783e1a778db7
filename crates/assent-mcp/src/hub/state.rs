//! The hub's shared state ([`Hub`]): the upstream connections, the gateway's HTTP client and
//! settings, the agent each key acts for (`GET /v1/whoami`, cached) and the calls that became
//! MCP tasks with their owners. One per process, shared by every client session; the
//! per-request work is the handler's and the call's.

use super::upstream::{Upstream, UpstreamSpec};
use crate::gateway::Gateway;
use crate::kit::ProxyConfig;
use rmcp::model::CallToolRequestParams;
use rmcp::task_manager::TaskManager;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The upstream connections and the gateway client shared by every client session.
pub struct Hub {
    pub(super) upstreams: BTreeMap<String, Upstream>,
    http: reqwest::Client,
    gateway_url: String,
    poll_seconds: u64,
    pub(super) progress_seconds: u64,
    agents: Mutex<HashMap<String, String>>,
    /// Calls that became MCP tasks (SEP-2663), and the agent each belongs to.
    pub(super) tasks: TaskManager,
    pub(super) task_owners: Mutex<HashMap<String, String>>,
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
            let up = Upstream::connect(&alias, &spec).await;
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

    /// A gateway client acting with agent key `key` for `agent`, on upstream `server`, in
    /// session `session` (sharing the hub's connection pool).
    pub(super) fn gateway(&self, key: &str, agent: &str, server: &str, session: &str) -> Gateway {
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
    pub(super) async fn agent_of(&self, key: &str) -> Result<String, String> {
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
    pub(super) async fn declared(
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
