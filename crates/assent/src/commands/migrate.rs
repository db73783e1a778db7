//! `assent migrate`: brings the store's database to this build's schema version (issue 13),
//! on SQLite (`<data_dir>/assent.db`, created with a private directory when missing) or on
//! the PostgreSQL database of `--config FILE`'s `database: {url_env}`. The migrations and
//! their refusals (a newer schema, an edited migration) are the store's runner
//! (`assent_store::migrate`); `assent serve` runs the same at start-up.

use crate::args::DataPlace;
use crate::setup::database;
use anyhow::{Context, Result};
use assent_store::migrate;
use serde_json::json;

/// Runs the migrations of `place`'s database and prints what it did (`--json`: one object
/// `{"applied": [versions], "version": N}`). Blocking: call it off the async runtime (the
/// PostgreSQL client runs its own). Exit status 0; an error (unreachable database, a schema
/// newer than this build, an edited migration) is returned.
pub(crate) fn run(place: &DataPlace, as_json: bool) -> Result<i32> {
    let db = database(place)?;
    // Beside the data directory's lock, as a gateway: a restore under way finishes first.
    let conn = assent_store::AdminConnection::open(&db)
        .with_context(|| format!("cannot open the {db:?} database"))?;
    let applied = migrate::migrate(conn.conn(), "assent migrate")?;
    let version = migrate::latest();
    if as_json {
        println!("{}", json!({"applied": applied, "version": version}));
    } else if applied.is_empty() {
        println!("the {db:?} database is at schema version {version}; nothing to do");
    } else {
        let list: Vec<String> = applied.iter().map(u32::to_string).collect();
        println!(
            "the {db:?} database is at schema version {version} (applied {})",
            list.join(", ")
        );
    }
    Ok(0)
}
