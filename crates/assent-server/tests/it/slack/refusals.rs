//! Approving from Slack: the requests that must decide nothing, each named for the attack it
//! stops (forged, stale, future-dated or replayed requests, a click naming another call, an
//! unmapped Slack user — also one unmapped by a reload —, a user without the role, an R4 call needing a passkey, a session grant
//! the approval does not offer) and the endpoint's answers to bad bodies and to a gateway
//! without `slack:`. Each checks that the approval is still pending with no decision or vote.

use super::{
    Card, FakeSlack, PAY, SECRET, args, assert_code, assert_refused, buttons, click, form, gateway,
    now_s, send, sign, signed, slack, undecided, value_of, with_slack,
};
use crate::kit::{AGENTS, Gw, policy, start, start_custom};
use assent_server::Settings;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;

/// The card of approval `id` offers only "Deny…", and an approve click (once or for the
/// session) forged from the deny button's value is refused with `code`; nothing is decided.
pub(super) async fn only_deny_offered_and_approve_refused(
    gw: &Gw,
    fake: &FakeSlack,
    id: &str,
    code: &str,
) {
    let b = buttons(fake, id).await;
    let actions: Vec<&str> = b.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(actions, ["assent_deny"], "{b:?}");
    let value = value_of(&b, "assent_deny");
    for action in ["assent_approve_once", "assent_approve_session"] {
        let reply = signed(gw, &click(fake, "U0ALICE", action, &value)).await;
        assert_refused(&reply, code);
    }
    undecided(gw, id).await;
}

#[tokio::test]
async fn an_irreversible_call_offers_no_session_button_and_refuses_a_forged_one() {
    let c = Card::hold("- tool: pay\n  approvers: [finance]\n  irreversible: true\n").await;
    no_session_button(&c);
    let forged = click(
        &c.fake,
        "U0ALICE",
        "assent_approve_session",
        &c.value("assent_approve_once"),
    );
    let reply = signed(&c.gw, &forged).await;
    assert_code(&reply, StatusCode::OK, "SESSION_NOT_OFFERED");
    undecided(&c.gw, &c.id).await;
    c.stop().await;
}

/// Asserts the card offers no "approve for the session" button.
#[track_caller]
fn no_session_button(c: &Card) {
    let b = &c.buttons;
    assert!(
        b.iter().all(|(a, _)| a != "assent_approve_session"),
        "{b:?}"
    );
}

#[tokio::test]
async fn a_forged_signature_decides_nothing() {
    let c = Card::hold(PAY).await;
    let (gw, id) = (&c.gw, &c.id);
    let body = alices_approval(&c);
    let ts = now_s();
    for sig in [
        sign("not-the-secret", ts, &body),
        "v0=00".into(),
        "garbage".into(),
        sign(SECRET, ts, &format!("{body}x")),
    ] {
        let reply = send(gw, &body, ts, &sig).await;
        assert_code(&reply, StatusCode::UNAUTHORIZED, "SLACK_SIGNATURE_INVALID");
    }
    // No signature at all (and no API key: the route needs none, the signature is all).
    let r = gw
        .http
        .post(format!("{}/v1/integrations/slack/interactions", gw.url))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["code"], "SLACK_SIGNATURE_MISSING", "{b}");
    undecided(gw, id).await;
    c.stop().await;
}

/// Attack (found by review): the clicker was known by `user.id` alone, so a correctly signed
/// click from another workspace the same app is installed in (a staging workspace, an
/// org-wide install) decided as the operator mapped to that user id. With `slack.team_id`
/// set, a click whose `team.id`, or whose clicker's `user.team_id`, is another workspace is
/// refused `403 SLACK_WRONG_WORKSPACE`, approve and deny alike; the approval stays pending,
/// and the same click from the pinned workspace still decides.
#[tokio::test]
async fn a_signed_click_from_another_workspace_decides_nothing() {
    let c = Card::hold(PAY).await;
    let (gw, id) = (&c.gw, &c.id);
    for action in ["assent_approve_once", "assent_deny"] {
        let base = click(&c.fake, "U0ALICE", action, &c.value(action));
        let mut other_team = base.clone();
        other_team["team"]["id"] = json!("T0OTHER");
        let mut other_user = base.clone();
        other_user["user"]["team_id"] = json!("T0OTHER");
        let mut no_team = base.clone();
        no_team.as_object_mut().unwrap().remove("team");
        for payload in [other_team, other_user, no_team] {
            let reply = signed(gw, &payload).await;
            assert_code(&reply, StatusCode::FORBIDDEN, "SLACK_WRONG_WORKSPACE");
        }
    }
    undecided(gw, id).await;
    let (s, r) = c.click("U0ALICE", "assent_approve_once").await;
    assert_eq!((s, &r["ok"]), (StatusCode::OK, &json!(true)), "{r}");
    c.stop().await;
}

/// The form body of alice's click on the card's "approve once".
fn alices_approval(c: &Card) -> String {
    let v = c.value("assent_approve_once");
    form(&click(&c.fake, "U0ALICE", "assent_approve_once", &v))
}

/// Sends alice's "approve once", signed as if at `now + offset_s`: outside Slack's 300 s
/// window, it is refused as stale and decides nothing.
async fn dated_outside_the_window_decides_nothing(offset_s: i64) {
    let c = Card::hold(PAY).await;
    let body = alices_approval(&c);
    let ts = now_s() + offset_s;
    let reply = send(&c.gw, &body, ts, &sign(SECRET, ts, &body)).await;
    assert_code(&reply, StatusCode::UNAUTHORIZED, "SLACK_STALE");
    undecided(&c.gw, &c.id).await;
    c.stop().await;
}

#[tokio::test]
async fn a_stale_request_older_than_five_minutes_decides_nothing() {
    // Clear of the 300 s window even when a second turns over mid-test.
    dated_outside_the_window_decides_nothing(-330).await;
}

#[tokio::test]
async fn a_request_dated_in_the_future_decides_nothing() {
    // Clear of the 300 s window even when a second turns over mid-test.
    dated_outside_the_window_decides_nothing(330).await;
}

#[tokio::test]
async fn a_replayed_request_is_refused_and_one_slack_vote_counts_once_toward_a_quorum() {
    let c = Card::hold("- tool: pay\n  approvers: {roles: [finance], count: 2}\n").await;
    let (gw, fake, id) = (&c.gw, &c.fake, &c.id);
    let body = alices_approval(&c);
    let ts = now_s();
    let sig = sign(SECRET, ts, &body);
    assert_code(
        &send(gw, &body, ts, &sig).await,
        StatusCode::OK,
        "VOTE_COUNTED",
    );
    // The same signed request again: refused before anything is looked at.
    let reply = send(gw, &body, ts, &sig).await;
    assert_code(&reply, StatusCode::UNAUTHORIZED, "SLACK_REPLAYED");
    // Nor with the same MAC spelled in upper case (the same bytes, another header): the
    // replay memory cannot be dodged, or flooded, by re-spelling one captured request.
    let upper = format!("v0={}", sig["v0=".len()..].to_ascii_uppercase());
    let reply = send(gw, &body, ts, &upper).await;
    assert_code(&reply, StatusCode::UNAUTHORIZED, "SLACK_SIGNATURE_INVALID");
    // A fresh click by the same person (another action_ts, so another signed body) is her
    // second try, not a second vote.
    let mut again = click(
        fake,
        "U0ALICE",
        "assent_approve_once",
        &c.value("assent_approve_once"),
    );
    again["actions"][0]["action_ts"] = json!("1700000002.000300");
    assert_code(&signed(gw, &again).await, StatusCode::OK, "ALREADY_VOTED");
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(a["status"], "pending", "{a}");
    fake.wait_for("/api/chat.update", "alice").await;
    // A second approver's click meets the quorum.
    let reply = c.click("U0FRED", "assent_approve_once").await;
    assert_code(&reply, StatusCode::OK, "DECIDED");
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(a["status"], "approved", "{a}");
    fake.wait_for("/api/chat.update", "Approved* by fred").await;
    c.stop().await;
}

#[tokio::test]
async fn a_click_naming_another_call_hash_decides_nothing() {
    let c = Card::hold(PAY).await;
    let (gw, fake, id) = (&c.gw, &c.fake, &c.id);
    let forged = format!("{id}|{}", "0".repeat(64));
    let reply = signed(gw, &click(fake, "U0ALICE", "assent_approve_once", &forged)).await;
    assert_refused(&reply, "CALL_CHANGED");
    for bad in [id.clone(), format!("{id}|"), "|".into()] {
        let (_, r) = signed(gw, &click(fake, "U0ALICE", "assent_approve_once", &bad)).await;
        assert_eq!(r["code"], "BAD_VALUE", "{r}");
    }
    undecided(gw, id).await;
    c.stop().await;
}

#[tokio::test]
async fn an_unmapped_slack_user_decides_nothing_at_any_tier() {
    let c = Card::hold("- tool: pay\n  approvers: [finance]\n  risk_tier: R3\n").await;
    let v = c.value("assent_approve_once");
    for action in ["assent_approve_once", "assent_deny"] {
        let reply = signed(&c.gw, &click(&c.fake, "U0MALLORY", action, &v)).await;
        assert_refused(&reply, "SLACK_USER_UNMAPPED");
    }
    let e = c.fake.wait_for("/respond/U0MALLORY", "not mapped").await;
    assert_eq!(e["response_type"], "ephemeral", "{e}");
    assert!(c.fake.to("/api/views.open").is_empty());
    undecided(&c.gw, &c.id).await;
    c.stop().await;
}

#[tokio::test]
async fn a_slack_user_without_the_approver_role_decides_nothing() {
    let c = Card::hold(PAY).await;
    let reply = c.click("U0OLAF", "assent_approve_once").await;
    assert_refused(&reply, "FORBIDDEN");
    let r = &reply.1;
    assert!(r["text"].as_str().unwrap().contains("olaf"), "{r}");
    undecided(&c.gw, &c.id).await;
    c.stop().await;
}

#[tokio::test]
async fn an_r4_call_needing_a_passkey_cannot_be_approved_from_slack() {
    let c = Card::hold("- tool: pay\n  approvers: [finance]\n  risk_tier: R4\n").await;
    no_session_button(&c);
    let reply = c.click("U0ALICE", "assent_approve_once").await;
    assert_refused(&reply, "PASSKEY_REQUIRED");
    let r = &reply.1;
    assert!(r["text"].as_str().unwrap().contains("dashboard"), "{r}");
    c.fake.wait_for("/respond/U0ALICE", "dashboard").await;
    undecided(&c.gw, &c.id).await;
    c.stop().await;
}

#[tokio::test]
async fn without_slack_configured_the_endpoint_is_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let body = "payload=%7B%7D";
    let ts = now_s();
    let reply = send(&gw, body, ts, &sign(SECRET, ts, body)).await;
    assert_code(&reply, StatusCode::NOT_FOUND, "NOT_FOUND");
    gw.stop().await;
}

#[tokio::test]
async fn an_oversized_or_malformed_body_is_refused_with_json() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = gateway(dir.path(), &fake, PAY).await;
    let big = format!("payload={}", "a".repeat(300 * 1024));
    let ts = now_s();
    let reply = send(&gw, &big, ts, &sign(SECRET, ts, &big)).await;
    assert_code(&reply, StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE");
    for body in ["payload=notjson", "other=1", "payload=%5B%5D"] {
        let (s, r) = send(&gw, body, ts, &sign(SECRET, ts, body)).await;
        assert_eq!(
            (s, &r["code"]),
            (StatusCode::BAD_REQUEST, &json!("BAD_REQUEST")),
            "{body}: {r}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_flood_of_signed_requests_cannot_grow_the_replay_memory_without_bound() {
    let c = Card::hold(PAY).await;
    let gw = &c.gw;
    // The memory of accepted signatures is full (and none has left the window yet).
    let max = assent_store::slack::MAX_SEEN;
    let until = now_s() * 1000 + 600_000;
    let fill = format!(
        "INSERT INTO slack_seen (signature_sha256, until) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {max}) SELECT 'fill' || CAST(i AS TEXT), {until} FROM n"
    );
    assert_eq!(gw.sql().exec(&fill, &[]), max as u64);
    let reply = c.click("U0ALICE", "assent_approve_once").await;
    assert_code(&reply, StatusCode::SERVICE_UNAVAILABLE, "SLACK_BUSY");
    undecided(gw, &c.id).await;
    // Once those leave the window they are forgotten, and Slack is heard again.
    gw.sql().exec("UPDATE slack_seen SET until = 1", &[]);
    let reply = c.click("U0ALICE", "assent_approve_once").await;
    assert_code(&reply, StatusCode::OK, "DECIDED");
    assert_eq!(gw.sql().int("SELECT COUNT(*) FROM slack_seen", &[]), 1);
    c.stop().await;
}

/// Attack: a Slack account whose mapping was removed from the configuration (a person who
/// left, a mapping made by mistake) keeps approving until the next restart. A live reload
/// replaces the map with the principals: its clicks are unmapped from then on.
#[tokio::test]
async fn a_slack_mapping_removed_by_a_reload_decides_nothing() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    std::fs::write(conf.join("gov.yaml"), policy("acme.test.slack", PAY)).unwrap();
    let key = |k: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(k.as_bytes()));
    let text = |alice_slack: &str| {
        format!(
            "agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\nslack: {{signing_secret_env: S, bot_token_env: T, channel: C0APPROVE}}\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance], key_sha256: \"{}\"{alice_slack}}}\n  - {{name: bot, kind: agent, agent_id: bot, key_sha256: \"{}\"}}\n",
            key(crate::kit::OP),
            key(crate::kit::BOT),
        )
    };
    let file = conf.join("assent.yaml");
    std::fs::write(&file, text(", slack_user_id: U0ALICE")).unwrap();
    let cfg = assent_server::config::Config::load(&file).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let s = slack(&fake, true);
    let gw = start_custom(
        &data,
        300_000,
        Settings::default(),
        AGENTS,
        &policy("acme.test.slack", PAY),
        |st| {
            st.swap_live(assent_server::Live::new(
                cfg.registry.clone(),
                cfg.principals().unwrap(),
            ));
            with_slack(st, s);
            st.reload = Some(Arc::new(assent_server::config::ReloadSource::new(
                &cfg, false,
            )));
        },
    )
    .await;
    let first = gw.held("s1", "pay", args()).await;
    let v = value_of(&buttons(&fake, &first).await, "assent_approve_once");
    let (s, r) = signed(&gw, &click(&fake, "U0ALICE", "assent_approve_once", &v)).await;
    assert_eq!((s, &r["ok"]), (StatusCode::OK, &json!(true)), "{r}");
    // The mapping is removed from the file and the configuration reloaded.
    std::fs::write(&file, text("")).unwrap();
    let (s, b) = gw
        .req("POST", "/v1/reload", Some(crate::kit::OP), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(
        !b["needs_restart"].to_string().contains("slack"),
        "the user map follows a reload: {b}"
    );
    let second = gw.held("s2", "pay", args()).await;
    let v = value_of(&buttons(&fake, &second).await, "assent_approve_once");
    let reply = signed(&gw, &click(&fake, "U0ALICE", "assent_approve_once", &v)).await;
    assert_code(&reply, StatusCode::OK, "SLACK_USER_UNMAPPED");
    undecided(&gw, &second).await;
    gw.stop().await;
}

/// Attack: the agent writes Slack markup into its call — a mention that pings the channel, a
/// link dressed as something else, a fake "Risk R0" line, a backtick breaking out of the code
/// span — so that the card with the Approve button lies about the call. What the agent wrote
/// reaches Slack as plain text; the one mrkdwn text that carries others' words (the outcome
/// with the decider's reason) and the notification text escape `&`, `<` and `>`.
#[tokio::test]
async fn slack_markup_in_a_call_cannot_dress_up_the_card() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = gateway(dir.path(), &fake, PAY).await;
    let evil = "acme` <!channel> *Risk* R0 <https://evil.example|the invoice>";
    let id = gw
        .held("s1", "pay", json!({"amount": 500, "to": evil}))
        .await;
    let posted = fake.wait_for("/api/chat.postMessage", &id).await;
    let mut mrkdwn = vec![];
    collect_mrkdwn(&posted["blocks"], &mut mrkdwn);
    assert!(!mrkdwn.is_empty());
    for t in &mrkdwn {
        assert!(!t.contains('<') && !t.contains("evil.example"), "{t}");
    }
    assert!(
        posted["blocks"].to_string().contains("<!channel>"),
        "shown, as plain text"
    );
    assert!(!posted["text"].as_str().unwrap().contains('<'), "{posted}");
    // The decider's reason is shown apart from the outcome's mrkdwn, as plain text.
    let (s, _) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{id}/decision"),
            Some("alice-key"),
            Some(json!({"decision": "deny", "reason": "no <!here> <https://x.example|y>"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let updated = fake.wait_for("/api/chat.update", "Denied").await;
    let mut mrkdwn = vec![];
    collect_mrkdwn(&updated["blocks"], &mut mrkdwn);
    assert!(
        updated["blocks"]
            .to_string()
            .contains("Reason: no <!here> <https://x.example|y>"),
        "{updated}"
    );
    assert!(mrkdwn.iter().all(|t| !t.contains('<')), "{mrkdwn:?}");
    gw.stop().await;
}

/// Every `text` of a `mrkdwn` object in `v`.
fn collect_mrkdwn(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if m.get("type") == Some(&json!("mrkdwn")) {
                out.push(m["text"].as_str().unwrap_or("").to_string());
            }
            m.values().for_each(|x| collect_mrkdwn(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_mrkdwn(x, out)),
        _ => {}
    }
}

/// Attack: someone who can post through the Slack app (its bot token, its webhook) posts a
/// message of their own beside a copy of a real button's value (`APPROVAL_ID|CALL_HASH`), with
/// text that misdescribes the call. With the bot token, only the bot's message decides.
#[tokio::test]
async fn a_click_on_a_message_assent_did_not_post_decides_nothing() {
    let c = Card::hold(PAY).await;
    let v = c.value("assent_approve_once");
    for (channel, ts) in [
        ("C0APPROVE", "1700000099.000900"),
        ("C0ELSEWHERE", "1700000000.000100"),
    ] {
        let mut forged = click(&c.fake, "U0ALICE", "assent_approve_once", &v);
        forged["container"]["channel_id"] = json!(channel);
        forged["container"]["message_ts"] = json!(ts);
        let reply = signed(&c.gw, &forged).await;
        assert_code(&reply, StatusCode::OK, "NOT_ASSENTS_MESSAGE");
    }
    undecided(&c.gw, &c.id).await;
    // The bot's own message decides.
    let reply = c.click("U0ALICE", "assent_approve_once").await;
    assert_code(&reply, StatusCode::OK, "DECIDED");
    c.stop().await;
}

/// Attack (found by review): the card cut the arguments at 1,900 characters and canonical JSON
/// sorts keys, so an agent put 2,000 harmless characters under a key that sorts first and the
/// payee last: "Approve once" bound a call whose payee no approver had seen. A card that
/// cannot show the whole call offers only "Deny…", and an approve click (forged from the deny
/// button's value) is refused with `CARD_TRUNCATED`.
#[tokio::test]
async fn a_card_too_long_to_show_whole_offers_no_approve_button_and_refuses_one() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = gateway(dir.path(), &fake, PAY).await;
    let long = json!({"amount": 500, "memo": "x".repeat(2000), "to": "attacker@evil"});
    let id = gw.held("s1", "pay", long).await;
    only_deny_offered_and_approve_refused(&gw, &fake, &id, "CARD_TRUNCATED").await;
    // A call that fits still gets its approve button.
    let short = gw.held("s2", "pay", args()).await;
    let b = buttons(&fake, &short).await;
    assert!(b.iter().any(|(a, _)| a == "assent_approve_once"), "{b:?}");
    gw.stop().await;
}

/// Attack (found by review): a Slack card showed the call's arguments as canonical JSON,
/// which keeps bidi overrides and invisible characters raw, so "ASCII smuggling" in Unicode
/// tag characters hid text on a card with an Approve button. They are escapes there too.
#[tokio::test]
async fn a_slack_card_shows_invisible_characters_as_escapes() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = gateway(dir.path(), &fake, PAY).await;
    let to = "acme\u{200b}\u{e0065}\u{202e}";
    let id = gw.held("s1", "pay", json!({"amount": 500, "to": to})).await;
    let card = fake
        .wait_for("/api/chat.postMessage", &id)
        .await
        .to_string();
    for c in to.chars().skip(4) {
        let raw = serde_json::to_string(&c.to_string()).unwrap();
        assert!(
            !card.contains(&raw[1..raw.len() - 1]),
            "U+{:04X} raw: {card}",
            u32::from(c)
        );
    }
    assert!(card.contains(r"acme\\u200b\\udb40\\udc65\\u202e"), "{card}");
    gw.stop().await;
    drop(dir);
}

/// Attack (found by review): the card's header ("bot wants to run TOOL") is cut at 150
/// characters, but only the message, arguments and side effects counted as shown whole, so a
/// tool name longer than the header (a rule for `*` holds any name) was approvable with its
/// end hidden. A header that would cut the name offers deny only and refuses an approve.
#[tokio::test]
async fn a_tool_name_too_long_for_the_cards_header_offers_no_approve_button() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let tool = format!("transfer_to_{}_attacker", "a".repeat(140));
    let agent = crate::kit::one_tool_agent("bot", &format!("{{alias: {tool}, approval: true}}"));
    let gov = policy("acme.test.slack", "- tool: \"*\"\n  approvers: [finance]\n");
    let s = slack(&fake, true);
    let gw = start_custom(
        dir.path(),
        300_000,
        Settings::default(),
        &agent,
        &gov,
        |st| with_slack(st, s),
    )
    .await;
    let id = gw.held("s1", &tool, json!({"amount": 1})).await;
    let b = buttons(&fake, &id).await;
    let actions: Vec<&str> = b.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(actions, ["assent_deny"], "{b:?}");
    let value = value_of(&b, "assent_deny");
    let reply = signed(&gw, &click(&fake, "U0ALICE", "assent_approve_once", &value)).await;
    assert_refused(&reply, "CARD_TRUNCATED");
    undecided(&gw, &id).await;
    gw.stop().await;
}
