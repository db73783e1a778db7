//! The seal of an approval's terms ([`crate::seal`], migration 0029): what it was held under and
//! what its token will bind, fixed when it is held — id, agent, session, device, call hash and
//! canonical call, risk tier, irreversibility, default decision, quorum, passkey, separation of
//! duties, in-client approval, `on_behalf_of`, target and request time. An approval whose seal
//! does not hold (its row planted or edited by whoever can write the database but not read
//! `keys_dir`) is never approved: an operator's approval is refused as damaged, and its expiry
//! rejects whatever its stored default says; it can still be denied or cancelled. Found by
//! review: a pending call's stored default turned to `approve` and its deadline to the past had
//! the expiry sweep mint a genuine token, and a device binding removed from a pending call made
//! the operator's approval mint a token for any device.
//!
//! The seal also covers who may decide and when ([`Standing`]: the approvers, `expires_at` and
//! the escalation columns), which only the gateway's escalation step changes, sealing the row
//! again as it does. Before, a writer could add their own role to a pending call's approvers
//! for an operator without it to approve, or bring its default forward. It covers the AAEP
//! reply token too, by which alone an operator's reply names the approval (found by review:
//! a token moved onto another pending call had the reply approve that call). Rows sealed
//! before had their seals voided by migrations 0033 and 0034: they can be denied or expire,
//! not be approved. Since migration 0035 it covers the governance recorded when the call was
//! held (`confirm.rs`: the policies and policy set its receipt names; found by review: they
//! were signed into receipts unsealed); a seal from before, without them, still serves
//! deciding ([`holds`]) but no receipt ([`holds_whole`]).
//!
//! Since this gateway's version the seal also covers what an approver is shown of the call
//! beside it ([`Shown`]: the message, reasons, triggers, human summary, side effects,
//! rollback, alternatives, target diff, dry-run tool and redacted paths), which nothing
//! changes after the call is held (found by review: a database writer rewrote a held
//! destructive call's message, summary and side effects to harmless ones, and the card showed
//! them next to the Decide form). A seal of an earlier form (a call held before) still serves
//! deciding and its receipt; only those calls' shown text is not vouched for.
//!
//! Since migration 0058 it covers the MPLP plan and step the call named and the plan's agent
//! recorded with it (`confirm_context.plan_id`, `step_id`, `plan_owner`: [`PlanIds`]), by which
//! a plan's stop reaches the call and its token (found by review: clearing them on one approval
//! released its token from the stop). A seal of an earlier form still serves; those calls'
//! plan ids are not vouched for.
//!
//! On PostgreSQL each statement of a write transaction sees the latest commits, so the seal is
//! checked on the row as [`lock`]ed for the transaction (found by review: a row edited, read,
//! then put back before the seal's own read passed the check with the edited values).

use crate::db::{self, Conn, OptionalExtension as _};
use crate::seal::SealKey;
use serde_json::{Value, json};

/// An approval's sealed terms, as stored.
#[derive(Clone, Copy)]
pub(crate) struct Terms<'a> {
    pub id: &'a str,
    pub agent: &'a str,
    pub session_id: &'a str,
    pub device_id: Option<&'a str>,
    pub call_hash: &'a str,
    pub canonical: &'a str,
    pub risk_tier: &'a str,
    pub irreversible: bool,
    pub default_decision: &'a str,
    /// The stored `quorum` column (JSON text), if any.
    pub quorum: Option<&'a str>,
    pub require_passkey: bool,
    pub separation_of_duties: bool,
    pub in_client: bool,
    pub on_behalf_of: Option<&'a str>,
    pub target_type: &'a str,
    pub target_id: &'a str,
    pub requested_at: i64,
    /// The AAEP confirmation's `reply_token`: an operator's reply names the approval by it
    /// alone (found by review: a token moved onto another pending call in the database had
    /// the reply approve that call).
    pub reply_token: Option<&'a str>,
    /// Who may decide it and when.
    pub standing: Standing<'a>,
    /// The governance recorded when it was held (`confirm.rs`, migration 0035): the
    /// `policies` (JSON text) and `policy_set_sha256` its receipt names; `None` when none was
    /// recorded.
    pub governance: (Option<&'a str>, Option<&'a str>),
    /// What an approver is shown of the call beside it.
    pub shown: Shown<'a>,
    /// The plan ids recorded with it (`confirm.rs`, migration 0058).
    pub plan: PlanIds<'a>,
}

/// The MPLP `plan_id`, `step_id` and `plan_owner` recorded with a held call
/// ([`crate::ConfirmContext`]), as stored; all `None` when none were.
pub(crate) type PlanIds<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>);

/// What an approver is shown of a held call beside the call itself, as stored (each column's
/// text; JSON text for the lists): written when the call is held, changed by nothing after.
#[derive(Clone, Copy, Default)]
pub(crate) struct Shown<'a> {
    pub message: Option<&'a str>,
    pub reasons: Option<&'a str>,
    pub triggers: Option<&'a str>,
    pub human_summary: Option<&'a str>,
    pub side_effects: Option<&'a str>,
    pub rollback: Option<&'a str>,
    pub suggested_alternatives: Option<&'a str>,
    pub target_diff: Option<&'a str>,
    pub dry_run_tool: Option<&'a str>,
    pub redact: Option<&'a str>,
}

/// The forms of an approval's seal, oldest first: each covers what the one before did, and
/// more. Only [`Form::Plan`] is written now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// Migration 0034's: terms and standing.
    Standing,
    /// Migration 0035's: and the governance recorded when the call was held.
    Governance,
    /// This gateway's before migration 0058: and what an approver is shown ([`Shown`]).
    Shown,
    /// Today's: and the plan ids recorded with the call ([`PlanIds`]).
    Plan,
}

/// Who may decide a pending approval and when its default applies, as stored: what the
/// gateway's escalation steps change (`expiry.rs`), and nothing else does.
#[derive(Clone, Copy)]
pub(crate) struct Standing<'a> {
    /// The `approvers` column (JSON text).
    pub approvers: &'a str,
    /// Unix ms: the next escalation step or the deadline.
    pub expires_at: i64,
    /// The `escalate_to` column (JSON text) of rows from before escalation chains.
    pub escalate_to: &'a str,
    pub escalate_after_ms: Option<i64>,
    pub escalated_at: Option<i64>,
    /// The `escalation` and `escalation_schedule` columns (JSON text).
    pub escalation: Option<&'a str>,
    pub escalation_schedule: Option<&'a str>,
    pub escalation_steps: i64,
}

impl Terms<'_> {
    /// The JSON array the seal is over: the fields above in their order, then the
    /// [`Standing`] fields in theirs (migrations 0033, 0034), then the governance (0035), then
    /// what is shown ([`Shown`], in its fields' order), then the plan ids (0058).
    fn columns(&self) -> Value {
        let mut all = self.columns_shown();
        if let Value::Array(c) = &mut all {
            c.extend([json!(self.plan.0), json!(self.plan.1), json!(self.plan.2)]);
        }
        all
    }

    /// The seal's columns before migration 0058: without the plan ids.
    fn columns_shown(&self) -> Value {
        let mut all = self.columns_0035();
        let v = &self.shown;
        if let Value::Array(c) = &mut all {
            c.extend([
                json!(v.message),
                json!(v.reasons),
                json!(v.triggers),
                json!(v.human_summary),
                json!(v.side_effects),
                json!(v.rollback),
                json!(v.suggested_alternatives),
                json!(v.target_diff),
                json!(v.dry_run_tool),
                json!(v.redact),
            ]);
        }
        all
    }

    /// The seal's columns as migration 0035 had them: without what is shown.
    fn columns_0035(&self) -> Value {
        let mut all = self.columns_0034();
        if let Value::Array(c) = &mut all {
            c.extend([json!(self.governance.0), json!(self.governance.1)]);
        }
        all
    }

    /// The columns of `form`.
    fn columns_of(&self, form: Form) -> Value {
        match form {
            Form::Standing => self.columns_0034(),
            Form::Governance => self.columns_0035(),
            Form::Shown => self.columns_shown(),
            Form::Plan => self.columns(),
        }
    }

    /// The seal's columns as migration 0034 had them: without the governance.
    fn columns_0034(&self) -> Value {
        let s = &self.standing;
        json!([
            self.id,
            self.agent,
            self.session_id,
            self.device_id,
            self.call_hash,
            self.canonical,
            self.risk_tier,
            self.irreversible,
            self.default_decision,
            self.quorum,
            self.require_passkey,
            self.separation_of_duties,
            self.in_client,
            self.on_behalf_of,
            self.target_type,
            self.target_id,
            self.requested_at,
            self.reply_token,
            s.approvers,
            s.expires_at,
            s.escalate_to,
            s.escalate_after_ms,
            s.escalated_at,
            s.escalation,
            s.escalation_schedule,
            s.escalation_steps
        ])
    }

    /// The seal of these terms and standing under `key` (64 hex).
    pub(crate) fn seal(&self, key: &SealKey) -> String {
        key.seal(&self.columns())
    }

    /// Whether `seal` is theirs under `key` in a form that covers the governance (today's, or
    /// an earlier one since 0035's): what vouches for a receipt.
    fn sealed_by(&self, key: &SealKey, seal: &str) -> bool {
        matches!(
            self.form_held(key, seal),
            Some(Form::Plan | Form::Shown | Form::Governance)
        )
    }

    /// Which form of the seal `seal` is under `key`, `None` for none. Each serves deciding; a
    /// seal of migration 0034's form (without the governance: an approval held before 0035,
    /// which the recorded policies do not govern) vouches for no receipt.
    fn form_held(&self, key: &SealKey, seal: &str) -> Option<Form> {
        [Form::Plan, Form::Shown, Form::Governance, Form::Standing]
            .into_iter()
            .find(|f| key.holds(&self.columns_of(*f), seal))
    }
}

/// Locks approval `id`'s row for the rest of the write transaction, before it is read: on
/// PostgreSQL (`SELECT … FOR UPDATE`) no one else can change it until the transaction ends, so
/// what is read, checked against its seal and acted on is one version of the row; on SQLite
/// the write transaction already excludes every other writer.
pub(crate) fn lock(conn: Conn<'_>, id: &str) -> db::Result<()> {
    if conn.backend() == db::Backend::Postgres {
        conn.prepare_cached("SELECT 1 FROM approvals WHERE id = ?1 FOR UPDATE")?
            .query_row([id], |_| Ok(()))
            .optional()?;
    }
    Ok(())
}

/// [`lock`] for the expiry sweep and the join of a retried call, which do not wait: `false` when another session holds the
/// row (`SKIP LOCKED`; every replica's gateway writes under one advisory lock, so that is
/// someone else's session) or there is no such row: the sweep leaves it for its next run
/// rather than failing after the lock timeout. Always `true` on SQLite.
pub(crate) fn try_lock(conn: Conn<'_>, id: &str) -> db::Result<bool> {
    if conn.backend() != db::Backend::Postgres {
        return Ok(true);
    }
    let row = conn
        .prepare_cached("SELECT 1 FROM approvals WHERE id = ?1 FOR UPDATE SKIP LOCKED")?
        .query_row([id], |_| Ok(()))
        .optional()?;
    Ok(row.is_some())
}

/// The [`Shown`] columns as read, in its fields' order.
type ShownTexts = [Option<String>; 10];

/// What approval `id`'s `confirm_context` row holds of its terms: `(policies,
/// policy_set_sha256, plan_id, step_id, plan_owner)`; `None` without a row.
type Context = (String, Opt, Opt, Opt, Opt);

/// A column that may be `NULL`, as its text.
type Opt = Option<String>;

/// Approval `id`'s [`Context`], as stored.
fn context_of(conn: Conn<'_>, id: &str) -> db::Result<Option<Context>> {
    conn.prepare_cached(
        "SELECT policies, policy_set_sha256, plan_id, step_id, plan_owner FROM confirm_context WHERE approval_id = ?1",
    )?
    .query_row([id], db::tuple)
    .optional()
}

/// Runs `f` on approval `id`'s stored terms and seal; `None` when there is no such approval.
fn with_stored<T>(
    conn: Conn<'_>,
    id: &str,
    f: impl FnOnce(&Terms<'_>, &str) -> T,
) -> db::Result<Option<T>> {
    type Texts = (String, String, Option<String>, String, String, String);
    type Flags = (bool, String, Option<String>, bool, bool, bool);
    type Rest = (Option<String>, String, String, i64, String);
    type Who = (
        Option<String>,
        String,
        i64,
        String,
        Option<i64>,
        Option<i64>,
    );
    type Steps = (Option<String>, Option<String>, i64);
    let row: Option<(Texts, Flags, Rest, Who, Steps, ShownTexts)> = conn
        .prepare_cached(
            "SELECT agent, session_id, device_id, call_hash, canonical, risk_tier,
                    irreversible, default_decision, quorum, require_passkey, separation_of_duties, in_client,
                    on_behalf_of, target_type, target_id, requested_at, seal, reply_token,
                    approvers, expires_at, escalate_to, escalate_after_ms, escalated_at,
                    escalation, escalation_schedule, escalation_steps,
                    message, reasons, triggers, human_summary, side_effects, rollback,
                    suggested_alternatives, target_diff, dry_run_tool, redact
             FROM approvals WHERE id = ?1",
        )?
        .query_row([id], |r| {
            let texts = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?);
            let flags = (r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?);
            let rest = (r.get(12)?, r.get(13)?, r.get(14)?, r.get(15)?, r.get(16)?);
            let who = (r.get(17)?, r.get(18)?, r.get(19)?, r.get(20)?, r.get(21)?, r.get(22)?);
            let steps = (r.get(23)?, r.get(24)?, r.get(25)?);
            let mut shown: ShownTexts = Default::default();
            for (i, v) in shown.iter_mut().enumerate() {
                *v = r.get(26 + i)?;
            }
            Ok((texts, flags, rest, who, steps, shown))
        })
        .optional()?;
    let context = context_of(conn, id)?;
    let (policies, policy_set, plan) = match &context {
        Some((p, s, pl, st, o)) => (
            Some(p.as_str()),
            s.as_deref(),
            (pl.as_deref(), st.as_deref(), o.as_deref()),
        ),
        None => (None, None, (None, None, None)),
    };
    Ok(row.map(|(t, g, r, w, st, v)| {
        let terms = Terms {
            id,
            agent: &t.0,
            session_id: &t.1,
            device_id: t.2.as_deref(),
            call_hash: &t.3,
            canonical: &t.4,
            risk_tier: &t.5,
            irreversible: g.0,
            default_decision: &g.1,
            quorum: g.2.as_deref(),
            require_passkey: g.3,
            separation_of_duties: g.4,
            in_client: g.5,
            on_behalf_of: r.0.as_deref(),
            target_type: &r.1,
            target_id: &r.2,
            requested_at: r.3,
            reply_token: w.0.as_deref(),
            standing: Standing {
                approvers: &w.1,
                expires_at: w.2,
                escalate_to: &w.3,
                escalate_after_ms: w.4,
                escalated_at: w.5,
                escalation: st.0.as_deref(),
                escalation_schedule: st.1.as_deref(),
                escalation_steps: st.2,
            },
            governance: (policies, policy_set),
            plan,
            shown: Shown {
                message: v[0].as_deref(),
                reasons: v[1].as_deref(),
                triggers: v[2].as_deref(),
                human_summary: v[3].as_deref(),
                side_effects: v[4].as_deref(),
                rollback: v[5].as_deref(),
                suggested_alternatives: v[6].as_deref(),
                target_diff: v[7].as_deref(),
                dry_run_tool: v[8].as_deref(),
                redact: v[9].as_deref(),
            },
        };
        f(&terms, &r.4)
    }))
}

/// Seals approval `id` as just inserted, in the inserting transaction (so what is sealed is
/// what the gateway wrote).
pub(crate) fn seal_new(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<()> {
    if let Some(seal) = with_stored(conn, id, |t, _| t.seal(key))? {
        conn.prepare_cached("UPDATE approvals SET seal = ?2 WHERE id = ?1")?
            .execute(crate::params![id, seal])?;
    }
    Ok(())
}

/// Whether approval `id`'s stored terms and standing hold their seal under `key`, for
/// deciding it: any [`Form`] (a call held before migration 0035 under 0034's, whose recorded
/// governance does not govern who may approve it); `false` for an unsealed row (before
/// migration 0029, voided by 0033 or 0034, or planted) and for no such approval.
pub(crate) fn holds(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<bool> {
    Ok(holding(conn, key, id)?.is_some())
}

/// What [`holding`] found: the form of the seal that held, and the governance and plan ids
/// it held over.
pub(crate) struct Holding {
    /// The form that held.
    form: Form,
    /// The recorded `policies` and `policy_set_sha256` as read for the check.
    governance: (Option<String>, Option<String>),
    /// The recorded plan ids as read for the check.
    plan: (Option<String>, Option<String>, Option<String>),
    /// The approval's agent as read for the check.
    agent: String,
}

impl Holding {
    /// The approval's agent and `(plan_id, plan_owner)` as its seal held over them, read once
    /// (found by review: read again after the check, a writer could change them in between on
    /// PostgreSQL). Only a seal of [`Form::Plan`] vouches for the ids: a call held before 0058
    /// has them as stored, and cleared they release it from its plan's stop (SECURITY.md).
    pub(crate) fn agent_and_plan(&self) -> (&str, Option<&str>, Option<&str>) {
        (&self.agent, self.plan.0.as_deref(), self.plan.2.as_deref())
    }

    /// The policy-set hash recorded with the call as the seal held over it (`None`: none, or
    /// a form leaving governance out), not read again (on PostgreSQL it could change since).
    pub(crate) fn policy_set(&self) -> Option<&str> {
        let covered = self.form != Form::Standing;
        self.governance.1.as_deref().filter(|_| covered)
    }

    /// The seal of `t` (as stored now: the row is [`lock`]ed, so its shown columns are those
    /// checked) in the form that held, over the governance checked (another table's).
    fn seal_of(&self, t: &Terms<'_>, key: &SealKey) -> String {
        let governance = (self.governance.0.as_deref(), self.governance.1.as_deref());
        let p = &self.plan;
        let plan = (p.0.as_deref(), p.1.as_deref(), p.2.as_deref());
        let t = Terms {
            governance,
            plan,
            ..*t
        };
        key.seal(&t.columns_of(self.form))
    }
}

/// [`holds`], saying how: `None` when it does not hold. For sealing the row again after an
/// escalation step ([`reseal`]).
pub(crate) fn holding(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<Option<Holding>> {
    held(conn, id, |t, seal| {
        t.form_held(key, seal).map(|form| Holding {
            form,
            governance: (
                t.governance.0.map(str::to_string),
                t.governance.1.map(str::to_string),
            ),
            plan: (
                t.plan.0.map(str::to_string),
                t.plan.1.map(str::to_string),
                t.plan.2.map(str::to_string),
            ),
            agent: t.agent.to_string(),
        })
    })
}

/// Seals approval `id` again after the gateway's escalation step changed its standing, in the
/// form that held before it and over the governance that was checked then (`h`), not as read
/// now. Found by review: sealing it anew in today's form took in governance edited behind the
/// gateway's back — of a call held before migration 0035 (whose seal left it out), or on
/// PostgreSQL between the check and the new seal — and vouched for it in the receipt.
pub(crate) fn reseal(conn: Conn<'_>, key: &SealKey, id: &str, h: &Holding) -> db::Result<()> {
    let seal = with_stored(conn, id, |t, _| h.seal_of(t, key))?;
    if let Some(seal) = seal {
        conn.prepare_cached("UPDATE approvals SET seal = ?2 WHERE id = ?1")?
            .execute(crate::params![id, seal])?;
    }
    Ok(())
}

/// Whether approval `id`'s terms, standing and recorded governance hold today's seal under
/// `key`: for what vouches for all of them, its receipt. An approval held before migration
/// 0035 does not (its seal leaves the governance out).
pub(crate) fn holds_whole(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<bool> {
    Ok(held(conn, id, |t, seal| t.sealed_by(key, seal).then_some(()))?.is_some())
}

/// `check` over approval `id`'s stored terms and seal; `None` for no such approval and for a
/// row with a column of another type than the gateway writes (SQLite keeps what it is given):
/// no seal holds over it, and the check does not fail the sweep or the decision.
fn held<T>(
    conn: Conn<'_>,
    id: &str,
    check: impl FnOnce(&Terms<'_>, &str) -> Option<T>,
) -> db::Result<Option<T>> {
    match with_stored(conn, id, check) {
        Ok(held) => Ok(held.flatten()),
        Err(e) if e.is_damaged_row() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
