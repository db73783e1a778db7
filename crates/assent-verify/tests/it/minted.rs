//! Tokens a real gateway minted (a real SQLite store in a temporary directory,
//! `assent_server::run` on a loopback port, as the API client's live tests start it), got
//! through the HTTP API and verified offline: with this crate against the JWKS fetched from
//! `GET /v1/keys` and `GET /.well-known/jwks.json`, and with the Python recipe of
//! `docs/tokens.md` (`cryptography`, and PyJWT).

use assent_api::approvals::DecisionRequest;
use assent_api::gate::{GateAnswer, ToolCallRequest};
use assent_api::{Client, DecisionKind};
use assent_core::policy::Registry;
use assent_server::config::{Principal, PrincipalKind};
use assent_server::{AppState, Loopback, Settings};
use assent_store::Store;
use assent_verify::{Expected, Jwks, VerifyError, call_hash, verify};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn principal(name: &str, kind: PrincipalKind) -> Principal {
    use sha2::Digest as _;
    Principal {
        name: name.into(),
        kind,
        key_sha256: sha2::Sha256::digest(format!("{name}-key").as_bytes()).into(),
        owns: Vec::new(),
    }
}

/// A gateway with agent `bot` (`pay` over 100 held for role `finance`) and operator `alice`
/// (`finance`); keys `NAME-key`.
async fn start(dir: &Path) -> Loopback {
    let gov = assent_testkit::fixtures::policy(
        "acme.test.pay-v1",
        "- tool: pay\n  approvers: [finance]\n",
    );
    let reg = Registry::load(
        &[(
            "bot.agf.yaml".into(),
            assent_testkit::fixtures::BOT_AGENT.into(),
        )],
        &[("gov.yaml".into(), gov)],
    )
    .unwrap();
    let principals = vec![
        principal(
            "alice",
            PrincipalKind::Operator {
                roles: vec!["finance".into()],
            },
        ),
        principal(
            "bot",
            PrincipalKind::Agent {
                agent_id: "bot".into(),
            },
        ),
    ];
    let store = Store::open(
        dir,
        300_000,
        std::sync::Arc::new(assent_server::WireEnvelopes),
    )
    .unwrap();
    let settings = Settings {
        approval_timeout_ms: Some(300_000),
        ..Settings::default()
    };
    Loopback::start(AppState::new(store, reg, principals, settings))
        .await
        .unwrap()
}

/// A token minted for `pay(amount, to: bob)`: proposed by `bot`, approved by `alice`, read by
/// `bot`. Returns (token, canonical call, approval id).
async fn minted(url: &str, amount: u64) -> (String, String, String) {
    let bot = Client::new(url, "bot-key").unwrap();
    let alice = Client::new(url, "alice-key").unwrap();
    let call = ToolCallRequest::new(
        "bot",
        "s1",
        "pay",
        None,
        json!({"amount": amount, "to": "bob"}),
    );
    let GateAnswer::Pending(p) = bot.propose(&call).await.unwrap() else {
        panic!("pay {amount} should be held")
    };
    alice
        .decide(&p.approval_id, &DecisionRequest::new(DecisionKind::Approve))
        .await
        .unwrap();
    let a = bot.approval(&p.approval_id).await.unwrap();
    (
        a.token.expect("the agent gets its token"),
        a.canonical,
        a.id,
    )
}

/// `GET path` without any key: status and body.
async fn get_open(url: &str, path: &str) -> (u16, String) {
    let r = reqwest::get(format!("{url}{path}")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn a_token_the_gateway_minted_verifies_offline_against_its_jwks() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (token, canonical, aid) = minted(&gw.url, 500).await;
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
    let gw = start(dir.path()).await;
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
    }
    let _ = gw.stop().await;
}
