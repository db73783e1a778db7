//! The [`Registry`]: every agent and governance policy, validated, read-only once built. It
//! loads in steps (unknown Agent Format fields, governance files, agent files, policy
//! references) and answers which policies apply to an agent,
//! which governance rules cover a call (through the rule index built at load, `index`), which
//! governed a verdict, and which tools an agent declares on an MCP server. Parsing of each file
//! format lives in `agent_file` and `governance`.

use super::agent_file::load_agent;
use super::delegations::Delegations;
use super::error::{LoadError, LoadErrors};
use super::governance::load_governance;
use super::index::{RuleIndex, folded_tool_name};
use super::model::{Agent, Policy, Rule};
use super::pairs::pair_warnings;
use crate::verdict::Reason;
use serde_json::Value;
use std::collections::BTreeMap;

/// Every agent and governance policy, validated. Read-only once built: [`Registry::load`]
/// indexes the rules by tool name, and a registry whose fields are changed afterwards would
/// answer [`Registry::covering_rules`] from the stale index.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Agents by `metadata.id`.
    pub agents: BTreeMap<String, Agent>,
    /// Governance policies by id (read them with [`Registry::policies`]: private, so the rule
    /// index built from them at load can never go stale).
    pub(crate) policies: BTreeMap<String, Policy>,
    /// Load-time warnings (e.g. a high-risk rule that defaults to approve).
    pub warnings: Vec<String>,
    /// SHA-256 (hex) of the policy set as loaded — everything that decides a verdict: of the
    /// RFC 8785 canonical JSON of `{"agents": [...], "governance": [...]}`, each the array of
    /// those files' texts, sorted (so neither file names nor load order change it; any edit of
    /// an agent file's `approval` or of a governance policy does). Recorded with each verdict
    /// and held call (MPLP Confirm `governance`, `docs/conformance.md`; issue 14 §8).
    pub policy_set_sha256: String,
    /// The governance rules by tool name and server, built by [`Registry::load_with`].
    index: RuleIndex,
    /// Which agents declare which loaded agents as local delegates, resolved at load
    /// ([`Registry::delegations`]).
    delegations: Delegations,
}

/// Whether governance policy `p` applies to `agent`: the agent references it or its selector
/// picks the agent.
pub(crate) fn applies(p: &Policy, agent: &Agent) -> bool {
    agent.policy_refs.iter().any(|r| r.id == p.id) || p.selector.selects(agent)
}

/// Load step 4b: a reference (`constraints.governance_policies[]`) to a policy whose selector
/// names agents and does not pick the referencing agent is a load error (`FILE:LINE: agent
/// `ID` references governance policy `P` (its file), whose selector {…} does not select it;
/// …`). A reference applies the policy whatever its selector says, so without this an agent
/// file's owner could pull in a policy written for another agent (a sandbox's
/// `separation_of_duties: false`, `default_decision: approve`) and weaken its own calls
/// (found by review). A policy with an empty selector applies only by reference: referencing
/// it is what it is for; one whose selector picks the agent applies anyway.
fn foreign_policy_refs(
    agents: &BTreeMap<String, Agent>,
    policies: &BTreeMap<String, Policy>,
) -> Vec<LoadError> {
    let mut errs = Vec::new();
    for a in agents.values() {
        for r in &a.policy_refs {
            let Some(p) = policies.get(&r.id) else {
                continue; // resolve_policy_refs refuses or warns
            };
            if p.selector.is_empty() || p.selector.selects(a) {
                continue;
            }
            errs.push(LoadError {
                file: a.file.clone(),
                line: r.line,
                message: format!(
                    "agent `{}` references governance policy `{}` ({}), whose selector {} does not select it; a policy is for the agents its selector picks (an empty selector: for those that reference it): remove the reference, or have the policy's owner select this agent",
                    a.id,
                    p.id,
                    p.file,
                    crate::template::visible(&p.selector.describe())
                ),
            });
        }
    }
    errs
}

/// Most load warnings a [`Registry`] keeps: the rest are counted in one last warning (found
/// by review: a file's warnings were copied into the configuration, the reload reply and the
/// log, so millions of them killed the gateway).
const MAX_WARNINGS: usize = 1_000;

/// Keeps the first [`MAX_WARNINGS`]` - 1` of `warnings` and a last one that counts the rest
/// (`N more warnings not shown`), when there are more than [`MAX_WARNINGS`].
fn cap_warnings(warnings: &mut Vec<String>) {
    if warnings.len() > MAX_WARNINGS {
        let more = warnings.len() - (MAX_WARNINGS - 1);
        warnings.truncate(MAX_WARNINGS - 1);
        warnings.push(format!("{more} more warnings not shown"));
    }
}

/// Most load errors a failed load reports: the rest are counted in one last error at the
/// place of the first left out (found by review: 80,000 bad aliases in one 1.2 MB agent file
/// made a 7.4 MB reload answer and 80,000 log lines).
const MAX_ERRORS: usize = 1_000;

/// `errs` as [`LoadErrors`], past [`MAX_ERRORS`] the first `MAX_ERRORS - 1` and a last error,
/// at the place of the first left out, that counts the rest (`N more errors not shown`).
fn cap_errors(mut errs: Vec<LoadError>) -> LoadErrors {
    if errs.len() > MAX_ERRORS {
        let more = errs.len() - (MAX_ERRORS - 1);
        let first_left_out = errs.swap_remove(MAX_ERRORS - 1);
        errs.truncate(MAX_ERRORS - 1);
        errs.push(LoadError {
            message: format!("{more} more errors not shown (fix these first)"),
            ..first_left_out
        });
    }
    LoadErrors(errs)
}

/// At most this many unknown fields are listed per agent file (warnings or, strict, errors);
/// the rest are counted in one more line, so a file of many thousands cannot flood the log.
const MAX_UNKNOWN_FIELDS: usize = 100;

/// [`Registry::policy_set_sha256`] of these agent and governance files.
fn policy_set_sha256(
    agent_files: &[(String, String)],
    governance_files: &[(String, String)],
) -> String {
    let sorted = |files: &[(String, String)]| {
        let mut texts: Vec<String> = files.iter().map(|(_, t)| t.clone()).collect();
        texts.sort_unstable();
        texts
    };
    let set =
        serde_json::json!({"agents": sorted(agent_files), "governance": sorted(governance_files)});
    let canonical =
        crate::canonical::canonical_value(&set).expect("an object of string arrays is canonical");
    crate::canonical::sha256_hex(canonical.as_bytes())
}

impl Registry {
    /// Governance policies by id, as loaded.
    pub fn policies(&self) -> &BTreeMap<String, Policy> {
        &self.policies
    }

    /// The declared local delegations between the loaded agents, resolved at load: whose
    /// calls an agent's MPLP plans gate besides its own ([`Delegations::delegates_of`]) and,
    /// inverted, whose plans may gate an agent's calls ([`Delegations::orchestrators_of`]).
    /// A local agent whose `source` names no loaded agent is in neither (a load warning).
    pub fn delegations(&self) -> &Delegations {
        &self.delegations
    }

    /// Builds a registry from `(file name, YAML text)` pairs of agent files and governance
    /// files. Collects every error (file, line, reason) instead of stopping at the first.
    ///
    /// Errors: YAML syntax or shape, duplicate agent ids, duplicate aliases within an agent's
    /// `local_tools` or `mcp_servers` (Agent Format: runtimes MUST reject them), bad `approval`
    /// values, bad policy ids, unknown risk tiers, an irreversible rule whose default decision
    /// is `approve` (AAEP §6.4.1), and a duration or count outside its bound (issue 10 §10:
    /// `timeout_seconds` and `on_timeout.after_seconds` 1 to [`MAX_WAIT_SECONDS`](super::MAX_WAIT_SECONDS), the
    /// `thresholds` of [`Thresholds::validate`](crate::triggers::Thresholds::validate); `FILE:LINE: policy `ID` rules[N]: KEY VALUE is
    /// out of range (MIN to MAX UNIT)`). Unresolvable `required` policy references are not load errors:
    /// the agent is loaded as refused and every call it makes is denied.
    pub fn load(
        agent_files: &[(String, String)],
        governance_files: &[(String, String)],
    ) -> Result<Registry, LoadErrors> {
        Self::load_with(agent_files, governance_files, false)
    }

    /// [`Registry::load`]; fields of agent files that the Agent Format 1.0 schema does not
    /// define are warnings (`FILE:LINE: unknown field `PATH` …; ignored`), or errors when
    /// `strict` (Agent Format forward compatibility: catches `aproval: true`). Errors and
    /// warnings quote the files' text [`visible`](crate::template::visible): one line each,
    /// nothing a terminal would act on.
    pub fn load_with(
        agent_files: &[(String, String)],
        governance_files: &[(String, String)],
        strict: bool,
    ) -> Result<Registry, LoadErrors> {
        let _budget = crate::condition::PatternBudget::start();
        let mut reg = Registry::default();
        let mut errs = reg.unknown_fields(agent_files, strict);
        reg.policy_set_sha256 = policy_set_sha256(agent_files, governance_files);
        for (file, text) in governance_files {
            load_governance(file, text, &mut reg.policies, &mut reg.warnings, &mut errs);
        }
        reg.warnings.extend(pair_warnings(&reg.policies));
        reg.index = RuleIndex::build(&reg.policies);
        for (file, text) in agent_files {
            if let Some(a) = load_agent(file, text, &reg.agents, &mut errs) {
                reg.agents.insert(a.id.clone(), a);
            }
        }
        errs.extend(foreign_policy_refs(&reg.agents, &reg.policies));
        let mut warnings = reg.resolve_policy_refs();
        let (delegations, unresolved) = Delegations::resolve(&reg.agents);
        reg.delegations = delegations;
        warnings.extend(unresolved);
        let (unmatchable, uncovered) =
            super::coverage::check(&reg.agents, &reg.policies, governance_files, applies);
        errs.extend(unmatchable);
        warnings.extend(uncovered);
        reg.warnings.extend(warnings);
        // They quote the files' ids, names and values: one line each, nothing a terminal runs.
        cap_warnings(&mut reg.warnings);
        for w in &mut reg.warnings {
            if let std::borrow::Cow::Owned(e) = crate::template::visible(w) {
                *w = e;
            }
        }
        if errs.is_empty() {
            Ok(reg)
        } else {
            Err(cap_errors(errs))
        }
    }

    /// Step 1: fields of the agent files that Agent Format 1.0 does not define. Each is a
    /// warning in `self.warnings`, or, when `strict`, one of the returned errors. A file that is
    /// not YAML is skipped here (the typed parse reports it).
    fn unknown_fields(&mut self, agent_files: &[(String, String)], strict: bool) -> Vec<LoadError> {
        let mut errs = Vec::new();
        for (file, text) in agent_files {
            let Ok(doc) = crate::yaml::from_str::<Value>(text) else {
                continue; // the typed parse reports it
            };
            let found = crate::agf::unknown_fields_at(text, &doc);
            let more = found.len().saturating_sub(MAX_UNKNOWN_FIELDS);
            for (path, line) in found.into_iter().take(MAX_UNKNOWN_FIELDS) {
                if strict {
                    errs.push(LoadError {
                        file: file.to_string(),
                        line,
                        message: format!(
                            "unknown field `{path}` (not in Agent Format 1.0; strict mode)"
                        ),
                    });
                } else {
                    let at = line.map(|l| format!("{file}:{l}")).unwrap_or(file.clone());
                    self.warnings.push(format!(
                        "{at}: unknown field `{path}` (not in Agent Format 1.0); ignored (--strict makes this an error)"
                    ));
                }
            }
            if more > 0 {
                let message = format!("{more} more unknown fields not listed");
                if strict {
                    errs.push(LoadError {
                        file: file.to_string(),
                        line: None,
                        message,
                    });
                } else {
                    self.warnings.push(format!("{file}: {message}"));
                }
            }
        }
        errs
    }

    /// Step 4, once everything is loaded: an agent whose `required` policy reference does not
    /// resolve is refused (every call denied with the reason); an optional one is ignored.
    /// Returns a warning for each.
    fn resolve_policy_refs(&mut self) -> Vec<String> {
        let mut warnings = Vec::new();
        for a in self.agents.values_mut() {
            for r in &a.policy_refs {
                if self.policies.contains_key(&r.id) {
                    continue;
                }
                if r.required {
                    let reason = format!(
                        "agent `{}` requires governance policy `{}`, which does not resolve in the policy registry",
                        a.id, r.id
                    );
                    warnings.push(format!(
                        "{}: {reason}; every call of this agent is denied",
                        a.file
                    ));
                    a.refused.get_or_insert(reason);
                } else {
                    warnings.push(format!(
                        "{}: optional governance policy `{}` does not resolve; ignored",
                        a.file, r.id
                    ));
                }
            }
        }
        warnings
    }

    /// The governance policies that apply to `agent`: those it references and those whose
    /// selector picks it.
    pub fn policies_for<'a>(&'a self, agent: &'a Agent) -> impl Iterator<Item = &'a Policy> + 'a {
        self.policies.values().filter(move |p| applies(p, agent))
    }

    /// The governance rules that cover a call of `tool` on MCP server `server` (`None`: a
    /// local tool) for `agent`, each with its policy: exactly the rules of
    /// [`Registry::policies_for`] that [`Rule::covers`], in the same order (policies by id, then
    /// each policy's rules in file order), which the verdict's reasons and its first-match
    /// keys follow. Looks only at the rules indexed under `tool` and at the glob rules, so its
    /// cost does not grow with the number of rules for other tools.
    pub fn covering_rules<'a>(
        &'a self,
        agent: &Agent,
        tool: &str,
        server: Option<&str>,
    ) -> Vec<(&'a Policy, &'a Rule)> {
        let places = self.index.candidates(tool, server);
        self.rules_at(agent, places, |_, r| r.covers(tool, server))
    }

    /// The governance rules for `agent` that a call of `tool` on `server` escapes by spelling
    /// alone, each with its policy, in scan order: those that do not cover `tool` but cover
    /// its fold ([`folded_tool_name`]: NFKC, lower case, without control and invisible
    /// characters and surrounding spaces), or whose tool folds alike (a rule for `GetUser`, a
    /// call of `getuser`; a rule for `Drop_*`, a call of `drop_table`). Empty for the common
    /// call (a name already folded, every rule's tool folded), at the cost of one byte scan. A
    /// call of such a tool is held, never allowed (`tool_lookalike`).
    pub fn lookalike_rules<'a>(
        &'a self,
        agent: &Agent,
        tool: &str,
        server: Option<&str>,
    ) -> Vec<(&'a Policy, &'a Rule)> {
        let folded = folded_tool_name(tool);
        let is_folded = folded == tool;
        let mut places = self.index.folding_alike(&folded, is_folded, server);
        if !is_folded {
            places.extend(self.index.candidates(&folded, server));
            places.sort_unstable();
            places.dedup();
        }
        self.rules_at(agent, places, |at, r| {
            let on_server = r.server.as_deref().is_none_or(|s| Some(s) == server);
            let alike = r.covers(&folded, server)
                || (on_server
                    && (folded_tool_name(r.tool.as_str()) == folded
                        || self.index.folded_glob_matches(at, &folded)));
            alike && !r.covers(tool, server)
        })
    }

    /// The rules at `places` (sorted by policy) of the policies that apply to `agent` and
    /// that `keep` keeps (given each rule's place and the rule), each with its policy.
    fn rules_at<'a>(
        &'a self,
        agent: &Agent,
        places: Vec<(u32, u32)>,
        keep: impl Fn((u32, u32), &Rule) -> bool,
    ) -> Vec<(&'a Policy, &'a Rule)> {
        let mut out = Vec::new();
        // Places come sorted by policy: decide each policy's applicability once.
        let mut last: Option<(u32, Option<&'a Policy>)> = None;
        for (pi, ri) in places {
            let policy = match last {
                Some((at, p)) if at == pi => p,
                _ => {
                    let p = self
                        .index
                        .policy_id(pi)
                        .and_then(|id| self.policies.get(id));
                    let p = p.filter(|p| applies(p, agent));
                    last = Some((pi, p));
                    p
                }
            };
            let rule = policy.and_then(|p| p.rules.get(ri as usize).map(|r| (p, r)));
            if let Some((p, r)) = rule
                && keep((pi, ri), r)
            {
                out.push((p, r));
            }
        }
        out
    }

    /// What a call of `tool` (on MCP server `server`) by agent `agent_id` does, as the
    /// governance rules that cover it say: the union of their effects (issue 16 §3). None for
    /// an unknown agent.
    pub fn effects_of(
        &self,
        agent_id: &str,
        tool: &str,
        server: Option<&str>,
    ) -> crate::session_risk::Effects {
        self.rules_covering(agent_id, tool, server)
            .into_iter()
            .fold(Default::default(), |e: crate::session_risk::Effects, r| {
                e.union(r.effects)
            })
    }

    /// The governance rules that cover a call of `tool` on `server` by agent `agent_id`
    /// ([`Registry::covering_rules`], without their policies); none for an unknown agent.
    pub fn rules_covering(&self, agent_id: &str, tool: &str, server: Option<&str>) -> Vec<&Rule> {
        let Some(agent) = self.agents.get(agent_id) else {
            return Vec::new();
        };
        self.covering_rules(agent, tool, server)
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    /// Ids of the governance policies behind `reasons`: those with a rule that left a reason
    /// (the reason's `file` is the policy's file and its `rule` the rule's label). Sorted, each
    /// once. These are the policies that governed a call's verdict. Each reason is looked up
    /// by its rule label in the index, not against every rule.
    pub fn policies_behind(&self, reasons: &[Reason]) -> Vec<String> {
        let mut ids: Vec<&str> = reasons
            .iter()
            .filter_map(|r| {
                let (pi, ri) = self.index.rule_labelled(&r.rule)?;
                let id = self.index.policy_id(pi)?;
                let p = self.policies.get(id)?;
                let rule = p.rules.get(ri as usize)?;
                (p.file == r.file && rule.label == r.rule).then_some(id)
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(String::from).collect()
    }

    /// Tool names the agent declares on MCP server `alias`: `Ok(None)` when every tool is
    /// declared (`allowed_tools` omitted), `Ok(Some(names))` otherwise. `Err` with the reason when
    /// the agent or the alias is unknown.
    pub fn declared_tools(&self, agent: &str, alias: &str) -> Result<Option<Vec<String>>, String> {
        let a = self
            .agents
            .get(agent)
            .ok_or_else(|| format!("agent `{agent}` is not declared in any agent file"))?;
        let s = a
            .mcp_servers
            .iter()
            .find(|s| s.alias == alias)
            .ok_or_else(|| {
                format!(
                    "MCP server alias `{alias}` is not declared by agent `{agent}` ({})",
                    a.file
                )
            })?;
        Ok(s.allowed_tools
            .as_ref()
            .map(|l| l.iter().map(|t| t.name.clone()).collect()))
    }
}

/// Test set-up shared by the policy's and the gatekeeper's unit tests.
#[cfg(test)]
impl Registry {
    /// The registry of one agent file `a.yaml` and one governance file `g.yaml` (panics on a
    /// load error).
    pub(crate) fn of(agent: &str, gov: &str) -> Registry {
        Registry::load(
            &[("a.yaml".into(), agent.into())],
            &[("g.yaml".into(), gov.into())],
        )
        .unwrap()
    }

    /// The load warnings that contain `phrase`, in order.
    pub(crate) fn warnings_with(&self, phrase: &str) -> Vec<&String> {
        self.warnings
            .iter()
            .filter(|w| w.contains(phrase))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Registry;

    const GOV: &str = "policies:
  - id: acme.finance.payments-v1
    selector: {agents: [bot]}
    rules:
      - {tool: pay, risk_tier: R4}
  - id: acme.sandbox.relaxed-v1
    selector: {agents: [sandbox-bot], labels: {tier: sandbox}}
    rules:
      - {tool: \"*\", default_decision: approve, separation_of_duties: false}
  - id: acme.opt-in.strict-v1
    rules:
      - {tool: pay, require_passkey: true}
";

    fn agent(refs: &[&str]) -> String {
        let mut s = String::from("metadata: {id: bot}\nconstraints:\n  governance_policies:\n");
        for r in refs {
            s.push_str(&format!("    - {{policy_ref: {r}, required: false}}\n"));
        }
        s + "action_space:\n  local_tools:\n    - alias: pay\n"
    }

    /// The attack: `bot`'s file references the policy written for `sandbox-bot`, which a
    /// reference applied whatever its selector said. A load error with the agent file, the
    /// reference's line, the policy and its selector (`required: false` too); a reference to a
    /// policy with an empty selector (opt-in) or to one that selects the agent loads.
    #[test]
    fn a_reference_to_a_policy_selecting_other_agents_is_a_load_error() {
        let load = |refs: &[&str]| {
            Registry::load(
                &[("bot.agf.yaml".into(), agent(refs))],
                &[("g.yaml".into(), GOV.into())],
            )
        };
        let e = load(&["acme.opt-in.strict-v1", "acme.sandbox.relaxed-v1"]).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].file, "bot.agf.yaml");
        assert_eq!(e.0[0].line, Some(5));
        let m = &e.0[0].message;
        assert!(
            m.contains("`acme.sandbox.relaxed-v1` (g.yaml)")
                && m.contains("{agents: [sandbox-bot], labels: {tier: sandbox}}"),
            "{m}"
        );
        assert!(load(&["acme.opt-in.strict-v1", "acme.finance.payments-v1"]).is_ok());
    }

    /// Attack (found by review): one agent file of many thousand bad entries made a reload
    /// answer of megabytes and as many log lines. At most 1,000 errors are reported, the last
    /// counting the rest at the place of the first left out.
    #[test]
    fn a_file_of_thousands_of_errors_reports_a_thousand() {
        let mut file = String::from("metadata: {id: bot}\naction_space:\n  local_tools:\n");
        for _ in 0..1_501 {
            file.push_str("    - alias: pay\n");
        }
        let files = [("bot.agf.yaml".to_string(), file)];
        let errs = Registry::load(&files, &[])
            .expect_err("duplicate aliases")
            .0;
        assert_eq!(errs.len(), 1_000);
        let last = &errs[999];
        assert_eq!(last.message, "501 more errors not shown (fix these first)");
        assert_eq!(last.file, "bot.agf.yaml");
        assert!(last.line.is_some_and(|l| l > 1_000), "{last:?}");
    }
}
