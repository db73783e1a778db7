//! Token key rotation by `kid` (issue 14 §6): `assent_store::keys::rotate_token_key` (what
//! `assent keys rotate-token-key` runs) makes a new current key; tokens signed by the old one
//! keep verifying and redeeming, and the old key stays in the JWKS, until its tokens can have
//! expired; two gateways sharing `keys_dir` (a restarted one and one still running on the old
//! key) accept each other's tokens.

use crate::gateway::{get_open, minted, now_s, pay_body, redeem_pay, redeemed, refused, start};
use assent_verify::{Expected, Jwks, call_hash, verify};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::Value;

fn kid_of(token: &str) -> String {
    let h: Value =
        serde_json::from_slice(&B64.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
    h["kid"].as_str().unwrap().to_string()
}

async fn kids(url: &str) -> Vec<String> {
    let (s, body) = get_open(url, "/v1/keys").await;
    assert_eq!(s, 200, "{body}");
    Jwks::from_json(&body)
        .unwrap()
        .keys
        .into_iter()
        .map(|k| k.kid)
        .collect()
}

#[tokio::test]
async fn rotation_keeps_old_tokens_valid_and_replicas_sharing_keys_dir_agree() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path(), 300_000).await;
    let (old_token, canonical, _) = minted(&a.url, 500).await;
    let old_kid = kid_of(&old_token);
    assert_eq!(kids(&a.url).await, std::slice::from_ref(&old_kid));

    let r = assent_store::keys::rotate_token_key(dir.path()).unwrap();
    assert_eq!(r.retired_kid, old_kid);
    assert_ne!(r.kid, old_kid);
    assert!(dir.path().join(&r.retired_file).exists());

    // A gateway started now (a restart, or another replica) signs with the new key and
    // publishes both, the current first.
    let b = start(dir.path(), 300_000).await;
    assert_eq!(kids(&b.url).await, [r.kid.clone(), old_kid.clone()]);
    let (new_token, new_canonical, _) = minted(&b.url, 600).await;
    assert_eq!(kid_of(&new_token), r.kid);
    // The old token still verifies offline against the new JWKS and redeems at the new
    // gateway.
    let (_, set) = get_open(&b.url, "/.well-known/jwks.json").await;
    let jwks = Jwks::from_json(&set).unwrap();
    let hash = call_hash(canonical.as_bytes());
    let expect = Expected {
        call_hash: &hash,
        agent: Some("bot"),
        approval_id: None,
        now: now_s(),
    };
    verify(&old_token, &jwks, &expect).unwrap();
    redeemed(&b.url, "bot-key", pay_body(&old_token, 500)).await;
    // The gateway still on the old key meets the new kid, re-reads keys_dir and accepts it.
    redeemed(&a.url, "bot-key", pay_body(&new_token, 600)).await;
    assert_eq!(kids(&a.url).await, [r.kid.clone(), old_kid.clone()]);
    let hash = call_hash(new_canonical.as_bytes());
    let jwks_a = Jwks::from_json(&get_open(&a.url, "/v1/keys").await.1).unwrap();
    let expect = Expected {
        call_hash: &hash,
        ..expect
    };
    verify(&new_token, &jwks_a, &expect).unwrap();
    let _ = a.stop().await;
    let _ = b.stop().await;
}

#[tokio::test]
async fn a_retired_key_leaves_the_jwks_once_its_tokens_have_expired() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path(), 300_000).await;
    let (token, _, _) = minted(&a.url, 500).await;
    let _ = a.stop().await;
    // Retired an hour ago (tokens live 5 minutes, plus a minute of grace): expired.
    let seed = std::fs::read(dir.path().join("token.key")).unwrap();
    let hour_ago = (now_s() - 3600) * 1000;
    let retired = dir.path().join(format!("token-retired-{hour_ago}.key"));
    std::fs::write(&retired, &seed).unwrap();
    // A key file only its owner may read, as the store requires.
    std::fs::set_permissions(
        &retired,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(dir.path().join("token.key"), [42u8; 32]).unwrap();
    let b = start(dir.path(), 300_000).await;
    let set = kids(&b.url).await;
    assert_eq!(set.len(), 1, "{set:?}");
    assert_ne!(set[0], kid_of(&token));
    refused(
        redeem_pay(&b.url, "bot-key", &token, 500).await,
        401,
        "TOKEN_INVALID",
    );
    let _ = b.stop().await;
}
