//! The Slack messages of an approval (Block Kit, issue 15 §4): the card's essentials (redacted
//! as every message leaving the gateway), the outcome and who decided once it is settled, and
//! — while it is pending and `slack` is configured — the buttons: approve once, approve for
//! the session (only where the dashboard offers it), deny. Each button's `value` is
//! [`button_value`]: the approval id and the `call_hash` the message showed, so that a click
//! decides that call or nothing (a card hiding a redacted value carries no hash: [`binding`]). Also the deny modal asking for a reason. Kit of the Slack
//! interactivity endpoint and of the `format: slack` webhooks; it imports neither.

use crate::formats::rfc3339;
use assent_core::ApprovalStatus;
use assent_core::summary::cut;
use assent_store::ApprovalRecord;
use serde_json::{Value, json};

/// `action_id` of the approve-once button.
pub const APPROVE_ONCE: &str = "assent_approve_once";
/// `action_id` of the approve-for-the-session button.
pub const APPROVE_SESSION: &str = "assent_approve_session";
/// `action_id` of the deny button.
pub const DENY: &str = "assent_deny";
/// `callback_id` of the deny modal.
pub const DENY_MODAL: &str = "assent_deny";
/// `block_id` and `action_id` of the deny modal's reason input.
pub const REASON: &str = "reason";

/// A button's `value`: `APPROVAL_ID|BINDING` ([`binding`]).
pub fn button_value(a: &ApprovalRecord) -> String {
    format!("{}|{}", a.id, binding(a))
}

/// What a button of `a`'s card binds besides its id, which a click must name: the
/// `call_hash`, or [`REDACTED_BINDING`] when the card hides some argument's value
/// ([`hides_values`]; such a card offers only deny, and an approve click on it is refused).
///
/// Attack (found by review): the hash is a plain SHA-256 of the canonical call with the real
/// arguments and the card shows every other argument; under `redact: [pin]` anyone in the
/// channel could hash the 10^4 candidate PINs offline against the button's value.
pub fn binding(a: &ApprovalRecord) -> &str {
    if hides_values(a) {
        REDACTED_BINDING
    } else {
        &a.call_hash
    }
}

/// The [`binding`] of a card that hides some argument's value: reveals nothing of the call.
pub const REDACTED_BINDING: &str = "redacted";

/// Whether approving `a` for the rest of its session is offered (as the dashboard decides: a
/// tool call, not irreversible, no passkey required).
pub fn offers_session(a: &ApprovalRecord) -> bool {
    a.target_type == "other" && !a.terms.irreversible && !a.terms.require_passkey
}

/// Which decision buttons a message carries while its approval is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buttons {
    /// None (no Slack integration to take the clicks).
    None,
    /// Deny only: a message the gateway cannot recognise as its own when clicked (an
    /// incoming webhook's, without the bot token). Found by review: a button's value names
    /// the approval and its call hash, which its agent can read, so an agent holding the
    /// webhook's URL could post a message of its own words with a genuine Approve button.
    DenyOnly,
    /// Approve and deny: the bot's own message, whose channel and time a click is checked
    /// against (`slack::from_our_message`).
    All,
}

/// The message about approval `a` for `event` (`approval.requested`, `approval.escalated`,
/// `approval.vote`, `approval.resolved`): `text` and `blocks`. `card_url` adds an "Open in
/// assent" link button; `offered` the decision buttons while `a` is pending.
pub fn message(event: &str, a: &ApprovalRecord, card_url: Option<&str>, offered: Buttons) -> Value {
    let title = header(a, event);
    let Texts {
        message,
        args,
        effects,
    } = Texts::of(a);
    let tier = a.terms.risk_tier;
    let irreversible = if a.terms.irreversible {
        ", irreversible"
    } else {
        ""
    };
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": cut(&title, HEADER_MAX), "emoji": false}}),
        // What the agent wrote (the message, its arguments, the rule's side effects rendered
        // with them) is plain text: no mrkdwn, links or mentions of its making on the card.
        json!({"type": "section", "text": {"type": "plain_text", "text": cut(&message, MESSAGE_MAX), "emoji": false}}),
        json!({"type": "section", "fields": [
            {"type": "mrkdwn", "text": format!("*Risk*\n{tier} ({}){irreversible}", tier.risk_level())},
            {"type": "mrkdwn", "text": format!("*Expires*\n{}", rfc3339(a.announced_deadline()))},
            {"type": "plain_text", "text": format!("Arguments:\n{}", cut(&args, FIELD_MAX)), "emoji": false},
            {"type": "plain_text", "text": format!("Side effects:\n{}", cut(&effects, FIELD_MAX)), "emoji": false},
        ]}),
    ];
    let mut actions = Vec::new();
    // A record not as the gateway sealed it cannot be approved: deny only, and not even that
    // when its call or a column is damaged (every decision is refused then).
    let deniable = a.damaged.iter().all(|d| d == "seal" || d == "votes.seal");
    if offered != Buttons::None && a.status == ApprovalStatus::Pending && deniable {
        actions.extend(buttons(a, offered == Buttons::All && a.damaged.is_empty()));
    }
    if let Some(url) = card_url {
        actions.push(json!({"type": "button", "text": {"type": "plain_text", "text": "Open in assent"}, "url": url}));
    }
    if !actions.is_empty() {
        blocks.push(json!({"type": "actions", "block_id": "assent", "elements": actions}));
    }
    // These after the actions, so the actions stay the fourth block of every message. A row
    // edited behind the gateway's back is shown as such.
    if !a.damaged.is_empty() {
        let what = escape(&a.damaged.join(", "));
        let warning = format!(
            ":warning: *This approval's stored record is not as assent sealed it* ({what}): it may have been changed outside assent, what is shown may not be what the agent asked for, and it cannot be approved."
        );
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": cut(&warning, MESSAGE_MAX)}]}));
    }
    // After the actions, so the actions stay the fourth block of every message.
    if a.status == ApprovalStatus::Pending
        && let Some(w) = approve_withheld(a)
    {
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": w.note}]}));
    }
    if a.status != ApprovalStatus::Pending || !a.votes.is_empty() {
        blocks.push(outcome_block(a));
    }
    json!({"text": cut(&escape(&format!("{title}: {message}")), 3000), "blocks": blocks})
}

/// The header of `a`'s message for `event`: who wants to run what, and what became of it.
fn header(a: &ApprovalRecord, event: &str) -> String {
    let target = match &a.call.server {
        Some(s) => format!("{s}/{}", a.call.tool),
        None => a.call.tool.clone(),
    };
    match event {
        "approval.requested" => format!("{} wants to run {target}", a.agent),
        "approval.escalated" => format!(
            "{} wants to run {target}: escalated to {}",
            a.agent,
            escalated_roles(a).join(", ")
        ),
        "approval.vote" => format!("{} → {target}: {}", a.agent, progress(a)),
        _ => format!("{} → {target}: {}", a.agent, a.status.as_str()),
    }
}

/// The most characters of a header Slack shows (its limit for a header block).
const HEADER_MAX: usize = 150;
/// The most characters of the message a card shows; past it the message is cut (`…`).
const MESSAGE_MAX: usize = 2900;
/// The most characters of the arguments, and of the side effects, a card shows.
const FIELD_MAX: usize = 1900;

/// The texts of `a`'s card before they are cut: its message, its canonical arguments and its
/// side effects, all rendered from the redacted call.
struct Texts {
    message: String,
    args: String,
    effects: String,
}

impl Texts {
    fn of(a: &ApprovalRecord) -> Texts {
        let r = a.redactor();
        let effects: Vec<String> = a.terms.side_effects.iter().map(|x| r.text(x)).collect();
        // A message a template rendered blank is the summary (as the AAEP and MPLP views
        // show it): Slack refuses an empty or blank text (`invalid_blocks`), and found by
        // review, an agent whose argument filled `{{tool_args.note}}` with nothing stalled
        // every approval's Slack message behind its retries.
        let message = match a.terms.message.trim().is_empty() {
            true => r.summary(&a.call),
            false => r.text(&a.terms.message),
        };
        Texts {
            message,
            // Shown as the dashboard shows them (found by review): control, bidi and
            // invisible characters as `\uXXXX` escapes, so the card cannot hide text.
            args: visible_arguments(&r.arguments(&a.call.arguments)),
            effects: Some(effects.join("; "))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "not described".into()),
        }
    }
}

/// `arguments` as a card shows them: canonical JSON, with control, bidi and invisible
/// characters as `\uXXXX` escapes.
fn visible_arguments(arguments: &Value) -> String {
    let canonical = assent_core::canonical::canonical_value(arguments).unwrap_or_default();
    assent_core::template::visible(&canonical).into_owned()
}

/// Whether `a`'s card shows its message, arguments and side effects whole (none cut). A card
/// that does not offers no approve button, and an approve click on it is refused
/// (`CARD_TRUNCATED`): the approver must see the whole call they approve.
///
/// Attack (found by review): the card cut the arguments at 1,900 characters, and canonical
/// JSON sorts keys, so an agent put 2,000 harmless characters first and `"to":
/// "attacker@evil"` last; "Approve once" bound the whole call nobody had seen.
///
/// The header names the agent and the tool, cut at [`HEADER_MAX`]: a longer one hides part of
/// the tool's name (found by review: a rule for `*` holds any name, up to 256 bytes), so it
/// counts too.
pub fn shows_whole(a: &ApprovalRecord) -> bool {
    let t = Texts::of(a);
    let fits = |s: &str, max: usize| s.chars().count() <= max;
    let header = header(a, "approval.requested");
    // One short of the limit: the escalated header is this one and more, cut with an `…`.
    fits(&header, HEADER_MAX - 1)
        && fits(&t.message, MESSAGE_MAX)
        && fits(&t.args, FIELD_MAX)
        && fits(&t.effects, FIELD_MAX)
}

/// Why `a`'s card offers no approve button, when it does not: the stable code an approve click
/// on it is refused with, the note the card shows, and the text the clicker is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Withheld {
    /// `CARD_TRUNCATED` or `CARD_REDACTED`.
    pub code: &'static str,
    /// The card's note under its buttons (mrkdwn, the gateway's own words).
    pub note: &'static str,
    /// What the clicker of an approve button is told.
    pub text: &'static str,
}

/// The call does not fit the card whole ([`shows_whole`]).
const TRUNCATED: Withheld = Withheld {
    code: "CARD_TRUNCATED",
    note: "This call is too long to show here whole: open it in assent to approve it.",
    text: "This call is too long for a Slack card to show whole; open it in assent to approve it.",
};

/// The card shows `[redacted]` for some argument ([`hides_values`]).
const REDACTED: Withheld = Withheld {
    code: "CARD_REDACTED",
    note: "Some of this call's arguments are hidden here (redacted): open it in assent to approve it.",
    text: "This card hides some of the call's arguments (redacted), so it cannot be approved from Slack; open it in assent, which shows them, to approve it.",
};

/// Whether `a`'s card hides some argument's value behind `[redacted]` (a rule's `redact`
/// names a value of its call: [`assent_core::redact::Redactor::hides_anything`]).
///
/// Attack (found by review): a rule redacts `card.number`; the agent proposes a refund to its
/// own card, the card shows `[redacted]`, and "Approve once" approved the real number, which
/// no approver had seen (the call hash binds it). Slack is a shared channel, so it keeps the
/// mask; the approver approves in assent, which shows operators the real arguments.
pub fn hides_values(a: &ApprovalRecord) -> bool {
    a.redactor().hides_anything(&a.call.arguments)
}

/// Why `a`'s card offers no approve button ([`Withheld`]), or `None` when it shows the whole
/// call, nothing hidden: the approver must see every value they approve.
pub fn approve_withheld(a: &ApprovalRecord) -> Option<Withheld> {
    if !shows_whole(a) {
        Some(TRUNCATED)
    } else if hides_values(a) {
        Some(REDACTED)
    } else {
        None
    }
}

/// The decision buttons of pending approval `a`: deny only when its card cannot show it whole
/// and unmasked ([`approve_withheld`]) or approving from this message is not `approvable`.
fn buttons(a: &ApprovalRecord, approvable: bool) -> Vec<Value> {
    let value = button_value(a);
    let mut out = Vec::new();
    if approve_withheld(a).is_some() || !approvable {
        out.push(
            json!({"type": "button", "action_id": DENY, "style": "danger",
            "text": {"type": "plain_text", "text": "Deny…"}, "value": value}),
        );
        return out;
    }
    out.push(
        json!({"type": "button", "action_id": APPROVE_ONCE, "style": "primary",
        "text": {"type": "plain_text", "text": "Approve once"}, "value": value}),
    );
    if offers_session(a) {
        out.push(json!({"type": "button", "action_id": APPROVE_SESSION,
            "text": {"type": "plain_text", "text": "Approve for the session"}, "value": value}));
    }
    out.push(
        json!({"type": "button", "action_id": DENY, "style": "danger",
        "text": {"type": "plain_text", "text": "Deny…"}, "value": value}),
    );
    out
}

/// The quorum's progress, or "vote counted".
fn progress(a: &ApprovalRecord) -> String {
    a.quorum_tally()
        .map(|(_, t)| t.describe())
        .unwrap_or_else(|| "vote counted".into())
}

/// `s` with Slack's three control characters escaped (`&`, `<`, `>`: Slack's "escaping text"),
/// so text of someone else's making inside mrkdwn cannot link, mention (`<!channel>`) or
/// name a user.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// What became of `a` and by whom: "Approved by alice (once)", "Denied by bob: reason",
/// "Expired", "Cancelled", or the votes so far while it is pending (the reply to the one who
/// decided: their own reason, quoted).
pub fn outcome(a: &ApprovalRecord) -> String {
    match reason_of(a) {
        Some(x) => format!("{}: “{}”", outcome_head(a), escape(&x)),
        None => outcome_head(a),
    }
}

/// The reason of `a`'s last decision, as shown: redacted, its controls and line breaks
/// visible.
pub(crate) fn reason_of(a: &ApprovalRecord) -> Option<String> {
    let x = a.decisions.last()?.reason.as_deref()?;
    Some(assent_core::template::visible(&a.redactor().text(x)).into_owned())
}

/// The context block of a settled or voted card: the outcome in mrkdwn and, apart, its
/// reason as plain text. A reason is the agent's own words when it cancels: in mrkdwn it
/// could close its quotes and write `:white_check_mark: *Approved* by alice` on a line of
/// its own under a cancelled call (found by review).
///
/// An approval approved with an edit shows the arguments that run (redacted, as the card's
/// own), under the head "Approved with an edit". Found by review: the card kept showing the
/// arguments as proposed under "Approved", so the channel saw a call that never ran.
fn outcome_block(a: &ApprovalRecord) -> Value {
    let mut elements = vec![json!({"type": "mrkdwn", "text": cut(&outcome_head(a), 2900)})];
    if let Some(e) = a
        .edited
        .as_ref()
        .filter(|_| a.status == ApprovalStatus::Approved)
    {
        let shown = visible_arguments(&a.redactor().arguments(&e.arguments));
        let text = format!("Runs with, as edited:\n{}", cut(&shown, FIELD_MAX));
        elements.push(json!({"type": "plain_text", "text": text, "emoji": false}));
    }
    if let Some(x) = reason_of(a) {
        let text = format!("Reason: {}", cut(&x, 2000));
        elements.push(json!({"type": "plain_text", "text": text, "emoji": false}));
    }
    json!({"type": "context", "elements": elements})
}

/// [`outcome`] without its reason.
fn outcome_head(a: &ApprovalRecord) -> String {
    let last = a.decisions.last();
    // Names too are text of someone else's making (an SSO claim): escaped (found by review).
    let by = last
        .map(|d| format!(" by {}", escape(&d.actor)))
        .unwrap_or_default();
    match a.status {
        ApprovalStatus::Pending => {
            let voters: Vec<String> = a.votes.iter().map(|v| escape(&v.principal)).collect();
            format!("{} (votes: {})", progress(a), voters.join(", "))
        }
        ApprovalStatus::Approved => {
            let scope = a
                .scope
                .map(|s| s.to_wire())
                .unwrap_or_else(|| "once".into());
            let how = if a.edited.is_some() {
                "Approved with an edit"
            } else {
                "Approved"
            };
            format!(":white_check_mark: *{how}*{by} ({scope})")
        }
        ApprovalStatus::Rejected => format!(":no_entry: *Denied*{by}"),
        ApprovalStatus::Expired => format!(":hourglass: *Expired* at {}", rfc3339(a.expires_at)),
        ApprovalStatus::Cancelled => format!(":heavy_multiplication_x: *Cancelled*{by}"),
    }
}

/// The modal asking why approval `a` is denied; `metadata` comes back in the submission.
pub fn deny_modal(a: &ApprovalRecord, metadata: &str) -> Value {
    let target = match &a.call.server {
        Some(s) => format!("{s}/{}", a.call.tool),
        None => a.call.tool.clone(),
    };
    json!({
        "type": "modal", "callback_id": DENY_MODAL, "private_metadata": metadata,
        "title": {"type": "plain_text", "text": "Deny the call"},
        "submit": {"type": "plain_text", "text": "Deny"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            // Plain text: the tool name is the agent's (found by review: a backtick and
            // `<https://…|…>` in it rendered a link inside mrkdwn).
            {"type": "section", "text": {"type": "plain_text", "emoji": false,
                "text": cut(&format!("Deny {}'s call of {target}?", a.agent), 2900)}},
            {"type": "input", "block_id": REASON,
                "label": {"type": "plain_text", "text": "Reason (the agent is told)"},
                "element": {"type": "plain_text_input", "action_id": REASON,
                    "multiline": true, "max_length": 3000}},
        ],
    })
}

/// The roles the approval's last escalation step added.
fn escalated_roles(a: &ApprovalRecord) -> Vec<String> {
    a.escalation_schedule
        .as_ref()
        .and_then(|s| s.steps.get(a.escalation_steps.checked_sub(1)?))
        .map(|s| s.approvers.clone())
        .unwrap_or_default()
}
