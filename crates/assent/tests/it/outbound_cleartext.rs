//! Outbound config that would hand secrets to the network: a webhook or MCP upstream `url` in
//! plain http to a host other than this machine (anyone on the path reads the webhook bodies —
//! one-time open links, arguments — or the upstream's bearer token, and answers in the
//! receiver's or upstream's place), and a webhook secret short enough to brute-force offline
//! from one signed delivery. Each stops `check` and `serve` with the file, the line and what
//! to do; https anywhere and http on loopback still load.

use crate::{BIN, free_port, serve_cmd, serve_with, write_config};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Writes `listen: 127.0.0.1:0` and `extra` to the config file `p`, runs `assent check` on it
/// for an agent and tool that need not exist, and returns its exit code and stderr.
fn check_on(p: &Path, extra: &str) -> (Option<i32>, String) {
    std::fs::write(p, format!("listen: 127.0.0.1:0\n{extra}")).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(p)
        .args(["--agent", "nobody", "--tool", "nothing"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

/// Runs `assent serve` (`cmd`) to its end, within 20 s (a gateway that starts is stopped and
/// fails the test: it took what it should have refused); its exit code and stderr.
fn serve_refused(mut cmd: Command, dir: &Path) -> (Option<i32>, String) {
    let log = dir.join("serve.stderr");
    cmd.stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the gateway started: {}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), std::fs::read_to_string(&log).unwrap())
}

/// Hosts a plain-http URL may not name: another machine, or names and addresses that only look
/// like this one.
const REMOTE: [&str; 5] = [
    "http://203.0.113.5/h",
    "http://example.com/mcp",
    "http://localhost.attacker.example/h",
    "http://127.0.0.1.nip.io/h",
    "http://[::ffff:127.0.0.1]/h",
];

/// URLs that keep what is sent from the network: https anywhere, http on loopback.
const PRIVATE: [&str; 5] = [
    "https://203.0.113.5/h",
    "http://127.0.0.1:9/h",
    "http://127.8.9.10:9/h",
    "http://[::1]:9/h",
    "http://LOCALHOST:9/h",
];

/// `u` (one of [`REMOTE`], each with a path) as a config error shows it: its scheme and host,
/// then `/…`.
fn shown(u: &str) -> String {
    let host_end = u[7..].find('/').unwrap() + 7;
    format!("{}/…", &u[..host_end])
}

/// Found by review: a config error printed a webhook's or an upstream's whole URL, and a Slack
/// incoming webhook's path (or a token in a query) is its secret; stderr and CI logs kept it.
/// Only the scheme and host are shown.
#[test]
fn a_refused_outbound_url_is_shown_without_its_path_query_or_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    for (cfg, shown) in [
        (
            "webhooks:\n  - {name: ops, url: \"http://hooks.example.com/services/T0/B0/SECRETPATH\", secret_env: S}\n",
            "url `http://hooks.example.com/…`",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"http://user:SECRETPASS@203.0.113.5:8080\", secret_env: S}\n",
            "url `http://203.0.113.5:8080/…`",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"ftp://x/SECRETPATH\", secret_env: S}\n",
            "url `ftp://x/…` is not an http(s) URL",
        ),
        (
            "mcp_upstreams:\n  t: {url: \"http://203.0.113.5/mcp?token=SECRETQUERY\"}\n",
            "url `http://203.0.113.5/…`",
        ),
    ] {
        let (code, err) = check_on(&p, cfg);
        assert!(code == Some(2) && err.contains(shown), "{cfg}: {err}");
        assert!(!err.contains("SECRET"), "{cfg}: {err}");
    }
}

#[test]
fn a_webhook_in_plain_http_to_another_host_is_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    let hook = |u: &str| format!("webhooks:\n  - {{name: ops, url: \"{u}\", secret_env: S}}\n");
    for u in REMOTE {
        let (code, err) = check_on(&p, &hook(u));
        let want = format!(
            "{}:3: webhooks `ops`: url `{}` is plain http to a host that is not this machine",
            p.display(),
            shown(u)
        );
        assert!(
            code == Some(2) && err.contains(&want) && err.contains("use https"),
            "{u}: {code:?} {err}"
        );
    }
    // `serve` stops on the same config, before it listens.
    let (code, err) = serve_refused(serve_cmd(&p), dir.path());
    assert!(
        code == Some(1) && err.contains(":3: webhooks `ops`: url"),
        "{err}"
    );
    for u in PRIVATE {
        let (code, err) = check_on(&p, &hook(u));
        assert!(code != Some(2), "{u} must load: {err}");
    }
}

#[test]
fn an_mcp_upstream_in_plain_http_to_another_host_is_refused_with_or_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    for token in ["", ", bearer_token_env: TOKEN"] {
        let up = |u: &str| format!("mcp_upstreams:\n  tickets: {{url: \"{u}\"{token}}}\n");
        for u in REMOTE {
            let (code, err) = check_on(&p, &up(u));
            let want = format!(
                "{}:3: mcp_upstreams.tickets: url `{}` is plain http to a host that is not this machine",
                p.display(),
                shown(u)
            );
            assert!(
                code == Some(2) && err.contains(&want) && err.contains("use https"),
                "{u}{token}: {code:?} {err}"
            );
        }
        for u in PRIVATE {
            let (code, err) = check_on(&p, &up(u));
            assert!(code != Some(2), "{u}{token} must load: {err}");
        }
    }
}

#[test]
fn a_webhook_secret_short_enough_to_guess_offline_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    std::fs::write(
        &p,
        "listen: 127.0.0.1:0\nwebhooks:\n  - {name: ops, url: \"http://127.0.0.1:9/h\", secret_env: ASSENT_TEST_HOOK_SECRET}\n",
    )
    .unwrap();
    let short = ["q7Z", "Qz7-short-secret-of-31-chars-xx"];
    assert_eq!(short[1].chars().count(), 31);
    for secret in short {
        // Demo keys lift the minimum for principals' keys on loopback, not for webhook secrets:
        // the receiver may be anywhere.
        for demo in [false, true] {
            let mut cmd = serve_cmd(&p);
            if demo {
                cmd.arg("--insecure-demo-keys");
            }
            cmd.env("ASSENT_TEST_HOOK_SECRET", secret);
            let (code, err) = serve_refused(cmd, dir.path());
            let want = format!(
                "{}:3: webhooks `ops`: the secret in ASSENT_TEST_HOOK_SECRET (secret_env) is {} characters; use at least 32",
                p.display(),
                secret.chars().count()
            );
            assert!(
                code == Some(1) && err.contains(&want) && !err.contains(secret),
                "{secret} (demo keys {demo}): {err}"
            );
        }
    }
    // 32 characters serve.
    let port = free_port();
    let cfg = write_config(
        dir.path(),
        port,
        "webhooks:\n  - {name: ops, url: \"http://127.0.0.1:9/h\", secret_env: ASSENT_TEST_HOOK_SECRET}\n",
    );
    let mut cmd = serve_cmd(&cfg);
    cmd.env(
        "ASSENT_TEST_HOOK_SECRET",
        "0123456789abcdef0123456789abcdef",
    );
    drop(serve_with(cmd, port));
}

/// Found by review: the operator commands sent the operator's key over plain http to any
/// host (`--url http://gateway:7878`), in clear text to anyone on the path. Plain http is for
/// this machine only unless `--insecure-http` says the network between is the operator's;
/// https and loopback go through as before.
#[test]
fn an_operator_key_is_not_sent_over_plain_http_to_another_host() {
    let run = |url: &str, extra: &[&str]| {
        let out = Command::new(BIN)
            .args(["pending", "--url", url])
            .args(extra)
            .env("ASSENT_API_KEY", "alice-key-0123456789abcdef0123456789")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Spelled as the HTTP client would still read them (found by review: a check of the text
    // let `HTTP://` and a leading space through).
    for url in [
        "http://gateway.invalid:7878",
        "http://203.0.113.5:7878/",
        "HTTP://203.0.113.5:7878",
        " http://203.0.113.5:7878",
        "Http://gateway.invalid",
    ] {
        let (code, err) = run(url, &[]);
        assert_eq!(code, Some(1), "{url}: {err}");
        assert!(err.contains("over plain http"), "{url}: {err}");
    }
    // With the flag the key is sent (here: to a name that does not resolve).
    let (code, err) = run("http://gateway.invalid:7878", &["--insecure-http"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("cannot reach the gateway"), "{err}");
    // Loopback and https are not refused (nothing listens: they fail to connect).
    let port = free_port();
    for url in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        "https://gateway.invalid".to_string(),
    ] {
        let (_, err) = run(&url, &[]);
        assert!(!err.contains("over plain http"), "{url}: {err}");
    }
}

/// Found by review: `assent mcp` handed the agent's key to the gateway over plain http to any
/// host, unchecked (and took `--insecure-http` without a word). It is held to the same rule.
#[test]
fn an_agent_key_is_not_sent_over_plain_http_by_assent_mcp() {
    let out = Command::new(BIN)
        .args([
            "mcp",
            "--agent",
            "a",
            "--server",
            "s",
            "--url",
            "http://gateway.invalid:7878",
            "--",
            "true",
        ])
        .env("ASSENT_API_KEY", "agent-key-0123456789abcdef0123456789")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("over plain http"), "{err}");
}

/// Found by review: spans and `OTEL_EXPORTER_OTLP_HEADERS` (often the collector's key) went
/// to a collector on another host over plain http without a word. A collector beside the
/// gateway on another host is common (a sidecar's service name), so it is not refused; the
/// gateway warns at start-up, naming the endpoint without its path or query. On loopback it
/// says nothing.
#[test]
fn traces_sent_in_plain_http_to_another_host_are_warned_of_at_start_up() {
    for (endpoint, warned) in [
        ("http://203.0.113.5:4318/v1/traces?key=sekrit", true),
        ("http://127.0.0.1:1", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = write_config(dir.path(), free_port(), "");
        let log = dir.path().join("serve.stderr");
        let mut child = serve_cmd(&cfg)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("TEST_ALICE_KEY", crate::OP_KEY)
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("OTEL_TRACES_EXPORTER")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // The warning comes right after the log starts, before the gateway is ready.
        let start = Instant::now();
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap();
            if text.contains("gateway ready") || start.elapsed() > Duration::from_secs(20) {
                break text;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = child.kill();
        let _ = child.wait();
        assert!(text.contains("gateway ready"), "{text}");
        let line = text.lines().find(|l| l.contains("plain http"));
        assert_eq!(line.is_some(), warned, "{endpoint}: {text}");
        if let Some(line) = line {
            assert!(line.contains("http://203.0.113.5:4318/…"), "{line}");
            assert!(
                !line.contains("sekrit") && !line.contains("v1/traces"),
                "{line}"
            );
        }
    }
}
