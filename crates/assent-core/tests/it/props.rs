//! Property tests and test vectors (issue 10 §19).
//!
//! - canonical JSON equals `serde_jcs` (a second RFC 8785 implementation) on random documents,
//!   and the RFC 8785 examples and the reference implementation's test cases give the
//!   published output;
//! - the condition matcher, the policy loader and token parsing never panic on arbitrary input;
//! - the loader refuses exactly the durations and counts outside the documented bounds.
//!
//! Each property runs 256 cases by default (bounded for CI); `PROPTEST_CASES` overrides it:
//! `PROPTEST_CASES=100000 cargo test -p assent-core --test it props` (docs/testing.md).

use assent_core::canonical::canonical_value;
use assent_core::condition::{Condition, Outcome};
use assent_core::policy::{MAX_WAIT_SECONDS, Registry};
use assent_core::token::{self, TokenClaims};
use assent_core::triggers::{MAX_OUTPUT_BYTES, MAX_RATE_COUNT, MAX_RATE_WINDOW_SECONDS};
use assent_core::{ToolCall, evaluate};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// `cases` unless `PROPTEST_CASES` is set, in which case proptest's own reading of it wins.
fn config(cases: u32) -> ProptestConfig {
    let base = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_some() {
        base
    } else {
        ProptestConfig { cases, ..base }
    }
}

// ---- generators ----

/// Strings with non-ASCII, control characters, quotes, backslashes, U+2028 and astral
/// characters (surrogate pairs in UTF-16, which RFC 8785 sorts keys by).
fn text() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        4 => any::<char>(),
        2 => prop::char::range('a', 'e'),
        1 => prop::char::range('\0', '\u{1f}'),
        1 => prop_oneof![Just('"'), Just('\\'), Just('/'), Just('\u{7f}'), Just('\u{2028}')],
        1 => prop::char::range('\u{e000}', '\u{ffff}'),
        1 => prop::char::range('\u{1f600}', '\u{1f64f}'),
    ];
    prop::collection::vec(ch, 0..10).prop_map(String::from_iter)
}

/// A JSON number hashable by assent: an integer within ±2^53 or a finite double.
fn number() -> impl Strategy<Value = Value> {
    const EXACT: i64 = 1 << 53;
    prop_oneof![
        (-EXACT..=EXACT).prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ]
}

fn object<S: Strategy<Value = Value>>(
    keys: impl Strategy<Value = String>,
    values: S,
    max: usize,
) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(keys, values, 0..max)
        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
}

/// Any JSON document of depth at most 4.
fn document() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            object(text(), inner, 8),
        ]
    })
}

// ---- (1) canonical JSON against serde_jcs ----

proptest! {
    #![proptest_config(config(256))]

    /// Two independent RFC 8785 implementations agree, and canonical JSON is a fixed point.
    #[test]
    fn props_canonical_json_equals_serde_jcs(v in document()) {
        let ours = canonical_value(&v).unwrap();
        let theirs = serde_jcs::to_string(&v).unwrap();
        prop_assert_eq!(&ours, &theirs);
        let again: Value = serde_json::from_str(&ours).unwrap();
        prop_assert_eq!(canonical_value(&again).unwrap(), ours);
    }

    /// The call hash does not depend on how the agent ordered or spaced its arguments.
    #[test]
    fn props_call_hash_ignores_key_order_and_whitespace(
        m in prop::collection::btree_map(text(), document(), 0..6),
    ) {
        let args = Value::Object(m.into_iter().collect());
        let pretty = serde_json::to_string_pretty(&args).unwrap();
        let reordered: Map<String, Value> = args
            .as_object()
            .unwrap()
            .iter()
            .rev()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let a = ToolCall::new("t", None, args.clone());
        let b = ToolCall::new("t", None, serde_json::from_str(&pretty).unwrap());
        let c = ToolCall::new("t", None, Value::Object(reordered));
        // Arguments refused (a dotted key that a nested path also reaches, `{".": 1, "":
        // {"": 2}}`, found by this test) are refused however they are ordered or spaced.
        let (a, b, c) = match (a, b, c) {
            (Ok(a), Ok(b), Ok(c)) => (a, b, c),
            (Err(e), Err(f), Err(g)) => {
                prop_assert_eq!(e.to_string(), f.to_string());
                prop_assert_eq!(e.to_string(), g.to_string());
                return Ok(());
            }
            (a, b, c) => {
                prop_assert!(false, "refused in one order only: {:?} {:?} {:?}", a.err(), b.err(), c.err());
                unreachable!()
            }
        };
        let h = a.canonical_and_hash().unwrap().1;
        prop_assert_eq!(&h, &b.canonical_and_hash().unwrap().1);
        prop_assert_eq!(&h, &c.canonical_and_hash().unwrap().1);
    }
}

// ---- (2) RFC 8785 test vectors ----

/// RFC 8785 §3.2.2 (`values`), §3.2.3 (property sorting), §3.2.4 (`french`: no locale), and the
/// reference implementation's test cases `arrays`, `structures`, `unicode` and `weird`
/// (cyberphone/json-canonicalization `testdata/input` → `testdata/output`), as input → output.
const VECTORS: &[(&str, &str, &str)] = &[
    (
        "arrays",
        r#"[
  56,
  {
    "d": true,
    "10": null,
    "1": [ ]
  }
]"#,
        r#"[56,{"1":[],"10":null,"d":true}]"#,
    ),
    (
        "french (§3.2.4)",
        r#"{
  "peach": "This sorting order",
  "péché": "is wrong according to French",
  "pêche": "but canonicalization MUST",
  "sin":   "ignore locale"
}"#,
        r#"{"peach":"This sorting order","péché":"is wrong according to French","pêche":"but canonicalization MUST","sin":"ignore locale"}"#,
    ),
    (
        "structures",
        r#"{
  "1": {"f": {"f": "hi","F": 5} ,"\n": 56.0},
  "10": { },
  "": "empty",
  "a": { },
  "111": [ {"e": "yes","E": "no" } ],
  "A": { }
}"#,
        r#"{"":"empty","1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{"E":"no","e":"yes"}],"A":{},"a":{}}"#,
    ),
    (
        "unicode (no normalisation)",
        r#"{
  "Unnormalized Unicode":"A\u030a"
}"#,
        "{\"Unnormalized Unicode\":\"A\u{30a}\"}",
    ),
    (
        "values (§3.2.2)",
        r#"{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#,
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#,
    ),
    (
        "sorting (§3.2.3)",
        r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#,
        "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
    ),
    (
        "weird",
        r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\u000a": "Newline",
  "1": "One",
  "\u0080": "Control\u007f",
  "\ud83d\ude02": "Smiley",
  "\u00f6": "Latin Small Letter O With Diaeresis",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "</script>": "Browser Challenge"
}"#,
        "{\"\\n\":\"Newline\",\"\\r\":\"Carriage Return\",\"1\":\"One\",\"</script>\":\"Browser Challenge\",\"\u{80}\":\"Control\u{7f}\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f602}\":\"Smiley\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
    ),
];

/// RFC 8785 Appendix B: IEEE 754 bit patterns and their serialisation (NaN and Infinity, the
/// two rows without one, cannot be JSON numbers at all; see below), from the data file the
/// unit test of `canonical.rs` reads too.
fn appendix_b() -> impl Iterator<Item = (u64, &'static str)> {
    include_str!("../data/rfc8785-appendix-b.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(bits, want)| (u64::from_str_radix(bits, 16).unwrap(), want))
}

#[test]
fn props_rfc8785_vectors() {
    for (name, input, want) in VECTORS {
        let v: Value = serde_json::from_str(input).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&canonical_value(&v).unwrap(), want, "{name}");
        assert_eq!(
            &serde_jcs::to_string(&v).unwrap(),
            want,
            "{name} (serde_jcs)"
        );
    }
    for (bits, want) in appendix_b() {
        let v = json!(f64::from_bits(bits));
        assert_eq!(&canonical_value(&v).unwrap(), want, "{bits:#018x}");
        assert_eq!(&serde_jcs::to_string(&v).unwrap(), want, "{bits:#018x}");
    }
    // Appendix B's NaN and Infinity rows: not JSON numbers, so no argument can hold one.
    for bits in [0x7fffffffffffffff_u64, 0x7ff0000000000000] {
        assert!(serde_json::Number::from_f64(f64::from_bits(bits)).is_none());
    }
}

// ---- (3) the condition matcher and the policy loader never panic ----

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
        "[a-c]{0,3}".prop_map(Value::String),
    ]
}

/// Regex-ish text: valid and invalid patterns, anchors, groups, repetitions, classes.
fn pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-c^$.*+?()|{}0-9\\[\\]\\\\-]{0,16}",
        text(),
        Just("(a+)+$".to_string()),
        Just("a{1000}{1000}".to_string()),
    ]
}

fn operand() -> impl Strategy<Value = Value> {
    prop_oneof![
        scalar(),
        prop::collection::vec(scalar(), 0..4).prop_map(Value::Array),
        pattern().prop_map(Value::String),
        document(),
    ]
}

fn matcher() -> impl Strategy<Value = Value> {
    let op = prop_oneof![
        Just("gt"),
        Just("gte"),
        Just("lt"),
        Just("lte"),
        Just("ne"),
        Just("pattern"),
        Just("in"),
        Just("not_in"),
        Just("bogus"),
    ]
    .prop_map(String::from);
    prop_oneof![scalar(), object(op, operand(), 4), document()]
}

fn arg_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-c]{1,2}",
        2 => "[a-c]{1,2}\\.[a-c0-2]{1,2}",
        1 => text(),
    ]
}

fn condition() -> impl Strategy<Value = Value> {
    let group = prop_oneof![
        8 => object(arg_key(), matcher(), 4).prop_map(|m| json!({"args_match": m})),
        1 => object("[a-z_]{1,10}", document(), 3),
        1 => document(),
    ]
    .boxed();
    prop_oneof![
        group.clone(),
        prop::collection::vec(group, 0..4).prop_map(Value::Array),
    ]
}

fn arguments() -> impl Strategy<Value = Value> {
    object("[a-c]{1,2}", document(), 6)
}

proptest! {
    #![proptest_config(config(256))]

    /// Any condition either fails to parse or evaluates, twice alike, without panicking; a
    /// match always names at least one clause.
    #[test]
    fn props_condition_matcher_never_panics(c in condition(), args in arguments()) {
        if let Ok(cond) = Condition::parse(&c) {
            let first = cond.evaluate(&args);
            match &first {
                Outcome::Match(groups) => {
                    prop_assert!(!groups.is_empty() && groups.iter().all(|g| !g.is_empty()));
                }
                Outcome::CannotEvaluate(why) => prop_assert!(!why.is_empty()),
                Outcome::NoMatch => {}
            }
            prop_assert_eq!(first, cond.evaluate(&args));
        }
    }
}

const AGENT: &str = r#"schema_version: "1.0.0"
metadata:
  id: treasury_bot
  name: Treasury Bot
  labels: {team: treasury}
constraints:
  governance_policies:
    - policy_ref: acme.finance.payments-v1
action_space:
  local_tools:
    - alias: transfer
      approval:
        message_template: "Send {{tool_args.amount}} to {{tool_args.to}}?"
        condition:
          - args_match: {amount: {gt: 1000}, currency: {in: [EUR, USD]}}
          - args_match: {to: {pattern: "^ext-"}}
    - alias: wipe
      approval: {}
  mcp_servers:
    - alias: fs
      approval: true
      allowed_tools:
        - name: read_file
          approval: false
        - write_file
  remote_agents:
    - alias: payments
      allowed_skills: [lookup, {id: pay, approval: true}]
"#;

const GOV: &str = r#"policies:
  - id: acme.finance.payments-v1
    selector: {labels: {team: treasury}}
    rules:
      - tool: transfer
        risk_tier: R3
        irreversible: true
        timeout_seconds: 300
        approvers: [finance-admin]
        on_timeout: {escalate_to: [cfo], after_seconds: 600}
        thresholds:
          rate: {max: 5, per_seconds: 60}
          cost: {argument: amount, max_per_session: 10000}
          output_bytes: 65536
        scope:
          paths: {arguments: [path], roots: [/srv/data]}
          domains: {arguments: [url], allow: ["*.example.com"]}
      - tool: "write_*"
        server: fs
        deny:
          condition: {args_match: {path: {pattern: "^/etc/"}}}
          message_template: "never {{tool_args.path}}"
"#;

/// YAML-shaped fragments to splice into the files: structure, anchors, tags, extreme numbers.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop_oneof![
            Just(": "),
            Just("- "),
            Just("{"),
            Just("}"),
            Just("["),
            Just("]"),
            Just("\n"),
            Just("  "),
            Just("&a "),
            Just("*a"),
            Just("!!str "),
            Just("!!binary "),
            Just("<<: "),
            Just("? "),
            Just("|\n"),
            Just("'"),
            Just("\""),
            Just("#"),
            Just("18446744073709551615"),
            Just("-1"),
            Just("0"),
            Just(".inf"),
            Just(".nan"),
            Just("~"),
            Just("1e400"),
        ]
        .prop_map(String::from),
        text(),
    ]
}

/// A mutation: at a position, delete some characters and insert a fragment.
fn mutations() -> impl Strategy<Value = Vec<(prop::sample::Index, usize, String)>> {
    prop::collection::vec((any::<prop::sample::Index>(), 0usize..8, fragment()), 1..6)
}

fn mutate(base: &str, muts: &[(prop::sample::Index, usize, String)]) -> String {
    let mut chars: Vec<char> = base.chars().collect();
    for (at, del, ins) in muts {
        let i = at.index(chars.len() + 1);
        let end = (i + del).min(chars.len());
        chars.splice(i..end, ins.chars());
    }
    chars.into_iter().collect()
}

/// Loads the two files and, when they load, evaluates a few calls on the result.
fn load_and_use(agent: String, gov: String) {
    let loaded = Registry::load(&[("a.agf.yaml".into(), agent)], &[("g.yaml".into(), gov)]);
    if let Ok(reg) = loaded {
        for (tool, server, args) in [
            (
                "transfer",
                None,
                json!({"amount": 5000, "currency": "EUR", "to": "ext-1"}),
            ),
            ("wipe", None, json!({})),
            ("write_file", Some("fs"), json!({"path": "/etc/x"})),
            ("read_file", Some("fs"), json!({"path": 1})),
        ] {
            let call = ToolCall::new(tool, server.map(String::from), args).unwrap();
            let _ = evaluate(&reg, "treasury_bot", &call);
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Mutated agent and governance files load or are refused; none panics the loader or the
    /// gatekeeper that reads what loaded.
    #[test]
    fn props_policy_loader_never_panics_on_mutated_yaml(
        a in mutations(),
        g in mutations(),
        which in 0u8..3,
    ) {
        let agent = if which != 1 { mutate(AGENT, &a) } else { AGENT.to_string() };
        let gov = if which != 0 { mutate(GOV, &g) } else { GOV.to_string() };
        load_and_use(agent, gov);
    }

    /// Arbitrary text as either file is refused with a reason, never a panic.
    #[test]
    fn props_policy_loader_never_panics_on_random_text(
        a in prop_oneof![text(), "\\PC{0,200}", prop::collection::vec(fragment(), 0..30).prop_map(|v| v.concat())],
        g in prop_oneof![text(), "\\PC{0,200}", prop::collection::vec(fragment(), 0..30).prop_map(|v| v.concat())],
    ) {
        load_and_use(a.clone(), GOV.to_string());
        load_and_use(AGENT.to_string(), g.clone());
        load_and_use(a, g);
    }

    /// The loader accepts a rule exactly when every duration and count is inside its bound
    /// (docs/policy.md "Bounds"), whatever the values.
    #[test]
    fn props_policy_bounds_are_enforced_exactly(
        timeout in bound_probe(MAX_WAIT_SECONDS),
        after in bound_probe(MAX_WAIT_SECONDS),
        max in bound_probe(MAX_RATE_COUNT),
        window in bound_probe(MAX_RATE_WINDOW_SECONDS),
        bytes in bound_probe(MAX_OUTPUT_BYTES),
    ) {
        let gov = format!(
            "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        timeout_seconds: {timeout}\n        on_timeout: {{escalate_to: [cfo], after_seconds: {after}}}\n        thresholds: {{rate: {{max: {max}, per_seconds: {window}}}, output_bytes: {bytes}}}\n"
        );
        let ok = |v: u64, hi: u64| (1..=hi).contains(&v);
        let want = ok(timeout, MAX_WAIT_SECONDS)
            && ok(after, MAX_WAIT_SECONDS)
            && ok(max, MAX_RATE_COUNT)
            && ok(window, MAX_RATE_WINDOW_SECONDS)
            && ok(bytes, MAX_OUTPUT_BYTES);
        let got = Registry::load(&[], &[("g.yaml".into(), gov)]);
        match got {
            Ok(_) => prop_assert!(want),
            Err(e) => {
                prop_assert!(!want, "{}", e);
                prop_assert!(e.to_string().starts_with("g.yaml:4: policy `a.b-v1` rules[0]: "), "{}", e);
                prop_assert!(e.to_string().contains("is out of range"), "{}", e);
            }
        }
    }
}

/// Values around a bound `1..=hi`: the edges, just outside, and anywhere in `u64`.
fn bound_probe(hi: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..=2,
        hi - 1..=hi + 1,
        1..=hi,
        any::<u64>(),
        Just(u64::MAX),
    ]
}

// ---- (4) token parsing never panics ----

fn claims() -> impl Strategy<Value = TokenClaims> {
    let t = || "\\PC{1,40}";
    (
        (t(), t(), t(), t()),
        "[0-9a-f]{64}",
        any::<i64>(),
        any::<i64>(),
    )
        .prop_map(
            |((jti, sub, aid, scope), call_hash, iat, exp)| TokenClaims {
                jti,
                sub,
                aid,
                call_hash,
                scope,
                iat,
                exp,
            },
        )
}

fn signer() -> token::TokenSigner {
    token::TokenSigner::from_seed(&[7u8; 32])
}

fn keys_of(s: &token::TokenSigner) -> token::Jwks {
    token::Jwks {
        keys: vec![s.public_key().clone()],
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Arbitrary strings, and strings shaped like tokens, are refused without a panic.
    #[test]
    fn props_token_verify_never_panics(
        s in prop_oneof![
            text(),
            "\\PC{0,120}",
            "eyJ[A-Za-z0-9_=+/.-]{0,80}",
            "[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_-]{0,90}",
        ],
        seed in any::<[u8; 32]>(),
    ) {
        let s2 = token::TokenSigner::from_seed(&seed);
        prop_assert!(token::verify(&keys_of(&s2), &s).is_err());
    }

    /// A signed token verifies to its claims; any edit of one character, or another key,
    /// never verifies to different claims.
    #[test]
    fn props_tokens_round_trip_and_resist_edits(
        c in claims(),
        at in any::<prop::sample::Index>(),
        ch in any::<char>(),
    ) {
        let (signer, other) = (signer(), token::TokenSigner::from_seed(&[8u8; 32]));
        let key = keys_of(&signer);
        let t = signer.sign(&c);
        prop_assert_eq!(token::verify(&key, &t), Ok(c.clone()));
        prop_assert!(token::verify(&keys_of(&other), &t).is_err());
        let mut chars: Vec<char> = t.chars().collect();
        let i = at.index(chars.len());
        chars[i] = ch;
        let edited: String = chars.into_iter().collect();
        match token::verify(&key, &edited) {
            Ok(got) => prop_assert_eq!(got, c),
            Err(_) => prop_assert_ne!(edited, t),
        }
    }
}
