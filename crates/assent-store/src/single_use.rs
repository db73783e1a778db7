//! The steps the single-use tables share (issue 12): state kept between two requests —
//! passkey ceremonies, the spent states of single sign-on logins, dashboard sessions,
//! accepted Slack request signatures — is stored under a SHA-256 digest, pruned and bounded when a row is
//! added, and taken at most once. Each step is written once here: the digest check, making
//! room (remove what ended, count what is left) and take-once (read the row, remove it, hand
//! it back). What may be taken, and the caps, stay with each table.

use crate::db::{self, OptionalExtension as _, Row, Tx};
use crate::error::StoreError;

/// `Invalid(what)` unless `d` is 64 lowercase hex digits: a SHA-256 as the tables store it.
pub(crate) fn check_digest(d: &str, what: &str) -> Result<(), StoreError> {
    if d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(StoreError::Invalid(what.into()))
    }
}

/// Removes the rows of `table` whose `ends` column (Unix ms) is at or before `now`, then
/// counts the rows left: all of them, or with `of = Some((column, value))` those whose
/// `column` is `value`. The caller refuses a new row past its cap.
pub(crate) fn prune_and_count(
    tx: &Tx<'_>,
    table: &str,
    ends: &str,
    now: i64,
    of: Option<(&str, &str)>,
) -> db::Result<i64> {
    tx.execute(&format!("DELETE FROM {table} WHERE {ends} <= ?1"), [now])?;
    match of {
        None => tx.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0)),
        Some((column, value)) => tx.query_row(
            &format!("SELECT COUNT(*) FROM {table} WHERE {column} = ?1"),
            [value],
            |r| r.get(0),
        ),
    }
}

/// Takes the row of `table` whose `key` column is `id` at most once: reads `columns` of it
/// with `read`, and when `claims` says the caller may take it, removes it and hands it back.
/// A row the caller may not take is left alone (`None`), as is a missing one. Whether what
/// was taken may still be used (expiry, purpose) is the caller's check, after the removal: a
/// row is never usable twice, even by a wrong first try.
pub(crate) fn take<T>(
    tx: &Tx<'_>,
    (table, key, id): (&str, &str, &str),
    columns: &str,
    read: impl FnOnce(&Row<'_>) -> db::Result<T>,
    claims: impl FnOnce(&T) -> bool,
) -> db::Result<Option<T>> {
    let sql = format!("SELECT {columns} FROM {table} WHERE {key} = ?1");
    let Some(row) = tx.query_row(&sql, [id], read).optional()? else {
        return Ok(None);
    };
    if !claims(&row) {
        return Ok(None);
    }
    tx.execute(&format!("DELETE FROM {table} WHERE {key} = ?1"), [id])?;
    Ok(Some(row))
}
