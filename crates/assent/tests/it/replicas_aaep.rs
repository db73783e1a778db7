//! AAEP streams across two `assent serve` replicas on one PostgreSQL database (issue 13 §2):
//! a bare stream's subscription reopened by id on the other replica is not closed under that
//! stream when the first replica's grace is over. Skipped with `ASSENT_TEST_NO_PG=1`.

use crate::replicas::{aaep_stream, events_about, held, with_replicas};
use std::time::Duration;

/// Found by review: a bare stream's subscription is closed 30 s after its last stream on the
/// replica that opened it ended, unless a stream marked it seen after that end — and a stream
/// reopened by id on another replica marked it seen once, when it opened. So a client whose
/// connection moved to the other replica (a laptop waking, a load balancer) had its live
/// stream ended and its subscription closed under it (404 on the next reconnect by id). A
/// stream on a bare stream's subscription now marks it seen every 5 s.
#[test]
fn a_bare_subscription_reopened_on_another_replica_is_not_closed_under_its_stream() {
    with_replicas("", |schema, _cfg, a, b| {
        let (lines, sub) = crate::aaep_restart::bare_stream(&a.url);
        let on_b = aaep_stream(&b.url, Some(&sub), None);
        std::thread::sleep(Duration::from_secs(1));
        drop(lines); // the stream on A ends: its grace starts
        std::thread::sleep(Duration::from_secs(45));
        let closed: i64 = schema
            .client()
            .query_one(
                "SELECT count(*) FROM aaep_subscriptions WHERE id = $1 AND closed_at IS NOT NULL",
                &[&sub],
            )
            .unwrap()
            .get(0);
        assert_eq!(closed, 0, "closed under the stream reopened on B");
        let id = held(&a.url, "pay", 9);
        events_about(&on_b, &[id], 1);
    });
}
