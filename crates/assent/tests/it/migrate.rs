//! `assent migrate` as a user runs it (issue 13): SQLite in a data directory (created when
//! missing), the PostgreSQL database a config names through `database: {url_env}` (a real
//! throw-away cluster, `assent_testkit::pg`), idempotent re-runs, and the refusals: a schema
//! newer than the binary, an unset variable, a value that is not a `postgres://` URL (never
//! echoed), and `serve` on a PostgreSQL config.

use crate::{BIN, free_port, write_config};
use serde_json::Value;
use std::process::{Command, Output};

fn migrate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.arg("migrate")
        .args(args)
        .env_remove("ASSENT_DATABASE_URL");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn migrate_brings_a_new_sqlite_directory_to_the_schema_once_and_refuses_a_newer_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("new").join("data");
    let d = data.to_str().unwrap();
    let first = json_of(&migrate(&["--data-dir", d, "--json"], &[]));
    let applied = first["applied"].as_array().unwrap();
    assert_eq!(applied.len() as u64, first["version"].as_u64().unwrap());
    assert_eq!(applied[0], 1);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the data directory is private");
    let again = json_of(&migrate(&["--data-dir", d, "--json"], &[]));
    assert_eq!(again["applied"], serde_json::json!([]));
    // A database written by a newer assent is refused, named, and left as it is.
    let db = data.join("assent.db");
    let sql = "PRAGMA user_version = 99;";
    let st = Command::new("sqlite3").arg(&db).arg(sql).status().unwrap();
    assert!(st.success());
    let out = migrate(&["--data-dir", d], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("newer"), "{err}");
}

#[test]
fn migrate_prepares_the_postgres_database_a_config_names_and_serve_refuses_it_for_now() {
    let Some(url) = assent_testkit::pg::fresh_schema_url() else {
        return; // ASSENT_TEST_NO_PG=1: the SQLite half runs above.
    };
    let dir = tempfile::tempdir().unwrap();
    let extra = "database: {url_env: ASSENT_DATABASE_URL}\n";
    let cfg = write_config(dir.path(), free_port(), extra);
    let c = cfg.to_str().unwrap();
    let env = [("ASSENT_DATABASE_URL", url.as_str())];
    let first = json_of(&migrate(&["--config", c, "--json"], &env));
    let n = first["version"].as_u64().unwrap() as usize;
    assert_eq!(first["applied"].as_array().unwrap().len(), n, "{first}");
    let again = json_of(&migrate(&["--config", c, "--json"], &env));
    assert_eq!(again["applied"], serde_json::json!([]));
    assert!(!dir.path().join("data").join("assent.db").exists());

    // The variable unset, or not a URL: refused, naming the variable, never its value.
    let out = migrate(&["--config", c], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("`ASSENT_DATABASE_URL` is not set"), "{err}");
    let secret = "host=/tmp password=hunter2";
    let out = migrate(&["--config", c], &[("ASSENT_DATABASE_URL", secret)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not hold a postgres:// URL"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");

    // A name that is no variable name stops at the file and line.
    let other = tempfile::tempdir().unwrap();
    let bad = write_config(other.path(), free_port(), "database: {url_env: \"$URL\"}\n");
    let out = migrate(&["--config", bad.to_str().unwrap()], &env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("assent.yaml:9: database.url_env `$URL` is not"),
        "{err}"
    );

    // `serve` on it stops before listening, saying why.
    let out = Command::new(BIN)
        .args(["serve", "--config", c])
        .env("ASSENT_DATABASE_URL", &url)
        .env("TEST_ALICE_KEY", crate::OP_KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("serves its store from SQLite only"), "{err}");
}
