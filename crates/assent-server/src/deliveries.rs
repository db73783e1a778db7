//! What the two followers of the audit log (the outgoing webhooks, `webhooks.rs`, and the
//! Slack bot's messages, `slack/outbox.rs`) share besides their leased cursor
//! (`cursor.rs`): the audit kinds they follow, an approval's life cycle, the wait a receiver
//! asks for before the next attempt ([`retry_after`]), and keeping a delivery that gave up
//! every attempt as a dead letter (`GET /v1/webhooks/dead-letters`).

use crate::cursor::store;
use crate::state::{AppState, now_ms};
use assent_store::outbox::DeadLetter;

/// The audit kinds of an approval's life cycle (requested, escalated, decided, voted on, a
/// vote withdrawn, expired, cancelled): those a webhook announces, and those the Slack bot's
/// message follows. A withdrawn vote (a reload or restart took its voter's key or role) is
/// announced as a vote event with the tally it leaves (found by review: receivers and the
/// Slack card kept counting it).
pub(crate) const KINDS: [&str; 7] = [
    "approval.requested",
    "approval.escalated",
    "decision",
    "decision.vote",
    "decision.vote_withdrawn",
    "approval.expired",
    "approval.cancelled",
];

/// The longest wait between two attempts of one delivery: 5 minutes.
pub(crate) const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(300);

/// The wait after attempt `attempt` (1, 2, …) of a delivery whose first retry comes after
/// `initial_ms`: `initial_ms` doubled `attempt - 1` times, at most [`MAX_BACKOFF`] (no
/// overflow at any count).
pub(crate) fn backoff(initial_ms: u64, attempt: u32) -> std::time::Duration {
    let doubling = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    std::time::Duration::from_millis(initial_ms)
        .saturating_mul(doubling)
        .min(MAX_BACKOFF)
}

/// The longest `Retry-After` honoured: 60 seconds.
pub(crate) const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The wait a `429 Too Many Requests` or `503 Service Unavailable` answer asks for in its
/// `Retry-After` (whole seconds, RFC 9110 §10.2.3; an HTTP date is not read), at most
/// [`MAX_RETRY_AFTER`]; `None` for any other answer or a value that is not a number of
/// seconds. The next attempt waits this long when it is longer than the backoff (found by
/// review: Slack's and a receiver's rate limits were met by retrying after one second, which
/// prolongs them). Each wait is the longer of this and the backoff, so a receiver that always
/// asks for the most adds at most 60 s to each attempt's wait (with the defaults, 1 s doubling
/// over 10 attempts, about 13 minutes in all before the event is dead-lettered; for Slack's
/// one cursor, every message after it waits as long).
pub(crate) fn retry_after(r: &reqwest::Response) -> Option<std::time::Duration> {
    use reqwest::StatusCode;
    if !matches!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        return None;
    }
    let secs: u64 = r
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// Whether receiver answer `status` refuses the event for good, so that trying it again cannot
/// succeed and the delivery is dead-lettered at once: a `4xx` other than `401`, `407` (the
/// receiver's or a proxy's credentials, which an operator may be fixing), `408`, `409`, `425`
/// and `429` (RFC 9110 §15.5; a timeout, a conflict, too early, too many requests), and any
/// `3xx` (redirects are never followed). Found by review: every non-2xx answer was retried
/// for its whole schedule, and delivery is in order, so an agent able to make a receiver
/// refuse its events (text the receiver rejects with a `400` or `422`) held back every other
/// agent's notifications for about 8.5 minutes an event with the defaults.
pub(crate) fn refused_for_good(status: reqwest::StatusCode) -> bool {
    status.is_redirection()
        || (status.is_client_error()
            && !matches!(status.as_u16(), 401 | 407 | 408 | 409 | 425 | 429))
}

/// Keeps a delivery that gave up as a dead letter (`GET /v1/webhooks/dead-letters`): audit
/// record `audit_seq`'s `event` for `target` (a webhook's name, or the Slack bot's cursor)
/// with `body`, after `tries` (attempts, the last error), now, and moves `target`'s cursor
/// past it while `holder` holds its lease. `false` when the lease was lost (or the store
/// failed): the record is delivered again.
pub(crate) async fn dead_letter(
    st: &AppState,
    holder: &str,
    target: &str,
    audit_seq: i64,
    event: &str,
    body: String,
    (attempts, last_error): (u32, String),
) -> bool {
    let d = DeadLetter {
        id: 0,
        webhook: target.to_string(),
        audit_seq,
        event: event.to_string(),
        body,
        attempts: attempts as i64,
        last_error,
        failed_at: now_ms(),
    };
    let holder = holder.to_string();
    store(st, move |s| s.dead_letter(&d, &holder))
        .await
        .unwrap_or(false)
}
