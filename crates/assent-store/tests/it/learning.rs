//! The learning-sample export read in pages (keyset paging over `(decided_at, id)`) on both
//! backends: through the store (what `GET /v1/learning-samples` serves) and offline (what
//! `assent export learning-samples` reads).

use crate::both_stores;
use assent_store::DecisionInput;
use assent_store::learning::{OfflinePages, SampleCursor};
use serde_json::Value;

/// The approval id of a sample.
fn approval_of(v: &Value) -> String {
    v["meta"]["approval_id"].as_str().unwrap().to_string()
}

/// Attack (found by review): an unbounded export, which read every settled approval into one
/// list. Pages of a bounded size instead, each starting after the cursor of the one before:
/// with four approvals decided in the same millisecond (ties broken by id), pages of two give
/// every settled approval once, in the one order — decision time, then id — on SQLite and on
/// PostgreSQL; a pending approval is none; the offline reader gives the same pages; a cursor's
/// text reads back as the cursor.
#[test]
fn learning_sample_pages_give_every_settled_approval_once_even_when_decided_in_one_millisecond() {
    both_stores(|db, s| {
        let (call, v) = crate::pay(7);
        let mut ids = Vec::new();
        for k in 0..5 {
            let id = crate::hold(s, &format!("s{k}"), &call, &v, 1_000, 100_000).id;
            let at = if k < 4 { 2_000 } else { 1_500 };
            s.decide(&id, &DecisionInput::approve(), "alice", &[], at)
                .unwrap();
            ids.push(id);
        }
        crate::hold(s, "still-pending", &call, &v, 1_000, 100_000);
        let mut expected = ids[..4].to_vec();
        expected.sort();
        expected.insert(0, ids[4].clone());

        let whole = s.learning_samples(None, 100).unwrap();
        assert!(whole.next.is_none());
        let order: Vec<String> = whole.samples.iter().map(approval_of).collect();
        assert_eq!(order, expected);

        let (mut paged, mut after, mut sizes) = (Vec::new(), None::<SampleCursor>, Vec::new());
        loop {
            let p = s.learning_samples(after.as_ref(), 2).unwrap();
            sizes.push(p.samples.len());
            paged.extend(p.samples);
            let Some(c) = p.next else { break };
            assert_eq!(SampleCursor::parse(&c.to_string()), Some(c.clone()));
            after = Some(c);
        }
        assert_eq!(sizes, [2, 2, 1]);
        assert_eq!(paged, whole.samples);

        let pages: Vec<Vec<Value>> = OfflinePages::open(db, 2)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
        assert_eq!(pages.concat(), whole.samples);
    });
}

/// Found by review: an approval by the agent's user in the client (`user-of:AGENT`, relayed
/// with the agent's own key, which could steer it) was exported as an operator's, `approved`
/// and `good`, so an agent approving its own calls minted training samples saying people
/// approved them. It is `agent_user`, `not_reviewed`, either way it went.
#[test]
fn an_in_client_decision_is_no_operators_review_in_the_learning_samples() {
    both_stores(|_, s| {
        let (call, v) = crate::pay(7);
        for (k, d) in [DecisionInput::approve(), DecisionInput::deny(None)]
            .iter()
            .enumerate()
        {
            let id = crate::hold(s, &format!("s{k}"), &call, &v, 1_000, 100_000).id;
            s.decide(&id, d, "user-of:bot", &[], 2_000 + k as i64)
                .unwrap();
        }
        let id = crate::hold(s, "s9", &call, &v, 1_000, 100_000).id;
        s.decide(&id, &DecisionInput::approve(), "alice", &[], 3_000)
            .unwrap();
        let got: Vec<(Value, Value, Value)> = s
            .learning_samples(None, 100)
            .unwrap()
            .samples
            .iter()
            .map(|x| {
                let f = &x["feedback"];
                (
                    f["source"].clone(),
                    f["type"].clone(),
                    x["meta"]["human_feedback_label"].clone(),
                )
            })
            .collect();
        let want = |a: &str, b: &str, c: &str| (Value::from(a), Value::from(b), Value::from(c));
        assert_eq!(
            got,
            [
                want("agent_user", "approval", "not_reviewed"),
                want("agent_user", "rejection", "not_reviewed"),
                want("user", "approval", "approved"),
            ]
        );
    });
}

/// A cursor is read only as this gateway writes it: anything else is no cursor (the server
/// answers `400`), so a client cannot steer the query with it.
#[test]
fn only_a_cursor_the_store_wrote_reads_as_one() {
    for bad in [
        "",
        "12",
        "x.61",
        "01.61",
        "+1.61",
        "1.",
        "1.zz",
        "1.6",
        "1.00",
        "1.ff",
        // Uppercase hex decodes to the same id, but is not what the store writes.
        "1.6A",
        &format!("1.{}", "61".repeat(300)),
    ] {
        assert_eq!(SampleCursor::parse(bad), None, "{bad:?}");
    }
    let c = SampleCursor::parse("-1.6162").unwrap();
    assert_eq!(c.to_string(), "-1.6162");
}
