//! `GET /v1/insights` and `/ui/insights` (issue 16 §4): a history made through the API is
//! counted back; bad ranges are `400` naming the parameter; agents may not read it; the page's
//! charts are SVG with accessible names; a tool named like markup cannot inject into the page.

use crate::kit::{BOT, OP, serve};
use assent_core::gatekeeper::Verdict;
use assent_core::{CanonicalCall, ToolCall, evaluate};
use assent_store::{DecisionInput, Proposal};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The figures row of `key` in breakdown `b` (`tools`, `agents`, `operators`).
fn row<'a>(body: &'a Value, b: &str, key: &str) -> &'a Value {
    body[b]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no {b} row {key}: {body}"))
}

/// Four held `pay` calls (three approved, one with a session grant, one denied by alice), two
/// outright `read`s and a `pay` the grant covers (granted, not a prompt), read back from
/// `GET /v1/insights` with the default range (the last 30 days).
#[tokio::test]
async fn insights_count_a_history_made_through_the_api() {
    let gw = serve().await;
    let mut ids = vec![];
    for amount in [500, 600, 700] {
        ids.push(
            gw.held("s1", "pay", json!({"amount": amount, "to": "x"}))
                .await,
        );
    }
    assert_eq!(gw.decide(&ids[0], OP, "approve").await.0, StatusCode::OK);
    assert_eq!(gw.decide(&ids[1], OP, "approve").await.0, StatusCode::OK);
    assert_eq!(gw.decide(&ids[2], OP, "deny").await.0, StatusCode::OK);
    for _ in 0..2 {
        assert_eq!(gw.propose("read", json!({})).await.0, StatusCode::OK);
    }
    // A session grant, then a call it covers: one more prompt, and one call granted.
    let g = gw
        .held("s1", "pay", json!({"amount": 800, "to": "y"}))
        .await;
    let (st, b) = gw
        .decide_with(&g, OP, json!({"decision": "approve", "scope": "session"}))
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let (st, b) = gw.propose("pay", json!({"amount": 800, "to": "y"})).await;
    assert_eq!(st, StatusCode::OK, "covered by the grant: {b}");
    let (st, body) = gw.get("/v1/insights", OP).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let pay = row(&body, "tools", "pay");
    assert_eq!(
        (&pay["prompts"], &pay["approved"], &pay["rejected"]),
        (&json!(4), &json!(3), &json!(1))
    );
    let rate = pay["approval_rate"].as_f64().unwrap();
    assert!((rate - 3.0 / 4.0).abs() < 1e-9, "{rate}");
    assert!(pay["median_seconds"].as_f64().is_some());
    assert_eq!(row(&body, "operators", "alice")["prompts"], 4);
    assert_eq!(row(&body, "agents", "bot")["prompts"], 4);
    assert_eq!(body["overall"]["prompts"], 4);
    let outright: Vec<_> = body["outright"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tool"].clone(),
                r["allowed"].clone(),
                r["granted"].clone(),
            )
        })
        .collect();
    assert_eq!(
        outright,
        [
            (json!("read"), json!(2), json!(0)),
            (json!("pay"), json!(0), json!(1))
        ]
    );
    let days = body["days"].as_array().unwrap();
    assert!((30..=31).contains(&days.len()), "{}", days.len());
    assert_eq!(days.last().unwrap()["prompts"], 4);
    assert_eq!(body["rubber_stamp_seconds"], 2.0);
    assert_eq!(body["list_cap"], 50);
    // An explicit range without them.
    let (st, empty) = gw
        .get(
            "/v1/insights?since=2020-01-01T00:00:00Z&until=2020-01-03T00:00:00Z",
            OP,
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(empty["overall"]["prompts"], 0);
    assert_eq!(empty["days"].as_array().unwrap().len(), 2);
    assert_eq!(empty["days"][0]["day"], "2020-01-01");
    // Requests at once take turns (one computation at a time) and all get their answer.
    let all = futures::future::join_all((0..4).map(|_| gw.get("/v1/insights", OP))).await;
    for (st, b) in all {
        assert_eq!((st, &b["overall"]["prompts"]), (StatusCode::OK, &json!(4)));
    }
}

/// Bad input is a `400` JSON body naming what was wrong, never a 5xx; an agent's key is `403`.
#[tokio::test]
async fn bad_ranges_are_400_naming_the_parameter_and_agents_are_refused() {
    let gw = serve().await;
    let cases = [
        ("since=yesterday", "since"),
        ("until=2026-13-01T00:00:00Z", "until"),
        (
            "since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
            "until",
        ),
        (
            "since=2024-01-01T00:00:00Z&until=2026-01-01T00:00:00Z",
            "366 days",
        ),
        (
            "since=2026-01-01T00:00:00Z&since=2026-01-02T00:00:00Z",
            "since",
        ),
        ("limit=5", "limit"),
        ("since=%ZZ", "since"),
        ("since", "since"),
    ];
    for (q, named) in cases {
        let (st, body) = gw.get(&format!("/v1/insights?{q}"), OP).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{q}: {body}");
        assert_eq!(body["code"], "BAD_REQUEST", "{q}");
        let msg = body["message"].as_str().unwrap();
        assert!(msg.contains(named), "{q}: {msg}");
    }
    let long = format!("/v1/insights?since={}", "1".repeat(600));
    assert_eq!(gw.get(&long, OP).await.0, StatusCode::BAD_REQUEST);
    let (st, body) = gw.get("/v1/insights", BOT).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        gw.get("/v1/insights", "nobody").await.0,
        StatusCode::UNAUTHORIZED
    );
}

/// A call of `tool` by bot held 5 s ago and approved by alice now, in the store of `gw`; with
/// `allowed`, also an outright allow of the same call.
fn approved_and_allowed(gw: &crate::kit::Gw, tool: &str, allowed: bool) {
    // Held under the rules in force (an undeclared tool they would deny if asked again).
    let rules = gw.state.registry().policy_set_sha256.clone();
    gw.with_store(|s| {
        let reg =
            assent_core::policy::Registry::load(&[("a".into(), crate::kit::AGENTS.into())], &[])
                .unwrap();
        let pay = ToolCall::new("pay", None, json!({"amount": 500, "to": "x"})).unwrap();
        let mut v = evaluate(&reg, "bot", &pay);
        let call = CanonicalCall::new(ToolCall::new(tool, None, json!({})).unwrap()).unwrap();
        let now = assent_server::state::now_ms();
        let ttl = |_: &Verdict| 60_000;
        let mut p = Proposal::for_call("bot", "s1", &call, now - 5_000, &ttl, u64::MAX);
        p.policy_set_sha256 = Some(&rules);
        let id = s.create_approval(&p, &v).unwrap().id;
        s.decide(&id, &DecisionInput::approve(), "alice", &[], now)
            .unwrap();
        if allowed {
            v.kind = assent_core::VerdictKind::Allow;
            s.record_verdict("bot", "s1", call.call(), call.call_hash(), &v, now)
                .unwrap();
        }
    });
}

/// Attack (issue 16 §4): tool names come from agents and are drawn into the page's inline SVG
/// and its tables. A tool named to close the SVG `<text>` and open a `<script>` must come out
/// as text: no element of the name's making, the CSP unchanged, the charts still named.
#[tokio::test]
async fn a_tool_named_like_markup_cannot_inject_into_the_insights_page() {
    let gw = serve().await;
    let evil = "</text><script>alert(1)</script><text x=\"0\">";
    approved_and_allowed(&gw, evil, false);
    let cookie = gw.dashboard_session().await;
    let r = gw.dashboard_get("/ui/insights", &cookie).await;
    assert_eq!(r.status(), StatusCode::OK);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("style-src 'self'"),
        "{csp}"
    );
    let html = r.text().await.unwrap();
    assert!(!html.contains("<script>alert"), "the name became markup");
    assert!(
        !html.contains("</text><script>"),
        "the name closed an SVG text"
    );
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the page's own script"
    );
    assert!(
        !html.contains(" style="),
        "no inline style for the CSP to refuse"
    );
    assert!(
        html.contains("&lt;/text&gt;&lt;script&gt;alert(1)"),
        "the name is shown as text"
    );
    for id in ["chart-days", "chart-rate", "chart-time"] {
        assert!(
            html.contains(&format!(
                "<svg id=\"{id}\" role=\"img\" aria-labelledby=\"{id}-title\" aria-describedby=\"{id}-desc\""
            )),
            "{id}"
        );
        assert!(html.contains(&format!("<title id=\"{id}-title\">")), "{id}");
    }
    assert!(
        html.contains("href=\"/ui/insights\""),
        "the nav links the page"
    );
    // A bad range is a 400 page naming the field; signed out is the sign-in page.
    let bad = gw.dashboard_get("/ui/insights?since=nope", &cookie).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(
        bad.text()
            .await
            .unwrap()
            .contains("since must be an RFC 3339 time")
    );
    let page = gw
        .dashboard_page("/ui/insights?since=2020-01-01&until=2020-01-02", &cookie)
        .await;
    assert!(
        page.contains("Prompts per day (UTC), 1 days"),
        "a plain date is midnight UTC"
    );
    assert_eq!(
        page.matches("role=\"img\"").count(),
        3,
        "an empty range still draws its three charts"
    );
}

/// Found by review: tool names, which agents choose, reached the insights page's tables, its
/// "calls that needed nobody" list and its chart labels with their bidirectional and invisible
/// characters (only controls were dropped from the labels), so a name could reorder or hide
/// what the operator reads. Every place shows them as `\uXXXX`, as the suggestions do.
#[tokio::test]
async fn a_tool_named_with_a_direction_override_is_shown_escaped_on_the_insights_page() {
    let gw = serve().await;
    let spoof = "pay\u{202e}lla-evorppa";
    approved_and_allowed(&gw, spoof, true);
    let cookie = gw.dashboard_session().await;
    let r = gw.dashboard_get("/ui/insights", &cookie).await;
    assert_eq!(r.status(), StatusCode::OK);
    let html = r.text().await.unwrap();
    assert!(
        !html.contains('\u{202e}'),
        "a raw override reached the page"
    );
    let shown = html.matches("pay\\u202ella-evorppa").count();
    // The tools table, the outright list, and the two charts drawn per tool.
    assert!(shown >= 4, "shown escaped {shown} times");
}
