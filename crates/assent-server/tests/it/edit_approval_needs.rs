//! An operator's edit may not lower the approval a call needs (issue 14 §1, §2, §4; seed 002
//! "Approve with modifications"): the edited call is re-gated by the rules in force now, and
//! an edit whose verdict needs a quorum, a passkey or separation of duties that the held
//! call's approval did not is refused `422 EDIT_NEEDS_MORE_APPROVAL` — through the REST API,
//! the dashboard's form and an AAEP `modified_action` alike. Otherwise one operator's word,
//! under the held approval's lighter terms, would run a call the policy now gives to two
//! people, to a passkey press or to someone other than the agent's owner.

use crate::kit::{AGENTS, Gw, assert_error, assert_says, csrf_of, one_tool_agent, policy};
use crate::quorum::{args, held_under};
use assent_core::policy::Registry;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The rules the call is held under: `pay` needs one finance approver.
const ONE_APPROVER: &str = "- tool: pay\n  approvers: [finance]\n";

/// The rules of the tightened `pay`: two finance approvers.
const QUORUM: &str = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n";

/// Swaps the gateway's rules for `rules` (a YAML rule list) while a call waits, as a reload
/// does; the principals stay.
fn rules_now(gw: &Gw, rules: &str) {
    let gov = policy("acme.test.quorum", rules);
    let other = one_tool_agent("other", "{alias: pay, approval: true}");
    let reg = Registry::load(
        &[
            ("bot.agf.yaml".into(), AGENTS.into()),
            ("other.agf.yaml".into(), other),
        ],
        &[("gov.yaml".into(), gov)],
    )
    .unwrap();
    let principals = (*gw.state.principals()).clone();
    gw.state
        .swap_live(assent_server::Live::new(reg, principals));
}

/// `pay` held under [`ONE_APPROVER`], then the rules become `stricter`: the data directory,
/// the gateway and the approval id.
async fn held_then(stricter: &str) -> (tempfile::TempDir, Gw, String) {
    let (dir, gw, id) = held_under(ONE_APPROVER).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert!(a.get("quorum").is_none_or(Value::is_null), "{a}");
    assert_ne!(a["require_passkey"], true, "{a}");
    assert_ne!(a["separation_of_duties"], true, "{a}");
    rules_now(&gw, stricter);
    (dir, gw, id)
}

/// Edits `id` as the operator with `key`: approve with `amount` (to `acme`).
async fn edit_as(gw: &Gw, id: &str, key: &str, amount: u64) -> (StatusCode, Value) {
    let edited = json!({"decision": "approve", "arguments": {"amount": amount, "to": "acme"}});
    gw.decide_with(id, key, edited).await
}

/// Asserts the edit was refused naming `needs`, and that nothing was approved.
async fn refused(gw: &Gw, id: &str, (s, b): (StatusCode, Value), needs: &str) {
    assert_error(
        s,
        &b,
        StatusCode::UNPROCESSABLE_ENTITY,
        "EDIT_NEEDS_MORE_APPROVAL",
    );
    assert_says(&b, "message", needs);
    assert_says(&b, "message", "propose it as a new call");
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(a["status"], "pending", "nothing approved: {a}");
    assert!(a.get("token").is_none_or(Value::is_null), "{a}");
}

/// `pay` held, then the rules become `stricter`: `key`'s edit (approve with 50,000) is
/// refused naming `needs` ([`refused`]); the gateway is stopped.
async fn edit_refused_under(stricter: &str, key: &str, needs: &str) {
    let (_dir, gw, id) = held_then(stricter).await;
    let r = edit_as(&gw, &id, key, 50_000).await;
    refused(&gw, &id, r, needs).await;
    gw.stop().await;
}

/// Attack: `pay` needs two finance approvers now (a rule tightened while the call waited); the
/// one approver of the held call edits it (a larger amount) and approves it alone.
#[tokio::test]
async fn an_edit_cannot_turn_a_one_approver_call_into_a_quorum_call_on_one_word() {
    let (_dir, gw, id) = held_then(QUORUM).await;
    let r = edit_as(&gw, &id, "alice-key", 50_000).await;
    refused(&gw, &id, r, "a quorum of 2 finance").await;
    // Lowering the amount does not lower what the edited call needs either.
    let r = edit_as(&gw, &id, "fred-key", 1).await;
    refused(&gw, &id, r, "a quorum of 2 finance").await;
    gw.stop().await;
}

/// Attack: `pay` needs a passkey-signed approval now; an edit (which a passkey cannot sign)
/// would approve the edited call with no passkey press at all.
#[tokio::test]
async fn an_edit_cannot_approve_without_the_passkey_the_edited_call_needs() {
    let stricter = "- tool: pay\n  approvers: [finance]\n  require_passkey: true\n";
    edit_refused_under(stricter, "alice-key", "a passkey").await;
}

/// Attack: `pay` has separation of duties now; olga, who owns agent `bot`, approves its call
/// herself by editing it.
#[tokio::test]
async fn the_agents_owner_cannot_approve_by_edit_a_call_needing_separation_of_duties() {
    let stricter = "- tool: pay\n  approvers: [finance]\n  separation_of_duties: true\n";
    edit_refused_under(stricter, "olga-key", "separation of duties").await;
}

/// Attack: the same quorum edit sent through the dashboard's approve form.
#[tokio::test]
async fn a_dashboard_edit_cannot_turn_a_call_into_a_quorum_call_on_one_word() {
    let (_dir, gw, id) = held_then(QUORUM).await;
    let cookie = gw.dashboard_session().await;
    let card = format!("/ui/approvals/{id}");
    let csrf = csrf_of(&gw.dashboard_page(&card, &cookie).await);
    let form = serde_urlencoded::to_string([
        ("csrf", csrf.as_str()),
        ("decision", "approve"),
        ("scope", "once"),
        ("arguments", r#"{"amount": 50000, "to": "acme"}"#),
    ])
    .unwrap();
    let resp = gw
        .dashboard_post(
            &format!("{card}/decide"),
            &cookie,
            "application/x-www-form-urlencoded",
            form,
        )
        .await;
    let status = resp.status();
    let page = resp.text().await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{page}");
    assert!(page.contains("a quorum of 2 finance"), "{page}");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "pending", "nothing approved: {a}");
    gw.stop().await;
}

/// Attack: the same quorum edit as an AAEP subscriber's `modified_action`: not applied, and
/// the accept is taken as a reject (AAEP §6.3.2), so nothing runs.
#[tokio::test]
async fn an_aaep_modified_action_cannot_turn_a_call_into_a_quorum_call_on_one_word() {
    let dir = tempfile::tempdir().unwrap();
    let gw = crate::quorum::gateway_rules(dir.path(), ONE_APPROVER).await;
    let (sub, mut sse) = gw.listen().await;
    let id = gw.held("s1", "pay", args()).await;
    let token = sse.reply_token("aaep:agent.awaiting.confirmation").await;
    rules_now(&gw, QUORUM);
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let reply = json!({"type": "confirmation.reply", "reply_token": token, "decision": "accept",
        "subscription_id": sub, "timestamp": now, "decided_by": "user:test",
        "modified_action": {"arguments": {"amount": 50_000, "to": "acme"}}});
    assert_eq!(
        gw.reply(Some("alice-key"), reply).await,
        StatusCode::NO_CONTENT
    );
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "rejected", "{a}");
    assert_says(&a["decisions"][0], "reason", "a quorum of 2 finance");
    gw.stop().await;
}
