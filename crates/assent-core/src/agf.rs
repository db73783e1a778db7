//! Unknown fields in Agent Format files (Agent Format "forward compatibility": parsers must not
//! reject unknown fields, should warn, and tooling should offer a strict mode that catches
//! typos such as `aproval: true`).
//!
//! A field is unknown when the Agent Format 1.0 JSON Schema (vendored in
//! `spec/agent-format/agentformat-schema.json`) does not define it where it appears. The walk
//! follows `$ref`, picks the `oneOf` branch whose type fits the value, merges `allOf` branches
//! and applies an `if`/`then` branch when the `if` constants match (execution policy configs).
//! Keys under `additionalProperties` maps (e.g. `args_match`, `labels`) are never unknown.

use serde_json::{Map, Value};
use std::sync::OnceLock;

fn schema() -> &'static Value {
    static S: OnceLock<Value> = OnceLock::new();
    S.get_or_init(|| {
        serde_json::from_str(include_str!(
            "../../../spec/agent-format/agentformat-schema.json"
        ))
        .expect("vendored Agent Format schema is JSON")
    })
}

fn resolve<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    for _ in 0..32 {
        match node.get("$ref").and_then(Value::as_str) {
            Some(r) => match r
                .strip_prefix("#/")
                .map(|p| p.split('/').collect::<Vec<_>>())
            {
                Some(parts) => {
                    let mut cur = root;
                    for p in parts {
                        match cur.get(p) {
                            Some(n) => cur = n,
                            None => return node,
                        }
                    }
                    node = cur;
                }
                None => return node,
            },
            None => return node,
        }
    }
    node
}

fn type_fits(node: &Value, value: &Value) -> bool {
    let want = |t: &str| match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "null" => value.is_null(),
        _ => false,
    };
    match node.get("type") {
        Some(Value::String(t)) => want(t),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).any(want),
        _ => true,
    }
}

/// The object schemas that describe `value` at `node`: the node itself, the fitting `oneOf` /
/// `anyOf` branch, every `allOf` branch and the `then` of each matching `if`.
fn branches<'a>(root: &'a Value, node: &'a Value, value: &Value, out: &mut Vec<&'a Value>) {
    let node = resolve(root, node);
    out.push(node);
    for key in ["oneOf", "anyOf"] {
        if let Some(list) = node.get(key).and_then(Value::as_array)
            && let Some(b) = list.iter().find(|b| type_fits(resolve(root, b), value))
        {
            branches(root, b, value, out);
        }
    }
    if let Some(list) = node.get("allOf").and_then(Value::as_array) {
        for b in list {
            let b = resolve(root, b);
            if let Some(cond) = b.get("if") {
                let holds = cond
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|props| {
                        props
                            .iter()
                            .all(|(k, s)| s.get("const").is_none_or(|c| value.get(k) == Some(c)))
                    });
                if holds && let Some(then) = b.get("then") {
                    branches(root, then, value, out);
                }
            } else {
                branches(root, b, value, out);
            }
        }
    }
}

/// One unknown field: its dotted path and, when the text could be read for lines, the 1-based
/// line of its key.
type Found = (String, Option<u64>);

fn walk(
    root: &Value,
    node: &Value,
    value: &Value,
    at: (&str, Option<&Located>),
    out: &mut Vec<Found>,
) {
    let (path, loc) = at;
    let mut bs = Vec::new();
    branches(root, node, value, &mut bs);
    match value {
        Value::Object(map) => walk_object(root, &bs, map, at, out),
        Value::Array(items) => {
            let item_schema = bs.iter().find_map(|b| b.get("items"));
            if let Some(s) = item_schema {
                for (i, v) in items.iter().enumerate() {
                    let kid = loc.and_then(|l| l.item(i));
                    walk(root, s, v, (&format!("{path}[{i}]"), kid), out);
                }
            }
        }
        _ => {}
    }
}

fn walk_object(
    root: &Value,
    bs: &[&Value],
    map: &Map<String, Value>,
    (path, loc): (&str, Option<&Located>),
    out: &mut Vec<Found>,
) {
    // Only objects the schema describes with `properties` are checked.
    if !bs.iter().any(|b| b.get("properties").is_some()) {
        return;
    }
    for (k, v) in map {
        let child = format!("{path}{}{k}", if path.is_empty() { "" } else { "." });
        let (line, kid) = match loc.and_then(|l| l.key(k)) {
            Some((line, kid)) => (Some(line), Some(kid)),
            None => (None, None),
        };
        let prop = bs
            .iter()
            .find_map(|b| b.get("properties").and_then(|p| p.get(k)));
        match prop {
            Some(s) => walk(root, s, v, (&child, kid), out),
            None => match bs.iter().find_map(|b| b.get("additionalProperties")) {
                Some(s @ Value::Object(_)) => walk(root, s, v, (&child, kid), out),
                Some(Value::Bool(true)) => {}
                _ => out.push((child, line)),
            },
        }
    }
}

/// The dotted paths (`action_space.local_tools[1].aproval`) of the fields in an Agent Format
/// document that the Agent Format 1.0 schema does not define, ordered by key at each level.
pub fn unknown_fields(doc: &Value) -> Vec<String> {
    let root = schema();
    let mut out = Vec::new();
    walk(root, root, doc, ("", None), &mut out);
    out.into_iter().map(|(path, _)| path).collect()
}

/// [`unknown_fields`] of `doc`, the document parsed from YAML `text`, each with the 1-based
/// line of its key in `text` as the YAML parser saw it (so an unknown `id` under
/// `constraints.governance_policies[0]` is at its own line, not at the first `id:` of the
/// file). The line is `None` when `text` cannot be read for lines. One pass over the text
/// and one over the document: the cost grows with the file's size, not with the number of
/// unknown fields times its lines.
pub fn unknown_fields_at(text: &str, doc: &Value) -> Vec<(String, Option<u64>)> {
    let located = crate::yaml::from_str::<Located>(text).ok();
    let root = schema();
    let mut out = Vec::new();
    walk(root, root, doc, ("", located.as_ref()), &mut out);
    out
}

/// A YAML node with where its children are: the lines of a mapping's keys (and the nodes
/// under them), or a sequence's items. Scalars hold nothing.
#[derive(Default)]
struct Located {
    keys: std::collections::HashMap<String, (u64, Located)>,
    items: Vec<Located>,
}

impl Located {
    /// The line of mapping key `k` and the node under it.
    fn key(&self, k: &str) -> Option<(u64, &Located)> {
        self.keys.get(k).map(|(line, l)| (*line, l))
    }

    /// Item `i` of a sequence.
    fn item(&self, i: usize) -> Option<&Located> {
        self.items.get(i)
    }
}

impl<'de> serde::Deserialize<'de> for Located {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LocatedVisitor)
    }
}

struct LocatedVisitor;

impl<'de> serde::de::Visitor<'de> for LocatedVisitor {
    type Value = Located;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Located, A::Error> {
        let mut out = Located::default();
        while let Some(k) = m.next_key::<serde_saphyr::Spanned<String>>()? {
            let v: Located = m.next_value()?;
            out.keys.insert(k.value, (k.referenced.line(), v));
        }
        Ok(out)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Located, A::Error> {
        let mut out = Located::default();
        while let Some(v) = s.next_element::<Located>()? {
            out.items.push(v);
        }
        Ok(out)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Located, D::Error> {
        serde::Deserialize::deserialize(d)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_i128<E>(self, _: i128) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_u128<E>(self, _: u128) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_str<E>(self, _: &str) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_unit<E>(self) -> Result<Located, E> {
        Ok(Located::default())
    }
    fn visit_none<E>(self) -> Result<Located, E> {
        Ok(Located::default())
    }
}

#[cfg(test)]
mod tests {
    use super::unknown_fields_at;

    fn found(text: &str) -> Vec<(String, Option<u64>)> {
        let doc = serde_saphyr::from_str(text).unwrap();
        unknown_fields_at(text, &doc)
    }

    #[test]
    fn an_unknown_key_is_at_its_own_line_not_the_first_of_its_name() {
        let text = "metadata:\n  id: a\nconstraints:\n  governance_policies:\n    - policy_ref: p\n      id: x\n";
        assert_eq!(
            found(text),
            [("constraints.governance_policies[0].id".to_string(), Some(6))]
        );
    }

    #[test]
    fn flow_style_and_quoted_keys_have_their_lines() {
        let text = "metadata: {id: a}\n\"k1\": 1\naction_space:\n  local_tools: [{alias: pay,\n    aproval: true}]\n";
        assert_eq!(
            found(text),
            [
                ("action_space.local_tools[0].aproval".to_string(), Some(5)),
                ("k1".to_string(), Some(2)),
            ]
        );
    }
}
