//! The seed 002 approval token: HMAC-SHA256-signed claims binding one approval to one
//! `call_hash`, for one agent, until an expiry. Single use is enforced by the store.
//!
//! Wire form: `at1.<base64url(claims JSON)>.<base64url(HMAC-SHA256(key, "at1." + claims part))>`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

const PREFIX: &str = "at1.";

/// What a token asserts (seed 002 Token: `tokenId`, `approvalId`, `toolCallHash`, `expiresAt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// `tokenId`, a UUID v4.
    pub tid: String,
    /// `approvalId`.
    pub aid: String,
    /// The agent id the token was issued to; only it may redeem.
    pub agent: String,
    /// `toolCallHash`: lowercase hex SHA-256 of the canonical call.
    pub h: String,
    /// `expiresAt` in Unix milliseconds.
    pub exp: i64,
}

/// A token that is not one of ours (bad shape, bad signature) — `TOKEN_INVALID`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token is not valid: {0}")]
pub struct InvalidToken(pub &'static str);

fn mac(key: &[u8], data: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("hmac takes any key length");
    m.update(data);
    m
}

/// Signs `claims` with `key` (at least 32 random bytes from the store's key file).
pub fn sign(key: &[u8], claims: &TokenClaims) -> String {
    let body = serde_json::to_vec(claims).expect("claims serialise");
    let signed = format!("{PREFIX}{}", B64.encode(body));
    let tag = mac(key, signed.as_bytes()).finalize().into_bytes();
    format!("{signed}.{}", B64.encode(tag))
}

/// Verifies the signature (constant time) and decodes the claims. Expiry, agent and hash are
/// checked by the caller, which knows the time and the call.
pub fn verify(key: &[u8], token: &str) -> Result<TokenClaims, InvalidToken> {
    let (signed, tag) = token.rsplit_once('.').ok_or(InvalidToken("malformed"))?;
    let body = signed
        .strip_prefix(PREFIX)
        .ok_or(InvalidToken("malformed"))?;
    let tag = B64.decode(tag).map_err(|_| InvalidToken("malformed"))?;
    mac(key, signed.as_bytes())
        .verify_slice(&tag)
        .map_err(|_| InvalidToken("bad signature"))?;
    let body = B64.decode(body).map_err(|_| InvalidToken("malformed"))?;
    serde_json::from_slice(&body).map_err(|_| InvalidToken("malformed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> TokenClaims {
        TokenClaims {
            tid: "t".into(),
            aid: "a".into(),
            agent: "bot".into(),
            h: "ab".repeat(32),
            exp: 1_700_000_000_000,
        }
    }

    #[test]
    fn round_trip_and_forgery() {
        let key = [7u8; 32];
        let t = sign(&key, &claims());
        assert_eq!(verify(&key, &t), Ok(claims()));
        assert_eq!(verify(&[8u8; 32], &t), Err(InvalidToken("bad signature")));
        // A forged body with the old signature fails.
        let mut c = claims();
        c.h = "cd".repeat(32);
        let forged_body = sign(&key, &c);
        let (fb, _) = forged_body.rsplit_once('.').unwrap();
        let (_, tag) = t.rsplit_once('.').unwrap();
        assert!(verify(&key, &format!("{fb}.{tag}")).is_err());
        assert!(verify(&key, "garbage").is_err());
        assert!(verify(&key, "at1.e30.AAAA").is_err());
    }
}
