//! Outgoing webhooks (issue 5): every new approval (`approval.requested`) and every
//! resolution (`approval.resolved`: decided, expired or cancelled), and every vote counted toward
//! a quorum (`approval.vote`, issue 14 §1), and every escalation step (`approval.escalated`,
//! issue 14 §3: a new notification for the roles that joined, with the step in `escalation`),
//! POSTed to each configured `webhooks[].url`.
//!
//! - Delivery reads the audit log: each webhook keeps a cursor (the last audit record it
//!   delivered or gave up on), so an event is never lost — not while the receiver is down, nor
//!   across a gateway restart. Delivery is at least once and in order per webhook; receivers
//!   de-duplicate by the body's signed `delivery_id` (`NAME-SEQ-HASH12`, also sent unsigned
//!   as `X-Assent-Delivery`).
//! - Replicas of one database deliver each event once (issue 13 §2): only the holder of the
//!   webhook's lease ([`LEASE`], renewed before every attempt, given up at shutdown) delivers
//!   and moves the cursor, and a cursor move by a replica whose lease was taken is refused. If
//!   the holder dies, another replica takes over when the lease runs out and resumes at the
//!   cursor (the event in flight may then be sent twice: at least once, never lost).
//! - Each request is signed: `X-Assent-Timestamp` (Unix seconds) and
//!   `X-Assent-Signature: sha256=HEX`, the HMAC-SHA256 with the webhook's secret of
//!   `TIMESTAMP.BODY`. Receivers recompute it and reject stale timestamps.
//! - A failed attempt (network error or a non-2xx status) is retried after
//!   `retry_initial_ms`, doubling up to 5 minutes (or after the `Retry-After` of a `429` or
//!   `503` when longer, at most 60 s), `max_attempts` times in all; then the
//!   delivery is recorded as a dead letter (`GET /v1/webhooks/dead-letters`) and the next
//!   event goes out. An answer that refuses the event for good (a `3xx`, or a `4xx` but
//!   `401`, `407`, `408`, `409`, `425` and `429`: [`refused_for_good`]) is dead-lettered at
//!   once, so one event a receiver rejects holds back no other.
//! - Every delivery carries the newest signed audit checkpoint (`checkpoint` in the JSON body,
//!   `null` before the first one; `X-Assent-Checkpoint`: its canonical JSON, absent before the
//!   first one), so a receiver can keep evidence of how far the audit log reached.
//! - Arguments named in the covering rules' `redact` are masked in the body (and in the
//!   message and summaries rendered from them); the stored call is never changed.
//! - `format: slack` sends a Slack-compatible message (`text` and `blocks`) with the card's
//!   essentials; with `public_url` set, every body links the card, and `approval.requested`
//!   carries a single-use link (`/ui/l/TOKEN`, valid until the approval expires) that opens the
//!   card — deciding still needs a signed-in operator. With `slack` configured the message
//!   also carries the decision buttons ([`crate::slack`]); with its bot token, the Slack
//!   integration posts and updates its own messages ([`crate::slack::outbox`]).

use crate::config::{Webhook, WebhookFormat};
use crate::cursor::{store, take_lease};
use crate::deliveries::{KINDS, backoff, dead_letter, refused_for_good, retry_after};
use crate::extract::{Operator, ReadDeadLetters};
use crate::formats::rfc3339;
use crate::state::{AppState, now_ms};
use assent_api::audit as api;
use assent_core::approval::ApprovalStatus;
use assent_store::ApprovalRecord;
use assent_store::audit::AuditRecord;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use std::time::Duration;

/// The most bytes of (redacted) arguments a JSON body carries; larger ones are `null` with
/// their size in `arguments_bytes` (read them on the card or over the API). Found by review:
/// an agent's calls with arguments near the 256 KiB limit made bodies a receiver with a
/// common 100 KB limit refused every time, and delivery is in order, so each such event held
/// back every later notification for its whole retry schedule.
const ARGUMENTS_MAX: usize = 16 * 1024;

/// The most characters of a message, summary, reason, side effect or rollback (each may quote
/// arguments through its template) a JSON body carries; past it the text is cut and ends
/// with `…`. 2,000 characters (at most 8,000 bytes) each.
const TEXT_MAX: usize = 2_000;

/// `text` cut to [`TEXT_MAX`] characters and `…` ([`assent_core::summary::cut`]).
fn cut(text: &str) -> String {
    assent_core::summary::cut(text, TEXT_MAX + 1)
}

/// How long a webhook's delivery lease lasts without renewal (the shared cursor's).
pub use crate::cursor::LEASE;

/// Starts one delivery task per configured webhook; `holder` names this process in the
/// webhooks' leases (a random id; see [`release`]).
///
/// Before it returns, each webhook's lease is asked for once, which gives a webhook new to
/// this database its cursor at the end of the log: called before the gateway serves, no event
/// raised through it can fall before a new webhook's cursor. (Found by a test under load: the
/// tasks made the cursor on their first turn, after the first requests had been answered, so
/// the first events of a new webhook could be skipped.)
pub async fn spawn(state: AppState, holder: &str) -> Vec<tokio::task::JoinHandle<()>> {
    for hook in state.webhooks.iter() {
        take_lease(&state, &hook.name, holder).await;
    }
    let mut tasks: Vec<_> = (0..state.webhooks.len())
        .map(|i| {
            let (st, holder) = (state.clone(), holder.to_string());
            tokio::spawn(async move { run(st, i, holder).await })
        })
        .collect();
    tasks.extend(crate::slack::outbox::spawn(state, holder).await);
    tasks
}

/// How long a stopping gateway waits for the deliveries in flight after its connections
/// drained ([`stop`]): 5 s. They began winding down when the shutdown began, beside the drain's
/// up to 10 s, so a delivery in flight has 15 s at least — a webhook's request is given 15 s —
/// and with the hub's 15 s to settle the stop stays within the 30 s a service manager gives it
/// (`TimeoutStopSec=30s` in `deploy/assent.service`).
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// Stops the delivery tasks `tasks` ([`spawn`]) at shutdown: each finishes the delivery in
/// flight, its answer recorded and its cursor moved, and begins none more
/// ([`crate::cursor::follow`]; `AppState::stopping`, set by `run_with` when the shutdown
/// began); one still running [`STOP_WAIT`] after this is called is aborted. Found by
/// review: they were aborted mid-send, so an event the receiver had taken (a Slack card
/// posted, its reference not yet stored) was sent again after the restart — a second card,
/// the first left with live-looking buttons.
pub async fn stop(state: &AppState, tasks: Vec<tokio::task::JoinHandle<()>>) {
    state.stopping.send_replace(true);
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            tracing::warn!(
                "a delivery still in flight at shutdown was cut off; it is sent again after the restart"
            );
            abort.abort();
        }
    }
}

/// Gives up `holder`'s webhook leases (at shutdown, after the tasks were stopped), so another
/// replica resumes delivery at once instead of after [`LEASE`].
pub async fn release(state: &AppState, holder: &str) {
    for hook in state.webhooks.iter() {
        let (name, holder) = (hook.name.clone(), holder.to_string());
        store(state, move |s| s.release_webhook(&name, &holder)).await;
    }
    crate::slack::outbox::release(state, holder).await;
}

/// `sha256=HEX`: the HMAC-SHA256 of `TIMESTAMP.BODY` with `secret`.
pub fn signature(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{timestamp}.{body}").as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

async fn run(st: AppState, index: usize, holder: String) {
    let hook = st.webhooks[index].clone();
    // A loopback hook is reached directly, never through an environment proxy (its body and
    // signature would cross the network in clear text): `assent_api::direct_to_loopback`.
    let http = match assent_api::direct_to_loopback(assent_api::http_builder(), &hook.url)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(webhook = %hook.name, error = %e, "webhook client could not be built");
            return;
        }
    };
    let name = hook.name.clone();
    let skipped = Skipped::default();
    crate::cursor::follow(&st, &name, &holder, &KINDS, |rec| {
        let (st, http, hook, holder) = (st.clone(), http.clone(), hook.clone(), holder.clone());
        let skipped = skipped.clone();
        async move { deliver(&st, &http, (&hook, &skipped), &holder, &rec).await }
    })
    .await;
}

/// The approvals whose request this webhook's worker left out, cancelled before its turn came
/// ([`deliver`]): their cancellation is left out too, the receiver having heard of neither.
/// Found by review: the cancellation still went, so an agent proposing and cancelling in a loop
/// queued one delivery a cycle on every webhook, one at a time, ahead of every other agent's
/// requests. At most [`MAX_SKIPPED`] are kept (past it a request and its cancellation are
/// delivered); a restart or a lease moving to another replica forgets them, and their
/// cancellations go out.
type Skipped = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

/// See [`Skipped`].
const MAX_SKIPPED: usize = 100_000;

/// Whether `rec` (of `approval`, as read for its delivery) is left out for `hook` (see
/// [`Skipped`]): `Some` with whether the cursor moved past it, `None` to deliver it. A request
/// cancelled before its turn came is not announced, nor its cancellation, to a webhook that
/// gets both (found by review: an agent proposing and cancelling held calls in a loop queued
/// two deliveries each, in order, ahead of every other agent's approvals, and then still one).
/// One decided or expired keeps both: those take a person, or the timeout, and the pending cap
/// bounds them; a webhook of requests only gets every request. Every record of such an
/// approval (a vote, an escalation before its cancellation) is left out, and it is forgotten
/// only once its cancellation's is passed (found by review: votes still went out for a request
/// never announced, and a record replayed after a lease came back found the set changed).
async fn left_out(
    st: &AppState,
    (hook, skipped): (&Webhook, &Skipped),
    holder: &str,
    rec: &AuditRecord,
    approval: Option<&assent_store::ApprovalRecord>,
) -> Option<bool> {
    let announced_later = hook.events.iter().any(|e| e == "approval.resolved");
    let skip = {
        let mut left = skipped.lock().unwrap_or_else(|e| e.into_inner());
        match (approval, rec.kind.as_str()) {
            (Some(a), "approval.requested")
                if a.status == ApprovalStatus::Cancelled && announced_later =>
            {
                left.contains(&a.id) || (left.len() < MAX_SKIPPED && left.insert(a.id.clone()))
            }
            (Some(a), _) => left.contains(&a.id),
            _ => false,
        }
    };
    if !skip {
        return None;
    }
    let moved = advance(st, hook, holder, rec.seq).await;
    if moved && rec.kind == "approval.cancelled" {
        let mut left = skipped.lock().unwrap_or_else(|e| e.into_inner());
        rec.approval_id.as_ref().map(|id| left.remove(id));
    }
    Some(moved)
}

/// Moves the cursor of `hook` past `seq`; whether `holder` still holds the lease.
async fn advance(st: &AppState, hook: &Webhook, holder: &str, seq: i64) -> bool {
    crate::cursor::advance(st, &hook.name, holder, seq).await
}

fn event_of(kind: &str) -> &'static str {
    match kind {
        "approval.requested" => "approval.requested",
        "decision.vote" | "decision.vote_withdrawn" => "approval.vote",
        "approval.escalated" => "approval.escalated",
        _ => "approval.resolved",
    }
}

/// Delivers one audit record's event (retrying, then dead-lettering) and moves the cursor,
/// renewing `holder`'s lease before every attempt. `false` when the lease was lost (nothing
/// more is sent; the new holder resumes at the cursor).
async fn deliver(
    st: &AppState,
    http: &reqwest::Client,
    (hook, skipped): (&Webhook, &Skipped),
    holder: &str,
    rec: &AuditRecord,
) -> bool {
    let event = event_of(&rec.kind);
    let approval = match &rec.approval_id {
        Some(id) if hook.events.iter().any(|e| e == event) => {
            match crate::cursor::approval_for_delivery(st, id.clone()).await {
                Ok(a) => a,
                Err(()) => return false,
            }
        }
        _ => None,
    };
    if let Some(moved) = left_out(st, (hook, skipped), holder, rec, approval.as_ref()).await {
        return moved;
    }
    let Some(a) = approval else {
        return advance(st, hook, holder, rec.seq).await;
    };
    let (body, checkpoint_header) = body_of(st, hook, rec, event, &a).await;
    let delivery = delivery_id(hook, rec);
    let (attempt, last_error) = loop {
        if !crate::cursor::lease_for(st, &hook.name, holder, rec.seq).await {
            return false;
        }
        // The count is the database's, so a restart or another replica goes on from it.
        let Some(attempt) = crate::cursor::count_attempt(st, &hook.name, holder, rec.seq).await
        else {
            return false;
        };
        let ts = now_ms() / 1000;
        let mut req = http.post(&hook.url);
        if let Some(c) = &checkpoint_header {
            req = req.header("x-assent-checkpoint", c);
        }
        let sent = req
            .header("content-type", "application/json")
            .header("user-agent", "assent-webhooks")
            .header("x-assent-event", event)
            .header("x-assent-delivery", &delivery)
            .header("x-assent-timestamp", ts.to_string())
            .header("x-assent-signature", signature(&hook.secret, ts, &body))
            .body(body.clone())
            .send()
            .await;
        let (error, asked, for_good) = match sent {
            Ok(r) if r.status().is_success() => {
                tracing::info!(webhook = %hook.name, delivery = %delivery, event, attempt, "webhook delivered");
                st.metrics.delivery(true, false);
                return advance(st, hook, holder, rec.seq).await;
            }
            Ok(r) => (
                format!("HTTP {}", r.status().as_u16()),
                retry_after(&r),
                refused_for_good(r.status()),
            ),
            Err(e) => (format!("{}", e.without_url()), None, false),
        };
        tracing::warn!(webhook = %hook.name, delivery = %delivery, attempt, error = %error, "webhook delivery failed");
        let last = for_good || attempt >= hook.max_attempts;
        st.metrics.delivery(false, last);
        if last {
            break (attempt, error);
        }
        let delay = backoff(hook.retry_initial_ms, attempt);
        let wait = asked.map_or(delay, |w| w.max(delay));
        if !crate::cursor::hold_through(st, &hook.name, holder, wait).await {
            return false;
        }
    };
    tracing::error!(webhook = %hook.name, delivery = %delivery, attempts = attempt, "webhook delivery dead-lettered");
    let tries = (attempt, last_error);
    dead_letter(st, holder, &hook.name, rec.seq, event, body, tries).await
}

/// The body of `hook`'s delivery of `rec` (event `event` of approval `a`), and the newest
/// signed checkpoint as the `X-Assent-Checkpoint` header (its canonical JSON), if any.
async fn body_of(
    st: &AppState,
    hook: &Webhook,
    rec: &AuditRecord,
    event: &str,
    a: &ApprovalRecord,
) -> (String, Option<String>) {
    let link = if event == "approval.requested" {
        single_use_link(st, a).await
    } else {
        None
    };
    let checkpoint = store(st, |s| s.latest_checkpoint())
        .await
        .flatten()
        .map(|c| crate::checkpoints::to_json(&c));
    let body = match hook.format {
        WebhookFormat::Json => {
            let mut v = json_body(st, hook, rec, event, a, link.as_deref());
            v["checkpoint"] = json!(checkpoint);
            v
        }
        WebhookFormat::Slack => slack_body(st, event, a, link.as_deref()),
    }
    .to_string();
    // Canonical JSON is ASCII (hex, digits, RFC 3339): a valid header value.
    let checkpoint_header = checkpoint
        .as_ref()
        .and_then(|c| assent_core::canonical::canonical_value(c).ok());
    (body, checkpoint_header)
}

/// The id of `hook`'s delivery of record `rec`: `NAME-SEQ-HASH12`, the record's sequence number
/// and the first 12 hex digits of its chain hash, so that a record that takes an earlier
/// one's number after a restore is not taken for it (found by review: `NAME-SEQ` repeated
/// after a restore, and receivers de-duplicating on it dropped the new events).
fn delivery_id(hook: &Webhook, rec: &AuditRecord) -> String {
    let hash = rec.hash.get(..12).unwrap_or(&rec.hash);
    format!("{}-{}-{hash}", hook.name, rec.seq)
}

/// A single-use link to the card, valid until the approval's announced deadline (needs
/// `public_url`): the escalation schedule's deadline when it has one, not the first step's
/// `expires_at` (found by review: the link died at the first escalation step).
async fn single_use_link(st: &AppState, a: &ApprovalRecord) -> Option<String> {
    let base = st.public_url.as_deref()?;
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).ok()?;
    let token = hex::encode(b);
    let hash = assent_core::canonical::sha256_hex(token.as_bytes());
    let (id, exp) = (a.id.clone(), a.announced_deadline());
    store(st, move |s| s.create_card_link(&hash, &id, exp)).await?;
    Some(format!("{base}/ui/l/{token}"))
}

/// The approval as it leaves the gateway: redacted arguments and texts; `damaged` (a list)
/// names its unreadable columns and, while it is pending, what no seal vouches for (`seal`,
/// `call`: [`assent_store::Store::checked_approval`]). An approval approved with an edit says
/// so (`arguments_changed: true`) and carries the arguments that run, redacted
/// (`edited_arguments`, `null` past [`ARGUMENTS_MAX`] bytes with their size in
/// `edited_arguments_bytes`). Found by review: `approval.resolved` carried the arguments as
/// proposed beside "approved", so a receiver recorded a call that never ran and never the one
/// that did.
fn approval_out(a: &ApprovalRecord) -> Value {
    let r = a.redactor();
    let last = a.decisions.last();
    let capped = |arguments: Value| {
        let size = arguments.to_string().len();
        if size > ARGUMENTS_MAX {
            (Value::Null, Some(size))
        } else {
            (arguments, None)
        }
    };
    let (arguments, omitted) = capped(r.arguments(&a.call.arguments));
    let (edited, edited_omitted) = match &a.edited {
        Some(e) => capped(r.arguments(&e.arguments)),
        None => (Value::Null, None),
    };
    json!({
        "id": a.id, "status": a.status.as_str(), "agent": a.agent, "session_id": a.session_id,
        "tool": a.call.tool, "server": a.call.server,
        "arguments": arguments, "arguments_bytes": omitted,
        "arguments_changed": a.edited.is_some(),
        "edited_arguments": edited, "edited_arguments_bytes": edited_omitted,
        "message": cut(&r.text(&a.terms.message)), "human_summary": cut(&r.summary(&a.call)),
        "risk_tier": a.terms.risk_tier,
        "risk_level": a.terms.risk_tier.risk_level(),
        "irreversible": a.terms.irreversible,
        "reasons": a.terms.reasons.iter().map(|x| cut(&r.text(&x.text))).collect::<Vec<_>>(),
        "side_effects": a.terms.side_effects.iter().map(|x| cut(&r.text(x))).collect::<Vec<_>>(),
        "rollback": a.terms.rollback.iter().map(|x| cut(&r.text(x))).collect::<Vec<_>>(),
        "requested_at": rfc3339(a.requested_at), "expires_at": rfc3339(a.expires_at),
        "decided_by": last.map(|d| d.actor.clone()),
        "reason": last.and_then(|d| d.reason.as_deref().map(|x| cut(&r.text(x)))),
        "scope": a.scope,
        "approvers": a.terms.approvers,
        "quorum": a.quorum_tally().map(|(_, t)| t.describe()),
        "votes": a.votes.iter().map(|v| json!({"by": v.principal, "decision": v.decision,
            "at": rfc3339(v.at), "reason": v.reason.as_deref().map(|x| cut(&r.text(x)))}))
            .collect::<Vec<_>>(),
        // Not empty: the row is not as the gateway wrote it (it cannot be approved).
        "damaged": a.damaged,
    })
}

fn json_body(
    st: &AppState,
    hook: &Webhook,
    rec: &AuditRecord,
    event: &str,
    a: &ApprovalRecord,
    link: Option<&str>,
) -> Value {
    let mut v = json!({
        "event": event, "delivery_id": delivery_id(hook, rec),
        "audit_seq": rec.seq, "at": rfc3339(rec.at), "approval": approval_out(a),
    });
    if event == "approval.escalated" {
        v["escalation"] = escalation_of(rec);
    }
    if let Some(base) = st.public_url.as_deref() {
        v["links"] = json!({"card": format!("{base}/ui/approvals/{}", a.id), "open_once": link});
    }
    v
}

/// The step an `approval.escalated` audit record took (its data, times as RFC 3339): `step`,
/// `steps`, `added` (the roles that joined), `approvers`, `expires_at`, `deadline`.
fn escalation_of(rec: &AuditRecord) -> Value {
    let mut d: Value = serde_json::from_str(&rec.data).unwrap_or(Value::Null);
    for k in ["expires_at", "deadline"] {
        if let Some(ms) = d.get(k).and_then(Value::as_i64) {
            d[k] = json!(rfc3339(ms));
        }
    }
    d
}

/// The `format: slack` body: [`crate::slack::blocks::message`], with the card link (the
/// single-use one when there is one) and, when `slack` is configured without the bot token,
/// the deny button (approving needs the bot's own message: [`crate::slack::blocks::Buttons`]).
fn slack_body(st: &AppState, event: &str, a: &ApprovalRecord, link: Option<&str>) -> Value {
    let url = link.map(str::to_string).or_else(|| {
        st.public_url
            .as_deref()
            .map(|b| format!("{b}/ui/approvals/{}", a.id))
    });
    // With the bot token only the bot's own message carries buttons (`slack::from_our_message`).
    use crate::slack::blocks::Buttons;
    let offered = match &st.slack {
        Some(s) if s.bot_token.is_none() => Buttons::DenyOnly,
        _ => Buttons::None,
    };
    crate::slack::blocks::message(event, a, url.as_deref(), offered)
}

/// `GET /v1/webhooks/dead-letters[?limit=N&before_id=I]` (operator): deliveries that failed
/// every attempt, newest first, with their bodies (already redacted) and last errors; a page
/// of at most `limit` (1–1000, default 100) and about 1 MiB of bodies and errors
/// ([`assent_store::outbox::DEAD_LETTER_PAGE_BYTES`]), so a page may hold fewer; below
/// `before_id` when given (the last id of the page before). While more follow (the store read
/// a dead letter below a page that was full or cut by bytes), the answer has `Link:
/// </v1/webhooks/dead-letters?limit=N&before_id=I>; rel="next"`; the last page has none.
/// Found by review: a page cut by bytes gave no sign, and a client taking a short page for the
/// last stopped early. A receiver down for days leaves many; the list is never read whole.
#[utoipa::path(get, path = "/v1/webhooks/dead-letters", tag = "around",
    params(("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "At most this many (default 100); a page also ends after about 1 MiB of bodies and errors"),
           ("before_id" = Option<i64>, Query, description = "Only dead letters with a lower id: the next page, as the previous answer's `Link` header (`rel=\"next\"`) gives it")),
    responses((status = 200, description = "OK", body = assent_api::audit::DeadLetterList,
        headers(("Link" = String, description = "`</v1/webhooks/dead-letters?limit=N&before_id=I>; rel=\"next\"` while more may follow; absent on the last page")))),
    security(("operator_key" = [])))]
pub(crate) async fn dead_letters(
    axum::extract::State(st): axum::extract::State<AppState>,
    _op: Operator<ReadDeadLetters>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Result<axum::response::Response, crate::error::ApiError> {
    use axum::response::IntoResponse as _;
    let (before, limit) = crate::extract::page(&q, "before_id")?;
    let page = st
        .store_call_apart(move |s| s.dead_letters(before, limit))
        .await?;
    let dead_letters = page
        .letters
        .into_iter()
        .map(|d| api::DeadLetter {
            body: serde_json::from_str::<Value>(&d.body).unwrap_or(Value::Null),
            failed_at: rfc3339(d.failed_at),
            id: d.id,
            webhook: d.webhook,
            audit_seq: d.audit_seq,
            event: d.event,
            attempts: d.attempts,
            last_error: d.last_error,
        })
        .collect();
    let mut resp = crate::body::Body(api::DeadLetterList { dead_letters }).into_response();
    if let Some(next) = page.next {
        // Two integers: a valid header value and URL as is; nothing the client sent is echoed.
        let link =
            format!("</v1/webhooks/dead-letters?limit={limit}&before_id={next}>; rel=\"next\"");
        let value = axum::http::HeaderValue::from_str(&link)
            .map_err(crate::error::ApiError::unavailable)?;
        resp.headers_mut().insert(axum::http::header::LINK, value);
    }
    Ok(resp)
}
