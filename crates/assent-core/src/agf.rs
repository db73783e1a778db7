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

fn walk(root: &Value, node: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let mut bs = Vec::new();
    branches(root, node, value, &mut bs);
    match value {
        Value::Object(map) => walk_object(root, &bs, map, path, out),
        Value::Array(items) => {
            let item_schema = bs.iter().find_map(|b| b.get("items"));
            if let Some(s) = item_schema {
                for (i, v) in items.iter().enumerate() {
                    walk(root, s, v, &format!("{path}[{i}]"), out);
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
    path: &str,
    out: &mut Vec<String>,
) {
    // Only objects the schema describes with `properties` are checked.
    if !bs.iter().any(|b| b.get("properties").is_some()) {
        return;
    }
    for (k, v) in map {
        let child = format!("{}{k}", if path.is_empty() { "" } else { "." });
        let child = format!("{path}{child}");
        let prop = bs
            .iter()
            .find_map(|b| b.get("properties").and_then(|p| p.get(k)));
        match prop {
            Some(s) => walk(root, s, v, &child, out),
            None => match bs.iter().find_map(|b| b.get("additionalProperties")) {
                Some(s @ Value::Object(_)) => walk(root, s, v, &child, out),
                Some(Value::Bool(true)) => {}
                _ => out.push(child),
            },
        }
    }
}

/// The dotted paths (`action_space.local_tools[1].aproval`) of the fields in an Agent Format
/// document that the Agent Format 1.0 schema does not define, ordered by key at each level.
pub fn unknown_fields(doc: &Value) -> Vec<String> {
    let root = schema();
    let mut out = Vec::new();
    walk(root, root, doc, "", &mut out);
    out
}

/// The 1-based line of the first `key:` in `text` (a YAML mapping key, block or flow style),
/// to point a warning at it.
pub fn line_of_key(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ");
            t.starts_with(&format!("{key}:"))
                || l.contains(&format!("{{{key}:"))
                || l.contains(&format!("{{ {key}:"))
                || l.contains(&format!(", {key}:"))
        })
        .and_then(|i| u64::try_from(i).ok())
        .map(|i| i.saturating_add(1))
}
