//! The state of a running server ([`AppState`]: store, the live set of principals, agents and
//! policies ([`Live`], swapped whole by a reload), settings, the change signal, waiters,
//! throttle, webhooks; dashboard sessions are in the store) and how it is built from a
//! validated [`Config`]; [`now_ms`], the server's clock. Every handler receives it; it mounts
//! no route and calls no handler.

use crate::config::{self, Config, Principal};
use crate::{serve, throttle, waiters};
use assent_core::approval::millis;
use assent_core::policy::Registry;
use assent_store::Store;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// Shared state of a running server: one [`Shared`] behind an `Arc`, so that the clone every
/// middleware layer and handler takes is one reference count, not one per field (those
/// clones and drops were about 2 % of the server's CPU under load). Fields read through
/// `Deref`; setting one (`state.webhooks = …`, while the state is being built) goes through
/// `Arc::make_mut`, which changes this handle alone when it is shared — as setting a field of
/// a clone always did.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl std::ops::DerefMut for AppState {
    fn deref_mut(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }
}

/// What an [`AppState`] holds.
#[derive(Clone)]
pub struct Shared {
    /// The store (SQLite or Postgres).
    pub store: Arc<Store>,
    /// The thread that runs the handlers' store calls in batches ([`crate::executor`]);
    /// `None` with `ASSENT_STORE_EXECUTOR=off` (calls run on the blocking pool).
    pub executor: Option<crate::executor::Executor>,
    /// The principals, agents and policies in force, replaced whole by a reload (issue 14
    /// §8): read it with [`AppState::live`] (one consistent snapshot), swap it with
    /// [`AppState::swap_live`].
    live: Arc<RwLock<Arc<Live>>>,
    /// Where a reload re-reads the configuration from (`None`: this state was built from
    /// parts, and `POST /v1/reload` answers `409 RELOAD_UNAVAILABLE`).
    pub reload: Option<Arc<config::ReloadSource>>,
    /// Gateway-wide settings from the config.
    pub settings: Settings,
    /// Bumped after every approval state change (also another replica's, heard through
    /// [`crate::replicas`]); the event streams wait on it.
    pub changes: Arc<watch::Sender<u64>>,
    /// Set `true` when the gateway stops: the webhook and Slack deliveries finish the one in
    /// flight (its answer recorded), leave their backoff, and end ([`crate::cursor::follow`]).
    pub(crate) stopping: Arc<watch::Sender<bool>>,
    /// The longest AAEP timeout extension (ms) honoured for an open subscription.
    pub extension: Arc<crate::extension::TimeoutExtension>,
    /// Outgoing webhooks, secrets resolved.
    pub webhooks: Arc<Vec<config::Webhook>>,
    /// `public_url` without a trailing `/`, for links sent out.
    pub public_url: Option<Arc<str>>,
    /// The WebAuthn relying party when `passkeys` is configured (issue 14 §4); `None`: an
    /// approval that needs a passkey cannot be approved.
    pub relying: Option<Arc<config::passkeys::Relying>>,
    /// The single sign-on provider when `oidc` is configured (issue 14 §7); `None`: operators
    /// sign in to the dashboard with their keys only.
    pub oidc: Option<Arc<config::oidc::Sso>>,
    /// Approving from Slack when `slack` is configured (issue 15 §4); `None`: the
    /// interactivity endpoint answers 404.
    pub slack: Option<Arc<config::slack::Slack>>,
    /// Runs a rule's `dry_run_tool` on the call's MCP upstream (set when `assent serve`
    /// fronts MCP upstreams); `None`: the dashboard offers no dry run.
    pub dry_run: Option<Arc<dyn DryRun>>,
    /// The approvals whose dry run is running now: one at a time each (a second press while
    /// one runs answers `409`, it does not call the upstream again).
    pub dry_runs: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Connection cap and header-read timeout for [`run`](crate::run).
    pub limits: serve::ConnLimits,
    /// Request-body bytes in flight per principal ([`crate::body_budget`]).
    pub bodies: Arc<crate::body_budget::BodyBudget>,
    /// Long-polls, woken per approval, question or review.
    pub waiters: Arc<waiters::Waiters>,
    /// Per principal, the requests in flight that shield their connection ([`crate::serve_slots`]).
    pub shields: Arc<crate::serve_slots::Shields>,
    /// Request rate limits and failed-authentication throttling.
    pub throttle: Arc<throttle::Throttle>,
    /// When audit checkpoints are signed and the JSONL sink file (`audit_checkpoints`).
    pub checkpoints: Arc<config::AuditCheckpoints>,
    /// The newest checkpoint this process published: the file's newest (read at start-up,
    /// then each one appended), or without a file each one it signed: the next checkpoint is
    /// signed only if the chain still extends it
    /// ([`assent_store::Store::checkpoint_if_due_after`]).
    pub published: Arc<std::sync::Mutex<Option<assent_store::checkpoint::Checkpoint>>>,
    /// The last `/readyz` answer and when it was taken: at most one check a second, shared
    /// by every caller (the route needs no key, so it must not reach the store per request).
    pub readiness:
        Arc<tokio::sync::Mutex<Option<(std::time::Instant, assent_store::readiness::Readiness)>>>,
    /// The Prometheus metric families served at `/metrics` (issue 15 §2).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// SHA-256 of the scrape key in `metrics_key_env`, which may read `/metrics` only.
    pub metrics_key_sha256: Option<Arc<[u8; 32]>>,
    /// On Postgres, the thread hearing other replicas' changes ([`crate::replicas`]); it
    /// stops when the last clone of the state is dropped.
    pub listener: Option<Arc<assent_store::db::Listener>>,
    /// This replica's configuration generation among the replicas of one PostgreSQL
    /// database ([`crate::generations`]); not enforced on SQLite or for a state built from
    /// parts.
    pub generation: Arc<Generation>,
}

/// The part of the configuration a reload replaces (issue 14 §8), as one snapshot: a request
/// that read it keeps using it to the end, while the next request reads the new one.
#[derive(Debug, Clone)]
pub struct Live {
    /// Agents and governance policies.
    pub registry: Arc<Registry>,
    /// What the registry's thresholds need of a session's history (the longest rate window,
    /// the cost arguments): what a proposal reads instead of the whole history (issue 13 §5).
    pub window_needs: Arc<assent_core::triggers::window::WindowNeeds>,
    /// Who may call the API.
    pub principals: Arc<Vec<Principal>>,
    /// Slack user id → principal name (`principals[].slack_user_id`, issue 15 §4): replaced
    /// by a reload with the principals, so an unmapped Slack user stops deciding at once.
    pub slack_users: Arc<std::collections::BTreeMap<String, String>>,
}

impl Live {
    /// The snapshot of `registry` (its window needs derived) and `principals`.
    pub fn new(registry: Registry, principals: Vec<Principal>) -> Self {
        Self {
            window_needs: Arc::new(assent_core::triggers::window::WindowNeeds::of(&registry)),
            registry: Arc::new(registry),
            principals: Arc::new(principals),
            slack_users: Arc::default(),
        }
    }

    /// This snapshot with the Slack user map `users` (Slack user id → principal name).
    pub fn with_slack_users(mut self, users: std::collections::BTreeMap<String, String>) -> Self {
        self.slack_users = Arc::new(users);
        self
    }
}

/// A future returned by [`DryRun::run`].
pub type DryRunFuture<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send + 'a>>;

/// A future returned by [`DryRun::tools`].
pub type DryRunToolsFuture<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<Vec<serde_json::Value>, String>> + Send + 'a>>;

/// Calls a tool on an MCP upstream on an operator's behalf, for the dashboard's dry-run
/// button (seed 002: "a dry-run button when feasible"). Implemented by the MCP hub.
pub trait DryRun: Send + Sync {
    /// Whether `server` is an upstream this can reach.
    fn serves(&self, server: &str) -> bool;
    /// The tool definitions upstream `server` advertises now (`tools/list` entries as JSON):
    /// the dry-run tool runs only while its definition matches its pin (found by review: an
    /// upstream that redefined its dry-run tool, say into one that writes, still had it run
    /// from the dashboard, while every gated call of it waited for the review). `Err` says
    /// why they could not be had (then nothing is run).
    fn tools<'a>(&'a self, server: &'a str) -> DryRunToolsFuture<'a>;
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
        let metrics_key = config.metrics_key()?;
        let oidc = (config.oidc.as_ref())
            .map(|o| crate::config::oidc::Sso::new(&config.file, o))
            .transpose()?;
        let database = config.database()?;
        let store = Store::open_database(
            &config.data_dir,
            &config.keys_dir(),
            &database,
            millis(config.token_ttl_seconds),
            std::sync::Arc::new(crate::envelopes::WireEnvelopes),
        )
        .map_err(|reason| StartError::Store {
            at: format!("{database:?}"),
            reason,
        })?;
        let mut state = Self::new(
            store,
            config.registry.clone(),
            principals,
            Settings {
                approval_timeout_ms: config.approval_timeout_seconds.map(millis),
                max_pending_per_agent: config.max_pending_per_agent,
                aaep_max_timeout_extension_s: config.aaep_max_timeout_extension_seconds,
                max_arguments_bytes: config.max_arguments_bytes,
                body_read_timeout: Duration::from_secs(config.body_read_timeout_seconds),
                session_grant_max_ms: millis(config.session_grant_max_seconds),
            },
        );
        state.webhooks = Arc::new(webhooks);
        state.public_url = config.public_url.as_deref().map(Arc::from);
        if let Some(p) = &config.passkeys {
            let rp = config::passkeys::Relying::new(p)
                .map_err(|e| config::ConfigError::new(format!("passkeys: {e}")))?;
            state.relying = Some(Arc::new(rp));
        }
        state.oidc = oidc.map(Arc::new);
        state.slack = config.slack()?.map(Arc::new);
        state.swap_live(
            (*state.live())
                .clone()
                .with_slack_users(config.slack_users()),
        );
        state.waiters = Arc::new(waiters::Waiters::new(config.max_waiters_per_principal));
        state.throttle = Arc::new(throttle::Throttle::with_proxies(
            config.rate_limits,
            config.trusted_proxies.clone(),
        ));
        state.limits = serve::ConnLimits {
            max_connections: config.max_connections,
            per_address: config.max_connections_per_address,
            trusted: config.trusted_proxies.clone().into(),
            header_read_timeout: Duration::from_secs(config.header_read_timeout_seconds),
            write_stall: Duration::from_secs(config.header_read_timeout_seconds),
        };
        state.checkpoints = Arc::new(config.audit_checkpoints.clone());
        if let Some(file) = &config.audit_checkpoints.file {
            // Attack (found by review): a database rolled back (a redeemed token usable again)
            // or rewritten and re-chained was served, and the gateway signed the forked chain
            // into the checkpoint file, hiding the fork from `assent audit verify`.
            let problem = (state.store.checkpoint_file_problem(file)).map_err(|reason| {
                StartError::Store {
                    at: file.display().to_string(),
                    reason,
                }
            })?;
            if let Some(why) = problem {
                return Err(StartError::Forked(why));
            }
            // Read again (the check above read it whole): the newest, which the next
            // checkpoint must extend. None when there is no file yet.
            let key = state.store.audit_public_key();
            let newest = assent_store::checkpoint::newest_signed_in_jsonl(file, &key);
            *state.published.lock().expect("not poisoned") = newest.ok().flatten();
        }
        state.metrics_key_sha256 = metrics_key.map(Arc::new);
        state.reload = Some(Arc::new(config::ReloadSource::new(config, false)));
        if let assent_store::db::Database::Postgres { url } = &database {
            let shared = throttle::Throttle::with_proxies(
                config.rate_limits,
                config.trusted_proxies.clone(),
            )
            .shared(state.store.clone());
            state.throttle = Arc::new(shared);
            let listener = crate::replicas::hear(
                url,
                state.waiters.clone(),
                state.changes.clone(),
                state.store.clone(),
                state.extension.clone(),
            )?;
            state.listener = Some(Arc::new(listener));
            state.generation.enforce(&state.store, config);
        }
        Ok(state)
    }

    /// Builds the state from parts.
    pub fn new(
        store: Store,
        registry: Registry,
        principals: Vec<Principal>,
        settings: Settings,
    ) -> Self {
        store.set_rules(Arc::new(registry.clone()));
        let store = Arc::new(store);
        // `ASSENT_STORE_EXECUTOR=off` (`Store::runs_batches`): calls run on the blocking pool,
        // as before the executor (for measuring it; not a configuration setting).
        let executor = store
            .runs_batches()
            .then(|| crate::executor::Executor::start(store.clone()))
            .and_then(|started| {
                started
                    .inspect_err(|e| tracing::error!(error = %e, "no store executor thread; store calls run on the blocking pool"))
                    .ok()
            });
        let state = Self(Arc::new(Shared {
            store,
            executor,
            live: Arc::new(RwLock::new(Arc::new(Live::new(registry, principals)))),
            reload: None,
            settings,
            changes: Arc::new(watch::channel(0).0),
            stopping: Arc::new(watch::channel(false).0),
            extension: Arc::default(),
            webhooks: Arc::default(),
            public_url: None,
            relying: None,
            oidc: None,
            slack: None,
            dry_run: None,
            dry_runs: Arc::default(),
            limits: serve::ConnLimits::default(),
            bodies: Arc::default(),
            metrics: Arc::default(),
            metrics_key_sha256: None,
            waiters: Arc::default(),
            shields: Arc::default(),
            throttle: Arc::default(),
            checkpoints: Arc::default(),
            published: Arc::default(),
            readiness: Arc::default(),
            listener: None,
            generation: Arc::default(),
        }));
        crate::metrics::observe_store(&state.store, &state.metrics);
        state
    }

    /// The principals, agents and policies in force now (one snapshot: read it once per
    /// request where they must agree, e.g. the gatekeeper's registry and window needs).
    pub fn live(&self) -> Arc<Live> {
        self.live.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The principals in force now (see [`AppState::live`]).
    pub fn principals(&self) -> Arc<Vec<Principal>> {
        self.live().principals.clone()
    }

    /// The agents and governance policies in force now (see [`AppState::live`]).
    pub fn registry(&self) -> Arc<Registry> {
        self.live().registry.clone()
    }

    /// Puts `live` in force for every clone of this state at once (the next request reads
    /// it; requests that read the old one finish with it) and returns the old one.
    pub fn swap_live(&self, live: Live) -> Arc<Live> {
        self.put_live(Arc::new(live))
    }

    /// [`AppState::swap_live`] of a shared `live` (a reload puts it in force inside its store
    /// task, and the old one back when that task's write fails).
    pub fn put_live(&self, live: Arc<Live>) -> Arc<Live> {
        self.store.set_rules(live.registry.clone());
        let mut slot = self.live.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *slot, live)
    }

    /// Re-reads the longest timeout extension of the open AAEP subscriptions.
    /// In line with every other re-read ([`crate::extension`]): its answer never overwrites
    /// one asked later; a failed read keeps the extension in force (logged).
    pub async fn refresh_extension(&self) {
        let ticket = self.extension.ask();
        let read = match self.store_task(|s| s.timeout_extension_ms()).await {
            Ok(read) => read.map_err(|e| e.to_string()),
            Err(e) => Err(e.message),
        };
        self.extension.settle(ticket, read);
    }

    /// Tells the event streams (dashboard, AAEP, webhooks) that something changed.
    pub fn changed(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// Who the deciding operator `name` is to separation of duties (issue 14 §2): the agent
    /// ids they own (`principals[].owns`) and the other names they go by — a principal's
    /// linked `sso` name bare and as `oidc:<name>`, their Slack user id (`slack_user_id`: an
    /// agent fronted by Slack knows the person it acts for by it — found by review, alice
    /// approved from Slack a call made `on_behalf_of: U0ALICE`), an unlinked SSO operator's
    /// name without its `oidc:` prefix. `(owns, aka)`; both empty for an unknown name.
    ///
    /// A configured principal is looked up first, whatever its name (without `oidc` in the
    /// config nothing forbids one named `oidc:…`, and its `owns` must hold).
    pub fn duties_of(&self, name: &str) -> (Vec<String>, Vec<String>) {
        let principals = self.principals();
        let Some(p) = principals.iter().find(|p| p.name == name) else {
            let Some(bare) = name.strip_prefix(crate::config::oidc::NAME_PREFIX) else {
                return (Vec::new(), Vec::new());
            };
            // The principals of that name, however spelt, are this person: their agents too
            // (found by review: `X` owning `bot`, signed in as `oidc:X`, approved bot's call).
            let same = || {
                principals
                    .iter()
                    .filter(|p| assent_core::duties::same_person(&p.name, bare))
            };
            let owns = same().flat_map(|p| p.owns.iter().cloned()).collect();
            let aka = std::iter::once(bare.to_string()).chain(same().map(|p| p.name.clone()));
            return (owns, aka.collect());
        };
        let aka = p.sso.iter().flat_map(|s| {
            [
                s.clone(),
                format!("{}{s}", crate::config::oidc::NAME_PREFIX),
            ]
        });
        // Its own name signed in unlinked by single sign-on is the same person, as the bare
        // name is for `oidc:NAME` above (found by review: `oidc:alice@x` voting first, then
        // the key of principal `alice@x`, counted one person twice toward a quorum).
        let unlinked = format!("{}{}", crate::config::oidc::NAME_PREFIX, p.name);
        let aka = aka.chain(p.slack_user_id.iter().cloned()).chain([unlinked]);
        (p.owns.clone(), aka.collect())
    }

    /// Approval `a` was decided, cancelled or voted on (its record after the change): wakes
    /// its long-polls and the streams ([`AppState::settled`]), and when it left `pending`
    /// counts it in the metrics and traces the decision in its trace (issue 15 §1, §2).
    ///
    /// A settled record is handed to the approval's long-polls with the wake, so that they
    /// answer from it instead of queueing a read behind the store's next batch.
    pub fn decided(&self, a: &assent_store::ApprovalRecord) {
        if a.status == assent_core::approval::ApprovalStatus::Pending {
            self.settled(std::slice::from_ref(&a.id));
            return;
        }
        self.waiters
            .wake_with(&waiters::approval_key(&a.id), || Arc::new(a.clone()));
        self.changed();
        crate::telemetry::settled(&self.metrics, a);
    }

    /// Approvals `ids` were expired (or took an escalation step) by a sweep: wakes their
    /// long-polls and the streams now, and in the background reads them back to count and
    /// trace those that left `pending` ([`AppState::decided`]'s bookkeeping; a failed read
    /// loses a data point, never a wake-up).
    pub fn expired(&self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        self.settled(&ids);
        let st = self.clone();
        tokio::spawn(async move {
            let read = move |s: &Store| -> Result<Vec<_>, assent_store::StoreError> {
                Ok(ids
                    .iter()
                    .filter_map(|id| s.get_approval(id).ok().flatten())
                    .collect())
            };
            if let Ok(Ok(recs)) = st.store_task(read).await {
                for a in recs
                    .iter()
                    .filter(|a| a.status != assent_core::approval::ApprovalStatus::Pending)
                {
                    crate::telemetry::settled(&st.metrics, a);
                }
            }
        });
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

/// Default `max_arguments_bytes`: 256 KiB (defined with the other limits in [`crate::config`]).
pub use crate::config::limits::DEFAULT_MAX_ARGUMENTS_BYTES;

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
    /// How long a `session` grant stands after it is created, in milliseconds
    /// (`session_grant_max_seconds`, default 24 h): the agent names its session, so a
    /// session grant lapses like a duration one ([`assent_core::grant::terms`]).
    pub session_grant_max_ms: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            approval_timeout_ms: None,
            max_pending_per_agent: 100,
            aaep_max_timeout_extension_s: 600,
            max_arguments_bytes: DEFAULT_MAX_ARGUMENTS_BYTES,
            body_read_timeout: Duration::from_secs(30),
            session_grant_max_ms: assent_core::grant::DEFAULT_SESSION_GRANT_MAX_MS,
        }
    }
}

/// Why the server state could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the store ({at}): {reason}")]
    /// The store could not be opened.
    Store {
        /// Which database: `sqlite:<path>` or `postgres` (never the URL: it may hold a password).
        at: String,
        /// Why (in the message, and not also a `source`: `assent serve` prints the chain, and
        /// printed the reason twice).
        reason: assent_store::StoreError,
    },
    #[error("cannot hear the other replicas' changes: {0}")]
    /// The Postgres listener could not be started.
    Listen(#[from] assent_store::db::DbError),
    #[error(
        "the audit chain does not hold a checkpoint this gateway published: {0}. The database was rolled back or its audit log rewritten; nothing is served. Run `assent audit verify --checkpoint FILE`; after a deliberate restore of an older backup, move the checkpoint file aside"
    )]
    /// The database does not hold the newest checkpoint of `audit_checkpoints.file` (rolled back
    /// or rewritten since they were signed).
    Forked(String),
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

/// This replica's configuration generation ([`crate::generations`]): whether it is enforced
/// (PostgreSQL), whether `serve --adopt-config` asked to make it the newest at start-up, and,
/// under one lock so that a check and a reload cannot overwrite each other, the digest in force
/// and why it is superseded (`None`: it is the newest, or not enforced).
#[derive(Debug, Default)]
pub struct Generation {
    enforced: AtomicBool,
    adopt_at_start: AtomicBool,
    /// A reload is switching configurations: the watch changes nothing meanwhile.
    pending: AtomicBool,
    now: Mutex<(String, Option<String>)>,
    /// The restart-only settings in the digest, fixed at start-up ([`Generation::enforce`]).
    settings: std::sync::OnceLock<String>,
    /// Held while a heartbeat writes ([`Generation::unless_left`]) and while the replica is
    /// marked as left ([`Generation::mark_left`]).
    beating: Mutex<()>,
    /// Whether this replica left (a graceful stop): read without waiting for `beating`.
    left: AtomicBool,
}

impl Generation {
    /// Enforces generations (the server does so on PostgreSQL): `store` writes nothing until
    /// start-up registers the configuration (`generations::register_at_start`; found by
    /// review: a reload racing start-up withdrew consent before anything was checked).
    /// The digest covers `config`'s restart-only settings ([`config::consent_settings`]).
    pub fn enforce(&self, store: &Store, config: &Config) {
        self.enforced.store(true, Ordering::SeqCst);
        let _ = self.settings.set(config::consent_settings(config));
        store.serve_config(Some(&[]));
    }

    /// Has start-up make this replica's configuration the newest even if another live
    /// replica serves another (`serve --adopt-config`).
    pub fn adopt_at_start(&self) {
        self.adopt_at_start.store(true, Ordering::SeqCst);
    }

    /// Why this replica's configuration is superseded (a sentence for the wire), or `None`.
    pub fn superseded(&self) -> Option<String> {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    /// Whether start-up is to adopt this configuration (`serve --adopt-config`).
    pub(crate) fn adopting(&self) -> bool {
        self.adopt_at_start.load(Ordering::SeqCst)
    }

    /// Whether generations are enforced here.
    pub(crate) fn enforced(&self) -> bool {
        self.enforced.load(Ordering::SeqCst)
    }

    /// Records `digest` as the configuration in force and why it is `superseded` (`None`:
    /// the newest).
    pub(crate) fn set(&self, digest: &str, superseded: Option<String>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = (digest.to_string(), superseded);
    }

    /// Records why the configuration `digest` is superseded (`None`: the newest) only if it is
    /// still the one in force (a reload may have put another in force meanwhile) and no reload
    /// is switching ([`Generation::pend`]); whether it did.
    pub(crate) fn set_if(&self, digest: &str, superseded: Option<String>) -> bool {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        let still = now.0 == digest && !self.pending.load(Ordering::SeqCst);
        if still {
            now.1 = superseded;
        }
        still
    }

    /// Whether a reload is switching configurations (`generations::reloading` until its
    /// guard ends): [`Generation::set_if`] changes nothing meanwhile.
    pub(crate) fn pend(&self, pending: bool) {
        self.pending.store(pending, Ordering::SeqCst);
    }

    /// The restart-only settings the digest covers (empty when not enforced).
    pub(crate) fn settings(&self) -> &str {
        self.settings.get().map_or("", String::as_str)
    }

    /// Runs `write` (a heartbeat: a liveness write made beside the store's executor, on the
    /// blocking pool) unless this replica left; `None` when it did. The flag stays locked
    /// while `write` runs, so [`Generation::mark_left`] waits for it. Found by review: a
    /// heartbeat already on the blocking pool at a graceful stop wrote its row after the
    /// leave's delete, so the stopped replica counted as live for 10 s and a restart with a
    /// changed file in that window was refused. Never call it on the store's executor: a
    /// heartbeat holding the flag may wait for the executor's open batch (found by review).
    pub(crate) fn unless_left<T>(&self, write: impl FnOnce() -> T) -> Option<T> {
        let _beating = self.beating.lock().unwrap_or_else(|e| e.into_inner());
        (!self.left.load(Ordering::SeqCst)).then(write)
    }

    /// Whether this replica left: what a liveness write run on the store's executor (a
    /// registration) checks, since the leave's delete runs after it there, in order. Never
    /// waits (a heartbeat holding `beating` may wait for the executor's open batch).
    pub(crate) fn has_left(&self) -> bool {
        self.left.load(Ordering::SeqCst)
    }

    /// Marks this replica as left, once any [`Generation::unless_left`] write in flight has
    /// ended (blocking: call it off the async workers and off the store's executor); no
    /// liveness write starts after it.
    pub(crate) fn mark_left(&self) {
        let _beating = self.beating.lock().unwrap_or_else(|e| e.into_inner());
        self.left.store(true, Ordering::SeqCst);
    }

    /// The digest of the configuration in force (empty before start-up registered it).
    pub(crate) fn digest(&self) -> String {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::Generation;
    use std::sync::{Arc, mpsc};
    use std::time::Duration;

    /// A liveness write already running when the replica leaves ends before the leave's
    /// withdrawal runs, and none starts after it: the withdrawal is the last word.
    #[test]
    fn no_liveness_write_lands_after_the_leave() {
        let g = Arc::new(Generation::default());
        let (started, wait_started) = mpsc::channel();
        let (finish, wait_finish) = mpsc::channel::<()>();
        let (log_tx, log) = mpsc::channel();
        let (g2, log2) = (g.clone(), log_tx.clone());
        let beat = std::thread::spawn(move || {
            g2.unless_left(|| {
                started.send(()).unwrap();
                wait_finish.recv().unwrap();
                log2.send("heartbeat").unwrap();
            })
        });
        wait_started.recv().unwrap();
        let g3 = g.clone();
        let leave = std::thread::spawn(move || {
            g3.mark_left();
            log_tx.send("left").unwrap()
        });
        std::thread::sleep(Duration::from_millis(50));
        finish.send(()).unwrap();
        assert_eq!(beat.join().unwrap(), Some(()));
        leave.join().unwrap();
        assert_eq!(log.try_iter().collect::<Vec<_>>(), ["heartbeat", "left"]);
        assert_eq!(g.unless_left(|| "late heartbeat"), None);
        assert!(g.has_left());
    }
}
