//! Grants do not outlive the consent they stand for (issue 14 §6, §8): a reload or a restart
//! that removes the operator who made a grant, changes their key or takes away every role that
//! let them decide its approval revokes it; so does cancelling the plan its call was held
//! under. Each revocation is audited `grant.revoked` and the chain still verifies. Over a real
//! configuration file on disk, either backend.

use crate::kit::{AGENTS, BOT, Gw, OP, audit_count, policy, serve_policy, start_reloading_with};
use crate::plans::{plan, uuid};
use crate::reload::principals;
use assent_server::AppState;
use assent_server::config::Config;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::Path;

/// Every `read`, `quick` and `lenient` call is held; `quick` and `lenient` only for `ops`.
fn gov() -> String {
    policy(
        "acme.test.grant-revocation",
        "- tool: read\n  approval: true\n- tool: quick\n  approval: true\n  approvers: [ops]\n- tool: lenient\n  approval: true\n  approvers: [ops]\n",
    )
}

/// [`reloading_gateway`] with governance [`gov`].
async fn gateway(dir: &Path, list: &str) -> Gw {
    reloading_gateway(dir, &gov(), list).await
}

/// A gateway whose principals come from `conf/assent.yaml` in `dir` (`list`, the kit's `bot`
/// agent, governance `gov` in `conf/gov.yaml`) and that reloads that file; its store is the
/// kit's in `dir/data`, so a second call over the same `dir` is a restart.
pub(crate) async fn reloading_gateway(dir: &Path, gov: &str, list: &str) -> Gw {
    reloading_gateway_with(dir, gov, list, |_| {}).await
}

/// [`reloading_gateway`], then `customize` (its settings, say) before it serves.
pub(crate) async fn reloading_gateway_with(
    dir: &Path,
    gov: &str,
    list: &str,
    customize: impl FnOnce(&mut AppState),
) -> Gw {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    std::fs::write(conf.join("gov.yaml"), gov).unwrap();
    write_config(dir, list);
    let cfg = Config::load(&conf.join("assent.yaml")).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    start_reloading_with(&data, gov, &cfg, customize).await
}

/// Rewrites `conf/assent.yaml` in `dir` with the principals `list` (not yet in force).
pub(crate) fn write_config(dir: &Path, list: &str) {
    let text = format!("agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\n{list}");
    std::fs::write(dir.join("conf/assent.yaml"), text).unwrap();
}

/// Writes the principals `list` to the file of `gw` (on `dir`) and has olaf (`olaf-key`)
/// reload it (`POST /v1/reload`, asserted `200`): the answer.
pub(crate) async fn reloaded(gw: &Gw, dir: &Path, list: &str) -> Value {
    write_config(dir, list);
    let (s, b) = gw.req("POST", "/v1/reload", Some("olaf-key"), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b
}

/// The tools of the active grants `GET /v1/grants` lists to `key` (asserted `200`).
async fn active_grant_tools(gw: &Gw, key: &str) -> Vec<String> {
    let (s, b) = gw.get("/v1/grants", key).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let active = b["grants"].as_array().unwrap();
    active
        .iter()
        .map(|g| g["tool"].as_str().unwrap().to_string())
        .collect()
}

/// `tool(args)` as bot in session `s1`: its status.
async fn call(gw: &Gw, tool: &str, args: Value) -> StatusCode {
    let (s, b) = gw.propose(tool, args).await;
    assert!(s == StatusCode::OK || s == StatusCode::ACCEPTED, "{s} {b}");
    s
}

/// Holds `tool(args)` and approves it with `key` for every call of the tool in the workspace.
async fn grant_whole_tool(gw: &Gw, tool: &str, args: Value, key: &str) {
    let id = gw.held("s1", tool, args).await;
    let d = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    let (s, b) = gw.decide_with(&id, key, d).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

/// Asserts that the audit chain, and every token and grant against its records, verify; then
/// stops the gateway.
pub(crate) async fn stop_verified(gw: Gw) {
    let problem = crate::backend::audit_problem(&gw.data_dir);
    assert!(problem.is_none(), "{problem:?}");
    gw.stop().await;
}

/// Attack (found by review): alice's key is stolen and approves held `read` calls for the
/// whole workspace and the whole tool; the theft is found and alice removed by a reload — her
/// votes and sessions went, but the grant kept letting every later `read` through. The reload
/// revokes it (`grant.revoked`, actor the operator who reloaded): the next `read` is held for
/// a person again. Olaf's grant, made by an operator the reload left alone, still stands.
#[tokio::test]
async fn a_reload_that_removes_an_operator_revokes_the_grants_they_created() {
    let dir = tempfile::tempdir().unwrap();
    let everyone = principals(&[
        ("alice", "kind: operator, roles: [finance]", OP),
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    let gw = gateway(dir.path(), &everyone).await;
    grant_whole_tool(&gw, "read", json!({"path": "/a"}), OP).await;
    grant_whole_tool(&gw, "quick", json!({"n": 1}), "olaf-key").await;
    assert_eq!(
        call(&gw, "read", json!({"path": "/b"})).await,
        StatusCode::OK
    );
    assert_eq!(call(&gw, "quick", json!({"n": 2})).await, StatusCode::OK);
    let without_alice = principals(&[
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    reloaded(&gw, dir.path(), &without_alice).await;
    assert_eq!(
        call(&gw, "read", json!({"path": "/c"})).await,
        StatusCode::ACCEPTED,
        "the removed operator's grant no longer approves"
    );
    assert_eq!(call(&gw, "quick", json!({"n": 3})).await, StatusCode::OK);
    assert_eq!(audit_count(&gw.data_dir, "grant.revoked"), 1);
    assert_eq!(active_grant_tools(&gw, "olaf-key").await, ["quick"]);
    stop_verified(gw).await;
}

/// Attack (found by review, the restart path): an operator whose key was stolen is removed
/// from the file, or stripped of the role that let them decide, and the gateway restarted
/// instead of reloaded. At start-up the grants made by principals the file no longer has as
/// operators who may decide their approval are revoked (actor `system:start-up`): rita's
/// (removed) and olaf's (now only `finance`, and `quick` needs `ops`); gina's, still `ops`,
/// stands.
#[tokio::test]
async fn a_restart_that_removes_an_operator_or_their_role_revokes_the_grants_they_created() {
    let dir = tempfile::tempdir().unwrap();
    let before = principals(&[
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("rita", "kind: operator, roles: [ops]", "rita-key"),
        ("gina", "kind: operator, roles: [ops]", "gina-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    let gw = gateway(dir.path(), &before).await;
    grant_whole_tool(&gw, "quick", json!({"n": 1}), "olaf-key").await;
    grant_whole_tool(&gw, "lenient", json!({"n": 1}), "rita-key").await;
    grant_whole_tool(&gw, "read", json!({"path": "/a"}), "gina-key").await;
    for tool in ["quick", "lenient", "read"] {
        assert_eq!(call(&gw, tool, json!({"n": 2})).await, StatusCode::OK);
    }
    gw.stop().await;
    let after = principals(&[
        ("olaf", "kind: operator, roles: [finance]", "olaf-key"),
        ("gina", "kind: operator, roles: [ops]", "gina-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    let gw = gateway(dir.path(), &after).await;
    assert_eq!(
        call(&gw, "quick", json!({"n": 3})).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        call(&gw, "lenient", json!({"n": 3})).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(call(&gw, "read", json!({"n": 3})).await, StatusCode::OK);
    assert_eq!(audit_count(&gw.data_dir, "grant.revoked"), 2);
    stop_verified(gw).await;
}

/// Attack (found by review): a grant made by approving a call held under an MPLP plan kept
/// letting the tool's calls through after the plan was cancelled, though the plan's stop
/// cancels its held calls and stops the tokens approved under it. Cancelling the plan revokes
/// the grants its calls made (`grant.revoked`); a grant made outside the plan stands.
#[tokio::test]
async fn cancelling_a_plan_revokes_the_grants_its_calls_made() {
    let rules = "- tool: pay\n  approvers: [finance]\n- tool: read\n  approval: true\n";
    let gw = serve_policy(AGENTS, &policy("acme.test.plan-grants", rules)).await;
    let (pid, step) = (uuid(), uuid());
    let (s, p) = gw.create_plan(plan(&pid, &[(&step, "Pay the bill")])).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (s, r) = gw.submit_plan(&pid).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let confirm = r["approval_id"].as_str().unwrap().to_string();
    assert_eq!(gw.decide(&confirm, OP, "approve").await.0, StatusCode::OK);
    let pay = json!({"amount": 501, "to": "bob"});
    let (s, h) = gw
        .call("s1", "pay", pay, json!({"plan_id": pid, "step_id": step}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{h}");
    let d = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    let (s, b) = gw
        .decide_with(h["approval_id"].as_str().unwrap(), OP, d)
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    grant_whole_tool(&gw, "read", json!({"path": "/a"}), OP).await;
    let pay = |amount: u64| json!({"amount": amount, "to": "mallory"});
    assert_eq!(call(&gw, "pay", pay(777)).await, StatusCode::OK);
    gw.cancel_plan(&pid, json!({"reason": "stop"})).await;
    assert_eq!(
        call(&gw, "pay", pay(778)).await,
        StatusCode::ACCEPTED,
        "the cancelled plan's grant no longer approves"
    );
    assert_eq!(
        call(&gw, "read", json!({"path": "/b"})).await,
        StatusCode::OK
    );
    assert_eq!(audit_count(&gw.data_dir, "grant.revoked"), 1);
    stop_verified(gw).await;
}

/// The principals olaf (`ops`, key `olaf_key`), gina (`ops`) when `gina`, and agent `bot`.
fn olaf_keyed(olaf_key: &str, gina: bool) -> String {
    let mut list = vec![("olaf", "kind: operator, roles: [ops]", olaf_key)];
    if gina {
        list.push(("gina", "kind: operator, roles: [ops]", "gina-key"));
    }
    list.push(("bot", "kind: agent, agent_id: bot", BOT));
    principals(&list)
}

/// A [`gateway`] over `dir` with the principals `list`, where olaf's key `olaf-stolen-key`
/// approved `quick` for the whole workspace and tool.
async fn stolen_keys_grant(dir: &Path, list: &str) -> Gw {
    let gw = gateway(dir, list).await;
    grant_whole_tool(&gw, "quick", json!({"n": 1}), "olaf-stolen-key").await;
    gw
}

/// Attack (found by review, a rotated key): olaf's key is stolen and approves held `quick`
/// calls for the whole workspace and the whole tool. The theft is found and olaf's key rotated
/// in the file — same name, same `ops` role, a new key — and the gateway restarted. Start-up
/// finds the grant kept the binding of the key that made it (migration 0048), not olaf's key
/// now, and revokes it (`grant.revoked`, actor `system:start-up`): the next `quick` is held
/// for a person again. Gina's grant, made with the key she still holds, stands; so does one
/// olaf makes with his new key after the restart.
#[tokio::test]
async fn a_restart_with_a_rotated_key_revokes_the_grants_the_old_key_made() {
    let dir = tempfile::tempdir().unwrap();
    let with = |olaf_key: &str| olaf_keyed(olaf_key, true);
    let gw = stolen_keys_grant(dir.path(), &with("olaf-stolen-key")).await;
    grant_whole_tool(&gw, "read", json!({"path": "/a"}), "gina-key").await;
    assert_eq!(call(&gw, "quick", json!({"n": 2})).await, StatusCode::OK);
    assert_eq!(call(&gw, "read", json!({"n": 2})).await, StatusCode::OK);
    gw.stop().await;
    let gw = gateway(dir.path(), &with("olaf-new-key")).await;
    assert_eq!(
        call(&gw, "quick", json!({"n": 3})).await,
        StatusCode::ACCEPTED,
        "the rotated key's grant no longer approves"
    );
    assert_eq!(call(&gw, "read", json!({"n": 3})).await, StatusCode::OK);
    assert_eq!(audit_count(&gw.data_dir, "grant.revoked"), 1);
    assert_eq!(active_grant_tools(&gw, "olaf-new-key").await, ["read"]);
    grant_whole_tool(&gw, "lenient", json!({"n": 1}), "olaf-new-key").await;
    gw.stop().await;
    let gw = gateway(dir.path(), &with("olaf-new-key")).await;
    assert_eq!(call(&gw, "lenient", json!({"n": 2})).await, StatusCode::OK);
    assert_eq!(call(&gw, "read", json!({"n": 4})).await, StatusCode::OK);
    assert_eq!(audit_count(&gw.data_dir, "grant.revoked"), 1);
    stop_verified(gw).await;
}

/// Attack: whoever can write the database but not read the keys clears the key binding of the
/// grant olaf's stolen key made (`key_binding = NULL`, as a grant made before migration 0048
/// has), so that start-up after the key's rotation weighs it by olaf's name and roles alone
/// and keeps it. The binding is under the grant's seal: the row cleared of it covers nothing
/// and is not listed as active.
#[tokio::test]
async fn a_key_binding_cleared_in_the_database_leaves_the_old_keys_grant_covering_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let with = |olaf_key: &str| olaf_keyed(olaf_key, false);
    let gw = stolen_keys_grant(dir.path(), &with("olaf-stolen-key")).await;
    assert_eq!(call(&gw, "quick", json!({"n": 2})).await, StatusCode::OK);
    let clear = "UPDATE grants SET key_binding = NULL";
    assert_eq!(gw.sql().exec(clear, &[]), 1);
    gw.stop().await;
    let gw = gateway(dir.path(), &with("olaf-new-key")).await;
    assert_eq!(
        call(&gw, "quick", json!({"n": 3})).await,
        StatusCode::ACCEPTED,
        "the grant cleared of its binding still approves"
    );
    assert_eq!(
        active_grant_tools(&gw, "olaf-new-key").await,
        Vec::<String>::new()
    );
    gw.stop().await;
}
