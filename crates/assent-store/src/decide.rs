//! Deciding a held approval (seed 002 decisions, MPLP Confirm): an operator's approve or
//! deny with its options ([`DecisionInput`], `decision_input.rs`), cancelling, and the one transition every
//! settlement goes through (`apply`: damaged and approver checks, the first event wins, a
//! quorum's votes (`votes.rs`), the decision row, MPLP and AAEP records, the token and the grant). The rules it applies are
//! `assent_core` functions; expiry calls `apply` from `expiry.rs`.

use crate::audit;
use crate::db::{self, Change, Conn};
pub use crate::decision_input::DecisionInput;
use crate::emit::{emit, mplp_event};
use crate::error::DecideError;
use crate::events::{AaepEvent, ConfirmEvent};
use crate::params;
use crate::plans;
use crate::record::{ApprovalRecord, EditedCall, read_approval};
use crate::seal::Sealed;
use crate::store::Store;
use crate::stored;
use crate::tokens::{self, NewGrant};
use crate::votes::{self, Cast, VoteInput};
use assent_core::approval::{
    self, AlreadyDecided, ApprovalStatus, Canceller, DecisionKind, Event, GrantScope,
};
use assent_core::decision;
use assent_core::duties;
use refusals::no_approval_without_consent;
pub(crate) use refusals::{stopped_plan, under_review};
use serde_json::json;

mod refusals;

/// When `rec` needs a quorum and `s` is an operator's decision (`roles`): casts it as a vote
/// ([`votes::cast`]); a vote that leaves the quorum unmet is announced
/// ([`AaepEvent::VoteCounted`]) and answered with the approval, still pending (`Some`).
/// `None`: no quorum, or this vote settles it — the caller settles as usual.
fn counted_vote(
    tx: Conn<'_>,
    s: &Settle<'_>,
    rec: &ApprovalRecord,
    roles: Option<&[String]>,
) -> Result<Option<ApprovalRecord>, DecideError> {
    let (Event::Decide(kind), Some(roles), Some((q, _))) = (s.event, roles, rec.quorum_tally())
    else {
        return Ok(None);
    };
    let v = vote(kind, s.input, s.actor, roles, s.now);
    if let Cast::Settles = votes::cast(tx, s.votes, rec, &q, &v)? {
        return Ok(None);
    }
    let mut rec = read_approval(tx, s.id)?.expect("exists");
    if votes::vouch(&mut rec, s.votes) {
        rec.damaged.push("votes.seal".into());
    }
    let ev = AaepEvent::VoteCounted {
        approval: &rec,
        by: s.actor,
        decision: kind,
        at: s.now,
    };
    emit(tx, s.env, &ev, None, Some(s.id), s.now)?;
    Ok(Some(rec))
}

/// Operator decision `d` of `kind` by `actor` as a vote on a quorum ([`votes::cast`]).
fn vote<'a>(
    kind: DecisionKind,
    d: Option<&'a DecisionInput>,
    actor: &'a str,
    roles: &'a [String],
    now: i64,
) -> VoteInput<'a> {
    VoteInput {
        kind,
        widens: d
            .is_some_and(|d| d.scope != GrantScope::Once || d.edited.is_some() || d.whole_tool),
        reason: d.and_then(|d| d.reason.as_deref()),
        actor,
        aka: d.map_or(&[][..], |d| &d.decider_aka[..]),
        roles,
        key: d.and_then(|d| d.decider_key.as_deref()),
        now,
        passkey: d.and_then(|d| d.passkey.as_ref()),
        via: d.and_then(|d| d.via.as_ref()),
    }
}

/// The stored decision name of an event (`approve`, `deny`, `expire`, `cancel`).
fn approval_event_name(e: Event) -> &'static str {
    stored::Settlement::of(e).as_str()
}

impl Store {
    /// Applies an operator decision by `actor`, who holds `roles`. The first valid decision
    /// wins atomically; on a decided approval it appends a `decision.late` audit record and
    /// returns `AlreadyDecided`. When the approval names approver roles and `roles` has none of
    /// them, it appends `decision.refused` and returns `NotApprover`, in the same transaction
    /// as the check. An approval mints a token (`token.minted`) bound to the edited call when
    /// `d.edited` is set (the audit record holds both calls), and a scope wider than `once`
    /// stores a grant (`grant.created`).
    pub fn decide(
        &self,
        id: &str,
        d: &DecisionInput,
        actor: &str,
        roles: &[String],
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        let edited = d.edited.is_some();
        let kind = decision::check_options(d.kind, d.scope, edited, d.whole_tool)
            .map_err(DecideError::Invalid)?;
        self.apply(
            id,
            Event::Decide(kind),
            Some(d),
            d.reason.as_deref(),
            actor,
            Some(roles),
            now,
        )
    }

    /// Cancels a pending approval (the requesting agent or an operator withdrew it).
    pub fn cancel(
        &self,
        id: &str,
        reason: Option<&str>,
        actor: &str,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        self.apply(id, Event::Cancel, None, reason, actor, None, now)
    }

    /// [`Store::cancel`] by `who` (an operator, or the agent itself: the caller has checked
    /// the approval is its own). Cancelling
    /// is a way of saying no, so an operator may cancel only an approval they could decide
    /// ([`approval::may_decide`]), and not one whose quorum says `deny: quorum`
    /// ([`approval::operator_may_cancel`]: no operator says no alone there); otherwise
    /// `NotApprover`, audited `decision.refused`. The agent's own cancel is not limited so.
    pub fn cancel_as(
        &self,
        id: &str,
        who: &Canceller<'_>,
        reason: Option<&str>,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        let (actor, roles) = (who.name(), who.roles());
        self.apply(id, Event::Cancel, None, reason, actor, roles, now)
    }

    /// Moves approval `id` out of `pending`. `roles`: the deciding operator's roles, checked
    /// against the approval's approver roles (`None` for expiry and cancellation). In one
    /// transaction: [`admit`] (damaged, approver and first-event-wins checks, each
    /// refusal audited and committed), the scope rules ([`decision::check_scope`]; a refused
    /// scope writes nothing), then [`settle`], the token and grant, the plan, and the AAEP
    /// resolution.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &self,
        id: &str,
        event: Event,
        input: Option<&DecisionInput>,
        reason: Option<&str>,
        actor: &str,
        roles: Option<&[String]>,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        // Refusals `admit` audited commit (`DecideError: Settles`); anything else rolls back.
        let keys = [
            Sealed::Approval,
            Sealed::Vote,
            Sealed::Settlement,
            Sealed::Plan,
            Sealed::Passkey,
        ];
        let keys = keys.map(|k| self.seal_key(k));
        self.write(|tx| {
            // Read under the write lock: a reload's swap is before or after this decision.
            let rules = self.rules();
            let s = Settle {
                delegations: &self.delegations(),
                rules: rules.as_deref(),
                plans: &keys[3],
                passkeys: &keys[4],
                id,
                seal: &keys[0],
                votes: &keys[1],
                settled: &keys[2],
                event,
                input,
                reason,
                actor,
                now,
                env: &*self.envelopes,
            };
            let (rec, next) = admit(**tx, &s, roles)?;
            if let Some(rec) = counted_vote(**tx, &s, &rec, roles)? {
                tx.changed(Change::Approval(id.to_string()));
                return Ok(self.vouched(rec));
            }
            let scope = input.map(|d| d.scope).unwrap_or_default();
            let edited = input.and_then(|d| d.edited.as_ref());
            if let Some(e) = edited {
                crate::decision_input::edit_of_held(&rec, e)?;
            }
            let discouraged = crate::decision_input::scope_on_held(&rec, input, scope)?;
            let mplp_status = settle(**tx, &s, &rec, next, scope, edited)?;
            if approval::mints_token(event) {
                let hash = edited.map_or(rec.call_hash.as_str(), |e| &e.call_hash);
                let whole_tool = input.is_some_and(|d| d.whole_tool);
                if let Some(terms) = crate::decision_input::grant_terms(input, scope, now) {
                    let g = NewGrant {
                        rec: &rec,
                        call_hash: hash,
                        scope,
                        terms,
                        whole_tool,
                        discouraged,
                        key: input.and_then(|d| d.decider_key.as_deref()),
                    };
                    tokens::create_grant(**tx, &self.seal_key(Sealed::Grant), &g, actor, now)?;
                }
                self.mint(
                    **tx,
                    id,
                    &rec.agent,
                    hash,
                    &scope.to_wire(),
                    rec.device_id.as_deref(),
                    actor,
                    now,
                )?;
            }
            if rec.target_type == "plan" {
                let (confirm, by) = ((id, rec.target_id.as_str()), (s.plans, s.delegations));
                plans::on_confirm_decided(**tx, by, confirm, mplp_status, actor, reason, now)?;
            }
            let rec = self.vouched(read_approval(**tx, id)?.expect("exists"));
            let ev = AaepEvent::Resolution {
                approval: &rec,
                at: now,
                courtesy_for: None,
            };
            emit(**tx, &*self.envelopes, &ev, None, Some(id), now)?;
            tx.changed(Change::Approval(id.to_string()));
            Ok(rec)
        })
    }
}

/// One settlement being applied to an approval: the event and what came with it.
struct Settle<'a> {
    id: &'a str,
    /// The key of approval seals ([`crate::approval_seal`]).
    seal: &'a crate::seal::SealKey,
    /// The key of vote seals ([`votes::vouch`]).
    votes: &'a crate::seal::SealKey,
    /// The key of settlement seals ([`crate::settlement_seal`]).
    settled: &'a crate::seal::SealKey,
    /// The store's event renderer.
    env: &'a dyn crate::events::Envelopes,
    /// The delegations in force ([`Store::set_rules`]).
    delegations: &'a assent_core::policy::Delegations,
    /// The key of plan seals ([`plans::read_plan`]).
    plans: &'a crate::seal::SealKey,
    /// The key of passkey seals ([`crate::passkeys::owner_of`]).
    passkeys: &'a crate::seal::SealKey,
    /// The rules in force ([`Store::set_rules`]).
    rules: Option<&'a assent_core::policy::Registry>,
    event: Event,
    input: Option<&'a DecisionInput>,
    reason: Option<&'a str>,
    actor: &'a str,
    now: i64,
}

impl Settle<'_> {
    /// Appends audit record `kind` of this settlement with `data` and the decision's `via`.
    fn audit(&self, tx: Conn<'_>, kind: &str, data: serde_json::Value) -> db::Result<()> {
        let data = audit::with_via(data, self.input.and_then(|d| d.via.as_ref()));
        audit::append(tx, self.now, kind, Some(self.id), self.actor, &data)
    }
}

/// Locks and reads the approval and checks, in this order, that it exists, is what the caller
/// found or authorised it by ([`as_the_caller_read`]), is not damaged (issue 10 §8), may be
/// approved ([`why_unapprovable`]: its seals, no token row yet), may be decided by an operator holding `roles` ([`approval::may_decide`]; `None`: the
/// agent itself or the expiry sweep), is not cancelled alone by an operator under `deny:
/// quorum` nor decided after its deadline ([`lone_no_or_late`]), is approved neither by a
/// timeout that may not, nor under a stopped plan, nor against a session that moved since its
/// caller's check ([`no_approval_without_consent`]), and is
/// still pending ([`approval::transition`]). Each
/// refusal but `NotFound`, and an expiry of an approval no longer pending (`AlreadyDecided`:
/// a sweep is never late), is audited (`decision.refused`, `decision.late`) for the caller to
/// commit. `Ok`: the approval and its next status.
fn admit(
    tx: Conn<'_>,
    s: &Settle<'_>,
    roles: Option<&[String]>,
) -> Result<(ApprovalRecord, ApprovalStatus), DecideError> {
    crate::approval_seal::lock(tx, s.id)?;
    let Some(mut rec) = read_approval(tx, s.id)? else {
        return Err(DecideError::NotFound);
    };
    // A sweep is never late: the expiry of an approval no longer pending is another sweep's
    // (or a decision's) that committed between this sweep's read and now, and nothing is
    // audited (found by review: two replicas' sweeps interleaving left a `decision.late` by
    // `system:expiry` that never happened).
    if matches!(s.event, Event::Expire(_)) && rec.status != ApprovalStatus::Pending {
        return Err(AlreadyDecided(rec.status).into());
    }
    // Attack: vote rows planted under approvers' names so that the next genuine vote meets
    // the quorum: they are not counted, and one with a seal not its own refuses approving.
    let mis_sealed = votes::vouch(&mut rec, s.votes);
    let name = approval_event_name(s.event);
    as_the_caller_read(tx, s, &rec)?;
    if !rec.damaged.is_empty() {
        let data = json!({"decision": name, "why": "the stored approval is damaged (unreadable columns)", "damaged": rec.damaged});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::Damaged(rec.damaged));
    }
    // Attack (found by review): `call_hash` edited behind the gateway's back on a pending
    // approval; the operator was shown the stored call and the token bound the attacker's.
    if !rec.call_intact() {
        let damaged = vec!["call_hash".to_string()];
        let data = json!({"decision": name, "why": "the stored call_hash is not the SHA-256 of the stored call", "damaged": damaged});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::Damaged(damaged));
    }
    // Attack (found by review): terms edited behind the gateway's back on a pending approval
    // (its default, its device, its quorum…) made the approval mint a genuine token for them.
    let approves = matches!(
        s.event,
        Event::Decide(DecisionKind::Approve)
            | Event::Expire(assent_core::approval::DefaultDecision::Approve)
    );
    let approving = approves && rec.status == ApprovalStatus::Pending;
    // The terms' seal, read once under the row's lock: whether it holds, and the plan ids it
    // holds over for the plan check below.
    let holding = || crate::approval_seal::holding(tx, s.seal, s.id);
    let held = approving.then(holding).transpose()?.flatten();
    if approving
        && let Some((column, why)) =
            why_unapprovable(mis_sealed, held.is_some(), rec.token.is_some())
    {
        let damaged = vec![column.to_string()];
        let data = json!({"decision": name, "why": why, "damaged": damaged});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::Damaged(damaged));
    }
    if let Some(roles) = roles
        && !approval::may_decide(&rec.terms.approvers, roles)
    {
        let data = json!({"decision": name, "why": "operator lacks an approver role", "approvers": rec.terms.approvers});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::NotApprover(rec.terms.approvers));
    }
    lone_no_or_late(tx, s, &rec, roles)?;
    if approving {
        no_approval_without_consent(tx, s, (&rec, roles), held)?;
    }
    if let Event::Decide(kind) = s.event
        && roles.is_some()
    {
        let decider = duties::Decider {
            name: s.actor,
            owns: s.input.map_or(&[][..], |d| &d.decider_owns[..]),
            aka: s.input.map_or(&[][..], |d| &d.decider_aka[..]),
        };
        let on_behalf_of = rec.on_behalf_of.as_deref();
        let sod = rec.terms.separation_of_duties;
        if let Some(why) = duties::self_approval(sod, kind, &rec.agent, on_behalf_of, &decider) {
            let data = json!({"decision": name, "why": why});
            s.audit(tx, "decision.refused", data)?;
            return Err(DecideError::SelfApproval(why));
        }
    }
    if let (Event::Decide(DecisionKind::Approve), true) = (s.event, roles.is_some())
        && rec.terms.require_passkey
        && let Err(why) = passkey_ok(tx, &rec, s)?
    {
        let data = json!({"decision": name, "why": why});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::PasskeyRequired(why));
    }
    match approval::transition(rec.status, s.event) {
        Ok(next) => Ok((rec, next)),
        Err(e) => {
            let data = json!({"decision": name, "reason": s.reason, "status": rec.status});
            s.audit(tx, "decision.late", data)?;
            Err(e.into())
        }
    }
}

/// Refuses a decision whose decider no longer stands under the configuration in force
/// ([`DecisionInput::still_stands`], `NotApprover`), or whose caller found or authorised it
/// on its own earlier read of the approval, when the locked row `rec` says otherwise (found
/// by review: a row edited for that read and put back before this transaction): the agent's
/// user's in-client decision on a call not held for in-client approval, or not that agent's
/// (`NotApprover`); an AAEP reply whose reply token is not this approval's (`Damaged`,
/// `reply_token`: reply tokens never change). Each refusal is audited.
fn as_the_caller_read(
    tx: Conn<'_>,
    s: &Settle<'_>,
    rec: &ApprovalRecord,
) -> Result<(), DecideError> {
    let name = approval_event_name(s.event);
    // The stored terms' (`ApprovalTerms::decidable_in_client`): an approval held under terms
    // since tightened is not decided in the client.
    let not_held_for = |agent: &str| {
        !(rec.agent == agent && rec.terms.decidable_in_client() && rec.target_type == "other")
    };
    // `still_stands` is asked under the write lock: a reload's withdrawal of the decider's
    // consent either comes after this commits (and voids its token) or was in force before.
    let why = match s.input {
        Some(d) if d.in_client.as_deref().is_some_and(not_held_for) => {
            "the approval was not held for in-client approval by this agent's user"
        }
        Some(d) if d.still_stands.as_ref().is_some_and(|f| !f.holds()) => {
            "the decider's key, roles or sign-in (or, in the client, the rules) changed after the request was authenticated (a reload): their consent is withdrawn"
        }
        _ => "",
    };
    if !why.is_empty() {
        let data = json!({"decision": name, "why": why});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::NotApprover(rec.terms.approvers.clone()));
    }
    if let Some(t) = s.input.and_then(|d| d.reply_token.as_deref())
        && rec.reply_token.as_deref() != Some(t)
    {
        let why =
            "the reply token is not the approval's (its row changed since it was found by it)";
        let data = json!({"decision": name, "why": why, "damaged": ["reply_token"]});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::Damaged(vec!["reply_token".to_string()]));
    }
    Ok(())
}

/// Why pending approval `rec` (read under [`crate::approval_seal::lock`]) may not be approved
/// though it may still be denied: the column to name in `damaged` and the reason. A vote row
/// with a seal not its own (`mis_sealed`, [`votes::vouch`]); terms or standing that do not
/// hold their seal (`sealed`, [`crate::approval_seal`]); a token row already there
/// (`has_token`) — approved before and set back to pending, or planted (found by review: its
/// mint then failed on the unique approval id, every second for the expiry sweep). Shared by
/// [`admit`] and the expiry sweep (an approval refused here expires rejected). `None`:
/// nothing stops approving it.
pub(crate) fn why_unapprovable(
    mis_sealed: bool,
    sealed: bool,
    has_token: bool,
) -> Option<(&'static str, &'static str)> {
    if mis_sealed {
        Some((
            "votes.seal",
            "a vote row of the approval carries a seal not its own",
        ))
    } else if !sealed {
        Some((
            "seal",
            "the approval's stored terms are not those it was held under (its seal does not hold)",
        ))
    } else if has_token {
        Some((
            "tokens",
            "a token row already exists for the pending approval",
        ))
    } else {
        None
    }
}

/// Two refusals of [`admit`], each audited for the caller to commit:
/// - an operator's cancel (`roles` given) of an approval whose quorum says `deny: quorum`
///   ([`approval::operator_may_cancel`]: one operator may not say no alone; they vote deny):
///   `decision.refused`, `NotApprover`;
/// - a decision, by anyone (an operator, a quorum voter, the agent's user), at or after the
///   approval's announced deadline ([`approval::past_deadline`], escalation steps included),
///   though the expiry sweep has not settled it yet: `decision.late`, `AlreadyDecided` with
///   status `expired` — the default decision applies, as the sweep will record.
fn lone_no_or_late(
    tx: Conn<'_>,
    s: &Settle<'_>,
    rec: &ApprovalRecord,
    roles: Option<&[String]>,
) -> Result<(), DecideError> {
    let name = approval_event_name(s.event);
    // Who fits no group of the quorum in force may not vote, so may not cancel (found by
    // review: one rule's escalation widened the approvers past another rule's quorum groups).
    let fits = |roles: &[String]| rec.quorum_tally().is_none_or(|(q, _)| q.qualifies(roles));
    if let (Event::Cancel, Some(roles), ApprovalStatus::Pending) = (s.event, roles, rec.status)
        && let Err(why) = approval::operator_may_cancel(rec.terms.quorum.as_ref()).and_then(|()| {
            fits(roles)
                .then_some(())
                .ok_or("operator fits no quorum group")
        })
    {
        let data = json!({"decision": name, "why": why, "quorum": rec.terms.quorum});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::NotApprover(rec.terms.approvers.clone()));
    }
    let deadline = rec.announced_deadline();
    if let (Event::Decide(_), ApprovalStatus::Pending) = (s.event, rec.status)
        && approval::past_deadline(s.now, deadline)
    {
        let data = json!({"decision": name, "reason": s.reason, "status": rec.status, "deadline": deadline,
            "why": "the approval's deadline has passed: its default decision applies"});
        s.audit(tx, "decision.late", data)?;
        return Err(AlreadyDecided(ApprovalStatus::Expired).into());
    }
    Ok(())
}

/// Whether the approving decision `s` on `rec` carries a passkey proof that makes it a
/// passkey-signed approval (issue 14 §4): a proof, of a credential registered to the decider
/// with the same public key, that verifies for this approval, its `call_hash` and `approve`
/// ([`assent_core::passkey::check`]), and no edit (the assertion signs the call as proposed).
/// `Ok(Err(why))` when it does not.
fn passkey_ok(
    tx: Conn<'_>,
    rec: &ApprovalRecord,
    s: &Settle<'_>,
) -> db::Result<Result<(), String>> {
    let Some(d) = s.input else {
        return Ok(Err("this approval needs a passkey-signed approval".into()));
    };
    let Some(p) = &d.passkey else {
        return Ok(Err(
            "this approval needs a passkey-signed approval (rule key require_passkey, on by default for R4): approve it in the dashboard with your passkey".into(),
        ));
    };
    if d.edited.is_some() || d.scope != GrantScope::Once || d.whole_tool {
        return Ok(Err(
            "an approval that needs a passkey is approved as proposed, once (the passkey signs that one call)"
                .into(),
        ));
    }
    match crate::passkeys::owner_of(tx, s.passkeys, &p.credential_id)? {
        Some((owner, Some(key))) if owner == s.actor && key == p.public_key => {}
        _ => return Ok(Err("the passkey is not one registered to you".into())),
    }
    Ok(
        assent_core::passkey::check(p, &rec.id, &rec.call_hash, "approve")
            .map_err(|e| e.to_string()),
    )
}

/// Writes the settlement of `rec` (moving to `next` with `scope`): what ran is the edit (the
/// session's usage counts its arguments, its result limit applies too), the approval's status
/// and decided scope, the decision row (with the decider's key binding, migration 0052), the MPLP `confirm.*` event and the audit record
/// (`decision`, `approval.expired`, `approval.cancelled`; both calls when edited). Returns the
/// MPLP Confirm status ([`decision::confirm_status`]).
fn settle(
    tx: Conn<'_>,
    s: &Settle<'_>,
    rec: &ApprovalRecord,
    next: ApprovalStatus,
    scope: GrantScope,
    edited: Option<&EditedCall>,
) -> db::Result<&'static str> {
    let (id, now, actor, reason) = (s.id, s.now, s.actor, s.reason);
    if let Some(e) = edited.filter(|_| s.event == Event::Decide(DecisionKind::Approve)) {
        tx.prepare_cached("UPDATE usage SET arguments = ?2 WHERE approval_id = ?1")?
            .execute(params![id, e.canonical_arguments])?;
        if let Some(limit) = s.input.and_then(|d| d.edited_output_bytes) {
            // The smaller of the stored limit and the edit's, computed here (SQLite's scalar
            // `min` is `LEAST` on Postgres), from the row read in this transaction.
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let limit = rec
                .terms
                .output_bytes
                .map_or(limit, |b| (b as i64).min(limit));
            tx.prepare_cached("UPDATE approvals SET output_bytes = ?2 WHERE id = ?1")?
                .execute(params![id, limit])?;
        }
    }
    let mints = approval::mints_token(s.event);
    let scope_wire = mints.then(|| scope.to_wire());
    tx.prepare_cached("UPDATE approvals SET status = ?2, decided_at = ?3, scope = ?4, edited_arguments = ?5, edited_canonical = ?6, edited_hash = ?7 WHERE id = ?1 AND status = 'pending'")?.execute(
        params![id, next.as_str(), now, scope_wire, edited.map(|e| &e.canonical_arguments),
                edited.map(|e| &e.canonical), edited.map(|e| &e.call_hash)],
    )?;
    let name = approval_event_name(s.event);
    let default_applied = match s.event {
        Event::Expire(d) => Some(d.as_str()),
        _ => None,
    };
    let decision_id = crate::kit::ordered_uuid(now);
    let passkey = s
        .input
        .and_then(|d| d.passkey.as_ref())
        .filter(|_| s.event == Event::Decide(DecisionKind::Approve)) // a person's approval
        .map(|p| serde_json::to_string(p).expect("proof"));
    // What stood behind a person's decision (migration 0052): start-up voids the token of an
    // approval whose deciding key was rotated since (`crate::voided::void_unbacked`).
    let key = s.input.and_then(|d| d.decider_key.as_deref());
    tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at, default_applied, decision_id, passkey, key_binding) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)")?.execute(
        params![id, name, reason, actor, now, default_applied, decision_id, passkey, key],
    )?;
    crate::settlement_seal::seal(tx, s.settled, id)?;
    let mplp_status = decision::confirm_status(next, s.event);
    let confirm = ConfirmEvent::Decided {
        confirm_id: id,
        decision_id: &decision_id,
        status: mplp_status,
        decided_by_role: actor,
        reason,
    };
    mplp_event(tx, s.env, now, id, &rec.trace_id, actor, confirm)?;
    let kind = match s.event {
        Event::Decide(_) => "decision",
        Event::Expire(_) => "approval.expired",
        Event::Cancel => "approval.cancelled",
    };
    let mut data = json!({"decision": name, "reason": reason, "status": next, "default_applied": default_applied});
    if mints {
        data["scope"] = json!(scope_wire);
    }
    if let Some(e) = edited {
        data["original_call"] = json!({"tool": rec.call.tool, "server": rec.call.server,
            "arguments": rec.call.arguments, "call_hash": rec.call_hash});
        data["modified_call"] = json!({"tool": rec.call.tool, "server": rec.call.server,
            "arguments": e.arguments, "call_hash": e.call_hash});
    }
    s.audit(tx, kind, data)?;
    Ok(mplp_status)
}
