//! A newer single sign-on of one person supersedes the groups their earlier sign-ins held
//! (issue 14 §7): what those sign-ins decided is weighed again by the groups the provider
//! gives the person now, before the new session starts.
//!
//! Each decision, quorum vote and grant made signed in by single sign-on keeps the groups of
//! its sign-in (`standing::SSO_VOTE`), and start-up and reloads weigh it by what those groups
//! map to under the configuration in force. But only the provider knows a person's groups,
//! and it says so only at a sign-in. Attack (found by review): a contractor taken out of the
//! provider's `fin` group signed in again and could no longer decide payments, yet their
//! `workspace` grant kept letting every later call of the tool through, the vote they had cast
//! on a quorum of two still counted, the token of the call they had approved still redeemed,
//! and their other browser's session kept acting with `finance` for up to its twelve hours.
//! A sign-in now, with the groups in its ID token, even one whose groups map to no role (and is
//! refused), in this order:
//! - ends that identity's other sessions whose roles (their groups mapped under the `roles`
//!   map in force) are not all mapped from the new groups, first, so they decide nothing more
//!   while the rest runs;
//! - withdraws its votes on pending approvals whose roles those groups no longer map to
//!   (`decision.vote_withdrawn`);
//! - revokes its grants made with groups that mapped to a role the new groups do not, or whose
//!   approval those groups no longer let it decide (`grant.revoked`);
//! - voids the unredeemed tokens of the approvals whose consent rested on a vote of it that
//!   no longer stands, or on a single decision or grant of it made with groups that mapped to a
//!   role the new groups do not (a single decision keeps no roles, and a grant's tokens are
//!   weighed as one: any role lost takes them back), expired grants' included (`token.voided`).
//!
//! Roles are those the groups map to under the `roles` map in force; a map changed since a
//! decision was made is weighed by the restart that changed it (`oidc` is not reloaded).
//!
//! Actor `system:sign-in`. Decisions of other people, other identities and other providers are
//! untouched. The last three run only when a read beside the writer finds something of that
//! identity outstanding ([`assent_store::Store::binding_outstanding`]), so a sign-in of
//! someone with nothing outstanding (a refused one in a loop among them) stalls no write. A
//! store error refuses the sign-in (fail closed: the person tries again). Not covered: a
//! decision another session of the person had in flight when this sign-in ended it may commit
//! after the weighing (the next sign-in, restart or reload weighs it); votes, grants and
//! decisions made before their binding was kept (migrations 0038, 0048, 0052) name no
//! identity, and are weighed by start-up alone.
//! A person the provider removed entirely never signs in again: what they decided stands until
//! an operator revokes it, it expires, or a restart changes the map (SECURITY.md).

use crate::standing::{Regrouped, regrouped, sso_binding_prefix, vote_stands};
use crate::state::{AppState, now_ms};
use assent_store::grants_revoke::GrantOrigin;

/// The actor of the records a sign-in's re-weighing writes.
const BY: &str = "system:sign-in";

/// The reason those records give.
const WHY: &str =
    "the person signed in again by single sign-on without the groups it was decided with";

/// Weighs again what the single sign-on identity `id` (the name claim's value, without
/// `oidc:`) decided through this gateway's provider, by `groups`, the groups of its ID token
/// now that map to some role (see the module doc). `Ok`: how many sessions, votes, grants and
/// tokens it took back; `Err`: the store failed (the sign-in is refused).
pub(crate) async fn supersede(
    st: &AppState,
    id: &str,
    groups: Vec<String>,
) -> Result<usize, String> {
    let Some(oidc) = st.oidc.clone() else {
        return Ok(0);
    };
    let live = st.principals();
    let (id, name) = (
        id.to_string(),
        format!("{}{id}", crate::config::oidc::NAME_PREFIX),
    );
    let done = st
        .store_task(move |s| {
            let c = &oidc.config;
            let o = Some(c);
            let now_roles = c.roles_for(&groups);
            let session_stands = |g: &assent_store::ui_sessions::SsoGrant| {
                c.roles_now(g).iter().all(|r| now_roles.contains(r))
            };
            let mut n = s.end_sso_sessions_unless(&name, session_stands)?;
            if !s.binding_outstanding(&sso_binding_prefix(&id), now_ms())? {
                return Ok(n);
            }
            let provider = c.session_binding();
            let now_key = |key: Option<&str>| -> Option<Regrouped> {
                regrouped(key?, (&id, &provider), &groups, c)
            };
            // Another person's, identity's or provider's: not this sign-in's to weigh.
            let stands = |voter: &str, roles: &[String], key: Option<&str>| match now_key(key) {
                Some(r) if roles.is_empty() && r.lost_role => false,
                Some(r) => vote_stands(&live, o, (voter, roles, Some(&r.key))),
                None => true,
            };
            n += s.withdraw_votes(stands, BY, WHY, now_ms())?;
            let grant_stands = |g: &GrantOrigin| match now_key(g.key_binding.as_deref()) {
                // Any role lost takes it back, as it does the tokens of the calls it let
                // through (weighed as single decisions, which keep no roles: found by review,
                // a grant kept while its tokens were voided); else as start-up weighs one:
                // some role that may decide its approval (any operator's: none) still mapped.
                Some(r) if r.lost_role => false,
                Some(r) => g.approvers.as_deref().is_some_and(|a| match a {
                    [] => vote_stands(&live, o, (&g.created_by, &[], Some(&r.key))),
                    some => some.iter().any(|role| {
                        let one = std::slice::from_ref(role);
                        vote_stands(&live, o, (&g.created_by, one, Some(&r.key)))
                    }),
                }),
                None => true,
            };
            n += s.revoke_grants_unless(grant_stands, BY, WHY, now_ms())?;
            n += s.void_unbacked_tokens(&stands, BY, WHY, now_ms())?;
            Ok::<_, assent_store::StoreError>(n)
        })
        .await;
    match done {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.message),
    }
}
