//! Suggestions mined from settled decisions (issue 16 §2): argument patterns people always
//! approved become a narrower approval condition ("ask unless the branch starts with
//! `feature/`"), patterns always rejected a proposed deny policy — each with its evidence and
//! its replay over the same history ([`crate::replay`]). Nothing here applies a suggestion.
//!
//! For each tool (and MCP server), over the held calls a person approved or rejected
//! ([`mine::ranked`]), weighing only the arguments the tool really takes ([`known`]: its
//! trusted input schema, or the policy naming them; a tool of which none is known gets none,
//! and a [`Unmined`] note saying why): the one-argument [`Constraint`] covering the most
//! approved calls and no rejected one, with at least `min_decisions` calls (the next best when the first cannot be
//! written into the rules), and none when a constraint on another argument covers as many
//! (the agent writes every argument: which one people judged is unknown). Its prompt sources ([`edit::sources`]:
//! the governance rules and the agent declaration that require approval of those calls) are
//! narrowed with "and not (the pattern and every argument the covered approvals all sent
//! alike, with that value)" ([`mine::pins`]); a call a person rejected or anyone cancelled
//! counts against a pattern; a call held for another reason (risk tier R3 or more,
//! irreversible, a threshold or scope trigger) gives no suggestion, since a condition cannot
//! remove its prompt. The candidate is replayed, and kept only when it removes prompts and
//! loosens nothing (no call refused then would run without consent).

pub mod edit;
pub mod known;
pub mod mine;

use crate::approval::ApprovalStatus;
use crate::policy::Registry;
use crate::replay::report::Counts;
use crate::replay::{Change, Options, Recorded, Replayer, Was, synthetic};
use crate::stamp;
use edit::{Edit, PolicyFiles};
pub use known::{Schemas, ToolKey, Unmined};
use mine::Constraint;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Patterns tried per tool before giving up on a prompt removal (each a replay).
const MAX_TRIED: usize = 4;

/// What a suggestion proposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Stop asking when the pattern holds (the approval conditions narrowed).
    RemovePrompt,
    /// Deny outright when the pattern holds (a new policy).
    Deny,
}

/// The decisions behind a suggestion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Evidence {
    /// Settled calls the pattern covers (all approved, or all rejected).
    pub decisions: u64,
    /// Calls of the tool on the other side (rejected or cancelled, or approved), none of
    /// which it covers.
    pub other_side: u64,
    /// The people who decided them, sorted.
    pub deciders: Vec<String>,
    /// The agents whose calls they were, sorted.
    pub agents: Vec<String>,
    /// First and last covered proposal (Unix ms; RFC 3339 on the wire).
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    #[serde(with = "stamp::ms_as_rfc3339")]
    pub first: i64,
    /// See `first`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    #[serde(with = "stamp::ms_as_rfc3339")]
    pub last: i64,
}

/// One suggested rule, its evidence and its replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Suggestion {
    /// Remove a prompt, or deny.
    pub kind: Kind,
    /// The tool.
    pub tool: String,
    /// Its MCP server alias, if any.
    pub server: Option<String>,
    /// The pattern.
    pub pattern: Constraint,
    /// The pattern in words.
    pub description: String,
    /// The decisions behind it.
    pub evidence: Evidence,
    /// The file changes that make it.
    pub edits: Vec<Edit>,
    /// The candidate policy replayed over the same history.
    pub replay: Counts,
}

/// Settings of [`suggest`].
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Calls a pattern must cover (at least 2).
    pub min_decisions: u32,
    /// Candidates replayed at the most (each a replay of the whole history); `None`: no bound.
    /// What a server answering a page sets, so one request's work stays bounded.
    pub max_replays: Option<usize>,
}

impl Settings {
    /// `min_decisions`, every candidate replayed (`assent suggest`).
    pub fn with_min(min_decisions: u32) -> Settings {
        Settings {
            min_decisions,
            max_replays: None,
        }
    }
}

/// A tool's settled calls: approved and rejected by a person, and cancelled before anyone
/// decided them.
#[derive(Default)]
struct Settled<'h> {
    approved: Vec<&'h Recorded>,
    rejected: Vec<&'h Recorded>,
    /// Cancelled (by the agent, its plan or session, or an operator): no evidence for a
    /// pattern, and against one like a rejection (found by review: an agent could withdraw
    /// the calls it expected refused, and a pattern covering them was suggested). Not evidence
    /// for a deny policy (the agent would choose it).
    cancelled: Vec<&'h Recorded>,
}

impl Settled<'_> {
    /// The calls that count against a prompt removal: rejected and cancelled ones.
    fn against(&self) -> Vec<&Recorded> {
        self.rejected
            .iter()
            .chain(&self.cancelled)
            .copied()
            .collect()
    }
}

/// Groups the calls a person approved or rejected by (server, tool).
fn settled(history: &[Recorded]) -> BTreeMap<(Option<String>, String), Settled<'_>> {
    let mut groups: BTreeMap<_, Settled<'_>> = BTreeMap::new();
    for r in history {
        let Was::Held {
            status, decided_by, ..
        } = &r.was
        else {
            continue;
        };
        if *status == ApprovalStatus::Cancelled && !synthetic(&r.call) {
            let key = (r.call.server.clone(), r.call.tool.clone());
            groups.entry(key).or_default().cancelled.push(r);
            continue;
        }
        // An operator's decision: not the expiry default, not a grant, and not the agent's own
        // user relaying an in-client answer (`user-of:AGENT`, which the agent could steer).
        let by_person = decided_by.as_deref().is_some_and(|d| {
            d != "system:expiry" && !d.starts_with("grant:") && !d.starts_with("user-of:")
        });
        if !by_person || synthetic(&r.call) {
            continue;
        }
        let g = groups
            .entry((r.call.server.clone(), r.call.tool.clone()))
            .or_default();
        match status {
            // What an operator edited before approving was not approved as proposed: it
            // counts against a pattern, never for it.
            ApprovalStatus::Approved if !r.was.refused() => g.approved.push(r),
            ApprovalStatus::Approved | ApprovalStatus::Rejected => g.rejected.push(r),
            _ => {}
        }
    }
    groups
}

/// The evidence of `c` among `yes` (the covered side) and `no`.
fn evidence(c: &Constraint, yes: &[&Recorded], no: &[&Recorded]) -> Evidence {
    let covered: Vec<&&Recorded> = yes.iter().filter(|r| c.holds(&r.call.arguments)).collect();
    let names = |f: &dyn Fn(&Recorded) -> Option<String>| -> Vec<String> {
        let set: BTreeSet<String> = covered.iter().filter_map(|r| f(r)).collect();
        set.into_iter().collect()
    };
    Evidence {
        decisions: covered.len() as u64,
        other_side: no.len() as u64,
        deciders: names(&|r| match &r.was {
            Was::Held { decided_by, .. } => decided_by.clone(),
            _ => None,
        }),
        agents: names(&|r| Some(r.agent.clone())),
        first: covered.iter().map(|r| r.at_ms).min().unwrap_or(0),
        last: covered.iter().map(|r| r.at_ms).max().unwrap_or(0),
    }
}

/// What [`suggest_with`] found: the suggestions, and the tools with settled decisions that got
/// no argument-keyed suggestion because none of their arguments may be mined.
#[derive(Debug, Clone, Default)]
pub struct Mined {
    /// As [`suggest`] returns them.
    pub suggestions: Vec<Suggestion>,
    /// Tools with at least `min_decisions` settled calls on one side whose arguments were not
    /// weighed ([`known`]), most decisions first, each with why.
    pub unmined: Vec<Unmined>,
}

/// The suggestions for `history` (in recorded order) under the policy `reg` loaded from
/// `files`, mining only arguments the policy names ([`suggest_with`] with no input schema):
/// prompt removals first, most prompts removed first, then deny policies. Each is replayed
/// over `history`; one that would loosen a refused call, or removes no prompt, is dropped.
pub fn suggest(
    reg: &Registry,
    files: &PolicyFiles,
    history: &[Recorded],
    s: Settings,
) -> Vec<Suggestion> {
    suggest_with(reg, files, history, s, &Schemas::default()).suggestions
}

/// [`suggest`], mining for each tool only the arguments it really takes: those its input
/// schema in `schemas` declares or the policy names for it ([`known::rule_named`]). A tool with
/// `min_decisions` settled calls on one side of which no argument is known, or whose calls
/// vary in more than [`mine::MAX_KEYS`] known ones, is listed in [`Mined::unmined`] with why.
pub fn suggest_with(
    reg: &Registry,
    files: &PolicyFiles,
    history: &[Recorded],
    s: Settings,
    schemas: &Schemas,
) -> Mined {
    let min = s.min_decisions.max(2) as usize;
    let budget = std::cell::Cell::new(s.max_replays.unwrap_or(usize::MAX));
    let mut out = Mined::default();
    for ((server, tool), g) in settled(history) {
        let key = (server, tool);
        // A trusted schema says what the tool takes; only without one do the rules say it
        // (found by review: a rule's name outside the schema is not an argument of the tool).
        let known = match schemas.declared.get(&key) {
            Some(declared) => declared.clone(),
            None => known::rule_named(reg, agents_of(&g), key.0.as_deref(), &key.1),
        };
        let enough = g.approved.len() >= min || g.rejected.len() >= min;
        let args = |rs: &[&Recorded]| -> Vec<Value> {
            rs.iter().map(|r| r.call.arguments.clone()).collect()
        };
        let (yes, no) = (args(&g.approved), args(&g.against()));
        let (yes, no): (Vec<&Value>, Vec<&Value>) = (yes.iter().collect(), no.iter().collect());
        let is_known = |k: &str| known.contains(k);
        let reason = if known.is_empty() {
            Some(known::unknown_reason(schemas.unreviewed.contains(&key)))
        } else if mine::weighed(&yes, &no, &is_known).is_none() {
            Some(known::crowded_reason(mine::MAX_KEYS))
        } else {
            None
        };
        if let Some(reason) = reason {
            if enough {
                out.unmined.push(Unmined {
                    server: key.0,
                    tool: key.1,
                    decisions: (g.approved.len() + g.rejected.len()) as u64,
                    reason,
                });
            }
            continue;
        }
        let ctx = Group {
            reg,
            files,
            history,
            budget: &budget,
            min,
            declared: schemas.declared.get(&key),
        };
        out.suggestions
            .extend(for_tool(&ctx, &g, key, (&yes, &no), &is_known));
    }
    out.suggestions.sort_by_key(|s| {
        let removed = s.replay.prompts_before as i64 - s.replay.prompts_after as i64;
        (s.kind == Kind::Deny, -removed)
    });
    out.unmined
        .sort_by(|a, b| b.decisions.cmp(&a.decisions).then(a.tool.cmp(&b.tool)));
    out
}

/// The agents whose settled calls `g` holds (each once, sorted).
fn agents_of<'g>(g: &'g Settled<'_>) -> BTreeSet<&'g str> {
    g.approved
        .iter()
        .chain(&g.rejected)
        .map(|r| r.agent.as_str())
        .collect()
}

/// What every tool's mining shares: the policy, the history and the replays left.
struct Group<'a> {
    reg: &'a Registry,
    files: &'a PolicyFiles,
    history: &'a [Recorded],
    budget: &'a std::cell::Cell<usize>,
    min: usize,
    /// The arguments the tool's trusted input schema declares, when there is one.
    declared: Option<&'a BTreeSet<String>>,
}

/// The suggestions (at most a removal and a deny) for tool `key` with settled calls `g`, whose
/// approved and rejected (or cancelled) arguments are `yes` and `no`, weighing the arguments
/// `known` accepts.
fn for_tool(
    ctx: &Group<'_>,
    g: &Settled<'_>,
    (server, tool): ToolKey,
    (yes, no): (&[&Value], &[&Value]),
    known: &dyn Fn(&str) -> bool,
) -> Vec<Suggestion> {
    let mut out = Vec::new();
    let secret = redacted(ctx.reg, g);
    let open = |(c, _): &(Constraint, usize)| !secret(c.key());
    let found = mine::ranked(yes, no, ctx.min, true, known);
    let removals = found
        .iter()
        .filter(|f| open(f) && !rivalled(f, &found))
        .cloned();
    if let Some(sg) = removals
        .take(MAX_TRIED)
        .find_map(|(c, _)| removal(ctx, g, &c, &secret))
    {
        out.push(Suggestion {
            server: server.clone(),
            tool: tool.clone(),
            ..sg
        });
    }
    // Rejected calls only: a cancelled one is no one's judgement (the agent may cancel).
    let refused: Vec<&Value> = g.rejected.iter().map(|r| &r.call.arguments).collect();
    let denials = mine::ranked(&refused, yes, ctx.min, false, known);
    let mut unrivalled = denials.iter().filter(|f| !rivalled(f, &denials));
    if let Some((c, _)) = unrivalled.find(|f| open(f)).cloned() {
        let ev = evidence(&c, &g.rejected, &g.approved);
        let made = edit::deny_policy(ctx.files, &tool, server.as_deref(), &ev.agents, &c);
        if let Some((cand, e)) = made
            && let Some(counts) = replayed(&cand, ctx.history, ctx.budget, &|_| true)
            && counts.loosened == 0
            && counts.to_deny > 0
        {
            out.push(Suggestion {
                kind: Kind::Deny,
                tool,
                server,
                description: format!("deny when {}", c.describe()),
                pattern: c,
                evidence: ev,
                edits: vec![e],
                replay: counts,
            });
        }
    }
    out
}

/// Whether constraint `c` (covering `n` calls) has a rival in `found`: a constraint on another
/// argument covering as many, or all but a tenth of as many (at least one fewer). Which
/// argument people judged is then unknown, and the agent writes them all (found by review: a
/// made-up `a_amount` mirroring `amount` sorted first and was suggested; a made-up number
/// tagging the approved vendors' calls beat their list by its kind; one call with `amount`
/// sent as text let a mirror cover one call more). Such a suggestion is not made.
fn rivalled((c, n): &(Constraint, usize), found: &[(Constraint, usize)]) -> bool {
    let near = n.saturating_sub((n / 10).max(1));
    found.iter().any(|(o, m)| *m >= near && o.key() != c.key())
}

/// Whether an argument is one the policy redacts for any settled call of `g` (its `redact`
/// paths: the key itself, a path below it, or `*`): its values must not be written into a
/// rule, where they would leave the gateway in a policy file.
fn redacted<'g>(reg: &Registry, g: &'g Settled<'_>) -> impl Fn(&str) -> bool + 'g {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    for r in g.approved.iter().chain(&g.rejected) {
        let v = crate::gatekeeper::evaluate(reg, &r.agent, &r.call);
        paths.extend(v.terms.redact);
    }
    move |key: &str| {
        paths.iter().any(|p| {
            let first = p.split('.').next().unwrap_or("");
            first == key || first == "*" || p == key
        })
    }
}

/// The prompt-removing suggestion for pattern `c` of group `g`, if its sources can be
/// narrowed and its replay removes prompts and loosens nothing. The exception written is the
/// pattern and every argument the covered approvals all sent with one value ([`mine::pins`]),
/// and none is made when one of those cannot be written (a value no condition compares, or one
/// `secret` redacts), or when the tool's trusted input schema declares an argument none of the
/// covered approvals sent: no condition can require an argument to be absent (a missing one
/// cannot be evaluated, which asks), and an exception would let any value of it through.
fn removal(
    ctx: &Group<'_>,
    g: &Settled<'_>,
    c: &Constraint,
    secret: &dyn Fn(&str) -> bool,
) -> Option<Suggestion> {
    let covered: Vec<&Recorded> = g
        .approved
        .iter()
        .filter(|r| c.holds(&r.call.arguments))
        .copied()
        .collect();
    let args: Vec<&Value> = covered.iter().map(|r| &r.call.arguments).collect();
    let pins = mine::pins(&args, c.key()).ok()?;
    if pins.iter().any(|(k, _)| secret(k)) {
        return None;
    }
    let sent = |k: &String| args.iter().any(|a| a.get(k).is_some());
    if ctx.declared.is_some_and(|d| !d.iter().all(sent)) {
        return None;
    }
    let mut sources = BTreeSet::new();
    for r in &covered {
        sources.extend(edit::sources(ctx.reg, &r.agent, &r.call).ok()?);
    }
    let sources: Vec<_> = sources.into_iter().collect();
    // The agents whose approvals are the evidence: a rule narrowed here may remove prompts of
    // those agents only (found by review: a governance rule for [a, b] was narrowed on a's
    // approvals alone, and b's calls, which no one had approved, ran unasked).
    let agents: BTreeSet<&str> = covered.iter().map(|r| r.agent.as_str()).collect();
    if sources
        .iter()
        .any(|s| s.agents.iter().any(|a| !agents.contains(a.as_str())))
    {
        return None;
    }
    let (cand, edits) = edit::narrow(ctx.files, &sources, c, &pins)?;
    let (tool, server) = (&g.approved[0].call.tool, &g.approved[0].call.server);
    // Every prompt the candidate removes must be a call of this tool within the pattern and
    // its pins, of an agent of the evidence: a narrowed rule that reaches further than its
    // evidence is not suggested.
    let within = |r: &Recorded| {
        &r.call.tool == tool
            && &r.call.server == server
            && agents.contains(r.agent.as_str())
            && c.holds(&r.call.arguments)
            && mine::pinned(&pins, &r.call.arguments)
    };
    let counts = replayed(&cand, ctx.history, ctx.budget, &within)?;
    if counts.loosened > 0 || counts.prompts_after >= counts.prompts_before {
        return None;
    }
    Some(Suggestion {
        kind: Kind::RemovePrompt,
        tool: String::new(),
        server: None,
        description: format!("ask unless {}{}", c.describe(), mine::describe_pins(&pins)),
        pattern: c.clone(),
        evidence: evidence(c, &g.approved, &g.against()),
        edits,
        replay: counts,
    })
}

/// The overall counts of replaying `history` under the policy of `files`, or `None` when the
/// files do not load, `budget` (replays left) is spent, or a call that was prompted then and
/// would run without a prompt now is not one `removable` accepts.
fn replayed(
    files: &PolicyFiles,
    history: &[Recorded],
    budget: &std::cell::Cell<usize>,
    removable: &dyn Fn(&Recorded) -> bool,
) -> Option<Counts> {
    budget.set(budget.get().checked_sub(1)?);
    let reg = Registry::load(&files.agents, &files.governance).ok()?;
    let mut r = Replayer::new(&reg, Options::default());
    for rec in history {
        if r.push_classified(rec) == Some(Change::ConfirmToAllow) && !removable(rec) {
            return None;
        }
    }
    Some(r.finish().overall)
}

#[cfg(test)]
mod attacks;
#[cfg(test)]
mod declared;
#[cfg(test)]
mod tests;
