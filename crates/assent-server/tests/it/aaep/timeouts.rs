//! AAEP timing (§6.2, issue 10 §5): timeouts apply both default decisions and long waits count
//! down with `agent.progress.updated`; an `on_timeout` escalation is announced up front and
//! replies count until the announced deadline; a subscription's timeout extension lengthens the
//! wait (capped) while its filters never drop critical events.

use super::kit::{AWAITING, confirm, core};
use crate::kit::{AGENTS, OP, Param, policy, serve, start_reg, wait_seconds};
use crate::schemas::assert_valid;
use assent_server::Settings;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn timeouts_apply_both_defaults_and_long_waits_count_down() {
    let gw = serve().await;
    let (sub, mut sse) = gw.listen().await;
    // `quick` rejects at its 1 s timeout, `lenient` accepts at its 1 s timeout.
    let q = gw.pending("quick", json!({})).await;
    let ev = sse.expect(AWAITING).await.data;
    assert_eq!(
        (
            ev["timeout_seconds"].as_i64(),
            ev["default_decision"].as_str()
        ),
        (Some(1), Some("reject"))
    );
    let qtoken = ev["reply_token"].as_str().unwrap().to_string();
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "thinking");
    assert_eq!(gw.status(&q).await["status"], "expired");
    // A reply after the timeout changes nothing.
    assert_eq!(
        gw.reply(Some(OP), confirm(&qtoken, &sub, "accept")).await,
        StatusCode::NO_CONTENT
    );
    assert!(gw.status(&q).await.get("token").is_none());
    let l = gw.pending("lenient", json!({})).await;
    let ev = sse.expect(AWAITING).await.data;
    assert_eq!(ev["default_decision"], "accept");
    let ev = sse.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "calling_tool");
    assert!(gw.status(&l).await["approval_token"].is_object());

    // A 300 s wait: progress at 50% and at 10% remaining (moved forward in the database).
    let id = gw.hold_write("/tmp/long").await;
    sse.expect(AWAITING).await;
    let mut db = gw.sql();
    let mut shift = |ms: i64| {
        db.exec("UPDATE approvals SET requested_at = requested_at - ?2, expires_at = expires_at - ?2 WHERE id = ?1", &[Param::from(&id), Param::from(ms)]);
    };
    shift(151_000);
    let ev = sse.expect("aaep:agent.progress.updated").await.data;
    assert_valid(&core("agent.progress.updated"), &ev, "progress 50%");
    assert_eq!(ev["progress"]["percent"], 50);
    shift(125_000);
    let ev = sse.expect("aaep:agent.progress.updated").await.data;
    assert_eq!(ev["progress"]["percent"], 90);
    assert!(ev["summary_terse"].as_str().unwrap().contains("s left"));
    sse.none_of("aaep:agent.progress.updated", Duration::from_millis(1500))
        .await;
}

/// Issue 10 §5: an `on_timeout` escalation outlives the first wait, so the
/// `awaiting.confirmation` announces the real deadline (first wait + `after_seconds`) with the
/// escalation in `extensions.assent`, the escalation itself is an `agent.progress.updated`
/// naming the new approvers, a reply is accepted until the announced deadline (even after the
/// first wait ran out) and ignored after it.
#[tokio::test]
async fn an_escalation_is_announced_up_front_and_replies_count_until_the_announced_deadline() {
    let esc_gov = policy(
        "acme.test.esc-v1",
        r#"
- tool: quick
  approval: true
  approvers: [finance]
  timeout_seconds: 1
  on_timeout: {escalate_to: [ops], after_seconds: 3}
"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        approval_timeout_ms: Some(300_000),
        ..Settings::default()
    };
    let gw = start_reg(dir.path(), 300_000, settings, AGENTS, &esc_gov).await;
    let (sub, mut sse) = gw.subscribe("olaf-key", true, json!({})).await;
    let id = gw.pending("quick", json!({})).await;
    let ev = sse.expect(AWAITING).await.data;
    assert_valid(
        &core("agent.awaiting.confirmation"),
        &ev,
        "escalating confirmation",
    );
    assert_eq!(ev["timeout_seconds"], 4, "{ev}");
    let esc = &ev["extensions"]["assent"]["escalation"];
    assert_eq!(esc["steps"][0]["approvers"], json!(["ops"]), "{ev}");
    assert_eq!(esc["steps"].as_array().map(Vec::len), Some(1), "{ev}");
    let deadline = esc["deadline"].as_str().unwrap().to_string();
    let token = ev["reply_token"].as_str().unwrap().to_string();
    // The escalation (after the first second) is announced; the deadline stays.
    let ev = sse.expect("aaep:agent.progress.updated").await.data;
    assert_valid(&core("agent.progress.updated"), &ev, "escalation progress");
    let esc = &ev["extensions"]["assent"]["escalation"];
    assert_eq!(esc["approvers"], json!(["finance", "ops"]), "{ev}");
    assert_eq!((&esc["step"], &esc["added"]), (&json!(1), &json!(["ops"])));
    assert_eq!(esc["deadline"], deadline.as_str());
    assert_eq!(esc["expires_at"], deadline.as_str());
    assert!(ev["eta_ms"].as_i64().unwrap() <= 3000, "{ev}");
    // Past the first wait, before the announced deadline: olaf (ops) may now accept.
    assert_eq!(gw.status(&id).await["status"], "pending");
    let accept = async |token: &str| {
        gw.reply(Some("olaf-key"), confirm(token, &sub, "accept"))
            .await
    };
    assert_eq!(accept(&token).await, StatusCode::NO_CONTENT);
    assert_eq!(gw.status(&id).await["status"], "approved");

    // A second one whose announced deadline has passed: the reply is ignored.
    let late = gw.pending("quick", json!({"n": 2})).await;
    let token = sse.reply_token(AWAITING).await;
    let mut sql = gw.sql();
    let stored = sql.rows(
        "SELECT escalation_schedule FROM approvals WHERE id = ?1",
        &[Param::from(&late)],
    );
    let mut sched: serde_json::Value = serde_json::from_str(&stored[0][0]).unwrap();
    sched["deadline"] = json!(sched["deadline"].as_i64().unwrap() - 4500);
    sched["steps"][0]["at"] = json!(sched["steps"][0]["at"].as_i64().unwrap() - 4500);
    sql.exec("UPDATE approvals SET requested_at = requested_at - 4500, expires_at = expires_at - 4500, escalation_schedule = ?2 WHERE id = ?1",
        &[Param::from(&late), Param::from(&sched.to_string())]);
    assert_eq!(accept(&token).await, StatusCode::NO_CONTENT);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rec = gw.status(&late).await;
    assert_eq!(rec["status"], "expired", "{rec}");
    assert!(rec.get("token").is_none(), "{rec}");
}

#[tokio::test]
async fn filters_never_drop_critical_events_and_extensions_lengthen_timeouts() {
    let gw = serve().await;
    let filters = json!({"event_filters": {"include": ["aaep:agent.session.started"]},
                         "assent": {"timeout_extension_seconds": 5000}});
    let (_sub, mut sse) = gw.subscribe(OP, true, filters).await;
    let id = gw.hold_write("/tmp/f").await;
    // awaiting.confirmation is critical: delivered although not included.
    let ev = sse.expect(AWAITING).await.data;
    // The extension is capped at 600 s (aaep_max_timeout_extension_seconds).
    let st = gw.status(&id).await;
    assert_eq!(wait_seconds(&st), 900);
    assert_eq!(ev["timeout_seconds"], 900);
    gw.decide(&id, OP, "approve").await;
    // state.changed is not critical and not included: filtered out.
    sse.none_of("aaep:agent.state.changed", Duration::from_millis(800))
        .await;
    // A subscription honoured under a higher maximum (a restart lowered it since; made here
    // by hand) lengthens no timeout past the maximum in force now.
    gw.sql().exec(
        "UPDATE aaep_subscriptions SET honored = replace(honored, '600', '5000')",
        &[],
    );
    let _other = gw.subscribe(OP, false, json!({})).await;
    let id = gw.hold_write("/tmp/g").await;
    assert_eq!(wait_seconds(&gw.status(&id).await), 900);
}

/// AAEP §5.3.1.7: a filter pattern ending in `*` matches every type it is a prefix of, in
/// `include` and in `exclude` (found by review: patterns matched literal types only, so the
/// spec's default `include: ["aaep:agent.*"]` received no non-critical event, and an excluded
/// family such as `aaep:agent.progress.*` still flowed, which the spec says MUST NOT happen).
#[tokio::test]
async fn filter_patterns_ending_in_a_star_include_and_exclude_a_family_of_events() {
    let gw = serve().await;
    let filters = |f: Value| json!({"event_filters": f});
    let (_a, mut all) = gw
        .subscribe(OP, true, filters(json!({"include": ["aaep:agent.*"]})))
        .await;
    let (_b, mut no_state) = gw
        .subscribe(
            OP,
            false,
            filters(json!({"include": ["aaep:agent.*"], "exclude": ["aaep:agent.state.*"]})),
        )
        .await;
    let (_c, mut family) = gw
        .subscribe(
            OP,
            false,
            filters(json!({"include": ["aaep:agent.state.*"]})),
        )
        .await;
    let id = gw.hold_write("/tmp/w").await;
    for sse in [&mut all, &mut no_state, &mut family] {
        sse.expect(AWAITING).await;
    }
    gw.decide(&id, OP, "approve").await;
    all.expect("aaep:agent.state.changed").await;
    family.expect("aaep:agent.state.changed").await;
    no_state
        .none_of("aaep:agent.state.changed", Duration::from_millis(800))
        .await;
}

/// Issue 14 §3: an escalation chain is announced up front (every step, the deadline after the
/// last one in `timeout_seconds`), and each step, when it is taken, is an
/// `agent.progress.updated` naming the roles that joined, the approvers now, and the new end of
/// the wait (`expires_at`: the next step, then the deadline).
#[tokio::test]
async fn each_step_of_an_escalation_chain_is_announced_with_its_new_deadline() {
    let gov = policy(
        "acme.test.chain-v1",
        r#"
- tool: quick
  approval: true
  approvers: [finance]
  timeout_seconds: 60
  escalation:
    - {after: 1s, approvers: [ops]}
    - {after: 2, approvers: [cfo]}
"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = start_reg(dir.path(), 300_000, Settings::default(), AGENTS, &gov).await;
    let (_sub, mut sse) = gw.subscribe("olaf-key", true, json!({})).await;
    let id = gw.pending("quick", json!({})).await;
    let ev = sse.expect(AWAITING).await.data;
    assert_valid(
        &core("agent.awaiting.confirmation"),
        &ev,
        "chained confirmation",
    );
    assert_eq!(ev["timeout_seconds"], 62, "{ev}");
    let esc = &ev["extensions"]["assent"]["escalation"];
    let roles: Vec<_> = esc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["approvers"].clone())
        .collect();
    assert_eq!(roles, [json!(["ops"]), json!(["cfo"])], "{ev}");
    let deadline = esc["deadline"].as_str().unwrap().to_string();
    let second_at = esc["steps"][1]["at"].as_str().unwrap().to_string();
    for (step, added, approvers, ends) in [
        (
            1,
            json!(["ops"]),
            json!(["finance", "ops"]),
            second_at.as_str(),
        ),
        (
            2,
            json!(["cfo"]),
            json!(["finance", "ops", "cfo"]),
            deadline.as_str(),
        ),
    ] {
        let ev = sse.expect("aaep:agent.progress.updated").await.data;
        assert_valid(&core("agent.progress.updated"), &ev, "escalation step");
        let esc = &ev["extensions"]["assent"]["escalation"];
        assert_eq!(
            (
                &esc["step"],
                &esc["steps"],
                &esc["added"],
                &esc["approvers"]
            ),
            (&json!(step), &json!(2), &added, &approvers),
            "{ev}"
        );
        assert_eq!(
            (esc["expires_at"].as_str(), esc["deadline"].as_str()),
            (Some(ends), Some(deadline.as_str()))
        );
    }
    let rec = gw.status(&id).await;
    assert_eq!(rec["status"], "pending", "{rec}");
    let taken: Vec<_> = rec["schedule"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["taken"].clone())
        .collect();
    assert_eq!(taken, [json!(true), json!(true)], "{rec}");
    assert_eq!(rec["schedule"]["deadline"], deadline.as_str());
}

/// Found by review: a rule may wait up to a week, but `timeout_seconds` (its schema stops at a
/// day) announced a two-day wait as 86,400 s, "Waiting 86400 seconds; then it is rejected",
/// and a client following AAEP §6.4 applied the default a day before the gateway did. The
/// event still validates, and its texts and `extensions.assent` give the real wait and the
/// deadline the approval itself reports.
#[tokio::test]
async fn a_wait_longer_than_a_day_is_announced_with_its_real_length_and_deadline() {
    let gov = policy(
        "acme.test.two-days-v1",
        "- tool: quick\n  approval: true\n  timeout_seconds: 172800\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = start_reg(dir.path(), 300_000, Settings::default(), AGENTS, &gov).await;
    let (_sub, mut sse) = gw.listen().await;
    let id = gw.pending("quick", json!({})).await;
    let ev = sse.expect(AWAITING).await.data;
    assert_valid(&core("agent.awaiting.confirmation"), &ev, "a two-day wait");
    assert_eq!(ev["timeout_seconds"], 86_400, "{ev}");
    assert_eq!(
        ev["extensions"]["assent"]["timeout_seconds"], 172_800,
        "{ev}"
    );
    let (s, a) = gw.approval(&id, OP).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(
        ev["extensions"]["assent"]["deadline"], a["expires_at"],
        "{ev}"
    );
    let normal = ev["summary_normal"].as_str().unwrap();
    assert!(normal.contains("Waiting 172800 seconds"), "{normal}");
    gw.stop().await;
}
