//! A second throw-away PostgreSQL cluster that speaks TLS on a loopback TCP port, for the tests
//! of how assent connects to a database across a network (`sslmode`, `sslrootcert`). Started
//! on first use, once per test binary, like [`crate::pg`]'s; its certificates are made with
//! the `openssl` command: a test CA, a server certificate it signs for `localhost` only (so a
//! connection to `127.0.0.1` is a name mismatch), and a second, unrelated CA.

use crate::pg::boot;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The running TLS cluster.
pub struct TlsCluster {
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// The PEM file of the CA that signed the server's certificate.
    pub ca_file: PathBuf,
    /// The PEM file of a CA that signed nothing this server holds.
    pub other_ca_file: PathBuf,
    _watchdog: Mutex<Child>,
}

impl TlsCluster {
    /// A `postgresql://` URL to the cluster's `postgres` database at `host` (`localhost`,
    /// `127.0.0.1`) with the query `query` (`sslmode=…&sslrootcert=…`; empty for none).
    pub fn url(&self, host: &str, query: &str) -> String {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("postgresql://assent@{host}:{}/postgres{q}", self.port)
    }
}

/// The TLS cluster, started on first use; `None` when `ASSENT_TEST_NO_PG=1`.
pub fn tls_cluster() -> Option<&'static TlsCluster> {
    static CLUSTER: OnceLock<Option<TlsCluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            if std::env::var("ASSENT_TEST_NO_PG").is_ok_and(|v| v == "1") {
                return None;
            }
            Some(start())
        })
        .as_ref()
}

fn start() -> TlsCluster {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (dir, watchdog) = boot(
        "assent-pg-tls-",
        |d| {
            format!(
                "-p {port} -k {d} -c listen_addresses=127.0.0.1 -c fsync=off -c ssl=on \
                 -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key"
            )
        },
        certificates,
    );
    TlsCluster {
        port,
        ca_file: dir.join("ca.crt"),
        other_ca_file: dir.join("other-ca.crt"),
        _watchdog: Mutex::new(watchdog),
    }
}

/// Writes `ca.crt`, `server.crt` and `server.key` (0600; for `localhost`, signed by the CA) and
/// `other-ca.crt` into `dir`.
fn certificates(dir: &Path) {
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2";
    for (name, cn) in [("ca", "assent-test-ca"), ("other-ca", "unrelated-test-ca")] {
        openssl(
            dir,
            &format!("req -x509 {ec} -subj /CN={cn} -keyout {name}.key -out {name}.crt"),
        );
    }
    openssl(
        dir,
        &format!("req {ec} -subj /CN=localhost -keyout server.key -out server.csr"),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
         -extfile server.ext -out server.crt",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
}

/// Runs `openssl ARGS` (split at whitespace) in `dir`; panics with its stderr.
fn openssl(dir: &Path, args: &str) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args.split_whitespace())
        .stdin(Stdio::null())
        .output()
        .expect("the openssl command (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
