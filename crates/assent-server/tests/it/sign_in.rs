//! Holes in the dashboard's sign-in (found by review), closed and held shut through HTTP
//! against a fake OpenID Connect provider on loopback ([`Provider`]: discovery, JWKS and a
//! token endpoint whose ID tokens each test writes, signed RS256 with a key `openssl` makes):
//! a neighbour flooding `/ui/oidc/start` is throttled and cannot replace another's sign-in in
//! progress; over https the cookies are `__Host-` prefixed and an un-prefixed cookie a sibling
//! subdomain planted is never read; a single sign-on step-up makes the provider authenticate
//! again (`max_age=0`) and refuses an ID token whose `auth_time` is older than the step-up.

use crate::kit::{Gw, csrf_of, start_tuned};
use crate::sso::write_config;
use assent_server::config::Config;
use assent_server::config::oidc::Sso;
use assent_server::throttle::{RateLimits, SSO_START_BURST, Throttle};
use base64::Engine as _;
use openidconnect::PrivateSigningKey as _;
use openidconnect::core::{CoreJwsSigningAlgorithm, CoreRsaPrivateSigningKey};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

/// An RSA private key (PKCS#1 PEM) for the provider, made once per test run.
fn rsa_pem() -> &'static str {
    static PEM: OnceLock<String> = OnceLock::new();
    PEM.get_or_init(|| {
        let out = std::process::Command::new("openssl")
            .args(["genrsa", "-traditional", "2048"])
            .output()
            .expect("openssl (scripts/test.sh installs it)");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    })
}

/// A fake OpenID Connect provider: `issuer` (`http://127.0.0.1:PORT`) and the ID token claims
/// its token endpoint answers each code with.
struct Provider {
    issuer: String,
    codes: Arc<Mutex<HashMap<String, Value>>>,
}

impl Provider {
    async fn start() -> Provider {
        use axum::response::IntoResponse as _;
        use axum::routing::{get, post};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", l.local_addr().unwrap());
        let key = Arc::new(
            CoreRsaPrivateSigningKey::from_pem(
                rsa_pem(),
                Some(openidconnect::JsonWebKeyId::new("k1".into())),
            )
            .unwrap(),
        );
        let codes: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let meta = json!({
            "issuer": issuer, "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"), "jwks_uri": format!("{issuer}/jwks"),
            "response_types_supported": ["code"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        });
        let jwks = json!({"keys": [key.as_verification_key()]});
        let (c, k) = (codes.clone(), key.clone());
        let token = move |body: String| async move {
            let form: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap();
            let claims = c.lock().unwrap().remove(&form["code"]);
            match claims {
                Some(claims) => axum::Json(json!({
                    "access_token": "at", "token_type": "Bearer", "expires_in": 300,
                    "id_token": signed(&k, &claims),
                }))
                .into_response(),
                None => (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": "invalid_grant"})),
                )
                    .into_response(),
            }
        };
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                get(move || async move { axum::Json(meta) }),
            )
            .route("/jwks", get(move || async move { axum::Json(jwks) }))
            .route("/token", post(token));
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        Provider { issuer, codes }
    }

    /// Has the provider answer `code` with an ID token for `sub` (group `fin`) carrying `nonce`
    /// and `auth_time` (Unix seconds; `None`: no such claim).
    fn issue(&self, code: &str, sub: &str, nonce: &str, auth_time: Option<i64>) {
        let now = now_s();
        let mut claims = json!({
            "iss": self.issuer, "aud": "assent", "sub": sub, "iat": now, "exp": now + 300,
            "nonce": nonce, "groups": ["fin"],
        });
        if let Some(t) = auth_time {
            claims["auth_time"] = json!(t);
        }
        self.codes.lock().unwrap().insert(code.into(), claims);
    }
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `claims` as a JWT signed RS256 with `key` (key id `k1`).
fn signed(key: &CoreRsaPrivateSigningKey, claims: &Value) -> String {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let head = b.encode(json!({"alg": "RS256", "kid": "k1", "typ": "JWT"}).to_string());
    let body = b.encode(claims.to_string());
    let msg = format!("{head}.{body}");
    let sig = key
        .sign(
            &CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
            msg.as_bytes(),
        )
        .unwrap();
    format!("{msg}.{}", b.encode(sig))
}

/// A gateway whose `oidc` issuer is `p` (groups `fin` → role `finance`), with `customize`
/// applied to its state.
async fn gateway(
    dir: &std::path::Path,
    p: &Provider,
    customize: impl FnOnce(&mut assent_server::AppState),
) -> Gw {
    let cfg_dir = tempfile::tempdir().unwrap();
    let oidc = format!(
        "oidc: {{issuer: '{}', client_id: assent, client_secret_env: ASSENT_TEST_OIDC_SECRET_NEVER_SET, roles_claim: groups, roles: {{fin: [finance]}}}}",
        p.issuer
    );
    let cfg = Config::load(&write_config(cfg_dir.path(), &oidc, "")).unwrap();
    let sso = Sso::with_secret(cfg.oidc.as_ref().unwrap(), "secret".into()).unwrap();
    start_tuned(dir, |st| {
        st.oidc = Some(Arc::new(sso));
        customize(st);
    })
    .await
}

/// A browser: no redirects followed, its requests sent from local address `from`.
fn browser(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(from.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// The `name=value` of each `Set-Cookie` of `r`, with its attributes.
fn set_cookies(r: &reqwest::Response) -> Vec<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// A sign-in begun at the gateway: the provider's authorization query (`state`, `nonce`,
/// `max_age`...) and the browser cookie the gateway set (`name=value`).
struct Begun {
    query: HashMap<String, String>,
    cookie: String,
}

/// `GET /ui/oidc/start{query}` from `b` with `headers`: the sign-in begun, or the answer.
async fn begin(
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
    let cookie = set_cookies(&r)[0].split(';').next().unwrap().to_string();
    Ok(Begun {
        query: to.query_pairs().into_owned().collect(),
        cookie,
    })
}

/// The provider signs `sub` in for sign-in `s` (with `auth_time`), and the browser `b` comes
/// back to the callback sending `cookie` and `headers`: the answer.
async fn finish(
    gw: &Gw,
    p: &Provider,
    b: &reqwest::Client,
    s: &Begun,
    (sub, auth_time): (&str, Option<i64>),
    (cookie, headers): (&str, &[(&str, &str)]),
) -> reqwest::Response {
    let code = format!("code-{}", s.query["state"]);
    p.issue(&code, sub, &s.query["nonce"], auth_time);
    let mut req = b
        .get(format!("{}/ui/oidc/callback", gw.url))
        .query(&[("state", s.query["state"].as_str()), ("code", &code)])
        .header("cookie", cookie);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// Asserts that callback answer `done` is the page moving on to the dashboard (`200`) and set
/// a session cookie.
async fn signed_in(done: reqwest::Response) {
    let cookie = session_of(&done);
    let status = done.status();
    assert_eq!(status, StatusCode::OK, "{}", done.text().await.unwrap());
    assert!(cookie.is_some(), "no session cookie");
}

/// The session cookie (`name=value`) a callback answer set, if any.
fn session_of(r: &reqwest::Response) -> Option<String> {
    set_cookies(r)
        .into_iter()
        .map(|c| c.split(';').next().unwrap().to_string())
        .find(|c| c.contains("assent_ui=") && !c.ends_with('='))
}

/// Attack: a neighbour (another host behind the same NAT, or anywhere else) floods
/// `GET /ui/oidc/start` — it needs no key — to replace the sign-in an operator has in
/// progress (the store kept 16 per client, oldest out) or to fill the store. Starts are
/// throttled per client network: past `SSO_START_BURST`, `429 RATE_LIMITED` with
/// `Retry-After`; the store never replaces a sign-in in progress; and the operator's sign-in,
/// begun from another address or from the same one before the flood, still finishes.
#[tokio::test]
async fn a_neighbour_flooding_sso_starts_is_throttled_and_replaces_no_sign_in_in_progress() {
    let p = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &p, |_| {}).await;
    let (victim, nat_mate) = (browser("127.0.0.2"), browser("127.0.0.2"));
    let neighbour = browser("127.0.0.3");
    let own = begin(&gw, &victim, "", &[]).await.ok().unwrap();
    let mut refused = None;
    for i in 0..2 * SSO_START_BURST {
        match begin(&gw, &neighbour, "", &[]).await {
            Ok(_) => assert!(
                i < SSO_START_BURST,
                "start {i} from one address was let through"
            ),
            Err(r) => {
                refused = Some(r);
                break;
            }
        }
    }
    let r = refused.expect("a flood of starts is throttled");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "RATE_LIMITED");
    // Someone behind the victim's own NAT floods too: throttled past the burst, and what it
    // started replaced nothing.
    let starts = (0..2 * SSO_START_BURST).map(|_| begin(&gw, &nat_mate, "", &[]));
    let flood = futures::future::join_all(starts).await;
    assert!(flood.iter().filter(|b| b.is_ok()).count() < SSO_START_BURST as usize);
    let done = finish(
        &gw,
        &p,
        &victim,
        &own,
        ("alice", Some(now_s())),
        (&own.cookie, &[]),
    )
    .await;
    signed_in(done).await;
    gw.stop().await;
}

/// A gateway behind a trusted proxy at 127.0.0.1 (it believes `X-Forwarded-For`).
async fn behind_proxy(dir: &std::path::Path, p: &Provider) -> Gw {
    gateway(dir, p, |st| {
        let proxy = vec!["127.0.0.1".parse().unwrap()];
        st.throttle = Arc::new(Throttle::with_proxies(RateLimits::default(), proxy));
    })
    .await
}

/// Attack (found by review): sign-ins in progress were kept per IPv6 /48, so neighbours in the
/// same /48 — other customers of one hosting provider, each with its own /64 — replaced an
/// operator's with 16 starts. They are kept per /64, as every other per-address limit counts.
#[tokio::test]
async fn neighbours_in_the_same_ipv6_48_cannot_replace_a_sign_in_in_progress() {
    let p = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = behind_proxy(dir.path(), &p).await;
    let b = browser("127.0.0.1");
    let from = |a: &'static str| [("x-forwarded-for", a)];
    let own = begin(&gw, &b, "", &from("2001:db8:7:1::5"))
        .await
        .ok()
        .unwrap();
    for net in ["2001:db8:7:2::9", "2001:db8:7:3::9", "2001:db8:7:4::9"] {
        for _ in 0..SSO_START_BURST {
            assert!(begin(&gw, &b, "", &from(net)).await.is_ok());
        }
    }
    let xff = from("2001:db8:7:1::5");
    let done = finish(
        &gw,
        &p,
        &b,
        &own,
        ("alice", Some(now_s())),
        (&own.cookie, &xff),
    )
    .await;
    signed_in(done).await;
    gw.stop().await;
}

/// Attack: with sign-ins kept per /64, one IPv6 /48 holds 65,536 clients; its /64s starting
/// sign-ins in turn would fill the store's global bound and shut every operator out of single
/// sign-on. A /48's starts are held to `SSO_SITE_BURST` together.
#[tokio::test]
async fn the_64s_of_one_ipv6_48_share_one_allowance_of_sso_starts() {
    let p = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = behind_proxy(dir.path(), &p).await;
    let b = browser("127.0.0.1");
    let site = assent_server::throttle::SSO_SITE_BURST;
    let (mut ok, mut throttled) = (0, 0);
    for n in 0..(site / SSO_START_BURST + 2) {
        let a = format!("2001:db8:9:{n:x}::1");
        for _ in 0..SSO_START_BURST {
            match begin(&gw, &b, "", &[("x-forwarded-for", &a)]).await {
                Ok(_) => ok += 1,
                Err(r) => {
                    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
                    throttled += 1;
                }
            }
        }
    }
    // (The /48's allowance refills one start per 5 s while the test runs.)
    assert!(
        ok >= site && throttled > 0,
        "{ok} let through, {throttled} throttled"
    );
    // Another /48 is not held to it.
    let other = [("x-forwarded-for", "2001:db8:a::1")];
    assert!(begin(&gw, &b, "", &other).await.is_ok());
    gw.stop().await;
}

/// Over https (here a https `public_url`): the session, sign-in form and browser cookies as
/// they are set, and the request with the cookies a browser sends back.
async fn https_gateway(dir: &std::path::Path, p: &Provider) -> Gw {
    gateway(dir, p, |st| {
        st.public_url = Some(Arc::from("https://assent.example.com"));
    })
    .await
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
    let p = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = https_gateway(dir.path(), &p).await;
    let b = browser("127.0.0.1");
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
    assert!(
        mine.cookie.starts_with("__Host-assent_oidc="),
        "{}",
        mine.cookie
    );
    let planted = mine.cookie.trim_start_matches("__Host-");
    let r = finish(
        &gw,
        &p,
        &b,
        &mine,
        ("mallory", Some(now_s())),
        (planted, &[]),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(session_of(&r).is_none());
    assert!(r.text().await.unwrap().contains("another browser"));
    // The operator's own, under the prefixed name, signs in.
    let own = begin(&gw, &b, "", &[]).await.ok().unwrap();
    let r = finish(
        &gw,
        &p,
        &b,
        &own,
        ("alice", Some(now_s())),
        (&own.cookie, &[]),
    )
    .await;
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
    let p = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &p, |_| {}).await;
    let b = browser("127.0.0.1");
    let hour_ago = Some(now_s() - 3600);
    // An ordinary sign-in rides the provider's session: signed in, but no step-up.
    for auth_time in [hour_ago, None] {
        let s = begin(&gw, &b, "", &[]).await.ok().unwrap();
        assert!(!s.query.contains_key("max_age"));
        let r = finish(&gw, &p, &b, &s, ("alice", auth_time), (&s.cookie, &[])).await;
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = session_of(&r).unwrap();
        assert_eq!(
            remove_passkey(&gw, &b, &cookie).await,
            StatusCode::FORBIDDEN
        );
    }
    // A step-up asks the provider to authenticate again...
    let q = "?step_up=1&next=/ui/passkeys";
    let s = begin(&gw, &b, q, &[]).await.ok().unwrap();
    assert_eq!(
        s.query.get("max_age").map(String::as_str),
        Some("0"),
        "{:?}",
        s.query
    );
    // (Not `prompt=login`, which some providers refuse: `max_age=0` requires it already.)
    assert_eq!(s.query.get("prompt"), None);
    // ...and refuses a provider that did not (an old auth_time), or does not say.
    let r = finish(&gw, &p, &b, &s, ("alice", hour_ago), (&s.cookie, &[])).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(session_of(&r).is_none());
    assert!(r.text().await.unwrap().contains("sign in again"));
    let s = begin(&gw, &b, q, &[]).await.ok().unwrap();
    let r = finish(&gw, &p, &b, &s, ("alice", None), (&s.cookie, &[])).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(session_of(&r).is_none());
    // A fresh authentication passes the step-up.
    let s = begin(&gw, &b, q, &[]).await.ok().unwrap();
    let r = finish(&gw, &p, &b, &s, ("alice", Some(now_s())), (&s.cookie, &[])).await;
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = session_of(&r).unwrap();
    assert_eq!(
        remove_passkey(&gw, &b, &cookie).await,
        StatusCode::SEE_OTHER
    );
    gw.stop().await;
}
