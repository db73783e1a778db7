//! Approval receipts (issue 14 §5): [`Store::receipt`] builds the receipt of a stored
//! approval (its call, votes, settling decision and the policies that held it) and signs it
//! with the gateway's audit key. The format and its check are `assent_core::receipt`.

use crate::error::StoreError;
use crate::record::ApprovalRecord;
use crate::store::Store;
use assent_core::receipt::{RECEIPT_VERSION, Receipt, ReceiptDecision, ReceiptVote};
use assent_core::stamp::rfc3339;

impl Store {
    /// The receipt of approval `id`, issued at `now` (Unix ms) and signed with the audit key;
    /// `None` when there is no such approval. A receipt may be issued in any status (it says
    /// which). Errors: `Db`.
    pub fn receipt(&self, id: &str, now: i64) -> Result<Option<Receipt>, StoreError> {
        let Some(rec) = self.get_approval(id)? else {
            return Ok(None);
        };
        let ctx = self.confirm_context(id)?;
        let r = unsigned(&rec, ctx.policies, ctx.policy_set_sha256, now);
        Ok(Some(r.signed(&self.audit_key)))
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
