//! Writing rendered events in the transaction of the state change they report: an AAEP event
//! ([`emit`]) to the `aaep_events` log, an MPLP Confirm trace event ([`mplp_event`]) to the
//! audit chain. What the events say is `events.rs`; their JSON is the [`Envelopes`]' (the
//! server's `envelopes` module).

use crate::audit;
use crate::confirm;
use crate::db::{self, Conn};
use crate::events::{AaepEvent, ConfirmEvent, Envelopes, MplpEvent};
use crate::params;

/// Renders `e` and appends it to the event log (to one subscription, or to all with `None`);
/// a question's event names its clarification (`clarification_id`, migration 0069), so a
/// resuming stream can be sent it while it is pending ([`crate::Store::still_awaiting`]).
pub(crate) fn emit(
    tx: Conn<'_>,
    env: &dyn Envelopes,
    e: &AaepEvent<'_>,
    subscription: Option<&str>,
    approval_id: Option<&str>,
    at: i64,
) -> db::Result<()> {
    let ev = env.aaep(e);
    let ty = ev["type"].as_str().unwrap_or("");
    let asking = match e {
        AaepEvent::AwaitingClarification { clarification } => Some(clarification.id.as_str()),
        _ => None,
    };
    tx.prepare_cached("INSERT INTO aaep_events (event_id, type, critical, subscription_id, approval_id, at, data, clarification_id) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)")?
        .execute(params![ev["event_id"].as_str(), ty, e.is_critical(), subscription, approval_id, at, ev.to_string(), asking])?;
    Ok(())
}

/// Renders the MPLP trace event `confirm` of approval `approval_id` (its plan and step read
/// from its [`confirm::ConfirmContext`]) and appends it to the audit chain with `kind` =
/// `event_type` and `actor`.
pub(crate) fn mplp_event(
    tx: Conn<'_>,
    env: &dyn Envelopes,
    now: i64,
    approval_id: &str,
    trace_id: &str,
    actor: &str,
    confirm: ConfirmEvent<'_>,
) -> db::Result<()> {
    let ctx = confirm::read(tx, approval_id)?;
    let e = MplpEvent {
        confirm,
        trace_id,
        at: now,
        plan_id: ctx.plan_id.as_deref(),
        step_id: ctx.step_id.as_deref(),
    };
    audit::append(
        tx,
        now,
        &e.event_type(),
        Some(approval_id),
        actor,
        &env.mplp(&e),
    )
}
