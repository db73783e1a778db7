//! Strict reading of stored approval columns (issue 10 §8: fail closed on stored data).
//!
//! A column that carries a decision-relevant value (`approvers`, `status`, `risk_tier`,
//! `default_decision`, `scope`, `escalate_to`, the call's `arguments`, …) is parsed without a
//! fallback: when it cannot be read (not text, not the expected JSON, not a known name) the
//! column's name is recorded in `Columns::damaged` and the most restrictive value stands in
//! for it. [`crate::ApprovalRecord::damaged`] carries that list; [`crate::Store`] refuses every
//! event on such an approval ([`crate::DecideError::Damaged`]), the expiry sweep skips it, and
//! `assent audit verify` reports it.

use crate::db::{self, Row, ValueRef};
use serde::de::DeserializeOwned;

/// The approver role that stands in for an unreadable `approvers` column: no configured role
/// can hold it (role names are plain identifiers), so nobody may decide the approval even if
/// a caller forgot to look at `damaged`.
pub const UNREADABLE_ROLE: &str = "!unreadable";

/// Collects the names of the columns of one row that could not be read.
#[derive(Debug, Default)]
pub(crate) struct Columns {
    /// Column names, in reading order.
    pub damaged: Vec<String>,
}

/// The column's text, `Ok(None)` for SQL NULL, `Err(())` for any other type or invalid UTF-8.
fn text(r: &Row<'_>, i: usize) -> db::Result<Result<Option<String>, ()>> {
    Ok(match r.get_ref(i)? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(b) => std::str::from_utf8(b)
            .map(|s| Some(s.to_string()))
            .map_err(|_| ()),
        _ => Err(()),
    })
}

/// The column parsed by `parse`: `Ok(None)` for SQL NULL, `Err(())` when it is not text or
/// `parse` rejects it.
fn read<T>(
    r: &Row<'_>,
    i: usize,
    parse: impl FnOnce(&str) -> Option<T>,
) -> db::Result<Result<Option<T>, ()>> {
    Ok(match text(r, i)? {
        Ok(None) => Ok(None),
        Ok(Some(s)) => parse(&s).map(Some).ok_or(()),
        Err(()) => Err(()),
    })
}

impl Columns {
    fn damage<T>(&mut self, name: &str, worst: T) -> T {
        self.damaged.push(name.to_string());
        worst
    }

    /// A NOT NULL text column parsed by `parse`; `worst` when it is missing, not text or
    /// rejected by `parse`.
    pub fn parsed<T>(
        &mut self,
        r: &Row<'_>,
        i: usize,
        name: &str,
        parse: impl FnOnce(&str) -> Option<T>,
        worst: T,
    ) -> db::Result<T> {
        Ok(match read(r, i, parse)? {
            Ok(Some(v)) => v,
            _ => self.damage(name, worst),
        })
    }

    /// A nullable text column: `None` for NULL, else parsed by `parse`; `worst` when it is
    /// not text or rejected.
    pub fn parsed_opt<T>(
        &mut self,
        r: &Row<'_>,
        i: usize,
        name: &str,
        parse: impl FnOnce(&str) -> Option<T>,
        worst: Option<T>,
    ) -> db::Result<Option<T>> {
        Ok(match read(r, i, parse)? {
            Ok(v) => v,
            Err(()) => self.damage(name, worst),
        })
    }

    /// A NOT NULL JSON text column; `worst` when it is not JSON of type `T`.
    pub fn json<T: DeserializeOwned>(
        &mut self,
        r: &Row<'_>,
        i: usize,
        name: &str,
        worst: T,
    ) -> db::Result<T> {
        self.parsed(r, i, name, |s| serde_json::from_str(s).ok(), worst)
    }

    /// A nullable count (bytes, milliseconds): `None` for NULL; `worst` when it is negative or
    /// not an integer (a stored `-1` must not turn into 2^64 - 1 and lift a limit).
    pub fn count(
        &mut self,
        r: &Row<'_>,
        i: usize,
        name: &str,
        worst: u64,
    ) -> db::Result<Option<u64>> {
        Ok(match r.get_ref(i)? {
            ValueRef::Null => None,
            ValueRef::Int(n) if n >= 0 => Some(n as u64),
            _ => Some(self.damage(name, worst)),
        })
    }

    /// A JSON list of strings (NOT NULL); empty when unreadable (for display-only lists).
    pub fn list(&mut self, r: &Row<'_>, i: usize, name: &str) -> db::Result<Vec<String>> {
        self.json(r, i, name, Vec::new())
    }
}

/// What a stored decision did: `assent-core`'s [`Settlement`], re-exported where the store's
/// readers have always found it.
pub use assent_core::approval::Settlement;
