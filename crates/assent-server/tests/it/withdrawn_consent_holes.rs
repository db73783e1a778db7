//! The holes a review found in withdrawing consent from issued tokens
//! (`withdrawn_consent.rs`): a call a grant let through rests on the grant's maker even once
//! the grant has expired (a reload removing the maker voids its token); the covering grant is
//! read from the sealed decision (`grant:<gid>`), not only from the unsealed
//! `approvals.grant_id` or `grants.approval_id`, at revocation and at redemption, and `audit
//! verify` reports the first column changed; a token voided at redemption is voided by
//! `system:redeem`, naming who revoked the grant;
//! `audit verify` says why a voided token was voided; and an operator's key rotated under the
//! same name, by a restart or a reload, takes back what the old key approved by single
//! decision, also when a database writer stripped the decision's key binding (the settlement
//! seal covers it, and `audit verify` reports it); an agent removed at restart takes back what
//! its user approved in the client; single sign-on single decisions stand across an unchanged
//! restart, and fall when their groups map to no role any more. Either backend.

use crate::backend::audit_count;
use crate::grant_revocation::{reloaded, reloading_gateway, reloading_gateway_with};
use crate::kit::{AGENTS, BOT, Gw, OP, assert_error, policy, token_of};
use crate::reload::principals;
use crate::withdrawn_consent::{granted, redeem_read};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// `read` is held for a person.
fn gov() -> String {
    policy(
        "acme.test.withdrawn-consent-holes",
        "- tool: read\n  approval: true\n",
    )
}

/// The first problem `audit verify` reports, if any.
fn verify_problem(gw: &Gw) -> Option<String> {
    crate::backend::audit_problem(&gw.data_dir).map(|p| p.reason)
}

/// Holds `read(path)` in `s1` and has `key` approve it with `body`: the approval id.
async fn approved(gw: &Gw, path: &str, key: &str, body: Value) -> String {
    crate::withdrawn_consent::approved(gw, "s1", path, key, body).await
}

/// Alice's `workspace` grant over the whole of `read` (its own call `/w`) and a call it let
/// through (`/b`): that call's token.
async fn covered_by_a_workspace_grant(gw: &Gw) -> String {
    let body = json!({"decision": "approve", "scope": "workspace", "whole_tool": true});
    approved(gw, "/w", OP, body).await;
    granted(gw, "/b").await
}

/// Alice revokes the one grant there is (`DELETE /v1/grants/{id}`): its id.
async fn revoke_the_grant(gw: &Gw) -> String {
    let (s, b) = gw.get("/v1/grants", OP).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let gid = b["grants"][0]["id"].as_str().unwrap().to_string();
    let (s, b) = gw
        .req("DELETE", &format!("/v1/grants/{gid}"), Some(OP), None)
        .await;
    assert!(s.is_success(), "{s} {b}");
    gid
}

/// The `token.voided` records: `(actor, data)` each, oldest first.
fn voided_records(gw: &Gw) -> Vec<(String, Value)> {
    let sql = "SELECT actor, data FROM audit WHERE kind = 'token.voided' ORDER BY seq";
    gw.sql()
        .rows(sql, &[])
        .into_iter()
        .map(|r| (r[0].clone(), serde_json::from_str(&r[1]).unwrap()))
        .collect()
}

/// A gateway on `dir` reloading `conf/assent.yaml` (principals `list`) whose session grants
/// lapse 1.5 s after they are made.
async fn reloading_with_short_grants(dir: &std::path::Path, list: &str) -> Gw {
    reloading_gateway_with(dir, &gov(), list, |st| {
        st.settings.session_grant_max_ms = 1_500;
    })
    .await
}

/// olaf, an operator of `ops` holding `olaf-key`: he reloads.
const OLAF: (&str, &str, &str) = ("olaf", "kind: operator, roles: [ops]", "olaf-key");

/// The agent bot, holding the kit's agent key.
const BOT_AGENT: (&str, &str, &str) = ("bot", "kind: agent, agent_id: bot", BOT);

/// The principals alice (an operator of `finance` holding `alice_key`), [`OLAF`] and
/// [`BOT_AGENT`].
fn alice_olaf_bot(alice_key: &str) -> String {
    let alice = ("alice", "kind: operator, roles: [finance]", alice_key);
    principals(&[alice, OLAF, BOT_AGENT])
}

/// Stops `gw` and starts [`reloading_gateway`] again over the same `dir`, with governance
/// `gov` and principals `list` written to its file: a restart.
async fn restarted(gw: Gw, dir: &std::path::Path, gov: &str, list: &str) -> Gw {
    gw.stop().await;
    reloading_gateway(dir, gov, list).await
}

/// Holds `read(path)` in `s1` and has `key` approve it once (a single decision): the approval
/// id and its token.
async fn approved_once(gw: &Gw, path: &str, key: &str) -> (String, String) {
    let id = approved(gw, path, key, json!({"decision": "approve"})).await;
    let token = token_of(&gw.as_agent(&id).await);
    (id, token)
}

/// A [`reloading_gateway`] on `dir` serving [`alice_olaf_bot`] with alice's key
/// `alice-stolen-key`, which approves `read(/x)` once; olaf approves `read(/y)` once: the
/// gateway, alice's approval id, her token and olaf's.
async fn stolen_key_and_olaf_approve(dir: &std::path::Path) -> (Gw, String, String, String) {
    let gw = reloading_gateway(dir, &gov(), &alice_olaf_bot("alice-stolen-key")).await;
    let once = json!({"decision": "approve"});
    let by_alice = approved(&gw, "/x", "alice-stolen-key", once.clone()).await;
    let by_olaf = approved(&gw, "/y", "olaf-key", once).await;
    let alices = token_of(&gw.as_agent(&by_alice).await);
    let olafs = token_of(&gw.as_agent(&by_olaf).await);
    (gw, by_alice, alices, olafs)
}

/// After a restart: alice's token from [`stolen_key_and_olaf_approve`] is `TOKEN_USED`,
/// olaf's redeems, and the one `token.voided` record is start-up's, naming alice, its `why`
/// containing `why`.
async fn alices_alone_voided_at_start_up(gw: &Gw, alices: &str, olafs: &str, why: &str) {
    let (s, b) = redeem_read(gw, alices, "/x").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let (s, b) = redeem_read(gw, olafs, "/y").await;
    assert_eq!(s, StatusCode::OK, "olaf's approval stands: {b}");
    let voided = voided_records(gw);
    assert_eq!(voided.len(), 1, "{voided:?}");
    let (actor, data) = &voided[0];
    assert_eq!(actor, "system:start-up", "{data}");
    assert_eq!(data["principals"], json!(["alice"]), "{data}");
    assert!(data["why"].as_str().unwrap().contains(why), "{data}");
}

/// Every `read` is held, and the agent's user may approve it in the client.
const IN_CLIENT: &str = "- tool: read\n  approval: true\n  in_client_approval: true\n";

/// Holds `read(path)` in `s1` and has the agent's user approve it in the client (bot's key):
/// the approval id and its token.
async fn approved_in_client(gw: &Gw, path: &str) -> (String, String) {
    let id = gw.held("s1", "read", json!({"path": path})).await;
    let url = format!("/v1/approvals/{id}/user-decision");
    let (s, b) = gw.post(&url, BOT, json!({"decision": "approve"})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let token = token_of(&gw.as_agent(&id).await);
    (id, token)
}

/// Attack (found by review): alice's stolen key approves a call "for this session, the whole
/// tool"; the agent stockpiles covered tokens just before the grant lapses. The grant expires,
/// so the reload that removes alice revokes nothing, and the covered call's decision is
/// `grant:<gid>`, not alice's name: the token stayed redeemable. It rests on the grant's maker
/// now: the reload voids it (`TOKEN_USED`), and the audit chain verifies.
#[tokio::test]
async fn a_token_under_an_expired_grant_of_an_operator_a_reload_removes_is_void() {
    let dir = tempfile::tempdir().unwrap();
    let gw = reloading_with_short_grants(dir.path(), &alice_olaf_bot(OP)).await;
    let body = json!({"decision": "approve", "scope": "session", "whole_tool": true});
    approved(&gw, "/a", OP, body).await;
    let stockpiled = granted(&gw, "/b").await;
    tokio::time::sleep(std::time::Duration::from_millis(1_700)).await;
    let (s, b) = gw.propose("read", json!({"path": "/c"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "the grant has lapsed: {b}");
    reloaded(&gw, dir.path(), &principals(&[OLAF, BOT_AGENT])).await;
    let (s, b) = redeem_read(&gw, &stockpiled, "/b").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    assert_eq!(audit_count(&gw.data_dir, "token.redeemed"), 0);
    assert_eq!(verify_problem(&gw), None);
    gw.stop().await;
}

/// Attack (found by review): a database writer clears `approvals.grant_id` (no seal covers
/// it) on the calls a `workspace` grant let through; the grant's revocation then found none
/// of their tokens to void, and the redemption's check of the grant joined on that column:
/// the token redeemed. The covering grant is read from the sealed decision (`grant:<gid>`) as
/// well: the revocation voids the token in its transaction (`token.voided` by alice, who
/// revoked it; before it did, the redemption voided it, `system:redeem`: the test of a grant
/// revoked behind the voiding below), redeeming it is `TOKEN_USED`, and `audit verify`
/// reports the cleared column against the `grant.used` record.
#[tokio::test]
async fn a_grant_id_cleared_in_the_database_does_not_let_a_revoked_grants_token_redeem() {
    let gw = crate::kit::serve_policy(AGENTS, &gov()).await;
    let token = covered_by_a_workspace_grant(&gw).await;
    let clear = "UPDATE approvals SET grant_id = NULL";
    assert!(gw.sql().exec(clear, &[]) >= 1);
    let problem = verify_problem(&gw).expect("the cleared grant_id is reported");
    assert!(
        problem.contains("grant.used") && problem.contains("names grant none"),
        "{problem}"
    );
    let gid = revoke_the_grant(&gw).await;
    let (s, b) = redeem_read(&gw, &token, "/b").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    assert_eq!(audit_count(&gw.data_dir, "token.redeemed"), 0);
    let voided = voided_records(&gw);
    assert_eq!(voided.len(), 1, "{voided:?}");
    let (actor, data) = &voided[0];
    assert_eq!(actor, "alice", "{data}");
    assert_eq!(data["grant_id"], gid.as_str(), "{data}");
    assert_eq!(data["why"], "the grant was revoked", "{data}");
    gw.stop().await;
}

/// A token voided because its grant was revoked and then set unused again in the database
/// (it could be redeemed a second time) is reported by `audit verify` with the reason its
/// record gives, not as one "voided by a restore".
#[tokio::test]
async fn verify_names_why_a_token_was_voided_when_it_is_set_unused_again() {
    let gw = crate::kit::serve_policy(AGENTS, &gov()).await;
    let token = covered_by_a_workspace_grant(&gw).await;
    revoke_the_grant(&gw).await;
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 1);
    assert_eq!(verify_problem(&gw), None);
    let unuse = "UPDATE tokens SET used_at = NULL";
    assert!(gw.sql().exec(unuse, &[]) >= 1);
    let problem = verify_problem(&gw).expect("a voided token set unused is reported");
    assert!(
        problem.contains("was voided because the grant was revoked")
            && problem.contains("could be redeemed again")
            && !problem.contains("restore"),
        "{problem}"
    );
    let (s, b) = redeem_read(&gw, &token, "/b").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    gw.stop().await;
}

/// Found by review: any change to a principal in a reload (a role added, a Slack account
/// given) withdrew everything they stood behind, voiding every outstanding token they
/// approved. Adding a role to alice takes nothing back: her approved call's token still
/// redeems, and her `workspace` grant still covers the tool; removing the role again does
/// withdraw (her next token is void).
#[tokio::test]
async fn a_reload_that_only_adds_a_role_leaves_the_operators_tokens_standing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = reloading_with_short_grants(dir.path(), &alice_olaf_bot(OP)).await;
    let once = approved(&gw, "/x", OP, json!({"decision": "approve"})).await;
    let covered = covered_by_a_workspace_grant(&gw).await;
    let alices = token_of(&gw.as_agent(&once).await);
    let more = ("alice", "kind: operator, roles: [finance, ops]", OP);
    let b = reloaded(&gw, dir.path(), &principals(&[more, OLAF, BOT_AGENT])).await;
    assert_eq!(b["changed"], json!(["alice"]), "{b}");
    let (s, b) = redeem_read(&gw, &alices, "/x").await;
    assert_eq!(s, StatusCode::OK, "a role added takes nothing back: {b}");
    let (s, b) = redeem_read(&gw, &covered, "/b").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let later = granted(&gw, "/c").await;
    assert_eq!(audit_count(&gw.data_dir, "token.voided"), 0);
    let fewer = ("alice", "kind: operator, roles: [ops]", OP);
    reloaded(&gw, dir.path(), &principals(&[fewer, OLAF, BOT_AGENT])).await;
    let (s, b) = redeem_read(&gw, &later, "/c").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    assert_eq!(verify_problem(&gw), None);
    gw.stop().await;
}

/// Attack (found by review, the restart path with a rotated key and a single decision): alice's
/// key is stolen and approves a held call once (no quorum); its token waits unredeemed. The
/// theft is found and alice's key rotated in the file — same name, same role, a new key — and
/// the gateway restarted. A single decision kept no key binding and was weighed by alice's
/// name alone, so the token redeemed. It keeps the binding of the key that made it now
/// (migration 0052): start-up voids the token (`token.voided` by `system:start-up`, naming
/// alice), redeeming it is `409 TOKEN_USED`. The call olaf approved, whose key did not change,
/// redeems; the audit chain verifies.
#[tokio::test]
async fn a_restart_with_a_rotated_key_voids_the_tokens_its_single_decisions_approved() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _, alices, olafs) = stolen_key_and_olaf_approve(dir.path()).await;
    let gw = restarted(gw, dir.path(), &gov(), &alice_olaf_bot("alice-new-key")).await;
    alices_alone_voided_at_start_up(&gw, &alices, &olafs, "key").await;
    assert_eq!(verify_problem(&gw), None);
    gw.stop().await;
}

/// The same theft, the key rotated by a reload (`POST /v1/reload`, as SIGHUP does) instead of a
/// restart: the reload takes back what alice's old key approved by single decision (its token
/// is `TOKEN_USED`, voided by the reloading operator), and what her new key approves after it
/// redeems — also after a restart, which finds the new decision bound to the key in force.
#[tokio::test]
async fn a_reload_that_rotates_a_key_voids_the_tokens_its_single_decisions_approved() {
    let dir = tempfile::tempdir().unwrap();
    let gw = reloading_gateway(dir.path(), &gov(), &alice_olaf_bot("alice-stolen-key")).await;
    let (_, stolen) = approved_once(&gw, "/x", "alice-stolen-key").await;
    let b = reloaded(&gw, dir.path(), &alice_olaf_bot("alice-new-key")).await;
    assert_eq!(b["changed"], json!(["alice"]), "{b}");
    let (s, b) = redeem_read(&gw, &stolen, "/x").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let voided = voided_records(&gw);
    assert_eq!(voided.len(), 1, "{voided:?}");
    assert_eq!(voided[0].0, "olaf", "{:?}", voided[0].1);
    let (_, fresh) = approved_once(&gw, "/y", "alice-new-key").await;
    let gw = restarted(gw, dir.path(), &gov(), &alice_olaf_bot("alice-new-key")).await;
    let (s, b) = redeem_read(&gw, &fresh, "/y").await;
    assert_eq!(s, StatusCode::OK, "the new key's approval stands: {b}");
    assert_eq!(voided_records(&gw).len(), 1);
    assert_eq!(verify_problem(&gw), None);
    gw.stop().await;
}

/// [`covered_by_a_workspace_grant`], whose token is returned; then `grants.approval_id`
/// pointed at the covered call (`/b`), as a database writer would (no check of the unsealed
/// column stops it): the grant's id.
async fn grant_pointed_at_its_covered_call(gw: &Gw) -> (String, String) {
    let token = covered_by_a_workspace_grant(gw).await;
    let point = "UPDATE grants SET approval_id = \
                 (SELECT approval_id FROM decisions WHERE substr(actor, 1, 6) = 'grant:')";
    assert_eq!(gw.sql().exec(point, &[]), 1);
    let gid = gw.sql().rows("SELECT id FROM grants", &[])[0][0].clone();
    (gid, token)
}

/// Attack (found by review): the tokens a revoked grant had let through were found by
/// `approvals.grant_id` other than the grant's own approval's, `grants.approval_id`, both
/// unsealed. A database writer points the grant's `approval_id` at a covered call: its
/// revocation (`DELETE /v1/grants/{id}`) spared that call's token as the grant's "own", and
/// the redemption did too: it redeemed. The covered call's sealed decision (`grant:<gid>`)
/// names the grant: the revocation voids its token (`token.voided` by alice, who revoked it)
/// and redeeming it is `TOKEN_USED`.
#[tokio::test]
async fn a_grant_pointed_at_a_covered_call_does_not_spare_its_token_from_revocation() {
    let gw = crate::kit::serve_policy(AGENTS, &gov()).await;
    let (gid, token) = grant_pointed_at_its_covered_call(&gw).await;
    let (s, b) = gw
        .req("DELETE", &format!("/v1/grants/{gid}"), Some(OP), None)
        .await;
    assert!(s.is_success(), "{s} {b}");
    // The covered call's token, and the grant's real own approval's, which the pointed
    // column now takes for a covered call (failing closed).
    let voided = voided_records(&gw);
    assert_eq!(voided.len(), 2, "voided by the revocation: {voided:?}");
    for (actor, data) in &voided {
        assert_eq!((actor.as_str(), &data["grant_id"]), ("alice", &json!(gid)));
    }
    let (s, b) = redeem_read(&gw, &token, "/b").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    assert_eq!(audit_count(&gw.data_dir, "token.redeemed"), 0);
    gw.stop().await;
}

/// The same pointed grant revoked behind the voiding (in the database, as by a gateway before
/// it): the redemption reads the covering grant from the sealed decision and does not take the
/// covered call for the grant's own: it voids the token (`system:redeem`, `TOKEN_USED`).
#[tokio::test]
async fn a_grant_pointed_at_a_covered_call_and_revoked_behind_the_voiding_is_refused_at_redeem() {
    let gw = crate::kit::serve_policy(AGENTS, &gov()).await;
    let (_, token) = grant_pointed_at_its_covered_call(&gw).await;
    let revoke = "UPDATE grants SET revoked_at = 1, revoked_by = 'alice'";
    assert_eq!(gw.sql().exec(revoke, &[]), 1);
    let (s, b) = redeem_read(&gw, &token, "/b").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let voided = voided_records(&gw);
    assert_eq!(voided.len(), 1, "{voided:?}");
    assert_eq!(voided[0].0, "system:redeem", "{:?}", voided[0].1);
    gw.stop().await;
}

/// Found by review: start-up weighed every approving decision as an operator's, so the agent's
/// own user's approval in the client (`user-of:bot`, no operator behind it) fell at every
/// restart and its unredeemed token was voided. It stands while the agent is configured: the
/// token redeems after a restart that changes nothing, and nothing is voided.
#[tokio::test]
async fn a_restart_leaves_the_token_the_agents_user_approved_in_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy("acme.test.withdrawn-consent-in-client", IN_CLIENT);
    let list = principals(&[OLAF, BOT_AGENT]);
    let gw = reloading_gateway(dir.path(), &gov, &list).await;
    let (_, token) = approved_in_client(&gw, "/x").await;
    let gw = restarted(gw, dir.path(), &gov, &list).await;
    let (s, b) = redeem_read(&gw, &token, "/x").await;
    assert_eq!(s, StatusCode::OK, "the user's approval stands: {b}");
    assert_eq!(voided_records(&gw), vec![]);
    gw.stop().await;
}

/// Attack (found by review): the agent's own user approves R1/R2 calls in the client with the
/// agent's key, so a stolen agent key approves them itself. Its in-client decision
/// (`user-of:bot`) kept no key binding and was weighed by the agent's name: a reload rotating
/// bot's key voided nothing (the reload's names held `bot`, never `user-of:bot`), and a
/// restart kept the token while an agent `bot` was configured, whatever its key. The decision
/// now keeps the binding of the agent key that sent it: a reload that rotates the key voids
/// the token it approved, and so does a restart under a rotated key; the new key's own
/// in-client approval stands across a restart.
#[tokio::test]
async fn a_rotated_agent_key_takes_back_what_it_approved_in_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy("acme.test.withdrawn-consent-in-client-key", IN_CLIENT);
    let with = |key| principals(&[OLAF, ("bot", "kind: agent, agent_id: bot", key)]);
    let in_client = async |gw: &Gw, key: &str, path: &str| {
        let call = json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {"path": path}});
        let (s, b) = gw.post("/v1/tool-calls", key, call).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        let id = b["approval_id"].as_str().unwrap().to_string();
        let url = format!("/v1/approvals/{id}/user-decision");
        let (s, b) = gw.post(&url, key, json!({"decision": "approve"})).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        let (s, b) = gw.get(&format!("/v1/approvals/{id}"), key).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        b["token"].clone()
    };
    let gw = reloading_gateway(dir.path(), &gov, &with(BOT)).await;
    let stolen = in_client(&gw, BOT, "/x").await;
    // A reload rotating bot's key.
    reloaded(&gw, dir.path(), &with("bot-new-key")).await;
    let (s, b) = gw
        .redeem_as("bot-new-key", &stolen, "read", json!({"path": "/x"}))
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    assert_eq!(voided_records(&gw).len(), 1);
    // Approved in the client with the new key, then the key rotated by a restart: voided; the
    // other, approved with the key the restart keeps, redeems.
    let before = in_client(&gw, "bot-new-key", "/y").await;
    let gw = restarted(gw, dir.path(), &gov, &with("bot-third-key")).await;
    let (s, b) = gw
        .redeem_as("bot-third-key", &before, "read", json!({"path": "/y"}))
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let kept = in_client(&gw, "bot-third-key", "/z").await;
    let gw = restarted(gw, dir.path(), &gov, &with("bot-third-key")).await;
    let (s, b) = gw
        .redeem_as("bot-third-key", &kept, "read", json!({"path": "/z"}))
        .await;
    assert_eq!(s, StatusCode::OK, "the current key's approval stands: {b}");
    let voided = voided_records(&gw);
    assert_eq!(voided.len(), 2, "{voided:?}");
    assert_eq!(voided[1].0, "system:start-up", "{:?}", voided[1].1);
    assert_eq!(verify_problem(&gw), None);
    gw.stop().await;
}

/// Attack (found by review): alice's stolen key approves a held call once; a database writer
/// then clears the decision's key binding (`UPDATE decisions SET key_binding = NULL`), which
/// start-up cannot tell from a decision made before bindings were kept (migration 0052), so
/// after alice's key was rotated and the gateway restarted her decision was weighed by her
/// name alone: the token redeemed, and `audit verify` reported nothing. The settlement seal
/// covers the binding: `audit verify` reports the settlement that no longer holds it, and
/// start-up voids the token (`system:start-up`, failing closed), `409 TOKEN_USED`; olaf's
/// untouched approval redeems.
#[tokio::test]
async fn a_key_binding_stripped_in_the_database_does_not_outlive_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, by_alice, alices, olafs) = stolen_key_and_olaf_approve(dir.path()).await;
    assert_eq!(verify_problem(&gw), None);
    let strip = "UPDATE decisions SET key_binding = NULL WHERE actor = 'alice'";
    assert_eq!(gw.sql().exec(strip, &[]), 1);
    let problem = verify_problem(&gw).expect("the stripped binding is reported");
    assert!(
        problem.contains(&by_alice) && problem.contains("does not hold its seal"),
        "{problem}"
    );
    let gw = restarted(gw, dir.path(), &gov(), &alice_olaf_bot("alice-new-key")).await;
    alices_alone_voided_at_start_up(&gw, &alices, &olafs, "seal").await;
    assert_eq!(audit_count(&gw.data_dir, "token.redeemed"), 1);
    gw.stop().await;
}

/// The agent whose user approved a call in the client is removed from the file and the
/// gateway restarted: nothing stands behind the in-client decision (`user-of:bot`), so
/// start-up voids its token (`system:start-up`, naming `user-of:bot`); configured again, the
/// agent redeems nothing with it (`TOKEN_USED`).
#[tokio::test]
async fn a_restart_without_the_agent_voids_the_token_its_user_approved_in_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy("acme.test.withdrawn-consent-agent-gone", IN_CLIENT);
    let with_bot = principals(&[OLAF, BOT_AGENT]);
    let gw = reloading_gateway(dir.path(), &gov, &with_bot).await;
    let (id, token) = approved_in_client(&gw, "/x").await;
    let gw = restarted(gw, dir.path(), &gov, &principals(&[OLAF])).await;
    // Answered once start-up is done (the voiding runs before the gateway serves).
    let (s, b) = gw.get(&format!("/v1/approvals/{id}"), "olaf-key").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let voided = voided_records(&gw);
    assert_eq!(voided.len(), 1, "{voided:?}");
    assert_eq!(voided[0].0, "system:start-up", "{:?}", voided[0].1);
    assert_eq!(voided[0].1["principals"], json!(["user-of:bot"]));
    let gw = restarted(gw, dir.path(), &gov, &with_bot).await;
    let (s, b) = redeem_read(&gw, &token, "/x").await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    gw.stop().await;
}

/// One finance approval settles a `pay` call.
const PAY_ONCE: &str = "- tool: pay\n  approvers: [finance]\n";

/// Holds `pay(amount)` in session `s1` on `gw` and has the single sign-on session of `name`
/// (groups `groups`, role `finance`) approve it once from the dashboard: the token.
async fn approved_by_sso(gw: &Gw, amount: i64, name: &str, groups: &[&str]) -> String {
    let id = gw.held("s1", "pay", json!({"amount": amount})).await;
    let (cookie, csrf) = crate::sso::sso_session(gw, name, (&["finance"], groups));
    let s = crate::sso::decide(gw, &id, &cookie, &csrf).await;
    assert!(s.is_success() || s.is_redirection(), "{s}");
    token_of(&gw.as_agent(&id).await)
}

/// Single decisions made by single sign-on — an unlinked `oidc:` operator's and one linked to
/// a configured principal (gina) — survive a restart that changes nothing (no over-voiding):
/// their tokens redeem. Attack (found by review): a single decision keeps no roles, so the
/// check that its groups still map to the roles it decided with held vacuously: a restart
/// whose `oidc.roles` map gives the unlinked decider's group (`fin`) no role at all — to cut
/// contractors off — left what carol had approved redeemable. Its groups must still map to some
/// role: start-up voids that token (`TOKEN_USED`); the decision whose groups still map
/// (`opsgroup`) stands.
#[tokio::test]
async fn sso_single_decisions_stand_across_a_restart_until_their_groups_map_to_no_role() {
    use crate::sso::{GOOD, linked_with};
    let dir = tempfile::tempdir().unwrap();
    let gina = "gina@example.com";
    let gw = linked_with(dir.path(), PAY_ONCE, GOOD, gina).await;
    let mallorys = approved_by_sso(&gw, 501, "oidc:mallory", &["fin"]).await;
    let ginas = approved_by_sso(&gw, 502, &format!("oidc:{gina}"), &["fin"]).await;
    gw.stop().await;
    let gw = linked_with(dir.path(), PAY_ONCE, GOOD, gina).await;
    for (token, amount) in [(&mallorys, 501), (&ginas, 502)] {
        let (s, b) = gw
            .redeem(token, "pay", json!({"amount": amount}), None)
            .await;
        assert_eq!(s, StatusCode::OK, "an unchanged restart voids nothing: {b}");
    }
    assert_eq!(voided_records(&gw), vec![]);
    let cut = approved_by_sso(&gw, 503, "oidc:carol", &["fin"]).await;
    let kept = approved_by_sso(&gw, 504, "oidc:bo", &["fin", "opsgroup"]).await;
    gw.stop().await;
    // `fin` maps to nothing now; `opsgroup` gives `finance` as well.
    let moved = GOOD.replace(
        "roles: {fin: [finance], opsgroup: [ops]}",
        "roles: {opsgroup: [ops, finance]}",
    );
    let gw = linked_with(dir.path(), PAY_ONCE, &moved, gina).await;
    let (s, b) = gw.redeem(&cut, "pay", json!({"amount": 503}), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    let (s, b) = gw.redeem(&kept, "pay", json!({"amount": 504}), None).await;
    assert_eq!(s, StatusCode::OK, "bo's groups still map to a role: {b}");
    let voided = voided_records(&gw);
    assert_eq!(voided.len(), 1, "{voided:?}");
    assert_eq!(voided[0].1["principals"], json!(["oidc:carol"]));
    gw.stop().await;
}
