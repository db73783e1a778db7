//! Separation of duties against grants (issue 14 §2, seed 002 "Approve with scope"), over the
//! HTTP API: a grant never covers a call its creator could not approve themselves — a call
//! acting for them, or a call of an agent they own — and still covers everyone else's.

use crate::quorum::{args, gateway_rules};
use reqwest::StatusCode;
use serde_json::{Value, json};

const RULES: &str = "- tool: pay\n  approvers: [finance]\n  separation_of_duties: true\n";

/// A call of `pay` by `bot` in session `s1` with `extra` fields: a grant covers it (`Ok`, the
/// grant id) or it is held (`Err`, the approval id).
async fn pay(gw: &crate::kit::Gw, extra: Value) -> Result<String, String> {
    let (s, b) = gw.call("s1", "pay", args(), extra).await;
    match s {
        StatusCode::OK => Ok(b["grant_id"].as_str().expect("a grant id").to_string()),
        StatusCode::ACCEPTED => Err(b["approval_id"].as_str().unwrap().to_string()),
        s => panic!("{s}: {b}"),
    }
}

/// A gateway under [`RULES`] where carol approved, with `grant` (its scope...), a call the
/// agent made for bob.
async fn carol_granted(dir: &std::path::Path, grant: Value) -> crate::kit::Gw {
    let gw = gateway_rules(dir, RULES).await;
    let for_bob = pay(&gw, json!({"on_behalf_of": "bob"})).await.unwrap_err();
    let (s, b) = gw.decide_with(&for_bob, "carol-key", grant).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw
}

/// Attack (found by review): operator carol approves a call the agent made for bob with scope
/// `15m`; the agent then makes the identical call for carol, and the grant covered it — carol
/// in effect approved her own call, which separation of duties forbids her when she decides.
/// The grant is skipped: the call is held, carol may not approve it, another approver may;
/// the grant still covers bob's calls.
#[tokio::test]
async fn a_grant_does_not_cover_a_call_acting_for_the_operator_who_granted_it() {
    let dir = tempfile::tempdir().unwrap();
    let grant = json!({"decision": "approve", "scope": "15m", "reason": "ok"});
    let gw = carol_granted(dir.path(), grant).await;
    assert!(
        pay(&gw, json!({"on_behalf_of": "bob"})).await.is_ok(),
        "the grant covers bob's calls"
    );
    for carol in ["carol", "Carol"] {
        let held = pay(&gw, json!({"on_behalf_of": carol})).await;
        let id = held.expect_err("the grant carol made covered a call made for her");
        let (s, b) = gw.decide(&id, "carol-key", "approve").await;
        assert_eq!(
            (s, b["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("SELF_APPROVAL")),
            "{b}"
        );
        let (s, b) = gw.decide(&id, "alice-key", "approve").await;
        assert_eq!(
            (s, b["status"].as_str()),
            (StatusCode::OK, Some("approved"))
        );
    }
    gw.stop().await;
}

/// Attack (found by review): carol widens her approval of a call for bob to the whole tool;
/// a reload then makes her an owner of agent `bot` (`principals[].owns`), whose calls she
/// may no longer approve under separation of duties — yet her grant kept covering them. A
/// grant's creator is judged by the principals in force when the call comes.
#[tokio::test]
async fn a_grant_does_not_cover_calls_of_an_agent_its_creator_now_owns() {
    let dir = tempfile::tempdir().unwrap();
    let grant = json!({"decision": "approve", "scope": "15m", "whole_tool": true, "reason": "ok"});
    let gw = carol_granted(dir.path(), grant).await;
    assert!(pay(&gw, json!({"on_behalf_of": "dan"})).await.is_ok());
    let st = &gw.state;
    let mut all = (*st.principals()).clone();
    let carol = all.iter_mut().find(|p| p.name == "carol").unwrap();
    carol.owns = vec!["bot".into()];
    st.swap_live(assent_server::Live::new((*st.registry()).clone(), all));
    for extra in [json!({"on_behalf_of": "dan"}), json!({})] {
        let held = pay(&gw, extra.clone()).await;
        assert!(held.is_err(), "{extra}: the owner's grant covered the call");
    }
    gw.stop().await;
}

/// Attack: the database writer renames carol's grant to alice's so that it covers a call made
/// for carol. `created_by` is under the seal of a grant made since it is sealed: the renamed
/// grant covers nothing, not even bob's calls (`grant_maker_seal.rs`). For a grant made before,
/// the approval the grant came from names who approved it (under the settlement's seal): that
/// person is judged too.
#[tokio::test]
async fn a_grants_creator_renamed_in_the_database_still_may_not_cover_their_own_call() {
    let dir = tempfile::tempdir().unwrap();
    let grant = json!({"decision": "approve", "scope": "15m", "reason": "ok"});
    let gw = carol_granted(dir.path(), grant).await;
    let rename = "UPDATE grants SET created_by = 'alice'";
    assert_eq!(gw.sql().exec(rename, &[]), 1);
    let bobs = pay(&gw, json!({"on_behalf_of": "bob"})).await;
    assert!(bobs.is_err(), "the renamed grant covered bob's call");
    let held = pay(&gw, json!({"on_behalf_of": "carol"})).await;
    assert!(held.is_err(), "the renamed grant covered carol's call");
    gw.stop().await;
}
