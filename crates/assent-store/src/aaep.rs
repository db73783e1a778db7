//! AAEP producer side (chapters 3, 5, 6): the event envelopes and the event log they are
//! written to, the subscription, stored-event and clarification types, and reply tokens.
//! Storing subscriptions and clarifications is `subscriptions.rs` and `clarifications.rs`.
//!
//! Every event is written to `aaep_events` in the same transaction as the state change it
//! reports, so an event is never sent for something that did not happen, and a subscriber that
//! reconnects with `Last-Event-ID` misses nothing. Events carry the chapter 3 envelope;
//! `sequence_number` is the row's `seq`, added when the event is read.

use crate::kit::rfc3339;
use crate::record::ApprovalRecord;
use assent_core::DefaultDecision;
use rusqlite::{Transaction, params};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The AAEP version assent implements.
pub const AAEP_VERSION: &str = "1.0.0";
/// The core context.
pub const CONTEXT: &str = "https://aaep-protocol.org/context/v1";
/// assent's extension namespace (prefix `assent`), used for courtesy notices and the
/// timeout-extension capability.
pub const ASSENT_CONTEXT: &str = "https://assent.dev/aaep/v1";

/// `prefix` + 32 lowercase hex characters of 128 random bits (`rpl_`, `evt_`, `sub_`;
/// AAEP §6.2.1).
pub fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    format!("{prefix}{}", hex::encode(b))
}

/// The AAEP `session_id` of an agent session: the agent's own id when it already matches
/// `^sess_[A-Za-z0-9]{1,64}$`, else `sess_` + 32 hex of SHA-256(agent, NUL, session) — stable,
/// and distinct for the same session id of two agents.
pub fn session_id(agent: &str, session: &str) -> String {
    let fits = session.strip_prefix("sess_").is_some_and(|r| {
        !r.is_empty() && r.len() <= 64 && r.chars().all(|c| c.is_ascii_alphanumeric())
    });
    if fits {
        return session.to_string();
    }
    let h = Sha256::digest(format!("{agent}\0{session}").as_bytes());
    format!("sess_{}", &hex::encode(h)[..32])
}

/// Whether events of `type` are critical (confirmations, clarifications, errors; AAEP §5.5.4):
/// never filtered or rate-limited.
pub fn is_critical(ty: &str) -> bool {
    matches!(
        ty,
        "aaep:agent.awaiting.confirmation"
            | "aaep:agent.awaiting.clarification"
            | "aaep:agent.session.errored"
    )
}

/// An event with the chapter 3 envelope around `body` (which holds `type` and the payload).
pub fn envelope(
    agent: &str,
    session: &str,
    at: i64,
    correlation_id: Option<&str>,
    body: Value,
) -> Value {
    let mut ev = json!({
        "@context": CONTEXT, "aaep_version": AAEP_VERSION, "event_id": random_id("evt_"),
        "session_id": session_id(agent, session), "timestamp": rfc3339(at),
        "producer": {"agent_id": agent},
    });
    if let Some(c) = correlation_id {
        ev["correlation_id"] = json!(c);
    }
    if let (Value::Object(e), Value::Object(b)) = (&mut ev, body) {
        e.extend(b);
    }
    ev
}

/// Appends `ev` to the event log (to one subscription, or to all with `None`).
pub(crate) fn emit(
    tx: &Transaction<'_>,
    ev: &Value,
    subscription: Option<&str>,
    approval_id: Option<&str>,
    at: i64,
) -> rusqlite::Result<()> {
    let ty = ev["type"].as_str().unwrap_or("");
    tx.prepare_cached("INSERT INTO aaep_events (event_id, type, critical, subscription_id, approval_id, at, data) VALUES (?1,?2,?3,?4,?5,?6,?7)")?
        .execute(params![ev["event_id"].as_str(), ty, is_critical(ty), subscription, approval_id, at, ev.to_string()])?;
    Ok(())
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// `aaep:agent.awaiting.confirmation` for a pending approval (AAEP §4.4.1, §6).
pub fn awaiting_confirmation(a: &ApprovalRecord, reply_token: &str) -> Value {
    let level = a.risk_tier.risk_level();
    let deadline = a.announced_deadline();
    let timeout = ((deadline - a.requested_at + 999) / 1000).clamp(1, 86_400);
    let target = match &a.call.server {
        Some(s) => format!("`{}` on MCP server `{s}`", a.call.tool),
        None => format!("`{}`", a.call.tool),
    };
    // Redacted arguments never leave the gateway (a rule's `redact`).
    let r = a.redactor();
    let arguments = assent_core::canonical::canonical_value(&r.arguments(&a.call.arguments))
        .unwrap_or_default();
    let consequence = format!(
        "{} runs {target} with exactly these arguments: {}.{} Risk {} ({level}).",
        a.agent,
        arguments,
        if a.irreversible {
            " It cannot be undone."
        } else {
            ""
        },
        a.risk_tier
    );
    let action = r.text(if a.message.is_empty() {
        &a.human_summary
    } else {
        &a.message
    });
    let reasons: Vec<String> = a.reasons.iter().map(|x| r.text(&x.text)).collect();
    let mut ev = envelope(
        &a.agent,
        &a.session_id,
        a.requested_at,
        Some(&a.trace_id),
        json!({
            "type": "aaep:agent.awaiting.confirmation", "urgency": "critical",
            "action": cut(&action, 16_384), "consequence": cut(&consequence, 16_384),
            "reply_token": reply_token, "timeout_seconds": timeout,
            "default_decision": if a.default_decision == DefaultDecision::Approve { "accept" } else { "reject" },
            "risk_level": level, "irreversible": a.irreversible,
            "reversibility": if a.irreversible { "irreversible" } else { "reversible" },
            "allowed_replies": ["accept", "reject"],
            "summary_terse": cut(&format!("Confirm: {action}"), 4096),
            "summary_normal": cut(&format!("{action} Risk {level}. Waiting {timeout} seconds; then {}.",
                if a.default_decision == DefaultDecision::Approve { "it proceeds" } else { "it is rejected" }), 16_384),
            "summary_detailed": cut(&format!("{} Why: {}. Call hash {}.", r.text(&a.human_summary), reasons.join("; "), a.call_hash), 16_384),
            "extra_context": {"approval_id": a.id, "call_hash": a.call_hash, "tool": a.call.tool,
                              "server": a.call.server, "risk_tier": a.risk_tier},
        }),
    );
    if let Some(e) = &a.escalation {
        ev["extensions"] = json!({"assent": {"escalation": {
            "after_seconds": e.after_seconds, "escalate_to": e.escalate_to,
            "deadline": rfc3339(deadline)}}});
    }
    ev
}

/// `aaep:agent.progress.updated` announcing that pending approval `a` was escalated at `at`
/// (Unix ms) to its `on_timeout.escalate_to` roles (issue 10 §5): AAEP has no
/// timeout-extension event and §6.1 forbids a second `awaiting.confirmation`, so this progress
/// event names the new approvers and the seconds left until the deadline already announced
/// in `timeout_seconds` ([`ApprovalRecord::announced_deadline`]). `progress.percent` is the
/// share of the announced wait that has passed; `extensions.assent.escalation` carries
/// `escalate_to`, `approvers` and `deadline` (RFC 3339).
pub fn escalated(a: &ApprovalRecord, at: i64) -> Value {
    let deadline = a.announced_deadline();
    let left_ms = (deadline - at).max(0);
    let left = (left_ms + 999) / 1000;
    let span = (deadline - a.requested_at).max(1);
    let percent = ((at - a.requested_at).clamp(0, span) * 100 / span) as u64;
    let to = a
        .escalation
        .as_ref()
        .map(|e| e.escalate_to.clone())
        .unwrap_or_default();
    let mut ev = envelope(
        &a.agent,
        &a.session_id,
        at,
        Some(&a.trace_id),
        json!({
            "type": "aaep:agent.progress.updated", "progress": {"percent": percent,
                "description": cut(&format!("Escalated to {}", to.join(", ")), 1024)},
            "summary_terse": format!("Escalated to {}; {left} s left to confirm.", to.join(", ")),
            "summary_normal": format!("No decision yet: the confirmation was escalated to {}; {left} seconds left. {}",
                to.join(", "), a.redactor().text(&a.message)),
            "eta_ms": left_ms,
        }),
    );
    ev["extensions"] = json!({"assent": {"escalation": {
        "escalate_to": to, "approvers": a.approvers, "deadline": rfc3339(deadline)}}});
    ev
}

/// `aaep:agent.state.changed` reporting how a confirmation was resolved (AAEP §6.7.2, §6.1:
/// a rejection is followed by an event reflecting the cancelled action).
pub fn resolution(a: &ApprovalRecord, at: i64, courtesy_for: Option<&str>) -> Value {
    let accepted = a.token.is_some();
    let how = match (a.status.as_str(), accepted) {
        ("approved", _) => "An operator accepted the action; the agent may now run it.".to_string(),
        ("expired", true) => {
            "No reply before the timeout; the default decision (accept) applied.".into()
        }
        ("expired", false) => {
            "No reply before the timeout; the action was rejected and will not run.".into()
        }
        ("cancelled", _) => "The action was cancelled and will not run.".into(),
        _ => "An operator rejected the action; it will not run and the agent re-plans.".into(),
    };
    let mut body = json!({
        "type": "aaep:agent.state.changed", "from_state": "awaiting_input",
        "to_state": if accepted { "calling_tool" } else { "thinking" },
        "summary_terse": if accepted { "Accepted." } else { "Not run." },
        "summary_normal": how,
    });
    if let Some(token) = courtesy_for {
        body["summary_normal"] = json!(format!("This confirmation was already resolved. {how}"));
        body["extensions"] =
            json!({"assent": {"courtesy_notice": true, "reply_token": token, "approval_id": a.id}});
    }
    let mut ev = envelope(&a.agent, &a.session_id, at, Some(&a.trace_id), body);
    if courtesy_for.is_some() {
        ev["@context"] = json!([CONTEXT, ASSENT_CONTEXT]);
    }
    ev
}

/// `aaep:agent.progress.updated` for a confirmation with `percent` of its time elapsed
/// (AAEP §6.4.3: at 50% and 10% remaining).
pub fn countdown(a: &ApprovalRecord, percent: u8, at: i64) -> Value {
    let left = ((a.announced_deadline() - at).max(0) + 999) / 1000;
    envelope(
        &a.agent,
        &a.session_id,
        at,
        Some(&a.trace_id),
        json!({
            "type": "aaep:agent.progress.updated", "progress": {"percent": percent},
            "summary_terse": format!("{left} s left to confirm."),
            "summary_normal": format!("Still waiting for confirmation: {left} seconds left. {}", a.redactor().text(&a.message)),
            "eta_ms": (a.announced_deadline() - at).max(0),
        }),
    )
}

/// `aaep:agent.session.cancelled` (AAEP §6.8: cancels every pending confirmation).
pub fn session_cancelled(
    agent: &str,
    session: &str,
    by_operator: bool,
    n: usize,
    at: i64,
) -> Value {
    envelope(
        agent,
        session,
        at,
        None,
        json!({
            "type": "aaep:agent.session.cancelled", "cancelled_by": if by_operator { "user" } else { "producer" },
            "summary_normal": format!("The session was cancelled; {n} pending confirmation(s) withdrawn."),
            "cancellation_reason": "session_cancelled",
        }),
    )
}

/// A stored subscription.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    /// `sub_…`.
    pub id: String,
    /// The operator who opened it.
    pub principal: String,
    /// `subscriber_id` of the request.
    pub subscriber_id: String,
    /// `honored_capabilities`.
    pub honored: Value,
    /// Events with a larger `seq` are delivered.
    pub start_seq: i64,
    /// Unix milliseconds of closing.
    pub closed_at: Option<i64>,
}

impl Subscription {
    /// Whether the subscriber said it can reply to confirmations.
    pub fn replies_to_confirmations(&self) -> bool {
        self.honored["supports_confirmation_reply"] == true
    }
    /// Whether the subscriber said it can reply to clarifications.
    pub fn replies_to_clarifications(&self) -> bool {
        self.honored["supports_clarification_reply"] == true
    }
    /// Whether a non-critical event of type `ty` passes the subscription's `event_filters`.
    pub fn wants(&self, ty: &str, critical: bool) -> bool {
        if critical {
            return true;
        }
        let f = &self.honored["event_filters"];
        let listed = |k: &str| {
            f[k].as_array()
                .is_some_and(|l| l.iter().any(|x| x.as_str() == Some(ty)))
        };
        let included = f["include"].as_array().is_none_or(|_| listed("include"));
        included && !listed("exclude")
    }
}

/// One stored event as delivered: its `seq` and the JSON with `sequence_number`.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    /// `sequence_number`.
    pub seq: i64,
    /// `event_id`.
    pub event_id: String,
    /// `type`.
    pub ty: String,
    /// Critical (never filtered).
    pub critical: bool,
    /// The event.
    pub data: Value,
}

/// A clarification question an agent asked (AAEP §4.4.2, §6.5).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Clarification {
    /// UUID v4.
    pub id: String,
    /// The asking agent.
    pub agent: String,
    /// Its session.
    pub session_id: String,
    /// The question.
    pub question: String,
    /// `accepted_response_kinds`: `freetext`, `yes_no`, `multiple_choice`, `numeric`.
    pub kinds: Vec<String>,
    /// `choices` for `multiple_choice`: `{value, label}`.
    pub choices: Vec<Value>,
    /// Optional context shown with the question.
    pub context: Option<String>,
    /// `rpl_…`.
    pub reply_token: String,
    /// Unix milliseconds.
    pub requested_at: i64,
    /// Unix milliseconds.
    pub expires_at: i64,
    /// `pending`, `answered`, `expired` or `cancelled`.
    pub status: String,
    /// The accepted response.
    pub response: Option<Value>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// Unix milliseconds.
    pub answered_at: Option<i64>,
}

/// `aaep:agent.awaiting.clarification`.
pub fn awaiting_clarification(c: &Clarification) -> Value {
    let timeout = ((c.expires_at - c.requested_at + 999) / 1000).clamp(1, 86_400);
    let mut body = json!({
        "type": "aaep:agent.awaiting.clarification", "urgency": "critical",
        "question": cut(&c.question, 16_384), "reply_token": c.reply_token, "timeout_seconds": timeout,
        "accepted_response_kinds": c.kinds,
        "summary_terse": cut(&format!("Question: {}", c.question), 4096),
        "summary_normal": cut(&format!("The agent asks: {} ({} seconds to answer)", c.question, timeout), 16_384),
    });
    if !c.choices.is_empty() {
        body["choices"] = json!(c.choices);
    }
    if let Some(ctx) = &c.context {
        body["context"] = json!(cut(ctx, 4096));
    }
    envelope(&c.agent, &c.session_id, c.requested_at, None, body)
}

/// `aaep:agent.state.changed` after a clarification was answered or expired.
pub fn clarification_resolved(c: &Clarification, at: i64) -> Value {
    let how = match c.status.as_str() {
        "answered" => "The question was answered; the agent continues.",
        "cancelled" => "The question was withdrawn.",
        _ => "No answer before the timeout; the agent continues without one.",
    };
    envelope(
        &c.agent,
        &c.session_id,
        at,
        None,
        json!({"type": "aaep:agent.state.changed", "from_state": "awaiting_input", "to_state": "thinking",
               "summary_normal": how}),
    )
}
