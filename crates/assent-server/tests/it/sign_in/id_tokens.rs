//! What an ID token must be to sign anyone in: signed with the provider's published keys
//! (never an HMAC keyed with the client secret, whatever discovery lists).

use super::provider::now_s;
use super::{Scene, begin, finish_own, scene, session_of, signs_in};
use reqwest::StatusCode;

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
