//! Agent Format 1.0 agent files (seed 004): their serde shapes (unknown fields ignored, as the
//! format's forward-compatibility rule requires; strict mode is the registry's job) and their
//! validation, step by step, into an [`Agent`]: metadata, `local_tools`, `mcp_servers` with
//! `allowed_tools`, `local_agents` / `remote_agents` with `allowed_skills`, and
//! `constraints.governance_policies`. It does not resolve policy references (the registry does).

use super::error::{LoadError, yaml_err};
use super::model::{
    Agent, AllowedTool, ApprovalSpec, Delegate, DelegateSource, LocalTool, McpServer,
    ORCHESTRATORS_ANNOTATION, PolicyRef, SkillRef,
};
use crate::json::{present, written};
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, HashSet};

#[derive(Deserialize)]
struct RawAgentFile {
    metadata: RawMeta,
    #[serde(default)]
    action_space: RawActionSpace,
    #[serde(default)]
    constraints: RawConstraints,
}
#[derive(Deserialize)]
struct RawMeta {
    id: Spanned<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "written")]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Any values (Agent Format: opaque pass-through data); only
    /// [`ORCHESTRATORS_ANNOTATION`] is read, and only as a string.
    #[serde(default)]
    annotations: BTreeMap<String, Value>,
}
#[derive(Deserialize, Default)]
struct RawActionSpace {
    #[serde(default)]
    local_tools: Vec<Spanned<RawLocalTool>>,
    #[serde(default)]
    mcp_servers: Vec<Spanned<RawMcpServer>>,
    #[serde(default)]
    local_agents: Vec<Spanned<RawLocalAgent>>,
    #[serde(default)]
    remote_agents: Vec<Spanned<RawRemoteAgent>>,
}
#[derive(Deserialize)]
struct RawLocalAgent {
    alias: String,
    source: String,
    #[serde(default = "file_type")]
    source_type: String,
    #[serde(default, deserialize_with = "present")]
    approval: Option<Value>,
}
#[derive(Deserialize)]
struct RawRemoteAgent {
    alias: String,
    #[serde(default, deserialize_with = "present")]
    approval: Option<Value>,
    #[serde(default, deserialize_with = "written")]
    allowed_skills: Option<Vec<Value>>,
}
#[derive(Deserialize)]
struct RawLocalTool {
    alias: String,
    #[serde(default, deserialize_with = "present")]
    approval: Option<Value>,
}
#[derive(Deserialize)]
struct RawMcpServer {
    alias: String,
    #[serde(default, deserialize_with = "present")]
    approval: Option<Value>,
    #[serde(default, deserialize_with = "written")]
    allowed_tools: Option<Vec<Value>>,
}
#[derive(Deserialize, Default)]
struct RawConstraints {
    #[serde(default)]
    governance_policies: Vec<Spanned<RawPolicyRef>>,
}
#[derive(Deserialize)]
struct RawPolicyRef {
    policy_ref: String,
    #[serde(default = "yes")]
    required: bool,
}
fn yes() -> bool {
    true
}
/// `local_agents[].source_type` when omitted (Agent Format: default `file`).
fn file_type() -> String {
    "file".to_string()
}

/// Whether `s` is an Agent Format alias: `^[a-zA-Z_][a-zA-Z0-9_]*$`.
fn identifier_ok(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_alphabetic() || x == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// Whether `s` is an agent id: `^[a-z0-9][a-z0-9_-]*$` (found by review: a leading `_` or
/// `-` was let through though the error message said otherwise).
fn agent_id_ok(s: &str) -> bool {
    let mut c = s.chars();
    // At most 256 bytes, as every id the API takes (found by review: an id of a million
    // characters under a selector glob of many stars overflowed the stack at a reload).
    s.len() <= 256
        && matches!(c.next(), Some(x) if x.is_ascii_lowercase() || x.is_ascii_digit())
        && c.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == '_' || x == '-')
}

/// Where an agent file's errors go: each with the file and, when known, its line.
struct Sink<'a> {
    file: &'a str,
    errs: &'a mut Vec<LoadError>,
}

impl Sink<'_> {
    fn push(&mut self, line: Option<u64>, message: String) {
        self.errs.push(LoadError {
            file: self.file.to_string(),
            line,
            message,
        });
    }

    /// Parses an optional `approval`; `None` after pushing `WHAT: reason` when it is invalid.
    fn approval(
        &mut self,
        line: Option<u64>,
        what: &str,
        v: Option<&Value>,
    ) -> Option<Option<ApprovalSpec>> {
        match v.map(ApprovalSpec::parse).transpose() {
            Ok(a) => Some(a),
            Err(e) => {
                self.push(line, format!("{what}: {e}"));
                None
            }
        }
    }

    /// Pushes `KIND alias `ALIAS` must match …` unless `alias` is an identifier.
    fn check_alias(&mut self, line: Option<u64>, kind: &str, alias: &str) {
        if !identifier_ok(alias) {
            self.push(
                line,
                format!("{kind} alias `{alias}` must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
            );
        }
    }

    /// Checks one `action_space` entry of `kind` (`local tool`, `MCP server`) named `alias`:
    /// an identifier ([`Sink::check_alias`]), no duplicate of an alias in `taken`, a valid
    /// `approval`. Returns its label (`KIND `ALIAS``) and approval, adding `alias` to `taken`;
    /// `None` when the entry is left out (its problem pushed). `taken` is a set so that a
    /// file of many thousands of entries is checked in linear time (it is loaded under the
    /// reload lock).
    fn entry<'t>(
        &mut self,
        line: Option<u64>,
        kind: &str,
        alias: &'t str,
        taken: &mut HashSet<&'t str>,
        approval: Option<&Value>,
    ) -> Option<(String, Option<ApprovalSpec>)> {
        self.check_alias(line, kind, alias);
        if taken.contains(alias) {
            self.push(line, format!("duplicate {kind} alias `{alias}`"));
            return None;
        }
        let what = format!("{kind} `{alias}`");
        let approval = self.approval(line, &what, approval)?;
        taken.insert(alias);
        Some((what, approval))
    }
}

/// Validates one agent file into an [`Agent`]; `None` when it cannot be used at all (YAML
/// error, bad `metadata.id`, or an id already in `agents`). Every problem is pushed to `errs`
/// with the file and line: bad or duplicate aliases (Agent Format: runtimes MUST reject
/// them), bad `approval` values, bad `allowed_tools` / `allowed_skills` entries. An entry
/// with an error is left out; the rest of the file is still checked.
pub(super) fn load_agent(
    file: &str,
    text: &str,
    agents: &BTreeMap<String, Agent>,
    errs: &mut Vec<LoadError>,
) -> Option<Agent> {
    let raw: RawAgentFile = match crate::yaml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            errs.push(yaml_err(file, e));
            return None;
        }
    };
    let mut sink = Sink { file, errs };
    let (id, id_line) = (
        raw.metadata.id.value.clone(),
        Some(raw.metadata.id.referenced.line()),
    );
    if !agent_id_ok(&id) {
        sink.push(
            id_line,
            format!("metadata.id `{id}` must match ^[a-z0-9][a-z0-9_-]*$ and be at most 256 bytes"),
        );
        return None;
    }
    if let Some(prev) = agents.get(&id) {
        sink.push(
            id_line,
            format!("agent id `{id}` is already defined in {}", prev.file),
        );
        return None;
    }
    let space = &raw.action_space;
    let local_tools = local_tools(&space.local_tools, &mut sink);
    let mcp_servers = mcp_servers(&space.mcp_servers, &mut sink);
    let delegates = delegates(space, &mut sink);
    let policy_refs = raw
        .constraints
        .governance_policies
        .iter()
        .map(|r| PolicyRef {
            id: r.value.policy_ref.clone(),
            required: r.value.required,
            line: Some(r.referenced.line()),
        })
        .collect();
    Some(Agent {
        name: raw.metadata.name.clone().unwrap_or_else(|| id.clone()),
        id,
        namespace: raw.metadata.namespace.clone(),
        labels: raw.metadata.labels.clone(),
        orchestrators: accepted_orchestrators(&raw.metadata.annotations),
        file: file.to_string(),
        local_tools,
        mcp_servers,
        delegates,
        policy_refs,
        refused: None,
    })
}

/// The agent ids named in annotation [`ORCHESTRATORS_ANNOTATION`] (a string: comma-separated,
/// blanks trimmed, empty entries dropped; any other value names none): the agents this
/// agent's own file accepts as its orchestrators. Other annotations may hold anything.
fn accepted_orchestrators(annotations: &BTreeMap<String, Value>) -> Vec<String> {
    annotations
        .get(ORCHESTRATORS_ANNOTATION)
        .and_then(Value::as_str)
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// `action_space.local_tools`: aliases unique, approvals valid.
fn local_tools(raw: &[Spanned<RawLocalTool>], sink: &mut Sink<'_>) -> Vec<LocalTool> {
    let mut out: Vec<LocalTool> = Vec::new();
    let mut taken = HashSet::new();
    for t in raw {
        let line = Some(t.referenced.line());
        let alias = &t.value.alias;
        let approval = t.value.approval.as_ref();
        let entry = sink.entry(line, "local tool", alias, &mut taken, approval);
        if let Some((_, approval)) = entry {
            let alias = alias.clone();
            out.push(LocalTool { alias, approval });
        }
    }
    out
}

/// `action_space.mcp_servers`: aliases unique, approvals valid, `allowed_tools` entries valid
/// and unique.
fn mcp_servers(raw: &[Spanned<RawMcpServer>], sink: &mut Sink<'_>) -> Vec<McpServer> {
    let mut out: Vec<McpServer> = Vec::new();
    let mut taken = HashSet::new();
    for s in raw {
        let line = Some(s.referenced.line());
        let approval = s.value.approval.as_ref();
        let entry = sink.entry(line, "MCP server", &s.value.alias, &mut taken, approval);
        let Some((what, approval)) = entry else {
            continue;
        };
        let alias = s.value.alias.clone();
        let allowed_tools = s.value.allowed_tools.as_ref().map(|list| {
            let kind = Entries {
                key: "name",
                what: "tool name",
                list: "allowed_tools",
                duplicate: "duplicate allowed_tools entry",
            };
            kind.parse(list, line, &what, sink)
                .into_iter()
                .map(|(name, approval)| AllowedTool { name, approval })
                .collect()
        });
        out.push(McpServer {
            alias,
            approval,
            allowed_tools,
        });
    }
    out
}

/// The shape of a list of named entries with optional approvals (`allowed_tools`,
/// `allowed_skills`): each a plain name or `{KEY, approval}`.
struct Entries {
    /// The object key that names the entry (`name`, `id`).
    key: &'static str,
    /// What a plain entry is (`tool name`, `skill id`).
    what: &'static str,
    /// The list's key, for errors.
    list: &'static str,
    /// The error for a repeated name, before the name.
    duplicate: &'static str,
}

impl Entries {
    /// The valid entries of `list` as `(name, approval)`, first of each name; errors name
    /// `OWNER LIST[i]` or `OWNER: DUPLICATE `NAME``. Names seen are kept in a set: linear
    /// time for lists of many thousands.
    fn parse(
        &self,
        list: &[Value],
        line: Option<u64>,
        owner: &str,
        sink: &mut Sink<'_>,
    ) -> Vec<(String, Option<ApprovalSpec>)> {
        let mut out: Vec<(String, Option<ApprovalSpec>)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for (i, entry) in list.iter().enumerate() {
            match self.entry(entry) {
                Ok((n, _)) if seen.contains(&n) => {
                    sink.push(line, format!("{owner}: {} `{n}`", self.duplicate))
                }
                Ok(e) => {
                    seen.insert(e.0.clone());
                    out.push(e);
                }
                Err(e) => sink.push(line, format!("{owner} {}[{i}]: {e}", self.list)),
            }
        }
        out
    }

    fn entry(&self, entry: &Value) -> Result<(String, Option<ApprovalSpec>), String> {
        match entry {
            Value::String(n) if !n.is_empty() => Ok((n.clone(), None)),
            Value::Object(m) => match m.get(self.key).and_then(Value::as_str) {
                Some(n) if !n.is_empty() => m
                    .get("approval")
                    .map(ApprovalSpec::parse)
                    .transpose()
                    .map(|approval| (n.to_string(), approval)),
                _ => Err(format!("an object entry needs a non-empty `{}`", self.key)),
            },
            _ => Err(format!(
                "an entry must be a {} or {{{}, approval}}",
                self.what, self.key
            )),
        }
    }
}

/// `action_space.local_agents` then `remote_agents` (seed 004 "Approval on Agent
/// Delegation"): aliases unique across both, a local agent's `source` not empty, approvals
/// valid, a remote agent's `allowed_skills` valid and unique.
fn delegates(space: &RawActionSpace, sink: &mut Sink<'_>) -> Vec<Delegate> {
    let locals = space.local_agents.iter().map(|a| DelegateEntry {
        line: a.referenced.line(),
        alias: &a.value.alias,
        approval: a.value.approval.as_ref(),
        skills: None,
        source: Some((&a.value.source, &a.value.source_type)),
    });
    let remotes = space.remote_agents.iter().map(|a| DelegateEntry {
        line: a.referenced.line(),
        alias: &a.value.alias,
        approval: a.value.approval.as_ref(),
        skills: Some(a.value.allowed_skills.as_deref()),
        source: None,
    });
    let mut out: Vec<Delegate> = Vec::new();
    let mut seen = HashSet::new();
    for e in locals.chain(remotes) {
        if let Some(d) = delegate(e, &mut seen, sink) {
            out.push(d);
        }
    }
    out
}

/// One `local_agents[]` or `remote_agents[]` entry, as read.
struct DelegateEntry<'a> {
    line: u64,
    alias: &'a String,
    approval: Option<&'a Value>,
    /// `Some` for a remote agent: its `allowed_skills`, when declared.
    skills: Option<Option<&'a [Value]>>,
    /// `Some` for a local agent: its `source` and `source_type`.
    source: Option<(&'a String, &'a String)>,
}

/// Validates one delegate against the aliases of those kept before it (`seen`, a set: linear
/// time), adding its alias when kept; `None` when it is left out.
fn delegate<'a>(
    e: DelegateEntry<'a>,
    seen: &mut HashSet<&'a str>,
    sink: &mut Sink<'_>,
) -> Option<Delegate> {
    let (line, alias) = (Some(e.line), e.alias);
    let remote = e.skills.is_some();
    let what = if remote {
        "remote agent"
    } else {
        "local agent"
    };
    sink.check_alias(line, what, alias);
    if e.source.is_some_and(|(s, _)| s.is_empty()) {
        sink.push(line, format!("{what} `{alias}`: source must not be empty"));
    }
    if seen.contains(alias.as_str()) {
        sink.push(
            line,
            format!("duplicate agent alias `{alias}` in local_agents/remote_agents"),
        );
        return None;
    }
    let approval = sink.approval(line, &format!("{what} `{alias}`"), e.approval)?;
    let skills = e.skills.flatten().map(|list| {
        let kind = Entries {
            key: "id",
            what: "skill id",
            list: "allowed_skills",
            duplicate: "duplicate skill",
        };
        kind.parse(list, line, &format!("remote agent `{alias}`"), sink)
            .into_iter()
            .map(|(id, approval)| SkillRef { id, approval })
            .collect()
    });
    seen.insert(alias);
    let source = e.source.map(|(source, source_type)| DelegateSource {
        source_type: source_type.clone(),
        source: source.clone(),
        line: e.line,
    });
    Some(Delegate {
        alias: alias.clone(),
        remote,
        approval,
        skills,
        source,
    })
}

#[cfg(test)]
mod tests {
    use crate::policy::Registry;
    use std::fmt::Write;

    /// An agent file of `tools` `allowed_tools`, `locals` `local_tools` and `remotes`
    /// `remote_agents`, distinct names, then one repeat of the first of each.
    fn huge_agent(tools: usize, locals: usize, remotes: usize) -> String {
        let mut s = String::from("metadata: {id: bot}\naction_space:\n  local_tools:\n");
        for i in (0..locals).chain([0]) {
            writeln!(s, "    - alias: l{i}").unwrap();
        }
        s.push_str("  remote_agents:\n");
        for i in (0..remotes).chain([0]) {
            writeln!(s, "    - {{alias: r{i}, source: https://r.example}}").unwrap();
        }
        s.push_str("  mcp_servers:\n    - alias: m\n      allowed_tools: [");
        for i in (0..tools).chain([0]) {
            write!(s, "t{i}, ").unwrap();
        }
        s + "]\n"
    }

    /// The attack: one agent file of 100,000 `allowed_tools` (20,000 local tools, 10,000
    /// remote agents: the most the YAML node budget lets through) held the reload lock for
    /// minutes while each name was compared with every one before it. Now checked against
    /// sets: the three repeats are reported, in order, with the same messages, in seconds.
    #[test]
    fn an_agent_file_of_100k_names_is_checked_in_linear_time() {
        let files = [(
            "bot.agf.yaml".to_string(),
            huge_agent(100_000, 20_000, 10_000),
        )];
        let e = Registry::load(&files, &[]).unwrap_err();
        let messages: Vec<&str> = e.0.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "duplicate local tool alias `l0`",
                "MCP server `m`: duplicate allowed_tools entry `t0`",
                "duplicate agent alias `r0` in local_agents/remote_agents",
            ],
            "{e}"
        );
    }
}
