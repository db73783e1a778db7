//! Quorum votes cast from Slack are held at start-up to the roles the file gives their voter,
//! whatever else the voter is linked to.

use super::{FakeSlack, args, buttons, click, signed, slack, value_of, with_slack};
use crate::kit::{AGENTS, Gw, operator, policy, start_custom};
use assent_server::Settings;
use assent_server::config::Config;
use assent_server::config::oidc::Sso;
use reqwest::StatusCode;
use std::sync::Arc;

/// A gateway with Slack and single sign-on, where two finance votes settle a `pay` call and
/// fred (Slack user U0FRED, linked to the SSO identity `fred@example.com`) holds `fred_roles`.
async fn linked_gateway(dir: &std::path::Path, fake: &FakeSlack, fred_roles: &[&str]) -> Gw {
    let gov = policy(
        "acme.test.slack-votes",
        "- tool: pay\n  approvers: {roles: [finance], count: 2}\n",
    );
    let s = slack(fake, true);
    let cfg_dir = tempfile::tempdir().unwrap();
    let file = crate::sso::write_config(cfg_dir.path(), crate::sso::GOOD, "");
    let cfg = Config::load(&file).unwrap();
    let sso = Sso::with_secret(cfg.oidc.as_ref().unwrap(), "secret".into()).unwrap();
    start_custom(dir, 300_000, Settings::default(), AGENTS, &gov, |st| {
        let mut all = (*st.principals()).clone();
        let mut fred = operator("fred", fred_roles);
        fred.sso = Some("fred@example.com".into());
        all.push(fred);
        st.swap_live(assent_server::Live::new((*st.registry()).clone(), all));
        with_slack(st, s);
        st.oidc = Some(Arc::new(sso));
    })
    .await
}

/// Attack (found by review): fred, linked to a single sign-on identity, voted from Slack,
/// where the file gives him his roles; a restart took `finance` from him, but start-up took
/// his vote for a single sign-on's (whose roles the file cannot tell) and kept it, so one more
/// finance vote approved the payment. A vote from Slack says so, and is held to the file.
#[tokio::test]
async fn a_restart_that_takes_a_role_withdraws_the_slack_votes_cast_with_it() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = linked_gateway(dir.path(), &fake, &["finance"]).await;
    let id = gw.held("s1", "pay", args()).await;
    let buttons = buttons(&fake, &id).await;
    let once = value_of(&buttons, "assent_approve_once");
    let approve = click(&fake, "U0FRED", "assent_approve_once", &once);
    let (s, r) = signed(&gw, &approve).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["votes"]["cast"].as_array().unwrap().len(), 1, "{a}");
    gw.stop().await;

    let gw = linked_gateway(dir.path(), &fake, &["ops"]).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["votes"]["cast"], serde_json::json!([]), "{a}");
    // One finance vote is not two.
    let (s, a) = gw.decide(&id, "alice-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "pending", "{a}");
    gw.stop().await;
}
