//! Proposing a call (AAEP §6.1, seed 002): [`Proposal`] in, [`Proposed`] out. Gating one
//! call atomically (plan and tool-review blocks, the verdict, a covering grant, joining an
//! identical pending call, the pending cap), recording outright verdicts, and inserting a held
//! approval with its audit, MPLP and AAEP records (typed [`crate::events`], rendered by the
//! store's `Envelopes`). Not deciding it (`decide.rs`).

mod row;
use row::{Row, insert_row};

use crate::approval_seal;
use crate::audit;
use crate::confirm::{self, ConfirmContext};
use crate::db::{self, Change, Conn};
use crate::emit::{emit, mplp_event};
use crate::error::StoreError;
use crate::events::{AaepEvent, ConfirmEvent, Envelopes};
use crate::kit::{ordered_id, ordered_uuid};
use crate::params;
use crate::plans;
use crate::record::{ApprovalRecord, read_approval};
use crate::seal::{SealKey, Sealed};
use crate::session_risk;
use crate::settlement_seal;
use crate::store::Store;
use crate::tokens::cover::{DutiesOf, GrantCall, covering_grant};
use crate::usage::{observed, pending_of, windows};
use assent_core::escalation;
use assent_core::gatekeeper::Verdict;
use assent_core::session_risk::{Effects, SessionRisk};
use assent_core::summary::HumanSummary;
use assent_core::triggers::{PriorCall, window::WindowNeeds};
use assent_core::{ToolCall, VerdictKind, grant, transitions};
use serde_json::{Value, json};

/// The ids of the governance policies behind a verdict ([`Proposal::governed_by`]).
pub type PoliciesOf<'a> = dyn Fn(&Verdict) -> Vec<String> + 'a;

/// A tool call proposed by an agent, ready for [`Store::propose`].
pub struct Proposal<'a> {
    /// The agent id (authenticated by the caller).
    pub agent: &'a str,
    /// Its session id.
    pub session_id: &'a str,
    /// The principal the call acts for (`on_behalf_of`, issue 14 §2), as the agent said.
    pub on_behalf_of: Option<&'a str>,
    /// Optional run id.
    pub run_id: Option<&'a str>,
    /// Optional client device id; tokens are bound to it.
    pub device_id: Option<&'a str>,
    /// MPLP trace id (UUID v4) the agent sent; generated when `None`.
    pub trace_id: Option<&'a str>,
    /// W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`) of the proposing span, kept with a
    /// held approval so its later steps join that trace (issue 15 §1); `None`: tracing off.
    pub traceparent: Option<&'a str>,
    /// The call.
    pub call: &'a ToolCall,
    /// Canonical JSON of its arguments.
    pub canonical_arguments: &'a str,
    /// Canonical JSON of the call.
    pub canonical: &'a str,
    /// SHA-256 of `canonical`.
    pub call_hash: &'a str,
    /// Unix milliseconds.
    pub now: i64,
    /// How long a new approval waits (ms), given the verdict.
    pub timeout_ms: &'a dyn Fn(&Verdict) -> i64,
    /// The part of `timeout_ms` an AAEP subscriber's timeout extension adds (ms; 0 by
    /// default): left out when a grant's approval is compared with the rules by time (an
    /// operator's stream coming or going is no change of rules).
    pub extension_ms: i64,
    /// Per-agent cap on pending approvals.
    pub max_pending: u64,
    /// The MPLP Confirm target when this is not a plain tool call (a submitted plan, a
    /// context, …). Such proposals are never covered by grants; a `plan` target must be a
    /// `draft` of the agent and becomes `proposed` with the held approval.
    pub target: Option<ConfirmTarget<'a>>,
    /// MPLP plan and step of the call, gated (seed 000; [`plans::plan_block`]: see `plans_of`).
    pub plan_id: Option<&'a str>,
    /// See `plan_id`.
    pub step_id: Option<&'a str>,
    /// Agents declaring `agent` a local delegate (agent files, not the request): their plans gate it.
    pub plans_of: &'a [String],
    /// The ids of the governance policies behind a confirm verdict, recorded with a held
    /// call ([`ConfirmContext::policies`]); `None` records none.
    pub governed_by: Option<&'a PoliciesOf<'a>>,
    /// SHA-256 of the governance policy set the verdict came from
    /// ([`ConfirmContext::policy_set_sha256`]).
    pub policy_set_sha256: Option<&'a str>,
    /// What the call does (`Registry::effects_of`): an allowed or granted call that
    /// brings untrusted output or private data in, or sends data out, marks its session; a
    /// held one marks it when its token is redeemed (issue 16 §3). None by default.
    pub effects: Effects,
    /// Given a grant creator's name, `(owns, aka)` as in [`crate::DecisionInput`]; `None` (the
    /// default) knows only the name. A grant never covers a call its creator could not approve.
    pub duties_of: Option<&'a DutiesOf<'a>>,
}

impl<'a> Proposal<'a> {
    /// A proposal of `call` by `agent` in `session_id` at `now` (Unix ms): its canonical texts
    /// and `call_hash` from the [`CanonicalCall`], held approvals waiting `timeout_ms(verdict)`
    /// ms, at most `max_pending` pending; no run, device or trace id, no Confirm target, plan
    /// or governance policies (set those fields on it: `Proposal { plan_id, ..for_call(…) }`).
    pub fn for_call(
        agent: &'a str,
        session_id: &'a str,
        call: &'a assent_core::canonical::CanonicalCall,
        now: i64,
        timeout_ms: &'a dyn Fn(&Verdict) -> i64,
        max_pending: u64,
    ) -> Proposal<'a> {
        Proposal {
            agent,
            session_id,
            on_behalf_of: None,
            run_id: None,
            device_id: None,
            trace_id: None,
            traceparent: None,
            call: call.call(),
            canonical_arguments: call.arguments(),
            canonical: call.canonical(),
            call_hash: call.call_hash(),
            now,
            timeout_ms,
            extension_ms: 0,
            max_pending,
            target: None,
            plan_id: None,
            step_id: None,
            plans_of: &[],
            governed_by: None,
            policy_set_sha256: None,
            effects: Effects::default(),
            duties_of: None,
        }
    }
}

/// What [`Store::propose`] did.
#[derive(Debug, Clone)]
pub enum Proposed {
    /// Allowed outright (audited `call.allowed`).
    Allowed,
    /// Denied (audited `call.denied`).
    Denied,
    /// A grant covers it: an approved approval with its own token (audited `grant.used`).
    Granted(Box<ApprovalRecord>),
    /// Held: a new pending approval, or (`joined`) the pending one for the identical call.
    Held {
        /// The approval.
        approval: Box<ApprovalRecord>,
        /// True when an identical call of the same session was already pending (AAEP §6.1).
        joined: bool,
    },
    /// The agent has `limit` pending approvals already (`429 TOO_MANY_PENDING`).
    TooManyPending {
        /// The cap.
        limit: u64,
    },
    /// Refused (audited `call.refused`): the agent's session was cancelled
    /// ([`Store::cancel_session`]; AAEP §4.1.4: no event of a session follows its terminal
    /// one), whatever the verdict (`409 SESSION_CANCELLED`).
    SessionCancelled {
        /// When it was cancelled (Unix ms).
        at: i64,
        /// Who cancelled it (the agent itself or an operator).
        by: String,
    },
}

/// The MPLP Confirm target of an approval that is not a plain tool call (MPLP Confirm §2.3):
/// `target_type` `plan`, `context`, `trace`, `extension` or `other`, its UUID v4 `target_id`,
/// and the RFC 6902 diff from its previous submission.
#[derive(Debug, Clone, Copy)]
pub struct ConfirmTarget<'a> {
    /// MPLP `target_type`.
    pub target_type: &'a str,
    /// MPLP `target_id` (UUID v4).
    pub target_id: &'a str,
    /// RFC 6902 patch from the previous submission, when this modifies an earlier one.
    pub diff: Option<&'a Value>,
}

impl Store {
    /// Audits a proposal that was allowed or denied outright (`call.allowed` / `call.denied`).
    /// The caller forwards an allowed call only after this returns `Ok` (fail closed).
    pub fn record_verdict(
        &self,
        agent: &str,
        session_id: &str,
        call: &ToolCall,
        call_hash: &str,
        verdict: &Verdict,
        now: i64,
    ) -> Result<(), StoreError> {
        let kind = match verdict.kind {
            assent_core::VerdictKind::Allow => "call.allowed",
            assent_core::VerdictKind::Deny => "call.denied",
            assent_core::VerdictKind::Confirm => "call.held",
        };
        let data = json!({"session_id": session_id, "call": call, "call_hash": call_hash,
                          "verdict": verdict.kind, "reasons": verdict.terms.reasons, "risk_tier": verdict.terms.risk_tier});
        self.write(|tx| Ok(audit::append(**tx, now, kind, None, agent, &data)?))
    }

    /// Stores proposal `p` as a new pending approval with the confirm `verdict` (message, tier,
    /// reasons, default), without gating it: its `approval.requested` audit record, MPLP
    /// `confirm.requested` and AAEP `agent.awaiting.confirmation`. It expires after
    /// `p.timeout_ms(verdict)`; `p.max_pending` and `p.plan_id`/`step_id` blocks are not
    /// checked (that is [`Store::propose`]).
    pub fn create_approval(
        &self,
        p: &Proposal<'_>,
        verdict: &Verdict,
    ) -> Result<ApprovalRecord, StoreError> {
        self.write(|tx| {
            let on = (&*self.envelopes, &self.seal_key(Sealed::Plan));
            let rec = insert_pending(**tx, on, p, verdict)?;
            approval_seal::seal_new(**tx, &self.seal_key(Sealed::Approval), &rec.id)?;
            tx.changed(Change::Approval(rec.id.clone()));
            Ok(rec)
        })
    }

    /// Gates one proposed call atomically (AAEP §6.1, seed 002): reads the session's earlier
    /// calls, asks `evaluate` for the verdict with them, and in the same transaction
    /// - denies (audited `call.denied`) or allows (`call.allowed`); a call whose MPLP plan or
    ///   step is blocked, or whose tool definition awaits review, is denied
    ///   ([`transitions::apply_block`]);
    /// - for a confirm verdict without threshold or scope triggers, lets a matching grant
    ///   through as an approved approval with its own token (`grant.used`);
    /// - joins an identical pending call of the same session instead of holding it twice;
    /// - refuses when the agent already has `max_pending` pending approvals
    ///   (`call.refused`), else holds the call as a new pending approval;
    /// - refuses any call (`call.refused`) once the agent's session is cancelled.
    ///
    /// Allowed, granted and held calls count toward later thresholds. `Err(Invalid)` when a
    /// `plan` target is not a draft of the agent.
    ///
    /// `evaluate` is given the session's whole history; [`Store::propose_within`] gives it
    /// only what the policy's windows reach.
    pub fn propose(
        &self,
        p: &Proposal<'_>,
        evaluate: impl FnOnce(&[PriorCall]) -> Verdict,
    ) -> Result<(Verdict, Proposed), StoreError> {
        self.propose_observed(p, None, |prior, _, _| evaluate(prior))
    }

    /// [`Store::propose`], with `evaluate` given the session's earlier calls as core's compact
    /// list for `needs` ([`assent_core::triggers::window`]: kept totals, the calls inside the
    /// longest rate window, the pending ones), so a proposal costs the same at the session's
    /// 10,000th call as at its 10th (issue 13 §5). `needs` must be
    /// [`WindowNeeds::of`] the registry `evaluate` asks. It gives no agent-wide calls: gate a
    /// registry with `per: agent` or `max_per_agent` thresholds by [`Self::propose_observed`].
    pub fn propose_within(
        &self,
        p: &Proposal<'_>,
        needs: &WindowNeeds,
        evaluate: impl FnOnce(&[PriorCall]) -> Verdict,
    ) -> Result<(Verdict, Proposed), StoreError> {
        self.propose_observed(p, Some(needs), |prior, _, _| evaluate(prior))
    }

    /// [`Store::propose`] with the history (`needs: None`) or the window of `needs`, with
    /// `evaluate` also given what the session has taken in ([`SessionRisk`], issue 16 §3: the
    /// session begins with its first call that may run; the called tool's pin changes are
    /// looked up) and the agent's calls in all its sessions inside the agent-wide window of
    /// `needs` ([`WindowNeeds::agent_since`]; empty without `needs`).
    /// The session is marked with `p.effects` in the same transaction when the call is
    /// allowed or granted, and when a held call's token is redeemed.
    pub fn propose_observed(
        &self,
        p: &Proposal<'_>,
        needs: Option<&WindowNeeds>,
        evaluate: impl FnOnce(&[PriorCall], &SessionRisk, &[PriorCall]) -> Verdict,
    ) -> Result<(Verdict, Proposed), StoreError> {
        let plan_key = self.seal_key(Sealed::Plan);
        self.write(|tx| {
            let plan = p.target.filter(|t| t.target_type == "plan");
            if let Some(t) = plan {
                check_submittable(**tx, &plan_key, p.agent, t.target_id, &p.call.arguments)?;
            }
            let blocked = block(**tx, &plan_key, p)?;
            windows::fold(**tx, p.agent, p.session_id)?;
            let (prior, agent) = observed(**tx, p.agent, p.session_id, needs, p.now)?;
            let session = session_risk::read(**tx, p.agent, p.session_id, p.call)?;
            let mut verdict = evaluate(&prior, &session, &agent);
            transitions::apply_block(&mut verdict, blocked);
            let g = Gate {
                tx: **tx,
                env: &*self.envelopes,
                p,
                verdict: &verdict,
            };
            let ended = crate::session_over::cancelled_at(**tx, p.agent, p.session_id)?;
            let outcome = match verdict.kind {
                _ if let Some((at, by)) = ended => {
                    let why = json!({"why": "the session was cancelled", "cancelled_at": at, "cancelled_by": by});
                    g.audit("call.refused", None, why)?;
                    Proposed::SessionCancelled { at, by }
                }
                VerdictKind::Deny => {
                    g.audit("call.denied", None, json!({}))?;
                    Proposed::Denied
                }
                VerdictKind::Allow => {
                    g.audit("call.allowed", None, json!({}))?;
                    g.add_usage(None)?;
                    Proposed::Allowed
                }
                VerdictKind::Confirm => self.confirm(&g, plan)?,
            };
            // Issue 16 §3: a call that may run now marks its session; a held one when redeemed.
            let call = (p.call.tool.as_str(), p.call.server.as_deref());
            match &outcome {
                Proposed::Allowed | Proposed::Granted(_) => {
                    session_risk::ran(**tx, p.agent, p.session_id, call, p.effects, p.now)?;
                }
                Proposed::Held {
                    approval,
                    joined: false,
                } => session_risk::hold(**tx, &approval.id, p.effects)?,
                _ => {}
            }
            if let Proposed::Held { approval, .. } = &outcome {
                tx.changed(Change::Approval(approval.id.clone()));
            }
            Ok((verdict, outcome))
        })
    }

    /// A confirm verdict: a covering grant lets it through ([`Store::use_grant`]); else it
    /// joins the identical pending call of the session, is refused over the pending cap, or is
    /// held as a new pending approval (a submitted plan becomes `proposed` with it).
    fn confirm(
        &self,
        g: &Gate<'_>,
        plan: Option<ConfirmTarget<'_>>,
    ) -> Result<Proposed, StoreError> {
        let (tx, p, verdict) = (g.tx, g.p, g.verdict);
        if grant::may_use_grant(&verdict.terms, p.target.is_some()) {
            let keys =
                [Sealed::Grant, Sealed::Approval, Sealed::Settlement].map(|k| self.seal_key(k));
            let wait = (p.timeout_ms)(verdict).saturating_sub(p.extension_ms);
            let c = GrantCall {
                agent: p.agent,
                session_id: p.session_id,
                on_behalf_of: p.on_behalf_of,
                call: p.call,
                call_hash: p.call_hash,
                now: p.now,
                delegations: &self.delegations(),
                plans: &self.seal_key(Sealed::Plan),
            };
            let found = covering_grant(tx, &keys, &c, &verdict.terms, wait, p.duties_of)?;
            if let Some((gid, scope)) = found {
                return self.use_grant(g, &gid, &scope);
            }
        }
        let keys = (self.seal_key(Sealed::Approval), self.seal_key(Sealed::Vote));
        let call = [p.agent, p.session_id, p.call_hash];
        let who = [p.on_behalf_of, p.device_id];
        let joined = crate::joins::joinable(tx, &keys, call, who, &verdict.terms)?;
        if let Some(held) = joined {
            g.audit("call.held", Some(&held.id), json!({"joined": true}))?;
            return Ok(Proposed::Held {
                approval: Box::new(held),
                joined: true,
            });
        }
        let pending = pending_of(tx, p.agent)?;
        if pending >= p.max_pending {
            g.audit(
                "call.refused",
                None,
                json!({"why": "too many pending approvals", "pending": pending, "limit": p.max_pending}),
            )?;
            return Ok(Proposed::TooManyPending {
                limit: p.max_pending,
            });
        }
        let rec = insert_pending(tx, (g.env, &self.seal_key(Sealed::Plan)), p, verdict)?;
        let id = rec.id.clone();
        approval_seal::seal_new(tx, &self.seal_key(Sealed::Approval), &id)?;
        g.add_usage(Some(&id))?;
        if let Some(t) = plan {
            tx.prepare_cached(
                "UPDATE plans SET confirm_id = ?2, submitted = ?3 WHERE plan_id = ?1",
            )?
            .execute(params![t.target_id, id, p.canonical_arguments])?;
            // Checked intact under its lock (`check_submittable`): sealed with the change.
            let key = self.seal_key(Sealed::Plan);
            plans::seal(tx, &key, t.target_id)?;
            let data = json!({"confirm_id": id, "diff": t.diff});
            plans::transition(
                tx,
                (&key, &self.delegations()),
                t.target_id,
                ("proposed", "plan.submitted"),
                p.agent,
                data,
                p.now,
            )?;
        }
        // Neither the usage nor the plan touches what the record holds: read once, above.
        Ok(Proposed::Held {
            approval: Box::new(rec),
            joined: false,
        })
    }

    /// Lets the call through under grant `gid` (of `scope`): an approved approval decided by
    /// `grant:<gid>`, its MPLP `confirm.approved`, `grant.used`, and its own token.
    fn use_grant(&self, g: &Gate<'_>, gid: &str, scope: &str) -> Result<Proposed, StoreError> {
        let (tx, p) = (g.tx, g.p);
        let on = (g.env, &self.seal_key(Sealed::Plan));
        let id = insert_approval(tx, on, p, g.verdict, "approved", None)?;
        approval_seal::seal_new(tx, &self.seal_key(Sealed::Approval), &id)?;
        let actor = format!("grant:{gid}");
        tx.prepare_cached(
            "UPDATE approvals SET decided_at = ?2, scope = ?3, grant_id = ?4 WHERE id = ?1",
        )?
        .execute(params![id, p.now, scope, gid])?;
        let decision_id = ordered_uuid(p.now);
        let why = format!("covered by grant {gid} (scope {scope})");
        tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at, decision_id) VALUES (?1,'approve',?2,?3,?4,?5)")?
            .execute(params![id, why, actor, p.now, decision_id])?;
        settlement_seal::seal(tx, &self.seal_key(Sealed::Settlement), &id)?;
        let trace: String = tx
            .prepare_cached("SELECT trace_id FROM approvals WHERE id = ?1")?
            .query_row([&id], |r| r.get(0))?;
        let confirm = ConfirmEvent::Decided {
            confirm_id: &id,
            decision_id: &decision_id,
            status: "approved",
            decided_by_role: &actor,
            reason: Some(&why),
        };
        mplp_event(tx, g.env, p.now, &id, &trace, &actor, confirm)?;
        audit::append(
            tx,
            p.now,
            "grant.used",
            Some(&id),
            &actor,
            &json!({"grant_id": gid, "scope": scope, "call_hash": p.call_hash}),
        )?;
        self.mint(
            tx,
            &id,
            p.agent,
            p.call_hash,
            scope,
            p.device_id,
            &actor,
            p.now,
        )?;
        g.add_usage(Some(&id))?;
        Ok(Proposed::Granted(Box::new(
            read_approval(tx, &id)?.expect("inserted"),
        )))
    }
}

/// One proposal being gated in its transaction, with its verdict.
struct Gate<'a> {
    tx: Conn<'a>,
    /// The store's event renderer.
    env: &'a dyn Envelopes,
    p: &'a Proposal<'a>,
    verdict: &'a Verdict,
}

impl Gate<'_> {
    /// Audits `kind` for the proposal: session, run, device, call, hash, the verdict and the
    /// policy set's hash (when given), plus the fields of `extra` (an object).
    fn audit(&self, kind: &str, approval_id: Option<&str>, extra: Value) -> db::Result<()> {
        let (p, v) = (self.p, self.verdict);
        let mut d = json!({"session_id": p.session_id, "run_id": p.run_id, "device_id": p.device_id,
            "call": p.call, "call_hash": p.call_hash, "verdict": v.kind, "reasons": v.terms.reasons,
            "risk_tier": v.terms.risk_tier, "triggers": v.terms.triggers});
        if let Some(h) = p.policy_set_sha256 {
            d["policy_set_sha256"] = json!(h);
        }
        if let (Value::Object(d), Value::Object(e)) = (&mut d, extra) {
            d.extend(e);
        }
        audit::append(self.tx, p.now, kind, approval_id, p.agent, &d)
    }

    /// Records the call in `usage` (what later thresholds count), linked to its approval.
    fn add_usage(&self, approval_id: Option<&str>) -> db::Result<()> {
        let p = self.p;
        windows::record_call(
            self.tx,
            p.agent,
            p.session_id,
            p.call,
            p.canonical_arguments,
            p.now,
            approval_id,
        )
    }
}

/// `Ok` when plan `plan_id` is a draft of `agent` ([`transitions::plan_editable`]) whose
/// reviewed form ([`plans::PlanRecord::reviewed`]) is `reviewed`, what the Confirm shows, with
/// room for the submission ([`plans::room_to_submit`]); else `Invalid` saying why (the
/// server's 409 `WRONG_STATE`). Found by review: the server
/// built the Confirm from its own earlier read, so a revision landing between that read and
/// this transaction had a person approve one body while the plan kept another.
fn check_submittable(
    tx: Conn<'_>,
    key: &SealKey,
    agent: &str,
    plan_id: &str,
    reviewed: &Value,
) -> Result<(), StoreError> {
    match plans::read_plan_to_change(tx, key, plan_id)? {
        Some(pl)
            if pl.agent == agent
                && transitions::plan_editable(&pl.status)
                && pl.reviewed() != *reviewed =>
        {
            Err(StoreError::Invalid(format!(
                "plan {plan_id} was revised while it was being submitted; submit it again"
            )))
        }
        Some(pl) if pl.agent == agent && transitions::plan_editable(&pl.status) => {
            plans::room_to_submit(&pl)
        }
        Some(pl) if pl.agent == agent => Err(StoreError::Invalid(format!(
            "plan {plan_id} is {}; only a draft can be submitted",
            pl.status
        ))),
        _ => Err(StoreError::Invalid(format!("no plan `{plan_id}`"))),
    }
}

/// Why the proposal may not run now, if anything blocks it: its MPLP plan or step
/// ([`plans::plan_block`]), else a pending review of its tool's changed definition in the
/// gateway's scope or the agent's own ([`crate::pins::pending_review`]).
fn block(tx: Conn<'_>, key: &SealKey, p: &Proposal<'_>) -> db::Result<Option<String>> {
    if let Some(why) = plans::plan_block(tx, key, p.agent, p.plans_of, p.plan_id, p.step_id)? {
        return Ok(Some(why));
    }
    let Some(server) = &p.call.server else {
        return Ok(None);
    };
    // Only the gateway's reviews (its hub's upstream changed) and the agent's own hold it:
    // another agent's report of the same alias concerns that agent alone.
    let review = crate::pins::pending_review(tx, p.agent, server, &p.call.tool)?;
    Ok(review.map(|id| {
        format!(
            "the definition of {server}/{} changed and awaits an operator's review ({id}; assent tools pending)",
            p.call.tool
        )
    }))
}

/// Inserts proposal `p` as an approval with confirm `verdict` and `status` (`pending`, or
/// `approved` under a grant), its `approval.requested` audit record, its [`ConfirmContext`]
/// and MPLP `confirm.requested`; a pending one also gets its AAEP reply token and
/// `agent.awaiting.confirmation`. Returns its id. The human summary is generated from, and
/// verified against, the canonical arguments (`Err(Invalid)` when that fails).
fn insert_approval(
    tx: Conn<'_>,
    (env, plans): (&dyn Envelopes, &SealKey),
    p: &Proposal<'_>,
    verdict: &Verdict,
    status: &str,
    reply_token: Option<&str>,
) -> Result<String, StoreError> {
    let summary = HumanSummary::generate(p.call, p.canonical_arguments);
    summary
        .verify(p.canonical_arguments)
        .map_err(|e| StoreError::Invalid(format!("human summary check failed: {e}")))?;
    let wait = (p.timeout_ms)(verdict);
    let schedule = verdict
        .terms
        .escalation
        .as_ref()
        .and_then(|e| escalation::schedule(e, p.now, wait))
        .map(|s| escalation::Schedule {
            first_approvers: Some(verdict.terms.approvers.clone()),
            ..s
        });
    let row = Row {
        id: ordered_uuid(p.now),
        expires_at: schedule
            .as_ref()
            .map_or(p.now.saturating_add(wait), |s| s.next(0)),
        schedule,
        trace_id: p
            .trace_id
            .map_or_else(|| ordered_uuid(p.now), str::to_string),
        target_type: p.target.map_or("other", |t| t.target_type),
        target_id: p
            .target
            .map_or_else(|| ordered_uuid(p.now), |t| t.target_id.to_string()),
        summary: summary.text,
    };
    insert_row(tx, p, verdict, &row, (status, reply_token))?;
    let v = verdict;
    let mut requested = json!({"session_id": p.session_id, "run_id": p.run_id, "device_id": p.device_id, "call": p.call,
                "call_hash": p.call_hash, "verdict": "confirm", "reasons": v.terms.reasons, "risk_tier": v.terms.risk_tier,
                "irreversible": v.terms.irreversible, "message": v.terms.message, "expires_at": row.expires_at,
                "default_decision": v.terms.default_decision, "triggers": v.terms.triggers,
                "approvers": v.terms.approvers, "quorum": v.terms.quorum, "require_passkey": v.terms.require_passkey,
                "separation_of_duties": v.terms.separation_of_duties, "in_client_approval": v.terms.in_client_approval,
                "on_behalf_of": p.on_behalf_of});
    if let Some(h) = p.policy_set_sha256 {
        requested["policy_set_sha256"] = json!(h);
    }
    audit::append(
        tx,
        p.now,
        "approval.requested",
        Some(&row.id),
        p.agent,
        &requested,
    )?;
    let (plan_id, step_id, plan_owner) =
        plans::recorded_ids(tx, plans, p.agent, p.plans_of, p.plan_id, p.step_id)?;
    let context = ConfirmContext {
        policies: p.governed_by.map(|f| f(verdict)).unwrap_or_default(),
        policy_set_sha256: p.policy_set_sha256.map(str::to_string),
        plan_id,
        step_id,
        plan_owner,
    };
    confirm::record(tx, &row.id, &context)?;
    // A tool call of a plan step is shown with the step as its MPLP target (see
    // `docs/conformance.md`); the stored target id stays the call's own.
    let shown_target = match (&context.step_id, row.target_type) {
        (Some(step), "other") => step.clone(),
        _ => row.target_id.clone(),
    };
    let confirm = ConfirmEvent::Requested {
        confirm_id: &row.id,
        target_type: row.target_type,
        target_id: &shown_target,
        requested_by_role: p.agent,
    };
    mplp_event(tx, env, p.now, &row.id, &row.trace_id, p.agent, confirm)?;
    Ok(row.id)
}

/// [`insert_approval`] of a `pending` approval with a fresh AAEP reply token (§6.2: stored
/// with the row, so it stays unique and single-use across restarts) and its
/// `agent.awaiting.confirmation` event, written in the same transaction; the new record as
/// read back once (what the event carries and the caller answers with).
fn insert_pending(
    tx: Conn<'_>,
    (env, plans): (&dyn Envelopes, &SealKey),
    p: &Proposal<'_>,
    verdict: &Verdict,
) -> Result<ApprovalRecord, StoreError> {
    let token = ordered_id("rpl_", p.now);
    let id = insert_approval(tx, (env, plans), p, verdict, "pending", Some(&token))?;
    let rec = read_approval(tx, &id)?.ok_or_else(|| {
        StoreError::Invalid(format!("approval {id} was not found just after its insert"))
    })?;
    let event = AaepEvent::AwaitingConfirmation {
        approval: &rec,
        reply_token: &token,
    };
    emit(tx, env, &event, None, Some(&id), p.now)?;
    Ok(rec)
}
