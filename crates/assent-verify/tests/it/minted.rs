//! Tokens a real gateway minted (a real SQLite store in a temporary directory,
//! `assent_server::run` on a loopback port, as the API client's live tests start it), got
//! through the HTTP API and verified offline: with this crate against the JWKS fetched from
//! `GET /v1/keys` and `GET /.well-known/jwks.json`, and with the Python recipe of
//! `docs/tokens.md` (`cryptography`, and PyJWT).

use crate::gateway::{get_open, minted, now_s, start};
use assent_verify::{Expected, Jwks, VerifyError, call_hash, verify};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

#[tokio::test]
async fn a_token_the_gateway_minted_verifies_offline_against_its_jwks() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, canonical, aid) = minted(&gw.url, 500).await;
    // About 540 bytes (docs/tokens.md), far under the verifiers' limit.
    assert!((400..600).contains(&token.len()), "{}", token.len());
    let (s, keys) = get_open(&gw.url, "/v1/keys").await;
    assert_eq!(s, 200, "{keys}");
    let (s, well_known) = get_open(&gw.url, "/.well-known/jwks.json").await;
    assert_eq!((s, &well_known), (200, &keys));
    let doc: Value = serde_json::from_str(&keys).unwrap();
    let jwk = &doc["keys"][0];
    assert_eq!(
        (&jwk["kty"], &jwk["crv"], &jwk["alg"], &jwk["use"]),
        (
            &json!("OKP"),
            &json!("Ed25519"),
            &json!("EdDSA"),
            &json!("sig")
        )
    );
    let jwks = Jwks::from_json(&keys).unwrap();
    let hash = call_hash(canonical.as_bytes());
    let expected = Expected {
        call_hash: &hash,
        agent: Some("bot"),
        approval_id: Some(&aid),
        now: now_s(),
    };
    let c = verify(&token, &jwks, &expected).unwrap();
    assert_eq!((c.sub.as_str(), c.aid.as_str()), ("bot", aid.as_str()));
    assert_eq!(c.scope, "once");
    assert!(c.iat <= expected.now && c.exp > expected.now && c.exp - c.iat <= 300);

    // Any byte changed: refused.
    for i in 0..token.len() {
        let mut b = token.clone().into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(b).unwrap();
        if edited != token {
            assert!(verify(&edited, &jwks, &expected).is_err(), "byte {i}");
        }
    }
    // Another call (another amount), and the clock past `exp`: refused.
    let other = call_hash(canonical.replace("500", "501").as_bytes());
    let wrong_call = Expected {
        call_hash: &other,
        ..expected
    };
    assert!(matches!(
        verify(&token, &jwks, &wrong_call),
        Err(VerifyError::WrongCall { .. })
    ));
    let late = Expected {
        now: c.exp,
        ..expected
    };
    assert_eq!(
        verify(&token, &jwks, &late),
        Err(VerifyError::Expired(c.exp))
    );
    let _ = gw.stop().await;
}

/// The interpreter the recipe runs under: `ASSENT_PYTHON`, else the repository's `.venv`
/// (which `scripts/test.sh` makes with tests/e2e/requirements.txt: `cryptography`, `PyJWT`),
/// else `python3`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("ASSENT_PYTHON") {
        return p.into();
    }
    let venv = repo().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python block of `docs/tokens.md` that starts with the line `# recipe: NAME`.
fn recipe(name: &str) -> String {
    let doc = std::fs::read_to_string(repo().join("docs/tokens.md")).unwrap();
    let marker = format!("# recipe: {name}\n");
    let start = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/tokens.md has no `{marker}`"));
    let rest = &doc[start..];
    rest[..rest.find("```").expect("the block ends")].to_string()
}

/// Runs recipe `name` with the JWKS file, the token and the canonical call as arguments:
/// its exit status and output.
fn run_recipe(name: &str, dir: &Path, jwks: &str, token: &str, canonical: &str) -> (bool, String) {
    let script = dir.join(format!("recipe_{name}.py"));
    std::fs::write(&script, recipe(name)).unwrap();
    let keys = dir.join("jwks.json");
    std::fs::write(&keys, jwks).unwrap();
    let out = std::process::Command::new(python())
        .arg(&script)
        .arg(&keys)
        .arg(token)
        .arg(canonical)
        .output()
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Whether the recipe's interpreter has PyJWT (in CI it must: tests/e2e/requirements.txt).
fn has_pyjwt() -> bool {
    let ok = std::process::Command::new(python())
        .args(["-c", "import jwt"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok || std::env::var_os("CI").is_none(),
        "CI's Python has no PyJWT"
    );
    ok
}

#[tokio::test]
async fn the_python_recipe_verifies_a_minted_token_and_refuses_an_edited_one() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path(), 300_000).await;
    let (token, canonical, aid) = minted(&gw.url, 700).await;
    let (_, keys) = get_open(&gw.url, "/.well-known/jwks.json").await;
    let mut recipes = vec!["cryptography"];
    if has_pyjwt() {
        recipes.push("pyjwt");
    }
    let scratch = tempfile::tempdir().unwrap();
    for r in recipes {
        let (ok, out) = run_recipe(r, scratch.path(), &keys, &token, &canonical);
        assert!(ok, "{r}: {out}");
        let claims: Value = serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("{out}"));
        assert_eq!(
            (&claims["sub"], &claims["aid"]),
            (&json!("bot"), &json!(aid))
        );
        // One byte of the signature, of the claims, or of the call changed: refused.
        let sig_at = token.len() - 5;
        let claims_at = token.find('.').unwrap() + 8;
        for at in [sig_at, claims_at] {
            let mut b = token.clone().into_bytes();
            b[at] = if b[at] == b'A' { b'B' } else { b'A' };
            let edited = String::from_utf8(b).unwrap();
            let (ok, out) = run_recipe(r, scratch.path(), &keys, &edited, &canonical);
            assert!(!ok, "{r}: an edited token at {at} verified: {out}");
        }
        let other = canonical.replace("700", "701");
        let (ok, out) = run_recipe(r, scratch.path(), &keys, &token, &other);
        assert!(!ok && out.contains("call_hash"), "{r}: {out}");
        // Found by review: the recipes took a key by its `kid` alone, so a set merged from two
        // gateways, or a key listed under another key's name, was used; assent-verify refuses
        // a `kid` that is not the key's RFC 7638 thumbprint, and so do they now.
        let mut set: Value = serde_json::from_str(&keys).unwrap();
        let mut foreign = set["keys"][0].clone();
        foreign["x"] = json!("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
        set["keys"].as_array_mut().unwrap().insert(0, foreign);
        let (ok, out) = run_recipe(r, scratch.path(), &set.to_string(), &token, &canonical);
        assert!(
            !ok && out.contains("not named by its thumbprint"),
            "{r}: {out}"
        );
    }
    let _ = gw.stop().await;
}
