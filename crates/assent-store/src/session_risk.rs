//! Risk that follows the session (issue 16 §3), as the store keeps it: per (agent, session)
//! when the session began (its first call that may run) and when untrusted output, private data and
//! egress first entered it, through which tool (table `session_risk`, migration 0022), read
//! into core's [`SessionRisk`] together with the changes of the called tool's pinned
//! definition (`tool_pins`, `tool_reviews`).
//!
//! A session begins, and is marked, when a call (of such a tool) may run — fail closed: a call that may run is
//! assumed to have returned —: its allow verdict is recorded or a grant covers it (in the
//! proposal's transaction), its held approval's token is redeemed
//! ([`on_redeem`], the effects kept with the approval in `session_risk_held` when it was held),
//! or its result is reported ([`Store::record_result`](crate::Store::record_result)). The
//! earliest mark of each kind stays.

use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::params;
use crate::store::Store;
use assent_core::ToolCall;
use assent_core::session_risk::{Effects, Mark, SessionRisk, ToolChange};

/// Whether [`Effects`] set one mark.
type Sets = fn(&Effects) -> bool;

/// The three marks: their column prefix in `session_risk`, and whether `Effects` sets them.
const MARKS: [(&str, Sets); 3] = [
    ("untrusted", |e| e.untrusted_output),
    ("private", |e| e.private_data),
    ("egress", |e| e.egress),
];

/// Records that `agent`'s session `session_id` exists from `now` (Unix ms) unless it began
/// earlier, and that it was active at `now` (`last_at`, what [`Store::prune_session_risk`]
/// goes by).
fn begin(tx: Conn<'_>, agent: &str, session_id: &str, now: i64) -> db::Result<()> {
    tx.prepare_cached("INSERT INTO session_risk (agent, session_id, began_at, last_at) VALUES (?1,?2,?3,?3) ON CONFLICT (agent, session_id) DO UPDATE SET last_at = excluded.last_at WHERE session_risk.last_at < excluded.last_at")?
        .execute(params![agent, session_id, now])?;
    Ok(())
}

/// Sessions whose state may go: no call of theirs ran at or after `?1` (`last_at`), and no
/// approval of theirs is pending, was requested or was decided at or after `?1`.
const IDLE_SESSIONS: &str = "SELECT r.agent, r.session_id FROM session_risk r WHERE r.last_at < ?1
    AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.agent = r.agent AND a.session_id = r.session_id
        AND (a.status = 'pending' OR a.requested_at >= ?1 OR COALESCE(a.decided_at, 0) >= ?1))
    ORDER BY r.last_at LIMIT ?2";

/// Held effects that can no longer mark a session: their approval is gone, or was settled
/// (not pending) before `?1` and has no token left that could still be redeemed at `?3`.
const SETTLED_HELD: &str = "SELECT h.approval_id FROM session_risk_held h
    LEFT JOIN approvals a ON a.id = h.approval_id
    WHERE a.id IS NULL OR (a.status <> 'pending' AND COALESCE(a.decided_at, a.requested_at) < ?1
        AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.approval_id = h.approval_id
            AND t.used_at IS NULL AND t.expires_at > ?3))
    LIMIT ?2";

/// The session's state for a call of `call`'s tool (its pin changes looked up): what the
/// gatekeeper observes in the proposal's transaction. A session in which no call ran yet is
/// clean, with no beginning.
pub(crate) fn read(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    call: &ToolCall,
) -> db::Result<SessionRisk> {
    type Row = (i64, [(Option<i64>, Option<String>, Option<String>); 3]);
    let row: Option<Row> = tx
        .prepare_cached("SELECT began_at, untrusted_at, untrusted_tool, untrusted_server, private_at, private_tool, private_server, egress_at, egress_tool, egress_server FROM session_risk WHERE agent = ?1 AND session_id = ?2")?
        .query_row(params![agent, session_id], |r| {
            Ok((
                r.get(0)?,
                [
                    (r.get(1)?, r.get(2)?, r.get(3)?),
                    (r.get(4)?, r.get(5)?, r.get(6)?),
                    (r.get(7)?, r.get(8)?, r.get(9)?),
                ],
            ))
        })
        .optional()?;
    let changed_tools = match &call.server {
        Some(server) => changes(tx, agent, server, &call.tool)?,
        None => Vec::new(),
    };
    let Some((began, [u, p, e])) = row else {
        return Ok(SessionRisk {
            changed_tools,
            ..SessionRisk::default()
        });
    };
    let mark = |(at, tool, server): (Option<i64>, Option<String>, Option<String>)| {
        Some(Mark {
            at_ms: at?,
            tool: tool.unwrap_or_default(),
            server,
        })
    };
    Ok(SessionRisk {
        began_ms: Some(began),
        untrusted: mark(u),
        private_data: mark(p),
        egress: mark(e),
        changed_tools,
    })
}

/// The changes of `server`/`tool`'s pinned definition that concern `agent`: those of the
/// gateway's own hub (scope `''`) and of `agent`'s own reports, never another agent's (which
/// could otherwise raise this agent's calls to R4 at will): an accepted new definition (a pin
/// not made on first use) and every review of a changed or new definition (pending, accepted
/// or rejected), each with its time.
fn changes(tx: Conn<'_>, agent: &str, server: &str, tool: &str) -> db::Result<Vec<ToolChange>> {
    let pins: Vec<(i64, String)> = crate::sql::rows(
        tx,
        "SELECT pinned_at, pinned_by FROM tool_pins WHERE server = ?1 AND tool = ?2 AND (scope = '' OR scope = ?3) AND pinned_by <> 'trust-on-first-use' ORDER BY pinned_at",
        params![server, tool, agent],
        db::tuple,
    )?;
    let mut out: Vec<ToolChange> = pins
        .into_iter()
        .map(|(at_ms, by)| ToolChange {
            server: server.into(),
            tool: tool.into(),
            at_ms,
            what: format!("a new definition was pinned by {by}"),
        })
        .collect();
    let reviews: Vec<(i64, String, String)> = crate::sql::rows(
        tx,
        "SELECT seen_at, id, status FROM tool_reviews WHERE server = ?1 AND tool = ?2 AND (scope = '' OR scope = ?3) ORDER BY seen_at",
        params![server, tool, agent],
        db::tuple,
    )?;
    out.extend(reviews.into_iter().map(|(at_ms, id, status)| ToolChange {
        server: server.into(),
        tool: tool.into(),
        at_ms,
        what: format!("a changed definition was seen (review {id}, {status})"),
    }));
    Ok(out)
}

/// The time (Unix ms) a change of `server`/`tool`'s definition seen or pinned now in `scope`
/// (`''` the gateway's: every agent's calls; else that agent's) is stamped with: `now`, or the
/// latest request time of a pending call of that tool in the scope when that is later, as
/// [`marked_at`] stamps a mark — so that a change committed after a call was held never reads
/// as seen before it (found by review of that fix: a tool check served by a replica whose
/// clock is behind stamped a rug-pull after the hold before it, and once its review was
/// rejected the call's approving default was applied at its timeout).
pub(crate) fn change_at(
    tx: Conn<'_>,
    scope: &str,
    (server, tool): (&str, &str),
    now: i64,
) -> db::Result<i64> {
    let held: Option<i64> = tx
        .prepare_cached("SELECT MAX(requested_at) FROM approvals WHERE status = 'pending' AND server = ?1 AND tool = ?2 AND (?3 = '' OR agent = ?3)")?
        .query_row(params![server, tool, scope], |r| r.get(0))?;
    Ok(held.map_or(now, |h| h.max(now)))
}

/// Whether the session of held call `rec` (the row being settled) moved since the caller read
/// it as `seen` ([`assent_core::session_risk::moved`]), read again in this transaction.
pub(crate) fn moved_since(
    tx: Conn<'_>,
    rec: &crate::approval_record::ApprovalRecord,
    seen: &SessionRisk,
) -> db::Result<bool> {
    let now = read(tx, &rec.agent, &rec.session_id, &rec.call)?;
    Ok(assent_core::session_risk::moved(seen, &now))
}

/// Whether held call `rec`'s session took in, since the call was held, what can raise its
/// risk ([`assent_core::session_risk::took_in_since`] of the state read now, in the caller's
/// transaction): the expiry sweep then refuses its approving default. A session record (or a
/// tool pin or review it reads) too damaged to read counts as having taken in (fail closed):
/// found by review, its read error made the sweep skip the approval as a damaged row, every
/// sweep, so it stayed pending past its deadline for ever, undecidable by anyone.
pub(crate) fn took_in_since_held(
    tx: Conn<'_>,
    rec: &crate::approval_record::ApprovalRecord,
) -> db::Result<bool> {
    match read(tx, &rec.agent, &rec.session_id, &rec.call) {
        Ok(now) => Ok(assent_core::session_risk::took_in_since(
            &now,
            rec.requested_at,
        )),
        Err(e) if e.is_damaged_row() => {
            tracing::warn!(agent = %rec.agent, session = %rec.session_id, tool = %rec.call.tool, error = %e,
                "a held call's session record (or a tool pin or review it reads) cannot be read: its approving default is refused");
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

/// A call of `tool` (on `server`) with `effects` may run at `now` in `agent`'s session
/// `session_id`: the session begins unless it began earlier, and each effect's first mark is
/// kept, stamped [`marked_at`].
pub(crate) fn ran(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    (tool, server): (&str, Option<&str>),
    effects: Effects,
    now: i64,
) -> db::Result<()> {
    begin(tx, agent, session_id, now)?;
    if !effects.marks() {
        return Ok(());
    }
    let at = marked_at(tx, agent, session_id, now)?;
    for (col, set) in MARKS {
        if set(&effects) {
            // `col` is one of three constants, never input.
            tx.prepare_cached(&format!("UPDATE session_risk SET {col}_at = ?3, {col}_tool = ?4, {col}_server = ?5 WHERE agent = ?1 AND session_id = ?2 AND {col}_at IS NULL"))?
                .execute(params![agent, session_id, at, tool, server])?;
        }
    }
    Ok(())
}

/// The time (Unix ms) a mark set now in `agent`'s session `session_id` is stamped with: `now`,
/// or the latest request time of the session's pending calls when that is later, so that a
/// mark written after a call was held never reads as taken in before it
/// ([`assent_core::session_risk::took_in_since`] compares the two times). Found by review:
/// `now` is taken by whichever replica serves the request, before the write lock is held, so
/// with a replica's clock behind another's (up to the skew readiness allows), or a request
/// waiting on the lock, untrusted output taken in after a call was held was stamped before
/// it, and the call's approving default was applied at its timeout.
fn marked_at(tx: Conn<'_>, agent: &str, session_id: &str, now: i64) -> db::Result<i64> {
    let held: Option<i64> = tx
        .prepare_cached("SELECT MAX(requested_at) FROM approvals WHERE agent = ?1 AND session_id = ?2 AND status = 'pending'")?
        .query_row(params![agent, session_id], |r| r.get(0))?;
    Ok(held.map_or(now, |h| h.max(now)))
}

/// A call held as approval `approval_id` keeps its `effects` (when it has any that mark)
/// until its token is redeemed ([`on_redeem`]).
pub(crate) fn hold(tx: Conn<'_>, approval_id: &str, e: Effects) -> db::Result<()> {
    if e.marks() {
        tx.prepare_cached("INSERT INTO session_risk_held (approval_id, untrusted_output, private_data, egress) VALUES (?1,?2,?3,?4) ON CONFLICT (approval_id) DO NOTHING")?
            .execute(params![approval_id, e.untrusted_output, e.private_data, e.egress])?;
    }
    Ok(())
}

/// The token of approval `approval_id` was redeemed at `now`: its call may run ([`ran`]),
/// with the effects kept when it was held.
pub(crate) fn on_redeem(tx: Conn<'_>, approval_id: &str, now: i64) -> db::Result<()> {
    type Flag = Option<bool>;
    type Row = (Flag, Flag, Flag, String, String, String, Option<String>);
    let row: Option<Row> = tx
        .prepare_cached("SELECT h.untrusted_output, h.private_data, h.egress, a.agent, a.session_id, a.tool, a.server FROM approvals a LEFT JOIN session_risk_held h ON h.approval_id = a.id WHERE a.id = ?1")?
        .query_row([approval_id], db::tuple)
        .optional()?;
    let Some((untrusted, private, egress, agent, session, tool, server)) = row else {
        return Ok(());
    };
    let effects = Effects {
        untrusted_output: untrusted == Some(true),
        private_data: private == Some(true),
        egress: egress == Some(true),
        writes: false,
    };
    ran(
        tx,
        &agent,
        &session,
        (&tool, server.as_deref()),
        effects,
        now,
    )
}

impl Store {
    /// Retention of the session state (issue 16 §3 rows grow one per session): removes the
    /// state of at most `max` sessions idle since before `cutoff` (Unix ms: no call of theirs
    /// ran since, and no approval of theirs is pending or was requested or decided since), and
    /// at most `max` held effects whose approval was settled before `cutoff` with no token left
    /// to redeem at `now`. A session still active keeps its state (losing it would reset its
    /// risk); an idle one that comes back starts clean. Returns how many rows went (both
    /// tables). Run by the audit retention sweep ([`Store::archive_audit`]).
    pub fn prune_session_risk(&self, cutoff: i64, max: i64, now: i64) -> Result<usize, StoreError> {
        let max = max.max(1);
        self.write(|tx| -> Result<usize, StoreError> {
            let sessions = tx.execute(
                &format!("DELETE FROM session_risk WHERE (agent, session_id) IN ({IDLE_SESSIONS})"),
                params![cutoff, max],
            )?;
            let held = tx.execute(
                &format!("DELETE FROM session_risk_held WHERE approval_id IN ({SETTLED_HELD})"),
                params![cutoff, max, now],
            )?;
            Ok(sessions + held)
        })
    }

    /// What `agent`'s session `session_id` has taken in, for a call of `call`'s tool (its pin
    /// changes looked up): what an edit of a held call is re-gated with (issue 16 §3). A
    /// session never seen is clean.
    pub fn session_risk(
        &self,
        agent: &str,
        session_id: &str,
        call: &ToolCall,
    ) -> Result<SessionRisk, StoreError> {
        let conn = self.lock();
        Ok(conn.conn().snapshot(|c| read(c, agent, session_id, call))?)
    }
}
