//! Joining an identical pending call (AAEP §6.1): a second proposal of the same call in the
//! same session waits on the approval already held for it instead of raising another — but
//! only when that approval was held under terms at least as strict as the new verdict's on
//! every axis ([`covers`]). Otherwise the earlier approval could be decided under weaker terms
//! than the rules ask for now: an in-client approval held before the session took in
//! untrusted output would let the agent's own user approve an egress call the session now
//! holds at R3 for an operator (issue 16 §3). Pure; the store calls it in the proposal's
//! transaction.

use crate::approval::{DefaultDecision, default_at_timeout};
use crate::quorum::{DenyRule, Quorum};
use crate::verdict::ApprovalTerms;

/// The first axis on which a held approval's terms are weaker than a new verdict's, so the
/// new call may not join it ([`covers`]). Shown by [`Weaker::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weaker {
    /// Someone who may decide the held approval (now or after its escalation steps) may not
    /// decide the new one.
    Approvers,
    /// The held approval needs fewer distinct approvals than the new verdict, or a quorum to
    /// deny where the new one lets one deny settle it ([`covers`]).
    Quorum,
    /// The held approval may be approved in the MCP client; the new verdict does not allow it.
    InClient,
    /// The held approval's risk tier is lower.
    RiskTier,
    /// The new verdict says irreversible; the held approval does not.
    Irreversible,
    /// The held approval approves at its timeout; the new verdict rejects.
    DefaultDecision,
    /// The new verdict asks for separation of duties; the held approval does not.
    SeparationOfDuties,
    /// The new verdict asks for a passkey-signed approval; the held approval does not.
    Passkey,
    /// A trigger of the new verdict (`session_untrusted`, `rate`, …) is not one of the held
    /// approval's.
    Triggers,
    /// The held approval's result limit is larger (or absent) than the new verdict's.
    OutputBytes,
    /// The new verdict masks an argument path the held approval does not.
    Redact,
}

impl Weaker {
    /// The axis's name, as audited (`approvers`, `quorum`, `in_client_approval`, `risk_tier`,
    /// `irreversible`, `default_decision`, `separation_of_duties`, `require_passkey`,
    /// `triggers`, `output_bytes`, `redact`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approvers => "approvers",
            Self::Quorum => "quorum",
            Self::InClient => "in_client_approval",
            Self::RiskTier => "risk_tier",
            Self::Irreversible => "irreversible",
            Self::DefaultDecision => "default_decision",
            Self::SeparationOfDuties => "separation_of_duties",
            Self::Passkey => "require_passkey",
            Self::Triggers => "triggers",
            Self::OutputBytes => "output_bytes",
            Self::Redact => "redact",
        }
    }
}

/// A pending approval as [`covers`] compares it: its terms as they stand now (approvers
/// widened by the escalation steps taken) and the roles its remaining escalation steps will
/// still add (`later`).
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// The approval's terms, approvers as they stand now.
    pub terms: &'a ApprovalTerms,
    /// The quorum in force now ([`crate::quorum::in_force`]), `None`: one approval decides.
    pub quorum: Option<&'a Quorum>,
    /// Roles the steps of its schedule not yet taken will add.
    pub later: &'a [String],
}

/// `Ok` when the new call whose verdict has `new` terms may join the pending approval `held`:
/// its terms are at least as strict on every axis —
/// - everyone who may decide it, now or after its remaining escalation steps, may decide the
///   new one (approvers ⊆, where no roles means any operator; the new verdict's escalation
///   roles count for it);
/// - its quorum is at least the new one's: every group of the new quorum has its own held
///   group, of roles within the new group's and as large; a held `deny: quorum` only when the
///   new quorum says so too (`deny: any` is the strict side: one no settles it);
/// - in-client approval only when the new verdict allows it; a risk tier as high; irreversible,
///   separation of duties and a passkey when the new verdict asks; `reject` at its timeout
///   when the new one rejects at its ([`default_at_timeout`]: a quorum rejects whatever the
///   stored default);
/// - every trigger and redacted path of the new verdict among its own, a result limit as
///   small.
///
/// `Err` names the first weaker axis. Conservative: terms it cannot compare count as weaker
/// (the call is then held on its own, never joined).
pub fn covers(held: &Held<'_>, new: &ApprovalTerms) -> Result<(), Weaker> {
    let h = held.terms;
    let held_ever = union(&h.approvers, held.later);
    let new_ever = ever(new);
    check(
        within(&h.approvers, &new.approvers) && within(&held_ever, &new_ever),
        Weaker::Approvers,
    )?;
    check(quorum_covers(held.quorum, held.later, new), Weaker::Quorum)?;
    check(
        !h.in_client_approval || new.in_client_approval,
        Weaker::InClient,
    )?;
    check(h.risk_tier >= new.risk_tier, Weaker::RiskTier)?;
    check(h.irreversible || !new.irreversible, Weaker::Irreversible)?;
    // What each does at its timeout, as the expiry sweep decides it: a quorum, a passkey or
    // irreversibility make it reject whatever the stored default says.
    let rejects = |t: &ApprovalTerms| {
        let d = default_at_timeout(
            t.irreversible,
            t.require_passkey,
            t.quorum.as_ref(),
            t.default_decision,
        );
        d == DefaultDecision::Reject
    };
    check(rejects(h) || !rejects(new), Weaker::DefaultDecision)?;
    check(
        h.separation_of_duties || !new.separation_of_duties,
        Weaker::SeparationOfDuties,
    )?;
    check(h.require_passkey || !new.require_passkey, Weaker::Passkey)?;
    check(
        new.triggers.iter().all(|t| h.triggers.contains(t)),
        Weaker::Triggers,
    )?;
    let limit_ok = match (h.output_bytes, new.output_bytes) {
        (_, None) => true,
        (Some(a), Some(b)) => a <= b,
        (None, Some(_)) => false,
    };
    check(limit_ok, Weaker::OutputBytes)?;
    check(
        new.redact.iter().all(|p| h.redact.contains(p)),
        Weaker::Redact,
    )
}

fn check(ok: bool, axis: Weaker) -> Result<(), Weaker> {
    if ok { Ok(()) } else { Err(axis) }
}

/// Everyone who may decide a call held under `terms`, now or after its escalation steps: its
/// approvers widened by every step's roles (no roles: any operator).
fn ever(terms: &ApprovalTerms) -> Vec<String> {
    let later: Vec<String> = terms
        .escalation
        .iter()
        .flat_map(|e| e.steps.iter().flat_map(|s| s.approvers.iter().cloned()))
        .collect();
    union(&terms.approvers, &later)
}

/// Whether the operators roles `a` admit are among those `b` admits (no roles: any operator).
fn within(a: &[String], b: &[String]) -> bool {
    b.is_empty() || (!a.is_empty() && a.iter().all(|r| b.contains(r)))
}

/// `a` and the roles of `b` not in it. No roles in `a` stays no roles (any operator): an
/// escalation never narrows an approval open to any operator.
fn union(a: &[String], b: &[String]) -> Vec<String> {
    if a.is_empty() {
        return Vec::new();
    }
    let mut out = a.to_vec();
    for r in b {
        if !out.contains(r) {
            out.push(r.clone());
        }
    }
    out
}

/// The quorum axis of [`covers`]: the held quorum widened by its `later` roles (as its
/// escalation will widen it) against the new one.
fn quorum_covers(held: Option<&Quorum>, later: &[String], new: &ApprovalTerms) -> bool {
    let Some(qn) = &new.quorum else {
        return true;
    };
    let Some(qh) = held else {
        return false;
    };
    let qh = qh.widened(later);
    if qh.deny == DenyRule::Quorum && qn.deny == DenyRule::Any {
        return false;
    }
    // Each new group gets a held group of its own (greedy: a missed match only means a new
    // approval is raised, the safe side).
    let mut used = vec![false; qh.groups.len()];
    qn.groups.iter().all(|gn| {
        let found = qh
            .groups
            .iter()
            .enumerate()
            .find(|(i, gh)| !used[*i] && gh.count >= gn.count && within(&gh.roles, &gn.roles));
        match found {
            Some((i, _)) => {
                used[i] = true;
                true
            }
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::parse_approvers;
    use crate::risk::RiskTier;
    use crate::triggers::{Escalation, EscalationStep};
    use serde_json::json;

    fn terms() -> ApprovalTerms {
        ApprovalTerms::plain("send".into(), Vec::new(), RiskTier::R2)
    }

    fn roles(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    fn held<'a>(t: &'a ApprovalTerms, later: &'a [String]) -> Held<'a> {
        Held {
            terms: t,
            quorum: t.quorum.as_ref(),
            later,
        }
    }

    #[test]
    fn the_same_terms_join() {
        let mut t = terms();
        t.approvers = roles(&["ops"]);
        t.triggers = roles(&["rate"]);
        t.quorum = parse_approvers(&json!({"roles": ["ops"], "count": 2}))
            .unwrap()
            .quorum;
        assert_eq!(covers(&held(&t, &[]), &t), Ok(()));
        assert_eq!(covers(&held(&terms(), &[]), &terms()), Ok(()));
    }

    /// The attack: an in-client approval held before the session took in untrusted output
    /// must not stand in for the call the session now holds at R3 for an operator.
    #[test]
    fn an_in_client_approval_does_not_cover_a_tainted_call() {
        let mut old = terms();
        old.in_client_approval = true;
        let mut now = terms();
        now.risk_tier = RiskTier::R3;
        now.triggers = roles(&["session_untrusted"]);
        assert_eq!(covers(&held(&old, &[]), &now), Err(Weaker::InClient));
        now.in_client_approval = true; // were it still in-client, the tier still differs
        assert_eq!(covers(&held(&old, &[]), &now), Err(Weaker::RiskTier));
        old.risk_tier = RiskTier::R3;
        assert_eq!(covers(&held(&old, &[]), &now), Err(Weaker::Triggers));
    }

    #[test]
    fn each_weaker_axis_is_named() {
        let base = terms();
        type Stricter = fn(&mut ApprovalTerms);
        let cases: Vec<(Stricter, Weaker)> = vec![
            (|t| t.approvers = vec!["ops".into()], Weaker::Approvers),
            (|t| t.irreversible = true, Weaker::Irreversible),
            (
                |t| t.separation_of_duties = true,
                Weaker::SeparationOfDuties,
            ),
            (|t| t.output_bytes = Some(10), Weaker::OutputBytes),
            (|t| t.redact = vec!["/to".into()], Weaker::Redact),
            (
                |t| t.quorum = parse_approvers(&json!({"count": 2})).unwrap().quorum,
                Weaker::Quorum,
            ),
        ];
        for (stricter, axis) in cases {
            let mut new = base.clone();
            stricter(&mut new);
            assert_eq!(covers(&held(&base, &[]), &new), Err(axis), "{axis:?}");
            // The held approval under the stricter terms covers the plain call.
            assert_eq!(covers(&held(&new, &[]), &base), Ok(()), "{axis:?}");
        }
        let mut passkey = base.clone();
        passkey.require_passkey = true;
        // A passkey also makes the timeout reject: the default axis comes first only when
        // the held one approves at its timeout.
        assert_eq!(covers(&held(&base, &[]), &passkey), Err(Weaker::Passkey));
        let mut approves = base.clone();
        approves.default_decision = DefaultDecision::Approve;
        assert_eq!(
            covers(&held(&approves, &[]), &base),
            Err(Weaker::DefaultDecision)
        );
        assert_eq!(covers(&held(&base, &[]), &approves), Ok(()));
        // A held quorum call rejects at its timeout whatever its stored default says (the
        // sweep applies [`default_at_timeout`]), so it covers a call that rejects.
        let mut quorum_approves = approves.clone();
        quorum_approves.quorum = parse_approvers(&json!({"count": 2})).unwrap().quorum;
        let mut quorum_rejects = quorum_approves.clone();
        quorum_rejects.default_decision = DefaultDecision::Reject;
        assert_eq!(
            covers(&held(&quorum_approves, &[]), &quorum_rejects),
            Ok(())
        );
    }

    #[test]
    fn approvers_count_the_escalation_on_both_sides() {
        let mut new = terms();
        new.approvers = roles(&["finance"]);
        let mut old = new.clone();
        // Escalated to `lead` already, or to be: `lead` may decide it, not the new call.
        old.approvers = roles(&["finance", "lead"]);
        assert_eq!(covers(&held(&old, &[]), &new), Err(Weaker::Approvers));
        let later = roles(&["lead"]);
        assert_eq!(covers(&held(&new, &later), &new), Err(Weaker::Approvers));
        // Unless the new verdict escalates to `lead` too.
        new.escalation = Some(Escalation {
            steps: vec![EscalationStep {
                after_seconds: Some(60),
                approvers: roles(&["lead"]),
            }],
            last_wait_seconds: None,
        });
        assert_eq!(covers(&held(&new, &later), &new), Ok(()));
        // Any operator never covers a call only some may decide; the reverse is fine.
        assert_eq!(covers(&held(&terms(), &[]), &new), Err(Weaker::Approvers));
        assert_eq!(covers(&held(&new, &[]), &terms()), Ok(()));
    }

    #[test]
    fn a_quorum_covers_only_a_quorum_as_large_with_no_softer_deny() {
        let q = |v: serde_json::Value| parse_approvers(&v).unwrap().quorum;
        let mut two = terms();
        two.quorum = q(json!({"roles": ["ops"], "count": 2}));
        let mut three = terms();
        three.quorum = q(json!({"roles": ["ops"], "count": 3}));
        let mut by_quorum = terms();
        by_quorum.quorum = q(json!({"roles": ["ops"], "count": 2, "deny": "quorum"}));
        let mut two_groups = terms();
        two_groups.quorum = q(json!([{"role": "ops", "count": 1}, {"role": "sec", "count": 1}]));
        assert_eq!(covers(&held(&three, &[]), &two), Ok(()));
        assert_eq!(covers(&held(&two, &[]), &three), Err(Weaker::Quorum));
        assert_eq!(covers(&held(&by_quorum, &[]), &two), Err(Weaker::Quorum));
        assert_eq!(covers(&held(&two, &[]), &by_quorum), Ok(()));
        assert_eq!(covers(&held(&two, &[]), &two_groups), Err(Weaker::Quorum));
        // The held quorum as its escalation will widen it: `lead` may fill an `ops` place.
        let later = roles(&["lead"]);
        let h = Held {
            terms: &terms(),
            quorum: two.quorum.as_ref(),
            later: &later,
        };
        assert_eq!(covers(&h, &two), Err(Weaker::Quorum));
    }
}
