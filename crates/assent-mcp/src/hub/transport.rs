//! The hub's transports: a stdio client (`assent mcp --agent ID --config …`), its lines read
//! strictly before rmcp sees them, and the streamable HTTP service mounted at `/mcp` on
//! `assent serve` (with DNS-rebinding protection). What is served is [`HubHandler`]'s.

use super::handler::HubHandler;
use super::state::Hub;
use rmcp::ServiceExt;
use std::sync::Arc;

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
                    let _ = refused.send(crate::kit::refusal(&line, &e));
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

/// The sessions of the hub's streamable HTTP service ([`http_service`]), kept by rmcp's local
/// session manager; a clone is a handle to the same sessions.
#[derive(Clone, Default)]
pub struct HttpSessions(
    Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
);

impl HttpSessions {
    /// Closes session `id` (its worker, channels and handler), in the background; an unknown
    /// or closed one is left as it is. Needs a Tokio runtime.
    pub fn close(&self, id: &str) {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        let (manager, id): (_, Arc<str>) = (self.0.clone(), Arc::from(id));
        tokio::spawn(async move {
            let _ = manager.close_session(&id).await;
        });
    }
}

/// The streamable HTTP service for `/mcp` (mount with `Router::nest_service`), its sessions
/// kept by `sessions` (the caller keeps a handle to close them). Only requests whose `Host`
/// is in `allowed_hosts` (loopback names when empty) are served, and, when `allowed_origins`
/// is not empty, only browser requests from those origins (DNS-rebinding protection).
pub fn http_service(
    hub: Arc<Hub>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    sessions: HttpSessions,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    HubHandler,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
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
        sessions.0,
        config,
    )
}
