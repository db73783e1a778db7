//! Votes on an approval that needs a quorum (issue 14 §1): one operator decision becomes one
//! vote, recorded with the voter's roles in the decision's transaction; the approval settles
//! only when the votes meet its quorum ([`assent_core::quorum::tally`]) — or, for a deny, at
//! the first qualified deny unless the quorum says `deny: quorum`. Who may vote and what
//! counts are `assent_core::quorum` rules; this file only reads and writes the rows.

use crate::audit;
use crate::db::Conn;
use crate::error::DecideError;
use crate::params;
use crate::record::{ApprovalRecord, StoredVote, VoteRecord};
use crate::seal::SealKey;
use assent_core::ApprovalStatus;
use assent_core::approval::DecisionKind;
use assent_core::quorum::{DenyRule, Quorum};
use serde_json::json;

/// `rec`, when pending, with only the votes whose seal holds under `key` ([`crate::seal`]): a
/// vote row planted or edited behind the gateway's back counts towards no quorum and is not
/// shown; one cast before migration 0032 (no seal) is left out too: its voter votes again.
/// `true` when a left-out row carries a seal that is not its own (another row's copied in, or
/// an edited row): an approving event is then refused (`decide::admit`), the expiry rejects,
/// and reads name `votes.seal` in `damaged`. A settled approval's votes are history, counted
/// no more, and shown as stored (`audit verify` compares them with their records).
pub(crate) fn vouch(rec: &mut ApprovalRecord, key: &SealKey) -> bool {
    if rec.status != ApprovalStatus::Pending {
        return false;
    }
    let mut mis_sealed = false;
    rec.votes.retain(|v| {
        let holds = key.holds(&v.sealed.columns, &v.sealed.seal);
        mis_sealed |= !holds && !v.sealed.seal.is_empty();
        holds
    });
    mis_sealed
}

/// What one vote did.
pub(crate) enum Cast {
    /// Counted; the quorum is not met yet: the approval stays pending.
    Counted,
    /// Counted, and it settles the approval with the vote's decision.
    Settles,
}

/// One operator's vote, as [`cast`] takes it.
pub(crate) struct VoteInput<'a> {
    /// Approve or deny.
    pub kind: DecisionKind,
    /// The decision asked for more than the call as proposed, once: a scope wider than
    /// `once`, an edit or `whole_tool`.
    pub widens: bool,
    /// The voter's reason.
    pub reason: Option<&'a str>,
    /// The principal voting.
    pub actor: &'a str,
    /// The other names the voter goes by ([`crate::decide::DecisionInput::decider_aka`]): a
    /// vote cast under any of them is theirs.
    pub aka: &'a [String],
    /// Their roles.
    pub roles: &'a [String],
    /// What stood behind the vote, as the server says it: the binding of the key they voted
    /// with, or the channel's (`slack:` and the Slack user id; `sso:` and the identity and groups of a single
    /// sign-on) ([`crate::DecisionInput::decider_key`]).
    pub key: Option<&'a str>,
    /// Unix milliseconds.
    pub now: i64,
    /// The passkey proof signing an approving vote (checked by `decide::admit`).
    pub passkey: Option<&'a assent_core::passkey::PasskeyProof>,
    /// How the vote reached the gateway, kept in its audit records.
    pub via: Option<&'a crate::Via>,
}

/// Records vote `v` on `rec` (which needs quorum `q`) and says whether it settles the
/// approval. Refusals, each audited `decision.refused` and kept: a voter who fits no group
/// (`NotApprover`), a second vote by the same principal or under another of its names
/// (`AlreadyVoted`). A vote that
/// `widens` is `Invalid` and writes nothing: several people approve the same call, as
/// proposed, once.
pub(crate) fn cast(
    tx: Conn<'_>,
    key: &SealKey,
    rec: &ApprovalRecord,
    q: &Quorum,
    v: &VoteInput<'_>,
) -> Result<Cast, DecideError> {
    let VoteInput {
        kind,
        reason,
        actor,
        aka,
        roles,
        now,
        ..
    } = *v;
    if v.widens {
        return Err(DecideError::Invalid(format!(
            "approval {} needs a quorum of {}: each vote approves the call as proposed, once (no scope, edit or whole_tool)",
            rec.id,
            q.required()
        )));
    }
    let refuse = |why: &str| -> Result<(), DecideError> {
        let data = json!({"decision": kind.as_str(), "why": why, "quorum": q});
        let data = audit::with_via(data, v.via);
        audit::append(tx, now, "decision.refused", Some(&rec.id), actor, &data)?;
        Ok(())
    };
    if !q.qualifies(roles) {
        refuse("operator fits no group of the quorum")?;
        return Err(DecideError::NotApprover(rec.terms.approvers.clone()));
    }
    // Attack: one person voting twice, once under each name (a key's principal and the
    // single sign-on identity linked to it since, or before). Names are compared as
    // separation of duties compares them, without regard to case, width or look-alike letters
    // (found by review: principal `Alice@corp.com` and the unlinked sign-in
    // `oidc:alice@corp.com` each counted once toward one quorum).
    let names = || std::iter::once(actor).chain(aka.iter().map(String::as_str));
    if rec.votes.iter().any(|v| {
        names().any(|n| n == v.principal || assent_core::duties::same_person(n, &v.principal))
    }) {
        refuse("the principal has already voted on this approval")?;
        return Err(DecideError::AlreadyVoted(actor.to_string()));
    }
    let roles_text = serde_json::to_string(roles).expect("serialisable");
    let passkey_text = v
        .passkey
        .filter(|_| kind == DecisionKind::Approve)
        .map(|p| serde_json::to_string(p).expect("proof"));
    let mut columns = json!([
        rec.id,
        actor,
        kind.as_str(),
        roles_text,
        reason,
        now,
        passkey_text
    ]);
    if let Some(k) = v.key {
        columns.as_array_mut().expect("an array").push(json!(k));
    }
    let seal = key.seal(&columns);
    // A row still there for this voter is one `vouch` left out (unsealed: planted, or cast
    // before migration 0032; or carrying another row's seal): a sealed one of this approval is
    // `AlreadyVoted` above. It is replaced, and the vote's record says so.
    let replaced = tx
        .prepare_cached("DELETE FROM votes WHERE approval_id = ?1 AND principal = ?2")?
        .execute(params![rec.id, actor])?;
    tx.prepare_cached(
        "INSERT INTO votes (approval_id, principal, decision, roles, reason, at, passkey, seal, key_binding) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![rec.id, actor, kind.as_str(), roles_text, reason, now, passkey_text, seal, v.key])?;
    let mut after = rec.clone();
    after.votes.push(VoteRecord {
        principal: actor.to_string(),
        decision: kind,
        roles: roles.to_vec(),
        reason: reason.map(str::to_string),
        at: now,
        passkey: v.passkey.cloned(),
        sealed: StoredVote { columns, seal },
    });
    let t = after.tally_of(q, kind);
    let settles = t.met || (kind == DecisionKind::Deny && q.deny == DenyRule::Any);
    let counted: usize = t.groups.iter().map(|g| g.counted.len()).sum();
    let mut data = json!({"decision": kind.as_str(), "roles": roles, "reason": reason,
        "counted": counted, "required": q.required(), "met": t.met, "groups": t.groups});
    if replaced > 0 {
        data["replaced_unvouched_row"] = json!(true);
    }
    let data = audit::with_via(data, v.via);
    audit::append(tx, now, "decision.vote", Some(&rec.id), actor, &data)?;
    Ok(if settles {
        Cast::Settles
    } else {
        Cast::Counted
    })
}

/// A vote on a pending approval, as [`crate::Store::withdraw_votes`] weighs it:
/// `(approval id, principal, decision, roles held when it was cast, key binding, the credential
/// id of the passkey proof signing it)`.
type PendingVote = (
    String,
    String,
    String,
    Vec<String>,
    Option<String>,
    Option<String>,
);

impl crate::store::Store {
    /// Withdraws every vote on a pending approval for which `stands(principal, roles, key)` is
    /// false (`roles`: those held when it was cast; `key`: what stood behind it, as the server
    /// said when it was cast — the binding of its key, or its channel's — `None` for a vote
    /// cast before the server said so): the row
    /// is deleted and a `decision.vote_withdrawn` record (actor `by`; `principal`,
    /// `decision`, `why`) says so, in one transaction. The server calls it when a reload
    /// removes an operator or changes their key or roles, and at start-up for votes whose
    /// voter is no operator of the configuration, lacks a role they voted with, or holds
    /// another key than the one that cast the vote. Found by review: a vote cast with a key
    /// revoked since (or by an operator removed, or whose role was taken away) still counted,
    /// so bob's vote alone met a quorum of two after alice was removed, and a person whose
    /// principal was renamed or removed could vote again under their other name. Returns how
    /// many were withdrawn. Errors: the store's.
    pub fn withdraw_votes(
        &self,
        stands: impl Fn(&str, &[String], Option<&str>) -> bool,
        by: &str,
        why: &str,
        now: i64,
    ) -> Result<usize, crate::error::StoreError> {
        // Read first: most start-ups and reloads withdraw nothing, and need no write lock.
        if pending_votes(self.lock().conn())?
            .iter()
            .all(|(_, who, _, roles, key, _)| stands(who, roles, key.as_deref()))
        {
            return Ok(0);
        }
        let goes = |(_, who, _, roles, key, _): &PendingVote| !stands(who, roles, key.as_deref());
        self.write(|tx| withdraw_votes_in(tx, &goes, by, why, now))
    }

    /// A reload's revocations and its audit record, in one transaction (found by review: the
    /// reload ended the sessions and withdrew the votes first and then appended its record; when
    /// that failed the reload was refused and the old principals stayed in force, but their
    /// votes were already gone). For each of `names`: ends their dashboard sessions, closes
    /// their AAEP subscriptions (`aaep.closed` each), withdraws their votes on pending
    /// approvals (`decision.vote_withdrawn` each, saying `why`) and revokes the grants they
    /// made (`grant.revoked` each, saying `why`: [`crate::grants_revoke`], voiding the tokens
    /// those grants minted) and voids the unredeemed tokens of the approvals whose consent
    /// rested on them (`token.voided` each: [`crate::voided::void_approved_by`]: their
    /// approving decision, or a quorum vote that was needed); then appends the record `kind`
    /// with `data`, all with actor `by`. Nothing is changed unless all of it is
    /// written. Errors: the store's.
    pub fn revoke_and_audit(
        &self,
        names: &[String],
        by: &str,
        why: &str,
        (kind, data): (&str, &serde_json::Value),
        now: i64,
    ) -> Result<(), crate::error::StoreError> {
        self.write(|tx| {
            for n in names {
                tx.execute("DELETE FROM ui_sessions WHERE operator = ?1", [n.as_str()])?;
                crate::subscriptions::close_subscriptions_in(tx, n, by, now)?;
            }
            let goes = |v: &PendingVote| names.contains(&v.1);
            withdraw_votes_in(tx, &goes, by, why, now)?;
            crate::grants_revoke::revoke_grants_of_in(**tx, names, (by, why), now)?;
            crate::voided::void_approved_by(**tx, names, (by, why), now)?;
            audit::append(**tx, now, kind, None, by, data)?;
            Ok(())
        })
    }
}

/// Withdraws, inside the write transaction `tx`, the pending votes signed with passkey
/// `credential_id` (their proof names it), as [`crate::Store::withdraw_votes`] does: called
/// when that passkey is removed (found by review: a removed — lost or cloned — authenticator's
/// vote still counted towards its quorum). Returns how many were withdrawn.
pub(crate) fn withdraw_signed_with(
    tx: &crate::db::Tx<'_>,
    credential_id: &str,
    by: &str,
    why: &str,
    now: i64,
) -> Result<usize, crate::error::StoreError> {
    // Theirs only: an id once another's names that one's votes too (found by review).
    let goes = |v: &PendingVote| v.5.as_deref() == Some(credential_id) && v.1 == by;
    withdraw_votes_in(tx, &goes, by, why, now)
}

/// [`crate::Store::withdraw_votes`] inside the write transaction `tx`: withdraws each pending
/// vote for which `goes` holds.
fn withdraw_votes_in(
    tx: &crate::db::Tx<'_>,
    goes: &dyn Fn(&PendingVote) -> bool,
    by: &str,
    why: &str,
    now: i64,
) -> Result<usize, crate::error::StoreError> {
    let mut n = 0;
    for v in pending_votes(**tx)? {
        if !goes(&v) {
            continue;
        }
        let (aid, who, decision, ..) = v;
        tx.prepare_cached("DELETE FROM votes WHERE approval_id = ?1 AND principal = ?2")?
            .execute(params![aid, who])?;
        let data = json!({"principal": who, "decision": decision, "why": why});
        audit::append(**tx, now, "decision.vote_withdrawn", Some(&aid), by, &data)?;
        tx.changed(crate::db::Change::Approval(aid));
        n += 1;
    }
    Ok(n)
}

/// Every vote on a pending approval, by approval and voter.
fn pending_votes(conn: Conn<'_>) -> crate::db::Result<Vec<PendingVote>> {
    conn.query_map(
        "SELECT v.approval_id, v.principal, v.decision, v.roles, v.key_binding, v.passkey FROM votes v
         JOIN approvals a ON a.id = v.approval_id
         WHERE a.status = 'pending' ORDER BY v.approval_id, v.principal",
        [],
        |r| {
            let roles: String = r.get(3)?;
            let roles = serde_json::from_str(&roles).unwrap_or_default();
            let proof: Option<String> = r.get(5)?;
            let credential = proof
                .and_then(|p| serde_json::from_str::<assent_core::passkey::PasskeyProof>(&p).ok())
                .map(|p| p.credential_id);
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, roles, r.get(4)?, credential))
        },
    )
}
