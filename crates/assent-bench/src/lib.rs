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

/// 50 governance rules: 47 for other tools (each with a condition), 3 covering `transfer`.
pub fn governance_yaml() -> String {
    let mut s = String::from(
        "policies:\n  - id: bench.policy-v1\n    selector: {agents: [bot]}\n    rules:\n",
    );
    for i in 0..RULES - 3 {
        s.push_str(&format!(
            "      - tool: tool_{i}\n        approval: {{condition: {{args_match: {{amount: {{gt: {i}}}, currency: {{in: [USD, EUR]}}}}}}}}\n        risk_tier: R1\n"
        ));
    }
    s.push_str("      - tool: transfer\n        approval: {condition: {args_match: {amount: {gt: 1000}}}}\n        risk_tier: R2\n");
    s.push_str("      - tool: transfer\n        approval: {condition: {args_match: {currency: {not_in: [USD, EUR, GBP]}}}}\n");
    s.push_str("      - tool: transfer\n        approval: {condition: {args_match: {recipient: {pattern: \"^ext-\"}}}}\n        approvers: [finance]\n");
    s
}

/// The same 50 rules as Cedar policies: a `permit` means "approval required".
pub fn cedar_policies() -> String {
    let mut s = String::new();
    for i in 0..RULES - 3 {
        s.push_str(&format!(
            "permit(principal == Agent::\"bot\", action == Action::\"tool_{i}\", resource) when {{ context.args.amount > {i} && [\"USD\", \"EUR\"].contains(context.args.currency) }};\n"
        ));
    }
    s.push_str("permit(principal == Agent::\"bot\", action == Action::\"transfer\", resource) when { context.args.amount > 1000 };\n");
    s.push_str("permit(principal == Agent::\"bot\", action == Action::\"transfer\", resource) when { !([\"USD\", \"EUR\", \"GBP\"].contains(context.args.currency)) };\n");
    s.push_str("permit(principal == Agent::\"bot\", action == Action::\"transfer\", resource) when { context.args.recipient like \"ext-*\" };\n");
    s
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
