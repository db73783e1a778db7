//! Whether a decision still stands when the principals or the single sign-on configuration
//! change (start-up, reload, and the decision's own write lock): what a quorum vote, a grant's
//! maker or a token's approver kept of how they decided — a key's binding, the Slack account
//! that clicked ([`SLACK_VOTE`]), the single sign-on identity, groups and provider
//! ([`SSO_VOTE`]), an agent's own user in the client ([`IN_CLIENT_USER`]) — held to the
//! configuration in force ([`vote_stands`], [`in_client_user_stands`]). Used by
//! [`crate::decide`] and by start-up's withdrawals in `lib.rs`.

/// The start of the binding of a quorum vote cast through Slack, followed by the Slack user
/// id that clicked (`slack:U0ALICE`): start-up holds it to the roles the file gives its voter
/// and to the voter's `slack_user_id`, and a reload that moves or removes that account
/// withdraws it (the principal changed).
pub(crate) const SLACK_VOTE: &str = "slack:";

/// The binding Slack votes kept before they named the account ([`SLACK_VOTE`]): it cannot
/// tell whether the account that clicked is still the voter's, so start-up withdraws it (the
/// voter clicks again).
const SLACK_VOTE_UNNAMED: &str = "slack";

/// The start of the binding of a quorum vote cast by single sign-on, followed by the JSON
/// object `{"id": SSO_NAME, "groups": [...], "provider": BINDING}`: the identity that signed
/// in (the name claim's value), the provider's groups that mapped to some role at sign-in, and
/// the provider's binding (its issuer and client id). Start-up maps the
/// groups again and holds a linked principal's vote to its link.
pub(crate) const SSO_VOTE: &str = "sso:";

/// The actor of a decision by an agent's own user in the MCP client (defined beside the other
/// reserved name prefixes, [`crate::config::principals::RESERVED_NAME_PREFIXES`]).
pub(crate) use crate::config::principals::IN_CLIENT_USER;

/// Whether an approving decision by `decider` with binding `key` is an agent's own user's in
/// the client ([`IN_CLIENT_USER`], no principal of that name) whose agent the principals
/// `live` still have under the key that sent it (a principal of that agent whose
/// `vote_key_binding` is `key`; a decision from before bindings were kept, `None`, needs the
/// agent only): what start-up weighs it by besides [`vote_stands`], which knows operators
/// only. Found by review: every restart voided the unredeemed tokens of the calls users had
/// approved in the client, as approvals of an operator no longer configured; and (a later
/// review) a stolen agent key's in-client approvals outlived the key's rotation.
pub(crate) fn in_client_user_stands(
    live: &[crate::config::Principal],
    (decider, key): (&str, Option<&str>),
) -> bool {
    let Some(agent) = decider.strip_prefix(IN_CLIENT_USER) else {
        return false;
    };
    let sent_it = |p: &crate::config::Principal| {
        matches!(&p.kind, crate::config::PrincipalKind::Agent { agent_id } if agent_id == agent)
            && key.is_none_or(|k| p.vote_key_binding() == k)
    };
    live.iter().all(|p| p.name != decider) && live.iter().any(sent_it)
}

/// What a single sign-on vote's binding holds after [`SSO_VOTE`].
#[derive(serde::Serialize, serde::Deserialize)]
struct SsoVote {
    /// The identity that signed in (the name claim's value, without `oidc:`).
    id: String,
    /// The provider's groups that mapped to some role at sign-in.
    groups: Vec<String>,
    /// The provider it signed in through: the binding of its issuer and client id
    /// ([`crate::config::oidc::OidcConfig::session_binding`]). Absent in a decision kept
    /// before it was recorded, which then stands nowhere.
    #[serde(default)]
    provider: Option<String>,
}

/// The binding a decision by single sign-on keeps ([`SSO_VOTE`] and its JSON): identity `id`,
/// `groups`, provider binding `provider`.
pub(crate) fn sso_vote_key(id: &str, groups: &[String], provider: &str) -> String {
    let v = SsoVote {
        id: id.to_string(),
        groups: groups.to_vec(),
        provider: Some(provider.to_string()),
    };
    // A struct of strings always serialises.
    let text = serde_json::to_string(&v).unwrap_or_default();
    format!("{SSO_VOTE}{text}")
}

/// What a newer sign-in of a single sign-on identity makes of a binding of its
/// ([`regrouped`]).
pub(crate) struct Regrouped {
    /// The binding with the newer sign-in's groups in place of those it keeps.
    pub(crate) key: String,
    /// Whether a role the kept groups map to under `oidc` now is one the newer groups do not
    /// map to: what a single decision (which keeps no roles) is weighed by.
    pub(crate) lost_role: bool,
}

/// The start every binding of single sign-on identity `id` has ([`sso_vote_key`]: the JSON
/// object's first member is the identity, as a JSON string, followed by a comma).
pub(crate) fn sso_binding_prefix(id: &str) -> String {
    let id = serde_json::to_string(id).unwrap_or_default();
    format!("{SSO_VOTE}{{\"id\":{id},")
}

/// `key` weighed by `groups`, the groups a newer sign-in of identity `id` through provider
/// `provider` mapped under `oidc`, when `key` is a single sign-on binding ([`SSO_VOTE`]) of
/// that identity and provider; `None` for any other binding (another identity's or
/// provider's, a key's, a channel's, an unreadable one). What that sign-in weighs the
/// identity's earlier decisions by (`dashboard::oidc::regroup`).
pub(crate) fn regrouped(
    key: &str,
    (id, provider): (&str, &str),
    groups: &[String],
    oidc: &crate::config::oidc::OidcConfig,
) -> Option<Regrouped> {
    let v: SsoVote = serde_json::from_str(key.strip_prefix(SSO_VOTE)?).ok()?;
    if v.id != id || v.provider.as_deref() != Some(provider) {
        return None;
    }
    let now = oidc.roles_for(groups);
    let lost_role = oidc.roles_for(&v.groups).iter().any(|r| !now.contains(r));
    Some(Regrouped {
        key: sso_vote_key(id, groups, provider),
        lost_role,
    })
}

/// Whether a quorum vote still stands at start-up: cast by `voter` with `roles` and the
/// binding `key` (see [`crate::decide::Decider::key`]), under the principals `live` and the single sign-on
/// configuration `oidc` now in force.
///
/// - A key's vote: that key is still the voter's, and the file still gives the roles.
/// - A Slack vote: the file still gives its voter the roles and the Slack account that cast
///   it (`slack_user_id`); one kept before votes named the account is withdrawn.
/// - A single sign-on vote: `oidc` is configured with the provider it was cast through (the
///   same issuer and client id; one kept before votes named the provider is withdrawn), its
///   groups still map to every role it
///   voted with under `oidc.roles` ([`crate::config::oidc::OidcConfig::roles_now`]) — a single
///   decision, which keeps no roles, to some role — and the voter is still the operator
///   linked to that identity, or an unlinked `oidc:` name.
/// - A vote kept with no binding (cast before bindings said how it was cast): the former
///   rule, a linked person's standing while `oidc` is configured.
///
/// Attack (found by review): a restart that took a role from a group in `oidc.roles`, or from
/// an operator in the file, left the votes cast with it by single sign-on, or through Slack
/// by an operator linked to single sign-on, standing; one more vote then met a quorum of two.
/// And a vote cast through a Slack account mapped to the wrong operator survived the fix of
/// the map: the account's owner then voted a second time under their own name.
pub(crate) fn vote_stands(
    live: &[crate::config::Principal],
    oidc: Option<&crate::config::oidc::OidcConfig>,
    (voter, roles, key): (&str, &[String], Option<&str>),
) -> bool {
    let holds = |p: &crate::config::Principal| {
        p.roles()
            .is_some_and(|now| roles.iter().all(|r| now.contains(r)))
    };
    let found = live.iter().find(|p| p.name == voter);
    let oidc_name = voter.starts_with(crate::config::oidc::NAME_PREFIX);
    if let Some(text) = key.and_then(|k| k.strip_prefix(SSO_VOTE)) {
        // Unreadable: nothing stands behind it.
        let Ok(v) = serde_json::from_str::<SsoVote>(text) else {
            return false;
        };
        let grant = assent_store::ui_sessions::SsoGrant {
            roles: roles.to_vec(),
            groups: v.groups,
        };
        let mapped = |o: &crate::config::oidc::OidcConfig| {
            // A single decision keeps no roles: its groups must still map to some (found by
            // review: with none to check, an unlinked `oidc:` decider whose groups lost every
            // role still stood).
            if roles.is_empty() {
                return !o.roles_for(&grant.groups).is_empty();
            }
            let now = o.roles_now(&grant);
            roles.iter().all(|r| now.contains(r))
        };
        // Still that identity: a linked principal still linked to it (found by review: a
        // link moved to another identity kept the first one's vote), or its own `oidc:` name.
        let person = match found {
            Some(p) => p.sso.as_deref() == Some(v.id.as_str()) && p.roles().is_some(),
            None => voter.strip_prefix(crate::config::oidc::NAME_PREFIX) == Some(v.id.as_str()),
        };
        // Still that provider (found by review: a restart onto another issuer — the old one
        // compromised — left what the old one's sessions had decided standing: their votes,
        // grants and unredeemed tokens).
        let same_provider = |o: &crate::config::oidc::OidcConfig| {
            v.provider.as_deref() == Some(&o.session_binding())
        };
        return oidc.is_some_and(|o| same_provider(o) && mapped(o)) && person;
    }
    if let Some(user) = key.and_then(|k| k.strip_prefix(SLACK_VOTE)) {
        return found.is_some_and(|p| p.slack_user_id.as_deref() == Some(user) && holds(p));
    }
    match (found, key) {
        (_, Some(SLACK_VOTE_UNNAMED)) => false,
        (Some(p), Some(k)) => p.vote_key_binding() == k && holds(p),
        (Some(p), None) if oidc.is_some() && p.sso.is_some() => p.roles().is_some(),
        (Some(p), None) => holds(p),
        (None, _) => oidc.is_some() && oidc_name,
    }
}

#[cfg(test)]
mod tests {
    use super::vote_stands;
    use crate::config::{Principal, PrincipalKind};

    /// A Slack vote stands only while its voter still has the account that cast it and the
    /// roles; one kept before votes named the account cannot be checked, and is withdrawn.
    #[test]
    fn a_slack_vote_stands_only_with_the_account_that_cast_it() {
        let roles = vec!["finance".to_string()];
        let mut alice = Principal::with_key(
            "alice",
            "alice-key",
            PrincipalKind::Operator {
                roles: roles.clone(),
            },
        );
        alice.slack_user_id = Some("U0ALICE".into());
        let live = [alice];
        let stands = |key: &str| vote_stands(&live, None, ("alice", &roles, Some(key)));
        assert!(stands("slack:U0ALICE"));
        assert!(!stands("slack:U0CAROL"), "another account");
        assert!(!stands("slack"), "cast before votes named the account");
        assert!(!vote_stands(
            &live,
            None,
            ("bob", &roles, Some("slack:U0ALICE"))
        ));
    }
}
