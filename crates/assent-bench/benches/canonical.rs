//! RFC 8785 canonicalisation of the ~1 KiB benchmark call: serde_json_canonicalizer (used by
//! assent) beside serde_jcs, and plain serde_json::to_string as the floor. And the strict
//! reading of the same call's text (`assent_core::json`: no duplicate key, no inexact number,
//! bounded depth) beside serde_json's own parse, which it adds to on every request body.

use assent_bench::call_arguments;
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let v = serde_json::json!({"tool": "transfer", "arguments": call_arguments()});
    let a = serde_json_canonicalizer::to_string(&v).unwrap();
    assert_eq!(
        a,
        serde_jcs::to_string(&v).unwrap(),
        "both libraries agree on this input"
    );
    let mut g = c.benchmark_group("canonical_json_1KiB");
    g.bench_function("serde_json_canonicalizer", |b| {
        b.iter(|| serde_json_canonicalizer::to_string(black_box(&v)).unwrap())
    });
    g.bench_function("serde_jcs", |b| {
        b.iter(|| serde_jcs::to_string(black_box(&v)).unwrap())
    });
    g.bench_function("serde_json_to_string_not_canonical", |b| {
        b.iter(|| serde_json::to_string(black_box(&v)).unwrap())
    });
    g.finish();
    let text = serde_json::to_vec(&v).unwrap();
    let mut g = c.benchmark_group("strict_json_1KiB");
    g.bench_function("assent_core_json_check", |b| {
        b.iter(|| assent_core::json::check(black_box(&text)).unwrap())
    });
    g.bench_function("assent_core_json_parse_value", |b| {
        b.iter(|| assent_core::json::parse_value(black_box(&text)).unwrap())
    });
    g.bench_function("serde_json_from_slice_not_strict", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&text)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
