//! Tokens voided after a restore (`assent restore --allow-outstanding-tokens`), or because
//! the consent they were minted under was withdrawn.
//!
//! A restore rolls the database back: a token redeemed after the backup was taken is unused
//! again in the copy. Replacing `token.key` does not make it unusable, since the gateway signs
//! a token anew from its row whenever its agent reads the approval (found by review: the
//! agent read its approval again after such a restore and redeemed the fresh token, running
//! the call a second time). So a restore that accepts outstanding tokens leaves a marker,
//! [`MARKER`] in `data_dir`, holding the restore's time (Unix ms: the later of the restoring
//! host's clock and the copy's newest token or request), before the copy takes the
//! database's name; the next [`crate::Store::open`] of that SQLite database marks every
//! token issued before that time and still neither redeemed nor expired as used, each with a
//! `token.voided` audit record (`{"token_id", "restored_at"}`, actor `restore`), in one
//! transaction, and only then removes the marker. A crash in between voids again at the next
//! start (only tokens still unused); redeeming a voided token is refused as one already used,
//! and `audit verify` takes `token.voided` as the record of a used token.
//!
//! The same marker, written too when the copy holds pending approvals whose default is
//! `approve`, has that start cancel each of them requested by the marker's time (actor
//! `restore`, audited `approval.cancelled` like any cancel; their agents ask again). Found by
//! review: a call denied or cancelled after the backup was taken was pending again in the
//! copy, and once its deadline passed the expiry sweep approved it by its default, with no
//! one deciding — the denial undone. Pending approvals whose default is `reject` stay: the
//! worst the rollback does to them is ask a person again.
//!
//! Withdrawn consent voids the same way ([`void_token`]: marked used, `token.voided`): a
//! revoked grant's outstanding tokens ([`void_grant_tokens`], in the revoking transaction),
//! and those of approvals that rested on an operator a reload removed or changed
//! ([`void_approved_by`]), or that the configuration a gateway starts with no longer has as
//! that operator ([`Store::void_unbacked_tokens`]); both through [`void_unbacked`]. The
//! outstanding tokens are read through a partial index (`tokens_outstanding`, migration
//! 0050), so the voiding, in a write transaction, costs what is outstanding, not the history.

use crate::audit;
use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::kit::io;
use crate::params;
use crate::seal::{SealKey, Sealed};
use crate::store::Store;
use serde_json::{Value, json};
use std::path::Path;

/// The marker's file name in `data_dir`.
pub const MARKER: &str = "restored-void-tokens-before";

/// Writes the marker (0600, synced) asking the next start to void the tokens issued before
/// `at` (Unix ms): through a temporary file and a rename, so that a crash leaves the previous
/// marker or the new one, never none (found by review: written in place, a crash between
/// removing the old and creating the new lost a restore's voiding).
pub(crate) fn mark(data_dir: &Path, at: i64) -> Result<(), StoreError> {
    let (path, tmp) = (
        data_dir.join(MARKER),
        data_dir.join(format!("{MARKER}.tmp")),
    );
    crate::kit::write_private(&tmp, at.to_string().as_bytes()).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

impl Store {
    /// Voids the tokens a restore left outstanding when `data_dir` holds its [`MARKER`] (see
    /// the module doc); the number voided. `Invalid` for a marker that is not a time.
    pub(crate) fn void_restored_tokens(
        &self,
        data_dir: &Path,
        now: i64,
    ) -> Result<usize, StoreError> {
        let path = data_dir.join(MARKER);
        let at = match std::fs::read_to_string(&path) {
            Ok(t) => t.trim().parse::<i64>().map_err(|_| {
                StoreError::Invalid(format!(
                    "{}: a restore's marker holds a time in Unix milliseconds, not `{}`; restore again",
                    path.display(),
                    t.trim()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io(&path)(e)),
        };
        let n = self.write(|tx| void_before(**tx, at, now))?;
        self.cancel_restored_defaults(at, now)?;
        std::fs::remove_file(&path).map_err(io(&path))?;
        Ok(n)
    }

    /// Cancels the pending approvals requested at or before `at` whose default decision is
    /// `approve` (see the module doc; `at` is the later of the restoring host's clock and the
    /// copy's newest request or token, so a backup host's clock running ahead does not leave
    /// any out, and another process opening the store beside the gateway cancels nothing the
    /// gateway made since); how many. One a person or the sweep settled meanwhile, or that is
    /// damaged (which nobody may settle and the sweep leaves alone), is skipped and logged.
    fn cancel_restored_defaults(&self, at: i64, now: i64) -> Result<usize, StoreError> {
        // As text: an id stored as a blob names no approval below (as in the sweep).
        let ids: Vec<String> = crate::sql::column(
            self.lock().conn(),
            "SELECT CAST(id AS TEXT) FROM approvals WHERE status = 'pending' AND default_decision = 'approve' AND requested_at <= ?1 ORDER BY requested_at",
            [at],
        )?;
        let reason = "restored from a backup: it may have been decided after the backup was \
                      taken, and its default would approve it; ask again";
        let mut n = 0;
        for id in ids {
            match self.cancel(&id, Some(reason), "restore", now) {
                Ok(_) => n += 1,
                Err(crate::DecideError::Store(e)) => return Err(e),
                Err(e) => {
                    tracing::warn!(approval = %id, error = %e, restored_at = at,
                        "a restored approval whose default is approve was not cancelled")
                }
            }
        }
        if n > 0 {
            tracing::info!(
                cancelled = n,
                "restored approvals whose default is approve cancelled"
            );
        }
        Ok(n)
    }
}

/// Marks used, with a `token.voided` record each, the tokens issued before `at` that are
/// neither used nor expired at `now`.
fn void_before(tx: Conn<'_>, at: i64, now: i64) -> db::Result<usize> {
    let mut outstanding: Vec<(String, String)> = Vec::new();
    tx.prepare_cached(
        "SELECT token_id, approval_id FROM tokens WHERE used_at IS NULL AND expires_at > ?1 AND issued_at <= ?2 ORDER BY issued_at, token_id",
    )?
    .for_each(params![now, at], |r| {
        outstanding.push((r.get(0)?, r.get(1)?));
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    for (token, approval) in &outstanding {
        let data = json!({"restored_at": crate::rfc3339(at)});
        void_token(tx, (token, approval), "restore", data, now)?;
    }
    Ok(outstanding.len())
}

/// Marks token `token` of approval `approval` used at `now`, if it is not yet, with its
/// `token.voided` record (actor `by`; `data`, an object, with `token_id` added): redeeming it
/// is then refused as one already used (`TOKEN_USED`), and `audit verify` takes the record as
/// that of a used token. Whether it voided it.
pub(crate) fn void_token(
    tx: Conn<'_>,
    (token, approval): (&str, &str),
    by: &str,
    mut data: Value,
    now: i64,
) -> db::Result<bool> {
    let n = tx
        .prepare_cached("UPDATE tokens SET used_at = ?2 WHERE token_id = ?1 AND used_at IS NULL")?
        .execute(params![token, now])?;
    if n == 0 {
        return Ok(false);
    }
    data["token_id"] = json!(token);
    audit::append(tx, now, "token.voided", Some(approval), by, &data)?;
    Ok(true)
}

/// Voids ([`void_token`]; actor and reason `(by, why)`, `grant_id` recorded) the tokens
/// minted under grant `gid` that are neither redeemed nor expired at `now`: those of the calls
/// it covered — approvals whose sealed approving decision is `grant:<gid>`, and those whose
/// `grant_id` is `gid` other than `origin`'s, the approval whose decision made the grant (that
/// call an operator approved themselves). Called in the transaction that revokes the grant.
/// Found by review: an agent holding a `workspace` grant proposed many covered calls, kept
/// their single-use tokens, and redeemed them after the grant was revoked; and, by the unsealed
/// columns alone, a covered call whose `approvals.grant_id` a database writer had cleared, or
/// that `grants.approval_id` had been pointed at, was not found ([`crate::consent`]). How
/// many. Reads the outstanding tokens (through `tokens_outstanding`, migration 0050) and
/// their approvals' decisions (by `decisions_approval`).
pub(crate) fn void_grant_tokens(
    tx: Conn<'_>,
    (gid, origin): (&str, &str),
    (by, why): (&str, &str),
    now: i64,
) -> db::Result<usize> {
    let minted: Vec<(String, String)> = crate::sql::rows(
        tx,
        "SELECT t.token_id, t.approval_id FROM tokens t JOIN approvals a ON a.id = t.approval_id \
         WHERE t.used_at IS NULL AND t.expires_at > ?3 AND ((a.grant_id = ?1 AND a.id <> ?2) \
         OR EXISTS (SELECT 1 FROM decisions d WHERE d.approval_id = t.approval_id \
         AND d.decision = 'approve' AND d.actor = ?4)) ORDER BY t.issued_at, t.token_id",
        params![gid, origin, now, format!("grant:{gid}")],
        db::tuple,
    )?;
    let mut n = 0;
    for (token, approval) in &minted {
        let data = json!({"grant_id": gid, "why": why});
        n += usize::from(void_token(tx, (token, approval), by, data, now)?);
    }
    Ok(n)
}

/// Voids ([`void_token`]; actor `by`, reason `why`, `credential_id` recorded) the tokens
/// neither redeemed nor expired at `now` whose approval rests on passkey `credential_id`: its
/// approving decision was signed with it, or an approving vote was and the approving votes
/// left do not meet its quorum ([`signed_with`]). Called in the transaction that removes that
/// passkey. Found by review: removing a lost or cloned authenticator withdrew its pending
/// votes, but a call it had already approved (alone, or with the vote that met the quorum)
/// kept a redeemable token for up to `token_ttl_seconds` — where removing an operator's key
/// voids them ([`void_approved_by`]). How many. Reads the outstanding tokens (through
/// `tokens_outstanding`, migration 0050) and their approvals' decisions and votes.
pub(crate) fn void_signed_with(
    tx: Conn<'_>,
    credential_id: &str,
    (by, why): (&str, &str),
    now: i64,
) -> db::Result<usize> {
    // Only the tokens of approvals with a passkey-signed approving decision or vote are
    // looked at further (found by review: one to three reads per outstanding token, grant
    // tokens included, inside the write transaction).
    let outstanding: Vec<(String, String)> = crate::sql::rows(
        tx,
        "SELECT t.token_id, t.approval_id FROM tokens t WHERE t.used_at IS NULL \
         AND t.expires_at > ?1 AND (EXISTS (SELECT 1 FROM decisions d WHERE \
         d.approval_id = t.approval_id AND d.decision = 'approve' AND d.passkey IS NOT NULL) \
         OR EXISTS (SELECT 1 FROM votes v WHERE v.approval_id = t.approval_id \
         AND v.decision = 'approve' AND v.passkey IS NOT NULL)) ORDER BY t.issued_at, t.token_id",
        params![now],
        db::tuple,
    )?;
    let mut n = 0;
    for (token, approval) in outstanding {
        if signed_with(tx, &approval, credential_id)? {
            let data = json!({"credential_id": credential_id, "why": why});
            n += usize::from(void_token(tx, (&token, &approval), by, data, now)?);
        }
    }
    Ok(n)
}

/// Whether approval `aid` rests on passkey `credential_id` (a stored proof naming it): an
/// approving decision signed with it, or approving votes signed with it without which its
/// quorum is not met (an approval no longer readable then rests on it). A proof that does not
/// read names no passkey.
fn signed_with(conn: Conn<'_>, aid: &str, credential_id: &str) -> db::Result<bool> {
    let names = |proof: &Option<String>| {
        proof
            .as_deref()
            .and_then(|p| serde_json::from_str::<assent_core::passkey::PasskeyProof>(p).ok())
            .is_some_and(|p| p.credential_id == credential_id)
    };
    let decided: Vec<Option<String>> = crate::sql::column(
        conn,
        "SELECT passkey FROM decisions WHERE approval_id = ?1 AND decision = 'approve'",
        [aid],
    )?;
    if decided.iter().any(names) {
        return Ok(true);
    }
    let votes: Vec<(String, Option<String>)> = crate::sql::rows(
        conn,
        "SELECT principal, passkey FROM votes WHERE approval_id = ?1 AND decision = 'approve'",
        [aid],
        db::tuple,
    )?;
    let signed: Vec<String> = votes
        .into_iter()
        .filter(|(_, proof)| names(proof))
        .map(|(p, _)| p)
        .collect();
    if signed.is_empty() {
        return Ok(false);
    }
    let Some(mut rec) = crate::record::read_approval(conn, aid)? else {
        return Ok(true);
    };
    rec.votes.retain(|v| !signed.contains(&v.principal));
    Ok(!rec.quorum_tally().is_some_and(|(_, t)| t.met))
}

/// Whether one approving decision or vote stands, as [`void_unbacked`] asks:
/// `(principal, roles it was cast with, key binding)` — a vote's roles and binding as its row
/// keeps them (`votes.roles`, `votes.key_binding`, migration 0038); a single decision keeps no
/// roles and the binding of the key it was made with (`decisions.key_binding`, migration 0052;
/// `None` for one made before it, which is then weighed by its decider's name alone, as it
/// was: a key rotated under the same name does not take it back). The shape of the question [`crate::Store::withdraw_votes`] asks
/// of a pending vote, so the server answers both with one rule.
pub type ConsentStands<'a> = dyn Fn(&str, &[String], Option<&str>) -> bool + 'a;

/// Voids ([`void_token`]; actor and reason `(by, why)`) the tokens neither redeemed nor
/// expired at `now` whose approval's consent rested on one of the principals `names` (a reload
/// removed them or changed their key or roles): [`void_unbacked`] with every decision and vote
/// of theirs, and only theirs, fallen. Called in the transaction that withdraws their votes
/// and revokes their grants. Found by review: the unredeemed tokens of calls a removed
/// (perhaps stolen) key approved stayed redeemable. How many.
pub(crate) fn void_approved_by(
    tx: Conn<'_>,
    names: &[String],
    (by, why): (&str, &str),
    now: i64,
) -> db::Result<usize> {
    if names.is_empty() {
        return Ok(0);
    }
    let stands = |p: &str, _: &[String], _: Option<&str>| !names.iter().any(|n| n == p);
    void_unbacked(tx, (&stands, None), (by, why), now)
}

/// Voids ([`void_token`]; actor and reason `(by, why)`, the fallen principals recorded as
/// `principals`) the tokens neither redeemed nor expired at `now` whose approval's consent no
/// longer stands ([`unbacked`]; with `settled`, the settlement seal key, a settlement that
/// does not hold its seal stands not either, and its record's `why` says so). What a reload
/// that removes or changes operators does ([`void_approved_by`], by name, no seal weighed) and
/// what start-up does for the configuration it starts with ([`Store::void_unbacked_tokens`]):
/// one rule for both. How many.
pub(crate) fn void_unbacked(
    tx: Conn<'_>,
    (stands, settled): (&ConsentStands<'_>, Option<&SealKey>),
    (by, why): (&str, &str),
    now: i64,
) -> db::Result<usize> {
    let mut n = 0;
    for (token, approval, fallen) in unbacked(tx, (stands, settled), now)? {
        let why = match &fallen {
            Fallen::Unsealed(_) => UNSEALED,
            Fallen::Principals(_) => why,
        };
        let data = json!({"principals": fallen.names(), "why": why});
        n += usize::from(void_token(tx, (&token, &approval), by, data, now)?);
    }
    Ok(n)
}

/// Why a token's consent fell: the principals whose decision or vote no longer stands, or
/// (`Unsealed`, with every approving decider and voter) a settlement that no longer holds its
/// seal.
enum Fallen {
    Principals(Vec<String>),
    Unsealed(Vec<String>),
}

impl Fallen {
    fn names(&self) -> &[String] {
        match self {
            Fallen::Principals(n) | Fallen::Unsealed(n) => n,
        }
    }
}

/// The `why` of a token voided because its approval's settlement no longer holds its seal.
const UNSEALED: &str = "its approval's settlement no longer holds its seal (a decision row, its \
                        key binding, the status or the votes were changed in the database): \
                        nothing vouches for the consent it was minted under";

/// The tokens neither redeemed nor expired at `now` (read through the partial index
/// `tokens_outstanding`, migration 0050: what is outstanding, not the whole history) whose
/// approval's consent does not stand under `stands` ([`consent_stands`]; with `settled`, the
/// settlement seal key, also those whose settlement does not hold its seal), oldest first:
/// `(token id, approval id, why it fell)`. Reads only.
fn unbacked(
    conn: Conn<'_>,
    (stands, settled): (&ConsentStands<'_>, Option<&SealKey>),
    now: i64,
) -> db::Result<Vec<(String, String, Fallen)>> {
    let outstanding: Vec<(String, String)> = crate::sql::rows(
        conn,
        "SELECT token_id, approval_id FROM tokens WHERE used_at IS NULL AND expires_at > ?1 \
         ORDER BY issued_at, token_id",
        params![now],
        db::tuple,
    )?;
    let mut out = Vec::new();
    for (token, approval) in outstanding {
        if let Some(key) = settled
            && !crate::settlement_seal::holds(conn, key, &approval)?
        {
            let everyone = approving(conn, &approval)?;
            out.push((token, approval, Fallen::Unsealed(everyone)));
        } else if let Some(fallen) = consent_stands(conn, &approval, stands)? {
            out.push((token, approval, Fallen::Principals(fallen)));
        }
    }
    Ok(out)
}

/// Every principal approval `aid`'s approving decisions and votes rest on (as
/// [`consent_stands`] reads them), each once: what a token whose settlement no longer holds
/// its seal is voided naming.
fn approving(conn: Conn<'_>, aid: &str) -> db::Result<Vec<String>> {
    let voters: Vec<String> = crate::sql::column(
        conn,
        "SELECT principal FROM votes WHERE approval_id = ?1 AND decision = 'approve'",
        [aid],
    )?;
    let mut all: Vec<String> = Vec::new();
    let deciders = crate::consent::approving_deciders(conn, aid)?;
    for p in deciders.into_iter().map(|(p, _)| p).chain(voters) {
        if !all.contains(&p) {
            all.push(p);
        }
    }
    Ok(all)
}

/// Whether approval `aid`'s approval stands under `stands`: `None` when every approving
/// decision and vote on it stands, or when it needs a quorum that the approving votes still
/// standing meet (a vote beyond what a group needed was not needed); else the principals whose
/// decision or vote fell (an approval no longer readable stands not). The deciders are read as
/// [`crate::consent::approving_deciders`] reads them: a person's decision with the key binding
/// it was made with (migration 0052; found by review: weighed with none, the tokens a stolen
/// key approved by single decision stayed redeemable once the key was rotated under the same
/// name and the gateway restarted); a call a grant let through rests on the
/// grant's maker, weighed with the key binding the grant was made with (found by review: the
/// tokens minted under a removed operator's grant that had already expired, so nothing
/// revoked it and [`void_grant_tokens`] never ran, stayed redeemable).
fn consent_stands(
    conn: Conn<'_>,
    aid: &str,
    stands: &ConsentStands<'_>,
) -> db::Result<Option<Vec<String>>> {
    let deciders = crate::consent::approving_deciders(conn, aid)?;
    let voters: Vec<(String, String, Option<String>)> = crate::sql::rows(
        conn,
        "SELECT principal, roles, key_binding FROM votes WHERE approval_id = ?1 AND decision = 'approve'",
        [aid],
        db::tuple,
    )?;
    let mut fallen: Vec<String> = Vec::new();
    for (p, key) in deciders {
        if !stands(&p, &[], key.as_deref()) && !fallen.contains(&p) {
            fallen.push(p);
        }
    }
    for (p, roles, key) in voters {
        // Roles that do not read are none a vote can still hold: it falls unless it needs none.
        let roles: Vec<String> = serde_json::from_str(&roles).unwrap_or_default();
        if !stands(&p, &roles, key.as_deref()) && !fallen.contains(&p) {
            fallen.push(p);
        }
    }
    if fallen.is_empty() {
        return Ok(None);
    }
    let Some(mut rec) = crate::record::read_approval(conn, aid)? else {
        return Ok(Some(fallen));
    };
    rec.votes.retain(|v| !fallen.contains(&v.principal));
    let met = rec.quorum_tally().is_some_and(|(_, t)| t.met);
    Ok((!met).then_some(fallen))
}

impl Store {
    /// Voids the unredeemed tokens whose approval's consent the configuration in force no
    /// longer stands behind ([`void_unbacked`], each approving decision and vote weighed by
    /// `stands`; actor `by`, reason `why`): what start-up does for operators removed from the
    /// file, or whose key (the binding a vote, a grant and, since migration 0052, a single
    /// decision keep) or roles changed, before a restart, as a
    /// reload does for them ([`Store::revoke_and_audit`]). A token whose approval's settlement
    /// does not hold its seal ([`crate::settlement_seal`]) is voided too, failing closed (its
    /// record's `why` says so). Found by review: a database writer who cleared
    /// `decisions.key_binding` put a decision back on its decider's name alone (start-up cannot
    /// tell a cleared binding from one made before migration 0052), so the token a stolen key
    /// approved once outlived the key's rotation and a restart. Read first, written only when
    /// there is something to void (most start-ups void nothing); one seal check per
    /// outstanding token. How many. Errors: the store's.
    pub fn void_unbacked_tokens(
        &self,
        stands: &ConsentStands<'_>,
        by: &str,
        why: &str,
        now: i64,
    ) -> Result<usize, StoreError> {
        let settled = self.seal_key(Sealed::Settlement);
        let weigh = (stands, Some(&settled));
        if unbacked(self.lock().conn(), weigh, now)?.is_empty() {
            return Ok(0);
        }
        self.write(|tx| Ok::<_, StoreError>(void_unbacked(**tx, weigh, (by, why), now)?))
    }
}
