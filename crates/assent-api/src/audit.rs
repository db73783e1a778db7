//! What an operator reads after the fact: signed audit checkpoints
//! (`GET /v1/audit/checkpoints`), webhook deliveries that failed every attempt
//! (`GET /v1/webhooks/dead-letters`). The MPLP learning samples
//! (`GET /v1/learning-samples`, NDJSON) stay `serde_json::Value`s, and the webhook bodies
//! themselves are not part of `/v1`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /v1/audit/checkpoints[?limit=N&before_seq=S]` (operator): newest first (`limit`
/// 1–1000, default 100).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointList {
    /// The gateway's Ed25519 audit public key, 64 lowercase hex.
    pub public_key: String,
    /// The checkpoints.
    pub checkpoints: Vec<Checkpoint>,
}

/// One signed checkpoint of the audit chain (also carried on webhooks as `checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Audit sequence number of the newest record covered (from 1).
    pub seq: i64,
    /// That record's chain hash, 64 hex.
    pub head_hash: String,
    /// Audit records when it was signed.
    pub record_count: i64,
    /// When it was signed, Unix milliseconds.
    pub time: i64,
    /// The signer's Ed25519 public key, 64 lowercase hex.
    pub public_key: String,
    /// Ed25519 signature of the RFC 8785 canonical JSON of
    /// `{head_hash, record_count, seq, time}`, 128 lowercase hex.
    pub signature: String,
    /// `time` as RFC 3339.
    pub at: String,
}

/// `GET /v1/webhooks/dead-letters` (operator): newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetterList {
    /// The dead letters.
    pub dead_letters: Vec<DeadLetter>,
}

/// A webhook delivery that failed every attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Its id.
    pub id: i64,
    /// The webhook's name.
    pub webhook: String,
    /// The audit record it delivered.
    pub audit_seq: i64,
    /// `approval.requested` or `approval.resolved`.
    pub event: String,
    /// The body that was sent (already redacted); `null` if it is not JSON.
    pub body: Value,
    /// How many attempts were made.
    pub attempts: i64,
    /// The last attempt's error (`HTTP 500`, a network error).
    pub last_error: String,
    /// When it was given up, RFC 3339.
    pub failed_at: String,
}
