//! Command-line interface: `serve`, operator commands over HTTP, `check`, `mcp`, `audit verify`.

use anyhow::{Context, Result, anyhow, bail};
use assent_core::{ToolCall, VerdictKind, evaluate};
use assent_server::config::Config;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "assent",
    version,
    about = "A human approval gateway for AI agent actions"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Remote {
    /// Gateway URL.
    #[arg(
        long,
        env = "ASSENT_URL",
        default_value = "http://127.0.0.1:7878",
        global = true
    )]
    url: String,
    /// API key (an operator's for pending/show/approve/deny).
    #[arg(
        long = "api-key",
        env = "ASSENT_API_KEY",
        hide_env_values = true,
        global = true
    )]
    api_key: Option<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the gateway (HTTP API on the embedded SQLite store).
    Serve {
        #[arg(long, default_value = "assent.yaml")]
        config: PathBuf,
        /// Overrides `listen` from the config.
        #[arg(long)]
        listen: Option<String>,
        /// Overrides `data_dir` from the config.
        #[arg(long = "data-dir")]
        data_dir: Option<PathBuf>,
        /// Refuse to start when an agent file has a field Agent Format 1.0 does not define
        /// (a typo such as `aproval:`), instead of warning.
        #[arg(long)]
        strict: bool,
        /// Accept `key_env` keys shorter than 32 characters (the README's demo keys). Only on a
        /// loopback address; never for real use.
        #[arg(long = "insecure-demo-keys")]
        insecure_demo_keys: bool,
    },
    /// List pending approvals with what a person needs to decide.
    Pending {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Watch the queue in a terminal UI: ↑/↓ select, enter opens the card, a approves, d
    /// denies (with a reason), each confirmed with y; q quits. Honours NO_COLOR.
    Watch {
        #[command(flatten)]
        remote: Remote,
    },
    /// Show one approval.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Approve pending approvals: each gets its own single-use token for its exact call.
    /// Several ids are decided one by one with the same options.
    Approve {
        #[arg(required = true)]
        ids: Vec<String>,
        #[arg(long)]
        reason: Option<String>,
        /// once (default), session, workspace, or a duration such as 15m, 2h, 1d. Anything
        /// but once stores a grant that lets later matching calls through.
        #[arg(long, default_value = "once")]
        scope: String,
        /// Let the grant cover every call of the tool, not only these exact arguments.
        #[arg(long = "whole-tool")]
        whole_tool: bool,
        /// Confirm a workspace grant on an R3/R4 tool (discouraged).
        #[arg(long = "yes-workspace")]
        yes_workspace: bool,
        /// Approve with these arguments instead (a JSON object; one id only). The gatekeeper
        /// checks them again and the token binds them.
        #[arg(long)]
        args: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Deny pending approvals; the reason reaches the agent.
    Deny {
        #[arg(required = true)]
        ids: Vec<String>,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Cancel a pending approval, or with --session every pending approval of a session.
    Cancel {
        /// The approval id (or the session id with --session).
        id: String,
        #[arg(long)]
        session: bool,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// List active grants (scoped approvals); --all includes revoked and expired ones.
    Grants {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Revoke a grant.
    Revoke {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// List clarification questions agents are waiting on (pending unless --all).
    Clarifications {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Answer a clarification. VALUE is read as the question's accepted kind: a choice's value
    /// for multiple_choice, yes/no (or true/false) for yes_no, a number for numeric, else text.
    Answer {
        id: String,
        value: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Evaluate a call against the policy files, without a server.
    /// Exit status: 0 allow, 10 confirm, 11 deny, 2 bad input.
    Check {
        #[arg(long, default_value = "assent.yaml")]
        config: PathBuf,
        #[arg(long)]
        agent: String,
        #[arg(long)]
        tool: String,
        #[arg(long)]
        server: Option<String>,
        /// The arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        #[arg(long)]
        json: bool,
        /// Treat unknown fields in agent files as errors (exit 2).
        #[arg(long)]
        strict: bool,
    },
    /// Run an MCP stdio proxy in front of an MCP server: `assent mcp --agent ID --server ALIAS -- CMD ARGS...`
    ///
    /// Or, with `--config assent.yaml` instead of `--server` and a command: one stdio endpoint
    /// in front of every upstream in the config's `mcp_upstreams`, tools named `ALIAS__TOOL`.
    Mcp {
        #[arg(long)]
        agent: String,
        /// The agent file's MCP server alias of the upstream command (single-upstream mode:
        /// tool names unchanged).
        #[arg(long, required_unless_present = "config", conflicts_with = "config")]
        server: Option<String>,
        /// Serve every upstream of this config's `mcp_upstreams` (hub mode).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Session id for every call (default: a new UUID per proxy process).
        #[arg(long)]
        session: Option<String>,
        /// Seconds per long-poll while a call waits for a human.
        #[arg(long, default_value_t = 25)]
        poll_seconds: u64,
        /// Seconds between progress notifications while a call waits, sent when the client
        /// gave a progress token (keeps clients that reset their timeout on progress waiting).
        #[arg(long, default_value_t = 10)]
        progress_seconds: u64,
        #[command(flatten)]
        remote: Remote,
        #[arg(
            last = true,
            required_unless_present = "config",
            conflicts_with = "config"
        )]
        command: Vec<String>,
    },
    /// Audit log commands.
    Audit {
        #[command(subcommand)]
        cmd: AuditCmd,
    },
    /// Export data for other tools.
    Export {
        #[command(subcommand)]
        cmd: ExportCmd,
    },
    /// MCP tool-list pinning: review changed or new upstream tools.
    Tools {
        #[command(subcommand)]
        cmd: ToolsCmd,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
enum ToolsCmd {
    /// Tools whose definition changed (or that are new) since their server was pinned, each
    /// with the diff from its pinned definition. Their calls wait until accepted.
    Pending {
        #[arg(long)]
        json: bool,
    },
    /// Accept a changed tool's new definition: it becomes the pin and its calls go on.
    Accept { ids: Vec<String> },
    /// Reject a changed tool's new definition: its calls are refused.
    Reject { ids: Vec<String> },
    /// Every pinned tool.
    Pins {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ExportCmd {
    /// Every settled approval as an MPLP learning sample, one JSON object per line (JSONL).
    /// Reads the database directly (read-only; the gateway may keep running).
    LearningSamples {
        /// Data directory (default: `data_dir` of ./assent.yaml if present, else .assent).
        #[arg(long = "data-dir")]
        data_dir: Option<PathBuf>,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Verify the audit log offline: hash chain, signed checkpoints, state tables.
    ///
    /// Read-only; the gateway may keep running. Checks the whole hash chain; every stored
    /// checkpoint's Ed25519 signature and that the chain at its record has
    /// exactly its head hash; with --checkpoint, that the chain reaches the newest valid
    /// checkpoint of that file; and the state tables against the chain (approvals, decisions,
    /// minted and redeemed tokens). Names the first problem.
    #[command(
        after_help = "Exit codes: 0 verified; 1 the chain is broken, a checkpoint does not verify or is not reached, or the state tables disagree with the chain; 2 usage or I/O error (no database, unreadable file, no public key)."
    )]
    Verify {
        /// Data directory (default: `data_dir` of ./assent.yaml if present, else .assent).
        #[arg(long = "data-dir")]
        data_dir: Option<PathBuf>,
        /// A checkpoint sink file (JSONL, `audit_checkpoints.file`): the chain must reach its
        /// newest checkpoint signed by the audit key (detects a truncated or rewritten log).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// The audit public key (64 hex characters, from `assent audit key`); default: the
        /// public half of DATA_DIR/audit.key.
        #[arg(long = "public-key")]
        public_key: Option<String>,
        /// Fail (exit 1) when more than this many records are covered by no checkpoint: set it
        /// a little above `audit_checkpoints.every_records`, and a chain rewritten after its
        /// stored checkpoints were deleted is caught even without a checkpoint file.
        #[arg(long = "max-unsigned")]
        max_unsigned: Option<i64>,
        /// Print the report as one JSON object (`ok`, `records`, `head`, `problem`, …).
        #[arg(long)]
        json: bool,
    },
    /// Print the audit checkpoint public key (64 hex characters).
    ///
    /// The 32 raw bytes of the Ed25519 public key as lowercase hex. Creates
    /// DATA_DIR/audit.key (mode 0600) when missing.
    Key {
        /// Data directory (default: `data_dir` of ./assent.yaml if present, else .assent).
        #[arg(long = "data-dir")]
        data_dir: Option<PathBuf>,
    },
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: cannot start runtime: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        match dispatch(cli.cmd).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("assent: {}", one_line(&e));
                1
            }
        }
    })
}

fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', "; ")
}

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ASSENT_LOG")
        .unwrap_or_else(|_| default.into());
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr)
        .try_init();
}

async fn dispatch(cmd: Cmd) -> Result<i32> {
    match cmd {
        Cmd::Serve {
            config,
            listen,
            data_dir,
            strict,
            insecure_demo_keys,
        } => serve(config, listen, data_dir, strict, insecure_demo_keys).await,
        Cmd::Pending { json, remote } => pending(&remote, json).await,
        Cmd::Show { id, json, remote } => show(&remote, &id, json).await,
        Cmd::Watch { remote } => crate::watch::run(Client::new(&remote)?).await,
        Cmd::Approve {
            ids,
            reason,
            scope,
            whole_tool,
            yes_workspace,
            args,
            remote,
        } => {
            let mut body = json!({"decision": "approve", "scope": scope, "whole_tool": whole_tool,
                                  "confirm_workspace": yes_workspace});
            if let Some(a) = args {
                if ids.len() != 1 {
                    bail!("--args edits one call: give exactly one approval id");
                }
                body["arguments"] = assent_core::json::parse_value(a.as_bytes())
                    .map_err(|e| anyhow!("--args is not strict JSON: {e}"))?;
            }
            decide(&remote, &ids, body, reason).await
        }
        Cmd::Deny {
            ids,
            reason,
            remote,
        } => decide(&remote, &ids, json!({"decision": "deny"}), reason).await,
        Cmd::Cancel {
            id,
            session,
            reason,
            remote,
        } => {
            let c = Client::new(&remote)?;
            let body = json!({"reason": reason});
            if session {
                let v = c.post(&format!("/v1/sessions/{id}/cancel"), body).await?;
                let n = v["cancelled"].as_array().map_or(0, Vec::len);
                println!("session {id}: {n} pending approval(s) cancelled");
            } else {
                let v = c.post(&format!("/v1/approvals/{id}/cancel"), body).await?;
                println!("{} {}", id, v["status"].as_str().unwrap_or(""));
            }
            Ok(0)
        }
        Cmd::Grants { all, json, remote } => grants(&remote, all, json).await,
        Cmd::Revoke { id, remote } => {
            let c = Client::new(&remote)?;
            c.delete(&format!("/v1/grants/{id}")).await?;
            println!("{id} revoked");
            Ok(0)
        }
        Cmd::Clarifications { all, json, remote } => clarifications(&remote, all, json).await,
        Cmd::Answer { id, value, remote } => {
            let c = Client::new(&remote)?;
            let q = c.get(&format!("/v1/clarifications/{id}")).await?;
            let response = coerce_answer(&q, &value)?;
            let v = c
                .post(
                    &format!("/v1/clarifications/{id}/answer"),
                    json!({ "response": response }),
                )
                .await?;
            println!(
                "{id} {} with {}",
                v["status"].as_str().unwrap_or(""),
                v["response"]
            );
            Ok(0)
        }
        Cmd::Check {
            config,
            agent,
            tool,
            server,
            args,
            json,
            strict,
        } => Ok(check(&config, &agent, &tool, server, &args, json, strict)),
        Cmd::Mcp {
            agent,
            server,
            config,
            session,
            poll_seconds,
            progress_seconds,
            remote,
            command,
        } => {
            init_tracing("warn");
            let api_key = remote
                .api_key
                .clone()
                .ok_or_else(|| anyhow!("ASSENT_API_KEY is not set (the agent's key)"))?;
            let session_id = session.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let Some(server) = server else {
                let path = config.expect("clap requires --config without --server");
                let cfg = Config::load(&path)?;
                if cfg.mcp_upstreams.is_empty() {
                    bail!("{}: no mcp_upstreams to serve", path.display());
                }
                let hub = assent_mcp::hub::Hub::start(
                    upstream_specs(&cfg)?,
                    remote.url.clone(),
                    poll_seconds.clamp(1, 60),
                    progress_seconds.clamp(1, 3600),
                )
                .await?;
                let _ = agent; // the key names the agent; --agent documents which one
                assent_mcp::hub::serve_stdio(hub, api_key, session_id).await?;
                return Ok(0);
            };
            let cfg = assent_mcp::ProxyConfig {
                gateway_url: remote.url.clone(),
                api_key,
                agent,
                server,
                session_id,
                command,
                poll_seconds: poll_seconds.clamp(1, 60),
                progress_seconds: progress_seconds.clamp(1, 3600),
            };
            assent_mcp::run(cfg).await
        }
        Cmd::Audit {
            cmd:
                AuditCmd::Verify {
                    data_dir,
                    checkpoint,
                    public_key,
                    max_unsigned,
                    json,
                },
        } => audit_verify(data_dir, checkpoint, public_key, max_unsigned, json),
        Cmd::Audit {
            cmd: AuditCmd::Key { data_dir },
        } => audit_key(data_dir),
        Cmd::Tools { cmd, remote } => tools(&remote, cmd).await,
        Cmd::Export {
            cmd: ExportCmd::LearningSamples { data_dir, out },
        } => {
            let list =
                assent_store::learning::learning_samples_offline(&data_dir_or_default(data_dir)?)?;
            let mut text = String::new();
            for v in &list {
                text.push_str(&v.to_string());
                text.push('\n');
            }
            match out {
                Some(f) => {
                    std::fs::write(&f, text)
                        .with_context(|| format!("cannot write {}", f.display()))?;
                    eprintln!("{} learning samples written to {}", list.len(), f.display());
                }
                None => {
                    use std::io::Write;
                    std::io::stdout().write_all(text.as_bytes())?;
                }
            }
            Ok(0)
        }
    }
}

async fn serve(
    config: PathBuf,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    strict: bool,
    insecure_demo_keys: bool,
) -> Result<i32> {
    init_tracing("info");
    let mut cfg = Config::load_with(&config, strict)?;
    cfg.insecure_demo_keys = insecure_demo_keys;
    if let Some(l) = listen {
        cfg.listen = l;
    }
    if let Some(d) = data_dir {
        cfg.data_dir = d;
    }
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    let mut state = assent_server::AppState::from_config(&cfg)?;
    let nofile = assent_server::serve::raise_open_file_limit();
    state.limits.max_connections =
        assent_server::serve::effective_cap(state.limits.max_connections, nofile);
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
    let mut extra = axum::Router::new();
    if !cfg.mcp_upstreams.is_empty() {
        let hub = assent_mcp::hub::Hub::start(
            upstream_specs(&cfg)?,
            format!("http://{}", listener.local_addr()?),
            25,
            10,
        )
        .await?;
        state.dry_run = Some(std::sync::Arc::new(HubDryRun(hub.clone())));
        extra = extra
            .nest_service(
                "/mcp",
                assent_mcp::hub::http_service(
                    hub,
                    cfg.mcp_allowed_hosts.clone(),
                    cfg.mcp_allowed_origins.clone(),
                ),
            )
            .layer(axum::middleware::from_fn_with_state(
                state.principals.clone(),
                strict_mcp_bodies,
            ));
        tracing::info!(upstreams = cfg.mcp_upstreams.len(), "MCP endpoint at /mcp");
    }
    tracing::info!(
        listen = %listener.local_addr()?, data_dir = %cfg.data_dir.display(),
        agents = cfg.registry.agents.len(), policies = cfg.registry.policies.len(),
        principals = state.principals.len(), open_files = ?nofile,
        max_connections = state.limits.max_connections, "assent gateway ready"
    );
    let shutdown = async {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("signal handler");
            tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutting down");
    };
    assent_server::run_with(listener, state, extra, shutdown).await?;
    Ok(0)
}

/// Reads a `/mcp` request body strictly before rmcp sees it (issue 10 §1–2): a body with a
/// duplicate key or a number a double would change is answered `400` with a JSON-RPC error
/// naming the JSON pointer, and never gated or forwarded. A request without an agent's valid
/// bearer key is `401` before its body is parsed (the edge bounds its size and read time).
async fn strict_mcp_bodies(
    axum::extract::State(principals): axum::extract::State<
        std::sync::Arc<Vec<assent_server::config::Principal>>,
    >,
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
    let agent = assent_server::auth::authenticate(&principals, req.headers())
        .ok()
        .and_then(|p| p.agent_id());
    if agent.is_none() {
        return rpc_error(
            axum::http::StatusCode::UNAUTHORIZED,
            "assent: send an agent's key (Authorization: Bearer KEY)".into(),
        );
    }
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
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// The dashboard's dry-run button, served by the MCP hub's upstream connections.
struct HubDryRun(std::sync::Arc<assent_mcp::hub::Hub>);

impl assent_server::DryRun for HubDryRun {
    fn serves(&self, server: &str) -> bool {
        self.0.has_upstream(server)
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

/// The hub's upstreams from the config; a `bearer_token_env` that is unset or empty stops
/// start-up naming the upstream and the variable (never the token).
fn upstream_specs(
    cfg: &Config,
) -> Result<std::collections::BTreeMap<String, assent_mcp::hub::UpstreamSpec>> {
    cfg.mcp_upstreams
        .iter()
        .map(|(alias, u)| {
            let bearer_token = match &u.bearer_token_env {
                None => None,
                Some(var) => Some(
                    std::env::var(var)
                        .ok()
                        .filter(|t| !t.is_empty())
                        .ok_or_else(|| {
                            anyhow!(
                                "{}: mcp_upstreams.{alias}: bearer_token_env `{var}` is not set",
                                cfg.file.display()
                            )
                        })?,
                ),
            };
            Ok((
                alias.clone(),
                assent_mcp::hub::UpstreamSpec {
                    command: u.command.clone(),
                    env: u.env.clone(),
                    url: u.url.clone(),
                    bearer_token,
                },
            ))
        })
        .collect()
}

pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    fn new(r: &Remote) -> Result<Self> {
        let key = r
            .api_key
            .clone()
            .ok_or_else(|| anyhow!("ASSENT_API_KEY is not set (an operator's key)"))?;
        Ok(Self {
            http: reqwest::Client::new(),
            base: r.url.trim_end_matches('/').to_string(),
            key,
        })
    }
    async fn call(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let resp = req.bearer_auth(&self.key).send().await.map_err(|e| {
            anyhow!(
                "cannot reach the gateway at {} ({})",
                self.base,
                e.without_url()
            )
        })?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            let code = body["code"].as_str().unwrap_or("ERROR");
            let msg = body["message"].as_str().unwrap_or("");
            Err(anyhow!("{code}: {msg}"))
        }
    }
    pub(crate) async fn get(&self, path: &str) -> Result<Value> {
        self.call(self.http.get(format!("{}{path}", self.base)))
            .await
    }
    pub(crate) async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.call(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }
    async fn delete(&self, path: &str) -> Result<Value> {
        self.call(self.http.delete(format!("{}{path}", self.base)))
            .await
    }
}

pub(crate) fn time_left(expires_at: &str) -> String {
    let Ok(t) =
        time::OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339)
    else {
        return expires_at.to_string();
    };
    let secs = (t - time::OffsetDateTime::now_utc()).whole_seconds();
    if secs <= 0 {
        "expiring now".into()
    } else if secs < 60 {
        format!("{secs}s left")
    } else {
        format!("{}m {:02}s left", secs / 60, secs % 60)
    }
}

fn canonical(v: &Value) -> String {
    assent_core::canonical::canonical_value(v).unwrap_or_else(|_| v.to_string())
}

/// The human card of one approval: exact call, risk and why, time left, message.
pub(crate) fn card(a: &Value) -> String {
    let call = &a["call"];
    let target = match call["server"].as_str() {
        Some(s) => format!("{s}/{}", call["tool"].as_str().unwrap_or("")),
        None => call["tool"].as_str().unwrap_or("").to_string(),
    };
    let mut out = String::new();
    let status = a["status"].as_str().unwrap_or("");
    let when = if status == "pending" {
        time_left(a["expires_at"].as_str().unwrap_or(""))
    } else {
        status.to_string()
    };
    out.push_str(&format!("{}  [{when}]\n", a["id"].as_str().unwrap_or("")));
    out.push_str(&format!(
        "  agent:     {} (session {})\n",
        a["agent"].as_str().unwrap_or(""),
        a["session_id"].as_str().unwrap_or("")
    ));
    out.push_str(&format!("  call:      {target}\n"));
    out.push_str(&format!("  arguments: {}\n", canonical(&call["arguments"])));
    out.push_str(&format!(
        "  risk:      {} ({}){}\n",
        a["risk_tier"].as_str().unwrap_or(""),
        a["risk_level"].as_str().unwrap_or(""),
        if a["irreversible"] == true {
            ", irreversible"
        } else {
            ""
        }
    ));
    out.push_str(&format!(
        "  message:   {}\n",
        a["message"].as_str().unwrap_or("")
    ));
    if let Some(t) = a["triggers"].as_array().filter(|t| !t.is_empty()) {
        let t: Vec<&str> = t.iter().filter_map(Value::as_str).collect();
        out.push_str(&format!("  triggers:  {}\n", t.join(", ")));
    }
    let lines = |k: &str| -> Vec<String> {
        a[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l.as_str().map(str::to_string))
            .collect()
    };
    match lines("side_effects").as_slice() {
        [] => out.push_str("  side effects: not described by any rule\n"),
        l => out.push_str(&format!("  side effects: {}\n", l.join("; "))),
    }
    match lines("rollback").as_slice() {
        [] if a["irreversible"] == true => {
            out.push_str("  rollback:  none: the action is irreversible\n")
        }
        [] => out.push_str("  rollback:  not described by any rule\n"),
        l => out.push_str(&format!("  rollback:  {}\n", l.join("; "))),
    }
    if let Some(t) = a["dry_run_tool"].as_str() {
        out.push_str(&format!(
            "  dry run:   {t} (from the dashboard, through the MCP hub)\n"
        ));
    }
    for alt in a["suggested_alternatives"].as_array().into_iter().flatten() {
        out.push_str(&format!("  alternative: {}\n", alt.as_str().unwrap_or("")));
    }
    out.push_str("  why:\n");
    for r in a["reasons"].as_array().into_iter().flatten() {
        let file = r["file"].as_str().unwrap_or("");
        let rule = r["rule"].as_str().unwrap_or("");
        let src = if file.is_empty() {
            rule.to_string()
        } else {
            format!("{file} {rule}")
        };
        out.push_str(&format!(
            "    - {src}: {}\n",
            r["text"].as_str().unwrap_or("")
        ));
    }
    if let Some(roles) = a["approvers"].as_array().filter(|r| !r.is_empty()) {
        let roles: Vec<&str> = roles.iter().filter_map(Value::as_str).collect();
        out.push_str(&format!("  approvers: {}\n", roles.join(", ")));
    }
    out.push_str(&format!(
        "  on timeout: {} (expires {})\n",
        a["default_decision"].as_str().unwrap_or(""),
        a["expires_at"].as_str().unwrap_or("")
    ));
    for d in a["decisions"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  decision:  {} by {} at {}{}\n",
            d["decision"].as_str().unwrap_or(""),
            d["by"].as_str().unwrap_or(""),
            d["at"].as_str().unwrap_or(""),
            d["reason"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "  call_hash: {}\n",
        a["call_hash"].as_str().unwrap_or("")
    ));
    if a["arguments_changed"] == true {
        out.push_str(&format!(
            "  approved arguments: {} (call_hash {})\n",
            canonical(&a["arguments"]),
            a["approved_call_hash"].as_str().unwrap_or("")
        ));
    }
    if let Some(s) = a["scope"].as_str() {
        out.push_str(&format!("  scope:     {s}\n"));
    }
    out
}

async fn pending(r: &Remote, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let v = c.get("/v1/approvals?status=pending").await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let list = v["approvals"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no pending approvals");
    }
    for a in &list {
        println!("{}", card(a));
    }
    Ok(0)
}

async fn show(r: &Remote, id: &str, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let v = c.get(&format!("/v1/approvals/{id}")).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", card(&v));
    }
    Ok(0)
}

fn decided_line(v: &Value, id: &str) -> String {
    let mut line = format!(
        "{} {}",
        v["id"].as_str().unwrap_or(id),
        v["status"].as_str().unwrap_or("")
    );
    if let Some(s) = v["scope"].as_str().filter(|s| *s != "once") {
        line.push_str(&format!(
            " (scope {s}, grant {})",
            v["grant_id"].as_str().unwrap_or("")
        ));
    }
    if v["arguments_changed"] == true {
        line.push_str(&format!(" with arguments {}", canonical(&v["arguments"])));
    }
    line
}

/// One id: `POST /v1/approvals/{id}/decision`; several: `POST /v1/approvals/decisions`, each
/// decided on its own. Exit 1 when any failed.
async fn decide(
    r: &Remote,
    ids: &[String],
    mut body: Value,
    reason: Option<String>,
) -> Result<i32> {
    let c = Client::new(r)?;
    if let Some(reason) = reason {
        body["reason"] = Value::String(reason);
    }
    if let [id] = ids {
        let v = c
            .post(&format!("/v1/approvals/{id}/decision"), body)
            .await?;
        println!("{}", decided_line(&v, id));
        return Ok(0);
    }
    body["ids"] = json!(ids);
    let v = c.post("/v1/approvals/decisions", body).await?;
    let mut failed = 0;
    for r in v["results"].as_array().into_iter().flatten() {
        let id = r["id"].as_str().unwrap_or("");
        if r["ok"] == true {
            println!("{}", decided_line(&r["approval"], id));
        } else {
            failed += 1;
            eprintln!(
                "assent: {id}: {}: {}",
                r["code"].as_str().unwrap_or(""),
                r["message"].as_str().unwrap_or("")
            );
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

async fn grants(r: &Remote, all: bool, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let v = c.get(&format!("/v1/grants?all={all}")).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let list = v["grants"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no grants");
    }
    for g in &list {
        let target = match g["server"].as_str() {
            Some(s) => format!("{s}/{}", g["tool"].as_str().unwrap_or("")),
            None => g["tool"].as_str().unwrap_or("").to_string(),
        };
        let what = if g["whole_tool"] == true {
            "every call".to_string()
        } else {
            format!("call_hash {}", g["call_hash"].as_str().unwrap_or(""))
        };
        let state = if let Some(t) = g["revoked_at"].as_str() {
            format!("revoked {t}")
        } else if let Some(t) = g["expires_at"].as_str() {
            format!("until {t}")
        } else {
            "until revoked".into()
        };
        println!(
            "{}  {} {target} ({what}) scope {} {state}{}  by {}",
            g["id"].as_str().unwrap_or(""),
            g["agent"].as_str().unwrap_or(""),
            g["scope"].as_str().unwrap_or(""),
            if g["discouraged"] == true {
                "  [discouraged: workspace on R3/R4]"
            } else {
                ""
            },
            g["created_by"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}

/// Reads an operator's typed answer as the kind the question accepts, in the order
/// multiple_choice, yes_no, numeric, freetext; fails naming the kinds when none fits.
fn coerce_answer(q: &Value, value: &str) -> Result<Value> {
    let kinds: Vec<&str> = q["accepted_response_kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let accepts = |k: &str| kinds.contains(&k);
    if accepts("multiple_choice")
        && q["choices"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["value"] == value)
    {
        return Ok(Value::String(value.to_string()));
    }
    if accepts("yes_no") {
        match value.to_ascii_lowercase().as_str() {
            "yes" | "y" | "true" => return Ok(Value::Bool(true)),
            "no" | "n" | "false" => return Ok(Value::Bool(false)),
            _ => {}
        }
    }
    if accepts("numeric")
        && let Ok(n) = serde_json::from_str::<serde_json::Number>(value.trim())
    {
        return Ok(Value::Number(n));
    }
    if accepts("freetext") && !value.is_empty() {
        return Ok(Value::String(value.to_string()));
    }
    let choices: Vec<&str> = q["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["value"].as_str())
        .collect();
    let mut accepted = kinds.join(", ");
    if !choices.is_empty() {
        accepted.push_str(&format!(" (choices: {})", choices.join(", ")));
    }
    bail!("`{value}` is not an accepted answer: the question accepts {accepted}")
}

async fn clarifications(r: &Remote, all: bool, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let status = if all { "all" } else { "pending" };
    let v = c
        .get(&format!("/v1/clarifications?status={status}"))
        .await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let list = v["clarifications"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!(
            "{}",
            if all {
                "no clarifications"
            } else {
                "no pending clarifications"
            }
        );
    }
    for q in &list {
        let status = q["status"].as_str().unwrap_or("");
        let when = if status == "pending" {
            time_left(q["expires_at"].as_str().unwrap_or(""))
        } else {
            status.to_string()
        };
        println!("{}  [{when}]", q["id"].as_str().unwrap_or(""));
        println!(
            "  agent:    {} (session {})",
            q["agent"].as_str().unwrap_or(""),
            q["session_id"].as_str().unwrap_or("")
        );
        println!("  question: {}", q["question"].as_str().unwrap_or(""));
        if let Some(ctx) = q["context"].as_str() {
            println!("  context:  {ctx}");
        }
        let kinds: Vec<&str> = q["accepted_response_kinds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        println!("  accepts:  {}", kinds.join(", "));
        for ch in q["choices"].as_array().into_iter().flatten() {
            println!(
                "    {} - {}",
                ch["value"].as_str().unwrap_or(""),
                ch["label"].as_str().unwrap_or("")
            );
        }
        if !q["response"].is_null() {
            println!(
                "  answer:   {} by {}",
                q["response"],
                q["answered_by"].as_str().unwrap_or("")
            );
        }
        println!();
    }
    Ok(0)
}

fn check(
    config: &std::path::Path,
    agent: &str,
    tool: &str,
    server: Option<String>,
    args: &str,
    as_json: bool,
    strict: bool,
) -> i32 {
    let cfg = match Config::load_with(config, strict) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("assent: {e}");
            return 2;
        }
    };
    for w in &cfg.warnings {
        eprintln!("assent: warning: {w}");
    }
    let arguments: Value = match assent_core::json::parse_value(args.as_bytes()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("assent: --args is not strict JSON: {e}");
            return 2;
        }
    };
    let call = match ToolCall::new(tool, server, arguments) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("assent: --args: {e}");
            return 2;
        }
    };
    let v = evaluate(&cfg.registry, agent, &call);
    if as_json {
        let reasons: Vec<Value> = v
            .reasons
            .iter()
            .map(|r| json!({"file": r.file, "rule": r.rule, "text": r.text}))
            .collect();
        let mut out = json!({"verdict": v.kind.as_str(), "reasons": reasons, "risk_tier": v.risk_tier.as_str(), "irreversible": v.irreversible});
        if let Ok((_, h)) = call.canonical_and_hash() {
            out["call_hash"] = Value::String(h);
        }
        if v.kind == VerdictKind::Confirm {
            out["message"] = Value::String(v.message.clone());
            out["side_effects"] = json!(v.side_effects);
            out["rollback"] = json!(v.rollback);
            out["dry_run_tool"] = json!(v.dry_run_tool);
        }
        println!("{out}");
    } else {
        println!("{}", v.kind.as_str());
        for r in &v.reasons {
            let src = if r.file.is_empty() {
                r.rule.clone()
            } else {
                format!("{} {}", r.file, r.rule)
            };
            println!("  - {src}: {}", r.text);
        }
        println!(
            "  risk tier {} ({}){}",
            v.risk_tier.as_str(),
            v.risk_tier.risk_level(),
            if v.irreversible { ", irreversible" } else { "" }
        );
        if v.kind == VerdictKind::Confirm {
            println!("  message: {}", v.message);
            for e in &v.side_effects {
                println!("  side effects: {e}");
            }
            for r in &v.rollback {
                println!("  rollback: {r}");
            }
            if let Some(t) = &v.dry_run_tool {
                println!("  dry run: {t}");
            }
        }
    }
    match v.kind {
        VerdictKind::Allow => 0,
        VerdictKind::Confirm => 10,
        VerdictKind::Deny => 11,
    }
}

async fn tools(r: &Remote, cmd: ToolsCmd) -> Result<i32> {
    let c = Client::new(r)?;
    match cmd {
        ToolsCmd::Pending { json } => {
            let v = c.get("/v1/tools/reviews?status=pending").await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(0);
            }
            let list = v["reviews"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                println!("no tool changes waiting for review");
            }
            for t in &list {
                let what = if t["pinned"].is_null() {
                    "new tool"
                } else {
                    "changed"
                };
                println!(
                    "{}  {}/{} ({what}, seen {} by {})",
                    t["id"].as_str().unwrap_or(""),
                    t["server"].as_str().unwrap_or(""),
                    t["tool"].as_str().unwrap_or(""),
                    t["seen_at"].as_str().unwrap_or(""),
                    t["seen_by"].as_str().unwrap_or("")
                );
                if t["pinned"].is_null() {
                    println!("  definition: {}", canonical(&t["definition"]));
                }
                for op in t["diff"].as_array().into_iter().flatten() {
                    let path = op["path"].as_str().unwrap_or("");
                    let old = assent_core::condition::lookup(
                        &t["pinned"],
                        path.trim_start_matches('/').replace('/', ".").as_str(),
                    );
                    match op["op"].as_str().unwrap_or("") {
                        "remove" => {
                            println!("  - {path}: {}", old.map(canonical).unwrap_or_default())
                        }
                        "add" => println!("  + {path}: {}", canonical(&op["value"])),
                        _ => {
                            println!("  - {path}: {}", old.map(canonical).unwrap_or_default());
                            println!("  + {path}: {}", canonical(&op["value"]));
                        }
                    }
                }
                println!();
            }
            Ok(0)
        }
        ToolsCmd::Accept { ids } | ToolsCmd::Reject { ids } if ids.is_empty() => {
            bail!("give at least one review id (assent tools pending)")
        }
        ToolsCmd::Accept { ids } => review_each(&c, &ids, "accept").await,
        ToolsCmd::Reject { ids } => review_each(&c, &ids, "reject").await,
        ToolsCmd::Pins { json } => {
            let v = c.get("/v1/tools/pins").await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(0);
            }
            for p in v["pins"].as_array().into_iter().flatten() {
                println!(
                    "{}/{}  {}  pinned {} by {}",
                    p["server"].as_str().unwrap_or(""),
                    p["tool"].as_str().unwrap_or(""),
                    &p["fingerprint"].as_str().unwrap_or("")
                        [..12.min(p["fingerprint"].as_str().unwrap_or("").len())],
                    p["pinned_at"].as_str().unwrap_or(""),
                    p["pinned_by"].as_str().unwrap_or("")
                );
            }
            Ok(0)
        }
    }
}

async fn review_each(c: &Client, ids: &[String], verb: &str) -> Result<i32> {
    let mut failed = 0;
    for id in ids {
        match c
            .post(&format!("/v1/tools/reviews/{id}/{verb}"), json!({}))
            .await
        {
            Ok(v) => println!(
                "{id} {}/{} {}",
                v["server"].as_str().unwrap_or(""),
                v["tool"].as_str().unwrap_or(""),
                v["status"].as_str().unwrap_or("")
            ),
            Err(e) => {
                failed += 1;
                eprintln!("assent: {id}: {}", one_line(&e));
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `--data-dir`, else `data_dir` of ./assent.yaml when it exists, else `.assent`.
fn data_dir_or_default(data_dir: Option<PathBuf>) -> Result<PathBuf> {
    Ok(match data_dir {
        Some(d) => d,
        None => {
            let p = PathBuf::from("assent.yaml");
            if p.exists() {
                Config::load(&p)?.data_dir
            } else {
                PathBuf::from(".assent")
            }
        }
    })
}

/// `assent audit verify`: 0 verified, 1 a problem found, 2 usage or I/O error.
fn audit_verify(
    data_dir: Option<PathBuf>,
    checkpoint: Option<PathBuf>,
    public_key: Option<String>,
    max_unsigned: Option<i64>,
    as_json: bool,
) -> Result<i32> {
    use assent_store::integrity::{Problem, VerifyOptions, verify_offline};
    let run = || -> Result<assent_store::integrity::Report> {
        let dir = data_dir_or_default(data_dir)?;
        let public_key = match public_key.as_deref() {
            Some(k) => Some(assent_store::checkpoint::parse_public_key(k)?),
            None => None,
        };
        let opts = VerifyOptions {
            public_key,
            checkpoint_file: checkpoint.as_deref(),
        };
        Ok(verify_offline(&dir, &opts)?)
    };
    let mut rep = match run() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: {}", one_line(&e));
            return Ok(2);
        }
    };
    if let Some(max) = max_unsigned
        && rep.problem.is_none()
        && rep.unsigned_records > max
    {
        rep.problem = Some(Problem {
            check: "checkpoint",
            seq: None,
            reason: format!(
                "{} records are covered by no checkpoint (at most {max} allowed): the stored checkpoints were deleted, or the gateway has not signed for too long",
                rep.unsigned_records
            ),
        });
    }
    let p = rep.problem.as_ref();
    if as_json {
        let broken = p
            .filter(|p| p.check == "chain")
            .map(|p| json!({"seq": p.seq, "reason": p.reason}));
        let mut v = serde_json::to_value(&rep)?;
        v["ok"] = json!(p.is_none());
        v["broken"] = json!(broken);
        println!("{v}");
    }
    let Some(p) = p else {
        if !as_json {
            print_verified(&rep);
        }
        return Ok(0);
    };
    match p.check {
        "chain" => eprintln!(
            "assent: audit chain broken at record {}: {}",
            p.seq.unwrap_or(0),
            p.reason
        ),
        "state" => eprintln!(
            "assent: the state tables disagree with the audit chain: {}{}",
            p.reason,
            match rep.state_disagreements {
                0 | 1 => String::new(),
                n => format!(" ({} more)", n - 1),
            }
        ),
        _ => eprintln!("assent: audit checkpoint not met: {}", p.reason),
    }
    Ok(1)
}

fn print_verified(rep: &assent_store::integrity::Report) {
    println!(
        "audit chain verifies: {} records, head {}",
        rep.records, rep.head
    );
    match (&rep.newest_checkpoint, &rep.public_key) {
        (Some(cp), Some(k)) => println!(
            "{} stored checkpoints verify under audit key {k}; the newest covers record {} ({})",
            rep.checkpoints,
            cp.seq,
            assent_store::rfc3339(cp.time)
        ),
        _ => println!("no stored checkpoints"),
    }
    if let Some(cp) = &rep.file_checkpoint {
        println!(
            "the chain reaches the checkpoint file's newest checkpoint (record {}, {}; {} lines skipped)",
            cp.seq,
            assent_store::rfc3339(cp.time),
            rep.file_lines_skipped
        );
    }
    if rep.unsigned_records > 0 {
        println!(
            "{} records after the newest checkpoint are not signed yet",
            rep.unsigned_records
        );
    }
    println!("the state tables agree with the audit chain");
}

/// `assent audit key`: prints the audit public key (64 hex), creating the key when missing.
fn audit_key(data_dir: Option<PathBuf>) -> Result<i32> {
    let dir = data_dir_or_default(data_dir)?;
    if !dir.exists() {
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    let key = assent_store::checkpoint::load_or_create_key(&dir)?;
    println!(
        "{}",
        assent_store::checkpoint::public_key_hex(&key.verifying_key())
    );
    Ok(0)
}
