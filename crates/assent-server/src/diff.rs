//! RFC 6902 diffs of what an agent sent, bounded ([`json_diff`]): a tool definition's change
//! under review (`GET /v1/tools/reviews`), a plan's revision (the Confirm's `target_diff`), an
//! operator's edit of a held call (`arguments_diff`). `json_patch::diff` writes one operation
//! per changed value with a copy of its whole JSON pointer, so its size is not bounded by the
//! documents' (found by review: 250 KiB of plan or definition — 80,000 array elements under a
//! 150 KB key, changed one by one — made a patch of some 12 GB).

use serde_json::{Value, json};

/// What a patch may take beyond 4 × its two documents' text, in bytes (16 KiB: a small
/// change of a small document is always shown operation by operation).
const DIFF_SLACK_BYTES: usize = 16 << 10;

/// The most one operation adds to its path and value: `{"op":"replace","path":"","value":},`.
const OP_BYTES: usize = 40;

/// The RFC 6902 patch from `from` to `to` as JSON (`json_patch::diff`: `add`, `remove` and
/// `replace` operations, paths from the documents' root), or, when that patch would pass its
/// budget — 4 × the two documents' JSON text plus 16 KiB — the one operation
/// `[{"op": "replace", "path": "", "value": to}]`, an equally valid patch of about `to`'s
/// size. The patch's size is measured first, without building it, in one walk that follows
/// `json_patch::diff` (its operations, their JSON-escaped pointers and values) and stops at
/// the budget. So a patch is never larger than about 4 × its documents, whatever their shape.
pub fn json_diff(from: &Value, to: &Value) -> Value {
    let budget = text_len(from)
        .saturating_add(text_len(to))
        .saturating_mul(4)
        .saturating_add(DIFF_SLACK_BYTES);
    let mut meter = Meter { used: 0, budget };
    if !meter.walk(from, to, 0) {
        return json!([{"op": "replace", "path": "", "value": to}]);
    }
    serde_json::to_value(json_patch::diff(from, to)).unwrap_or(Value::Null)
}

/// The bytes a patch takes so far, against its budget.
struct Meter {
    used: usize,
    budget: usize,
}

impl Meter {
    /// Counts `n` more bytes; `false` once past the budget.
    fn add(&mut self, n: usize) -> bool {
        self.used = self.used.saturating_add(n);
        self.used <= self.budget
    }

    /// Counts the operations `json_patch::diff` writes for `left` → `right` at a pointer of
    /// `path` bytes; `false` once past the budget (the walk stops there).
    fn walk(&mut self, left: &Value, right: &Value, path: usize) -> bool {
        match (left, right) {
            (Value::Object(l), Value::Object(r)) => {
                for (k, rv) in r {
                    let p = path.saturating_add(1 + key_len(k));
                    let fits = match l.get(k) {
                        Some(lv) => self.walk(lv, rv, p),
                        None => self.add(OP_BYTES.saturating_add(p).saturating_add(text_len(rv))),
                    };
                    if !fits {
                        return false;
                    }
                }
                l.keys()
                    .filter(|k| !r.contains_key(*k))
                    .all(|k| self.add(OP_BYTES.saturating_add(path + 1 + key_len(k))))
            }
            (Value::Array(l), Value::Array(r)) => {
                let mut shift = 0usize;
                (0..l.len().max(r.len())).all(|idx| {
                    let p = path.saturating_add(1 + digits(idx - shift));
                    match (l.get(idx), r.get(idx)) {
                        (Some(lv), Some(rv)) => self.walk(lv, rv, p),
                        (Some(_), None) => {
                            shift += 1;
                            self.add(OP_BYTES.saturating_add(p))
                        }
                        (None, Some(rv)) => {
                            self.add(OP_BYTES.saturating_add(p).saturating_add(text_len(rv)))
                        }
                        (None, None) => true,
                    }
                })
            }
            _ if left == right => true,
            _ => self.add(
                OP_BYTES
                    .saturating_add(path)
                    .saturating_add(text_len(right)),
            ),
        }
    }
}

/// How many bytes key `k` takes in a pointer written as JSON text, at most: `~` and `/` are
/// escaped by RFC 6901 (two characters), `"` and `\` by JSON (two), control characters by
/// JSON (`\u00XX`, six).
fn key_len(k: &str) -> usize {
    k.bytes()
        .map(|b| match b {
            b'~' | b'/' | b'"' | b'\\' => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum()
}

/// The decimal digits of `n`.
fn digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The length of `v`'s JSON text, counted without keeping it.
fn text_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(b.len());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    serde_json::to_writer(&mut c, v).map_or(usize::MAX, |()| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk's count is never below the patch `json_patch::diff` writes, on shapes that
    /// exercise every branch: keys added, removed and changed (escaped ones too), arrays
    /// growing and shrinking (a removal's index shifts), a type changed, nesting.
    #[test]
    fn the_measure_bounds_the_patch_it_stands_for() {
        let cases = [
            (
                json!({"a": 1, "b/~\"\n": [1, 2, 3]}),
                json!({"a": 2, "c": {"d": [true]}}),
            ),
            (json!([1, 2, 3, 4, 5]), json!([1, 9])),
            (json!([1]), json!([1, {"x": "y"}, [2, 3]])),
            (json!({"a": [1, 2]}), json!({"a": {"0": 1}})),
            (json!("s"), json!(null)),
            (
                json!({"k": (0..100).collect::<Vec<_>>()}),
                json!({"k": (1..101).collect::<Vec<_>>()}),
            ),
        ];
        for (from, to) in cases {
            let patch = serde_json::to_vec(&json_patch::diff(&from, &to)).unwrap();
            let mut m = Meter {
                used: 0,
                budget: usize::MAX,
            };
            assert!(m.walk(&from, &to, 0));
            assert!(
                m.used >= patch.len(),
                "{from} → {to}: {} < {}",
                m.used,
                patch.len()
            );
            assert_eq!(
                json_diff(&from, &to),
                serde_json::to_value(json_patch::diff(&from, &to)).unwrap()
            );
        }
    }

    /// A change that would blow up is one whole replacement; one small change of a document
    /// with many values and a long unchanged key is still one fine-grained operation.
    #[test]
    fn a_blow_up_is_replaced_whole_and_a_small_change_stays_small() {
        let key = "k".repeat(10_000);
        let from = json!({key.clone(): vec![0; 5_000]});
        let to = json!({key.clone(): vec![1; 5_000]});
        assert_eq!(
            json_diff(&from, &to),
            json!([{"op": "replace", "path": "", "value": to}])
        );
        let big = json!({"description": "A.", "long": {key.clone(): vec![0; 100_000]}});
        let mut changed = big.clone();
        changed["description"] = json!("B.");
        assert_eq!(
            json_diff(&big, &changed),
            json!([{"op": "replace", "path": "/description", "value": "B."}])
        );
    }
}
