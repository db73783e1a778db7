//! Two holes in the verdict path found by review, through the HTTP API: a tool name that only
//! looks like a governed one (`Delete_Repo`, `ｄelete_repo`, `delete_repo ` beside a rule
//! denying `delete_repo`) was allowed at `POST /v1/tool-calls`, where an executor dispatching
//! names loosely runs the denied tool; and an operator's edit dropping the argument a `deny`
//! condition reads turned a would-be deny into an accepted edit.

use crate::kit::{assert_error, assert_says, policy, start_policy};
use crate::quorum::held_under;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Agent `bot` with MCP server `gh` declared without `allowed_tools` (any name passes the
/// declaration).
const GH_AGENT: &str = "metadata: {id: bot}
action_space:
  mcp_servers:
    - alias: gh
";

#[tokio::test]
async fn a_tool_named_like_a_denied_one_is_held_at_the_gate_never_allowed() {
    let dir = tempfile::tempdir().unwrap();
    // Found by review: a glob rule written in mixed case (`Drop_*`) held no call spelled
    // another way (`drop_table`, `DROP_TABLE`), only exact-name rules did.
    let rules = "- {tool: delete_repo, server: gh, deny: true}\n- {tool: \"merge_*\", server: gh, approval: true}\n- {tool: \"Drop_*\", server: gh, deny: true}\n";
    let gw = start_policy(dir.path(), GH_AGENT, &policy("acme.test.gh", rules)).await;
    let on_gh = json!({"server": "gh"});
    let (s, b) = gw.call("s1", "delete_repo", json!({}), on_gh.clone()).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    let (s, b) = gw.call("s1", "Drop_table", json!({}), on_gh.clone()).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    let (s, b) = gw
        .call("s1", "create_issue", json!({}), on_gh.clone())
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    for tool in [
        "Delete_Repo",
        "\u{ff44}elete_repo",
        "delete_repo ",
        "Merge_pr",
        "drop_table",
        "DROP_TABLE",
    ] {
        let (s, b) = gw.call("s1", tool, json!({}), on_gh.clone()).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{tool:?} is held: {b}");
        assert_eq!(b["triggers"], json!(["tool_lookalike"]), "{tool:?}: {b}");
        let reasons = b["reasons"].to_string();
        assert!(reasons.contains("looks like `"), "{tool:?}: {reasons}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn an_edit_that_leaves_a_deny_unevaluable_is_refused_edit_denied() {
    // `pay` to mallory is denied; the held call (500: over the agent's threshold) pays acme.
    let rules = "- tool: pay\n  deny: {condition: {args_match: {to: mallory}}}\n";
    let (_dir, gw, id) = held_under(rules).await;
    let edited = json!({"decision": "approve", "arguments": {"amount": 500}});
    let (s, b) = gw.decide_with(&id, "alice-key", edited).await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "EDIT_DENIED");
    assert_says(&b, "message", "cannot be evaluated against the edited call");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "pending", "nothing approved: {a}");
    assert!(a.get("token").is_none_or(Value::is_null), "{a}");
    // An edit the deny still reads is accepted.
    let edited = json!({"decision": "approve", "arguments": {"amount": 200, "to": "acme"}});
    let (s, b) = gw.decide_with(&id, "alice-key", edited).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}
