//! The SQL kit at the bottom of the crate: a query's rows as a typed list ([`rows`]), its
//! first column ([`column`]), a column of JSON texts as values ([`json_values`]) and a row
//! read into a struct by column name (`from_row!`). No approval logic
//! and no transactions (those are [`crate::Store::write`]'s).

use rusqlite::types::FromSql;
use rusqlite::{Connection, Params, Row};
use serde_json::Value;

/// Every row of `sql` (a cached statement) run with `params`, mapped by `map`, in the order
/// the query returns them. `Err` for an SQL error or a column `map` cannot read.
pub(crate) fn rows<T, P: Params>(
    conn: &Connection,
    sql: &str,
    params: P,
    map: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    conn.prepare_cached(sql)?.query_map(params, map)?.collect()
}

/// The first column of every row of `sql` run with `params` (e.g. a list of ids).
pub(crate) fn column<T: FromSql, P: Params>(
    conn: &Connection,
    sql: &str,
    params: P,
) -> rusqlite::Result<Vec<T>> {
    rows(conn, sql, params, |r| r.get(0))
}

/// The first column of every row of `sql`, JSON text, parsed; texts that are not JSON are
/// left out (they are audit data the store wrote itself).
pub(crate) fn json_values<P: Params>(
    conn: &Connection,
    sql: &str,
    params: P,
) -> rusqlite::Result<Vec<Value>> {
    let texts: Vec<String> = column(conn, sql, params)?;
    Ok(texts
        .iter()
        .filter_map(|s| serde_json::from_str(s).ok())
        .collect())
}

/// `from_row!(row => T { a, b, … })` is `Ok(T { a: row.get("a")?, b: row.get("b")?, … })`:
/// each field read, typed by the field, from the column of the same name (so the SELECT may
/// list its columns in any order, and a renamed column fails loudly instead of shifting).
macro_rules! from_row {
    ($r:expr => $T:ident { $($f:ident),+ $(,)? }) => {
        Ok($T { $($f: $r.get(stringify!($f))?),+ })
    };
}
pub(crate) use from_row;
