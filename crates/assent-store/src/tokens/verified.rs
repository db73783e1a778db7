//! A presented approval token whose signature was checked before its redemption's write
//! ([`VerifiedToken`], [`Store::verify_token`]): the Ed25519 verification is public-key
//! arithmetic over nothing the database holds, so the server runs it on its request's own
//! worker instead of on the store's one writer, where every agent's writes wait behind it
//! (issue 13 §4: it was 6 % of that thread's time in a four-request cycle).

use crate::store::Store;
use assent_core::token::TokenClaims;

/// What checking a presented token's size, shape, header, key and signature found
/// ([`Store::verify_token`]): its claims when it is one of this gateway's tokens, nothing
/// otherwise (then its redemption is refused `TOKEN_INVALID`, audited). Only
/// [`Store::verify_token`] makes one, so a redemption is never given claims no key signed.
#[derive(Debug, Clone)]
pub struct VerifiedToken(Option<TokenClaims>);

impl VerifiedToken {
    /// The claims the signature check found (`None`: not one of this gateway's tokens), for
    /// the redemption's transaction.
    pub(super) fn into_claims(self) -> Option<TokenClaims> {
        self.0
    }
}

impl Store {
    /// Checks `token` (a JWS compact serialisation, at most `MAX_TOKEN_BYTES`) against the
    /// token keys that verify at `now` (Unix ms: the current key and the retired ones whose
    /// tokens may not have expired yet; a `kid` it does not know re-reads the keys directory
    /// once when it changed). Expiry, agent, call and single use are the redemption's
    /// ([`Store::redeem_verified`]). Reads no database row; never fails (an invalid token
    /// gives a [`VerifiedToken`] without claims). Runs where it is called: a `kid` it does not
    /// know, or keys older than `REREAD_AFTER` (10 s), re-read the keys directory (a `stat`,
    /// and the files when they changed), a short blocking read the server accepts on its
    /// request's worker.
    pub fn verify_token(&self, token: &str, now: i64) -> VerifiedToken {
        VerifiedToken(self.key.verify(token, now, self.token_ttl_ms).ok())
    }
}
