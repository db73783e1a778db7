//! Where a key names a value in a call's arguments ([`lookup`]): a literal key first, then a
//! dotted path through nested objects and arrays ([`path`]). Read by conditions
//! ([`crate::condition`]), message templates ([`crate::template`]), the session triggers'
//! windows and scopes ([`crate::triggers`]) and the edit re-gate ([`crate::edit`]); a leaf
//! that imports nothing of the crate.

use serde_json::Value;

/// Finds `key` in `args`: first as a literal key, then as a dotted path through nested objects
/// ([`path`]). A call's arguments never hold both for one key ([`crate::ToolCall::new`]
/// refuses them: `CanonicalError::AmbiguousKey`), so which comes first matters only for the
/// gateway's own objects (the folded cost totals of `triggers::window`).
pub fn lookup<'a>(args: &'a Value, key: &str) -> Option<&'a Value> {
    args.get(key).or_else(|| path(args, key))
}

/// Follows the dotted path `key` (`order.amount`, `items.0.sku`) through nested objects and
/// arrays (a numeric part indexes an array), never reading a literal key with a dot.
pub fn path<'a>(args: &'a Value, key: &str) -> Option<&'a Value> {
    let mut cur = args;
    for part in key.split('.') {
        cur = match cur {
            Value::Object(m) => m.get(part)?,
            Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}
