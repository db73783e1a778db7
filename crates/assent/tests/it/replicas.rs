//! Two `assent serve` replicas on one PostgreSQL database (issue 13 §2, its acceptance): a
//! decision made through one wakes the long-poll waiting on the other; an AAEP subscriber on
//! one sees the other's events in one order, and `Last-Event-ID` resumes on either; an
//! approval expires exactly once with both running; `kill -9` of one in the middle of a burst
//! loses no acknowledged decision and leaves `assent audit verify --config` passing. Also:
//! `serve` refuses a PostgreSQL config whose `keys_dir` holds no keys until `assent keys init`
//! made them. Each test starts its own replicas on a fresh schema of the throw-away cluster
//! (`assent_testkit::pg`); skipped with `ASSENT_TEST_NO_PG=1`.

use crate::{BIN, OP_KEY, Server, free_port, ok, serve_cmd, serve_with};
use assent_testkit::pg::Schema;
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The agent's key.
pub(crate) const AGENT_KEY: &str = "ops-bot-key-0123456789";

/// A config for replicas: an agent `ops_bot` with two R3 tools — `pay` (waits 300 s) and
/// `nudge` (waits 1 s, then rejected by default) — on the database in `ASSENT_DATABASE_URL`,
/// keys in `keys/`, with the YAML lines `extra` appended. Returns the config's path.
pub(crate) fn replica_config(dir: &Path, extra: &str) -> PathBuf {
    let agent = "schema_version: \"1.0.0\"\nmetadata: {id: ops_bot, name: Ops Bot, version: 1.0.0, description: Replica tests.}\nconstraints:\n  governance_policies:\n    - policy_ref: test.replicas-v1\naction_space:\n  local_tools:\n    - alias: pay\n    - alias: nudge\n";
    let policy = "policies:\n  - id: test.replicas-v1\n    description: Replica tests.\n    rules:\n      - {tool: pay, risk_tier: R3, timeout_seconds: 300, default_decision: reject, approvers: [finance-admin]}\n      - {tool: nudge, risk_tier: R3, timeout_seconds: 1, default_decision: reject, approvers: [finance-admin]}\n";
    std::fs::write(dir.join("ops.agf.yaml"), agent).unwrap();
    std::fs::write(dir.join("policy.yaml"), policy).unwrap();
    let cfg = format!(
        "listen: 127.0.0.1:{}\ndata_dir: data\nkeys_dir: keys\ndatabase: {{url_env: ASSENT_DATABASE_URL}}\nagents: [ops.agf.yaml]\ngovernance: [policy.yaml]\nprincipals:\n  - {{name: alice, kind: operator, roles: [finance-admin], key_env: TEST_ALICE_KEY}}\n  - {{name: ops, kind: agent, agent_id: ops_bot, key_sha256: \"{}\"}}\n",
        free_port(),
        crate::hex_sha256(AGENT_KEY)
    ) + extra;
    let p = dir.join("assent.yaml");
    std::fs::write(&p, cfg).unwrap();
    p
}

/// A fresh schema, a config over it (with `extra`) (keys made with `assent keys init --config`) and two
/// replicas serving it: `(schema, dir, config, [a, b])`. `None` with `ASSENT_TEST_NO_PG=1`.
pub(crate) fn replicas(extra: &str) -> Option<(Schema, tempfile::TempDir, PathBuf, [Server; 2])> {
    let schema = assent_testkit::pg::schema()?;
    let dir = tempfile::tempdir().unwrap();
    let cfg = replica_config(dir.path(), extra);
    let out = Command::new(BIN)
        .args(["keys", "init", "--json", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let made: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(made["created"], json!(["token.key", "audit.key"]), "{made}");
    let a = replica(&cfg, &schema);
    let b = replica(&cfg, &schema);
    Some((schema, dir, cfg, [a, b]))
}

/// Runs `test` with [`replicas`] (`extra` appended to their config) — the schema, the config
/// and the two replicas — then stops both ([`stop_both`]); returns at once with
/// `ASSENT_TEST_NO_PG=1`.
pub(crate) fn with_replicas(extra: &str, test: impl FnOnce(&Schema, &Path, &Server, &Server)) {
    let Some((schema, _dir, cfg, [a, b])) = replicas(extra) else {
        return;
    };
    test(&schema, &cfg, &a, &b);
    stop_both([a, b]);
}

/// Stops both replicas with SIGTERM ([`crate::stop`]).
fn stop_both(replicas: [Server; 2]) {
    for r in replicas {
        crate::stop(r);
    }
}

/// One more `assent serve --config CFG --listen 127.0.0.1:PORT` on `schema`, once healthy.
fn replica(cfg: &Path, schema: &Schema) -> Server {
    let port = free_port();
    let mut cmd = serve_cmd(cfg);
    cmd.args(["--listen", &format!("127.0.0.1:{port}")])
        // Tagged with the schema's name, so a test can drop this test's sessions only (the
        // cluster is shared with the tests running alongside).
        .env(
            "ASSENT_DATABASE_URL",
            format!("{}&application_name={}", schema.postgres_url, schema.name),
        )
        .env("TEST_HOOK_SECRET", "hook-secret-0123456789abcdef0123456789");
    serve_with(cmd, port)
}

/// The agent proposes `tool` with `arguments` through `url`; the answer.
fn propose(url: &str, tool: &str, n: i64) -> Value {
    reqwest::blocking::Client::new()
        .post(format!("{url}/v1/tool-calls"))
        .bearer_auth(AGENT_KEY)
        .json(&json!({"agent": "ops_bot", "session_id": "s", "tool": tool, "arguments": {"n": n}}))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// A held call's approval id.
pub(crate) fn held(url: &str, tool: &str, n: i64) -> String {
    let v = propose(url, tool, n);
    assert_eq!(v["decision"], "pending", "{v}");
    v["approval_id"].as_str().unwrap().to_string()
}

/// The operator decides `id` through `url`: the HTTP status and body.
fn decide(url: &str, id: &str, decision: &str) -> (u16, Value) {
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/approvals/{id}/decision"))
        .bearer_auth(OP_KEY)
        .json(&json!({"decision": decision}))
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// The agent reads approval `id` through `url`, waiting up to `wait` seconds for a decision.
pub(crate) fn read(url: &str, id: &str, wait: u64) -> Value {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(wait + 30))
        .build()
        .unwrap()
        .get(format!("{url}/v1/approvals/{id}?wait={wait}"))
        .bearer_auth(AGENT_KEY)
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// Opens the AAEP SSE stream on `url` (`subscription_id` and `Last-Event-ID` when given) and
/// sends each `aaep.event` message as `(id, data)` until the stream ends.
pub(crate) fn aaep_stream(
    url: &str,
    subscription: Option<&str>,
    last: Option<&str>,
) -> std::sync::mpsc::Receiver<(String, Value)> {
    let mut req = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap()
        .get(match subscription {
            Some(s) => format!("{url}/aaep/v1/events?subscription_id={s}"),
            None => format!("{url}/aaep/v1/events"),
        })
        .bearer_auth(OP_KEY);
    if let Some(l) = last {
        req = req.header("last-event-id", l);
    }
    let resp = req.send().unwrap();
    let status = resp.status().as_u16();
    assert_eq!(status, 200, "{}", resp.text().unwrap_or_default());
    let (send, recv) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
        for line in std::io::BufReader::new(resp).lines() {
            let Ok(line) = line else { return };
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            } else if line.is_empty() && !data.is_empty() {
                let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                let msg = match event.as_str() {
                    "aaep.subscription" => ("subscription".to_string(), v),
                    _ => (id.clone(), v),
                };
                if send.send(msg).is_err() {
                    return;
                }
                data.clear();
            }
        }
    });
    recv
}

/// The next `n` AAEP events of `rx` that mention one of `ids` (within 30 s each).
pub(crate) fn events_about(
    rx: &std::sync::mpsc::Receiver<(String, Value)>,
    ids: &[String],
    n: usize,
) -> Vec<(String, Value)> {
    let mut got = Vec::new();
    while got.len() < n {
        let (id, v) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("an AAEP event");
        let text = v.to_string();
        if ids.iter().any(|a| text.contains(a.as_str())) {
            got.push((id, v));
        }
    }
    got
}

#[test]
fn serve_on_postgres_refuses_a_keys_dir_without_keys_and_starts_once_keys_init_made_them() {
    let Some(schema) = assent_testkit::pg::schema() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = replica_config(dir.path(), "");
    let out = serve_cmd(&cfg)
        .env("ASSENT_DATABASE_URL", &schema.postgres_url)
        .env("TEST_ALICE_KEY", OP_KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no token.key") && err.contains("assent keys init --keys-dir"),
        "{err}"
    );
    assert!(!dir.path().join("keys").join("token.key").exists());
    let init = |json: bool| {
        let mut c = Command::new(BIN);
        c.args(["keys", "init", "--keys-dir"])
            .arg(dir.path().join("keys"));
        if json {
            c.arg("--json");
        }
        serde_json::from_str::<Value>(&ok(&c.output().unwrap())).ok()
    };
    let made = init(true).unwrap();
    assert_eq!(made["created"], json!(["token.key", "audit.key"]), "{made}");
    use std::os::unix::fs::PermissionsExt;
    for f in ["token.key", "audit.key"] {
        let m = std::fs::metadata(dir.path().join("keys").join(f)).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "{f}");
    }
    // Run again: nothing is replaced (outstanding tokens and signed checkpoints stay valid).
    let before = std::fs::read(dir.path().join("keys").join("token.key")).unwrap();
    let again = init(true).unwrap();
    assert_eq!(again["created"], json!([]), "{again}");
    assert_eq!(again["audit_public_key"], made["audit_public_key"]);
    assert_eq!(
        std::fs::read(dir.path().join("keys").join("token.key")).unwrap(),
        before
    );
    // `assent backup` copies the embedded SQLite file: on PostgreSQL it points at pg_dump.
    let out = Command::new(BIN)
        .args(["backup", "--config"])
        .arg(&cfg)
        .arg(dir.path().join("b.db"))
        .env("ASSENT_DATABASE_URL", &schema.postgres_url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("pg_dump"), "{err}");
    assert!(!dir.path().join("b.db").exists());
    let s = replica(&cfg, &schema);
    let ready: Value = reqwest::blocking::get(format!("{}/readyz", s.url))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(ready["status"], "ready", "{ready}");
    crate::stop(s);
}

#[test]
fn a_decision_through_one_replica_wakes_the_other_and_aaep_events_keep_one_order() {
    with_replicas("", |_schema, _cfg, a, b| {
        // An AAEP subscriber on B, before anything happens.
        let on_b = aaep_stream(&b.url, None, None);
        let (_, accepted) = on_b.recv_timeout(Duration::from_secs(30)).unwrap();
        let sub = accepted["subscription_id"].as_str().unwrap().to_string();

        // The agent proposes through A and long-polls A; the operator decides through B.
        let id = held(&a.url, "pay", 1);
        let (poll_url, poll_id) = (a.url.clone(), id.clone());
        let poll = std::thread::spawn(move || {
            let v = read(&poll_url, &poll_id, 50);
            (v, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(500)); // let the long-poll start waiting
        let decided = Instant::now();
        let (code, body) = decide(&b.url, &id, "approve");
        assert_eq!(code, 200, "{body}");
        let (v, woke) = poll.join().unwrap();
        assert_eq!(v["status"], "approved", "{v}");
        // Woken by the other replica's notification, not by the 50 s deadline (the acceptance's
        // "within 1 s" is measured in BENCHMARKS.md B3, not asserted here: no timing in tests).
        let waited = woke.saturating_duration_since(decided);
        assert!(waited < Duration::from_secs(20), "{waited:?}");
        eprintln!("decision on B to wake-up on A: {waited:?}");

        // Three more proposals through A: B's subscriber sees them, in order.
        let ids: Vec<String> = (2..5).map(|n| held(&a.url, "pay", n)).collect();
        let mut all = vec![id.clone()];
        all.extend(ids.iter().cloned());
        let seen = events_about(&on_b, &ids, 3);
        for (i, (_, v)) in seen.iter().enumerate() {
            assert!(v.to_string().contains(&ids[i]), "event {i} of B: {v}");
        }
        // Resuming the same subscription on A after the first of them: the same next events.
        let on_a = aaep_stream(&a.url, Some(&sub), Some(&seen[0].0));
        let resumed = events_about(&on_a, &ids, 2);
        assert_eq!(resumed[0].0, seen[1].0);
        assert_eq!(resumed[1].0, seen[2].0);
    });
}

#[test]
fn an_approval_expires_exactly_once_with_two_replicas_running() {
    with_replicas("", |schema, _cfg, a, b| {
        let ids: Vec<String> = (0..3).map(|n| held(&a.url, "nudge", n)).collect();
        for id in &ids {
            let v = read(&b.url, id, 30);
            assert_eq!(v["status"], "expired", "{v}");
        }
        // Both replicas' expiry sweeps (every second) have run several times since.
        std::thread::sleep(Duration::from_secs(3));
        let mut db = schema.client();
        for id in &ids {
            let n: i64 = db
                .query_one(
                    "SELECT count(*) FROM audit WHERE approval_id = $1 AND kind = 'approval.expired'",
                    &[id],
                )
                .unwrap()
                .get(0);
            assert_eq!(n, 1, "approval {id} expired {n} times");
        }
    });
}

/// `assent export learning-samples --config FILE` reads the PostgreSQL database the config
/// names (it read SQLite only: the export of a PostgreSQL deployment was empty or failed).
#[test]
fn the_learning_export_reads_the_postgres_database_its_config_names() {
    with_replicas("", |schema, cfg, a, b| {
        let id = held(&a.url, "pay", 7);
        assert_eq!(decide(&b.url, &id, "deny").0, 200);
        let out = Command::new(BIN)
            .args(["export", "learning-samples", "--config"])
            .arg(cfg)
            .env("ASSENT_DATABASE_URL", &schema.postgres_url)
            .output()
            .unwrap();
        let lines: Vec<Value> = ok(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["meta"]["approval_id"], id.as_str());
        assert_eq!(lines[0]["output"]["status"], "rejected");
    });
}

#[test]
fn kill_9_of_one_replica_mid_burst_loses_no_acknowledged_decision_and_the_chain_verifies() {
    let Some((schema, _dir, cfg, [a, b])) = replicas("") else {
        return;
    };
    let urls = [a.url.clone(), b.url.clone()];
    // Four writers alternate replicas: propose, then decide (approve or deny) through the
    // other replica; every decision answered 200 is recorded as acknowledged.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (urls, stop) = (urls.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut i = 0i64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    i += 1;
                    let (p, d) = (&urls[(w + i as usize) % 2], &urls[(w + 1 + i as usize) % 2]);
                    let Ok(r) = reqwest::blocking::Client::new()
                        .post(format!("{p}/v1/tool-calls"))
                        .bearer_auth(AGENT_KEY)
                        .json(&json!({"agent": "ops_bot", "session_id": format!("w{w}"), "tool": "pay", "arguments": {"n": i}}))
                        .send()
                    else {
                        continue;
                    };
                    let Ok(v) = r.json::<Value>() else { continue };
                    let Some(id) = v["approval_id"].as_str() else { continue };
                    let decision = if i % 2 == 0 { "approve" } else { "deny" };
                    let Ok(r) = reqwest::blocking::Client::new()
                        .post(format!("{d}/v1/approvals/{id}/decision"))
                        .bearer_auth(OP_KEY)
                        .json(&json!({"decision": decision}))
                        .send()
                    else {
                        continue;
                    };
                    if r.status().as_u16() == 200 {
                        acked.push((id.to_string(), decision));
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let mut a = a;
    a.child.kill().unwrap(); // SIGKILL: no shutdown, no last checkpoint
    a.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let acked: Vec<(String, &str)> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(acked.len() >= 4, "the burst made {} decisions", acked.len());
    for (id, decision) in &acked {
        let v = read(&b.url, id, 0);
        let want = if *decision == "approve" {
            "approved"
        } else {
            "rejected"
        };
        assert_eq!(v["status"], want, "acknowledged decision of {id}: {v}");
    }
    crate::stop(b);
    // The chain verifies over the shared database, through the config.
    let out = Command::new(BIN)
        .args(["audit", "verify", "--json", "--config"])
        .arg(&cfg)
        .env("ASSENT_DATABASE_URL", &schema.postgres_url)
        .output()
        .unwrap();
    let rep: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(rep["ok"], true, "{rep}");
    assert!(
        rep["records"].as_i64().unwrap() >= 2 * acked.len() as i64,
        "{rep}"
    );
}

/// One webhook delivery read from `conn` (its head, then its body) and answered `200`: its
/// `X-Assent-Delivery` header. `None` when it has none, or the connection ends or fails
/// before the request does (then unanswered).
fn answer_delivery(conn: &mut std::net::TcpStream) -> Option<String> {
    use std::io::{Read, Write};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let len: usize = header("content-length:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    header("x-assent-delivery:")
}

/// A webhook receiver on a free loopback port: answers every request `200` and sends the
/// `X-Assent-Delivery` header of each; returns its URL and the deliveries. With
/// `one_at_a_time`, a request is read only once the one before is answered (deliveries of
/// one webhook are sequential anyway): the deliveries come in the order received.
pub(crate) fn receiver(one_at_a_time: bool) -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (send, recv) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let send = send.clone();
            let mut answer = move || {
                if let Some(d) = answer_delivery(&mut conn) {
                    let _ = send.send(d);
                }
            };
            if one_at_a_time {
                answer();
            } else {
                std::thread::spawn(answer);
            }
        }
    });
    (url, recv)
}

#[test]
fn each_webhook_event_is_delivered_once_with_two_replicas_running() {
    let (hook, deliveries) = receiver(false);
    let extra =
        format!("webhooks:\n  - {{name: ops, url: \"{hook}\", secret_env: TEST_HOOK_SECRET}}\n");
    with_replicas(&extra, |_schema, _cfg, a, b| {
        // Five calls held through each replica, each decided through the other: 10 requested
        // and 10 resolved events, each to be delivered exactly once although both replicas run
        // a delivery loop.
        for n in 0..10 {
            let (p, d) = if n % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let id = held(&p.url, "pay", n);
            let (code, body) = decide(&d.url, &id, if n % 3 == 0 { "deny" } else { "approve" });
            assert_eq!(code, 200, "{body}");
        }
        let mut got = Vec::new();
        while got.len() < 20 {
            got.push(
                deliveries
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|_| panic!("only {} deliveries: {got:?}", got.len())),
            );
        }
        // Both loops have looked again several times since (every 2 s at the latest).
        std::thread::sleep(Duration::from_secs(5));
        got.extend(deliveries.try_iter());
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 20, "{got:?}");
        assert_eq!(got.len(), 20, "an event was delivered twice: {got:?}");
    });
}

/// A client that, like a browser's dashboard tab, keeps `303` redirects as answers.
fn browser() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs alice in to the dashboard through `url`: the `assent_ui` cookie's value.
pub(crate) fn sign_in(url: &str) -> String {
    let csrf = "c".repeat(64);
    let r = browser()
        .post(format!("{url}/ui/login"))
        .header("cookie", format!("assent_ui_login={csrf}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&key={OP_KEY}&next=%2Fui"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "sign-in through {url}");
    let set = r.headers()["set-cookie"].to_str().unwrap();
    let v = set.strip_prefix("assent_ui=").unwrap();
    v[..v.find(';').unwrap()].to_string()
}

/// `GET {url}/ui` with session `cookie`: the status (200 the queue, 303 to the sign-in) and
/// the page.
pub(crate) fn queue_page(url: &str, cookie: &str) -> (u16, String) {
    let r = browser()
        .get(format!("{url}/ui"))
        .header("cookie", format!("assent_ui={cookie}"))
        .send()
        .unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

#[test]
fn a_dashboard_session_started_on_one_replica_works_on_the_other_until_signed_out_there() {
    with_replicas("", |schema, _cfg, a, b| {
        let cookie = sign_in(&a.url);
        let (code, page) = queue_page(&b.url, &cookie);
        assert_eq!(code, 200, "{page}");
        assert!(page.contains("alice"), "{page}");
        // The database holds only the SHA-256 of the cookie's value, never the value.
        let rows = schema
            .client()
            .query("SELECT id_sha256, csrf FROM ui_sessions", &[])
            .unwrap();
        assert_eq!(rows.len(), 1);
        let stored: String = rows[0].get(0);
        assert_ne!(stored, cookie);
        assert_eq!(stored, crate::hex_sha256(&cookie));
        // Sign out through B (its form's CSRF token is the session's): A no longer knows it.
        let csrf: String = rows[0].get(1);
        let r = browser()
            .post(format!("{}/ui/logout", b.url))
            .header("cookie", format!("assent_ui={cookie}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}"))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 303);
        let (code, _) = queue_page(&a.url, &cookie);
        assert_eq!(code, 303, "the session ended on every replica");
    });
}

#[test]
fn a_key_guesser_alternating_replicas_gets_one_failure_allowance_not_one_per_replica() {
    with_replicas("", |_schema, _cfg, a, b| {
        // Wrong keys from one address, alternately to A and B. Each replica alone allows a burst
        // of 20 failures (then 5 a second); counted in the shared database, the two together
        // allow that once: the first 429 comes after about 20 failures, not about 40.
        let http = reqwest::blocking::Client::new();
        let started = Instant::now();
        let mut unauthorised = 0u64;
        let throttled_at = (0..80).find(|i| {
            let url = if i % 2 == 0 { &a.url } else { &b.url };
            let r = http
                .get(format!("{url}/v1/whoami"))
                .bearer_auth(format!("guess-{i:04}-0123456789abcdef"))
                .send()
                .unwrap();
            match r.status().as_u16() {
                401 => {
                    unauthorised += 1;
                    false
                }
                429 => true,
                s => panic!("status {s}"),
            }
        });
        assert!(throttled_at.is_some(), "80 wrong keys and no lockout");
        // The shared allowance: a burst of 20, plus 5 a second for the time the guessing took.
        let refilled = started.elapsed().as_millis() as u64 / 200;
        assert!(
            unauthorised <= 21 + refilled + 1,
            "{unauthorised} wrong keys were checked in {:?} before a lockout",
            started.elapsed()
        );
    });
}

#[test]
fn a_replica_whose_database_sessions_were_dropped_reconnects_and_still_hears_the_other() {
    with_replicas("", |schema, _cfg, a, b| {
        let id = held(&a.url, "pay", 1);
        // The database drops every session of both replicas (a failover, a restart, an
        // idle-connection reaper): the stores', the readers' and the listeners'. Found: this used
        // to drop every session of the shared cluster, failing the tests running alongside.
        let mut admin = schema.client();
        let dropped: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name = $1 AND pid <> pg_backend_pid()",
                &[&schema.name],
            )
            .unwrap()
            .get(0);
        assert!(dropped >= 4, "{dropped} sessions dropped");
        // The request that finds a session gone may fail (503); the next ones reconnect.
        let mut answered = None;
        for _ in 0..5 {
            let v = read(&a.url, &id, 0);
            if v["status"] == "pending" {
                answered = Some(v);
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(answered.is_some(), "replica A never reconnected");
        // A decision through B (which reconnects too) still wakes a long-poll on A: its listener
        // reconnected (and re-read everything waiting).
        let (poll_url, poll_id) = (a.url.clone(), id.clone());
        let poll = std::thread::spawn(move || read(&poll_url, &poll_id, 50));
        std::thread::sleep(Duration::from_millis(500));
        let mut decided = None;
        for _ in 0..5 {
            let (code, body) = decide(&b.url, &id, "approve");
            if code == 200 {
                decided = Some(body);
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(decided.is_some(), "replica B never reconnected");
        let started = Instant::now();
        let v = poll.join().unwrap();
        assert_eq!(v["status"], "approved", "{v}");
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "woken, not timed out"
        );
    });
}
