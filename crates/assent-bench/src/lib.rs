//! Shared fixtures for assent's benchmarks (see BENCHMARKS.md): the 50-rule policy written
//! both as assent governance YAML and as Cedar, and a ~1 KiB tool call.

use serde_json::{Value, json};

/// Number of rules in the benchmark policy.
pub const RULES: usize = 50;

/// The agent file: `transfer` plus the 47 other tools the rules name.
pub fn agent_yaml() -> String {
    let mut s =
        String::from("metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: transfer\n");
    for i in 0..RULES - 3 {
        s.push_str(&format!("    - alias: tool_{i}\n"));
    }
    s
}

/// One benchmark rule: the tool it covers, its assent rule body (the YAML lines after
/// `- tool: NAME`) and its Cedar `when` condition.
struct Rule {
    tool: String,
    yaml: Vec<String>,
    cedar: String,
}

/// The 50 rules: 47 for other tools (each with a condition), 3 covering `transfer`.
fn rules() -> Vec<Rule> {
    let rule = |tool: &str, yaml: &[&str], cedar: &str| Rule {
        tool: tool.to_string(),
        yaml: yaml.iter().map(|l| l.to_string()).collect(),
        cedar: cedar.to_string(),
    };
    let mut out: Vec<Rule> = (0..RULES - 3)
        .map(|i| Rule {
            tool: format!("tool_{i}"),
            yaml: vec![
                format!("approval: {{condition: {{args_match: {{amount: {{gt: {i}}}, currency: {{in: [USD, EUR]}}}}}}}}"),
                "risk_tier: R1".to_string(),
            ],
            cedar: format!(
                "context.args.amount > {i} && [\"USD\", \"EUR\"].contains(context.args.currency)"
            ),
        })
        .collect();
    out.push(rule(
        "transfer",
        &[
            "approval: {condition: {args_match: {amount: {gt: 1000}}}}",
            "risk_tier: R2",
        ],
        "context.args.amount > 1000",
    ));
    out.push(rule(
        "transfer",
        &["approval: {condition: {args_match: {currency: {not_in: [USD, EUR, GBP]}}}}"],
        "!([\"USD\", \"EUR\", \"GBP\"].contains(context.args.currency))",
    ));
    out.push(rule(
        "transfer",
        &[
            "approval: {condition: {args_match: {recipient: {pattern: \"^ext-\"}}}}",
            "approvers: [finance]",
        ],
        "context.args.recipient like \"ext-*\"",
    ));
    out
}

/// The 50 rules as assent governance YAML (one policy selecting agent `bot`).
pub fn governance_yaml() -> String {
    let mut s = String::from(
        "policies:\n  - id: bench.policy-v1\n    selector: {agents: [bot]}\n    rules:\n",
    );
    for r in rules() {
        s.push_str(&format!("      - tool: {}\n", r.tool));
        for line in &r.yaml {
            s.push_str(&format!("        {line}\n"));
        }
    }
    s
}

/// The same 50 rules as Cedar policies: a `permit` means "approval required".
pub fn cedar_policies() -> String {
    rules()
        .iter()
        .map(|r| {
            format!(
                "permit(principal == Agent::\"bot\", action == Action::\"{}\", resource) when {{ {} }};\n",
                r.tool, r.cedar
            )
        })
        .collect()
}

/// A `transfer` call whose canonical JSON is about 1 KiB.
pub fn call_arguments() -> Value {
    json!({
        "amount": 5000,
        "currency": "EUR",
        "recipient": "ext-acme-supplies",
        "memo": "x".repeat(640),
        "invoice": {"number": "INV-2026-4711", "due": "2026-12-01", "lines": [
            {"sku": "A-100", "qty": 10, "price": 120},
            {"sku": "B-200", "qty": 5, "price": 600},
            {"sku": "C-300", "qty": 1, "price": 1000}
        ]},
        "tags": ["supplier", "quarterly", "approved-vendor"]
    })
}
