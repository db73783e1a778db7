//! The SQL kit at the bottom of the crate, over the storage kernel ([`crate::db`], either
//! backend): a query's rows as a typed list ([`rows`]), its first column ([`column`]), a column
//! of JSON texts as values ([`json_values`]), one lenient JSON column ([`json_or_default`]) and
//! a row read into a struct by column name (`from_row!`). No approval logic and no
//! transactions (those are [`crate::Store::write`]'s).
//!
//! [`lite`] borrows a SQLite file opened read-only by an offline command (audit verify, the
//! backup's checkpoints) as a kernel [`Conn`].

use crate::db::{self, ColumnIndex, Conn, FromValue, Params, Row};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A rusqlite connection as a kernel session: for the offline commands that open the SQLite
/// file read-only themselves (the store's own handle is a kernel `Connection`).
pub(crate) fn lite(c: &rusqlite::Connection) -> Conn<'_> {
    Conn::Sqlite(c)
}

/// Every row of `sql` (a cached statement) run with `params`, mapped by `map`, in the order
/// the query returns them. `Err` for an SQL error or a column `map` cannot read.
pub(crate) fn rows<T>(
    conn: Conn<'_>,
    sql: &str,
    params: impl Params,
    map: impl FnMut(&Row<'_>) -> db::Result<T>,
) -> db::Result<Vec<T>> {
    conn.query_map(sql, params, map)
}

/// The first column of every row of `sql` run with `params` (e.g. a list of ids).
pub(crate) fn column<T: FromValue>(
    conn: Conn<'_>,
    sql: &str,
    params: impl Params,
) -> db::Result<Vec<T>> {
    rows(conn, sql, params, |r| r.get(0))
}

/// The first column of every row of `sql`, JSON text, parsed; texts that are not JSON are
/// left out (they are audit data the store wrote itself).
pub(crate) fn json_values(
    conn: Conn<'_>,
    sql: &str,
    params: impl Params,
) -> db::Result<Vec<Value>> {
    let texts: Vec<String> = column(conn, sql, params)?;
    Ok(texts
        .iter()
        .filter_map(|s| serde_json::from_str(s).ok())
        .collect())
}

/// A NOT NULL JSON text column (by index or name) as a `T`; `T::default()` (`null` for a
/// [`Value`], empty for a list) when the text is not JSON of that type. For columns the store
/// wrote itself and only shows or passes on; decision-relevant columns are read strictly
/// ([`crate::stored::Columns`]).
pub(crate) fn json_or_default<T: DeserializeOwned + Default>(
    r: &Row<'_>,
    i: impl ColumnIndex,
) -> db::Result<T> {
    let text: String = r.get(i)?;
    Ok(serde_json::from_str(&text).unwrap_or_default())
}

/// `from_row!(row => T { a, b, … })` is `Ok(T { a: row.get("a")?, b: row.get("b")?, … })`:
/// each field read, typed by the field, from the column of the same name (so the SELECT may
/// list its columns in any order, and a renamed column fails loudly instead of shifting).
/// A field may instead give its value, `field: expr` (e.g. [`json_or_default`] of a column).
macro_rules! from_row {
    ($r:expr => $T:ident { $($f:ident $(: $e:expr)?),+ $(,)? }) => {
        Ok($T { $($f: from_row!(@get $r, $f $(, $e)?)),+ })
    };
    (@get $r:expr, $f:ident) => { $r.get(stringify!($f))? };
    (@get $r:expr, $f:ident, $e:expr) => { $e };
}
pub(crate) use from_row;

/// SQL: whether a `grants` row has not expired at the Unix-ms parameter `now` (e.g. `?2`): its
/// `expires_at` is later, or it has none and is not a session grant stored before session
/// grants lapsed, which lapsed [`assent_core::grant::DEFAULT_SESSION_GRANT_MAX_MS`] after its
/// `created_at` (as [`assent_core::grant::covers`] judges it). Listings, retention and the
/// revocation passes share it.
pub(crate) fn grant_unexpired_at(now: &str) -> String {
    format!(
        "(expires_at > {now} OR (expires_at IS NULL AND (session_id IS NULL OR created_at > {now} - {})))",
        assent_core::grant::DEFAULT_SESSION_GRANT_MAX_MS
    )
}
