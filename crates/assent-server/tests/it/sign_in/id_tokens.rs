//! What an ID token must be to sign anyone in: signed with the provider's published keys
//! (never an HMAC keyed with the client secret, whatever discovery lists); and a name claim
//! a configured `sso` could hold (no whitespace, control or invisible characters).

use super::provider::{Provider, now_s};
use super::{Scene, begin, browser, callback_req, finish_own, gateway_with, scene};
use super::{session_of, signed_in, signs_in};
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
        let mut codes = p.codes.lock().unwrap();
        codes.get_mut(&code).unwrap()["preferred_username"] = json!(name);
        drop(codes);
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
