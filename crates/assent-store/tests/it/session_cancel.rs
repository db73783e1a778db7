//! An operator's session cancel finds every agent of the session — by its held calls, its
//! questions and its allowed calls — and no other, on both backends; the allowed calls are
//! found by a loose index scan over the agents (migration 0068's review: the calls and the
//! questions were scanned whole inside the write transaction).

use crate::{both_stores, pay};
use assent_core::approval::Canceller;
use assent_core::{CanonicalCall, ToolCall, VerdictKind};
use assent_store::{Proposal, Store};
use serde_json::json;

/// Agent `agent`'s call allowed in `session` at `now` (a `usage` row, no approval).
fn allowed(s: &Store, agent: &str, session: &str, now: i64) {
    let call = CanonicalCall::new(ToolCall::new("read", None, json!({"n": now})).unwrap()).unwrap();
    let ttl = |_: &assent_core::Verdict| 60_000;
    let p = Proposal::for_call(agent, session, &call, now, &ttl, u64::MAX);
    s.propose_observed(&p, None, |_, _, _| {
        let mut v = pay(1).1;
        v.kind = VerdictKind::Allow;
        v
    })
    .unwrap();
}

#[test]
fn an_operators_session_cancel_announces_every_agent_of_the_session_and_no_other() {
    both_stores(|_, s| {
        // Many agents with calls elsewhere, around the session's own in name order.
        for (i, agent) in ["a0", "b5", "m", "zz", "a1", "c", "\u{e9}"]
            .iter()
            .enumerate()
        {
            allowed(s, agent, "elsewhere", 1_000 + i as i64);
        }
        allowed(s, "a1", "s", 2_000);
        allowed(s, "m", "s", 2_001);
        allowed(s, "m", "s", 2_002);
        allowed(s, "\u{e9}", "s", 2_003);
        let kinds = ["freetext".to_string()];
        s.create_clarification("q1", "s", "q?", &kinds, &[], None, 2_004, 90_000, u64::MAX)
            .unwrap()
            .unwrap();
        let ops = vec!["ops".to_string()];
        let olaf = Canceller::Operator {
            name: "olaf",
            roles: &ops,
        };
        let done = s.cancel_session("s", &olaf, None, 3_000).unwrap();
        assert_eq!(done.announced, ["a1", "m", "q1", "\u{e9}"], "{done:?}");
        let none = s.cancel_session("nobody", &olaf, None, 3_001).unwrap();
        assert!(none.announced.is_empty(), "{none:?}");
    });
}
