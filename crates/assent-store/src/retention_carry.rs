//! What a retention run (`retention.rs`) writes again at the chain's end before it deletes
//! the records it archived, so that what still stands stays recorded in the live chain: the
//! registrations of standing passkeys, the `grant.created` records of standing grants, the
//! records of standing tool pins and reviews, the newest record of each MPLP plan, the
//! recorded take-overs of audit keys, and the newest record of the configuration put in force.

use crate::archive::Manifest;
use crate::audit;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::integrity_pins;
use crate::params;
use assent_core::checkpoint::Checkpoint;
use ed25519_dalek::{SigningKey, VerifyingKey};

/// Everything a run writes again before it deletes the records `m` covers, in this order:
/// standing passkeys' registrations, standing grants' `grant.created` records, standing tool
/// pins' and reviews' records, each plan's newest record, recorded take-overs (signed by
/// `key`), the newest configuration record, and the settlements' sealing marker
/// ([`crate::sealing_marker::carry`]).
pub(crate) fn carry_all(tx: &db::Tx<'_>, m: &Manifest, key: &SigningKey) -> Result<(), StoreError> {
    carry_passkeys(tx, m)?;
    carry_grants(tx, m)?;
    carry_tools(tx, m)?;
    carry_plans(tx, m)?;
    carry_takeovers(tx, m, key)?;
    carry_config(tx, m)?;
    crate::sealing_marker::carry(tx, m, key)
}

/// Before the records `m` covers are deleted: the chain's newest `config.loaded` or
/// `config.reloaded` record, when it is among them, is written again at the chain's end (same
/// kind, actor and data, plus `carried_from` and `carried_at`, kept through later carries),
/// so a start compares its configuration with the one last put in force
/// ([`crate::Store::record_config_loaded`]) after any number of runs. Found by review: once
/// that record was archived, a restart with other rules found no configuration recorded and
/// wrote its own as the chain's baseline (`changed: false`), hiding the change.
fn carry_config(tx: &db::Tx<'_>, m: &Manifest) -> Result<(), StoreError> {
    let newest: Option<(i64, i64, String, String, String)> = tx
        .query_row(
            "SELECT seq, at, kind, actor, data FROM audit WHERE kind IN ('config.loaded', 'config.reloaded') ORDER BY seq DESC LIMIT 1",
            params![],
            db::tuple,
        )
        .optional()?;
    let Some((seq, at, kind, actor, data)) = newest else {
        return Ok(());
    };
    if seq < m.first_seq || seq > m.last_seq {
        return Ok(());
    }
    // An unreadable record is carried as such, so the next start still counts it as changed.
    let mut d = match serde_json::from_str(&data) {
        Ok(serde_json::Value::Object(d)) => d,
        _ => serde_json::Map::from_iter([("damaged".to_string(), data.into())]),
    };
    d.entry("carried_at").or_insert(at.into());
    d.entry("carried_from").or_insert(seq.into());
    audit::append(**tx, m.archived_at, &kind, None, &actor, &d.into())?;
    Ok(())
}

/// Before the records `m` covers are deleted: each record among them that vouches for a
/// standing tool pin or review (the newest `tool.pinned` / `tool.accepted` of a pin that still
/// matches it, the `tool.new` / `tool.changed` that raised a review and the `tool.accepted` /
/// `tool.rejected` that decided it, each matching its row), and the first report of each
/// server in each scope ([`integrity_pins::to_carry`]), is written again at the chain's end
/// (same kind, actor and data, plus `carried_from` and `carried_at`: the original record's
/// `seq` and time, kept through later carries), so `assent audit verify` finds the records of
/// every pin and review in the live chain and never excuses a row by its own (forgeable) date
/// after a run that carried (before, a review row planted as accepted and dated before the
/// cut-off passed, and the relay called its definition). Nothing to do when no tool record
/// is due.
fn carry_tools(tx: &db::Tx<'_>, m: &Manifest) -> Result<(), StoreError> {
    let any: Option<i64> = tx
        .query_row(
            "SELECT seq FROM audit WHERE seq >= ?1 AND seq <= ?2 AND kind IN ('tool.pinned', 'tool.accepted', 'tool.rejected', 'tool.new', 'tool.changed') LIMIT 1",
            params![m.first_seq, m.last_seq],
            |r| r.get(0),
        )
        .optional()?;
    if any.is_none() {
        return Ok(());
    }
    let carry = integrity_pins::to_carry(**tx)?;
    for seq in carry.range(m.first_seq..=m.last_seq) {
        let (at, kind, actor, data): (i64, String, String, String) = tx.query_row(
            "SELECT at, kind, actor, data FROM audit WHERE seq = ?1",
            [*seq],
            db::tuple,
        )?;
        let Ok(serde_json::Value::Object(mut d)) = serde_json::from_str(&data) else {
            continue;
        };
        d.entry("carried_at").or_insert(at.into());
        d.entry("carried_from").or_insert((*seq).into());
        audit::append(**tx, m.archived_at, &kind, None, &actor, &d.into())?;
    }
    Ok(())
}

/// The kinds of audit record that move an MPLP plan (`integrity_plans::status_after`).
const PLAN_KINDS: &str = "'plan.created', 'plan.updated', 'plan.submitted', 'plan.approved', 'plan.rejected', 'plan.cancelled'";

/// Before the records `m` covers are deleted: the newest `plan.*` record of each plan, when it
/// is among them, is written again at the chain's end (same kind, actor and data, plus
/// `carried_from` and `carried_at`, kept through later carries), so `assent audit verify`
/// compares every plan's row with its newest record after any number of runs (the gateway
/// deletes no plan). Found by review: once a plan's records were archived its row was compared
/// with nothing, and a cancelled plan's approved row put back whole, seal and all, lifted the
/// block on calls naming its steps unseen. Linear in the plan records of `m` and after it.
fn carry_plans(tx: &db::Tx<'_>, m: &Manifest) -> Result<(), StoreError> {
    // A plan record's data is its MPLP event, naming the plan in `data.plan_id`.
    let plan_of = |data: &str| {
        let event = serde_json::from_str::<serde_json::Value>(data).ok()?;
        crate::audit::text_at(&event["data"], "plan_id")
    };
    let archived: Vec<(i64, i64, String, String, String)> = crate::sql::rows(
        **tx,
        &format!(
            "SELECT seq, at, kind, actor, data FROM audit WHERE kind IN ({PLAN_KINDS}) AND seq >= ?1 AND seq <= ?2 ORDER BY seq"
        ),
        params![m.first_seq, m.last_seq],
        db::tuple,
    )?;
    if archived.is_empty() {
        return Ok(());
    }
    let later: Vec<String> = crate::sql::rows(
        **tx,
        &format!("SELECT data FROM audit WHERE kind IN ({PLAN_KINDS}) AND seq > ?1"),
        params![m.last_seq],
        |r| r.get(0),
    )?;
    let later: std::collections::HashSet<String> =
        later.iter().filter_map(|d| plan_of(d)).collect();
    // The newest archived record of each plan with no record after the run's range.
    let mut newest: std::collections::BTreeMap<String, (i64, i64, String, String, String)> =
        Default::default();
    for rec in archived {
        match plan_of(&rec.4) {
            Some(id) if !later.contains(&id) => newest.insert(id, rec),
            _ => None,
        };
    }
    let mut carried: Vec<_> = newest.into_values().collect();
    carried.sort_by_key(|r| r.0);
    for (seq, at, kind, actor, data) in carried {
        let Ok(serde_json::Value::Object(mut d)) = serde_json::from_str(&data) else {
            continue;
        };
        d.entry("carried_at").or_insert(at.into());
        d.entry("carried_from").or_insert(seq.into());
        audit::append(**tx, m.archived_at, &kind, None, &actor, &d.into())?;
    }
    Ok(())
}

/// Before the records `m` covers are deleted: each `audit.key_replaced` record among them (a
/// recorded take-over, `checkpoint::take_over`) is written again at the chain's end (same
/// actor and data, plus `carried_from` and `carried_at`: the original record's `seq` and
/// time, kept through later carries) and signed there by this gateway's audit `key`
/// ([`crate::checkpoint::sign_carried`]), so that the take-over stays recorded: the replaced
/// key never writes or serves again (`key_replaced.rs`), and `assent audit verify` still
/// judges the replaced key's checkpoints under it (`key_ranges.rs`). Found by review: the
/// record was archived with the old ones, after which the replaced key could take the
/// database back through an `audit-key-replaces` naming the new key.
fn carry_takeovers(tx: &db::Tx<'_>, m: &Manifest, key: &SigningKey) -> Result<(), StoreError> {
    let found: Vec<(i64, i64, String, String)> = crate::sql::rows(
        **tx,
        "SELECT seq, at, actor, data FROM audit WHERE kind = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq",
        params![crate::key_replaced::KEY_REPLACED, m.first_seq, m.last_seq],
        db::tuple,
    )?;
    for (seq, at, actor, data) in found {
        let Ok(serde_json::Value::Object(mut d)) = serde_json::from_str(&data) else {
            continue;
        };
        d.entry("carried_at").or_insert(at.into());
        d.entry("carried_from").or_insert(seq.into());
        let kind = crate::key_replaced::KEY_REPLACED;
        audit::append(**tx, m.archived_at, kind, None, &actor, &d.into())?;
        crate::checkpoint::sign_carried(**tx, key, m.archived_at)?;
    }
    Ok(())
}

/// Before the records `m` covers are deleted: each `passkey.registered` record among them
/// whose passkey is still registered (its row is there, same owner and public key) is
/// written again at the chain's end (same actor and data, plus `carried_from`: the archived
/// record's `seq`), so `assent audit verify` always finds a standing registration in the live
/// chain and never has to excuse a passkey by the row's own (forgeable) `created_at`. A
/// registration a `passkey.removed` of its credential followed is not carried, whatever the
/// table holds (found by review: a removed passkey's row put back in the database had its
/// registration carried past its removal, and `audit verify` then found it standing).
fn carry_passkeys(tx: &db::Tx<'_>, m: &Manifest) -> Result<(), StoreError> {
    let removals: Vec<(i64, String)> = crate::sql::rows(
        **tx,
        "SELECT seq, data FROM audit WHERE kind = 'passkey.removed' AND seq >= ?1 ORDER BY seq",
        params![m.first_seq],
        db::tuple,
    )?;
    let mut removed: std::collections::HashMap<String, i64> = Default::default();
    for (seq, data) in removals {
        let data: serde_json::Value = serde_json::from_str(&data).unwrap_or_default();
        if let Some(id) = data.get("credential_id").and_then(|v| v.as_str()) {
            removed.insert(id.to_string(), seq);
        }
    }
    let regs: Vec<(i64, String, String)> = crate::sql::rows(
        **tx,
        "SELECT seq, actor, data FROM audit WHERE kind = 'passkey.registered' AND seq >= ?1 AND seq <= ?2 ORDER BY seq",
        params![m.first_seq, m.last_seq],
        db::tuple,
    )?;
    for (seq, actor, data) in regs {
        let Ok(serde_json::Value::Object(mut d)) = serde_json::from_str(&data) else {
            continue;
        };
        let Some(id) = d
            .get("credential_id")
            .and_then(|v| v.as_str())
            .map(str::to_string)
        else {
            continue;
        };
        // Carried only when no removal followed it and it still describes the row (same owner
        // and public key): a row changed since is not vouched for again.
        if removed.get(&id).is_some_and(|r| *r > seq) {
            continue;
        }
        let row: Option<String> = tx
            .query_row(
                "SELECT public_key FROM passkeys WHERE credential_id = ?1 AND principal = ?2",
                params![id, actor],
                |r| r.get(0),
            )
            .optional()?;
        let standing = row
            .and_then(|k| serde_json::from_str::<serde_json::Value>(&k).ok())
            .is_some_and(|k| Some(&k) == d.get("public_key"));
        if standing {
            d.insert("carried_from".into(), seq.into());
            let at = m.archived_at;
            audit::append(**tx, at, "passkey.registered", None, &actor, &d.into())?;
        }
    }
    Ok(())
}

/// Before the records `m` covers are deleted: each `grant.created` record among them whose
/// grant still stands at the run (its row there, not revoked, not expired:
/// [`crate::sql::grant_unexpired_at`]) is written again at the chain's end (same actor and
/// data, plus `approval_id`, and `carried_from` and `carried_at` kept through later carries),
/// so `assent audit verify` still holds the grant's row to the record that made it. Found by
/// review: a standing grant held back every record from its approval's first one, so one
/// `workspace` grant (which never expires) stopped retention of the whole chain for good. A
/// row changed since its record is carried too: the check compares the two and names it. A
/// standing row whose grant a `grant.revoked` record revoked stops the run
/// ([`refuse_if_revoked`]).
fn carry_grants(tx: &db::Tx<'_>, m: &Manifest) -> Result<(), StoreError> {
    let made: Vec<(i64, i64, Option<String>, String, String)> = crate::sql::rows(
        **tx,
        "SELECT seq, at, approval_id, actor, data FROM audit WHERE kind = 'grant.created' AND seq >= ?1 AND seq <= ?2 ORDER BY seq",
        params![m.first_seq, m.last_seq],
        db::tuple,
    )?;
    let standing = format!(
        "SELECT approval_id FROM grants WHERE id = ?1 AND revoked_at IS NULL AND {}",
        crate::sql::grant_unexpired_at("?2")
    );
    for (seq, at, approval, actor, data) in made {
        let Ok(serde_json::Value::Object(mut d)) = serde_json::from_str(&data) else {
            continue;
        };
        let Some(gid) = d
            .get("grant_id")
            .and_then(|g| g.as_str())
            .map(str::to_string)
        else {
            continue;
        };
        let stands: Option<String> = tx
            .query_row(&standing, params![gid, m.archived_at], |r| r.get(0))
            .optional()?;
        if let Some(aid) = stands {
            refuse_if_revoked(tx, &gid, &aid)?;
            if let Some(a) = approval {
                d.entry("approval_id").or_insert(a.into());
            }
            d.entry("carried_at").or_insert(at.into());
            d.entry("carried_from").or_insert(seq.into());
            audit::append(
                **tx,
                m.archived_at,
                "grant.created",
                None,
                &actor,
                &d.into(),
            )?;
        }
    }
    Ok(())
}

/// `Err` (nothing archived) when grant `gid` of approval `aid`, standing by its row, has a
/// `grant.revoked` record: its `revoked_at` was cleared behind the gateway's back. Found by
/// review of [`carry_grants`]: the run carried such a grant's `grant.created` and deleted the
/// record revoking it, after which `audit verify` found the revived grant as its record says.
fn refuse_if_revoked(tx: &db::Tx<'_>, gid: &str, aid: &str) -> Result<(), StoreError> {
    let revoked: Vec<(i64, String)> = crate::sql::rows(
        **tx,
        "SELECT seq, data FROM audit WHERE approval_id = ?1 AND kind = 'grant.revoked' ORDER BY seq",
        params![aid],
        db::tuple,
    )?;
    let names = |d: &str| {
        serde_json::from_str::<serde_json::Value>(d)
            .is_ok_and(|v| v.get("grant_id").and_then(|g| g.as_str()) == Some(gid))
    };
    match revoked.iter().find(|(_, d)| names(d)) {
        Some((seq, _)) => Err(StoreError::Invalid(format!(
            "grant {gid} stands by its row, but audit record {seq} revoked it (its revoked_at was cleared); nothing archived (run assent audit verify)"
        ))),
        None => Ok(()),
    }
}

/// `Err` (nothing archived) when the audit chain no longer extends `published`, the newest
/// checkpoint the running gateway published ([`crate::checkpoint::extends`]: the record it
/// was signed at keeps its hash, or the newest anchor matches it, and every later record
/// links); `Ok` without one. Found by review: the gateway's retention archived a chain its own
/// checkpoint timer refused to sign.
pub(crate) fn refuse_if_altered(
    conn: Conn<'_>,
    published: Option<&Checkpoint>,
    key: &VerifyingKey,
) -> Result<(), StoreError> {
    let Some(why) = crate::checkpoint::extends(conn, published, key)? else {
        return Ok(());
    };
    Err(StoreError::Invalid(format!(
        "audit chain altered since the checkpoint this gateway published at record {}: {why}; nothing archived (run assent audit verify)",
        published.map_or(0, |p| p.seq)
    )))
}
