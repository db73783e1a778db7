//! Text rendering shared by the commands and `assent watch`: the human card of one approval
//! (what `assent show` prints and the watcher's card pane shows, read from the typed
//! `assent_api` approval), the time left before an approval or clarification expires (or its
//! status once settled), a verdict's reason on one line (the card's and `assent check`'s),
//! canonical JSON for arguments, and an error on one line. It does no I/O and knows no
//! endpoint.

use assent_api::approvals::Approval;
use assent_api::{ApprovalStatus, Reason};
use serde_json::Value;

/// An error with its causes (`{e:#}`) on one line: newlines become `; `, and the line is
/// made [`inert`] (a gateway's error message may quote what an agent sent).
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    inert(&format!("{e:#}").replace('\n', "; "))
}

/// `text` safe to print on an operator's terminal: core's [`assent_core::template::visible`]
/// (every control character — C0 including newline and carriage return, DEL, C1 such as the
/// one-byte CSI U+009B — and every bidirectional formatting character shown as its `\uXXXX`
/// escape instead of acting).
///
/// Attack (found by review): terminal spoofing. A held call's message and side effects are
/// rendered from its arguments, so an agent could put an escape sequence or a right-to-left
/// override in an argument and have `assent pending`, `show` or `watch` rewrite what the
/// operator reads (move the cursor up over the arguments line, erase it, reverse a name).
pub(crate) fn inert(text: &str) -> String {
    assent_core::template::visible(text).into_owned()
}

/// `println!` with the whole line made [`inert`]: for reports that quote what agents sent
/// (`assent replay`'s arguments, `assent suggest`'s descriptions built from argument keys).
/// JSON text stays JSON of the same value ([`assent_core::template::visible`]).
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::render::inert(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// Appends one card line: `line` made [`inert`] (its own trailing `\n` aside), then `\n`.
fn put(out: &mut String, line: String) {
    out.push_str(&inert(line.strip_suffix('\n').unwrap_or(&line)));
    out.push('\n');
}

/// Time left until `expires_at` (RFC 3339): `42s left`, `3m 07s left`, or `expiring now`;
/// the text itself when it is not a timestamp.
pub(crate) fn time_left(expires_at: &str) -> String {
    let Ok(t) =
        time::OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339)
    else {
        return expires_at.to_string();
    };
    let secs = (t - time::OffsetDateTime::now_utc()).whole_seconds();
    if secs <= 0 {
        "expiring now".into()
    } else if secs < 60 {
        format!("{secs}s left")
    } else {
        format!("{}m {:02}s left", secs / 60, secs % 60)
    }
}

/// What a card or a question shows beside its id: the time left until `expires_at` (see
/// [`time_left`]) while it is `pending`, else its `status` (`approved`, `answered`…).
pub(crate) fn time_left_or_status(pending: bool, expires_at: &str, status: &str) -> String {
    if pending {
        time_left(expires_at)
    } else {
        status.to_string()
    }
}

/// One reason of a verdict as `FILE RULE: TEXT` (`RULE: TEXT` for a built-in rule, whose
/// file is empty), as the card and `assent check` list them.
pub(crate) fn reason_line(r: &Reason) -> String {
    if r.file.is_empty() {
        format!("{}: {}", r.rule, r.text)
    } else {
        format!("{} {}: {}", r.file, r.rule, r.text)
    }
}

/// `v` as canonical JSON (RFC 8785, the text `call_hash` is taken over; plain JSON when it
/// cannot be canonicalised) with C1 controls, DEL and bidi formatting characters written as
/// JSON's `\uXXXX` escapes (`assent_core::template::visible`): still JSON of the same value.
pub(crate) fn canonical(v: &Value) -> String {
    let text = assent_core::canonical::canonical_value(v).unwrap_or_else(|_| v.to_string());
    assent_core::template::visible(&text).into_owned()
}

/// The human card of one approval: exact call, risk and why, time left, message, side
/// effects and rollback, decisions, `call_hash`; one field a line, each ending in `\n`, every
/// line made [`inert`] (an agent's arguments reach the message and the side effects).
pub(crate) fn card(a: &Approval) -> String {
    let mut out = String::new();
    card_call(a, &mut out);
    card_effects(a, &mut out);
    card_why(a, &mut out);
    card_outcome(a, &mut out);
    out
}

/// Id and time left (or status), agent and session, the exact call, risk, message, triggers.
fn card_call(a: &Approval, out: &mut String) {
    let pending = a.status == ApprovalStatus::Pending;
    let when = time_left_or_status(pending, &a.expires_at, a.status.as_str());
    put(out, format!("{}  [{when}]\n", a.id));
    put(
        out,
        format!("  agent:     {} (session {})\n", a.agent, a.session_id),
    );
    put(out, format!("  call:      {}\n", a.target()));
    put(
        out,
        format!("  arguments: {}\n", canonical(&a.call.arguments)),
    );
    put(
        out,
        format!(
            "  risk:      {} ({}){}\n",
            a.terms.risk_tier.as_str(),
            a.risk_level.as_str(),
            if a.terms.irreversible {
                ", irreversible"
            } else {
                ""
            }
        ),
    );
    put(out, format!("  message:   {}\n", a.terms.message));
    if !a.terms.triggers.is_empty() {
        put(
            out,
            format!("  triggers:  {}\n", a.terms.triggers.join(", ")),
        );
    }
}

/// Side effects, rollback, the dry-run tool and suggested alternatives.
fn card_effects(a: &Approval, out: &mut String) {
    match a.terms.side_effects.as_slice() {
        [] => put(
            out,
            String::from("  side effects: not described by any rule\n"),
        ),
        l => put(out, format!("  side effects: {}\n", l.join("; "))),
    }
    match a.terms.rollback.as_slice() {
        [] if a.terms.irreversible => put(
            out,
            String::from("  rollback:  none: the action is irreversible\n"),
        ),
        [] => put(
            out,
            String::from("  rollback:  not described by any rule\n"),
        ),
        l => put(out, format!("  rollback:  {}\n", l.join("; "))),
    }
    if let Some(t) = &a.terms.dry_run_tool {
        put(
            out,
            format!("  dry run:   {t} (from the dashboard, through the MCP hub)\n"),
        );
    }
    for alt in &a.terms.suggested_alternatives {
        put(out, format!("  alternative: {alt}\n"));
    }
}

/// Why the call is held (each reason's file, rule and text) and who may decide it.
fn card_why(a: &Approval, out: &mut String) {
    put(out, String::from("  why:\n"));
    for r in &a.terms.reasons {
        put(out, format!("    - {}\n", reason_line(r)));
    }
    if !a.terms.approvers.is_empty() {
        put(
            out,
            format!("  approvers: {}\n", a.terms.approvers.join(", ")),
        );
    }
    if let Some(s) = &a.schedule {
        put(out, format!("  escalation: {}\n", s.describe()));
    }
    if a.terms.separation_of_duties {
        let acts_for = a
            .on_behalf_of
            .as_deref()
            .map(|p| format!(", nor {p} (the call acts for them)"))
            .unwrap_or_default();
        put(
            out,
            format!(
                "  separation of duties: not by the owners of agent {}{acts_for}\n",
                a.agent
            ),
        );
    }
    if let Some(v) = &a.votes {
        put(out, format!("  quorum: {}\n", v.approvals.describe()));
        for c in &v.cast {
            let why = c
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            put(
                out,
                format!(
                    "    - {} by {} at {}{}{why}\n",
                    c.decision.as_str(),
                    c.by,
                    c.at,
                    signed(c.passkey_signed)
                ),
            );
        }
    }
}

/// ` (passkey-signed)` for a vote or decision a passkey signed (issue 14 §4).
fn signed(passkey: bool) -> &'static str {
    if passkey { " (passkey-signed)" } else { "" }
}

/// The default decision on timeout, the decisions taken, `call_hash`, the policy set's hash,
/// edited arguments and the grant scope.
fn card_outcome(a: &Approval, out: &mut String) {
    put(
        out,
        format!(
            "  on timeout: {} (expires {})\n",
            a.terms.default_decision.as_str(),
            a.expires_at
        ),
    );
    for d in &a.decisions {
        put(
            out,
            format!(
                "  decision:  {} by {} at {}{}{}\n",
                d.decision.as_str(),
                d.by,
                d.at,
                signed(d.passkey_signed),
                d.reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        );
    }
    put(out, format!("  call_hash: {}\n", a.call_hash));
    if let Some(h) = &a.policy_set_sha256 {
        put(
            out,
            format!("  policy set: sha256:{h} (in force when it was held)\n"),
        );
    }
    if a.arguments_changed {
        put(
            out,
            format!(
                "  approved arguments: {} (call_hash {})\n",
                edited_arguments(a),
                a.approved_call_hash.as_deref().unwrap_or("")
            ),
        );
    }
    if let Some(s) = &a.scope {
        put(out, format!("  scope:     {s}\n"));
    }
}

/// The operator's edited arguments of `a` as canonical JSON; `null` when the gateway sent
/// none.
pub(crate) fn edited_arguments(a: &Approval) -> String {
    canonical(a.arguments.as_ref().unwrap_or(&Value::Null))
}
