//! The recorded history `assent replay` and `assent suggest` read (issue 16 §1–§2): which store
//! ([`args::History`](crate::args::History): `--data-dir`, `--history-config`, else the
//! command's `--config`), the `--since`/`--until` range, and reading it page by page with
//! `assent_store::history`. Read only; no gateway needs to run.

use crate::args::History;
use anyhow::{Context as _, Result, bail};
use assent_core::replay::Recorded;
use assent_server::config::Config;
use assent_store::db::Database;
use std::path::Path;

/// The store `h` names; `config` (already loaded from `config_file`) when it names none.
///
/// Errors: a `--history-config` that does not load, a database URL variable that is unset.
pub(crate) fn database(h: &History, config: &Config) -> Result<Database> {
    if let Some(dir) = &h.data_dir {
        return Ok(Database::Sqlite {
            path: dir.join(assent_store::ops::DB_FILE),
        });
    }
    if let Some(file) = &h.history_config {
        let c = Config::load(file)?;
        return Ok(c.database()?);
    }
    Ok(config.database()?)
}

/// `--since` and `--until` as Unix ms (`None`: unbounded).
///
/// Errors: a time that is not RFC 3339 (naming the option and the text), or `--since` not
/// before `--until`.
pub(crate) fn range(h: &History) -> Result<(Option<i64>, Option<i64>)> {
    let parse = |name: &str, v: &Option<String>| -> Result<Option<i64>> {
        v.as_deref()
            .map(|t| {
                assent_core::stamp::parse(t).with_context(|| {
                    format!("{name} {t:?} is not an RFC 3339 time (e.g. 2026-11-01T00:00:00Z)")
                })
            })
            .transpose()
    };
    let (since, until) = (parse("--since", &h.since)?, parse("--until", &h.until)?);
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        bail!("--since must be before --until");
    }
    Ok((since, until))
}

/// Reads every recorded proposal of `h` from `db` (resolved once by the caller with
/// [`database`]), in sequence order, calling `each` per page; returns the records that could
/// not be read as proposals.
///
/// Errors: a bad `--since`/`--until`, no database there, an unreachable one, a failed query.
pub(crate) fn read(h: &History, db: &Database, each: &mut dyn FnMut(Vec<Recorded>)) -> Result<u64> {
    let (since, until) = range(h)?;
    let unreadable = assent_store::history::for_each_offline(db, since, until, &mut |page| {
        each(page);
        true
    })
    .with_context(|| format!("reading the history from {}", describe(db)))?;
    Ok(unreadable)
}

/// The store for messages: the SQLite file's path, or "the PostgreSQL database" (never the URL).
pub(crate) fn describe(db: &Database) -> String {
    match db {
        Database::Sqlite { path } => path.display().to_string(),
        Database::Postgres { .. } => "the PostgreSQL database".into(),
    }
}

/// Loads the policy config `file` (`strict`: unknown agent-file fields are errors), printing
/// its warnings. `Err` holds the exit status 2 after printing the error.
pub(crate) fn load_config(file: &Path, strict: bool) -> std::result::Result<Config, i32> {
    match Config::load_with(file, strict) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("assent: warning: {w}");
            }
            Ok(c)
        }
        Err(e) => {
            eprintln!("assent: {e}");
            Err(2)
        }
    }
}
