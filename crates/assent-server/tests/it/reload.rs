//! Live reload (issue 14 §8) through `POST /v1/reload`, over a real configuration file on
//! disk: a reload swaps the policies (a call allowed before is held after) and revokes a
//! removed or changed key at once; a broken, truncated or dangling file keeps the old set and
//! answers the errors with file and line; an agent's key cannot reload; concurrent reloads
//! leave one consistent set; approvals and the verdicts' audit records carry the hash of the
//! policy set they were decided under, which a reload changes.

use crate::kit::{AGENTS, Gw, audit_count, cookie_of, policy, start_custom};
use assent_server::config::{Config, ReloadSource};
use assent_server::{Live, Settings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The operator key (alice, finance) and the agent key (bot) of [`principals`].
pub(crate) const OP: &str = "alice-key";
const BOT: &str = "bot-key";

/// A governance file with no rule for `read` (so it is allowed).
fn gov_allowing_read() -> String {
    policy("acme.test.reload", "- tool: pay\n  approvers: [finance]\n")
}

/// A governance file that holds every `read`.
fn gov_holding_read() -> String {
    policy(
        "acme.test.reload",
        "- tool: pay\n  approvers: [finance]\n- tool: read\n  approval: true\n",
    )
}

/// The `principals:` list of a configuration: each `(name, kind and roles/agent, key)`.
pub(crate) fn principals(list: &[(&str, &str, &str)]) -> String {
    let mut out = String::from("principals:\n");
    for (name, what, key) in list {
        let hash = hex::encode(Sha256::digest(key.as_bytes()));
        out.push_str(&format!(
            "  - {{name: {name}, {what}, key_sha256: \"{hash}\"}}\n"
        ));
    }
    out
}

/// Alice (operator, finance), olaf (operator, ops) and bot (the agent `bot`).
fn everyone() -> String {
    principals(&[
        ("alice", "kind: operator, roles: [finance]", OP),
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ])
}

/// A configuration file naming `bot.agf.yaml` and `gov.yaml` beside it, with `rest` after.
fn config_text(rest: &str) -> String {
    format!("agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\n{rest}")
}

/// A gateway whose principals, agents and policies come from `conf/assent.yaml` (written from
/// `config` with `gov` as `gov.yaml` and the kit's `bot` agent) and that reloads that file;
/// its store is the kit's (either backend) in `dir/data`.
async fn reloadable(dir: &Path, config: &str, gov: &str) -> (Gw, PathBuf) {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    std::fs::write(conf.join("gov.yaml"), gov).unwrap();
    let file = conf.join("assent.yaml");
    std::fs::write(&file, config).unwrap();
    let cfg = Config::load(&file).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let gw = start_custom(&data, 300_000, Settings::default(), AGENTS, gov, |st| {
        st.swap_live(Live::new(cfg.registry.clone(), cfg.principals().unwrap()));
        st.reload = Some(Arc::new(ReloadSource::new(&cfg, false)));
    })
    .await;
    (gw, conf)
}

/// The gateway most tests start from: [`everyone`] under [`gov_allowing_read`], reloadable
/// (the temporary directory, the gateway and its `conf` directory).
pub(crate) async fn reloadable_by_everyone() -> (tempfile::TempDir, Gw, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (gw, conf) = reloadable(dir.path(), &config_text(&everyone()), &gov_allowing_read()).await;
    (dir, gw, conf)
}

/// Olaf (operator, ops) and bot: [`everyone`] without alice.
fn without_alice() -> String {
    principals(&[
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ])
}

/// Rewrites `conf/assent.yaml` with the principals `list` (not yet reloaded).
fn write_config(conf: &Path, list: &str) {
    std::fs::write(conf.join("assent.yaml"), config_text(list)).unwrap();
}

/// Rewrites `conf/gov.yaml` as [`gov_holding_read`] (not yet reloaded).
fn hold_every_read(conf: &Path) {
    std::fs::write(conf.join("gov.yaml"), gov_holding_read()).unwrap();
}

/// `POST /v1/reload` as alice, which must be refused (422) for an error in `assent.yaml`:
/// the answer.
async fn refused_in_assent_yaml(gw: &Gw) -> Value {
    let (s, b) = reload(gw, OP).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        b["errors"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("assent.yaml"),
        "{b}"
    );
    b
}

/// `POST /v1/reload` with `key`, which must succeed: the answer.
pub(crate) async fn reloaded(gw: &Gw, key: &str) -> Value {
    let (s, b) = reload(gw, key).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b
}

/// `POST /v1/reload` with `key`.
async fn reload(gw: &Gw, key: &str) -> (StatusCode, Value) {
    gw.req("POST", "/v1/reload", Some(key), None).await
}

/// `read` as bot: its status.
async fn read(gw: &Gw, key: &str) -> (StatusCode, Value) {
    let body = json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {}});
    gw.req("POST", "/v1/tool-calls", Some(key), Some(body))
        .await
}

#[tokio::test]
async fn a_reload_swaps_the_policies_a_call_allowed_before_is_held_after() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let before_hash = gw.state.registry().policy_set_sha256.clone();
    assert_eq!(read(&gw, BOT).await.0, StatusCode::OK);
    hold_every_read(&conf);
    let b = reloaded(&gw, OP).await;
    assert_eq!(b["previous_policy_set_sha256"], before_hash.as_str());
    let after_hash = b["policy_set_sha256"].as_str().unwrap().to_string();
    assert_ne!(after_hash, before_hash);
    assert_eq!(gw.state.registry().policy_set_sha256, after_hash);
    let (s, held) = read(&gw, BOT).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{held}");
    let id = held["approval_id"].as_str().unwrap();
    let (_, a) = gw.get(&format!("/v1/approvals/{id}"), OP).await;
    assert_eq!(a["policy_set_sha256"], after_hash.as_str(), "{a}");
    assert_eq!(audit_count(&gw.data_dir, "config.reloaded"), 1);
}

#[tokio::test]
async fn every_verdict_and_approval_records_the_policy_set_it_was_decided_under() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let old = gw.state.registry().policy_set_sha256.clone();
    let pay = json!({"amount": 500, "to": "acme"});
    let first = gw.held("s1", "pay", pay.clone()).await;
    assert_eq!(read(&gw, BOT).await.0, StatusCode::OK);
    hold_every_read(&conf);
    let (_, b) = reload(&gw, OP).await;
    let new = b["policy_set_sha256"].as_str().unwrap().to_string();
    let second = gw.held("s2", "pay", pay).await;
    // The approval held before the reload keeps the set it was held under; the receipt too.
    let (_, a1) = gw.get(&format!("/v1/approvals/{first}"), OP).await;
    let (_, a2) = gw.get(&format!("/v1/approvals/{second}"), OP).await;
    assert_eq!(a1["policy_set_sha256"], old.as_str());
    assert_eq!(a2["policy_set_sha256"], new.as_str());
    let (s, r) = gw.get(&format!("/v1/approvals/{first}/receipt"), OP).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["policy_set_sha256"], old.as_str());
    // The dashboard card shows it.
    let cookie = gw.dashboard_session().await;
    let card = gw
        .dashboard_page(&format!("/ui/approvals/{second}"), &cookie)
        .await;
    assert!(
        card.contains(&format!("<code id=\"policy-set\">{new}</code>")),
        "{card}"
    );
    // The audit records of the verdicts name the set too: the allowed `read` and the holds.
    let allowed = gw.sql().text(
        "SELECT data FROM audit WHERE kind = 'call.allowed' ORDER BY seq LIMIT 1",
        &[],
    );
    let allowed: Value = serde_json::from_str(&allowed).unwrap();
    assert_eq!(allowed["policy_set_sha256"], old.as_str());
    let requested = gw.sql().text(
        "SELECT data FROM audit WHERE kind = 'approval.requested' ORDER BY seq DESC LIMIT 1",
        &[],
    );
    let requested: Value = serde_json::from_str(&requested).unwrap();
    assert_eq!(requested["policy_set_sha256"], new.as_str());
}

#[tokio::test]
async fn a_reload_revokes_a_removed_agent_key_at_once() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    assert_eq!(read(&gw, BOT).await.0, StatusCode::OK);
    let without_bot = principals(&[
        ("alice", "kind: operator, roles: [finance]", OP),
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
    ]);
    write_config(&conf, &without_bot);
    let b = reloaded(&gw, OP).await;
    assert_eq!(b["removed"], json!(["bot"]));
    // The very next request with the removed key is refused; the others still work.
    let (s, e) = read(&gw, BOT).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{e}");
    assert_eq!(e["code"], "UNAUTHENTICATED");
    assert_eq!(gw.get("/v1/whoami", "olaf-key").await.0, StatusCode::OK);
}

/// Also (found by review): the `config.reloaded` record named who changed, not how, so a
/// key replaced read the same as a role added. It says what changed for each, never the key.
#[tokio::test]
async fn a_reload_that_changes_a_key_refuses_the_old_key_and_accepts_the_new() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let rotated = principals(&[
        ("alice", "kind: operator, roles: [finance, admin]", OP),
        ("bot", "kind: agent, agent_id: bot", "bot-key-2"),
        ("carl", "kind: operator, roles: [ops]", "carl-key"),
    ]);
    write_config(&conf, &rotated);
    let b = reloaded(&gw, OP).await;
    assert_eq!(b["changed"], json!(["alice", "bot"]));
    assert_eq!(b["removed"], json!(["olaf"]));
    assert_eq!(read(&gw, BOT).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(read(&gw, "bot-key-2").await.0, StatusCode::OK);
    let record = gw.sql().text(
        "SELECT data FROM audit WHERE kind = 'config.reloaded' ORDER BY seq DESC LIMIT 1",
        &[],
    );
    let record: Value = serde_json::from_str(&record).unwrap();
    let how = &record["principals"];
    assert_eq!(
        how["carl"],
        json!({"added": "operator", "roles": ["ops"]}),
        "{record}"
    );
    let alice = json!({"roles_added": ["admin"], "roles_removed": [], "changed": []});
    assert_eq!(how["alice"], alice, "{record}");
    let bot = json!({"roles_added": [], "roles_removed": [], "changed": ["key"]});
    assert_eq!(how["bot"], bot, "{record}");
    let key_hash = hex::encode(Sha256::digest(b"bot-key-2"));
    assert!(!record.to_string().contains(&key_hash), "{record}");
}

#[tokio::test]
async fn a_broken_file_keeps_the_old_set_and_answers_the_error_with_file_and_line() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let hash = gw.state.registry().policy_set_sha256.clone();
    // Line 4 of the governance file is not a valid rule (a mapping where a list belongs).
    let broken = "policies:\n  - id: acme.test.reload\n    selector: {agents: [\"*\"]}\n    rules: {tool: read}\n";
    std::fs::write(conf.join("gov.yaml"), broken).unwrap();
    // And the agent key is removed in the same (refused) edit.
    let without_bot = principals(&[("alice", "kind: operator, roles: [finance]", OP)]);
    write_config(&conf, &without_bot);
    let (s, b) = reload(&gw, OP).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["code"], "CONFIG_INVALID");
    let e = &b["errors"][0];
    assert!(e["file"].as_str().unwrap().ends_with("gov.yaml"), "{b}");
    assert_eq!(e["line"], 4, "{b}");
    assert!(!e["reason"].as_str().unwrap().is_empty());
    // Nothing changed: the same policy set, the removed key still works, nothing audited.
    assert_eq!(gw.state.registry().policy_set_sha256, hash);
    assert_eq!(read(&gw, BOT).await.0, StatusCode::OK);
    assert_eq!(audit_count(&gw.data_dir, "config.reloaded"), 0);
}

#[tokio::test]
async fn a_half_written_config_file_keeps_the_old_set() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(&everyone());
    let (gw, conf) = reloadable(dir.path(), &text, &gov_allowing_read()).await;
    // A write caught half way: the file ends inside the last principal's mapping.
    let cut = text.rfind("key_sha256").unwrap() + 14;
    std::fs::write(conf.join("assent.yaml"), &text[..cut]).unwrap();
    let b = refused_in_assent_yaml(&gw).await;
    assert!(b["errors"][0]["line"].is_u64(), "{b}");
    assert_eq!(read(&gw, BOT).await.0, StatusCode::OK);
}

#[cfg(unix)]
#[tokio::test]
async fn a_config_swapped_for_a_symlink_is_read_through_it_and_a_dangling_one_is_refused() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let file = conf.join("assent.yaml");
    // A dangling link (the target not yet written): refused, the old set stays.
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(conf.join("next.yaml"), &file).unwrap();
    refused_in_assent_yaml(&gw).await;
    assert_eq!(read(&gw, BOT).await.0, StatusCode::OK);
    // The link's target written (the atomic swap of a Kubernetes ConfigMap): applied.
    let only_alice = principals(&[("alice", "kind: operator, roles: [finance]", OP)]);
    std::fs::write(conf.join("next.yaml"), config_text(&only_alice)).unwrap();
    reloaded(&gw, OP).await;
    assert_eq!(read(&gw, BOT).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_agent_key_cannot_reload() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    hold_every_read(&conf);
    let (s, b) = reload(&gw, BOT).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    assert_eq!(b["code"], "FORBIDDEN");
    let (s, _) = gw.req("POST", "/v1/reload", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = reload(&gw, "not-a-key").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Nothing was reloaded: `read` is still allowed.
    assert_eq!(read(&gw, BOT).await.0, StatusCode::OK);
}

#[tokio::test]
async fn an_operator_who_reloads_themselves_away_gets_the_answer_and_then_401() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    write_config(&conf, &without_alice());
    let b = reloaded(&gw, OP).await;
    assert_eq!(b["removed"], json!(["alice"]));
    let warned = b["warnings"].as_array().unwrap();
    assert!(
        warned
            .iter()
            .any(|w| w.as_str().unwrap().contains("`alice`")),
        "{b}"
    );
    assert_eq!(reload(&gw, OP).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(reload(&gw, "olaf-key").await.0, StatusCode::OK);
}

#[tokio::test]
async fn concurrent_reloads_apply_one_at_a_time_and_leave_one_consistent_set() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    hold_every_read(&conf);
    let answers = futures::future::join_all((0..8).map(|_| reload(&gw, OP))).await;
    let mut applied = 0;
    for (s, b) in &answers {
        match *s {
            StatusCode::OK => applied += 1,
            StatusCode::CONFLICT => assert_eq!(b["code"], "RELOAD_IN_PROGRESS", "{b}"),
            other => panic!("unexpected {other}: {b}"),
        }
    }
    assert!(applied >= 1);
    assert_eq!(audit_count(&gw.data_dir, "config.reloaded"), applied);
    assert_eq!(read(&gw, BOT).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_reload_names_the_settings_only_a_restart_applies_and_leaves_them() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let more = format!(
        "max_pending_per_agent: 3\nlisten: 127.0.0.1:1\n{}",
        everyone()
    );
    write_config(&conf, &more);
    let b = reloaded(&gw, OP).await;
    assert_eq!(
        b["needs_restart"],
        json!(["listen", "max_pending_per_agent"])
    );
    assert_eq!(gw.state.settings.max_pending_per_agent, 100);
}

#[tokio::test]
async fn an_aaep_event_stream_opened_with_a_key_a_reload_removed_ends() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let mut stream = gw.get_raw("/aaep/v1/events", OP).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let first = stream.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("aaep.subscription"));
    write_config(&conf, &without_alice());
    assert_eq!(reload(&gw, "olaf-key").await.0, StatusCode::OK);
    // The stream ends (a guard against a hang, not a timing assertion: it ends on the reload).
    let rest = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(c) = stream.chunk().await.unwrap() {
            assert!(!String::from_utf8_lossy(&c).contains("aaep.event"));
        }
    })
    .await;
    assert!(rest.is_ok(), "the revoked operator's stream stayed open");
}

/// The status of `GET /ui/queue` with session `cookie`.
async fn queue_status(gw: &Gw, cookie: String) -> StatusCode {
    let r = gw.http.get(format!("{}/ui/queue", gw.url));
    r.header("cookie", cookie).send().await.unwrap().status()
}

/// Alice signs in to the dashboard; the file becomes `after` and olaf reloads it: the answer's
/// `changed` list, and alice's session is refused from then on.
async fn alice_signed_out_by_reloading(after: &str) -> serde_json::Value {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let cookie = gw.dashboard_session().await;
    let queue = |cookie: String| queue_status(&gw, cookie);
    assert_eq!(queue(cookie.clone()).await, StatusCode::OK);
    write_config(&conf, after);
    let b = reloaded(&gw, "olaf-key").await;
    assert_eq!(queue(cookie).await, StatusCode::UNAUTHORIZED);
    b["changed"].clone()
}

#[tokio::test]
async fn a_reload_that_removes_an_operator_signs_their_dashboard_session_out() {
    alice_signed_out_by_reloading(&without_alice()).await;
}

/// Attack (noted at the reload's merge): an operator's key leaked, the administrator changed it
/// and reloaded — a dashboard session started with the old key must end too, not run on until
/// it expires.
#[tokio::test]
async fn a_reload_that_changes_an_operators_key_signs_their_dashboard_session_out() {
    let changed = alice_signed_out_by_reloading(&principals(&[
        ("alice", "kind: operator, roles: [finance]", "alice-new-key"),
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]))
    .await;
    assert_eq!(changed, serde_json::json!(["alice"]));
}

/// Found by review: a removed operator's sessions were kept (they failed only while the name
/// was gone), so once a later reload added the name again — the same person back, or someone
/// else given the name and a key of their own — a stolen cookie signed in as them. Removal ends
/// the sessions, and a session is bound to the key it signed in with.
#[tokio::test]
async fn an_operator_removed_and_added_again_is_not_signed_in_by_an_old_session() {
    let (_dir, gw, conf) = reloadable_by_everyone().await;
    let cookie = gw.dashboard_session().await;
    let queue = |cookie: String| queue_status(&gw, cookie);
    assert_eq!(queue(cookie.clone()).await, StatusCode::OK);
    write_config(&conf, &without_alice());
    reloaded(&gw, "olaf-key").await;
    write_config(&conf, &everyone());
    let b = reloaded(&gw, "olaf-key").await;
    assert_eq!(b["added"], serde_json::json!(["alice"]), "{b}");
    assert_eq!(queue(cookie).await, StatusCode::UNAUTHORIZED);
    gw.stop().await;
}

/// Found by review: a key rotated by editing the file and restarting (no reload) left every
/// dashboard session started with the old key signed in until it ended (12 hours). A session
/// keeps the binding of its key; the restarted gateway, whose alice has a new key, refuses it,
/// and olaf's, whose key is unchanged, still holds.
#[tokio::test]
async fn a_key_rotated_by_a_restart_ends_the_sessions_it_signed_in() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _) = reloadable(dir.path(), &config_text(&everyone()), &gov_allowing_read()).await;
    let alices = gw.dashboard_session().await;
    let olafs = cookie_of(&gw.dashboard_sign_in("olaf-key").await);
    gw.stop().await;
    let rotated = principals(&[
        ("alice", "kind: operator, roles: [finance]", "alice-new-key"),
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    let (gw, _) = reloadable(dir.path(), &config_text(&rotated), &gov_allowing_read()).await;
    let queue = |cookie: String| queue_status(&gw, cookie);
    // Nor does the old session still earn a signed-in operator's body limit at the edge.
    let big = |cookie: String| {
        let r = gw.http.post(format!("{}/ui/approvals/x/decide", gw.url));
        let r = r
            .header("cookie", cookie)
            .header("content-type", "application/x-www-form-urlencoded");
        async move {
            r.body("a".repeat(100 * 1024))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(big(alices.clone()).await, StatusCode::PAYLOAD_TOO_LARGE);
    assert_ne!(big(olafs.clone()).await, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(queue(alices).await, StatusCode::UNAUTHORIZED);
    assert_eq!(queue(olafs).await, StatusCode::OK);
    gw.stop().await;
}

/// Found by review: a removed operator's AAEP subscriptions stayed open, and the timeout
/// extension one had asked for kept lengthening every new confirmation's timeout. A reload
/// that removes the operator closes them, and the extension goes with them.
#[tokio::test]
async fn a_reload_that_removes_an_operator_closes_their_subscriptions_and_extension() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, conf) = reloadable(dir.path(), &config_text(&everyone()), &gov_holding_read()).await;
    let ext = json!({"assent": {"timeout_extension_seconds": 120}});
    let held = |path: &'static str| {
        let gw = &gw;
        async move {
            let body = json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {"path": path}});
            let (s, b) = gw
                .req("POST", "/v1/tool-calls", Some(BOT), Some(body))
                .await;
            assert_eq!(s, StatusCode::ACCEPTED, "{b}");
            let id = b["approval_id"].as_str().unwrap().to_string();
            let (_, a) = gw.approval(&id, "olaf-key").await;
            crate::kit::wait_seconds(&a)
        }
    };
    let base = held("/a").await;
    let (sub, _sse) = gw.subscribe(OP, true, ext).await;
    let with_extension = held("/b").await;
    assert_eq!(with_extension - base, 120, "{base} then {with_extension}");
    write_config(&conf, &without_alice());
    reloaded(&gw, "olaf-key").await;
    let without = held("/c").await;
    assert_eq!(
        with_extension - without,
        120,
        "{with_extension} then {without}"
    );
    let closed = gw.sql().int(
        "SELECT count(*) FROM aaep_subscriptions WHERE id = ?1 AND closed_at IS NOT NULL",
        &[crate::backend::Param::from(&sub)],
    );
    assert_eq!(closed, 1);
    gw.stop().await;
}

/// Found by review (of the fix above): an operator removed by editing the file and restarting
/// kept their AAEP subscriptions open, and their timeout extension lengthened every held call.
/// At start-up the subscriptions of principals that are no operator any more are closed.
#[tokio::test]
async fn a_restart_without_an_operator_closes_their_subscriptions_and_extension() {
    let dir = tempfile::tempdir().unwrap();
    let wait = async |gw: &Gw, path: &str| {
        let body = json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {"path": path}});
        let (s, b) = gw
            .req("POST", "/v1/tool-calls", Some(BOT), Some(body))
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        let (_, a) = gw
            .approval(b["approval_id"].as_str().unwrap(), "olaf-key")
            .await;
        crate::kit::wait_seconds(&a)
    };
    let (gw, _) = reloadable(dir.path(), &config_text(&everyone()), &gov_holding_read()).await;
    let base = wait(&gw, "/a").await;
    let ext = json!({"assent": {"timeout_extension_seconds": 120}});
    let (_sub, sse) = gw.subscribe(OP, true, ext).await;
    assert_eq!(wait(&gw, "/b").await, base + 120);
    drop(sse);
    gw.stop().await;
    let (gw, _) = reloadable(
        dir.path(),
        &config_text(&without_alice()),
        &gov_holding_read(),
    )
    .await;
    assert_eq!(wait(&gw, "/c").await, base);
    gw.stop().await;
}

/// Attack (found by review): a quorum vote outlived the revocation of its voter. Alice's key
/// is stolen and approves a payment that needs two of finance; the operators revoke it by a
/// reload that removes alice — her vote still counted, and fred's approval alone then met the
/// quorum and minted the token. The reload withdraws the votes of the principals it removes or
/// changes (audited `decision.vote_withdrawn`), the quorum needs two others, and the chain
/// still verifies. The same at a restart whose file took the voter's role away, or rotated
/// the key they voted with.
#[tokio::test]
async fn a_vote_by_an_operator_a_reload_removes_no_longer_counts() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy(
        "acme.test.reload",
        "- tool: pay\n  approvers: {roles: [finance], count: 2}\n",
    );
    let finance_without = |with_alice: bool, freds: &'static str| {
        let fred = if freds == "finance" {
            "kind: operator, roles: [finance]"
        } else {
            "kind: operator, roles: [ops]"
        };
        let mut list = vec![
            ("fred", fred, "fred-key"),
            ("gina", "kind: operator, roles: [finance]", "gina-key"),
            ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
            ("bot", "kind: agent, agent_id: bot", BOT),
        ];
        if with_alice {
            list.push(("alice", "kind: operator, roles: [finance]", OP));
        }
        principals(&list)
    };
    let finance = |with_alice: bool| finance_without(with_alice, "finance");
    let (gw, conf) = reloadable(dir.path(), &config_text(&finance(true)), &gov).await;
    let id = gw
        .pending("pay", json!({"amount": 9000, "to": "mallory"}))
        .await;
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{b}"
    );
    write_config(&conf, &finance(false));
    let (s, b) = reload(&gw, "olaf-key").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "decision.vote_withdrawn"), 1);
    let (s, b) = gw.decide(&id, "fred-key", "approve").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        b["status"], "pending",
        "alice's withdrawn vote does not count: {b}"
    );
    assert!(gw.as_agent(&id).await["token"].is_null());
    let (s, b) = gw.decide(&id, "gina-key", "approve").await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{b}"
    );
    let problem = crate::backend::audit_problem(&gw.data_dir);
    assert!(problem.is_none(), "{problem:?}");
    // A restart under a file that took fred's finance role: his vote is withdrawn.
    let id = gw
        .pending("pay", json!({"amount": 8000, "to": "mallory"}))
        .await;
    let (s, b) = gw.decide(&id, "fred-key", "approve").await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{b}"
    );
    gw.stop().await;
    let config = config_text(&finance_without(false, "ops"));
    let (gw, _) = reloadable(dir.path(), &config, &gov).await;
    let (s, b) = gw.decide(&id, "gina-key", "approve").await;
    assert_eq!(
        b["status"], "pending",
        "fred's withdrawn vote does not count: {s} {b}"
    );
    assert_eq!(audit_count(&gw.data_dir, "decision.vote_withdrawn"), 2);
    // A restart that rotated gina's key (key_env can only change so): the vote cast with the
    // old key is withdrawn.
    let id = gw
        .pending("pay", json!({"amount": 7000, "to": "mallory"}))
        .await;
    let (s, b) = gw.decide(&id, "gina-key", "approve").await;
    assert_eq!(b["status"], "pending", "{s} {b}");
    gw.stop().await;
    let rotated = principals(&[
        ("alice", "kind: operator, roles: [finance]", OP),
        ("gina", "kind: operator, roles: [finance]", "gina-new-key"),
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    let (gw, _) = reloadable(dir.path(), &config_text(&rotated), &gov).await;
    let (s, b) = gw.decide(&id, OP, "approve").await;
    assert_eq!(
        b["status"], "pending",
        "the old key's vote does not count: {s} {b}"
    );
    // Gina's two old-key votes (on this payment and the one before) are withdrawn.
    assert_eq!(audit_count(&gw.data_dir, "decision.vote_withdrawn"), 4);
    gw.stop().await;
}
