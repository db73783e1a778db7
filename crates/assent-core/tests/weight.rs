//! `json_weight` and `raw_weight` against what parsing really keeps: every allocation of this
//! test binary is counted (`stats_alloc`: the workspace forbids `unsafe_code`, so no counting
//! allocator of our own), and a value's weight must be at least the bytes
//! `serde_json::from_str::<Value>` still holds once it returns. Found by review: a non-empty
//! object's first entry allocates a whole B-tree leaf (632 bytes), so `[{"":{"":{…}}}]`
//! parsed to some 3 times its weight, and a bound on weight did not bound memory. One test
//! only: the count is the whole process's, and tests run side by side.

use assent_core::json::{OBJECT_NODE, json_weight, raw_weight};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// `text` parsed, and the bytes the parse still holds (allocated, less freed: `stats_alloc`
/// counts a block grown or shrunk in place in these too): the least of three parses. The
/// count is the whole process's, and another thread's allocation only ever adds to it: found
/// in CI (2 cores under load), another thread of the process — the test harness's own, the
/// only other one — allocated about 900 bytes while the first parse ran, so `{"":0}` seemed
/// to keep 1,532.
fn parsed(text: &str) -> (Value, usize) {
    let once = || {
        let region = Region::new(GLOBAL);
        let v: Value = serde_json::from_str(text).unwrap();
        let c = region.change();
        (v, c.bytes_allocated.saturating_sub(c.bytes_deallocated))
    };
    let (v, first) = once();
    let least = (0..2).map(|_| once().1).fold(first, usize::min);
    (v, least)
}

/// Keys `k00000`… in the order `order` gives them, into one object.
fn wide(n: usize, order: impl Fn(usize) -> usize) -> String {
    let entries: Vec<String> = (0..n).map(|i| format!(r#""k{:05}":0"#, order(i))).collect();
    format!("{{{}}}", entries.join(","))
}

/// Attack (memory, found by review): nested and wide objects, arrays nested one value deep,
/// zeros, strings full of escapes and a call's line each weigh, parsed (`json_weight`) and
/// unparsed (`raw_weight`, compact and pretty-printed), at least what parsing them keeps.
#[test]
fn a_weight_is_never_below_what_parsing_keeps() {
    let (_, one) = parsed(r#"{"":0}"#);
    assert_eq!(one, OBJECT_NODE, "one entry's B-tree leaf");
    let chain = |depth: usize| format!("{}0{}", r#"{"":"#.repeat(depth), "}".repeat(depth));
    let chains = format!("[{}]", vec![chain(120); 50].join(","));
    let arrays = format!(
        "[{}]",
        vec![format!("{}0{}", "[".repeat(120), "]".repeat(120)); 50].join(",")
    );
    let small = format!("[{}]", vec![r#"{"a":1}"#; 1000].join(","));
    let pretty = serde_json::to_string_pretty(&json!({"a": {"b": [1, "c\td"]}, "e": "é"}))
        .unwrap()
        .repeat(2000);
    let text_of_json = json!({"content": [{"type": "text", "text": pretty}]}).to_string();
    let strings = json!(vec!["a\"b\n"; 1000]).to_string();
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[0,1,2],"s":"a\nb\"c","t":true,"n":null,"f":-1.5}}}"#;
    let mut texts = vec![
        chain(120),
        chains,
        arrays,
        small,
        text_of_json,
        strings,
        call.to_string(),
        wide(5000, |i| i),
        wide(5000, |i| 4999 - i),
        wide(5000, |i| (i * 7919) % 5000),
        wide(12, |i| i),
        "[-0, 1e15, 0.5, 9007199254740992, 18446744073709551616, true, null]".into(),
    ];
    texts.extend([1, 2, 3, 4, 5, 8, 9, 1000, 1025].map(|n| json!(vec![0; n]).to_string()));
    for text in &texts {
        let (v, kept) = parsed(text);
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let weights = [
            json_weight(&v),
            raw_weight(text.as_bytes()),
            raw_weight(pretty.as_bytes()),
        ];
        assert!(
            weights.iter().all(|w| *w >= kept),
            "{weights:?} for {kept} kept: {text:.80}"
        );
    }
}
