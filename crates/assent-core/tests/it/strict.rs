//! Properties of strict JSON reading (issue 10 §1–2, §19): whatever text a client sends, what
//! is gated and forwarded is one unambiguous value. A text with a duplicate key is always
//! refused; a text without one reads the same to a first-wins and a last-wins parser, and the
//! serialisation the proxy forwards reads back as exactly the value that was gated.

use assent_core::json::{StrictJsonError, check, number_is_exact, parse_value};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// A JSON document as text is written, so objects may repeat keys.
#[derive(Debug, Clone)]
enum Raw {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<Raw>),
    Obj(Vec<(String, Raw)>),
}

fn raw() -> impl Strategy<Value = Raw> {
    let leaf = prop_oneof![
        Just(Raw::Null),
        any::<bool>().prop_map(Raw::Bool),
        (-1_000_000i64..1_000_000).prop_map(|n| Raw::Num(n.to_string())),
        (-1e9f64..1e9).prop_map(|f| Raw::Num(format!("{f:?}"))),
        prop_oneof![
            Just("9007199254740993".to_string()),
            Just("18446744073709551616".to_string()),
            Just("1e400".to_string()),
            Just("0.1".to_string()),
            Just("-0".to_string()),
        ]
        .prop_map(Raw::Num),
        "[a-c\u{e9}\"\\\\]{0,4}".prop_map(Raw::Str),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Raw::Arr),
            // Keys from a small alphabet, so duplicates are common.
            prop::collection::vec(("[ab]{1,2}", inner), 0..4).prop_map(Raw::Obj),
        ]
    })
}

fn render(r: &Raw) -> String {
    match r {
        Raw::Null => "null".into(),
        Raw::Bool(b) => b.to_string(),
        Raw::Num(n) => n.clone(),
        Raw::Str(s) => Value::String(s.clone()).to_string(),
        Raw::Arr(a) => format!("[{}]", a.iter().map(render).collect::<Vec<_>>().join(",")),
        Raw::Obj(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), render(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

fn has_duplicate(r: &Raw) -> bool {
    match r {
        Raw::Arr(a) => a.iter().any(has_duplicate),
        Raw::Obj(o) => {
            let mut seen = std::collections::HashSet::new();
            o.iter().any(|(k, _)| !seen.insert(k)) || o.iter().any(|(_, v)| has_duplicate(v))
        }
        _ => false,
    }
}

fn has_inexact(r: &Raw) -> bool {
    match r {
        Raw::Num(n) => !number_is_exact(n),
        Raw::Arr(a) => a.iter().any(has_inexact),
        Raw::Obj(o) => o.iter().any(|(_, v)| has_inexact(v)),
        _ => false,
    }
}

/// How a parser that keeps the FIRST of duplicate keys reads the document.
fn first_wins(r: &Raw) -> Value {
    match r {
        Raw::Null => Value::Null,
        Raw::Bool(b) => Value::Bool(*b),
        Raw::Num(n) => serde_json::from_str(n).unwrap(),
        Raw::Str(s) => Value::String(s.clone()),
        Raw::Arr(a) => Value::Array(a.iter().map(first_wins).collect()),
        Raw::Obj(o) => {
            let mut m = Map::new();
            for (k, v) in o {
                m.entry(k.clone()).or_insert_with(|| first_wins(v));
            }
            Value::Object(m)
        }
    }
}

fn config() -> ProptestConfig {
    let base = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_some() {
        base
    } else {
        ProptestConfig { cases: 512, ..base }
    }
}

proptest! {
    #![proptest_config(config())]

    /// What passes the check reads the same to every parser, and its serialisation (what the
    /// stdio proxy forwards) reads back as the very value that was gated.
    #[test]
    fn the_forwarded_value_is_the_gated_value(doc in raw()) {
        let text = render(&doc);
        match check(text.as_bytes()) {
            Ok(()) => {
                prop_assert!(!has_duplicate(&doc) && !has_inexact(&doc), "{text}");
                let gated = parse_value(text.as_bytes()).unwrap();
                prop_assert_eq!(&gated, &first_wins(&doc), "first-wins reads {} differently", text);
                let forwarded = gated.to_string();
                prop_assert_eq!(parse_value(forwarded.as_bytes()).unwrap(), gated);
            }
            Err(StrictJsonError::DuplicateKey { .. }) => prop_assert!(has_duplicate(&doc), "{text}"),
            Err(StrictJsonError::InexactNumber { text: n, .. }) => {
                prop_assert!(!number_is_exact(&n), "{text}")
            }
            Err(e) => prop_assert!(false, "{text}: {e}"),
        }
    }

    /// Two number texts that both pass and share a canonical form denote the same value.
    #[test]
    fn passing_numbers_never_share_a_canonical_form_with_a_different_value(
        a in -1e6f64..1e6, digits in 0usize..25
    ) {
        let text = format!("{a:.digits$}");
        if number_is_exact(&text) {
            let v: Value = serde_json::from_str(&text).unwrap();
            let canonical = assent_core::canonical::canonical_value(&v).unwrap();
            // The canonical form passes too, and parses back to the same double.
            prop_assert!(number_is_exact(&canonical), "{text} -> {canonical}");
            let back: f64 = canonical.parse().unwrap();
            prop_assert_eq!(back, text.parse::<f64>().unwrap());
        }
    }
}

/// An object of many keys: a duplicate is found whether it repeats a key seen while the keys
/// were compared one by one or after they moved to a hash set (past 16), and names the second
/// occurrence; the same keys without a repeat pass.
#[test]
fn a_duplicate_among_many_keys_is_found_on_either_side_of_the_switch() {
    for n in [1usize, 15, 16, 17, 40, 1000] {
        let keys: Vec<String> = (0..n).map(|i| format!("\"k{i}\":{i}")).collect();
        let fine = format!("{{{}}}", keys.join(","));
        check(fine.as_bytes()).unwrap();
        for again in [0, n / 2, n - 1] {
            let text = format!("{{{},\"k{again}\":true}}", keys.join(","));
            assert_eq!(
                check(text.as_bytes()).unwrap_err(),
                StrictJsonError::DuplicateKey {
                    path: format!("/k{again}")
                },
                "{n} keys, k{again} again"
            );
        }
    }
}
