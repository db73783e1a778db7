//! What an operator reads after the fact: signed audit checkpoints
//! (`GET /v1/audit/checkpoints`), webhook deliveries that failed every attempt
//! (`GET /v1/webhooks/dead-letters`), and the MPLP learning samples
//! (`GET /v1/learning-samples`, NDJSON, one page at a time: [`LearningSamplePage`]; the samples
//! themselves stay `serde_json::Value`s). The webhook bodies are not part of `/v1`.

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

/// The samples a page of `GET /v1/learning-samples` holds at most when `limit` is not given.
pub const LEARNING_SAMPLES_DEFAULT_LIMIT: u32 = 1_000;

/// The largest `limit` of `GET /v1/learning-samples`; a larger one (or 0, or one that is not
/// a whole number) is `400 BAD_REQUEST` naming `limit`.
pub const LEARNING_SAMPLES_MAX_LIMIT: u32 = 10_000;

/// One page of `GET /v1/learning-samples[?limit=N&after=CURSOR]` (operator): the body is NDJSON
/// (`application/x-ndjson`, one MPLP learning sample a line, oldest decision first; at most
/// `limit` samples — default [`LEARNING_SAMPLES_DEFAULT_LIMIT`], at most
/// [`LEARNING_SAMPLES_MAX_LIMIT`] — and about 8 MiB of text, so a page may hold fewer and
/// still not be the last), and when more may follow the answer carries
/// `Link: </v1/learning-samples?limit=N&after=CURSOR>; rel="next"` (RFC 8288). The last page
/// has no `Link`. Not a JSON body: the client builds it from the answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LearningSamplePage {
    /// The samples of this page, in order.
    pub samples: Vec<Value>,
    /// The opaque `after` cursor of the next page (from the `Link` header); `None` on the last
    /// page.
    pub next: Option<String>,
}

/// The `after` cursor in a `Link` header's `rel="next"` target (`</v1/learning-samples?
/// limit=N&after=CURSOR>; rel="next"`, the target resolved against any base); `None` when
/// the header has no `rel="next"` link or it carries no `after`.
pub fn next_cursor(link: &str) -> Option<String> {
    let base = reqwest::Url::parse("http://gateway.invalid/").ok()?;
    link.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"));
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let url = base.join(target).ok()?;
        is_next
            .then(|| url.query_pairs().find(|(k, _)| k == "after"))
            .flatten()
            .map(|(_, v)| v.into_owned())
    })
}
