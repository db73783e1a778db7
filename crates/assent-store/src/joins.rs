//! Joining an identical pending call (AAEP §6.1, issue 14): a proposal the same agent makes
//! again in the same session, with the same `call_hash`, waits on the approval already held
//! for it instead of holding a second one — when that approval can still be approved and was
//! held under terms at least as strict as the proposal's verdict asks now
//! ([`assent_core::join::covers`]). The proposal's transaction calls [`joinable`].

use crate::approval_seal;
use crate::db::{self, Conn};
use crate::params;
use crate::record::{ApprovalRecord, read_approval};
use crate::seal::SealKey;
use crate::sql;
use assent_core::gatekeeper::ApprovalTerms;
use assent_core::join;

/// The oldest pending approval of `call` (agent, session, `call_hash`) that a proposal may
/// join, under `keys` (the approval and vote seal keys), for a verdict asking `terms`, made
/// for the same `on_behalf_of` and `device_id` (`who`); `None` when there is none. Found by
/// review: a call joined an approval held for another person or none, so the person a
/// trusted front end proposed for (`assent mcp --on-behalf-of`) could approve a call the
/// agent had proposed for no one, separation of duties notwithstanding; and a token bound
/// to no device served a proposal from a device. Left out: one another session holds locked (PostgreSQL), one that can
/// only be rejected (a damaged row, terms whose seal does not hold, a vote row with a seal
/// not its own, a token row already there: found by review of the seals), one held under
/// weaker terms. `Err` only when the store fails.
pub(crate) fn joinable(
    tx: Conn<'_>,
    keys: &(SealKey, SealKey),
    call: [&str; 3],
    who: [Option<&str>; 2],
    terms: &ApprovalTerms,
) -> db::Result<Option<ApprovalRecord>> {
    let same: Vec<String> = sql::column(
        tx,
        "SELECT id FROM approvals WHERE agent = ?1 AND session_id = ?2 AND call_hash = ?3 AND status = 'pending' ORDER BY requested_at",
        params![call[0], call[1], call[2]],
    )?;
    for id in same {
        // Locked before it is read, so that the terms compared are those its seal is checked
        // on (PostgreSQL; found by review).
        if !approval_seal::try_lock(tx, &id)? {
            continue;
        }
        let Some(mut held) = read_approval(tx, &id)? else {
            continue;
        };
        if [held.on_behalf_of.as_deref(), held.device_id.as_deref()] != who
            || crate::votes::vouch(&mut held, &keys.1)
            || held.token.is_some()
            || !held.damaged.is_empty()
            || !approval_seal::holds(tx, &keys.0, &id)?
        {
            continue;
        }
        // Terms at least as strict on every axis: a reload, or what the session took in
        // since, may ask more now — a quorum, a passkey, an operator instead of the user.
        let quorum = held.quorum_tally().map(|(q, _)| q);
        let later =
            (held.escalation_schedule.as_ref()).map_or_else(Vec::new, |s| s.added(s.steps.len()));
        let h = join::Held {
            terms: &held.terms,
            quorum: quorum.as_ref(),
            later: &later,
        };
        if join::covers(&h, terms).is_ok() {
            return Ok(Some(held));
        }
    }
    Ok(None)
}
