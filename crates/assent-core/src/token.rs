//! The approval token (seed 002 approval token; issue 14 §6): a JWS compact serialisation
//! signed with Ed25519 (`alg: EdDSA`, RFC 8037) binding one approval to one `call_hash`, for
//! one agent, until an expiry, so any JOSE library verifies it against the gateway's JWKS.
//! Single use is enforced by the store (the `jti` is burnt).
//!
//! Wire form: `base64url(header) "." base64url(claims) "." base64url(signature)`, header
//! `{"typ": "assent-approval+jwt", "alg": "EdDSA", "kid"}` (the `kid` is the RFC 7638
//! thumbprint of the public key), claims [`TokenClaims`]. Signing is `jsonwebtoken`'s;
//! checking is [`assent_verify`]'s (one implementation for the gateway and executors).

use ed25519_dalek::SigningKey;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

pub use assent_verify::{
    Claims as TokenClaims, Jwks, MAX_TOKEN_BYTES, PublicKey, TYP, VerifyError,
};

/// A token that is not one of ours (bad shape, algorithm, key or signature) —
/// `TOKEN_INVALID`: which check refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token is not valid: {0}")]
pub struct InvalidToken(pub VerifyError);

/// The RFC 8410 PKCS#8 v1 prefix of an Ed25519 private key (a 32-byte seed follows): the
/// form `jsonwebtoken` reads an EdDSA signing key in.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// The current token signing key: an Ed25519 key and its `kid`.
pub struct TokenSigner {
    key: EncodingKey,
    public: PublicKey,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner")
            .field("kid", &self.public.kid)
            .finish_non_exhaustive()
    }
}

impl TokenSigner {
    /// The signer of the Ed25519 key whose 32-byte seed is `seed` (RFC 8032).
    pub fn from_seed(seed: &[u8; 32]) -> TokenSigner {
        let x = SigningKey::from_bytes(seed).verifying_key().to_bytes();
        let mut der = PKCS8_ED25519_PREFIX.to_vec();
        der.extend_from_slice(seed);
        TokenSigner {
            key: EncodingKey::from_ed_der(&der),
            public: PublicKey::new(x),
        }
    }

    /// The public half, with its `kid`.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The `kid` tokens signed by this key carry.
    pub fn kid(&self) -> &str {
        &self.public.kid
    }

    /// Signs `claims` as a JWS compact serialisation. Ed25519 is deterministic: the same
    /// claims and key give the same token.
    pub fn sign(&self, claims: &TokenClaims) -> String {
        let mut h = Header::new(Algorithm::EdDSA);
        h.typ = Some(TYP.to_string());
        h.kid = Some(self.public.kid.clone());
        jsonwebtoken::encode(&h, claims, &self.key).expect("an Ed25519 key signs any claims")
    }
}

/// Verifies size, shape, header, key and signature of `token` against `keys` and decodes its
/// claims ([`assent_verify::decode_signed_unchecked`]). Expiry, agent and hash are checked by the
/// caller, which knows the time, the stored row and the call.
pub fn verify(keys: &Jwks, token: &str) -> Result<TokenClaims, InvalidToken> {
    assent_verify::decode_signed_unchecked(token, keys).map_err(InvalidToken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> TokenClaims {
        TokenClaims {
            jti: "t".into(),
            sub: "bot".into(),
            aid: "a".into(),
            call_hash: "ab".repeat(32),
            scope: "once".into(),
            iat: 1_700_000_000,
            exp: 1_700_000_300,
        }
    }

    #[test]
    fn round_trip_and_forgery() {
        let signer = TokenSigner::from_seed(&[7u8; 32]);
        let keys = Jwks {
            keys: vec![signer.public_key().clone()],
        };
        let t = signer.sign(&claims());
        assert_eq!(t, signer.sign(&claims()), "deterministic");
        assert_eq!(verify(&keys, &t), Ok(claims()));
        let other = TokenSigner::from_seed(&[8u8; 32]);
        let other_keys = Jwks {
            keys: vec![other.public_key().clone()],
        };
        assert!(matches!(
            verify(&other_keys, &t),
            Err(InvalidToken(VerifyError::UnknownKey(_)))
        ));
        // The other key under our kid: the signature fails.
        let swapped = Jwks {
            keys: vec![PublicKey {
                kid: signer.kid().to_string(),
                x: other.public_key().x,
            }],
        };
        assert_eq!(
            verify(&swapped, &t),
            Err(InvalidToken(VerifyError::BadSignature))
        );
        // Another body under the old signature fails.
        let mut c = claims();
        c.call_hash = "cd".repeat(32);
        let forged = signer.sign(&c);
        let body = forged.split('.').nth(1).unwrap();
        let parts: Vec<&str> = t.split('.').collect();
        let spliced = format!("{}.{body}.{}", parts[0], parts[2]);
        assert_eq!(
            verify(&keys, &spliced),
            Err(InvalidToken(VerifyError::BadSignature))
        );
        assert!(verify(&keys, "garbage").is_err());
    }
}
