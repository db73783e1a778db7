//! What `POST /v1/policies/replay` takes as its candidate: the files a reload of the same
//! configuration would put in force, loaded as strictly as that reload would load them.

use crate::kit::{AGENTS, policy, start_reloading};
use assent_server::config::Config;
use reqwest::StatusCode;
use serde_json::json;
use sha2::{Digest, Sha256};

const OP: &str = "alice-key";

/// Found by review: a replay loaded its candidate as strictly as `assent serve --strict` said,
/// leaving out the file's `strict_agent_files: true`, which a reload honours: a candidate
/// agent file with a misspelt field (`aproval`) replayed as fine, and the reload that should
/// have put it in force then refused it. The replay refuses it, naming the field, as the
/// reload does.
#[tokio::test]
async fn a_replay_refuses_a_candidate_that_strict_agent_files_makes_a_reload_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    let gov = policy("acme.test.replay-strict", "- tool: read\n  risk_tier: R1\n");
    std::fs::write(conf.join("gov.yaml"), &gov).unwrap();
    let text = format!(
        "agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\nstrict_agent_files: true\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance], key_sha256: \"{}\"}}\n",
        hex::encode(Sha256::digest(OP.as_bytes()))
    );
    std::fs::write(conf.join("assent.yaml"), text).unwrap();
    let cfg = Config::load(&conf.join("assent.yaml")).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let gw = start_reloading(&data, &gov, &cfg).await;
    let typo = AGENTS.replace(
        "    - alias: read\n",
        "    - alias: read\n      aproval: true\n",
    );
    assert_ne!(typo, AGENTS);
    let body = json!({"agents": [{"file": "bot.agf.yaml", "text": typo}]});
    let (s, b) = gw.post("/v1/policies/replay", OP, body).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("POLICY_INVALID")),
        "{b}"
    );
    assert!(b["message"].as_str().unwrap().contains("aproval"), "{b}");
    // The reload it stood for is refused the same way; the unchanged file still replays.
    std::fs::write(conf.join("bot.agf.yaml"), &typo).unwrap();
    let (s, b) = gw.req("POST", "/v1/reload", Some(OP), None).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    let (s, b) = gw.post("/v1/policies/replay", OP, json!({})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}
