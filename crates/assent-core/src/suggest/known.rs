//! Which arguments of a tool may be mined (issue 16 §2): only those the tool really takes —
//! named by an input schema the gateway trusts ([`Schemas`], e.g. an MCP tool's pinned
//! `inputSchema`) or by the policy itself (a condition, a cost threshold or a scope of a rule
//! covering the tool, or the agent's declaration of it). The agent writes every argument of
//! its calls: one it made up that combines what people judged (a `risk_score` it sets low on
//! the calls it expects approved) would otherwise cover more calls than any real argument and
//! become the pattern, which the agent then meets on any call. A tool of which no argument is
//! known gets no argument-keyed suggestion, and an [`Unmined`] note saying why.

use crate::condition::Condition;
use crate::policy::{ApprovalSpec, Registry};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A tool as suggestions group it: its MCP server alias (`None` for a local tool) and name.
pub type ToolKey = (Option<String>, String);

/// The input schemas the gateway holds for tools, as the argument names each declares. What
/// goes in is the caller's judgement of trust: `assent-server` puts the MCP hub's pins (the
/// definitions the gateway fetched from the upstreams of its own config), never a definition
/// an agent's own relay reported (the agent's key could have written it; an operator's
/// acceptance in a tool review does not vouch for its arguments), which it marks
/// [`Schemas::unreviewed`] instead.
#[derive(Debug, Clone, Default)]
pub struct Schemas {
    /// The top-level argument names each tool's trusted input schemas declare (the union).
    pub declared: BTreeMap<ToolKey, BTreeSet<String>>,
    /// Tools with an input schema only an agent reported (not counted; named in the note).
    pub unreviewed: BTreeSet<ToolKey>,
}

impl Schemas {
    /// Adds the argument names input schema `schema` declares ([`schema_names`]) for
    /// `server`/`tool`.
    pub fn declare(&mut self, server: Option<&str>, tool: &str, schema: &Value) {
        let key = (server.map(String::from), tool.to_string());
        self.declared
            .entry(key)
            .or_default()
            .extend(schema_names(schema));
    }
}

/// The top-level argument names a JSON Schema of a tool's input declares: the keys of its
/// `properties` (an MCP `inputSchema`); none when it has no `properties` object.
pub fn schema_names(schema: &Value) -> BTreeSet<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Why a tool with settled decisions got no argument-keyed suggestion: shown with the
/// suggestions, so that an operator is never left to guess why a tool they decide on every day
/// has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Unmined {
    /// The tool.
    pub tool: String,
    /// Its MCP server alias, if any.
    pub server: Option<String>,
    /// Its calls a person approved or rejected in the history.
    pub decisions: u64,
    /// Why, in words.
    pub reason: String,
}

/// The reason of a tool of which no argument is known; `unreviewed`: an agent's relay
/// reported a schema for it.
pub(super) fn unknown_reason(unreviewed: bool) -> String {
    let schema = if unreviewed {
        "only an agent's own relay reported an input schema for it, which the agent's key can write (accepting a tool review vouches that the tool is safe to call, not for each argument it lists)"
    } else {
        "the gateway holds no input schema naming its arguments (local tools declare none; an MCP tool's is the definition the gateway's own hub pinned)"
    };
    format!(
        "no argument of this tool is known: {schema}, and no rule for it names an argument in a condition, a cost threshold or a scope; an argument the agent made up could otherwise become the pattern. Name the argument a rule should key on in a condition of the tool's rule to have it mined"
    )
}

/// The reason of a tool whose calls vary in more known arguments than are weighed.
pub(super) fn crowded_reason(max: usize) -> String {
    format!(
        "its calls vary in more than {max} of its known arguments, and none is weighed then (which one people judged cannot be told)"
    )
}

/// The argument names of `tool` on `server` that the policy of `reg` names for every one of
/// `agents` (none when one of them is not in `reg`): the keys of the conditions (`approval`,
/// `deny`) of the governance rules written for exactly this tool, their cost threshold's
/// `argument` and scopes' `arguments`, and the conditions of the agent's declaration of the
/// tool (a local tool's `approval`, an MCP server's listed tool's). Dotted keys (paths into
/// nested objects) are not names of a top-level argument and are left out.
///
/// Found by review: a rule matching tools by pattern (`tool: "*"`, `fs.*`), or an MCP
/// server's blanket `approval`, names an argument for tools that may not take it (a
/// `dry_run` the agent then adds only to the calls it expects approved); and tools of one name
/// are grouped across agents, so one agent's rule made an argument known for another's. So
/// only rules naming the tool itself count, and only names every agent's policy gives.
pub fn rule_named<'a>(
    reg: &Registry,
    agents: impl IntoIterator<Item = &'a str>,
    server: Option<&str>,
    tool: &str,
) -> BTreeSet<String> {
    let mut common: Option<BTreeSet<String>> = None;
    for id in agents {
        let Some(a) = reg.agents.get(id) else {
            return BTreeSet::new();
        };
        let mine = named_for(reg, a, server, tool);
        common = Some(match common {
            None => mine,
            Some(c) => c.intersection(&mine).cloned().collect(),
        });
    }
    common.unwrap_or_default()
}

/// [`rule_named`] for one agent `a`.
fn named_for(
    reg: &Registry,
    a: &crate::policy::Agent,
    server: Option<&str>,
    tool: &str,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let exact = |r: &crate::policy::Rule| {
        r.tool.as_str() == tool && !r.tool.as_str().contains(['*', '?', '['])
    };
    for (_, r) in reg
        .covering_rules(a, tool, server)
        .into_iter()
        .filter(|(_, r)| exact(r))
    {
        for spec in [&r.approval, &r.deny].into_iter().flatten() {
            out.extend(spec_keys(spec));
        }
        out.extend(r.thresholds.cost.iter().map(|c| c.argument.clone()));
        let scope = &r.scope;
        out.extend(scope.paths.iter().flat_map(|p| p.arguments.iter().cloned()));
        out.extend(
            scope
                .domains
                .iter()
                .flat_map(|d| d.arguments.iter().cloned()),
        );
    }
    let specs: Vec<&ApprovalSpec> = match server {
        None => a
            .local_tools
            .iter()
            .filter(|t| t.alias == tool)
            .filter_map(|t| t.approval.as_ref())
            .collect(),
        Some(alias) => a
            .mcp_servers
            .iter()
            .filter(|s| s.alias == alias)
            .flat_map(|s| {
                let listed = s.allowed_tools.iter().flatten().filter(|t| t.name == tool);
                listed.filter_map(|t| t.approval.as_ref())
            })
            .collect(),
    };
    for spec in specs {
        out.extend(spec_keys(spec));
    }
    out.retain(|k| !k.contains('.'));
    out
}

/// The keys a spec's condition names.
fn spec_keys(spec: &ApprovalSpec) -> Vec<String> {
    match spec {
        ApprovalSpec::Required {
            condition: Some(Condition(groups)),
            ..
        } => groups
            .iter()
            .flat_map(|g| g.predicates.iter().map(|(k, _)| k.clone()))
            .collect(),
        _ => Vec::new(),
    }
}
