//! A grant's maker (`created_by`) under its seal (`assent-store` `tokens/cover.rs`,
//! `GrantSeal`), over HTTP against a real gateway, either backend: who made a grant decides
//! whether it stands for a call under separation of duties and whether a reload removing its
//! maker revokes it, so a maker renamed in the database behind the gateway's back leaves the
//! grant covering nothing (and `audit verify` names it). A grant sealed over its maker cannot be
//! passed off as one sealed the way grants were before (without the maker).

use crate::grant_revocation::{reloaded, reloading_gateway};
use crate::kit::{BOT, Gw, OP, policy, start};
use crate::reload::principals;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::Path;

/// A `pay` call above the threshold (held for `finance`).
fn big() -> Value {
    json!({"amount": 800, "to": "y"})
}

/// A gateway (the kit's, alice the `finance` operator) where alice approved a held `pay` call
/// with `scope`; the genuine grant covers the same call again.
async fn granted(dir: &Path, scope: &str) -> Gw {
    let gw = start(dir).await;
    let id = gw.held("s1", "pay", big()).await;
    let d = json!({"decision": "approve", "scope": scope, "reason": "ok"});
    let (s, b) = gw.decide_with(&id, OP, d).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = gw.propose("pay", big()).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "{scope}: the genuine grant covers its call: {b}"
    );
    gw
}

/// How many grants `GET /v1/grants` lists as active.
async fn active(gw: &Gw) -> usize {
    let (s, b) = gw.get("/v1/grants", OP).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b["grants"].as_array().unwrap().len()
}

/// The first problem `audit verify` (the store's integrity check) reports, as text.
fn verify_problem(gw: &Gw) -> String {
    let problem = crate::backend::audit_problem(&gw.data_dir);
    format!("{problem:?}")
}

/// Attack (found by review): the database writer renames the maker of alice's `session` or
/// `15m` grant (`created_by`, not under the grant's seal before) — to keep it alive past
/// their removal, or past separation of duties. The renamed grant covers nothing: the same
/// call is held again, it is not listed as active, and `audit verify` names it.
#[tokio::test]
async fn a_grants_maker_renamed_in_the_database_makes_it_cover_nothing() {
    for scope in ["session", "15m"] {
        let dir = tempfile::tempdir().unwrap();
        let gw = granted(dir.path(), scope).await;
        let gid = gw.sql().text("SELECT id FROM grants", &[]);
        assert_eq!(active(&gw).await, 1);
        let rename = "UPDATE grants SET created_by = 'mallory'";
        assert_eq!(gw.sql().exec(rename, &[]), 1);
        let (s, b) = gw.propose("pay", big()).await;
        assert_eq!(
            s,
            StatusCode::ACCEPTED,
            "{scope}: a renamed grant covered: {b}"
        );
        assert_eq!(active(&gw).await, 0, "{scope}: listed as active");
        let problem = verify_problem(&gw);
        assert!(
            problem.contains(&gid) && problem.contains("maker"),
            "{scope}: {problem}"
        );
        gw.stop().await;
    }
}

/// Attack: the database writer strips the version prefix off a grant sealed over its maker, so
/// that its seal would be checked the way grants made before were (without the maker), and
/// then renames the maker — or clears the key binding as well, or moves the maker into the key
/// binding's place. The seal was made over another list: the grant covers nothing.
#[tokio::test]
async fn a_grant_seal_stripped_of_its_version_covers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = granted(dir.path(), "session").await;
    let seal = gw.sql().text("SELECT seal FROM grants", &[]);
    assert!(
        seal.starts_with("v2:"),
        "a new grant's seal is over its maker: {seal}"
    );
    let edits = [
        "UPDATE grants SET seal = substr(seal, 4)",
        "UPDATE grants SET seal = substr(seal, 4), created_by = 'mallory'",
        "UPDATE grants SET seal = substr(seal, 4), key_binding = NULL",
        "UPDATE grants SET seal = substr(seal, 4), key_binding = created_by",
    ];
    for edit in edits {
        let put_back = format!("UPDATE grants SET seal = '{seal}', created_by = 'alice'");
        let binding = gw
            .sql()
            .text("SELECT COALESCE(key_binding, '') FROM grants", &[]);
        assert_eq!(gw.sql().exec(edit, &[]), 1);
        let (s, b) = gw.propose("pay", big()).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{edit}: the grant covered: {b}");
        assert_eq!(active(&gw).await, 0, "{edit}: listed as active");
        // Put back as it was, it covers again (the check above is the edit's doing).
        let restore = format!("{put_back}, key_binding = NULLIF('{binding}', '')");
        assert_eq!(gw.sql().exec(&restore, &[]), 1);
        let (s, b) = gw.propose("pay", big()).await;
        assert_eq!(s, StatusCode::OK, "{edit}: put back, it covers: {b}");
    }
    gw.stop().await;
}

/// Every `quick` call is held for `ops`.
fn quick_gov() -> String {
    policy(
        "acme.test.grant-maker",
        "- tool: quick\n  approval: true\n  approvers: [ops]\n",
    )
}

/// Attack (the brief's): mallory, about to be removed, approves `quick` for the whole
/// workspace; the database writer renames the grant's maker to olaf, whom the reload keeps,
/// so that the reload removing mallory does not revoke it. The renamed grant covers nothing,
/// before the reload and after.
#[tokio::test]
async fn a_removed_operators_grant_renamed_to_another_maker_does_not_outlive_them() {
    let dir = tempfile::tempdir().unwrap();
    let ops = |names: &[&str]| {
        let mut list: Vec<(String, &str, String)> = names
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    "kind: operator, roles: [ops]",
                    format!("{n}-key"),
                )
            })
            .collect();
        list.push(("bot".into(), "kind: agent, agent_id: bot", BOT.into()));
        let list: Vec<(&str, &str, &str)> = list
            .iter()
            .map(|(a, b, c)| (a.as_str(), *b, c.as_str()))
            .collect();
        principals(&list)
    };
    let gw = reloading_gateway(dir.path(), &quick_gov(), &ops(&["olaf", "mallory"])).await;
    let id = gw.held("s1", "quick", json!({"n": 1})).await;
    let d = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    let (s, b) = gw.decide_with(&id, "mallory-key", d).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(gw.propose("quick", json!({"n": 2})).await.0, StatusCode::OK);
    let rename = "UPDATE grants SET created_by = 'olaf'";
    assert_eq!(gw.sql().exec(rename, &[]), 1);
    let (s, b) = gw.propose("quick", json!({"n": 3})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "the renamed grant covered: {b}");
    reloaded(&gw, dir.path(), &ops(&["olaf"])).await;
    let (s, b) = gw.propose("quick", json!({"n": 4})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "mallory's grant outlived her: {b}");
    gw.stop().await;
}

/// Found by review (of a refactor that read the whole grant row wherever a grant is checked):
/// a database writer putting a value of another type in a grant's columns that no seal covers
/// and coverage does not read (`discouraged`, `revoked_by`) made every proposal of that agent's
/// tool fail as a store error. A grant's cover reads only what its seal is over and whether it
/// was revoked, so its calls are still covered. SQLite only: PostgreSQL's column types refuse
/// such a value.
#[tokio::test]
async fn a_grants_unsealed_columns_of_another_type_do_not_stop_its_calls() {
    if crate::kit::sqlite_only("a column of another type than it was declared") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = granted(dir.path(), "session").await;
    let mistype = "UPDATE grants SET discouraged = 'x', revoked_by = x'00'";
    assert_eq!(gw.sql().exec(mistype, &[]), 1);
    let (s, b) = gw.propose("pay", big()).await;
    assert_eq!(s, StatusCode::OK, "the grant no longer covered: {b}");
    gw.stop().await;
}

/// A grant whose sealed column holds a value of another type (`expires_at` made text behind
/// the gateway's back) covers nothing: its call is held for a person, as with any grant whose
/// seal fails, and the agent's other calls are not failed as a store error (found by review: the
/// unreadable row failed every proposal of the tool). SQLite only, as above.
#[tokio::test]
async fn a_grant_with_a_sealed_column_of_another_type_covers_nothing() {
    if crate::kit::sqlite_only("a column of another type than it was declared") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = granted(dir.path(), "session").await;
    let gid = gw.sql().text("SELECT id FROM grants", &[]);
    let mistype = "UPDATE grants SET expires_at = 'soon'";
    assert_eq!(gw.sql().exec(mistype, &[]), 1);
    let (s, b) = gw.propose("pay", big()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "not held for a person: {b}");
    let problem = verify_problem(&gw);
    assert!(problem.contains(&gid), "{problem}");
    gw.stop().await;
}
