//! A single sign-on session linked to a principal (`principals[].sso`) goes with it: a reload
//! that removes the principal ends the session (found by review: SECURITY.md said such a
//! session stayed signed in, acting unlinked; the code ends it, and this holds it to that).

use crate::kit::{AGENTS, Gw, OP, policy, start_custom};
use crate::sso::{GOOD, sso_session};
use assent_server::Settings;
use assent_server::config::Config;
use assent_server::config::oidc::Sso;
use reqwest::StatusCode;
use std::sync::Arc;

/// The dashboard's answer to `cookie` on `/ui`: its status and page.
async fn home(gw: &Gw, cookie: &str) -> (StatusCode, String) {
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/ui", gw.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

/// Attack: olga's laptop, signed in to the dashboard by single sign-on as her linked identity,
/// is stolen; the administrator removes olga from the config and reloads. The session must
/// not keep deciding, linked or unlinked.
#[tokio::test]
async fn a_reload_that_removes_an_operator_ends_its_linked_sso_session() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    let gov = policy(
        "acme.test.sso-reload",
        "- tool: pay\n  approvers: {roles: [finance]}\n",
    );
    std::fs::write(conf.join("gov.yaml"), &gov).unwrap();
    let key = |k: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(k.as_bytes()));
    let principals = |olga: bool| {
        let olga = match olga {
            true => format!(
                "  - {{name: olga, kind: operator, roles: [finance], key_sha256: \"{}\", sso: olga@example.com}}\n",
                key("olga-key")
            ),
            false => String::new(),
        };
        format!(
            "agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance], key_sha256: \"{}\"}}\n{olga}  - {{name: bot, kind: agent, agent_id: bot, key_sha256: \"{}\"}}\n",
            key(OP),
            key(crate::kit::BOT),
        )
    };
    let file = crate::sso::write_config(&conf, GOOD, &principals(true));
    let cfg = Config::load(&file).unwrap();
    let sso = Sso::with_secret(cfg.oidc.as_ref().unwrap(), "secret".into()).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let gw = start_custom(&data, 300_000, Settings::default(), AGENTS, &gov, |st| {
        st.swap_live(assent_server::Live::new(
            cfg.registry.clone(),
            cfg.principals().unwrap(),
        ));
        st.oidc = Some(Arc::new(sso));
        st.reload = Some(Arc::new(assent_server::config::ReloadSource::new(
            &cfg, false,
        )));
    })
    .await;
    let (olga, _) = sso_session(&gw, "oidc:olga@example.com", (&["finance"], &["fin"]));
    let (s, page) = home(&gw, &olga).await;
    assert_eq!(s, StatusCode::OK, "signed in as linked olga");
    assert!(page.contains("olga"), "{page}");

    crate::sso::write_config(&conf, GOOD, &principals(false));
    let (s, b) = gw.req("POST", "/v1/reload", Some(OP), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, page) = home(&gw, &olga).await;
    assert_ne!(s, StatusCode::OK, "the session went with olga: {page}");
    assert!(!page.contains("olga@example.com"), "{page}");
    gw.stop().await;
}
