//! The provider's answers are bounded: a discovery document, a JWKS or a token answer larger
//! than `MAX_ANSWER` — said by its `Content-Length` or sent in chunks without one — refuses
//! the sign-in (and a failed discovery is remembered); a discovery document dripped without
//! end is cut off after `FETCH_TIMEOUT`.

use super::provider::{Answer, now_s};
use super::{Scene, begin, finish_own, gateway, scene, session_of, signed_in};
use assent_server::dashboard::oidc::fetch::{FETCH_TIMEOUT, MAX_ANSWER};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

/// Well over the bound, small enough that a gateway without it reads the answer whole.
const HUGE: usize = 2 * MAX_ANSWER;

/// `GET /ui/oidc/start` at `url` from `b`: its status, whether it said `Retry-After`, and
/// its page.
async fn start_page(url: &str, b: &reqwest::Client) -> (StatusCode, bool, String) {
    let r = b.get(format!("{url}/ui/oidc/start")).send().await.unwrap();
    let retry = r.headers().contains_key("retry-after");
    (r.status(), retry, r.text().await.unwrap())
}

/// Attack: a compromised or mis-configured provider (or a hostile network path to it)
/// answers discovery with a huge document, and the gateway read it whole into memory on
/// every sign-in start. The answer is refused at `MAX_ANSWER` (here said by its
/// `Content-Length`): the start is a `502` naming the bound, with `Retry-After`, and the
/// failure is remembered like any failed discovery, so ten more starts ask the provider
/// nothing.
#[tokio::test]
async fn an_oversized_discovery_document_is_refused_and_its_failure_remembered() {
    let Scene { p, gw, b, _dir } = scene().await;
    p.pad(Answer::Discovery, HUGE);
    for _ in 0..11 {
        let (status, retry, page) = start_page(&gw.url, &b).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{page}");
        assert!(retry, "no Retry-After");
        assert!(
            page.contains(&format!("larger than {MAX_ANSWER} bytes")),
            "{page}"
        );
    }
    assert_eq!(p.fetched(), (1, 0), "discovery asked once, no keys fetched");
    gw.stop().await;
}

/// Attack: discovery names the `jwks_uri`, anywhere, and its answer — sent in chunks, with
/// no `Content-Length` to refuse it by — was read whole, at discovery and at every refetch of
/// the keys (an ID token naming a key id the known keys lack). Over `MAX_ANSWER` it is
/// refused while it is read: at discovery the start is a `502` naming the bound; at a
/// refetch the ID token under the new key is refused and no session starts.
#[tokio::test]
async fn an_oversized_key_set_is_refused_at_discovery_and_at_a_refetch() {
    let Scene { p, gw, b, _dir } = scene().await;
    p.pad(Answer::Keys, HUGE);
    let (status, _, page) = start_page(&gw.url, &b).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{page}");
    assert!(
        page.contains(&format!("larger than {MAX_ANSWER} bytes")),
        "{page}"
    );
    assert_eq!(p.fetched(), (1, 1));
    // A gateway that discovered the provider while its keys were small: the refetch.
    let other = tempfile::tempdir().unwrap();
    let gw2 = gateway(other.path(), &p, |_| {}).await;
    p.pad(Answer::Keys, 0);
    let s = begin(&gw2, &b, "", &[]).await.ok().unwrap();
    signed_in(finish_own(&gw2, &p, &b, &s, Some(now_s())).await).await;
    p.publish(&["k1", "k2"]);
    p.sign_as("k2");
    p.pad(Answer::Keys, HUGE);
    let s = begin(&gw2, &b, "", &[]).await.ok().unwrap();
    let r = finish_own(&gw2, &p, &b, &s, Some(now_s())).await;
    assert!(session_of(&r).is_none(), "a session was started");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("The ID token was refused"));
    assert_eq!(p.fetched(), (2, 3), "the keys were fetched again once");
    gw.stop().await;
    gw2.stop().await;
}

/// Attack: the token endpoint (whatever discovery names) answers a code exchange with a huge
/// body sent in chunks, read whole into memory. Over `MAX_ANSWER` it is refused while it is
/// read: the callback is a `502` naming the bound and starts no session.
#[tokio::test]
async fn an_oversized_token_answer_is_refused_and_starts_no_session() {
    let Scene { p, gw, b, _dir } = scene().await;
    let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
    p.pad(Answer::Token, HUGE);
    let r = finish_own(&gw, &p, &b, &s, Some(now_s())).await;
    assert!(session_of(&r).is_none(), "a session was started");
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let page = r.text().await.unwrap();
    assert!(
        page.contains(&format!("larger than {MAX_ANSWER} bytes")),
        "{page}"
    );
    assert_eq!(p.tokens_asked(), 1);
    gw.stop().await;
}

/// Attack: a provider (or a path to it) sends discovery's headers at once, then its body a
/// byte at a time without end, holding the discovery — and every sign-in start queued behind
/// it — for as long as it likes. The whole request is bounded by `FETCH_TIMEOUT`: the start is
/// a `502` soon after, and the failure is remembered.
#[tokio::test]
async fn a_discovery_document_dripped_without_end_is_cut_off_in_bounded_time() {
    let Scene { p, gw, b, _dir } = scene().await;
    p.drip(true);
    let began = Instant::now();
    let bound = FETCH_TIMEOUT + Duration::from_secs(3);
    let (status, retry, page) = tokio::time::timeout(bound, start_page(&gw.url, &b))
        .await
        .expect("the dripped discovery was cut off");
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{page}");
    assert!(retry, "no Retry-After");
    assert!(began.elapsed() >= FETCH_TIMEOUT - Duration::from_secs(1));
    let (status, _, _) = start_page(&gw.url, &b).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(p.fetched().0, 1, "the failure was remembered");
    gw.stop().await;
}
