//! How a `scope` check reads the arguments it checks (seed 002 "scope drift"): the string
//! values of each named argument, and every way that reading fails closed — an argument of
//! another shape, one named in another case (found by review), or one holding more values than
//! are checked per call (found by review).
//!
//! Found by review: an argument missing from the call passed the scope, so
//! `{"PATH": "/etc/shadow"}` against `scope.paths.arguments: [path]` ran unchecked, while a
//! tool that decodes its arguments case-insensitively (Go's `encoding/json`, the threat
//! `canonical.rs` names) reads `/etc/shadow` as its `path`. Now an argument that is absent but
//! spelt in another case (or compatibility form: [`folded_key`]) cannot be checked, and the
//! call is held. And an array argument of any length was checked value by value, each a walk of
//! the filesystem inside the proposal's write transaction: past [`MAX_SCOPE_VALUES`] values the
//! call is held without checking any.

use crate::arg_path::lookup;
use crate::canonical::{Walk, folded_key, folded_walk, reached_through_dotted, type_name};
use serde_json::Value;

/// The most values of one scope argument (an array of paths or URLs) a call's scope check
/// looks at; a call with more is held for a person, none of them checked (each path costs up
/// to thousands of filesystem lookups inside the proposal's write transaction).
pub const MAX_SCOPE_VALUES: usize = 64;

/// What a scope check reads from one argument.
#[derive(Debug, PartialEq)]
pub(super) enum Values<'a> {
    /// Its string values.
    Strings(Vec<&'a str>),
    /// Absent in every spelling.
    Absent,
    /// Why it cannot be checked (another shape, another spelling, too many values).
    Unchecked(String),
}

/// The dotted path of real keys under which a decoder that ignores case and compatibility
/// forms finds argument `key` of `args`: the literal key (matched exactly or else by
/// [`folded_key`]) first, then `key`'s dotted parts as [`folded_walk`] follows them; `None`
/// when there is none. Only asked when [`lookup`] found nothing, so any match has a part in
/// another spelling.
pub(super) fn folded_lookup(args: &Value, key: &str) -> Option<String> {
    let top = args.as_object()?;
    let want = folded_key(key);
    let literal = top.get_key_value(key).map(|(k, _)| k);
    if let Some(k) = literal.or_else(|| top.keys().find(|k| folded_key(k) == want)) {
        return Some(k.clone());
    }
    match folded_walk(args, key) {
        Walk::Found(found, _) => Some(found),
        Walk::Stopped(..) | Walk::Absent => None,
    }
}

/// The string values of argument `key` (a string, or an array of at most
/// [`MAX_SCOPE_VALUES`] strings), or why it cannot be checked: another shape (`null`, a
/// number, an object, an array holding one), more values than are checked (`noun` names them:
/// `paths`, `URLs`), or absent under `key` but present in another spelling. Absent in every
/// spelling: [`Values::Absent`]. A dotted argument whose path stops, in any spelling, at a value it
/// cannot enter (an array without that index, a string, a number, `null`) cannot be checked.
pub(super) fn string_values<'a>(args: &'a Value, key: &str, noun: &str) -> Values<'a> {
    let Some(v) = lookup(args, key) else {
        return match folded_lookup(args, key) {
            Some(found) => Values::Unchecked(format!(
                "argument `{key}` is missing but the call holds `{found}`, which a tool that ignores case reads as `{key}`"
            )),
            // Found by review: `files.path` against `{"files": [{"path": "/etc/shadow"}]}`
            // (or a string, or null) was absent, so passed; the tool reads the path all the
            // same. A walk that stops at a value it cannot enter holds the call.
            None => match folded_walk(args, key) {
                Walk::Stopped(at, v) if !at.is_empty() => Values::Unchecked(format!(
                    "argument `{key}` is missing but the call holds `{at}` as {}, not an object holding the rest of the path",
                    type_name(v)
                )),
                // Found by review: `{"req": {"file.path": "/etc/shadow"}}` was absent to a
                // scope on `req.file.path`, while a tool expanding dotted keys reads it so.
                _ => match reached_through_dotted(args, key) {
                    Some(at) => Values::Unchecked(format!(
                        "argument `{key}` is missing but the call holds {at} on its path through a key with a dot, which a tool expanding dotted keys reads as `{key}`"
                    )),
                    None => Values::Absent,
                },
            },
        };
    };
    match v {
        Value::String(s) => Values::Strings(vec![s.as_str()]),
        Value::Array(a) if a.len() > MAX_SCOPE_VALUES => Values::Unchecked(format!(
            "argument `{key}` holds too many {noun} to check ({} > {MAX_SCOPE_VALUES})",
            a.len()
        )),
        Value::Array(a) => match a.iter().map(Value::as_str).collect::<Option<Vec<_>>>() {
            Some(v) => Values::Strings(v),
            None => Values::Unchecked(format!("argument `{key}` holds a non-string item")),
        },
        Value::Null => Values::Unchecked(format!("argument `{key}` is null, not a string")),
        _ => Values::Unchecked(format!("argument `{key}` is not a string")),
    }
}

/// The violations of a `scope` check (`scope` is "path scope" or "domain scope", `noun`
/// "paths" or "URLs") over the arguments `keys` (their names, and whether each must be
/// present): `check(key, value)` of each string value in order, and for an argument
/// [`string_values`] cannot read, or a required one absent in every spelling, that it cannot
/// be checked.
pub(super) fn violations(
    args: &Value,
    (keys, required): (&[String], bool),
    scope: &str,
    noun: &str,
    mut check: impl FnMut(&str, &str) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for key in keys {
        match string_values(args, key, noun) {
            // An empty list names no target either (found by review: `"cwd": []` passed a
            // required `cwd`, and a lenient tool ran in its default directory).
            Values::Strings(values) if values.is_empty() && required => out.push(format!(
                "{scope}: argument `{key}` holds no {noun} (the rule requires it), so it cannot be checked"
            )),
            Values::Strings(values) => {
                out.extend(values.into_iter().filter_map(|s| check(key, s)));
            }
            Values::Absent if required => out.push(format!(
                "{scope}: argument `{key}` is missing (the rule requires it), so it cannot be checked"
            )),
            Values::Absent => {}
            Values::Unchecked(e) => out.push(format!("{scope}: {e}, so it cannot be checked")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn unchecked(args: Value, key: &str) -> String {
        match string_values(&args, key, "paths") {
            Values::Unchecked(why) => why,
            other => panic!("{key} in {args}: {other:?}"),
        }
    }

    #[test]
    fn an_argument_spelt_in_another_case_cannot_be_checked() {
        let why = unchecked(json!({"PATH": "/etc/shadow"}), "path");
        assert!(
            why.contains("`path` is missing") && why.contains("`PATH`"),
            "{why}"
        );
        // Compatibility forms and Unicode case too (the Kelvin sign folds to `k`).
        assert!(unchecked(json!({"\u{212A}ey": "/x"}), "key").contains("\u{212A}ey"));
        // Each part of a dotted argument, and an array index between them.
        let why = unchecked(
            json!({"Req": {"files": [{"Path": "/etc"}]}}),
            "req.files.0.path",
        );
        assert!(why.contains("`Req.files.0.Path`"), "{why}");
        // A literal key holding a dot, in another case.
        assert!(unchecked(json!({"A.Path": "/etc"}), "a.path").contains("`A.Path`"));
    }

    /// Attack: `scope.paths.arguments: [files.path]`; the agent sends `files` as an array of
    /// objects (or a string, or null), the path lookup finds nothing, and the call passed.
    #[test]
    fn a_dotted_argument_whose_path_stops_at_another_shape_cannot_be_checked() {
        for (files, what) in [
            (json!([{"path": "/etc/shadow"}]), "an array"),
            (json!("/etc/shadow"), "a string"),
            (json!(null), "null"),
            (json!(7), "a number"),
        ] {
            let why = unchecked(json!({ "files": files }), "files.path");
            assert!(
                why.contains("`files.path` is missing")
                    && why.contains(&format!("`files` as {what}")),
                "{why}"
            );
        }
        // Another spelling, deeper, and an index past the array's end.
        let why = unchecked(json!({"Req": {"Files": "/etc"}}), "req.files.path");
        assert!(why.contains("`Req.Files` as a string"), "{why}");
        assert!(unchecked(json!({"f": ["/x"]}), "f.1").contains("`f` as an array"));
    }

    #[test]
    fn an_argument_absent_in_every_spelling_or_present_as_named_is_read() {
        let strings = |args: Value, key: &str| match string_values(&args, key, "paths") {
            Values::Strings(v) => v.into_iter().map(String::from).collect::<Vec<_>>(),
            Values::Absent => Vec::new(),
            other => panic!("{key} in {args}: {other:?}"),
        };
        assert!(strings(json!({"other": "/etc"}), "path").is_empty());
        // A dotted argument absent at an object on the way, in every spelling, is absent.
        assert!(strings(json!({"files": {"p": "/etc"}}), "files.path").is_empty());
        assert!(strings(json!({"other": [1]}), "files.path").is_empty());
        assert_eq!(
            strings(json!({"path": "/srv/a", "Other": 1}), "path"),
            ["/srv/a"]
        );
        assert_eq!(
            strings(json!({"a": {"p": ["/x", "/y"]}}), "a.p"),
            ["/x", "/y"]
        );
        let at_cap = json!({ "path": vec!["/x"; MAX_SCOPE_VALUES] });
        assert_eq!(strings(at_cap, "path").len(), MAX_SCOPE_VALUES);
    }

    /// Attack (found by review): `scope.paths: {arguments: [cwd], roots: [/srv/work]}` on
    /// `run_command`; the agent leaves `cwd` out and the tool runs in a default directory of
    /// its own, outside the roots, while the absent argument passed. With `required: true` a
    /// call missing it in every spelling is held; without, only the arguments present are
    /// checked (a rule may name arguments only some of its tools take).
    #[test]
    fn a_required_argument_left_out_is_held_an_optional_one_is_not() {
        let keys = vec!["cwd".to_string()];
        // Left out, or an empty list (no target either): held when required, passed when not.
        for (args, why) in [
            (json!({"command": "cat ~/.ssh/id_rsa"}), "is missing"),
            (json!({"cwd": []}), "holds no paths"),
        ] {
            let held = violations(&args, (&keys, true), "path scope", "paths", |_, _| None);
            let want = format!(
                "path scope: argument `cwd` {why} (the rule requires it), so it cannot be checked"
            );
            assert_eq!(held, [want]);
            let passed = violations(&args, (&keys, false), "path scope", "paths", |_, _| None);
            assert!(passed.is_empty(), "{passed:?}");
        }
        // Present, it is checked as ever; required or not.
        let args = json!({"cwd": "/etc"});
        let outside = |_: &str, s: &str| Some(format!("{s} is outside"));
        for required in [true, false] {
            let found = violations(&args, (&keys, required), "path scope", "paths", outside);
            assert_eq!(found, ["/etc is outside"]);
        }
    }

    #[test]
    fn an_argument_of_another_shape_cannot_be_checked() {
        for v in [
            json!(null),
            json!(3),
            json!({"p": "/x"}),
            json!(["/x", 1]),
            json!(true),
        ] {
            unchecked(json!({ "path": v }), "path");
        }
    }

    #[test]
    fn more_values_than_the_cap_are_not_checked_one_by_one() {
        let over = vec!["/x"; MAX_SCOPE_VALUES + 1];
        let why = unchecked(json!({ "path": over }), "path");
        assert!(why.contains("too many paths to check (65 > 64)"), "{why}");
        let mut looked = 0;
        let v = violations(
            &json!({ "path": vec!["/x"; 10_000] }),
            (&["path".into()], false),
            "path scope",
            "paths",
            |_, _| {
                looked += 1;
                None
            },
        );
        assert_eq!((looked, v.len()), (0, 1), "{v:?}");
    }
}
