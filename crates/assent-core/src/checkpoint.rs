//! The signed audit checkpoint (issue 10 §11): how far the audit hash chain reached, signed
//! with the gateway's Ed25519 audit key, so that whoever can write the database cannot
//! rewrite, truncate or empty the audit log unseen. This is the record and its check: what
//! bytes are signed ([`Checkpoint::signed_bytes`]) and whether a signature holds under a
//! given key ([`Checkpoint::verifies`]). Signing with the key, storing checkpoints and
//! walking the chain are the store's (`assent_store::checkpoint`).

use crate::canonical::canonical_value;
use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// One signed checkpoint, as stored, listed (`GET /v1/audit/checkpoints`, with its time also
/// as RFC 3339), written to the JSONL sink (one per line) and carried on webhooks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = SignedCheckpoint))]
pub struct Checkpoint {
    /// Audit sequence number of the newest record covered (from 1: an empty chain gets none).
    pub seq: i64,
    /// That record's chain hash (64 hex).
    pub head_hash: String,
    /// Audit records when it was signed.
    pub record_count: i64,
    /// When it was signed, Unix milliseconds.
    pub time: i64,
    /// The signer's Ed25519 public key, 64 lowercase hex characters.
    pub public_key: String,
    /// Ed25519 signature of [`Checkpoint::signed_bytes`], 128 lowercase hex characters.
    pub signature: String,
}

impl Checkpoint {
    /// The bytes signed: RFC 8785 canonical JSON of `{head_hash, record_count, seq, time}`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let v = json!({"seq": self.seq, "head_hash": self.head_hash,
            "record_count": self.record_count, "time": self.time});
        canonical_value(&v)
            .expect("strings and integers canonicalise")
            .into_bytes()
    }

    /// Whether the signature is valid under `key` (strict RFC 8032 verification). The
    /// checkpoint's own `public_key` field is not trusted.
    pub fn verifies(&self, key: &VerifyingKey) -> bool {
        signature_verifies(key, &self.signed_bytes(), &self.signature)
    }
}

/// Whether `signature_hex` (128 hex digits, an Ed25519 signature) signs `bytes` under `key`
/// (strict RFC 8032 verification); `false` for anything that is not such a signature. Shared
/// by the checkpoints and the signed audit exports.
pub fn signature_verifies(key: &VerifyingKey, bytes: &[u8], signature_hex: &str) -> bool {
    let Some(sig) = hex::decode(signature_hex)
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
    else {
        return false;
    };
    key.verify_strict(bytes, &Signature::from_bytes(&sig))
        .is_ok()
}
