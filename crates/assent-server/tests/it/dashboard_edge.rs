//! A dashboard request's session is looked up once, at the edge (found by review): a bearer
//! header beside a session cookie no longer skips the cookie's throttle; a store that does not
//! answer the lookup is `503`, not a misreported `413` on a large edit nor a handler running on
//! a guess; and on SQLite the lookup does not queue behind a stalled write on the writer's
//! connection.

use crate::backend::sqlite_only;
use crate::dashboard_kit::{
    allowance, get_from, login_form, made_up, post_form, sign_out_with, signed_in,
};
use crate::kit::{BOT, Gw, OP, csrf_of, serve};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Attack: a request with an `Authorization: Bearer` header took the bearer key's branch of
/// the edge alone, so its session cookie was never throttled there, and the dashboard's
/// handlers then looked it up in the store themselves. With an agent's own key (a right key,
/// never counted as a failure), made-up cookies on `GET /ui` were looked up as fast as the
/// agent liked, each answered with a redirect. They now use up the address's failed-
/// authentication allowance as without the header; a live session with the header still
/// opens the dashboard.
#[tokio::test]
async fn made_up_session_cookies_sent_beside_an_agents_bearer_key_are_throttled() {
    let gw = serve().await;
    let from = "127.0.0.21";
    let mut codes = Vec::new();
    let start = Instant::now();
    while codes.len() <= allowance(start.elapsed()) {
        let code = get_from(&gw, from, "/ui", &made_up(codes.len()), Some(BOT)).await;
        let throttled = code.0 == StatusCode::TOO_MANY_REQUESTS;
        codes.push(code);
        if throttled {
            break;
        }
    }
    assert!(
        codes.contains(&(StatusCode::TOO_MANY_REQUESTS, Some("AUTH_THROTTLED".into()))),
        "made-up cookies beside a bearer key were never throttled: {codes:?}"
    );
    // An operator elsewhere, whose proxy adds a bearer header of its own, still gets in.
    let cookie = signed_in(&gw, "127.0.0.22", OP).await;
    for bearer in [Some(BOT), Some("not-a-key"), None] {
        let (s, _) = get_from(&gw, "127.0.0.22", "/ui", &cookie, bearer).await;
        assert_eq!(s, StatusCode::OK, "bearer {bearer:?}");
    }
    gw.stop().await;
}

/// Attack (a hiccup misreported): when the store did not answer the edge's session lookup,
/// the request was not marked as one showing a session, so a large edit form met the 16 KiB
/// body limit of an unknown sender and got `413`, and a page's handler looked the session up
/// again on a guess (a redirect to the sign-in form). Now the edge answers `503
/// STORE_UNAVAILABLE` and no handler runs; the sign-in form still opens (the cookie is
/// dropped there, as one not looked up); once the store answers, the session works again.
#[tokio::test]
async fn a_session_lookup_the_store_did_not_answer_is_503_not_413_on_a_large_edit() {
    let gw = serve().await;
    let from = "127.0.0.23";
    let cookie = signed_in(&gw, from, OP).await;
    assert_eq!(
        get_from(&gw, from, "/ui", &cookie, None).await.0,
        StatusCode::OK
    );
    gw.sql()
        .exec("ALTER TABLE ui_sessions RENAME TO ui_sessions_away", &[]);
    let big = format!(
        "csrf=x&decision=approve&scope=once&arguments={}",
        "a".repeat(40 * 1024)
    );
    let decide = format!("{}/ui/approvals/some-id/decide", gw.url);
    let r = post_form(from, &decide, &cookie, big).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["code"], "STORE_UNAVAILABLE", "{b}");
    assert_eq!(
        get_from(&gw, from, "/ui", &cookie, None).await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("STORE_UNAVAILABLE".into())
        )
    );
    let (s, _) = get_from(&gw, from, "/ui/login", &cookie, None).await;
    assert_eq!(s, StatusCode::OK, "the sign-in form does not open");
    gw.sql()
        .exec("ALTER TABLE ui_sessions_away RENAME TO ui_sessions", &[]);
    assert_eq!(
        get_from(&gw, from, "/ui", &cookie, None).await.0,
        StatusCode::OK
    );
    gw.stop().await;
}

/// Attack: on SQLite a session lookup ran on the store's one writer connection, so every
/// dashboard request (and every made-up cookie until the throttle stopped it) queued behind
/// an open or stalled write, and held up the next. A write now stalled on the database's
/// lock (another process holds it) does not hold up the lookup: a live session's sign-in page
/// still redirects at once.
#[tokio::test]
async fn a_dashboard_session_lookup_does_not_wait_behind_a_stalled_write() {
    if sqlite_only("it stalls a write with another SQLite connection's lock") {
        return;
    }
    let gw = serve().await;
    let from = "127.0.0.24";
    let cookie = signed_in(&gw, from, OP).await;
    let (login_cookie, csrf) = login_form(&gw, from).await;
    let other = rusqlite::Connection::open(gw.data_dir.join("assent.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    // A sign-in's write now waits for the lock (busy_timeout, 10 s) on the writer connection.
    let url = format!("{}/ui/login", gw.url);
    let stalled = tokio::spawn(async move {
        let form = format!("csrf={csrf}&key={OP}&next=/ui");
        post_form("127.0.0.25", &url, &login_cookie, form)
            .await
            .status()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let (s, _) = get_from(&gw, from, "/ui/login", &cookie, None).await;
    let took = t.elapsed();
    other.execute_batch("ROLLBACK").unwrap();
    assert_eq!(s, StatusCode::SEE_OTHER, "the live session was not found");
    assert!(
        took < Duration::from_secs(3),
        "the lookup waited {took:?} behind the stalled write"
    );
    assert_eq!(stalled.await.unwrap(), StatusCode::SEE_OTHER);
    gw.stop().await;
}

/// Sends the head of `POST path` (a form of `body.len()` bytes, with session `cookie`) to
/// `gw` on a raw connection, waits `pause` with the body held back, runs `meanwhile`, then
/// sends the body: the answer's status and text.
async fn post_body_later(
    gw: &Gw,
    path: &str,
    cookie: &str,
    body: &str,
    meanwhile: impl AsyncFnOnce(),
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = gw.url.trim_start_matches("http://");
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    raw.flush().await.unwrap();
    // The edge looks the session up as soon as the head is in.
    tokio::time::sleep(Duration::from_millis(500)).await;
    meanwhile().await;
    raw.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    raw.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).to_string();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer}"));
    (status, answer)
}

/// A `pay` of `amount` to bob held for a person, and a fresh dashboard session that opened
/// its card: the approval id, the session cookie, the card's decide path and the session's
/// CSRF token.
async fn open_card(gw: &Gw, amount: u64) -> (String, String, String, String) {
    let id = gw
        .pending("pay", serde_json::json!({"amount": amount, "to": "bob"}))
        .await;
    let cookie = gw.dashboard_session().await;
    let card = format!("/ui/approvals/{id}");
    let csrf = csrf_of(&gw.dashboard_page(&card, &cookie).await);
    (id, cookie, format!("{card}/decide"), csrf)
}

/// Attack (found by review): the edge looks a dashboard session up when the request's headers
/// arrive, and the body may follow up to `body_read_timeout_seconds` later. With a stolen
/// cookie and CSRF token, an attacker sent a decide form's headers alone, waited for the
/// operator to sign out, then sent the body: the call was approved by a session that no longer
/// existed. The form's session is now looked up again once its body is in: `403` "Sign in
/// first", and the approval stays pending. A live session's form sent the same slow way still
/// decides.
#[tokio::test]
async fn a_decide_form_whose_body_arrives_after_its_session_signed_out_is_refused() {
    let gw = serve().await;
    let (id, cookie, path, csrf) = open_card(&gw, 500).await;
    let body = format!("csrf={csrf}&decision=approve&scope=once&reason=stolen");
    let sign_out = async || {
        let r = sign_out_with(&gw, &cookie, &csrf).await;
        assert!(
            r.status().is_redirection(),
            "the sign-out failed: {}",
            r.status()
        );
        let (s, _) = get_from(&gw, "127.0.0.1", "/ui", &cookie, None).await;
        assert_eq!(s, StatusCode::SEE_OTHER, "the session still signs in");
    };
    let (status, answer) = post_body_later(&gw, &path, &cookie, &body, sign_out).await;
    assert_eq!(status, 403, "the ended session's form was taken: {answer}");
    assert!(answer.contains("Sign in first"), "{answer}");
    assert_eq!(gw.approval(&id, OP).await.1["status"], "pending");

    // The same slow form from a live session still decides.
    let (id, cookie, path, csrf) = open_card(&gw, 501).await;
    let body = format!("csrf={csrf}&decision=deny&reason=slow+but+live");
    let (status, answer) = post_body_later(&gw, &path, &cookie, &body, async || {}).await;
    assert_eq!(status, 303, "{answer}");
    assert_eq!(gw.approval(&id, OP).await.1["status"], "rejected");
    gw.stop().await;
}

/// Attack (fail open on a hiccup): a decide form's session is looked up again once its body
/// is in; when the store does not answer that lookup, the form is not taken on the edge's
/// earlier word: `503 STORE_UNAVAILABLE`, nothing decided.
#[tokio::test]
async fn a_decide_form_whose_session_recheck_the_store_did_not_answer_is_503_and_decides_nothing() {
    let gw = serve().await;
    let (id, cookie, path, csrf) = open_card(&gw, 502).await;
    let body = format!("csrf={csrf}&decision=approve&scope=once");
    let away = async || {
        gw.sql()
            .exec("ALTER TABLE ui_sessions RENAME TO ui_sessions_away", &[]);
    };
    let (status, answer) = post_body_later(&gw, &path, &cookie, &body, away).await;
    gw.sql()
        .exec("ALTER TABLE ui_sessions_away RENAME TO ui_sessions", &[]);
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains("STORE_UNAVAILABLE"), "{answer}");
    assert_eq!(gw.approval(&id, OP).await.1["status"], "pending");
    gw.stop().await;
}
