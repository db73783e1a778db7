//! Shared fixtures for assent's benchmarks (see BENCHMARKS.md): a policy of any size written
//! both as assent governance YAML and as Cedar ([`PolicySize`], [`governance_yaml`],
//! [`cedar_policies`]), the agent it governs, and a ~1 KiB tool call that needs approval and
//! one of the same size that does not; for the store benchmarks, the store they measure
//! ([`open_store`]) and a proposal of a call ([`proposal`]).

use assent_core::CanonicalCall;
use assent_core::gatekeeper::Verdict;
use assent_store::{Proposal, Store};
use serde_json::{Value, json};
use std::path::Path;

/// Number of rules of the small benchmark policy.
pub const RULES: usize = 50;

/// The `message_template` of the first rule covering `transfer`: the message a held
/// `transfer` call renders.
pub const TRANSFER_TEMPLATE: &str = "Send {{tool_args.amount}} {{tool_args.currency}} to {{tool_args.recipient}} (invoice {{tool_args.invoice.number}}) for {{agent_id}}?";

/// The shape of a benchmark policy: `rules` rules in all, `globs` of them with a glob `tool`
/// (none covering `transfer`), 3 covering `transfer`, the rest one other tool each.
#[derive(Debug, Clone, Copy)]
pub struct PolicySize {
    /// Rules in all.
    pub rules: usize,
    /// Rules whose `tool` is a glob (`fs_N_*`, `*_admin_N`), which every call is checked
    /// against.
    pub globs: usize,
}

/// Rules per governance policy: a large rule set is spread over `rules / 50` policies, each
/// selecting the agent.
const RULES_PER_POLICY: usize = 50;

/// The agent file: `transfer` plus 47 other tools (the same agent whatever the policy size,
/// so only the policy grows).
pub fn agent_yaml() -> String {
    let mut s =
        String::from("metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: transfer\n");
    for i in 0..RULES - 3 {
        s.push_str(&format!("    - alias: tool_{i}\n"));
    }
    s
}

/// One benchmark rule: the tool it covers (a name, or a glob when `glob`), its assent rule
/// body (the YAML lines after `- tool: NAME`) and its Cedar `when` condition.
struct Rule {
    tool: String,
    glob: bool,
    yaml: Vec<String>,
    cedar: String,
}

/// The rules of `size`: the globs first, then one rule for each other tool (each with a
/// condition), then the 3 covering `transfer`.
fn rules(size: PolicySize) -> Vec<Rule> {
    let rule = |tool: &str, yaml: &[&str], cedar: &str| Rule {
        tool: tool.to_string(),
        glob: false,
        yaml: yaml.iter().map(|l| l.to_string()).collect(),
        cedar: cedar.to_string(),
    };
    let glob = |i: usize| {
        let tool = if i.is_multiple_of(2) {
            format!("fs_{i}_*")
        } else {
            format!("*_admin_{i}")
        };
        Rule {
            cedar: format!("context.tool like \"{tool}\""),
            tool,
            glob: true,
            yaml: vec!["approval: true".into(), "risk_tier: R3".into()],
        }
    };
    let mut out: Vec<Rule> = (0..size.globs).map(glob).collect();
    out.extend((0..size.rules - size.globs - 3).map(|i| Rule {
        tool: format!("tool_{i}"),
        glob: false,
        yaml: vec![
            format!("approval: {{condition: {{args_match: {{amount: {{gt: {i}}}, currency: {{in: [USD, EUR]}}}}}}}}"),
            "risk_tier: R1".to_string(),
        ],
        cedar: format!(
            "context.args.amount > {i} && [\"USD\", \"EUR\"].contains(context.args.currency)"
        ),
    }));
    let template = format!("message_template: \"{TRANSFER_TEMPLATE}\"");
    out.push(rule(
        "transfer",
        &[
            &format!(
                "approval: {{condition: {{args_match: {{amount: {{gt: 1000}}}}}}, {template}}}"
            ),
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

/// The rules of `size` as assent governance YAML: policies `bench.pNNNNN-v1` of 50 rules
/// each, in rule order, each selecting agent `bot`.
pub fn governance_yaml(size: PolicySize) -> String {
    let mut s = String::from("policies:\n");
    for (i, r) in rules(size).iter().enumerate() {
        if i.is_multiple_of(RULES_PER_POLICY) {
            let id = i / RULES_PER_POLICY;
            s.push_str(&format!(
                "  - id: bench.p{id:05}-v1\n    selector: {{agents: [bot]}}\n    rules:\n"
            ));
        }
        s.push_str(&format!("      - tool: \"{}\"\n", r.tool));
        for line in &r.yaml {
            s.push_str(&format!("        {line}\n"));
        }
    }
    s
}

/// The same rules as Cedar policies: a `permit` means "approval required". A rule for one
/// tool constrains the action to it (`action == Action::"TOOL"`); a glob rule leaves the
/// action open and matches `context.tool` with `like`.
pub fn cedar_policies(size: PolicySize) -> String {
    rules(size)
        .iter()
        .map(|r| {
            let action = if r.glob {
                "action".to_string()
            } else {
                format!("action == Action::\"{}\"", r.tool)
            };
            format!(
                "permit(principal == Agent::\"bot\", {action}, resource) when {{ {} }};\n",
                r.cedar
            )
        })
        .collect()
}

/// A `transfer` call whose canonical JSON is about 1 KiB and that needs approval (amount over
/// 1000, external recipient).
pub fn call_arguments() -> Value {
    arguments(5000, "ext-acme-supplies")
}

/// A `transfer` call of the same shape and about the same size that no rule holds (amount
/// under 1000, internal recipient): its verdict is allow, with no message rendered.
pub fn allowed_call_arguments() -> Value {
    arguments(500, "int-acme-supplies")
}

fn arguments(amount: u64, recipient: &str) -> Value {
    json!({
        "amount": amount,
        "currency": "EUR",
        "recipient": recipient,
        "memo": "x".repeat(640),
        "invoice": {"number": "INV-2026-4711", "due": "2026-12-01", "lines": [
            {"sku": "A-100", "qty": 10, "price": 120},
            {"sku": "B-200", "qty": 5, "price": 600},
            {"sku": "C-300", "qty": 1, "price": 1000}
        ]},
        "tags": ["supplier", "quarterly", "approved-vendor"]
    })
}

/// The store the store benchmarks measure: a real SQLite file in `dir` (WAL,
/// `synchronous=FULL`), tokens valid for 60 s, the gateway's own envelope renderer.
pub fn open_store(dir: &Path) -> Store {
    Store::open(
        dir,
        60_000,
        std::sync::Arc::new(assent_server::WireEnvelopes),
    )
    .unwrap()
}

/// A proposal of `call` by agent `bot` in session `s` at `now` (Unix ms): held approvals wait
/// `ttl` ms, at most `max_pending` pending; no run, device or trace id, no target, plan or
/// policies.
pub fn proposal<'a>(
    call: &'a CanonicalCall,
    now: i64,
    ttl: &'a dyn Fn(&Verdict) -> i64,
    max_pending: u64,
) -> Proposal<'a> {
    Proposal::for_call("bot", "s", call, now, ttl, max_pending)
}
