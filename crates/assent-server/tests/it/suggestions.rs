//! The insights' suggestions (issue 16 §2, §4) over a real configuration file: a planted
//! always-approved pattern made through the API is suggested by `GET /v1/insights` and on
//! `/ui/insights`, and its one-click export is the YAML to write; a gateway with no config file
//! suggests nothing.

use crate::kit::{AGENTS, Gw, policy, start_gov, start_reloading};
use assent_server::config::Config;
use assent_store::pins::PinScope;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const OP: &str = "alice-key";
const BOT: &str = "bot-key";

/// A gateway started from `dir/conf/assent.yaml` (the kit's `bot` agent, whose `pay` asks over
/// 100, and a governance file), its store in `dir/data`.
async fn from_config(dir: &std::path::Path) -> Gw {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("bot.agf.yaml"), AGENTS).unwrap();
    let gov = policy("acme.test.suggest", "- tool: read\n  risk_tier: R1\n");
    std::fs::write(conf.join("gov.yaml"), &gov).unwrap();
    let key = |k: &str| hex::encode(Sha256::digest(k.as_bytes()));
    let text = format!(
        "agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance], key_sha256: \"{}\"}}\n  - {{name: bot, kind: agent, agent_id: bot, key_sha256: \"{}\"}}\n",
        key(OP),
        key(BOT)
    );
    let file = conf.join("assent.yaml");
    std::fs::write(&file, text).unwrap();
    let cfg = Config::load(&file).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    start_reloading(&data, &gov, &cfg).await
}

/// Twelve `pay`s approved, from 110 up to 220, and one of 900 rejected.
async fn plant_approvals_to_220(gw: &Gw) {
    for i in 0..12 {
        pay_decided(gw, i, 110 + i * 10, true).await;
    }
    pay_decided(gw, 20, 900, false).await;
}

/// Proposes `pay {amount, to}` in a session of its own and has alice decide it.
async fn pay_decided(gw: &Gw, i: u32, amount: u32, approve: bool) {
    let body = json!({"agent": "bot", "session_id": format!("s{i}"), "tool": "pay", "arguments": {"amount": amount, "to": format!("r{i}")}});
    let (s, a) = gw.post("/v1/tool-calls", BOT, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{a}");
    let id = a["approval_id"].as_str().unwrap();
    let d = if approve { "approve" } else { "deny" };
    let (s, b) = gw
        .post(
            &format!("/v1/approvals/{id}/decision"),
            OP,
            json!({"decision": d}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

/// The whole changed file of a suggestion's edit.
fn edit_text(edit: &serde_json::Value) -> String {
    edit["text"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_planted_pattern_is_suggested_in_the_insights_and_exported_as_yaml() {
    let dir = tempfile::tempdir().unwrap();
    let gw = from_config(dir.path()).await;
    plant_approvals_to_220(&gw).await;
    let (s, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let sg = &body["suggestions"][0];
    assert_eq!(sg["kind"], "remove_prompt", "{body}");
    assert_eq!(sg["description"], "ask unless 110 <= amount <= 220");
    assert_eq!(sg["evidence"]["decisions"], 12);
    assert_eq!(sg["replay"]["confirm_to_allow"], 12);
    assert_eq!(sg["replay"]["loosened"], 0);
    // The same history replayed with the suggested file: exactly those prompts go.
    let text = edit_text(&sg["edits"][0]);
    let body = json!({"agents": [{"file": "bot.agf.yaml", "text": text}]});
    let (s, r) = gw.post("/v1/policies/replay", OP, body).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["overall"]["confirm_to_allow"], 12, "{r}");
    assert_eq!(
        (&r["overall"]["loosened"], &r["truncated"]),
        (&json!(0), &json!(false))
    );
    assert_eq!(r["prompts_removed"], 12);
    let edit = &sg["edits"][0];
    assert!(
        edit["file"].as_str().unwrap().ends_with("bot.agf.yaml"),
        "{edit}"
    );
    assert!(edit["yaml"].as_str().unwrap().contains("gt: 220"), "{edit}");

    let cookie = gw.dashboard_session().await;
    let html = gw.dashboard_page("/ui/insights", &cookie).await;
    assert!(
        html.contains("ask unless 110 &#60;= amount &#60;= 220")
            || html.contains("ask unless 110 &lt;= amount &lt;= 220"),
        "{html}"
    );
    let link = html
        .split("href=\"/ui/insights/suggestions/1?")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("an export link");
    let link = link.replace("&amp;", "&").replace("&#38;", "&");
    let link = format!("/ui/insights/suggestions/1?{link}");
    let r = gw.dashboard_get(&link, &cookie).await;
    assert_eq!(r.status(), StatusCode::OK, "{link}");
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/yaml")
    );
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .contains("assent-suggestion-1.yaml")
    );
    let yaml = r.text().await.unwrap();
    assert!(
        yaml.starts_with("# assent suggestion 1: pay: ask unless 110 <= amount <= 220"),
        "{yaml}"
    );
    assert!(yaml.contains("gt: 220") && yaml.contains("# in "), "{yaml}");
    // The link names the suggestion by what the page showed (`of`), not by its position: a
    // link without it is refused, and one naming a suggestion that is no longer there (new
    // decisions, a reload) is a 409 — never whatever suggestion has moved into place 1.
    let get = |url: String| gw.http.get(url).header("cookie", &cookie).send();
    let r = get(format!("{}/ui/insights/suggestions/1", gw.url))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (head, of) = link
        .split_once("of=")
        .expect("the link names its suggestion");
    assert_eq!(of.len(), 32, "{link}");
    let stale = format!("{}{head}of={}", gw.url, "0".repeat(32));
    let r = get(stale).await.unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(!r.text().await.unwrap().contains("gt: 220"));
    // Without a session: the sign-in page, never the YAML.
    let r = gw
        .http
        .get(format!("{}{link}", gw.url))
        .send()
        .await
        .unwrap();
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(!ct.starts_with("application/yaml"), "{ct}");
    assert!(!r.text().await.unwrap().contains("gt: 220"));
}

#[tokio::test]
async fn a_gateway_without_a_config_file_suggests_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gov(dir.path(), &policy("p", "- tool: read\n"), |_| {}).await;
    for i in 0..12 {
        pay_decided(&gw, i, 110 + i * 10, true).await;
    }
    let (s, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["suggestions"], json!([]));
}

/// Found by review: the history read for suggestions dropped what it could not read (and
/// what lay past its 50,000 proposals) unseen, and the suggestion and its replay ("refused
/// calls let through: 0") were made over the rest. A range with a record that cannot be read
/// offers no suggestion.
#[tokio::test]
async fn a_range_read_in_part_offers_no_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let gw = from_config(dir.path()).await;
    plant_approvals_to_220(&gw).await;
    let (_, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(body["suggestions"].as_array().unwrap().len(), 1, "{body}");
    // The record of the rejected call is made unreadable (its call gone).
    let broken = "UPDATE audit SET data = '{}' WHERE seq = (SELECT max(seq) FROM audit WHERE kind = 'approval.requested')";
    assert_eq!(gw.sql().exec(broken, &[]), 1);
    let (s, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["suggestions"], json!([]), "{body}");
    gw.stop().await;
}

/// Attack (found by review): an agent with an auto-allowed tool sends calls padded to
/// `max_arguments_bytes` (256 KiB by default); the history read for suggestions was bounded
/// only by its count (50,000 proposals, about 12 GiB of such calls), all held at once when the
/// next operator opened the insights. Now past 64 MiB of records the range is read as cut: no
/// suggestion (one mined from the part read could miss the rejections that refute it), and
/// the answer and the page say so.
#[tokio::test]
async fn a_range_of_more_bytes_than_are_read_offers_no_suggestion_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let gw = from_config(dir.path()).await;
    plant_approvals_to_220(&gw).await;
    let (_, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(body["suggestions"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["suggestions_withheld"], false, "{body}");
    // 280 allowed calls, their records then padded to what calls of about 250 KB each write
    // (70 MB, past the 64 MiB read for suggestions; sending them whole takes a debug build
    // about 20 s).
    for i in 0..280 {
        let body = json!({"agent": "bot", "session_id": format!("f{i}"), "tool": "read", "arguments": {"pad": "x"}});
        let (s, a) = gw.post("/v1/tool-calls", BOT, body).await;
        assert_eq!(s, StatusCode::OK, "{a}");
    }
    let pad = format!("\"pad\":\"{}\"", "x".repeat(250_000));
    let padded = gw.sql().exec(
        "UPDATE audit SET data = replace(data, '\"pad\":\"x\"', ?1) WHERE kind = 'call.allowed'",
        &[(&pad).into()],
    );
    assert_eq!(padded, 280);
    // Every record still reads (the cut below is the bytes', not an unreadable record's).
    let body = json!({"agents": [{"file": "bot.agf.yaml", "text": AGENTS}]});
    let (s, r) = gw.post("/v1/policies/replay", OP, body).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (&r["unreadable"], &r["truncated"]),
        (&json!(0), &json!(false))
    );
    assert_eq!(r["overall"]["calls"], 293, "{r}");
    let (s, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (&body["suggestions"], &body["suggestions_withheld"]),
        (&json!([]), &json!(true))
    );
    let cookie = gw.dashboard_session().await;
    let html = gw.dashboard_page("/ui/insights", &cookie).await;
    assert!(html.contains("id=\"suggestions-withheld\""), "{html}");
    assert!(!html.contains("id=\"no-suggestions\""));
    gw.stop().await;
}

/// Proposes `tool` (on MCP server `server`, if any) with `args` in session `s{i}` and has
/// alice approve or deny it.
async fn decide_call(gw: &Gw, i: u32, server: Option<&str>, tool: &str, args: Value, yes: bool) {
    let mut body =
        json!({"agent": "bot", "session_id": format!("s{i}"), "tool": tool, "arguments": args});
    if let Some(server) = server {
        body["server"] = json!(server);
    }
    let (s, a) = gw.post("/v1/tool-calls", BOT, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{a}");
    let id = a["approval_id"].as_str().unwrap();
    let d = if yes { "approve" } else { "deny" };
    let path = format!("/v1/approvals/{id}/decision");
    let (s, b) = gw.post(&path, OP, json!({"decision": d})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

/// `fs`/`write_file`'s definition with an input schema declaring `properties`.
fn write_file(properties: &[&str]) -> Value {
    let props: serde_json::Map<String, Value> = properties
        .iter()
        .map(|p| (p.to_string(), json!({"type": "string"})))
        .collect();
    json!({"name": "write_file", "description": "Write a file.",
           "inputSchema": {"type": "object", "properties": props}})
}

/// Twelve `fs`/`write_file` calls approved with `risk_score: 1` (ten with `mode: append`,
/// two `truncate`), two rejected with `risk_score: 99` and `mode: truncate`, each to a path of
/// its own: the score covers every approval, `mode` ten.
async fn scored_writes(gw: &Gw) {
    for i in 0..14u32 {
        let yes = i < 12;
        let args = json!({"path": format!("/w/{i}"), "mode": if i < 10 { "append" } else { "truncate" },
                          "risk_score": if yes { 1 } else { 99 }});
        decide_call(gw, 100 + i, Some("fs"), "write_file", args, yes).await;
    }
}

/// Attack: the agent adds a `risk_score` of its own making to its calls, low on those it
/// expects people to approve and high on the others. It covers every approval — more than any
/// real argument — so "ask unless 0 <= risk_score <= 1" was suggested, and once accepted the
/// agent passes any call by sending `risk_score: 1`. Only arguments the tool really takes are
/// mined: `pay`'s `amount` (its rule's condition names it) is, the score never is; and an
/// `inputSchema` the agent's own relay reported (naming the score) is not counted, so
/// `write_file` gets no suggestion but a note on the API and the page saying why.
#[tokio::test]
async fn a_score_the_agent_made_up_is_never_suggested_even_in_a_schema_it_reported() {
    let dir = tempfile::tempdir().unwrap();
    let gw = from_config(dir.path()).await;
    for i in 0..17u32 {
        let (amount, to, yes) = match i {
            0..12 => (110 + i * 10, "acme", true),
            12..15 => (2000, "payroll", true),
            15 => (500, "acme", false),
            _ => (900, "acme", false),
        };
        let args = json!({"amount": amount, "to": to, "risk_score": if yes { 1 } else { 99 }});
        decide_call(&gw, i, None, "pay", args, yes).await;
    }
    let report = json!({"agent": "bot", "server": "fs",
                        "tools": [write_file(&["path", "mode", "risk_score"])]});
    let (s, b) = gw.post("/v1/tools/check", BOT, report).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    scored_writes(&gw).await;
    let (s, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let found = body["suggestions"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{body}");
    // The score is never the pattern; the exception requires it as every covered approval
    // sent it (with the payee), which only narrows it.
    assert_eq!(found[0]["pattern"]["key"], "amount", "{body}");
    assert_eq!(
        found[0]["description"],
        "ask unless 110 <= amount <= 220 and risk_score == 1 and to == \"acme\""
    );
    let unmined = body["unmined"].as_array().unwrap();
    assert_eq!(unmined.len(), 1, "{body}");
    assert_eq!(
        (&unmined[0]["server"], &unmined[0]["tool"]),
        (&json!("fs"), &json!("write_file"))
    );
    assert_eq!(unmined[0]["decisions"], 14);
    let reason = unmined[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("relay") && reason.contains("the agent's key can write"),
        "{reason}"
    );
    let cookie = gw.dashboard_session().await;
    let html = gw.dashboard_page("/ui/insights", &cookie).await;
    let listed = html
        .split("<ul id=\"unmined\">")
        .nth(1)
        .expect("the unmined list");
    assert!(
        listed.contains("fs/write_file") && listed.contains("relay"),
        "{html}"
    );
    // Found by review: the relay then reports a harmless change (a new description), which
    // goes to review; an operator accepts it, and the whole agent-written definition was
    // trusted — the score of the first-use pin included, unseen in the diff. An agent's own
    // report is never trusted to say what the tool takes, reviewed or not.
    let mut changed = write_file(&["path", "mode", "risk_score"]);
    changed["description"] = json!("Write a file (now faster).");
    let report = json!({"agent": "bot", "server": "fs", "tools": [changed]});
    let (s, b) = gw.post("/v1/tools/check", BOT, report).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let rid = b["tools"][0]["review_id"]
        .as_str()
        .expect("held for review");
    let (s, b) = gw
        .post(&format!("/v1/tools/reviews/{rid}/accept"), OP, json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, body) = gw.get("/v1/insights", OP).await;
    let keys = body["suggestions"].as_array().unwrap().iter();
    assert!(
        keys.map(|s| &s["pattern"]["key"])
            .all(|k| k != "risk_score"),
        "{body}"
    );
    assert_eq!(body["unmined"][0]["tool"], "write_file", "{body}");
}

/// What the gateway's own MCP hub pinned (a definition fetched from an upstream of its own
/// config) is a schema it trusts: the argument it declares is mined, the made-up one beside it
/// still is not.
#[tokio::test]
async fn an_argument_the_hubs_pinned_schema_declares_is_mined() {
    let dir = tempfile::tempdir().unwrap();
    let gw = from_config(dir.path()).await;
    gw.with_store(|s| {
        let now = assent_server::state::now_ms();
        s.check_tools(
            PinScope::Gateway,
            "fs",
            &[write_file(&["path", "mode"])],
            "hub",
            now,
        )
        .unwrap()
    });
    scored_writes(&gw).await;
    let (s, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["unmined"], json!([]), "{body}");
    let found = body["suggestions"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{body}");
    assert_eq!(
        found[0]["description"], "ask unless mode in [\"append\"] and risk_score == 1",
        "{body}"
    );
}

/// Found by review: a suggested edit's file, place and YAML were shown raw on the page, unlike
/// its tool and description, so a right-to-left override or an invisible character in them
/// (here in the directory of the config file, which the edit names) reached the operator's
/// screen as it is. They are shown as visible escapes. (The miner already refuses argument
/// values holding such characters, so an agent's own text never gets that far.)
#[tokio::test]
async fn a_suggested_edit_shows_what_acts_on_the_display_as_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let gw = from_config(&dir.path().join("ops\u{202e}lmy.\u{200b}")).await;
    plant_approvals_to_220(&gw).await;
    let (_, body) = gw.get("/v1/insights", OP).await;
    let file = body["suggestions"][0]["edits"][0]["file"].as_str();
    let file = file.unwrap_or_else(|| panic!("{body}"));
    assert!(file.contains('\u{202e}'), "{file}");
    let cookie = gw.dashboard_session().await;
    let html = gw.dashboard_page("/ui/insights", &cookie).await;
    let shown = html
        .split("id=\"suggestions\"")
        .nth(1)
        .expect("a suggestion");
    assert!(
        !shown.contains('\u{202e}') && !shown.contains('\u{200b}'),
        "{html}"
    );
    assert!(shown.contains("ops\\u202elmy.\\u200b"), "{html}");
    gw.stop().await;
}
