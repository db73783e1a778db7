//! Connecting to PostgreSQL across a network: a real cluster that speaks TLS on a loopback port
//! (`assent_testkit::pg_tls`, certificates made by `openssl`). The database URL's libpq keys
//! decide: `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`) and
//! `sslrootcert`; a session either is verified (the CA signed the server's certificate and it
//! names the host) or does not open.

use assent_store::db::{Connection, Database};
use assent_testkit::pg_tls::tls_cluster;

/// Opens a session with `url`.
fn connect(url: String) -> Result<Connection, String> {
    Database::Postgres { url }
        .connect()
        .map_err(|e| e.to_string())
}

/// Whether the session's own connection is encrypted (PostgreSQL's `pg_stat_ssl`).
fn encrypted(c: &Connection) -> bool {
    c.conn()
        .query_row(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn a_session_verifies_the_server_with_sslrootcert_and_is_encrypted() {
    let Some(c) = tls_cluster() else { return };
    let ca = c.ca_file.display();
    for mode in ["verify-full", "verify-ca", "require", "prefer"] {
        let s = connect(c.url("localhost", &format!("sslmode={mode}&sslrootcert={ca}")))
            .unwrap_or_else(|e| panic!("sslmode={mode}: {e}"));
        assert!(encrypted(&s), "sslmode={mode}");
    }
    let plain = connect(c.url("localhost", "sslmode=disable")).unwrap();
    assert!(!encrypted(&plain));
}

/// Attack: a machine in the middle presents a certificate of its own. libpq's
/// `sslmode=require` without a root file accepts any certificate; assent verifies every TLS
/// session, so a certificate no trusted root signed is refused, with what to do.
#[test]
fn a_server_certificate_no_trusted_root_signed_is_refused_in_every_tls_mode() {
    let Some(c) = tls_cluster() else { return };
    let other = c.other_ca_file.display();
    for query in [
        "sslmode=require".to_string(),
        "sslmode=prefer".to_string(),
        format!("sslmode=verify-full&sslrootcert={other}"),
        format!("sslmode=require&sslrootcert={other}"),
    ] {
        let e = connect(c.url("localhost", &query))
            .err()
            .unwrap_or_else(|| {
                panic!("{query}: a session opened with a certificate no trusted root signed")
            });
        assert!(e.contains("certificate was not accepted"), "{query}: {e}");
        assert!(e.contains("sslrootcert=FILE"), "{query}: {e}");
    }
}

/// Attack: the right CA, the wrong host. The server's certificate names `localhost`; reached
/// as `127.0.0.1` it is refused even with `verify-ca` (assent always checks the name too).
#[test]
fn a_certificate_for_another_host_name_is_refused() {
    let Some(c) = tls_cluster() else { return };
    let ca = c.ca_file.display();
    for mode in ["verify-full", "verify-ca", "require"] {
        let e = connect(c.url("127.0.0.1", &format!("sslmode={mode}&sslrootcert={ca}")))
            .err()
            .unwrap_or_else(|| {
                panic!("sslmode={mode}: a certificate for localhost was accepted for 127.0.0.1")
            });
        assert!(e.contains("certificate was not accepted"), "{mode}: {e}");
    }
}

#[test]
fn wrong_tls_keys_in_the_url_are_named() {
    let Some(c) = tls_cluster() else { return };
    let e = connect(c.url("localhost", "sslmode=allow")).err().unwrap();
    assert!(e.contains("sslmode=allow is not supported"), "{e}");
    let e = connect(c.url("localhost", "sslrootcert=/nonexistent/ca.pem"))
        .err()
        .unwrap();
    assert!(e.contains("sslrootcert=/nonexistent/ca.pem"), "{e}");
}

#[test]
fn sessions_are_named_assent_in_pg_stat_activity_unless_the_url_names_them() {
    let Some(c) = tls_cluster() else { return };
    let name = |s: &Connection| -> String {
        s.conn()
            .query_row("SELECT current_setting('application_name')", [], |r| {
                r.get(0)
            })
            .unwrap()
    };
    let s = connect(c.url("localhost", "sslmode=disable")).unwrap();
    assert_eq!(name(&s), "assent");
    let s = connect(c.url("localhost", "sslmode=disable&application_name=replica-a")).unwrap();
    assert_eq!(name(&s), "replica-a");
}
