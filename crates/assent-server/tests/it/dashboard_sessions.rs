//! Dashboard sessions held shut against abuse (found by review): made-up session cookies are
//! throttled per client address before the store is asked, and never lock out a live
//! session used from the same host; signed-in operators are held to `rate_limits`, at sign-in
//! too; one operator keeps at most 32 live sessions; signing in again ends the session the
//! browser had; a sign-out the store did not record says so and keeps the cookie; and an
//! agent's question is shown with its bidi and invisible characters made visible.

use crate::backend::sqlite_only;
use crate::dashboard_kit::{
    allowance, get_from, made_up, session_of, sign_in_from, sign_out_with, signed_in,
};
use crate::kit::{BOT, Gw, OLGA, OP, csrf_of, serve, start_tuned, start_with_olga};
use crate::sign_in::browser;
use assent_server::throttle::{FAILURE_BURST, RateLimits, Throttle};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;

/// The status of `GET /ui` from local address `from` with `cookie`.
async fn ui(gw: &Gw, from: &str, cookie: &str) -> StatusCode {
    get_from(gw, from, "/ui", cookie, None).await.0
}

/// Floods made-up session cookies at `/ui` from `host` until the address is throttled, which
/// must happen within its [`allowance`].
async fn flood_until_locked(gw: &Gw, host: &str) {
    let start = std::time::Instant::now();
    for i in 0.. {
        if ui(gw, host, &made_up(i)).await == StatusCode::TOO_MANY_REQUESTS {
            return;
        }
        assert!(
            i < allowance(start.elapsed()),
            "the flood was never throttled: {} made-up cookies in {:?}",
            i + 1,
            start.elapsed()
        );
    }
}

/// Attack: made-up session cookies were looked up in the store (as a write of the one store
/// executor) with no throttle and never counted, so a flood of them queued junk ahead of the
/// agents' calls. From one address they now use up its failed-authentication allowance and
/// get `429 AUTH_THROTTLED`; an operator from another address still signs in, and an agent
/// still proposes.
#[tokio::test]
async fn made_up_session_cookies_are_throttled_per_address() {
    let gw = serve().await;
    let mut codes = Vec::new();
    let start = std::time::Instant::now();
    while codes.len() <= allowance(start.elapsed()) {
        let code = get_from(&gw, "127.0.0.2", "/ui", &made_up(codes.len()), None).await;
        let throttled = code.0 == StatusCode::TOO_MANY_REQUESTS;
        codes.push(code);
        if throttled {
            break;
        }
    }
    let burst = FAILURE_BURST as usize - 1;
    assert!(
        codes[..burst]
            .iter()
            .all(|(s, _)| *s == StatusCode::SEE_OTHER),
        "the burst allowance is refused early: {codes:?}"
    );
    assert!(
        codes.contains(&(StatusCode::TOO_MANY_REQUESTS, Some("AUTH_THROTTLED".into()))),
        "never throttled: {codes:?}"
    );
    // Another address is not locked out: an operator signs in and the session opens /ui.
    let cookie = signed_in(&gw, "127.0.0.3", OP).await;
    assert_eq!(ui(&gw, "127.0.0.3", &cookie).await, StatusCode::OK);
    // An agent's proposal still answers.
    let (s, b) = gw.propose("read", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

/// Attack: an agent on the operator's host floods made-up cookies (or wrong keys) to lock that
/// address out; the operator's dashboard session, which signed in from there, keeps working.
#[tokio::test]
async fn a_cookie_flood_from_a_host_does_not_lock_out_its_operators_open_session() {
    let gw = serve().await;
    let host = "127.0.0.4";
    let cookie = signed_in(&gw, host, OP).await;
    flood_until_locked(&gw, host).await;
    assert_eq!(
        ui(&gw, host, &made_up(999)).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(ui(&gw, host, &cookie).await, StatusCode::OK);
    gw.stop().await;
}

/// A gateway whose principals may each make `per_second` requests a second, `burst` at once.
async fn rated(dir: &std::path::Path, per_second: u32, burst: u32) -> Gw {
    start_tuned(dir, |st| {
        st.throttle = Arc::new(Throttle::new(RateLimits {
            requests_per_second: per_second,
            burst,
        }));
    })
    .await
}

/// Attack: dashboard traffic skipped `rate_limits` (checked for bearer keys only), so a
/// signed-in session could put a store call beside every agent's as fast as it liked.
#[tokio::test]
async fn a_signed_in_session_is_held_to_its_operators_rate() {
    let dir = tempfile::tempdir().unwrap();
    let gw = rated(dir.path(), 1, 3).await;
    let cookie = signed_in(&gw, "127.0.0.1", OP).await;
    let mut statuses = Vec::new();
    let mut limited = None;
    for _ in 0..50 {
        let r = browser("127.0.0.1")
            .get(format!("{}/ui", gw.url))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        statuses.push(r.status());
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(r);
            break;
        }
    }
    assert_eq!(statuses[0], StatusCode::OK, "{statuses:?}");
    let r = limited.unwrap_or_else(|| panic!("never rate limited: {statuses:?}"));
    assert!(r.headers().contains_key("retry-after"));
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["code"], "RATE_LIMITED", "{b}");
    // Another operator is not slowed down by it.
    let other = signed_in(&gw, "127.0.0.1", "olaf-key").await;
    assert_eq!(ui(&gw, "127.0.0.1", &other).await, StatusCode::OK);
    gw.stop().await;
}

/// Attack: `POST /ui/login` with a right key skipped `rate_limits`, and each sign-in stored a
/// session row.
#[tokio::test]
async fn signing_in_in_a_loop_is_held_to_the_operators_rate() {
    let dir = tempfile::tempdir().unwrap();
    let gw = rated(dir.path(), 1, 3).await;
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(sign_in_from(&gw, "127.0.0.1", OP, "").await.status());
    }
    assert_eq!(&codes[..3], [StatusCode::SEE_OTHER; 3], "{codes:?}");
    assert!(codes.contains(&StatusCode::TOO_MANY_REQUESTS), "{codes:?}");
    gw.stop().await;
}

/// Attack: every sign-in stored a session row that lived its 12 hours, so one operator key
/// signing in in a loop grew the table without bound. An operator keeps its newest 32.
#[tokio::test]
async fn one_operator_keeps_only_its_newest_32_sessions() {
    let gw = serve().await;
    let mut cookies = Vec::new();
    for _ in 0..40 {
        cookies.push(signed_in(&gw, "127.0.0.1", OP).await);
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let rows = gw.sql().int(
        "SELECT count(*) FROM ui_sessions WHERE operator = 'alice'",
        &[],
    );
    assert_eq!(rows, 32);
    for (i, c) in cookies.iter().enumerate() {
        let want = if i < 8 {
            StatusCode::SEE_OTHER
        } else {
            StatusCode::OK
        };
        assert_eq!(ui(&gw, "127.0.0.1", c).await, want, "sign-in {i}");
    }
    gw.stop().await;
}

/// Attack: signing in again replaced the browser's cookie but left its old session live for
/// the rest of its 12 hours, so a copy of the old cookie kept working.
#[tokio::test]
async fn signing_in_again_ends_the_session_the_browser_had() {
    let gw = serve().await;
    let first = signed_in(&gw, "127.0.0.1", OP).await;
    let second = session_of(&sign_in_from(&gw, "127.0.0.1", OP, &first).await);
    assert_ne!(first, second);
    assert_eq!(
        ui(&gw, "127.0.0.1", &first).await,
        StatusCode::SEE_OTHER,
        "the replaced session still opens the dashboard"
    );
    assert_eq!(ui(&gw, "127.0.0.1", &second).await, StatusCode::OK);
    gw.stop().await;
}

/// `POST /ui/logout` with session `cookie` and its CSRF token.
async fn sign_out(gw: &Gw, cookie: &str) -> reqwest::Response {
    let page = browser("127.0.0.1")
        .get(format!("{}/ui", gw.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    let csrf = csrf_of(&page.text().await.unwrap());
    sign_out_with(gw, cookie, &csrf).await
}

/// Attack: a sign-out the store did not record was answered as done (the cookie cleared, the
/// sign-in form shown) while the session stayed live on every replica.
#[tokio::test]
async fn a_sign_out_the_store_did_not_record_says_you_are_still_signed_in() {
    if sqlite_only("a SQLite trigger makes the store refuse to end the session") {
        return;
    }
    let gw = serve().await;
    let cookie = signed_in(&gw, "127.0.0.1", OP).await;
    gw.sql().exec(
        "CREATE TRIGGER keep_sessions BEFORE DELETE ON ui_sessions \
         BEGIN SELECT RAISE(ABORT, 'injected'); END",
        &[],
    );
    let r = sign_out(&gw, &cookie).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        r.headers().get("set-cookie").is_none(),
        "the cookie was cleared"
    );
    assert!(r.text().await.unwrap().contains("still signed in"));
    assert_eq!(ui(&gw, "127.0.0.1", &cookie).await, StatusCode::OK);
    gw.sql().exec("DROP TRIGGER keep_sessions", &[]);
    let r = sign_out(&gw, &cookie).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(ui(&gw, "127.0.0.1", &cookie).await, StatusCode::SEE_OTHER);
    gw.stop().await;
}

/// Attack: an agent's question and its context were shown on the dashboard as sent, so a
/// U+202E (right-to-left override) could make "pay 9000 to mallory" read otherwise, while
/// choice labels were already made visible.
#[tokio::test]
async fn a_questions_bidi_characters_are_shown_escaped_on_the_dashboard() {
    let gw = serve().await;
    let ask = json!({
        "agent": "bot", "session_id": "s", "accepted_response_kinds": ["freetext"],
        "question": "Send to \u{202e}yrrab\u{202c}?",
        "context": "account \u{2066}evil\u{2069} \u{200b}",
    });
    let (s, b) = gw.post("/v1/clarifications", BOT, ask).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let cookie = signed_in(&gw, "127.0.0.1", OP).await;
    let r = browser("127.0.0.1")
        .get(format!("{}/ui/queue", gw.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let html = r.text().await.unwrap();
    for raw in ['\u{202e}', '\u{202c}', '\u{2066}', '\u{2069}', '\u{200b}'] {
        assert!(!html.contains(raw), "U+{:04X} shown raw", raw as u32);
    }
    assert!(html.contains(r"Send to \u202eyrrab\u202c?"), "{html}");
    assert!(html.contains(r"account \u2066evil\u2069 \u200b"), "{html}");
    gw.stop().await;
}

/// Found by review: a browser holding a dead session cookie (pushed out by the cap, ended, its
/// key rotated) got `429` on the sign-in form itself while an agent on its host kept the
/// address locked out, though the operator's long key, seen from there before, passes the
/// sign-in's own lock-out; the cookie is `HttpOnly`, so the page could not clear it. On the
/// sign-in pages such a cookie is dropped, not refused.
#[tokio::test]
async fn a_dead_session_cookie_does_not_keep_its_operator_from_signing_in_again() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with_olga(dir.path()).await;
    let host = "127.0.0.7";
    signed_in(&gw, host, OLGA).await;
    flood_until_locked(&gw, host).await;
    let dead = made_up(5_000);
    assert_eq!(ui(&gw, host, &dead).await, StatusCode::TOO_MANY_REQUESTS);
    let again = sign_in_from(&gw, host, OLGA, &dead).await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER, "{again:?}");
    let fresh = session_of(&again);
    assert_eq!(ui(&gw, host, &fresh).await, StatusCode::OK);
    gw.stop().await;
}

/// Found by review: on the sign-in page of a locked-out network the edge drops a session
/// cookie it does not look up, so signing in again there did not end the session the browser
/// had (a live one, signed in elsewhere): a copy of it kept working. The sign-in ends it.
#[tokio::test]
async fn signing_in_again_on_a_locked_out_network_still_ends_the_session_the_browser_had() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with_olga(dir.path()).await;
    let (elsewhere, here) = ("127.0.0.8", "127.0.0.9");
    let old = signed_in(&gw, elsewhere, OLGA).await;
    signed_in(&gw, here, OLGA).await;
    flood_until_locked(&gw, here).await;
    let again = sign_in_from(&gw, here, OLGA, &old).await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER, "{again:?}");
    assert_eq!(ui(&gw, here, &session_of(&again)).await, StatusCode::OK);
    assert_ne!(
        ui(&gw, elsewhere, &old).await,
        StatusCode::OK,
        "the replaced session still opens /ui"
    );
    gw.stop().await;
}

/// Attack (found by review): a browser keeps cookies apart by host, not by port, so a page on
/// another port of a plain-http gateway's host planted `assent_ui=<the attacker's live
/// session>; Path=/ui/history`; the browser sent it before the operator's own on that page,
/// which then showed, and whose forms acted, as the attacker (login CSRF past the sign-in
/// form's origin check). A request carrying the session cookie twice is signed in nowhere,
/// and its answer expires the copies on every path above it but the session's own.
#[tokio::test]
async fn a_session_cookie_planted_beside_the_operators_own_signs_in_no_one() {
    let gw = serve().await;
    let from = "127.0.0.41";
    let mallory = signed_in(&gw, "127.0.0.40", "olaf-key").await;
    let alice = signed_in(&gw, from, OP).await;
    let page = |cookie: String| {
        let url = format!("{}/ui/history", gw.url);
        async move {
            let r = browser(from).get(url).header("cookie", cookie).send().await;
            r.unwrap()
        }
    };
    let own = page(alice.clone()).await;
    assert_eq!(own.status(), StatusCode::OK);
    assert!(own.text().await.unwrap().contains("<strong>alice</strong>"));
    for both in [format!("{mallory}; {alice}"), format!("{alice}; {mallory}")] {
        let r = page(both.clone()).await;
        let set: Vec<String> = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{both}: {set:?}");
        let body = r.text().await.unwrap();
        assert!(!body.contains("olaf") && !body.contains("alice"), "{body}");
        for p in ["/", "/ui/", "/ui/history"] {
            let gone = format!("assent_ui=; Path={p}; Max-Age=0");
            assert!(set.contains(&gone), "{p}: {set:?}");
        }
        assert!(!set.iter().any(|c| c.contains("Path=/ui;")), "{set:?}");
    }
    // Found by review of the fix: the expiring headers are of the first segments' paths only,
    // each plain, so neither a path of 8,000 `/` (33 MB of headers) nor `;Path=/ui` written
    // into a header as an attribute (expiring the operator's own session) gets through.
    for path in [
        "/ui/".to_string() + &"/".repeat(4_000),
        "/ui/x;Path=/ui".into(),
    ] {
        let r = browser(from)
            .get(format!("{}{path}", gw.url))
            .header("cookie", format!("{mallory}; {alice}"))
            .send()
            .await
            .unwrap();
        let set: Vec<&str> = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert!(set.len() <= 9, "{}", set.len());
        assert!(
            !set.iter().any(|c| c.matches("Path=").count() > 1),
            "{set:?}"
        );
    }
    // The operator's own cookie, once the planted one is gone, works as before.
    assert_eq!(page(alice).await.status(), StatusCode::OK);
    gw.stop().await;
}
