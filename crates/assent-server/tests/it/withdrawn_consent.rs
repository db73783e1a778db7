//! Withdrawn consent stops the tokens already minted under it: revoking a grant
//! (`DELETE /v1/grants/{id}`) voids the unredeemed tokens of the calls it covered, and a reload
//! that removes an operator, or a restart without them or with their key rotated, voids those
//! of the approvals that rested on them (their decision, or a quorum vote that was needed),
//! each audited `token.voided` in the revoking transaction;
//! redeeming one is `409 TOKEN_USED`, and the audit chain still verifies. And a notification's
//! single-use card link is used only by a signed-in request, not by a link preview. Either
//! backend.

use crate::backend::audit_count;
use crate::grant_revocation::{reloaded, reloading_gateway, stop_verified};
use crate::kit::{AGENTS, BOT, Gw, OP, assert_error, cookie_of, policy, serve_policy, token_of};
use crate::reload::principals;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// `read` is held for a person; `pay` needs one finance and one security approver.
fn gov() -> String {
    policy(
        "acme.test.withdrawn-consent",
        "- tool: read\n  approval: true\n- tool: pay\n  approvers: [{role: finance, count: 1}, {role: security}]\n",
    )
}

/// `read(path)` as bot in session `s1`, let through by a grant: its token.
pub(crate) async fn granted(gw: &Gw, path: &str) -> String {
    let (s, b) = gw.propose("read", json!({"path": path})).await;
    assert_eq!(s, StatusCode::OK, "a grant should cover it: {b}");
    token_of(&b)
}

/// Redeems `token` for `read(path)` as bot: the status and body.
pub(crate) async fn redeem_read(gw: &Gw, token: &str, path: &str) -> (StatusCode, Value) {
    gw.redeem(token, "read", json!({"path": path}), None).await
}

/// Holds `read(path)` in `session` and has `key` approve it with `body`: the approval id.
pub(crate) async fn approved(gw: &Gw, session: &str, path: &str, key: &str, body: Value) -> String {
    let id = gw.held(session, "read", json!({"path": path})).await;
    let (s, b) = gw.decide_with(&id, key, body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    id
}

/// Attack (found by review): an agent with a grant (here `15m` on one exact call, and
/// `workspace` on the whole tool) proposes covered calls, keeps each single-use token, and
/// redeems them after the operator revoked the grants. The revocation voids them in its
/// transaction (`token.voided`): each redeem is `TOKEN_USED`. The token of the call the
/// operator approved themselves (the grant's own approval) is theirs, not the grant's, and
/// still redeems.
#[tokio::test]
async fn a_token_minted_under_a_grant_is_void_once_the_grant_is_revoked() {
    let gw = serve_policy(AGENTS, &gov()).await;
    let body = json!({"decision": "approve", "scope": "15m"});
    let origin = approved(&gw, "s1", "/a", OP, body).await;
    let kept = granted(&gw, "/a").await;
    let body = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    approved(&gw, "s1", "/w", OP, body).await;
    let stockpile = [
        ("/b", granted(&gw, "/b").await),
        ("/c", granted(&gw, "/c").await),
    ];
    let (s, b) = gw.get("/v1/grants", OP).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let ids: Vec<String> = b["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{b}");
    for gid in &ids {
        let (s, b) = gw
            .req("DELETE", &format!("/v1/grants/{gid}"), Some(OP), None)
            .await;
        assert!(s.is_success(), "{s} {b}");
    }
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 3);
    let (s, b) = redeem_read(&gw, &kept, "/a").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    for (path, token) in &stockpile {
        let (s, b) = redeem_read(&gw, token, path).await;
        assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    }
    let own = token_of(&gw.as_agent(&origin).await);
    let (s, b) = redeem_read(&gw, &own, "/a").await;
    assert_eq!(s, StatusCode::OK, "the operator's own approval stands: {b}");
    stop_verified(gw).await;
}

/// Defence in depth: a grant revoked without its tokens voided (by a gateway before the
/// voiding, simulated by revoking it in the database) still lets none of them redeem: the
/// redemption reads the grant (two primary-key reads), voids the token (`token.voided`, actor
/// who revoked it) and answers `TOKEN_USED`.
#[tokio::test]
async fn a_token_under_a_grant_revoked_behind_the_voiding_is_refused_at_redeem() {
    let gw = serve_policy(AGENTS, &gov()).await;
    let body = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    approved(&gw, "s1", "/w", OP, body).await;
    let token = granted(&gw, "/b").await;
    let revoke = "UPDATE grants SET revoked_at = 1, revoked_by = 'alice'";
    assert_eq!(gw.sql().exec(revoke, &[]), 1);
    let (s, b) = redeem_read(&gw, &token, "/b").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 1);
    assert_eq!(audit_count(&gw.data_dir, "token.redeemed"), 0);
    gw.stop().await;
}

/// Attack (found by review): alice's key is stolen; calls it approved (once, and through a
/// `workspace` grant) wait with unredeemed tokens. Alice is removed by `POST /v1/reload`: every
/// one of those tokens is void (`TOKEN_USED`); a token olaf approved, whom the reload left
/// alone, still redeems; the audit chain verifies.
#[tokio::test]
async fn tokens_approved_by_an_operator_a_reload_removes_are_void() {
    let dir = tempfile::tempdir().unwrap();
    let everyone = principals(&[
        ("alice", "kind: operator, roles: [finance]", OP),
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    let gw = reloading_gateway(dir.path(), &gov(), &everyone).await;
    let once = json!({"decision": "approve"});
    let by_alice = approved(&gw, "s1", "/x", OP, once.clone()).await;
    let by_olaf = approved(&gw, "s1", "/y", "olaf-key", once).await;
    let body = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    approved(&gw, "s1", "/w", OP, body).await;
    let under_grant = granted(&gw, "/b").await;
    let alices = token_of(&gw.as_agent(&by_alice).await);
    let olafs = token_of(&gw.as_agent(&by_olaf).await);
    let olaf_and_bot = principals(&[
        ("olaf", "kind: operator, roles: [ops]", "olaf-key"),
        ("bot", "kind: agent, agent_id: bot", BOT),
    ]);
    reloaded(&gw, dir.path(), &olaf_and_bot).await;
    for (token, path) in [(&alices, "/x"), (&under_grant, "/b")] {
        let (s, b) = redeem_read(&gw, token, path).await;
        assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    }
    let (s, b) = redeem_read(&gw, &olafs, "/y").await;
    assert_eq!(s, StatusCode::OK, "olaf's approval stands: {b}");
    stop_verified(gw).await;
}

/// Attack (found by review, with a quorum): `pay` needs one finance and one security vote.
/// On the first call alice and fred (both finance) and sam (security) voted: alice's vote was
/// not needed, fred fills finance without her. On the second only alice and sam voted. A
/// reload removing alice voids the second call's token (her vote was needed) and leaves the
/// first's.
#[tokio::test]
async fn a_quorum_token_is_void_only_when_a_removed_operators_vote_was_needed() {
    let dir = tempfile::tempdir().unwrap();
    let op = |name: &'static str, role: &'static str| {
        (
            name,
            format!("kind: operator, roles: [{role}]"),
            format!("{name}-key"),
        )
    };
    let people = [
        op("alice", "finance"),
        op("fred", "finance"),
        op("sam", "security"),
        op("olaf", "ops"),
    ];
    let list = |without: &str| {
        let mut l: Vec<(&str, &str, &str)> = people
            .iter()
            .filter(|p| p.0 != without)
            .map(|(n, w, k)| (*n, w.as_str(), k.as_str()))
            .collect();
        l.push(("bot", "kind: agent, agent_id: bot", BOT));
        principals(&l)
    };
    let gw = reloading_gateway(dir.path(), &gov(), &list("")).await;
    let pay = |amount: u64| json!({"amount": amount, "to": "acme"});
    let mut tokens = Vec::new();
    for (session, amount, voters) in [
        ("s1", 500, &["alice", "fred", "sam"][..]),
        ("s2", 501, &["alice", "sam"][..]),
    ] {
        let id = gw.held(session, "pay", pay(amount)).await;
        for v in voters {
            let (s, b) = gw.decide(&id, &format!("{v}-key"), "approve").await;
            assert_eq!(s, StatusCode::OK, "{b}");
        }
        let a = gw.as_agent(&id).await;
        assert_eq!(a["status"], "approved", "{a}");
        tokens.push(token_of(&a));
    }
    reloaded(&gw, dir.path(), &list("alice")).await;
    let (s, b) = gw.redeem(&tokens[1], "pay", pay(501), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let (s, b) = gw.redeem(&tokens[0], "pay", pay(500), None).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "fred's and sam's votes still meet it: {b}"
    );
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 1);
    stop_verified(gw).await;
}

/// The principals `ops` (name, roles, key), each an operator, and the kit's `bot` agent.
fn operators(ops: &[(&str, &str, &str)]) -> String {
    let roles: Vec<String> = ops
        .iter()
        .map(|(_, r, _)| format!("kind: operator, roles: [{r}]"))
        .collect();
    let mut list: Vec<(&str, &str, &str)> = ops
        .iter()
        .zip(&roles)
        .map(|((n, _, k), r)| (*n, r.as_str(), *k))
        .collect();
    list.push(("bot", "kind: agent, agent_id: bot", BOT));
    principals(&list)
}

/// Attack (found by review, the restart path): alice's key is stolen and approves a held call
/// once; its token waits unredeemed. The theft is found, alice is removed from the file and
/// the gateway restarted instead of reloaded. Start-up voids the token (`token.voided`, actor
/// `system:start-up`), as the reload would: redeeming it is `409 TOKEN_USED`. The token of a
/// call olaf approved, whom the file still has, redeems; the audit chain verifies.
#[tokio::test]
async fn a_restart_that_removes_an_operator_voids_the_tokens_of_the_calls_they_approved() {
    let dir = tempfile::tempdir().unwrap();
    let alice = ("alice", "finance", OP);
    let olaf = ("olaf", "ops", "olaf-key");
    let gw = reloading_gateway(dir.path(), &gov(), &operators(&[alice, olaf])).await;
    let once = json!({"decision": "approve"});
    let by_alice = approved(&gw, "s1", "/x", OP, once.clone()).await;
    let by_olaf = approved(&gw, "s1", "/y", "olaf-key", once).await;
    let alices = token_of(&gw.as_agent(&by_alice).await);
    let olafs = token_of(&gw.as_agent(&by_olaf).await);
    gw.stop().await;
    let gw = reloading_gateway(dir.path(), &gov(), &operators(&[olaf])).await;
    let (s, b) = redeem_read(&gw, &alices, "/x").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let (s, b) = redeem_read(&gw, &olafs, "/y").await;
    assert_eq!(s, StatusCode::OK, "olaf's approval stands: {b}");
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 1);
    stop_verified(gw).await;
}

/// Attack (found by review, the restart path with a rotated key): `pay` needs one finance and
/// one security vote. Alice's stolen key voted for the first call with sam (her vote needed),
/// for the second beside fred and sam (not needed). Alice's key is rotated in the file — same
/// name, same `finance` role, a new key — and the gateway restarted. Her votes kept the
/// binding of the key that cast them (migration 0038), not hers now: the first call's token is
/// void (`TOKEN_USED`), the second's, met by fred and sam without her, redeems.
#[tokio::test]
async fn a_restart_with_a_rotated_key_voids_the_tokens_its_needed_votes_approved() {
    let dir = tempfile::tempdir().unwrap();
    let with = |alice_key| {
        operators(&[
            ("alice", "finance", alice_key),
            ("fred", "finance", "fred-key"),
            ("sam", "security", "sam-key"),
        ])
    };
    let gw = reloading_gateway(dir.path(), &gov(), &with("alice-stolen-key")).await;
    let pay = |amount: u64| json!({"amount": amount, "to": "acme"});
    let mut tokens = Vec::new();
    for (session, amount, keys) in [
        ("s1", 500, &["alice-stolen-key", "sam-key"][..]),
        ("s2", 501, &["alice-stolen-key", "fred-key", "sam-key"][..]),
    ] {
        let id = gw.held(session, "pay", pay(amount)).await;
        for k in keys {
            let (s, b) = gw.decide(&id, k, "approve").await;
            assert_eq!(s, StatusCode::OK, "{b}");
        }
        tokens.push(token_of(&gw.as_agent(&id).await));
    }
    gw.stop().await;
    let gw = reloading_gateway(dir.path(), &gov(), &with("alice-new-key")).await;
    let (s, b) = gw.redeem(&tokens[0], "pay", pay(500), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let (s, b) = gw.redeem(&tokens[1], "pay", pay(501), None).await;
    assert_eq!(s, StatusCode::OK, "fred's and sam's votes meet it: {b}");
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 1);
    stop_verified(gw).await;
}

/// `GET path` at `gw` with session `cookie` (or none), redirects not followed.
async fn get_once(gw: &Gw, path: &str, cookie: Option<&str>) -> reqwest::Response {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut r = http.get(format!("{}{path}", gw.url));
    if let Some(c) = cookie {
        r = r.header("cookie", c);
    }
    r.send().await.unwrap()
}

/// Attack (found by review): a mail link scanner or chat preview bot fetches a notification's
/// single-use card link without a session; that used it up, and the approver then got `410`.
/// Without a session the link is only looked up: each such fetch is sent to the sign-in with
/// the link as `next`; the first signed-in fetch uses it (`303` to the card), the next is
/// `410`.
#[tokio::test]
async fn a_link_preview_without_a_session_does_not_use_up_the_card_link() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n";
    let (recv, gw) =
        crate::webhooks::hooked(dir.path(), rules, ("fred", &[]), "approval.vote").await;
    let id = gw
        .pending("pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let first = crate::webhooks::bodies(&recv, 1).await.remove(0);
    let link = first["links"]["open_once"].as_str().unwrap();
    let path = link.strip_prefix("https://assent.example.com").unwrap();
    for _ in 0..2 {
        let r = get_once(&gw, path, None).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            r.headers()["location"],
            format!("/ui/login?next={path}").as_str()
        );
    }
    let signed = gw.dashboard_sign_in(OP).await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let cookie = cookie_of(&signed);
    let r = get_once(&gw, path, Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()["location"],
        format!("/ui/approvals/{id}").as_str()
    );
    let r = get_once(&gw, path, Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::GONE);
    let r = get_once(&gw, path, None).await;
    assert_eq!(
        r.status(),
        StatusCode::GONE,
        "a used link is gone for everyone"
    );
    gw.stop().await;
}
