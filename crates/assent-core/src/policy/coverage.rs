//! Load step 6: governance policies that would silently apply to nobody. A typo in a selector
//! or a rule's `server` does not fail a parse, it only stops the policy from applying — its
//! `deny` rules then refuse nothing (found by review: `agents: [Payments-bot]` loaded without
//! a word). After every file is loaded this checks:
//!
//! - a `selector.agents` entry that can never match an agent id (`^[a-z0-9][a-z0-9_-]*$`): a
//!   literal with a capital letter or another character, or a glob whose literal characters
//!   can never be in an id (`Pay*`, `payments.*`) — a load error at the entry's line;
//! - a literal `selector.agents` entry that names no loaded agent — a warning;
//! - a policy that applies to no loaded agent (its selector picks none and no agent file
//!   references it) — a warning at the policy's line;
//! - a rule whose `server` none of the agents the policy applies to declares among its
//!   `mcp_servers` — a warning at the rule's line (the rule covers no call).
//!
//! Warnings stay warnings under `--strict` (which is about unknown Agent Format fields only),
//! like the registry's other load warnings. The lines come from a second, lenient parse of
//! the governance files (`governance` has already validated them).

use super::error::LoadError;
use super::model::{Agent, Policy, is_literal_glob};
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// A governance file as far as lines go: every other key is ignored here.
#[derive(Deserialize)]
struct Lines {
    #[serde(default)]
    policies: Vec<Spanned<PolicyLines>>,
}
#[derive(Deserialize)]
struct PolicyLines {
    id: String,
    #[serde(default)]
    selector: SelectorLines,
    #[serde(default)]
    rules: Vec<Spanned<serde::de::IgnoredAny>>,
}
#[derive(Deserialize, Default)]
struct SelectorLines {
    #[serde(default)]
    agents: Vec<Spanned<String>>,
}

/// Where a policy's parts are: its own line, its `selector.agents` entries' lines, its rules'.
#[derive(Default)]
struct Where {
    line: Option<u64>,
    agents: BTreeMap<String, u64>,
    rules: Vec<u64>,
}

/// The lines of each policy of `governance_files`, by policy id (a file that does not parse
/// gives none: its load error is already reported).
fn lines_of(governance_files: &[(String, String)]) -> BTreeMap<String, Where> {
    let mut out = BTreeMap::new();
    for (_, text) in governance_files {
        let Ok(lines) = crate::yaml::from_str::<Lines>(text) else {
            continue;
        };
        for p in lines.policies {
            let w = Where {
                line: Some(p.referenced.line()),
                agents: p
                    .value
                    .selector
                    .agents
                    .iter()
                    .map(|a| (a.value.clone(), a.referenced.line()))
                    .collect(),
                rules: p.value.rules.iter().map(|r| r.referenced.line()).collect(),
            };
            out.entry(p.value.id).or_insert(w);
        }
    }
    out
}

/// Whether a character may be in an agent id (`^[a-z0-9][a-z0-9_-]*$`).
fn id_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
}

/// Whether selector entry `pattern` (a literal or a `glob` pattern) can match some agent id:
/// every character outside `*`, `?` and bracket expressions may be in an id, every bracket
/// expression matches some character an id may hold there (`[A-Z]` matches none, so `[A-Z]*`
/// can never match), and the pattern does not begin with a character no id begins with
/// (`_`, `-`). Bracket expressions are weighed by `glob` itself, one character at a time.
pub(super) fn may_match_an_id(pattern: &str) -> bool {
    if is_literal_glob(pattern) {
        let mut c = pattern.chars();
        return c.next().is_some_and(|x| id_char(x) && x != '_' && x != '-') && c.all(id_char);
    }
    let mut class: Option<String> = None;
    let mut first = true;
    for c in pattern.chars() {
        if let Some(text) = class.as_mut() {
            // `]` right after `[` or `[!` is a member, not the end.
            let opened = text == "[" || text == "[!";
            text.push(c);
            if c == ']' && !opened {
                if !class_admits_id_char(text, first) {
                    return false;
                }
                class = None;
                first = false;
            }
            continue;
        }
        match c {
            '[' => class = Some("[".into()),
            // What follows a `*` need not begin the id (the `*` may match its start).
            '*' | '?' => first = false,
            c if id_char(c) && !(first && (c == '_' || c == '-')) => first = false,
            _ => return false,
        }
    }
    true
}

/// Whether bracket expression `class` (`[…]`, as `glob` reads it) matches some character an
/// agent id may hold — at its start when `first` (`[a-z0-9]`), else anywhere. A class `glob`
/// cannot read is taken as matching (the pattern's own parse reports it).
fn class_admits_id_char(class: &str, first: bool) -> bool {
    let Ok(p) = glob::Pattern::new(class) else {
        return true;
    };
    let mut buf = [0u8; 4];
    ('a'..='z')
        .chain('0'..='9')
        .chain(if first { "" } else { "_-" }.chars())
        .any(|c| p.matches(c.encode_utf8(&mut buf)))
}

/// The load errors and warnings of step 6 (see the module) for `policies` over the loaded
/// `agents`, with lines from `governance_files`; `applies` says whether a policy applies to
/// an agent (the registry's rule, passed in so this file does not import the registry).
/// Errors and warnings read `FILE:LINE: policy `ID` …`.
pub(super) fn check(
    agents: &BTreeMap<String, Agent>,
    policies: &BTreeMap<String, Policy>,
    governance_files: &[(String, String)],
    applies: impl Fn(&Policy, &Agent) -> bool,
) -> (Vec<LoadError>, Vec<String>) {
    let lines = lines_of(governance_files);
    let none = Where::default();
    let (mut errs, mut warnings) = (Vec::new(), Vec::new());
    for p in policies.values() {
        let w = lines.get(&p.id).unwrap_or(&none);
        let at = |line: Option<u64>| match line {
            Some(l) => format!("{}:{l}", p.file),
            None => p.file.clone(),
        };
        for a in &p.selector.agents {
            let line = w.agents.get(a).copied().or(w.line);
            if !may_match_an_id(a) {
                errs.push(LoadError {
                    file: p.file.clone(),
                    line,
                    message: format!(
                        "policy `{}` selector.agents: `{a}` can never match an agent id (ids match ^[a-z0-9][a-z0-9_-]*$), so the policy would apply to no agent it names",
                        p.id
                    ),
                });
            } else if is_literal_glob(a) && !agents.contains_key(a) {
                warnings.push(format!(
                    "{}: policy `{}` selector.agents: `{a}` names no loaded agent",
                    at(line),
                    p.id
                ));
            }
        }
        let applied: Vec<&Agent> = agents.values().filter(|a| applies(p, a)).collect();
        if applied.is_empty() {
            warnings.push(format!(
                "{}: policy `{}` applies to no loaded agent: its selector {} picks none and no agent file references it; its rules, deny rules included, apply to nobody",
                at(w.line),
                p.id,
                p.selector.describe()
            ));
            continue;
        }
        for (i, r) in p.rules.iter().enumerate() {
            let Some(server) = &r.server else { continue };
            let declared = applied
                .iter()
                .any(|a| a.mcp_servers.iter().any(|m| &m.alias == server));
            if !declared {
                let line = (w.rules.len() == p.rules.len()).then(|| w.rules[i]);
                let ids: Vec<&str> = applied.iter().map(|a| a.id.as_str()).collect();
                warnings.push(format!(
                    "{}: policy `{}` rules[{i}]: server `{server}` is declared by none of the agents the policy applies to ({}); the rule covers no call",
                    at(line.or(w.line)),
                    p.id,
                    ids.join(", ")
                ));
            }
        }
    }
    (errs, warnings)
}

#[cfg(test)]
mod tests {
    use super::may_match_an_id;

    #[test]
    fn selector_entries_that_can_never_match_an_id() {
        for ok in [
            "payments-bot",
            "a",
            "0x",
            "pay*",
            "*",
            "?x",
            "[!a]b",
            "[]a]x",
            "[A-Za-z]*",
            "[!A-Z]*",
            "*-[_]",
            "?_*",
        ] {
            assert!(may_match_an_id(ok), "{ok}");
        }
        for never in [
            "Payments-bot",
            "payments.bot",
            "-x",
            "_x",
            "Pay*",
            "pay.*",
            "*Bot",
            "a b",
            "[A-Z]*",
            "pay-[A-Z]",
            "[_-]*",
            "-*",
            "[.]x",
            "[]]x",
        ] {
            assert!(!may_match_an_id(never), "{never}");
        }
    }
}
