//! assent-server: the HTTP API of the assent gateway.
//!
//! [`router`] serves `POST /v1/tool-calls` (gatekeeper + durable approval), approval reads and
//! long-polls, operator decisions, token redemption and `/healthz`; [`run`] serves it on a bound
//! listener with graceful shutdown and an expiry timer. Authentication is by bearer key against
//! the principals of the [`config::Config`]. Store calls run on tokio's blocking pool.
//!
//! It is not the policy engine (`assent-core`) or the store (`assent-store`); it owns the wire
//! format (JSON, RFC 3339 times) and authorisation.

#![warn(missing_docs)]

pub mod aaep;
pub mod api;
pub mod auth;
pub mod checkpoints;
pub mod clarify;
pub mod config;
pub mod dashboard;
pub mod error;
pub mod formats;
pub mod plans;
pub mod tools;
pub mod webhooks;

use assent_core::policy::Registry;
use assent_store::Store;
use config::{Config, Principal};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Shared state of a running server.
#[derive(Clone)]
pub struct AppState {
    /// The store (SQLite).
    pub store: Arc<Store>,
    /// Agents and governance policies.
    pub registry: Arc<Registry>,
    /// Who may call the API.
    pub principals: Arc<Vec<Principal>>,
    /// Gateway-wide settings from the config.
    pub settings: Settings,
    /// Bumped after every approval state change; long-polls wait on it.
    pub changes: Arc<watch::Sender<u64>>,
    /// The longest AAEP timeout extension (ms) honoured for an open subscription.
    pub extension_ms: Arc<std::sync::atomic::AtomicI64>,
    /// Signed-in dashboard operators.
    pub ui: Arc<dashboard::Sessions>,
    /// Outgoing webhooks, secrets resolved.
    pub webhooks: Arc<Vec<config::Webhook>>,
    /// `public_url` without a trailing `/`, for links sent out.
    pub public_url: Option<Arc<str>>,
    /// Runs a rule's `dry_run_tool` on the call's MCP upstream (set when `assent serve`
    /// fronts MCP upstreams); `None`: the dashboard offers no dry run.
    pub dry_run: Option<Arc<dyn DryRun>>,
    /// When audit checkpoints are signed and the JSONL sink file (`audit_checkpoints`).
    pub checkpoints: Arc<config::AuditCheckpoints>,
}

/// A future returned by [`DryRun::run`].
pub type DryRunFuture<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send + 'a>>;

/// Calls a tool on an MCP upstream on an operator's behalf, for the dashboard's dry-run
/// button (seed 002: "a dry-run button when feasible"). Implemented by the MCP hub.
pub trait DryRun: Send + Sync {
    /// Whether `server` is an upstream this can reach.
    fn serves(&self, server: &str) -> bool;
    /// Calls `tool` on upstream `server` with `arguments`; `Ok` is the `tools/call` result
    /// (JSON), `Err` says why it could not be run.
    fn run<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: &'a serde_json::Value,
    ) -> DryRunFuture<'a>;
}

impl AppState {
    /// Builds the state from a validated config: opens the store in `config.data_dir`
    /// and resolves the principals' keys.
    pub fn from_config(config: &Config) -> Result<Self, StartError> {
        let principals = config.principals()?;
        let webhooks = config.webhooks()?;
        let store = Store::open(&config.data_dir, config.token_ttl_seconds as i64 * 1000).map_err(
            |source| StartError::Store {
                dir: config.data_dir.clone(),
                source,
            },
        )?;
        let mut state = Self::new(
            store,
            config.registry.clone(),
            principals,
            Settings {
                approval_timeout_ms: config.approval_timeout_seconds.map(|s| s as i64 * 1000),
                max_pending_per_agent: config.max_pending_per_agent,
                aaep_max_timeout_extension_s: config.aaep_max_timeout_extension_seconds,
            },
        );
        state.webhooks = Arc::new(webhooks);
        state.public_url = config.public_url.as_deref().map(Arc::from);
        state.checkpoints = Arc::new(config.audit_checkpoints.clone());
        Ok(state)
    }

    /// Builds the state from parts.
    pub fn new(
        store: Store,
        registry: Registry,
        principals: Vec<Principal>,
        settings: Settings,
    ) -> Self {
        Self {
            store: Arc::new(store),
            registry: Arc::new(registry),
            principals: Arc::new(principals),
            settings,
            changes: Arc::new(watch::channel(0).0),
            extension_ms: Arc::new(std::sync::atomic::AtomicI64::new(0)),
            ui: Arc::default(),
            webhooks: Arc::default(),
            public_url: None,
            dry_run: None,
            checkpoints: Arc::default(),
        }
    }

    /// Re-reads the longest timeout extension of the open AAEP subscriptions.
    pub async fn refresh_extension(&self) {
        let s = self.store.clone();
        if let Ok(Ok(ms)) = tokio::task::spawn_blocking(move || s.timeout_extension_ms()).await {
            self.extension_ms
                .store(ms, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Wakes every long-poll.
    pub fn changed(&self) {
        self.changes.send_modify(|v| *v += 1);
    }
}

/// Gateway-wide settings (see [`config::Config`]).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Approval wait (ms) when no rule names one; `None`: by risk tier (300/120/60 s).
    pub approval_timeout_ms: Option<i64>,
    /// Pending approvals one agent may have before `429 TOO_MANY_PENDING`.
    pub max_pending_per_agent: u64,
    /// Longest AAEP timeout extension a subscriber may obtain, in seconds (AAEP §6.4.2).
    pub aaep_max_timeout_extension_s: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            approval_timeout_ms: None,
            max_pending_per_agent: 100,
            aaep_max_timeout_extension_s: 600,
        }
    }
}

/// Why the server state could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the store in {dir}: {source}")]
    /// The store could not be opened.
    Store {
        /// The data directory.
        dir: std::path::PathBuf,
        /// Why.
        source: assent_store::StoreError,
    },
    #[error(transparent)]
    /// The configuration is invalid.
    Config(#[from] config::ConfigError),
}

/// The current time in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The application router (no listener), for tests with `tower::ServiceExt::oneshot`.
pub fn router(state: AppState) -> axum::Router {
    api::router(state)
}

/// Applies expiry now, then every `interval`, until the returned task is aborted.
pub fn spawn_expiry(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let s = state.store.clone();
            let sweep = move || -> Result<_, assent_store::StoreError> {
                let now = now_ms();
                let ids = s.expire_due(now)?;
                let other = s.emit_countdowns(now)? + s.expire_clarifications(now)?;
                Ok((ids, other))
            };
            match tokio::task::spawn_blocking(sweep).await {
                Ok(Ok((ids, other))) if !ids.is_empty() || other > 0 => {
                    for id in &ids {
                        tracing::info!(approval_id = %id, "approval expired or escalated");
                    }
                    state.changed();
                }
                Ok(Err(e)) => tracing::error!(error = %e, "expiry sweep failed"),
                _ => {}
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// Serves the API on `listener` until `shutdown` completes, then drains connections for at
/// most 10 seconds. Expired approvals (also those that expired while the server was down) are
/// settled at start and then every second; audit checkpoints are signed when due (checked every
/// second) and once more at shutdown.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    run_with(listener, state, axum::Router::new(), shutdown).await
}

/// [`run`], with `extra` routes merged into the API (the MCP hub's `/mcp`).
pub async fn run_with(
    listener: TcpListener,
    state: AppState,
    extra: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    state.refresh_extension().await;
    let expiry = spawn_expiry(state.clone(), Duration::from_secs(1));
    let hooks = webhooks::spawn(state.clone());
    let signer = checkpoints::spawn(state.clone(), Duration::from_secs(1));
    let app = router(state.clone()).merge(extra);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // Small JSON replies: send them at once instead of waiting on Nagle's algorithm.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = tx.send(());
    });
    let res = tokio::select! {
        r = serve => r,
        _ = async { let _ = rx.await; tokio::time::sleep(Duration::from_secs(10)).await } => Ok(()),
    };
    expiry.abort();
    signer.abort();
    for h in hooks {
        h.abort();
    }
    // The last checkpoint covers everything written before the shutdown.
    checkpoints::sign_due(&state, assent_store::checkpoint::Due::NOW).await;
    res
}
