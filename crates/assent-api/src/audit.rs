//! What an operator reads after the fact: signed audit checkpoints
//! (`GET /v1/audit/checkpoints`), webhook deliveries that failed every attempt
//! (`GET /v1/webhooks/dead-letters`). The MPLP learning samples
//! (`GET /v1/learning-samples`, NDJSON) stay `serde_json::Value`s, and the webhook bodies
//! themselves are not part of `/v1`.

pub use assent_core::checkpoint::Checkpoint as SignedCheckpoint;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /v1/audit/checkpoints[?limit=N&before_seq=S]` (operator): newest first (`limit`
/// 1–1000, default 100).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointList {
    /// The gateway's Ed25519 audit public key, 64 lowercase hex.
    pub public_key: String,
    /// The checkpoints.
    pub checkpoints: Vec<Checkpoint>,
}

/// One signed checkpoint of the audit chain (also carried on webhooks as `checkpoint`):
/// `assent-core`'s signed record (`seq`, `head_hash`, `record_count`, `time` in Unix
/// milliseconds, `public_key`, `signature`; [`SignedCheckpoint::verifies`] checks it) and its
/// time as RFC 3339.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checkpoint {
    /// What was signed, and the signature.
    #[serde(flatten)]
    pub signed: SignedCheckpoint,
    /// `time` as RFC 3339.
    pub at: String,
}

/// `GET /v1/webhooks/dead-letters` (operator): newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadLetterList {
    /// The dead letters.
    pub dead_letters: Vec<DeadLetter>,
}

/// A webhook delivery that failed every attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
