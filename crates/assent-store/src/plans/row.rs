//! A plan's stored row and its seal ([`crate::seal`], `Sealed::Plan`, migration 0058): the
//! row as stored ([`Row`]), read with its seal checked ([`read_plan`]; [`DAMAGED`] when it does
//! not hold), read locked to be changed ([`read_plan_to_change`]), and sealed again after the
//! gateway changed it ([`seal`]).

use super::PlanRecord;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::params;
use crate::seal::SealKey;
use serde_json::{Value, json};

/// The status a plan whose row does not hold its seal reads as (no MPLP status: every rule of
/// `assent_core::transitions` refuses it): it runs no calls and takes no transition.
pub const DAMAGED: &str = "damaged";

/// Why a [`DAMAGED`] plan is refused what a plan in another status would be allowed.
pub const DAMAGED_WHY: &str = "its stored row does not hold its seal (it was changed in the database behind the gateway's back): it runs no calls and takes no change; create a new plan";

/// A plan's row as stored, every column as its text, in the order its seal covers them.
struct Row {
    plan_id: String,
    agent: String,
    session_id: String,
    status: String,
    body: String,
    submitted: Option<String>,
    confirm_id: Option<String>,
    events: String,
    trace_id: String,
    created_at: i64,
    updated_at: i64,
}

impl Row {
    /// The JSON array its seal is over.
    fn columns(&self) -> Value {
        json!([
            self.plan_id,
            self.agent,
            self.session_id,
            self.status,
            self.body,
            self.submitted,
            self.confirm_id,
            self.events,
            self.trace_id,
            self.created_at,
            self.updated_at
        ])
    }

    /// The record, with the status [`DAMAGED`] unless `intact`.
    fn record(self, intact: bool) -> PlanRecord {
        PlanRecord {
            status: if intact { self.status } else { DAMAGED.into() },
            body: serde_json::from_str(&self.body).unwrap_or_default(),
            submitted: self.submitted.and_then(|s| serde_json::from_str(&s).ok()),
            events: serde_json::from_str(&self.events).unwrap_or_default(),
            plan_id: self.plan_id,
            agent: self.agent,
            session_id: self.session_id,
            confirm_id: self.confirm_id,
            trace_id: self.trace_id,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// Plan `id`'s row and its seal as stored; `None` when there is none. A column of another
/// type than the gateway writes fails the read (`is_damaged_row`).
fn read_row(conn: Conn<'_>, id: &str) -> db::Result<Option<(Row, Option<String>)>> {
    conn.prepare_cached("SELECT plan_id, agent, session_id, status, body, submitted, confirm_id, events, trace_id, created_at, updated_at, seal FROM plans WHERE plan_id = ?1")?
        .query_row([id], |r| {
            let row = Row {
                plan_id: r.get(0)?,
                agent: r.get(1)?,
                session_id: r.get(2)?,
                status: r.get(3)?,
                body: r.get(4)?,
                submitted: r.get(5)?,
                confirm_id: r.get(6)?,
                events: r.get(7)?,
                trace_id: r.get(8)?,
                created_at: r.get(9)?,
                updated_at: r.get(10)?,
            };
            Ok((row, r.get(11)?))
        })
        .optional()
}

/// Reads plan `id` (its MPLP body, status, events and Confirm), its seal checked under `key`
/// (the [`Sealed::Plan`] key): status [`DAMAGED`] when it does not hold, or when a column
/// holds another type than the gateway writes; `None` when there is no such plan.
pub(crate) fn read_plan(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<Option<PlanRecord>> {
    match read_row(conn, id) {
        Ok(row) => Ok(row.map(|(row, seal)| {
            let intact = seal.is_some_and(|s| key.holds(&row.columns(), &s));
            row.record(intact)
        })),
        Err(e) if e.is_damaged_row() => Ok(Some(PlanRecord {
            plan_id: id.to_string(),
            agent: String::new(),
            session_id: String::new(),
            status: DAMAGED.into(),
            body: Value::Null,
            submitted: None,
            confirm_id: None,
            events: Vec::new(),
            trace_id: String::new(),
            created_at: 0,
            updated_at: 0,
        })),
        Err(e) => Err(e),
    }
}

/// [`read_plan`] in a write transaction that may change the plan: its row is locked first for
/// the rest of the transaction (PostgreSQL `SELECT … FOR UPDATE`; on SQLite the write
/// transaction already excludes every other writer), so the row checked against its seal is
/// the one changed and sealed again. Found by review: on PostgreSQL a database writer's
/// update committing between the gateway's check and its own `UPDATE` was sealed with it.
pub(crate) fn read_plan_to_change(
    tx: Conn<'_>,
    key: &SealKey,
    id: &str,
) -> db::Result<Option<PlanRecord>> {
    if tx.backend() == db::Backend::Postgres {
        tx.prepare_cached("SELECT 1 FROM plans WHERE plan_id = ?1 FOR UPDATE")?
            .query_row([id], |_| Ok(()))
            .optional()?;
    }
    read_plan(tx, key, id)
}

/// Seals plan `id`'s row as it stands now under `key`, in the transaction that changed it.
/// Its callers read the plan to change it ([`read_plan_to_change`], which locks the row) and
/// change only one that is not [`DAMAGED`], so what is sealed is what the gateway wrote.
pub(crate) fn seal(tx: Conn<'_>, key: &SealKey, id: &str) -> db::Result<()> {
    if let Some((row, _)) = read_row(tx, id)? {
        tx.prepare_cached("UPDATE plans SET seal = ?2 WHERE plan_id = ?1")?
            .execute(params![id, key.seal(&row.columns())])?;
    }
    Ok(())
}
