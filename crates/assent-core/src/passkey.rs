//! Passkey-signed votes (issue 14 §4): the WebAuthn challenge that binds a vote to one
//! approval, its exact call and the decision ([`vote_challenge`]), the proof stored with the
//! vote ([`PasskeyProof`]: the assertion and the credential's public key), and the offline
//! check of that proof ([`check`]) that receipts rely on.
//!
//! The live ceremony (credential ownership, signature counter, origin) is checked by the
//! gateway with `webauthn-rs`; [`check`] re-checks what makes the proof evidence on its own:
//! the signature of the credential's key over the authenticator data and the client data, a
//! `webauthn.get` ceremony for this relying party with the user present and verified, and a
//! challenge derived from the approval id, the `call_hash` and the decision — so no assertion
//! made for another approval, call or decision verifies, and nobody without the authenticator
//! can make one under that credential's key, the gateway included. Which operator a key
//! belongs to is not in the proof: that is the hash-chained `passkey.registered` audit record
//! with the same credential id and key (a receipt's signer chooses the key the receipt
//! carries, so `assent receipt verify` prints each one to compare; found by review).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `purpose` in every vote challenge, so a vote's assertion is never valid for anything
/// else (a sign-in, another protocol version).
pub const PURPOSE: &str = "assent.vote.v1";

/// The WebAuthn challenge for a vote (32 bytes): SHA-256 of the RFC 8785 canonical JSON of
/// `{"approval_id", "call_hash", "decision", "nonce", "purpose": PURPOSE}`. `nonce` is random
/// per ceremony (hex), so two challenges for the same vote differ.
pub fn vote_challenge(approval_id: &str, call_hash: &str, decision: &str, nonce: &str) -> [u8; 32] {
    let doc = serde_json::json!({
        "approval_id": approval_id, "call_hash": call_hash, "decision": decision,
        "nonce": nonce, "purpose": PURPOSE,
    });
    let text = crate::canonical::canonical_value(&doc).expect("strings only");
    Sha256::digest(text.as_bytes()).into()
}

/// A credential's public key as a JWK (RFC 7517/8037): `{"kty": "EC", "crv": "P-256", "x",
/// "y"}` for ES256, or `{"kty": "OKP", "crv": "Ed25519", "x"}` for EdDSA; coordinates
/// base64url without padding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicJwk {
    /// `EC` or `OKP`.
    pub kty: String,
    /// `P-256` or `Ed25519`.
    pub crv: String,
    /// The x coordinate (EC) or the key (OKP).
    pub x: String,
    /// The y coordinate (EC only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
}

/// The evidence a passkey-signed vote carries (stored with the vote, shown in receipts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasskeyProof {
    /// The credential id (base64url).
    pub credential_id: String,
    /// The credential's public key, as registered.
    pub public_key: PublicJwk,
    /// The relying party id the credential is scoped to (a host name).
    pub rp_id: String,
    /// The challenge's nonce (see [`vote_challenge`]).
    pub nonce: String,
    /// The assertion's `authenticatorData` (base64url).
    pub authenticator_data: String,
    /// The assertion's `clientDataJSON` (base64url).
    pub client_data_json: String,
    /// The assertion's signature (base64url; ASN.1 DER for ES256).
    pub signature: String,
}

/// Why a [`PasskeyProof`] does not prove the vote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasskeyError {
    /// A field is not base64url, the client data is not JSON, the authenticator data is too
    /// short, or the key is not a P-256 or Ed25519 key.
    #[error("the passkey proof is malformed: {0}")]
    Malformed(&'static str),
    /// The ceremony was not a `webauthn.get` for this vote's challenge.
    #[error("the passkey assertion was made for something else: {0}")]
    Binding(&'static str),
    /// The authenticator data is for another relying party, or the user was not present and
    /// verified.
    #[error("the passkey assertion does not meet the policy: {0}")]
    Policy(&'static str),
    /// The signature does not verify with the credential's key.
    #[error("the passkey signature does not verify")]
    Signature,
}

fn b64(s: &str, what: &'static str) -> Result<Vec<u8>, PasskeyError> {
    B64.decode(s).map_err(|_| PasskeyError::Malformed(what))
}

/// Checks `p` as the proof of `decision` on approval `approval_id` of the call `call_hash`:
/// the client data is a `webauthn.get` whose challenge is [`vote_challenge`] of these values
/// and `p.nonce`, made at an origin of `p.rp_id`'s domain and not in a cross-origin frame
/// ([`check_origin`]); the authenticator data's RP id hash is SHA-256 of `p.rp_id`, with the
/// user-present and user-verified flags; and the signature over `authenticatorData ||
/// SHA-256(clientDataJSON)` verifies with `p.public_key` (ES256).
pub fn check(
    p: &PasskeyProof,
    approval_id: &str,
    call_hash: &str,
    decision: &str,
) -> Result<(), PasskeyError> {
    let client = b64(&p.client_data_json, "clientDataJSON")?;
    let auth = b64(&p.authenticator_data, "authenticatorData")?;
    let sig = b64(&p.signature, "signature")?;
    let cd: serde_json::Value =
        serde_json::from_slice(&client).map_err(|_| PasskeyError::Malformed("clientDataJSON"))?;
    if cd.get("type").and_then(|t| t.as_str()) != Some("webauthn.get") {
        return Err(PasskeyError::Binding("not a webauthn.get ceremony"));
    }
    let want = B64.encode(vote_challenge(approval_id, call_hash, decision, &p.nonce));
    if cd.get("challenge").and_then(|c| c.as_str()) != Some(want.as_str()) {
        return Err(PasskeyError::Binding(
            "the challenge is not this approval's, call's and decision's",
        ));
    }
    if auth.len() < 37 {
        return Err(PasskeyError::Malformed("authenticatorData"));
    }
    if auth[..32] != Sha256::digest(p.rp_id.as_bytes())[..] {
        return Err(PasskeyError::Policy("made for another relying party"));
    }
    if auth[32] & 0x05 != 0x05 {
        return Err(PasskeyError::Policy(
            "the user was not present and verified",
        ));
    }
    check_origin(&cd, &p.rp_id)?;
    let mut signed = auth.clone();
    signed.extend_from_slice(&Sha256::digest(&client));
    verify(&p.public_key, &signed, &sig)
}

/// Checks the client data `cd`'s `origin` as WebAuthn Level 3 §7.2 step 9 lets a browser make
/// it for `rp_id`: an `https` origin whose host is `rp_id` or a subdomain of it (or `http` on
/// `localhost`), and no `crossOrigin: true` (§7.2 step 10: an assertion made in a frame of
/// another site). Found by review: the offline check read only `type` and `challenge`, so an
/// assertion made anywhere verified; which origin of the domain it was is for the verifier to
/// compare ([`PasskeyProof::origin`], `assent receipt verify --origin`).
fn check_origin(cd: &serde_json::Value, rp_id: &str) -> Result<(), PasskeyError> {
    if cd.get("crossOrigin").and_then(|c| c.as_bool()) == Some(true) {
        return Err(PasskeyError::Binding("made in a cross-origin frame"));
    }
    let origin = cd.get("origin").and_then(|o| o.as_str()).unwrap_or("");
    let url = url::Url::parse(origin).map_err(|_| PasskeyError::Malformed("origin"))?;
    origin_fits(&url, rp_id).map_err(PasskeyError::Binding)
}

/// Whether `url` is an origin at which a browser makes WebAuthn ceremonies for relying party
/// `rp_id` (WebAuthn Level 3 §5.1.4.1, §13.4.9): a secure context — `https`, or `http` on
/// `localhost` or a `*.localhost` name — whose host (a domain name, not an address) is `rp_id`
/// or a subdomain of it. The gateway's configuration is held to it as each assertion is.
/// Errors: why not.
pub fn origin_fits(url: &url::Url, rp_id: &str) -> Result<(), &'static str> {
    let host = match url.host() {
        Some(url::Host::Domain(h)) => h.to_ascii_lowercase(),
        _ => return Err("the origin has no domain name"),
    };
    let rp = rp_id.to_ascii_lowercase();
    let on_domain = host == rp || host.ends_with(&format!(".{rp}"));
    let local = host == "localhost" || host.ends_with(".localhost");
    let secure = url.scheme() == "https" || (url.scheme() == "http" && local);
    if !on_domain || !secure {
        return Err("the origin is not a secure origin of the relying party's domain");
    }
    Ok(())
}

impl PasskeyProof {
    /// The origin its assertion was made at (`clientDataJSON`'s `origin`), `None` when the
    /// client data does not read. [`check`] holds it to the relying party's domain; a verifier
    /// compares it with the dashboard's own origin.
    pub fn origin(&self) -> Option<String> {
        let client = B64.decode(&self.client_data_json).ok()?;
        let cd: serde_json::Value = serde_json::from_slice(&client).ok()?;
        cd.get("origin")?.as_str().map(str::to_string)
    }
}

/// Verifies `sig` over `msg` with `key` (ES256, a DER signature: the only algorithm passkeys
/// are registered with).
fn verify(key: &PublicJwk, msg: &[u8], sig: &[u8]) -> Result<(), PasskeyError> {
    match (key.kty.as_str(), key.crv.as_str()) {
        ("EC", "P-256") => {
            use p256::ecdsa::signature::Verifier;
            let x = b64(&key.x, "x")?;
            let y = b64(key.y.as_deref().unwrap_or(""), "y")?;
            if x.len() != 32 || y.len() != 32 {
                return Err(PasskeyError::Malformed("P-256 coordinates"));
            }
            let mut sec1 = vec![4u8];
            sec1.extend_from_slice(&x);
            sec1.extend_from_slice(&y);
            let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(&sec1)
                .map_err(|_| PasskeyError::Malformed("P-256 key"))?;
            let s = p256::ecdsa::Signature::from_der(sig).map_err(|_| PasskeyError::Signature)?;
            vk.verify(msg, &s).map_err(|_| PasskeyError::Signature)
        }
        // Only ES256 is ever registered (registration offers nothing else).
        _ => Err(PasskeyError::Malformed("key type (P-256 only)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer;

    /// A proof made the way an authenticator makes one, with a P-256 key.
    fn proof(decision: &str, flags: u8) -> (PasskeyProof, p256::ecdsa::SigningKey) {
        made_at(decision, flags, r#""origin":"https://x.test""#)
    }

    /// [`proof`] whose client data ends with `origin` (its `origin` and `crossOrigin` members).
    fn made_at(decision: &str, flags: u8, origin: &str) -> (PasskeyProof, p256::ecdsa::SigningKey) {
        let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let point = sk.verifying_key().to_encoded_point(false);
        let challenge = B64.encode(vote_challenge("a1", "h1", decision, "n1"));
        let client = format!(r#"{{"type":"webauthn.get","challenge":"{challenge}",{origin}}}"#);
        let mut auth = Sha256::digest(b"x.test").to_vec();
        auth.push(flags);
        auth.extend_from_slice(&[0, 0, 0, 1]);
        let mut signed = auth.clone();
        signed.extend_from_slice(&Sha256::digest(client.as_bytes()));
        let sig: p256::ecdsa::Signature = sk.sign(&signed);
        let p = PasskeyProof {
            credential_id: "c1".into(),
            public_key: PublicJwk {
                kty: "EC".into(),
                crv: "P-256".into(),
                x: B64.encode(point.x().unwrap()),
                y: Some(B64.encode(point.y().unwrap())),
            },
            rp_id: "x.test".into(),
            nonce: "n1".into(),
            authenticator_data: B64.encode(&auth),
            client_data_json: B64.encode(client.as_bytes()),
            signature: B64.encode(sig.to_der().as_bytes()),
        };
        (p, sk)
    }

    #[test]
    fn a_proof_verifies_for_its_vote_only() {
        let (p, _) = proof("approve", 0x05);
        assert_eq!(check(&p, "a1", "h1", "approve"), Ok(()));
        assert!(matches!(
            check(&p, "a2", "h1", "approve"),
            Err(PasskeyError::Binding(_))
        ));
        assert!(matches!(
            check(&p, "a1", "h2", "approve"),
            Err(PasskeyError::Binding(_))
        ));
        assert!(matches!(
            check(&p, "a1", "h1", "deny"),
            Err(PasskeyError::Binding(_))
        ));
    }

    #[test]
    fn a_changed_byte_or_a_missing_flag_fails() {
        let (mut p, _) = proof("approve", 0x01);
        assert!(matches!(
            check(&p, "a1", "h1", "approve"),
            Err(PasskeyError::Policy(_))
        ));
        let (good, _) = proof("approve", 0x05);
        p = good.clone();
        p.rp_id = "evil.test".into();
        assert!(matches!(
            check(&p, "a1", "h1", "approve"),
            Err(PasskeyError::Policy(_))
        ));
        let mut auth = B64.decode(&good.authenticator_data).unwrap();
        auth[36] ^= 1; // the signature counter
        p = good.clone();
        p.authenticator_data = B64.encode(&auth);
        assert_eq!(
            check(&p, "a1", "h1", "approve"),
            Err(PasskeyError::Signature)
        );
        p = good;
        p.public_key.kty = "RSA".into();
        assert!(matches!(
            check(&p, "a1", "h1", "approve"),
            Err(PasskeyError::Malformed(_))
        ));
    }

    /// Attack (found by review): an assertion for this vote's challenge made at another site
    /// (an XSS on a sibling of a parent-domain RP id is stopped by the browser; one on any
    /// other site, or in a cross-origin frame, by the check) verified offline, the origin
    /// never read.
    #[test]
    fn an_assertion_made_off_the_relying_partys_domain_or_in_a_frame_fails() {
        let ok = [
            r#""origin":"https://x.test""#,
            r#""origin":"https://dash.X.test:8443""#,
            r#""origin":"https://x.test","crossOrigin":false"#,
        ];
        let url = |u: &str| url::Url::parse(u).unwrap();
        assert_eq!(
            origin_fits(&url("http://dash.localhost:8080"), "localhost"),
            Ok(())
        );
        assert_eq!(
            origin_fits(&url("http://localhost:7878"), "localhost"),
            Ok(())
        );
        assert!(origin_fits(&url("http://dash.example"), "dash.example").is_err());
        for o in ok {
            let (p, _) = made_at("approve", 0x05, o);
            assert_eq!(check(&p, "a1", "h1", "approve"), Ok(()), "{o}");
        }
        let (p, _) = made_at("approve", 0x05, r#""origin":"https://dash.x.test""#);
        assert_eq!(p.origin().as_deref(), Some("https://dash.x.test"));
        let refused = [
            r#""origin":"https://evil.test""#,
            r#""origin":"https://evilx.test""#,
            r#""origin":"https://x.test.evil.test""#,
            r#""origin":"http://x.test""#,
            r#""origin":"https://x.test","crossOrigin":true"#,
            r#""origin":"https://127.0.0.1""#,
            r#""origin":7"#,
            r#""topOrigin":"https://x.test""#,
        ];
        for o in refused {
            let (p, _) = made_at("approve", 0x05, o);
            assert!(check(&p, "a1", "h1", "approve").is_err(), "{o}");
        }
    }
}
