//! The delivery lease of an outgoing webhook with two `assent serve` replicas on one
//! PostgreSQL database (issue 13 §2): the replica that does not hold the lease follows the
//! shared cursor by reads and does not take the write lock at every event. Skipped with
//! `ASSENT_TEST_NO_PG=1`.

use crate::replicas::{held, with_replicas};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A webhook receiver on a free loopback port answering every request `200`; sends the
/// `X-Assent-Delivery` header of each, in the order received. Returns its URL.
fn receiver() -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (send, recv) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // One request at a time: deliveries of one webhook are sequential anyway.
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
            let head_end = loop {
                let n = conn.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(i + 4);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            };
            let len: usize = header("content-length:").map_or(0, |v| v.parse().unwrap_or(0));
            while buf.len() < head_end + len {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            if let Some(d) = header("x-assent-delivery:") {
                let _ = send.send(d);
            }
        }
    });
    (url, recv)
}

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
    let (hook, deliveries) = receiver();
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
