//! `assent mcp`: the agent-side MCP entry points on stdio. With `--server ALIAS -- CMD…` it is
//! the stdio proxy in front of one upstream command (`assent_mcp::run`); with `--config` it
//! is the hub in front of every `mcp_upstreams` entry, tools named `ALIAS__TOOL`
//! (`assent_mcp::hub`). Gating happens in the gateway; this file only wires the two up.

use crate::args::{Cmd, Remote};
use crate::setup::{init_tracing, upstream_specs};
use anyhow::{Result, anyhow, bail};
use assent_server::config::Config;
use std::path::PathBuf;

/// What `assent mcp` fronts: one upstream command under an alias, or a config's hub.
enum Upstream {
    /// `--server ALIAS -- CMD ARGS…`: the agent file's alias and the command line.
    Command {
        server: String,
        command: Vec<String>,
        /// `--pass-ungated`: relay resources, prompts and completions unchecked.
        pass_ungated: bool,
    },
    /// `--config FILE`: every upstream of the file's `mcp_upstreams`.
    Hub(PathBuf),
}

/// Runs `assent mcp` ([`Cmd::Mcp`]): the stdio proxy with `--server` and a command, else
/// the hub of `--config`.
pub(crate) async fn run(cmd: Cmd) -> Result<i32> {
    let Cmd::Mcp {
        agent,
        server,
        config,
        session,
        on_behalf_of,
        poll_seconds,
        progress_seconds,
        pass_ungated,
        remote,
        command,
    } = cmd
    else {
        bail!("not an mcp command");
    };
    let upstream = match server {
        Some(server) => Upstream::Command {
            server,
            command,
            pass_ungated,
        },
        None => Upstream::Hub(config.ok_or_else(|| anyhow!("give --server or --config"))?),
    };
    let waits = (poll_seconds, progress_seconds);
    mcp(&remote, agent, upstream, session, on_behalf_of, waits).await
}

/// Runs the proxy or hub for `agent` until stdin closes. The key (`ASSENT_API_KEY`) must be
/// an agent's; `session` defaults to a new UUID; `on_behalf_of` (the proxy only) is sent with
/// every call; `poll_seconds` (clamped to 1–60) is each long-poll while a call waits,
/// `progress_seconds` (1–3600) the progress interval.
async fn mcp(
    remote: &Remote,
    agent: String,
    upstream: Upstream,
    session: Option<String>,
    on_behalf_of: Option<String>,
    (poll_seconds, progress_seconds): (u64, u64),
) -> Result<i32> {
    init_tracing("warn");
    let api_key = crate::remote::api_key(remote, "the agent's key")?;
    crate::remote::check_transport(remote)?;
    let session_id = session.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let (server, command, pass_ungated) = match upstream {
        Upstream::Command {
            server,
            command,
            pass_ungated,
        } => (server, command, pass_ungated),
        Upstream::Hub(path) => {
            let cfg = Config::load(&path)?;
            if cfg.mcp_upstreams.is_empty() {
                bail!("{}: no mcp_upstreams to serve", path.display());
            }
            let hub = assent_mcp::hub::Hub::start(
                upstream_specs(&cfg)?,
                assent_mcp::hub::GatewayAt::Url(remote.url.clone()),
                poll_seconds.clamp(1, 60),
                progress_seconds.clamp(1, 3600),
            )
            .await?;
            let _ = agent; // the key names the agent; --agent documents which one
            assent_mcp::hub::serve_stdio(hub, api_key, session_id).await?;
            return Ok(0);
        }
    };
    let cfg = assent_mcp::ProxyConfig {
        gateway_url: remote.url.clone(),
        api_key,
        agent,
        server,
        session_id,
        command,
        on_behalf_of,
        poll_seconds: poll_seconds.clamp(1, 60),
        progress_seconds: progress_seconds.clamp(1, 3600),
        pass_ungated,
    };
    assent_mcp::run(cfg).await
}
