//! Dotted argument paths as a decoder that ignores case and compatibility forms reads them
//! ([`folded_key`], [`folded_walk`]), read by the scope triggers and by
//! [`super::dotted::check_unambiguous`]. Part of [`crate::canonical`].

use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;

/// Where [`folded_walk`] of a dotted path ends.
#[derive(Debug, PartialEq)]
pub(crate) enum Walk<'a> {
    /// The path leads to the value, through the real keys (and indexes) joined by dots.
    Found(String, &'a Value),
    /// A prefix of the path (its real keys joined by dots) holds the value, which the next
    /// part cannot enter: not an object, or an array and the part not one of its indexes.
    Stopped(String, &'a Value),
    /// An object on the way has no key of the next part's name in any spelling (or the root
    /// is not an object).
    Absent,
}

/// Follows the dotted path `key` (`req.files.0.path`) from `root` through nested objects and
/// arrays (a numeric part indexes an array) as a decoder that ignores case and compatibility
/// forms does: each part matched by the key of that name, else by the key [`folded_key`]
/// folds alike (one at most in a checked call: [`ToolCall::new`] refuses two). Never reads a
/// literal key with a dot.
pub(crate) fn folded_walk<'a>(root: &'a Value, key: &str) -> Walk<'a> {
    walk_in(root, key, &mut Folds::default())
}

/// [`folded_walk`] looking keys up in `folds`, shared by the walks of one value.
fn walk_in<'a>(root: &'a Value, key: &str, folds: &mut Folds<'a>) -> Walk<'a> {
    if !root.is_object() {
        return Walk::Absent;
    }
    let mut cur = root;
    let mut found: Vec<&str> = Vec::new();
    for part in key.split('.') {
        let next = match cur {
            Value::Object(m) => match folds.find(m, part) {
                Some(found) => Some(found),
                None => return Walk::Absent,
            },
            Value::Array(a) => part
                .parse::<usize>()
                .ok()
                .and_then(|i| a.get(i))
                .map(|v| (part, v)),
            _ => None,
        };
        let Some((k, v)) = next else {
            return Walk::Stopped(found.join("."), cur);
        };
        found.push(k);
        cur = v;
    }
    Walk::Found(found.join("."), cur)
}

/// The keys of each object a walk looked into without finding a part's exact name, by their
/// folded spelling ([`folded_key`]; the first key in the object's order for each), so that
/// each key is folded once however many walks look into its object.
#[derive(Default)]
struct Folds<'a> {
    by_object: HashMap<*const Map<String, Value>, HashMap<Cow<'a, str>, &'a str>>,
}

impl<'a> Folds<'a> {
    /// The key of `m` named `part` exactly, else the one [`folded_key`] folds alike, with its
    /// value.
    fn find(&mut self, m: &'a Map<String, Value>, part: &str) -> Option<(&'a str, &'a Value)> {
        if let Some((k, v)) = m.get_key_value(part) {
            return Some((k.as_str(), v));
        }
        let index = self.by_object.entry(m as *const _).or_insert_with(|| {
            let mut index = HashMap::with_capacity(m.len());
            for k in m.keys() {
                index.entry(folded_key(k)).or_insert(k.as_str());
            }
            index
        });
        let k = *index.get(folded_key(part).as_ref())?;
        m.get_key_value(k).map(|(k, v)| (k.as_str(), v))
    }
}

/// The name `key` stands for to a decoder that ignores case and compatibility forms: NFKC,
/// then lower case, then the two simple case foldings lower-casing misses (final sigma `ς` is
/// `σ`, the iota subscript U+0345 is `ι`: Go's `EqualFold` folds them so; found by review).
/// ASCII keys, the common case, are only lower-cased (and not copied when already lower case).
pub(crate) fn folded_key(key: &str) -> Cow<'_, str> {
    #[cfg(test)]
    tests::FOLDS.with(|n| n.set(n.get() + 1));
    if !key.is_ascii() {
        use unicode_normalization::UnicodeNormalization as _;
        let lower = key.nfkc().collect::<String>().to_lowercase();
        Cow::Owned(lower.replace('ς', "σ").replace('\u{345}', "ι"))
    } else if key.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(key.to_ascii_lowercase())
    } else {
        Cow::Borrowed(key)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;

    thread_local! {
        /// How many keys this thread folded ([`super::folded_key`] calls).
        pub(crate) static FOLDS: Cell<usize> = const { Cell::new(0) };
    }

    /// A walk finds a path through keys in other spellings and through arrays.
    #[test]
    fn a_walk_follows_other_spellings_and_array_indexes() {
        use super::{Walk, folded_walk};
        let w = serde_json::json!({"A": [{"b": 1}]});
        assert!(matches!(folded_walk(&w, "a.0.B"), Walk::Found(p, _) if p == "A.0.b"));
    }
}
