//! How long a grant with scope `session` stands (found by review): the agent names its session
//! itself (`session_id` in every proposal), so a session grant without an expiry let an agent
//! that kept one session id turn "approve for this session" into "approve forever". It now
//! lapses `session_grant_max_seconds` (default 24 h, 1 s … 30 days) after it was created, as a
//! duration grant does; a value out of bounds stops start-up with the file, line and why.

use crate::kit::{OP, serve_with};
use crate::reload::principals;
use assent_server::config::Config;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The grants listed by `GET /v1/grants` (`?all=true`: revoked and lapsed ones too) whose
/// approval is `id`.
async fn grants_of(gw: &crate::kit::Gw, id: &str, all: bool) -> Vec<Value> {
    let path = if all {
        "/v1/grants?all=true"
    } else {
        "/v1/grants"
    };
    let (s, b) = gw.get(path, OP).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let list = b["grants"].as_array().unwrap();
    list.iter()
        .filter(|g| g["approval_id"] == id)
        .cloned()
        .collect()
}

/// The attack: the operator approves a payment "for this session"; the agent keeps sending
/// the same `session_id` and the grant covers the same call for as long as it likes. With a
/// 1.5 s maximum the grant carries an `expires_at`, covers the call before it, and once it
/// has lapsed the same call in the same session is held for a person again and the grant is
/// no longer listed as active.
#[tokio::test]
async fn a_session_grant_lapses_so_an_agent_keeping_its_session_id_is_asked_again() {
    let gw = serve_with(|s| s.session_grant_max_ms = 1_500).await;
    let args = json!({"amount": 500, "to": "x"});
    let id = gw.held("s1", "pay", args.clone()).await;
    let body = json!({"decision": "approve", "scope": "session", "reason": "this session"});
    let (s, b) = gw.decide_with(&id, OP, body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let grants = grants_of(&gw, &id, false).await;
    assert_eq!(grants.len(), 1, "{grants:?}");
    let g = &grants[0];
    assert_eq!(g["scope"], "session", "{g}");
    let (made, lapses) = (g["created_at"].as_str(), g["expires_at"].as_str());
    assert!(
        made.zip(lapses).is_some_and(|(m, l)| m < l),
        "a session grant lapses after it was made: {g}"
    );
    // Before it lapses it covers the same call in the same session.
    let (s, b) = gw.propose_in("s1", "pay", args.clone()).await;
    assert_eq!(s, StatusCode::OK, "covered by the session grant: {b}");
    tokio::time::sleep(std::time::Duration::from_millis(1_700)).await;
    let (s, b) = gw.propose_in("s1", "pay", args).await;
    assert_eq!(
        s,
        StatusCode::ACCEPTED,
        "the lapsed session grant covers nothing: {b}"
    );
    assert!(grants_of(&gw, &id, false).await.is_empty(), "not active");
    assert_eq!(grants_of(&gw, &id, true).await.len(), 1, "still listed");
    gw.stop().await;
}

/// `session_grant_max_seconds` is bounded like the other durations: 0 (a grant that covers
/// nothing, or a wrap) and more than 30 days stop start-up, naming the file, the key's line
/// and the bounds; absent it is 24 h.
#[test]
fn a_session_grant_maximum_out_of_bounds_stops_start_up_with_file_line_and_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bot.agf.yaml"), crate::kit::AGENTS).unwrap();
    let file = dir.path().join("assent.yaml");
    let who = principals(&[("alice", "kind: operator, roles: [finance]", OP)]);
    let load = |line: &str| {
        std::fs::write(&file, format!("agents: [bot.agf.yaml]\n{line}\n{who}")).unwrap();
        Config::load(&file)
    };
    for bad in ["0", "2592001", "18446744073709551615"] {
        let e = load(&format!("session_grant_max_seconds: {bad}"))
            .unwrap_err()
            .to_string();
        let why = format!(
            "{}:2: session_grant_max_seconds is {bad}; it must be from 1 to 2592000",
            file.display()
        );
        assert!(e.contains(&why), "{e}");
    }
    let cfg = load("session_grant_max_seconds: 28800").unwrap();
    assert_eq!(cfg.session_grant_max_seconds, 28_800);
    let cfg = load("").unwrap();
    assert_eq!(cfg.session_grant_max_seconds, 86_400);
}
