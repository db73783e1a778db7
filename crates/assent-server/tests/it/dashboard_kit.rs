//! Raw dashboard requests for the session tests (`dashboard_sessions.rs`, `dashboard_edge.rs`):
//! signing in from a given local address and out, `GET` with a cookie (and perhaps a bearer
//! key), posting a form,
//! made-up session cookies, and how many failed authentications an address may have had.

use crate::kit::{Gw, cookie_of, csrf_of};
use crate::sign_in::browser;
use assent_server::throttle::{FAILURE_BURST, FAILURES_PER_SECOND};
use reqwest::StatusCode;
use serde_json::Value;

/// A made-up session cookie: 64 lowercase hex digits, the form the gateway issues.
pub(crate) fn made_up(i: usize) -> String {
    format!("assent_ui={:064x}", 0xdead_beef_u64 as usize + i)
}

/// The sign-in form's cookie and CSRF token, as a browser at local address `from` gets them.
pub(crate) async fn login_form(gw: &Gw, from: &str) -> (String, String) {
    let r = browser(from)
        .get(format!("{}/ui/login", gw.url))
        .send()
        .await
        .unwrap();
    let cookie = cookie_of(&r);
    (cookie, csrf_of(&r.text().await.unwrap()))
}

/// Signs in with `key` from local address `from` as a browser with `cookie` (its session
/// cookie, or empty) does: the answer to the form's `POST`, redirects not followed.
pub(crate) async fn sign_in_from(
    gw: &Gw,
    from: &str,
    key: &str,
    cookie: &str,
) -> reqwest::Response {
    let (mut jar, csrf) = login_form(gw, from).await;
    if !cookie.is_empty() {
        jar = format!("{jar}; {cookie}");
    }
    let url = format!("{}/ui/login", gw.url);
    post_form(from, &url, &jar, format!("csrf={csrf}&key={key}&next=/ui")).await
}

/// `POST url` from local address `from` with `cookie` and the urlencoded form `body`,
/// redirects not followed: the answer.
pub(crate) async fn post_form(
    from: &str,
    url: &str,
    cookie: &str,
    body: String,
) -> reqwest::Response {
    browser(from)
        .post(url)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// Signs session `cookie` out with its CSRF token `csrf` (`POST /ui/logout` from 127.0.0.1):
/// the answer.
pub(crate) async fn sign_out_with(gw: &Gw, cookie: &str, csrf: &str) -> reqwest::Response {
    let url = format!("{}/ui/logout", gw.url);
    post_form("127.0.0.1", &url, cookie, format!("csrf={csrf}")).await
}

/// The session cookie (`name=value`) a successful sign-in answer set.
#[track_caller]
pub(crate) fn session_of(r: &reqwest::Response) -> String {
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "the sign-in failed");
    cookie_of(r)
}

/// Signs in with `key` from local address `from`, as a browser with no session cookie: the
/// session cookie the sign-in set.
pub(crate) async fn signed_in(gw: &Gw, from: &str, key: &str) -> String {
    session_of(&sign_in_from(gw, from, key, "").await)
}

/// `GET path` from local address `from` with `cookie` and, when given, `Authorization:
/// Bearer {bearer}`: the status and the answer's `code`.
pub(crate) async fn get_from(
    gw: &Gw,
    from: &str,
    path: &str,
    cookie: &str,
    bearer: Option<&str>,
) -> (StatusCode, Option<String>) {
    let mut r = browser(from)
        .get(format!("{}{path}", gw.url))
        .header("cookie", cookie);
    if let Some(b) = bearer {
        r = r.bearer_auth(b);
    }
    let r = r.send().await.unwrap();
    let s = r.status();
    let code = r
        .json::<Value>()
        .await
        .ok()
        .and_then(|b| b["code"].as_str().map(str::to_string));
    (s, code)
}

/// How many failed authentications an address's allowance can have taken `elapsed` after its
/// first: its burst, what refilled meanwhile ([`FAILURES_PER_SECOND`]), and one in flight. A
/// flood must be throttled by then; a fixed count would not hold on a slow machine (found as a
/// flaky CI run on PostgreSQL: 30 made-up cookies at over 66 ms each refilled faster than they
/// used the burst up).
pub(crate) fn allowance(elapsed: std::time::Duration) -> usize {
    let refilled = (elapsed.as_millis() * u128::from(FAILURES_PER_SECOND)).div_ceil(1000);
    FAILURE_BURST as usize + refilled as usize + 1
}
