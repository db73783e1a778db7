//! The seal of an approval's settlement (migration 0035): what it became and how — its
//! `status`, `decided_at`, decided `scope`, the edited call (`edited_canonical`,
//! `edited_hash`), every `decisions` row (decision, reason, actor, time, default applied,
//! decision id, passkey proof) and the governance its receipt names (the policies and policy
//! set recorded when it was held, `confirm.rs`) — fixed by the transaction that settles it,
//! under a key of its own ([`crate::seal::Sealed::Settlement`]) derived from the audit key,
//! which the database never holds.
//!
//! The terms' seal ([`crate::approval_seal`]) vouches for what was held; this one vouches for
//! what was decided. Found by review: with the terms' seal alone, whoever could write the
//! database could turn a rejected approval into an approved one (its `status` and decision
//! row) and the gateway signed a receipt saying an operator approved it. A receipt is signed
//! only for a settlement that holds this seal; a settlement written before migration 0035
//! has none and gets no receipt.
//!
//! What the seal cannot stop, as for every seal ([`crate::seal`]): a settled row put back
//! whole, seal and all, as it was. A settlement cannot be undone by the gateway, so that is a
//! row deleted and planted again, which `assent audit verify` finds against the chain.

use crate::db::{self, Conn, OptionalExtension as _};
use crate::seal::SealKey;
use serde_json::{Value, json};

/// The columns the seal is over, read from approval `id`'s row, its decisions and its
/// recorded governance: `[id, status, decided_at, scope, edited_canonical, edited_hash,
/// [[decision, reason, actor, at, default_applied, decision_id, passkey], …], policies,
/// policy_set_sha256]` (decision rows in insertion order; the last two `null` when no
/// context was recorded), and the stored seal; `None` when there is no such approval.
fn stored(conn: Conn<'_>, id: &str) -> db::Result<Option<(Value, String)>> {
    type Row = (
        String,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
    );
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT status, decided_at, scope, edited_canonical, edited_hash, settlement_seal
             FROM approvals WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .optional()?;
    let Some((status, decided_at, scope, edited_canonical, edited_hash, seal)) = row else {
        return Ok(None);
    };
    let decisions: Vec<Value> = conn
        .prepare_cached(
            "SELECT decision, reason, actor, at, default_applied, decision_id, passkey
         FROM decisions WHERE approval_id = ?1 ORDER BY rowid",
        )?
        .query_map([id], |r| {
            let row: (String, Option<String>, String, i64) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let more: (Option<String>, Option<String>, Option<String>) =
                (r.get(4)?, r.get(5)?, r.get(6)?);
            Ok(json!([row.0, row.1, row.2, row.3, more.0, more.1, more.2]))
        })?;
    let governed: Option<(String, Option<String>)> = conn
        .prepare_cached(
            "SELECT policies, policy_set_sha256 FROM confirm_context WHERE approval_id = ?1",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (policies, policy_set) = governed.unzip();
    let columns = json!([
        id,
        status,
        decided_at,
        scope,
        edited_canonical,
        edited_hash,
        decisions,
        policies,
        policy_set.flatten()
    ]);
    Ok(Some((columns, seal)))
}

/// Seals approval `id`'s settlement as just written, in the settling transaction (so what is
/// sealed is what the gateway wrote): called once its status, decided time, scope, edit and
/// decision row are stored.
pub(crate) fn seal(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<()> {
    if let Some((columns, _)) = stored(conn, id)? {
        conn.prepare_cached("UPDATE approvals SET settlement_seal = ?2 WHERE id = ?1")?
            .execute(crate::params![id, key.seal(&columns)])?;
    }
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
