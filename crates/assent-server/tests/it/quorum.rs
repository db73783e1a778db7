//! Quorum approvals through the HTTP API (issue 14 §1): several distinct people must approve
//! before one token is minted; the same person never counts twice; one qualified deny rejects
//! unless the rule says `deny: quorum`; a quorum's votes approve the call as proposed, once.

use crate::backend::{Param, audit_count};
use crate::kit::{
    Gw, add_principals, assert_answer, assert_error, csrf_of, operator, policy, start_gov, token_of,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A gateway whose `pay` rule has `approvers` = `approvers` (YAML); see [`gateway_rules`].
pub async fn gateway(dir: &std::path::Path, approvers: &str) -> Gw {
    gateway_rules(dir, &format!("- tool: pay\n  approvers: {approvers}\n")).await
}

/// A gateway under governance `rules` (a YAML rule list), with operators alice (finance),
/// fred (finance), gina (finance), sam (security), carol (finance and security) and olga
/// (finance, owner of agent `bot`) beside the kit's olaf (ops).
pub async fn gateway_rules(dir: &std::path::Path, rules: &str) -> Gw {
    let gov = policy("acme.test.quorum", rules);
    start_gov(dir, &gov, |st| {
        let mut olga = operator("olga", &["finance"]);
        olga.owns = vec!["bot".into()];
        let others = [
            ("fred", &["finance"][..]),
            ("gina", &["finance"]),
            ("sam", &["security"]),
            ("carol", &["finance", "security"]),
        ];
        let others = others
            .into_iter()
            .map(|(name, roles)| operator(name, roles));
        add_principals(st, others.chain([olga]));
    })
    .await
}

/// A [`gateway_rules`] under `rules` with one `pay` held: its data directory (keep it alive),
/// the gateway and the approval id.
pub async fn held_under(rules: &str) -> (tempfile::TempDir, Gw, String) {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_rules(dir.path(), rules).await;
    let id = gw.held("s1", "pay", args()).await;
    (dir, gw, id)
}

/// [`held_under`] a `pay` rule that needs two finance approvers.
pub async fn two_of_finance() -> (tempfile::TempDir, Gw, String) {
    held_under("- tool: pay\n  approvers: {roles: [finance], count: 2}\n").await
}

/// The arguments of the held `pay` call (500: over the agent file's threshold of 100).
pub fn args() -> Value {
    json!({"amount": 500, "to": "acme"})
}

/// `votes.approvals` as (counted, required, met).
fn progress(a: &Value) -> (usize, u64, bool) {
    let v = &a["votes"];
    let counted = v["approvals"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["counted"].as_array().unwrap().len())
        .sum();
    let required = v["required"].as_u64().unwrap();
    (counted, required, v["approvals"]["met"].as_bool().unwrap())
}

#[tokio::test]
async fn two_of_three_approvers_mint_one_token_and_nobody_counts_twice() {
    let (_dir, gw, id) = two_of_finance().await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(
        a["quorum"]["groups"],
        json!([{"roles": ["finance"], "count": 2}]),
        "{a}"
    );
    assert_eq!(progress(&a), (0, 2, false));

    let (s, a) = gw.decide(&id, "alice-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "pending", "one vote of two leaves it pending");
    assert_eq!(progress(&a), (1, 2, false));
    assert_eq!(a["votes"]["cast"][0]["by"], "alice");
    assert!(
        gw.as_agent(&id).await.get("token").is_none(),
        "no token yet"
    );

    // Attack: the same approver votes again to make up the quorum alone.
    let (s, b) = gw.decide(&id, "alice-key", "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "ALREADY_VOTED");
    // An operator who holds none of the roles cannot vote.
    let (s, b) = gw.decide(&id, "olaf-key", "approve").await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 2);

    let (s, a) = gw.decide(&id, "fred-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "approved", "{a}");
    assert_eq!(progress(&a), (2, 2, true));
    assert_eq!(
        a["decisions"][0]["by"], "fred",
        "the vote that met the quorum settles it"
    );
    let (s, b) = gw.decide(&id, "gina-key", "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "ALREADY_DECIDED");

    let token = token_of(&gw.as_agent(&id).await);
    let (s, b) = gw.redeem(&token, "pay", args(), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "decision.vote"), 2);
    assert_eq!(
        audit_count(&gw.data_dir, "token.minted"),
        1,
        "one token for the quorum"
    );
    gw.stop().await;
}

#[tokio::test]
async fn two_groups_need_both_and_one_person_with_both_roles_fills_only_one() {
    let (_dir, gw, id) =
        held_under("- tool: pay\n  approvers: [{role: finance, count: 1}, {role: security}]\n")
            .await;
    let (_, a) = gw.decide(&id, "carol-key", "approve").await;
    assert_eq!(
        a["status"], "pending",
        "carol holds both roles but is one person: {a}"
    );
    assert_eq!(progress(&a), (1, 2, false));
    // alice can only fill finance; carol is placed in security instead.
    let (_, a) = gw.decide(&id, "alice-key", "approve").await;
    assert_eq!(a["status"], "approved", "{a}");
    let groups = &a["votes"]["approvals"]["groups"];
    assert_eq!(groups[0]["counted"], json!(["alice"]));
    assert_eq!(groups[1]["counted"], json!(["carol"]));

    // Two people of the same group do not make up for the missing one.
    let id = gw.held("s2", "pay", args()).await;
    gw.decide(&id, "alice-key", "approve").await;
    let (_, a) = gw.decide(&id, "fred-key", "approve").await;
    assert_eq!(a["status"], "pending", "{a}");
    let (_, a) = gw.decide(&id, "sam-key", "approve").await;
    assert_eq!(a["status"], "approved", "{a}");
    gw.stop().await;
}

#[tokio::test]
async fn one_qualified_deny_rejects_unless_the_rule_says_deny_quorum() {
    // With `deny: any` fred's deny rejects after alice approved; with `deny: quorum` alice's
    // deny alone leaves it pending and fred's second deny rejects.
    for (approvers, first, after_first) in [
        ("{roles: [finance], count: 2}", "approve", "pending"),
        (
            "{roles: [finance], count: 2, deny: quorum}",
            "deny",
            "pending",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), approvers).await;
        let id = gw.held("s1", "pay", args()).await;
        let (_, a) = gw.decide(&id, "alice-key", first).await;
        assert_eq!(a["status"], after_first, "{approvers}: {a}");
        let (_, a) = gw.decide(&id, "fred-key", "deny").await;
        assert_eq!(a["status"], "rejected", "{approvers}: {a}");
        assert!(gw.as_agent(&id).await.get("token").is_none());
        gw.stop().await;
    }
}

#[tokio::test]
async fn a_quorum_vote_approves_the_call_as_proposed_once() {
    let (_dir, gw, id) = two_of_finance().await;
    for body in [
        json!({"decision": "approve", "scope": "session"}),
        json!({"decision": "approve", "arguments": {"amount": 5, "to": "acme"}}),
    ] {
        let (s, b) = gw.decide_with(&id, "alice-key", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {b}");
        assert!(b["message"].as_str().unwrap().contains("quorum"), "{b}");
    }
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(progress(&a), (0, 2, false), "a refused vote is not counted");
    assert_eq!(a["status"], "pending");
    gw.stop().await;
}

#[tokio::test]
async fn the_dashboard_card_shows_the_quorum_and_a_vote_from_it_counts() {
    let (_dir, gw, id) = two_of_finance().await;
    let cookie = gw.dashboard_session().await;
    let card_path = format!("/ui/approvals/{id}");
    let page = gw.dashboard_page(&card_path, &cookie).await;
    assert!(
        page.contains("Quorum: 0 of 2 approvals (finance 0 of 2)"),
        "{page}"
    );
    let csrf = csrf_of(&page);
    let resp = gw
        .dashboard_post(
            &format!("{card_path}/decide"),
            &cookie,
            "application/x-www-form-urlencoded",
            format!("csrf={csrf}&decision=approve&reason=checked+the+invoice"),
        )
        .await;
    assert!(
        resp.status().is_success() || resp.status().is_redirection(),
        "{}",
        resp.status()
    );
    let page = gw.dashboard_page(&card_path, &cookie).await;
    assert!(
        page.contains("Quorum: 1 of 2 approvals (finance 1 of 2: alice)"),
        "{page}"
    );
    assert!(page.contains("approve by alice at"), "{page}");
    assert!(page.contains("checked the invoice"), "{page}");
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    gw.stop().await;
}

/// The principals of `a`'s `votes.cast`, sorted.
fn voters(a: &Value) -> Vec<String> {
    let mut by: Vec<String> = a["votes"]["cast"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["by"].as_str().unwrap().to_string())
        .collect();
    by.sort();
    by
}

/// Attack: whoever can write the database (but holds no key) plants a vote under an
/// approver's name on a two-of-finance call, so that the next genuine vote meets the quorum.
/// The planted row counts for nothing and is not shown: fred's vote leaves the call pending
/// with no token, and alice can still cast her own vote (it replaces the planted row). A
/// vote row carrying another vote's seal makes its approval damaged: approving is refused,
/// denying is not.
#[tokio::test]
async fn a_vote_planted_in_the_database_does_not_make_up_a_quorum() {
    let (_dir, gw, id) = two_of_finance().await;
    let plant = format!(
        "INSERT INTO votes (approval_id, principal, decision, roles, reason, at) VALUES ('{id}', 'alice', 'approve', '[\"finance\"]', NULL, 1)"
    );
    assert_eq!(gw.sql().exec(&plant, &[]), 1);
    let (_, a) = gw.approval(&id, "fred-key").await;
    assert_eq!(progress(&a), (0, 2, false), "{a}");
    let (s, a) = gw.decide(&id, "fred-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(
        a["status"], "pending",
        "the planted vote made up the quorum: {a}"
    );
    assert_eq!(voters(&a), ["fred"]);
    assert!(gw.as_agent(&id).await.get("token").is_none());
    let retried = gw.held("s1", "pay", args()).await;
    assert_eq!(retried, id, "the same call retried joins the pending one");
    // Found by review: the vote's event counted the planted row too ("2 of 2").
    let event = gw.sql().text(
        "SELECT data FROM aaep_events WHERE approval_id = ?1 AND type = 'aaep:agent.progress.updated'",
        &[Param::from(id.as_str())],
    );
    assert!(event.contains("1 of 2 approvals so far"), "{event}");
    let (s, a) = gw.decide(&id, "alice-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "approved", "{a}");
    assert_eq!(voters(&a), ["alice", "fred"]);
    let record = gw.sql().text(
        "SELECT data FROM audit WHERE kind = 'decision.vote' AND actor = 'alice'",
        &[],
    );
    assert!(
        record.contains("\"replaced_unvouched_row\":true"),
        "{record}"
    );

    // Another row's seal copied in: the approval is damaged, nobody's vote is taken.
    let id = gw.held("s1", "pay", args()).await;
    assert_eq!(
        gw.decide(&id, "fred-key", "approve").await.0,
        StatusCode::OK
    );
    copy_vote_as(&gw, &id, "fred", "gina");
    let (s, b) = gw.decide(&id, "alice-key", "approve").await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "APPROVAL_DAMAGED", "{b}");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "pending", "{a}");
    assert_eq!(voters(&a), ["fred"], "{a}");
    assert!(gw.as_agent(&id).await.get("token").is_none());
    // Found by review: the call retried joined it, though it can only be rejected now.
    let retried = gw.held("s1", "pay", args()).await;
    assert_ne!(retried, id, "joined an approval nobody may approve");
    // Saying no is still possible: one qualified deny rejects it.
    let (s, a) = gw.decide(&id, "alice-key", "deny").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "rejected", "{a}");
    gw.stop().await;
}

/// A vote row with another vote's seal copied in (found by review of the vote seals): the
/// answer to a vote that is counted without settling the approval named nothing damaged,
/// though every read of the approval does (`votes.seal`).
#[tokio::test]
async fn a_counted_votes_answer_names_a_vote_row_with_a_seal_not_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "{roles: [finance], count: 3, deny: quorum}").await;
    let id = gw.held("s1", "pay", args()).await;
    let (_, a) = gw.decide(&id, "fred-key", "deny").await;
    assert_eq!(a["status"], "pending", "{a}");
    copy_vote_as(&gw, &id, "fred", "gina");
    let (s, a) = gw.decide(&id, "alice-key", "deny").await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "pending", "{a}");
    assert!(
        a["damaged"]
            .as_array()
            .is_some_and(|d| d.contains(&json!("votes.seal"))),
        "{a}"
    );
    gw.stop().await;
}

/// Plants a vote of `to` on approval `id` in the database: `from`'s row, seal and all (a seal
/// that is not the new row's own).
fn copy_vote_as(gw: &Gw, id: &str, from: &str, to: &str) {
    let copy = format!(
        "INSERT INTO votes (approval_id, principal, decision, roles, reason, at, passkey, seal)
         SELECT approval_id, '{to}', decision, roles, reason, at, passkey, seal FROM votes WHERE approval_id = '{id}' AND principal = '{from}'"
    );
    assert_eq!(gw.sql().exec(&copy, &[]), 1);
}

/// Attack (found by review): rule A asks two finance approvers for `pay` and escalates
/// nothing; rule B on `pay` is plain (`[ops]`) and escalates to `intern` when its wait ends.
/// Once B's step was taken, `intern` joined every group of the call's quorum, so three interns
/// approved a payment no finance approver saw. Each group now widens only by its own rule's
/// escalation: the interns fill B's place, never A's; two finance votes are still needed.
#[tokio::test]
async fn another_rules_escalation_does_not_let_interns_fill_a_finance_quorum() {
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n- tool: pay\n  approvers: [ops]\n  timeout_seconds: 60\n  on_timeout: {escalate_to: [intern], after_seconds: 600}\n";
    let gov = policy("acme.test.quorum-escalation", rules);
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gov(dir.path(), &gov, |st| {
        let interns = ["ivy", "ian", "ida"].map(|name| operator(name, &["intern"]));
        add_principals(
            st,
            interns.into_iter().chain([operator("fred", &["finance"])]),
        );
    })
    .await;
    let id = gw.held("s1", "pay", args()).await;
    // B's step: its wait (60 s) ends.
    let later = assent_server::state::now_ms() + 61_000;
    let changed = gw.with_store(|s| s.expire_due(later).unwrap());
    assert!(changed.contains(&id), "{changed:?}");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "pending", "{a}");
    assert_eq!(
        a["schedule"]["steps"][0]["taken"],
        json!(true),
        "B's step: {a}"
    );
    for key in ["ivy-key", "ian-key", "ida-key"] {
        let (s, b) = gw.decide(&id, key, "approve").await;
        assert!(s == StatusCode::OK || s == StatusCode::FORBIDDEN, "{s} {b}");
    }
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "pending", "three interns approve nothing: {a}");
    assert!(gw.as_agent(&id).await.get("token").is_none(), "no token");
    assert_eq!(
        a["quorum"]["groups"][0]["roles"],
        json!(["finance"]),
        "A's group is not widened: {a}"
    );
    // B's own escalation still widened its group: an intern filled it; two finance
    // approvals settle the call.
    let (s, a) = gw.decide(&id, "alice-key", "approve").await;
    assert_answer(s, &a, "status", StatusCode::OK, "pending");
    let (s, a) = gw.decide(&id, "fred-key", "approve").await;
    assert_answer(s, &a, "status", StatusCode::OK, "approved");
    // Its receipt names each group's escalation and holds to the published schema.
    let (s, receipt) = gw
        .get(&format!("/v1/approvals/{id}/receipt"), "alice-key")
        .await;
    assert_eq!(s, StatusCode::OK, "{receipt}");
    crate::schemas::assert_valid(
        &crate::schemas::validator("docs/schemas/approval-receipt.schema.json"),
        &receipt,
        "receipt",
    );
    gw.stop().await;
}
