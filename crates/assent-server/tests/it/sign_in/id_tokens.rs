//! What an ID token must be to sign anyone in: signed with the provider's published keys
//! (never an HMAC keyed with the client secret, whatever discovery lists); and a name claim
//! a configured `sso` could hold (no whitespace, control or invisible characters); and the
//! session it starts holds only with the provider it signed in through.

use super::provider::{Provider, now_s};
use super::{Scene, begin, browser, callback_req, finish_own, gateway, gateway_with, scene};
use super::{session_of, signed_in, signs_in};
use crate::kit::Gw;
use reqwest::StatusCode;
use serde_json::json;

/// Asserts that callback answer `r` is a `403` that started no session, its page saying
/// `says`.
async fn refused(r: reqwest::Response, says: &str) {
    assert!(session_of(&r).is_none(), "a session was started");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let page = r.text().await.unwrap();
    assert!(page.contains(says), "{page}");
}

/// Attack (found by review): the ID token algorithms allowed were those the provider's
/// discovery document listed; with a client secret, the library then accepts HS256 tokens
/// keyed with that secret, so anyone who learnt it (it sits in the gateway's environment and
/// goes with every code exchange) and could have such a token answered signed in as anyone.
/// The provider here lists HS256 and signs the ID token HS256 with the client secret: the
/// callback is refused; signed RS256 again, the sign-in goes through.
#[tokio::test]
async fn an_id_token_keyed_with_the_client_secret_is_refused() {
    let Scene { p, gw, b, _dir } = scene().await;
    p.sign_hs256(Some("secret"));
    let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let r = finish_own(&gw, &p, &b, &s, Some(now_s())).await;
    refused(r, "The ID token was refused").await;
    p.sign_hs256(None);
    signs_in(&gw, &p, &b).await;
    gw.stop().await;
}

/// Attack (found by review): a name claim's value was refused only for control characters,
/// while a configured `sso` (and a principal's name) may hold no whitespace nor invisible
/// characters. With `name_claim: preferred_username`, whoever could pick their username at
/// the provider signed in as `oidc:olga\u{200b}@x` — missing the link of `sso: olga@x`, exact
/// and loose, and shown everywhere exactly like `oidc:olga@x`. Such a name (zero-width, bidi,
/// a space) is a `403` saying why, and starts no session; a plain one signs in.
#[tokio::test]
async fn an_sso_name_with_invisible_characters_is_refused() {
    let p = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_with(dir.path(), &p, ", name_claim: preferred_username", |_| {}).await;
    let b = browser("127.0.0.1");
    for name in ["olga\u{200b}@x", "\u{202e}x@aglo", "olga @x", "olga@x"] {
        let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
        let code = format!("code-{}", s.query["state"]);
        p.issue(&code, "123", &s.query["nonce"], Some(now_s()));
        p.codes.lock().unwrap().get_mut(&code).unwrap()["preferred_username"] = json!(name);
        let r = callback_req(&gw, &b, &s, &code, (&s.cookie, &[]))
            .send()
            .await
            .unwrap();
        if name == "olga@x" {
            signed_in(r).await;
        } else {
            refused(r, "without whitespace, control or invisible characters").await;
        }
    }
    gw.stop().await;
}

/// `GET /ui` at `gw` from `b` with session `cookie`: its status.
async fn dashboard(gw: &Gw, b: &reqwest::Client, cookie: &str) -> StatusCode {
    let r = b.get(format!("{}/ui", gw.url)).header("cookie", cookie);
    r.send().await.unwrap().status()
}

/// Attack (found by review): a single sign-on session was `oidc:<sub>` and its groups, tied
/// to no provider. After a restart with another issuer, a 12-hour session of the old issuer's
/// `sub` kept working — and once an admin linked `sso: <sub>` for the new issuer's person of
/// that `sub`, it acted as that principal. A session is bound to the issuer and client id it
/// signed in through: it holds across a restart with the same provider, and signs no one in
/// on the gateway restarted with another (over the same database).
#[tokio::test]
async fn an_sso_session_signs_no_one_in_once_the_provider_changed() {
    let (a, other) = (Provider::start().await, Provider::start().await);
    let dir = tempfile::tempdir().unwrap();
    let b = browser("127.0.0.1");
    let gw = gateway(dir.path(), &a, |_| {}).await;
    let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let r = finish_own(&gw, &a, &b, &s, Some(now_s())).await;
    let cookie = session_of(&r).unwrap();
    signed_in(r).await;
    assert_eq!(dashboard(&gw, &b, &cookie).await, StatusCode::OK);
    gw.stop().await;
    let gw = gateway(dir.path(), &a, |_| {}).await;
    assert_eq!(
        dashboard(&gw, &b, &cookie).await,
        StatusCode::OK,
        "same provider"
    );
    gw.stop().await;
    let gw = gateway(dir.path(), &other, |_| {}).await;
    let status = dashboard(&gw, &b, &cookie).await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "another issuer: to the sign-in"
    );
    gw.stop().await;
}

/// A sign-in begun at `gw` from `b`, its code issued for `sub` with the claims `edit` changes,
/// for PKCE challenge `challenge` (`None`: the sign-in's own): the callback's answer.
async fn callback_with(
    (gw, p, b): (&Gw, &Provider, &reqwest::Client),
    edit: impl FnOnce(&mut serde_json::Value),
    challenge: Option<&str>,
) -> reqwest::Response {
    let s = begin(gw, b, "", &[]).await.ok().unwrap();
    let code = format!("code-{}", s.query["state"]);
    p.issue(&code, "alice", &s.query["nonce"], Some(now_s()));
    edit(p.codes.lock().unwrap().get_mut(&code).unwrap());
    p.challenge(&code, challenge.unwrap_or(&s.query["code_challenge"]));
    let sent = (s.cookie.as_str(), &[] as &[(&str, &str)]);
    callback_req(gw, b, &s, &code, sent).send().await.unwrap()
}

/// A change to an ID token's claims.
type Edit = fn(&mut serde_json::Value);

/// An ID token from another issuer, for another audience, or expired, is refused: a `403`
/// that starts no session (each from its own address, so no lock-out plays a part); the
/// same sign-in with the token as issued goes through.
#[tokio::test]
async fn an_id_token_of_another_issuer_or_audience_or_expired_is_refused() {
    let Scene { p, gw, _dir, .. } = scene().await;
    let cases: [(&str, Edit); 4] = [
        ("127.0.0.2", |c| c["iss"] = json!("http://127.0.0.1:9")),
        ("127.0.0.3", |c| c["aud"] = json!("someone-else")),
        ("127.0.0.4", |c| c["exp"] = json!(now_s() - 600)),
        ("127.0.0.5", |_| {}),
    ];
    for (from, edit) in cases {
        let b = browser(from);
        let r = callback_with((&gw, &p, &b), edit, None).await;
        if from == "127.0.0.5" {
            signed_in(r).await;
        } else {
            refused(r, "The ID token was refused").await;
        }
    }
    gw.stop().await;
}

/// A code issued for another sign-in's PKCE challenge (a code stolen from, or injected into,
/// someone else's flow) is not redeemed: the provider refuses the verifier, and the callback
/// is a `403` that starts no session.
#[tokio::test]
async fn a_code_issued_for_another_pkce_challenge_is_refused() {
    let Scene { p, gw, b, _dir } = scene().await;
    let other = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let challenge = other.query["code_challenge"].as_str();
    let r = callback_with((&gw, &p, &b), |_| {}, Some(challenge)).await;
    refused(r, "The provider did not redeem the code").await;
    signs_in(&gw, &p, &b).await;
    gw.stop().await;
}
