//! The server configuration file (`assent.yaml`): parsed once, validated into [`Config`]; any
//! error stops start-up with file, line and reason. Loading goes in steps, one file each:
//! [`raw`] (the file as written, and the error type), [`files`] (the agent and governance
//! globs expanded; every file read bounded, regular files only), [`principals`], [`limits`]
//! (numbers, rate limits, audit checkpoints), [`database`] (SQLite or PostgreSQL),
//! [`outbound`] (MCP upstreams, webhooks, `public_url`); this file reads the file, loads the
//! registry and assembles the result, and keeps where a live reload re-reads it from
//! ([`ReloadSource`]).

pub mod database;
pub mod files;
pub mod limits;
pub mod oidc;
pub mod outbound;
pub mod passkeys;
pub mod principals;
pub mod raw;
pub mod slack;
pub mod urls;

pub use database::DatabaseConfig;
pub use files::{MAX_FILE_BYTES, MAX_TOTAL_BYTES, read_bounded};
pub use limits::{
    ARGUMENTS_BYTES_BOUNDS, AUDIT_RETENTION_DAYS_BOUNDS, AuditCheckpoints, EXTENSION_BOUNDS,
    MAX_PENDING_BOUNDS, RateLimits, TIMEOUT_BOUNDS, TOKEN_TTL_BOUNDS,
};
pub use outbound::{McpUpstream, Webhook, WebhookFormat};

/// Bounds of `mcp_client_gone_seconds`: 5 s … 24 h (the hub's own bounds, which it clamps to).
pub const MCP_CLIENT_GONE_BOUNDS: (u64, u64) = (5, 24 * 3600);
pub use principals::{MIN_KEY_CHARS, Principal, PrincipalKind};
pub use raw::{ConfigError, Problem};

use assent_core::policy::Registry;
use files::{expand, read_policy_files};
use raw::{RawConfig, at};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub file: PathBuf,
    /// `listen`: the socket address to bind (`--listen` overrides it).
    pub listen: String,
    /// `data_dir`: the store's directory (`--data-dir` overrides it).
    pub data_dir: PathBuf,
    /// `keys_dir`: the directory of `token.key` and `audit.key` (relative to the file);
    /// `None`: `data_dir` (see [`Config::keys_dir`]).
    pub keys_dir: Option<PathBuf>,
    /// The agents and governance policies, validated.
    pub registry: Registry,
    /// Time an approval waits, in seconds, when no rule names `timeout_seconds`. `None` (the
    /// default): by risk — high 300 s, medium 120 s, low 60 s.
    pub approval_timeout_seconds: Option<u64>,
    /// `max_pending_per_agent`: pending approvals one agent may have (default 100); more
    /// proposals get `429 TOO_MANY_PENDING`.
    pub max_pending_per_agent: u64,
    /// `aaep_max_timeout_extension_seconds`: the longest timeout extension an AAEP subscriber
    /// may obtain (default 600; 0 disables extensions).
    pub aaep_max_timeout_extension_seconds: u64,
    /// How long a minted approval token can be redeemed, in seconds.
    pub token_ttl_seconds: u64,
    /// `session_grant_max_seconds` (1 s … 30 days, default 86,400 = 24 h): how long a grant
    /// with scope `session` stands after it is created. The agent names its session itself,
    /// so a session grant lapses like a duration grant instead of covering that session id
    /// forever.
    pub session_grant_max_seconds: u64,
    /// `max_arguments_bytes`: the largest canonical `arguments` of a call (default 256 KiB).
    pub max_arguments_bytes: usize,
    /// `max_connections`: concurrent connections served (default 10,000, and always 64 below
    /// the open-file limit); more are answered `503` and closed.
    pub max_connections: usize,
    /// `max_connections_per_address`: concurrent connections served from one client address
    /// (default 1,000; a `trusted_proxies` peer is not limited); more are answered `503` and
    /// closed, so one address's idle sockets cannot take every connection.
    pub max_connections_per_address: usize,
    /// `header_read_timeout_seconds`: how long a client has to send a request's headers, the
    /// longest idle keep-alive wait, and the longest a response waits for the client to take
    /// any of its bytes (default 30).
    pub header_read_timeout_seconds: u64,
    /// `body_read_timeout_seconds`: how long a client has to send a request body (default 30).
    pub body_read_timeout_seconds: u64,
    /// `max_waiters_per_principal`: long-polls one principal may hold at once (default 1024);
    /// more are `429 TOO_MANY_WAITERS`.
    pub max_waiters_per_principal: usize,
    /// `rate_limits: {requests_per_second, burst}`: per principal (default 1,000/s, 2,000).
    pub rate_limits: RateLimits,
    /// `trusted_proxies`: addresses of reverse proxies whose `X-Forwarded-For` names the client
    /// (for the failed-authentication throttle); empty by default.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// `metrics_key_env`: the variable holding a key that may read `GET /metrics` and nothing
    /// else (issue 15 §2); without it only operator keys may.
    pub metrics_key_env: Option<String>,
    /// The line of `metrics_key_env` in the file, for the errors of [`Config::metrics_key`].
    metrics_key_line: Option<u64>,
    /// Keys from `key_env` shorter than [`MIN_KEY_CHARS`] are allowed (`serve
    /// --insecure-demo-keys`, loopback only); false by default.
    pub insecure_demo_keys: bool,
    /// `strict_agent_files`: a field an agent file has that Agent Format 1.0 does not define
    /// is an error, not a warning, as with `assent serve --strict` (false by default).
    pub strict_agent_files: bool,
    /// Files the registry was loaded from.
    pub agent_files: Vec<PathBuf>,
    /// Governance files the registry was loaded from.
    pub governance_files: Vec<PathBuf>,
    /// Start-up warnings: globs that match nothing, then the registry's warnings.
    pub warnings: Vec<String>,
    /// `mcp_upstreams`: the MCP servers behind `/mcp`, by alias.
    pub mcp_upstreams: BTreeMap<String, McpUpstream>,
    /// `public_url`: how people reach this gateway (`https://assent.example.com`), for the
    /// dashboard links in webhooks; without it, webhooks carry no links.
    pub public_url: Option<String>,
    /// `passkeys`: the WebAuthn relying party for passkey-signed approvals (issue 14 §4);
    /// `None`: passkeys are off, and an approval that needs one cannot be approved.
    pub passkeys: Option<passkeys::PasskeysConfig>,
    /// `oidc`: single sign-on for the dashboard (issue 14 §7); `None`: key sign-in only.
    pub oidc: Option<oidc::OidcConfig>,
    /// `webhooks`: outgoing notifications (secrets not yet resolved; see [`Config::webhooks`]).
    pub webhooks: Vec<Webhook>,
    /// `mcp_allowed_hosts`: `Host` values `/mcp` answers (empty: loopback names only).
    pub mcp_allowed_hosts: Vec<String>,
    /// `mcp_allowed_origins`: browser `Origin`s `/mcp` accepts (empty: no Origin check).
    pub mcp_allowed_origins: Vec<String>,
    /// `mcp_client_gone_seconds` ([`MCP_CLIENT_GONE_BOUNDS`]; `None`: 30 s): how long an HTTP
    /// client of `/mcp` may have no stream open before the hub takes it as gone and withdraws
    /// its calls under way (a laptop asleep longer than this loses its held calls).
    pub mcp_client_gone_seconds: Option<u64>,
    /// `audit_checkpoints`: signed audit checkpoints.
    pub audit_checkpoints: AuditCheckpoints,
    /// `audit_retention_days` (1 … 36,500): audit records older than this many days are
    /// archived into a signed export in `data_dir/archive` and then deleted from the store
    /// (`assent_store::retention`), hourly and at start-up. `None` (the default): kept forever.
    pub audit_retention_days: Option<u64>,
    /// `database`: SQLite in `data_dir` (default) or PostgreSQL (see [`Config::database`]).
    pub database: DatabaseConfig,
    /// `slack`: approving from Slack (issue 15 §4); `None` without it (the interactivity
    /// endpoint then answers 404).
    pub slack: Option<slack::SlackConfig>,
    principals: Vec<principals::Declared>,
}

/// Default `listen` address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

impl Config {
    /// Reads and validates `path`. Relative paths in it (`data_dir`, `agents`, `governance`)
    /// are relative to the file's directory. Principal keys are not resolved here (see
    /// [`Config::principals`]), so `assent check` works without the key variables set.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with(path, false)
    }

    /// [`Config::load`]; with `strict` (or `strict_agent_files: true` in the file) a field an
    /// agent file has that Agent Format 1.0 does not define stops start-up instead of warning.
    pub fn load_with(path: &Path, strict: bool) -> Result<Config, ConfigError> {
        let text = read_bounded(path)?;
        let raw: RawConfig = serde_saphyr::from_str(&text).map_err(|e| {
            let line = e.location().map(|l| l.line());
            at(path, line, assent_core::policy::yaml_reason(&e.to_string()))
        })?;
        let base = base_of(path);
        let mut warnings = Vec::new();
        let agent_files = expand(&base, path, &raw.agents, ("agents", false), &mut warnings)?;
        let governance_files = expand(
            &base,
            path,
            &raw.governance,
            ("governance", true),
            &mut warnings,
        )?;
        let texts = read_policy_files(&agent_files, &governance_files)?;
        let registry = Registry::load_with(
            &texts.agents,
            &texts.governance,
            strict || raw.strict_agent_files,
        )
        .map_err(ConfigError::from)?;
        drop(texts); // not kept: the registry holds what it needs
        warnings.extend(registry.warnings.iter().cloned());
        warnings.extend(oidc_roles_unmapped(path, &raw));
        warnings.extend(oidc_name_mutable(path, &raw));
        let principals = principals::declare(path, &raw.principals)?;
        let l = limits::limits(path, &raw)?;
        let mcp_upstreams = outbound::mcp_upstreams(path, &raw.mcp_upstreams)?;
        let public_url = outbound::public_url(path, &raw)?;
        let webhooks = outbound::webhooks(path, &raw.webhooks)?;
        let passkeys = passkeys::passkeys(path, raw.passkeys.as_ref(), public_url.as_deref())?;
        let oidc = oidc::oidc(
            path,
            raw.oidc.as_ref(),
            public_url.as_deref(),
            &raw.principals,
        )?;
        let audit_checkpoints =
            limits::audit_checkpoints(path, &base, raw.audit_checkpoints.as_ref())?;
        let database = database::database(path, raw.database.as_ref())?;
        let slack = slack::slack(path, raw.slack.as_ref(), &raw.principals)?;
        let audit_retention_days = raw::bounded(
            path,
            "audit_retention_days",
            &raw.audit_retention_days,
            AUDIT_RETENTION_DAYS_BOUNDS,
        )?;
        let mcp_client_gone_seconds = raw::bounded(
            path,
            "mcp_client_gone_seconds",
            &raw.mcp_client_gone_seconds,
            MCP_CLIENT_GONE_BOUNDS,
        )?;
        Ok(Config {
            slack,
            audit_retention_days,
            database,
            file: path.to_path_buf(),
            audit_checkpoints,
            public_url,
            passkeys,
            oidc,
            webhooks,
            mcp_upstreams,
            mcp_allowed_hosts: raw.mcp_allowed_hosts,
            mcp_allowed_origins: raw.mcp_allowed_origins,
            mcp_client_gone_seconds,
            listen: raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_string()),
            data_dir: base.join(raw.data_dir.unwrap_or_else(|| ".assent".into())),
            keys_dir: raw.keys_dir.map(|k| base.join(k)),
            registry,
            approval_timeout_seconds: l.approval_timeout_seconds,
            max_pending_per_agent: l.max_pending_per_agent,
            aaep_max_timeout_extension_seconds: l.aaep_max_timeout_extension_seconds,
            token_ttl_seconds: l.token_ttl_seconds,
            session_grant_max_seconds: l.session_grant_max_seconds,
            max_arguments_bytes: l.max_arguments_bytes,
            max_connections: l.max_connections,
            max_connections_per_address: l.max_connections_per_address,
            header_read_timeout_seconds: l.header_read_timeout_seconds,
            body_read_timeout_seconds: l.body_read_timeout_seconds,
            rate_limits: l.rate_limits,
            trusted_proxies: l.trusted_proxies,
            metrics_key_line: raw.metrics_key_env.as_ref().map(|m| m.referenced.line()),
            metrics_key_env: raw.metrics_key_env.map(|m| m.value),
            insecure_demo_keys: false,
            max_waiters_per_principal: l.max_waiters_per_principal,
            strict_agent_files: raw.strict_agent_files,
            agent_files,
            governance_files,
            warnings,
            principals,
        })
    }

    /// The agent and governance files this configuration names, read again now as `(path,
    /// text)` pairs, the way [`Config::load_with`] reads them: each a regular file of at most
    /// [`MAX_FILE_BYTES`], all together at most [`MAX_TOTAL_BYTES`]. For every reader after
    /// the load (`assent suggest`, the replay and suggestion endpoints), so a file that grew or
    /// was swapped for a pipe since is refused there too, naming the file and why.
    pub fn policy_files(&self) -> Result<assent_core::suggest::edit::PolicyFiles, ConfigError> {
        read_policy_files(&self.agent_files, &self.governance_files)
    }

    /// Resolves every principal's key: `key_env` reads the variable (the key itself), which
    /// must be set and non-empty; `key_sha256` is used as is. Two principals with the same key
    /// are an error. Keys are never logged.
    pub fn principals(&self) -> Result<Vec<Principal>, ConfigError> {
        principals::resolve(
            &self.file,
            &self.principals,
            self.insecure_demo_keys,
            &self.registry,
        )
    }

    /// The line of the principal `name` in the file (`None` when it has none there).
    pub(crate) fn principal_line(&self, name: &str) -> Option<u64> {
        principals::line_of(&self.principals, name)
    }

    /// Where the store is: `<data_dir>/assent.db`, or the PostgreSQL URL read now from the
    /// variable `database.url_env` names (set, non-empty, `postgres://`; the error names the
    /// variable, never the URL).
    pub fn database(&self) -> Result<assent_store::db::Database, ConfigError> {
        database::resolve(&self.file, &self.database, &self.data_dir)
    }

    /// Where the token and audit keys are: `keys_dir`, or `data_dir` when the file names
    /// none (issue 13 §2: replicas sharing a database are all given one `keys_dir`).
    pub fn keys_dir(&self) -> PathBuf {
        self.keys_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.clone())
    }

    /// SHA-256 of the scrape key read now from `metrics_key_env` (`None` without one). The
    /// variable must be set, have no [`principals::secret_flaw`] (whitespace always; fewer than
    /// [`principals::MIN_KEY_CHARS`] characters or 8 distinct ones only with
    /// `--insecure-demo-keys`: found by review, 32 spaces passed) and be no principal's key;
    /// the error names the variable, never the key.
    pub fn metrics_key(&self) -> Result<Option<[u8; 32]>, ConfigError> {
        use sha2::{Digest, Sha256};
        let Some(var) = &self.metrics_key_env else {
            return Ok(None);
        };
        let key = std::env::var(var).unwrap_or_default();
        let fail = |why: String| at(&self.file, self.metrics_key_line, why);
        if key.is_empty() {
            return Err(fail(format!(
                "metrics_key_env: environment variable {var} is not set or empty"
            )));
        }
        match principals::secret_flaw(&key) {
            Some((flaw, lifted)) if !lifted || !self.insecure_demo_keys => {
                return Err(fail(format!("metrics_key_env: the key in {var} {flaw}")));
            }
            _ => {}
        }
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        if self.principals()?.iter().any(|p| p.key_sha256 == digest) {
            return Err(fail(format!(
                "metrics_key_env: the key in {var} is also a principal's key; give the scrape key its own"
            )));
        }
        Ok(Some(digest))
    }

    /// The Slack integration with its secrets read from the environment (`None` without
    /// `slack:`); an unset or empty variable stops start-up naming it.
    /// (Its user map is read from [`Config::slack_users`], which a reload replaces.)
    pub fn slack(&self) -> Result<Option<slack::Slack>, ConfigError> {
        (self.slack.as_ref())
            .map(|c| slack::resolve(&self.file, c))
            .transpose()
    }

    /// Slack user id → principal name from `principals[].slack_user_id` (empty without
    /// `slack:`).
    pub fn slack_users(&self) -> std::collections::BTreeMap<String, String> {
        self.slack
            .as_ref()
            .map(|s| s.users.clone())
            .unwrap_or_default()
    }

    /// The webhooks with their secrets read from `secret_env`; an unset or empty variable
    /// stops start-up naming it (the secret itself is never printed).
    pub fn webhooks(&self) -> Result<Vec<Webhook>, ConfigError> {
        outbound::resolve_secrets(&self.file, &self.webhooks)
    }
}

/// The warning for `oidc:` without `roles`, when so. Found by review: group names are often
/// chosen by users (GitLab group paths, Entra display names), and each became a role of that
/// name.
fn oidc_roles_unmapped(path: &Path, raw: &RawConfig) -> Option<String> {
    let o = raw.oidc.as_ref().filter(|o| o.value.roles.is_none())?;
    let w = at(
        path,
        Some(o.referenced.line()),
        format!(
            "oidc.roles is not set: every group in the `{}` claim becomes a role of the same name, so whoever may create a group named like an approver role may approve; map group ids your administrators control (oidc.roles)",
            o.value.roles_claim
        ),
    );
    Some(w.to_string())
}

/// A warning when `oidc.name_claim` is not `sub`, `email` or `oid` (found by review): a claim
/// the person may change at the provider (`preferred_username`, `name`, most custom claims)
/// makes them a new operator to assent after a rename, so one person could cast two votes of a
/// quorum, and lose their standing grants. `sub` is the provider's stable id for a person;
/// Microsoft Entra ID's `oid` is as stable; `email` must be verified (`email_verified`) but
/// may still be reassigned.
fn oidc_name_mutable(path: &Path, raw: &RawConfig) -> Option<String> {
    let o = raw.oidc.as_ref()?;
    let claim = o.value.name_claim.as_deref()?;
    if matches!(claim, "sub" | "email" | "oid") {
        return None;
    }
    let w = at(
        path,
        Some(o.referenced.line()),
        format!(
            "oidc.name_claim `{claim}` may be a claim people can change at the provider: one renamed person becomes a second operator (a second vote in a quorum); use `sub`, and `principals[].sso` to give it a known name"
        ),
    );
    Some(w.to_string())
}

/// Where and how a running server re-reads its configuration (issue 14 §8, see
/// `crate::reload`): the file, the flags `assent serve` was given, and the settings only a
/// restart applies as they were at start-up.
pub struct ReloadSource {
    /// The configuration file it was started with.
    pub(crate) file: PathBuf,
    /// `assent serve --strict` (unknown agent-file fields are errors).
    pub(crate) strict: bool,
    /// `assent serve --insecure-demo-keys` (short `key_env` keys accepted, loopback only).
    pub(crate) insecure_demo_keys: bool,
    /// The settings a reload does not apply, as the file gave them at start-up.
    pub(crate) restart_only: BTreeMap<&'static str, String>,
    /// One reload at a time.
    pub(crate) lock: tokio::sync::Mutex<()>,
}

impl ReloadSource {
    /// Reloads of `config.file` (as loaded at start-up, before command-line overrides), with
    /// `strict` and `config.insecure_demo_keys` as `assent serve` was given them.
    pub fn new(config: &Config, strict: bool) -> Self {
        Self {
            file: config.file.clone(),
            strict,
            insecure_demo_keys: config.insecure_demo_keys,
            restart_only: restart_only(config),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The configuration file a reload reads.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Whether a reload is under way now (it holds the one-at-a-time lock). Asking takes that
    /// lock for an instant, so an operator's reload asked at that instant is refused `409`:
    /// for tests and diagnostics, not for a loop.
    pub fn in_progress(&self) -> bool {
        self.lock.try_lock().is_err()
    }
}

/// The directory relative paths of config file `path` are read from: its own (`.` for a bare
/// file name).
fn base_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The settings of `c` that decide what a decision, token or grant is worth and which records are
/// kept, as RFC 8785 canonical JSON: `approval_timeout_seconds`, `max_pending_per_agent`,
/// `aaep_max_timeout_extension_seconds`, `token_ttl_seconds`, `session_grant_max_seconds`,
/// `max_arguments_bytes`, `audit_retention_days`, the passkeys' `[origin, rp_id]` and Slack's
/// `{team_id}` (whose workspace's clicks may decide; each `null` when unset). Only a restart
/// applies them, so they are what a replica started with `c` holds until it stops. Part of the
/// configuration generation's digest (issue 13 §2, `crate::generations::digest`): found by review,
/// replicas of one database whose files differed only there were one configuration to each other,
/// so one minted tokens that lived a day where the others' lived five minutes, kept grants longer,
/// deleted audit records the others kept or, without Slack's `team_id`, took the clicks of any
/// workspace.
pub fn consent_settings(c: &Config) -> String {
    let passkeys = c.passkeys.as_ref().map(|p| [&p.origin, &p.rp_id]);
    let v = serde_json::json!({
        "approval_timeout_seconds": c.approval_timeout_seconds,
        "max_pending_per_agent": c.max_pending_per_agent,
        "aaep_max_timeout_extension_seconds": c.aaep_max_timeout_extension_seconds,
        "token_ttl_seconds": c.token_ttl_seconds,
        "session_grant_max_seconds": c.session_grant_max_seconds,
        "max_arguments_bytes": c.max_arguments_bytes,
        "audit_retention_days": c.audit_retention_days,
        "passkeys": passkeys,
        "slack": c.slack.as_ref().map(|s| serde_json::json!({"team_id": s.team_id})),
    });
    assent_core::canonical::canonical_value(&v).unwrap_or_else(|_| v.to_string())
}

/// The settings of `c` that only a restart applies, by key, as comparable text.
pub(crate) fn restart_only(c: &Config) -> BTreeMap<&'static str, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &'static str, v: &dyn std::fmt::Debug| {
        m.insert(k, format!("{v:?}"));
    };
    /// Puts each named field of `c` (`Debug` text) under its own name, so a key is always its
    /// field's name.
    macro_rules! fields {
        ($($field:ident),* $(,)?) => { $(put(stringify!($field), &c.$field);)* };
    }
    fields!(
        listen,
        data_dir,
        keys_dir,
        database,
        approval_timeout_seconds,
        max_pending_per_agent,
        aaep_max_timeout_extension_seconds,
        token_ttl_seconds,
        session_grant_max_seconds,
        max_arguments_bytes,
        max_connections,
        max_connections_per_address,
        header_read_timeout_seconds,
        body_read_timeout_seconds,
        max_waiters_per_principal,
        rate_limits,
        trusted_proxies,
        metrics_key_env,
        mcp_upstreams,
        mcp_allowed_hosts,
        mcp_allowed_origins,
        mcp_client_gone_seconds,
        public_url,
        webhooks,
        oidc,
        passkeys,
        audit_checkpoints,
        audit_retention_days
    );
    // The Slack user map follows a reload (with the principals); the rest needs a restart.
    let slack = c.slack.clone().map(|mut s| {
        s.users.clear();
        s
    });
    put("slack", &slack);
    m
}
