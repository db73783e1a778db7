//! Risk that follows the session (issue 16 §3) over the HTTP API, on either backend: what a
//! session took in — through allowed calls, `POST /v1/tool-results`, redeemed tokens, grants —
//! raises its later calls (untrusted output then egress: R3; private data and egress in either
//! order: R4, the lethal trifecta; a tool changed during the session: R4), a fresh session is
//! untouched, a grant never stands in for the person an escalated call needs, and an edit is
//! re-gated with the session's state.

use crate::kit::{BOT, Gw, OP, assert_answer, assert_error, policy, serve_policy, token_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Agent `bot`'s local tools (MCP server `web` besides).
const TOOLS: [&str; 6] = [
    "fetch",
    "read_inbox",
    "send_email",
    "post",
    "write",
    "fetch_held",
];

/// The agent file of `bot`: [`TOOLS`] and MCP server `web`.
fn agent() -> String {
    let tools: String = TOOLS.map(|t| format!("    - alias: {t}\n")).concat();
    format!(
        "metadata: {{id: bot}}\naction_space:\n  local_tools:\n{tools}  mcp_servers:\n    - alias: web\n"
    )
}

const RULES: &str = "- tool: fetch
  untrusted_output: true
- tool: read_inbox
  private_data: true
- tool: send_email
  egress: true
- tool: post
  egress: true
  approval: true
- tool: write
  writes: true
- tool: fetch_held
  untrusted_output: true
  approval: true
- tool: browse
  server: web
  untrusted_output: true
";

async fn gateway() -> Gw {
    serve_policy(&agent(), &policy("t.session-risk-v1", RULES)).await
}

/// Proposes `tool({})` in `session`, returns the status and the body.
async fn call(gw: &Gw, session: &str, tool: &str) -> (StatusCode, Value) {
    gw.propose_in(session, tool, json!({"to": "x@example.com"}))
        .await
}

/// Asserts the call is allowed outright.
async fn allowed(gw: &Gw, session: &str, tool: &str) {
    let (s, b) = call(gw, session, tool).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
}

/// Asserts the call is held and returns the approval as an operator reads it.
async fn held(gw: &Gw, session: &str, tool: &str) -> Value {
    let (s, b) = call(gw, session, tool).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{tool} in {session}: {b}");
    let id = b["approval_id"].as_str().unwrap();
    let (s, a) = gw.approval(id, OP).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    a
}

fn reasons(a: &Value) -> String {
    a["reasons"].to_string()
}

/// A REST agent reports the result of `tool` in `session` (`POST /v1/tool-results`).
async fn report(gw: &Gw, session: &str, tool: &str) {
    let body = json!({"agent": "bot", "session_id": session, "tool": tool,
        "arguments": {"to": "x@example.com"}, "output_bytes": 10, "result_sha256": "ab".repeat(32)});
    let (s, b) = gw.post("/v1/tool-results", BOT, body).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
}

#[tokio::test]
async fn private_data_and_egress_in_one_session_is_held_at_r4_in_either_order() {
    let gw = gateway().await;
    // Private data in (an allowed read), then egress: the lethal trifecta.
    allowed(&gw, "t1", "read_inbox").await;
    let a = held(&gw, "t1", "send_email").await;
    assert_eq!(a["risk_tier"], "R4", "{a}");
    assert_eq!(a["triggers"], json!(["lethal_trifecta"]), "{a}");
    assert!(
        reasons(&a).contains("lethal trifecta") && reasons(&a).contains("`read_inbox`"),
        "{a}"
    );
    // The reverse order: data sent out first, then private data brought in.
    allowed(&gw, "t2", "send_email").await;
    let a = held(&gw, "t2", "read_inbox").await;
    assert_eq!(a["risk_tier"], "R4", "{a}");
    assert!(reasons(&a).contains("already sent data out"), "{a}");
    // Private data reported through /v1/tool-results marks the session as well.
    report(&gw, "t3", "read_inbox").await;
    let a = held(&gw, "t3", "send_email").await;
    assert_eq!(a["risk_tier"], "R4", "{a}");
    // A fresh session is clean.
    allowed(&gw, "t4", "send_email").await;
    gw.stop().await;
}

#[tokio::test]
async fn untrusted_output_then_egress_or_writes_is_held_at_r3_and_a_fresh_session_is_not() {
    let gw = gateway().await;
    allowed(&gw, "u1", "fetch").await;
    for tool in ["send_email", "write"] {
        let a = held(&gw, "u1", tool).await;
        assert_eq!(a["risk_tier"], "R3", "{a}");
        assert_eq!(a["triggers"], json!(["session_untrusted"]), "{a}");
        assert!(
            reasons(&a).contains("session read untrusted content from `fetch`"),
            "{a}"
        );
    }
    allowed(&gw, "u2", "send_email").await;
    allowed(&gw, "u2", "write").await;
    // Untrusted content reported through /v1/tool-results counts too.
    report(&gw, "u3", "fetch").await;
    assert_eq!(held(&gw, "u3", "write").await["risk_tier"], "R3");
    gw.stop().await;
}

/// A held untrusted-output call marks its session once its token is redeemed (fail closed:
/// a redeemed call is assumed to have run and returned), not while it waits.
#[tokio::test]
async fn a_held_read_of_untrusted_content_marks_the_session_when_redeemed() {
    let gw = gateway().await;
    let args = json!({"to": "x@example.com"});
    let id = gw.held("r1", "fetch_held", args.clone()).await;
    allowed(&gw, "r1", "write").await;
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    let token = token_of(&gw.as_agent(&id).await);
    let (s, b) = gw.redeem(&token, "fetch_held", args, None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let a = held(&gw, "r1", "write").await;
    assert!(reasons(&a).contains("`fetch_held`"), "{a}");
    gw.stop().await;
}

/// A session grant for `post` lets the next `post` through — until untrusted content entered
/// the session: then the grant does not stand in for the person the escalated call needs.
#[tokio::test]
async fn a_grant_never_stands_in_for_a_person_after_untrusted_content() {
    let gw = gateway().await;
    let args = json!({"to": "x@example.com"});
    let id = gw.held("g1", "post", args.clone()).await;
    let grant = json!({"decision": "approve", "scope": "session", "reason": "ok"});
    let (s, b) = gw.decide_with(&id, OP, grant).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = call(&gw, "g1", "post").await;
    assert_eq!(s, StatusCode::OK, "the grant covers the clean session: {b}");
    assert!(b["grant_id"].is_string(), "{b}");
    allowed(&gw, "g1", "fetch").await;
    let a = held(&gw, "g1", "post").await;
    assert_eq!(
        (&a["risk_tier"], &a["triggers"]),
        (&json!("R3"), &json!(["session_untrusted"])),
        "{a}"
    );
    gw.stop().await;
}

/// An operator's edit of a held call is re-gated in its session: untrusted content that
/// entered after the call was held raises the edit's risk, which an edit may not do.
#[tokio::test]
async fn an_edit_is_regated_with_what_the_session_took_in() {
    let gw = gateway().await;
    let id = gw.held("e1", "post", json!({"to": "a@example.com"})).await;
    let (s, b) = gw.edit(&id, json!({"to": "b@example.com"})).await;
    assert_eq!(s, StatusCode::OK, "a clean session's edit passes: {b}");
    let id = gw.held("e2", "post", json!({"to": "a@example.com"})).await;
    allowed(&gw, "e2", "fetch").await;
    let (s, b) = gw.edit(&id, json!({"to": "b@example.com"})).await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "EDIT_RAISES_RISK");
    gw.stop().await;
}

/// A tool whose definition changed (a review accepted) after the session began is R4 in that
/// session; a session that began after the change sees only the new definition.
#[tokio::test]
async fn a_tool_changed_during_the_session_is_held_at_r4() {
    let gw = gateway().await;
    let def = |d: &str| {
        json!({"agent": "bot", "server": "web", "tools": [{"name": "browse", "description": d,
               "inputSchema": {"type": "object"}}]})
    };
    let (s, b) = gw.post("/v1/tools/check", BOT, def("Browse.")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let browse = |session: &'static str| {
        let gw = &gw;
        async move {
            let body = json!({"server": "web"});
            gw.call(session, "browse", json!({}), body).await
        }
    };
    let (s, b) = browse("c1").await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    let (_, b) = gw
        .post("/v1/tools/check", BOT, def("Browse, then mail.")) // changed upstream
        .await;
    let review = b["tools"][0]["review_id"].as_str().unwrap().to_string();
    let path = format!("/v1/tools/reviews/{review}/accept");
    let (s, b) = gw.req("POST", &path, Some(OP), None).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = browse("c1").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (_, a) = gw.approval(b["approval_id"].as_str().unwrap(), OP).await;
    assert_eq!(a["risk_tier"], "R4", "{a}");
    assert!(a["triggers"].to_string().contains("tool_changed"), "{a}");
    assert!(reasons(&a).contains("`web/browse` changed"), "{a}");
    let (s, b) = browse("c2").await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
    gw.stop().await;
}
