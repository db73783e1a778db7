//! The MCP hub looks at an upstream only for an agent that declares it: a call to a server or
//! tool the caller's agent file does not name is refused before the hub fetches that
//! server's tool list, pins it or waits on its reviews.

use crate::get_op;
use crate::hub_kit::{hub_call, hub_gateway};
use crate::mcp_upstream_attacks::hub_upstream;
use serde_json::Value;

const KEY: &str = "hub-declared-agent-key-0123456789";

/// Found by review: the hub ran its pin check before consulting the agent's declarations: for
/// a server the agent does not declare it fetched the upstream's tool list and asked the
/// gateway to pin it (which refused: `the tool list could not be verified`), and a tool the
/// agent does not declare on a declared server waited on that tool's review before the
/// gateway denied it. The declarations are consulted first now: the call is refused at once,
/// naming them, and `other` is never pinned.
#[test]
fn a_call_to_an_undeclared_hub_upstream_is_refused_before_its_tools_are_looked_at() {
    let source = hub_upstream(false);
    let (_dir, mut server) = hub_gateway(
        KEY,
        &[("good", Some("[hello]"), &source), ("other", None, &source)],
    );
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let call = rmcp::model::CallToolRequestParams::new("other__hello");
    let said = hub_call(&rt, &url, KEY, call);
    assert_eq!(said["isError"], true, "{said}");
    let text = said.to_string();
    assert!(
        text.contains("MCP server `other` is not declared by agent `helper`")
            && !text.contains("could not be verified"),
        "{said}"
    );
    let pins: Value = get_op(&url, "/v1/tools/pins");
    assert!(
        !pins.to_string().contains("\"other\""),
        "the undeclared server was pinned: {pins}"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// Found by review: the hub kept the agent of each key for good. A reload that gave the key to
/// another agent had every call the hub made with it proposed for the old agent, refused by
/// the gateway (this key acts for agent `second`, not `helper`), until the hub restarted. The
/// hub asks the gateway again after 5 s, so the key acts for its new agent.
#[test]
fn a_key_a_reload_gives_to_another_agent_acts_for_that_agent_in_the_hub() {
    use crate::hub_kit::{py_list, py_text, py_upstream};
    let source = py_upstream(&py_list(&["hello"]), &py_text("hi"));
    let (dir, mut server) = hub_gateway(KEY, &[("good", Some("[hello]"), &source)]);
    let url = server.url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let call = || rmcp::model::CallToolRequestParams::new("good__hello");
    let said = hub_call(&rt, &url, KEY, call());
    assert_ne!(said["isError"], true, "{said}");
    let second = "metadata: {id: second}\naction_space:\n  mcp_servers:\n    - alias: good\n      allowed_tools: [hello]\n";
    std::fs::write(dir.path().join("second.agf.yaml"), second).unwrap();
    let cfg = dir.path().join("assent.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let moved = text
        .replace(
            "agents: [helper.agf.yaml]",
            "agents: [helper.agf.yaml, second.agf.yaml]",
        )
        .replace(
            "name: helper, kind: agent, agent_id: helper",
            "name: second, kind: agent, agent_id: second",
        );
    assert_ne!(moved, text);
    std::fs::write(&cfg, moved).unwrap();
    let out = crate::cli(&url, &["reload"]);
    assert!(out.status.success(), "{out:?}");
    std::thread::sleep(std::time::Duration::from_secs(6));
    let said = hub_call(&rt, &url, KEY, call());
    assert_ne!(
        said["isError"], true,
        "the key acts for `second` now: {said}"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
