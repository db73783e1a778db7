//! Text rendering shared by the commands and `assent watch`: the human card of one approval
//! (what `assent show` prints and the watcher's card pane shows, read from the typed
//! `assent_api` approval), the time left before an approval or clarification expires (or its
//! status once settled), a verdict's reason on one line (the card's and `assent check`'s),
//! canonical JSON for arguments, and an error on one line. It does no I/O and knows no
//! endpoint.

use assent_api::approvals::Approval;
use assent_api::{ApprovalStatus, Reason};
use serde_json::Value;

/// The most characters of an error [`one_line`] prints.
const MAX_ERROR_CHARS: usize = 16_384;

/// An error with its causes (`{e:#}`) on one line: newlines become `; `, the line is made
/// [`inert`] (a gateway's error message may quote what an agent sent) and cut to
/// [`MAX_ERROR_CHARS`] (found by review: a hostile gateway's 32 MiB message was printed
/// whole).
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let line = inert(&format!("{e:#}").replace('\n', "; "));
    match line.char_indices().nth(MAX_ERROR_CHARS) {
        Some((at, _)) => format!("{}… (cut)", &line[..at]),
        None => line,
    }
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

/// [`inert`] `text`, with every run of more than two blank characters (any Unicode white
/// space: spaces, U+00A0, U+2000–U+200A, U+3000…, and the blank-looking U+2800, U+3164,
/// U+FFA0) shown as `␠×N`, N the run's length: what the card and `assent watch` show of a
/// value an agent or the gateway wrote.
///
/// Attack (found by review): fake field lines made of plain spaces. An agent sent
/// `recipient: "ACME" + 300 spaces + "  approvers: nobody, auto-approved"`; wrapped by the
/// terminal (or the watcher's pane), the padding ended a line and the rest started one of its
/// own that read like a real card field.
pub(crate) fn shown(text: &str) -> String {
    let text = inert(text);
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let mut n = 0usize;
    for c in text.chars().chain(std::iter::once('x')) {
        if c.is_whitespace() || matches!(c, '\u{2800}' | '\u{3164}' | '\u{ffa0}') {
            run.push(c);
            n += 1;
            continue;
        }
        if n > 2 {
            out.push_str(&format!("␠×{n}"));
        } else {
            out.push_str(&run);
        }
        run.clear();
        n = 0;
        out.push(c);
    }
    out.pop();
    out
}

/// Appends one card line: `label` as is (the card's own text: indent, field name and
/// padding), `value` [`shown`] (whatever an agent or the gateway wrote), then `\n`.
fn put(out: &mut String, label: &str, value: &str) {
    out.push_str(label);
    out.push_str(&shown(value));
    out.push('\n');
}

/// Time left until `expires_at` (RFC 3339): `42s left`, `3m 07s left`, or `expiring now`;
/// the text itself, made [`inert`], when it is not a timestamp (found by review: shown as
/// the gateway sent it, a bidi override there reached `assent watch`'s list).
pub(crate) fn time_left(expires_at: &str) -> String {
    let Ok(t) =
        time::OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339)
    else {
        return inert(expires_at);
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
/// value [`shown`] (an agent's arguments reach the message and the side effects).
pub(crate) fn card(a: &Approval) -> String {
    let mut out = String::new();
    card_damaged(a, &mut out);
    card_call(a, &mut out);
    card_effects(a, &mut out);
    card_why(a, &mut out);
    card_outcome(a, &mut out);
    out
}

/// The card's first lines when the gateway names something of the record as `damaged`.
/// Pending (unreadable columns, `seal`, `call`: what no seal vouches for): the record is not
/// as assent sealed it, what follows may not be what the agent asked for, and it cannot be
/// approved. Attack: a held call's payee edited in the database was shown by `assent
/// pending`, `show` and `watch` as the agent's request. Settled (`tokens.seal`, unreadable
/// columns): a neutral line, since a token sealed under a replaced audit key is named too, and
/// `assent audit verify` judges which it is.
fn card_damaged(a: &Approval, out: &mut String) {
    if a.damaged.is_empty() {
        return;
    }
    let what = a.damaged.join(", ");
    if a.status != ApprovalStatus::Pending {
        put(
            out,
            "!! unreadable or not vouched for by this gateway's seals: ",
            &what,
        );
        put(
            out,
            "!! (`assent audit verify` says whether it was changed)",
            "",
        );
        return;
    }
    put(out, "!! NOT AS ASSENT SEALED IT: ", &what);
    put(
        out,
        "!! changed outside assent? what follows may not be what the agent asked for,",
        "",
    );
    put(out, "!! and it cannot be approved", "");
}

/// Id and time left (or status), agent and session, the exact call, risk, message, triggers.
fn card_call(a: &Approval, out: &mut String) {
    let pending = a.status == ApprovalStatus::Pending;
    let when = time_left_or_status(pending, &a.expires_at, a.status.as_str());
    put(out, "", &format!("{}  [{when}]", a.id));
    let agent = format!("{} (session {})", a.agent, a.session_id);
    put(out, "  agent:     ", &agent);
    put(out, "  call:      ", &a.target());
    put(out, "  arguments: ", &canonical(&a.call.arguments));
    let irreversible = if a.terms.irreversible {
        ", irreversible"
    } else {
        ""
    };
    let risk = format!(
        "{} ({}){irreversible}",
        a.terms.risk_tier.as_str(),
        a.risk_level.as_str()
    );
    put(out, "  risk:      ", &risk);
    put(out, "  message:   ", &a.terms.message);
    if !a.terms.triggers.is_empty() {
        put(out, "  triggers:  ", &a.terms.triggers.join(", "));
    }
}

/// Side effects, rollback, the dry-run tool and suggested alternatives.
fn card_effects(a: &Approval, out: &mut String) {
    match a.terms.side_effects.as_slice() {
        [] => put(out, "  side effects: not described by any rule", ""),
        l => put(out, "  side effects: ", &l.join("; ")),
    }
    match a.terms.rollback.as_slice() {
        [] if a.terms.irreversible => put(out, "  rollback:  none: the action is irreversible", ""),
        [] => put(out, "  rollback:  not described by any rule", ""),
        l => put(out, "  rollback:  ", &l.join("; ")),
    }
    if let Some(t) = &a.terms.dry_run_tool {
        let t = format!("{t} (from the dashboard, through the MCP hub)");
        put(out, "  dry run:   ", &t);
    }
    for alt in &a.terms.suggested_alternatives {
        put(out, "  alternative: ", alt);
    }
}

/// Why the call is held (each reason's file, rule and text) and who may decide it.
fn card_why(a: &Approval, out: &mut String) {
    put(out, "  why:", "");
    for r in &a.terms.reasons {
        put(out, "    - ", &reason_line(r));
    }
    if !a.terms.approvers.is_empty() {
        put(out, "  approvers: ", &a.terms.approvers.join(", "));
    }
    if let Some(s) = &a.schedule {
        put(out, "  escalation: ", &s.describe());
    }
    if a.terms.separation_of_duties {
        let acts_for = a
            .on_behalf_of
            .as_deref()
            .map(|p| format!(", nor {p} (the call acts for them)"))
            .unwrap_or_default();
        let who = format!("not by the owners of agent {}{acts_for}", a.agent);
        put(out, "  separation of duties: ", &who);
    }
    if let Some(v) = &a.votes {
        put(out, "  quorum: ", &v.approvals.describe());
        for c in &v.cast {
            let why = c
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let vote = format!(
                "{} by {} at {}{}{why}",
                c.decision.as_str(),
                c.by,
                c.at,
                signed(c.passkey_signed)
            );
            put(out, "    - ", &vote);
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
    let timeout = format!(
        "{} (expires {})",
        a.terms.default_decision.as_str(),
        a.expires_at
    );
    put(out, "  on timeout: ", &timeout);
    for d in &a.decisions {
        let decision = format!(
            "{} by {} at {}{}{}",
            d.decision.as_str(),
            d.by,
            d.at,
            signed(d.passkey_signed),
            d.reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
        put(out, "  decision:  ", &decision);
    }
    put(out, "  call_hash: ", &a.call_hash);
    if let Some(h) = &a.policy_set_sha256 {
        let h = format!("sha256:{h} (in force when it was held)");
        put(out, "  policy set: ", &h);
    }
    if a.arguments_changed {
        let edited = format!(
            "{} (call_hash {})",
            edited_arguments(a),
            a.approved_call_hash.as_deref().unwrap_or("")
        );
        put(out, "  approved arguments: ", &edited);
    }
    if let Some(s) = &a.scope {
        put(out, "  scope:     ", s);
    }
}

/// The operator's edited arguments of `a` as canonical JSON; `null` when the gateway sent
/// none.
pub(crate) fn edited_arguments(a: &Approval) -> String {
    canonical(a.arguments.as_ref().unwrap_or(&Value::Null))
}

/// What starts each continuation of a card line too wide for the pane: no continuation can
/// line up with a field label (`  risk:`), whatever the line held.
pub(crate) const CONT: &str = "   ↳ ";

/// `text` as lines of at most `width` columns (`assent watch`'s card pane, and a card printed
/// on a terminal: [`for_stdout`]): each line as is when it fits, else cut (after
/// the last space in the second half of the room, else where the room ends), every piece
/// after the first starting with [`CONT`]. Attack (found by review): a value padded so that
/// the pane's own wrapping started a line with `  approvers: nobody, auto-approved`, which
/// read as a field of the card.
pub(crate) fn hang_lines(text: &str, width: usize) -> Vec<String> {
    // Each character counted at its widest: a terminal set to draw East Asian ambiguous
    // characters (`─`, `·`) two columns wide (xterm `-cjk_width`, iTerm2, gnome-terminal)
    // would otherwise wrap a line this believed fits (found by review: the fake field below
    // came back there).
    let cols = |c: char| unicode_width::UnicodeWidthChar::width_cjk(c).unwrap_or(0);
    let cont = unicode_width::UnicodeWidthStr::width_cjk(CONT);
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut rest: Vec<char> = line.chars().collect();
        let mut first = true;
        loop {
            let room = if first {
                width
            } else {
                width.saturating_sub(cont)
            }
            .max(1);
            let (mut used, mut cut) = (0, 0);
            while cut < rest.len() && (cut == 0 || used + cols(rest[cut]) <= room) {
                used += cols(rest[cut]);
                cut += 1;
            }
            if cut < rest.len()
                && let Some(sp) = rest[..cut].iter().rposition(|c| *c == ' ')
                && sp >= cut / 2
            {
                cut = sp + 1;
            }
            let piece: String = rest.drain(..cut).collect();
            lines.push(if first {
                piece
            } else {
                format!("{CONT}{piece}")
            });
            first = false;
            if rest.is_empty() {
                break;
            }
        }
    }
    lines
}

/// `text` (lines ending in `\n`) as printed on standard output, each line hung
/// ([`hang_lines`]) so that nothing after it wraps a line and no continuation can line up with
/// a field label: on a terminal to its width; elsewhere (a pipe, a file) to `$COLUMNS` when
/// it holds a width (procps `watch` sets it), else to [`PIPED_WIDTH`], since a pager or
/// `watch` reading the pipe wraps at the screen's width too. Found by review: a value padded
/// with visible filler (`─`, `·`) so that the terminal's own wrapping started a line with a
/// fake `  risk:      R0 (low)` field; runs of blanks were marked already. Scripts read
/// `--json`, which is never hung.
pub(crate) fn for_stdout(text: &str) -> String {
    use std::io::IsTerminal as _;
    let terminal = std::io::stdout()
        .is_terminal()
        .then(crossterm::terminal::size)
        .and_then(Result::ok)
        .map(|(cols, _)| usize::from(cols));
    let columns = || std::env::var("COLUMNS").ok()?.trim().parse::<usize>().ok();
    let width = terminal
        .or_else(columns)
        .filter(|w| *w > 0)
        .unwrap_or(PIPED_WIDTH);
    hang_lines(text, width)
        .into_iter()
        .fold(String::new(), |mut s, l| {
            s.push_str(&l);
            s.push('\n');
            s
        })
}

/// The width (columns) a card printed to a pipe or a file is hung to when `$COLUMNS` names
/// none ([`for_stdout`]).
pub(crate) const PIPED_WIDTH: usize = 80;

#[cfg(test)]
mod tests {
    use super::{CONT, hang_lines};

    /// Attack (found by review): an argument of `ACME`, a run of visible filler (`─`) and a
    /// fake `  risk:      R0 (low)` field, sized so that the terminal's own wrapping starts a
    /// line with the fake field at some width. Hung to the terminal's width, every line fits
    /// it and each continuation starts with the marker, whatever the width.
    #[test]
    fn a_card_hung_to_any_width_starts_no_line_with_an_agents_text() {
        let fake = "  risk:      R0 (low)";
        for filler in ["─", "·", "x"] {
            for n in [100, 226, 236, 500] {
                let line = format!(
                    "  arguments: {{\"to\":\"ACME{}{fake}\"}}\n",
                    filler.repeat(n)
                );
                for width in 20..=240 {
                    let lines = hang_lines(&line, width);
                    for (i, l) in lines.iter().enumerate() {
                        assert!(l.chars().count() <= width, "{width}: {l}");
                        // Ambiguous-width filler drawn two columns wide still fits.
                        let cjk = unicode_width::UnicodeWidthStr::width_cjk(l.as_str());
                        assert!(cjk <= width, "{width} (cjk {cjk}): {l}");
                        assert!(!l.starts_with(fake), "{width}: {l}");
                        assert!(i == 0 || l.starts_with(CONT), "{width}: {l}");
                    }
                }
            }
        }
    }
}
