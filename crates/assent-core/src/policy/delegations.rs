//! Which agents' MPLP plans gate which agents' calls ([`Delegations`]): a plan belongs to the
//! agent that registered it, and gates that agent's calls and those of the local agents it
//! declares (`action_space.local_agents[]`: an orchestrator and the sub-agents it delegates
//! to). The relation comes from the operator's agent files only, never from a request, and is
//! resolved once, when the registry loads: `source_type: file` (the default) names an agent
//! file relative to the declaring agent's file, `registry` an agent's `metadata.id`; anything
//! else, a source naming no loaded agent, or one naming an agent whose own file does not
//! accept the declaring agent as its orchestrator (`metadata.annotations`
//! [`ORCHESTRATORS_ANNOTATION`]: both files must say so), resolves to nothing (a load
//! warning). Paths are
//! compared lexically normalised (`.` dropped, `..` folded; no filesystem access: this is
//! the pure core).

use super::model::{Agent, DelegateSource, ORCHESTRATORS_ANNOTATION};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The declared local-delegation relation between loaded agents, both ways: each agent's
/// resolved local delegates and, inverted, the agents that declare each agent. Built by
/// [`Delegations::resolve`] (the registry does so at load); read-only afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delegations {
    /// Orchestrator id → its local delegates' ids, sorted, each once, never itself.
    delegates: BTreeMap<String, Vec<String>>,
    /// Delegate id → the ids of the agents that declare it, sorted, each once.
    orchestrators: BTreeMap<String, Vec<String>>,
}

/// The relation with no delegation at all: every plan gates only its own agent's calls.
pub static NO_DELEGATIONS: Delegations = Delegations::new();

impl Delegations {
    /// The empty relation ([`NO_DELEGATIONS`]).
    pub const fn new() -> Self {
        Self {
            delegates: BTreeMap::new(),
            orchestrators: BTreeMap::new(),
        }
    }

    /// Resolves the `local_agents[]` of every agent in `agents` (by id) to loaded agents;
    /// returns the relation and a warning (`FILE:LINE: …`) for each local agent that resolves
    /// to none: an unknown `source_type`, a `file` source naming no loaded agent file, a
    /// `registry` source naming no loaded agent id, an agent whose file does not name the
    /// declaring agent in [`ORCHESTRATORS_ANNOTATION`]. Remote agents and an agent naming
    /// itself add nothing.
    pub fn resolve(agents: &BTreeMap<String, Agent>) -> (Self, Vec<String>) {
        let by_file: BTreeMap<PathBuf, &str> = agents
            .values()
            .map(|a| (normalise(Path::new(&a.file)), a.id.as_str()))
            .collect();
        let mut out = Self::new();
        let mut warnings = Vec::new();
        for a in agents.values() {
            for d in &a.delegates {
                let Some(src) = &d.source else { continue };
                match resolve_one(a, src, agents, &by_file).and_then(|id| accepted(a, id, agents)) {
                    Ok(id) if id != a.id => out.add(&a.id, id),
                    Ok(_) => {}
                    Err(why) => warnings.push(format!(
                        "{}:{}: local agent `{}`: {why}; the plans of `{}` gate none of its calls",
                        a.file, src.line, d.alias, a.id
                    )),
                }
            }
        }
        (out, warnings)
    }

    /// Records that `orchestrator` declares `delegate`.
    fn add(&mut self, orchestrator: &str, delegate: &str) {
        let insert = |list: &mut Vec<String>, id: &str| {
            if let Err(at) = list.binary_search_by(|x| x.as_str().cmp(id)) {
                list.insert(at, id.to_string());
            }
        };
        insert(
            self.delegates.entry(orchestrator.to_string()).or_default(),
            delegate,
        );
        insert(
            self.orchestrators.entry(delegate.to_string()).or_default(),
            orchestrator,
        );
    }

    /// The ids of the declared local delegates of agent `orchestrator` (sorted; empty for an
    /// unknown agent or one that declares none): whose calls its plans gate besides its own.
    pub fn delegates_of(&self, orchestrator: &str) -> &[String] {
        self.delegates.get(orchestrator).map_or(&[], Vec::as_slice)
    }

    /// The ids of the agents that declare agent `delegate` a local delegate (sorted; empty
    /// when none does): whose plans may gate its calls besides its own.
    pub fn orchestrators_of(&self, delegate: &str) -> &[String] {
        self.orchestrators.get(delegate).map_or(&[], Vec::as_slice)
    }
}

/// Whether a plan registered by `owner` gates a call of `caller` naming it, `followed` being
/// the agents that declare `caller` a local delegate ([`Delegations::orchestrators_of`]): its
/// own plan, or one of an agent that delegates to it. Any other plan is ignored, as if the call
/// named none (a plan belongs to the agent that registered it).
pub fn plan_gates(caller: &str, followed: &[String], owner: &str) -> bool {
    caller == owner || followed.iter().any(|o| o == owner)
}

/// Whether the stop of a plan registered by `owner` (cancelled, or no longer running calls)
/// reaches a call of `caller` recorded under it (held, or approved with a token):
/// `gated_by` is the plan's agent recorded with the call when it was held, because the plan
/// gated it then (`None`: the plan did not exist yet, or the call was held before migration
/// 0047 recorded it), `delegates` the agents `owner` declares local delegates now
/// ([`Delegations::delegates_of`]). The plan's own agent's calls, the calls the plan gated
/// when they were held, and its current delegates' calls; no other (a plan registered under
/// an id another agent's call named never reaches it). What was recorded outlives the
/// configuration (found by review: a reload removing the delegation released a delegate's
/// held calls and tokens from the stopped plan they were made under); a delegation added
/// since reaches the calls recorded under the plan without an agent, as it gates the calls
/// proposed from then on.
pub fn plan_reaches_held(
    caller: &str,
    gated_by: Option<&str>,
    owner: &str,
    delegates: &[String],
) -> bool {
    caller == owner || gated_by == Some(owner) || delegates.iter().any(|d| d == caller)
}

/// The loaded agent `src` (declared by `a`) names, or why none.
fn resolve_one<'a>(
    a: &Agent,
    src: &DelegateSource,
    agents: &'a BTreeMap<String, Agent>,
    by_file: &BTreeMap<PathBuf, &'a str>,
) -> Result<&'a str, String> {
    match src.source_type.as_str() {
        "file" => {
            let base = Path::new(&a.file).parent().unwrap_or(Path::new(""));
            let path = normalise(&base.join(&src.source));
            by_file.get(&path).copied().ok_or_else(|| {
                format!(
                    "source `{}` ({}) is not a loaded agent file",
                    src.source,
                    path.display()
                )
            })
        }
        "registry" => agents
            .get_key_value(&src.source)
            .map(|(id, _)| id.as_str())
            .ok_or_else(|| format!("source `{}` is not a loaded agent id", src.source)),
        other => Err(format!(
            "source_type `{other}` is not resolved by assent (only `file` and `registry` are)"
        )),
    }
}

/// `id` when the agent it names accepts `a` as its orchestrator — its own file names `a.id` in
/// `metadata.annotations` [`ORCHESTRATORS_ANNOTATION`] — or why not. A delegation lets the
/// orchestrator's plans gate the delegate's calls and its plan's cancellation stop the
/// delegate's held calls and tokens, so both files must say so: the owner of one agent file
/// must not reach another file's agent by naming it (found by review: a check of
/// `metadata.namespace` alone was passed by the orchestrator's file declaring the delegate's
/// namespace as its own).
fn accepted<'a>(
    a: &Agent,
    id: &'a str,
    agents: &BTreeMap<String, Agent>,
) -> Result<&'a str, String> {
    let accepts = agents
        .get(id)
        .is_some_and(|d| d.orchestrators.contains(&a.id));
    if accepts || id == a.id {
        return Ok(id);
    }
    Err(format!(
        "agent `{id}` does not accept `{}` as its orchestrator (its own file must name it: `metadata: {{annotations: {{{ORCHESTRATORS_ANNOTATION}: {}}}}}`)",
        a.id, a.id
    ))
}

/// `p` lexically normalised: `.` dropped, `name/..` folded, `..` above the root dropped, a
/// leading `..` of a relative path kept. The filesystem is not read (symbolic links are not
/// followed): two spellings of one file that differ other than so do not match.
fn normalise(p: &Path) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            c => out.push(c),
        }
    }
    out.iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Registry;

    /// Agent `id` declaring `locals`, whose file accepts `orch` and `mid` as orchestrators.
    fn agent(id: &str, locals: &str) -> String {
        let accepts = "annotations: {assent/orchestrators: 'orch, mid'}";
        format!("metadata: {{id: {id}, {accepts}}}\naction_space:\n  local_agents:\n{locals}")
    }

    fn load(files: &[(&str, String)]) -> Registry {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(f, t)| (f.to_string(), t.clone()))
            .collect();
        Registry::load(&files, &[]).unwrap()
    }

    const NONE: &str = "    []\n";

    #[test]
    fn a_file_source_resolves_relative_to_the_declaring_file() {
        let reg = load(&[
            (
                "/etc/assent/agents/orch.agf.yaml",
                agent(
                    "orch",
                    "    - {alias: a, source: ./subs/../helper.agf.yaml}\n    - {alias: b, source: ../other/x.agf.yaml}\n",
                ),
            ),
            ("/etc/assent/agents/helper.agf.yaml", agent("helper", NONE)),
            ("/etc/assent/./other/x.agf.yaml", agent("x", NONE)),
        ]);
        let d = reg.delegations();
        assert_eq!(d.delegates_of("orch"), ["helper", "x"]);
        assert_eq!(d.orchestrators_of("helper"), ["orch"]);
        assert_eq!(d.orchestrators_of("x"), ["orch"]);
        assert!(d.delegates_of("helper").is_empty());
        assert!(d.orchestrators_of("orch").is_empty());
        assert!(reg.warnings.is_empty(), "{:?}", reg.warnings);
    }

    #[test]
    fn a_registry_source_names_an_agent_id() {
        let reg = load(&[
            (
                "o.yaml",
                agent(
                    "orch",
                    "    - {alias: a, source: helper, source_type: registry}\n",
                ),
            ),
            ("h.yaml", agent("helper", NONE)),
        ]);
        assert_eq!(reg.delegations().delegates_of("orch"), ["helper"]);
        assert_eq!(reg.delegations().orchestrators_of("helper"), ["orch"]);
    }

    /// Fail closed: what does not resolve to a loaded agent maps to nothing, with a warning
    /// naming the file, line and entry; an id in a `file` source, or a file in a `registry`
    /// one, is no match; a remote agent and the agent itself add nothing.
    #[test]
    fn sources_that_name_no_loaded_agent_map_to_nothing_with_a_warning() {
        let locals = "    - {alias: a, source: missing.agf.yaml}\n    - {alias: b, source: helper}\n    - {alias: c, source: h.yaml, source_type: registry}\n    - {alias: d, source: helper, source_type: db}\n    - {alias: e, source: o.yaml}\n    - {alias: f, source: orch, source_type: registry}\n  remote_agents:\n    - {alias: g}\n";
        let reg = load(&[
            ("o.yaml", agent("orch", locals)),
            ("h.yaml", agent("helper", NONE)),
        ]);
        assert_eq!(reg.delegations(), &Delegations::new());
        let w = &reg.warnings;
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(
            w[0].starts_with("o.yaml:4: local agent `a`: source `missing.agf.yaml`"),
            "{w:?}"
        );
        assert!(
            w[1].contains("local agent `b`: source `helper` (helper) is not a loaded agent file"),
            "{w:?}"
        );
        assert!(
            w[2].contains("`c`: source `h.yaml` is not a loaded agent id"),
            "{w:?}"
        );
        assert!(
            w[3].contains("`d`: source_type `db` is not resolved"),
            "{w:?}"
        );
        assert!(
            w.iter()
                .all(|w| w.ends_with("the plans of `orch` gate none of its calls"))
        );
    }

    /// The attack: the owner of one agent file names another file's agent its local delegate,
    /// so its plans gate that agent's calls and cancelling one stops that agent's held calls
    /// and tokens. A delegation resolves only when the delegate's own file accepts the
    /// orchestrator (`metadata.annotations` `assent/orchestrators`); claiming the victim's
    /// namespace in the orchestrator's own file (found by review, against a namespace check)
    /// changes nothing.
    #[test]
    fn an_agent_file_cannot_make_an_agent_its_delegate_without_that_agents_consent() {
        let bare = |id: &str, meta: &str| format!("metadata: {{id: {id}{meta}}}\n");
        // Other annotations may hold anything (found by review: a null or a list stopped the
        // file from loading); a list of orchestrators that is not a string names none.
        let odd = ", annotations: {owner: , tags: [a, b], assent/orchestrators: [orch]}";
        let locals = "    - {alias: v, source: v.yaml}\n    - {alias: m, source: m.yaml}\n    - {alias: o, source: o2.yaml}\n    - {alias: x, source: x.yaml}\n";
        let orch =
            agent("orch", locals).replacen("{id: orch, ", "{id: orch, namespace: team-b, ", 1);
        let reg = load(&[
            ("o.yaml", orch),
            ("v.yaml", bare("victim", ", namespace: team-b")),
            (
                "m.yaml",
                bare(
                    "mate",
                    ", annotations: {assent/orchestrators: ' other ,orch'}",
                ),
            ),
            (
                "o2.yaml",
                bare("other", ", annotations: {assent/orchestrators: orchestra}"),
            ),
            ("x.yaml", bare("odd", odd)),
        ]);
        let d = reg.delegations();
        assert_eq!(d.delegates_of("orch"), ["mate"]);
        assert!(d.orchestrators_of("victim").is_empty());
        assert!(d.orchestrators_of("other").is_empty());
        let w = &reg.warnings;
        assert!(d.orchestrators_of("odd").is_empty());
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].contains("agent `victim` does not accept `orch` as its orchestrator"),
            "{w:?}"
        );
        assert!(
            w[0].contains("annotations: {assent/orchestrators: orch}"),
            "{w:?}"
        );
        assert!(
            w[1].contains("agent `other` does not accept `orch`"),
            "{w:?}"
        );
        assert!(w[2].contains("agent `odd` does not accept `orch`"), "{w:?}");
    }

    #[test]
    fn delegation_is_declared_one_way_and_not_transitive() {
        let reg = load(&[
            (
                "o.yaml",
                agent("orch", "    - {alias: m, source: m.yaml}\n"),
            ),
            ("m.yaml", agent("mid", "    - {alias: l, source: l.yaml}\n")),
            ("l.yaml", agent("leaf", NONE)),
        ]);
        let d = reg.delegations();
        assert_eq!(d.delegates_of("orch"), ["mid"]);
        assert_eq!(d.delegates_of("mid"), ["leaf"]);
        assert_eq!(d.orchestrators_of("leaf"), ["mid"]);
        assert!(d.orchestrators_of("orch").is_empty());
    }

    #[test]
    fn a_plan_gates_its_owners_calls_and_its_declared_delegates_only() {
        let followed = ["orch".to_string()];
        assert!(plan_gates("helper", &followed, "orch"));
        assert!(plan_gates("helper", &followed, "helper"));
        assert!(!plan_gates("helper", &followed, "squatter"));
        assert!(!plan_gates("orch", &[], "helper"));
    }

    /// A reload removing a delegation does not release the calls a plan gated when they were
    /// held; a call recorded without the plan's agent follows today's delegations; a plan
    /// never reaches another agent's call it did not gate.
    #[test]
    fn a_stopped_plan_reaches_what_it_gated_when_held_whatever_the_delegations_now() {
        let now = ["helper".to_string()];
        // Gated when held: reached, delegation kept or removed since.
        assert!(plan_reaches_held("helper", Some("orch"), "orch", &now));
        assert!(plan_reaches_held("helper", Some("orch"), "orch", &[]));
        // The plan's own agent: always.
        assert!(plan_reaches_held("orch", None, "orch", &[]));
        // Recorded without the plan's agent (the plan did not exist yet, or held before
        // migration 0047): today's delegations decide.
        assert!(plan_reaches_held("helper", None, "orch", &now));
        assert!(!plan_reaches_held("helper", None, "orch", &[]));
        // Another agent's plan: never, whatever was recorded for another plan.
        assert!(!plan_reaches_held("victim", None, "squatter", &[]));
        assert!(!plan_reaches_held("victim", Some("orch"), "squatter", &[]));
        assert!(!plan_reaches_held(
            "victim",
            Some("victim"),
            "squatter",
            &now
        ));
    }

    #[test]
    fn paths_are_normalised_lexically() {
        let n = |p: &str| normalise(Path::new(p)).display().to_string();
        assert_eq!(n("./a/./b/../c.yaml"), "a/c.yaml");
        assert_eq!(n("/x/../../y.yaml"), "/y.yaml");
        assert_eq!(n("../a/b/../../c"), "../c");
        assert_eq!(n("a/b/../../../c"), "../c");
    }
}
