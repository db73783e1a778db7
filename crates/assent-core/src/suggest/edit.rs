//! Where a prompt comes from and how a suggestion changes it (issue 16 §2): the
//! [`Source`]s that require approval of a call (governance rules, the agent's declaration), and
//! the policy files with each source's `approval` narrowed to "and not the pattern", or with a
//! new deny policy — the candidate a suggestion is replayed as, and the YAML shown.

use super::mine::{Constraint, Pin};
use crate::canonical::ToolCall;
use crate::condition::Outcome;
use crate::gatekeeper::evaluate;
use crate::policy::{Agent, ApprovalSpec, Registry};
use crate::risk::RiskTier;
use crate::verdict::VerdictKind;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The policy files a registry is loaded from: `(file name, YAML text)` pairs, as
/// [`Registry::load`] takes them.
#[derive(Debug, Clone, Default)]
pub struct PolicyFiles {
    /// Agent files.
    pub agents: Vec<(String, String)>,
    /// Governance files.
    pub governance: Vec<(String, String)>,
}

/// One step of a path into a YAML document.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Step {
    Key(String),
    Index(usize),
}

/// Where an approval requirement of a call is written: a file and the path of the node that
/// holds (or will hold) its `approval`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source {
    /// Agent file (`true`) or governance file.
    agent_file: bool,
    /// The file name.
    file: String,
    /// Path of the node whose `approval` is edited.
    node: Vec<Step>,
    /// The `approval` value to narrow when the node has none of its own (a tool inheriting
    /// its MCP server's blanket approval).
    inherited: Option<Vec<Step>>,
    /// Where, in words: `policy ID rules[2]`, `action_space.local_tools[pay]`.
    pub location: String,
    /// The agents a narrowed rule here removes prompts for: the agent file's own agent, or
    /// every agent a governance policy applies to (its selector lists it exactly, or its file
    /// names the policy).
    pub agents: Vec<String>,
}

/// One file change of a suggestion: where, and the new `approval` (or the new policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Edit {
    /// The file changed (or, for a new deny policy, a file name to add it as).
    pub file: String,
    /// Where in it, in words.
    pub location: String,
    /// The YAML to write there: `approval: …`, or a whole `policies:` document.
    pub yaml: String,
    /// The whole file with the change made (re-serialised: comments and layout are not kept),
    /// ready to write or replay.
    pub text: String,
}

/// Whether `spec` requires approval for `args` (a condition that cannot be evaluated does).
fn requires(spec: &ApprovalSpec, args: &Value) -> bool {
    match spec {
        ApprovalSpec::Exempt => false,
        ApprovalSpec::Required {
            condition: None, ..
        } => true,
        ApprovalSpec::Required {
            condition: Some(c), ..
        } => !matches!(c.evaluate(args), Outcome::NoMatch),
    }
}

/// Every source that requires approval of `call` for `agent` under `reg`, or why a narrower
/// condition cannot remove its prompt (a risk tier of R3 or more, an irreversible action, a
/// threshold or scope trigger, a deny condition that cannot be evaluated, not held at all).
pub fn sources(reg: &Registry, agent: &str, call: &ToolCall) -> Result<Vec<Source>, String> {
    let v = evaluate(reg, agent, call);
    if v.kind != VerdictKind::Confirm {
        return Err(format!("not held now ({})", v.kind.as_str()));
    }
    if v.terms.risk_tier >= RiskTier::R3 {
        return Err(format!("held by risk tier {}", v.terms.risk_tier.as_str()));
    }
    if v.terms.irreversible || !v.terms.triggers.is_empty() {
        return Err("held as irreversible or by a threshold or scope trigger".into());
    }
    let a = reg.agents.get(agent).ok_or("unknown agent")?;
    let mut out: Vec<Source> = declared(a, call).into_iter().collect();
    for (policy, rule) in reg.covering_rules(a, &call.tool, call.server.as_deref()) {
        if rule
            .deny
            .as_ref()
            .is_some_and(|d| requires(d, &call.arguments))
        {
            return Err(format!("a deny condition of policy {} holds it", policy.id));
        }
        if !rule
            .approval
            .as_ref()
            .is_some_and(|s| requires(s, &call.arguments))
        {
            continue;
        }
        // A policy selecting agents by a pattern, a namespace or labels covers agents never
        // seen: narrowing it would remove their prompts on another agent's evidence (found by
        // review: the replay check compared tool and pattern, not the agent).
        let sel = &policy.selector;
        if sel.namespace.is_some()
            || !sel.labels.is_empty()
            || sel.agents.iter().any(|a| a.contains(['*', '?', '[']))
        {
            return Err(format!(
                "policy {} selects agents by a pattern, a namespace or labels",
                policy.id
            ));
        }
        // A glob rule covers tools never seen: narrowing it would reach past the evidence.
        if rule.tool.as_str() != call.tool {
            return Err(format!(
                "policy {} asks through the tool pattern `{}`, which covers other tools",
                policy.id,
                rule.tool.as_str()
            ));
        }
        let agents: Vec<String> = reg
            .agents
            .values()
            .filter(|a| crate::policy::applies(policy, a))
            .map(|a| a.id.clone())
            .chain(sel.agents.iter().cloned())
            .collect::<std::collections::BTreeSet<String>>()
            .into_iter()
            .collect();
        if rule.server.is_none()
            && let Some(place) = elsewhere(reg, &agents, call)
        {
            return Err(format!(
                "policy {} asks for `{}` wherever it is called, and {place}",
                policy.id, call.tool
            ));
        }
        let index = policy.rules.iter().position(|r| std::ptr::eq(r, rule));
        out.push(Source {
            agent_file: false,
            file: policy.file.clone(),
            node: vec![
                Step::Key("policies".into()),
                Step::Key(format!("id={}", policy.id)),
                Step::Key("rules".into()),
                Step::Index(index.unwrap_or(usize::MAX)),
            ],
            inherited: None,
            location: format!("policy {} rules[{}]", policy.id, index.unwrap_or(0)),
            // Every agent it applies to — those its selector picks and those whose own file
            // names it — and the ids its selector lists whose files are not loaded yet (found
            // by review: an agent naming the policy, or not loaded, was not counted).
            agents,
        });
    }
    if out.is_empty() {
        return Err("no approval rule requires it".into());
    }
    Ok(out)
}

/// The agent file's declaration of `call` as a [`Source`], when it requires approval.
/// Where else than `call`'s place (its server, or a local tool) one of `agents` may call a
/// tool of its name, which a rule without `server` covers too: a local tool of the name, an
/// MCP server declaring every tool or naming it, or an agent whose file is not loaded (not
/// known: counted as elsewhere). `None` when nowhere. Found by review: a server-less rule
/// narrowed on the evidence of `staging-db`'s calls stopped asking for `prod-db`'s, where no
/// call had been seen, and the replay (of the history) could not show it.
fn elsewhere(reg: &Registry, agents: &[String], call: &ToolCall) -> Option<String> {
    let here = call.server.as_deref();
    for id in agents {
        let Some(a) = reg.agents.get(id) else {
            return Some(format!(
                "agent {id}'s file, which may declare it elsewhere, is not loaded"
            ));
        };
        if here.is_some() && a.local_tools.iter().any(|t| t.alias == call.tool) {
            return Some(format!("agent {id} declares it as a local tool too"));
        }
        let other = a.mcp_servers.iter().find(|s| {
            Some(s.alias.as_str()) != here
                && s.allowed_tools
                    .as_ref()
                    .is_none_or(|l| l.iter().any(|t| t.name == call.tool))
        });
        if let Some(s) = other {
            return Some(format!(
                "agent {id} may call it on MCP server `{}` too",
                s.alias
            ));
        }
    }
    None
}

fn declared(a: &Agent, call: &ToolCall) -> Option<Source> {
    let key = |s: &str| Step::Key(s.into());
    let by = |list: &str, field: &str, name: &str| Step::Key(format!("{list}:{field}={name}"));
    let src = |node: Vec<Step>, inherited, location: String| Source {
        agent_file: true,
        file: a.file.clone(),
        node,
        inherited,
        location,
        agents: vec![a.id.clone()],
    };
    let args = &call.arguments;
    let Some(alias) = &call.server else {
        let t = a.local_tools.iter().find(|t| t.alias == call.tool)?;
        requires(t.approval.as_ref()?, args).then_some(())?;
        let node = vec![key("action_space"), by("local_tools", "alias", &t.alias)];
        return Some(src(
            node,
            None,
            format!("action_space.local_tools[{}]", t.alias),
        ));
    };
    let s = a.mcp_servers.iter().find(|s| &s.alias == alias)?;
    let server = vec![key("action_space"), by("mcp_servers", "alias", alias)];
    // A server's blanket approval without `allowed_tools` covers every tool of the server:
    // narrowing it would reach past the evidence, so it is no source to narrow (and the
    // suggestion is dropped: see `sources`).
    let list = s.allowed_tools.as_ref()?;
    let t = list.iter().find(|t| t.name == call.tool)?;
    requires(t.approval.as_ref().or(s.approval.as_ref())?, args).then_some(())?;
    let mut node = server.clone();
    node.push(by("allowed_tools", "name", &t.name));
    let mut blanket = server;
    blanket.push(key("approval"));
    let inherited = t.approval.is_none().then_some(blanket);
    let location = format!(
        "action_space.mcp_servers[{alias}].allowed_tools[{}]",
        t.name
    );
    Some(src(node, inherited, location))
}

/// The node at `path` in `doc`, if there is one. A `Key("list:field=value")` step finds the
/// element of `list` whose `field` is `value` (a plain string element counts as its `name`);
/// `Key("id=ID")` the element of the current list with that `id`.
fn node_mut<'d>(doc: &'d mut Value, path: &[Step]) -> Option<&'d mut Value> {
    let mut cur = doc;
    for step in path {
        cur = match step {
            Step::Index(i) => cur.get_mut(*i)?,
            Step::Key(k) if k.starts_with("id=") => {
                let id = &k[3..];
                let list = cur.as_array_mut()?;
                list.iter_mut()
                    .find(|e| e.get("id").and_then(Value::as_str) == Some(id))?
            }
            Step::Key(k) => match k.split_once(':') {
                Some((list, sel)) => {
                    let (field, want) = sel.split_once('=')?;
                    let items = cur.get_mut(list)?.as_array_mut()?;
                    let e = items.iter_mut().find(|e| match e {
                        Value::String(s) => field == "name" && s == want,
                        _ => e.get(field).and_then(Value::as_str) == Some(want),
                    })?;
                    if let Value::String(s) = e {
                        *e = json!({ "name": s.clone() });
                    }
                    e
                }
                None => cur.get_mut(k.as_str())?,
            },
        };
    }
    Some(cur)
}

/// `approval` narrowed by "and one of `alts` holds", each alternative a `(key, operator
/// object)` (the pattern's [`Constraint::negated`] and a `{ne: value}` for each pinned
/// argument): `true` or a spec without a condition gains `condition: {args_match: {key: op}}`
/// (one group per alternative); a condition gets each alternative in each of its groups, a
/// group that then holds for no value is left out. `None` when it cannot be written so
/// (`false`, a group already constraining the key in a way that cannot be joined, or no group
/// left).
fn and_not(approval: &Value, alts: &[(&str, Value)]) -> Option<Value> {
    let mut spec = match approval {
        Value::Bool(true) => Map::new(),
        Value::Object(m) => m.clone(),
        _ => return None,
    };
    let (groups, was_list) = match spec.remove("condition") {
        None => (vec![json!({ "args_match": {} })], false),
        Some(Value::Array(groups)) => (groups, true),
        Some(g) => (vec![g], false),
    };
    let mut out = Vec::new();
    for g in &groups {
        for (key, neg) in alts {
            let joined = add_to(g, key, neg)?;
            if !empty_range(&joined["args_match"][*key]) {
                out.push(joined);
            }
        }
    }
    let condition = match out.len() {
        0 => return None,
        1 if !was_list => out.remove(0),
        _ => Value::Array(out),
    };
    spec.insert("condition".into(), condition);
    Some(Value::Object(spec))
}

/// Whether an operator object's number bounds admit no number (`{gt: 100, lt: 0}`).
fn empty_range(ops: &Value) -> bool {
    let get = |op: &str| ops.get(op).and_then(Value::as_f64);
    let lower = [(get("gt"), true), (get("gte"), false)]
        .into_iter()
        .filter_map(|(b, strict)| b.map(|b| (b, strict)))
        .max_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let upper = [(get("lt"), true), (get("lte"), false)]
        .into_iter()
        .filter_map(|(b, strict)| b.map(|b| (b, strict)))
        .min_by(|x, y| x.0.total_cmp(&y.0).then(y.1.cmp(&x.1)));
    match (lower, upper) {
        (Some((lo, ls)), Some((hi, hs))) => lo > hi || (lo == hi && (ls || hs)),
        _ => false,
    }
}

/// One condition group with `key: neg` added to its `args_match`. When the group already
/// constrains `key`, `neg`'s operator joins it (the conjunction of the two: `gt` keeps the
/// larger bound, `lt` the smaller, `not_in` the union, the same `ne` once); a literal `v` is
/// first written `{in: [v]}`, which holds, fails and cannot be evaluated alike (so a literal
/// `dry_run: true` and a pin's `{ne: true}` give a group that holds for no boolean but still
/// asks for a mistyped or missing `dry_run`: found by this fix's test, dropping that group
/// let `dry_run: "true"` through). `None` when it cannot be written (the same `not_pattern` or
/// `in` operator twice, or two `ne` of different values).
fn add_to(group: &Value, key: &str, neg: &Value) -> Option<Value> {
    let mut g = group.as_object()?.clone();
    let m = g.get_mut("args_match")?.as_object_mut()?;
    let Some(old) = m.get_mut(key) else {
        m.insert(key.to_string(), neg.clone());
        return Some(Value::Object(g));
    };
    if !old.is_object() {
        *old = json!({ "in": [old.clone()] });
    }
    let ops = old.as_object_mut()?;
    for (op, v) in neg.as_object()? {
        let joined = match (op.as_str(), ops.get(op)) {
            (_, None) => v.clone(),
            ("ne", Some(o)) if o == v => v.clone(),
            ("gt", Some(o)) => json!(if o.as_f64()? >= v.as_f64()? { o } else { v }),
            ("lt", Some(o)) => json!(if o.as_f64()? <= v.as_f64()? { o } else { v }),
            ("not_in", Some(o)) => {
                let mut all = o.as_array()?.clone();
                all.extend(
                    v.as_array()?
                        .iter()
                        .filter(|x| !all.contains(x))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
                Value::Array(all)
            }
            _ => return None,
        };
        ops.insert(op.clone(), joined);
    }
    Some(Value::Object(g))
}

/// Reads a policy file as a document.
fn parse(text: &str) -> Option<Value> {
    crate::yaml::from_str::<Value>(text).ok()
}

/// Writes a document as YAML.
fn yaml(v: &Value) -> Option<String> {
    serde_saphyr::to_string(v).ok()
}

/// `files` with every source's approval narrowed by "unless `c` and every pin of `pins`
/// holds" (each pinned argument present with its value: one missing, or of another type,
/// cannot be evaluated and still asks): the new files and the edits shown. `None` when a
/// source cannot be narrowed so.
pub fn narrow(
    files: &PolicyFiles,
    sources: &[Source],
    c: &Constraint,
    pins: &[Pin],
) -> Option<(PolicyFiles, Vec<Edit>)> {
    let mut out = files.clone();
    let mut edits = Vec::new();
    let mut alts: Vec<(&str, Value)> = c.negated().into_iter().map(|n| (c.key(), n)).collect();
    alts.extend(pins.iter().map(|(k, v)| (k.as_str(), json!({ "ne": v }))));
    for s in sources {
        let list = if s.agent_file {
            &mut out.agents
        } else {
            &mut out.governance
        };
        let (name, text) = list.iter_mut().find(|(n, _)| *n == s.file)?;
        let mut doc = parse(text)?;
        let old = match &s.inherited {
            Some(p) => node_mut(&mut doc, p)?.clone(),
            None => node_mut(&mut doc, &s.node)?.get("approval")?.clone(),
        };
        let new = and_not(&old, &alts)?;
        node_mut(&mut doc, &s.node)?
            .as_object_mut()?
            .insert("approval".into(), new.clone());
        *text = yaml(&doc)?;
        edits.push(Edit {
            file: name.clone(),
            location: s.location.clone(),
            yaml: yaml(&json!({ "approval": new }))?,
            text: String::new(),
        });
    }
    for e in &mut edits {
        let all = out.agents.iter().chain(&out.governance);
        e.text = all
            .filter(|(n, _)| *n == e.file)
            .map(|(_, t)| t.clone())
            .next()?;
    }
    Some((out, edits))
}

/// `text` as a message template that renders as itself: every `{{` (from a rejected value, the
/// agent's text) broken to `{ {` until none is left, so none is a placeholder (found by review:
/// a rejected value `{{tool_args}}` in the suggested deny's message became live interpolation;
/// one pass left `{{{x}}` as `{ {{x}}`).
fn inert(text: &str) -> String {
    let mut out = text.to_string();
    while out.contains("{{") {
        out = out.replace("{{", "{ {");
    }
    out
}

/// `files` with a new governance file holding one policy that denies `tool` (on `server`) for
/// `agents` when `c` holds: the new files and the edit shown.
pub fn deny_policy(
    files: &PolicyFiles,
    tool: &str,
    server: Option<&str>,
    agents: &[String],
    c: &Constraint,
) -> Option<(PolicyFiles, Edit)> {
    let slug: String = tool
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() {
                ch.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let id = format!("suggested.deny-{slug}-v1");
    let mut rule = json!({
        "tool": glob::Pattern::escape(tool),
        "deny": {"condition": {"args_match": {c.key(): c.matcher()}},
                 "message_template": inert(&format!("denied by suggestion: {}", c.describe()))},
    });
    if let Some(s) = server {
        rule["server"] = json!(s);
    }
    let agents: Vec<String> = agents.iter().map(|a| glob::Pattern::escape(a)).collect();
    let doc = json!({"policies": [{"id": id, "description": format!("Suggested from rejected calls: {}", c.describe()),
        "selector": {"agents": agents}, "rules": [rule]}]});
    let text = yaml(&doc)?;
    let file = format!("suggested/{id}.yaml");
    let mut out = files.clone();
    out.governance.push((file.clone(), text.clone()));
    Some((
        out,
        Edit {
            file,
            location: format!("new policy {id}"),
            yaml: text.clone(),
            text,
        },
    ))
}
