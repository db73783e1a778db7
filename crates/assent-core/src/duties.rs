//! Separation of duties (issue 14 §2): a person may not approve what they asked for. A rule
//! with `separation_of_duties` (on by default for R4) refuses an approval from an owner of the
//! agent (`principals[].owns`) and from the person the call acts for (`on_behalf_of`). Saying
//! no is never refused: a deny, and cancelling, stay open to them.

use crate::approval::DecisionKind;

/// Who is deciding, as separation of duties sees them.
#[derive(Debug, Clone, Copy)]
pub struct Decider<'a> {
    /// The principal's name.
    pub name: &'a str,
    /// The agent ids they own (`principals[].owns`).
    pub owns: &'a [String],
}

/// Why `d` may not make decision `kind` on a call of `agent` acting for `on_behalf_of` when
/// the approval's terms say `separation_of_duties`: they own the agent, or the call acts for
/// them (an approval only). `None`: no conflict.
pub fn self_approval(
    separation_of_duties: bool,
    kind: DecisionKind,
    agent: &str,
    on_behalf_of: Option<&str>,
    d: &Decider<'_>,
) -> Option<String> {
    if !separation_of_duties || kind != DecisionKind::Approve {
        return None;
    }
    if d.owns.iter().any(|a| a == agent) {
        return Some(format!(
            "`{}` owns agent `{agent}` and may not approve its calls (separation of duties)",
            d.name
        ));
    }
    if on_behalf_of == Some(d.name) {
        return Some(format!(
            "the call acts on behalf of `{}`, who may not approve it (separation of duties)",
            d.name
        ));
    }
    None
}
