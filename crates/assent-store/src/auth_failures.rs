//! Failed authentications counted across the replicas of one PostgreSQL database (issue 13
//! §2), so that N replicas do not give a key guesser N times the allowance. A generic cell
//! rate algorithm per caller (`who`: a client address or a key prefix) in one row: `tat`, the
//! theoretical arrival time of the next allowed failure. The server's throttle keeps its
//! in-memory limiter as the first line and asks this one on every failure.

use crate::db::Backend;
use crate::error::StoreError;
use crate::params;
use crate::store::Store;

/// The most callers one failure may be counted for (an address and a key prefix).
const MAX_WHO: usize = 4;
/// Rows whose `tat` passed this long ago are removed when a failure is counted (ms).
const FORGET_AFTER_MS: i64 = 60_000;

impl Store {
    /// Counts one failed authentication of each of `who` at `now` (Unix ms; on PostgreSQL the
    /// database's clock, the caller's ignored, as replicas' clocks differ), allowing one
    /// failure per `interval_ms` with bursts of `burst`; returns, for each of `who` in order,
    /// how long (ms) it is now locked out for (`0`: within its allowance). Written without
    /// waiting for a flush on Postgres (an UNLOGGED table), and without the schema's write
    /// lock ([`crate::db::Conn::write_unserialised`]: each upsert is atomic on its row). `Invalid` for more than 4 callers,
    /// a `who` over 256 bytes, or a non-positive interval or burst.
    pub fn count_auth_failure(
        &self,
        who: &[String],
        now: i64,
        interval_ms: i64,
        burst: i64,
    ) -> Result<Vec<i64>, StoreError> {
        if who.len() > MAX_WHO || who.iter().any(|w| w.len() > 256) || interval_ms < 1 || burst < 1
        {
            return Err(StoreError::Invalid(
                "at most 4 callers of at most 256 bytes, a positive interval and burst".into(),
            ));
        }
        let tolerance = interval_ms.saturating_mul(burst);
        let guard = self.lock();
        let conn = guard.conn();
        Ok(conn.write_unserialised(|tx| {
            // On PostgreSQL the database's clock is `now`: the `tat` values are written by every
            // replica and compared by every other, so each replica's own clock would lock
            // callers out (one running slow) or hand out a fresh allowance (one running fast)
            // (found by review). SQLite's one process has one clock.
            if tx.backend() == Backend::Postgres {
                tx.execute("SET LOCAL synchronous_commit = off", [])?;
            }
            let now = tx.shared_clock_ms(now)?;
            // Rows are taken in one order by every count, so two counts never wait on each
            // other in a circle.
            let mut order: Vec<usize> = (0..who.len()).collect();
            order.sort_by_key(|&i| &who[i]);
            let mut out = vec![0; who.len()];
            for i in order {
                let w = &who[i];
                let tat: i64 = tx.query_row(
                    "INSERT INTO auth_failures (who, tat) VALUES (?1, CAST(?2 AS BIGINT) + CAST(?3 AS BIGINT))
                     ON CONFLICT(who) DO UPDATE SET tat =
                       CASE WHEN auth_failures.tat > CAST(?2 AS BIGINT) THEN auth_failures.tat ELSE CAST(?2 AS BIGINT) END
                       + CAST(?3 AS BIGINT)
                     RETURNING tat",
                    params![w, now, interval_ms],
                    |r| r.get(0),
                )?;
                out[i] = tat.saturating_sub(now).saturating_sub(tolerance).max(0);
            }
            // Stale rows go after the upserts, passing over the rows another replica's count
            // holds: it never waits, so a count holding its own rows never waits on one that
            // holds others (found by review: deleted first, a stale row locked here could be
            // the one another count waited for while this one waited for its).
            let forget = match tx.backend() {
                Backend::Postgres => "DELETE FROM auth_failures WHERE who IN (SELECT who FROM auth_failures WHERE tat < ?1 FOR UPDATE SKIP LOCKED)",
                Backend::Sqlite => "DELETE FROM auth_failures WHERE tat < ?1",
            };
            tx.execute(forget, [now.saturating_sub(FORGET_AFTER_MS)])?;
            Ok::<_, crate::db::DbError>(out)
        })?)
    }
}
