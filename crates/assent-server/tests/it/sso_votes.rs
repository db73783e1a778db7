//! Quorum votes cast by single sign-on are held to the `oidc.roles` map in force when the
//! gateway starts again, as key votes are to the file.

use crate::sso::{GOOD, decide, linked_with, sso_session};
use reqwest::StatusCode;
use serde_json::json;

/// gina's single sign-on identity (`principals[].sso`).
const GINA: &str = "gina@example.com";

/// Two finance votes settle a `pay` call.
const QUORUM: &str = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n";

/// The votes cast on approval `id` so far, as `GET /v1/approvals/{id}` lists them.
async fn cast(gw: &crate::kit::Gw, id: &str) -> Vec<serde_json::Value> {
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(a["status"], "pending", "{a}");
    a["votes"]["cast"].as_array().cloned().unwrap_or_default()
}

/// A gateway over `dir` with `rules`, gina linked to [`GINA`]: her single sign-on session
/// (groups `opsgroup`, roles `ops`) approves a held `pay` call of session `s1` with a session
/// grant, which then covers the same call; the gateway stopped.
async fn grant_made_by_gina_signed_in(dir: &std::path::Path, rules: &str) {
    let gw = linked_with(dir, rules, GOOD, GINA).await;
    let id = gw.held("s1", "pay", json!({"amount": 500})).await;
    let (gina, csrf) = sso_session(&gw, &format!("oidc:{GINA}"), (&["ops"], &["opsgroup"]));
    let s = crate::sso::decide_scoped(&gw, &id, (&gina, &csrf), "session").await;
    assert!(s.is_success() || s.is_redirection(), "{s}");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert!(a["grant_id"].is_string(), "no grant: {a}");
    let (s, b) = gw.propose_in("s1", "pay", json!({"amount": 500})).await;
    assert_eq!(s, StatusCode::OK, "the grant does not cover the call: {b}");
    gw.stop().await;
}

/// Attack (found by review): a restart with an `oidc.roles` map that no longer gives the
/// `fin` group `finance` — to cut contractors off — signed their sessions out at the next
/// request, but the vote one of them had cast by single sign-on on a quorum of two stood, so
/// one more finance vote approved the payment. The vote keeps the groups it was cast with;
/// start-up maps them again and withdraws it, with a `decision.vote_withdrawn` record. A vote
/// whose groups still map to its roles stands.
#[tokio::test]
async fn a_restart_that_unmaps_a_group_withdraws_the_votes_cast_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = linked_with(dir.path(), QUORUM, GOOD, GINA).await;
    let cut = gw.held("s1", "pay", json!({"amount": 500})).await;
    let kept = gw.held("s2", "pay", json!({"amount": 501})).await;
    let (mallory, csrf) = sso_session(&gw, "oidc:mallory", (&["finance"], &["fin"]));
    let (bo, csrf_bo) = sso_session(&gw, "oidc:bo", (&["finance"], &["fin", "opsgroup"]));
    for (id, who, csrf) in [(&cut, &mallory, &csrf), (&kept, &bo, &csrf_bo)] {
        let s = decide(&gw, id, who, csrf).await;
        assert!(s.is_success() || s.is_redirection(), "{s}");
        assert_eq!(cast(&gw, id).await.len(), 1);
    }
    gw.stop().await;

    // `fin` maps to nothing now; `opsgroup` gives `finance` as well.
    let moved = GOOD.replace(
        "roles: {fin: [finance], opsgroup: [ops]}",
        "roles: {opsgroup: [ops, finance]}",
    );
    let gw = linked_with(dir.path(), QUORUM, &moved, GINA).await;
    assert_eq!(cast(&gw, &cut).await, Vec::<serde_json::Value>::new());
    let withdrawn = gw.sql().int(
        "SELECT count(*) FROM audit WHERE kind = 'decision.vote_withdrawn' AND approval_id = ?1",
        &[cut.as_str().into()],
    );
    assert_eq!(withdrawn, 1);
    // One finance vote is not two.
    let (s, a) = gw.decide(&cut, "fred-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(cast(&gw, &cut).await.len(), 1);
    // bo voted with `fin` and `opsgroup`; `opsgroup` still gives `finance`: the vote stands.
    assert_eq!(cast(&gw, &kept).await.len(), 1);
    let (s, a) = gw.decide(&kept, "fred-key", "approve").await;
    crate::kit::assert_answer(s, &a, "status", StatusCode::OK, "approved");
    gw.stop().await;
}

/// Attack (found by review): operator gina was linked to a contractor's single sign-on
/// identity, which voted as gina; a restart linked gina to her own identity, but the vote
/// stood (its groups still mapped), and the real gina was then told she had voted already.
/// A vote cast by single sign-on keeps the identity that cast it: a link moved elsewhere
/// withdraws it.
#[tokio::test]
async fn a_restart_that_moves_a_link_withdraws_the_votes_its_old_identity_cast() {
    let dir = tempfile::tempdir().unwrap();
    let gw = linked_with(dir.path(), QUORUM, GOOD, "contractor@example.com").await;
    let id = gw.held("s1", "pay", json!({"amount": 500})).await;
    let (contractor, csrf) =
        sso_session(&gw, "oidc:contractor@example.com", (&["finance"], &["fin"]));
    let s = decide(&gw, &id, &contractor, &csrf).await;
    assert!(s.is_success() || s.is_redirection(), "{s}");
    assert_eq!(cast(&gw, &id).await[0]["by"], "gina");
    gw.stop().await;

    let gw = linked_with(dir.path(), QUORUM, GOOD, GINA).await;
    assert_eq!(cast(&gw, &id).await, Vec::<serde_json::Value>::new());
    // gina votes herself, once; with fred's vote the quorum is met.
    let (s, a) = gw.decide(&id, "gina-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    let (s, a) = gw.decide(&id, "fred-key", "approve").await;
    crate::kit::assert_answer(s, &a, "status", StatusCode::OK, "approved");
    gw.stop().await;
}

/// Found by review: a grant an operator linked to single sign-on made from the dashboard was
/// judged at the next start-up by the roles the file gives the operator, not by those the
/// provider's groups gave the session that made it — and revoked at every restart. Its maker
/// signed in by single sign-on (the grant keeps the identity and groups, as a vote does): it
/// stands while the link and the groups' roles do.
#[tokio::test]
async fn a_restart_keeps_a_grant_made_by_a_linked_sso_session() {
    let dir = tempfile::tempdir().unwrap();
    // `pay` is for `ops`; gina's file roles are `finance`, her provider's group gives `ops`.
    let rules = "- tool: pay\n  approvers: [ops]\n";
    grant_made_by_gina_signed_in(dir.path(), rules).await;

    let gw = linked_with(dir.path(), rules, GOOD, GINA).await;
    let (s, b) = gw.propose_in("s1", "pay", json!({"amount": 500})).await;
    assert_eq!(s, StatusCode::OK, "the grant was revoked: {b}");
    let revoked = gw.sql().int(
        "SELECT count(*) FROM audit WHERE kind = 'grant.revoked'",
        &[],
    );
    assert_eq!(revoked, 0);
    gw.stop().await;
}

/// Found by review (R10): a grant made by single sign-on on an approval any operator may decide
/// stood at the next start-up whoever its maker had become — here gina removed from the
/// principals, or her link moved to another identity — since no role was asked of it. Its
/// maker must still be an operator, its identity still theirs.
#[tokio::test]
async fn a_restart_without_its_linked_maker_revokes_the_sso_grant_of_an_any_operator_call() {
    let dir = tempfile::tempdir().unwrap();
    // No `approvers`: any operator may decide `pay`.
    let rules = "- tool: pay\n  risk_tier: R2\n";
    grant_made_by_gina_signed_in(dir.path(), rules).await;

    let gw = linked_with(dir.path(), rules, GOOD, "").await;
    let (s, b) = gw.propose_in("s1", "pay", json!({"amount": 500})).await;
    assert_eq!(
        s,
        StatusCode::ACCEPTED,
        "the removed maker's grant still covers: {b}"
    );
    gw.stop().await;
}

/// Attack (found by review): the provider is compromised, and the gateway is restarted onto
/// another (`oidc.issuer` changed). Its sessions were signed out, but what they had decided
/// stood wherever the identity's groups still mapped: a quorum vote cast through the old
/// provider still counted, a grant made through it still covered calls, and a call it
/// approved alone still redeemed. A decision keeps the provider it was made through; a restart
/// onto another withdraws the vote (`decision.vote_withdrawn`), revokes the grant and voids
/// the token — while a restart onto the same provider keeps all three (the tests above).
#[tokio::test]
async fn a_restart_onto_another_issuer_withdraws_what_the_old_providers_sessions_decided() {
    let other = GOOD.replace("http://127.0.0.1:9/", "http://127.0.0.1:10/");
    // A quorum vote, and (in another gateway) a single approval whose token is unredeemed,
    // each through the old provider.
    let quorum = tempfile::tempdir().unwrap();
    let once = tempfile::tempdir().unwrap();
    let single_rule = "- tool: pay\n  approvers: [finance]\n";
    let mut made = Vec::new();
    for (dir, rules) in [(&quorum, QUORUM), (&once, single_rule)] {
        let gw = linked_with(dir.path(), rules, GOOD, GINA).await;
        let id = gw.held("s1", "pay", json!({"amount": 500})).await;
        let (bo, csrf) = sso_session(&gw, "oidc:bo", (&["finance"], &["fin"]));
        let s = decide(&gw, &id, &bo, &csrf).await;
        assert!(s.is_success() || s.is_redirection(), "{s}");
        let seen = gw.as_agent(&id).await;
        made.push((id, seen));
        gw.stop().await;
    }
    let (voted, _) = &made[0];
    let token = crate::kit::token_of(&made[1].1);
    let gw = linked_with(quorum.path(), QUORUM, &other, GINA).await;
    assert_eq!(cast(&gw, voted).await, Vec::<serde_json::Value>::new());
    let withdrawn = gw.sql().int(
        "SELECT count(*) FROM audit WHERE kind = 'decision.vote_withdrawn' AND approval_id = ?1",
        &[voted.as_str().into()],
    );
    assert_eq!(withdrawn, 1);
    gw.stop().await;
    let gw = linked_with(once.path(), single_rule, &other, GINA).await;
    let (s, b) = gw.redeem(&token, "pay", json!({"amount": 500}), None).await;
    crate::kit::assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    gw.stop().await;

    // A session grant made through the old provider.
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [ops]\n";
    grant_made_by_gina_signed_in(dir.path(), rules).await;
    let gw = linked_with(dir.path(), rules, &other, GINA).await;
    let (s, b) = gw.propose_in("s1", "pay", json!({"amount": 500})).await;
    assert_eq!(
        s,
        StatusCode::ACCEPTED,
        "the old provider's grant still covers: {b}"
    );
    gw.stop().await;
}

/// Attack (found by review): principal `Carol@example.com` (her key) and the unlinked single
/// sign-on `oidc:carol@example.com` — the same person, the provider spelling her name in lower
/// case — each counted once toward a quorum of two, since a repeated vote was looked for by
/// exact name. Names are compared as separation of duties compares them.
#[tokio::test]
async fn one_person_under_two_spellings_of_her_name_votes_once() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, id) = crate::sso::linked_pay_held(dir.path(), QUORUM).await;
    let mut all = (*gw.state.principals()).clone();
    all.push(crate::kit::operator("Carol@example.com", &["finance"]));
    let registry = (*gw.state.registry()).clone();
    gw.state.swap_live(assent_server::Live::new(registry, all));
    let (carol, csrf) = sso_session(&gw, "oidc:carol@example.com", (&["finance"], &["fin"]));
    let s = decide(&gw, &id, &carol, &csrf).await;
    assert!(s.is_success() || s.is_redirection(), "{s}");
    let (s, b) = gw.decide(&id, "Carol@example.com-key", "approve").await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::CONFLICT, Some("ALREADY_VOTED")),
        "{b}"
    );
    assert_eq!(cast(&gw, &id).await.len(), 1);
    gw.stop().await;
}

/// Attack (found by review): olga owns `bot`; signed in by single sign-on under her
/// principal's own name (`oidc:olga`, not the `sso` name her principal is linked to) she owned
/// nothing, and approved bot's call that separation of duties keeps from its owner. An
/// unlinked sign-in owns what the principals of its name own.
#[tokio::test]
async fn an_owner_signed_in_unlinked_under_her_own_name_may_not_approve_her_agents_call() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n  separation_of_duties: true\n";
    let (gw, id) = crate::sso::linked_pay_held(dir.path(), rules).await;
    let (olga, csrf) = sso_session(&gw, "oidc:olga", (&["finance"], &["fin"]));
    let _ = decide(&gw, &id, &olga, &csrf).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(
        a["status"], "pending",
        "the owner approved her agent's call: {a}"
    );
    let refused =
        "SELECT count(*) FROM audit WHERE kind = 'decision.refused' AND actor = 'oidc:olga'";
    assert_eq!(gw.sql().int(refused, &[]), 1);
    gw.stop().await;
}
