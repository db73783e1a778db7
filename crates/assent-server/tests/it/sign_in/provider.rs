//! The fake OpenID Connect provider the sign-in tests sign in through: discovery, JWKS and a
//! token endpoint answering each code with the ID token a test wrote, signed RS256 with a key
//! `openssl` makes. It counts the token requests it was sent, and a test can hold them
//! unanswered ([`Provider::hold`]).

use base64::Engine as _;
use openidconnect::PrivateSigningKey as _;
use openidconnect::core::{CoreJwsSigningAlgorithm, CoreRsaPrivateSigningKey};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashMap;
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
            "id_token_signing_alg_values_supported": ["RS256"],
        });
        let jwks = json!({"keys": [key.as_verification_key()]});
        let (c, k) = (codes.clone(), key.clone());
        let token_requests = tokio::sync::watch::Sender::new(0usize);
        let open = tokio::sync::watch::Sender::new(true);
        let (n, mut o) = (token_requests.clone(), open.subscribe());
        let token = move |body: String| async move {
            n.send_modify(|n| *n += 1);
            o.wait_for(|open| *open).await.unwrap();
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
        Provider {
            issuer,
            codes,
            token_requests,
            open,
        }
    }

    /// How many token requests reached the provider so far.
    pub(crate) fn tokens_asked(&self) -> usize {
        *self.token_requests.borrow()
    }

    /// Holds the token requests that arrive unanswered (`true`) or answers them (`false`: those
    /// held too).
    pub(crate) fn hold(&self, hold: bool) {
        self.open.send_replace(!hold);
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
