//! The stdio relay (`assent mcp --agent ID --server ALIAS -- COMMAND ARGS...`): runs one
//! upstream MCP server as a child process and relays newline-delimited JSON-RPC between it and
//! the client on stdin/stdout, gating every `tools/call` through the gateway (see the crate
//! doc for what it does to which message). [`run`] wires the pieces and waits for either end
//! to leave; the handlers live in `client` (client → upstream), `call` (tools/call gating,
//! holds with progress, cancellation), `tasks` (the proxy's own MCP tasks), `upstream`
//! (upstream → client, results) and `handshake` (era translation), over the shared `state`,
//! `pins` and `ids` (which ids each end may answer under).

mod call;
mod client;
mod gated;
mod handshake;
mod ids;
mod pins;
mod state;
mod tasks;
mod upstream;

use crate::kit::ProxyConfig;
use anyhow::Context;
use state::{Relay, State, write_lines, write_stdout_lines};
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use upstream::UpstreamSide;

/// Runs the proxy until the client closes stdin or the upstream exits. Returns the upstream's
/// exit code (or 1 when it was killed).
pub async fn run(cfg: ProxyConfig) -> anyhow::Result<i32> {
    let mut child = spawn_upstream(&cfg.command)?;
    let child_in = child.stdin.take().context("upstream stdin")?;
    let child_out = child.stdout.take().context("upstream stdout")?;
    let state = Arc::new(State::new(cfg).await?);
    // One writer per direction, so concurrent tasks never interleave lines. The upstream's
    // ends when every sender is gone, which closes the upstream's stdin.
    let (to_client, client_rx) = mpsc::unbounded_channel::<String>();
    let (to_upstream, upstream_rx) = mpsc::unbounded_channel::<String>();
    let ends = state.ends.clone();
    let client_writer = write_stdout_lines(client_rx, move |l| Some(ends.to_client(l)));
    let (ends, open) = (state.ends.clone(), state.upstream_open.clone());
    // Every request to the upstream passes here: its id is noted as open before it is sent.
    write_lines(upstream_rx, child_in, move |l| {
        open.note(ends.to_upstream(l))
    });
    let relay = Relay {
        state,
        to_client,
        to_upstream,
    };
    let upstream_reader = tokio::spawn(
        UpstreamSide {
            state: relay.state.clone(),
            to_client: relay.to_client.clone(),
            to_upstream: relay.to_upstream.downgrade(),
        }
        .read(child_out),
    );
    let mut lines = client_lines();
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                Some(line) => relay.on_client_line(line),
                None => break,
            },
            status = child.wait() => {
                let code = status.ok().and_then(|s| s.code()).unwrap_or(1);
                tracing::warn!(code, "upstream MCP server exited");
                let _ = upstream_reader.await;
                drop(relay);
                let _ = client_writer.await;
                return Ok(code);
            }
        }
    }
    // The client closed stdin: withdraw the approvals it was waiting on, then close the
    // upstream's stdin and let it exit.
    relay.withdraw_waiting().await;
    let to_client = relay.to_client.clone();
    drop(relay);
    let code = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(s)) => s.code().unwrap_or(1),
        _ => {
            let _ = child.kill().await;
            1
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), upstream_reader).await;
    drop(to_client);
    let _ = tokio::time::timeout(Duration::from_secs(2), client_writer).await;
    Ok(code)
}

/// The client's lines (stdin, without their `\n` or `\r\n`), read on a thread of their own
/// until EOF or a read error (a line that is not UTF-8 included), which closes the channel. Not
/// `tokio::io::stdin`: its read runs in the runtime's blocking pool, and a runtime being shut
/// down waits for that read — so when the upstream exits while the client keeps stdin open,
/// the process would never end. This thread, blocked in a read, ends with the process.
fn client_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Starts the upstream `command` (program and arguments) with piped stdin and stdout; its
/// stderr is the proxy's.
fn spawn_upstream(command: &[String]) -> anyhow::Result<Child> {
    let (prog, args) = command
        .split_first()
        .context("no upstream command given after --")?;
    Command::new(prog)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start upstream MCP server `{prog}`"))
}
