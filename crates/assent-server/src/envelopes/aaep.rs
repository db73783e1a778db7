//! The AAEP event envelopes (AAEP chapters 3–6) of the events the store reports
//! ([`AaepEvent`]): the chapter 3 envelope (`@context`, `aaep_version`, `event_id`,
//! `session_id`, `timestamp`, `producer`, `correlation_id`) around each event's body, and the
//! AAEP constants. Pure functions of the records; writing the event in its transaction is the
//! store's, serving it to subscribers is [`crate::aaep`].

use assent_core::DefaultDecision;
use assent_core::approval::DecisionKind;
use assent_core::clarification::{Clarification, ClarificationStatus};
use assent_core::summary::cut;
use assent_core::template::visible;
use assent_store::{AaepEvent, ApprovalRecord, ordered_id, rfc3339};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The AAEP version assent implements.
pub const AAEP_VERSION: &str = "1.0.0";
/// The core context.
pub const CONTEXT: &str = "https://aaep-protocol.org/context/v1";
/// assent's extension namespace (prefix `assent`), used for courtesy notices and the
/// timeout-extension capability.
pub const ASSENT_CONTEXT: &str = "https://assent.dev/aaep/v1";

/// The AAEP JSON of `e`, with a fresh `evt_` id.
pub fn render(e: &AaepEvent<'_>) -> Value {
    match *e {
        AaepEvent::AwaitingConfirmation {
            approval,
            reply_token,
        } => awaiting_confirmation(approval, reply_token),
        AaepEvent::Escalated { approval, at } => escalated(approval, at),
        AaepEvent::VoteCounted {
            approval,
            by,
            decision,
            at,
        } => vote_counted(approval, by, decision, at),
        AaepEvent::Resolution {
            approval,
            at,
            courtesy_for,
        } => resolution(approval, at, courtesy_for),
        AaepEvent::Countdown {
            approval,
            percent,
            at,
        } => countdown(approval, percent, at),
        AaepEvent::SessionCancelled {
            agent,
            session,
            by_operator,
            cancelled,
            at,
        } => session_cancelled(agent, session, by_operator, cancelled, at),
        AaepEvent::AwaitingClarification { clarification } => awaiting_clarification(clarification),
        AaepEvent::ClarificationResolved { clarification, at } => {
            clarification_resolved(clarification, at)
        }
    }
}

/// The AAEP `session_id` of an agent session: `sess_` + 32 lowercase hex of SHA-256(agent,
/// NUL, session) — stable, matching `^sess_[A-Za-z0-9]{1,64}$`, and distinct for the same
/// session id of two agents (AAEP §3.2.4: unique within a producer, and the producer of every
/// event is the gateway). Found by review, twice: an agent's own id passed through when it
/// already fitted the pattern, so an agent cancelling an idle session of the same name (the
/// hashed id of another's session, or a `sess_` name another agent used too) announced
/// `agent.session.cancelled` under the id of a session with a pending confirmation, and AAEP
/// clients following §6.8 dropped that prompt while its approving default ran on.
pub fn session_id(agent: &str, session: &str) -> String {
    let h = Sha256::digest(format!("{agent}\0{session}").as_bytes());
    format!("sess_{}", &hex::encode(h)[..32])
}

/// The `correlation_id` of approval `a`'s events: the W3C `traceparent` of the span that
/// raised it when it was traced (AAEP §3: "compatible with W3C Trace Context"; issue 15 §1),
/// else its MPLP trace id.
fn correlation(a: &ApprovalRecord) -> &str {
    a.traceparent.as_deref().unwrap_or(&a.trace_id)
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
        "@context": CONTEXT, "aaep_version": AAEP_VERSION, "event_id": ordered_id("evt_", at),
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

/// The longest `action`, `consequence`, `summary_normal` and `summary_detailed` of a
/// confirmation, in characters; a longer text is cut and ends in `…`.
pub const TEXT_MAX: usize = 16_384;

/// What a confirmation of `a` shows a person: `(action, consequence, summary)` — the message
/// (or the generated summary), the exact call with its (redacted) arguments, and the summary
/// generated from them. Invisible and control characters in the arguments are shown as
/// `\uXXXX` escapes ([`assent_core::template::visible`]): canonical JSON carries bidi
/// overrides and C1 controls raw.
fn texts(a: &ApprovalRecord) -> (String, String, String) {
    let target = match &a.call.server {
        Some(s) => format!("`{}` on MCP server `{s}`", a.call.tool),
        None => format!("`{}`", a.call.tool),
    };
    // Redacted arguments never leave the gateway (a rule's `redact`).
    let r = a.redactor();
    let arguments = assent_core::canonical::canonical_value(&r.arguments(&a.call.arguments))
        .unwrap_or_default();
    let consequence = format!(
        "{} runs {target} with exactly these arguments: {}.{} Risk {} ({}).",
        a.agent,
        visible(&arguments),
        if a.terms.irreversible {
            " It cannot be undone."
        } else {
            ""
        },
        a.terms.risk_tier,
        a.terms.risk_tier.risk_level()
    );
    // The message was rendered from the masked arguments (`text` is a second net); the
    // summary is generated again from them: the stored one shows the real values.
    let summary = r.summary(&a.call);
    let action = r.text(if a.terms.message.is_empty() {
        &summary
    } else {
        &a.terms.message
    });
    (action, consequence, summary)
}

/// Whether a confirmation of `a` shows the whole call: its `action` and its `consequence` (the
/// exact arguments) fit [`TEXT_MAX`] uncut, and no argument's value is masked as
/// `[redacted]` (a rule's `redact` names none of its values). When not, only `reject` is
/// offered and an `accept` reply is refused, as a Slack card that cannot show the call offers
/// only Deny.
///
/// Attack (found by review): canonical JSON sorts keys, so an agent put 140 padding keys
/// before `"to": "attacker@evil"`; every text of the confirmation was cut before the payee,
/// and an `accept` bound the whole call nobody had seen.
///
/// Attack (found by review): a rule redacts `card.number`; the agent proposes a refund to its
/// own card; the confirmation showed `[redacted]` and an `accept` approved the real number.
/// Whoever answers an AAEP event sees the event, not the API's unredacted call (the
/// subscriber's key is an operator's, but the person reading the client's prompt reads only
/// what the event says), so a masked call is accepted in assent itself.
pub fn shows_whole(a: &ApprovalRecord) -> bool {
    let (action, consequence, _) = texts(a);
    fits(&action, &consequence) && !a.redactor().hides_anything(&a.call.arguments)
}

/// Whether `action` and `consequence` fit [`TEXT_MAX`] uncut.
fn fits(action: &str, consequence: &str) -> bool {
    action.chars().count() <= TEXT_MAX && consequence.chars().count() <= TEXT_MAX
}

/// The `call_hash` a confirmation of `a` may carry: none when the redactor hides any of its
/// arguments' values.
///
/// Attack (found by review): the hash is a plain SHA-256 of the canonical call with the real
/// arguments, and the event shows every other argument; under `redact: [pin]` a reader of the
/// stream hashed the 10^4 candidate PINs offline and found the one whose call hashed to it.
/// Webhook bodies carry no hash at all; a Slack card's buttons carry none for such a call
/// (`slack::blocks::button_value`).
fn shown_call_hash(a: &ApprovalRecord) -> Option<&str> {
    (!a.redactor().hides_anything(&a.call.arguments)).then_some(a.call_hash.as_str())
}

/// `aaep:agent.awaiting.confirmation` for a pending approval (AAEP §4.4.1, §6). `accept` is
/// among its `allowed_replies` only when no passkey is required (a reply cannot carry an
/// assertion, issue 14 §4) and it shows the whole call, nothing masked ([`shows_whole`]).
/// `extra_context.call_hash` and the hash in `summary_detailed` only when nothing is masked
/// ([`shown_call_hash`]). `extensions.assent.deadline` (RFC 3339) is when the default decision
/// applies; a wait longer than [`MAX_TIMEOUT_SECONDS`] is announced as that, its real length in
/// `extensions.assent.timeout_seconds` and `summary_normal`.
pub fn awaiting_confirmation(a: &ApprovalRecord, reply_token: &str) -> Value {
    let level = a.terms.risk_tier.risk_level();
    let deadline = a.announced_deadline();
    // The schema's `timeout_seconds` stops at a day; a rule may wait a week. The real wait is
    // never understated: the texts say it, and `extensions.assent` carries it and the
    // deadline (found by review: a two-day wait was announced as one day, "then it
    // proceeds", and a client applied the default a day before the gateway did).
    let wait = ((deadline - a.requested_at + 999) / 1000).max(1);
    let timeout = wait.min(MAX_TIMEOUT_SECONDS);
    let (action, consequence, summary) = texts(a);
    let r = a.redactor();
    let offers_accept = !a.terms.require_passkey
        && fits(&action, &consequence)
        && !r.hides_anything(&a.call.arguments);
    let reasons: Vec<String> = a.terms.reasons.iter().map(|x| r.text(&x.text)).collect();
    let hash = shown_call_hash(a);
    let mut ev = envelope(
        &a.agent,
        &a.session_id,
        a.requested_at,
        Some(correlation(a)),
        json!({
            "type": "aaep:agent.awaiting.confirmation", "urgency": "critical",
            "action": cut(&action, TEXT_MAX), "consequence": cut(&consequence, TEXT_MAX),
            "reply_token": reply_token, "timeout_seconds": timeout,
            "default_decision": if a.terms.default_decision == DefaultDecision::Approve { "accept" } else { "reject" },
            "risk_level": level, "irreversible": a.terms.irreversible,
            "reversibility": if a.terms.irreversible { "irreversible" } else { "reversible" },
            "allowed_replies": if offers_accept { json!(["accept", "reject"]) } else { json!(["reject"]) },
            "summary_terse": cut(&format!("Confirm: {action}"), 4096),
            "summary_normal": cut(&format!("{action} Risk {level}. Waiting {wait} seconds; then {}.",
                if a.terms.default_decision == DefaultDecision::Approve { "it proceeds" } else { "it is rejected" }), TEXT_MAX),
            "summary_detailed": cut(&format!("{} Why: {}.{}", summary, reasons.join("; "),
                hash.map(|h| format!(" Call hash {h}.")).unwrap_or_default()), TEXT_MAX),
            "extra_context": {"approval_id": a.id, "tool": a.call.tool,
                              "server": a.call.server, "risk_tier": a.terms.risk_tier},
        }),
    );
    if let Some(h) = hash {
        ev["extra_context"]["call_hash"] = json!(h);
    }
    ev["extensions"]["assent"]["deadline"] = json!(rfc3339(deadline));
    if wait > MAX_TIMEOUT_SECONDS {
        ev["extensions"]["assent"]["timeout_seconds"] = json!(wait);
    }
    if let Some(s) = &a.escalation_schedule {
        ev["extensions"]["assent"]["escalation"] = json!({
            "steps": s.steps.iter().map(|st| json!({"at": rfc3339(st.at), "approvers": st.approvers}))
                .collect::<Vec<_>>(),
            "deadline": rfc3339(deadline)});
    }
    ev
}

/// The largest `timeout_seconds` an AAEP event may carry (its schema's maximum): one day.
/// A longer wait is announced as this, its real length in `extensions.assent.timeout_seconds`
/// and its end in `extensions.assent.deadline` ([`awaiting_confirmation`]).
pub const MAX_TIMEOUT_SECONDS: i64 = 86_400;

/// `aaep:agent.progress.updated` announcing that pending approval `a` took escalation step
/// `a.escalation_steps` at `at` (Unix ms; issues 10 §5, 14 §3): AAEP has no timeout-extension
/// event and §6.1 forbids a second `awaiting.confirmation`, so this progress event names the
/// roles that joined, the approvers now, when the step's wait ends (`expires_at`: the next
/// step, or the deadline) and the seconds left until the deadline already announced in
/// `timeout_seconds` ([`ApprovalRecord::announced_deadline`]). `progress.percent` is the share
/// of the announced wait that has passed; `extensions.assent.escalation` carries `step`,
/// `steps`, `added`, `approvers`, `expires_at` and `deadline` (RFC 3339).
pub fn escalated(a: &ApprovalRecord, at: i64) -> Value {
    let deadline = a.announced_deadline();
    let left_ms = deadline.saturating_sub(at).max(0);
    let left = left_ms / 1000 + i64::from(left_ms % 1000 != 0);
    let span = deadline.saturating_sub(a.requested_at).max(1);
    let passed = at.saturating_sub(a.requested_at).clamp(0, span);
    let percent = (i128::from(passed) * 100 / i128::from(span)) as u64;
    let (step, steps, added) = match &a.escalation_schedule {
        Some(s) => {
            let k = a.escalation_steps.clamp(1, s.steps.len().max(1));
            let added = s.steps.get(k - 1).map(|x| x.approvers.clone());
            (k, s.steps.len(), added.unwrap_or_default())
        }
        None => (0, 0, Vec::new()),
    };
    let to = added.join(", ");
    let mut ev = about(
        a,
        at,
        json!({
            "type": "aaep:agent.progress.updated", "progress": {"percent": percent,
                "description": cut(&format!("Escalated to {to} (step {step} of {steps})"), 1024)},
            "summary_terse": format!("Escalated to {to}; {left} s left to confirm."),
            "summary_normal": format!("No decision yet: the confirmation was escalated to {to}; {left} seconds left. {}",
                a.redactor().text(&a.terms.message)),
            "eta_ms": left_ms,
        }),
    );
    ev["extensions"] = json!({"assent": {"escalation": {
        "step": step, "steps": steps, "added": added, "approvers": a.terms.approvers,
        "expires_at": rfc3339(a.expires_at), "deadline": rfc3339(deadline)}}});
    ev
}

/// An event about approval `a` at `at` (its agent, session and trace) around `body`.
fn about(a: &ApprovalRecord, at: i64, body: Value) -> Value {
    envelope(&a.agent, &a.session_id, at, Some(correlation(a)), body)
}

/// `aaep:agent.progress.updated` for a vote counted on a confirmation that needs a quorum
/// (issue 14 §1; docs/conformance.md reads it against AAEP §6.3.5): `progress.percent` is the
/// share of the quorum's places filled, the description says who voted and what is missing,
/// and `extensions.assent.votes` carries the tally. The confirmation stays open.
pub fn vote_counted(a: &ApprovalRecord, by: &str, decision: DecisionKind, at: i64) -> Value {
    // Emitted only for an approval with a quorum; without one, one vote is all it takes.
    let tally = a.quorum_tally();
    let (counted, required) = tally
        .as_ref()
        .map_or((1, 1), |(q, t)| (t.counted(), q.required().max(1) as usize));
    let what = match decision {
        DecisionKind::Approve => "approved",
        DecisionKind::Deny => "voted to reject",
    };
    let text = format!("{by} {what}; {counted} of {required} approvals so far");
    let mut ev = about(
        a,
        at,
        json!({
            "type": "aaep:agent.progress.updated",
            "progress": {"percent": (counted * 100 / required).min(100) as u64,
                "description": cut(&text, 1024)},
            "summary_terse": format!("Vote counted: {counted} of {required}."),
            "summary_normal": format!("Still awaiting confirmation: {text}. {}",
                a.redactor().text(&a.terms.message)),
        }),
    );
    ev["extensions"] = json!({"assent": {"votes": {"by": by, "decision": decision,
        "counted": counted, "required": required,
        "quorum": tally.as_ref().map(|t| &t.0), "approvals": tally.as_ref().map(|t| &t.1)}}});
    ev
}

/// `aaep:agent.state.changed` reporting how a confirmation was resolved (AAEP §6.7.2, §6.1:
/// a rejection is followed by an event reflecting the cancelled action).
pub fn resolution(a: &ApprovalRecord, at: i64, courtesy_for: Option<&str>) -> Value {
    let accepted = a.went_ahead();
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
    // Which confirmation this resolves, in every resolution (found by review: only courtesy
    // notices said, and one session may have several pending, so a client following §6.8
    // could not tell which prompt to remove when a decoy was cancelled).
    body["extensions"] = match courtesy_for {
        Some(token) => {
            body["summary_normal"] =
                json!(format!("This confirmation was already resolved. {how}"));
            json!({"assent": {"courtesy_notice": true, "reply_token": token, "approval_id": a.id}})
        }
        None => json!({"assent": {"reply_token": a.reply_token, "approval_id": a.id}}),
    };
    let mut ev = envelope(&a.agent, &a.session_id, at, Some(correlation(a)), body);
    ev["@context"] = json!([CONTEXT, ASSENT_CONTEXT]);
    ev
}

/// `aaep:agent.progress.updated` for a confirmation with `percent` of its time elapsed
/// (AAEP §6.4.3: at 50% and 10% remaining).
pub fn countdown(a: &ApprovalRecord, percent: u8, at: i64) -> Value {
    let left = ((a.announced_deadline() - at).max(0) + 999) / 1000;
    about(
        a,
        at,
        json!({
            "type": "aaep:agent.progress.updated", "progress": {"percent": percent},
            "summary_terse": format!("{left} s left to confirm."),
            "summary_normal": format!("Still waiting for confirmation: {left} seconds left. {}", a.redactor().text(&a.terms.message)),
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

/// A multiple-choice option as shown: its `label` made [`visible`], followed by `(records
/// “VALUE”)` when it is not its value, as the dashboard shows it; its `value` (what a reply
/// names) as the agent gave it. Found by review: a subscriber showed "No" for a choice whose
/// recorded value was `delete_prod`.
fn shown_choice(choice: &Value) -> Value {
    let mut c = choice.clone();
    let value = c
        .get("value")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(label) = c.get("label").and_then(Value::as_str) {
        c["label"] = json!(if label == value {
            visible(label).into_owned()
        } else {
            format!("{} (records “{}”)", visible(label), visible(&value))
        });
    }
    c
}

/// `aaep:agent.awaiting.clarification`. The agent's question, context and choice labels are shown
/// with invisible and control characters as `\uXXXX` escapes ([`visible`]): a right-to-left
/// override or a terminal escape reaches no operator's client raw.
pub fn awaiting_clarification(c: &Clarification) -> Value {
    let timeout = ((c.expires_at - c.requested_at + 999) / 1000).clamp(1, MAX_TIMEOUT_SECONDS);
    let question = visible(&c.question);
    let mut body = json!({
        "type": "aaep:agent.awaiting.clarification", "urgency": "critical",
        "question": cut(&question, TEXT_MAX), "reply_token": c.reply_token, "timeout_seconds": timeout,
        "accepted_response_kinds": c.accepted_response_kinds,
        "summary_terse": cut(&format!("Question: {question}"), 4096),
        "summary_normal": cut(&format!("The agent asks: {question} ({timeout} seconds to answer)"), TEXT_MAX),
    });
    if !c.choices.is_empty() {
        body["choices"] = c.choices.iter().map(shown_choice).collect();
    }
    if let Some(ctx) = &c.context {
        body["context"] = json!(cut(&visible(ctx), 4096));
    }
    envelope(&c.agent, &c.session_id, c.requested_at, None, body)
}

/// `aaep:agent.state.changed` after a clarification was answered or expired.
pub fn clarification_resolved(c: &Clarification, at: i64) -> Value {
    let how = match c.status {
        ClarificationStatus::Answered => "The question was answered; the agent continues.",
        ClarificationStatus::Cancelled => "The question was withdrawn.",
        ClarificationStatus::Pending | ClarificationStatus::Expired => {
            "No answer before the timeout; the agent continues without one."
        }
    };
    // Which question this resolves (found by review: without it, a client following §6.8
    // could take an agent's decoy question timing out for the end of the session's pending
    // confirmation), as every confirmation's resolution says which it resolves.
    let body = json!({"type": "aaep:agent.state.changed", "from_state": "awaiting_input",
        "to_state": "thinking", "summary_normal": how,
        "extensions": {"assent": {"reply_token": c.reply_token, "clarification_id": c.id}}});
    let mut ev = envelope(&c.agent, &c.session_id, at, None, body);
    ev["@context"] = json!([CONTEXT, ASSENT_CONTEXT]);
    ev
}
