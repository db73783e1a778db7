//! The refusal of arguments in which two places name one value once every key with a dot is
//! read as a path ([`check_unambiguous`]): a policy reads `order.amount` one way, a tool or
//! sub-agent that expands dotted keys (or decodes names case-insensitively) another. Part of
//! [`crate::canonical`]: what a checked [`super::ToolCall`] may hold.

use super::CanonicalError;
use super::fold::folded_key;
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};

/// Refuses `arguments` where two places name one value when every key is read with its dots
/// as a path and every name as a case-insensitive decoder reads it ([`folded_key`]): a
/// top-level `order.amount` beside `{"order": {"amount": …}}` (or `{"Order": {"AMOUNT": …}}`),
/// and at any depth, `{"order": {"details.amount": …, "details": {"amount": …}}}` or
/// `{"a.b.c": …, "a.b": {"c": …}}`. [`crate::arg_path::lookup`] reads a top-level literal key
/// first and every other dotted key not at all, while a tool may read the other place, so an
/// agent could show the policy a harmless value and run another. Found by review: only the
/// top level was checked, and only against real nested keys, so a dotted key one level down
/// or beside a dotted sibling passed. A dotted key whose path holds nothing else (`{"a.b": 1,
/// "a": {"c": 2}}`) is a plain call. Applied to every object a condition is read from as its
/// root (a delegation's `input` and `skill_args` too).
///
/// Errors: [`CanonicalError::AmbiguousKey`] (a top-level dotted key and the nested path of
/// that name), [`CanonicalError::FoldedAmbiguousKey`] (the same, spelt in another case or
/// Unicode form), [`CanonicalError::DottedAmbiguousKey`] (any other pair, as JSON pointers).
/// A key with a character whose compatibility form holds a dot (`．`, U+FF0E) counts as dotted.
/// Cost: one walk of the value, each key folded once, and nothing beyond a scan of the keys
/// when no key has a dot; a refusal walks it once more and keeps two routes.
pub(crate) fn check_unambiguous(arguments: &Value) -> Result<(), CanonicalError> {
    if !arguments.is_object() || !has_dotted_key(arguments) {
        return Ok(());
    }
    let mut seen = Seen::default();
    walk(arguments, SEED, false, &mut seen);
    let clash = seen.clash.or_else(|| {
        let dotted = &seen.dotted;
        seen.plain.iter().copied().find(|h| dotted.contains_key(h))
    });
    match clash {
        None => Ok(()),
        Some(h) => Err(describe(arguments, h)),
    }
}

/// The hash of the empty path.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// Whether any object in `v` has a key with a dot.
fn has_dotted_key(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, x)| has_dot(k) || has_dotted_key(x)),
        Value::Array(a) => a.iter().any(has_dotted_key),
        _ => false,
    }
}

/// The read paths' hashes of one value's places.
#[derive(Default)]
struct Seen {
    /// Places reached through a dotted key, by hash (the value is unused).
    dotted: HashMap<u64, ()>,
    /// The hashes of the places reached through none, in document order.
    plain: Vec<u64>,
    /// The first hash two places reached through dotted keys share.
    clash: Option<u64>,
}

impl Seen {
    /// Records a place reached by path hash `h` (through a dotted key when `dotted`).
    fn place(&mut self, h: u64, dotted: bool) {
        if !dotted {
            self.plain.push(h);
        } else if self.dotted.insert(h, ()).is_some() && self.clash.is_none() {
            self.clash = Some(h);
        }
    }
}

/// `h` extended by one part of a path (a key's dotted part, folded, or an array index).
fn extend(h: u64, part: &str) -> u64 {
    let mut s = DefaultHasher::new();
    s.write_u64(h);
    s.write(part.as_bytes());
    s.write_u8(0xff);
    s.finish()
}

/// Whether key `k` has a dot as a case-ignoring decoder reads it: a `.`, or a character whose
/// compatibility form holds one (U+FF0E `．`, U+2024 `․`, `⒈`…: found by review, `file．path`
/// was no dotted key, while a reader normalising names then expanding dots reads a path).
fn has_dot(k: &str) -> bool {
    use unicode_normalization::UnicodeNormalization as _;
    // Per character, so that no key is folded twice: a `.` never composes with what follows.
    k.chars()
        .any(|c| c == '.' || (!c.is_ascii() && std::iter::once(c).nfkc().any(|d| d == '.')))
}

/// The hash of the path `h` extended by key `k` folded ([`folded_key`]) and read with its dots
/// as a path.
fn extend_key(h: u64, k: &str) -> u64 {
    folded_key(k).split('.').fold(h, extend)
}

/// Records every place under `v` (reached by path hash `h`, through a dotted key when
/// `dotted`) in `seen`.
fn walk(v: &Value, h: u64, dotted: bool, seen: &mut Seen) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let (h, dotted) = (extend_key(h, k), dotted || has_dot(k));
                seen.place(h, dotted);
                walk(x, h, dotted, seen);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let h = extend(h, &i.to_string());
                seen.place(h, dotted);
                walk(x, h, dotted, seen);
            }
        }
        _ => {}
    }
}

/// The raw keys and indexes of the places under `v` whose path hashes to `want`, in document
/// order, each with whether it passes through a dotted key (`dotted`, for `v` itself): the
/// first two through a dotted key and the first through none, no more (found by review:
/// every place of the clashing path was copied, a 120 KB key each, and sorted by scanning
/// them, a gigabyte for one 250 KB call).
fn routes(v: &Value, h: u64, dotted: bool, route: &mut Vec<String>, want: u64, out: &mut Found) {
    let mut step = |part: &str, h: u64, dotted: bool, x: &Value, out: &mut Found| {
        if out.full() {
            return;
        }
        route.push(part.to_string());
        if h == want {
            out.add(route, dotted);
        }
        routes(x, h, dotted, route, want, out);
        route.pop();
    };
    match v {
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| step(k, extend_key(h, k), dotted || has_dot(k), x, out)),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| {
            let i = i.to_string();
            step(&i, extend(h, &i), dotted, x, out)
        }),
        _ => {}
    }
}

/// The places [`routes`] keeps: at most two reached through a dotted key, one through none.
#[derive(Default)]
struct Found {
    dotted: Vec<Vec<String>>,
    plain: Option<Vec<String>>,
}

impl Found {
    fn full(&self) -> bool {
        self.dotted.len() >= 2 || (!self.dotted.is_empty() && self.plain.is_some())
    }
    fn add(&mut self, route: &[String], dotted: bool) {
        if dotted && self.dotted.len() < 2 {
            self.dotted.push(route.to_vec());
        } else if !dotted && self.plain.is_none() {
            self.plain = Some(route.to_vec());
        }
    }
}

/// The error naming the two places of `arguments` whose path hashes to `h`: the first reached
/// through a dotted key, and the first reached through none, else the second through one.
fn describe(arguments: &Value, h: u64) -> CanonicalError {
    let mut found = Found::default();
    routes(arguments, SEED, false, &mut Vec::new(), h, &mut found);
    let mut dotted = found.dotted.into_iter();
    let (Some(a), Some((b, b_dotted))) = (
        dotted.next(),
        found
            .plain
            .map(|p| (p, false))
            .or_else(|| dotted.next().map(|d| (d, true))),
    ) else {
        // Two paths whose hashes collide by chance: refused all the same (fail closed).
        return CanonicalError::DottedAmbiguousKey {
            path: "/".into(),
            other: "/".into(),
        };
    };
    match (a.as_slice(), b_dotted) {
        ([key], false) => {
            let nested = b.join(".");
            if nested == *key {
                CanonicalError::AmbiguousKey { key: key.clone() }
            } else {
                CanonicalError::FoldedAmbiguousKey {
                    key: key.clone(),
                    nested,
                }
            }
        }
        _ => CanonicalError::DottedAmbiguousKey {
            path: pointer(&a),
            other: pointer(&b),
        },
    }
}

/// The place of `args` that the dotted parts of `key` reach when keys with a dot are read as
/// paths too (each key folded by [`folded_key`], then split), through at least one such key,
/// or where the rest of the path stops at a value it cannot enter (an array without that
/// index, a string, a number, `null`) after one: its JSON pointer. `None` when there is none. What a tool expanding dotted keys reads as
/// `key` where [`crate::arg_path::path`] and [`super::folded_walk`] find nothing (found by
/// review: `{"req": {"file.path": "/etc/shadow"}}` was absent to a scope on `req.file.path`
/// and passed it). Walks only the keys whose parts match the path so far.
pub(crate) fn reached_through_dotted(args: &Value, key: &str) -> Option<String> {
    if !has_dotted_key(args) {
        return None;
    }
    let want: Vec<String> = key.split('.').map(|p| folded_key(p).into_owned()).collect();
    let mut route = Vec::new();
    reach(args, &want, false, &mut route).then(|| pointer(&route))
}

/// Whether `v` holds the rest of the path `want` through a dotted key (`dotted`: one was on the
/// way already), leaving its real keys in `route`.
fn reach(v: &Value, want: &[String], dotted: bool, route: &mut Vec<String>) -> bool {
    if want.is_empty() {
        return dotted;
    }
    let enter = |k: &str, x: &Value, n: usize, dotted: bool, route: &mut Vec<String>| {
        route.push(k.to_string());
        let hit = reach(x, &want[n..], dotted, route);
        if !hit {
            route.pop();
        }
        hit
    };
    match v {
        Value::Object(m) => m.iter().any(|(k, x)| {
            let folded = folded_key(k);
            let parts: Vec<&str> = folded.split('.').collect();
            parts.len() <= want.len()
                && parts.iter().zip(want).all(|(p, w)| *p == w.as_str())
                && enter(k, x, parts.len(), dotted || parts.len() > 1, route)
        }),
        // A value the rest of the path cannot enter, reached through a dotted key, is what such
        // a reader reads there (found by review: `{"req.file": [{"path": …}]}` was absent to
        // `req.file.path`, while `{"req": {"file": [...]}}` is held as stopped).
        Value::Array(a) => match want[0].parse::<usize>().ok().and_then(|i| a.get(i)) {
            Some(x) => enter(&want[0], x, 1, dotted, route),
            None => dotted,
        },
        _ => dotted,
    }
}

/// `route` as a JSON pointer (RFC 6901).
fn pointer(route: &[String]) -> String {
    route
        .iter()
        .map(|k| format!("/{}", k.replace('~', "~0").replace('/', "~1")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::check_unambiguous;
    use crate::canonical::CanonicalError;
    use crate::canonical::fold::tests::FOLDS;
    use serde_json::{Map, Value, json};
    use std::cell::Cell;

    /// Attack (found by review): arguments of 25,000 dotted keys whose first part (`é0`) is
    /// no key made each walk fold every key of the object: 6 × 10^8 folds, minutes of a worker
    /// thread for one 320 KiB call, and a few such calls froze the gateway. Each key is folded
    /// once per dotted part now, however many keys there are; the same in a nested object.
    #[test]
    fn many_dotted_keys_fold_each_key_once_not_once_per_walk() {
        let n = 25_000;
        let top: Map<String, Value> = (0..n).map(|i| (format!("\u{e9}{i}.x"), json!(0))).collect();
        let folds = |v: &Value| {
            FOLDS.with(|c| c.set(0));
            assert!(check_unambiguous(v).is_ok());
            FOLDS.with(Cell::get)
        };
        let used = folds(&Value::Object(top));
        assert!(used <= 2 * n + 10, "{used} folds for {n} keys");
        let mut inner: Map<String, Value> =
            (0..n).map(|i| (format!("\u{e9}{i}"), json!(0))).collect();
        inner.insert("k".into(), json!(1));
        let mut top: Map<String, Value> = (0..n).map(|i| (format!("a.q{i}"), json!(0))).collect();
        top.insert("a".into(), Value::Object(inner));
        let used = folds(&Value::Object(top));
        assert!(used <= 3 * n + 10, "{used} folds for {n} keys");
        // Still found in another spelling, and still refused.
        let v = json!({"req.path": "/ok", "Req": {"PATH": "/etc/shadow"}});
        assert!(check_unambiguous(&v).is_err());
    }

    /// Every way of splitting `n` parts `x.x.….x` into keys, nested: 2^(n-1) places of one path.
    fn splittings(n: usize) -> Value {
        let keys = (1..=n).map(|k| (vec!["x"; k].join("."), k));
        let m: Map<String, Value> = keys
            .map(|(key, k)| (key, if k == n { json!(1) } else { splittings(n - k) }))
            .collect();
        Value::Object(m)
    }

    /// Attack (found by review): 8,192 places of one path under a long key: the refusal kept a
    /// copy of every place's route (the long key in each: a gigabyte for a 250 KB call) and
    /// sorted them scanning each. It keeps two.
    #[test]
    fn many_places_of_one_path_are_refused_keeping_two_routes() {
        let long = "q".repeat(10_000);
        let v = json!({ long.clone(): splittings(14) });
        let e = check_unambiguous(&v).unwrap_err();
        assert!(
            matches!(&e, CanonicalError::DottedAmbiguousKey { path, other }
                if path.starts_with(&format!("/{long}/")) && other.starts_with(&format!("/{long}/"))),
            "{e:?}"
        );
        let mut seen = super::Seen::default();
        super::walk(&v, super::SEED, false, &mut seen);
        let mut found = super::Found::default();
        let h = seen.clash.expect("a clash");
        super::routes(&v, super::SEED, false, &mut Vec::new(), h, &mut found);
        assert!(
            found.dotted.len() <= 2 && found.full(),
            "{:?}",
            found.dotted.len()
        );
    }

    /// Attack (found by review): a rule holds `pay` when `order.details.amount > 1000`; the
    /// agent sends `{"order": {"details.amount": 50000, "details": {"amount": 1}}}`: the
    /// condition reads 1, a tool or sub-agent expanding dotted keys 50000. Likewise a dotted
    /// key beside a dotted sibling (`{"a.b.c": 1, "a.b": {"c": 2}}`), where the condition read
    /// the literal key and the walk of its path found no `a`. Refused at any depth, naming
    /// both places.
    #[test]
    fn a_dotted_key_below_the_top_or_beside_a_dotted_sibling_is_refused() {
        let nested = json!({"order": {"details.amount": 50000, "details": {"amount": 1}}});
        assert_eq!(
            check_unambiguous(&nested).unwrap_err(),
            CanonicalError::DottedAmbiguousKey {
                path: "/order/details.amount".into(),
                other: "/order/details/amount".into(),
            }
        );
        for v in [
            json!({"order.details.amount": 1, "order.details": {"amount": 50000}}),
            json!({"a.b.c": 1, "a": {"b.c": 2}}),
            json!({"x": [{"p.q": 1, "P": {"q": 2}}]}),
            json!({"x": {"items.0": 1, "items": [2]}}),
            json!({"x": {"A.b": 1, "a.B": 2}}),
            // A full-width dot is a dot once normalised (found by review).
            json!({"req": {"file": {"path": "/srv/ok"}, "file\u{ff0e}path": "/etc/shadow"}}),
        ] {
            let e = check_unambiguous(&v).unwrap_err();
            assert!(
                matches!(e, CanonicalError::DottedAmbiguousKey { .. }),
                "{v}: {e:?}"
            );
            assert!(e.to_string().contains("ambiguous"), "{e}");
        }
        // A top-level pair keeps its own error.
        assert_eq!(
            check_unambiguous(&json!({"target.device": 1, "target": {"device": 2}})).unwrap_err(),
            CanonicalError::AmbiguousKey {
                key: "target.device".into()
            }
        );
        // Dotted keys whose paths hold nothing else are plain calls, at any depth.
        for v in [
            json!({"files": {"README.md": "x", "a.txt": "y"}}),
            json!({"a.b": 1, "a": {"c": 2}}),
            json!({"x": {"a.b": 1, "a": 5}}),
            json!({"x": [{"a.b": 1}, {"a": {"b": 2}}]}),
        ] {
            assert!(check_unambiguous(&v).is_ok(), "{v}");
        }
    }
}
