//! RFC 8785 canonicalisation of the ~1 KiB benchmark call: serde_json_canonicalizer (used by
//! assent) beside serde_jcs, and plain serde_json::to_string as the floor.

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
}

criterion_group!(benches, bench);
criterion_main!(benches);
