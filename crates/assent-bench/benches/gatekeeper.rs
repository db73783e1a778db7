//! B1 (issue 13 item 6): a gatekeeper verdict on a ~1 KiB call with 50 and with 10,000 rules,
//! beside Cedar with the same rules used the way Cedar is meant to be used — the policies
//! sliced by action once, the request's slice looked up per request — and the message
//! rendering measured apart from the verdict.

use assent_bench::{
    PolicySize, TRANSFER_TEMPLATE, agent_yaml, allowed_call_arguments, call_arguments,
    cedar_policies, governance_yaml,
};
use assent_core::policy::Registry;
use assent_core::template::{TemplateContext, default_message, render};
use assent_core::{ToolCall, VerdictKind, evaluate, evaluate_with};
use cedar_policy::{
    ActionConstraint, Authorizer, Context, Decision, Entities, EntityUid, PolicySet, Request,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::hint::black_box;

/// The policy sizes measured: 50 rules, 10,000 rules, and 10,000 rules of which 100 are
/// globs (which every call is checked against, in assent and in Cedar alike).
const SIZES: &[(&str, PolicySize)] = &[
    (
        "50_rules",
        PolicySize {
            rules: 50,
            globs: 4,
        },
    ),
    (
        "10000_rules",
        PolicySize {
            rules: 10_000,
            globs: 4,
        },
    ),
    (
        "10000_rules_100_globs",
        PolicySize {
            rules: 10_000,
            globs: 100,
        },
    ),
];

/// Cedar's policies prepared as Cedar intends for a gateway: one `PolicySet` per action,
/// built once, holding the policies whose scope names that action plus those that leave the
/// action open; `open` alone serves actions no policy names.
struct CedarSlices {
    by_action: HashMap<EntityUid, PolicySet>,
    open: PolicySet,
    /// Policies in all.
    total: usize,
}

impl CedarSlices {
    fn new(text: &str) -> Self {
        let all: PolicySet = text.parse().unwrap();
        let mut open = PolicySet::new();
        let mut named: HashMap<EntityUid, Vec<cedar_policy::Policy>> = HashMap::new();
        for p in all.policies() {
            match p.action_constraint() {
                ActionConstraint::Eq(a) => named.entry(a).or_default().push(p.clone()),
                // `action in [...]` may name action groups: kept in every slice, which is
                // always correct (none here).
                ActionConstraint::In(_) | ActionConstraint::Any => open.add(p.clone()).unwrap(),
            }
        }
        let by_action = named
            .into_iter()
            .map(|(a, ps)| {
                let mut set = open.clone();
                for p in ps {
                    set.add(p).unwrap();
                }
                (a, set)
            })
            .collect();
        let total = all.policies().count();
        CedarSlices {
            by_action,
            open,
            total,
        }
    }

    /// The slice for `action`, looked up per request.
    fn slice(&self, action: &EntityUid) -> &PolicySet {
        self.by_action.get(action).unwrap_or(&self.open)
    }
}

/// Cedar's request for a `transfer` call with `args`, its context built from the call's JSON.
fn cedar_request(args: &Value) -> Request {
    let ctx = Context::from_json_value(json!({"tool": "transfer", "args": args}), None).unwrap();
    Request::new(
        r#"Agent::"bot""#.parse().unwrap(),
        r#"Action::"transfer""#.parse().unwrap(),
        r#"Server::"local""#.parse().unwrap(),
        ctx,
        None,
    )
    .unwrap()
}

/// B1 at one policy size: assent's verdict on the held and on the allowed call, and Cedar's
/// decision on the same two requests from its per-action slice.
fn bench_size(c: &mut Criterion, name: &str, size: PolicySize) {
    let reg = Registry::load(
        &[("bench.agf.yaml".into(), agent_yaml())],
        &[("bench.yaml".into(), governance_yaml(size))],
    )
    .unwrap();
    let rules: usize = reg.policies().values().map(|p| p.rules.len()).sum();
    assert_eq!(rules, size.rules);
    let held = ToolCall::new("transfer", None, call_arguments()).unwrap();
    let allowed = ToolCall::new("transfer", None, allowed_call_arguments()).unwrap();
    let held_args = held.canonical_arguments().unwrap();
    eprintln!(
        "{name}: assent rules {rules} in {} policies; canonical calls {} and {} bytes",
        reg.policies().len(),
        held.canonical_json().unwrap().len(),
        allowed.canonical_json().unwrap().len(),
    );
    let v = evaluate(&reg, "bot", &held);
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(
        v.terms
            .message
            .starts_with("Send 5000 EUR to ext-acme-supplies")
    );
    assert_eq!(evaluate(&reg, "bot", &allowed).kind, VerdictKind::Allow);

    let cedar = CedarSlices::new(&cedar_policies(size));
    let auth = Authorizer::new();
    let entities = Entities::empty();
    let (held_req, allowed_req) = (
        cedar_request(&held.arguments),
        cedar_request(&allowed.arguments),
    );
    let action: EntityUid = r#"Action::"transfer""#.parse().unwrap();
    let slice = cedar.slice(&action);
    eprintln!(
        "{name}: cedar policies {}, {} action slices; transfer's slice {}",
        cedar.total,
        cedar.by_action.len(),
        slice.policies().count(),
    );
    assert_eq!(
        auth.is_authorized(&held_req, slice, &entities).decision(),
        Decision::Allow
    );
    assert_eq!(
        auth.is_authorized(&allowed_req, slice, &entities)
            .decision(),
        Decision::Deny
    );

    let mut g = c.benchmark_group("B1_verdict_1KiB");
    g.bench_function(BenchmarkId::new("assent_allowed", name), |b| {
        b.iter(|| evaluate(black_box(&reg), "bot", black_box(&allowed)))
    });
    // The held call renders the rule's message template; the server passes the arguments'
    // canonical JSON it already made for the call hash.
    g.bench_function(BenchmarkId::new("assent_held_template", name), |b| {
        b.iter(|| evaluate_with(black_box(&reg), "bot", black_box(&held), Some(&held_args)))
    });
    // The covering-rule lookup alone: the index against the scan of every rule that the
    // verdict made before it (issue 13 item 5).
    let agent = &reg.agents["bot"];
    g.bench_function(BenchmarkId::new("lookup_index", name), |b| {
        b.iter(|| black_box(&reg).covering_rules(agent, black_box("transfer"), None))
    });
    g.bench_function(BenchmarkId::new("lookup_scan", name), |b| {
        b.iter(|| {
            let reg = black_box(&reg);
            let tool = black_box("transfer");
            reg.policies_for(agent)
                .flat_map(|p| {
                    p.rules
                        .iter()
                        .filter(|r| r.covers(tool, None))
                        .map(move |r| (p, r))
                })
                .collect::<Vec<_>>()
        })
    });
    g.bench_function(BenchmarkId::new("cedar_slice_allowed", name), |b| {
        b.iter(|| {
            let slice = cedar.slice(black_box(&action));
            auth.is_authorized(black_box(&allowed_req), slice, &entities)
        })
    });
    g.bench_function(BenchmarkId::new("cedar_slice_held", name), |b| {
        b.iter(|| {
            let slice = cedar.slice(black_box(&action));
            auth.is_authorized(black_box(&held_req), slice, &entities)
        })
    });
    g.bench_function(
        BenchmarkId::new("cedar_slice_held_request_from_json", name),
        |b| {
            b.iter(|| {
                let req = cedar_request(black_box(&held.arguments));
                auth.is_authorized(&req, cedar.slice(&action), &entities)
            })
        },
    );
    g.finish();
}

/// The message rendering alone, on the held call: the rule's template, and the default
/// message (which embeds the arguments as canonical JSON) with and without that JSON given.
fn bench_render(c: &mut Criterion) {
    let held = ToolCall::new("transfer", None, call_arguments()).unwrap();
    let canonical = held.canonical_arguments().unwrap();
    let ctx = TemplateContext {
        tool_name: &held.tool,
        tool_args: &held.arguments,
        agent_alias: "bot",
        agent_id: "bot",
        mcp_server_alias: None,
        tool_args_json: None,
        extra: None,
    };
    let given = TemplateContext {
        tool_args_json: Some(&canonical),
        ..ctx
    };
    let mut g = c.benchmark_group("B1_render");
    g.bench_function("template", |b| {
        b.iter(|| render(black_box(TRANSFER_TEMPLATE), black_box(&ctx)))
    });
    g.bench_function("default_message_canonicalising", |b| {
        b.iter(|| default_message(black_box(&ctx)))
    });
    g.bench_function("default_message_given_canonical", |b| {
        b.iter(|| default_message(black_box(&given)))
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    for &(name, size) in SIZES {
        bench_size(c, name, size);
    }
    bench_render(c);
}

criterion_group!(benches, bench);
criterion_main!(benches);
