//! Every attack on a token named, each refused by [`assent_verify::verify`]: tokens are built
//! here byte by byte (header and claims JSON as an attacker would write them) and signed with
//! a test Ed25519 key whose public half is the JWKS, so a refusal is the check's, not a
//! broken signature's, unless the test says so.

use assent_verify::{Claims, Expected, Jwks, MAX_TOKEN_BYTES, TYP, VerifyError, verify};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signer as _, SigningKey};
use serde_json::json;

const HASH: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
const NOW: i64 = 1_800_000_000;

fn key() -> SigningKey {
    SigningKey::from_bytes(&[9u8; 32])
}

fn jwks() -> Jwks {
    Jwks::single(key().verifying_key().to_bytes())
}

fn kid() -> String {
    jwks().keys[0].kid.clone()
}

fn header() -> String {
    json!({"alg": "EdDSA", "kid": kid(), "typ": TYP}).to_string()
}

fn claims() -> String {
    json!({"jti": "t-1", "sub": "bot", "aid": "a-1", "call_hash": HASH, "scope": "once",
           "iat": NOW - 10, "exp": NOW + 290})
    .to_string()
}

/// `header.claims.signature` with the two JSON texts as given, signed with the test key.
fn signed(header: &str, claims: &str) -> String {
    let msg = format!("{}.{}", B64.encode(header), B64.encode(claims));
    let sig = key().sign(msg.as_bytes());
    format!("{msg}.{}", B64.encode(sig.to_bytes()))
}

fn expect() -> Expected<'static> {
    Expected {
        call_hash: HASH,
        agent: Some("bot"),
        approval_id: Some("a-1"),
        now: NOW,
    }
}

fn check(token: &str) -> Result<Claims, VerifyError> {
    verify(token, &jwks(), &expect())
}

#[test]
fn a_well_formed_token_verifies_to_its_claims() {
    let c = check(&signed(&header(), &claims())).unwrap();
    assert_eq!(
        (c.sub.as_str(), c.aid.as_str(), c.exp),
        ("bot", "a-1", NOW + 290)
    );
}

#[test]
fn alg_none_is_refused() {
    let h = json!({"alg": "none", "kid": kid(), "typ": TYP}).to_string();
    let unsigned = format!("{}.{}.", B64.encode(&h), B64.encode(claims()));
    assert!(matches!(check(&unsigned), Err(VerifyError::Algorithm(_))));
    // Signed or not, `none` never passes.
    assert!(matches!(
        check(&signed(&h, &claims())),
        Err(VerifyError::Algorithm(_))
    ));
}

#[test]
fn alg_hs256_with_the_public_key_as_secret_is_refused() {
    use hmac_by_jsonwebtoken::forge_hs256;
    let public = jwks().keys[0].x;
    let h = json!({"alg": "HS256", "kid": kid(), "typ": TYP}).to_string();
    let forged = forge_hs256(&h, &claims(), &public);
    assert!(matches!(check(&forged), Err(VerifyError::Algorithm(_))));
    // The x of the JWK, base64url as published, as the secret: refused the same way.
    let forged = forge_hs256(&h, &claims(), B64.encode(public).as_bytes());
    assert!(matches!(check(&forged), Err(VerifyError::Algorithm(_))));
}

/// HS256 forgeries made with the JOSE library itself, as an attacker would.
mod hmac_by_jsonwebtoken {
    use super::B64;
    use base64::Engine as _;

    pub(super) fn forge_hs256(header: &str, claims: &str, secret: &[u8]) -> String {
        let msg = format!("{}.{}", B64.encode(header), B64.encode(claims));
        let key = jsonwebtoken::EncodingKey::from_secret(secret);
        let sig = jsonwebtoken::crypto::sign(msg.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
            .unwrap();
        format!("{msg}.{sig}")
    }
}

#[test]
fn an_unknown_kid_is_refused() {
    let h = json!({"alg": "EdDSA", "kid": "not-a-key-of-ours", "typ": TYP}).to_string();
    assert_eq!(
        check(&signed(&h, &claims())),
        Err(VerifyError::UnknownKey("not-a-key-of-ours".into()))
    );
    // A token signed by another key that names our kid fails on the signature.
    let other = SigningKey::from_bytes(&[10u8; 32]);
    let msg = format!("{}.{}", B64.encode(header()), B64.encode(claims()));
    let t = format!(
        "{msg}.{}",
        B64.encode(other.sign(msg.as_bytes()).to_bytes())
    );
    assert_eq!(check(&t), Err(VerifyError::BadSignature));
}

#[test]
fn a_token_for_another_agent_call_or_approval_is_refused() {
    let t = signed(&header(), &claims());
    let other_agent = Expected {
        agent: Some("eve"),
        ..expect()
    };
    assert_eq!(
        verify(&t, &jwks(), &other_agent),
        Err(VerifyError::WrongAgent("bot".into()))
    );
    let other_call = Expected {
        call_hash: &"ab".repeat(32),
        ..expect()
    };
    assert!(matches!(
        verify(&t, &jwks(), &other_call),
        Err(VerifyError::WrongCall { .. })
    ));
    let other_approval = Expected {
        approval_id: Some("a-2"),
        ..expect()
    };
    assert_eq!(
        verify(&t, &jwks(), &other_approval),
        Err(VerifyError::WrongApproval("a-1".into()))
    );
}

#[test]
fn an_expired_token_is_refused() {
    let t = signed(&header(), &claims());
    for now in [NOW + 290, NOW + 10_000] {
        let late = Expected { now, ..expect() };
        assert_eq!(
            verify(&t, &jwks(), &late),
            Err(VerifyError::Expired(NOW + 290))
        );
    }
    let just_before = Expected {
        now: NOW + 289,
        ..expect()
    };
    assert!(verify(&t, &jwks(), &just_before).is_ok());
}

#[test]
fn an_oversized_token_is_refused_before_it_is_decoded() {
    let padded = json!({"jti": "t".repeat(MAX_TOKEN_BYTES), "sub": "bot", "aid": "a-1",
        "call_hash": HASH, "scope": "once", "iat": NOW, "exp": NOW + 1})
    .to_string();
    assert_eq!(
        check(&signed(&header(), &padded)),
        Err(VerifyError::Oversized)
    );
    // Under the size limit but a claim too long: malformed.
    let long = json!({"jti": "t".repeat(300), "sub": "bot", "aid": "a-1",
        "call_hash": HASH, "scope": "once", "iat": NOW, "exp": NOW + 1})
    .to_string();
    assert!(matches!(
        check(&signed(&header(), &long)),
        Err(VerifyError::Malformed(_))
    ));
}

#[test]
fn duplicate_keys_in_header_or_claims_are_refused() {
    // The second `alg` would win in a lenient parser; the second `sub` / `call_hash` would
    // let a token say one thing to one verifier and another to the next.
    let k = kid();
    let h = format!(r#"{{"alg":"none","alg":"EdDSA","kid":"{k}","typ":"{TYP}"}}"#);
    assert!(matches!(
        check(&signed(&h, &claims())),
        Err(VerifyError::Malformed(_))
    ));
    let h = format!(r#"{{"alg":"EdDSA","kid":"{k}","kid":"{k}"}}"#);
    assert!(matches!(
        check(&signed(&h, &claims())),
        Err(VerifyError::Malformed(_))
    ));
    let c = format!(
        r#"{{"jti":"t-1","sub":"eve","sub":"bot","aid":"a-1","call_hash":"{HASH}","scope":"once","iat":{},"exp":{}}}"#,
        NOW - 10,
        NOW + 290
    );
    assert!(matches!(
        check(&signed(&header(), &c)),
        Err(VerifyError::Malformed(_))
    ));
    let c = format!(
        r#"{{"jti":"t-1","sub":"bot","aid":"a-1","call_hash":"{}","call_hash":"{HASH}","scope":"once","iat":{},"exp":{}}}"#,
        "ab".repeat(32),
        NOW - 10,
        NOW + 290
    );
    assert!(matches!(
        check(&signed(&header(), &c)),
        Err(VerifyError::Malformed(_))
    ));
}

#[test]
fn header_members_beyond_alg_kid_typ_are_refused() {
    // An embedded `jwk` or a `jku` would let the token name its own key.
    let public = B64.encode(key().verifying_key().to_bytes());
    for extra in [
        json!({"jwk": {"kty": "OKP", "crv": "Ed25519", "x": public}}),
        json!({"jku": "https://evil.example/jwks.json"}),
        json!({"crit": ["exp"]}),
    ] {
        let mut h = json!({"alg": "EdDSA", "kid": kid(), "typ": TYP});
        for (k, v) in extra.as_object().unwrap() {
            h[k] = v.clone();
        }
        let t = signed(&h.to_string(), &claims());
        assert!(matches!(check(&t), Err(VerifyError::Malformed(_))), "{h}");
    }
    let other_typ = json!({"alg": "EdDSA", "kid": kid(), "typ": "JWT"}).to_string();
    assert!(matches!(
        check(&signed(&other_typ, &claims())),
        Err(VerifyError::Algorithm(_))
    ));
    // Found by review: `typ` was optional, though the header is exactly `alg`, `kid`, `typ`.
    let no_typ = json!({"alg": "EdDSA", "kid": kid()}).to_string();
    assert!(matches!(
        check(&signed(&no_typ, &claims())),
        Err(VerifyError::Algorithm(_))
    ));
}

#[test]
fn an_edited_byte_anywhere_is_refused() {
    let t = signed(&header(), &claims());
    for i in 0..t.len() {
        let mut b = t.clone().into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(b).unwrap();
        if edited != t {
            assert!(check(&edited).is_err(), "byte {i} edited still verifies");
        }
    }
}

#[test]
fn a_jwks_with_a_short_key_is_refused_not_a_panic() {
    let short = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AAAA", "kid": "k"}]});
    assert!(matches!(
        Jwks::from_json(&short.to_string()),
        Err(VerifyError::BadKeySet(_))
    ));
    let set = jwks().to_json().to_string();
    assert_eq!(Jwks::from_json(&set).unwrap(), jwks());
}

/// Found by review: a key set's `kid` was taken as written, so a set merged from two gateways
/// (or a proxy's edit) could list one gateway's key under the other's `kid`, and a token
/// naming that `kid` verified with a key not its own. A `kid` must be its key's RFC 7638
/// thumbprint.
#[test]
fn a_jwks_whose_kid_is_not_its_keys_thumbprint_is_refused() {
    let ours = jwks().to_json();
    let x = ours["keys"][0]["x"].clone();
    let other_kid = assent_verify::thumbprint(&[7u8; 32]);
    let renamed = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": other_kid}]});
    let e = Jwks::from_json(&renamed.to_string()).unwrap_err();
    assert!(
        matches!(&e, VerifyError::BadKeySet(m) if m.contains("thumbprint")),
        "{e}"
    );
}
