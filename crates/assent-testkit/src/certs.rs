//! Certificates for the tests that speak TLS, made with the `openssl` command (Debian's
//! `openssl` package): a test CA, a server certificate it signs for `localhost` only, and a
//! second, unrelated CA (P-256 keys, valid two days).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The PEM files [`make`] wrote.
pub struct TestCerts {
    /// The CA that signed the server's certificate.
    pub ca: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
    /// The server's certificate (`subjectAltName=DNS:localhost`).
    pub server_crt: PathBuf,
    /// The server's private key (mode 0600).
    pub server_key: PathBuf,
}

/// Writes `ca.crt`, `other-ca.crt`, `server.crt` and `server.key` (and their by-products) into
/// `dir`.
pub fn make(dir: &Path) -> TestCerts {
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
    let key = dir.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    TestCerts {
        ca: dir.join("ca.crt"),
        other_ca: dir.join("other-ca.crt"),
        server_crt: dir.join("server.crt"),
        server_key: key,
    }
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
