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

// Handlers, by step of the approval's life cycle (routes are mounted by `router` alone).
pub mod aaep;
pub mod approvals;
pub mod clarify;
pub mod decide;
pub mod gate;
pub mod learning;
pub mod plans;
pub mod router;
pub mod tokens;
pub mod tools;
pub mod whoami;
// The operator dashboard.
pub mod dashboard;
// Background work and the wire formats.
pub mod checkpoints;
pub mod formats;
pub mod webhooks;
// The kit at the bottom: state helpers, extractors, checks, errors, config, the edge.
pub mod auth;
pub mod calls;
pub mod config;
pub mod edge;
pub mod edits;
pub mod error;
pub mod extract;
pub mod replies;
pub mod serve;
pub mod store_call;
pub mod throttle;
pub mod waiters;

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
    /// Connection cap and header-read timeout for [`run`].
    pub limits: serve::ConnLimits,
    /// Long-polls, woken per approval, question or review.
    pub waiters: Arc<waiters::Waiters>,
    /// Request rate limits and failed-authentication throttling.
    pub throttle: Arc<throttle::Throttle>,
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
        let store = Store::open(
            &config.data_dir,
            assent_core::approval::millis(config.token_ttl_seconds),
        )
        .map_err(|source| StartError::Store {
            dir: config.data_dir.clone(),
            source,
        })?;
        let mut state = Self::new(
            store,
            config.registry.clone(),
            principals,
            Settings {
                approval_timeout_ms: config
                    .approval_timeout_seconds
                    .map(assent_core::approval::millis),
                max_pending_per_agent: config.max_pending_per_agent,
                aaep_max_timeout_extension_s: config.aaep_max_timeout_extension_seconds,
                max_arguments_bytes: config.max_arguments_bytes,
                body_read_timeout: Duration::from_secs(config.body_read_timeout_seconds),
            },
        );
        state.webhooks = Arc::new(webhooks);
        state.public_url = config.public_url.as_deref().map(Arc::from);
        state.waiters = Arc::new(waiters::Waiters::new(config.max_waiters_per_principal));
        state.throttle = Arc::new(throttle::Throttle::with_proxies(
            config.rate_limits,
            config.trusted_proxies.clone(),
        ));
        state.limits = serve::ConnLimits {
            max_connections: config.max_connections,
            header_read_timeout: Duration::from_secs(config.header_read_timeout_seconds),
        };
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
            limits: serve::ConnLimits::default(),
            waiters: Arc::default(),
            throttle: Arc::default(),
            checkpoints: Arc::default(),
        }
    }

    /// Re-reads the longest timeout extension of the open AAEP subscriptions.
    pub async fn refresh_extension(&self) {
        if let Ok(Ok(ms)) = self.store_task(|s| s.timeout_extension_ms()).await {
            self.extension_ms
                .store(ms, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Tells the event streams (dashboard, AAEP, webhooks) that something changed.
    pub fn changed(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// Approvals `ids` left `pending` (or changed): wakes their long-polls, and the streams.
    pub fn settled(&self, ids: &[String]) {
        for id in ids {
            self.waiters.wake(&waiters::approval_key(id));
        }
        if !ids.is_empty() {
            self.changed();
        }
    }
}

/// Default `max_arguments_bytes`: 256 KiB.
pub const DEFAULT_MAX_ARGUMENTS_BYTES: usize = 256 * 1024;

/// Gateway-wide settings (see [`config::Config`]).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Approval wait (ms) when no rule names one; `None`: by risk tier (300/120/60 s).
    pub approval_timeout_ms: Option<i64>,
    /// Pending approvals one agent may have before `429 TOO_MANY_PENDING`.
    pub max_pending_per_agent: u64,
    /// Longest AAEP timeout extension a subscriber may obtain, in seconds (AAEP §6.4.2).
    pub aaep_max_timeout_extension_s: u64,
    /// Largest canonical `arguments` of a call, in bytes (`max_arguments_bytes`, default
    /// 256 KiB); larger is `413 ARGUMENTS_TOO_LARGE`. Request bodies may be 64 KiB larger.
    pub max_arguments_bytes: usize,
    /// How long a client may take to send a request body once its headers are in
    /// (`body_read_timeout_seconds`, default 30); slower is `408 REQUEST_TIMEOUT`.
    pub body_read_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            approval_timeout_ms: None,
            max_pending_per_agent: 100,
            aaep_max_timeout_extension_s: 600,
            max_arguments_bytes: DEFAULT_MAX_ARGUMENTS_BYTES,
            body_read_timeout: Duration::from_secs(30),
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
    app(state, axum::Router::new())
}

/// The gateway's routes and `extra` (the MCP hub's `/mcp`) behind the same edge: the throttle
/// (rate limits, failed-authentication lock-outs), every body buffered within the body-read
/// timeout and the body limit, the URI limit, JSON errors and caught panics.
pub fn app(state: AppState, extra: axum::Router) -> axum::Router {
    let max_body = state
        .settings
        .max_arguments_bytes
        .saturating_add(edge::BODY_OVERHEAD_BYTES);
    let read_timeout = state.settings.body_read_timeout;
    let routes = router::routes(state.clone())
        .merge(extra)
        .layer(axum::middleware::from_fn_with_state(state, throttle::layer));
    edge::wrap(routes, max_body, read_timeout)
}

/// Applies expiry now, then every `interval`, until the returned task is aborted.
pub fn spawn_expiry(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let sweep = |s: &Store| -> Result<_, assent_store::StoreError> {
                let now = now_ms();
                let ids = s.expire_due(now)?;
                let other = s.emit_countdowns(now)? + s.expire_clarifications(now)?;
                Ok((ids, other))
            };
            match state.store_task(sweep).await {
                Ok(Ok((ids, other))) if !ids.is_empty() || other > 0 => {
                    for id in &ids {
                        tracing::info!(approval_id = %id, "approval expired or escalated");
                    }
                    state.settled(&ids);
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
    let limits = state.limits;
    let app = app(state.clone(), extra);
    let res = serve::serve(listener, app, limits, Duration::from_secs(10), shutdown).await;
    expiry.abort();
    signer.abort();
    for h in hooks {
        h.abort();
    }
    // The last checkpoint covers everything written before the shutdown.
    checkpoints::sign_due(&state, assent_store::checkpoint::Due::NOW).await;
    res
}
