//! Whether a standing grant (issue 14 §6: `session`, `15m`, `workspace`, `whole_tool`) still
//! stands for the consent it was made from, once the configuration changed who its decider is
//! (a reload, or a restart with an edited file; issue 14 §8). A grant is one operator's
//! decision kept and applied to later calls: when the key that made it is revoked, or the
//! operator removed or stripped of the role that let them decide, the decision no longer
//! stands and neither does the grant. Found by review: a stolen `ops` key approved held calls
//! with `scope: workspace` and `whole_tool`; removing the key by reload took back its votes and
//! sessions, but its grants kept letting every later call of those tools through.
//!
//! The server says what the configuration in force makes of the decider ([`Decider`]); this
//! rule says whether the grant stands. The store revokes the grants that do not
//! (`grant.revoked`, with the reason).

use crate::approval::may_decide;

/// What the configuration in force makes of the principal who made a grant (its
/// `created_by`), as the server finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider<'a> {
    /// A reload removed the principal, or changed any of their fields (key, kind, roles,
    /// agent, owned agents, single sign-on link, Slack account): which of them stood behind the
    /// decision is not known, so none is trusted.
    RemovedOrChanged,
    /// No operator of that name in the configuration in force: removed or renamed before a
    /// restart, or now an agent.
    Unknown,
    /// The operator is still configured, but what made the grant is not theirs any more: the
    /// grant keeps the binding of the key it was made with (or the Slack account, or the single
    /// sign-on identity; migration 0048) and the principal now has another (a key rotated by
    /// editing the file and restarting). Found by review: a stolen `ops` key's `workspace`
    /// grants outlived the key's rotation, since the operator kept their name and roles.
    Rebound,
    /// An operator who holds these roles now.
    Operator(&'a [String]),
    /// An `oidc:` name linked to no principal, while single sign-on is configured: its roles
    /// came from the provider's groups at sign-in, which cannot be asked again here (as for
    /// its quorum votes without a binding).
    UnlinkedSso,
}

/// Whether a grant made by `decider` from an approval that operators holding one of
/// `approvers` (its approver roles and those its escalation steps added; empty: any operator)
/// could decide still stands: the decider is an operator who may still decide that approval
/// ([`may_decide`]), or an unlinked single sign-on name. A removed, changed, unknown or
/// rebound decider's grant does not stand (fail closed: it is revoked, and the next call is held for a
/// person again).
pub fn grant_stands(decider: Decider<'_>, approvers: &[String]) -> bool {
    match decider {
        Decider::Operator(roles) => may_decide(approvers, roles),
        Decider::UnlinkedSso => true,
        Decider::RemovedOrChanged | Decider::Unknown | Decider::Rebound => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_removed_changed_or_unknown_decider_takes_their_grants_back() {
        for d in [Decider::RemovedOrChanged, Decider::Unknown] {
            assert!(!grant_stands(d, &[]));
            assert!(!grant_stands(d, &v(&["ops"])));
        }
    }

    #[test]
    fn a_grant_made_with_a_key_the_operator_no_longer_holds_does_not_stand() {
        assert!(!grant_stands(Decider::Rebound, &[]));
        assert!(!grant_stands(Decider::Rebound, &v(&["ops"])));
    }

    #[test]
    fn an_operator_who_lost_every_approver_role_takes_their_grants_back() {
        let roles = v(&["finance"]);
        assert!(!grant_stands(Decider::Operator(&roles), &v(&["ops"])));
        assert!(grant_stands(
            Decider::Operator(&roles),
            &v(&["ops", "finance"])
        ));
        assert!(grant_stands(Decider::Operator(&roles), &[]));
        assert!(!grant_stands(Decider::Operator(&[]), &v(&["ops"])));
    }

    #[test]
    fn an_unlinked_single_sign_on_name_keeps_its_grants() {
        assert!(grant_stands(Decider::UnlinkedSso, &v(&["ops"])));
    }
}
