//! `database:` — where the store keeps its data (issue 13): absent, the embedded SQLite file
//! `<data_dir>/assent.db`; `{url_env: VAR}`, the PostgreSQL database whose `postgres://` URL
//! the environment variable `VAR` holds. The file names only the variable, so the URL and its
//! password never sit in the config; it is read when the store is opened
//! ([`crate::config::Config::database`]), never printed.

use super::raw::{ConfigError, RawDatabase, at};
use assent_store::db::Database;
use serde_saphyr::Spanned;
use std::path::Path;

/// The configured backend, before the URL is read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseConfig {
    /// SQLite in `data_dir` (the default).
    Sqlite,
    /// PostgreSQL; the URL is in the environment variable `url_env`.
    Postgres {
        /// The variable's name, e.g. `ASSENT_DATABASE_URL`.
        url_env: String,
        /// The line of `database:` in the file, for errors.
        line: Option<u64>,
    },
}

/// Validates `database` of the file at `path`: `url_env` must name an environment variable
/// (letters, digits and `_`, not starting with a digit).
pub(crate) fn database(
    path: &Path,
    raw: Option<&Spanned<RawDatabase>>,
) -> Result<DatabaseConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(DatabaseConfig::Sqlite);
    };
    let line = Some(raw.referenced.line());
    let var = raw.value.url_env.as_str();
    let named = var.chars().next().is_some_and(|c| !c.is_ascii_digit())
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !named {
        return Err(at(
            path,
            line,
            format!("database.url_env `{var}` is not an environment variable name"),
        ));
    }
    Ok(DatabaseConfig::Postgres {
        url_env: var.to_string(),
        line,
    })
}

/// The store's [`Database`]: the SQLite file in `data_dir`, or the PostgreSQL URL read from
/// the configured variable, which must be set and hold a `postgres://` or `postgresql://` URL
/// (the error names the file, the line and the variable, never its value).
pub(crate) fn resolve(
    path: &Path,
    cfg: &DatabaseConfig,
    data_dir: &Path,
) -> Result<Database, ConfigError> {
    match cfg {
        DatabaseConfig::Sqlite => Ok(Database::Sqlite {
            path: data_dir.join("assent.db"),
        }),
        DatabaseConfig::Postgres { url_env, line } => {
            let url = std::env::var(url_env).unwrap_or_default();
            if url.is_empty() {
                return Err(at(
                    path,
                    *line,
                    format!("database.url_env: the variable `{url_env}` is not set"),
                ));
            }
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(at(
                    path,
                    *line,
                    format!(
                        "database.url_env: the variable `{url_env}` does not hold a postgres:// URL"
                    ),
                ));
            }
            Ok(Database::Postgres { url })
        }
    }
}
