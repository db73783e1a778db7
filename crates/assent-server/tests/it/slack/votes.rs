//! Quorum votes cast from Slack are held at start-up to the roles the file gives their voter,
//! whatever else the voter is linked to, and to the Slack account that cast them: a reload or
//! restart that moves or removes that account's mapping withdraws them.

use super::{FakeSlack, args, buttons, click, signed, slack, value_of, with_slack};
use crate::backend::audit_count;
use crate::grant_revocation::stop_verified;
use crate::kit::{AGENTS, Gw, assert_error, operator, policy, start_custom, token_of};
use assent_server::Settings;
use assent_server::config::Config;
use assent_server::config::oidc::Sso;
use reqwest::StatusCode;
use std::sync::Arc;

/// A gateway with Slack and single sign-on, where two finance votes settle a `pay` call and
/// fred (Slack user U0FRED, linked to the SSO identity `fred@example.com`) holds `fred_roles`.
async fn linked_gateway(dir: &std::path::Path, fake: &FakeSlack, fred_roles: &[&str]) -> Gw {
    start_with_fred(dir, fake, fred_roles, |_| {}).await
}

/// [`linked_gateway`] with fred as `edit` leaves him.
async fn start_with_fred(
    dir: &std::path::Path,
    fake: &FakeSlack,
    fred_roles: &[&str],
    edit: impl FnOnce(&mut assent_server::config::Principal),
) -> Gw {
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n";
    start_under(dir, fake, rules, fred_roles, edit).await
}

/// [`start_with_fred`] under `rules` (the `rules:` of the agents' policy).
async fn start_under(
    dir: &std::path::Path,
    fake: &FakeSlack,
    rules: &str,
    fred_roles: &[&str],
    edit: impl FnOnce(&mut assent_server::config::Principal),
) -> Gw {
    let gov = policy("acme.test.slack-votes", rules);
    let s = slack(fake, true);
    let cfg_dir = tempfile::tempdir().unwrap();
    let file = crate::sso::write_config(cfg_dir.path(), crate::sso::GOOD, "");
    let cfg = Config::load(&file).unwrap();
    let sso = Sso::with_secret(cfg.oidc.as_ref().unwrap(), "secret".into()).unwrap();
    start_custom(dir, 300_000, Settings::default(), AGENTS, &gov, |st| {
        let mut all = (*st.principals()).clone();
        let mut fred = operator("fred", fred_roles);
        fred.sso = Some("fred@example.com".into());
        fred.slack_user_id = Some("U0FRED".into());
        edit(&mut fred);
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

/// The approve-once click of Slack user `user` on approval `id`, answered.
async fn approve_from(gw: &Gw, fake: &FakeSlack, user: &str, id: &str) -> serde_json::Value {
    let once = value_of(&buttons(fake, id).await, "assent_approve_once");
    let mut c = click(fake, user, "assent_approve_once", &once);
    // Each click its own: Slack never sends the same signed request twice.
    static CLICKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CLICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    c["actions"][0]["action_ts"] = format!("1700000001.{n:06}").into();
    let (s, r) = signed(gw, &c).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    r
}

/// The principals who voted on approval `id`, in order.
async fn voters(gw: &Gw, id: &str) -> Vec<String> {
    let (_, a) = gw.approval(id, "alice-key").await;
    let cast = a["votes"]["cast"].as_array().cloned().unwrap_or_default();
    cast.iter()
        .map(|v| v["by"].as_str().unwrap().to_string())
        .collect()
}

/// Attack (found by review): Slack account U0CAROL, carol's, was mapped by mistake to alice;
/// carol clicked approve on a payment two finance approvers must approve, and the vote was
/// alice's. The admin fixed the map (U0CAROL → carol) and reloaded: alice was unchanged, so
/// her vote stayed, and carol's second click counted as carol — one person, one Slack
/// account, two votes. A principal whose Slack account changed is changed: its votes are
/// withdrawn, and carol's click after the fix is a first vote.
#[tokio::test]
async fn a_reload_that_moves_a_slack_account_withdraws_the_votes_it_cast() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n";
    let gov = policy("acme.test.slack-moved", rules);
    std::fs::write(conf.join("gov.yaml"), &gov).unwrap();
    let key = |k: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(k.as_bytes()));
    let text = |alice: &str, carol: &str| {
        format!(
            "agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\nslack: {{signing_secret_env: S, bot_token_env: T, channel: C0APPROVE}}\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance], key_sha256: \"{}\"{alice}}}\n  - {{name: carol, kind: operator, roles: [finance], key_sha256: \"{}\"{carol}}}\n  - {{name: bot, kind: agent, agent_id: bot, key_sha256: \"{}\"}}\n",
            key(crate::kit::OP),
            key("carol-key"),
            key(crate::kit::BOT),
        )
    };
    let file = conf.join("assent.yaml");
    std::fs::write(&file, text(", slack_user_id: U0CAROL", "")).unwrap();
    let cfg = Config::load(&file).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut s = slack(&fake, true);
    s.config.users = cfg.slack_users();
    let gw = start_custom(&data, 300_000, Settings::default(), AGENTS, &gov, |st| {
        let live = assent_server::Live::new(cfg.registry.clone(), cfg.principals().unwrap());
        st.swap_live(live);
        with_slack(st, s);
        st.reload = Some(Arc::new(assent_server::config::ReloadSource::new(
            &cfg, false,
        )));
    })
    .await;
    let id = gw.held("s1", "pay", args()).await;
    let r = approve_from(&gw, &fake, "U0CAROL", &id).await;
    assert_eq!(r["code"], "VOTE_COUNTED", "{r}");
    assert_eq!(
        voters(&gw, &id).await,
        ["alice"],
        "the map said U0CAROL is alice"
    );

    // The map is fixed: U0CAROL is carol's.
    std::fs::write(&file, text("", ", slack_user_id: U0CAROL")).unwrap();
    let (s, b) = gw
        .req("POST", "/v1/reload", Some(crate::kit::OP), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "decision.vote_withdrawn"), 1);
    assert!(
        voters(&gw, &id).await.is_empty(),
        "alice's vote is withdrawn"
    );

    // Carol's click is a first vote: one person, one account, one vote.
    let r = approve_from(&gw, &fake, "U0CAROL", &id).await;
    assert_eq!(r["code"], "VOTE_COUNTED", "{r}");
    assert_eq!(voters(&gw, &id).await, ["carol"]);
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "pending", "{a}");
    gw.stop().await;
}

/// Attack (found by review): a Slack account taken over was removed from the map and the
/// gateway restarted; the votes it had cast as fred still counted. Start-up holds a Slack
/// vote to the account that cast it: still fred's, it stands; removed, it is withdrawn.
#[tokio::test]
async fn a_restart_without_the_slack_account_withdraws_the_votes_it_cast() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = linked_gateway(dir.path(), &fake, &["finance"]).await;
    let id = gw.held("s1", "pay", args()).await;
    let r = approve_from(&gw, &fake, "U0FRED", &id).await;
    assert_eq!(r["code"], "VOTE_COUNTED", "{r}");
    gw.stop().await;

    // Same file: the vote stands.
    let gw = linked_gateway(dir.path(), &fake, &["finance"]).await;
    assert_eq!(voters(&gw, &id).await, ["fred"]);
    gw.stop().await;

    // Fred's Slack account is no longer his: withdrawn at start-up.
    let gw = start_with_fred(dir.path(), &fake, &["finance"], |f| f.slack_user_id = None).await;
    assert!(voters(&gw, &id).await.is_empty(), "withdrawn");
    assert_eq!(audit_count(&gw.data_dir, "decision.vote_withdrawn"), 1);
    gw.stop().await;
}

/// Attack (the door the votes' tests left open): fred's Slack account approved a held `pay`
/// alone (one finance approval, no quorum); its token waits unredeemed. The account is found
/// taken over, removed from fred's entry, and the gateway restarted. A single decision from
/// Slack rests on the account that made it, as a vote does: start-up voids its token
/// (`token.voided`) and redeeming it is `409 TOKEN_USED`. Restarted with the same file, the
/// decision stands and nothing is voided.
#[tokio::test]
async fn a_restart_without_the_slack_account_voids_the_token_it_approved_alone() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let one = "- tool: pay\n  approvers: [finance]\n";
    eprintln!("DEBUGDIR {}", dir.path().display());
    let dir = Box::leak(Box::new(dir));
    let gw = start_under(dir.path(), &fake, one, &["finance"], |_| {}).await;
    let id = gw.held("s1", "pay", args()).await;
    approve_from(&gw, &fake, "U0FRED", &id).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "approved", "{a}");
    let token = token_of(&gw.as_agent(&id).await);
    gw.stop().await;

    // Same file: the decision stands (read once start-up, which voids first, has served).
    let gw = start_under(dir.path(), &fake, one, &["finance"], |_| {}).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "approved", "{a}");
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 0);
    gw.stop().await;

    // Fred's Slack account is no longer his: its token is void.
    let gw = start_under(dir.path(), &fake, one, &["finance"], |f| {
        f.slack_user_id = None;
    })
    .await;
    let (s, b) = gw.redeem(&token, "pay", args(), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 1);
    stop_verified(gw).await;
}
