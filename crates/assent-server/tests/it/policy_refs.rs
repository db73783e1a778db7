//! Policy references through the HTTP API (`constraints.governance_policies[]`): an agent
//! file's owner cannot weaken the policy that governs their agent by pulling in another one.
//! A reference to a policy written for other agents (its selector names them) is refused at
//! load and reload with the file, the line, the policy and its selector; an opt-in policy (an
//! empty selector) the agent references may tighten its calls but not loosen what the
//! governing policy says (separation of duties, passkey, default at the timeout).

use crate::kit::{AGENTS, Gw, add_principals, assert_error, operator, start_custom};
use crate::reload::principals;
use assent_server::config::{Config, ReloadSource};
use assent_server::{Live, Settings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

/// The governance file: `acme.finance.payments-v1` governs `bot`'s `pay` at R4 (its
/// defaults: separation of duties, a passkey, reject at the timeout); the relaxed policy
/// (selector `relaxed_selector`, e.g. `"    selector: {agents: [sandbox-bot]}\n"` or none)
/// approves everything it covers by a 5 s timeout, with neither duties nor passkey.
fn gov(relaxed_selector: &str) -> String {
    format!(
        "policies:
  - id: acme.finance.payments-v1
    selector: {{agents: [bot]}}
    rules:
      - {{tool: pay, risk_tier: R4}}
  - id: acme.sandbox.relaxed-v1
{relaxed_selector}    rules:
      - tool: \"*\"
        default_decision: approve
        timeout_seconds: 5
        separation_of_duties: false
        require_passkey: false
"
    )
}

/// The kit's `bot` agent file, referencing `acme.sandbox.relaxed-v1` (at line 3).
fn bot_referencing_relaxed() -> String {
    format!(
        "constraints:\n  governance_policies:\n    - policy_ref: acme.sandbox.relaxed-v1\n{}",
        AGENTS.trim_start()
    )
}

/// The arguments of a held `pay`.
fn args() -> Value {
    json!({"amount": 500, "to": "acme"})
}

/// Asserts that the approval `id` is held under the R4 defaults of the governing policy, and
/// that olga, who owns agent `bot`, may not approve it (`403 SELF_APPROVAL`).
async fn held_under_r4_defaults(gw: &Gw, id: &str) {
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(a["risk_tier"], "R4", "{a}");
    assert_eq!(a["separation_of_duties"], true, "{a}");
    assert_eq!(a["require_passkey"], true, "{a}");
    assert_eq!(a["default_decision"], "reject", "{a}");
    let (s, b) = gw.decide(id, "olga-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "SELF_APPROVAL");
    assert_eq!(gw.approval(id, "alice-key").await.1["status"], "pending");
}

/// A gateway serving `conf/assent.yaml` (alice and olga of finance, olga owning `bot`; the
/// kit's `bot` agent; [`gov`] with the relaxed policy for `sandbox-bot`) and reloading it.
async fn reloadable(dir: &Path) -> (Gw, std::path::PathBuf) {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let gov = gov("    selector: {agents: [sandbox-bot]}\n");
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    std::fs::write(conf.join("gov.yaml"), &gov).unwrap();
    let list = principals(&[
        ("alice", "kind: operator, roles: [finance]", "alice-key"),
        (
            "olga",
            "kind: operator, roles: [finance], owns: [bot]",
            "olga-key",
        ),
        ("bot", "kind: agent, agent_id: bot", "bot-key"),
    ]);
    let text = format!("agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\n{list}");
    std::fs::write(conf.join("assent.yaml"), text).unwrap();
    let cfg = Config::load(&conf.join("assent.yaml")).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let gw = start_custom(&data, 300_000, Settings::default(), AGENTS, &gov, |st| {
        st.swap_live(Live::new(cfg.registry.clone(), cfg.principals().unwrap()));
        st.reload = Some(Arc::new(ReloadSource::new(&cfg, false)));
    })
    .await;
    (gw, conf)
}

/// Attack (found by review): the owner of `bot`'s agent file adds a reference to the sandbox
/// agent's relaxed policy and waits for a reload; a reference applied the policy whatever its
/// selector said, so `bot`'s R4 `pay` lost its separation of duties and passkey and was
/// approved by a 5 s timeout with nobody looking. The reload is refused, naming the file, the
/// line, the policy and its selector; the calls stay under the policy in force.
#[tokio::test]
async fn a_reference_to_another_agents_relaxed_policy_is_refused_at_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, conf) = reloadable(dir.path()).await;
    let before = gw.held("s1", "pay", args()).await;
    held_under_r4_defaults(&gw, &before).await;
    std::fs::write(conf.join("bot.agf.yaml"), bot_referencing_relaxed()).unwrap();
    let (s, b) = gw.req("POST", "/v1/reload", Some("alice-key"), None).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let e = &b["errors"][0];
    assert!(e["file"].as_str().unwrap().ends_with("bot.agf.yaml"), "{b}");
    assert_eq!(e["line"], 3, "{b}");
    let m = e["reason"].as_str().unwrap_or_else(|| panic!("{b}"));
    assert!(
        m.contains("`acme.sandbox.relaxed-v1`") && m.contains("{agents: [sandbox-bot]}"),
        "{m}"
    );
    let after = gw.held("s2", "pay", args()).await;
    held_under_r4_defaults(&gw, &after).await;
    gw.stop().await;
}

/// Attack: the same, with a relaxed policy that has no selector (an opt-in policy, which
/// applies only by reference, so referencing it is allowed): its loosening keys do not apply
/// where the policy that governs `bot` covers the call. The call keeps its R4 separation of
/// duties, passkey and `reject` default, and the owner's approval is refused.
#[tokio::test]
async fn a_referenced_opt_in_policy_does_not_loosen_the_policy_that_governs_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_custom(
        dir.path(),
        300_000,
        Settings::default(),
        &bot_referencing_relaxed(),
        &gov(""),
        |st| {
            let mut olga = operator("olga", &["finance"]);
            olga.owns = vec!["bot".into()];
            add_principals(st, [olga]);
        },
    )
    .await;
    let id = gw.held("s1", "pay", args()).await;
    held_under_r4_defaults(&gw, &id).await;
    gw.stop().await;
}
