//! What single sign-on's code exchanges and provider fetches cost the gateway, held against
//! attackers (found by review): the places for code exchanges in flight are shared fairly
//! between client networks, a provider whose discovery fails is asked again once per
//! interval, not once per sign-in, and a refused ID token neither forgets the provider's
//! metadata nor fetches its keys more than once per interval.

use super::provider::{Provider, now_s};
use super::{Begun, Scene, begin, browser, callback_req, finish, finish_own, scene, signed_in};
use super::{behind_proxy, finish_now, scene_tuned, session_of, signs_in};
use crate::kit::Gw;
use assent_server::config::oidc::SSO_EXCHANGES;
use assent_server::config::oidc::{DISCOVERY_RETRY, KEYS_REFRESH};
use assent_server::dashboard::oidc::places::PER_NETWORK;
use reqwest::StatusCode;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The callback of sign-in `s` with a junk `code`, sent from `b` with its cookie and
/// `headers`, in flight.
fn junk_callback(
    gw: &Gw,
    b: &reqwest::Client,
    s: &Begun,
    code: &str,
    headers: &[(&str, &str)],
) -> JoinHandle<StatusCode> {
    let req = callback_req(gw, b, s, code, (&s.cookie, headers));
    tokio::spawn(async move { req.send().await.unwrap().status() })
}

/// `n` sign-ins begun from `b`, their callbacks sent with junk codes, all at once.
async fn flood(gw: &Gw, b: &reqwest::Client, n: usize) -> Vec<JoinHandle<StatusCode>> {
    let mut out = Vec::new();
    for i in 0..n {
        let s = begin(gw, b, "", &[]).await.ok().unwrap();
        out.push(junk_callback(gw, b, &s, &format!("junk{i}"), &[]));
    }
    out
}

/// Begins a sign-in from `b` sending `headers`, and finishes it as `alice`, authenticated now:
/// asserts that it signed in within `secs` seconds (`what` says what kept it longer).
async fn signs_in_within(
    gw: &Gw,
    p: &Provider,
    b: &reqwest::Client,
    headers: &[(&str, &str)],
    secs: u64,
    what: &str,
) {
    let s = begin(gw, b, "", headers).await.ok().unwrap();
    let sent = (s.cookie.as_str(), headers);
    let done = finish(gw, p, b, &s, ("alice", Some(now_s())), sent);
    let done = tokio::time::timeout(Duration::from_secs(secs), done)
        .await
        .expect(what);
    signed_in(done).await;
}

/// Lets the provider answer, and asserts that each of the `junk` callbacks was refused: `403`
/// (the provider's refusal), `502` or `503`.
async fn refused_once_let_through(p: &Provider, junk: Vec<JoinHandle<StatusCode>>) {
    p.hold(false);
    for j in junk {
        let s = j.await.unwrap();
        assert!([403, 502, 503].contains(&s.as_u16()), "{s}");
    }
}

/// Waits until `n` token requests reached the provider (at most 20 s).
async fn asked(p: &Provider, n: usize) {
    let mut asked = p.token_requests.subscribe();
    tokio::time::timeout(Duration::from_secs(20), asked.wait_for(|a| *a >= n))
        .await
        .expect("the token requests arrived")
        .unwrap();
}

/// Waits until `n` token requests reached the provider, and asserts that 300 ms on no more had
/// (`what` they are).
async fn asked_no_more(p: &Provider, n: usize, what: &str) {
    asked(p, n).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(p.tokens_asked(), n, "{what}");
}

/// Attack (found by review): the replica's 16 places for code exchanges were one pool, first
/// come first served, and a `503` beyond. One network's junk callbacks (sign-in cookies are
/// free) with a provider slow to refuse them took every place, and every honest sign-in on the
/// replica was refused while it lasted. Now one network holds at most `PER_NETWORK` places:
/// forty junk callbacks at once from one address put no more exchanges in flight, and another
/// network signs in meanwhile.
#[tokio::test]
async fn junk_callbacks_flooding_from_one_network_do_not_keep_another_network_from_signing_in() {
    let Scene { p, gw, _dir, .. } = scene().await;
    p.hold(true);
    let junk = flood(&gw, &browser("127.0.0.3"), 40).await;
    asked_no_more(&p, PER_NETWORK, "one network's exchanges in flight").await;
    // Well within `EXCHANGE_TIMEOUT`: it did not wait for a held exchange to time out.
    let honest = browser("127.0.0.2");
    let waited = "the honest sign-in waited for the flood";
    signs_in_within(&gw, &p, &honest, &[], 2, waited).await;
    refused_once_let_through(&p, junk).await;
    gw.stop().await;
}

/// Attack (found by review): enough networks (a few dozen addresses) keep every place busy
/// even with a cap per network, and with places taken in the order asked a quiet network waits
/// behind all of their queued callbacks. A place that frees goes to the waiting network with the
/// fewest exchanges in flight: with every place held by junk from eight networks and dozens more
/// of their callbacks queued, the one place that frees goes to the quiet network, which signs
/// in while the rest stay held.
#[tokio::test]
async fn a_freed_exchange_place_goes_to_a_quiet_network_not_to_the_networks_flooding_the_queue() {
    let Scene { p, gw, _dir, .. } = scene().await;
    p.hold(true);
    let networks = SSO_EXCHANGES / PER_NETWORK;
    let mut junk = Vec::new();
    for i in 0..networks {
        let b = browser(&format!("127.0.0.{}", 10 + i));
        junk.extend(flood(&gw, &b, PER_NETWORK + 6).await);
    }
    asked(&p, SSO_EXCHANGES).await;
    let honest = browser("127.0.0.2");
    let s = begin(&gw, &honest, "", &[]).await.ok().unwrap();
    let done = finish_own(&gw, &p, &honest, &s, Some(now_s()));
    let free_one = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(p.tokens_asked(), SSO_EXCHANGES, "every place was taken");
        p.let_through(1);
    };
    let both = async { tokio::join!(done, free_one) };
    let (done, ()) = tokio::time::timeout(Duration::from_secs(5), both)
        .await
        .expect("the quiet network got the freed place");
    signed_in(done).await;
    let asked = p.tokens_asked();
    assert!(
        (SSO_EXCHANGES + 1..=SSO_EXCHANGES + 2).contains(&asked),
        "one place freed: the honest exchange took it, then one junk exchange ({asked})"
    );
    p.hold(false);
    for j in junk {
        j.await.unwrap();
    }
    gw.stop().await;
}

/// Attack (found by review): a failed discovery was not remembered, so each sign-in start asked
/// the dead provider again (one at a time, under a lock: its timeouts queued every start). Now
/// a failure is remembered for `DISCOVERY_RETRY`: twenty starts meanwhile are each a `502`
/// naming the issuer, with `Retry-After`, for one discovery request; once the interval is over
/// and the provider is back, sign-in works.
#[tokio::test]
async fn a_dead_provider_is_asked_for_discovery_once_per_interval_however_many_sign_ins_start() {
    let Scene { p, gw, b, _dir } = scene().await;
    p.down(true);
    let mut starts = Vec::new();
    for _ in 0..10 {
        starts.push(tokio::spawn(begin_status(gw.url.clone(), b.clone())));
    }
    for _ in 0..10 {
        starts.push(tokio::spawn(begin_status(gw.url.clone(), b.clone())));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in starts {
        let (status, retry, page) = s.await.unwrap();
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{page}");
        assert!(retry.is_some(), "no Retry-After");
        assert!(
            page.contains(&p.issuer),
            "the page names the issuer: {page}"
        );
    }
    assert_eq!(p.fetched().0, 1, "discovery requests while it was down");
    p.down(false);
    tokio::time::sleep(DISCOVERY_RETRY + Duration::from_millis(200)).await;
    let s = begin(&gw, &b, "", &[]).await.expect("a start once back");
    signed_in(finish_own(&gw, &p, &b, &s, Some(now_s())).await).await;
    assert_eq!(p.fetched().0, 2);
    gw.stop().await;
}

/// `GET /ui/oidc/start` at `url` from `b`: its status, `Retry-After` and page.
async fn begin_status(url: String, b: reqwest::Client) -> (StatusCode, Option<String>, String) {
    let r = b.get(format!("{url}/ui/oidc/start")).send().await.unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (r.status(), retry, r.text().await.unwrap())
}

/// The callback of sign-in `s`, whose ID token the provider issues with `nonce`, from `b`.
async fn with_nonce(
    gw: &Gw,
    p: &Provider,
    b: &reqwest::Client,
    s: &Begun,
    nonce: &str,
) -> StatusCode {
    let code = format!("code-{}", s.query["state"]);
    p.issue(&code, "alice", nonce, Some(now_s()));
    let req = callback_req(gw, b, s, &code, (&s.cookie, &[]));
    let r = req.send().await.unwrap();
    let status = r.status();
    let page = r.text().await.unwrap();
    assert!(page.contains("The ID token was refused"), "{page}");
    status
}

/// Attack (found by review): an ID token that failed its checks made the gateway forget the
/// provider's metadata, so anyone who could sign in (or send the provider's tokens back wrong)
/// had it discover the provider again at will. Now the metadata is kept, and the provider's
/// keys are fetched again only for an ID token naming a key id they lack, at most once per
/// `KEYS_REFRESH`: ten ID tokens under an unknown key id and five with the wrong nonce are each
/// refused, for no discovery and one fetch of the keys.
#[tokio::test]
async fn refused_id_tokens_do_not_make_the_gateway_fetch_the_provider_again_at_will() {
    assert!(
        KEYS_REFRESH >= Duration::from_secs(30),
        "the test runs within one interval"
    );
    let Scene { p, gw, b, _dir } = scene().await;
    signs_in(&gw, &p, &b).await;
    assert_eq!(p.fetched(), (1, 1), "discovery and its keys");
    p.sign_as("rogue");
    for _ in 0..10 {
        let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
        let nonce = s.query["nonce"].clone();
        assert_eq!(
            with_nonce(&gw, &p, &b, &s, &nonce).await,
            StatusCode::FORBIDDEN
        );
    }
    p.sign_as("k1");
    for _ in 0..5 {
        let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
        assert_eq!(
            with_nonce(&gw, &p, &b, &s, "not-its-nonce").await,
            StatusCode::FORBIDDEN
        );
    }
    assert_eq!(
        p.fetched(),
        (1, 2),
        "one more fetch of the keys, no discovery"
    );
    signs_in(&gw, &p, &b).await;
    gw.stop().await;
}

/// A provider that rotated its keys (an ID token under a key id the gateway's keys lack, now
/// published) signs in after one fetch of its keys, without discovery; the next sign-in under
/// that key fetches nothing.
#[tokio::test]
async fn a_provider_that_rotated_its_keys_signs_in_after_one_fetch_of_them() {
    let Scene { p, gw, b, _dir } = scene().await;
    signs_in(&gw, &p, &b).await;
    p.publish(&["k1", "k2"]);
    p.sign_as("k2");
    for _ in 0..2 {
        signs_in(&gw, &p, &b).await;
        assert_eq!(p.fetched(), (1, 2));
    }
    gw.stop().await;
}

/// Attack: many valid sign-in cookies sent at once (from many addresses, or from one before its
/// failures are counted) have one replica post as many code exchanges to the provider at once.
/// At most `SSO_EXCHANGES` are in flight per replica (`PER_NETWORK` of one network's: eight
/// networks fill them); more wait for a place, at most `WAITING_PER_NETWORK` of a network's,
/// without the provider being asked. One more is `503` with `Retry-After` at once, its cookie
/// kept and its state not spent, so it finishes later; the waiting one finishes once a place
/// frees.
#[tokio::test]
async fn a_replica_holds_few_code_exchanges_in_flight_and_queues_few_more_before_the_provider_is_asked()
 {
    use assent_server::dashboard::oidc::places::WAITING_PER_NETWORK;
    let Scene { p, gw, b, _dir } = scene().await;
    p.hold(true);
    let mut flight = Vec::new();
    for i in 0..SSO_EXCHANGES / PER_NETWORK {
        flight.extend(flood(&gw, &browser(&format!("127.0.0.{}", 10 + i)), PER_NETWORK).await);
    }
    asked(&p, SSO_EXCHANGES).await;
    let last = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let code = format!("code-{}", last.query["state"]);
    p.issue(&code, "alice", &last.query["nonce"], Some(now_s()));
    let req = callback_req(&gw, &b, &last, &code, (&last.cookie, &[]));
    let waiting = tokio::spawn(async move { req.send().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    flight.extend(flood(&gw, &b, WAITING_PER_NETWORK - 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let over = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let r = finish_now(&gw, &p, &b, &over, "bob", &over.cookie).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key("retry-after"));
    assert!(
        !r.headers().contains_key("set-cookie"),
        "its cookie was cleared"
    );
    let spent = sha(&over.query["state"]);
    assert!(
        !gw.with_store(|s| s.oidc_state_spent(&spent)).unwrap(),
        "spent"
    );
    assert_eq!(p.tokens_asked(), SSO_EXCHANGES, "the provider was asked");
    p.hold(false);
    signed_in(waiting.await.unwrap()).await;
    for f in flight {
        assert_eq!(f.await.unwrap(), StatusCode::FORBIDDEN);
    }
    signed_in(finish_now(&gw, &p, &b, &over, "bob", &over.cookie).await).await;
    gw.stop().await;
}

/// The SHA-256 of `s`, hex (how the store keys a spent `state`).
fn sha(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

/// Attack: a provider slow to answer (or made slow by junk) held an exchange's place for as
/// long as the HTTP client waited. A code exchange not answered within `EXCHANGE_TIMEOUT` is a
/// `502` (counting nothing against the address: the provider's trouble) and gives its place
/// back.
#[tokio::test]
async fn a_code_exchange_the_provider_does_not_answer_holds_its_place_for_a_bounded_time() {
    use assent_server::dashboard::oidc::EXCHANGE_TIMEOUT;
    let Scene { p, gw, b, _dir } = scene().await;
    p.hold(true);
    let mut held = flood(&gw, &b, PER_NETWORK).await;
    asked(&p, PER_NETWORK).await;
    let bound = EXCHANGE_TIMEOUT + Duration::from_secs(2);
    for h in held.drain(..) {
        let status = tokio::time::timeout(bound, h)
            .await
            .expect("the exchange was bounded")
            .unwrap();
        assert_eq!(status, StatusCode::BAD_GATEWAY);
    }
    // Both places are back: the network signs in while the provider still holds junk.
    signs_in_within(&gw, &p, &b, &[], 3, "the places were not given back").await;
    gw.stop().await;
}

/// Attack (found by review): client networks were IPv6 /64s, and a /48 — what one site or a
/// free tunnel is given — holds 65,536 of them. Junk callbacks (sign-in cookies are free) from
/// 280 /64s of one /48, behind the trusted proxy, took all sixteen places and filled the queue
/// with networks never served, so a quiet network's sign-in was a `503`. For sharing places an
/// IPv6 client's network is now its /48: the flood holds `PER_NETWORK` exchanges, and another
/// network signs in at once.
#[tokio::test]
async fn hundreds_of_ipv6_64s_of_one_48_cannot_take_every_exchange_place() {
    use assent_server::dashboard::oidc::places::WAITING;
    let Scene { p, gw, b, _dir } = scene_tuned(behind_proxy).await;
    p.hold(true);
    let mut junk = Vec::new();
    for i in 0..SSO_EXCHANGES + WAITING + 8 {
        let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
        let from = [("x-forwarded-for", &*format!("2001:db8:66:{i:x}::1"))];
        junk.push(junk_callback(&gw, &b, &s, &format!("junk{i}"), &from));
    }
    asked_no_more(&p, PER_NETWORK, "the /48's exchanges in flight").await;
    let quiet = [("x-forwarded-for", "2001:db8:99::5")];
    let waited = "the quiet network waited for the flood";
    signs_in_within(&gw, &p, &b, &quiet, 2, waited).await;
    refused_once_let_through(&p, junk).await;
    gw.stop().await;
}

/// Found by review: signing in again by single sign-on left the browser's old session live for
/// the rest of its 12 hours: the session cookie is `SameSite=Strict`, so it does not come back
/// with the provider's cross-site redirect, and the callback had none to end. The same-site
/// start sees it and seals it into the sign-in; the callback ends it.
#[tokio::test]
async fn signing_in_again_by_sso_ends_the_session_the_browser_had() {
    let sc = scene().await;
    let first = begin(&sc.gw, &sc.b, "", &[]).await.ok().unwrap();
    let done = finish_own(&sc.gw, &sc.p, &sc.b, &first, Some(now_s())).await;
    let old = session_of(&done).expect("a first session");
    signed_in(done).await;
    let opens = |cookie: String| {
        let (gw, b) = (&sc.gw, &sc.b);
        async move {
            let r = b
                .get(format!("{}/ui", gw.url))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            r.status() == StatusCode::OK
        }
    };
    assert!(opens(old.clone()).await, "the first session opens /ui");
    // The start is same-site: the browser sends its session cookie. The provider's redirect
    // back is cross-site: only the sign-in's own cookie comes with it.
    let again = begin(&sc.gw, &sc.b, "", &[("cookie", &old)])
        .await
        .ok()
        .unwrap();
    let done = finish_own(&sc.gw, &sc.p, &sc.b, &again, Some(now_s())).await;
    let new = session_of(&done).expect("a second session");
    signed_in(done).await;
    assert!(opens(new).await, "the new session opens /ui");
    assert!(!opens(old).await, "the replaced session still opens /ui");
}

/// A [`Scene`] whose provider's metadata is fresh for `ttl` and used for `stale` past that
/// while discovering it again fails (`Sso::with_metadata_times`).
async fn scene_with_metadata_times(ttl: Duration, stale: Duration) -> Scene {
    scene_tuned(|st| {
        let sso = std::sync::Arc::try_unwrap(st.oidc.take().unwrap())
            .ok()
            .unwrap();
        st.oidc = Some(std::sync::Arc::new(sso.with_metadata_times(ttl, stale)));
    })
    .await
}

/// Found by review: discovery ran under the provider's lock and a failed one replaced the
/// metadata, so once the cached metadata expired one blip of the provider held every sign-in
/// start and callback for its timeouts, then refused them. Now the last metadata found is used
/// while discovering it again fails: with the provider down after its metadata expired, three
/// people sign in promptly, for one more discovery request (its failure remembered) and no
/// fetch of the keys; once the metadata is older than its bound, a start is a `502` again.
#[tokio::test]
async fn a_provider_down_once_its_metadata_expired_signs_people_in_with_the_metadata_it_had() {
    let (ttl, stale) = (Duration::from_millis(500), Duration::from_secs(3));
    let Scene { p, gw, b, _dir } = scene_with_metadata_times(ttl, stale).await;
    signs_in(&gw, &p, &b).await;
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    p.down(true);
    for _ in 0..3 {
        signs_in_within(&gw, &p, &b, &[], 2, "the start waited for discovery").await;
    }
    assert_eq!(p.fetched(), (2, 1), "one more discovery, no keys");
    tokio::time::sleep(ttl + stale).await;
    let (status, retry, page) = begin_status(gw.url.clone(), b.clone()).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{page}");
    assert!(retry.is_some() && page.contains(&p.issuer), "{page}");
    p.down(false);
    tokio::time::sleep(DISCOVERY_RETRY).await;
    signs_in(&gw, &p, &b).await;
    gw.stop().await;
}

/// A discovery the provider never finishes (its document dripped) after the metadata expired
/// holds no start: one start begins it, and that start and five more at once are sent to the
/// provider promptly with the metadata known, for one discovery request in flight.
#[tokio::test]
async fn a_hanging_rediscovery_does_not_hold_sign_in_starts() {
    let ttl = Duration::from_millis(500);
    let Scene { p, gw, b, _dir } = scene_with_metadata_times(ttl, Duration::from_secs(60)).await;
    signs_in(&gw, &p, &b).await;
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    p.drip(true);
    let first = begin_status(gw.url.clone(), b.clone());
    let first = tokio::time::timeout(Duration::from_secs(2), first).await;
    assert_eq!(
        first.expect("the first start waited").0,
        StatusCode::SEE_OTHER
    );
    let mut starts = Vec::new();
    for _ in 0..5 {
        starts.push(tokio::spawn(begin_status(gw.url.clone(), b.clone())));
    }
    for s in starts {
        let s = tokio::time::timeout(Duration::from_secs(2), s).await;
        assert_eq!(s.expect("a start waited").unwrap().0, StatusCode::SEE_OTHER);
    }
    signs_in_within(&gw, &p, &b, &[], 2, "the sign-in waited for discovery").await;
    assert_eq!(p.fetched().0, 2, "one discovery in flight");
    gw.stop().await;
}
