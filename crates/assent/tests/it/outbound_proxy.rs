//! Outbound HTTP to this machine never goes through a proxy from the environment. Plain http is
//! allowed only to loopback (a webhook `url`, an MCP upstream `url`) because no packet leaves
//! the machine; a `HTTP_PROXY`/`ALL_PROXY` in `assent serve`'s environment must not send that
//! traffic — a webhook's body and HMAC signature, an upstream's bearer token, a call's
//! arguments and result — in cleartext to wherever the proxy is. Other hosts still go through
//! the environment's proxies (a corporate proxy for https is legitimate). Each gateway here is
//! its own `assent serve` process with the proxy variables set for it alone.

use crate::hub_kit::{Notes, hub_call, notes_upstream, within};
use crate::{Server, free_port, held, serve_cmd, serve_with, write_config};
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A webhook secret long enough for start-up.
const HOOK_SECRET: &str = "proxy-test-hook-secret-0123456789abcdef";
/// The hub upstream's bearer token.
const UPSTREAM_TOKEN: &str = "proxy-test-upstream-token-0123456789";
/// Agent `helper`'s key.
const KEY: &str = "proxy-test-agent-key";

/// A TCP listener on loopback that records every HTTP request head and body it is sent (one
/// request a connection) and answers each with `status` (e.g. `502 Bad Gateway`): the
/// "proxy" of these tests, or a webhook receiver.
struct Recorder {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn start(status: &'static str) -> Self {
        Self::answering(status, |_| String::new())
    }

    /// [`Recorder::start`], answering every request with the JSON `body` gives for its own
    /// URL (`http://127.0.0.1:PORT`).
    fn answering(status: &'static str, body: impl FnOnce(&str) -> String) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let body = body(&format!("http://127.0.0.1:{port}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let record = record.clone();
                let body = body.clone();
                std::thread::spawn(move || {
                    let text = read_request(&mut conn);
                    record.lock().unwrap().push(text);
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(answer.as_bytes());
                });
            }
        });
        Recorder { port, seen }
    }

    /// `http://127.0.0.1:PORT`.
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests recorded so far.
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// One HTTP request read from `conn` (its head, then `content-length` bytes of body, within
/// 5 s), as text.
fn read_request(conn: &mut std::net::TcpStream) -> String {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let body_at = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&buf).into_owned(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..body_at]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < body_at + length {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Sets every proxy variable reqwest reads to `proxy` in `cmd`'s environment (and no
/// `NO_PROXY` exemption).
fn through_proxy(cmd: &mut Command, proxy: &str) {
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env(var, proxy);
    }
    cmd.env_remove("NO_PROXY").env_remove("no_proxy");
}

/// `assent serve` on a free port with the config `config` writes (into the directory given,
/// for that port; its path) and `env` applied to its command, every proxy variable set to
/// `proxy` ([`through_proxy`]): its directory (kept alive by the caller) and server.
fn gateway_behind_proxy(
    proxy: &Recorder,
    config: impl FnOnce(&Path, u16) -> PathBuf,
    env: impl FnOnce(&mut Command),
) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), port);
    let mut cmd = serve_cmd(&cfg);
    env(&mut cmd);
    through_proxy(&mut cmd, &proxy.url());
    (dir, serve_with(cmd, port))
}

/// The CLI tests' config ([`write_config`]) with `extra` lines, for [`gateway_behind_proxy`].
fn with_lines(extra: &str) -> impl FnOnce(&Path, u16) -> PathBuf + '_ {
    move |dir, port| write_config(dir, port, extra)
}

/// The CLI tests' config with single sign-on by the provider at `issuer` (client secret from
/// `TEST_OIDC_SECRET`), for [`gateway_behind_proxy`].
fn with_sign_in(issuer: &str) -> impl FnOnce(&Path, u16) -> PathBuf + '_ {
    move |dir, port| {
        let oidc = format!(
            "oidc:\n  issuer: {issuer}\n  client_id: assent\n  client_secret_env: TEST_OIDC_SECRET\n  roles_claim: groups\n  redirect_url: http://127.0.0.1:{port}/ui/oidc/callback\n"
        );
        write_config(dir, port, &oidc)
    }
}

/// Starts a sign-in at the gateway at `url` (`GET /ui/oidc/start`, not through any proxy, its
/// answer ignored): the gateway fetches its provider's discovery document first.
fn start_sign_in(url: &str) {
    let _ = reqwest::blocking::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{url}/ui/oidc/start"))
        .send()
        .unwrap();
}

/// Waits up to 30 s until `local` (a loopback receiver) or `proxy` was sent something
/// (failing with `what`), then asserts that `proxy` was sent nothing (`traffic`, what went
/// astray, names it) and returns what `local` got.
#[track_caller]
fn only_local_got(proxy: &Recorder, local: &Recorder, what: &str, traffic: &str) -> Vec<String> {
    within(30, what, || {
        (!local.seen().is_empty() || !proxy.seen().is_empty()).then_some(())
    });
    let astray = proxy.seen();
    assert!(
        astray.is_empty(),
        "{traffic} went through the environment's proxy: {astray:#?}"
    );
    local.seen()
}

/// Asserts that everything `proxy` was sent is a `CONNECT` to `remote` (the https host that
/// is not this machine, which must still go through the proxy — at least once), and none of
/// it names loopback or carries `secret`.
#[track_caller]
fn only_the_remote_host_went_through(proxy: &Recorder, remote: &str, secret: &str) {
    let seen = proxy.seen();
    assert!(
        seen.iter()
            .all(|r| r.starts_with(&format!("CONNECT {remote}:443 "))
                && !r.contains("127.0.0.1")
                && !r.contains(secret)),
        "loopback traffic went through the environment's proxy: {seen:#?}"
    );
    assert!(!seen.is_empty(), "the https host skipped the proxy");
}

/// Found by review: the webhook client honoured the environment's proxies for a plain-http
/// receiver on loopback too, so the body and its HMAC signature crossed the network in
/// cleartext to the proxy (which answered in the receiver's place). An https webhook
/// elsewhere still goes through the proxy.
#[test]
fn a_loopback_webhook_and_its_signature_never_go_through_an_environment_proxy() {
    let proxy = Recorder::start("502 Bad Gateway");
    let receiver = Recorder::start("200 OK");
    let remote = "hooks.example.invalid";
    let hooks = format!(
        "webhooks:\n  - {{name: ops, url: \"http://127.0.0.1:{}/hook\", secret_env: TEST_HOOK_SECRET, events: [approval.requested]}}\n  - {{name: far, url: \"https://{remote}/hook\", secret_env: TEST_HOOK_SECRET, events: [approval.requested]}}\n",
        receiver.port
    );
    let (_dir, server) = gateway_behind_proxy(&proxy, with_lines(&hooks), |cmd| {
        cmd.env("TEST_HOOK_SECRET", HOOK_SECRET);
    });
    held(&server.url, 5000);
    // Both webhooks tried: the https one through the proxy, the loopback one either way.
    within(30, "the webhooks were not both tried", || {
        let via_proxy = proxy.seen();
        let remote_tried = via_proxy.iter().any(|r| r.starts_with("CONNECT "));
        let astray = via_proxy.iter().any(|r| !r.starts_with("CONNECT "));
        (remote_tried && (astray || !receiver.seen().is_empty())).then_some(())
    });
    only_the_remote_host_went_through(&proxy, remote, "x-assent-signature");
    let got = receiver.seen();
    assert!(
        got.iter().any(|r| {
            let r = r.to_ascii_lowercase();
            r.starts_with("post /hook ")
                && r.contains("x-assent-event: approval.requested")
                && r.contains("x-assent-signature: sha256=")
        }),
        "the loopback receiver got no signed delivery: {got:#?}"
    );
}

/// Found by review (after the webhooks'): Slack's Web API client honoured the environment's
/// proxies for a plain-http `slack.api_url` on loopback too, so the bot token and each card
/// went in cleartext to the proxy. The card of a held call is posted to the loopback API
/// directly, with its token; nothing reaches the proxy.
#[test]
fn a_loopback_slack_api_and_its_bot_token_never_go_through_an_environment_proxy() {
    let proxy = Recorder::start("502 Bad Gateway");
    let api = Recorder::start("200 OK");
    let slack = format!(
        "slack:\n  signing_secret_env: TEST_SLACK_SECRET\n  bot_token_env: TEST_SLACK_TOKEN\n  channel: C0APPROVE\n  api_url: {}/api\n",
        api.url()
    );
    let (_dir, server) = gateway_behind_proxy(&proxy, with_lines(&slack), |cmd| {
        cmd.env("TEST_SLACK_SECRET", HOOK_SECRET)
            .env("TEST_SLACK_TOKEN", UPSTREAM_TOKEN);
    });
    held(&server.url, 5000);
    let got = only_local_got(
        &proxy,
        &api,
        "the held call's card was not posted",
        "Slack traffic to loopback",
    );
    assert!(
        got.iter().any(|r| {
            let l = r.to_ascii_lowercase();
            l.starts_with("post /api/chat.postmessage ")
                && l.contains(&format!(
                    "authorization: bearer {}",
                    UPSTREAM_TOKEN.to_ascii_lowercase()
                ))
        }),
        "the loopback Web API got no card with the bot token: {got:#?}"
    );
}

/// Found by review (after the webhooks'): the single sign-on provider's client honoured the
/// environment's proxies for a plain-http `oidc.issuer` on loopback too, so discovery (and,
/// after it, the client secret with each code exchange) went in cleartext to the proxy. A
/// sign-in's discovery request reaches the loopback issuer directly; nothing reaches the proxy.
#[test]
fn a_loopback_sign_in_provider_is_never_reached_through_an_environment_proxy() {
    let proxy = Recorder::start("502 Bad Gateway");
    let issuer = Recorder::start("404 Not Found");
    let issuer_url = issuer.url();
    let (_dir, server) = gateway_behind_proxy(&proxy, with_sign_in(&issuer_url), |cmd| {
        cmd.env("TEST_OIDC_SECRET", HOOK_SECRET);
    });
    // The sign-in starts with discovery (the provider answers 404: no sign-in follows).
    start_sign_in(&server.url);
    let got = only_local_got(
        &proxy,
        &issuer,
        "the provider's discovery was not fetched",
        "traffic to the loopback provider",
    );
    assert!(
        got.iter()
            .any(|r| r.starts_with("GET /.well-known/openid-configuration ")),
        "the loopback provider got no discovery request: {got:#?}"
    );
}

/// Found by review: the hub's streamable HTTP client (rmcp's default reqwest client) honoured
/// the environment's proxies for a plain-http upstream on loopback too, so its bearer token
/// and every call's arguments and result crossed the network in cleartext to the proxy. An
/// https upstream elsewhere still goes through the proxy.
#[test]
fn a_loopback_mcp_upstreams_token_and_calls_never_go_through_an_environment_proxy() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let notes = Notes::default();
    let (up_port, auth) = notes_upstream(&rt, notes.clone());
    let proxy = Recorder::start("502 Bad Gateway");
    let remote = "mcp.example.invalid";
    let config = |dir: &Path, port| {
        let agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: notes\n      allowed_tools: [read]\n";
        crate::write_agent_config(
            dir,
            port,
            (agent, KEY),
            &format!(
                "mcp_upstreams:\n  notes: {{url: \"http://127.0.0.1:{up_port}/mcp\", bearer_token_env: TEST_UPSTREAM_TOKEN}}\n  far: {{url: \"https://{remote}/mcp\"}}\n"
            ),
        )
    };
    let (_dir, server) = gateway_behind_proxy(&proxy, config, |cmd| {
        cmd.env("TEST_UPSTREAM_TOKEN", UPSTREAM_TOKEN);
    });
    let call = CallToolRequestParams::new("notes__read")
        .with_arguments(json!({"text": "payroll"}).as_object().unwrap().clone());
    let said = hub_call(&rt, &server.url, KEY, call);
    within(30, "the https upstream skipped the proxy", || {
        (!proxy.seen().is_empty()).then_some(())
    });
    only_the_remote_host_went_through(&proxy, remote, UPSTREAM_TOKEN);
    assert_eq!(said["content"][0]["text"], "read payroll: done", "{said}");
    assert_eq!(
        *notes.calls.lock().unwrap(),
        vec!["read payroll".to_string()]
    );
    let auth = auth.lock().unwrap().clone();
    assert!(
        !auth.is_empty()
            && auth
                .iter()
                .all(|a| *a == format!("Bearer {UPSTREAM_TOKEN}")),
        "the upstream was not sent its token directly: {auth:?}"
    );
}

/// Found by review (R18): the single sign-on client chose direct-or-proxied once, from the
/// issuer, though discovery names the other URLs (`jwks_uri`, the token endpoint): a loopback
/// issuer naming a remote endpoint had the gateway reach it directly, skipping the proxy that
/// may be the only way out (and, the other way round, a remote issuer naming
/// `http://127.0.0.1/token` sent the client secret in clear text to the proxy — the unit test
/// in `dashboard::oidc::fetch`). Each request now picks by its own URL: discovery reaches the
/// loopback issuer directly, the remote `jwks_uri` goes through the proxy.
#[test]
fn a_remote_endpoint_named_by_a_loopback_sign_in_provider_still_goes_through_the_proxy() {
    let proxy = Recorder::start("502 Bad Gateway");
    let remote = "keys.example.invalid";
    let issuer = Recorder::answering("200 OK", |url| {
        json!({
            "issuer": url,
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("https://{remote}/token"),
            "jwks_uri": format!("https://{remote}/jwks"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        })
        .to_string()
    });
    let issuer_url = issuer.url();
    let (_dir, server) = gateway_behind_proxy(&proxy, with_sign_in(&issuer_url), |cmd| {
        cmd.env("TEST_OIDC_SECRET", HOOK_SECRET);
    });
    // Discovery fetches the document, then the keys at `jwks_uri` (the proxy answers 502).
    start_sign_in(&server.url);
    let got = issuer.seen();
    assert!(
        got.iter()
            .any(|r| r.starts_with("GET /.well-known/openid-configuration ")),
        "the loopback provider got no discovery request: {got:#?}"
    );
    within(30, "the remote jwks_uri skipped the proxy", || {
        (!proxy.seen().is_empty()).then_some(())
    });
    only_the_remote_host_went_through(&proxy, remote, HOOK_SECRET);
}

/// Found by review (R18): the OTLP trace exporter's own HTTP client honoured the
/// environment's proxies for a collector on loopback too, so every span and the
/// `OTEL_EXPORTER_OTLP_HEADERS` (often the collector's API key) went in clear text to the
/// proxy. Spans now reach a loopback collector directly; nothing reaches the proxy.
#[test]
fn spans_and_the_collector_key_never_go_to_a_loopback_collector_through_an_environment_proxy() {
    let proxy = Recorder::start("502 Bad Gateway");
    let collector = Recorder::start("200 OK");
    let (_dir, server) = gateway_behind_proxy(&proxy, with_lines(""), |cmd| {
        cmd.env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://localhost:{}", collector.port),
        )
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("x-collector-key={UPSTREAM_TOKEN}"),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER");
    });
    held(&server.url, 5000);
    let got = only_local_got(
        &proxy,
        &collector,
        "no span was exported",
        "spans to the loopback collector",
    );
    assert!(
        got.iter().any(|r| {
            let l = r.to_ascii_lowercase();
            l.starts_with("post /v1/traces ")
                && l.contains(&format!(
                    "x-collector-key: {}",
                    UPSTREAM_TOKEN.to_ascii_lowercase()
                ))
        }),
        "the loopback collector got no spans with its key: {got:#?}"
    );
}

/// Attack (found by review): a gateway listening on every address (`0.0.0.0`) whose hub cannot
/// bind its private socket (here: a data directory whose socket path is too long) reached
/// itself at `http://0.0.0.0:PORT` — no loopback URL — so the hub's client went through the
/// environment's proxy with every agent key and call in clear text. It reaches itself on
/// loopback: the call runs and the proxy sees nothing.
#[test]
fn the_hubs_calls_to_its_own_gateway_never_go_through_an_environment_proxy() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let notes = Notes::default();
    let (up_port, _auth) = notes_upstream(&rt, notes.clone());
    let proxy = Recorder::start("502 Bad Gateway");
    let config = |dir: &Path, port| {
        let agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: notes\n      allowed_tools: [read]\n";
        let cfg = crate::write_agent_config(
            dir,
            port,
            (agent, KEY),
            &format!(
                "mcp_upstreams:\n  notes: {{url: \"http://127.0.0.1:{up_port}/mcp\", bearer_token_env: TEST_UPSTREAM_TOKEN}}\n"
            ),
        );
        let long = "d".repeat(120);
        let text = std::fs::read_to_string(&cfg).unwrap();
        let text = text
            .replace("listen: 127.0.0.1:", "listen: 0.0.0.0:")
            .replace("data_dir: data\n", &format!("data_dir: {long}\n"));
        std::fs::write(&cfg, text).unwrap();
        cfg
    };
    let (_dir, server) = gateway_behind_proxy(&proxy, config, |cmd| {
        cmd.env("TEST_UPSTREAM_TOKEN", UPSTREAM_TOKEN);
    });
    let call = CallToolRequestParams::new("notes__read")
        .with_arguments(json!({"text": "payroll"}).as_object().unwrap().clone());
    let said = hub_call(&rt, &server.url, KEY, call);
    assert_eq!(said["content"][0]["text"], "read payroll: done", "{said}");
    assert!(proxy.seen().is_empty(), "{:?}", proxy.seen());
}
