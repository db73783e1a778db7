//! The seal of an approval's settlement (migration 0035): what it became and how — its
//! `status`, `decided_at`, decided `scope`, the edited call (`edited_arguments`,
//! `edited_canonical`, `edited_hash`), every `decisions` row (decision, reason, actor, time,
//! default applied, decision id, passkey proof, and the decider's key binding when it has one,
//! migration 0052) and the seals of its quorum votes in voting
//! order (each vote row carries its own, `votes.rs`; the list here makes a vote deleted or
//! added after the settlement show) — fixed by the transaction that settles it, under a key
//! of its own ([`crate::seal::Sealed::Settlement`]) derived from the audit key, which the
//! database never holds.
//!
//! The terms' seal ([`crate::approval_seal`]) vouches for what was held (and, since 0035,
//! the governance its receipt names); this one vouches for what was decided. Found by review:
//! with the terms' seal alone, whoever could write the database could turn a rejected
//! approval into an approved one (its `status` and decision row), drop an operator's edit or
//! rename a voter, and the gateway signed a receipt saying so. A receipt is signed only for a
//! settlement that holds this seal; a settlement written before migration 0035 has none and
//! gets no receipt.
//!
//! What the seal cannot stop, as for every seal ([`crate::seal`]): rows put back whole, seal
//! and all, as they were — here a settled approval made to look pending again (its decision
//! row deleted, its `decided_at` and seal cleared), which `assent audit verify` finds against
//! the chain. Nor, on PostgreSQL, a trigger planted to change what the settling transaction
//! writes before it is read back and sealed (planted triggers are outside what the gateway
//! checks, SECURITY.md).

use crate::db::{self, Conn, OptionalExtension as _};
use crate::seal::SealKey;
use serde_json::{Value, json};

/// The columns the seal is over, read from approval `id`'s row, its decisions and its votes:
/// `[id, status, decided_at, scope, edited_arguments, edited_canonical, edited_hash,
/// [[decision, reason, actor, at, default_applied, decision_id, passkey], …], [vote seal,
/// …]]` (decision rows in insertion order, each followed by its `key_binding` when it has one,
/// migration 0052; votes in voting order), and the stored seal;
/// `None` when there is no such approval.
fn stored(conn: Conn<'_>, id: &str) -> db::Result<Option<(Value, String)>> {
    type Row = (
        String,
        Option<i64>,
        Option<String>,
        (Option<String>, Option<String>, Option<String>),
        String,
    );
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT status, decided_at, scope, edited_arguments, edited_canonical, edited_hash,
                    settlement_seal
             FROM approvals WHERE id = ?1",
        )?
        .query_row([id], |r| {
            let edit = (r.get(3)?, r.get(4)?, r.get(5)?);
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, edit, r.get(6)?))
        })
        .optional()?;
    let Some((status, decided_at, scope, edit, seal)) = row else {
        return Ok(None);
    };
    let decisions: Vec<Value> = conn
        .prepare_cached(
            "SELECT decision, reason, actor, at, default_applied, decision_id, passkey, key_binding
         FROM decisions WHERE approval_id = ?1 ORDER BY rowid",
        )?
        .query_map([id], |r| {
            let row: (String, Option<String>, String, i64) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let more: (Option<String>, Option<String>, Option<String>) =
                (r.get(4)?, r.get(5)?, r.get(6)?);
            let mut d = json!([row.0, row.1, row.2, row.3, more.0, more.1, more.2]);
            // The key binding (migration 0052) only when there is one: the seals of the rows
            // written without it still hold.
            if let Some(k) = r.get::<Option<String>>(7)? {
                d.as_array_mut().expect("an array").push(json!(k));
            }
            Ok(d)
        })?;
    let votes: Vec<String> = conn
        .prepare_cached("SELECT seal FROM votes WHERE approval_id = ?1 ORDER BY rowid")?
        .query_map([id], |r| r.get(0))?;
    let columns = json!([
        id, status, decided_at, scope, edit.0, edit.1, edit.2, decisions, votes
    ]);
    Ok(Some((columns, seal)))
}

/// Seals approval `id`'s settlement as just written, in the settling transaction (so what is
/// sealed is what the gateway wrote): called once its status, decided time, scope, edit and
/// decision row are stored, before its settling audit record. A row with a column of another
/// type than the gateway writes (SQLite keeps what it is given) is left unsealed rather than
/// failing the settlement: its receipt is refused, the denial or expiry stands. The first
/// settlement a gateway of this version seals also records, before its own record, the
/// chain's word that settlements are sealed from there on ([`crate::sealing_marker`], at the
/// settlement's `decided_at`, else at the head record's time), which `audit verify` holds
/// every later settlement to.
pub(crate) fn seal(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<()> {
    let (seal, at) = match stored(conn, id) {
        Ok(Some((columns, _))) => (key.seal(&columns), columns[2].as_i64()),
        Ok(None) => return Ok(()),
        Err(e) if e.is_damaged_row() => (String::new(), None),
        Err(e) => return Err(e),
    };
    let at = match at {
        Some(at) => at,
        None => conn
            .prepare_cached("SELECT at FROM audit ORDER BY seq DESC LIMIT 1")?
            .query_row([], |r| r.get(0))
            .optional()?
            .unwrap_or(0),
    };
    crate::sealing_marker::record_once(conn, key, at)?;
    conn.prepare_cached("UPDATE approvals SET settlement_seal = ?2 WHERE id = ?1")?
        .execute(crate::params![id, seal])?;
    Ok(())
}

/// Whether approval `id`'s settlement holds its seal under `key`: `false` for a settlement
/// without one (written before migration 0035, or planted), with another's, for a column of
/// another type than the gateway writes (SQLite keeps what it is given) and for no such
/// approval.
pub(crate) fn holds(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<bool> {
    match stored(conn, id) {
        Ok(Some((columns, seal))) => Ok(key.holds(&columns, &seal)),
        Ok(None) => Ok(false),
        Err(e) if e.is_damaged_row() => Ok(false),
        Err(e) => Err(e),
    }
}
