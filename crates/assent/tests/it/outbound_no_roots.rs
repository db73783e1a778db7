//! A host with no CA certificate at all (a minimal image; here `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` naming an empty file and an empty directory): reqwest's platform verifier
//! cannot be made there, and every HTTP client failed to build — the CLI could not reach its
//! own gateway over plain http on loopback, nor the gateway its loopback webhook. Every client
//! is now built with an empty root store there (`assent_api::http_builder`): plain http works,
//! and https fails closed, naming the missing CA bundle, never sent unverified.

use crate::{BIN, OP_KEY, free_port, held, serve_cmd, serve_with, served, write_config};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// An empty PEM file and an empty directory (kept alive by the returned directory) for
/// `SSL_CERT_FILE` and `SSL_CERT_DIR`: a host without CA certificates.
fn no_roots() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (file, certs) = (dir.path().join("empty.pem"), dir.path().join("certs"));
    std::fs::write(&file, "").unwrap();
    std::fs::create_dir(&certs).unwrap();
    (dir, file, certs)
}

/// `cmd` on a host without CA certificates ([`no_roots`]).
fn without_roots<'a>(
    cmd: &'a mut Command,
    roots: &(tempfile::TempDir, std::path::PathBuf, std::path::PathBuf),
) -> &'a mut Command {
    cmd.env("SSL_CERT_FILE", &roots.1)
        .env("SSL_CERT_DIR", &roots.2)
}

/// A receiver on 127.0.0.1 (Python's `http.server`; over TLS with the test certificate for
/// `localhost` when `certs` are given): answers every request `200` with `{}` and prints its
/// method and path on a line. The child, its port and its output's lines.
fn receiver(certs: Option<&assent_testkit::certs::TestCerts>) -> (Child, u16, Receiver<String>) {
    let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def go(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        print(self.command, self.path, flush=True)
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    do_GET = go; do_POST = go
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 2:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]);
    if let Some(c) = certs {
        cmd.arg(&c.server_crt).arg(&c.server_key);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let (send, recv) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = send.send(l);
        }
    });
    (child, port, recv)
}

/// Found by review (availability): on a host without CA certificates the CLI could build no
/// HTTP client, so `assent pending` against its own gateway on `http://127.0.0.1` failed with
/// `cannot reach the gateway … (builder error)`. It now lists the queue.
#[test]
fn a_host_without_ca_certificates_still_reaches_its_gateway_over_loopback_http() {
    let s = served("");
    let roots = no_roots();
    let out = without_roots(&mut Command::new(BIN), &roots)
        .arg("pending")
        .env("ASSENT_URL", &s.server.url)
        .env("ASSENT_API_KEY", OP_KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
}

/// Attack (a machine in the middle): on a host without CA certificates the fallback must not
/// trust whatever certificate is shown. `assent pending` against an https gateway (a TLS
/// server with a certificate for `localhost` from the test CA) fails, its error naming the
/// missing CA bundle, and the server gets no request; with `SSL_CERT_FILE` naming the test
/// CA the same command reaches it (so the refusal is the empty roots').
#[test]
fn a_host_without_ca_certificates_refuses_every_https_certificate_naming_the_missing_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let certs = assent_testkit::certs::make(dir.path());
    let (mut server, port, requests) = receiver(Some(&certs));
    let url = format!("https://localhost:{port}");
    let roots = no_roots();
    let out = without_roots(&mut Command::new(BIN), &roots)
        .arg("pending")
        .env("ASSENT_URL", &url)
        .env("ASSENT_API_KEY", OP_KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("no CA certificates"), "{err}");
    let got = requests.recv_timeout(Duration::from_secs(2));
    assert!(
        got.is_err(),
        "a request reached the server unverified: {got:?}"
    );
    let out = Command::new(BIN)
        .arg("pending")
        .env("ASSENT_URL", &url)
        .env("ASSENT_API_KEY", OP_KEY)
        .env("SSL_CERT_FILE", &certs.ca)
        .output()
        .unwrap();
    let got = requests.recv_timeout(Duration::from_secs(20));
    assert!(
        got.is_ok_and(|l| l.starts_with("GET /v1/approvals")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Found by review (availability): a gateway on a host without CA certificates could build no
/// webhook client, so a webhook to a receiver on this machine over plain http got nothing.
/// It is now delivered, while a second webhook, to an https receiver, gets nothing: its
/// certificate cannot be verified, and it is never sent unverified.
#[test]
fn a_gateway_without_ca_certificates_delivers_loopback_http_webhooks_and_refuses_https_ones() {
    let dir = tempfile::tempdir().unwrap();
    let certs = assent_testkit::certs::make(dir.path());
    let (mut plain, plain_port, plain_got) = receiver(None);
    let (mut tls, tls_port, tls_got) = receiver(Some(&certs));
    let port = free_port();
    let extra = format!(
        "webhooks:\n  - {{name: plain, url: \"http://127.0.0.1:{plain_port}/hook\", secret_env: TEST_HOOK_SECRET}}\n  - {{name: tls, url: \"https://localhost:{tls_port}/hook\", secret_env: TEST_HOOK_SECRET}}\n"
    );
    let cfg = write_config(dir.path(), port, &extra);
    let roots = no_roots();
    let mut cmd = serve_cmd(&cfg);
    without_roots(&mut cmd, &roots)
        .env("TEST_HOOK_SECRET", "hook-secret-0123456789abcdef0123456789");
    let s = serve_with(cmd, port);
    held(&s.url, 5000);
    let got = plain_got.recv_timeout(Duration::from_secs(30));
    assert!(
        got.is_ok_and(|l| l == "POST /hook"),
        "no delivery over loopback http"
    );
    let got = tls_got.recv_timeout(Duration::from_secs(4));
    assert!(got.is_err(), "delivered over https unverified: {got:?}");
    drop(s);
    for c in [&mut plain, &mut tls] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

/// Found by review: the warning naming the missing CA bundle was logged where the host was
/// first found to have none — with OpenTelemetry on, while the exporter's client was built,
/// before the log subscriber was installed — so it went nowhere and never came again, and
/// an operator learnt of it only from each failed https delivery. `assent serve` with the
/// OTel exporter on now prints it on stderr at start-up, once it logs.
#[test]
fn a_gateway_without_ca_certificates_says_so_at_start_up_with_opentelemetry_on() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), port, "");
    let roots = no_roots();
    let mut cmd = serve_cmd(&cfg);
    let mut child = without_roots(&mut cmd, &roots)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
        .env("TEST_ALICE_KEY", OP_KEY)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let found = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("no CA certificates") => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let line = found.unwrap_or_else(|| panic!("no warning on stderr: {seen:#?}"));
    assert!(line.contains("gateway restarted"), "{line}");
}
