//! The fake OpenID Connect provider the sign-in tests sign in through: discovery, JWKS and a
//! token endpoint answering each code with the ID token a test wrote, signed RS256 with a key
//! `openssl` makes. It counts the token, discovery and JWKS requests it was sent; a test can
//! hold token requests unanswered ([`Provider::hold`]), take discovery and JWKS down
//! ([`Provider::down`]), have ID tokens signed under another key id, published or not
//! ([`Provider::sign_as`], [`Provider::publish`]), pad its answers to any size
//! ([`Provider::pad`]) and drip its discovery document without end ([`Provider::drip`]).
//! Its discovery lists HS256 beside RS256, and it can sign ID tokens HS256 with a shared
//! secret instead ([`Provider::sign_hs256`]). Its token endpoint refuses an exchange without a
//! PKCE `code_verifier`, or whose verifier does not match the `code_challenge` a test told it
//! the code was issued for ([`Provider::challenge`]).

use base64::Engine as _;
use openidconnect::PrivateSigningKey as _;
use openidconnect::core::{CoreHmacKey, CoreJwsSigningAlgorithm, CoreRsaPrivateSigningKey};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// A fake OpenID Connect provider: `issuer` (`http://127.0.0.1:PORT`), the ID token claims
/// its token endpoint answers each code with, how many token requests reached it, and whether
/// it answers them (`true`) or holds them until it does.
pub(crate) struct Provider {
    pub(crate) issuer: String,
    pub(crate) codes: Arc<Mutex<HashMap<String, Value>>>,
    pub(crate) token_requests: tokio::sync::watch::Sender<usize>,
    open: tokio::sync::watch::Sender<bool>,
    /// Passes for held token requests, one each ([`Provider::let_through`]).
    passes: Arc<tokio::sync::Semaphore>,
    /// Requests for the discovery document, and for the JWKS.
    fetches: Arc<[AtomicUsize; 2]>,
    /// Discovery and JWKS answer `503`.
    down: Arc<AtomicBool>,
    /// The key id ID tokens are signed under, and those the JWKS publishes (one key, the
    /// same RSA key under each).
    kids: Arc<Mutex<(String, Vec<String>)>>,
    /// Bytes of padding added to the discovery document, the JWKS and the token answer.
    pads: Arc<[AtomicUsize; 3]>,
    /// Discovery sends its headers, then one byte every 100 ms without end.
    drips: Arc<AtomicBool>,
    /// The secret ID tokens are signed HS256 with, instead of RS256 ([`Provider::sign_hs256`]).
    hmac: Arc<Mutex<Option<String>>>,
    /// The PKCE `code_challenge` (S256) each code was issued for ([`Provider::challenge`]).
    challenges: Arc<Mutex<HashMap<String, String>>>,
}

/// An answer of the provider, to pad ([`Provider::pad`]).
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// The discovery document: padded, it still says its `Content-Length`.
    Discovery = 0,
    /// The JWKS: padded, it is sent in chunks without a `Content-Length`.
    Keys = 1,
    /// The token answer: padded, it is sent in chunks without a `Content-Length`.
    Token = 2,
}

/// `v` as a JSON answer, with a `padding` member of `pad` bytes when `pad` is not 0: then,
/// when `chunked`, sent in 64 KiB chunks without a `Content-Length`.
fn padded(mut v: Value, pad: usize, chunked: bool) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    if pad == 0 {
        return axum::Json(v).into_response();
    }
    v["padding"] = json!("x".repeat(pad));
    if !chunked {
        return axum::Json(v).into_response();
    }
    let whole = v.to_string().into_bytes();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        whole.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let body = axum::body::Body::from_stream(futures::stream::iter(chunks));
    ([("content-type", "application/json")], body).into_response()
}

/// A JSON answer that never ends: `{`, then a space every 100 ms.
fn dripping() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let drops = futures::stream::unfold(true, |first| async move {
        if !first {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let b: &'static [u8] = if first { b"{" } else { b" " };
        Some((Ok::<_, std::io::Error>(b), false))
    });
    let body = axum::body::Body::from_stream(drops);
    ([("content-type", "application/json")], body).into_response()
}

impl Provider {
    pub(crate) async fn start() -> Provider {
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
            "id_token_signing_alg_values_supported": ["RS256", "HS256"],
        });
        let fetches: Arc<[AtomicUsize; 2]> = Arc::default();
        let down = Arc::new(AtomicBool::new(false));
        let kids = Arc::new(Mutex::new(("k1".to_string(), vec!["k1".to_string()])));
        let pads: Arc<[AtomicUsize; 3]> = Arc::default();
        let drips = Arc::new(AtomicBool::new(false));
        let hmac: Arc<Mutex<Option<String>>> = Arc::default();
        let challenges: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let public = serde_json::to_value(key.as_verification_key()).unwrap();
        let (c, k, signer) = (codes.clone(), key.clone(), kids.clone());
        let token_requests = tokio::sync::watch::Sender::new(0usize);
        let open = tokio::sync::watch::Sender::new(true);
        let passes = Arc::new(tokio::sync::Semaphore::new(0));
        let (n, o, pass) = (token_requests.clone(), open.subscribe(), passes.clone());
        let (pad, hs, pkce) = (pads.clone(), hmac.clone(), challenges.clone());
        let token = move |body: String| async move {
            n.send_modify(|n| *n += 1);
            let form: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap();
            if !c.lock().unwrap().contains_key(&form["code"]) {
                let mut o = o.clone();
                tokio::select! {
                    r = o.wait_for(|open| *open) => { r.unwrap(); }
                    p = pass.acquire() => p.unwrap().forget(),
                }
            }
            let challenge = pkce.lock().unwrap().remove(&form["code"]);
            let verifier = form.get("code_verifier").map(|v| s256(v));
            let pkce_ok = verifier.is_some() && challenge.is_none_or(|c| Some(c) == verifier);
            let claims = c.lock().unwrap().remove(&form["code"]).filter(|_| pkce_ok);
            match claims {
                Some(claims) => padded(
                    json!({
                        "access_token": "at", "token_type": "Bearer", "expires_in": 300,
                        "id_token": match hs.lock().unwrap().clone() {
                            Some(secret) => signed_hs256(&secret, &claims),
                            None => signed(&k, &signer.lock().unwrap().0, &claims),
                        },
                    }),
                    pad[Answer::Token as usize].load(Ordering::SeqCst),
                    true,
                ),
                None => (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": "invalid_grant"})),
                )
                    .into_response(),
            }
        };
        let (f, d, pad, drip) = (fetches.clone(), down.clone(), pads.clone(), drips.clone());
        let discovery = move || async move {
            f[0].fetch_add(1, Ordering::SeqCst);
            if d.load(Ordering::SeqCst) {
                return StatusCode::SERVICE_UNAVAILABLE.into_response();
            }
            if drip.load(Ordering::SeqCst) {
                return dripping();
            }
            padded(
                meta,
                pad[Answer::Discovery as usize].load(Ordering::SeqCst),
                false,
            )
        };
        let (f, d, published) = (fetches.clone(), down.clone(), kids.clone());
        let pad = pads.clone();
        let jwks = move || async move {
            f[1].fetch_add(1, Ordering::SeqCst);
            if d.load(Ordering::SeqCst) {
                return StatusCode::SERVICE_UNAVAILABLE.into_response();
            }
            let keys: Vec<Value> = (published.lock().unwrap().1.iter())
                .map(|kid| {
                    let mut k = public.clone();
                    k["kid"] = json!(kid);
                    k
                })
                .collect();
            let pad = pad[Answer::Keys as usize].load(Ordering::SeqCst);
            padded(json!({ "keys": keys }), pad, true)
        };
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/token", post(token));
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        Provider {
            issuer,
            codes,
            token_requests,
            open,
            passes,
            fetches,
            down,
            kids,
            pads,
            drips,
            hmac,
            challenges,
        }
    }

    /// Has the provider take `code` as issued for PKCE challenge `challenge` (S256): its
    /// exchange must send the verifier of that challenge.
    pub(crate) fn challenge(&self, code: &str, challenge: &str) {
        let mut c = self.challenges.lock().unwrap();
        c.insert(code.into(), challenge.into());
    }

    /// Has ID tokens signed HS256 with `secret` from now on (`None`: RS256 again).
    pub(crate) fn sign_hs256(&self, secret: Option<&str>) {
        *self.hmac.lock().unwrap() = secret.map(str::to_string);
    }

    /// Pads answer `which` with `bytes` of padding from now on (`0`: none).
    pub(crate) fn pad(&self, which: Answer, bytes: usize) {
        self.pads[which as usize].store(bytes, Ordering::SeqCst);
    }

    /// Has discovery drip its document without end (`true`), or answer whole (`false`).
    pub(crate) fn drip(&self, drip: bool) {
        self.drips.store(drip, Ordering::SeqCst);
    }

    /// How many discovery documents, and how many JWKS, were asked for so far.
    pub(crate) fn fetched(&self) -> (usize, usize) {
        let f = &self.fetches;
        (f[0].load(Ordering::SeqCst), f[1].load(Ordering::SeqCst))
    }

    /// Has discovery and the JWKS answer `503` (`true`), or answer again (`false`).
    pub(crate) fn down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Has ID tokens signed under key id `kid` from now on.
    pub(crate) fn sign_as(&self, kid: &str) {
        self.kids.lock().unwrap().0 = kid.into();
    }

    /// Has the JWKS publish the key under the key ids `kids`.
    pub(crate) fn publish(&self, kids: &[&str]) {
        self.kids.lock().unwrap().1 = kids.iter().map(|k| k.to_string()).collect();
    }

    /// How many token requests reached the provider so far.
    pub(crate) fn tokens_asked(&self) -> usize {
        *self.token_requests.borrow()
    }

    /// Holds the token requests for codes it was not given ([`Provider::issue`]: junk codes)
    /// unanswered (`true`) or answers them (`false`: those held too). Requests for codes it
    /// was given are answered at once.
    pub(crate) fn hold(&self, hold: bool) {
        self.open.send_replace(!hold);
    }

    /// Answers `n` of the held token requests (the longest held first).
    pub(crate) fn let_through(&self, n: usize) {
        self.passes.add_permits(n);
    }

    /// Has the provider answer `code` with an ID token for `sub` (group `fin`) carrying `nonce`
    /// and `auth_time` (Unix seconds; `None`: no such claim).
    pub(crate) fn issue(&self, code: &str, sub: &str, nonce: &str, auth_time: Option<i64>) {
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

pub(crate) fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `claims` as a JWT signed RS256 with `key`, its header naming key id `kid`.
fn signed(key: &CoreRsaPrivateSigningKey, kid: &str, claims: &Value) -> String {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let head = b.encode(json!({"alg": "RS256", "kid": kid, "typ": "JWT"}).to_string());
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

/// `claims` as a JWT signed HS256 with `secret` (the key OpenID Connect gives an HMAC: the
/// client secret's bytes).
fn signed_hs256(secret: &str, claims: &Value) -> String {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let head = b.encode(json!({"alg": "HS256", "typ": "JWT"}).to_string());
    let msg = format!("{head}.{}", b.encode(claims.to_string()));
    let key = CoreHmacKey::new(secret.as_bytes());
    let sig = key
        .sign(&CoreJwsSigningAlgorithm::HmacSha256, msg.as_bytes())
        .unwrap();
    format!("{msg}.{}", b.encode(sig))
}

/// The S256 PKCE challenge of `verifier` (RFC 7636 §4.2).
fn s256(verifier: &str) -> String {
    use sha2::Digest as _;
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    b.encode(sha2::Sha256::digest(verifier.as_bytes()))
}
