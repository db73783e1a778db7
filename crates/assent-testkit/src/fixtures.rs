//! Policy fixtures more than one crate's tests serve a gateway with, and [`policy`], which
//! writes a governance file around a rule list.

/// Agent `bot`: `read`, `pay` (held over 100, with a message template), `quick`, `lenient`,
/// and MCP server `fs` with `read_file` and `write_file` (always held). The server's test kit
/// (`AGENTS`) and the API client's live tests use it.
pub const BOT_AGENT: &str = r#"
metadata: {id: bot, name: Bot}
action_space:
  local_tools:
    - alias: read
    - alias: pay
      approval:
        message_template: "Pay {{tool_args.amount}} to {{tool_args.to}}?"
        condition: {args_match: {amount: {gt: 100}}}
    - alias: quick
    - alias: lenient
  mcp_servers:
    - alias: fs
      allowed_tools: [read_file, {name: write_file, approval: true}]
"#;

/// One governance file: policy `id` for every agent, with `rules` as its rule list — YAML list
/// items written flush left (`- tool: pay` and their keys below), which this indents under
/// `rules:`.
pub fn policy(id: &str, rules: &str) -> String {
    let mut gov =
        format!("\npolicies:\n  - id: {id}\n    selector: {{agents: [\"*\"]}}\n    rules:\n");
    for line in rules.lines().filter(|l| !l.trim().is_empty()) {
        gov.push_str("      ");
        gov.push_str(line);
        gov.push('\n');
    }
    gov
}
