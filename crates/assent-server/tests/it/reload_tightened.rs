//! A reload that makes the rules ask more of a tool than its calls already held were held
//! under: those calls may be denied, not approved as held (`409 RULES_TIGHTENED`).

use crate::kit::{assert_error, assert_says, policy};
use crate::reload::{OP, reloadable_by_everyone, reloaded};
use reqwest::StatusCode;
use serde_json::json;

/// Attack (found by review): a call was held under rules asking one finance approver; a
/// reload then made `pay` need a passkey (or denied it outright), yet one operator holding the
/// old approver role approved the call held before, with no passkey, and its token redeemed.
/// The approval now says which rule in force asks more and is refused, audited
/// `decision.refused`; a deny is still taken; a reload asking nothing more of the call leaves
/// it approvable.
#[tokio::test]
async fn a_call_held_before_a_reload_tightened_its_rules_cannot_be_approved_as_held() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let pay = |n: i64| json!({"amount": n, "to": "acme"});
    let (first, second, third) = (
        gw.held("s1", "pay", pay(500)).await,
        gw.held("s1", "pay", pay(600)).await,
        gw.held("s1", "pay", pay(700)).await,
    );
    // Another rule for another tool: nothing more is asked of `pay`.
    let gov = "- tool: pay\n  approvers: [finance]\n- tool: read\n  approval: true\n";
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", gov)).unwrap();
    reloaded(&gw, OP).await;
    let (s, b) = gw.decide(&first, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    for (rule, says) in [
        ("  require_passkey: true\n", "need a passkey for it"),
        (
            "  deny: {condition: {args_match: {amount: {gt: 100}}}}\n",
            "deny it (",
        ),
    ] {
        let gov = format!("- tool: pay\n  approvers: [finance]\n{rule}");
        std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", &gov)).unwrap();
        reloaded(&gw, OP).await;
        let (s, b) = gw.decide(&second, OP, "approve").await;
        assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
        assert_says(&b, "message", says);
        assert_eq!(gw.as_agent(&second).await["status"], "pending");
    }
    let refused = gw.sql().text(
        "SELECT data FROM audit WHERE kind = 'decision.refused' ORDER BY seq DESC LIMIT 1",
        &[],
    );
    assert!(
        refused.contains("changed since this call was held"),
        "{refused}"
    );
    let (s, b) = gw.decide(&second, OP, "deny").await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("rejected")),
        "{b}"
    );
    // Nor with a grant's scope.
    let (s, b) = gw
        .decide_with(
            &third,
            OP,
            json!({"decision": "approve", "scope": "session"}),
        )
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
    gw.stop().await;
}

/// Attack (found by review): the same reload did not reach a held call's approving default:
/// nobody answered, its timeout approved it under the old terms, and a token was minted. Its
/// timeout now rejects it when the rules in force ask more of it.
#[tokio::test]
async fn a_reload_that_tightens_the_rules_leaves_no_approving_default_to_a_held_call() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let write = |rule: &str| {
        let gov = format!(
            "- tool: pay\n  approvers: [finance]\n  timeout_seconds: 2\n  default_decision: approve\n{rule}"
        );
        std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", &gov)).unwrap();
    };
    write("");
    reloaded(&gw, OP).await;
    let held = gw
        .held("s1", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let control = gw
        .held("s2", "pay", json!({"amount": 501, "to": "acme"}))
        .await;
    write("  deny: {condition: {args_match: {amount: 500}}}\n");
    reloaded(&gw, OP).await;
    let (a, c) = (settled(&gw, held).await, settled(&gw, control).await);
    assert_eq!(a["status"], "expired", "{a}");
    assert!(a["approval_token"].is_null(), "a token was minted: {a}");
    // The call the new rule does not deny keeps its approving default.
    assert!(c["approval_token"].is_object(), "{c}");
    gw.stop().await;
}

/// Approval `id` as its agent sees it once its timeout settled it (within 10 s).
async fn settled(gw: &crate::kit::Gw, id: String) -> serde_json::Value {
    for _ in 0..100 {
        let a = gw.as_agent(&id).await;
        if a["status"] != "pending" {
            return a;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{id} was not settled by its timeout");
}

/// Attack (found by review): during an incident an operator reloads `pay` from
/// `default_decision: approve` to `reject` (or drops the key), changing nothing else. The calls
/// already held were still approved at their timeout, up to 7 days later, with no one looking:
/// the check of the rules in force compared deny, tier, passkey, quorum and approvers, never
/// the default. They are now rejected at their timeout.
#[tokio::test]
async fn a_reload_turning_a_default_to_reject_reaches_the_calls_already_held() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let write = |default: &str| {
        let gov = format!(
            "- tool: pay\n  approvers: [finance]\n  timeout_seconds: 2\n  default_decision: {default}\n"
        );
        std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", &gov)).unwrap();
    };
    write("approve");
    reloaded(&gw, OP).await;
    let pay = |n: i64| json!({"amount": n, "to": "acme"});
    // Approved by its default before the reload: its token is judged as that default.
    let early = settled(&gw, gw.held("s1", "pay", pay(400)).await).await;
    let token = early["token"]
        .as_str()
        .expect("its default approved it")
        .to_string();
    let held = gw.held("s1", "pay", pay(500)).await;
    write("reject");
    reloaded(&gw, OP).await;
    let a = settled(&gw, held).await;
    assert_eq!(a["status"], "expired", "{a}");
    assert!(a["approval_token"].is_null(), "a token was minted: {a}");
    // Found by review of the fix: the token its approving default minted just before the
    // reload still ran the call.
    let (s, b) = gw.redeem(&token, "pay", pay(400), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
    gw.stop().await;
}

/// Attack (found by review): a call approved before a reload kept its token, and the token
/// redeemed after the reload denied the tool (or made it need a passkey) until it expired: the
/// agent ran a call the rules in force forbid by holding on to its token. Redeeming it now is
/// `409 RULES_TIGHTENED`, audited `token.refused`, the token left unused; a token whose call
/// the new rules ask nothing more of still redeems, as does one approved after the change
/// (found by review: an approval made under new approvers was refused for ever).
#[tokio::test]
async fn a_token_approved_before_a_reload_denied_its_call_does_not_run_it() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let pay = |n: i64| json!({"amount": n, "to": "acme"});
    let approved = |id: String| {
        let gw = &gw;
        async move {
            let (s, b) = gw.decide(&id, OP, "approve").await;
            assert_eq!(s, StatusCode::OK, "{b}");
            crate::kit::token_of(&gw.as_agent(&id).await)
        }
    };
    let denied = approved(gw.held("s1", "pay", pay(500)).await).await;
    let passkey = approved(gw.held("s1", "pay", pay(250)).await).await;
    let untouched = approved(gw.held("s1", "pay", pay(150)).await).await;
    let elsewhere = approved(gw.held("s1", "pay", pay(160)).await).await;
    // Another rule for another tool: nothing more is asked of `pay`.
    let gov = "- tool: pay\n  approvers: [finance]\n- tool: read\n  approval: true\n";
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", gov)).unwrap();
    reloaded(&gw, OP).await;
    let (s, b) = gw.redeem(&untouched, "pay", pay(150), None).await;
    assert_eq!(s, StatusCode::OK, "a reload asking nothing more: {b}");
    for (rule, token, n, says) in [
        (
            "  approvers: [finance]\n  deny: {condition: {args_match: {amount: {gt: 300}}}}\n",
            &denied,
            500,
            "deny it (",
        ),
        (
            "  approvers: [finance]\n  require_passkey: true\n",
            &passkey,
            250,
            "need a passkey for it",
        ),
    ] {
        let gov = format!("- tool: pay\n{rule}");
        std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", &gov)).unwrap();
        reloaded(&gw, OP).await;
        let (s, b) = gw.redeem(token, "pay", pay(n), None).await;
        assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
        assert_says(&b, "message", says);
    }
    let refused = gw.sql().text(
        "SELECT data FROM audit WHERE kind = 'token.refused' ORDER BY seq DESC LIMIT 1",
        &[],
    );
    assert!(
        refused.contains("changed since this call was approved"),
        "{refused}"
    );
    // Who approved is not asked again: approved by a finance operator, only ops may approve
    // it now, and its token still redeems; a call approved by ops after the change, too.
    let ops = "- tool: pay\n  approvers: [ops]\n";
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", ops)).unwrap();
    reloaded(&gw, OP).await;
    let (s, b) = gw.redeem(&elsewhere, "pay", pay(160), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let late = gw.held("s2", "pay", pay(170)).await;
    let finance = "- tool: pay\n  approvers: [finance]\n";
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", finance)).unwrap();
    reloaded(&gw, OP).await;
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", ops)).unwrap();
    reloaded(&gw, OP).await;
    let (s, b) = gw.decide(&late, "olaf-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let token = crate::kit::token_of(&gw.as_agent(&late).await);
    let (s, b) = gw.redeem(&token, "pay", pay(170), None).await;
    assert_eq!(s, StatusCode::OK, "approved under the rules in force: {b}");
    gw.stop().await;
}

/// Attack (found by review): the check above left out held results, delegations and plan
/// Confirms. A result held over its `output_bytes` limit before a reload denied its call was
/// still released by one operator; now its release is `409 RULES_TIGHTENED` (the call whose
/// result it is, asked under the rules in force), while a result whose call the new rules
/// still allow is released.
#[tokio::test]
async fn a_result_held_before_a_reload_denied_its_call_is_not_released() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let write = |rule: &str| {
        let gov = format!(
            "- tool: pay\n  approvers: [finance]\n  thresholds: {{output_bytes: 100}}\n{rule}"
        );
        std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", &gov)).unwrap();
    };
    write("");
    reloaded(&gw, OP).await;
    let held = |n: i64| {
        let gw = &gw;
        async move {
            let report = json!({"agent": "bot", "session_id": "s1", "tool": "pay",
                "arguments": {"amount": n, "to": "acme"}, "output_bytes": 5000,
                "result_sha256": "ab".repeat(32)});
            let (s, b) = gw.post("/v1/tool-results", crate::kit::BOT, report).await;
            assert_eq!(s, StatusCode::ACCEPTED, "{b}");
            crate::kit::approval_id(&b)
        }
    };
    let (denied, allowed) = (held(500).await, held(150).await);
    write("  deny: {condition: {args_match: {amount: {gt: 300}}}}\n");
    reloaded(&gw, OP).await;
    let (s, b) = gw.decide(&denied, OP, "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
    assert_says(&b, "message", "deny it (");
    let (s, b) = gw.decide(&allowed, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

/// The same for an MPLP Confirm on a plan (found by review): a reload that made plans need
/// the finance role kept a plan submitted before it approvable by an operator without it;
/// asked again as a Confirm target under the rules in force, it is `409 RULES_TIGHTENED`.
#[tokio::test]
async fn a_plan_submitted_before_a_reload_named_its_approvers_is_not_approved_by_others() {
    use crate::plans::{plan, uuid};
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let pid = uuid();
    let (s, p) = gw
        .create_plan(plan(&pid, &[(&uuid(), "Pay the bill")]))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let (s, r) = gw.submit_plan(&pid).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let confirm = crate::kit::approval_id(&r);
    let gov = "- tool: pay\n  approvers: [finance]\n- tool: mplp.plan\n  approvers: [finance]\n";
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", gov)).unwrap();
    reloaded(&gw, OP).await;
    let (s, b) = gw.decide(&confirm, "olaf-key", "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
    assert_says(&b, "message", "whose roles you lack");
    let (s, b) = gw.decide(&confirm, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "an operator the rules name: {b}");
    gw.stop().await;
}

/// The same for an MPLP Confirm whose target type is `other` (its tool `mplp.other`; found by
/// review: only plans and contexts were asked again): a reload denying `mplp.other` leaves the
/// Confirms held before it unapprovable.
#[tokio::test]
async fn a_confirm_on_another_target_held_before_a_reload_denied_it_cannot_be_approved() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let confirm = json!({"agent": "bot", "session_id": "s1", "target_type": "other",
        "target_id": crate::plans::uuid(), "reason": "May I?", "target": {"name": "x"}});
    let (s, r) = gw.post("/v1/confirms", crate::kit::BOT, confirm).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let held = crate::kit::approval_id(&r);
    let gov = "- tool: pay\n  approvers: [finance]\n- tool: mplp.other\n  deny: {message_template: frozen}\n";
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", gov)).unwrap();
    reloaded(&gw, OP).await;
    let (s, b) = gw.decide(&held, OP, "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "RULES_TIGHTENED");
    assert_says(&b, "message", "deny it (frozen)");
    gw.stop().await;
}

/// Attack (found by review): with the rules changed since a call was approved, its redemption
/// judged the call as the database's `tool` and `arguments` columns said, which no seal
/// covers: renamed `mplp.x`, the call was taken for a derived one and not asked again, and its
/// token ran the denied call. A call that is not its sealed canonical text redeems nothing
/// (`409 SETTLEMENT_UNSEALED`).
#[tokio::test]
async fn a_call_renamed_in_the_database_is_not_judged_by_its_new_name_at_redemption() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let pay = json!({"amount": 500, "to": "acme"});
    let id = gw.held("s1", "pay", pay.clone()).await;
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let token = crate::kit::token_of(&gw.as_agent(&id).await);
    let gov = "- tool: pay\n  approvers: [finance]\n  deny: {message_template: frozen}\n";
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.reload", gov)).unwrap();
    reloaded(&gw, OP).await;
    gw.sql().exec(
        "UPDATE approvals SET tool = 'mplp.x' WHERE id = ?1",
        &[crate::backend::Param::Text(id.clone())],
    );
    let (s, b) = gw.redeem(&token, "pay", pay, None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "SETTLEMENT_UNSEALED");
    gw.stop().await;
}
