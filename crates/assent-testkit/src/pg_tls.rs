//! A second throw-away PostgreSQL cluster that speaks TLS on a loopback TCP port, for the tests
//! of how assent connects to a database across a network (`sslmode`, `sslrootcert`). Started
//! on first use, once per test binary, like [`crate::pg`]'s, with [`crate::certs`]'s
//! certificates (for `localhost` only, so a connection to `127.0.0.1` is a name mismatch).

use crate::pg::boot;
use std::path::PathBuf;
use std::process::Child;
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
        |d| {
            crate::certs::make(d);
        },
    );
    TlsCluster {
        port,
        ca_file: dir.join("ca.crt"),
        other_ca_file: dir.join("other-ca.crt"),
        _watchdog: Mutex::new(watchdog),
    }
}
