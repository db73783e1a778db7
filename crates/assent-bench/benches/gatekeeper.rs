//! Gatekeeper verdict on a ~1 KiB call against 50 rules, beside Cedar with the same rules.

use assent_bench::{agent_yaml, call_arguments, cedar_policies, governance_yaml};
use assent_core::policy::Registry;
use assent_core::{ToolCall, VerdictKind, evaluate, evaluate_with};
use cedar_policy::{Authorizer, Context, Decision, Entities, EntityUid, PolicySet, Request};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let reg = Registry::load(
        &[("bench.agf.yaml".into(), agent_yaml())],
        &[("bench.yaml".into(), governance_yaml())],
    )
    .unwrap();
    let args = call_arguments();
    let call = ToolCall::new("transfer", None, args.clone()).unwrap();
    let size = call.canonical_json().unwrap().len();
    eprintln!(
        "canonical call: {size} bytes; assent rules: {}",
        reg.policies.values().map(|p| p.rules.len()).sum::<usize>()
    );
    assert_eq!(evaluate(&reg, "bot", &call).kind, VerdictKind::Confirm);

    let ps: PolicySet = cedar_policies().parse().unwrap();
    eprintln!("cedar policies: {}", ps.policies().count());
    let principal: EntityUid = r#"Agent::"bot""#.parse().unwrap();
    let action: EntityUid = r#"Action::"transfer""#.parse().unwrap();
    let resource: EntityUid = r#"Server::"local""#.parse().unwrap();
    let auth = Authorizer::new();
    let entities = Entities::empty();
    let ctx_json = serde_json::json!({"args": args});
    let make_request = || {
        let ctx = Context::from_json_value(ctx_json.clone(), None).unwrap();
        Request::new(
            principal.clone(),
            action.clone(),
            resource.clone(),
            ctx,
            None,
        )
        .unwrap()
    };
    let req = make_request();
    assert_eq!(
        auth.is_authorized(&req, &ps, &entities).decision(),
        Decision::Allow
    );

    let mut g = c.benchmark_group("gatekeeper_1KiB_50_rules");
    g.bench_function("assent_evaluate", |b| {
        b.iter(|| evaluate(black_box(&reg), "bot", black_box(&call)))
    });
    // What the server does per call: canonicalise the arguments once, derive the call's
    // canonical JSON and hash from them, and evaluate with them.
    g.bench_function("assent_evaluate_and_call_hash", |b| {
        b.iter(|| {
            let call = black_box(&call);
            let args = call.canonical_arguments().unwrap();
            let canonical = call.canonical_with_arguments(&args).unwrap();
            let hash = assent_core::canonical::sha256_hex(canonical.as_bytes());
            (
                evaluate_with(black_box(&reg), "bot", call, Some(&args)),
                hash,
            )
        })
    });
    g.bench_function("cedar_is_authorized", |b| {
        b.iter(|| auth.is_authorized(black_box(&req), black_box(&ps), &entities))
    });
    g.bench_function("cedar_request_from_json_and_is_authorized", |b| {
        b.iter(|| {
            let r = make_request();
            auth.is_authorized(&r, black_box(&ps), &entities)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
