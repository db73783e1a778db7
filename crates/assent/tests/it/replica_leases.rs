//! The delivery lease of an outgoing webhook with two `assent serve` replicas on one
//! PostgreSQL database (issue 13 §2): the replica that does not hold the lease follows the
//! shared cursor by reads and does not take the write lock at every event. Skipped with
//! `ASSENT_TEST_NO_PG=1`.

use crate::replicas::{held, receiver, with_replicas};
use std::time::{Duration, Instant};

/// Counts, in table `lease_misses`, every lease attempt on `webhook_cursors` that took no
/// lease (an `UPDATE … holder IS NULL OR lease_until < …` changing no row): with the first
/// replica holding the lease throughout, the second replica's attempts.
const COUNT_MISSES: &str = "
CREATE TABLE lease_misses (at BIGINT);
CREATE FUNCTION count_lease_miss() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_query() LIKE '%holder IS NULL OR lease_until <%' AND NOT EXISTS (SELECT 1 FROM changed) THEN
    INSERT INTO lease_misses VALUES (0);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER lease_misses AFTER UPDATE ON webhook_cursors
  REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION count_lease_miss();
";

/// Review finding: a replica that did not hold a webhook's (or the Slack bot's) delivery
/// lease began at cursor 0, so it always found records past it and tried the lease — a write
/// transaction under the cluster-wide write lock — at every wake-up: every write and `NOTIFY`
/// of any replica, back to back under load, for each webhook. It now reads the shared cursor
/// and tries the lease only when the lease is free or lapsed: a burst of proposals through the
/// holder costs the other replica about one attempt per 2 s, not one per event. Every event is
/// still delivered once, in order.
#[test]
fn a_replica_without_the_lease_does_not_try_it_at_every_event_of_a_burst() {
    let (hook, deliveries) = receiver(true);
    let extra =
        format!("webhooks:\n  - {{name: ops, url: \"{hook}\", secret_env: TEST_HOOK_SECRET}}\n");
    with_replicas(&extra, |schema, _cfg, a, _b| {
        let mut db = schema.client();
        db.batch_execute(COUNT_MISSES).unwrap();
        let started = Instant::now();
        let burst = 40;
        for n in 0..burst {
            held(&a.url, "pay", n);
        }
        let mut got = Vec::new();
        while got.len() < burst as usize {
            let d = deliveries
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("only {} deliveries: {got:?}", got.len()));
            got.push(d);
        }
        let secs = started.elapsed().as_secs();
        // Both loops have looked again since (every 2 s at the latest).
        std::thread::sleep(Duration::from_secs(3));
        got.extend(deliveries.try_iter());
        let misses: i64 = db
            .query_one("SELECT count(*) FROM lease_misses", &[])
            .unwrap()
            .get(0);
        let bound = 2 + (secs as i64 + 3) / 2;
        assert!(
            misses <= bound,
            "{misses} lease attempts by the replica without the lease for {burst} events in {secs} s (at most {bound})"
        );
        let seqs: Vec<i64> = got
            .iter()
            .map(|d| d.split('-').nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(seqs.len(), burst as usize, "delivered once each: {got:?}");
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    });
}
