//! A newer single sign-on of one person supersedes the groups their earlier sign-ins decided
//! with (`dashboard::oidc::regroup`), through the real callback of a provider.

use super::provider::now_s;
use super::{begin, callback_req, session_of};
use crate::kit::{Gw, assert_error, token_of};
use crate::sso::{decide, decide_scoped, sso_session};
use reqwest::StatusCode;
use serde_json::json;

/// The provider signs `sub` in with `groups` for a sign-in begun at `gw` from `b`: the
/// callback's answer.
async fn sign_in_with(sc: &super::Scene, sub: &str, groups: &[&str]) -> reqwest::Response {
    let (gw, b, p) = (&sc.gw, &sc.b, &sc.p);
    let s = begin(gw, b, "", &[]).await.ok().unwrap();
    let code = format!("code-{}", s.query["state"]);
    p.issue(&code, sub, &s.query["nonce"], Some(now_s()));
    p.codes.lock().unwrap().get_mut(&code).unwrap()["groups"] = json!(groups);
    p.challenge(&code, &s.query["code_challenge"]);
    callback_req(gw, b, &s, &code, (&s.cookie, &[]))
        .send()
        .await
        .unwrap()
}

/// `GET /ui` with session cookie `cookie`: its status (`303` to the sign-in page: no session).
async fn dashboard(gw: &Gw, cookie: &str) -> StatusCode {
    crate::sec_backlog::signed_in_status(gw, "/ui", cookie).await
}

/// How many audit records of `kind` the actor `system:sign-in` wrote.
fn by_sign_in(gw: &Gw, kind: &str) -> i64 {
    gw.sql().int(
        "SELECT count(*) FROM audit WHERE kind = ?1 AND actor = 'system:sign-in'",
        &[kind.into()],
    )
}

/// A provider and a gateway of it whose `oidc.roles` map gives group `fin` the role
/// `finance` (which `pay` needs) and group `eng` the role `ops`.
async fn mapped() -> super::Scene {
    let p = super::provider::Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let roles = ("{fin: [finance], eng: [ops]}", "");
    let gw = super::gateway_mapped(dir.path(), &p, roles, |_| {}).await;
    super::Scene {
        p,
        gw,
        b: super::browser("127.0.0.1"),
        _dir: dir,
    }
}

/// Attack (found by review): contractors signed in by single sign-on with the provider's
/// group `fin` (role `finance`) made `workspace` grants for `pay`, and one approved another
/// payment whose token was not yet redeemed. The provider then took alice out of `fin` (she
/// keeps `eng`, role `ops`) and bob out of every group. Alice's next sign-in no longer gave
/// her `finance` and bob's was refused (no role), yet their grants kept letting every later
/// `pay` of that kind through, the token still redeemed, and alice's other session kept
/// deciding as `finance` for up to twelve hours: the gateway weighs such decisions by the
/// groups they were made with, and only the provider knows a person's groups now. A sign-in
/// now weighs them again by the groups in its ID token: the grants are revoked, the token
/// voided (its single decision was made with a role the new groups do not give), the session
/// ended; carol's grant stands, as does everything when the groups are the same.
#[tokio::test]
async fn a_sign_in_without_a_group_takes_back_what_earlier_sign_ins_decided_with_it() {
    let sc = mapped().await;
    let gw = &sc.gw;
    let both: (&[&str], &[&str]) = (&["finance", "ops"], &["fin", "eng"]);
    let (alice, csrf) = sso_session(gw, "oidc:alice", both);
    let (bob, csrf_bob) = sso_session(gw, "oidc:bob", (&["finance"], &["fin"]));
    let (carol, csrf_carol) = sso_session(gw, "oidc:carol", (&["finance"], &["fin"]));
    let people = [
        (&alice, &csrf, 500),
        (&bob, &csrf_bob, 600),
        (&carol, &csrf_carol, 900),
    ];
    for (who, csrf, amount) in people {
        let id = gw.held("s1", "pay", json!({"amount": amount})).await;
        let s = decide_scoped(gw, &id, (who, csrf), "workspace").await;
        assert!(s.is_success() || s.is_redirection(), "{s}");
    }
    let once = gw.held("s3", "pay", json!({"amount": 700})).await;
    let s = decide(gw, &once, &alice, &csrf).await;
    assert!(s.is_success() || s.is_redirection(), "{s}");
    let token = token_of(&gw.as_agent(&once).await);
    let covered = |amount: i64| async move {
        let (s, b) = gw.propose_in("s9", "pay", json!({"amount": amount})).await;
        assert!(s == StatusCode::OK || s == StatusCode::ACCEPTED, "{b}");
        s == StatusCode::OK
    };
    for amount in [500, 600, 900] {
        assert!(covered(amount).await, "the grant of {amount} covers");
    }

    // The same groups again: a session, and nothing taken back.
    let r = sign_in_with(&sc, "alice", &["fin", "eng"]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(session_of(&r).is_some());
    assert_eq!(dashboard(gw, &alice).await, StatusCode::OK);
    assert!(covered(500).await, "alice's grant stands");
    assert_eq!(by_sign_in(gw, "grant.revoked"), 0);

    // Alice is out of `fin`, still in `eng`: signed in as `ops`, and what `fin` gave is back.
    let r = sign_in_with(&sc, "alice", &["eng"]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(session_of(&r).is_some());
    assert!(!covered(500).await, "alice's grant is revoked");
    assert_eq!(by_sign_in(gw, "grant.revoked"), 1);
    let (s, b) = gw.redeem(&token, "pay", json!({"amount": 700}), None).await;
    assert_error(s, &b, StatusCode::CONFLICT, "TOKEN_USED");
    // That token, the grant's own approval's and those of the two calls the grant let through.
    assert_eq!(by_sign_in(gw, "token.voided"), 4);
    assert_eq!(
        dashboard(gw, &alice).await,
        StatusCode::SEE_OTHER,
        "alice's session holding `finance` is ended"
    );

    // Bob is out of every group: refused, and his grant is revoked all the same.
    let r = sign_in_with(&sc, "bob", &["contractors"]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(session_of(&r).is_none());
    assert!(!covered(600).await, "bob's grant is revoked");
    assert_eq!(by_sign_in(gw, "grant.revoked"), 2);
    assert_eq!(dashboard(gw, &bob).await, StatusCode::SEE_OTHER);

    assert!(covered(900).await, "carol's grant stands");
    assert_eq!(dashboard(gw, &carol).await, StatusCode::OK);
    sc.gw.stop().await;
}
