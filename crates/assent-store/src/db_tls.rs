//! TLS for the PostgreSQL sessions (issue 13 §1: a managed PostgreSQL reached over a network):
//! how the database URL's `sslmode` and `sslrootcert` are read, and the rustls connector every
//! session and the LISTEN thread connect with.
//!
//! The URL keeps libpq's names, so the URL a team already uses for `psql` works here:
//!
//! | `sslmode` | assent |
//! |---|---|
//! | `disable` | plain TCP |
//! | `prefer` (the default) | TLS when the server offers it, and then verified as below; plain TCP when it does not |
//! | `require`, `verify-ca`, `verify-full` | TLS or no session, verified as below |
//!
//! Verified always means what libpq calls `verify-full`: the server's certificate chains to a
//! trusted root and names the host connected to. libpq's `require` without a root file checks
//! neither, which lets anyone on the path read and change every decision; assent does not offer
//! that. The trusted roots are the certificates in `sslrootcert` (a PEM file) when the URL
//! names one, else the system's (`rustls-native-certs`; none where the system has no CA
//! bundle). A Unix-socket connection has no TLS
//! (PostgreSQL offers none there), so `prefer` over a socket is plain and `require` fails.

use crate::db_value::DbError;
use postgres::config::SslMode;
use rustls::pki_types::{CertificateDer, pem::PemObject};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A database URL as the session connects with it: the driver's configuration (without the
/// TLS keys it does not know; `application_name` `assent` unless the URL names one) and the
/// connector that verifies the server.
pub(crate) struct PgTarget {
    /// The driver's configuration, `sslmode` mapped onto its three modes.
    pub(crate) config: postgres::Config,
    /// The rustls connector (roots: `sslrootcert` or the system's).
    pub(crate) tls: MakeRustlsConnect,
}

/// Reads `url` (a `postgres://` / `postgresql://` URL or a libpq `key=value` string).
/// `Unusable` names what is wrong: an unknown `sslmode`, an unreadable or empty `sslrootcert`,
/// or what the driver refuses in the rest.
pub(crate) fn target(url: &str) -> Result<PgTarget, DbError> {
    let (rest, mode, root_file) = split_tls_keys(url)?;
    let mut config: postgres::Config = rest.parse()?;
    config.ssl_mode(mode);
    // Named in `pg_stat_activity` unless the URL names it otherwise.
    if config.get_application_name().is_none() {
        config.application_name("assent");
    }
    let roots = match (mode, root_file) {
        (SslMode::Disable, _) => rustls::RootCertStore::empty(),
        (_, Some(file)) => roots_from_file(&file)?,
        (_, None) => system_roots(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DbError::Unusable(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(PgTarget {
        config,
        tls: MakeRustlsConnect::new(tls),
    })
}

/// `url` without its `sslmode` and `sslrootcert` keys, the mode they ask for, and the root file.
fn split_tls_keys(url: &str) -> Result<(String, SslMode, Option<String>), DbError> {
    let (mut mode, mut root) = (None, None);
    let mut take = |k: &str, v: String| -> Result<bool, DbError> {
        match k {
            "sslmode" => mode = Some(ssl_mode(&v)?),
            "sslrootcert" => root = Some(v),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // The query's other parameters are kept as written: re-encoding them would turn a
        // `%20` into a `+`, which the driver does not read as a space.
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        for segment in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = segment.split_once('=').unwrap_or((segment, ""));
            // libpq decodes a URI's parameters by percent-decoding alone (`+` is a `+`).
            let decode = |t: &str| {
                percent_encoding::percent_decode_str(t)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            if !take(&decode(k), decode(v))? {
                kept.push(segment);
            }
        }
        if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else {
        let mut kept = Vec::new();
        for (k, v, span) in libpq_pairs(url)? {
            if !take(k, v)? {
                kept.push(span);
            }
        }
        kept.join(" ")
    };
    Ok((rest, mode.unwrap_or(SslMode::Prefer), root))
}

/// The `key = value` pairs of a libpq connection string, each with its text as written: a
/// value is a run without whitespace or a single-quoted text in which `\'` and `\\` are a
/// quote and a backslash. `Unusable` for a key without `=` or an unterminated quote.
fn libpq_pairs(text: &str) -> Result<Vec<(&str, String, &str)>, DbError> {
    let bad = |why: &str| DbError::Unusable(format!("the database connection string {why}"));
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let start = rest;
        let eq = rest.find('=').ok_or_else(|| bad("has a key without `=`"))?;
        let key = rest[..eq].trim();
        rest = rest[eq + 1..].trim_start();
        let mut value = String::new();
        if let Some(quoted) = rest.strip_prefix('\'') {
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '\'')) => break i,
                    Some((_, '\\')) => value.extend(chars.next().map(|(_, c)| c)),
                    Some((_, c)) => value.push(c),
                    None => return Err(bad("has an unterminated quote")),
                }
            };
            rest = &quoted[end + 1..];
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value.push_str(&rest[..end]);
            rest = &rest[end..];
        }
        out.push((key, value, start[..start.len() - rest.len()].trim_end()));
        rest = rest.trim_start();
    }
    Ok(out)
}

/// libpq's `sslmode` as the driver's mode (see the module's table).
fn ssl_mode(v: &str) -> Result<SslMode, DbError> {
    Ok(match v {
        "disable" => SslMode::Disable,
        "prefer" => SslMode::Prefer,
        "require" | "verify-ca" | "verify-full" => SslMode::Require,
        other => {
            return Err(DbError::Unusable(format!(
                "sslmode={other} is not supported: use disable, prefer, require, verify-ca or verify-full (the last three all verify the server's certificate and name)"
            )));
        }
    })
}

/// The certificates of the PEM file `file` as trusted roots.
fn roots_from_file(file: &str) -> Result<rustls::RootCertStore, DbError> {
    let unusable = |why: String| DbError::Unusable(format!("sslrootcert={file}: {why}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(file).map_err(|e| unusable(e.to_string()))? {
        let cert = cert.map_err(|e| unusable(e.to_string()))?;
        roots.add(cert).map_err(|e| unusable(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(unusable("holds no certificate".into()));
    }
    Ok(roots)
}

/// The system's trusted roots (none on a system without a CA bundle: a server that offers TLS
/// is then refused, see [`explain`]), read from disk once per process: every session, read
/// session, LISTEN thread and reconnect connects with them.
fn system_roots() -> rustls::RootCertStore {
    static ROOTS: std::sync::OnceLock<rustls::RootCertStore> = std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(found.certs);
            roots
        })
        .clone()
}

/// A failed connection's error, with what to do when it was the TLS handshake (a certificate
/// no trusted root signed, or that names another host).
pub(crate) fn explain(e: postgres::Error) -> DbError {
    let text = e.to_string();
    if text.contains("TLS handshake") {
        return DbError::Unusable(format!(
            "{text}: the database server's certificate was not accepted; name the CA that signed it with sslrootcert=FILE in the URL (and connect by the name the certificate holds), or say sslmode=disable on a network you trust"
        ));
    }
    DbError::Postgres(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_keys_are_taken_out_of_either_form_and_the_rest_is_kept() {
        let (rest, mode, root) = split_tls_keys(
            "postgres://u:p%40ss@db.example:6432/assent?sslmode=verify-full&sslrootcert=%2Fetc%2Fc+a.pem&options=-c%20search_path%3Dx",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p%40ss@db.example:6432/assent?options=-c%20search_path%3Dx"
        );
        assert!(matches!(mode, SslMode::Require));
        assert_eq!(root.as_deref(), Some("/etc/c+a.pem"));
        let (rest, mode, root) = split_tls_keys(
            "host=/tmp port = 5432 sslmode='disable' options='-c  search_path=t\\'s' user=assent",
        )
        .unwrap();
        assert_eq!(
            rest,
            "host=/tmp port = 5432 options='-c  search_path=t\\'s' user=assent"
        );
        assert!(matches!(mode, SslMode::Disable));
        assert_eq!(root, None);
        let (_, mode, _) = split_tls_keys("postgresql://h/d").unwrap();
        assert!(matches!(mode, SslMode::Prefer));
    }

    #[test]
    fn an_unknown_sslmode_or_an_unreadable_root_file_is_named() {
        let e = split_tls_keys("postgres://h/d?sslmode=allow").unwrap_err();
        assert!(e.to_string().contains("sslmode=allow"), "{e}");
        let e = split_tls_keys("host=/tmp options='-c x").unwrap_err();
        assert!(e.to_string().contains("unterminated quote"), "{e}");
        let e = target("postgres://h/d?sslrootcert=/nonexistent/ca.pem")
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("sslrootcert=/nonexistent/ca.pem"),
            "{e}"
        );
    }
}
