//! Regression tests of the security backlog, over HTTP against a real gateway: passkey
//! ceremonies past the per-principal cap are a `429` (never a 5xx), for registration and for
//! votes alike; removing a passkey needs a recent sign-in (a step-up), not just a session;
//! refused single sign-on callbacks are throttled per address before the provider is asked;
//! a dashboard session row planted or edited in the database signs no one in.

use crate::backend::{Param, audit_count};
use crate::kit::{Gw, OP, assert_error, csrf_of, start_tuned};
use assent_server::config::passkeys::{PasskeysConfig, Relying};
use assent_store::passkeys::{MAX_CEREMONIES, StoredPasskey};
use assent_store::ui_sessions::UiSession;
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

/// A dashboard session of `alice` that signed in at `signed_in_at` (Unix ms), stored as the
/// sign-in stores one (bound to her key, `alice-key`, as `dashboard::sessions::key_binding`
/// binds it): its cookie and CSRF token.
fn alice_session_from(gw: &Gw, signed_in_at: i64) -> (String, String) {
    let id = format!("old-session-{signed_in_at}");
    let s = UiSession {
        operator: "alice".into(),
        csrf: "c".repeat(64),
        expires_at: i64::MAX,
    };
    let mut binding = b"assent/ui-session/key-binding/v1\0".to_vec();
    binding.extend_from_slice(&hex::decode(sha("alice-key")).unwrap());
    let binding = hex::encode(Sha256::digest(&binding));
    gw.with_store(|st| st.start_ui_session(&sha(&id), &s, &binding, signed_in_at))
        .unwrap();
    (format!("assent_ui={id}"), s.csrf)
}

fn alices_passkeys(gw: &Gw) -> usize {
    gw.with_store(|s| s.passkeys_of("alice")).unwrap().len()
}

/// Attack: a stolen dashboard session cookie strips the operator's passkeys (weakening
/// `require_passkey` approvals, or locking the owner out). Removing one needs a sign-in
/// within the last 10 minutes: an older session (still live) is `403` and removes nothing;
/// a fresh sign-in removes it.
#[tokio::test]
async fn a_stolen_old_session_cannot_remove_passkeys_without_a_fresh_sign_in() {
    let dir = tempfile::tempdir().unwrap();
    let gw = with_passkeys(dir.path()).await;
    alices_passkey(&gw, "AAECAwQ");
    let eleven_minutes_ago = assent_server::state::now_ms() - 11 * 60_000;
    let (cookie, csrf) = alice_session_from(&gw, eleven_minutes_ago);
    assert!(
        gw.dashboard_page("/ui/passkeys", &cookie)
            .await
            .contains("AAECAwQ")
    );
    let body = format!("csrf={csrf}&credential_id=AAECAwQ");
    let r = gw
        .dashboard_post(
            "/ui/passkeys/remove",
            &cookie,
            "application/x-www-form-urlencoded",
            body,
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let page = r.text().await.unwrap();
    assert!(page.contains("sign in again"), "{page}");
    assert!(page.contains("No passkey was removed"), "{page}");
    assert_eq!(alices_passkeys(&gw), 1);
    assert_eq!(audit_count(&gw.data_dir, "passkey.removed"), 0);
    // A sign-in just now (the operator's key) may remove it.
    let (cookie, csrf) = alice_signed_in(&gw).await;
    let body = format!("csrf={csrf}&credential_id=AAECAwQ");
    let r = gw
        .dashboard_post(
            "/ui/passkeys/remove",
            &cookie,
            "application/x-www-form-urlencoded",
            body,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK); // the list again, after the redirect
    assert_eq!(alices_passkeys(&gw), 0);
    assert_eq!(audit_count(&gw.data_dir, "passkey.removed"), 1);
    gw.stop().await;
}

/// The status of `GET path` with session `cookie`, redirects not followed: `200` signed in,
/// a redirect to the sign-in form otherwise.
async fn signed_in_status(gw: &Gw, path: &str, cookie: &str) -> StatusCode {
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = c.get(format!("{}{path}", gw.url)).header("cookie", cookie);
    r.send().await.unwrap().status()
}

/// Attack: whoever can write the database, but holds no key, plants a dashboard session row
/// for a cookie of their own as an operator (a copy of a real row, seal and all, under their
/// digest; or a row with no seal), or edits a real one (a later end, a fresh sign-in time to
/// pass the step-up, another operator): none of them signs anyone in, and the real session
/// keeps working until its row is edited. Before, a planted row was a session as that
/// operator, and the approvals made through it carried the operator's name in genuine audit
/// records.
#[tokio::test]
async fn a_dashboard_session_planted_or_edited_in_the_database_signs_no_one_in() {
    let dir = tempfile::tempdir().unwrap();
    let gw = with_passkeys(dir.path()).await;
    let (cookie, _) = alice_signed_in(&gw).await;
    assert_eq!(
        signed_in_status(&gw, "/ui/passkeys", &cookie).await,
        StatusCode::OK
    );
    let mine = "planted-cookie-value";
    let copy = format!(
        "INSERT INTO ui_sessions (id_sha256, operator, csrf, expires_at, kind, roles, authenticated_at, seal)
         SELECT '{}', operator, csrf, expires_at, kind, roles, authenticated_at, seal FROM ui_sessions",
        sha(mine)
    );
    gw.sql().exec(&copy, &[]);
    let planted = format!("assent_ui={mine}");
    assert_ne!(
        signed_in_status(&gw, "/ui/passkeys", &planted).await,
        StatusCode::OK
    );
    gw.sql().exec(
        "UPDATE ui_sessions SET seal = '' WHERE operator = 'alice'",
        &[],
    );
    assert_ne!(
        signed_in_status(&gw, "/ui/passkeys", &planted).await,
        StatusCode::OK
    );
    let (cookie, _) = alice_signed_in(&gw).await;
    assert_eq!(
        signed_in_status(&gw, "/ui/passkeys", &cookie).await,
        StatusCode::OK
    );
    for edit in [
        "expires_at = expires_at + 1",
        "authenticated_at = authenticated_at + 1",
        "operator = 'olaf'",
    ] {
        let (cookie, _) = alice_signed_in(&gw).await;
        let id = sha(cookie.trim_start_matches("assent_ui="));
        let sql = format!("UPDATE ui_sessions SET {edit} WHERE id_sha256 = '{id}'");
        assert_eq!(gw.sql().exec(&sql, &[]), 1, "{sql}");
        let status = signed_in_status(&gw, "/ui/passkeys", &cookie).await;
        assert_ne!(status, StatusCode::OK, "{edit}");
    }
    gw.stop().await;
}

/// A stand-in OpenID provider that answers every request `404` and counts them: the gateway's
/// discovery and token requests reach it, so a test can tell whether any was made.
async fn counting_provider() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            axum::http::StatusCode::NOT_FOUND
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, hits)
}

/// A gateway whose `oidc` issuer is `issuer`.
async fn with_sso_at(dir: &Path, issuer: &str) -> Gw {
    let cfg_dir = tempfile::tempdir().unwrap();
    let file = cfg_dir.path().join("assent.yaml");
    let oidc = format!(
        "oidc: {{issuer: '{issuer}', client_id: assent, client_secret_env: ASSENT_TEST_OIDC_SECRET_NEVER_SET, roles_claim: groups, roles: {{fin: [finance]}}}}"
    );
    std::fs::write(
        &file,
        format!("data_dir: data\npublic_url: http://localhost:7878\n{oidc}\n"),
    )
    .unwrap();
    let cfg = assent_server::config::Config::load(&file).unwrap();
    let sso =
        assent_server::config::oidc::Sso::with_secret(cfg.oidc.as_ref().unwrap(), "secret".into())
            .unwrap();
    start_tuned(dir, |st| st.oidc = Some(Arc::new(sso))).await
}

/// Puts a sign-in in progress under `state` for the browser with cookie `browser`.
fn sign_in_started(gw: &Gw, state: &str, browser: &str) {
    let login = assent_store::oidc_logins::OidcLogin {
        browser_sha256: sha(browser),
        nonce: "n".into(),
        pkce_verifier: "v".repeat(43),
        next: "/ui".into(),
        expires_at: i64::MAX,
    };
    gw.with_store(|s| s.put_oidc_login(&sha(state), &"cc".repeat(32), &login, 0))
        .unwrap();
}

/// `GET /ui/oidc/callback?state=STATE&code=x` with the browser cookie `browser`, redirects not
/// followed: the response.
async fn callback(gw: &Gw, state: &str, browser: &str) -> reqwest::Response {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/ui/oidc/callback?state={state}&code=x", gw.url))
        .header("cookie", format!("assent_oidc={browser}"))
        .send()
        .await
        .unwrap()
}

/// Attack: guessing at SSO callbacks (made-up states, stolen codes) without limit, each one
/// also making the gateway call the provider. Refused callbacks count against the client
/// address in the failed-authentication throttle; once it is locked out, even a callback with
/// a valid state is `429 AUTH_THROTTLED` with `Retry-After`, and neither the provider nor the
/// store is asked (the state stays unspent).
#[tokio::test]
async fn guessing_at_sso_callbacks_is_throttled_before_the_provider_is_asked() {
    use std::sync::atomic::Ordering;
    let (issuer, hits) = counting_provider().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = with_sso_at(dir.path(), &issuer).await;
    // The double can tell: a valid state makes the gateway ask the provider (which fails: 502).
    sign_in_started(&gw, "state-1", "browser");
    assert_eq!(
        callback(&gw, "state-1", "browser").await.status(),
        StatusCode::BAD_GATEWAY
    );
    assert!(hits.load(Ordering::SeqCst) > 0);
    sign_in_started(&gw, "state-2", "browser");
    let mut locked = None;
    for i in 0..500 {
        let r = callback(&gw, &format!("made-up-{i}"), "browser").await;
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            locked = Some((i, r));
            break;
        }
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
    let (i, r) = locked.expect("refused callbacks are throttled");
    assert!(
        i >= assent_server::throttle::FAILURE_BURST as usize,
        "locked after {i}"
    );
    assert!(r.headers().contains_key("retry-after"));
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["code"], "AUTH_THROTTLED", "{b}");
    let before = hits.load(Ordering::SeqCst);
    let r = callback(&gw, "state-2", "browser").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        before,
        "the provider was asked"
    );
    let unspent = gw.with_store(|s| s.take_oidc_login(&sha("state-2"), &sha("browser"), 1));
    assert!(
        unspent.unwrap().is_some(),
        "the locked-out callback spent the state"
    );
    gw.stop().await;
}
