//! One `args_match` expression of an Agent Format condition (seed 004 "Conditional
//! Approval"): a literal for exact match or an operator object ([`Matcher`], [`Ops`],
//! [`Pattern`]), parsed from policy JSON, tested against one argument value, and rendered as the
//! clause a reason names (`amount > 1000 (amount = 5000)`). It knows nothing of groups, keys
//! or lookups (the condition module combines predicates).

use crate::canonical::type_name;
use regex_automata::meta::Regex;
use serde_json::{Number, Value};
use std::cell::Cell;

/// Longest regex accepted from a policy file, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Most items an `in` or `not_in` list may have (each call compares its argument with every
/// one).
pub const MAX_LIST_ITEMS: usize = 1024;

/// Longest string argument shown verbatim in a rendered clause, in characters; a longer one is
/// described by its length (so a reason never carries a truncated, unredactable secret).
pub const MAX_SHOWN_CHARS: usize = 100;

/// A match expression: a literal for exact match, or an operator object whose operators all hold.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Exact match against a string, number or boolean.
    Literal(Value),
    /// `{gt, gte, lt, lte, ne, pattern, not_pattern, in, not_in}`; every present operator must
    /// hold.
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
    /// `pattern`: the argument is a string the regex matches somewhere in.
    pub pattern: Option<Box<Pattern>>,
    /// `not_pattern`: the argument is a string the regex matches nowhere in (issue 16 §2: what
    /// a suggested rule needs to say "unless the branch starts with `feature/`").
    pub not_pattern: Option<Box<Pattern>>,
    /// `in`: argument is one of these scalars.
    pub in_: Option<Vec<Value>>,
    /// `not_in`: argument is none of these scalars.
    pub not_in: Option<Vec<Value>>,
}

/// A `pattern` operator: its source text as written in the policy and its compiled regex. A
/// pattern that does not compile is a parse error (found by review: in a `deny` it silently
/// became a hold, which a person could approve), so a loaded policy never carries one.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The pattern as written (shown in reasons).
    pub source: String,
    /// [`compile_pattern`] of `source`.
    pub compiled: Regex,
}

/// The most memory the compiled patterns of one load of policy files may hold together, in
/// bytes (each pattern's [`Regex::memory_usage`] and [`PATTERN_OVERHEAD`]): 128 MiB, some
/// 14,000 patterns like `^/etc/` (about 9 KiB each), or about 110 of the largest a pattern may
/// compile to (1 MiB, which `\w{20}` reaches in eight characters). Found by review: each
/// pattern was bounded, their number only by the files' size, so a policy replay's 256 KiB
/// candidate of ten thousand short Unicode patterns compiled to gigabytes.
pub const MAX_PATTERN_BYTES: usize = 128 << 20;

/// What a compiled pattern holds besides its engines' [`Regex::memory_usage`] (its caches'
/// pool and the regex itself: about 6 KiB measured), in bytes.
pub const PATTERN_OVERHEAD: usize = 6 << 10;

thread_local! {
    /// The bytes left to the patterns of the load under way on this thread ([`PatternBudget`]);
    /// `None` outside one.
    static PATTERN_BYTES_LEFT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// While it lives, the patterns compiled on this thread ([`compile_pattern`]) share
/// [`MAX_PATTERN_BYTES`] (a pattern past it does not compile). A registry load holds one
/// ([`crate::policy::Registry::load_with`]); one started inside another gives the outer's
/// budget back when it ends.
pub struct PatternBudget {
    outer: Option<usize>,
}

impl PatternBudget {
    /// Starts a budget of [`MAX_PATTERN_BYTES`] on this thread.
    pub fn start() -> Self {
        Self {
            outer: PATTERN_BYTES_LEFT.replace(Some(MAX_PATTERN_BYTES)),
        }
    }
}

impl Drop for PatternBudget {
    fn drop(&mut self) {
        PATTERN_BYTES_LEFT.set(self.outer);
    }
}

/// Compiles a policy regex with the limits of `DEPENDENCIES.md` (size and nesting capped: 1 MiB
/// compiled, 64 levels), within the load's [`PatternBudget`] when one is under way. Errors:
/// the bound or the syntax error, in words.
pub fn compile_pattern(p: &str) -> Result<Regex, String> {
    if p.len() > MAX_PATTERN_LEN {
        return Err(format!("pattern longer than {MAX_PATTERN_LEN} bytes"));
    }
    let spent = || {
        format!(
            "the patterns of the policy files compile to more than {} MiB together",
            MAX_PATTERN_BYTES >> 20
        )
    };
    // Within a budget, a pattern may compile to what is left of it at most, and none is
    // compiled once too little is left (found by review: each was compiled whole and then
    // refused, so a file of many patterns, or of aliases repeating them, cost the CPU of all).
    let left = PATTERN_BYTES_LEFT.get();
    let limit = left.map_or(1 << 20, |l| l.saturating_sub(PATTERN_OVERHEAD).min(1 << 20));
    if limit < PATTERN_OVERHEAD {
        return Err(spent());
    }
    let limits = regex_automata::meta::Config::new()
        .nfa_size_limit(Some(limit))
        .onepass_size_limit(Some(limit));
    let built = regex_automata::meta::Builder::new()
        .configure(limits)
        .syntax(regex_automata::util::syntax::Config::new().nest_limit(64))
        .build(p);
    let compiled = match built {
        Ok(c) => c,
        Err(e) if e.size_limit().is_some() && limit < 1 << 20 => {
            PATTERN_BYTES_LEFT.set(Some(0));
            return Err(spent());
        }
        Err(e) => {
            let why = e.to_string();
            return Err(why.lines().last().unwrap_or("invalid pattern").to_string());
        }
    };
    let cost = compiled.memory_usage().saturating_add(PATTERN_OVERHEAD);
    if let Some(left) = left {
        let Some(rest) = left.checked_sub(cost) else {
            PATTERN_BYTES_LEFT.set(Some(0));
            return Err(spent());
        };
        PATTERN_BYTES_LEFT.set(Some(rest));
    }
    Ok(compiled)
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
                    if a.len() > MAX_LIST_ITEMS {
                        return Err(format!(
                            "`{name}` has {} items (at most {MAX_LIST_ITEMS})",
                            a.len()
                        ));
                    }
                    if !a.iter().all(is_scalar) {
                        return Err(format!(
                            "`{name}` items must be strings, numbers or booleans"
                        ));
                    }
                    // One type per list (found by review: a list read as `[false, "disabled"]`
                    // from YAML 1.1 `[off, disabled]` never matched the string "off").
                    match a.iter().find(|i| !same_type(i, &a[0])) {
                        Some(odd) => Err(format!(
                            "`{name}` mixes items of two types ({} and {}); quote values meant as strings",
                            type_name(&a[0]),
                            type_name(odd)
                        )),
                        None => Ok(a.clone()),
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
                        "pattern" | "not_pattern" => {
                            let p = x.as_str().ok_or_else(|| format!("`{op}` needs a string"))?;
                            let compiled = compile_pattern(p)
                                .map_err(|e| format!("`{op}` does not compile: {e}"))?;
                            let pat = Some(Box::new(Pattern {
                                source: p.to_string(),
                                compiled,
                            }));
                            if op == "pattern" {
                                ops.pattern = pat;
                            } else {
                                ops.not_pattern = pat;
                            }
                        }
                        "in" => ops.in_ = Some(list(op, x)?),
                        "not_in" => ops.not_in = Some(list(op, x)?),
                        other => {
                            return Err(format!(
                                "unknown operator `{other}` (expected gt, gte, lt, lte, ne, pattern, not_pattern, in, not_in)"
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

    /// How many regexes (`pattern`, `not_pattern`) this expression runs: 0, 1 or 2.
    pub fn patterns(&self) -> usize {
        match self {
            Matcher::Literal(_) => 0,
            Matcher::Ops(o) => o.pattern.is_some() as usize + o.not_pattern.is_some() as usize,
        }
    }

    /// Tests one argument value. `Err` says why it cannot be evaluated (an argument of another
    /// type).
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
                for (p, name, want) in [
                    (&o.pattern, "pattern", true),
                    (&o.not_pattern, "not_pattern", false),
                ] {
                    if let Some(p) = p {
                        let s = actual.as_str().ok_or_else(|| {
                            format!("is {} but `{name}` needs a string", type_name(actual))
                        })?;
                        ok &= p.compiled.is_match(s) == want;
                    }
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

/// A JSON value as it appears in a rendered clause: compact JSON (`5000`, `"EUR"`, `["a","b"]`),
/// [`crate::template::visible_json`]: an argument quoted in a reason cannot act on a display.
fn json_text(v: &Value) -> String {
    crate::template::visible_json(v)
}

/// A bound, readably: `1000` (an integer without `.0`), `0.5`, `1e300` (an exponent rather
/// than hundreds of digits).
fn bound_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e16 {
        format!("{n}")
    } else {
        format!("{n:?}")
    }
}

impl Matcher {
    /// The clause as written in the policy, readably: `amount > 1000`, `currency = "USD"`,
    /// `path matches pattern "^/etc/"`, `currency in ["EUR","USD"]`; several operators of one
    /// matcher are joined with ` and `.
    pub fn clause(&self, key: &str) -> String {
        let o = match self {
            Matcher::Literal(lit) => return format!("{key} = {}", json_text(lit)),
            Matcher::Ops(o) => o,
        };
        let mut parts = Vec::new();
        for (b, op) in [(o.gt, ">"), (o.gte, ">="), (o.lt, "<"), (o.lte, "<=")] {
            if let Some(b) = b {
                parts.push(format!("{key} {op} {}", bound_text(b)));
            }
        }
        if let Some(ne) = &o.ne {
            parts.push(format!("{key} != {}", json_text(ne)));
        }
        for (p, verb) in [(&o.pattern, "matches"), (&o.not_pattern, "does not match")] {
            if let Some(p) = p {
                parts.push(format!(
                    "{key} {verb} pattern {}",
                    json_text(&Value::String(p.source.clone()))
                ));
            }
        }
        for (list, op) in [(&o.in_, "in"), (&o.not_in, "not in")] {
            if let Some(items) = list {
                parts.push(format!(
                    "{key} {op} {}",
                    json_text(&Value::Array(items.clone()))
                ));
            }
        }
        parts.join(" and ")
    }

    /// [`clause`](Self::clause) with the actual value that satisfied it, when it is not the
    /// literal itself: `amount > 1000 (amount = 5000)`. A string longer than
    /// [`MAX_SHOWN_CHARS`] is described by its length instead of shown.
    pub fn shown(&self, key: &str, actual: &Value) -> String {
        let clause = self.clause(key);
        if matches!(self, Matcher::Literal(_)) {
            return clause;
        }
        match actual {
            Value::String(s) if s.chars().count() > MAX_SHOWN_CHARS => {
                format!(
                    "{clause} ({key}: a string of {} characters)",
                    s.chars().count()
                )
            }
            _ => format!("{clause} ({key} = {})", json_text(actual)),
        }
    }
}
