//! Holes in the dashboard's sign-in (found by review), closed and held shut through HTTP
//! against a fake OpenID Connect provider on loopback ([`Provider`]: discovery, JWKS and a
//! token endpoint whose ID tokens each test writes, signed RS256 with a key `openssl` makes):
//! a sign-in in progress is held in its browser's sealed cookie, so others sharing the
//! browser's address cannot keep it from signing in; a callback needs that cookie, whole,
//! sealed by the gateway's keys and for its own `state`, and is finished once on every
//! replica; over https the cookies are `__Host-` prefixed and an un-prefixed cookie a sibling
//! subdomain planted is never read; a single sign-on step-up makes the provider authenticate
//! again (`max_age=0`) and refuses an ID token whose `auth_time` is older than the step-up.

use crate::kit::{Gw, csrf_of};
use assent_server::dashboard::oidc::cookie;
use assent_server::throttle::{RateLimits, Throttle};
use assent_store::oidc_logins::SignIn;
use base64::Engine as _;
use provider::{Provider, now_s};
use reqwest::StatusCode;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

mod answers;
mod gateways;
pub(crate) use gateways::{gateway, gateway_mapped, gateway_with};
mod exchanges;
mod id_tokens;
pub(crate) mod provider;
mod regroup;

/// A browser: no redirects followed, its requests sent from local address `from`.
pub(crate) fn browser(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(from.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// The `name=value` of each `Set-Cookie` of `r`, with its attributes.
pub(crate) fn set_cookies(r: &reqwest::Response) -> Vec<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// A sign-in begun at the gateway: the provider's authorization query (`state`, `nonce`,
/// `max_age`...), the sign-in's cookie the gateway set (`name=value`) and that `Set-Cookie`
/// whole.
pub(crate) struct Begun {
    pub(crate) query: HashMap<String, String>,
    pub(crate) cookie: String,
    pub(crate) set_cookie: String,
}

/// `GET /ui/oidc/start{query}` from `b` with `headers`: the sign-in begun, or the answer.
pub(crate) async fn begin(
    gw: &Gw,
    b: &reqwest::Client,
    query: &str,
    headers: &[(&str, &str)],
) -> Result<Begun, reqwest::Response> {
    let mut req = b.get(format!("{}/ui/oidc/start{query}", gw.url));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    if r.status() != StatusCode::SEE_OTHER {
        return Err(r);
    }
    let to = url::Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
    let set_cookie = set_cookies(&r).pop().unwrap();
    Ok(Begun {
        query: to.query_pairs().into_owned().collect(),
        cookie: set_cookie.split(';').next().unwrap().to_string(),
        set_cookie,
    })
}

/// A provider, a gateway of it (over a data directory the scene keeps: bind it as `_dir`) and
/// a browser at `127.0.0.1`: what most sign-in tests begin with.
pub(crate) struct Scene {
    pub(crate) p: Provider,
    pub(crate) gw: Gw,
    pub(crate) b: reqwest::Client,
    pub(crate) _dir: tempfile::TempDir,
}

/// A [`Scene`] whose gateway has `customize` applied to its state.
pub(crate) async fn scene_tuned(customize: impl FnOnce(&mut assent_server::AppState)) -> Scene {
    let p = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &p, customize).await;
    Scene {
        p,
        gw,
        b: browser("127.0.0.1"),
        _dir: dir,
    }
}

/// A [`Scene`] of a gateway as [`gateway`] makes it.
pub(crate) async fn scene() -> Scene {
    scene_tuned(|_| {}).await
}

/// Trusts a proxy at `127.0.0.1` to name the client in `X-Forwarded-For` (a `customize` of
/// [`gateway`]).
pub(crate) fn behind_proxy(st: &mut assent_server::AppState) {
    let proxy = vec!["127.0.0.1".parse().unwrap()];
    st.throttle = Arc::new(Throttle::with_proxies(RateLimits::default(), proxy));
}

/// `GET /ui/oidc/callback` of sign-in `s` with `code`, from `b` sending `cookie` and
/// `headers`, not yet sent.
pub(crate) fn callback_req(
    gw: &Gw,
    b: &reqwest::Client,
    s: &Begun,
    code: &str,
    (cookie, headers): (&str, &[(&str, &str)]),
) -> reqwest::RequestBuilder {
    let url = reqwest::Url::parse_with_params(
        &format!("{}/ui/oidc/callback", gw.url),
        [("state", s.query["state"].as_str()), ("code", code)],
    )
    .unwrap();
    let mut req = b.get(url).header("cookie", cookie);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req
}

/// The provider signs `sub` in for sign-in `s` (with `auth_time`), and the browser `b` comes
/// back to the callback sending `cookie` and `headers`: the answer.
pub(crate) async fn finish(
    gw: &Gw,
    p: &Provider,
    b: &reqwest::Client,
    s: &Begun,
    (sub, auth_time): (&str, Option<i64>),
    sent: (&str, &[(&str, &str)]),
) -> reqwest::Response {
    let code = format!("code-{}", s.query["state"]);
    p.issue(&code, sub, &s.query["nonce"], auth_time);
    p.challenge(&code, &s.query["code_challenge"]);
    callback_req(gw, b, s, &code, sent).send().await.unwrap()
}

/// [`finish`] of sign-in `s` from `b` as `alice`, authenticated at `auth_time`, sending the
/// sign-in's own cookie: the answer.
pub(crate) async fn finish_own(
    gw: &Gw,
    p: &Provider,
    b: &reqwest::Client,
    s: &Begun,
    auth_time: Option<i64>,
) -> reqwest::Response {
    finish(gw, p, b, s, ("alice", auth_time), (&s.cookie, &[])).await
}

/// [`finish`] of sign-in `s` from `b` as `sub`, authenticated now, sending `cookie`: the
/// answer.
pub(crate) async fn finish_now(
    gw: &Gw,
    p: &Provider,
    b: &reqwest::Client,
    s: &Begun,
    sub: &str,
    cookie: &str,
) -> reqwest::Response {
    finish(gw, p, b, s, (sub, Some(now_s())), (cookie, &[])).await
}

/// Begins a sign-in at `gw` from `b` and finishes it as `alice`, authenticated now: asserts
/// that it signed in.
pub(crate) async fn signs_in(gw: &Gw, p: &Provider, b: &reqwest::Client) {
    let s = begin(gw, b, "", &[]).await.ok().unwrap();
    signed_in(finish_own(gw, p, b, &s, Some(now_s())).await).await;
}

/// Asserts that callback answer `done` is the page moving on to the dashboard (`200`) and set
/// a session cookie.
pub(crate) async fn signed_in(done: reqwest::Response) {
    let cookie = session_of(&done);
    let status = done.status();
    assert_eq!(status, StatusCode::OK, "{}", done.text().await.unwrap());
    assert!(cookie.is_some(), "no session cookie");
}

/// The session cookie (`name=value`) a callback answer set, if any.
pub(crate) fn session_of(r: &reqwest::Response) -> Option<String> {
    set_cookies(r)
        .into_iter()
        .map(|c| c.split(';').next().unwrap().to_string())
        .find(|c| c.contains("assent_ui=") && !c.ends_with('='))
}

/// Whether the provider's token endpoint has not been asked to redeem the code of sign-in `s`
/// since [`finish`] last issued it (it takes out each code it answers).
pub(crate) fn unredeemed(p: &Provider, s: &Begun) -> bool {
    let code = format!("code-{}", s.query["state"]);
    p.codes.lock().unwrap().contains_key(&code)
}

fn now_ms() -> i64 {
    now_s() * 1000
}

/// Asserts that callback answer `r` is the `403` of a sign-in whose page says `says`, that it
/// started no session, and that the provider was not asked to redeem `s`'s code.
async fn refused(r: reqwest::Response, p: &Provider, s: &Begun, says: &str, what: &str) {
    assert!(session_of(&r).is_none(), "{what}: a session was started");
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "{what}");
    let page = r.text().await.unwrap();
    assert!(page.contains(says), "{what}: {page}");
    assert!(unredeemed(p, s), "{what}: the provider was asked");
}

/// Attack (found by review): sign-ins in progress were rows, at most 64 per client network, and
/// starts were limited per network (40, then one per 30 s; an IPv6 /48 256, then one per 2 s),
/// so anyone sharing an office's NAT address (or a /48) kept every operator behind it from
/// signing in — `429` — with one start every 30 s. A start now holds nothing on the server (the
/// sign-in is sealed into its browser's cookie) and is not limited: after hundreds of starts
/// from the address an operator shares, and from its /64 and /48 neighbours, the operator's own
/// sign-ins from there — begun before the flood and after it — finish.
#[tokio::test]
async fn a_network_sharing_an_address_cannot_keep_its_people_from_signing_in() {
    let Scene { p, gw, _dir, .. } = scene_tuned(behind_proxy).await;
    let (nat_mate, operator) = (browser("127.0.0.2"), browser("127.0.0.2"));
    let before = begin(&gw, &operator, "", &[]).await.ok().unwrap();
    for i in 0..200 {
        if let Err(r) = begin(&gw, &nat_mate, "", &[]).await {
            panic!("start {i} from the shared address: {}", r.status());
        }
    }
    // Behind the trusted proxy at 127.0.0.1: neighbours in the operator's /64 and its /48.
    let proxied = browser("127.0.0.1");
    for i in 0..300 {
        let from = format!("2001:db8:7:{:x}::9", i % 3);
        if let Err(r) = begin(&gw, &proxied, "", &[("x-forwarded-for", &from)]).await {
            panic!("start {i} from {from}: {}", r.status());
        }
    }
    let after = begin(&gw, &operator, "", &[]).await.ok().unwrap();
    for s in [&before, &after] {
        signed_in(finish_own(&gw, &p, &operator, s, Some(now_s())).await).await;
    }
    let v6 = [("x-forwarded-for", "2001:db8:7:0::5")];
    let s = begin(&gw, &proxied, "", &v6).await.ok().unwrap();
    let sent = (s.cookie.as_str(), &v6[..]);
    signed_in(finish(&gw, &p, &proxied, &s, ("alice", Some(now_s())), sent).await).await;
    gw.stop().await;
}

/// Attack: a callback (its `state`, `code` and the browser's cookie, from a proxy's log or the
/// browser's history) replayed to sign in again — on the replica that finished it or on
/// another, even with a provider that would redeem its code twice. A sign-in started on one
/// replica finishes on another (every replica reads the same `keys_dir`), and a finished one's
/// `state` is recorded in the database they share: the replay is a `403` there and here, and
/// the provider is not asked.
#[tokio::test]
async fn a_replayed_sign_in_callback_is_refused_on_every_replica() {
    let Scene {
        p,
        gw: a,
        b: br,
        _dir: dir,
    } = scene().await;
    let b = gateway(dir.path(), &p, |_| {}).await;
    let s = begin(&a, &br, "", &[]).await.ok().unwrap();
    signed_in(finish_own(&b, &p, &br, &s, Some(now_s())).await).await;
    for (gw, which) in [(&a, "the other replica"), (&b, "the same replica")] {
        // (`finish` has the provider issue the code again.)
        let r = finish_own(gw, &p, &br, &s, Some(now_s())).await;
        refused(r, &p, &s, "used already", which).await;
    }
    a.stop().await;
    b.stop().await;
}

/// Attack (found by review): the `state` was spent only once a sign-in succeeded, so one
/// sign-in cookie replayed with `code=junk1`, `junk2`… had the gateway post to the provider's
/// token endpoint with its client secret as often as the attacker liked (providers that lock a
/// client after failed token requests then refuse everyone). Each cookie is now good for one
/// code exchange: the state is spent before the provider is asked, so every replay — with
/// another junk code, or the right one — is a `403` that asks the provider nothing.
#[tokio::test]
async fn one_sign_in_cookie_drives_one_code_exchange_however_often_it_is_replayed() {
    let Scene { p, gw, b, _dir } = scene().await;
    let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let junk = |code: &str| callback_req(&gw, &b, &s, code, (&s.cookie, &[])).send();
    let r = junk("junk-0").await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("did not redeem"));
    assert_eq!(
        p.tokens_asked(),
        1,
        "the first callback's code was exchanged"
    );
    for i in 1..5 {
        let r = junk(&format!("junk-{i}")).await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(r.text().await.unwrap().contains("used already"));
    }
    let r = finish_own(&gw, &p, &b, &s, Some(now_s())).await;
    refused(
        r,
        &p,
        &s,
        "used already",
        "the right code, after a junk one",
    )
    .await;
    assert_eq!(p.tokens_asked(), 1, "a replay was exchanged");
    // Found by review: each replay cost a store read, without end. Only this browser holds the
    // cookie, so a replay counts: a loop of them meets the lock-out, answered from memory.
    let mut last = StatusCode::FORBIDDEN;
    for i in 0..40 {
        last = junk(&format!("again-{i}")).await.unwrap().status();
        if last == StatusCode::TOO_MANY_REQUESTS {
            break;
        }
    }
    assert_eq!(
        last,
        StatusCode::TOO_MANY_REQUESTS,
        "replays never met the lock-out"
    );
    gw.stop().await;
}

/// Attack: the sign-in cookie is the browser's, so whoever holds a browser can write one: alter
/// a sealed one (a bit of its header, its ciphertext or its tag), cut it short, send one sealed
/// by another gateway's keys (for this very `state`, with a verifier of their choosing), one of
/// this gateway's that expired, or another sign-in's under this one's name. Each is a `403`
/// that asks the provider nothing and starts no session, and spends nothing: the genuine cookie
/// still finishes afterwards.
#[tokio::test]
async fn a_forged_or_altered_sign_in_cookie_is_refused() {
    let Scene { p, gw, b, _dir } = scene().await;
    let other_dir = tempfile::tempdir().unwrap();
    let elsewhere = gateway(other_dir.path(), &p, |_| {}).await;
    let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let (name, value) = s.cookie.split_once('=').unwrap();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let sealed = b64.decode(value).unwrap();
    let mut forged = Vec::new();
    for at in [0, 1, 30, sealed.len() / 2, sealed.len() - 1] {
        let mut x = sealed.clone();
        x[at] ^= 1;
        forged.push((
            format!("{name}={}", b64.encode(x)),
            format!("byte {at} flipped"),
        ));
    }
    let cut = &value[..value.len() - 8];
    forged.push((format!("{name}={cut}"), "cut short".into()));
    forged.push((format!("{name}=not-sealed"), "not sealed".into()));
    let chosen = SignIn {
        state: s.query["state"].clone(),
        nonce: s.query["nonce"].clone(),
        pkce_verifier: "v".repeat(43),
        next: "/ui/history".into(),
        step_up: false,
        started_at: now_ms(),
        expires_at: now_ms() + 600_000,
        replaces: None,
    };
    let theirs = elsewhere
        .with_store(|st| cookie::value(st, &chosen))
        .unwrap();
    forged.push((format!("{name}={theirs}"), "another gateway's".into()));
    let old = SignIn {
        started_at: now_ms() - 700_000,
        expires_at: now_ms() - 100_000,
        ..chosen
    };
    let expired = gw.with_store(|st| cookie::value(st, &old)).unwrap();
    forged.push((format!("{name}={expired}"), "expired".into()));
    let other = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let (_, others) = other.cookie.split_once('=').unwrap();
    forged.push((format!("{name}={others}"), "another sign-in's".into()));
    for (c, what) in &forged {
        let r = finish_now(&gw, &p, &b, &s, "alice", c).await;
        refused(r, &p, &s, "another browser", what).await;
    }
    signed_in(finish_own(&gw, &p, &b, &s, Some(now_s())).await).await;
    gw.stop().await;
    elsewhere.stop().await;
}

/// Attack (login CSRF): the attacker starts a sign-in in their own browser, signs in at the
/// provider as themselves, and sends the operator's browser to the callback with their `state`
/// and `code`: the operator would then work in the attacker's account. The callback needs the
/// cookie of its `state` from the browser that started it: the operator's browser has none
/// (or only its own sign-in's), and over https the attacker's cookie planted without the
/// `__Host-` prefix (a sibling subdomain can set that name) is never read. Each is a `403`
/// that asks the provider nothing and starts no session; the operator's own sign-in finishes.
#[tokio::test]
async fn a_callback_without_its_browsers_cookie_is_refused() {
    let Scene { p, gw, _dir, .. } = scene_tuned(https).await;
    let (attacker, operator) = (browser("127.0.0.3"), browser("127.0.0.2"));
    let theirs = begin(&gw, &attacker, "", &[]).await.ok().unwrap();
    let own = begin(&gw, &operator, "", &[]).await.ok().unwrap();
    let planted = theirs.cookie.trim_start_matches("__Host-");
    let sent = [
        ("", "no cookie"),
        (own.cookie.as_str(), "the operator's own sign-in's cookie"),
        (planted, "the attacker's cookie planted un-prefixed"),
    ];
    for (c, what) in sent {
        let r = finish_now(&gw, &p, &operator, &theirs, "mallory", c).await;
        refused(r, &p, &theirs, "another browser", what).await;
    }
    signed_in(finish_own(&gw, &p, &operator, &own, Some(now_s())).await).await;
    gw.stop().await;
}

/// The sign-in cookies (`name=value`) a browser holds after a response with `set`
/// (`Set-Cookie`s) to one holding `jar`: each set replaces one of its name, `Max-Age=0`
/// removes it.
fn apply(jar: &mut Vec<String>, set: &[String]) {
    for c in set.iter().filter(|c| c.starts_with("assent_oidc_")) {
        let pair = c.split(';').next().unwrap().to_string();
        let name = pair.split('=').next().unwrap().to_string();
        jar.retain(|j| j.split('=').next().unwrap() != name);
        if !c.contains("Max-Age=0") {
            jar.push(pair);
        }
    }
}

/// Sign-ins started in several tabs of one browser each finish (each has its cookie); and
/// however many a page makes a browser start, it holds at most `MAX_IN_BROWSER` sign-in
/// cookies: a start expires the oldest beyond.
#[tokio::test]
async fn sign_ins_in_several_tabs_finish_and_a_browser_holds_few_of_their_cookies() {
    let Scene { p, gw, b, _dir } = scene().await;
    let mut jar: Vec<String> = Vec::new();
    let mut tabs = Vec::new();
    for _ in 0..12 {
        let r = b
            .get(format!("{}/ui/oidc/start", gw.url))
            .header("cookie", jar.join("; "))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let to = url::Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
        apply(&mut jar, &set_cookies(&r));
        assert!(jar.len() <= cookie::MAX_IN_BROWSER, "{jar:?}");
        tabs.push(Begun {
            query: to.query_pairs().into_owned().collect(),
            cookie: String::new(),
            set_cookie: String::new(),
        });
    }
    // The newest tabs finish, in any order, sending all the browser holds.
    let newest = tabs.split_off(tabs.len() - cookie::MAX_IN_BROWSER);
    for s in newest.iter().rev() {
        let done = finish_now(&gw, &p, &b, s, "alice", &jar.join("; ")).await;
        apply(&mut jar, &set_cookies(&done));
        signed_in(done).await;
    }
    assert!(jar.is_empty(), "each callback clears its cookie: {jar:?}");
    gw.stop().await;
}

/// Over https (here a https `public_url`, a `customize` of [`gateway`]): the session, sign-in
/// form and browser cookies as they are set, and the request with the cookies a browser sends
/// back.
fn https(st: &mut assent_server::AppState) {
    st.public_url = Some(Arc::from("https://assent.example.com"));
}

/// Attack: a sibling subdomain (`evil.example.com` beside `assent.example.com`) sets cookies
/// for the parent domain, which the browser then sends to the dashboard: its own session's
/// cookie (the operator acts in the attacker's account: session fixation), its own sign-in
/// form cookie with a matching form (login CSRF), or its own SSO browser cookie with its own
/// `state` and `code` (the operator is signed in as the attacker). Over https every dashboard
/// cookie is `__Host-` prefixed (`Secure`, `Path=/`, no `Domain`: no sibling can set one) and
/// only that name is read.
#[tokio::test]
async fn over_https_cookies_are_host_prefixed_and_a_sibling_planted_cookie_is_never_read() {
    let Scene { p, gw, b, _dir } = scene_tuned(https).await;
    // The sign-in form's cookie and the session's, as set.
    let form = b.get(format!("{}/ui/login", gw.url)).send().await.unwrap();
    let set = set_cookies(&form);
    assert!(set[0].starts_with("__Host-assent_ui_login="), "{set:?}");
    let c = &set[0];
    assert!(
        c.contains("; Path=/;") && c.ends_with("; Secure") && !c.contains("Domain"),
        "{c}"
    );
    let login_cookie = set[0].split(';').next().unwrap().to_string();
    let csrf = csrf_of(&form.text().await.unwrap());
    let sign_in = |cookie: String, csrf: String, key: &'static str| {
        b.post(format!("{}/ui/login", gw.url))
            .header("cookie", cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}&key={key}&next=/ui"))
            .send()
    };
    let r = sign_in(login_cookie, csrf, "olaf-key").await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = set_cookies(&r);
    let session = &set[0];
    assert!(
        session.starts_with("__Host-assent_ui=") && session.contains("; Path=/;"),
        "{session}"
    );
    assert!(
        session.ends_with("; Secure") && !session.contains("Domain"),
        "{session}"
    );
    let id = session
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("__Host-assent_ui=");
    // The attacker's session (olaf's here) planted without the prefix signs no one in.
    let page = |cookie: String| {
        b.get(format!("{}/ui", gw.url))
            .header("cookie", cookie)
            .send()
    };
    let planted = page(format!("assent_ui={id}")).await.unwrap();
    assert_eq!(
        planted.status(),
        StatusCode::SEE_OTHER,
        "a planted session was read"
    );
    assert!(
        planted.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/ui/login")
    );
    assert_eq!(
        page(format!("__Host-assent_ui={id}"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    // Login CSRF: a planted form cookie and a form that matches it.
    let r = sign_in(
        "assent_ui_login=planted".into(),
        "planted".into(),
        "olaf-key",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(session_of(&r).is_none());
    // SSO login CSRF: the attacker's sign-in (state, code) lands in the operator's browser
    // with the attacker's browser cookie planted without the prefix.
    let mine = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let c = &mine.set_cookie;
    let name = format!("__Host-{}=", cookie::name(&mine.query["state"]));
    assert!(c.starts_with(&name), "{c}");
    assert!(
        c.contains("; Path=/;") && c.ends_with("; Secure") && !c.contains("Domain"),
        "{c}"
    );
    assert!(
        c.contains("HttpOnly") && c.contains("SameSite=Lax") && c.contains("Max-Age=600"),
        "{c}"
    );
    let planted = mine.cookie.trim_start_matches("__Host-");
    let r = finish_now(&gw, &p, &b, &mine, "mallory", planted).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(session_of(&r).is_none());
    assert!(r.text().await.unwrap().contains("another browser"));
    // The operator's own, under the prefixed name, signs in.
    let own = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let r = finish_own(&gw, &p, &b, &own, Some(now_s())).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(session_of(&r).is_some_and(|c| c.starts_with("__Host-assent_ui=")));
    gw.stop().await;
}

/// `POST /ui/passkeys/remove` from session `cookie` (its CSRF token read from the page): the
/// status (`403` "Confirm it is you" without a recent sign-in; `303` once removed).
async fn remove_passkey(gw: &Gw, b: &reqwest::Client, cookie: &str) -> StatusCode {
    let page = b
        .get(format!("{}/ui/passkeys", gw.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let csrf = csrf_of(&page.text().await.unwrap());
    let r = b
        .post(format!("{}/ui/passkeys/remove", gw.url))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&credential_id=k"))
        .send()
        .await
        .unwrap();
    let s = r.status();
    if s == StatusCode::FORBIDDEN {
        assert!(r.text().await.unwrap().contains("Confirm it is you"));
    }
    s
}

/// Attack (found by review): the step-up before a sensitive form (removing a passkey) is
/// "sign in again", but single sign-on's sign-in sent no `max_age`, so the provider's own
/// session signed the browser in again without anyone typing a password — whoever held the
/// browser (or the provider's cookie) passed it. A step-up (`step_up=1`) sends `max_age=0`
/// and `prompt=login`, and refuses an ID token without `auth_time` or with one older than the
/// step-up; an ordinary SSO sign-in counts from the provider's `auth_time`, so riding an old
/// provider session (or one that does not say) is no step-up.
#[tokio::test]
async fn an_sso_step_up_needs_the_provider_to_authenticate_again() {
    let Scene { p, gw, b, _dir } = scene().await;
    let hour_ago = Some(now_s() - 3600);
    // An ordinary sign-in rides the provider's session: signed in, but no step-up.
    for auth_time in [hour_ago, None] {
        let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
        assert!(!s.query.contains_key("max_age"));
        let r = finish_own(&gw, &p, &b, &s, auth_time).await;
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = session_of(&r).unwrap();
        assert_eq!(
            remove_passkey(&gw, &b, &cookie).await,
            StatusCode::FORBIDDEN
        );
    }
    // A step-up asks the provider to authenticate again...
    let q = "?step_up=1&next=/ui/passkeys";
    let mut s = begin(&gw, &b, q, &[]).await.ok().unwrap();
    assert_eq!(
        s.query.get("max_age").map(String::as_str),
        Some("0"),
        "{:?}",
        s.query
    );
    // (Not `prompt=login`, which some providers refuse: `max_age=0` requires it already.)
    assert_eq!(s.query.get("prompt"), None);
    // ...and refuses a provider that did not (an old auth_time), or does not say.
    let old_or_unsaid = [
        (hour_ago, "an old auth_time", Some("sign in again")),
        (None, "no auth_time", None),
    ];
    for (auth_time, what, says) in old_or_unsaid {
        let r = finish_own(&gw, &p, &b, &s, auth_time).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{what}");
        assert!(session_of(&r).is_none(), "{what}");
        if let Some(says) = says {
            assert!(r.text().await.unwrap().contains(says), "{what}");
        }
        s = begin(&gw, &b, q, &[]).await.ok().unwrap();
    }
    // A fresh authentication passes the step-up.
    let r = finish_own(&gw, &p, &b, &s, Some(now_s())).await;
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = session_of(&r).unwrap();
    assert_eq!(
        remove_passkey(&gw, &b, &cookie).await,
        StatusCode::SEE_OTHER
    );
    gw.stop().await;
}
