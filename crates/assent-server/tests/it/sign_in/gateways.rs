//! The gateways of the sign-in tests: one whose `oidc` issuer is a [`Provider`] on loopback.

use super::provider::Provider;
use crate::kit::{Gw, start_tuned};
use crate::sso::write_config;
use assent_server::config::Config;
use assent_server::config::oidc::Sso;
use std::sync::Arc;

/// A gateway whose `oidc` issuer is `p` (groups `fin` → role `finance`), with `customize`
/// applied to its state.
pub(crate) async fn gateway(
    dir: &std::path::Path,
    p: &Provider,
    customize: impl FnOnce(&mut assent_server::AppState),
) -> Gw {
    gateway_with(dir, p, "", customize).await
}

/// [`gateway`] with `more` (`, key: value`…) at the end of its `oidc` section.
pub(crate) async fn gateway_with(
    dir: &std::path::Path,
    p: &Provider,
    more: &str,
    customize: impl FnOnce(&mut assent_server::AppState),
) -> Gw {
    gateway_mapped(dir, p, ("{fin: [finance]}", more), customize).await
}

/// [`gateway_with`] whose `oidc.roles` map is `roles` (YAML flow mapping).
pub(crate) async fn gateway_mapped(
    dir: &std::path::Path,
    p: &Provider,
    (roles, more): (&str, &str),
    customize: impl FnOnce(&mut assent_server::AppState),
) -> Gw {
    let cfg_dir = tempfile::tempdir().unwrap();
    let oidc = format!(
        "oidc: {{issuer: '{}', client_id: assent, client_secret_env: ASSENT_TEST_OIDC_SECRET_NEVER_SET, roles_claim: groups, roles: {roles}{more}}}",
        p.issuer
    );
    let cfg = Config::load(&write_config(cfg_dir.path(), &oidc, "")).unwrap();
    let sso = Sso::with_secret(cfg.oidc.as_ref().unwrap(), "secret".into()).unwrap();
    start_tuned(dir, |st| {
        st.oidc = Some(Arc::new(sso));
        customize(st);
    })
    .await
}
