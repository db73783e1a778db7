//! Deciding a held approval (seed 002 decisions, MPLP Confirm): an operator's approve or
//! deny with its options ([`DecisionInput`]), cancelling, and the one transition every
//! settlement goes through (`apply`: damaged and approver checks, the first event wins, the
//! decision row, MPLP and AAEP records, the token and the grant). The rules it applies are
//! `assent_core` functions; expiry calls `apply` from `expiry.rs`.

use crate::aaep;
use crate::audit;
use crate::error::DecideError;
use crate::mplp::mplp_event;
use crate::plans;
use crate::record::{ApprovalRecord, EditedCall, read_approval};
use crate::store::Store;
use crate::stored;
use assent_core::RiskTier;
use assent_core::approval::{self, ApprovalStatus, DecisionKind, Event, GrantScope};
use rusqlite::{TransactionBehavior, params};
use serde_json::json;

/// An operator decision with the seed 002 options.
#[derive(Debug, Clone, Default)]
pub struct DecisionInput {
    /// Approve or deny (`None` is not allowed; use [`DecisionInput::approve`] / `deny`).
    pub kind: Option<DecisionKind>,
    /// Reason; reaches the agent on a deny.
    pub reason: Option<String>,
    /// Scope of an approval (once when omitted).
    pub scope: GrantScope,
    /// Widen a grant from the exact arguments to every call of the tool.
    pub whole_tool: bool,
    /// Explicit confirmation for `workspace` on an R3/R4 tool.
    pub confirm_workspace: bool,
    /// Approve with these arguments instead.
    pub edited: Option<EditedCall>,
    /// The `thresholds.output_bytes` of the edited call, if a rule names one: the approval's
    /// result limit becomes the smaller of the two.
    pub edited_output_bytes: Option<u64>,
}

impl DecisionInput {
    /// Approve once.
    pub fn approve() -> Self {
        Self {
            kind: Some(DecisionKind::Approve),
            ..Default::default()
        }
    }
    /// Deny with an optional reason.
    pub fn deny(reason: Option<&str>) -> Self {
        Self {
            kind: Some(DecisionKind::Deny),
            reason: reason.map(str::to_string),
            ..Default::default()
        }
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
        let kind = d
            .kind
            .ok_or_else(|| DecideError::Invalid("decision is required".into()))?;
        if kind == DecisionKind::Deny && (d.scope.is_grant() || d.edited.is_some() || d.whole_tool)
        {
            return Err(DecideError::Invalid(
                "scope, whole_tool and arguments apply to approvals only".into(),
            ));
        }
        if d.whole_tool && !d.scope.is_grant() {
            return Err(DecideError::Invalid(
                "whole_tool widens a grant: give a scope other than once".into(),
            ));
        }
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

    /// [`Store::cancel`] by an operator holding `roles` (`None`: the agent itself). Cancelling
    /// is a way of saying no, so an operator may cancel only an approval they could decide
    /// ([`approval::may_decide`]); otherwise `NotApprover`, audited `decision.refused`.
    pub fn cancel_as(
        &self,
        id: &str,
        reason: Option<&str>,
        actor: &str,
        roles: Option<&[String]>,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        self.apply(id, Event::Cancel, None, reason, actor, roles, now)
    }

    /// Moves approval `id` out of `pending`. `roles`: the deciding operator's roles, checked
    /// against the approval's approver roles (`None` for expiry and cancellation).
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
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some(rec) = read_approval(&tx, id)? else {
            return Err(DecideError::NotFound);
        };
        if !rec.damaged.is_empty() {
            audit::append(
                &tx,
                now,
                "decision.refused",
                Some(id),
                actor,
                &json!({"decision": approval_event_name(event), "why": "the stored approval is damaged (unreadable columns)", "damaged": rec.damaged}),
            )?;
            tx.commit()?;
            return Err(DecideError::Damaged(rec.damaged));
        }
        if let Some(roles) = roles {
            let approvers = &rec.approvers;
            if !approval::may_decide(approvers, roles) {
                audit::append(
                    &tx,
                    now,
                    "decision.refused",
                    Some(id),
                    actor,
                    &json!({"decision": approval_event_name(event), "why": "operator lacks an approver role", "approvers": approvers}),
                )?;
                tx.commit()?;
                return Err(DecideError::NotApprover(approvers.clone()));
            }
        }
        let status = rec.status;
        let name = approval_event_name(event);
        let next = match approval::transition(status, event) {
            Ok(s) => s,
            Err(e) => {
                audit::append(
                    &tx,
                    now,
                    "decision.late",
                    Some(id),
                    actor,
                    &json!({"decision": name, "reason": reason, "status": status}),
                )?;
                tx.commit()?;
                return Err(e.into());
            }
        };
        let scope = input.map(|d| d.scope).unwrap_or_default();
        if rec.target_type != "other"
            && (scope != GrantScope::Once || input.is_some_and(|d| d.edited.is_some()))
        {
            return Err(DecideError::Invalid(format!(
                "a Confirm on a {} is decided once, as submitted: no scope and no edits",
                rec.target_type
            )));
        }
        if rec.irreversible && scope.is_grant() {
            return Err(DecideError::Invalid(
                "an irreversible action is approved once, with explicit consent each time (seed 001): no session, duration or workspace scope".into(),
            ));
        }
        let discouraged = scope == GrantScope::Workspace && rec.risk_tier >= RiskTier::R3;
        if discouraged && !input.is_some_and(|d| d.confirm_workspace) {
            return Err(DecideError::WorkspaceNeedsConfirmation(
                rec.risk_tier.to_string(),
            ));
        }
        let default_applied = match event {
            Event::Expire(d) => Some(d.as_str()),
            _ => None,
        };
        let edited = input.and_then(|d| d.edited.as_ref());
        if let Some(e) = edited.filter(|_| event == Event::Decide(DecisionKind::Approve)) {
            // What ran is the edit: later thresholds count its arguments, and its own result
            // limit applies too.
            tx.prepare_cached("UPDATE usage SET arguments = ?2 WHERE approval_id = ?1")?
                .execute(params![id, e.canonical_arguments])?;
            if let Some(limit) = input.and_then(|d| d.edited_output_bytes) {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                tx.prepare_cached("UPDATE approvals SET output_bytes = min(coalesce(output_bytes, ?2), ?2) WHERE id = ?1")?
                    .execute(params![id, limit])?;
            }
        }
        let mints = approval::mints_token(event);
        let scope_wire = mints.then(|| scope.to_wire());
        tx.prepare_cached("UPDATE approvals SET status = ?2, decided_at = ?3, scope = ?4, edited_arguments = ?5, edited_canonical = ?6, edited_hash = ?7 WHERE id = ?1 AND status = 'pending'")?.execute(
            params![id, next.as_str(), now, scope_wire, edited.map(|e| &e.canonical_arguments),
                    edited.map(|e| &e.canonical), edited.map(|e| &e.call_hash)],
        )?;
        let decision_id = uuid::Uuid::new_v4().to_string();
        tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at, default_applied, decision_id) VALUES (?1,?2,?3,?4,?5,?6,?7)")?.execute(
            params![id, name, reason, actor, now, default_applied, decision_id],
        )?;
        let mplp_status = match next {
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Cancelled => "cancelled",
            ApprovalStatus::Expired if approval::mints_token(event) => "approved",
            _ => "rejected",
        };
        mplp_event(
            &tx,
            now,
            &format!("confirm.{mplp_status}"),
            id,
            &rec.trace_id,
            actor,
            json!({"confirm_id": id, "decision_id": decision_id, "status": mplp_status, "decided_by_role": actor, "reason": reason}),
        )?;
        let kind = match event {
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
        audit::append(&tx, now, kind, Some(id), actor, &data)?;
        if mints {
            let hash = edited.map_or(rec.call_hash.as_str(), |e| &e.call_hash);
            let scope_wire = scope.to_wire();
            if scope.is_grant() {
                let gid = uuid::Uuid::new_v4().to_string();
                let whole = input.is_some_and(|d| d.whole_tool);
                let expires =
                    match scope {
                        GrantScope::Duration(s) => Some(now.saturating_add(
                            i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX),
                        )),
                        _ => None,
                    };
                let session = (scope == GrantScope::Session).then_some(&rec.session_id);
                tx.prepare_cached("INSERT INTO grants (id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)")?
                    .execute(params![gid, rec.agent, session, rec.call.tool, rec.call.server, (!whole).then_some(hash),
                        scope_wire, rec.risk_tier.as_str(), discouraged, id, actor, now, expires])?;
                tx.prepare_cached("UPDATE approvals SET grant_id = ?2 WHERE id = ?1")?
                    .execute(params![id, gid])?;
                audit::append(
                    &tx,
                    now,
                    "grant.created",
                    Some(id),
                    actor,
                    &json!({
                    "grant_id": gid, "agent": rec.agent, "session_id": session, "tool": rec.call.tool,
                    "server": rec.call.server, "call_hash": (!whole).then_some(hash), "whole_tool": whole,
                    "scope": scope_wire, "expires_at": expires, "discouraged": discouraged}),
                )?;
            }
            self.mint(
                &tx,
                id,
                &rec.agent,
                hash,
                &scope_wire,
                rec.device_id.as_deref(),
                actor,
                now,
            )?;
        }
        if rec.target_type == "plan" {
            plans::on_confirm_decided(&tx, id, &rec.target_id, mplp_status, actor, reason, now)?;
        }
        let rec = read_approval(&tx, id)?.expect("exists");
        aaep::emit(&tx, &aaep::resolution(&rec, now, None), None, Some(id), now)?;
        tx.commit()?;
        Ok(rec)
    }

    /// Cancels a plan (`plan.cancelled`): a `proposed` plan through its pending Confirm (which
    /// is cancelled and recorded), any other plan not yet finished directly.
    pub fn cancel_plan(
        &self,
        id: &str,
        agent: Option<&str>,
        reason: Option<&str>,
        actor: &str,
        now: i64,
    ) -> Result<plans::PlanRecord, plans::PlanError> {
        let p = self
            .plan(id)?
            .filter(|p| agent.is_none_or(|a| a == p.agent))
            .ok_or_else(|| plans::PlanError::NotFound(id.to_string()))?;
        if let (true, Some(c)) = (p.status == "proposed", &p.confirm_id) {
            match self.cancel(c, reason, actor, now) {
                Ok(_) | Err(DecideError::AlreadyDecided(_)) => {}
                Err(DecideError::Store(e)) => return Err(e.into()),
                Err(e) => return Err(crate::error::StoreError::Invalid(e.to_string()).into()),
            }
        }
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let p =
            plans::read_plan(&tx, id)?.ok_or_else(|| plans::PlanError::NotFound(id.to_string()))?;
        match p.status.as_str() {
            "cancelled" => {}
            "completed" | "failed" => {
                return Err(plans::PlanError::WrongState(
                    p.status,
                    "a finished plan cannot be cancelled",
                ));
            }
            _ => plans::transition(
                &tx,
                id,
                "cancelled",
                "plan.cancelled",
                actor,
                json!({"reason": reason}),
                now,
            )?,
        }
        let p = plans::read_plan(&tx, id)?.expect("exists");
        tx.commit()?;
        Ok(p)
    }
}
