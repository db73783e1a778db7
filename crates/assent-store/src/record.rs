//! The strict reader of a stored approval (`read_approval`: unreadable columns are named in
//! `damaged`, issue 10 §8) and of its rows (`approval_row`, `decisions_of`), filling the types
//! of `approval_record.rs` (re-exported here). It writes nothing, and names no
//! [`crate::Store`] (the read-only approval queries are `reads.rs`), so the events that borrow
//! a record sit below the store.

pub(crate) use crate::approval_record::StoredVote;
pub use crate::approval_record::{
    ApprovalRecord, DecisionRecord, EditedCall, TokenInfo, VoteRecord,
};
use crate::db::{self, Conn, OptionalExtension, Row, ValueRef};
use crate::sql::{self, from_row};
use crate::stored::{self, Settlement};
use assent_core::approval::{ApprovalStatus, DecisionKind, DefaultDecision, GrantScope};
use assent_core::decision::most_restrictive as worst;
use assent_core::escalation::{Escalation, EscalationStep, Schedule, ScheduledStep};
use assent_core::gatekeeper::ApprovalTerms;
use assent_core::passkey::PasskeyProof;
use assent_core::quorum::{DenyRule, Quorum, QuorumGroup};
use assent_core::{RiskTier, ToolCall};
use serde_json::Value;

/// Reads approval `id` with its decisions and token strictly ([`ApprovalRecord::damaged`]).
pub(crate) fn read_approval(conn: Conn<'_>, id: &str) -> db::Result<Option<ApprovalRecord>> {
    let rec = conn
        .prepare_cached("SELECT id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status, decided_at,
            run_id, device_id, group_key, human_summary, triggers, suggested_alternatives, escalate_to, escalate_after_ms, escalated_at, output_bytes, scope, grant_id, edited_arguments, edited_canonical, edited_hash,
            trace_id, span_id, target_type, target_id, reply_token, target_diff, in_client, side_effects, rollback, dry_run_tool, redact, quorum, on_behalf_of, separation_of_duties,
            escalation, escalation_schedule, escalation_steps, require_passkey,
            (SELECT policy_set_sha256 FROM confirm_context WHERE confirm_context.approval_id = approvals.id), traceparent
            FROM approvals WHERE id = ?1")?.query_row(
            [id],
            approval_row,
        )
        .optional()?;
    let Some(mut rec) = rec else { return Ok(None) };
    for (d, damaged) in decisions_of(conn, id)? {
        rec.damaged.extend(damaged);
        rec.decisions.push(d);
    }
    let votes = sql::rows(
        conn,
        "SELECT principal, decision, roles, reason, at, passkey, approval_id, seal, key_binding FROM votes WHERE approval_id = ?1 ORDER BY rowid",
        [id],
        vote_row,
    )?;
    for (v, damaged) in votes {
        rec.damaged.extend(damaged);
        rec.votes.push(v);
    }
    rec.token = conn
        // A token row for another agent than the approval's is not this approval's token: the
        // seal is checked against the approval's agent ([`crate::Store::vouched`]), and the
        // token is signed and redeemed for the row's (found by review: a row whose agent was
        // edited read as minted though nothing would sign or redeem it).
        .prepare_cached("SELECT token_id, expires_at, used_at, issued_at, scope, device_id, call_hash, seal FROM tokens WHERE approval_id = ?1 AND agent = ?2")?
        .query_row(crate::params![id, rec.agent], |r| {
            from_row!(r => TokenInfo {
                token_id, expires_at, used_at, issued_at, scope, device_id, call_hash, seal
            })
        })
        .optional()?;
    settled_yet_pending(&mut rec);
    Ok(Some(rec))
}

/// The decisions on approval `id`, oldest first, each with the columns found unreadable
/// ([`decision_row`]).
pub(crate) fn decisions_of(
    conn: Conn<'_>,
    id: &str,
) -> db::Result<Vec<(DecisionRecord, Vec<String>)>> {
    sql::rows(
        conn,
        "SELECT decision, reason, actor, at, default_applied, decision_id, passkey FROM decisions WHERE approval_id = ?1 ORDER BY rowid",
        [id],
        decision_row,
    )
}

/// Attack: a settled approval set back to `pending` in the database — a denied call whose
/// sealed default is `approve`, then approved by the expiry sweep with no one deciding, or a
/// denial undone for another operator to approve. The seal of its terms still holds (the row
/// was put back as it was when held), but settling left what a pending approval never has: a
/// decision row, a `decided_at`, a decided scope or an edit (found by review: an edit planted
/// on a pending call was signed into its receipt). Such an approval is damaged
/// (`status.settled`): nobody may decide it and the sweep leaves it alone (a token row left
/// behind refuses approving only: `decide::admit`). Undoing all of that too is a row put back
/// as it was, which no seal can stop: `audit verify` finds it (the chain holds the settling
/// record). An unreadable scope (read as its most restrictive value) is damaged already.
fn settled_yet_pending(rec: &mut ApprovalRecord) {
    let scope = rec.scope.is_some() && !rec.damaged.iter().any(|d| d == "scope");
    let settled = scope || rec.edited.is_some() || rec.decided_at.is_some();
    let settled = settled || !rec.decisions.is_empty();
    if rec.status == ApprovalStatus::Pending && settled {
        rec.damaged.push("status.settled".into());
    }
}

/// One `approvals` row (columns in `read_approval`'s SELECT order) read strictly: unreadable
/// columns are named in `damaged` and hold their most restrictive value ([`stored::Columns`]).
/// `decisions` and `token` are left empty. `Err` only for a wrong column index or a
/// NOT NULL integer/text column of the wrong type.
pub(crate) fn approval_row(r: &Row<'_>) -> db::Result<ApprovalRecord> {
    let mut c = stored::Columns::default();
    let terms = terms_of(r, &mut c)?;
    let arguments = c.json(r, 5, "arguments", Value::Null)?;
    let status = c.parsed(r, 16, "status", ApprovalStatus::parse, worst::STATUS)?;
    let scope = c.parsed_opt(
        r,
        28,
        "scope",
        |s| GrantScope::parse(s).ok(),
        Some(worst::SCOPE),
    )?;
    let edited = edited_call(r, &mut c)?;
    let expires_at: i64 = r.get(15)?;
    let escalated_at: Option<i64> = r.get(26)?;
    let (escalation_schedule, escalation_steps) =
        schedule_of(r, &mut c, &terms, expires_at, escalated_at)?;
    let target_diff = c.parsed_opt(r, 38, "target_diff", |d| serde_json::from_str(d).ok(), None)?;
    Ok(ApprovalRecord {
        id: r.get(0)?,
        agent: r.get(1)?,
        session_id: r.get(2)?,
        call: ToolCall {
            tool: r.get(3)?,
            server: r.get(4)?,
            arguments,
        },
        canonical: r.get(6)?,
        call_hash: r.get(7)?,
        terms,
        requested_at: r.get(14)?,
        expires_at,
        status,
        decided_at: r.get(17)?,
        decisions: Vec::new(),
        votes: Vec::new(),
        token: None,
        on_behalf_of: r.get(45)?,
        run_id: r.get(18)?,
        device_id: r.get(19)?,
        group_key: r.get(20)?,
        human_summary: r.get(21)?,
        escalated_at,
        escalation_schedule,
        escalation_steps,
        scope,
        grant_id: r.get(29)?,
        edited,
        trace_id: r.get::<Option<String>>(33)?.unwrap_or_default(),
        span_id: r.get::<Option<String>>(34)?.unwrap_or_default(),
        target_type: r.get(35)?,
        target_id: r.get::<Option<String>>(36)?.unwrap_or_default(),
        reply_token: r.get(37)?,
        target_diff,
        policy_set_sha256: r.get(51)?,
        traceparent: r.get(52)?,
        damaged: c.damaged,
    })
}

/// The [`ApprovalTerms`] columns of one `approvals` row, read strictly into `c`.
fn terms_of(r: &Row<'_>, c: &mut stored::Columns) -> db::Result<ApprovalTerms> {
    let reasons = c.json(r, 11, "reasons", Vec::new())?;
    let approvers = c.json(
        r,
        12,
        "approvers",
        vec![stored::UNREADABLE_ROLE.to_string()],
    )?;
    let risk_tier = c.parsed(r, 9, "risk_tier", RiskTier::parse, worst::RISK_TIER)?;
    let default_decision = c.parsed(
        r,
        13,
        "default_decision",
        DefaultDecision::parse,
        worst::DEFAULT_DECISION,
    )?;
    let escalation = escalation_of(r, c)?;
    let output_bytes = c.count(r, 27, "output_bytes", 0)?;
    let triggers = c.list(r, 22, "triggers")?;
    let suggested_alternatives = c.list(r, 23, "suggested_alternatives")?;
    let side_effects = c.list(r, 40, "side_effects")?;
    let rollback = c.list(r, 41, "rollback")?;
    let redact = c.list(r, 43, "redact")?;
    let quorum = c.parsed_opt(
        r,
        44,
        "quorum",
        |q| serde_json::from_str(q).ok(),
        Some(Quorum {
            groups: vec![QuorumGroup {
                roles: vec![stored::UNREADABLE_ROLE.to_string()],
                count: 1,
                // No escalation step opens an unreadable quorum to the roles it adds.
                escalation: Some(Vec::new()),
            }],
            deny: DenyRule::Any,
        }),
    )?;
    Ok(ApprovalTerms {
        message: r.get(8)?,
        reasons,
        risk_tier,
        irreversible: r.get(10)?,
        default_decision,
        approvers,
        quorum,
        triggers,
        suggested_alternatives,
        escalation,
        output_bytes,
        in_client_approval: r.get(39)?,
        separation_of_duties: r.get(46)?,
        require_passkey: r.get(50)?,
        side_effects,
        rollback,
        dry_run_tool: r.get(42)?,
        redact,
    })
}

/// One `votes` row (`principal, decision, roles, reason, at`) read strictly, with the names
/// of its unreadable columns (`votes.decision`, `votes.roles`).
fn vote_row(r: &Row<'_>) -> db::Result<(VoteRecord, Vec<String>)> {
    let mut c = stored::Columns::default();
    let v = VoteRecord {
        principal: r.get(0)?,
        decision: c.parsed(
            r,
            1,
            "votes.decision",
            DecisionKind::parse,
            DecisionKind::Deny,
        )?,
        roles: c.json(r, 2, "votes.roles", Vec::new())?,
        reason: r.get(3)?,
        at: r.get(4)?,
        passkey: c.parsed_opt(r, 5, "votes.passkey", proof, None)?,
        sealed: StoredVote::read(r)?,
    };
    Ok((v, c.damaged))
}

/// One `decisions` row (`decision, reason, actor, at, default_applied, decision_id`) read
/// strictly, with the names of its unreadable columns (`decisions.decision`,
/// `decisions.default_applied`).
pub(crate) fn decision_row(r: &Row<'_>) -> db::Result<(DecisionRecord, Vec<String>)> {
    let mut c = stored::Columns::default();
    let d = DecisionRecord {
        decision: c.parsed(
            r,
            0,
            "decisions.decision",
            Settlement::parse,
            Settlement::Deny,
        )?,
        reason: r.get(1)?,
        actor: r.get(2)?,
        at: r.get(3)?,
        default_applied: c.parsed_opt(
            r,
            4,
            "decisions.default_applied",
            DefaultDecision::parse,
            Some(worst::DEFAULT_DECISION),
        )?,
        decision_id: r.get::<Option<String>>(5)?.unwrap_or_default(),
        passkey: c.parsed_opt(r, 6, "decisions.passkey", proof, None)?,
    };
    Ok((d, c.damaged))
}

/// A stored passkey proof (JSON); `None` when it does not parse.
fn proof(s: &str) -> Option<PasskeyProof> {
    serde_json::from_str(s).ok()
}

/// The operator's edit stored with the approval (`edited_arguments`, read strictly, with
/// `edited_canonical` and `edited_hash`, columns 30–32); `None` unless all three are present.
fn edited_call(r: &Row<'_>, c: &mut stored::Columns) -> db::Result<Option<EditedCall>> {
    let edited_args = c.parsed_opt(
        r,
        30,
        "edited_arguments",
        |a| {
            serde_json::from_str::<Value>(a)
                .ok()
                .map(|v| (v, a.to_string()))
        },
        None,
    )?;
    Ok(
        match (
            edited_args,
            r.get::<Option<String>>(31)?,
            r.get::<Option<String>>(32)?,
        ) {
            (Some((arguments, a)), Some(c), Some(h)) => Some(EditedCall {
                arguments,
                canonical_arguments: a,
                canonical: c,
                call_hash: h,
            }),
            _ => None,
        },
    )
}

/// The approval's escalation as its rules gave it: the `escalation` column (issue 14 §3), or
/// for a row written before it, the `on_timeout` of `escalate_to` and `escalate_after_ms`.
fn escalation_of(r: &Row<'_>, c: &mut stored::Columns) -> db::Result<Option<Escalation>> {
    if !matches!(r.get_ref(47)?, ValueRef::Null) {
        let worst = Escalation {
            steps: Vec::new(),
            last_wait_seconds: None,
        };
        return c.parsed_opt(
            r,
            47,
            "escalation",
            |s| serde_json::from_str(s).ok(),
            Some(worst),
        );
    }
    let escalate_to = c.list(r, 24, "escalate_to")?;
    Ok(c.count(r, 25, "escalate_after_ms", 0)?
        .map(|ms| Escalation {
            steps: vec![EscalationStep {
                after_seconds: None,
                approvers: escalate_to,
            }],
            last_wait_seconds: Some(ms / 1000),
        }))
}

/// The approval's escalation schedule and the steps taken: the `escalation_schedule` and
/// `escalation_steps` columns, or for a row written before them, its one `on_timeout` step at
/// the first wait's end (taken when `escalated_at` is set). An unreadable schedule is `None`
/// and damages the record; a step count beyond the schedule damages it too.
fn schedule_of(
    r: &Row<'_>,
    c: &mut stored::Columns,
    terms: &ApprovalTerms,
    expires_at: i64,
    escalated_at: Option<i64>,
) -> db::Result<(Option<Schedule>, usize)> {
    if matches!(r.get_ref(48)?, ValueRef::Null) {
        // An escalation written since chains always has its schedule: a nulled one would
        // skip every step and the real deadline.
        if !matches!(r.get_ref(47)?, ValueRef::Null) {
            if !c.damaged.iter().any(|d| d == "escalation") {
                c.damaged.push("escalation_schedule".into());
            }
            return Ok((None, 0));
        }
        // Without a schedule no step can have been counted.
        if c.count(r, 49, "escalation_steps", 0)?
            .is_some_and(|n| n > 0)
        {
            c.damaged.push("escalation_steps".into());
        }
        // `escalation_of` read (and judged) this column already.
        let legacy = match r.get_ref(25)? {
            ValueRef::Int(n) if n >= 0 => Some(n),
            _ => None,
        };
        let (Some(ms), Some(e)) = (legacy, &terms.escalation) else {
            return Ok((None, 0));
        };
        let approvers = e
            .steps
            .first()
            .map(|s| s.approvers.clone())
            .unwrap_or_default();
        let (at, deadline) = match escalated_at {
            None => (expires_at, expires_at.saturating_add(ms)),
            Some(_) => (expires_at.saturating_sub(ms), expires_at),
        };
        let steps = vec![ScheduledStep { at, approvers }];
        let legacy = Schedule::new(steps, deadline);
        return Ok((Some(legacy), escalated_at.is_some() as usize));
    }
    let parse = |s: &str| serde_json::from_str::<Schedule>(s).ok();
    let schedule = c.parsed_opt(r, 48, "escalation_schedule", parse, None)?;
    let taken = c.count(r, 49, "escalation_steps", 0)?.unwrap_or(0);
    let max = schedule.as_ref().map_or(0, |s| s.steps.len());
    let taken = match usize::try_from(taken) {
        Ok(n) if n <= max => n,
        _ => {
            c.damaged.push("escalation_steps".into());
            max
        }
    };
    // A schedule someone edited out of shape (steps out of order, a deadline before the last
    // step, an `expires_at` that is not the next step or the deadline) is not trusted.
    if let Some(s) = &schedule
        && !consistent(s, taken, expires_at)
    {
        c.damaged.push("escalation_schedule".into());
    }
    Ok((schedule, taken))
}

/// Whether schedule `s` with `taken` steps done is one the gateway could have written for an
/// approval now due at `expires_at`: steps strictly in time order, the deadline not before
/// the last step, and `expires_at` the next step (or the deadline).
fn consistent(s: &Schedule, taken: usize, expires_at: i64) -> bool {
    let ordered = s.steps.windows(2).all(|w| w[0].at < w[1].at);
    let last = s.steps.last().map_or(i64::MIN, |l| l.at);
    ordered && s.deadline >= last && s.next(taken) == expires_at
}
