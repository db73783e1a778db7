//! What an agent or another site sends reaches the operator dashboard harmless (found by
//! review): a reason an agent wrote, cancelling its own call, is shown on the card and in
//! History with its bidi, invisible and C1 characters made visible; and every state-changing
//! dashboard form posted without its session's CSRF token, or with a wrong one, is `403` and
//! changes nothing (the browser e2e covered the decide form only).

use crate::backend::Param;
use crate::dashboard_kit::get_from;
use crate::kit::{BOT, OP, csrf_of, serve};
use crate::sec_backlog::{alices_passkey, alices_passkeys, enrol_alice, sha, with_passkeys};
use assent_core::clarification::ClarificationStatus;
use reqwest::StatusCode;
use serde_json::json;

/// Attack: an agent cancels its own held call with a reason holding U+202E (right-to-left
/// override), U+200B (zero width) and U+0085 (a C1 control); the dashboard printed it as sent,
/// so the decision log operators read said something else than what was stored.
#[tokio::test]
async fn an_agents_cancel_reason_is_shown_escaped_on_the_card_and_in_history() {
    let gw = serve().await;
    let id = gw
        .held("s1", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let reason = "done \u{202e}devorppa\u{202c} by\u{200b} alice\u{85}";
    let (s, b) = gw.cancel(&id, BOT, Some(json!({ "reason": reason }))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let cookie = gw.dashboard_session().await;
    for path in [format!("/ui/approvals/{id}"), "/ui/history".to_string()] {
        let html = gw.dashboard_page(&path, &cookie).await;
        for raw in ['\u{202e}', '\u{202c}', '\u{200b}', '\u{85}'] {
            assert!(
                !html.contains(raw),
                "{path}: U+{:04X} shown raw",
                raw as u32
            );
        }
        let shown = r"done \u202edevorppa\u202c by\u200b alice\u0085";
        assert!(html.contains(shown), "{path}: {html}");
    }
    gw.stop().await;
}

/// Attack: another site (or a page that got the operator's cookie sent along) posts a
/// dashboard form. Each state-changing form — decide (approve and deny), dry run, answer a
/// question, start a passkey vote, register a passkey (start and finish), remove one, sign out
/// — without a `csrf` field, with an empty or made-up one, or with the token of another of the
/// operator's sessions, is `403` saying nothing happened: the approval is still pending, the
/// question unanswered, the passkey and the enrolment code still there, nothing audited, and
/// the session still signs in (a sign-out with its own token then ends it).
#[tokio::test]
async fn every_dashboard_form_without_its_csrf_token_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = with_passkeys(dir.path()).await;
    alices_passkey(&gw, "AAECAwQ");
    enrol_alice(&gw, "code-1");
    let id = gw
        .held("s1", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let ask = json!({"agent": "bot", "session_id": "s", "question": "Which account?",
        "accepted_response_kinds": ["freetext"]});
    let (s, b) = gw.post("/v1/clarifications", BOT, ask).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let qid = b["id"].as_str().unwrap().to_string();
    let cookie = gw.dashboard_session().await;
    let csrf = csrf_of(&gw.dashboard_page("/ui/passkeys", &cookie).await);
    let other = gw.dashboard_session().await;
    let others = csrf_of(&gw.dashboard_page("/ui/passkeys", &other).await);
    assert_ne!(csrf, others);
    let forms = [
        (
            format!("/ui/approvals/{id}/decide"),
            "decision=approve&scope=once",
            "Nothing was decided",
        ),
        (
            format!("/ui/approvals/{id}/decide"),
            "decision=deny&reason=no",
            "Nothing was decided",
        ),
        (format!("/ui/approvals/{id}/dry-run"), "", "Nothing was run"),
        (
            format!("/ui/clarifications/{qid}/answer"),
            "kind=freetext&response=acme",
            "Nothing was answered",
        ),
        (
            format!("/ui/approvals/{id}/passkey"),
            "",
            "Nothing was decided",
        ),
        (
            "/ui/passkeys/register/start".into(),
            "code=code-1",
            "No passkey was registered",
        ),
        (
            "/ui/passkeys/register/finish".into(),
            "ceremony=c&credential=%7B%7D",
            "No passkey was registered",
        ),
        (
            "/ui/passkeys/remove".into(),
            "credential_id=AAECAwQ",
            "No passkey was removed",
        ),
        ("/ui/logout".into(), "", "You are still signed in"),
    ];
    let head = gw.with_store(|s| s.audit_head_seq()).unwrap();
    let form = "application/x-www-form-urlencoded";
    for (path, fields, nothing) in &forms {
        for token in [None, Some(""), Some(&"0".repeat(64)[..]), Some(&others[..])] {
            let body = match token {
                None => fields.to_string(),
                Some(t) => format!("csrf={t}&{fields}"),
            };
            let r = gw.dashboard_post(path, &cookie, form, body).await;
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path} with {token:?}");
            let page = r.text().await.unwrap();
            assert!(
                page.contains("CSRF token missing or wrong"),
                "{path}: {page}"
            );
            assert!(page.contains(nothing), "{path}: {page}");
        }
    }
    let (_, a) = gw.approval(&id, OP).await;
    assert_eq!(a["status"], "pending", "{a}");
    let q = gw.with_store(|s| s.clarification(&qid, false)).unwrap();
    assert_eq!(q.unwrap().status, ClarificationStatus::Pending);
    assert_eq!(alices_passkeys(&gw), 1);
    let codes = gw.sql().int(
        "SELECT count(*) FROM passkey_enrolments WHERE code_sha256 = ?1",
        &[Param::from(&sha("code-1"))],
    );
    assert_eq!(codes, 1, "the enrolment code was used");
    assert_eq!(gw.with_store(|s| s.audit_head_seq()).unwrap(), head);
    let ui = get_from(&gw, "127.0.0.1", "/ui", &cookie, None).await.0;
    assert_eq!(ui, StatusCode::OK, "the refused sign-out ended the session");
    let body = format!("csrf={csrf}");
    let r = gw.dashboard_post("/ui/logout", &cookie, form, body).await;
    assert!(r.status().is_success(), "{:?}", r.status());
    let ui = get_from(&gw, "127.0.0.1", "/ui", &cookie, None).await.0;
    assert_eq!(
        ui,
        StatusCode::SEE_OTHER,
        "the sign-out with its token did not end it"
    );
    gw.stop().await;
}
