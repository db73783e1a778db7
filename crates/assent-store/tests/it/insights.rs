//! Insights (issue 16 §4) on both backends: a small history made through the store's public
//! operations (held approvals decided fast, slowly, denied, expired, cancelled, left pending;
//! outright allows and denies; records outside the range), and the figures read back exactly;
//! the per-dimension lists cut at 50 with the true total; bad ranges refused.

use assent_core::gatekeeper::Verdict;
use assent_core::{CanonicalCall, ToolCall};
use assent_store::insights::{DAY_MS, Figures, LIST_CAP, MAX_RANGE_MS, Outright};
use assent_store::{DecisionInput, Proposal, Store, StoreError};
use serde_json::json;

/// Holds a call of `tool` by `agent` at `now`, expiring `ttl` ms later; its approval id.
fn hold(s: &Store, agent: &str, tool: &str, n: i64, now: i64, ttl: i64) -> String {
    let (_, v) = crate::pay(n);
    let call = ToolCall::new(tool, None, json!({"n": n})).unwrap();
    let call = CanonicalCall::new(call).unwrap();
    let t = move |_: &Verdict| ttl;
    let p = Proposal::for_call(agent, "s1", &call, now, &t, u64::MAX);
    s.create_approval(&p, &v).unwrap().id
}

/// Audits an outright verdict (`allow` or `deny`) of `tool` at `now`.
fn outright(s: &Store, tool: &str, allow: bool, now: i64) {
    outright_as(s, tool, &verdict(allow), now);
}

/// An outright verdict (a policy loaded and a call weighed: made once for a flood of calls).
fn verdict(allow: bool) -> assent_core::Verdict {
    let (_, mut v) = crate::pay(1);
    v.kind = if allow {
        assent_core::VerdictKind::Allow
    } else {
        assent_core::VerdictKind::Deny
    };
    v
}

/// Records verdict `v` outright on a call of `tool` at `now`.
fn outright_as(s: &Store, tool: &str, v: &assent_core::Verdict, now: i64) {
    let call = ToolCall::new(tool, None, json!({})).unwrap();
    s.record_verdict("bot", "s1", &call, &"0".repeat(64), v, now)
        .unwrap();
}

fn figures(key: &str) -> Figures {
    Figures {
        key: key.into(),
        ..Figures::default()
    }
}

/// Three `pay` prompts (approved after 1 s and 30 s by alice, denied after 60 s by bob) on
/// day 10, three `ship` prompts of `bot2` on day 11 (expired, cancelled, pending), outright
/// verdicts, and one prompt and one verdict on day 5, outside the range.
#[test]
fn the_figures_of_a_small_history_are_exact_on_both_backends() {
    crate::both_stores(|_, s| {
        let t0 = 10 * DAY_MS + 1_000;
        let (a, b, c) = (
            hold(s, "bot", "pay", 1, t0, 600_000),
            hold(s, "bot", "pay", 2, t0, 600_000),
            hold(s, "bot", "pay", 3, t0, 600_000),
        );
        let approve = DecisionInput::approve();
        s.decide(&a, &approve, "alice", &[], t0 + 1_000).unwrap();
        s.decide(&b, &approve, "alice", &[], t0 + 30_000).unwrap();
        s.decide(
            &c,
            &DecisionInput::deny(Some("no")),
            "bob",
            &[],
            t0 + 60_000,
        )
        .unwrap();
        let t1 = t0 + DAY_MS;
        hold(s, "bot2", "ship", 1, t1, 5_000);
        let e = hold(s, "bot2", "ship", 2, t1, 600_000);
        hold(s, "bot2", "ship", 3, t1, 600_000);
        assert_eq!(s.expire_due(t1 + 5_000).unwrap().len(), 1);
        s.cancel(&e, None, "bot2", t1 + 6_000).unwrap();
        outright(s, "read", true, t0);
        outright(s, "read", true, t1);
        outright(s, "rm", false, t1);
        let old = hold(s, "bot", "pay", 9, 5 * DAY_MS, 600_000);
        s.decide(&old, &approve, "carol", &[], 5 * DAY_MS + 500)
            .unwrap();
        outright(s, "rm", false, 5 * DAY_MS);

        let got = s.insights(10 * DAY_MS, 12 * DAY_MS).unwrap();
        let days: Vec<(i64, u64)> = got.days.iter().map(|d| (d.day, d.prompts)).collect();
        assert_eq!(days, [(10 * DAY_MS, 3), (11 * DAY_MS, 3)]);
        let pay = Figures {
            prompts: 3,
            approved: 2,
            rejected: 1,
            rubber_stamped: 1,
            median_ms: Some(30_000),
            p90_ms: Some(60_000),
            ..figures("pay")
        };
        let ship = Figures {
            prompts: 3,
            expired: 1,
            cancelled: 1,
            pending: 1,
            ..figures("ship")
        };
        assert_eq!(got.tools.rows, [pay.clone(), ship.clone()]);
        assert_eq!(got.tools.total, 2);
        assert_eq!(
            got.overall,
            Figures {
                prompts: 6,
                expired: 1,
                cancelled: 1,
                pending: 1,
                ..Figures {
                    key: String::new(),
                    ..pay.clone()
                }
            }
        );
        // Equal prompts: by key.
        let agents: Vec<_> = got.agents.rows.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(agents, ["bot", "bot2"]);
        assert_eq!(
            got.agents.rows[0],
            Figures {
                key: "bot".into(),
                ..pay.clone()
            }
        );
        let alice = Figures {
            prompts: 2,
            approved: 2,
            rubber_stamped: 1,
            median_ms: Some(1_000),
            p90_ms: Some(30_000),
            ..figures("alice")
        };
        let bob = Figures {
            prompts: 1,
            rejected: 1,
            median_ms: Some(60_000),
            p90_ms: Some(60_000),
            ..figures("bob")
        };
        assert_eq!(got.operators.rows, [alice.clone(), bob]);
        assert_eq!(alice.approval_rate(), Some(1.0));
        assert_eq!(got.tools.rows[0].approval_rate(), Some(2.0 / 3.0));
        assert_eq!(got.tools.rows[1].approval_rate(), None);
        let read = Outright {
            tool: "read".into(),
            allowed: 2,
            ..Outright::default()
        };
        let rm = Outright {
            tool: "rm".into(),
            denied: 1,
            ..Outright::default()
        };
        assert_eq!(got.outright, [read, rm]);
        assert_eq!((got.outright_total, got.outright_truncated), (2, false));

        // The older day alone: carol's one decision, the old denial.
        let old = s.insights(5 * DAY_MS, 6 * DAY_MS).unwrap();
        assert_eq!(old.overall.prompts, 1);
        assert_eq!(old.operators.rows[0].key, "carol");
        assert_eq!(old.operators.rows[0].rubber_stamped, 1);
        assert_eq!(old.outright[0].denied, 1);
        // A range with nothing in it.
        let none = s.insights(0, DAY_MS).unwrap();
        assert_eq!((none.overall.prompts, none.tools.total), (0, 0));
        assert_eq!(none.days.len(), 1);
    });
}

/// 55 tools with prompts: the list holds the 50 with the most, says there were 55, and the
/// overall figures still count them all.
#[test]
fn each_list_is_cut_to_fifty_with_the_true_total() {
    crate::both_stores(|_, s| {
        let t = 3 * DAY_MS;
        for i in 0..55 {
            hold(s, "bot", &format!("tool{i:02}"), i, t, 600_000);
        }
        hold(s, "bot", "tool54", 99, t, 600_000);
        let got = s.insights(t, t + 1).unwrap();
        assert_eq!(got.tools.rows.len(), LIST_CAP);
        assert_eq!(got.tools.total, 55);
        assert_eq!(got.tools.rows[0].key, "tool54");
        assert_eq!(got.tools.rows[0].prompts, 2);
        assert_eq!(got.tools.rows[1].key, "tool00");
        assert_eq!(got.overall.prompts, 56);
        assert_eq!(got.operators.total, 0);
    });
}

/// A range that ends before it starts, or spans more than 366 days, is refused (the API's
/// 400), not scanned.
#[test]
fn a_range_backwards_or_over_366_days_is_refused() {
    let (_dir, s) = crate::fresh();
    for (since, until) in [(10, 10), (10, 5), (0, MAX_RANGE_MS + 1)] {
        assert!(
            matches!(s.insights(since, until), Err(StoreError::Invalid(_))),
            "{since}..{until}"
        );
    }
    assert!(s.insights(0, MAX_RANGE_MS).is_ok());
}

/// Attack (found by review): an agent calling ever new undeclared tools, each denied outright
/// and recorded under its own name of up to 256 bytes, made every insights page count them all
/// in one map (up to 500,000 names, some hundreds of MB) and copy it once more. At most
/// `MAX_OUTRIGHT_TOOLS` tools are counted, the first seen in the range; a tool past them is
/// left out and the figures say they were cut; the tools counted go on being counted.
#[test]
fn ever_new_tool_names_cannot_grow_the_outright_count_without_bound() {
    use assent_store::insights::MAX_OUTRIGHT_TOOLS;
    crate::both_stores(|_, s| {
        let t = 4 * DAY_MS;
        outright(s, "first", true, t);
        let deny = verdict(false);
        for chunk in (0..MAX_OUTRIGHT_TOOLS - 1)
            .collect::<Vec<_>>()
            .chunks(1_000)
        {
            let (_, outcome) = s.batch(|| {
                for i in chunk {
                    outright_as(s, &format!("{}{i:05}", "x".repeat(200)), &deny, t + 1);
                }
            });
            outcome.unwrap();
        }
        outright(s, "late", false, t + 2);
        outright(s, "first", true, t + 3);
        let got = s.insights(t, t + 4).unwrap();
        assert!(got.outright_truncated);
        assert_eq!(got.outright_total, MAX_OUTRIGHT_TOOLS as u64);
        assert!(got.outright.iter().all(|o| o.tool != "late"));
        let first = got.outright.iter().find(|o| o.tool == "first").unwrap();
        assert_eq!((first.allowed, first.denied), (2, 0));
        // A range without the flood is not cut.
        let quiet = s.insights(t + 3, t + 4).unwrap();
        assert!(!quiet.outright_truncated);
        assert_eq!(quiet.outright_total, 1);
    });
}
