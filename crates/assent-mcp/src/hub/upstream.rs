//! The hub's upstream MCP servers: how to reach one ([`UpstreamSpec`], from `mcp_upstreams`
//! in the gateway config), connecting to it (a child process over stdio or a streamable HTTP
//! endpoint, within 30 s) and its tool list, cached for the pin check of a call and dropped
//! when the upstream says its tools changed. An upstream that fails to start is kept with its
//! error. Gating is not done here: the call is.

use rmcp::ServiceExt;
use rmcp::model::Tool;
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use std::collections::BTreeMap;
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

/// One upstream as the hub holds it: its peer when connected, else why not.
pub(super) struct Upstream {
    pub(super) peer: Option<Peer<RoleClient>>,
    pub(super) error: Option<String>,
    watch: Watch,
    tools: tokio::sync::Mutex<Option<(std::time::Instant, Vec<Tool>)>>,
    /// Set once this hub has checked the upstream's whole tool list against the pins (so a
    /// server first seen through a call is pinned whole); later calls check just their tool.
    pub(super) whole_checked: tokio::sync::OnceCell<()>,
    _service: Option<RunningService<RoleClient, Watch>>,
}

impl Upstream {
    /// Connects to upstream `alias` as `spec` says, waiting at most 30 s for it to initialise;
    /// one that fails is returned with its error (logged).
    pub(super) async fn connect(alias: &str, spec: &UpstreamSpec) -> Self {
        let started = async {
            if let Some(url) = &spec.url {
                let mut config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(t) = &spec.bearer_token {
                    config = config.auth_header(t.clone());
                }
                let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
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
        match tokio::time::timeout(Duration::from_secs(30), started).await {
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
                Self::failed(format!("failed to start: {e}"))
            }
            Err(_) => {
                tracing::error!(upstream = %alias, "MCP upstream did not initialise within 30 s");
                Self::failed("did not initialise within 30 s".into())
            }
        }
    }

    /// An upstream that could not be connected, with why.
    fn failed(error: String) -> Self {
        Upstream {
            peer: None,
            error: Some(error),
            watch: Watch::default(),
            tools: tokio::sync::Mutex::new(None),
            whole_checked: tokio::sync::OnceCell::new(),
            _service: None,
        }
    }

    /// The upstream's tools: fresh when `fresh` or the cached copy is old or stale.
    pub(super) async fn tools(&self, fresh: bool) -> Result<Vec<Tool>, String> {
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
