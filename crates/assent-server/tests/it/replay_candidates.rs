//! What `POST /v1/policies/replay` takes as its candidate: the files a reload of the same
//! configuration would put in force, loaded as strictly as that reload would load them, and
//! weighed beside the grants standing when it runs.

use crate::kit::{AGENTS, policy, start_reloading};
use assent_server::config::Config;
use reqwest::StatusCode;
use serde_json::json;
use sha2::{Digest, Sha256};

const OP: &str = "alice-key";
const BOT: &str = "bot-key";

/// A gateway started from `dir/conf/assent.yaml` (alice, an operator; bot, the kit's agent,
/// whose `pay` asks over 100) with `gov` as `gov.yaml`, and `extra` lines in the file: the
/// gateway and the `conf` directory.
async fn from_config(
    dir: &std::path::Path,
    gov: &str,
    extra: &str,
) -> (crate::kit::Gw, std::path::PathBuf) {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    std::fs::write(conf.join("gov.yaml"), gov).unwrap();
    let key = |k: &str| hex::encode(Sha256::digest(k.as_bytes()));
    let text = format!(
        "agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\n{extra}principals:\n  - {{name: alice, kind: operator, roles: [finance], key_sha256: \"{}\"}}\n  - {{name: bot, kind: agent, agent_id: bot, key_sha256: \"{}\"}}\n",
        key(OP),
        key(BOT)
    );
    std::fs::write(conf.join("assent.yaml"), text).unwrap();
    let cfg = Config::load(&conf.join("assent.yaml")).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    (start_reloading(&data, gov, &cfg).await, conf)
}

/// Found by review: a replay loaded its candidate as strictly as `assent serve --strict` said,
/// leaving out the file's `strict_agent_files: true`, which a reload honours: a candidate
/// agent file with a misspelt field (`aproval`) replayed as fine, and the reload that should
/// have put it in force then refused it. The replay refuses it, naming the field, as the
/// reload does.
#[tokio::test]
async fn a_replay_refuses_a_candidate_that_strict_agent_files_makes_a_reload_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy("acme.test.replay-strict", "- tool: read\n  risk_tier: R1\n");
    let (gw, conf) = from_config(dir.path(), &gov, "strict_agent_files: true\n").await;
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

/// Found by review: replay took a call held for a person as a prompt even where a grant
/// standing now covers it, so a candidate turning a `deny` into a confirm passed the CI gate
/// while, once it was reloaded, an old whole-tool grant let the calls once denied run with
/// nobody asked. Here `pay` to `prod` is denied; alice approves a `pay` to `acme` for the
/// whole tool; the candidate without the deny is loosened by that grant, the call named.
#[tokio::test]
async fn a_candidate_whose_confirm_a_standing_grant_covers_is_loosened() {
    let dir = tempfile::tempdir().unwrap();
    let deny = "- tool: pay\n  deny: {condition: {args_match: {to: prod}}}\n";
    let gov = policy("acme.test.replay-grants", deny);
    let (gw, _conf) = from_config(dir.path(), &gov, "").await;
    let (s, b) = gw
        .propose("pay", json!({"amount": 500, "to": "prod"}))
        .await;
    assert_eq!(b["decision"], "deny", "{s} {b}");
    let (s, b) = gw
        .propose("pay", json!({"amount": 500, "to": "acme"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let grant = json!({"decision": "approve", "scope": "15m", "whole_tool": true, "reason": "ok"});
    let (s, b) = gw.decide_with(&id, OP, grant).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let lifted = policy("acme.test.replay-grants", "- tool: read\n  risk_tier: R1\n");
    let body = json!({"governance": [{"file": "gov.yaml", "text": lifted}]});
    let (s, b) = gw.post("/v1/policies/replay", OP, body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["overall"]["loosened"], 1, "{b}");
    let e = &b["loosened"][0];
    assert_eq!(
        (e["now"].as_str(), &e["covered_by_grant"]),
        (Some("confirm"), &json!(true)),
        "{e}"
    );
    assert_eq!(e["arguments"]["to"], "prod", "{e}");
}

/// Attack (found by review): a replay body of some 11,000 one-character candidate files fits
/// the body's bound, and each file was matched against every file before it: tens of millions
/// of steps, then a load of them all, on the one replay turn every operator waits for. More
/// than 256 candidate files are a `400` naming the count; 256 are replayed.
#[tokio::test]
async fn a_replay_of_thousands_of_candidate_files_is_refused_before_any_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy("acme.test.replay-files", "- tool: read\n  risk_tier: R1\n");
    let (gw, _conf) = from_config(dir.path(), &gov, "").await;
    let files = |n: usize| -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| json!({"file": format!("{i}.yaml"), "text": ""}))
            .collect()
    };
    let body = json!({"agents": files(200), "governance": files(57)});
    let (s, b) = gw.post("/v1/policies/replay", OP, body).await;
    crate::kit::assert_error(s, &b, StatusCode::BAD_REQUEST, "BAD_REQUEST");
    crate::kit::assert_says(&b, "message", "257 candidate files");
    // At the bound every file is read (each empty one refused by name as no policy).
    let body = json!({"governance": files(256)});
    let (s, b) = gw.post("/v1/policies/replay", OP, body).await;
    crate::kit::assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "POLICY_INVALID");
    crate::kit::assert_says(&b, "message", "255.yaml:1:");
    gw.stop().await;
}
