//! `assent serve`, the composition root: loads the config, opens the store through
//! `assent_server::AppState`, binds the listener (refusing demo keys beyond loopback), starts
//! the MCP hub when `mcp_upstreams` is set and mounts it at `/mcp` behind a strict-JSON,
//! agent-key check, hands the hub to the dashboard as its dry-run, and runs until SIGINT or
//! SIGTERM; SIGHUP re-reads the config file's principals, agents and policies
//! (`assent_server::reload`). The routes themselves live in `assent-server`, the hub in
//! `assent-mcp`.

use crate::setup::{init_tracing, upstream_specs};
use anyhow::{Context, Result, bail};
use assent_server::config::Config;
use serde_json::Value;
use std::path::PathBuf;

/// Runs the gateway; `listen` and `data_dir` override the config's, `strict` refuses unknown
/// agent-file fields, `insecure_demo_keys` accepts short `key_env` keys on loopback only,
/// `adopt_config` makes this configuration the newest generation on a PostgreSQL database even
/// if another replica loaded a newer one (`assent_server::generations`).
/// Returns exit status 0 after a graceful shutdown; errors (bad config, address in use) end it.
pub(crate) async fn serve(
    config: PathBuf,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    (strict, insecure_demo_keys, adopt_config): (bool, bool, bool),
) -> Result<i32> {
    init_tracing("info");
    // Logged here, once the log subscriber is installed (found by review: logged where it
    // was first found, before the subscriber with OTel on, it went nowhere).
    if let Some(e) = assent_api::no_ca_roots_error() {
        tracing::warn!(error = %e, "{}", assent_api::NO_CA_ROOTS);
    }
    // Before anything else: a SIGTERM during start-up ends the gateway gracefully.
    let stop = shutdown();
    // And a SIGHUP (default action: end the process) during start-up, which would orphan the
    // upstream children: it is kept, and reloads once the gateway serves.
    let hup = hangup();
    let mut cfg = Config::load_with(&config, strict)?;
    cfg.insecure_demo_keys = insecure_demo_keys;
    // What a reload compares the file with: as read, before the command line's overrides.
    let reloader = assent_server::config::ReloadSource::new(&cfg, strict);
    if let Some(l) = listen {
        cfg.listen = l;
    }
    if let Some(d) = data_dir {
        cfg.data_dir = d;
    }
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    // The PostgreSQL client blocks on its own runtime: open the store off this one's threads.
    let mut state = {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || assent_server::AppState::from_config(&cfg)).await??
    };
    state.reload = Some(std::sync::Arc::new(reloader));
    if adopt_config {
        state.generation.adopt_at_start();
    }
    let nofile = assent_server::serve::raise_open_file_limit();
    state.limits.max_connections =
        assent_server::serve::effective_cap(state.limits.max_connections, nofile);
    let listener = bind(&cfg).await?;
    let (extra, mut private, hub) = mount_mcp(&cfg, &listener, &mut state).await?;
    let stop = hub_settled_after(stop, hub);
    tracing::info!(
        listen = %listener.local_addr()?, data_dir = %cfg.data_dir.display(),
        agents = cfg.registry.agents.len(), policies = cfg.registry.policies().len(),
        principals = state.principals().len(), open_files = ?nofile,
        max_connections = state.limits.max_connections, "assent gateway ready"
    );
    let retention = cfg.audit_retention_days.map(|d| {
        let dir = cfg.data_dir.join(assent_store::retention::ARCHIVE_DIR);
        assent_server::retention::spawn(state.clone(), d, dir, assent_server::retention::EVERY)
    });
    let hangups = on_hangup(hup, state.clone());
    let own = private.as_mut().and_then(|p| p.listener.take());
    assent_server::run_with(listener, own, state, extra, stop).await?;
    drop(private);
    retention.inspect(tokio::task::JoinHandle::abort);
    hangups.inspect(tokio::task::JoinHandle::abort);
    Ok(0)
}

/// Binds `cfg.listen`; demo keys beyond loopback stop start-up, plain HTTP beyond loopback
/// without an `https://` `public_url` is warned about.
async fn bind(cfg: &Config) -> Result<tokio::net::TcpListener> {
    let insecure_demo_keys = cfg.insecure_demo_keys;
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let bound = listener.local_addr()?;
    if insecure_demo_keys && !bound.ip().is_loopback() {
        bail!(
            "--insecure-demo-keys serves short demo keys on loopback only; {bound} is not a loopback address"
        );
    }
    if insecure_demo_keys {
        tracing::warn!(
            "--insecure-demo-keys: short demo keys are accepted; never use this for real"
        );
    }
    let tls_in_front = cfg
        .public_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"));
    if !bound.ip().is_loopback() && !tls_in_front {
        tracing::warn!(listen = %bound, "listening beyond loopback over plain HTTP: bearer keys and decisions cross the network in clear; put TLS in front (a reverse proxy) and set public_url to its https:// address");
    }
    Ok(listener)
}

/// The Unix socket the hub reaches its gateway on (`assent serve`): `DATA_DIR/hub-PID.sock`,
/// mode 0600 in the data directory (0700): no other user can reach it; removed when dropped.
struct PrivateSocket {
    path: PathBuf,
    listener: Option<assent_server::serve::Private>,
}

/// The longest socket path bound (Linux allows 107 bytes).
#[cfg(unix)]
const MAX_SOCKET_PATH: usize = 100;

impl PrivateSocket {
    /// Binds `data_dir/hub-PID.sock`, after removing the sockets there of processes that
    /// ended without removing theirs (killed). Errors: a path too long for a socket, the bind's.
    #[cfg(unix)]
    fn bind(data_dir: &std::path::Path) -> Result<(Self, PathBuf)> {
        remove_stale_sockets(data_dir);
        let path = data_dir.join(format!("hub-{}.sock", std::process::id()));
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "{} is longer than a socket path may be ({MAX_SOCKET_PATH} bytes)",
                path.display()
            );
        }
        // Left by an earlier process of the same id.
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)
            .with_context(|| format!("cannot listen on {}", path.display()))?;
        // Owner only, whatever the umask and the directory's mode (found by review: a data
        // directory kept at 0755 left the socket to the umask, and its requests carry no
        // client address for the throttle to count).
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot make {} private", path.display()))?;
        let me = PrivateSocket {
            path: path.clone(),
            listener: Some(listener),
        };
        Ok((me, path))
    }
}

/// Removes the `hub-PID.sock` files in `dir` whose process no longer runs.
#[cfg(unix)]
fn remove_stale_sockets(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hub-")?.strip_suffix(".sock"))
            .and_then(|p| p.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        let ended = matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        );
        if ended {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl Drop for PrivateSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// With `mcp_upstreams`, starts the hub (talking back to this gateway on a private Unix
/// socket, [`PrivateSocket`], else — none could be bound, logged — at the listener's address), makes it the dashboard's
/// dry-run and returns a router serving it at `/mcp` behind [`strict_mcp_bodies`], and the
/// socket; without, an empty router.
async fn mount_mcp(
    cfg: &Config,
    listener: &tokio::net::TcpListener,
    state: &mut assent_server::AppState,
) -> Result<(axum::Router, Option<PrivateSocket>, Option<Hub>)> {
    let mut extra = axum::Router::new();
    let mut private = None;
    let mut started = None;
    if !cfg.mcp_upstreams.is_empty() {
        let tcp = assent_mcp::hub::GatewayAt::Url(format!("http://{}", own_address(listener)?));
        #[cfg(unix)]
        let gateway = match PrivateSocket::bind(&cfg.data_dir) {
            Ok((socket, path)) => {
                private = Some(socket);
                assent_mcp::hub::GatewayAt::Socket(path)
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the MCP hub reaches its gateway over loopback TCP instead of a private socket: its held calls count against max_connections_per_address");
                tcp
            }
        };
        #[cfg(not(unix))]
        let gateway = tcp;
        let hub = assent_mcp::hub::Hub::start(upstream_specs(cfg)?, gateway, 25, 10).await?;
        state.dry_run = Some(std::sync::Arc::new(HubDryRun(hub.clone())));
        started = Some(hub.clone());
        let sessions = McpSessions::default();
        extra = extra
            .nest_service(
                "/mcp",
                assent_mcp::hub::http_service(
                    hub,
                    cfg.mcp_allowed_hosts.clone(),
                    cfg.mcp_allowed_origins.clone(),
                    sessions.manager.clone(),
                    cfg.mcp_client_gone_seconds
                        .map(std::time::Duration::from_secs),
                ),
            )
            .layer(axum::middleware::from_fn_with_state(
                (state.clone(), std::sync::Arc::new(sessions)),
                strict_mcp_bodies,
            ));
        tracing::info!(upstreams = cfg.mcp_upstreams.len(), "MCP endpoint at /mcp");
    }
    Ok((extra, private, started))
}

/// The MCP hub `assent serve` runs, when it runs one.
type Hub = std::sync::Arc<assent_mcp::hub::Hub>;

/// `stop` (the shutdown signal), then, with a hub, its calls under way stopped and what is on
/// its way settled ([`assent_mcp::hub::Hub::shutting_down`], within
/// [`assent_mcp::hub::SHUTDOWN_SETTLE`]: 15 s) before the server stops serving: the hub's
/// proposals, withdrawals and result reports are requests to this gateway. From the signal on
/// the hub takes no new session or call. Found by review: the hub was left to the process's
/// end, and a proposal in flight at SIGTERM stayed pending for a client long gone; then, that
/// its settling was not bounded as a whole, so the shutdown (with the server's 10 s drain and
/// its last checkpoint) could outlast a service manager's 30 s stop timeout and be killed.
async fn hub_settled_after(stop: impl std::future::Future<Output = ()>, hub: Option<Hub>) {
    stop.await;
    if let Some(hub) = hub
        && !hub.shutting_down(assent_mcp::hub::SHUTDOWN_SETTLE).await
    {
        tracing::warn!("the MCP hub still had calls on their way at shutdown");
    }
}

/// SIGHUP's handler on Unix (`None` when it cannot be installed, logged; `()` elsewhere).
/// Installed at the top of [`serve`], next to [`shutdown`]: until then a SIGHUP had its
/// default action and ended the process during start-up (store open, migrations, bind, the
/// MCP upstreams' start), orphaning the upstream children (found by review). A SIGHUP that
/// arrives before [`on_hangup`] runs is kept and reloads once the gateway serves.
#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

/// Installs [`Hangup`]. Must be called on the runtime.
fn hangup() -> Hangup {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot handle SIGHUP: reload with `assent reload`");
                None
            }
        }
    }
}

/// On Unix, reloads the configuration's principals, agents and policies on every SIGHUP
/// `hup` receives (issue 14 §8; the outcome is logged, a refused file keeps the old set; one
/// that came during start-up reloads now) until aborted; `None` elsewhere, or when the
/// handler could not be installed.
fn on_hangup(hup: Hangup, state: assent_server::AppState) -> Option<tokio::task::JoinHandle<()>> {
    #[cfg(unix)]
    {
        let mut hup = hup?;
        Some(tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the configuration");
                let by = assent_server::reload::Trigger::Signal;
                // The outcome (applied, or refused with its errors) is logged by `reload`.
                let _ = assent_server::reload::reload(&state, by).await;
            }
        }))
    }
    #[cfg(not(unix))]
    {
        let _ = (hup, state);
        None
    }
}

/// A future resolving on Ctrl-C (SIGINT) or, on Unix, SIGTERM, logging the shutdown. The
/// handlers are installed when this is called, not when the future is first polled: the
/// server polls it only once its accept loop runs, and a SIGTERM before that (a supervisor
/// stopping a gateway that has just come up) killed the process unhandled, with no shutdown
/// checkpoint (found as a flaky CLI test: the gateway "ended signal: 15"). A signal that
/// arrives during start-up is kept and ends the gateway as soon as it serves. Must be called
/// on the runtime.
fn shutdown() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("signal handler");
        let mut int = signal(SignalKind::interrupt()).expect("signal handler");
        async move {
            tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
            tracing::info!("shutting down");
        }
    }
    #[cfg(not(unix))]
    async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    }
}

/// At most this many MCP sessions of one principal are kept ([`McpSessions`]); past it that
/// principal's oldest is closed, and its client must start a new session (`404`). Per
/// principal, so that one agent opening sessions in a loop cannot push out another's (found
/// by review); closed, not only forgotten (found by review: the forgotten session's worker,
/// channels and handler lived on until it idled out, so one key opening sessions in a loop
/// kept hundreds of thousands alive).
const MAX_MCP_SESSIONS_PER_PRINCIPAL: usize = 10_000;

/// Which principal opened each MCP session of `/mcp` (the `Mcp-Session-Id` the hub answered
/// its `initialize` with), each principal's sessions, oldest first, and rmcp's session
/// manager, to close the sessions pushed out.
#[derive(Default)]
struct McpSessions {
    owners: std::sync::Mutex<SessionOwners>,
    manager: assent_mcp::hub::HttpSessions,
}

/// [`McpSessions`]' maps.
#[derive(Default)]
struct SessionOwners {
    owner: std::collections::HashMap<String, String>,
    opened: std::collections::HashMap<String, std::collections::VecDeque<String>>,
}

impl McpSessions {
    fn owner(&self, session: &str) -> Option<String> {
        self.owners
            .lock()
            .expect("sessions")
            .owner
            .get(session)
            .cloned()
    }
    fn bind(&self, session: &str, principal: &str) {
        let mut g = self.owners.lock().expect("sessions");
        if g.owner.insert(session.into(), principal.into()).is_some() {
            return;
        }
        let mine = g.opened.entry(principal.into()).or_default();
        mine.push_back(session.into());
        let evicted = (mine.len() > MAX_MCP_SESSIONS_PER_PRINCIPAL)
            .then(|| mine.pop_front())
            .flatten();
        if let Some(old) = evicted {
            g.owner.remove(&old);
            self.manager.close(&old);
        }
    }
    fn forget(&self, session: &str) {
        let mut g = self.owners.lock().expect("sessions");
        if let Some(p) = g.owner.remove(session)
            && let Some(mine) = g.opened.get_mut(&p)
        {
            mine.retain(|s| s != session);
            if mine.is_empty() {
                g.opened.remove(&p);
            }
        }
    }
}

/// Reads a `/mcp` request body strictly before rmcp sees it (issue 10 §1–2): a body with a
/// duplicate key or a number a double would change is answered `400` with a JSON-RPC error
/// naming the JSON pointer, and never gated or forwarded. A request without an agent's valid
/// bearer key (among the principals in force now: a reload revokes at once) is `401` before
/// its body is parsed (the edge bounds its size and read time).
///
/// An MCP session belongs to the principal whose key opened it: a request naming another's
/// `Mcp-Session-Id` is `404`, as an unknown session is. Attack (found by review): another
/// agent that learned a session id sent `notifications/cancelled` in it and withdrew the
/// session owner's held call (rmcp handles the notification before any handler of ours).
async fn strict_mcp_bodies(
    axum::extract::State((state, sessions)): axum::extract::State<(
        assent_server::AppState,
        std::sync::Arc<McpSessions>,
    )>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let rpc_error = |status: axum::http::StatusCode, message: String| {
        (
            status,
            axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": message}})),
        )
            .into_response()
    };
    let principals = state.principals();
    let Some(name) = assent_server::auth::authenticate(&principals, req.headers())
        .ok()
        .filter(|p| p.agent_id().is_some())
        .map(|p| p.name.clone())
    else {
        return rpc_error(
            axum::http::StatusCode::UNAUTHORIZED,
            "assent: send an agent's key (Authorization: Bearer KEY)".into(),
        );
    };
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(sid) = &session
        && sessions.owner(sid).as_deref() != Some(name.as_str())
    {
        return rpc_error(
            axum::http::StatusCode::NOT_FOUND,
            "assent: no such MCP session for this key; start a new one (initialize)".into(),
        );
    }
    let closing = req.method() == axum::http::Method::DELETE;
    // The edge (`assent_server::app`) has buffered the body within the body-read timeout and
    // the body limit already.
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return rpc_error(
            axum::http::StatusCode::BAD_REQUEST,
            "assent: the request body could not be read".into(),
        );
    };
    if !bytes.is_empty()
        && let Err(e) = assent_core::json::check(&bytes)
    {
        let line = String::from_utf8_lossy(&bytes);
        let body = assent_mcp::refusal(&line, &e);
        return (
            axum::http::StatusCode::BAD_REQUEST,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
    }
    let resp = next
        .run(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(bytes),
        ))
        .await;
    match (&session, resp.headers().get("mcp-session-id")) {
        (None, Some(new)) => {
            if let Ok(new) = new.to_str() {
                sessions.bind(new, &name);
            }
        }
        (Some(sid), _) if closing && resp.status().is_success() => sessions.forget(sid),
        _ => {}
    }
    resp
}

/// The dashboard's dry-run button, served by the MCP hub's upstream connections.
struct HubDryRun(std::sync::Arc<assent_mcp::hub::Hub>);

impl assent_server::DryRun for HubDryRun {
    fn serves(&self, server: &str) -> bool {
        self.0.has_upstream(server)
    }
    fn tools<'a>(&'a self, server: &'a str) -> assent_server::DryRunToolsFuture<'a> {
        Box::pin(self.0.upstream_tools(server))
    }
    fn run<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: &'a Value,
    ) -> assent_server::DryRunFuture<'a> {
        Box::pin(self.0.call_upstream(server, tool, arguments))
    }
}

/// Where this process reaches its own listener over TCP (the hub's fallback when its private
/// socket cannot be bound): the listener's address, loopback for one bound to every address
/// (`0.0.0.0`, `::`). Found by review: `http://0.0.0.0:PORT` is no loopback URL, so the hub's
/// client went through the environment's proxy with every agent key in clear text (and on
/// some systems cannot connect to it at all).
fn own_address(listener: &tokio::net::TcpListener) -> std::io::Result<std::net::SocketAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let mut at = listener.local_addr()?;
    match at.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => at.set_ip(Ipv4Addr::LOCALHOST.into()),
        IpAddr::V6(ip) if ip.is_unspecified() => at.set_ip(Ipv6Addr::LOCALHOST.into()),
        _ => {}
    }
    Ok(at)
}
