//! Approving from Slack (issue 15 §4): where the Slack message of an approval is (its channel
//! and `ts`, so that whichever replica sees the decision updates it), and the request
//! signatures already accepted from Slack (by SHA-256) until their timestamp leaves the
//! 5-minute window and 5 minutes more (replicas' clocks differ), so that a replayed request is
//! refused on every replica sharing the database. Not audited: the decision a Slack request
//! makes is audited as every decision.

use crate::db::OptionalExtension as _;
use crate::error::StoreError;
use crate::params;
use crate::single_use;
use crate::store::Store;

/// Most accepted signatures remembered at once. Only requests whose signature verified are
/// remembered (only a holder of the signing secret adds rows), and rows leave
/// [`SKEW_MARGIN_MS`] after their window ends; past this, new requests are refused until some
/// leave (fail closed).
pub const MAX_SEEN: i64 = 100_000;

/// How much longer than its `until` an accepted signature is remembered, in ms (5 minutes):
/// room for the clocks of the replicas sharing the database to differ by.
///
/// Attack (found by review): each replica pruned the signatures whose window had ended by its
/// own clock. A replica running a few seconds fast removed a signature that a replica running
/// on time (or slow) still found inside the window, and there a replay of it was accepted.
/// With this margin a row outlives the window on every replica whose clock is within 5
/// minutes of the one that pruned it.
pub const SKEW_MARGIN_MS: i64 = 300_000;

/// Longest channel id or message `ts` stored, in bytes.
const MAX_REF: usize = 64;

/// Where an approval's Slack message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackMessage {
    /// The channel id (`C…`) Slack answered `chat.postMessage` with.
    pub channel: String,
    /// The message's `ts` (its id within the channel).
    pub ts: String,
}

impl Store {
    /// Remembers the accepted request signature whose SHA-256 (64 hex) is `signature_sha256`
    /// until `until` (Unix ms: the end of its window), after removing those whose window ended
    /// [`SKEW_MARGIN_MS`] or more before `now` (the caller's clock). `Ok(true)`:
    /// first seen; `Ok(false)`: seen before (a replay: refuse it). `Invalid` for a digest that
    /// is not 64 lowercase hex digits, or when [`MAX_SEEN`] signatures are remembered.
    pub fn slack_first_seen(
        &self,
        signature_sha256: &str,
        until: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        single_use::check_digest(
            signature_sha256,
            "a Slack signature is remembered by its SHA-256 (64 hex digits)",
        )?;
        self.write_unannounced(|tx| {
            let ended = now.saturating_sub(SKEW_MARGIN_MS);
            let n = single_use::prune_and_count(tx, "slack_seen", "until", ended, None)?;
            if n >= MAX_SEEN {
                return Ok(Err(StoreError::Invalid(format!(
                    "{n} Slack requests are remembered in the replay window; wait until some leave it"
                ))));
            }
            let added = tx.execute(
                "INSERT INTO slack_seen (signature_sha256, until) VALUES (?1, ?2) ON CONFLICT(signature_sha256) DO NOTHING",
                params![signature_sha256, until],
            )?;
            Ok::<_, crate::db::DbError>(Ok(added == 1))
        })?
    }

    /// Records that approval `approval_id`'s Slack message is `m` (posted at `now`, Unix ms);
    /// a message recorded before is kept (the first post wins). `Invalid` for a channel or `ts`
    /// that is empty or longer than 64 bytes.
    pub fn put_slack_message(
        &self,
        approval_id: &str,
        m: &SlackMessage,
        now: i64,
    ) -> Result<(), StoreError> {
        if [&m.channel, &m.ts]
            .iter()
            .any(|f| f.is_empty() || f.len() > MAX_REF)
        {
            return Err(StoreError::Invalid(
                "a Slack channel id and message ts are 1 to 64 bytes".into(),
            ));
        }
        self.write_unannounced(|tx| {
            tx.execute(
                "INSERT INTO slack_messages (approval_id, channel, ts, posted_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT(approval_id) DO NOTHING",
                params![approval_id, m.channel, m.ts, now],
            )
            .map(drop)
        })?;
        Ok(())
    }

    /// Approval `approval_id`'s Slack message, if one was recorded.
    pub fn slack_message(&self, approval_id: &str) -> Result<Option<SlackMessage>, StoreError> {
        let guard = self.lock();
        Ok(guard
            .conn()
            .query_row(
                "SELECT channel, ts FROM slack_messages WHERE approval_id = ?1",
                [approval_id],
                |r| {
                    Ok(SlackMessage {
                        channel: r.get(0)?,
                        ts: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }
}
