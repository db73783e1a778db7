//! Mining argument patterns from settled decisions (issue 16 §2): for one tool, the
//! [`Constraint`] on one argument that covers the most calls of one side (approved, or denied)
//! and none of the other — a number bound, a string prefix, or a short list of values.

use regex::escape;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Values a [`Constraint::OneOf`] lists at the most.
pub const MAX_VALUES: usize = 20;

/// Characters a prefix ends with (the prefix keeps it): `feature/`, `ext-`, `acme:`.
const SEPARATORS: [char; 5] = ['/', ':', '-', '_', '.'];

/// Distinct values a prefix must have been seen with before it generalises (fewer are listed).
pub const MIN_PREFIX_VALUES: usize = 3;

/// Prefixes weighed per argument at the most (the most used first).
const MAX_PREFIXES: usize = 64;

/// Known arguments ([`super::known`]) weighed per tool at the most: a tool whose calls vary in
/// more gets no constraint at all (found by review: the first 32 in key order were weighed,
/// so 31 made-up arguments sorting first pushed `amount` out, and a made-up one mirroring it
/// won unopposed; made-up arguments are no longer weighed at all, and do not count here).
pub const MAX_KEYS: usize = 32;

/// Text that must never be generalised by a prefix: an address (`ops-team@corp.com` must not
/// let `ops-x@attacker.example` through), a URL, or a path that can climb (`src/../..`).
fn unsafe_for_prefix(s: &str) -> bool {
    s.contains('@') || s.contains("://") || s.contains("..") || hidden(s)
}

/// Whether `s` holds a character that acts on the display (a control, bidirectional or
/// invisible one, [`crate::template::visible`]): no pattern is mined from such text, so no
/// suggestion, nor its YAML, shows what the operator cannot see as it is (found by review:
/// a right-to-left override in a value reordered the suggestion on the dashboard).
/// Whether argument name `k` may be weighed: an ASCII identifier (`[A-Za-z_][A-Za-z0-9_]*`,
/// at most 64 bytes). Found by review: a made-up `аmount` (Cyrillic `а`) looked like `amount`
/// on the suggestion; a dot would be read as a path into nested objects; hidden characters
/// hid what the condition keys on.
fn plain_name(k: &str) -> bool {
    let mut b = k.bytes();
    k.len() <= 64
        && b.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn hidden(s: &str) -> bool {
    matches!(crate::template::visible(s), std::borrow::Cow::Owned(_))
}

/// What may follow a [`Constraint::Prefix`]'s prefix ending in `/` (a folder's), as a regular
/// expression to the end of the text: ASCII letters, digits, `_`, `-` and `/`, with a `.` only
/// before one of those (no `..`, `@`, `:`, `%`, `\`, space or control character). Found by
/// review: the prefix was checked only against the strings seen, and `^src/` then let
/// `src/../../home/u/.ssh/x`, `ops-x@attacker.example` (after `ops-`) and `https-://x`
/// through unasked.
const PREFIX_REST: &str = r"(?:[A-Za-z0-9_/-]|\.[A-Za-z0-9_/-])*$";

/// What may follow a prefix ending in `-`, `_` or `:` ([`WORD_REST`]'s case): one word of ASCII
/// letters, digits, `_` and `-`, no `.` or `/`. Found by review: after `ops-` the rest took a
/// `.` too, so `ops-a1.corp`, `ops-b2.corp`… approved let `ops-x.attacker.example` through.
const WORD_REST: &str = r"[A-Za-z0-9_-]*$";

/// The rest [`Constraint::Prefix`] `prefix` allows: [`PREFIX_REST`] after a `/`, else
/// [`WORD_REST`].
fn rest_of(prefix: &str) -> &'static str {
    if prefix.ends_with('/') {
        PREFIX_REST
    } else {
        WORD_REST
    }
}

/// Whether `rest` (what follows `prefix`) is what [`rest_of`] `prefix` matches: the same
/// regular expression the condition written into the policy runs, so what a suggestion says it
/// covers and what its rule lets through cannot differ.
fn safe_rest(prefix: &str, rest: &str) -> bool {
    static FOLDER: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(&format!("^{PREFIX_REST}")).expect("a valid regular expression")
    });
    static WORD: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(&format!("^{WORD_REST}")).expect("a valid regular expression")
    });
    if prefix.ends_with('/') {
        FOLDER.is_match(rest)
    } else {
        WORD.is_match(rest)
    }
}

/// A pattern of one top-level argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Constraint {
    /// The argument is a number from `min` to `max`. Closed on both sides: evidence of small
    /// approved amounts says nothing of negative ones (a refund of −1,000,000 is not "at most
    /// 120"), nor of 0 (`replicas: 0` is an outage, `limit: 0` often "no limit": found by
    /// review, the range reached down to 0 below approvals of 3 to 5), so `min` is the
    /// smallest value approved.
    Within {
        /// The argument.
        key: String,
        /// The lower bound, inclusive.
        min: f64,
        /// The upper bound, inclusive.
        max: f64,
    },
    /// The argument is a number at least `min`.
    AtLeast {
        /// The argument.
        key: String,
        /// The bound, inclusive.
        min: f64,
    },
    /// The argument is a string starting with `prefix`, the rest plain: after a `/`,
    /// [`PREFIX_REST`] (letters, digits, `_`, `-`, `/`, and a `.` only before one of those);
    /// after `-`, `_` or `:`, [`WORD_REST`] (one word: letters, digits, `_`, `-`).
    Prefix {
        /// The argument.
        key: String,
        /// The prefix, ending with a separator (`/`, `:`, `-`, `_`; never `.`: a dotted name's
        /// first label, `api.`, would cover every owner's `api.attacker.example`).
        prefix: String,
    },
    /// The argument is one of `values` (strings, numbers or booleans).
    OneOf {
        /// The argument.
        key: String,
        /// The values, sorted.
        values: Vec<Value>,
    },
}

/// A number as policy JSON: an integer when it is one.
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        json!(n as i64)
    } else {
        Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

impl Constraint {
    /// The argument it constrains.
    pub fn key(&self) -> &str {
        match self {
            Constraint::Within { key, .. }
            | Constraint::AtLeast { key, .. }
            | Constraint::Prefix { key, .. }
            | Constraint::OneOf { key, .. } => key,
        }
    }

    /// Whether `args` (an object) satisfies it.
    pub fn holds(&self, args: &Value) -> bool {
        let Some(v) = args.get(self.key()) else {
            return false;
        };
        match self {
            Constraint::Within { min, max, .. } => {
                v.as_f64().is_some_and(|n| *min <= n && n <= *max)
            }
            Constraint::AtLeast { min, .. } => v.as_f64().is_some_and(|n| n >= *min),
            Constraint::Prefix { prefix, .. } => v
                .as_str()
                .and_then(|s| s.strip_prefix(prefix.as_str()))
                .is_some_and(|rest| safe_rest(prefix, rest)),
            Constraint::OneOf { values, .. } => values.iter().any(|x| same(x, v)),
        }
    }

    /// The `args_match` operator object that holds exactly when this does: `{gte: M, lte:
    /// N}`, `{gte: N}`, `{pattern: "^PREFIX" + REST}` ([`rest_of`]), `{in: [...]}`.
    pub fn matcher(&self) -> Value {
        match self {
            Constraint::Within { min, max, .. } => {
                json!({"gte": number(*min), "lte": number(*max)})
            }
            Constraint::AtLeast { min, .. } => json!({"gte": number(*min)}),
            Constraint::Prefix { prefix, .. } => json!({"pattern": prefix_pattern(prefix)}),
            Constraint::OneOf { values, .. } => json!({"in": values}),
        }
    }

    /// Operator objects of which one holds exactly when this does not (for a number or
    /// string argument that is present): `[{lt: M}, {gt: N}]` (either side of a range: an OR,
    /// so two condition groups), `[{lt: N}]`, `[{not_pattern: …}]`, `[{not_in: [...]}]`.
    pub fn negated(&self) -> Vec<Value> {
        match self {
            Constraint::Within { min, max, .. } => {
                vec![json!({"lt": number(*min)}), json!({"gt": number(*max)})]
            }
            Constraint::AtLeast { min, .. } => vec![json!({"lt": number(*min)})],
            Constraint::Prefix { prefix, .. } => {
                vec![json!({"not_pattern": prefix_pattern(prefix)})]
            }
            Constraint::OneOf { values, .. } => vec![json!({"not_in": values})],
        }
    }

    /// In words: `10 <= amount <= 150`, `branch starts with "feature/"`, `to in ["a","b"]`.
    pub fn describe(&self) -> String {
        match self {
            Constraint::Within { key, min, max } => {
                format!("{} <= {key} <= {}", number(*min), number(*max))
            }
            Constraint::AtLeast { key, min } => format!("{key} >= {}", number(*min)),
            Constraint::Prefix { key, prefix } => format!("{key} starts with {prefix:?}"),
            Constraint::OneOf { key, values } => {
                format!("{key} in {}", Value::from(values.clone()))
            }
        }
    }

    /// For ties: a number bound (amounts are asked about by size), then a list of the values
    /// seen, then a prefix (which generalises to strings never seen, so it comes last).
    fn rank(&self) -> u8 {
        match self {
            Constraint::Within { .. } | Constraint::AtLeast { .. } => 0,
            Constraint::OneOf { .. } => 1,
            Constraint::Prefix { .. } => 2,
        }
    }
}

/// The regular expression of a [`Constraint::Prefix`]: `prefix` escaped, then its rest
/// ([`rest_of`]).
fn prefix_pattern(prefix: &str) -> String {
    format!("^{}{}", escape(prefix), rest_of(prefix))
}

/// Equal scalars (numbers by value).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// An argument a suggested exception also requires, with the one value every approval it
/// covers sent (`dry_run == true`).
pub type Pin = (String, Value);

/// The arguments other than the pattern's `key` that every one of `covered` (the arguments of
/// the approvals a pattern covers) carries with one value, sorted: an exception narrowed by the
/// pattern alone would let any other value of them through, though no one approved one (found
/// by review: twelve approved deletes of `tmp/…` all sent `dry_run: true`, and "ask unless path
/// starts with `tmp/`" then ran `dry_run: false` unasked). `Err` says why one cannot be
/// written into a rule: a value that is no string, number or boolean (a condition compares
/// only those), or a name or text that acts on the display ([`hidden`]) or a name longer
/// than 64 bytes. No suggestion is made then.
pub fn pins(covered: &[&Value], key: &str) -> Result<Vec<Pin>, String> {
    let Some((first, rest)) = covered.split_first() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (k, v) in first.as_object().into_iter().flatten() {
        let one = |a: &&Value| a.get(k).is_some_and(|x| x == v || same_scalar(x, v));
        if k == key || !rest.iter().all(one) {
            continue;
        }
        if hidden(k) || k.len() > 64 {
            return Err(format!("the argument name {k:?} cannot be shown as it is"));
        }
        if scalar_key(v).is_none() || v.as_str().is_some_and(hidden) {
            return Err(format!(
                "every approval sent `{k}` as {}, which a rule cannot require",
                crate::template::visible_json(v)
            ));
        }
        out.push((k.clone(), v.clone()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Whether every pin of `pins` holds for `args` (the argument present with its value).
pub fn pinned(pins: &[Pin], args: &Value) -> bool {
    pins.iter()
        .all(|(k, v)| args.get(k).is_some_and(|x| same_scalar(x, v)))
}

/// `pins` in words, each after " and ": ` and dry_run == true and mode == "fast"`.
pub fn describe_pins(pins: &[Pin]) -> String {
    pins.iter()
        .map(|(k, v)| format!(" and {k} == {v}"))
        .collect()
}

/// Equal scalars of one kind (numbers by value), as a condition's `ne` compares them.
fn same_scalar(a: &Value, b: &Value) -> bool {
    scalar_key(a).is_some() && scalar_key(a) == scalar_key(b)
}

/// The constraint that covers the most of `yes` (each an arguments object) and none of `no`,
/// covering at least `min` of `yes`; `upper` picks the number bound's kind (`Within` for
/// approvals, `AtLeast` for denials: a deny reaching further up only tightens). `None` when none does.
pub fn best(
    yes: &[&Value],
    no: &[&Value],
    min: usize,
    upper: bool,
    known: &dyn Fn(&str) -> bool,
) -> Option<(Constraint, usize)> {
    ranked(yes, no, min, upper, known).into_iter().next()
}

/// Every constraint [`best`] weighs, best first: most of `yes` covered, then a bound, a list
/// of the values seen, a prefix (see `rank`): a prefix is suggested only where the values are
/// too many to list. Only arguments every call of `yes` and `no` carries are weighed (found by
/// review: an agent adding `confirmed: true` to the calls it expected approved had "ask unless
/// confirmed in [true]" suggested — a missing argument holds no pattern, so presence alone
/// separated the sides — and 32 made-up keys sorting first pushed `amount` out of the
/// weighing), and not one whose value is the same on every call. Arguments whose name has a
/// dot are not weighed (a condition would also read them as paths into nested objects), nor
/// one `known` refuses (an argument the tool does not declare and no rule names: see
/// [`super::known`]), and calls varying in more than 32 known arguments give nothing
/// ([`MAX_KEYS`]; unknown ones do not count, so an honest tool with many varying arguments of
/// its own still has its declared ones weighed).
pub fn ranked(
    yes: &[&Value],
    no: &[&Value],
    min: usize,
    upper: bool,
    known: &dyn Fn(&str) -> bool,
) -> Vec<(Constraint, usize)> {
    let Some(keys) = weighed(yes, no, known) else {
        return Vec::new();
    };
    let mut found: Vec<Constraint> = Vec::new();
    for key in keys {
        let vals: Vec<&Value> = yes.iter().filter_map(|a| a.get(key.as_str())).collect();
        let others: Vec<&Value> = no.iter().filter_map(|a| a.get(key.as_str())).collect();
        found.extend(bound(key, &vals, &others, upper));
        found.extend(prefixes(key, &vals, &others));
        found.extend(one_of(key, &vals, &others));
    }
    let score = |c: &Constraint| yes.iter().filter(|a| c.holds(a)).count();
    let mut out: Vec<(Constraint, usize)> = found
        .into_iter()
        .filter(|c| !no.iter().any(|a| c.holds(a)))
        .map(|c| {
            let n = score(&c);
            (c, n)
        })
        .filter(|(_, n)| *n >= min)
        .collect();
    out.sort_by(|(a, na), (b, nb)| nb.cmp(na).then(a.rank().cmp(&b.rank())));
    out
}

/// The arguments [`ranked`] weighs for `yes` and `no`: the known ones (`known`) every call
/// carries, with a plain name, whose value is not the same on every call; `None` when they are
/// more than [`MAX_KEYS`] (nothing is weighed then).
pub fn weighed<'a>(
    yes: &'a [&'a Value],
    no: &'a [&'a Value],
    known: &dyn Fn(&str) -> bool,
) -> Option<BTreeSet<&'a String>> {
    let mut keys = common_keys(yes.iter().chain(no));
    // Only arguments the tool really takes: the agent writes the others, and a made-up one
    // that combines what people judged would cover more calls than any real one and win.
    keys.retain(|k| known(k));
    // One value on every call separates nothing: such arguments (made up by the dozen, they
    // filled the cap before `amount` was reached) are not weighed.
    keys.retain(|k| {
        let mut values = yes.iter().chain(no).map(|a| &a[k.as_str()]);
        let first = values.next();
        values.any(|v| Some(v) != first)
    });
    (keys.len() <= MAX_KEYS).then_some(keys)
}

/// The argument names (without a dot) every one of `calls` carries, in order; none when a call
/// is not an object.
fn common_keys<'a>(mut calls: impl Iterator<Item = &'a &'a Value>) -> BTreeSet<&'a String> {
    let Some(first) = calls.next().and_then(|a| a.as_object()) else {
        return BTreeSet::new();
    };
    let mut keys: BTreeSet<&String> = first.keys().filter(|k| plain_name(k)).collect();
    for a in calls {
        let Some(o) = a.as_object() else {
            return BTreeSet::new();
        };
        keys.retain(|k| o.contains_key(k.as_str()));
    }
    keys
}

/// The number bound on `key` reaching the most of `vals` before the first of `others`: for
/// approvals (`upper`) a closed range from the smallest value seen (see
/// [`Constraint::Within`]) up to the largest value below every refused one above that floor;
/// for denials everything from the smallest value above every approved one.
fn bound(key: &str, vals: &[&Value], others: &[&Value], upper: bool) -> Option<Constraint> {
    let nums: Vec<f64> = vals.iter().filter_map(|v| v.as_f64()).collect();
    if nums.is_empty() {
        return None;
    }
    let other: Vec<f64> = others.iter().filter_map(|v| v.as_f64()).collect();
    if upper {
        let floor = nums.iter().copied().fold(f64::INFINITY, f64::min);
        let stop = other
            .iter()
            .copied()
            .filter(|o| *o >= floor)
            .fold(f64::INFINITY, f64::min);
        let max = nums
            .iter()
            .copied()
            .filter(|n| *n < stop)
            .fold(f64::NAN, f64::max);
        (!max.is_nan()).then(|| Constraint::Within {
            key: key.into(),
            min: floor,
            max,
        })
    } else {
        let stop = other.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = nums
            .iter()
            .copied()
            .filter(|n| *n > stop)
            .fold(f64::NAN, f64::min);
        (!min.is_nan()).then(|| Constraint::AtLeast {
            key: key.into(),
            min,
        })
    }
}

/// The prefix of `s` up to and including its first separator (at least one character before
/// it), if any, and if that separator is no `.` (found by review: `api.stripe.com`,
/// `api.github.com`… approved suggested `api.`, which let `api.attacker.example` through), and
/// the rest is what a condition on that prefix covers ([`safe_rest`]).
fn prefix_of(s: &str) -> Option<&str> {
    let i = s.find(SEPARATORS)?;
    let prefix = &s[..=i];
    (i > 0 && !prefix.ends_with('.') && safe_rest(prefix, &s[i + 1..])).then_some(prefix)
}

/// Prefixes shared by at least [`MIN_PREFIX_VALUES`] different strings of `vals` and by none
/// of `others`; none when any string is an address, a URL or a climbing path
/// ([`unsafe_for_prefix`]).
fn prefixes(key: &str, vals: &[&Value], others: &[&Value]) -> Vec<Constraint> {
    let strings = || vals.iter().chain(others).filter_map(|v| v.as_str());
    if strings().any(unsafe_for_prefix) {
        return Vec::new();
    }
    let mut by: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in vals.iter().filter_map(|v| v.as_str()) {
        if let Some(p) = prefix_of(s) {
            by.entry(p).or_default().insert(s);
        }
    }
    let mut by: Vec<(&str, BTreeSet<&str>)> = by.into_iter().collect();
    by.sort_by_key(|(_, set)| std::cmp::Reverse(set.len()));
    by.truncate(MAX_PREFIXES);
    by.into_iter()
        .filter(|(p, set)| {
            set.len() >= MIN_PREFIX_VALUES
                && !others
                    .iter()
                    .filter_map(|v| v.as_str())
                    .any(|o| o.starts_with(p))
        })
        .map(|(p, _)| Constraint::Prefix {
            key: key.into(),
            prefix: p.into(),
        })
        .collect()
}

/// A scalar as a set key that equal scalars share (numbers by value).
fn scalar_key(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => n.as_f64().map(|f| format!("n{f:?}")),
        Value::String(s) => Some(format!("s{s}")),
        Value::Bool(b) => Some(format!("b{b}")),
        _ => None,
    }
}

/// The values of `vals` that none of `others` has, when there are at most [`MAX_VALUES`]
/// (it stops at the first one more) and at most half as many as `vals` (a list's values
/// recur: one value a call, an id or a memo, is no pattern).
fn one_of(key: &str, vals: &[&Value], others: &[&Value]) -> Option<Constraint> {
    let other: std::collections::HashSet<String> =
        others.iter().filter_map(|o| scalar_key(o)).collect();
    let mut seen = std::collections::HashSet::new();
    let mut values: Vec<Value> = Vec::new();
    for v in vals {
        let Some(k) = scalar_key(v) else { continue };
        if v.as_str().is_some_and(hidden) {
            continue;
        }
        if !other.contains(&k) && seen.insert(k) {
            if values.len() == MAX_VALUES {
                return None;
            }
            values.push((*v).clone());
        }
    }
    // A list is a pattern only where its values recur: as many values as calls (an id, a
    // memo) is a record of what was seen, and would tie with every real pattern.
    if values.is_empty() || values.len() * 2 > vals.len() {
        return None;
    }
    // One type per list, as a policy's `in` must have (an argument sent as both "5" and 5).
    let kind = |v: &Value| std::mem::discriminant(v);
    if values.iter().any(|v| kind(v) != kind(&values[0])) {
        return None;
    }
    values.sort_by_key(|v| v.to_string());
    Some(Constraint::OneOf {
        key: key.into(),
        values,
    })
}
