//! A restart with another configuration is recorded in the audit chain (`config.loaded`), as
//! a reload is (`config.reloaded`).

use crate::kit::{AGENTS, GOV_RULES, Gw, gov, operator, policy, start_custom};
use assent_server::{Live, Settings};
use serde_json::{Value, json};
use std::path::Path;

/// A gateway over `dir` under the governance `gov`, with operator `mallory` (finance) added
/// when `mallory`.
async fn start(dir: &Path, gov: &str, mallory: bool) -> Gw {
    start_custom(dir, 300_000, Settings::default(), AGENTS, gov, |st| {
        let mut principals = st.principals().as_ref().clone();
        if mallory {
            principals.push(operator("mallory", &["finance"]));
        }
        st.swap_live(Live::new(st.registry().as_ref().clone(), principals));
    })
    .await
}

/// Attack (found by review): whoever could edit the configuration and restart the gateway
/// changed the rules in force (here: `pay` no longer needs the finance role), or who may
/// approve (an operator `mallory` holding finance), and left no trace in the tamper-evident
/// record; only a reload was audited. A start whose configuration (policy set, or digest of
/// principals, agents and policies) is not the one the chain recorded last now appends
/// `config.loaded` with both; a start with the same configuration appends nothing; a fresh
/// database's first start records the chain's baseline (`changed: false`).
#[tokio::test]
async fn a_restart_with_another_configuration_is_recorded_in_the_audit_chain() {
    let dir = tempfile::tempdir().unwrap();
    let looser = policy(
        "acme.test.rules-v1",
        &GOV_RULES.replace("- tool: pay\n  approvers: [finance]\n", ""),
    );
    let mut hashes = Vec::new();
    for (gov, mallory) in [
        (gov(), false),
        (looser.clone(), false),
        (looser, false),
        (gov(), false),
        (gov(), true),
    ] {
        let gw = start(dir.path(), &gov, mallory).await;
        hashes.push(gw.state.live().registry.policy_set_sha256.clone());
        // A call, so the chain holds a record made under this configuration.
        gw.propose("pay", json!({"amount": 5000, "card": {"number": "4111"}}))
            .await;
        gw.stop().await;
    }
    assert_ne!(hashes[0], hashes[1], "the files differ");
    let gw = start(dir.path(), &gov(), true).await;
    // Served once start-up recorded it.
    assert!(gw.raw("GET", "/healthz", None).await.status().is_success());
    let rows = gw.sql().rows(
        "SELECT actor, data FROM audit WHERE kind = 'config.loaded' ORDER BY seq",
        &[],
    );
    let loaded: Vec<Value> = rows
        .iter()
        .map(|r| {
            assert_eq!(r[0], "system:start");
            serde_json::from_str(&r[1]).unwrap()
        })
        .collect();
    let summary: Vec<(Value, Value, Value, Value)> = loaded
        .iter()
        .map(|d| {
            let (p, c) = (&d["policy_set_sha256"], &d["changed"]);
            (
                p.clone(),
                d["previous_policy_set_sha256"].clone(),
                c.clone(),
                d["principals"].clone(),
            )
        })
        .collect();
    let h = |i: usize| json!(hashes[i]);
    assert_eq!(
        summary,
        [
            // The first start of a fresh database is the baseline (found by review: it
            // recorded nothing, so the change to the looser rules was a baseline too).
            (h(0), Value::Null, json!(false), json!(4)),
            (h(1), h(0), json!(true), json!(4)),
            // The same looser rules again: nothing. Back to the first rules: a change.
            (h(0), h(1), json!(true), json!(4)),
            // The same policy set, another operator.
            (h(0), h(0), json!(true), json!(5)),
        ],
        "{loaded:#?}"
    );
    gw.stop().await;
}
