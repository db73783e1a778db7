//! Test support shared by the crates' integration tests (a dev-dependency only, never linked
//! into the gateway): [`pg`], a throw-away PostgreSQL cluster started once per test binary,
//! with a fresh schema per test, and [`pg_tls`], a second one that speaks TLS on a loopback
//! port, with [`certs`]' certificates; [`fixtures`], policy files several crates' tests use. It depends on no assent crate, so any crate's tests may use
//! it without a dependency cycle.

pub mod certs;
pub mod fixtures;
pub mod pg;
pub mod pg_tls;
