//! Replicas on one PostgreSQL database whose configurations or clocks differ (issue 13 §2): a
//! replica whose principals, agents and policies are older than those another replica put in
//! force serves nothing and withdraws nothing; `serve --adopt-config` puts a configuration in
//! force on purpose; a replica whose clock differs from the database's is not ready. Skipped
//! with `ASSENT_TEST_NO_PG=1`.

use crate::replicas::{AGENT_KEY, held, read, replicas};
use crate::{BIN, OP_KEY, Server, free_port, serve_cmd, serve_with};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Carol's key: an operator only the newer configuration has.
const CAROL_KEY: &str = "carol-key-0123456789abcdef0123456789";

/// `POST path` on `url` with bearer `key` and `body`: status and JSON body.
fn post(url: &str, path: &str, key: &str, body: Value) -> (u16, Value) {
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}{path}"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// `/readyz` of `url`: status and body.
fn readyz(url: &str) -> (u16, Value) {
    let r = reqwest::blocking::get(format!("{url}/readyz")).unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// Waits (at most 15 s) until `url`'s `/readyz` gives reason `reason` (`None`: ready).
fn wait_ready_as(url: &str, reason: Option<&str>) -> Value {
    let start = Instant::now();
    loop {
        let (s, b) = readyz(url);
        if b["reason"].as_str() == reason && (s == 200) == reason.is_none() {
            return b;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "{url}: {s} {b}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `assent serve --config cfg` on `schema`'s database and expects it to
/// refuse to start: its stderr. Killed (and the test failed) if it still runs after 30 s.
fn refused_start(cfg: &Path, url: &str) -> String {
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(cfg)
        .args(["--listen", "127.0.0.1:0"])
        .env("ASSENT_DATABASE_URL", url)
        .env("TEST_ALICE_KEY", OP_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("serve with a superseded configuration started");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `assent replicas --config cfg --json` on the database at `url`: its exit code and output.
fn replicas_seen(cfg: &Path, url: &str) -> (i32, Value) {
    let out = Command::new(BIN)
        .args(["replicas", "--json", "--config"])
        .arg(cfg)
        .env("ASSENT_DATABASE_URL", url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text} {out:?}"));
    (out.status.code().unwrap(), v)
}

/// `assent serve --config cfg --adopt-config` on the database at `url`, once healthy.
fn serve_adopting(cfg: &Path, url: &str) -> Server {
    let port = free_port();
    let mut cmd = serve_cmd(cfg);
    cmd.args(["--adopt-config", "--listen", &format!("127.0.0.1:{port}")])
        .env("ASSENT_DATABASE_URL", url);
    serve_with(cmd, port)
}

/// Attack (found by review): replica B, restarted with an older file than replica A put in
/// force, withdrew in the shared database what A's newer configuration stood behind (the
/// approval of operator carol, whom only the newer file has: her token voided), and went on
/// serving the older principals and policies. Now: A, restarted with the newer file while B
/// serves the older, must be told to adopt it (`--adopt-config`); B then stops serving (`503
/// CONFIG_SUPERSEDED`, `/readyz` `config_superseded`, no host named); restarted with the older
/// file it refuses to start, and carol's approval still redeems; `--adopt-config` puts the
/// older file in force on purpose, which then withdraws what carol approved, and A stops
/// serving in turn until a reload gives it the configuration in force.
#[test]
fn a_replica_with_an_older_configuration_neither_serves_nor_withdraws_the_newer_ones_consent() {
    let Some((schema, dir, cfg, [a, b])) = replicas("") else {
        return;
    };
    let newer = dir.path().join("newer.yaml");
    let older = std::fs::read_to_string(&cfg).unwrap();
    let text = older.replace(
        "principals:\n",
        &format!(
            "principals:\n  - {{name: carol, kind: operator, roles: [finance-admin], key_sha256: \"{}\"}}\n",
            crate::hex_sha256(CAROL_KEY)
        ),
    );
    std::fs::write(&newer, text).unwrap();
    let url = format!("{}&application_name={}", schema.postgres_url, schema.name);
    // A restarts with the newer configuration while B serves the older: only on purpose.
    crate::stop(a);
    let err = refused_start(&newer, &url);
    assert!(
        err.contains("serves another configuration") && err.contains("--adopt-config"),
        "{err}"
    );
    let a2 = serve_adopting(&newer, &url);
    // B, still running the older one, stops serving within a check or two (but its health
    // check and reload stay open), and names no host to a caller without a key.
    let body = wait_ready_as(&b.url, Some("config_superseded"));
    // `assent replicas` shows which one serves what, and exits 2 while one serves an older.
    let (code, seen) = replicas_seen(&newer, &url);
    assert_eq!(code, 2, "{seen}");
    let newest = seen["newest"]["generation"].as_i64().unwrap();
    let list = seen["replicas"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{seen}");
    let by_newest = |n: bool| list.iter().filter(|r| r["newest"] == n).count();
    assert_eq!((by_newest(true), by_newest(false)), (1, 1), "{seen}");
    assert!(list.iter().all(|r| r["live"] == true), "{seen}");
    let behind = list.iter().find(|r| r["newest"] == false).unwrap();
    assert!(behind["generation"].as_i64().unwrap() < newest, "{seen}");
    assert_eq!(
        seen["newest"]["loaded_by"],
        list.iter().find(|r| r["newest"] == true).unwrap()["holder"]
    );
    let text = Command::new(BIN)
        .args(["replicas", "--config"])
        .arg(&newer)
        .env("ASSENT_DATABASE_URL", &url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("newest configuration: generation {newest}"))
            && text.contains("serves the newest")
            && text.contains("serves an older one"),
        "{text}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("reloaded") && !message.contains("pid"),
        "{body}"
    );
    let call = json!({"agent": "ops_bot", "session_id": "s", "tool": "pay", "arguments": {"n": 0}});
    let (s, v) = post(&b.url, "/v1/tool-calls", AGENT_KEY, call);
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("CONFIG_SUPERSEDED")),
        "{v}"
    );
    let health = reqwest::blocking::get(format!("{}/healthz", b.url)).unwrap();
    assert_eq!(health.status().as_u16(), 200);
    // Carol approves two calls through A: one redeemed later, one kept.
    let approve = |id: &str| {
        let path = format!("/v1/approvals/{id}/decision");
        let (s, v) = post(&a2.url, &path, CAROL_KEY, json!({"decision": "approve"}));
        assert_eq!(s, 200, "{v}");
    };
    let (first, second) = (held(&a2.url, "pay", 1), held(&a2.url, "pay", 2));
    approve(&first);
    approve(&second);
    let token = |id: &str| {
        let token = read(&a2.url, id, 0)["token"].clone();
        assert!(token.is_string(), "{id} has a token");
        token
    };
    let tokens = [token(&first), token(&second)];
    let redeem = |url: &str, n: usize| {
        let body = json!({"token": tokens[n - 1], "tool": "pay", "arguments": {"n": n}});
        post(url, "/v1/tokens/redeem", AGENT_KEY, body)
    };
    // B restarted with the older file: refused, and nothing of carol's withdrawn.
    crate::stop(b);
    let err = refused_start(&cfg, &url);
    assert!(
        err.contains("serves another configuration") && err.contains("--adopt-config"),
        "{err}"
    );
    let (s, v) = redeem(&a2.url, 1);
    assert_eq!(s, 200, "carol's approval stands: {v}");
    // Adopted on purpose: the older file is the newest, and carol's consent falls.
    let b2 = serve_adopting(&cfg, &url);
    wait_ready_as(&b2.url, None);
    wait_ready_as(&a2.url, Some("config_superseded"));
    let (s, v) = redeem(&b2.url, 2);
    assert_eq!((s, v["code"].as_str()), (409, Some("TOKEN_USED")), "{v}");
    // A reload of A's own, superseded, file is refused and says so.
    let (s, v) = post(&a2.url, "/v1/reload", OP_KEY, json!({}));
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("CONFIG_SUPERSEDED")),
        "{v}"
    );
    // Attack (found by review): A, superseded, still authenticates with its older principals;
    // an operator's reload of a third file there (one listing a principal the configuration in
    // force left out) would make it the newest and supersede B. Refused, saying how to adopt
    // it on purpose; B keeps serving.
    let third = older.replace(
        "principals:\n",
        &format!(
            "principals:\n  - {{name: mallory, kind: operator, roles: [finance-admin], key_sha256: \"{}\"}}\n",
            crate::hex_sha256("mallory-key-0123456789abcdef0123")
        ),
    );
    std::fs::write(&newer, third).unwrap();
    let (s, v) = post(&a2.url, "/v1/reload", OP_KEY, json!({}));
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("CONFIG_SUPERSEDED")),
        "{v}"
    );
    assert!(
        v["message"].as_str().unwrap().contains("--adopt-config"),
        "{v}"
    );
    wait_ready_as(&b2.url, None);
    // A reload giving A the configuration in force has it serve again.
    std::fs::write(&newer, &older).unwrap();
    let (s, v) = post(&a2.url, "/v1/reload", OP_KEY, json!({}));
    assert_eq!(s, 200, "{v}");
    wait_ready_as(&a2.url, None);
    crate::stop(b2);
    crate::stop(a2);
}

/// Attack (found by review): replicas whose files differed only in a restart-only setting that
/// decides what consent is worth were one configuration to each other, so replica B started
/// with `token_ttl_seconds: 86400` minted tokens redeemable for a day where A's lived five
/// minutes (likewise grant and approval lifetimes, audit retention, passkeys). Now B's start is
/// refused while A serves the other settings; `listen` differs between them by design and
/// does not count. A reload of A with the changed file keeps A serving what it started with
/// and says the setting needs a restart.
#[test]
fn a_replica_whose_token_lifetime_differs_is_another_configuration() {
    let Some((schema, _dir, cfg, [a, b])) = replicas("") else {
        return;
    };
    let url = format!("{}&application_name={}", schema.postgres_url, schema.name);
    let (code, seen) = replicas_seen(&cfg, &url);
    assert_eq!(code, 0, "both serve the one configuration: {seen}");
    let list = seen["replicas"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{seen}");
    assert!(
        list.iter()
            .all(|r| r["live"] == true && r["newest"] == true),
        "{seen}"
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    let longer = format!("{text}token_ttl_seconds: 86400\n");
    crate::stop(b);
    let other = cfg.with_file_name("longer.yaml");
    std::fs::write(&other, &longer).unwrap();
    let err = refused_start(&other, &url);
    assert!(
        err.contains("serves another configuration") && err.contains("--adopt-config"),
        "{err}"
    );
    std::fs::write(&cfg, &longer).unwrap();
    let (s, v) = post(&a.url, "/v1/reload", OP_KEY, json!({}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["needs_restart"], json!(["token_ttl_seconds"]), "{v}");
    held(&a.url, "pay", 1);
    wait_ready_as(&a.url, None);
    crate::stop(a);
}

/// Debian's libfaketime (package `faketime`, which the test script installs), preloaded into
/// the gateway itself so that it, not a wrapper, gets the signals.
fn libfaketime() -> std::path::PathBuf {
    let found = std::fs::read_dir("/usr/lib").unwrap().find_map(|e| {
        let lib = e.ok()?.path().join("faketime/libfaketime.so.1");
        lib.is_file().then_some(lib)
    });
    found.expect("libfaketime.so.1 under /usr/lib/*/faketime: install Debian's faketime")
}

/// Attack or accident (found by review): a replica whose clock runs an hour fast judges
/// expiry by it — approvals expire early, while one running slow takes decisions and redeems
/// tokens late — and nothing showed it. Started under `faketime` an hour ahead, its
/// `/readyz` is `503 clock_skew`, so the load balancer sends it nothing, and a request that
/// reaches it directly writes nothing (found by review: it was judged by its clock); the
/// other replica stays ready.
#[test]
fn a_replica_whose_clock_differs_from_the_databases_is_not_ready() {
    let Some((schema, _dir, cfg, [a, b])) = replicas("") else {
        return;
    };
    crate::stop(b);
    let url = format!("{}&application_name={}", schema.postgres_url, schema.name);
    let port = free_port();
    let mut cmd = serve_cmd(&cfg);
    cmd.args(["--listen", &format!("127.0.0.1:{port}")])
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", "+1h")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("ASSENT_DATABASE_URL", &url);
    let fast = serve_with(cmd, port);
    let body = wait_ready_as(&fast.url, Some("clock_skew"));
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("ahead of the database's") && message.contains("NTP"),
        "{body}"
    );
    // Reached directly, it writes nothing by its clock: a held call is refused, not held.
    let call = json!({"agent": "ops_bot", "session_id": "s", "tool": "pay", "arguments": {"n": 1}});
    let (s, v) = post(&fast.url, "/v1/tool-calls", AGENT_KEY, call);
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("STORE_UNAVAILABLE")),
        "{v}"
    );
    let held = schema
        .client()
        .query_one("SELECT count(*) FROM approvals", &[])
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(held, 0, "nothing was written by the fast clock");
    wait_ready_as(&a.url, None);
    crate::stop(fast);
    crate::stop(a);
}

/// Attack (found by review): when a replica's configuration was no longer recorded (the
/// generations table emptied, or a restore) and recording it again failed, the database's
/// own error text became the reason it was superseded — published by `/readyz` and every `503
/// CONFIG_SUPERSEDED` to callers with no key, though those answers name no host. Here the
/// database refuses the new row with a message naming an internal host: the reason is a fixed
/// sentence, and the log has the text.
#[test]
fn a_failure_to_record_the_configuration_again_names_no_database_detail() {
    let Some((schema, _dir, _cfg, [a, b])) = replicas("") else {
        return;
    };
    crate::stop(b);
    let mut c = schema.client();
    c.batch_execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'could not reach db-7.internal.example:5432'; END $$; \
         CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON config_generations FOR EACH ROW EXECUTE FUNCTION refuse(); \
         ALTER TABLE config_generations DISABLE TRIGGER refuse; DELETE FROM config_generations; \
         ALTER TABLE config_generations ENABLE TRIGGER refuse;",
    )
    .unwrap();
    let body = wait_ready_as(&a.url, Some("config_superseded"));
    assert!(!body.to_string().contains("internal.example"), "{body}");
    let r = reqwest::blocking::get(format!("{}/v1/approvals", a.url)).unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let text = r.text().unwrap();
    assert!(
        text.contains("CONFIG_SUPERSEDED") && !text.contains("internal.example"),
        "{text}"
    );
    crate::stop(a);
}
