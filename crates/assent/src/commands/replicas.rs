//! `assent replicas`: the replicas on the PostgreSQL database of `--config FILE` (issue 13 §2)
//! as they last said which configuration they serve (every 2 s), read from the database
//! (`assent_store::config_generations::replicas`), with the newest generation and the replica
//! that put it in force. What an operator looks at when a replica answers `503
//! CONFIG_SUPERSEDED` or refuses to start: which one serves what. SQLite has one process and
//! keeps no generations.

use crate::args::DataPlace;
use crate::render::inert;
use crate::setup::database_named;
use anyhow::{Context, Result};
use assent_store::config_generations::{NewestConfig, ReplicaSeen};
use assent_store::db::Database;
use serde_json::json;

/// Prints the replicas of `place`'s database (`--json`: `{"newest": {generation, digest,
/// loaded_at, loaded_by} | null, "replicas": [{holder, digest, generation, seen_ms_ago, live,
/// newest}]}`, most recently seen first). Exit status 0 when every live replica serves the
/// newest configuration, 2 when one serves another. Blocking: call it off the async runtime.
/// Errors: the database cannot be read (its schema before migration 0060: run `assent
/// migrate`).
pub(crate) fn run(place: &DataPlace, as_json: bool) -> Result<i32> {
    let db = database_named(place)?;
    if matches!(db, Database::Sqlite { .. }) {
        if as_json {
            println!("{}", json!({"newest": null, "replicas": []}));
        } else {
            println!(
                "{db:?}: one process; replicas and configuration generations need PostgreSQL (database: {{url_env: VAR}})"
            );
        }
        return Ok(0);
    }
    let conn = assent_store::AdminConnection::open(&db)
        .with_context(|| format!("cannot open the {db:?} database"))?;
    let now = assent_server::state::now_ms();
    let (newest, seen) = assent_store::config_generations::replicas(conn.conn(), now)
        .context("cannot read the replicas (is the schema current? run assent migrate)")?;
    if as_json {
        // Made inert as every command's JSON (found by review: printed raw, a C1 control or a
        // bidirectional override in a name from the database reached the terminal).
        crate::remote::print_json(&json!({"newest": newest, "replicas": seen}))?;
    } else {
        print!("{}", table(newest.as_ref(), &seen));
    }
    let behind = seen.iter().any(|r| r.live && !r.newest);
    Ok(if behind { 2 } else { 0 })
}

/// The text form: the newest generation, then a line a replica. Names and digests come from
/// the database, so each is made inert (no escape sequence reaches the terminal).
fn table(newest: Option<&NewestConfig>, seen: &[ReplicaSeen]) -> String {
    let mut out = match newest {
        Some(n) => format!(
            "newest configuration: generation {} ({}), put in force by {}\n",
            n.generation,
            short(&n.digest),
            inert(&n.loaded_by)
        ),
        None => "no configuration registered yet\n".to_string(),
    };
    if seen.is_empty() {
        out.push_str("no replica is serving\n");
    }
    for r in seen {
        let generation = r.generation.map_or("unknown".into(), |g| g.to_string());
        let standing = match (r.live, r.newest) {
            (false, _) => "not seen lately (stopped without saying so?)",
            (true, true) => "serves the newest",
            (true, false) => {
                "serves an older one: it serves nothing until reloaded or restarted with the newest"
            }
        };
        out.push_str(&format!(
            "{}  generation {generation} ({})  seen {:.1} s ago  {standing}\n",
            inert(&r.holder),
            short(&r.digest),
            r.seen_ms_ago as f64 / 1000.0
        ));
    }
    out
}

/// A digest's form and its first 12 hex digits (its first 15 characters), inert.
fn short(digest: &str) -> String {
    inert(&digest.chars().take(15).collect::<String>())
}
