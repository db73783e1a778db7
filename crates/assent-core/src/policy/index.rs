//! The rule index ([`RuleIndex`]): where each governance rule sits (policy ordinal, rule
//! ordinal), keyed by the exact tool name it covers and by its `server`, with the rules whose
//! `tool` is a glob kept apart. Built once when the registry loads, so a verdict looks only at
//! the rules that can cover its call instead of every rule (issue 13 item 5); and each rule's
//! place by its label, so the policies behind a verdict's reasons are found without a scan. It does not
//! decide whether a rule covers a call or applies to an agent (the registry does, with
//! [`Rule::covers`](super::Rule::covers) and the policy's selector).

use super::model::{Policy, is_literal_glob};
use std::collections::{BTreeMap, HashMap};

/// A rule's place: the ordinal of its policy in the registry's order (policies by id) and its
/// ordinal among the policy's rules (file order). Ordering these orders rules as a scan does.
pub(super) type At = (u32, u32);

/// Places of rules, sorted, split by the `server` the rules are limited to.
#[derive(Debug, Clone, Default)]
struct ByServer {
    /// Rules with no `server`: they cover calls on any server and local calls.
    any: Vec<At>,
    /// Rules limited to one MCP server alias.
    on: HashMap<String, Vec<At>>,
}

impl ByServer {
    /// Files the rule at `at` under `server` (places must arrive in ascending order).
    fn push(&mut self, server: Option<&str>, at: At) {
        match server {
            None => self.any.push(at),
            Some(s) => self.on.entry(s.to_string()).or_default().push(at),
        }
    }

    /// Appends the places of the rules that may cover a call on `server`.
    fn candidates(&self, server: Option<&str>, out: &mut Vec<At>) {
        out.extend_from_slice(&self.any);
        if let Some(v) = server.and_then(|s| self.on.get(s)) {
            out.extend_from_slice(v);
        }
    }
}

/// Every governance rule of a registry by the tool name it covers. A rule whose `tool` has no
/// glob metacharacter (`*`, `?`, `[`) nor path separator covers exactly that name and is
/// keyed by it; every other rule is a glob, kept in one list checked for every call. Built by
/// [`RuleIndex::build`] from the registry's policies; stale if they change afterwards (the
/// registry is read-only once built).
#[derive(Debug, Clone, Default)]
pub(super) struct RuleIndex {
    /// Policy ids by ordinal (the registry's order).
    policy_ids: Vec<String>,
    /// Rules of an exact tool name, by that name.
    exact: HashMap<String, ByServer>,
    /// Rules of an exact tool name, by that name folded ([`folded_tool_name`]): where a call
    /// whose name folds alike may find a rule it escapes by spelling.
    folded: HashMap<String, ByServer>,
    /// Whether some rule's tool is not in folded form (`GetUser`, `Delete_*`): then even a
    /// call whose name is folded already may be a look-alike.
    unfolded_rules: bool,
    /// Glob rules whose `tool` is not in folded form, with that glob folded
    /// ([`folded_tool_name`] of its text; found by review: a rule for `Delete_*` did not hold
    /// a call of `delete_all`, nor of `DELETE_ALL`).
    folded_globs: BTreeMap<At, glob::Pattern>,
    /// Rules whose `tool` is a glob.
    globs: ByServer,
    /// Every rule's place by its label (unique: a label starts with its policy's id).
    by_label: HashMap<String, At>,
}

impl RuleIndex {
    /// The index of `policies` (the registry's map, in its order). Panics if there are more
    /// than `u32::MAX` policies or rules in one policy (the loader's input bounds keep them
    /// far below).
    pub(super) fn build(policies: &BTreeMap<String, Policy>) -> Self {
        let mut index = RuleIndex::default();
        for (pi, p) in policies.values().enumerate() {
            index.policy_ids.push(p.id.clone());
            let pi = u32::try_from(pi).expect("fewer than 2^32 policies");
            for (ri, r) in p.rules.iter().enumerate() {
                let at = (pi, u32::try_from(ri).expect("fewer than 2^32 rules"));
                let tool = r.tool.as_str();
                if is_literal_glob(tool) {
                    let folded = folded_tool_name(tool);
                    index.unfolded_rules |= folded != tool;
                    let by_fold = index.folded.entry(folded.into_owned()).or_default();
                    by_fold.push(r.server.as_deref(), at);
                    index.exact.entry(tool.to_string()).or_default()
                } else {
                    let folded = folded_tool_name(tool);
                    if folded != tool
                        && let Ok(g) = glob::Pattern::new(&folded)
                    {
                        index.unfolded_rules = true;
                        index.folded_globs.insert(at, g);
                    }
                    &mut index.globs
                }
                .push(r.server.as_deref(), at);
                index.by_label.insert(r.label.clone(), at);
            }
        }
        index
    }

    /// The places of every rule that may cover a call of `tool` on `server`, in scan order
    /// (policy order, then file order): the exact-name rules of `tool` and every glob rule,
    /// each limited to no server or to `server`. A superset of the covering rules: the caller
    /// still checks [`Rule::covers`](super::Rule::covers) and the policy's agents.
    pub(super) fn candidates(&self, tool: &str, server: Option<&str>) -> Vec<At> {
        let mut out = Vec::new();
        if let Some(e) = self.exact.get(tool) {
            e.candidates(server, &mut out);
        }
        self.globs.candidates(server, &mut out);
        out.sort_unstable();
        out
    }

    /// The places of the exact-name rules whose tool folds to `folded` (a call's name folded
    /// by [`folded_tool_name`]), limited to no server or to `server`, and of the glob rules
    /// whose folded glob matches `folded` (whatever their server: the caller checks it),
    /// sorted; none when `call_is_folded` (the call's name is its own fold) and every rule's
    /// tool is folded too, so the common call costs nothing. The caller keeps those that do
    /// not cover the call.
    pub(super) fn folding_alike(
        &self,
        folded: &str,
        call_is_folded: bool,
        server: Option<&str>,
    ) -> Vec<At> {
        let mut out = Vec::new();
        if call_is_folded && !self.unfolded_rules {
            return out;
        }
        if let Some(e) = self.folded.get(folded) {
            e.candidates(server, &mut out);
        }
        out.extend(
            self.folded_globs
                .keys()
                .filter(|at| self.folded_glob_matches(**at, folded)),
        );
        out.sort_unstable();
        out
    }

    /// Whether the rule at `at` is a glob rule whose glob, folded, matches `folded` (a call's
    /// name folded by [`folded_tool_name`]).
    pub(super) fn folded_glob_matches(&self, at: At, folded: &str) -> bool {
        self.folded_globs
            .get(&at)
            .is_some_and(|g| g.matches(folded))
    }

    /// The place of the rule labelled `label` (a [`Reason::rule`](crate::verdict::Reason)).
    pub(super) fn rule_labelled(&self, label: &str) -> Option<At> {
        self.by_label.get(label).copied()
    }

    /// The id of the policy with ordinal `pi`, if there is one.
    pub(super) fn policy_id(&self, pi: u32) -> Option<&str> {
        self.policy_ids.get(pi as usize).map(String::as_str)
    }
}

/// Tool name `name` as a dispatcher that ignores case, compatibility forms and stray
/// characters may read it: NFKC, without control and invisible characters
/// ([`crate::template::is_invisible`]), lower-cased as [`crate::canonical::folded_key`]
/// does, without surrounding whitespace. Borrowed, at the cost of one byte scan, when `name`
/// is already so: printable ASCII without upper case nor surrounding spaces, the common case.
pub(crate) fn folded_tool_name(name: &str) -> std::borrow::Cow<'_, str> {
    let b = name.as_bytes();
    let plain = |c: &u8| (c.is_ascii_graphic() || *c == b' ') && !c.is_ascii_uppercase();
    if b.iter().all(plain) && b.first() != Some(&b' ') && b.last() != Some(&b' ') {
        return std::borrow::Cow::Borrowed(name);
    }
    use unicode_normalization::UnicodeNormalization as _;
    let kept = |c: &char| !c.is_control() && !crate::template::is_invisible(*c);
    let normal: String = name.nfkc().filter(kept).collect();
    let folded = crate::canonical::folded_key(&normal);
    std::borrow::Cow::Owned(folded.trim().to_string())
}

#[cfg(test)]
mod tests {
    /// The fold: already folded names are borrowed; case, width, invisible and control
    /// characters and surrounding spaces go.
    #[test]
    fn a_tool_name_folds_as_a_loose_dispatcher_reads_it() {
        use super::folded_tool_name as fold;
        assert!(matches!(fold("delete_repo"), std::borrow::Cow::Borrowed(_)));
        assert!(matches!(fold("list repos"), std::borrow::Cow::Borrowed(_)));
        for name in [
            "Delete_Repo",
            "\u{ff24}elete_repo",
            " delete_repo\t",
            "delete\u{202e}_repo",
        ] {
            assert_eq!(fold(name), "delete_repo", "{name:?}");
        }
        assert_eq!(fold("ΣΟΦΟΣ"), fold("σοφος"));
    }
}
