//! Separation of duties (issue 14 §2): a person may not approve what they asked for. A rule
//! with `separation_of_duties` (on by default for R4) refuses an approval from an owner of the
//! agent (`principals[].owns`) and from the person the call acts for (`on_behalf_of`). Saying
//! no is never refused: a deny, and cancelling, stay open to them.
//!
//! A person may go by more than one name — a key's principal and the single sign-on identity
//! linked to it (`principals[].sso`), or an SSO operator `oidc:alice@example.com` whose call
//! acts `on_behalf_of: alice@example.com` — so the check matches every name they go by
//! ([`Decider::aka`]).

use crate::approval::DecisionKind;

/// Who is deciding, as separation of duties sees them.
#[derive(Debug, Clone, Copy)]
pub struct Decider<'a> {
    /// The principal's name.
    pub name: &'a str,
    /// The agent ids they own (`principals[].owns`).
    pub owns: &'a [String],
    /// The other names the same person goes by (their single sign-on name with and without
    /// the `oidc:` prefix); `on_behalf_of` naming any of them is the person too.
    pub aka: &'a [String],
}

/// `name` as [`same_person`] compares it: trimmed, NFKC, lower case.
fn folded(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    name.trim().nfkc().collect::<String>().to_lowercase()
}

/// `s`'s UTS #39 confusable skeleton: what a reader sees, one letter for all its look-alikes.
fn skeleton(s: &str) -> String {
    unicode_security::confusable_detection::skeleton(s).collect()
}

/// Whether names `a` and `b` read as one person's: equal once trimmed, compatibility-folded
/// (NFKC: fullwidth letters) and lower-cased, or with one confusable skeleton (UTS #39:
/// `olga@example.com` and `оlga@example.com` with a Cyrillic `о`, `I` and `l`, `rn` and `m`),
/// as they are or folded. Errs towards "the same": separation of duties refuses more, and a
/// single sign-on name that only looks like a linked `sso` signs no one in.
pub fn same_person(a: &str, b: &str) -> bool {
    let (fa, fb) = (folded(a), folded(b));
    fa == fb || skeleton(a.trim()) == skeleton(b.trim()) || skeleton(&fa) == skeleton(&fb)
}

/// Why `d` may not make decision `kind` on a call of `agent` acting for `on_behalf_of` when
/// the approval's terms say `separation_of_duties`: they own the agent, or the call acts for
/// them (an approval only; names compared without regard to case). `None`: no conflict.
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
    // Names are matched as a person reads them ([`same_person`]): `Ａlice@Example.com ` and
    // `аlice@example.com` (a Cyrillic `а`) are alice@example.com (found by review: an agent's
    // spelling escaped the exact match; refusing more errs safe).
    let same = |n: &str| on_behalf_of.is_some_and(|who| same_person(n, who));
    if let Some(who) = on_behalf_of
        && (same(d.name) || d.aka.iter().any(|n| same(n)))
    {
        let also = if same(d.name) {
            String::new()
        } else {
            format!(" (signed in as `{}`)", d.name)
        };
        return Some(format!(
            "the call acts on behalf of `{who}`{also}, who may not approve it (separation of duties)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by review: `on_behalf_of` was matched exactly, so an agent spelling the person
    /// `Alice@Example.com` let alice@example.com (signed in by SSO) approve a call made for her.
    #[test]
    fn a_person_spelt_in_another_case_is_still_the_person() {
        let aka = [
            "oidc:alice@example.com".to_string(),
            "alice@example.com".to_string(),
        ];
        let d = Decider {
            name: "alice",
            owns: &[],
            aka: &aka,
        };
        let refused = |who| self_approval(true, DecisionKind::Approve, "bot", Some(who), &d);
        assert!(refused("Alice@Example.com").is_some());
        assert!(refused("ALICE").is_some());
        assert!(refused("ａｌｉｃｅ@example.com").is_some());
        assert!(refused(" alice@example.com ").is_some());
        // Found by review: look-alike letters from other scripts read as the same person.
        assert!(refused("\u{430}lice@example.com").is_some(), "Cyrillic а");
        assert!(refused("aIice@example.com").is_some(), "I for l");
        assert!(refused("bob").is_none());
        assert!(refused("alicia@example.com").is_none());
        assert!(self_approval(true, DecisionKind::Deny, "bot", Some("ALICE"), &d).is_none());
    }
}
