//! Approving from Slack (issue 15 §4) against a fake Slack: a local HTTP server standing for
//! Slack's Web API (`chat.postMessage`, `chat.update`, `views.open`) and its `response_url`s,
//! recording every call. Interactions are sent as Slack sends them — a form with `payload=`
//! JSON, signed with the signing secret as Slack documents (`v0=` + hex HMAC-SHA256 of
//! `v0:TIMESTAMP:BODY`, computed here with `hmac`). Each refusal test is named for the attack it
//! stops and checks that nothing was decided.

mod answers;
mod config;
mod error_text;
mod redacted;
mod refusals;
mod refused;
mod votes;
mod webhook_mode;

use crate::kit::{AGENTS, Gw, OP, assert_answer, operator, policy, start_custom};
use assent_server::Settings;
use assent_server::config::slack::{Slack, SlackConfig};
use assent_server::config::{Webhook, WebhookFormat};
use hmac::{KeyInit, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const BOT_TOKEN: &str = "xoxb-test-token";

/// The fake Slack: every call as (path, JSON body); `limited` `chat.postMessage` calls are
/// answered `429` with `Retry-After: 3`, as Slack's rate limit is, and every `chat.postMessage`
/// attempt's instant is kept in `posts`.
#[derive(Clone, Default)]
struct FakeSlack {
    calls: Arc<Mutex<Vec<(String, Value)>>>,
    url: String,
    limited: Arc<Mutex<u32>>,
    posts: Arc<Mutex<Vec<std::time::Instant>>>,
}

async fn fake_answer(
    axum::extract::State(f): axum::extract::State<FakeSlack>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: String,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = uri.path().to_string();
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    if path.starts_with("/api/") {
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
        if auth != Some(&format!("Bearer {BOT_TOKEN}")) {
            return axum::Json(json!({"ok": false, "error": "not_authed"})).into_response();
        }
    }
    if path == "/api/chat.postMessage" {
        f.posts.lock().unwrap().push(std::time::Instant::now());
        let mut limited = f.limited.lock().unwrap();
        if *limited > 0 {
            *limited -= 1;
            let h = [(axum::http::header::RETRY_AFTER, "3")];
            return (StatusCode::TOO_MANY_REQUESTS, h, "ratelimited").into_response();
        }
    }
    f.calls.lock().unwrap().push((path.clone(), body));
    axum::Json(match path.as_str() {
        "/api/chat.postMessage" => {
            json!({"ok": true, "channel": "C0APPROVE", "ts": "1700000000.000100"})
        }
        _ => json!({"ok": true}),
    })
    .into_response()
}

impl FakeSlack {
    async fn start() -> FakeSlack {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let f = FakeSlack {
            url: format!("http://{}", listener.local_addr().unwrap()),
            ..FakeSlack::default()
        };
        let app = axum::Router::new()
            .fallback(fake_answer)
            .with_state(f.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        f
    }

    /// The calls to `path` so far.
    fn to(&self, path: &str) -> Vec<Value> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Waits (at most 20 s) for a call to `path` whose body contains `text`.
    async fn wait_for(&self, path: &str, text: &str) -> Value {
        for _ in 0..400 {
            if let Some(b) = self
                .to(path)
                .into_iter()
                .find(|b| b.to_string().contains(text))
            {
                return b;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "no call to {path} containing {text:?}: {:?}",
            self.calls.lock().unwrap()
        );
    }
}

/// The Slack integration with the bot token: alice (finance) is U0ALICE, olaf (ops) U0OLAF,
/// fred (finance) U0FRED.
fn slack(fake: &FakeSlack, bot: bool) -> Slack {
    let users = [("U0ALICE", "alice"), ("U0OLAF", "olaf"), ("U0FRED", "fred")]
        .into_iter()
        .map(|(u, n)| (u.to_string(), n.to_string()))
        .collect();
    Slack {
        config: SlackConfig {
            signing_secret_env: "SLACK_SIGNING_SECRET".into(),
            bot_token_env: bot.then(|| "SLACK_BOT_TOKEN".into()),
            channel: bot.then(|| "C0APPROVE".into()),
            api_url: format!("{}/api", fake.url),
            users,
            team_id: Some("T0TEAM".into()),
        },
        signing_secret: SECRET.into(),
        bot_token: bot.then(|| BOT_TOKEN.into()),
    }
}

/// A gateway with Slack under `rules` (a YAML rule list for `pay`), with fred (finance).
async fn gateway(dir: &std::path::Path, fake: &FakeSlack, rules: &str) -> Gw {
    let gov = policy("acme.test.slack", rules);
    let s = slack(fake, true);
    start_custom(dir, 300_000, Settings::default(), AGENTS, &gov, |st| {
        let mut all = (*st.principals()).clone();
        all.push(operator("fred", &["finance"]));
        st.swap_live(assent_server::Live::new((*st.registry()).clone(), all));
        with_slack(st, s);
    })
    .await
}

/// Sets `s` as the state's Slack integration, its user map in the live snapshot (where the
/// endpoint reads it, and where a reload replaces it).
fn with_slack(st: &mut assent_server::AppState, s: Slack) {
    let users = s.config.users.clone();
    st.swap_live((*st.live()).clone().with_slack_users(users));
    st.slack = Some(Arc::new(s));
}

const PAY: &str = "- tool: pay\n  approvers: [finance]\n";

/// A gateway with Slack under [`PAY`] whose Web API is `app` (a stand-in answering as a
/// broken or hostile Slack would), holding `pay` in session `s1`: the gateway, the temp dir
/// it uses and the approval's id.
async fn held_behind(app: axum::Router) -> (Gw, tempfile::TempDir, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let fake = FakeSlack {
        url,
        ..FakeSlack::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &fake, PAY).await;
    let id = gw.held("s1", "pay", args()).await;
    (gw, dir, id)
}

/// Waits (at most 90 s) for the Slack bot's dead letter (`webhook` `slack:bot`) and returns it.
async fn slack_dead_letter(gw: &Gw) -> Value {
    let start = std::time::Instant::now();
    loop {
        let (s, v) = gw.get("/v1/webhooks/dead-letters?limit=1000", OP).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let list = v["dead_letters"].as_array().cloned().unwrap_or_default();
        if let Some(d) = list.into_iter().find(|d| d["webhook"] == "slack:bot") {
            return d;
        }
        let shown: String = v.to_string().chars().take(2_000).collect();
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "not dead-lettered: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn args() -> Value {
    json!({"amount": 500, "to": "acme"})
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Slack's signature of `body` at `ts` with `secret`, computed as Slack documents it.
fn sign(secret: &str, ts: i64, body: &str) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// The form body Slack sends for `payload`.
fn form(payload: &Value) -> String {
    serde_urlencoded::to_string([("payload", payload.to_string())]).unwrap()
}

/// Posts `body` to the interactivity endpoint with timestamp `ts` and `signature`.
async fn send(gw: &Gw, body: &str, ts: i64, signature: &str) -> (StatusCode, Value) {
    let r = gw
        .http
        .post(format!("{}/v1/integrations/slack/interactions", gw.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

/// Sends `payload` signed now with the signing secret.
async fn signed(gw: &Gw, payload: &Value) -> (StatusCode, Value) {
    let (body, ts) = (form(payload), now_s());
    send(gw, &body, ts, &sign(SECRET, ts, &body)).await
}

/// A `block_actions` payload: `user` clicked `action` whose value is `value`.
fn click(fake: &FakeSlack, user: &str, action: &str, value: &str) -> Value {
    json!({
        "type": "block_actions", "api_app_id": "A0APP", "token": "legacy-token",
        "user": {"id": user, "username": user.to_lowercase(), "team_id": "T0TEAM"},
        "team": {"id": "T0TEAM", "domain": "acme"}, "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0APPROVE"},
        "channel": {"id": "C0APPROVE", "name": "approvals"},
        "response_url": format!("{}/respond/{user}", fake.url),
        "actions": [{"type": "button", "action_id": action, "block_id": "assent",
            "value": value, "action_ts": "1700000001.000200"}],
    })
}

/// The buttons of the message posted for approval `id`: action id → value.
async fn buttons(fake: &FakeSlack, id: &str) -> Vec<(String, String)> {
    let m = fake.wait_for("/api/chat.postMessage", id).await;
    assert_eq!(m["channel"], "C0APPROVE", "{m}");
    let blocks = m["blocks"].as_array().unwrap();
    let actions = blocks.iter().find(|b| b["type"] == "actions").unwrap();
    actions["elements"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["action_id"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect()
}

fn value_of(buttons: &[(String, String)], action: &str) -> String {
    buttons
        .iter()
        .find(|(a, _)| a == action)
        .unwrap_or_else(|| panic!("no {action} in {buttons:?}"))
        .1
        .clone()
}

/// One life-cycle step every Slack test starts from: a gateway with Slack under `rules` (the
/// temp dir and fake Slack it uses), approval `id` of `pay` held in session `s1`, and the
/// buttons of the message posted for it.
struct Card {
    _dir: tempfile::TempDir,
    fake: FakeSlack,
    gw: Gw,
    id: String,
    buttons: Vec<(String, String)>,
}

impl Card {
    /// Holds `pay` under `rules` and waits for its message.
    async fn hold(rules: &str) -> Card {
        let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
        let gw = gateway(dir.path(), &fake, rules).await;
        let id = gw.held("s1", "pay", args()).await;
        let buttons = buttons(&fake, &id).await;
        Card {
            _dir: dir,
            fake,
            gw,
            id,
            buttons,
        }
    }

    /// The value of button `action` (`APPROVAL_ID|CALL_HASH`).
    fn value(&self, action: &str) -> String {
        value_of(&self.buttons, action)
    }

    /// `user` clicks button `action` of the card, signed now.
    async fn click(&self, user: &str, action: &str) -> (StatusCode, Value) {
        let payload = click(&self.fake, user, action, &self.value(action));
        signed(&self.gw, &payload).await
    }

    /// Stops the gateway (before the temp dir goes).
    async fn stop(self) {
        self.gw.stop().await;
    }
}

/// Asserts the endpoint answered `status` with error or outcome `code`.
#[track_caller]
fn assert_code(reply: &(StatusCode, Value), status: StatusCode, code: &str) {
    let (s, r) = reply;
    assert_eq!((*s, &r["code"]), (status, &json!(code)), "{r}");
}

/// Asserts a click was answered `200` with `ok: false` and `code` (Slack shows the clicker
/// why; nothing was decided).
#[track_caller]
fn assert_refused(reply: &(StatusCode, Value), code: &str) {
    let (s, r) = reply;
    assert_eq!(
        (*s, &r["ok"], &r["code"]),
        (StatusCode::OK, &json!(false), &json!(code)),
        "{r}"
    );
}

/// Asserts approval `id` is still pending with no decision and no vote.
async fn undecided(gw: &Gw, id: &str) {
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(a["status"], "pending", "{a}");
    assert!(a["decisions"].as_array().is_none_or(Vec::is_empty), "{a}");
    let counted = a["votes"]["approvals"]["groups"]
        .as_array()
        .map(|g| {
            g.iter()
                .map(|x| x["counted"].as_array().map_or(0, Vec::len))
                .sum::<usize>()
        })
        .unwrap_or(0);
    assert_eq!(counted, 0, "{a}");
}

#[tokio::test]
async fn approve_once_from_slack_decides_as_the_mapped_operator_and_the_message_shows_it() {
    let c = Card::hold(PAY).await;
    let (gw, fake, id) = (&c.gw, &c.fake, &c.id);
    let ids: Vec<&str> = c.buttons.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        ids,
        [
            "assent_approve_once",
            "assent_approve_session",
            "assent_deny"
        ]
    );
    let (s, r) = c.click("U0ALICE", "assent_approve_once").await;
    assert_eq!(
        (s, &r["ok"], &r["code"]),
        (StatusCode::OK, &json!(true), &json!("DECIDED")),
        "{r}"
    );
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(
        (&a["status"], &a["decisions"][0]["by"], &a["scope"]),
        (&json!("approved"), &json!("alice"), &json!("once")),
        "{a}"
    );
    // The message is updated with the outcome and who decided; the clicker is told.
    let u = fake
        .wait_for("/api/chat.update", "Approved* by alice")
        .await;
    assert_eq!(
        (&u["channel"], &u["ts"]),
        (&json!("C0APPROVE"), &json!("1700000000.000100")),
        "{u}"
    );
    assert!(
        !u.to_string().contains("assent_approve_once"),
        "no buttons once decided: {u}"
    );
    let e = fake.wait_for("/respond/U0ALICE", "Approved").await;
    assert_eq!(e["response_type"], "ephemeral", "{e}");
    c.stop().await;
}

#[tokio::test]
async fn a_decision_made_elsewhere_updates_the_slack_message() {
    let c = Card::hold(PAY).await;
    let (s, b) = c.gw.decide(&c.id, "fred-key", "deny").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    c.fake.wait_for("/api/chat.update", "Reason: test").await;
    c.stop().await;
}

/// Found by review: the agent's cancel reason went into the card's outcome line as mrkdwn with
/// its line breaks, so the channel showed a made-up "Approved by alice" under a cancelled call;
/// quoted, it could still close its quotes and format itself. The reason is plain text of its
/// own now, apart from the outcome's mrkdwn.
#[tokio::test]
async fn an_agents_cancel_reason_cannot_add_a_line_to_the_slack_outcome() {
    let c = Card::hold(PAY).await;
    let forged = "oops” \n:white_check_mark: *Approved* by alice (once) “";
    let (s, b) =
        c.gw.cancel(&c.id, crate::kit::BOT, Some(json!({"reason": forged})))
            .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let u = c.fake.wait_for("/api/chat.update", "Cancelled").await;
    let blocks = u["blocks"].as_array().unwrap();
    let context = blocks.last().unwrap()["elements"].as_array().unwrap();
    assert_eq!(context[0]["type"], "mrkdwn", "{u}");
    let head = context[0]["text"].as_str().unwrap();
    assert!(
        head.contains("Cancelled") && !head.contains("Approved"),
        "{head}"
    );
    assert_eq!(context[1]["type"], "plain_text", "{u}");
    let reason = context[1]["text"].as_str().unwrap();
    assert!(
        reason.starts_with("Reason: oops”") && !reason.contains('\n'),
        "{reason}"
    );
    c.stop().await;
}

#[tokio::test]
async fn an_expiry_updates_the_slack_message() {
    let c = Card::hold("- tool: pay\n  approvers: [finance]\n  timeout_seconds: 1\n").await;
    let u = c.fake.wait_for("/api/chat.update", "Expired").await;
    assert!(!u.to_string().contains("assent_approve_once"), "{u}");
    let (_, a) = c.gw.approval(&c.id, "alice-key").await;
    assert_eq!(a["status"], "expired", "{a}");
    c.stop().await;
}

#[tokio::test]
async fn deny_asks_for_a_reason_in_a_modal_and_denies_with_it() {
    let c = Card::hold(PAY).await;
    let (gw, fake, id) = (&c.gw, &c.fake, &c.id);
    let reply = c.click("U0ALICE", "assent_deny").await;
    assert_code(&reply, StatusCode::OK, "MODAL_OPENED");
    undecided(gw, id).await;
    let open = fake.wait_for("/api/views.open", "assent_deny").await;
    assert_eq!(
        open["trigger_id"], "13345224609.738474920.8088930838d88f008e0",
        "{open}"
    );
    let view = &open["view"];
    // Slack sends the modal back with what was typed.
    let submission = json!({
        "type": "view_submission", "team": {"id": "T0TEAM"},
        "user": {"id": "U0ALICE", "username": "alice", "team_id": "T0TEAM"},
        "view": {"id": "V0MODAL", "type": "modal", "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": "not this vendor"}}}}},
    });
    let (s, r) = signed(gw, &submission).await;
    assert_answer(s, &r, "response_action", StatusCode::OK, "clear");
    let (_, a) = gw.approval(id, "alice-key").await;
    assert_eq!(
        (
            &a["status"],
            &a["decisions"][0]["by"],
            &a["decisions"][0]["reason"]
        ),
        (
            &json!("rejected"),
            &json!("alice"),
            &json!("not this vendor")
        ),
        "{a}"
    );
    fake.wait_for("/api/chat.update", "Reason: not this vendor")
        .await;
    c.stop().await;
}

#[tokio::test]
async fn approve_for_the_session_grants_the_rest_of_the_session() {
    let c = Card::hold(PAY).await;
    let gw = &c.gw;
    let reply = c.click("U0ALICE", "assent_approve_session").await;
    assert_code(&reply, StatusCode::OK, "DECIDED");
    let (_, a) = gw.approval(&c.id, "alice-key").await;
    assert_eq!(
        (&a["status"], &a["scope"]),
        (&json!("approved"), &json!("session")),
        "{a}"
    );
    // The same call again in that session is allowed without asking.
    let (s, again) = gw.propose_in("s1", "pay", args()).await;
    assert_eq!(s, StatusCode::OK, "{again}");
    c.stop().await;
}

/// A gateway in `dir` under `rules` whose Slack has no bot token: its messages go through
/// the incoming webhook `{fake}/hook` (`approval.requested`), its clicks come back signed.
async fn webhook_gateway(dir: &std::path::Path, fake: &FakeSlack, rules: &str) -> Gw {
    let (s, hook) = (slack(fake, false), fake.url.clone());
    start_custom(
        dir,
        300_000,
        Settings::default(),
        AGENTS,
        &policy("acme.test.slack", rules),
        |st| {
            with_slack(st, s);
            st.webhooks = Arc::new(vec![Webhook {
                name: "slack".into(),
                url: format!("{hook}/hook"),
                secret_env: "UNUSED".into(),
                secret: "hook-secret".into(),
                format: WebhookFormat::Slack,
                events: vec!["approval.requested".into()],
                max_attempts: 3,
                retry_initial_ms: 10,
                line: None,
            }]);
        },
    )
    .await
}

#[tokio::test]
async fn without_a_bot_token_the_webhook_message_offers_deny_only_and_the_click_replaces_it() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = webhook_gateway(dir.path(), &fake, PAY).await;
    let id = gw.held("s1", "pay", args()).await;
    // The incoming webhook's message carries the deny button, valued with the id and call
    // hash, and no approve button: nothing ties a click to a message the gateway posted, and
    // the value is one the agent can read (found by review: an agent holding the webhook's URL
    // posted its own words with a genuine Approve button). An approve click is refused.
    let m = fake.wait_for("/hook", &id).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    let v = format!("{id}|{}", a["call_hash"].as_str().unwrap());
    let elements = &m["blocks"][3]["elements"];
    assert_eq!(
        (&elements[0]["action_id"], &elements[0]["value"]),
        (&json!("assent_deny"), &json!(v)),
        "{m}"
    );
    assert!(!m.to_string().contains("assent_approve"), "{m}");
    let forged = signed(&gw, &click(&fake, "U0ALICE", "assent_approve_once", &v)).await;
    assert_refused(&forged, "APPROVE_NEEDS_BOT");
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    // Deny without a bot token: no modal can open, so the click denies with no reason.
    let reply = signed(&gw, &click(&fake, "U0ALICE", "assent_deny", &v)).await;
    assert_code(&reply, StatusCode::OK, "DECIDED");
    let m = fake.wait_for("/respond/U0ALICE", "Denied* by alice").await;
    assert_eq!(m["replace_original"], true, "{m}");
    assert!(fake.to("/api/chat.postMessage").is_empty());
    gw.stop().await;
}

/// Found by review: the bot posted a message for every `approval.requested`, even of an
/// approval cancelled before its turn came, so an agent proposing and cancelling held calls in
/// a loop kept the channel's one post a second busy ahead of every other approval. A cancelled
/// one gets no message.
#[tokio::test]
async fn no_message_is_posted_for_an_approval_cancelled_before_its_turn() {
    let fake = FakeSlack::start().await;
    let gw = crate::kit::serve().await;
    let before = gw.sql().int("SELECT COALESCE(max(seq), 0) FROM audit", &[]);
    let churned = gw
        .held("churn", "pay", json!({"amount": 501, "to": "a"}))
        .await;
    let (s, b) = gw.cancel(&churned, crate::kit::BOT, None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let wanted = gw
        .held("work", "pay", json!({"amount": 502, "to": "b"}))
        .await;
    let tasks = bot_from(&gw, &fake, before).await;
    fake.wait_for("/api/chat.postMessage", &wanted).await;
    let posted = fake.to("/api/chat.postMessage");
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert!(!posted[0].to_string().contains(&churned), "{posted:?}");
    for t in tasks {
        t.abort();
    }
    gw.stop().await;
}

/// Starts `gw`'s Slack bot deliveries against `fake` with the bot's cursor at audit record
/// `before`, so the approvals held since are posted: the delivery tasks.
async fn bot_from(gw: &Gw, fake: &FakeSlack, before: i64) -> Vec<tokio::task::JoinHandle<()>> {
    gw.sql().exec(
        &format!("INSERT INTO webhook_cursors (webhook, last_seq) VALUES ('slack:bot', {before})"),
        &[],
    );
    let mut st = gw.state.clone();
    with_slack(&mut st, slack(fake, true));
    assent_server::webhooks::spawn(st, "replica_test").await
}

/// Attack: someone with write access to the database edits a held call's arguments (the payee)
/// before the bot posts its card, so that the channel reads the edited call as the agent's
/// request. The card now says the record is not as assent sealed it, names what (`call`), and
/// offers no decision buttons (a damaged call refuses every decision). A held call whose seal
/// alone was overwritten is offered Deny and no Approve (deciding refuses only approving it).
#[tokio::test]
async fn a_record_edited_in_the_database_is_posted_as_damaged_and_not_approvable() {
    let fake = FakeSlack::start().await;
    let gw = crate::kit::serve().await;
    let before = gw.sql().int("SELECT COALESCE(max(seq), 0) FROM audit", &[]);
    let fine = gw
        .held("s1", "pay", json!({"amount": 504, "to": "bob"}))
        .await;
    let evil = gw
        .held("s1", "pay", json!({"amount": 503, "to": "acme"}))
        .await;
    let edit = format!(
        "UPDATE approvals SET arguments = '{{\"amount\":503,\"to\":\"mallory\"}}' WHERE id = '{evil}'"
    );
    assert_eq!(gw.sql().exec(&edit, &[]), 1);
    let seal_forged = gw
        .held("s1", "pay", json!({"amount": 505, "to": "carol"}))
        .await;
    let forge = format!("UPDATE approvals SET seal = 'forged' WHERE id = '{seal_forged}'");
    assert_eq!(gw.sql().exec(&forge, &[]), 1);
    let tasks = bot_from(&gw, &fake, before).await;
    let m = fake.wait_for("/api/chat.postMessage", "mallory").await;
    let text = m.to_string();
    assert!(text.contains("not as assent sealed it* (call)"), "{m}");
    assert!(
        !text.contains("assent_approve") && !text.contains("assent_deny"),
        "{m}"
    );
    // The intact one beside it is posted with its buttons and no warning.
    let ok = fake
        .wait_for("/api/chat.postMessage", &fine)
        .await
        .to_string();
    assert!(
        ok.contains("assent_approve") && !ok.contains("not as assent sealed"),
        "{ok}"
    );
    let seal = fake
        .wait_for("/api/chat.postMessage", &seal_forged)
        .await
        .to_string();
    assert!(seal.contains("not as assent sealed it* (seal)"), "{seal}");
    assert!(
        seal.contains("assent_deny") && !seal.contains("assent_approve"),
        "{seal}"
    );
    for t in tasks {
        t.abort();
    }
    gw.stop().await;
}

/// Review finding: a `429` from Slack (its rate limit, with `Retry-After`) was retried after
/// the backoff's one second, which Slack refuses again and counts against the bot. The next
/// attempt now waits as long as Slack asked.
#[tokio::test]
async fn a_rate_limited_message_is_posted_again_only_when_slack_says() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    *fake.limited.lock().unwrap() = 1;
    let gw = gateway(dir.path(), &fake, PAY).await;
    let id = gw.held("s1", "pay", args()).await;
    buttons(&fake, &id).await;
    let posts = fake.posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 2, "one refused attempt, then the post");
    let waited = posts[1] - posts[0];
    assert!(waited >= Duration::from_secs(3), "retried after {waited:?}");
    gw.stop().await;
}
