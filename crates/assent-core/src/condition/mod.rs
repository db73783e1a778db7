//! Agent Format `condition` / `args_match` evaluation (seed 004 "Conditional Approval").
//!
//! One [`ConditionGroup`] is an AND over its keys; a [`Condition`] is an OR over groups. A key
//! may be dotted (`order.details.amount`) to reach nested arguments. Anything that cannot be
//! evaluated (a missing argument, one of the wrong type) makes the whole condition
//! [`Outcome::CannotEvaluate`], which callers treat as "approval required" (fail closed), even
//! when another group would not have matched. A regex that does not compile is a parse error.
//!
//! A condition is evaluated on every call it covers, inside the store's write transaction, so
//! its size is bounded at parse time ([`MAX_GROUPS`], [`MAX_PREDICATES`], [`MAX_PATTERNS`],
//! [`MAX_LIST_ITEMS`]): a policy file cannot make each call scan its arguments without end.
//!
//! Outcomes say which clause decided (issue 10 B): a match names the predicates of each
//! matching group with the argument's actual value (`amount > 1000 (amount = 5000)`), and an
//! unevaluable predicate is named with why (`to matches pattern "^ext-": argument `to` is
//! missing`), so every reason a verdict gives can be traced to a line of policy.
//!
//! Layout: this module holds the condition itself ([`Condition`], [`ConditionGroup`],
//! [`Outcome`]: parsing the groups and combining their results), reading arguments through
//! [`crate::arg_path::lookup`]; `matcher`
//! holds one match expression ([`Matcher`], [`Ops`], [`Pattern`]): its parsing, its test
//! against an argument and its rendering in reasons.

mod matcher;

use crate::arg_path::lookup;
use serde_json::Value;

pub use matcher::{
    MAX_LIST_ITEMS, MAX_PATTERN_BYTES, MAX_PATTERN_LEN, MAX_SHOWN_CHARS, Matcher, Ops,
    PATTERN_OVERHEAD, Pattern, PatternBudget, compile_pattern,
};

/// Most `args_match` groups one condition may have.
pub const MAX_GROUPS: usize = 64;
/// Most predicates (argument keys) one condition may have, over all its groups.
pub const MAX_PREDICATES: usize = 256;
/// Most `pattern` and `not_pattern` operators one condition may have, over all its groups:
/// each scans its argument once per call, so this bounds a call's regex work to this many
/// passes over its arguments.
pub const MAX_PATTERNS: usize = 32;

/// Result of evaluating a condition against arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// At least one group matched (and nothing was unevaluable). One entry per matching group,
    /// in file order: its predicates rendered and joined with ` and `, each with the actual
    /// value where it is not the literal itself, e.g. `amount > 1000 (amount = 5000) and
    /// currency = "USD"`. An empty group (`args_match: {}`) renders as
    /// `args_match: {} (matches every call)`. Never empty.
    Match(Vec<String>),
    /// No group matched and every predicate could be evaluated.
    NoMatch,
    /// Some predicate could not be evaluated: one entry per such predicate, naming the clause,
    /// the key and why, e.g. `amount > 1000: argument `amount` is missing`.
    CannotEvaluate(Vec<String>),
}

/// An OR of AND-groups. `Condition(vec![])` never occurs: an omitted condition is `None` upstream.
#[derive(Debug, Clone)]
pub struct Condition(pub Vec<ConditionGroup>);

/// One `args_match` block: every predicate must hold. An empty group matches everything.
#[derive(Debug, Clone, Default)]
pub struct ConditionGroup {
    /// `(dotted key, matcher)` in file order.
    pub predicates: Vec<(String, Matcher)>,
}

/// Why a condition could not be parsed from policy YAML/JSON.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConditionParseError {
    /// `condition` is neither an object nor a non-empty list.
    #[error("condition must be an object with `args_match` or a non-empty list of them")]
    Shape,
    /// `args_match` is not an object.
    #[error("`args_match` must be an object")]
    ArgsMatchShape,
    /// The condition is larger than a bound ([`MAX_GROUPS`], [`MAX_PREDICATES`],
    /// [`MAX_PATTERNS`]); the text names which.
    #[error("condition too large: {0}")]
    TooLarge(String),
    /// A group has a key other than `args_match`.
    #[error("unknown key `{0}` in condition group (expected `args_match`)")]
    UnknownGroupKey(String),
    /// A match expression is malformed; `key` is the argument name.
    #[error("key `{key}`: {msg}")]
    Matcher {
        /// The argument name.
        key: String,
        /// What is wrong with its expression.
        msg: String,
    },
}

impl Condition {
    /// Parses the Agent Format `condition` value: one group object or a non-empty list of them.
    /// Errors: [`ConditionParseError`], including [`ConditionParseError::TooLarge`] past the
    /// bounds of this module.
    pub fn parse(v: &Value) -> Result<Self, ConditionParseError> {
        let groups = match v {
            Value::Object(_) => vec![ConditionGroup::parse(v)?],
            Value::Array(a) if a.len() > MAX_GROUPS => {
                return Err(ConditionParseError::TooLarge(format!(
                    "{} groups (at most {MAX_GROUPS})",
                    a.len()
                )));
            }
            Value::Array(a) if !a.is_empty() => a
                .iter()
                .map(ConditionGroup::parse)
                .collect::<Result<_, _>>()?,
            _ => return Err(ConditionParseError::Shape),
        };
        let preds = groups.iter().flat_map(|g| &g.predicates);
        let (count, patterns) = preds.fold((0, 0), |(n, p), (_, m)| (n + 1, p + m.patterns()));
        if count > MAX_PREDICATES {
            return Err(ConditionParseError::TooLarge(format!(
                "{count} predicates (at most {MAX_PREDICATES})"
            )));
        }
        if patterns > MAX_PATTERNS {
            return Err(ConditionParseError::TooLarge(format!(
                "{patterns} patterns (at most {MAX_PATTERNS})"
            )));
        }
        Ok(Condition(groups))
    }

    /// Evaluates against the call's arguments (a JSON object). See [`Outcome`] for what each
    /// result carries. The groups are alternatives: one that matches makes the condition
    /// [`Outcome::Match`] whatever the others say (found by review: a `deny` with one group
    /// matching and another unevaluable was only a hold); otherwise any unevaluable group makes
    /// it [`Outcome::CannotEvaluate`] (fail closed).
    pub fn evaluate(&self, args: &Value) -> Outcome {
        let mut matched = Vec::new();
        let mut unknown = Vec::new();
        for g in &self.0 {
            match g.evaluate(args) {
                Outcome::Match(m) => matched.extend(m),
                Outcome::NoMatch => {}
                Outcome::CannotEvaluate(r) => unknown.extend(r),
            }
        }
        if !matched.is_empty() {
            Outcome::Match(matched)
        } else if !unknown.is_empty() {
            Outcome::CannotEvaluate(unknown)
        } else {
            Outcome::NoMatch
        }
    }
}

impl ConditionGroup {
    fn parse(v: &Value) -> Result<Self, ConditionParseError> {
        let obj = v.as_object().ok_or(ConditionParseError::Shape)?;
        let mut predicates = Vec::new();
        for (k, val) in obj {
            if k != "args_match" {
                return Err(ConditionParseError::UnknownGroupKey(k.clone()));
            }
            let m = val.as_object().ok_or(ConditionParseError::ArgsMatchShape)?;
            for (key, expr) in m {
                let matcher = Matcher::parse(expr).map_err(|msg| ConditionParseError::Matcher {
                    key: key.clone(),
                    msg,
                })?;
                predicates.push((key.clone(), matcher));
            }
        }
        // In key order whatever the map keeps (a workspace build with `assent-bench` turns on
        // serde_json's `preserve_order` through cedar, which kept the file's order): a reason
        // reads the same from every build.
        predicates.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Self { predicates })
    }

    /// Evaluates the AND of the group's predicates. A match carries one entry: the group's
    /// predicates rendered (see [`Outcome::Match`]).
    pub fn evaluate(&self, args: &Value) -> Outcome {
        let mut all = true;
        let mut shown = Vec::new();
        let mut unknown = Vec::new();
        for (key, m) in &self.predicates {
            match lookup(args, key) {
                None => unknown.push(format!("{}: argument `{key}` is missing", m.clause(key))),
                Some(actual) => match m.test(actual) {
                    Ok(true) => shown.push(m.shown(key, actual)),
                    Ok(false) => all = false,
                    Err(why) => unknown.push(format!("{}: argument `{key}` {why}", m.clause(key))),
                },
            }
        }
        // A predicate that is false decides the group whatever the others say (false and
        // unknown is false; found by review: a `deny` of `{env: prod, force: true}` held every
        // `env: dev` call without `force` as unevaluable, for an operator only).
        if !all {
            Outcome::NoMatch
        } else if !unknown.is_empty() {
            Outcome::CannotEvaluate(unknown)
        } else if shown.is_empty() {
            Outcome::Match(vec!["args_match: {} (matches every call)".into()])
        } else {
            Outcome::Match(vec![shown.join(" and ")])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(v: Value) -> Condition {
        Condition::parse(&v).unwrap()
    }
    fn check(c: Value, args: Value, want: &str) {
        let got = match cond(c.clone()).evaluate(&args) {
            Outcome::Match(_) => "match".to_string(),
            Outcome::NoMatch => "no".to_string(),
            Outcome::CannotEvaluate(r) => format!("unknown: {}", r.join("; ")),
        };
        // An unevaluable predicate's text starts with its clause; `want` names the rest.
        let ok = match want.strip_prefix("unknown: ") {
            Some(rest) => got.starts_with("unknown: ") && got.contains(rest),
            None => got.starts_with(want),
        };
        assert!(ok, "{c} on {args}: got {got}, want {want}");
    }

    /// [`check`] of one condition `c` on each `(args, want)` case.
    fn check_each(c: Value, cases: &[(Value, &str)]) {
        for (args, want) in cases {
            check(c.clone(), args.clone(), want);
        }
    }

    fn matched(c: Value, args: Value) -> Vec<String> {
        match cond(c.clone()).evaluate(&args) {
            Outcome::Match(m) => m,
            other => panic!("{c} on {args}: {other:?}"),
        }
    }
    fn unevaluable(c: Value, args: Value) -> Vec<String> {
        match cond(c.clone()).evaluate(&args) {
            Outcome::CannotEvaluate(r) => r,
            other => panic!("{c} on {args}: {other:?}"),
        }
    }

    /// Issue 10 B: a reason must say which clause matched and with what value, not only that
    /// "a condition matched".
    #[test]
    fn a_match_names_the_matching_groups_clauses_and_values() {
        assert_eq!(
            matched(
                json!({"args_match": {"amount": {"gt": 1000}}}),
                json!({"amount": 5000})
            ),
            ["amount > 1000 (amount = 5000)"]
        );
        assert_eq!(
            matched(
                json!({"args_match": {"path": {"pattern": "^/etc/"}}}),
                json!({"path": "/etc/passwd"})
            ),
            [r#"path matches pattern "^/etc/" (path = "/etc/passwd")"#]
        );
        assert_eq!(
            matched(
                json!({"args_match": {"currency": {"in": ["EUR", "USD"]}, "confirmed": true}}),
                json!({"currency": "EUR", "confirmed": true})
            ),
            [r#"confirmed = true and currency in ["EUR","USD"] (currency = "EUR")"#]
        );
        assert_eq!(
            matched(
                json!({"args_match": {"a": {"gte": 0.5, "lt": 2, "ne": 1, "not_in": [7]}}}),
                json!({"a": 1.5})
            ),
            ["a >= 0.5 and a < 2 and a != 1 and a not in [7] (a = 1.5)"]
        );
        assert_eq!(
            matched(
                json!({"args_match": {"a": {"lt": 1e300, "gt": -2.5}}}),
                json!({"a": 0})
            ),
            ["a > -2.5 and a < 1e300 (a = 0)"]
        );
        // Only the groups that matched are named, in file order.
        let or = json!([{"args_match": {"amount": {"gt": 10000}}},
                        {"args_match": {"to": {"pattern": "^ext-"}}},
                        {"args_match": {"to": "ext-1"}}]);
        assert_eq!(
            matched(or, json!({"amount": 5, "to": "ext-1"})),
            [
                r#"to matches pattern "^ext-" (to = "ext-1")"#,
                r#"to = "ext-1""#
            ]
        );
        assert_eq!(
            matched(json!({"args_match": {}}), json!({})),
            ["args_match: {} (matches every call)"]
        );
        // A long value is described, never cut (a cut secret could not be redacted).
        let long = "x".repeat(MAX_SHOWN_CHARS + 1);
        assert_eq!(
            matched(
                json!({"args_match": {"s": {"pattern": "x"}}}),
                json!({ "s": long })
            ),
            [format!(
                r#"s matches pattern "x" (s: a string of {} characters)"#,
                MAX_SHOWN_CHARS + 1
            )]
        );
    }

    #[test]
    fn an_unevaluable_predicate_is_named_by_its_clause() {
        assert_eq!(
            unevaluable(json!({"args_match": {"amount": {"gt": 1000}}}), json!({})),
            ["amount > 1000: argument `amount` is missing"]
        );
        assert_eq!(
            unevaluable(
                json!({"args_match": {"amount": {"gt": 1000}}}),
                json!({"amount": "5000"})
            ),
            ["amount > 1000: argument `amount` is a string but `gt/gte/lt/lte` need a number"]
        );
    }

    #[test]
    fn literals() {
        check(
            json!({"args_match": {"c": "USD"}}),
            json!({"c": "USD"}),
            "match",
        );
        check(
            json!({"args_match": {"c": "USD"}}),
            json!({"c": "EUR"}),
            "no",
        );
        check(json!({"args_match": {"n": 2}}), json!({"n": 2.0}), "match");
        check(
            json!({"args_match": {"b": true}}),
            json!({"b": false}),
            "no",
        );
        check(
            json!({"args_match": {"b": true}}),
            json!({"b": "true"}),
            "unknown: argument `b` is a string",
        );
    }

    #[test]
    fn numeric_operators() {
        let c = |op: &str, n: f64| json!({"args_match": {"a": {op: n}}});
        check(c("gt", 10.0), json!({"a": 11}), "match");
        check(c("gt", 10.0), json!({"a": 10}), "no");
        check(c("gte", 10.0), json!({"a": 10}), "match");
        check(c("gte", 10.0), json!({"a": 9.99}), "no");
        check(c("lt", 0.5), json!({"a": 0.4}), "match");
        check(c("lt", 0.5), json!({"a": 0.5}), "no");
        check(c("lte", 0.5), json!({"a": 0.5}), "match");
        check(c("lte", 0.5), json!({"a": 0.6}), "no");
        check(
            c("gt", 10.0),
            json!({"a": "11"}),
            "unknown: argument `a` is a string but `gt/gte/lt/lte` need a number",
        );
        check(
            json!({"args_match": {"a": {"gt": 1, "lt": 5}}}),
            json!({"a": 3}),
            "match",
        );
        check(
            json!({"args_match": {"a": {"gt": 1, "lt": 5}}}),
            json!({"a": 7}),
            "no",
        );
    }

    #[test]
    fn ne_pattern_in_not_in() {
        check(
            json!({"args_match": {"s": {"ne": "approved"}}}),
            json!({"s": "new"}),
            "match",
        );
        check(
            json!({"args_match": {"s": {"ne": "approved"}}}),
            json!({"s": "approved"}),
            "no",
        );
        check(
            json!({"args_match": {"s": {"ne": 1}}}),
            json!({"s": "x"}),
            "unknown",
        );
        let p = json!({"args_match": {"e": {"pattern": ".*@external\\.com$"}}});
        check(p.clone(), json!({"e": "a@external.com"}), "match");
        check(p.clone(), json!({"e": "a@internal.com"}), "no");
        check(p, json!({"e": 5}), "unknown: argument `e` is a number");
        let i = json!({"args_match": {"c": {"in": ["delete", "modify"]}}});
        check(i.clone(), json!({"c": "delete"}), "match");
        check(i.clone(), json!({"c": "read"}), "no");
        check(i, json!({"c": 3}), "unknown");
        let n = json!({"args_match": {"r": {"not_in": ["restricted", "embargoed"]}}});
        check(n.clone(), json!({"r": "eu"}), "match");
        check(n.clone(), json!({"r": "embargoed"}), "no");
        check(n, json!({"r": ["eu"]}), "unknown");
    }

    #[test]
    fn and_or_and_vacuous_truth() {
        let and = json!({"args_match": {"amount": {"gt": 10000}, "currency": "USD"}});
        check_each(
            and,
            &[
                (json!({"amount": 20000, "currency": "USD"}), "match"),
                (json!({"amount": 20000, "currency": "EUR"}), "no"),
                (json!({"amount": 5, "currency": "USD"}), "no"),
            ],
        );
        let or = json!([{"args_match": {"amount": {"gt": 10000}}}, {"args_match": {"recipient_type": "external"}}]);
        check_each(
            or,
            &[
                (json!({"amount": 1, "recipient_type": "external"}), "match"),
                (
                    json!({"amount": 20000, "recipient_type": "internal"}),
                    "match",
                ),
                (json!({"amount": 1, "recipient_type": "internal"}), "no"),
            ],
        );
        check(json!({"args_match": {}}), json!({}), "match");
        check(json!({"args_match": {}}), json!({"x": 1}), "match");
    }

    #[test]
    fn missing_arguments_fail_closed_and_name_the_key() {
        let or = json!([{"args_match": {"amount": {"gt": 10000}}}, {"args_match": {"recipient_type": "external"}}]);
        check(
            or,
            json!({"amount": 1}),
            "unknown: argument `recipient_type` is missing",
        );
        check(
            json!({"args_match": {"a.b.c": 1}}),
            json!({"a": {"b": {}}}),
            "unknown: argument `a.b.c` is missing",
        );
    }

    #[test]
    fn dotted_keys_reach_nested_arguments() {
        let c = json!({"args_match": {"order.details.amount": {"gte": 100}}});
        check(
            c.clone(),
            json!({"order": {"details": {"amount": 100}}}),
            "match",
        );
        check(c, json!({"order": {"details": {"amount": 99}}}), "no");
        check(
            json!({"args_match": {"items.0.sku": "A"}}),
            json!({"items": [{"sku": "A"}]}),
            "match",
        );
    }

    #[test]
    fn parse_errors_name_the_key() {
        let e = Condition::parse(&json!({"args_match": {"a": {"gtt": 1}}})).unwrap_err();
        assert!(
            e.to_string().contains("key `a`: unknown operator `gtt`"),
            "{e}"
        );
        assert_eq!(
            Condition::parse(&json!([])).unwrap_err(),
            ConditionParseError::Shape
        );
        assert!(compile_pattern(&"a".repeat(2000)).is_err());
    }
}
