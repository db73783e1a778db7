//! Approval receipts (issue 14 §5): [`Store::receipt`] builds the receipt of a stored
//! approval (its call, votes, settling decision and the policies that held it) and signs it
//! with the gateway's audit key. The format and its check are `assent_core::receipt`.

use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::record::{ApprovalRecord, read_approval};
use crate::seal::{SealKey, Sealed};
use crate::store::Store;
use assent_core::ApprovalStatus;
use assent_core::receipt::{RECEIPT_VERSION, Receipt, ReceiptDecision, ReceiptVote};
use assent_core::stamp::rfc3339;

/// What [`Store::receipt`] gives for an approval that exists.
#[derive(Debug)]
pub enum ReceiptOf {
    /// The signed receipt.
    Signed(Box<Receipt>),
    /// None is signed: the row is damaged or does not hold its seals (`damaged` names what:
    /// unreadable columns, `seal` for terms no seal vouches for, `settlement_seal` for a
    /// settlement none does, `votes.seal`, `grant.seal` for a grant it made whose seal does not
    /// hold, `grant.missing` for an approval wider than once with no grant, `call`,
    /// `status.settled`: [`Store::receipt`]).
    /// `agent` is the row's, so
    /// the caller can answer another agent as for a missing id.
    Damaged {
        /// The row's agent.
        agent: String,
        /// What is wrong.
        damaged: Vec<String>,
    },
}

impl Store {
    /// The receipt of approval `id`, issued at `now` (Unix ms) and signed with the audit key;
    /// `None` when there is no such approval. A receipt may be issued in any status (it says
    /// which), but only for a row that reads cleanly, whose call is its canonical form and
    /// `call_hash`, and that holds its seals: the gateway signs no evidence for a row it did
    /// not write. Its terms' seal in today's form, which covers the governance the receipt
    /// names (found by review: a planted `approved` row with a planted decision got a receipt
    /// that `assent receipt verify` accepted); once settled, its settlement's
    /// ([`crate::settlement_seal`]) and each of its votes' (found by review: a rejected
    /// approval turned to `approved` with its decision row, an operator's edit dropped, or a
    /// voter renamed, got a receipt saying so). Approvals held before migration 0035 (their
    /// terms' seal leaves the governance out) get none. The row and its seals are read in one
    /// snapshot (on PostgreSQL a row edited and put back between two reads is not vouched for
    /// by the second). `damaged` names `seal`, `settlement_seal`, `votes.seal`, `call` or the
    /// unreadable columns. Errors: `Db`.
    pub fn receipt(&self, id: &str, now: i64) -> Result<Option<ReceiptOf>, StoreError> {
        let keys = self.standing_keys();
        let read = self.read(|c| {
            let Some(rec) = read_approval(c, id)? else {
                return Ok(None);
            };
            let mut unsealed = unsealed(c, &keys, (id, &rec), true)?;
            let whole_tool = whole_tool(c, &keys.grant, id, &mut unsealed)?;
            Ok(Some((
                rec,
                unsealed,
                crate::confirm::read(c, id)?,
                whole_tool,
            )))
        })?;
        let Some((rec, unsealed, ctx, whole_tool)) = read else {
            return Ok(None);
        };
        let rec = self.vouched(rec);
        let mut damaged = rec.damaged.clone();
        damaged.extend(unsealed);
        if !damaged.is_empty() {
            let agent = rec.agent;
            return Ok(Some(ReceiptOf::Damaged { agent, damaged }));
        }
        let mut r = unsigned(&rec, ctx.policies, ctx.policy_set_sha256, now);
        // Approved wider than once, it made a grant (grant rows are never deleted): none there
        // is a row removed behind the gateway's back, and `whole_tool` could not be told
        // (found by review: the receipt then said "identical calls" of a whole-tool grant).
        match whole_tool {
            Some(w) => r.whole_tool = w && r.scope.is_some(),
            None if r.scope.is_some() => {
                let damaged = vec!["grant.missing".to_string()];
                return Ok(Some(ReceiptOf::Damaged {
                    agent: rec.agent,
                    damaged,
                }));
            }
            None => {}
        }
        Ok(Some(ReceiptOf::Signed(Box::new(r.signed(&self.audit_key)))))
    }
}

/// The keys of an approval's seals: its terms', its settlement's, its votes', and its
/// grant's (for a receipt).
pub(crate) struct StandingKeys {
    terms: SealKey,
    settlement: SealKey,
    vote: SealKey,
    grant: SealKey,
}

/// Whether a grant approval `id` made covers every call of its tool (`whole_tool`: its row
/// bound to no call hash); `None` when it made none. One whose seal does not hold under `key`
/// adds `grant.seal` to `unsealed` (no receipt is signed then).
fn whole_tool(
    c: Conn<'_>,
    key: &SealKey,
    id: &str,
    unsealed: &mut Vec<String>,
) -> db::Result<Option<bool>> {
    use crate::tokens::sealed::{SEALED_COLUMNS, StoredGrantSeal};
    let sql = format!("SELECT {SEALED_COLUMNS} FROM grants WHERE approval_id = ?1");
    let grants = crate::sql::rows(c, &sql, crate::params![id], StoredGrantSeal::read)?;
    if !grants.iter().all(|g| g.holds(key)) {
        unsealed.push("grant.seal".to_string());
    }
    Ok((!grants.is_empty()).then(|| grants.iter().any(|g| g.call_hash.is_none())))
}

/// What of approval `rec` (row `id`) no seal vouches for: `seal` (its terms: for a receipt in
/// today's form, else in any form deciding accepts), for a receipt once settled also
/// `settlement_seal` and `votes.seal`, and `call` when its call is not its canonical form and
/// `call_hash`. Empty: the gateway wrote it as it reads.
fn unsealed(
    c: Conn<'_>,
    keys: &StandingKeys,
    (id, rec): (&str, &ApprovalRecord),
    receipt: bool,
) -> db::Result<Vec<String>> {
    let mut unsealed = Vec::new();
    let sealed = if receipt {
        crate::approval_seal::holds_whole(c, &keys.terms, id)?
    } else {
        crate::approval_seal::holds(c, &keys.terms, id)?
    };
    if !sealed {
        unsealed.push("seal".to_string());
    }
    if receipt && rec.status != ApprovalStatus::Pending {
        if !crate::settlement_seal::holds(c, &keys.settlement, id)? {
            unsealed.push("settlement_seal".to_string());
        }
        let vote = &keys.vote;
        if !rec
            .votes
            .iter()
            .all(|v| vote.holds(&v.sealed.columns, &v.sealed.seal))
        {
            unsealed.push("votes.seal".to_string());
        }
    }
    if !rec.call_intact() {
        unsealed.push("call".to_string());
    }
    Ok(unsealed)
}

impl Store {
    /// The keys [`unsealed`] checks an approval's seals with, derived once per read.
    pub(crate) fn standing_keys(&self) -> StandingKeys {
        StandingKeys {
            terms: self.seal_key(Sealed::Approval),
            settlement: self.seal_key(Sealed::Settlement),
            vote: self.seal_key(Sealed::Vote),
            grant: self.seal_key(Sealed::Grant),
        }
    }

    /// Approval `id` as [`Store::get_approval`] reads it and, while it is pending, its
    /// `damaged` also naming what no seal vouches for: `seal` (its terms and standing, in any
    /// form deciding accepts) and `call` (its call is not the one hashed), read in one
    /// snapshot. Either means it cannot be approved (`call` also refuses deny and cancel):
    /// what a reviewer is shown (webhooks, Slack, the dashboard's card, an operator's `GET`),
    /// so that a row edited behind the gateway's back is not shown as the agent's request
    /// (found by review: a held call's edited payee was shown as the agent's). A settled
    /// approval is read as it is: records from before the seals, or under a replaced audit
    /// key, are not misnamed as changed (`assent audit verify` judges those). `None` when
    /// there is no such approval. Errors: `Db`.
    pub fn checked_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let keys = self.standing_keys();
        let read = self.read(|c| read_checked(c, &keys, id))?;
        Ok(read.map(|rec| self.vouched(rec)))
    }
}

/// Approval `id` as [`read_approval`] reads it and, while it is pending, its `damaged` also
/// naming what no seal under `keys` vouches for (`seal`, `call`): what
/// [`Store::checked_approval`] and the operator's listing ([`Store::approval_page`]) show,
/// before [`Store::vouched`]. `None` for no such approval. Errors: `Db`.
pub(crate) fn read_checked(
    c: Conn<'_>,
    keys: &StandingKeys,
    id: &str,
) -> db::Result<Option<ApprovalRecord>> {
    let Some(mut rec) = read_approval(c, id)? else {
        return Ok(None);
    };
    if rec.status == ApprovalStatus::Pending {
        let unsealed = unsealed(c, keys, (id, &rec), false)?;
        rec.damaged.extend(unsealed);
    }
    Ok(Some(rec))
}

/// The receipt of `rec` before it is signed.
fn unsigned(
    rec: &ApprovalRecord,
    policies: Vec<String>,
    policy_set_sha256: Option<String>,
    now: i64,
) -> Receipt {
    Receipt {
        receipt_version: RECEIPT_VERSION,
        approval_id: rec.id.clone(),
        agent: rec.agent.clone(),
        session_id: rec.session_id.clone(),
        on_behalf_of: rec.on_behalf_of.clone(),
        status: rec.status,
        call: rec.call.clone(),
        canonical: rec.canonical.clone(),
        call_hash: rec.call_hash.clone(),
        approved_call_hash: rec.edited.as_ref().map(|e| e.call_hash.clone()),
        risk_tier: rec.terms.risk_tier,
        quorum: rec.terms.quorum.clone(),
        require_passkey: rec.terms.require_passkey,
        scope: rec
            .scope
            .filter(|s| *s != assent_core::approval::GrantScope::Once)
            .map(|s| s.to_wire()),
        whole_tool: false,
        votes: rec
            .votes
            .iter()
            .map(|v| ReceiptVote {
                by: v.principal.clone(),
                decision: v.decision,
                roles: v.roles.clone(),
                at: rfc3339(v.at),
                reason: v.reason.clone(),
                passkey: v.passkey.clone(),
            })
            .collect(),
        decisions: rec
            .decisions
            .iter()
            .map(|d| ReceiptDecision {
                decision: d.decision,
                by: d.actor.clone(),
                at: rfc3339(d.at),
                reason: d.reason.clone(),
                passkey: d.passkey.clone(),
            })
            .collect(),
        policies,
        policy_set_sha256,
        requested_at: rfc3339(rec.requested_at),
        decided_at: rec.decided_at.map(rfc3339),
        issued_at: rfc3339(now),
        public_key: String::new(),
        signature: String::new(),
    }
}
