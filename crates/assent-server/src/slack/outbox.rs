//! The Slack messages of approvals, kept up to date by the bot (issue 15 §4; with
//! `slack.bot_token_env` only): a new approval is posted to `slack.channel` with
//! `chat.postMessage` (its channel and `ts` stored, migration 0020), and every later event of
//! it — a decision on any surface (dashboard, CLI, API, Slack), a quorum vote, an escalation,
//! an expiry or a cancellation — updates that message with `chat.update` to show the outcome
//! and who decided.
//!
//! Delivery follows the outgoing webhooks' rules: it reads the audit log from a
//! cursor of its own (named [`CURSOR`], which no webhook can be named), so no event is lost
//! while Slack is unreachable or the gateway restarts; on Postgres only the holder of the
//! cursor's lease posts, so replicas post each message once. A failed call is retried after
//! 1 s, doubling (or after the `Retry-After` of Slack's `429` when longer, at most 60
//! s), [`MAX_ATTEMPTS`] times in all, then recorded as a dead letter (`GET
//! /v1/webhooks/dead-letters`, webhook `slack:bot`); a message Slack refuses for good
//! ([`api::REFUSED_FOR_GOOD`]) is dead-lettered at its first answer. A message always shows the approval as
//! it is when sent, so a late or repeated update is harmless.

use crate::config::slack::Slack;
use crate::cursor::store;
use crate::deliveries::KINDS;
use crate::slack::api;
use crate::slack::blocks;
use crate::state::{AppState, now_ms};
use assent_core::ApprovalStatus;
use assent_store::ApprovalRecord;
use assent_store::audit::AuditRecord;
use assent_store::slack::SlackMessage;
use serde_json::json;
use std::sync::Arc;

/// The cursor's name in the webhooks' delivery state (`:` is never in a webhook's name).
pub const CURSOR: &str = "slack:bot";

/// Attempts per event before it is dead-lettered.
pub const MAX_ATTEMPTS: u32 = 6;

/// Starts the delivery task when the bot token is configured (none otherwise); takes the
/// cursor's lease once first, so that a cursor new to the database starts at the end of the
/// log before the gateway serves (as the webhooks' start does).
pub async fn spawn(state: AppState, holder: &str) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(slack) = state.slack.clone().filter(|s| s.bot_token.is_some()) else {
        return Vec::new();
    };
    take_lease(&state, holder).await;
    let holder = holder.to_string();
    vec![tokio::spawn(async move { run(state, slack, holder).await })]
}

/// Gives up `holder`'s lease of the cursor (at shutdown).
pub async fn release(state: &AppState, holder: &str) {
    if state.slack.as_ref().is_some_and(|s| s.bot_token.is_some()) {
        let holder = holder.to_string();
        store(state, move |s| s.release_webhook(CURSOR, &holder)).await;
    }
}

/// Takes or renews `holder`'s lease of the cursor: the cursor when held.
async fn take_lease(st: &AppState, holder: &str) -> Option<i64> {
    crate::cursor::take_lease(st, CURSOR, holder).await
}

/// Moves the cursor past `seq`; whether `holder` still holds the lease.
async fn advance(st: &AppState, holder: &str, seq: i64) -> bool {
    crate::cursor::advance(st, CURSOR, holder, seq).await
}

async fn run(st: AppState, slack: Arc<Slack>, holder: String) {
    crate::cursor::follow(&st, CURSOR, &holder, &KINDS, |rec| {
        let (st, slack, holder) = (st.clone(), slack.clone(), holder.clone());
        async move { deliver(&st, &slack, &holder, &rec).await }
    })
    .await;
}

/// Posts or updates the message of `rec`'s approval (retrying, then dead-lettering) and
/// moves the cursor; `false` when the lease was lost.
async fn deliver(st: &AppState, slack: &Slack, holder: &str, rec: &AuditRecord) -> bool {
    let Some(id) = rec.approval_id.clone() else {
        return advance(st, holder, rec.seq).await;
    };
    let (attempt, last_error) = loop {
        if !crate::cursor::lease_for(st, CURSOR, holder, rec.seq).await {
            return false;
        }
        // Counted in the database, as a webhook's attempts are: a restart goes on from it.
        let Some(attempt) = crate::cursor::count_attempt(st, CURSOR, holder, rec.seq).await else {
            return false;
        };
        let Ok(read) = crate::cursor::approval_for_delivery(st, id.clone()).await else {
            return false;
        };
        let Some(a) = read else {
            return advance(st, holder, rec.seq).await;
        };
        match send(st, slack, &rec.kind, &a).await {
            Ok(()) => return advance(st, holder, rec.seq).await,
            Err(e) if e.for_good || attempt >= MAX_ATTEMPTS => break (attempt, e.why),
            Err(e) => {
                tracing::warn!(approval_id = %id, attempt, error = %e, "slack: message not sent; retrying");
                // Slack's rate limit (`429`) says when to come back: sooner is refused again.
                let delay = crate::deliveries::backoff(1000, attempt);
                let wait = e.retry_after.map_or(delay, |w| w.max(delay));
                if !crate::cursor::hold_through(st, CURSOR, holder, wait).await {
                    return false;
                }
            }
        }
    };
    tracing::error!(approval_id = %id, attempts = attempt, error = %last_error, "slack: message dead-lettered");
    let body = json!({"approval_id": id}).to_string();
    let tries = (attempt, last_error);
    crate::deliveries::dead_letter(st, holder, CURSOR, rec.seq, &rec.kind, body, tries).await
}

/// The message of `a` as it is now (buttons while pending: all with the bot token, deny only
/// without, as the webhook's message it replaces; found by review: after a deny vote the
/// replaced webhook message offered approve buttons again).
pub fn current(st: &AppState, a: &ApprovalRecord) -> serde_json::Value {
    let event = match a.status {
        ApprovalStatus::Pending if !a.votes.is_empty() => "approval.vote",
        ApprovalStatus::Pending => "approval.requested",
        _ => "approval.resolved",
    };
    let card = (st.public_url.as_deref()).map(|b| format!("{b}/ui/approvals/{}", a.id));
    let offered = match &st.slack {
        Some(s) if s.bot_token.is_none() => blocks::Buttons::DenyOnly,
        _ => blocks::Buttons::All,
    };
    blocks::message(event, a, card.as_deref(), offered)
}

/// Stores the reference of the message just posted for approval `id`, trying 5 times over
/// about 3 s. The post is never repeated for it (a second card of one approval is worse than a
/// card that stops updating): when the reference cannot be stored, the error is logged, the
/// message keeps its first state, and its buttons decide nothing (`from_our_message`).
async fn remember(st: &AppState, id: &str, m: SlackMessage) {
    if m.channel.is_empty() || m.ts.is_empty() {
        tracing::error!(approval_id = %id, "chat.postMessage answered no channel/ts; the message will not be updated");
        return;
    }
    let mut delay = std::time::Duration::from_millis(200);
    for attempt in 1..=5 {
        let (id2, m2) = (id.to_string(), m.clone());
        match st
            .store_call(move |s| s.put_slack_message(&id2, &m2, now_ms()))
            .await
        {
            Ok(()) => return,
            Err(e) if attempt == 5 => {
                tracing::error!(approval_id = %id, error = %e.message, "the posted Slack message's reference could not be stored; it will not be updated");
            }
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
}

/// Posts `a`'s message (a new approval without one) or updates it (any later event).
async fn send(
    st: &AppState,
    slack: &Slack,
    kind: &str,
    a: &ApprovalRecord,
) -> Result<(), api::Failed> {
    let id = a.id.clone();
    let posted = st
        .store_call(move |s| s.slack_message(&id))
        .await
        .map_err(|e| e.message)?;
    let mut body = current(st, a);
    match posted {
        Some(m) => {
            body["channel"] = json!(m.channel);
            body["ts"] = json!(m.ts);
            api::call(slack, "chat.update", &body).await.map(drop)
        }
        // An approval cancelled before its turn came gets no message (found by review: an
        // agent proposing and cancelling held calls in a loop had a message posted for each,
        // at Slack's one a second, ahead of every other approval).
        None if kind == "approval.requested" && a.status != ApprovalStatus::Cancelled => {
            body["channel"] = json!(slack.config.channel);
            let r = api::call(slack, "chat.postMessage", &body).await?;
            let m = SlackMessage {
                channel: r["channel"].as_str().unwrap_or_default().to_string(),
                ts: r["ts"].as_str().unwrap_or_default().to_string(),
            };
            remember(st, &a.id, m).await;
            Ok(())
        }
        // Requested before the bot posted messages, or cancelled before it was posted:
        // nothing to update.
        None => Ok(()),
    }
}
