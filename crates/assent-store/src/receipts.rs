//! Approval receipts (issue 14 §5): [`Store::receipt`] builds the receipt of a stored
//! approval (its call, votes, settling decision and the policies that held it) and signs it
//! with the gateway's audit key. The format and its check are `assent_core::receipt`.

use crate::error::StoreError;
use crate::record::ApprovalRecord;
use crate::store::Store;
use assent_core::receipt::{RECEIPT_VERSION, Receipt, ReceiptDecision, ReceiptVote};
use assent_core::stamp::rfc3339;

/// What [`Store::receipt`] gives for an approval that exists.
#[derive(Debug)]
pub enum ReceiptOf {
    /// The signed receipt.
    Signed(Box<Receipt>),
    /// None is signed: the row is damaged or does not hold its seal (`damaged` names what:
    /// unreadable columns, `seal` for terms no seal vouches for). `agent` is the row's, so
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
    /// which), but only for a row that holds its seal and reads cleanly: the gateway signs no
    /// evidence for a row it did not write (found by review: a planted `approved` row with a
    /// planted decision got a receipt that `assent receipt verify` accepted). A seal of the
    /// forms migrations 0029 and 0033 wrote holds too (settled rows keep them); approvals made
    /// before rows were sealed (migration 0029) get none. Errors: `Db`.
    pub fn receipt(&self, id: &str, now: i64) -> Result<Option<ReceiptOf>, StoreError> {
        let Some(rec) = self.get_approval(id)? else {
            return Ok(None);
        };
        let mut damaged = rec.damaged.clone();
        let key = self.seal_key(crate::seal::Sealed::Approval);
        if !crate::approval_seal::holds_settled(self.lock().conn(), &key, id)? {
            damaged.push("seal".into());
        }
        if !damaged.is_empty() {
            let agent = rec.agent;
            return Ok(Some(ReceiptOf::Damaged { agent, damaged }));
        }
        let ctx = self.confirm_context(id)?;
        let r = unsigned(&rec, ctx.policies, ctx.policy_set_sha256, now);
        Ok(Some(ReceiptOf::Signed(Box::new(r.signed(&self.audit_key)))))
    }
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
