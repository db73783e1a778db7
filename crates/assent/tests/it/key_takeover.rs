//! A take-over of an audit key is decided only by its record (found by review of the
//! `audit_key_replaced` guard): checkpoint rows planted past the take-over — one signed by the
//! replaced key (a replica still running an older binary, a restored backup), one signed by a
//! key of a database writer's own, one naming the replaced key that does not verify — neither
//! stop the replica that took over (its writes and `/readyz`) nor let the replaced one write
//! again; and one junk row far ahead does not blind the replaced replica to a later take-over.
//! On SQLite and on PostgreSQL (skipped with `ASSENT_TEST_NO_PG=1`).

use crate::keys_guard::{chmod, config, keys_init, propose_status, readyz};
use crate::{free_port, propose, serve_cmd, serve_with, stop};
use std::path::Path;
use std::time::{Duration, Instant};

/// The row planted in `audit_checkpoints` after the take-over, past every other.
#[derive(Clone, Copy)]
enum Plant {
    /// Validly signed by the replaced key A.
    SignedByTheReplacedKey,
    /// Validly signed by a key of no replica (a database writer's own).
    SignedByAStranger,
    /// Naming A, with a signature that does not verify.
    UnverifiedNamingTheReplacedKey,
}

/// Runs `q` against the test's database: `sqlite3` on `db`, or the PostgreSQL `schema`.
fn exec(db: &Path, schema: Option<&assent_testkit::pg::Schema>, q: &str) {
    match schema {
        Some(s) => s.client().batch_execute(q).unwrap(),
        None => {
            let out = std::process::Command::new("sqlite3")
                .arg(db)
                .arg(q)
                .output()
                .unwrap();
            crate::ok(&out);
        }
    }
}

/// Replica A serves; replica B takes the database over from it (`audit-key-replaces`) while A
/// keeps running; `plant` is inserted at the head of `audit_checkpoints`. B keeps serving and
/// its `/readyz` never says it was replaced (nor tells to copy A's keys); A still writes
/// nothing (`503`).
fn planted_past_a_take_over(plant: Plant, schema: Option<assent_testkit::pg::Schema>) {
    let url = schema
        .as_ref()
        .map(|s| format!("{}&application_name={}", s.postgres_url, s.name));
    let env: Vec<(&str, &str)> = url
        .iter()
        .map(|u| ("ASSENT_DATABASE_URL", u.as_str()))
        .collect();
    let extra = format!(
        "{}audit_checkpoints: {{every_records: 1000000, every_seconds: 86400}}\n",
        if schema.is_some() {
            "database: {url_env: ASSENT_DATABASE_URL}\n"
        } else {
            ""
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let a = keys_init(&keys.join("a"))["audit_public_key"].clone();
    keys_init(&keys.join("b"));
    keys_init(&keys.join("c"));
    let a = a.as_str().unwrap();
    let start = |keys: &str| {
        let port = free_port();
        let mut cmd = serve_cmd(&config(dir.path(), port, keys, &extra));
        cmd.envs(env.iter().copied());
        serve_with(cmd, port)
    };
    let sa = start("keys/a");
    assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
    let replaces = keys.join("b").join("audit-key-replaces");
    std::fs::write(&replaces, format!("{a}\n")).unwrap();
    chmod(&replaces, 0o600);
    let sb = start("keys/b");
    assert_eq!(propose(&sb.url, 6000)["decision"], "pending");
    let read_key = |k: &str| {
        assent_store::checkpoint::read_key(&keys.join(k))
            .unwrap()
            .unwrap()
    };
    let head = "ab".repeat(32);
    let cp = match plant {
        Plant::SignedByTheReplacedKey => {
            assent_store::checkpoint::sign(&read_key("a"), 1_000_000, &head, 1_000_000, 1)
        }
        Plant::SignedByAStranger => {
            assent_store::checkpoint::sign(&read_key("c"), 1_000_000, &head, 1_000_000, 1)
        }
        Plant::UnverifiedNamingTheReplacedKey => {
            let mut cp =
                assent_store::checkpoint::sign(&read_key("a"), 1_000_000, &head, 1_000_000, 1);
            cp.signature = "00".repeat(64);
            cp
        }
    };
    exec(
        &dir.path().join("data").join("assent.db"),
        schema.as_ref(),
        &format!(
            "INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) VALUES ({}, '{}', {}, {}, '{}', '{}')",
            cp.seq, cp.head_hash, cp.record_count, cp.time, cp.public_key, cp.signature
        ),
    );
    // A, still running, writes nothing: the row naming it at the head changes nothing.
    let (status, body) = propose_status(&sa.url, 7000);
    assert_eq!(status, 503, "{body}");
    // B keeps serving, and is not told it was replaced (nor to copy A's keys).
    let (status, body) = propose_status(&sb.url, 8000);
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["decision"], "pending", "{body}");
    // `/readyz` answers from a check at most a second old: watched for two seconds.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let (_, body) = readyz(&sb.url);
        assert_ne!(body["reason"], "audit_key_replaced", "{body}");
        assert!(
            !body.to_string().contains(&format!("serving under {a}")),
            "{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, body) = propose_status(&sb.url, 9000);
    assert_eq!(status, 202, "{body}");
    stop(sb);
    let mut sa = sa;
    let _ = sa.child.kill();
    let _ = sa.child.wait();
}

#[test]
fn a_row_the_replaced_key_signs_past_the_take_over_does_not_stop_the_new_key_sqlite() {
    planted_past_a_take_over(Plant::SignedByTheReplacedKey, None);
}

#[test]
fn a_row_the_replaced_key_signs_past_the_take_over_does_not_stop_the_new_key_postgres() {
    if let Some(schema) = assent_testkit::pg::schema() {
        planted_past_a_take_over(Plant::SignedByTheReplacedKey, Some(schema));
    }
}

#[test]
fn a_row_a_strangers_key_signs_past_the_take_over_does_not_stop_the_new_key_sqlite() {
    planted_past_a_take_over(Plant::SignedByAStranger, None);
}

#[test]
fn a_row_a_strangers_key_signs_past_the_take_over_does_not_stop_the_new_key_postgres() {
    if let Some(schema) = assent_testkit::pg::schema() {
        planted_past_a_take_over(Plant::SignedByAStranger, Some(schema));
    }
}

#[test]
fn an_unverified_row_naming_the_replaced_key_at_the_head_does_not_let_it_write_sqlite() {
    planted_past_a_take_over(Plant::UnverifiedNamingTheReplacedKey, None);
}

#[test]
fn an_unverified_row_naming_the_replaced_key_at_the_head_does_not_let_it_write_postgres() {
    if let Some(schema) = assent_testkit::pg::schema() {
        planted_past_a_take_over(Plant::UnverifiedNamingTheReplacedKey, Some(schema));
    }
}

/// Attack: after replica B took the database over from key A (recorded), A's keys directory
/// is given an `audit-key-replaces` naming B, so that A takes the database back (B had signed
/// nothing before A's newest checkpoint, so the file's "taking over only" rule alone let it).
/// Refused: a key whose take-over is recorded never serves again, naming B.
fn a_replaced_key_takes_nothing_back(schema: Option<assent_testkit::pg::Schema>) {
    let url = schema
        .as_ref()
        .map(|s| format!("{}&application_name={}", s.postgres_url, s.name));
    let env: Vec<(&str, &str)> = url
        .iter()
        .map(|u| ("ASSENT_DATABASE_URL", u.as_str()))
        .collect();
    let extra = if schema.is_some() {
        "database: {url_env: ASSENT_DATABASE_URL}\n"
    } else {
        ""
    };
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let a = keys_init(&keys.join("a"))["audit_public_key"].clone();
    let b = keys_init(&keys.join("b"))["audit_public_key"].clone();
    let (a, b) = (a.as_str().unwrap(), b.as_str().unwrap());
    let start = |keys: &str| {
        let port = free_port();
        let mut cmd = serve_cmd(&config(dir.path(), port, keys, extra));
        cmd.envs(env.iter().copied());
        serve_with(cmd, port)
    };
    let sa = start("keys/a");
    assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
    stop(sa);
    let replaces = keys.join("b").join("audit-key-replaces");
    std::fs::write(&replaces, format!("{a}\n")).unwrap();
    chmod(&replaces, 0o600);
    let sb = start("keys/b");
    assert_eq!(propose(&sb.url, 6000)["decision"], "pending");
    let mut sb = sb;
    let _ = sb.child.kill();
    let _ = sb.child.wait();
    let back = keys.join("a").join("audit-key-replaces");
    std::fs::write(&back, format!("{b}\n")).unwrap();
    chmod(&back, 0o600);
    let cfg_a = config(dir.path(), free_port(), "keys/a", extra);
    let err = crate::keys_guard::start_refused(serve_cmd(&cfg_a), &env);
    assert!(
        err.contains(&format!("audit key {a} was replaced by audit key {b}")),
        "{err}"
    );
}

#[test]
fn a_replaced_key_cannot_take_the_database_back_through_audit_key_replaces_sqlite() {
    a_replaced_key_takes_nothing_back(None);
}

#[test]
fn a_replaced_key_cannot_take_the_database_back_through_audit_key_replaces_postgres() {
    if let Some(schema) = assent_testkit::pg::schema() {
        a_replaced_key_takes_nothing_back(Some(schema));
    }
}

/// Attack: while replica A serves, one junk row is planted in `audit_checkpoints` at a huge
/// `seq`; A's next write examines it, and its watch of take-overs moved past it, so the
/// take-over B records later (at a lower `seq`, its own record's) was never seen and A kept
/// writing under its replaced key. Its watch never moves past the audit head: A writes
/// nothing more (`503`) and its `/readyz` says `audit_key_replaced`.
fn a_junk_row_far_ahead_then_a_take_over(schema: Option<assent_testkit::pg::Schema>) {
    let url = schema
        .as_ref()
        .map(|s| format!("{}&application_name={}", s.postgres_url, s.name));
    let env: Vec<(&str, &str)> = url
        .iter()
        .map(|u| ("ASSENT_DATABASE_URL", u.as_str()))
        .collect();
    let extra = format!(
        "{}audit_checkpoints: {{every_records: 1000000, every_seconds: 86400}}\n",
        if schema.is_some() {
            "database: {url_env: ASSENT_DATABASE_URL}\n"
        } else {
            ""
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let a = keys_init(&keys.join("a"))["audit_public_key"].clone();
    keys_init(&keys.join("b"));
    let a = a.as_str().unwrap();
    let start = |keys: &str| {
        let port = free_port();
        let mut cmd = serve_cmd(&config(dir.path(), port, keys, &extra));
        cmd.envs(env.iter().copied());
        serve_with(cmd, port)
    };
    let sa = start("keys/a");
    assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
    exec(
        &dir.path().join("data").join("assent.db"),
        schema.as_ref(),
        "INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) VALUES (9000000000000000000, 'x', 0, 0, 'junk', 'junk')",
    );
    // A writes once more: its watch examines the junk row.
    assert_eq!(propose(&sa.url, 5500)["decision"], "pending");
    let replaces = keys.join("b").join("audit-key-replaces");
    std::fs::write(&replaces, format!("{a}\n")).unwrap();
    chmod(&replaces, 0o600);
    let sb = start("keys/b");
    assert_eq!(propose(&sb.url, 6000)["decision"], "pending");
    let (status, body) = propose_status(&sa.url, 7000);
    assert_eq!(status, 503, "A kept writing under its replaced key: {body}");
    // `/readyz` answers from a check at most a second old.
    let until = Instant::now() + Duration::from_secs(3);
    let mut said = readyz(&sa.url).1;
    while said["reason"] != "audit_key_replaced" && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        said = readyz(&sa.url).1;
    }
    assert_eq!(said["reason"], "audit_key_replaced", "{said}");
    stop(sb);
    let mut sa = sa;
    let _ = sa.child.kill();
    let _ = sa.child.wait();
}

#[test]
fn a_junk_checkpoint_row_far_ahead_does_not_blind_the_replaced_replica_sqlite() {
    a_junk_row_far_ahead_then_a_take_over(None);
}

#[test]
fn a_junk_checkpoint_row_far_ahead_does_not_blind_the_replaced_replica_postgres() {
    if let Some(schema) = assent_testkit::pg::schema() {
        a_junk_row_far_ahead_then_a_take_over(Some(schema));
    }
}
