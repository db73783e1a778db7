//! MPLP plans (MPLP Plan module; Confirm module §4): a plan is written as a `draft`, submitted
//! for approval (`proposed`, with a Confirm of `target_type: plan`), and moved by the Confirm's
//! decision to `approved`, back to `draft` (rejected, to be revised) or to `cancelled`. Every
//! transition is an MPLP event on the plan and an audit record; each decision also appends a
//! `pipeline_stage` event (`plan_approved` / `plan_rejected`, seed 001 §4.3) to the audit chain.
//!
//! The gatekeeper duty (seed 000): a tool call that names a plan or step with a pending Confirm,
//! or a plan that is not approved, is blocked (`plan_block`). Which states allow what is
//! `assent_core::transitions`; cancelling a plan through its Confirm is `Store::cancel_plan`
//! in `decide.rs`, next to the cancellation it goes through.
//!
//! A plan's row is sealed ([`crate::seal`], [`Sealed::Plan`], migration 0058) with every change
//! the gateway makes to it. One whose seal does not hold reads with the status [`DAMAGED`]: no
//! MPLP status, so it runs no calls, takes no transition and stops the tokens and grants of
//! the calls held under it (found by review: `plans.status` set back to `approved` on a
//! cancelled plan revived the tokens its stop had stopped). A row put back whole as it was,
//! seal and all, is not caught here (see `crate::seal`; `audit verify` names it,
//! `integrity_plans.rs`). The row, its seal and its reads are `plans/row.rs`.

mod row;
pub use row::{DAMAGED, DAMAGED_WHY};
pub(crate) use row::{read_plan, read_plan_to_change, seal};

use crate::audit;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::{DecideError, StoreError};
use crate::kit::rfc3339;
use crate::params;
use crate::seal::{SealKey, Sealed};
use crate::store::Store;
use assent_core::policy::{Delegations, plan_gates, plan_reaches_held};
use assent_core::transitions::{self, PlanGrowth};
use serde::Serialize;
use serde_json::{Value, json};

/// A stored plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRecord {
    /// MPLP `plan_id` (UUID v4).
    pub plan_id: String,
    /// The agent that owns it.
    pub agent: String,
    /// The session it was created in.
    pub session_id: String,
    /// MPLP plan status (`draft`, `proposed`, `approved`, `in_progress`, `completed`,
    /// `cancelled`, `failed`).
    pub status: String,
    /// The plan as last written by the agent, without `status` and `events`.
    pub body: Value,
    /// The body of the last submission, if it was ever submitted.
    pub submitted: Option<Value>,
    /// The Confirm (approval id) of the last submission.
    pub confirm_id: Option<String>,
    /// MPLP common events of its lifecycle (`plan.created`, `plan.submitted`, …).
    pub events: Vec<Value>,
    /// MPLP trace id (UUID v4).
    pub trace_id: String,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
}

impl PlanRecord {
    /// The plan as an MPLP Plan object (`mplp-plan.schema.json`): the body with the current
    /// `status`, the lifecycle `events` and the `trace` (trace id; span = the plan id).
    pub fn to_mplp(&self) -> Value {
        let mut v = self.body.clone();
        v["status"] = json!(self.status);
        if !self.events.is_empty() {
            v["events"] = json!(self.events);
        }
        if v.get("trace").is_none() {
            v["trace"] = json!({"trace_id": self.trace_id, "span_id": self.plan_id});
        }
        v
    }

    /// What a person reviews of the plan when it is submitted (the arguments of its Confirm's
    /// `mplp.plan` call, whose canonical hash the Confirm binds; a resubmission's diff is
    /// taken on it): `{"plan_id", "context_id", "title", "objective", "steps"}`.
    pub fn reviewed(&self) -> Value {
        let b = &self.body;
        json!({"plan_id": self.plan_id, "context_id": b["context_id"], "title": b["title"],
               "objective": b["objective"], "steps": b["steps"]})
    }

    /// The reason of the last rejection while the plan is back in `draft`, for the agent to
    /// revise it.
    pub fn rejection_reason(&self) -> Option<String> {
        if self.status != "draft" {
            return None;
        }
        self.events
            .iter()
            .rev()
            .find(|e| e["event_type"] != "plan.updated")
            .filter(|e| e["event_type"] == "plan.rejected")
            .and_then(|e| e["data"]["reason"].as_str().map(str::to_string))
    }
}

/// The most MPLP events one plan holds: the rule is core's
/// ([`assent_core::transitions::plan_has_room`]).
pub use assent_core::transitions::MAX_PLAN_EVENTS;

/// `Ok` when draft `p` has room for a submission ([`transitions::plan_has_room`]); else `Invalid` naming the
/// bound (the server's 409 `WRONG_STATE`, as for a revision past it). Found by review: only
/// revisions were bounded, so an agent submitting a draft and letting its Confirm expire
/// (back to `draft`) in a loop grew the plan's event list, rewritten whole inside the one
/// writer every agent shares, without bound.
pub(crate) fn room_to_submit(p: &PlanRecord) -> Result<(), StoreError> {
    if transitions::plan_has_room(p.events.len(), PlanGrowth::Submission) {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "plan {} holds {} events and a plan holds at most {MAX_PLAN_EVENTS} (submitted or revised too often): create a new plan",
        p.plan_id,
        p.events.len()
    )))
}

/// Why a plan operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// No plan has this id (or it belongs to another agent).
    #[error("no plan `{0}`")]
    NotFound(String),
    /// A plan with this id exists already.
    #[error("plan `{0}` exists already")]
    Exists(String),
    /// The plan was registered by another agent: only its own agent revises, submits or
    /// cancels it as an agent (a plan belongs to the agent that registered it).
    #[error("plan `{0}` was registered by another agent; an agent changes only its own plans")]
    NotOwner(String),
    /// The plan is not in a state that allows this (`status` given).
    #[error("plan is {0}: {1}")]
    WrongState(String, &'static str),
    /// The agent has this many open plans (drafts and plans under review) already.
    #[error(
        "the agent has {0} open plans (drafts and plans under review) already; submit, finish or cancel some"
    )]
    TooManyOpen(u64),
    /// Cancelling the plan's pending Confirm was refused: an operator without its approver
    /// roles (`NotApprover`, audited `decision.refused`) or a damaged Confirm.
    #[error(transparent)]
    Decide(DecideError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for PlanError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Store(e.into())
    }
}
impl db::Settles for PlanError {}
impl From<db::DbError> for PlanError {
    fn from(e: db::DbError) -> Self {
        Self::Store(e.into())
    }
}

fn event(now: i64, event_type: &str, trace_id: &str, data: Value) -> Value {
    json!({"event_id": uuid::Uuid::new_v4().to_string(), "event_type": event_type,
           "source": "assent.plan", "timestamp": rfc3339(now), "trace_id": trace_id, "data": data})
}

/// Moves plan `plan_id` to `status`, appends an MPLP event `event_type` with `data` (and
/// `plan_id` in it) to it and an audit record of the same kind: [`transition_from`] the plan
/// read locked ([`read_plan_to_change`]). `None` when there is no such plan or it is
/// [`DAMAGED`].
pub(crate) fn transition(
    tx: Conn<'_>,
    keys: (&SealKey, &Delegations),
    plan_id: &str,
    step: (&str, &str),
    actor: &str,
    data: Value,
    now: i64,
) -> db::Result<Option<PlanRecord>> {
    let Some(p) = read_plan_to_change(tx, keys.0, plan_id)? else {
        return Ok(None);
    };
    transition_from(tx, keys, (p, None), step, actor, data, now)
}

/// Moves plan `p`, read locked in this transaction ([`read_plan_to_change`]), to `status`
/// (with the agent's new `body` text, when it is revised), appends an MPLP event `event_type`
/// with `data` (and `plan_id` in it) to it and an audit record of the same kind. A status in
/// which the plan runs no calls ([`transitions::plan_runs_calls`]: cancelled, back to draft…)
/// revokes the grants made from the calls held under it
/// ([`crate::grants_revoke::withdraw_plan_consent`], which voids their unredeemed tokens too),
/// in this transaction: those of its agent's calls and of `delegations`' delegates of its agent
/// now, as the stop of their held calls and tokens reaches them. The row is written in one
/// statement and sealed again under `key` ([`seal`]); a [`DAMAGED`] one is left as it is (its
/// callers refuse one before). Returns the plan as written and sealed, so that its callers
/// need not read it again (each read parses, and checks the seal over, up to
/// [`MAX_PLAN_EVENTS`] events); `None` when it is [`DAMAGED`].
pub(crate) fn transition_from(
    tx: Conn<'_>,
    (key, delegations): (&SealKey, &Delegations),
    (mut p, body): (PlanRecord, Option<(String, Value)>),
    (status, event_type): (&str, &str),
    actor: &str,
    mut data: Value,
    now: i64,
) -> db::Result<Option<PlanRecord>> {
    if p.status == DAMAGED {
        tracing::warn!(
            plan = p.plan_id,
            to = status,
            "a plan whose row does not hold its seal is left as it is"
        );
        return Ok(None);
    }
    // Every record names its plan (found by review: a draft never submitted has no Confirm,
    // and a `plan.cancelled` record was known by the agent's trace id alone).
    if let Some(d) = data.as_object_mut() {
        d.insert("plan_id".into(), json!(p.plan_id));
    }
    let ev = event(now, event_type, &p.trace_id, data);
    p.events.push(ev.clone());
    // Written without a copy of the list: taken out, written, put back.
    let list = Value::Array(std::mem::take(&mut p.events));
    let events = list.to_string();
    if let Value::Array(back) = list {
        p.events = back;
    }
    let body_text = body.map(|(text, value)| {
        p.body = value;
        text
    });
    tx.prepare_cached(
        "UPDATE plans SET status = ?2, events = ?3, updated_at = ?4, body = coalesce(?5, body) WHERE plan_id = ?1",
    )?
    .execute(params![p.plan_id, status, events, now, body_text])?;
    seal(tx, key, &p.plan_id)?;
    audit::append(tx, now, event_type, p.confirm_id.as_deref(), actor, &ev)?;
    let was = std::mem::replace(&mut p.status, status.to_string());
    p.updated_at = now;
    if !transitions::plan_runs_calls(status) {
        let owner = (p.agent.as_str(), delegations.delegates_of(&p.agent));
        let stopped = (status, transitions::plan_runs_calls(&was));
        crate::grants_revoke::withdraw_plan_consent(tx, &p.plan_id, owner, stopped, actor, now)?;
    }
    Ok(Some(p))
}

/// What the Confirm of a plan decided, applied to the plan in the decision's transaction
/// (seed 001 §4.3): `approved` → plan `approved`; `rejected` → back to `draft` with the reason;
/// `cancelled` → plan `cancelled`. Approvals and rejections also append a `pipeline_stage`
/// event (`plan_approved` / `plan_rejected`) to the audit chain. Only a plan waiting for this
/// Confirm (`proposed`, naming it) moves ([`transitions::plan_after_confirm`]); any other is
/// left as it is, logged; so is a [`DAMAGED`] one.
pub(crate) fn on_confirm_decided(
    tx: Conn<'_>,
    (key, delegations): (&SealKey, &Delegations),
    (confirm_id, plan_id): (&str, &str),
    mplp_status: &str,
    actor: &str,
    reason: Option<&str>,
    now: i64,
) -> db::Result<()> {
    let current = read_plan_to_change(tx, key, plan_id)?;
    let waiting = current
        .as_ref()
        .filter(|p| p.confirm_id.as_deref() == Some(confirm_id));
    let Some((status, kind)) =
        waiting.and_then(|p| transitions::plan_after_confirm(&p.status, mplp_status))
    else {
        tracing::warn!(plan = plan_id, confirm = confirm_id, status = ?current.map(|p| p.status),
            decided = mplp_status, "a Confirm settled for a plan no longer waiting for it; the plan is left as it is");
        return Ok(());
    };
    let Some(p) = current else {
        return Ok(());
    };
    transition_from(
        tx,
        (key, delegations),
        (p, None),
        (status, kind),
        actor,
        json!({"confirm_id": confirm_id, "decided_by": actor, "reason": reason}),
        now,
    )?;
    if mplp_status == "cancelled" {
        return Ok(());
    }
    let approved = mplp_status == "approved";
    let ev = json!({
        "event_id": uuid::Uuid::new_v4().to_string(),
        "event_type": if approved { "plan_approved" } else { "plan_rejected" },
        "event_family": "pipeline_stage",
        "timestamp": rfc3339(now),
        "pipeline_id": plan_id,
        "stage_id": "plan_review",
        "stage_name": "Plan review (MPLP Confirm)",
        "stage_status": if approved { "completed" } else { "failed" },
        "stage_order": 0,
        "payload": {"confirm_id": confirm_id, "plan_id": plan_id, "decided_by": actor, "reason": reason},
    });
    audit::append(tx, now, "pipeline_stage", Some(confirm_id), actor, &ev)
}

/// The plan and step ids recorded on a call: `(plan_id, step_id, plan_owner)`
/// ([`crate::ConfirmContext`]).
pub(crate) type RecordedIds = (Option<String>, Option<String>, Option<String>);

/// The plan and step ids recorded on `agent`'s call that names `plan_id` and `step_id` (its
/// Confirm context, which its Confirm and events show and by which cancelling a plan finds the
/// calls held under it), with the plan's agent when the plan gates the call now: as named,
/// except that a plan that does not gate the call ([`plan_gates`]: neither the agent's own nor
/// one of the agents in `followed`, those that declare it a local delegate) is not recorded,
/// nor the step named with it ([`plan_block`]): a reviewer never sees the call as a step of
/// such a plan, and its cancellation never reaches it. The plan's agent is recorded so that
/// the plan's stop reaches the call whatever the delegations are by then ([`held_under`],
/// [`plan_of_call`]); none for a plan that does not exist yet. A step named without a plan, or
/// with one that does not exist, is not recorded.
pub(crate) fn recorded_ids(
    tx: Conn<'_>,
    key: &SealKey,
    agent: &str,
    followed: &[String],
    plan_id: Option<&str>,
    step_id: Option<&str>,
) -> db::Result<RecordedIds> {
    // A step named without its plan is not recorded (found by review: it was, and shown as
    // the Confirm's target and trace step, so an agent naming an approved plan's step alone
    // had its call read as that step of the plan).
    let Some(id) = plan_id else {
        return Ok((None, None, None));
    };
    let owner = match read_plan(tx, key, id)? {
        Some(p) if !plan_gates(agent, followed, &p.agent) => return Ok((None, None, None)),
        Some(p) => Some(p.agent),
        None => None,
    };
    // A step of a plan that does not exist is no step of anything (found by review: a made-up
    // plan id beside another plan's step showed the call as that step).
    let step = owner.as_ref().and(step_id.map(str::to_string));
    Ok((Some(id.to_string()), step, owner))
}

/// The gatekeeper duty of seed 000 for `agent`'s tool call that names `plan_id` and/or
/// `step_id`, `followed` being the agents that declare `agent` a local delegate (from the
/// operator's agent files, [`assent_core::policy::Delegations::orchestrators_of`]; never from
/// the request): blocked (the reason returned) while a Confirm whose target is that plan or
/// step is pending, of the calling agent or of the named plan's agent, while the plan is not
/// `approved` or `in_progress`, and when it names a step the plan does not have
/// ([`transitions::plan_has_step`]). A plan gates its own agent's calls and its declared
/// delegates' (an orchestrator's plan gates the sub-agents it delegates to): any other plan
/// is ignored, as if the call named no plan, nor its step ([`plan_gates`]; found by review:
/// any agent could register an unused plan id another agent's calls named, then keep those
/// calls blocked as a draft, or cancel them and the tokens approved under it, knowing only the
/// id). Naming a plan only ever adds a block and the calling agent chooses whether to name one,
/// so ignoring it lets nothing run that the policy alone would not, while refusing the call
/// would hand the squatter the denial of service. Only the calling agent's Confirms and those
/// of the plan's own agent count (found by review: any agent could raise a Confirm naming
/// another agent's plan or step id and so block that agent's calls for as long as it kept one
/// pending): the plan's agent's Confirm blocks every agent its plan gates, a delegate's Confirm
/// blocks only that delegate, never its orchestrator or the other delegates. `None`: not
/// blocked. A [`DAMAGED`] plan blocks every call that names it, whichever agent its row names.
pub(crate) fn plan_block(
    tx: Conn<'_>,
    key: &SealKey,
    agent: &str,
    followed: &[String],
    plan_id: Option<&str>,
    step_id: Option<&str>,
) -> db::Result<Option<String>> {
    let plan = match plan_id {
        Some(id) => read_plan(tx, key, id)?,
        None => None,
    };
    if let Some(p) = plan.as_ref().filter(|p| p.status == DAMAGED) {
        return Ok(Some(format!(
            "plan {}'s stored row does not hold its seal (it was changed in the database behind the gateway's back): its tool calls are blocked",
            p.plan_id
        )));
    }
    // A plan that does not gate this agent is not named at all: neither it nor its step.
    if plan
        .as_ref()
        .is_some_and(|p| !plan_gates(agent, followed, &p.agent))
    {
        return Ok(None);
    }
    let owner = plan.as_ref().map_or(agent, |p| p.agent.as_str());
    for (what, id) in [("plan", plan_id), ("step", step_id)] {
        let Some(id) = id else { continue };
        let pending: Option<String> = tx
            .prepare_cached(
                "SELECT id FROM approvals WHERE target_id = ?1 AND status = 'pending' AND (agent = ?2 OR agent = ?3) ORDER BY requested_at, rowid LIMIT 1",
            )?
            .query_row(params![id, agent, owner], |r| r.get(0))
            .optional()?;
        if let Some(c) = pending {
            return Ok(Some(format!(
                "{what} {id} has a pending Confirm ({c}); its tool calls are blocked until it is approved"
            )));
        }
    }
    if let Some(p) = &plan
        && !transitions::plan_runs_calls(&p.status)
    {
        return Ok(Some(format!(
            "plan {} is {}; its tool calls run only once its Confirm approves it",
            p.plan_id, p.status
        )));
    }
    if let (Some(p), Some(step)) = (&plan, step_id)
        && !transitions::plan_has_step(&p.body, step)
    {
        return Ok(Some(format!(
            "step {step} is not a step of plan {}",
            p.plan_id
        )));
    }
    Ok(None)
}

/// The ids of the calls held under plan `plan_id` (pending approvals whose Confirm context
/// names it, the plan's own Confirm included), oldest first: only those the plan's stop
/// reaches ([`plan_reaches_held`]): the calls of the plan's agent, those the plan gated when
/// they were held (the plan's agent recorded with them: a reload removing the delegation
/// since does not release them) and those of `delegates`, the agents it declares local
/// delegates now ([`assent_core::policy::Delegations::delegates_of`] of the plan's agent), so
/// a plan registered under an id another agent's calls named ([`plan_block`]; rows recorded
/// before that rule, or before the plan existed) never cancels them.
pub(crate) fn held_under(
    conn: Conn<'_>,
    plan_id: &str,
    delegates: &[String],
) -> db::Result<Vec<String>> {
    let rows: Vec<(String, String, Option<String>, String)> = crate::sql::rows(
        conn,
        "SELECT a.id, a.agent, c.plan_owner, p.agent FROM approvals a JOIN confirm_context c ON c.approval_id = a.id \
         JOIN plans p ON p.plan_id = c.plan_id \
         WHERE a.status = 'pending' AND c.plan_id = ?1 ORDER BY a.requested_at",
        params![plan_id],
        db::tuple,
    )?;
    Ok(rows
        .into_iter()
        .filter(|(_, caller, gated_by, owner)| {
            plan_reaches_held(caller, gated_by.as_deref(), owner, delegates)
        })
        .map(|(id, ..)| id)
        .collect())
}

/// The plan approval `aid` was held under and that plan's status, when the plan's stop
/// reaches the call ([`plan_reaches_held`]): its agent's own plan, the plan that gated it when
/// it was held (recorded with it: a reload removing the delegation since does not release
/// its token from the plan's stop), or one of an agent that declares it a local delegate as
/// `delegations` (from the operator's agent files) now say; [`CallPlan::Free`] for a call
/// named under no plan or another agent's ([`plan_block`]; rows recorded before that rule, or
/// before the plan existed). What a token's redemption, a decision and grant coverage check
/// ([`CallPlan::stopped`]). The call's agent and plan ids are those its terms' seal held over
/// under `terms` ([`crate::approval_seal::Holding::agent_and_plan`]; [`CallPlan::Unsealed`]
/// when it does not hold). The plan's row is read with its seal checked under `key`
/// ([`read_plan`]): a [`DAMAGED`] plan reaches every call that names it, whichever agent its
/// row names, and so does a plan recorded with the call (`plan_owner`) whose row is gone (the
/// gateway deletes no plan), or whose row names another agent than the one recorded (the row
/// was deleted and the id registered again). Found by review: `plans.status` set back to
/// `approved` after the plan's stop revived its calls' tokens, and clearing a call's `plan_id`
/// released it.
pub(crate) fn plan_of_call(
    tx: Conn<'_>,
    aid: &str,
    (terms, key, delegations): (&SealKey, &SealKey, &Delegations),
) -> db::Result<CallPlan> {
    let held = crate::approval_seal::holding(tx, terms, aid)?;
    plan_of_held(tx, held, (key, delegations))
}

/// [`plan_of_call`] of the approval whose terms' seal its caller checked already in this
/// transaction, under the approval row's lock ([`crate::approval_seal::holding`]: `None` when
/// it did not hold): one read of the terms serves the caller's check and this one.
pub(crate) fn plan_of_held(
    tx: Conn<'_>,
    held: Option<crate::approval_seal::Holding>,
    (key, delegations): (&SealKey, &Delegations),
) -> db::Result<CallPlan> {
    let Some(held) = held else {
        return Ok(CallPlan::Unsealed);
    };
    let (caller, plan_id, gated_by) = held.agent_and_plan();
    let Some(plan_id) = plan_id else {
        return Ok(CallPlan::Free);
    };
    let Some(p) = read_plan(tx, key, plan_id)? else {
        return Ok(match gated_by {
            Some(_) => CallPlan::Under(plan_id.to_string(), DAMAGED.to_string()),
            None => CallPlan::Free,
        });
    };
    // A row of another agent than the one recorded with the call is not the plan the call was
    // held under (the gateway never changes a plan's agent): the plan's row was deleted and its
    // id taken again (found by review: a stopped plan's row deleted behind the gateway's back,
    // its id registered by another agent, released the calls held under it).
    if p.status == DAMAGED || gated_by.is_some_and(|g| g != p.agent) {
        return Ok(CallPlan::Under(p.plan_id, DAMAGED.to_string()));
    }
    let delegates = delegations.delegates_of(&p.agent);
    Ok(
        if plan_reaches_held(caller, gated_by, &p.agent, delegates) {
            CallPlan::Under(p.plan_id, p.status)
        } else {
            CallPlan::Free
        },
    )
}

/// What [`plan_of_call`] finds of the plan an approval's call was held under.
pub(crate) enum CallPlan {
    /// The approval's terms, which hold the plan ids it was recorded under, do not hold their
    /// seal (or there is no such approval): nothing vouches for which plan reaches it.
    Unsealed,
    /// Held under no plan that reaches it.
    Free,
    /// Held under plan `.0` (its id), whose status is `.1` ([`DAMAGED`] for one whose row
    /// does not hold its seal or is gone).
    Under(String, String),
}

impl CallPlan {
    /// The plan `(id, status)` that stops the call: one that runs no calls
    /// ([`transitions::plan_runs_calls`]), or, for [`CallPlan::Unsealed`], `("(unreadable)",
    /// DAMAGED)`; `None` when nothing stops it.
    pub(crate) fn stopped(self) -> Option<(String, String)> {
        match self {
            CallPlan::Unsealed => Some(("(unreadable)".into(), DAMAGED.to_string())),
            CallPlan::Free => None,
            CallPlan::Under(id, status) => {
                (!transitions::plan_runs_calls(&status)).then_some((id, status))
            }
        }
    }
}

/// The plan id of an MPLP plan `body` and the body as assent stores it: what the agent wrote,
/// without the `status` and `events` assent keeps itself.
fn agent_body(body: &Value) -> (String, Value) {
    let id = body["plan_id"].as_str().unwrap_or_default().to_string();
    let mut body = body.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
        o.remove("events");
    }
    (id, body)
}

impl Store {
    /// Stores a new plan as `draft` for `agent` (`plan.created`). `body` is an MPLP plan the
    /// caller validated; its `status` and `events` are replaced by assent's. `TooManyOpen`
    /// when the agent has `max_open` open plans (`draft` or `proposed`) already (found by
    /// review: nothing bounded an agent's open drafts, each up to the body limit; what it
    /// finished or cancelled is kept, like its approvals).
    pub fn create_plan(
        &self,
        agent: &str,
        session_id: &str,
        body: &Value,
        trace_id: Option<&str>,
        max_open: u64,
        now: i64,
    ) -> Result<PlanRecord, PlanError> {
        let (id, body) = agent_body(body);
        let key = self.seal_key(Sealed::Plan);
        self.write(|tx| {
            if read_plan(**tx, &key, &id)?.is_some() {
                return Err(PlanError::Exists(id));
            }
            let open: i64 = tx.query_row(
                "SELECT count(*) FROM plans WHERE agent = ?1 AND status IN ('draft', 'proposed')",
                [agent],
                |r| r.get(0),
            )?;
            if u64::try_from(open).unwrap_or(0) >= max_open {
                return Err(PlanError::TooManyOpen(max_open));
            }
            let trace = trace_id
                .map(str::to_string)
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            tx.prepare_cached("INSERT INTO plans (plan_id, agent, session_id, status, body, trace_id, created_at, updated_at) VALUES (?1,?2,?3,'draft',?4,?5,?6,?6)")?
                .execute(params![id, agent, session_id, body.to_string(), trace, now])?;
            seal(**tx, &key, &id)?;
            let created = json!({"agent": agent, "session_id": session_id});
            let d = self.delegations();
            let step = ("draft", "plan.created");
            transition(**tx, (&key, &d), &id, step, agent, created, now)?
                .ok_or_else(|| PlanError::WrongState(DAMAGED.into(), DAMAGED_WHY))
        })
    }

    /// Replaces the body of a `draft` plan of `agent` (`plan.updated`), e.g. revised after a
    /// rejection; `NotOwner` for another agent's plan. The same body again changes nothing (no event, no audit record); a
    /// revision that would leave no room for a cancellation within [`MAX_PLAN_EVENTS`] is
    /// refused (`WrongState`).
    pub fn update_plan(
        &self,
        agent: &str,
        body: &Value,
        now: i64,
    ) -> Result<PlanRecord, PlanError> {
        let (id, body) = agent_body(body);
        let key = self.seal_key(Sealed::Plan);
        self.write(|tx| {
            let p = read_plan_to_change(**tx, &key, &id)?
                .ok_or_else(|| PlanError::NotFound(id.clone()))?;
            if p.status == DAMAGED {
                return Err(PlanError::WrongState(p.status, DAMAGED_WHY));
            }
            if p.agent != agent {
                return Err(PlanError::NotOwner(id));
            }
            if !transitions::plan_editable(&p.status) {
                return Err(PlanError::WrongState(
                    p.status,
                    "only a draft can be revised",
                ));
            }
            // Each revision rewrites the plan's whole event list inside the one writer that
            // every agent's writes share: an agent re-sending its plan in a loop grew it
            // without bound (found by review). The same body again is no revision, and a
            // revision or a submission (`room_to_submit`) is refused when it would leave no
            // room for what may follow it: a plan holds at most MAX_PLAN_EVENTS events.
            if p.body == body {
                return Ok(p);
            }
            if !transitions::plan_has_room(p.events.len(), PlanGrowth::Revision) {
                return Err(PlanError::WrongState(
                    p.status,
                    "revised too often (256 events): create a new plan",
                ));
            }
            let d = self.delegations();
            let text = body.to_string();
            transition_from(
                **tx,
                (&key, &d),
                (p, Some((text, body))),
                ("draft", "plan.updated"),
                agent,
                json!({}),
                now,
            )?
            .ok_or_else(|| PlanError::WrongState(DAMAGED.into(), DAMAGED_WHY))
        })
    }

    /// Reads one plan; its status is [`DAMAGED`] when its row does not hold its seal.
    pub fn plan(&self, id: &str) -> Result<Option<PlanRecord>, StoreError> {
        let key = self.seal_key(Sealed::Plan);
        Ok(read_plan(self.lock().conn(), &key, id)?)
    }

    /// The `pipeline_stage` events of a plan's decisions (seed 001 §4.3), oldest first: the
    /// stage records of the plan's Confirms (approvals whose `target_id` is the plan; an
    /// indexed lookup instead of SQLite's `json_extract`), kept when their `pipeline_id` is
    /// the plan. The `kind` term is written as the partial index `audit_approval` has it
    /// (migration 0031).
    pub fn pipeline_events(&self, plan_id: &str) -> Result<Vec<Value>, StoreError> {
        let mut events = crate::sql::json_values(
            self.lock().conn(),
            "SELECT data FROM audit WHERE kind = 'pipeline_stage' AND approval_id IN (SELECT id FROM approvals WHERE target_id = ?1) ORDER BY seq",
            [plan_id],
        )?;
        events.retain(|e| e["pipeline_id"].as_str() == Some(plan_id));
        Ok(events)
    }
}
