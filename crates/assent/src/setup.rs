//! Start-up steps shared by `serve` and the commands: tracing (`otel.rs`), the MCP hub's
//! upstream specs from the config, and the data directory an offline command reads. It runs
//! nothing itself and knows no subcommand.

use anyhow::{Result, anyhow};
use assent_server::config::Config;
use std::path::PathBuf;

/// Logs to stderr, and traces over OTLP when the OTel variables ask for it
/// ([`crate::otel::init`]). A second call is a no-op.
pub(crate) fn init_tracing(default: &str) {
    crate::otel::init(default);
}

/// The hub's upstreams from the config; a `bearer_token_env` that is unset or empty stops
/// start-up naming the upstream and the variable (never the token).
pub(crate) fn upstream_specs(
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

/// `--data-dir`, else `data_dir` of ./assent.yaml when it exists, else `.assent`.
pub(crate) fn data_dir_or_default(data_dir: Option<PathBuf>) -> Result<PathBuf> {
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
