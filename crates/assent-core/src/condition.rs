//! Agent Format `condition` / `args_match` evaluation (seed 004 "Conditional Approval").
//!
//! One [`ConditionGroup`] is an AND over its keys; a [`Condition`] is an OR over groups. A key
//! may be dotted (`order.details.amount`) to reach nested arguments. Anything that cannot be
//! evaluated (missing argument, wrong type, a regex that does not compile) makes the whole
//! condition [`Outcome::CannotEvaluate`], which callers treat as "approval required" (fail
//! closed), even when another group would not have matched.

use regex::Regex;
use serde_json::{Number, Value};

/// Longest regex accepted from a policy file, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Result of evaluating a condition against arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// At least one group matched (and nothing was unevaluable).
    Match,
    /// No group matched and every predicate could be evaluated.
    NoMatch,
    /// Some predicate could not be evaluated; the strings say which key and why.
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

/// A match expression: a literal for exact match, or an operator object whose operators all hold.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Exact match against a string, number or boolean.
    Literal(Value),
    /// `{gt, gte, lt, lte, ne, pattern, in, not_in}`; every present operator must hold.
    Ops(Ops),
}

/// The operators of a matcher object.
#[derive(Debug, Clone, Default)]
pub struct Ops {
    /// `gt`: argument > N.
    pub gt: Option<f64>,
    /// `gte`: argument >= N.
    pub gte: Option<f64>,
    /// `lt`: argument < N.
    pub lt: Option<f64>,
    /// `lte`: argument <= N.
    pub lte: Option<f64>,
    /// `ne`: argument of the same type and a different value.
    pub ne: Option<Value>,
    /// The compiled pattern, or the compile error text (which makes the predicate unevaluable).
    pub pattern: Option<Result<Regex, String>>,
    /// `in`: argument is one of these scalars.
    pub in_: Option<Vec<Value>>,
    /// `not_in`: argument is none of these scalars.
    pub not_in: Option<Vec<Value>>,
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

/// Compiles a policy regex with the limits of `DEPENDENCIES.md` (size and nesting capped).
pub fn compile_pattern(p: &str) -> Result<Regex, String> {
    if p.len() > MAX_PATTERN_LEN {
        return Err(format!("pattern longer than {MAX_PATTERN_LEN} bytes"));
    }
    regex::RegexBuilder::new(p)
        .size_limit(1 << 20)
        .nest_limit(64)
        .build()
        .map_err(|e| {
            e.to_string()
                .lines()
                .last()
                .unwrap_or("invalid pattern")
                .to_string()
        })
}

impl Condition {
    /// Parses the Agent Format `condition` value: one group object or a non-empty list of them.
    pub fn parse(v: &Value) -> Result<Self, ConditionParseError> {
        match v {
            Value::Object(_) => Ok(Condition(vec![ConditionGroup::parse(v)?])),
            Value::Array(a) if !a.is_empty() => Ok(Condition(
                a.iter()
                    .map(ConditionGroup::parse)
                    .collect::<Result<_, _>>()?,
            )),
            _ => Err(ConditionParseError::Shape),
        }
    }

    /// `(key, error)` for every `pattern` that does not compile. Such a predicate can never be
    /// evaluated, so the condition always requires approval; loaders report these as warnings.
    pub fn pattern_errors(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for g in &self.0 {
            for (key, m) in &g.predicates {
                if let Matcher::Ops(Ops {
                    pattern: Some(Err(e)),
                    ..
                }) = m
                {
                    out.push((key.clone(), e.clone()));
                }
            }
        }
        out
    }

    /// Evaluates against the call's arguments (a JSON object).
    pub fn evaluate(&self, args: &Value) -> Outcome {
        let mut any = false;
        let mut unknown = Vec::new();
        for g in &self.0 {
            match g.evaluate(args) {
                Outcome::Match => any = true,
                Outcome::NoMatch => {}
                Outcome::CannotEvaluate(r) => unknown.extend(r),
            }
        }
        if !unknown.is_empty() {
            Outcome::CannotEvaluate(unknown)
        } else if any {
            Outcome::Match
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
        Ok(Self { predicates })
    }

    /// Evaluates the AND of the group's predicates.
    pub fn evaluate(&self, args: &Value) -> Outcome {
        let mut all = true;
        let mut unknown = Vec::new();
        for (key, m) in &self.predicates {
            match lookup(args, key) {
                None => unknown.push(format!("argument `{key}` is missing")),
                Some(actual) => match m.test(actual) {
                    Ok(true) => {}
                    Ok(false) => all = false,
                    Err(why) => unknown.push(format!("argument `{key}` {why}")),
                },
            }
        }
        if !unknown.is_empty() {
            Outcome::CannotEvaluate(unknown)
        } else if all {
            Outcome::Match
        } else {
            Outcome::NoMatch
        }
    }
}

/// Finds `key` in `args`: first as a literal key, then as a dotted path through nested objects.
pub fn lookup<'a>(args: &'a Value, key: &str) -> Option<&'a Value> {
    if let Some(v) = args.get(key) {
        return Some(v);
    }
    let mut cur = args;
    for part in key.split('.') {
        cur = match cur {
            Value::Object(m) => m.get(part)?,
            Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn is_scalar(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

fn same_type(a: &Value, b: &Value) -> bool {
    matches!(
        (a, b),
        (Value::String(_), Value::String(_))
            | (Value::Number(_), Value::Number(_))
            | (Value::Bool(_), Value::Bool(_))
    )
}

fn num_eq(a: &Number, b: &Number) -> bool {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x == y,
        _ => match (a.as_u64(), b.as_u64()) {
            (Some(x), Some(y)) => x == y,
            _ => a.as_f64() == b.as_f64(),
        },
    }
}

/// Equality of two scalars of the same JSON type (numbers compared by value: `2 == 2.0`).
fn scalar_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => num_eq(x, y),
        _ => a == b,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Matcher {
    /// Parses one match expression (Agent Format `ConditionGroup.args_match` values).
    pub fn parse(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok(Matcher::Literal(v.clone())),
            Value::Object(m) => {
                let mut ops = Ops::default();
                let num = |name: &str, x: &Value| {
                    x.as_f64().ok_or_else(|| format!("`{name}` needs a number"))
                };
                let list = |name: &str, x: &Value| -> Result<Vec<Value>, String> {
                    let a = x
                        .as_array()
                        .ok_or_else(|| format!("`{name}` needs a list"))?;
                    if a.iter().all(is_scalar) {
                        Ok(a.clone())
                    } else {
                        Err(format!(
                            "`{name}` items must be strings, numbers or booleans"
                        ))
                    }
                };
                for (op, x) in m {
                    match op.as_str() {
                        "gt" => ops.gt = Some(num(op, x)?),
                        "gte" => ops.gte = Some(num(op, x)?),
                        "lt" => ops.lt = Some(num(op, x)?),
                        "lte" => ops.lte = Some(num(op, x)?),
                        "ne" if is_scalar(x) => ops.ne = Some(x.clone()),
                        "ne" => return Err("`ne` needs a string, number or boolean".into()),
                        "pattern" => {
                            let p = x.as_str().ok_or("`pattern` needs a string")?;
                            ops.pattern = Some(compile_pattern(p));
                        }
                        "in" => ops.in_ = Some(list(op, x)?),
                        "not_in" => ops.not_in = Some(list(op, x)?),
                        other => {
                            return Err(format!(
                                "unknown operator `{other}` (expected gt, gte, lt, lte, ne, pattern, in, not_in)"
                            ));
                        }
                    }
                }
                if m.is_empty() {
                    return Err("empty matcher object".into());
                }
                Ok(Matcher::Ops(ops))
            }
            other => Err(format!(
                "a match expression must be a string, number, boolean or operator object, got {}",
                type_name(other)
            )),
        }
    }

    /// Tests one argument value. `Err` says why it cannot be evaluated (mistyped, bad regex).
    pub fn test(&self, actual: &Value) -> Result<bool, String> {
        match self {
            Matcher::Literal(lit) => {
                if same_type(lit, actual) {
                    Ok(scalar_eq(lit, actual))
                } else {
                    Err(format!(
                        "is {} but the condition compares it with {}",
                        type_name(actual),
                        type_name(lit)
                    ))
                }
            }
            Matcher::Ops(o) => {
                let mut ok = true;
                let cmp = [(o.gt, "gt"), (o.gte, "gte"), (o.lt, "lt"), (o.lte, "lte")];
                if cmp.iter().any(|(b, _)| b.is_some()) {
                    let n = actual.as_f64().ok_or_else(|| {
                        format!("is {} but `gt/gte/lt/lte` need a number", type_name(actual))
                    })?;
                    for (bound, name) in cmp {
                        if let Some(b) = bound {
                            ok &= match name {
                                "gt" => n > b,
                                "gte" => n >= b,
                                "lt" => n < b,
                                _ => n <= b,
                            };
                        }
                    }
                }
                if let Some(ne) = &o.ne {
                    if !same_type(ne, actual) {
                        return Err(format!(
                            "is {} but `ne` compares it with {}",
                            type_name(actual),
                            type_name(ne)
                        ));
                    }
                    ok &= !scalar_eq(ne, actual);
                }
                if let Some(p) = &o.pattern {
                    let re = p
                        .as_ref()
                        .map_err(|e| format!("cannot be matched: pattern does not compile: {e}"))?;
                    let s = actual.as_str().ok_or_else(|| {
                        format!("is {} but `pattern` needs a string", type_name(actual))
                    })?;
                    ok &= re.is_match(s);
                }
                for (list, name, want) in [(&o.in_, "in", true), (&o.not_in, "not_in", false)] {
                    if let Some(items) = list {
                        if !is_scalar(actual)
                            || (!items.is_empty() && !items.iter().any(|i| same_type(i, actual)))
                        {
                            return Err(format!(
                                "is {} but `{name}` lists values of another type",
                                type_name(actual)
                            ));
                        }
                        let found = items
                            .iter()
                            .any(|i| same_type(i, actual) && scalar_eq(i, actual));
                        ok &= found == want;
                    }
                }
                Ok(ok)
            }
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
            Outcome::Match => "match".to_string(),
            Outcome::NoMatch => "no".to_string(),
            Outcome::CannotEvaluate(r) => format!("unknown: {}", r.join("; ")),
        };
        assert!(
            got.starts_with(want),
            "{c} on {args}: got {got}, want {want}"
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
        check(
            json!({"args_match": {"e": {"pattern": "a("}}}),
            json!({"e": "a"}),
            "unknown: argument `e` cannot be matched: pattern does not compile",
        );
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
        check(
            and.clone(),
            json!({"amount": 20000, "currency": "USD"}),
            "match",
        );
        check(
            and.clone(),
            json!({"amount": 20000, "currency": "EUR"}),
            "no",
        );
        check(and.clone(), json!({"amount": 5, "currency": "USD"}), "no");
        let or = json!([{"args_match": {"amount": {"gt": 10000}}}, {"args_match": {"recipient_type": "external"}}]);
        check(
            or.clone(),
            json!({"amount": 1, "recipient_type": "external"}),
            "match",
        );
        check(
            or.clone(),
            json!({"amount": 20000, "recipient_type": "internal"}),
            "match",
        );
        check(
            or.clone(),
            json!({"amount": 1, "recipient_type": "internal"}),
            "no",
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
