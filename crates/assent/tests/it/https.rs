//! The gateway's outbound HTTPS: a webhook whose receiver speaks TLS (as Slack's, Teams' and
//! every hosted receiver do) is delivered, verified against the system's roots
//! (`SSL_CERT_FILE` names the test CA here, as an operator's image would add a private CA),
//! and refused when the certificate was signed by a CA nobody trusts.

use crate::{free_port, held, serve_cmd, serve_with, write_config};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A receiver on `https://localhost:PORT/hook` (Python's `http.server` over `ssl`, with the
/// test certificate for `localhost`): answers `200` and prints each delivery's
/// `X-Assent-Delivery` on a line. The child, its URL and its output's lines.
fn https_receiver(
    certs: &assent_testkit::certs::TestCerts,
) -> (Child, String, std::sync::mpsc::Receiver<String>) {
    let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
        print(self.headers.get("X-Assent-Delivery"), flush=True)
    def log_message(self, *a): pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(&certs.server_crt)
        .arg(&certs.server_key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = lines.next().unwrap().unwrap();
    let (send, recv) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = send.send(l);
        }
    });
    (child, format!("https://localhost:{port}/hook"), recv)
}

/// Holds one call through a gateway whose webhook goes to `hook`, trusting the CA in
/// `ca_file`; the gateway (stopped when dropped).
fn gateway_with_webhook(
    dir: &std::path::Path,
    hook: &str,
    ca_file: &std::path::Path,
) -> crate::Server {
    let port = free_port();
    let extra =
        format!("webhooks:\n  - {{name: ops, url: \"{hook}\", secret_env: TEST_HOOK_SECRET}}\n");
    let cfg = write_config(dir, port, &extra);
    let mut cmd = serve_cmd(&cfg);
    cmd.env("TEST_HOOK_SECRET", "hook-secret-0123456789abcdef0123456789")
        .env("SSL_CERT_FILE", ca_file);
    let s = serve_with(cmd, port);
    held(&s.url, 5000);
    s
}

#[test]
fn a_webhook_to_an_https_receiver_is_delivered_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let certs = assent_testkit::certs::make(dir.path());
    let (mut receiver, hook, deliveries) = https_receiver(&certs);

    let trusted = tempfile::tempdir().unwrap();
    let gw = gateway_with_webhook(trusted.path(), &hook, &certs.ca);
    let got = deliveries.recv_timeout(Duration::from_secs(30));
    assert!(got.is_ok(), "no delivery over HTTPS");
    drop(gw);

    // Attack: a receiver (or a machine in the middle) with a certificate no trusted root
    // signed gets nothing: the same webhook, trusting only an unrelated CA.
    let untrusted = tempfile::tempdir().unwrap();
    let gw = gateway_with_webhook(untrusted.path(), &hook, &certs.other_ca);
    let got = deliveries.recv_timeout(Duration::from_secs(4));
    assert!(
        got.is_err(),
        "delivered to an untrusted certificate: {got:?}"
    );
    drop(gw);
    receiver.kill().unwrap();
    receiver.wait().unwrap();
}
