//! Offline verification of assent approval tokens (issue 14 §6), for an executor — an MCP
//! server, an API — that wants to check a token itself before it runs a call.
//!
//! A token is a JWS compact serialisation (RFC 7515) signed with Ed25519 (`alg: EdDSA`,
//! RFC 8037), header `{"alg": "EdDSA", "kid", "typ": "assent-approval+jwt"}`, claims
//! [`Claims`] (`jti`, `sub` = agent id, `aid` = approval id, `call_hash`, `scope`, `iat`,
//! `exp`; times in seconds, RFC 7519). The gateway publishes its public keys as a JWKS at
//! `GET /v1/keys` and `GET /.well-known/jwks.json`; [`Jwks::from_json`] reads it.
//!
//! [`verify`] checks, in order: size ([`MAX_TOKEN_BYTES`]), shape (three base64url parts),
//! the header (strict: exactly `alg`, `kid` and `typ`, no duplicate key), the
//! algorithm (`EdDSA` only: `none`, `HS256` and everything else are refused before any key
//! is touched), the claims as sent (strict: exactly the seven, no duplicate key, each within
//! its length — so a claims part with a duplicate key is refused whoever signed it), the key
//! (`kid` must be in the JWKS), the signature (by `jsonwebtoken`, which decodes the claims
//! again: both decodings must agree), the binding (`call_hash` and, when asked, agent and
//! approval) and the clock (`now < exp`). It does not burn the token: single
//! use is the gateway's (`POST /v1/tokens/redeem`), so an executor that verifies offline
//! still redeems once before it runs the call.
//!
//! This crate has no tokio and no HTTP; fetching the JWKS is the caller's.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `typ` header of an approval token (explicit typing, RFC 8725 §3.11): a JWT minted for
/// another purpose with the same key would carry another type.
pub const TYP: &str = "assent-approval+jwt";

/// Longest token accepted, in bytes. A real one is about 540; anything longer is refused
/// before it is decoded.
pub const MAX_TOKEN_BYTES: usize = 2048;

/// Longest text claim (`jti`, `sub`, `aid`, `scope`), in bytes.
const MAX_CLAIM_BYTES: usize = 256;

/// What an approval token asserts (RFC 7519 claims and assent's own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// The token id (UUID v4); the gateway burns it on redemption.
    pub jti: String,
    /// The agent id the token was issued to.
    pub sub: String,
    /// The approval id.
    pub aid: String,
    /// Lowercase hex SHA-256 of the canonical (RFC 8785) call the token approves.
    pub call_hash: String,
    /// The decided scope (`once`, `session`, …; a token always runs one call).
    pub scope: String,
    /// Issued at, Unix seconds.
    pub iat: i64,
    /// Expires at, Unix seconds: valid while `now < exp`.
    pub exp: i64,
}

/// Why a token was refused. The message names the check that failed, never a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("token is longer than {MAX_TOKEN_BYTES} bytes")]
    Oversized,
    /// Not three base64url parts, or a part is not the JSON expected (a duplicate or unknown
    /// key, a missing one, a claim too long): which.
    #[error("token is malformed: {0}")]
    Malformed(String),
    /// `alg` is not `EdDSA` (e.g. `none`, `HS256`), or `typ` is not [`TYP`].
    #[error("token algorithm or type is not accepted: {0}")]
    Algorithm(String),
    /// The `kid` is not in the key set (rotated out, or not this gateway's).
    #[error("token key `{0}` is not in the key set")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("token signature does not verify")]
    BadSignature,
    /// `now >= exp`.
    #[error("token expired at {0}")]
    Expired(i64),
    /// Approves another call.
    #[error("token approves call_hash {approved}, not {presented}")]
    WrongCall {
        /// The token's `call_hash`.
        approved: String,
        /// The hash expected.
        presented: String,
    },
    /// Issued to another agent.
    #[error("token was issued to agent `{0}`")]
    WrongAgent(String),
    /// Issued for another approval.
    #[error("token was issued for approval `{0}`")]
    WrongApproval(String),
    /// A JWKS that cannot be used: why.
    #[error("key set is not usable: {0}")]
    BadKeySet(String),
}

/// One Ed25519 public key of a JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// `kid`: the RFC 7638 thumbprint of the key ([`thumbprint`]).
    pub kid: String,
    /// The 32-byte public key (`x`).
    pub x: [u8; 32],
}

impl PublicKey {
    /// The key of 32 bytes `x`, its `kid` the RFC 7638 thumbprint.
    pub fn new(x: [u8; 32]) -> PublicKey {
        PublicKey {
            kid: thumbprint(&x),
            x,
        }
    }

    /// This key as a JWK: `{"kty": "OKP", "crv": "Ed25519", "x", "kid", "alg": "EdDSA",
    /// "use": "sig"}`.
    pub fn to_jwk(&self) -> serde_json::Value {
        serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": B64.encode(self.x),
            "kid": self.kid, "alg": "EdDSA", "use": "sig"})
    }
}

/// The RFC 7638 JWK thumbprint of Ed25519 public key `x` (RFC 8037 §2: the members `crv`,
/// `kty`, `x` in that order): base64url of a SHA-256, 43 characters.
pub fn thumbprint(x: &[u8; 32]) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, B64.encode(x));
    B64.encode(Sha256::digest(canonical.as_bytes()))
}

/// A set of public keys, by `kid`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Jwks {
    /// The keys; a `kid` appears once.
    pub keys: Vec<PublicKey>,
}

#[derive(Deserialize)]
struct RawJwks {
    keys: Vec<RawJwk>,
}

#[derive(Deserialize)]
struct RawJwk {
    kty: String,
    crv: Option<String>,
    x: Option<String>,
    kid: Option<String>,
    alg: Option<String>,
}

impl Jwks {
    /// Reads a JWKS document (`{"keys": [...]}`, as the gateway serves it). Keys of another
    /// type (`kty` not `OKP`, `crv` not `Ed25519`, `alg` other than `EdDSA`) are skipped; an
    /// Ed25519 key without a `kid`, whose `x` is not 32 bytes, or whose `kid` is not the
    /// RFC 7638 thumbprint of its `x` ([`thumbprint`]) is an error
    /// ([`VerifyError::BadKeySet`]), as is a set with no usable key or a `kid` listed twice.
    pub fn from_json(json: &str) -> Result<Jwks, VerifyError> {
        let bad = |m: String| VerifyError::BadKeySet(m);
        let raw: RawJwks = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        let mut keys = Vec::new();
        for k in raw.keys {
            let ours = k.kty == "OKP"
                && k.crv.as_deref() == Some("Ed25519")
                && k.alg.as_deref().is_none_or(|a| a == "EdDSA");
            if !ours {
                continue;
            }
            let kid = k
                .kid
                .ok_or_else(|| bad("an Ed25519 key has no kid".into()))?;
            let x = k.x.ok_or_else(|| bad(format!("key `{kid}` has no x")))?;
            let x: [u8; 32] = B64
                .decode(x.as_bytes())
                .ok()
                .and_then(|v| v.try_into().ok())
                .ok_or_else(|| bad(format!("key `{kid}`: x is not 32 base64url bytes")))?;
            // Found by review: any `kid` was taken, so a set merged from several gateways,
            // or a key listed under another key's name, verified under a name not its own.
            if kid != thumbprint(&x) {
                return Err(bad(format!(
                    "kid `{kid}` is not the RFC 7638 thumbprint of its key"
                )));
            }
            if keys.iter().any(|p: &PublicKey| p.kid == kid) {
                return Err(bad(format!("kid `{kid}` appears twice")));
            }
            keys.push(PublicKey { kid, x });
        }
        if keys.is_empty() {
            return Err(bad("no Ed25519 key".into()));
        }
        Ok(Jwks { keys })
    }

    /// A set of one key (`x`, 32 bytes), its `kid` the thumbprint.
    pub fn single(x: [u8; 32]) -> Jwks {
        Jwks {
            keys: vec![PublicKey::new(x)],
        }
    }

    /// This set as a JWKS document: `{"keys": [JWK...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"keys": self.keys.iter().map(PublicKey::to_jwk).collect::<Vec<_>>()})
    }

    /// The key with `kid`, if any.
    pub fn get(&self, kid: &str) -> Option<&PublicKey> {
        self.keys.iter().find(|k| k.kid == kid)
    }
}

/// Lowercase hex SHA-256 of `canonical`, the RFC 8785 canonical JSON of a call
/// (`{"arguments", "server"?, "tool"}` as the gateway canonicalises it): its `call_hash`.
pub fn call_hash(canonical: &[u8]) -> String {
    hex::encode(Sha256::digest(canonical))
}

/// What the token must be for: the call, and optionally agent and approval; and the time.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The `call_hash` of the call about to run ([`call_hash`] of its canonical JSON).
    pub call_hash: &'a str,
    /// The agent id the call is run for, when the executor knows it.
    pub agent: Option<&'a str>,
    /// The approval id, when the executor knows it.
    pub approval_id: Option<&'a str>,
    /// Now, Unix seconds.
    pub now: i64,
}

/// The strict header: exactly these members, each once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictHeader {
    alg: String,
    kid: String,
    typ: Option<String>,
}

/// Verifies `token` against `keys` and `expected`, returning its claims (see the crate
/// documentation for the order of the checks). Errors: [`VerifyError`].
pub fn verify(token: &str, keys: &Jwks, expected: &Expected<'_>) -> Result<Claims, VerifyError> {
    let c = decode_signed_unchecked(token, keys)?;
    if c.call_hash != expected.call_hash {
        return Err(VerifyError::WrongCall {
            approved: c.call_hash,
            presented: expected.call_hash.to_string(),
        });
    }
    if expected.agent.is_some_and(|a| a != c.sub) {
        return Err(VerifyError::WrongAgent(c.sub));
    }
    if expected.approval_id.is_some_and(|a| a != c.aid) {
        return Err(VerifyError::WrongApproval(c.aid));
    }
    if expected.now >= c.exp {
        return Err(VerifyError::Expired(c.exp));
    }
    Ok(c)
}

/// Verifies size, shape, header, key and signature of `token` and decodes its claims
/// strictly, **without** looking at the call, the agent or the clock: the gateway's own step,
/// which checks those against its stored row. An executor calls [`verify`], never this: a
/// token that passes here may be expired or for another call (found by review: named
/// `verify_signature`, it read as the whole check). Errors: [`VerifyError`] but the binding
/// and time variants.
pub fn decode_signed_unchecked(token: &str, keys: &Jwks) -> Result<Claims, VerifyError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(VerifyError::Oversized);
    }
    let malformed = |m: &str| VerifyError::Malformed(m.to_string());
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, _sig] = parts[..] else {
        return Err(malformed("not three dot-separated parts"));
    };
    let header: StrictHeader = strict_part(header, "header")?;
    if header.alg != "EdDSA" {
        return Err(VerifyError::Algorithm(format!("alg `{}`", header.alg)));
    }
    // Explicit typing (RFC 8725 §3.11): a JWS signed with the token key for anything else —
    // or without `typ` — is not an approval token (found by review: `typ` was optional).
    if header.typ.as_deref() != Some(TYP) {
        return Err(VerifyError::Algorithm(format!(
            "typ `{}` (an approval token's is `{TYP}`)",
            header.typ.unwrap_or_default()
        )));
    }
    // The claims are decoded strictly before the signature is checked, so a claims part
    // with a duplicate key is refused whoever signed it.
    let claims: Claims = strict_part(payload, "claims")?;
    for (name, v) in [
        ("jti", &claims.jti),
        ("sub", &claims.sub),
        ("aid", &claims.aid),
        ("scope", &claims.scope),
    ] {
        if v.is_empty() || v.len() > MAX_CLAIM_BYTES {
            return Err(VerifyError::Malformed(format!(
                "claim {name} is empty or longer than {MAX_CLAIM_BYTES} bytes"
            )));
        }
    }
    if claims.call_hash.len() != 64 || !claims.call_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(malformed("claim call_hash is not 64 hex characters"));
    }
    let key = keys
        .get(&header.kid)
        .ok_or_else(|| VerifyError::UnknownKey(header.kid.clone()))?;
    let decoding = DecodingKey::from_ed_components(&B64.encode(key.x))
        .map_err(|e| VerifyError::BadKeySet(e.to_string()))?;
    let mut v = Validation::new(Algorithm::EdDSA);
    v.leeway = 0;
    v.validate_exp = false;
    v.validate_aud = false;
    v.required_spec_claims.clear();
    let data =
        jsonwebtoken::decode::<Claims>(token, &decoding, &v).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => VerifyError::BadSignature,
            _ => VerifyError::Malformed(e.to_string()),
        })?;
    if data.claims != claims {
        return Err(malformed("claims decoded twice differ"));
    }
    Ok(claims)
}

/// Decodes one base64url part as strict JSON of `T` (`deny_unknown_fields`; serde refuses a
/// duplicate member of a struct).
fn strict_part<T: serde::de::DeserializeOwned>(part: &str, what: &str) -> Result<T, VerifyError> {
    let bytes = B64
        .decode(part.as_bytes())
        .map_err(|_| VerifyError::Malformed(format!("{what} is not base64url")))?;
    serde_json::from_slice(&bytes).map_err(|e| VerifyError::Malformed(format!("{what}: {e}")))
}
