//! Start-up steps shared by `serve` and the commands: tracing (`otel.rs`), the MCP hub's
//! upstream specs from the config, and the data directory an offline command reads. It runs
//! nothing itself and knows no subcommand.

use crate::args::DataPlace;
use anyhow::{Context, Result, anyhow};
use assent_server::config::Config;
use assent_store::db::Database;
use std::path::{Path, PathBuf};

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
    let withheld = withheld_env(&cfg.file);
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
                    withheld_env: withheld.clone(),
                },
            ))
        })
        .collect()
}

/// The variables of the gateway's environment that hold its secrets, which a stdio upstream
/// does not inherit: every value of a `…_env` key in the config file `file` (operators'
/// `key_env`, `database.url_env`, webhooks' `secret_env`, `oidc.client_secret_env`, Slack's,
/// the metrics key's, other upstreams' `bearer_token_env`), and the ones assent and its
/// telemetry read by name (`ASSENT_API_KEY`, `ASSENT_API_KEY_FILE`, `ASSENT_DATABASE_URL`,
/// the OTLP headers). Found by review: a stdio upstream inherited them all, an operator's key
/// among them, so the party being gated could approve its own calls.
fn withheld_env(file: &Path) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match v.as_str() {
                        Some(var) if k.ends_with("_env") => out.push(var.to_string()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out: Vec<String> = [
        "ASSENT_API_KEY",
        "ASSENT_API_KEY_FILE",
        "ASSENT_DATABASE_URL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ]
    .map(String::from)
    .into();
    let text = std::fs::read_to_string(file).unwrap_or_default();
    if let Ok(v) = assent_core::yaml::from_str::<serde_json::Value>(&text) {
        walk(&v, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// The config file an offline command reads its store from: `--config FILE`, else
/// ./assent.yaml when it exists and no `--data-dir` was given, else none. That file is then
/// read whole, as `--config` would be: its `database`, `keys_dir` and
/// `audit_checkpoints.file` as well as its `data_dir`. Found by review: with ./assent.yaml
/// taken for its `data_dir` alone, a plain `assent audit verify` in the gateway's directory
/// skipped its checkpoint file without a word (so a rewritten chain whose stored checkpoints
/// were deleted verified), a plain `assent backup` signed that head into the copy, and on
/// PostgreSQL `backup`, `verify` and `migrate` worked on a stale SQLite file instead.
pub(crate) fn config_file(place: &DataPlace) -> Option<PathBuf> {
    match (&place.config, &place.data_dir) {
        (Some(f), _) => Some(f.clone()),
        (None, None) => Some(PathBuf::from(IMPLICIT_CONFIG)).filter(|p| p.is_file()),
        (None, Some(_)) => None,
    }
}

/// The config file an offline command reads when none is named: `assent.yaml` in the working
/// directory.
pub(crate) const IMPLICIT_CONFIG: &str = "assent.yaml";

/// The data directory of a command given no config ([`config_file`] is `None`): `--data-dir`,
/// else `.assent`.
pub(crate) fn data_dir_or_default(data_dir: Option<PathBuf>) -> PathBuf {
    data_dir.unwrap_or_else(|| PathBuf::from(".assent"))
}

/// The database `place` names: `--config FILE`'s or ./assent.yaml's ([`config_file`]; SQLite
/// in its `data_dir`, or its PostgreSQL URL), else SQLite in `--data-dir` or the default data
/// directory. Nothing is created (see [`database`]).
pub(crate) fn database_named(place: &DataPlace) -> Result<Database> {
    Ok(match config_file(place) {
        Some(f) => Config::load(&f)?.database()?,
        None => Database::Sqlite {
            path: data_dir_or_default(place.data_dir.clone()).join("assent.db"),
        },
    })
}

/// [`database_named`], with a SQLite file's directory created (mode 0700) when missing.
pub(crate) fn database(place: &DataPlace) -> Result<Database> {
    let db = database_named(place)?;
    if let Database::Sqlite { path } = &db {
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    Ok(db)
}
