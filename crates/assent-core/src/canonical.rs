//! RFC 8785 canonical JSON of a tool call and its SHA-256 `call_hash` (seed 002
//! `toolCallCanonical`): [`ToolCall`] (the call, checked), [`CanonicalCall`] (the call with its
//! canonical texts and `call_hash`, built once by one constructor for every entry point), and
//! the RFC 8785 / SHA-256 primitives. It does not decide anything about the call.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;

use sha2::{Digest, Sha256};

mod dotted;
mod fold;
pub(crate) use dotted::{check_unambiguous, reached_through_dotted};
pub(crate) use fold::{Walk, folded_key, folded_walk};

/// A proposed tool call: what an agent wants to run.
///
/// `tool` is the tool's name (a local tool is named by its Agent Format alias), `server` the
/// MCP server alias when the call goes to an MCP server (never set for local tools), and
/// `arguments` the JSON object of arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCall {
    /// Tool name or local tool alias.
    pub tool: String,
    /// MCP server alias; `None` for a local tool. Omitted from the canonical form when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The arguments; always a JSON object.
    pub arguments: Value,
}

/// Why a call could not be canonicalised.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CanonicalError {
    /// The arguments are not a JSON object.
    #[error("arguments must be a JSON object, got {0}")]
    ArgumentsNotObject(&'static str),
    /// The tool name is empty.
    #[error("tool name must not be empty")]
    EmptyTool,
    /// An integer outside ±2^53 (I-JSON, RFC 7493): RFC 8785 writes numbers as IEEE doubles,
    /// so two such integers could share a hash. `path` is the JSON pointer to it.
    #[error(
        "argument {path}: integer {value} is outside ±2^53 and cannot be hashed exactly; send it as a string"
    )]
    InexactInteger {
        /// JSON pointer to the number.
        path: String,
        /// The number as sent.
        value: String,
    },
    /// The value cannot be written as RFC 8785 JSON (e.g. a number out of range).
    #[error("cannot canonicalise: {0}")]
    Json(String),
    /// A top-level argument whose name has a dot (`order.amount`) while the same dotted path
    /// also leads to a nested value (`{"order": {"amount": …}}`): a policy condition, cost or
    /// scope reading `order.amount` would see one of them while the tool may use the other.
    #[error(
        "argument `{key}` is ambiguous: both a key of that name and the nested path `{key}` hold a value (a policy reading one while the tool uses the other); rename the key"
    )]
    AmbiguousKey {
        /// The dotted key.
        key: String,
    },
    /// A top-level argument whose name has a dot (`req.path`) while the nested path of that
    /// name, spelt in another case or Unicode form at some level (`{"Req": {"path": …}}`),
    /// also holds a value: a policy reads the literal key, a tool decoding case-insensitively
    /// (Go's `encoding/json`) the nested one (found by review). `nested` is the nested path as
    /// sent.
    #[error(
        "argument `{key}` is ambiguous: the nested path `{nested}` is the same name but for case or Unicode form and also holds a value (a policy reading one while the tool uses the other); rename the key"
    )]
    FoldedAmbiguousKey {
        /// The dotted key.
        key: String,
        /// The real keys of the nested path it folds to, joined by dots.
        nested: String,
    },
    /// Two places in the arguments that name one value once every key with a dot is read as a
    /// path (and names as a case-insensitive decoder reads them), other than a top-level key
    /// and its nested path: `{"order": {"details.amount": …, "details": {"amount": …}}}`,
    /// `{"a.b.c": …, "a.b": {"c": …}}`. A policy reads one, a tool or sub-agent expanding
    /// dotted keys the other (found by review). `path` and `other` are JSON pointers to the
    /// place reached through a dotted key and to the other.
    #[error(
        "argument {path} is ambiguous: read with its dots as a path it names the same value as {other} (a policy reading one while the tool uses the other); rename the key"
    )]
    DottedAmbiguousKey {
        /// JSON pointer to the place reached through a dotted key.
        path: String,
        /// JSON pointer to the other place of that name.
        other: String,
    },
    /// Two keys of one object that are the same name but for case or Unicode compatibility
    /// form (`amount` and `AMOUNT`; `kind` and `\u{212A}ind`, a Kelvin sign): a policy reads
    /// the one spelt as it names it, while many tools' decoders (Go's `encoding/json`, which
    /// folds case and takes the last) read the other. `path` is the JSON pointer to the second.
    #[error(
        "argument {path}: key `{key}` differs from key `{other}` of the same object only in case or Unicode form (a policy reading one while the tool uses the other); rename one"
    )]
    CaseAmbiguousKey {
        /// JSON pointer to the second key of the pair.
        path: String,
        /// The second key, as sent.
        key: String,
        /// The first key it folds to the same name as.
        other: String,
    },
}

/// The JSON type of `v` with its article, as errors name it: `null`, `a boolean`, `a number`,
/// `a string`, `an array`, `an object`.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl ToolCall {
    /// Builds a call, checking that `tool` is not empty, `arguments` is an object, every
    /// integer is exact as a double, and no key with a dot names a place another key names
    /// ([`check_unambiguous`]).
    ///
    /// Errors: [`CanonicalError::EmptyTool`], [`CanonicalError::ArgumentsNotObject`],
    /// [`CanonicalError::InexactInteger`], [`CanonicalError::AmbiguousKey`],
    /// [`CanonicalError::FoldedAmbiguousKey`], [`CanonicalError::DottedAmbiguousKey`],
    /// [`CanonicalError::CaseAmbiguousKey`].
    pub fn new(
        tool: impl Into<String>,
        server: Option<String>,
        arguments: Value,
    ) -> Result<Self, CanonicalError> {
        let tool = tool.into();
        if tool.is_empty() {
            return Err(CanonicalError::EmptyTool);
        }
        if !arguments.is_object() {
            return Err(CanonicalError::ArgumentsNotObject(type_name(&arguments)));
        }
        check_exact(&arguments, &mut String::new())?;
        check_unambiguous(&arguments)?;
        Ok(Self {
            tool,
            server: server.filter(|s| !s.is_empty()),
            arguments,
        })
    }

    /// The RFC 8785 canonical JSON of `{"arguments", "server"?, "tool"}` (seed 002
    /// `toolCallCanonical`). `server` appears only when the call names one, never as `null`.
    pub fn canonical_json(&self) -> Result<String, CanonicalError> {
        self.canonical_with_arguments(&self.canonical_arguments()?)
    }

    /// The RFC 8785 canonical JSON of the arguments alone (what `{{tool_args}}` renders).
    pub fn canonical_arguments(&self) -> Result<String, CanonicalError> {
        canonical_value(&self.arguments)
    }

    /// The canonical JSON of the call, given the canonical JSON of its arguments (from
    /// [`canonical_arguments`](Self::canonical_arguments)), so a caller that needs both
    /// canonicalises the arguments once. The three keys sort as `arguments` < `server` <
    /// `tool` under RFC 8785 §3.2.3, and each value is written by the canonicaliser.
    pub fn canonical_with_arguments(&self, arguments: &str) -> Result<String, CanonicalError> {
        let string = |s: &str| canonical_value(&Value::String(s.to_string()));
        let tool = string(&self.tool)?;
        let mut out = String::with_capacity(arguments.len() + tool.len() + 40);
        out.push_str("{\"arguments\":");
        out.push_str(arguments);
        if let Some(server) = &self.server {
            out.push_str(",\"server\":");
            out.push_str(&string(server)?);
        }
        out.push_str(",\"tool\":");
        out.push_str(&tool);
        out.push('}');
        Ok(out)
    }

    /// The canonical JSON and its SHA-256 as 64 lowercase hex characters (`call_hash`), as
    /// [`CanonicalCall`] computes them.
    pub fn canonical_and_hash(&self) -> Result<(String, String), CanonicalError> {
        let (_, canonical, call_hash) = CanonicalCall::texts(self)?;
        Ok((canonical, call_hash))
    }
}

/// A tool call with its RFC 8785 canonical forms and its `call_hash`, computed once (seed 002
/// `toolCallCanonical`): what the gateway gates, stores, and binds an approval and its token
/// to. Build it with [`CanonicalCall::new`] (from a [`ToolCall`]) or [`CanonicalCall::parse`]
/// (from the tool, server and arguments a request names); the fields are read through
/// accessors so they always agree with one another.
#[derive(Debug, Clone, PartialEq)]
pub struct CanonicalCall {
    call: ToolCall,
    arguments: String,
    canonical: String,
    call_hash: String,
}

impl CanonicalCall {
    /// Canonicalises `call`: the arguments once ([`ToolCall::canonical_arguments`]), the whole
    /// call from them ([`ToolCall::canonical_with_arguments`]), and the SHA-256 of that text.
    /// It does not re-check `call` (see [`ToolCall::new`] for that).
    ///
    /// Errors: [`CanonicalError::Json`] when a value cannot be written as RFC 8785 JSON.
    pub fn new(call: ToolCall) -> Result<Self, CanonicalError> {
        let (arguments, canonical, call_hash) = Self::texts(&call)?;
        Ok(Self {
            call,
            arguments,
            canonical,
            call_hash,
        })
    }

    /// `(canonical arguments, canonical call, call_hash)` of `call`: the one computation behind
    /// [`CanonicalCall::new`] and [`ToolCall::canonical_and_hash`].
    fn texts(call: &ToolCall) -> Result<(String, String, String), CanonicalError> {
        let arguments = call.canonical_arguments()?;
        let canonical = call.canonical_with_arguments(&arguments)?;
        let call_hash = sha256_hex(canonical.as_bytes());
        Ok((arguments, canonical, call_hash))
    }

    /// [`ToolCall::new`] then [`CanonicalCall::new`]: the one constructor for a call named by
    /// a request (`tool`, the MCP `server` alias or `None`, the `arguments` object).
    ///
    /// Errors: those of [`ToolCall::new`] ([`CanonicalError::EmptyTool`],
    /// [`CanonicalError::ArgumentsNotObject`], [`CanonicalError::InexactInteger`]) and of
    /// [`CanonicalCall::new`].
    pub fn parse(
        tool: impl Into<String>,
        server: Option<String>,
        arguments: Value,
    ) -> Result<Self, CanonicalError> {
        Self::new(ToolCall::new(tool, server, arguments)?)
    }

    /// The call.
    pub fn call(&self) -> &ToolCall {
        &self.call
    }

    /// The RFC 8785 canonical JSON of the arguments alone (what `{{tool_args}}` renders and
    /// the gatekeeper's `canonical_arguments`).
    pub fn arguments(&self) -> &str {
        &self.arguments
    }

    /// The RFC 8785 canonical JSON of the whole call ([`ToolCall::canonical_json`]).
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// `call_hash`: SHA-256 of [`canonical`](Self::canonical), 64 lowercase hex characters.
    pub fn call_hash(&self) -> &str {
        &self.call_hash
    }

    /// The call, giving up the canonical texts.
    pub fn into_call(self) -> ToolCall {
        self.call
    }

    /// Every part, owned: `(call, canonical arguments, canonical call, call_hash)`, for a
    /// caller that moves them into its own record.
    pub fn into_parts(self) -> (ToolCall, String, String, String) {
        (self.call, self.arguments, self.canonical, self.call_hash)
    }
}

/// Largest integer magnitude a double holds exactly (2^53).
const MAX_EXACT: u64 = 1 << 53;

fn check_exact(v: &Value, path: &mut String) -> Result<(), CanonicalError> {
    match v {
        Value::Number(n) => {
            let big = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > MAX_EXACT,
                (None, Some(i)) => i.unsigned_abs() > MAX_EXACT,
                _ => false,
            };
            if big {
                let p = if path.is_empty() {
                    "/".to_string()
                } else {
                    path.clone()
                };
                return Err(CanonicalError::InexactInteger {
                    path: p,
                    value: n.to_string(),
                });
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                check_exact(x, path)?;
                path.truncate(len);
            }
        }
        Value::Object(m) => {
            let mut names: HashMap<Cow<'_, str>, &str> = HashMap::with_capacity(m.len());
            for (k, x) in m {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                if m.len() > 1
                    && let Some(other) = names.insert(folded_key(k), k)
                {
                    return Err(CanonicalError::CaseAmbiguousKey {
                        path: path.clone(),
                        key: k.clone(),
                        other: other.to_string(),
                    });
                }
                check_exact(x, path)?;
                path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

/// SHA-256 of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// RFC 8785 canonical JSON of any JSON value (used for `{{tool_args}}` and audit records).
pub fn canonical_value(v: &Value) -> Result<String, CanonicalError> {
    serde_json_canonicalizer::to_string(v).map_err(|e| CanonicalError::Json(e.to_string()))
}

/// `v` as its `call_hash` reads it: its canonical JSON ([`canonical_value`], RFC 8785) parsed
/// back, so each number is spelt as the hash has it (`-0` is `0`, `1.0` and `1e0` are the
/// integer `1`); `v` itself when it has no canonical form. What the MCP front ends send
/// upstream. Found by review: they forwarded the client's spelling, so an approver shown
/// `{"n": 0}` let `{"n": -0.0}` reach the tool, a float to a Python or Go upstream.
pub fn as_hashed(v: &Value) -> Value {
    canonical_value(v)
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_else(|| v.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    /// Numbers reach the upstream spelt as the hash reads them; nothing else changes.
    #[test]
    fn a_value_as_hashed_spells_its_numbers_canonically() {
        let v: Value = serde_json::from_str(r#"{"b":[-0,1.0,1e2,1.5],"a":"x"}"#).unwrap();
        let h = as_hashed(&v);
        assert_eq!(h.to_string(), r#"{"a":"x","b":[0,1,100,1.5]}"#);
        assert!(h["b"][1].is_u64());
        assert_eq!(canonical_value(&h).unwrap(), canonical_value(&v).unwrap());
    }

    /// RFC 8785 Appendix B: IEEE 754 doubles and their canonical serialisation.
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let vectors = include_str!("../tests/data/rfc8785-appendix-b.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(' '))
            .map(|(bits, want)| (u64::from_str_radix(bits, 16).unwrap(), want));
        for (bits, want) in vectors {
            let f = f64::from_bits(bits);
            let got = canonical_value(&json!(f)).unwrap();
            assert_eq!(&got, want, "bits {bits:#018x}");
        }
    }

    /// RFC 8785 §3.2.3 sorts keys by UTF-16 code units, and §3.2.2.2 escapes strings minimally.
    #[test]
    fn rfc8785_key_order_and_strings() {
        let v: Value = serde_json::from_str(
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control\u007f","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
        )
        .unwrap();
        let got = canonical_value(&v).unwrap();
        let want = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\u{7f}\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(got, want);
        let s = canonical_value(&json!({"a": "\u{2028}\n\"\\/"})).unwrap();
        assert_eq!(s, "{\"a\":\"\u{2028}\\n\\\"\\\\/\"}");
    }

    #[test]
    fn call_hash_is_order_independent_and_omits_null_server() {
        let a = ToolCall::new("t", None, json!({"b": 1, "a": [1, 2.0]})).unwrap();
        let b = ToolCall::new(
            "t",
            None,
            serde_json::from_str(r#"{"a":[1,2],"b":1.0}"#).unwrap(),
        )
        .unwrap();
        let (ca, ha) = a.canonical_and_hash().unwrap();
        assert_eq!(ca, r#"{"arguments":{"a":[1,2],"b":1},"tool":"t"}"#);
        assert_eq!(ha, b.canonical_and_hash().unwrap().1);
        assert_eq!(ha, sha256_hex(ca.as_bytes()));
        assert_eq!(ha.len(), 64);
        assert!(
            ha.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        let s = ToolCall::new("t", Some("fs".into()), json!({})).unwrap();
        assert_eq!(
            s.canonical_json().unwrap(),
            r#"{"arguments":{},"server":"fs","tool":"t"}"#
        );
        let other = ToolCall::new("t", None, json!({"b": 2, "a": [1, 2]})).unwrap();
        assert_ne!(other.canonical_and_hash().unwrap().1, ha);
    }

    /// The assembled form equals the library's canonicalisation of the whole object.
    #[test]
    fn assembled_canonical_form_equals_the_library() {
        let cases = [
            ("t", None, json!({})),
            (
                "ü\u{1f600}\"quote",
                Some("srv\n"),
                json!({"z": [1.5, "\u{2028}"], "é": {"b": 1, "a": null}}),
            ),
            (
                "read_file",
                Some("fs"),
                json!({"path": "/tmp/a", "n": 1e21}),
            ),
        ];
        for (tool, server, args) in cases {
            let c = ToolCall::new(tool, server.map(String::from), args.clone()).unwrap();
            let mut m = Map::new();
            m.insert("tool".into(), json!(tool));
            if let Some(s) = server {
                m.insert("server".into(), json!(s));
            }
            m.insert("arguments".into(), args);
            assert_eq!(
                c.canonical_json().unwrap(),
                canonical_value(&Value::Object(m)).unwrap()
            );
        }
    }

    #[test]
    fn rejects_integers_a_double_cannot_hold() {
        assert!(ToolCall::new("t", None, json!({"n": 9007199254740992u64})).is_ok());
        assert!(ToolCall::new("t", None, json!({"n": -9007199254740992i64})).is_ok());
        let e =
            ToolCall::new("t", None, json!({"a": [1, {"n": 9007199254740993u64}]})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument /a/1/n: integer 9007199254740993 is outside ±2^53 and cannot be hashed exactly; send it as a string"
        );
        assert!(ToolCall::new("t", None, json!({"n": -9007199254740993i64})).is_err());
        assert!(ToolCall::new("t", None, json!({"n": 1e300})).is_ok());
    }

    /// One constructor gives the call, both canonical texts and the hash, all agreeing with
    /// the older per-piece methods.
    #[test]
    fn a_canonical_call_holds_the_call_its_texts_and_its_hash() {
        let args = json!({"b": 1.0, "a": [1, 2]});
        let c = CanonicalCall::parse("t", Some("fs".into()), args.clone()).unwrap();
        let call = ToolCall::new("t", Some("fs".into()), args).unwrap();
        assert_eq!(c.call(), &call);
        assert_eq!(c.arguments(), r#"{"a":[1,2],"b":1}"#);
        assert_eq!(c.arguments(), call.canonical_arguments().unwrap());
        assert_eq!(
            c.canonical(),
            r#"{"arguments":{"a":[1,2],"b":1},"server":"fs","tool":"t"}"#
        );
        assert_eq!(c.call_hash(), sha256_hex(c.canonical().as_bytes()));
        assert_eq!(
            call.canonical_and_hash().unwrap(),
            (c.canonical().to_string(), c.call_hash().to_string())
        );
        assert_eq!(CanonicalCall::new(call.clone()).unwrap(), c);
        let (whole, a, text, hash) = c.clone().into_parts();
        assert_eq!(
            (&whole, a.as_str(), text.as_str(), hash.as_str()),
            (&call, c.arguments(), c.canonical(), c.call_hash())
        );
        assert_eq!(c.into_call(), call);
    }

    #[test]
    fn a_canonical_call_refuses_what_a_tool_call_refuses() {
        assert_eq!(
            CanonicalCall::parse("", None, json!({})).unwrap_err(),
            CanonicalError::EmptyTool
        );
        assert_eq!(
            CanonicalCall::parse("t", None, json!("x")).unwrap_err(),
            CanonicalError::ArgumentsNotObject("a string")
        );
        assert!(matches!(
            CanonicalCall::parse("t", None, json!({"n": 9007199254740993u64})),
            Err(CanonicalError::InexactInteger { .. })
        ));
    }

    /// Attack: a rule checks `target.device`; the agent sends a harmless literal key
    /// `"target.device"` for the policy and the real `{"target": {"device"}}` for the tool.
    #[test]
    fn a_dotted_key_shadowing_a_nested_argument_is_refused() {
        let both = json!({"target.device": "/dev/null", "target": {"device": "/dev/sda"}});
        assert_eq!(
            ToolCall::new("dd", None, both).unwrap_err(),
            CanonicalError::AmbiguousKey {
                key: "target.device".into()
            }
        );
        let arr = json!({"items.0": 1, "items": [2]});
        assert!(ToolCall::new("t", None, arr).is_err(), "array paths too");
        // Either form alone is a plain call.
        assert!(ToolCall::new("dd", None, json!({"target.device": "/dev/null"})).is_ok());
        assert!(ToolCall::new("dd", None, json!({"target": {"device": "/dev/sda"}})).is_ok());
        assert!(ToolCall::new("dd", None, json!({"target.x": 1, "target": {"y": 2}})).is_ok());
    }

    /// Attack: a rule scopes `req.path`; the agent sends a harmless literal key `"req.path"`
    /// for the policy and `{"Req": {"path": "/etc/shadow"}}`, which a tool decoding
    /// case-insensitively reads as its `req.path`. Refused naming both spellings, at any level
    /// and through arrays.
    #[test]
    fn a_dotted_key_shadowing_a_nested_argument_in_another_case_is_refused() {
        let decoy = json!({"req.path": "/srv/data/ok", "Req": {"path": "/etc/shadow"}});
        let e = ToolCall::new("read", None, decoy).unwrap_err();
        assert_eq!(
            e,
            CanonicalError::FoldedAmbiguousKey {
                key: "req.path".into(),
                nested: "Req.path".into(),
            }
        );
        assert!(e.to_string().contains("`req.path`") && e.to_string().contains("`Req.path`"));
        for v in [
            json!({"Req.Path": 1, "req": {"path": 2}}),
            json!({"a.b.c": 1, "a": {"\u{212A}": 0, "B": {"C": 2}}}),
            json!({"files.0.path": 1, "FILES": [{"PATH": 2}]}),
            json!({"n.x": 1, "\u{FF2E}": {"x": 2}}),
        ] {
            assert!(
                matches!(
                    ToolCall::new("t", None, v.clone()),
                    Err(CanonicalError::FoldedAmbiguousKey { .. })
                ),
                "{v}"
            );
        }
        // A dotted key whose nested path is absent in every spelling is a plain call.
        assert!(ToolCall::new("t", None, json!({"req.path": 1, "Req": {"p": 2}})).is_ok());
        assert!(ToolCall::new("t", None, json!({"req.path": 1, "Req": [2]})).is_ok());
        assert_eq!(
            folded_walk(&json!({"A": [{"b": 1}]}), "a.0.B.c"),
            Walk::Stopped("A.0.b".into(), &json!(1))
        );
    }

    /// Attack: a rule checks `amount`; the agent sends `{"amount": 5, "AMOUNT": 5000}` (or a
    /// Kelvin sign for a `K`, a long s for an `s`): the policy reads 5, a tool decoding with
    /// Go's case-folding `encoding/json` runs with 5000. Any two keys of one object, at any
    /// depth, that fold to one name are refused, naming the second.
    #[test]
    fn keys_differing_only_in_case_or_unicode_form_are_refused() {
        let upper = json!({"amount": 5, "AMOUNT": 5000});
        assert_eq!(
            ToolCall::new("pay", None, upper).unwrap_err(),
            CanonicalError::CaseAmbiguousKey {
                path: "/amount".into(),
                key: "amount".into(),
                other: "AMOUNT".into(),
            }
        );
        let kelvin = json!({"order": {"kind": "refund", "\u{212A}ind": "transfer"}});
        let e = ToolCall::new("pay", None, kelvin).unwrap_err();
        assert!(
            matches!(&e, CanonicalError::CaseAmbiguousKey { path, .. } if path.starts_with("/order/")),
            "{e:?}"
        );
        let long_s = json!({"items": [{"sum": 1, "\u{17F}um": 2}]});
        assert!(ToolCall::new("pay", None, long_s).is_err(), "in arrays too");
        // Go's simple case folding beyond lower case: final sigma, the iota subscript.
        for pair in [
            json!({"\u{3c2}um": 1, "\u{3c3}um": 2}),
            json!({"a\u{345}": 1, "a\u{3b9}": 2}),
        ] {
            assert!(ToolCall::new("pay", None, pair).is_err(), "folded alike");
        }
        // Distinct names, and one key alone in any case, are plain calls.
        assert!(ToolCall::new("pay", None, json!({"AMOUNT": 1, "amount_eur": 2})).is_ok());
        assert!(ToolCall::new("pay", None, json!({"Ärger": 1, "arger": 2})).is_ok());
    }

    #[test]
    fn rejects_non_object_arguments() {
        assert_eq!(
            ToolCall::new("t", None, json!([1])).unwrap_err(),
            CanonicalError::ArgumentsNotObject("an array")
        );
        assert_eq!(
            ToolCall::new("", None, json!({})).unwrap_err(),
            CanonicalError::EmptyTool
        );
    }
}
