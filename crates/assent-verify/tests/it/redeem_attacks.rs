//! The attacks of `attacks.rs`, sent to a real gateway's `POST /v1/tokens/redeem`: tokens
//! forged under the gateway's real token key (read from its `keys_dir`, as an attacker who
//! stole it could not do without also holding a matching row) or under none. Each is refused
//! with a 4xx and a JSON body naming why, audited as `token.refused`, and the genuine token
//! still redeems once afterwards where the test says so.

use crate::gateway::{audit_actors, minted, pay_body, redeem_pay, redeemed, refused, start};
use assent_verify::{TYP, thumbprint};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signer as _, SigningKey};
use serde_json::{Value, json};
use std::path::Path;

fn real_key(dir: &Path) -> SigningKey {
    let seed: [u8; 32] = std::fs::read(dir.join("token.key"))
        .unwrap()
        .try_into()
        .unwrap();
    SigningKey::from_bytes(&seed)
}

fn kid_of(k: &SigningKey) -> String {
    thumbprint(&k.verifying_key().to_bytes())
}

/// `header.claims.sig` of the JSON texts as given, signed with `key`.
fn sign_raw(key: &SigningKey, header: &str, claims: &str) -> String {
    let msg = format!("{}.{}", B64.encode(header), B64.encode(claims));
    format!("{msg}.{}", B64.encode(key.sign(msg.as_bytes()).to_bytes()))
}

/// `claims` signed as a genuine token: the real key of the gateway in `dir`, its kid.
fn sign_real(dir: &Path, claims: &Value) -> String {
    let key = real_key(dir);
    sign_raw(&key, &header(&kid_of(&key)), &claims.to_string())
}

/// The claims of a genuine token, as JSON.
fn claims_of(token: &str) -> Value {
    let part = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&B64.decode(part).unwrap()).unwrap()
}

fn header(kid: &str) -> String {
    json!({"alg": "EdDSA", "kid": kid, "typ": TYP}).to_string()
}

#[tokio::test]
async fn redeem_refuses_alg_none_hs256_with_the_public_key_and_an_unknown_kid() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, _, _) = minted(&gw.url, 500).await;
    let claims = claims_of(&token).to_string();
    let key = real_key(dir.path());
    let kid = kid_of(&key);

    let none = json!({"alg": "none", "kid": kid, "typ": TYP}).to_string();
    let unsigned = format!("{}.{}.", B64.encode(&none), B64.encode(&claims));
    let hs = json!({"alg": "HS256", "kid": kid, "typ": TYP}).to_string();
    let public = key.verifying_key().to_bytes();
    let msg = format!("{}.{}", B64.encode(&hs), B64.encode(&claims));
    let mac = jsonwebtoken::crypto::sign(
        msg.as_bytes(),
        &jsonwebtoken::EncodingKey::from_secret(&public),
        jsonwebtoken::Algorithm::HS256,
    )
    .unwrap();
    let stranger = SigningKey::from_bytes(&[3u8; 32]);
    let forged = [
        unsigned,
        sign_raw(&key, &none, &claims),
        format!("{msg}.{mac}"),
        // Another key under its own kid, and under ours.
        sign_raw(&stranger, &header(&kid_of(&stranger)), &claims),
        sign_raw(&stranger, &header(&kid), &claims),
    ];
    for t in &forged {
        refused(
            redeem_pay(&gw.url, "bot-key", t, 500).await,
            401,
            "TOKEN_INVALID",
        );
    }
    assert_eq!(
        audit_actors(dir.path(), "token.refused").len(),
        forged.len()
    );
    // None of that burnt the genuine token.
    let (s, b) = redeem_pay(&gw.url, "bot-key", &token, 500).await;
    assert_eq!(s, 200, "{b}");
    let _ = gw.stop().await;
}

#[tokio::test]
async fn redeem_refuses_another_agents_call_or_approval_token() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, _, _) = minted(&gw.url, 500).await;
    let (second, _, _) = minted(&gw.url, 600).await;
    // Another agent presents bot's token.
    refused(
        redeem_pay(&gw.url, "other-key", &token, 500).await,
        403,
        "FORBIDDEN",
    );
    // Another call: the amount differs.
    refused(
        redeem_pay(&gw.url, "bot-key", &token, 501).await,
        403,
        "TOKEN_MISMATCH",
    );
    // Another approval: the first token's jti with the second's approval id and call, signed
    // with the real key, matches no minted row.
    let mut c = claims_of(&token);
    let c2 = claims_of(&second);
    c["aid"] = c2["aid"].clone();
    c["call_hash"] = c2["call_hash"].clone();
    let spliced = sign_real(dir.path(), &c);
    refused(
        redeem_pay(&gw.url, "bot-key", &spliced, 600).await,
        401,
        "TOKEN_INVALID",
    );
    // A token re-signed for another agent: the row says bot.
    let mut c = claims_of(&token);
    c["sub"] = json!("other");
    let resigned = sign_real(dir.path(), &c);
    refused(
        redeem_pay(&gw.url, "other-key", &resigned, 500).await,
        403,
        "FORBIDDEN",
    );
    assert_eq!(audit_actors(dir.path(), "token.refused").len(), 4);
    // Both genuine tokens still run their own calls.
    redeemed(&gw.url, "bot-key", pay_body(&token, 500)).await;
    redeemed(&gw.url, "bot-key", pay_body(&second, 600)).await;
    let _ = gw.stop().await;
}

#[tokio::test]
async fn redeem_refuses_a_replayed_token() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, _, _) = minted(&gw.url, 500).await;
    redeemed(&gw.url, "bot-key", pay_body(&token, 500)).await;
    refused(
        redeem_pay(&gw.url, "bot-key", &token, 500).await,
        409,
        "TOKEN_USED",
    );
    // Re-encoded (same claims, signed again): the same jti, burnt.
    let again = sign_real(dir.path(), &claims_of(&token));
    refused(
        redeem_pay(&gw.url, "bot-key", &again, 500).await,
        409,
        "TOKEN_USED",
    );
    let _ = gw.stop().await;
}

#[tokio::test]
async fn redeem_refuses_an_expired_token() {
    let dir = tempfile::tempdir().unwrap();
    // Tokens live 1 ms: expired by the time the agent presents it.
    let gw = start(dir.path(), 1).await;
    let (token, _, _) = minted(&gw.url, 500).await;
    std::thread::sleep(std::time::Duration::from_millis(5));
    refused(
        redeem_pay(&gw.url, "bot-key", &token, 500).await,
        410,
        "TOKEN_EXPIRED",
    );
    let _ = gw.stop().await;
}

#[tokio::test]
async fn redeem_refuses_an_oversized_token_and_duplicate_json_keys() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, _, _) = minted(&gw.url, 500).await;
    let key = real_key(dir.path());
    let kid = kid_of(&key);
    // A genuine-looking token padded past 2048 bytes, signed with the real key.
    let mut c = claims_of(&token);
    c["jti"] = json!(format!(
        "{}{}",
        c["jti"].as_str().unwrap(),
        "x".repeat(2100)
    ));
    let huge = sign_raw(&key, &header(&kid), &c.to_string());
    refused(
        redeem_pay(&gw.url, "bot-key", &huge, 500).await,
        401,
        "TOKEN_INVALID",
    );
    // Duplicate keys, each signed with the real key: header `alg`, claims `sub`, claims
    // `call_hash` (the first copy another call's).
    let claims = claims_of(&token);
    let text = claims.to_string();
    let dup_header = format!(r#"{{"alg":"none","alg":"EdDSA","kid":"{kid}","typ":"{TYP}"}}"#);
    let dup_sub = text.replacen("{", r#"{"sub":"other","#, 1);
    let dup_hash = text.replacen("{", &format!(r#"{{"call_hash":"{}","#, "ab".repeat(32)), 1);
    for t in [
        sign_raw(&key, &dup_header, &text),
        sign_raw(&key, &header(&kid), &dup_sub),
        sign_raw(&key, &header(&kid), &dup_hash),
    ] {
        refused(
            redeem_pay(&gw.url, "bot-key", &t, 500).await,
            401,
            "TOKEN_INVALID",
        );
    }
    assert_eq!(audit_actors(dir.path(), "token.refused").len(), 4);
    redeemed(&gw.url, "bot-key", pay_body(&token, 500)).await;
    let _ = gw.stop().await;
}
