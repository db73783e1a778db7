//! Strict JSON text: what assent accepts before it gates a call (issue 10 §1–2).
//!
//! Two JSON texts can mean different things to two parsers. A text with a duplicate object
//! key is read as its last value by serde_json and as its first by others, so a call gated as
//! one thing could run as another. A number whose value an IEEE double cannot carry (an
//! integer beyond ±2^53, `9007199254740993.0`, `1e400`) is hashed and shown as a rounded
//! value that is not the one the agent sent, so two different calls could share a
//! `call_hash`. [`check`] refuses both, at any depth, naming the JSON pointer of the first
//! offence; [`parse`] checks and then parses with serde_json.
//!
//! The walk uses the `jiter` tokenizer, which hands over each number's text before anything
//! rounds it. Nesting deeper than [`MAX_DEPTH`] is refused too. What a value weighs (its
//! text's length, the memory it holds parsed) is `json/weight.rs`, re-exported here.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::collections::HashSet;
use std::fmt::Write as _;

mod weight;
pub use weight::{ARRAY_START, OBJECT_NODE, PIECE, json_len, json_weight, raw_weight};

/// Serde `deserialize_with` for an open-ended field that a body leaves out when absent but
/// may write as `null` when present: absent → `None` (with `#[serde(default)]`), `null` →
/// `Some(Null)`, so the value serialises back exactly (with
/// `skip_serializing_if = "Option::is_none"`).
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Serde `deserialize_with` (with `#[serde(default)]`) for an optional setting whose absence
/// means "no restriction" — an agent file's `allowed_tools` or `allowed_skills`, an executor's
/// `servers` or `tools`, `oidc.roles`: absent → `None`; written → `Some`; written with no value
/// (`allowed_tools:` with every entry commented out, or `~`) → an error, not `None`. Found by
/// review: YAML reads such a key as null, serde as absent, and the list that was meant to
/// narrow what is allowed widened it to everything. Errors: `D::Error` saying the key has no
/// value (the YAML reader adds the line).
pub fn written<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    match Option::<T>::deserialize(d)? {
        Some(v) => Ok(Some(v)),
        None => Err(serde::de::Error::custom(
            "the key is written with no value (null): write its value, or remove the key (null \
             is not read as the key left out, which would allow more than was meant)",
        )),
    }
}

/// Deepest nesting of arrays and objects accepted (serde_json's own recursion limit).
pub const MAX_DEPTH: usize = 128;

/// Largest integer magnitude a double holds exactly, and the I-JSON (RFC 7493 §2.2) limit.
const MAX_EXACT_INTEGER: u128 = 1 << 53;

/// Why a JSON text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrictJsonError {
    /// An object names the same key twice (after unescaping); `path` is the JSON pointer of
    /// the second occurrence. API code `DUPLICATE_KEY`.
    #[error("duplicate key at {path}: a JSON object must not name a key twice")]
    DuplicateKey {
        /// JSON pointer (RFC 6901) of the repeated key, e.g. `/params/name`.
        path: String,
    },
    /// A number whose value the canonical form (RFC 8785, IEEE doubles) would change: an
    /// integer beyond ±2^53, or a decimal that does not survive the round trip. API code
    /// `INEXACT_NUMBER`.
    #[error(
        "number {text} at {path} cannot be carried exactly (integers within ±2^53, decimals that survive an IEEE double); send it as a string"
    )]
    InexactNumber {
        /// JSON pointer of the number (`/` for a bare number).
        path: String,
        /// The number as sent.
        text: String,
    },
    /// Arrays and objects nested deeper than [`MAX_DEPTH`]. API code `TOO_DEEP`.
    #[error("JSON nested deeper than {MAX_DEPTH} levels at {path}")]
    TooDeep {
        /// JSON pointer where the limit was passed.
        path: String,
    },
    /// Not JSON at all; the text says where (line and column).
    #[error("{0}")]
    Syntax(String),
}

impl StrictJsonError {
    /// The stable API error code: `DUPLICATE_KEY`, `INEXACT_NUMBER`, `TOO_DEEP` or
    /// `INVALID_JSON`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::DuplicateKey { .. } => "DUPLICATE_KEY",
            Self::InexactNumber { .. } => "INEXACT_NUMBER",
            Self::TooDeep { .. } => "TOO_DEEP",
            Self::Syntax(_) => "INVALID_JSON",
        }
    }
}

/// Checks that `text` is one JSON value with no duplicate object key at any depth, no number
/// a double cannot carry exactly ([`number_is_exact`]) and no nesting beyond [`MAX_DEPTH`].
///
/// Errors: the first offence found, in document order.
pub fn check(text: &[u8]) -> Result<(), StrictJsonError> {
    let mut j = jiter::Jiter::new(text);
    let mut path = String::new();
    let walked = match j.peek() {
        Ok(peek) => walk(&mut j, peek, &mut path, 0).and_then(|()| j.finish().map_err(Fail::Jiter)),
        Err(e) => Err(Fail::Jiter(e)),
    };
    walked.map_err(|f| match f {
        Fail::Strict(e) => e,
        Fail::Jiter(e) => syntax(&j, e),
    })
}

/// Why the walk stopped: a strictness rule, or the tokenizer (turned into a position later,
/// once the tokenizer is no longer borrowed).
enum Fail {
    Strict(StrictJsonError),
    Jiter(jiter::JiterError),
}

impl From<StrictJsonError> for Fail {
    fn from(e: StrictJsonError) -> Self {
        Fail::Strict(e)
    }
}

impl From<jiter::JiterError> for Fail {
    fn from(e: jiter::JiterError) -> Self {
        Fail::Jiter(e)
    }
}

/// [`check`], then deserialises `text` with serde_json (whose error names the field, line
/// and column when the shape is wrong).
pub fn parse<T: DeserializeOwned>(text: &[u8]) -> Result<T, StrictJsonError> {
    check(text)?;
    serde_json::from_slice(text).map_err(|e| StrictJsonError::Syntax(e.to_string()))
}

/// [`parse`] into a [`Value`].
pub fn parse_value(text: &[u8]) -> Result<Value, StrictJsonError> {
    parse(text)
}

fn syntax(j: &jiter::Jiter<'_>, e: jiter::JiterError) -> StrictJsonError {
    let at = j.error_position(e.index);
    StrictJsonError::Syntax(format!(
        "{} at line {} column {}",
        e.error_type, at.line, at.column
    ))
}

fn pointer(path: &str) -> String {
    if path.is_empty() {
        "/".into()
    } else {
        path.to_string()
    }
}

fn walk(
    j: &mut jiter::Jiter<'_>,
    peek: jiter::Peek,
    path: &mut String,
    depth: usize,
) -> Result<(), Fail> {
    use jiter::Peek;
    let nested = matches!(peek, Peek::Array | Peek::Object);
    if nested && depth >= MAX_DEPTH {
        return Err(StrictJsonError::TooDeep {
            path: pointer(path),
        }
        .into());
    }
    match peek {
        Peek::Array => {
            let mut next = j.known_array()?;
            let mut i = 0usize;
            while let Some(p) = next {
                let len = path.len();
                // Writing to a String cannot fail.
                let _ = write!(path, "/{i}");
                walk(j, p, path, depth + 1)?;
                path.truncate(len);
                i += 1;
                next = j.array_step()?;
            }
        }
        Peek::Object => {
            let mut seen = Seen::default();
            let mut key = j.known_object()?.map(str::to_owned);
            while let Some(k) = key {
                let len = path.len();
                path.push('/');
                push_token(path, &k);
                if !seen.insert(k) {
                    return Err(StrictJsonError::DuplicateKey { path: path.clone() }.into());
                }
                let p = j.peek()?;
                walk(j, p, path, depth + 1)?;
                path.truncate(len);
                key = j.next_key()?.map(str::to_owned);
            }
        }
        Peek::String => {
            j.known_str()?;
        }
        p if p.is_num() => {
            let bytes = j.known_number_bytes(p)?;
            // A number's text is ASCII; owned only to be named in the error.
            let text = String::from_utf8_lossy(bytes);
            if !number_is_exact(&text) {
                let text = text.into_owned();
                // A number thousands of digits long is named by its start, not echoed whole.
                let text = match text.char_indices().nth(64) {
                    Some((i, _)) => format!("{}… ({} digits)", &text[..i], text.len()),
                    None => text,
                };
                return Err(StrictJsonError::InexactNumber {
                    path: pointer(path),
                    text,
                }
                .into());
            }
        }
        p => j.known_skip(p)?,
    }
    Ok(())
}

/// Appends `key` to `path` as one JSON pointer reference token (RFC 6901 §3: `~` as `~0`,
/// `/` as `~1`).
fn push_token(path: &mut String, key: &str) {
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// The keys of one object seen so far: a list while it is short (most objects), a hash set
/// once it is longer than [`SEEN_LIST_MAX`], so an object of many keys stays linear.
#[derive(Default)]
enum Seen {
    #[default]
    None,
    List(Vec<String>),
    Set(HashSet<String>),
}

/// The most keys [`Seen`] compares one by one.
const SEEN_LIST_MAX: usize = 16;

impl Seen {
    /// Adds `key`; `false` when the object named it already.
    fn insert(&mut self, key: String) -> bool {
        match self {
            Seen::None => *self = Seen::List(vec![key]),
            Seen::List(l) if l.contains(&key) => return false,
            Seen::List(l) if l.len() < SEEN_LIST_MAX => l.push(key),
            Seen::List(l) => {
                let mut set: HashSet<String> = l.drain(..).collect();
                set.insert(key);
                *self = Seen::Set(set);
            }
            Seen::Set(set) => return set.insert(key),
        }
        true
    }
}

/// A decimal value as `digits × 10^exponent` with no leading or trailing zero digit, so two
/// equal values have equal forms. Zero is `(false, "", 0)`.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    /// Parses a JSON number text (`-?int(.frac)?([eE][+-]?exp)?`); `None` when it is not one
    /// or its exponent does not fit an `i64`.
    fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mantissa, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (int, frac) = match mantissa.split_once('.') {
            Some((i, f)) => (i, f),
            None => (mantissa, ""),
        };
        if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut digits: String = format!("{int}{frac}");
        let frac_len = i64::try_from(frac.len()).ok()?;
        let mut exponent = match exp {
            None => 0i64,
            Some(e) => {
                let e = e.strip_prefix('+').unwrap_or(e);
                match e.parse::<i64>() {
                    Ok(v) => v,
                    // An exponent beyond i64: only zero is still a finite, exact value.
                    Err(_) if digits.bytes().all(|b| b == b'0') => 0,
                    Err(_) => return None,
                }
            }
        }
        .checked_sub(frac_len)?;
        let trimmed = digits.trim_start_matches('0').len();
        digits.drain(..digits.len() - trimmed);
        while digits.ends_with('0') {
            digits.pop();
            exponent = exponent.checked_add(1)?;
        }
        if digits.is_empty() {
            return Some(Decimal {
                negative: false,
                digits,
                exponent: 0,
            });
        }
        Some(Decimal {
            negative,
            digits,
            exponent,
        })
    }
}

/// Whether the JSON number `text` keeps its exact value through the canonical form: its
/// value equals the value RFC 8785 writes for the IEEE double it parses to (so `0.1`, `1.5`,
/// `1e21` pass; `9007199254740993.0`, `1e400`, `1e-400` do not), and, written as a plain
/// integer, it lies within ±2^53 (I-JSON, RFC 7493 §2.2: `9007199254740993` and
/// `18446744073709551616` do not pass). Two texts that pass and share a canonical form
/// therefore denote the same value.
pub fn number_is_exact(text: &str) -> bool {
    let Some(value) = Decimal::parse(text) else {
        return false;
    };
    let plain_integer = !text.contains(['.', 'e', 'E']);
    if plain_integer {
        let magnitude = text.trim_start_matches('-');
        return magnitude.len() <= 16
            && magnitude
                .parse::<u128>()
                .is_ok_and(|m| m <= MAX_EXACT_INTEGER);
    }
    let Ok(double) = text.parse::<f64>() else {
        return false;
    };
    let Some(number) = serde_json::Number::from_f64(double) else {
        return false; // infinite: beyond the largest double
    };
    match serde_json_canonicalizer::to_string(&Value::Number(number)) {
        Ok(canonical) => Decimal::parse(&canonical).is_some_and(|c| c == value),
        Err(_) => false,
    }
}

/// The JSON number written as `text` (JSON's grammar, no sign `+`, no spaces) when it keeps
/// its exact value ([`number_is_exact`]); `None` otherwise. For an answer typed by a person
/// (the CLI's `assent answer`, the dashboard's form): found by review, both parsed it as a
/// double and sent `9007199254740992` for `9007199254740993`, which the API refuses as
/// `INEXACT_NUMBER` when sent as JSON.
pub fn exact_number(text: &str) -> Option<serde_json::Number> {
    if !number_is_exact(text) {
        return None;
    }
    serde_json::from_str::<serde_json::Number>(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A person's typed number is taken only when exact and in JSON's grammar.
    #[test]
    fn a_typed_number_is_taken_only_when_exact() {
        assert_eq!(exact_number("42"), Some(42.into()));
        assert_eq!(exact_number("-1.5").map(|n| n.as_f64()), Some(Some(-1.5)));
        for bad in [
            "9007199254740993",
            "1e400",
            "+5",
            " 5",
            "0x10",
            "NaN",
            "",
            "1.",
            "five",
        ] {
            assert_eq!(exact_number(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn numbers_that_keep_their_value_pass() {
        for ok in [
            "0",
            "-0",
            "1",
            "-1",
            "0.1",
            "19.99",
            "1.5",
            "1e21",
            "1E+21",
            "-2.5e-3",
            "9007199254740992",
            "-9007199254740992",
            "9007199254740992.0",
            "1e300",
            "0e999999999999999999999",
            "5e-324",
            "1.7976931348623157e308",
        ] {
            assert!(number_is_exact(ok), "{ok} should pass");
        }
    }

    #[test]
    fn numbers_a_double_changes_are_refused() {
        for bad in [
            "9007199254740993",
            "-9007199254740993",
            "18446744073709551616",
            "18446744073709551617",
            "9007199254740993.0",
            "0.1000000000000000000000001",
            "1e400",
            "1e-400",
            "1e99999999999999999999",
            "123456789012345678901234567890",
        ] {
            assert!(!number_is_exact(bad), "{bad} should be refused");
        }
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth_after_unescaping() {
        let e = check(br#"{"name":"write_file","name":"read_file"}"#).unwrap_err();
        assert_eq!(
            e,
            StrictJsonError::DuplicateKey {
                path: "/name".into()
            }
        );
        assert_eq!(e.code(), "DUPLICATE_KEY");
        let e = check(br#"{"params":{"arguments":[{"a":1,"\u0061":2}]}}"#).unwrap_err();
        assert_eq!(
            e,
            StrictJsonError::DuplicateKey {
                path: "/params/arguments/0/a".into()
            }
        );
        let e = check(br#"{"a/b":{"x~":1,"x~":2}}"#).unwrap_err();
        assert_eq!(
            e,
            StrictJsonError::DuplicateKey {
                path: "/a~1b/x~0".into()
            }
        );
        // The same key in sibling objects is fine.
        check(br#"{"a":{"k":1},"b":{"k":1},"c":[{"k":1},{"k":2}]}"#).unwrap();
    }

    #[test]
    fn inexact_numbers_are_refused_with_their_path_and_text() {
        let e = check(br#"{"amount": 18446744073709551616}"#).unwrap_err();
        assert_eq!(
            e,
            StrictJsonError::InexactNumber {
                path: "/amount".into(),
                text: "18446744073709551616".into()
            }
        );
        assert!(check(b"[1, 2.5, -0.0, 1e21]").is_ok());
    }

    #[test]
    fn a_huge_number_is_named_by_its_start() {
        let long = format!("{{\"n\": {}}}", "9".repeat(1000));
        match check(long.as_bytes()) {
            Err(StrictJsonError::InexactNumber { text, .. }) => {
                assert!(
                    text.len() < 100 && text.ends_with("(1000 digits)"),
                    "{text}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn nesting_and_syntax() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(matches!(
            check(deep.as_bytes()),
            Err(StrictJsonError::TooDeep { .. })
        ));
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        check(ok.as_bytes()).unwrap();
        for bad in [&b"{"[..], b"{} {}", b"[1,]", b"NaN", b"01", b""] {
            assert!(
                matches!(check(bad), Err(StrictJsonError::Syntax(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let v: Value = parse(br#"{"a": [1, {"b": null}]}"#).unwrap();
        assert_eq!(v["a"][1]["b"], Value::Null);
    }
}
