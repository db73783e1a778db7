//! The cross-check of what stands for a person's say (`assent audit verify`, check `state`):
//! quorum votes, registered passkeys and decision rows against their audit records. A vote
//! row counts towards a quorum, a passkey row lets its holder sign a vote or an R4 approval
//! and a decision row names who decided on the approval's receipt, so a row written behind
//! the gateway's back (N−1 forged votes, an attacker's authenticator under an operator's
//! name, another decider) would stand while every decision record still looks well formed.
//! Called by [`crate::integrity::cross_check_on`], in its snapshot.

use crate::archive::Gone;
use crate::audit::{json_of, text_at};
use crate::db::{self, Conn};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// A `decision.vote` record: `(approval_id, principal)` → `(seq, decision)`.
type VoteRecords = HashMap<(String, String), (i64, Option<String>)>;

/// Every `votes` row must be the vote its `decision.vote` record describes (same approval,
/// voter and decision); a row without one is reported unless the approval's records may have
/// been archived (settled, requested before the archive's cut-off). A `decision.vote` record
/// whose vote row is gone is reported too (a deleted deny vote changes a tally), unless a
/// later `decision.vote_withdrawn` record of the same approval names the voter.
pub(crate) fn votes(
    conn: Conn<'_>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
) -> db::Result<()> {
    let mut recorded: VoteRecords = HashMap::new();
    conn.prepare_cached(
        "SELECT seq, approval_id, actor, data, kind FROM audit WHERE kind IN ('decision.vote', 'decision.vote_withdrawn') ORDER BY seq",
    )?
    .for_each([], |r| {
        let (seq, aid, actor): (i64, Option<String>, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let kind: String = r.get(4)?;
        if let Some(aid) = aid {
            let data = json_of(r)?;
            if kind == "decision.vote_withdrawn" {
                // The voter's row was deleted with this record (a reload removed them or
                // changed their key or roles); a later vote of theirs is recorded again.
                let who = text_at(&data, "principal").unwrap_or_default();
                recorded.remove(&(aid, who));
            } else {
                // The last record: a voter whose unvouched row was replaced voted again.
                recorded.insert((aid, actor), (seq, text_at(&data, "decision")));
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    type VoteRow = (String, String, String, Option<String>, Option<i64>);
    let rows: Vec<VoteRow> = conn.query_map(
        "SELECT v.approval_id, v.principal, v.decision, a.status, a.requested_at
         FROM votes v LEFT JOIN approvals a ON a.id = v.approval_id
         ORDER BY v.at, v.approval_id, v.principal",
        [],
        db::tuple,
    )?;
    for (aid, who, decision, status, requested_at) in rows {
        let archived = status.as_deref().is_some_and(|s| s != "pending")
            && requested_at.is_some_and(|t| gone.before(t));
        match recorded.remove(&(aid.clone(), who.clone())) {
            None if archived => {}
            None => out.push((None, format!(
                "a vote by {who} on approval {aid} has no decision.vote record: it would count towards the quorum though no one cast it"
            ))),
            Some((seq, rec)) if rec.as_deref() != Some(decision.as_str()) => out.push((Some(seq), format!(
                "the vote by {who} on approval {aid} is {decision}, but its decision.vote record {seq} says {}",
                rec.as_deref().unwrap_or("?")
            ))),
            Some(_) => {}
        }
    }
    let mut left: Vec<(i64, String, String)> = recorded
        .into_iter()
        .map(|((aid, who), (seq, _))| (seq, aid, who))
        .collect();
    left.sort();
    for (seq, aid, who) in left {
        out.push((Some(seq), format!(
            "audit record {seq} (decision.vote) names a vote by {who} on approval {aid}, which is not in the votes table"
        )));
    }
    Ok(())
}

/// A passkey's registration as its records leave it: `credential_id` →
/// `(seq, principal, public key JSON)` of the latest `passkey.registered` not followed by a
/// `passkey.removed`.
type Registered = HashMap<String, (i64, String, serde_json::Value)>;

/// Every `passkeys` row must be registered by its audit records (a `passkey.registered` of
/// the same principal and public key, not removed since) in the live chain: audit retention
/// writes a standing registration again before it archives it (`retention.rs`
/// `carry_passkeys`), so no row is excused by its own — forgeable — `created_at`. A
/// registration still standing whose row is gone is reported too.
pub(crate) fn passkeys(conn: Conn<'_>, out: &mut Vec<(Option<i64>, String)>) -> db::Result<()> {
    let mut live: Registered = HashMap::new();
    conn.prepare_cached(
        "SELECT seq, kind, actor, data FROM audit WHERE kind IN ('passkey.registered', 'passkey.removed') ORDER BY seq",
    )?
    .for_each([], |r| {
        let (seq, kind, actor): (i64, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let data = json_of(r)?;
        let Some(id) = text_at(&data, "credential_id") else {
            return Ok(ControlFlow::Continue(()));
        };
        if kind == "passkey.registered" {
            live.insert(id, (seq, actor, data["public_key"].clone()));
        } else {
            live.remove(&id);
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let rows: Vec<(String, String, String)> = conn.query_map(
        "SELECT credential_id, principal, public_key FROM passkeys ORDER BY created_at, credential_id",
        [],
        db::tuple,
    )?;
    for (id, who, key) in rows {
        let key: serde_json::Value = serde_json::from_str(&key).unwrap_or_default();
        match live.remove(&id) {
            None => out.push((None, format!(
                "passkey {id} of {who} has no standing passkey.registered record: whoever holds it could sign votes as {who}"
            ))),
            Some((seq, owner, rec)) if owner != who || rec != key => out.push((Some(seq), format!(
                "passkey {id} of {who} differs from its passkey.registered record {seq} (owner or public key changed)"
            ))),
            Some(_) => {}
        }
    }
    let mut left: Vec<(i64, String)> = live.into_iter().map(|(id, (seq, ..))| (seq, id)).collect();
    left.sort();
    for (seq, id) in left {
        out.push((Some(seq), format!(
            "audit record {seq} (passkey.registered) names passkey {id}, which is not in the passkeys table and was never removed"
        )));
    }
    Ok(())
}

/// A settling audit record of an approval: `(seq, actor, at, decision)`.
type Settling = (i64, String, i64, String);

/// Every `decisions` row (who settled an approval, how, when) must be the one its settling
/// audit record describes (`decision`, `approval.expired`, `approval.cancelled`, or
/// `grant.used` for an approval a grant covered). Found by review: a row whose actor was
/// changed put another name on the approval, its answer and its signed receipt, while the
/// record still named who decided. A row whose record is missing is reported by the
/// approvals' own check (its status has no settling record).
pub(crate) fn decisions(conn: Conn<'_>, out: &mut Vec<(Option<i64>, String)>) -> db::Result<()> {
    let mut settling: HashMap<String, Settling> = HashMap::new();
    conn.prepare_cached(
        "SELECT seq, at, kind, approval_id, actor, data FROM audit
         WHERE kind IN ('decision', 'approval.expired', 'approval.cancelled', 'grant.used') ORDER BY seq",
    )?
    .for_each([], |r| {
        let (kind, aid): (String, Option<String>) = (r.get(2)?, r.get(3)?);
        if let Some(aid) = aid {
            let decision = match kind.as_str() {
                "grant.used" => Some("approve".to_string()),
                _ => text_at(&json_of(r)?, "decision"),
            };
            let s = (r.get(0)?, r.get(4)?, r.get(1)?, decision.unwrap_or_default());
            settling.entry(aid).or_insert(s);
        }
        Ok(ControlFlow::Continue(()))
    })?;
    type DecisionRow = (String, String, String, i64);
    let rows: Vec<DecisionRow> = conn.query_map(
        "SELECT approval_id, decision, actor, at FROM decisions ORDER BY at, rowid",
        [],
        db::tuple,
    )?;
    for (aid, decision, actor, at) in rows {
        match settling.get(&aid) {
            Some((seq, by, when, what)) if (by, *when, what) != (&actor, at, &decision) => {
                out.push((Some(*seq), format!(
                    "approval {aid}'s decision row ({decision} by {actor}) differs from audit record {seq} ({what} by {by}): who decided, how or when was changed"
                )));
            }
            // No record: archived, or reported by the approvals' check.
            _ => {}
        }
    }
    Ok(())
}

/// The keys [`settlements`] checks with, both derived from the gateway's own audit key:
/// `(settlement seal key, terms seal key, plan seal key)` ([`crate::seal::Sealed::Settlement`],
/// [`crate::seal::Sealed::Approval`], [`crate::seal::Sealed::Plan`]; the last for
/// `integrity_plans::seals`).
pub(crate) type SettledKeys = (
    crate::seal::SealKey,
    crate::seal::SealKey,
    crate::seal::SealKey,
);

/// Every settlement this gateway's key sealed must hold its seal ([`crate::settlement_seal`]).
/// Which ones it sealed is told by nothing a database writer can move (found by review: it
/// was told by `assent_schema.applied_at` of migration 0035 and the row's own `decided_at`,
/// so moving the one forward, or the other back, hid an edited settlement), but by the audit
/// chain, whose records are hash-linked and signed by checkpoints, and by the seals
/// themselves. A settled approval is placed at its first settling record (`decision`,
/// `approval.expired`, `approval.cancelled`, `grant.used`), the gateway's word that it seals
/// every settlement at its `settlement.sealing` record ([`crate::sealing_marker::position`],
/// written with the first settlement it seals, carried by retention), and the newest
/// audit-key take-over at
/// the original record of its newest `audit.key_replaced` record (`carried_from` when
/// retention carried it). A settled approval must hold its seal when:
///
/// - its settling record follows both the `settlement.sealing` record and the take-over (or
///   none was recorded), whatever its columns say (found by review: told only by the seals,
///   a writer who cleared every seal back to the first sealed settlement, and broke the
///   terms' seals of those approvals, hid an edit of the last one);
/// - its settling record follows the take-over (or none was recorded) and it carries a seal:
///   one this key wrote (before the take-over another key sealed it, which is not checked);
/// - its settling record follows that of an approval whose seal holds: the gateway was
///   sealing then, so a settlement with no seal had it cleared;
/// - its terms hold today's seal ([`crate::approval_seal::holds_whole`], a form written only
///   since migration 0035) under this key: it was held, so settled, by a gateway that seals.
///
/// A settlement made before the `settlement.sealing` record by a gateway from before
/// migration 0035 (no seal, settled before any sealed one, terms in the older form) passes,
/// as does one whose settling records were archived and which has no seal: for those, to
/// hide an edit by clearing seals, a writer must clear every seal back to the first
/// settlement since 0035 and break the terms' seal of each of those approvals. Only with the
/// gateway's own audit key (the seal keys derive from it, the database never holds it). One
/// pass over the settling records, one read of each settled approval's decisions and votes
/// and one HMAC (two for one without a seal that holds): linear in the settlements, as the
/// rest of the cross-check.
pub(crate) fn settlements(
    conn: Conn<'_>,
    (key, terms, _): &SettledKeys,
    out: &mut Vec<(Option<i64>, String)>,
) -> db::Result<()> {
    let cut = takeover_cut(conn)?;
    let sealing = crate::sealing_marker::position(conn)?;
    let mut settled_at: HashMap<String, i64> = HashMap::new();
    conn.prepare_cached(
        "SELECT seq, approval_id FROM audit WHERE approval_id IS NOT NULL
         AND kind IN ('decision', 'approval.expired', 'approval.cancelled', 'grant.used') ORDER BY seq",
    )?
    .for_each([], |r| {
        settled_at.entry(r.get(1)?).or_insert(r.get(0)?);
        Ok(ControlFlow::Continue(()))
    })?;
    let rows: Vec<(String, bool)> = conn.query_map(
        "SELECT CAST(id AS TEXT), settlement_seal <> '' FROM approvals WHERE status <> 'pending' \
         ORDER BY rowid",
        [],
        db::tuple,
    )?;
    let mut first: Option<i64> = None;
    let mut unsealed: Vec<(String, Option<i64>)> = Vec::new();
    let recorded = crate::archived_approvals::Recorded::of(conn)?;
    for (id, has_seal) in rows {
        let at = settled_at.get(&id).copied();
        // Its records archived by a run that found its seals holding (migration 0061): they
        // must hold still, terms' seal too (found by review: cleared, with the terms' seal
        // broken, it passed for a settlement from before the seals).
        // Seal columns changed since are reported by the cross-check already. Recorded by a
        // run before a take-over, the seals may be the replaced key's: judged as any other
        // settlement below.
        if at.is_none() && recorded.sealed(&id) && recorded.after(&id, cut) {
            let judged = recorded.as_recorded(conn, &id)?;
            if judged && !crate::settlement_seal::holds(conn, key, &id)? {
                out.push((None, unsealed_reason(&id)));
            } else if judged
                && recorded.terms_sealed(&id)
                && !crate::approval_seal::holds(conn, terms, &id)?
            {
                let why = "the call or who had to decide it was changed behind the gateway's back";
                out.push((None, format!(
                    "approval {id}'s terms do not hold their seal, which held when retention archived its records: {why}"
                )));
            }
            continue;
        }
        // Sealed (if at all) by the key this one took over from: not this key's to judge.
        if at.is_some_and(|s| cut.is_some_and(|c| s <= c)) {
            continue;
        }
        if crate::settlement_seal::holds(conn, key, &id)? {
            if let Some(s) = at {
                first = Some(first.map_or(s, |f| f.min(s)));
            }
        } else if at.is_some_and(|s| sealing.is_some_and(|m| s > m))
            || (has_seal && (at.is_some() || cut.is_none()))
        {
            // Settled after the chain's word that every settlement is sealed, or carrying
            // a seal: whatever its columns say, it was sealed.
            out.push((at, unsealed_reason(&id)));
        } else {
            unsealed.push((id, at));
        }
    }
    for (id, at) in unsealed {
        let after_sealed = at.is_some_and(|s| first.is_some_and(|f| s > f));
        if after_sealed || crate::approval_seal::holds_whole(conn, terms, &id)? {
            out.push((at, unsealed_reason(&id)));
        }
    }
    Ok(())
}

/// Where the newest audit-key take-over stands in the chain: the `seq` of the newest
/// `audit.key_replaced` record, or of the record it was carried from (`carried_from`, kept
/// through every carry: retention writes the record again before archiving it, and an
/// earlier record only); `None` when no take-over is recorded. Read through the partial
/// index `audit_key_replaced` (0051). The records' data is taken as it stands: a take-over
/// record that is no take-over signed by the key it names, or whose keys do not lead to the
/// key checked with, is itself the problem `audit verify` reports first (`key_ranges.rs`,
/// whose walk places each accounted take-over where this does).
pub(crate) fn takeover_cut(conn: Conn<'_>) -> db::Result<Option<i64>> {
    let found: Vec<(i64, String)> = crate::sql::rows(
        conn,
        "SELECT seq, data FROM audit WHERE kind = ?1 ORDER BY seq",
        [crate::key_replaced::KEY_REPLACED],
        db::tuple,
    )?;
    Ok(found
        .into_iter()
        .map(|(seq, data)| {
            let data: serde_json::Value = serde_json::from_str(&data).unwrap_or_default();
            data["carried_from"]
                .as_i64()
                .filter(|c| *c <= seq)
                .unwrap_or(seq)
        })
        .max())
}

/// The problem of approval `id`'s settlement not holding its seal.
fn unsealed_reason(id: &str) -> String {
    format!(
        "approval {id}'s settlement does not hold its seal: its status, decision rows (who decided, with which key binding), scope, edit or votes were changed behind the gateway's back, or its seal was cleared; the tokens it minted are refused, and void at the next start"
    )
}
