//! Regression tests of the security backlog, over HTTP against a real gateway: passkey
//! ceremonies past the per-principal cap are a `429` (never a 5xx), for registration and for
//! votes alike.

use crate::backend::Param;
use crate::kit::{Gw, OP, assert_error, csrf_of, start_tuned};
use assent_server::config::passkeys::{PasskeysConfig, Relying};
use assent_store::passkeys::{MAX_CEREMONIES, StoredPasskey};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;

fn sha(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A gateway (the kit's default policy) with passkeys configured for `http://localhost`.
async fn with_passkeys(dir: &Path) -> Gw {
    let rp = Relying::new(&PasskeysConfig {
        origin: "http://localhost:7878".into(),
        rp_id: "localhost".into(),
    })
    .unwrap();
    start_tuned(dir, |st| st.relying = Some(Arc::new(rp))).await
}

/// Issues an enrolment code for `alice` straight into the database (what `assent passkeys
/// enrol alice` does).
fn enrol_alice(gw: &Gw, code: &str) {
    let at = i64::MAX / 2;
    gw.sql().exec(
        "INSERT INTO passkey_enrolments (code_sha256, principal, issued_by, expires_at) VALUES (?1, ?2, ?3, ?4)",
        &[Param::from(&sha(code)), "alice".into(), "test".into(), at.into()],
    );
}

/// A passkey of `alice` as `webauthn-rs` stores one (an ES256 key; the vote ceremony only
/// names its credential id to the browser), added through the store.
fn alices_passkey(gw: &Gw, credential_id: &str) {
    let b64 = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
    let pk = json!({"cred": {
        "cred_id": credential_id,
        "cred": {"type_": "ES256", "key": {"EC_EC2": {"curve": "SECP256R1", "x": b64, "y": b64}}},
        "counter": 0, "transports": null, "user_verified": true, "backup_eligible": false,
        "backup_state": false, "registration_policy": "required", "extensions": {},
        "attestation": {"data": "None", "metadata": "None"}, "attestation_format": "none"
    }});
    let p = StoredPasskey {
        credential_id: credential_id.into(),
        principal: "alice".into(),
        passkey: pk.to_string(),
        public_key: assent_core::passkey::PublicJwk {
            kty: "EC".into(),
            crv: "P-256".into(),
            x: b64.into(),
            y: Some(b64.into()),
        },
        label: "test".into(),
        created_at: 1,
    };
    gw.with_store(|s| s.add_passkey(&p)).unwrap();
}

/// The signed-in dashboard session of `alice` (cookie) and its CSRF token.
async fn alice_signed_in(gw: &Gw) -> (String, String) {
    let cookie = gw.dashboard_session().await;
    let csrf = csrf_of(&gw.dashboard_page("/ui/passkeys", &cookie).await);
    (cookie, csrf)
}

/// `POST path` of the dashboard as a form: the status, `Retry-After` and the JSON body.
async fn form(
    gw: &Gw,
    path: &str,
    cookie: &str,
    body: String,
) -> (StatusCode, Option<String>, Value) {
    let r = gw
        .dashboard_post(path, cookie, "application/x-www-form-urlencoded", body)
        .await;
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (r.status(), retry, r.json().await.unwrap_or(Value::Null))
}

/// Attack: an operator (or a stolen session or key) piles up passkey ceremonies. Past the
/// cap the gateway answers `429 TOO_MANY_CEREMONIES` with `Retry-After` — bad input, not a
/// store failure: never a 5xx — for registration and for votes (dashboard and API) alike.
#[tokio::test]
async fn piling_up_passkey_ceremonies_is_a_429_not_a_5xx() {
    let dir = tempfile::tempdir().unwrap();
    let gw = with_passkeys(dir.path()).await;
    let (cookie, csrf) = alice_signed_in(&gw).await;
    for i in 0..MAX_CEREMONIES {
        enrol_alice(&gw, &format!("code-{i}"));
        let body = format!("csrf={csrf}&code=code-{i}");
        let (s, _, b) = form(&gw, "/ui/passkeys/register/start", &cookie, body).await;
        assert_eq!(s, StatusCode::OK, "ceremony {i}: {b}");
        assert!(b["ceremony"].is_string(), "{b}");
    }
    enrol_alice(&gw, "one-more");
    let body = format!("csrf={csrf}&code=one-more");
    let (s, retry, b) = form(&gw, "/ui/passkeys/register/start", &cookie, body).await;
    assert_error(s, &b, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_CEREMONIES");
    assert!(
        b["message"].as_str().unwrap().contains("in progress"),
        "{b}"
    );
    assert_eq!(retry.as_deref(), Some("300"));
    // A vote ceremony counts against the same cap, from the dashboard and from the API.
    alices_passkey(&gw, "AAECAwQ");
    let id = gw
        .held("s1", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let path = format!("/ui/approvals/{id}/passkey");
    let (s, retry, b) = form(&gw, &path, &cookie, format!("csrf={csrf}")).await;
    assert_error(s, &b, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_CEREMONIES");
    assert_eq!(retry.as_deref(), Some("300"));
    let r = gw
        .http
        .post(format!("{}/v1/approvals/{id}/passkey", gw.url))
        .bearer_auth(OP)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "300");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["code"], "TOO_MANY_CEREMONIES", "{b}");
    // Nothing was decided on the way.
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    gw.stop().await;
}
