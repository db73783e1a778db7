//! The token key and executors through the real binary (issue 14 §6): `assent keys
//! rotate-token-key` makes a new current key and keeps the old one as a retired file, never
//! touching `audit.key`; and `principals[]` of kind `executor` are checked at start-up (file,
//! line, reason); and the claim a database holds at record 0 (found by review): `assent keys
//! init --config` refuses new keys over another key set's claim, and `assent audit verify`
//! names who claimed the database and fails on a claim no take-over accounts for.

use crate::keys_guard::{
    chmod, config, key_sets, keys_init_config, on_postgres, serve_keys, verify,
};
use crate::{BIN, free_port, ok, propose, serve_cmd, stop};
use serde_json::Value;
use std::process::Command;

fn keys(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .arg("keys")
        .args(args)
        .arg("--keys-dir")
        .arg(dir)
        .arg("--json")
        .output()
        .unwrap()
}

/// Attack (found by review): a FIFO planted under a retired key's name (in a sticky keys
/// directory anyone may add to) made every read of the keys block for ever, holding the
/// token keys' lock: no token could be minted or redeemed, and a start hung. A key file that
/// is not a regular file is refused at once, named once.
#[test]
fn a_fifo_named_like_a_key_file_is_refused_at_once_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    ok(&keys(&["init"], &d));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let fifo = d.join(format!("token-retired-{now}.key"));
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let started = std::time::Instant::now();
    let config = dir.path().join("assent.yaml");
    let yaml = format!(
        "listen: 127.0.0.1:{}\ndata_dir: {}\n",
        free_port(),
        d.display()
    );
    std::fs::write(&config, yaml).unwrap();
    let out = serve_cmd(&config).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let named = format!("{}: a private key must be a regular file", fifo.display());
    assert_eq!(err.matches(&named).count(), 1, "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn keys_rotate_token_key_makes_a_new_current_key_and_retires_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("keys");
    // Nothing to rotate yet: exit 1 naming `assent keys init`.
    let out = keys(&["rotate-token-key"], &d);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("assent keys init"), "{err}");

    ok(&keys(&["init"], &d));
    let (token, audit) = (
        std::fs::read(d.join("token.key")).unwrap(),
        std::fs::read(d.join("audit.key")).unwrap(),
    );
    let done: Value = serde_json::from_str(&ok(&keys(&["rotate-token-key"], &d))).unwrap();
    let (kid, retired_kid) = (
        done["kid"].as_str().unwrap(),
        done["retired_kid"].as_str().unwrap(),
    );
    assert_ne!(kid, retired_kid);
    assert_eq!(kid.len(), 43, "an RFC 7638 thumbprint: {done}");
    let retired = d.join(done["retired_file"].as_str().unwrap());
    assert_eq!(std::fs::read(&retired).unwrap(), token, "the old key, kept");
    assert_ne!(std::fs::read(d.join("token.key")).unwrap(), token);
    assert_eq!(
        std::fs::read(d.join("audit.key")).unwrap(),
        audit,
        "audit key untouched"
    );
    use std::os::unix::fs::PermissionsExt;
    for f in [retired, d.join("token.key")] {
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    // Twice in a row: each rotation retires the key before it.
    let again: Value = serde_json::from_str(&ok(&keys(&["rotate-token-key"], &d))).unwrap();
    assert_eq!(again["retired_kid"].as_str(), Some(kid));
}

#[test]
fn an_executor_principal_is_checked_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    let run = |principal: &str| {
        let cfg = format!("listen: 127.0.0.1:0\nprincipals:\n  - {principal}\n");
        std::fs::write(&p, cfg).unwrap();
        let out = serve_cmd(&p)
            .env_remove("ASSENT_TEST_EXEC_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (principal, why) in [
        (
            "{name: x, kind: executor, key_env: ASSENT_TEST_EXEC_KEY}",
            "an executor names what it executes",
        ),
        (
            "{name: x, kind: executor, key_env: ASSENT_TEST_EXEC_KEY, servers: []}",
            "servers is empty",
        ),
        (
            "{name: x, kind: executor, key_env: ASSENT_TEST_EXEC_KEY, tools: [pay], roles: [a]}",
            "an executor has no agent_id and no roles",
        ),
        (
            "{name: x, kind: operator, key_env: ASSENT_TEST_EXEC_KEY, servers: [fs]}",
            "only an executor has servers, tools or agents",
        ),
        (
            "{name: x, kind: agent, agent_id: bot, key_env: ASSENT_TEST_EXEC_KEY, agents: [bot]}",
            "only an executor has servers, tools or agents",
        ),
        // Found by review: tool names are each agent's own, so an executor that did not name
        // its agents redeemed any agent's token for a tool of the same name.
        (
            "{name: x, kind: executor, key_env: ASSENT_TEST_EXEC_KEY, tools: [pay]}",
            "an executor names the agents whose tokens it redeems",
        ),
        (
            "{name: x, kind: executor, key_env: ASSENT_TEST_EXEC_KEY, tools: [pay], agents: []}",
            "agents is empty",
        ),
    ] {
        let (code, err) = run(principal);
        assert!(
            code == Some(1) && err.contains(&format!("{}:3:", p.display())) && err.contains(why),
            "{principal}: {err}"
        );
    }
    // A well-formed executor passes the declaration; start-up then stops only at its unset
    // key.
    let (code, err) = run(
        "{name: x, kind: executor, key_env: ASSENT_TEST_EXEC_KEY, servers: [fs], tools: [write_file], agents: [bot]}",
    );
    assert!(
        code == Some(1) && err.contains("ASSENT_TEST_EXEC_KEY") && err.contains("is not set"),
        "{err}"
    );
}

/// Found by review: the key files were written through a temporary file opened following
/// links, its mode set only when it was created: whoever could write `keys_dir` planted
/// `token.key.tmp` as a link to a file of theirs, and the next rotation wrote the new signing
/// key into it. Now a planted link (or file) is replaced, never written through.
#[test]
fn a_link_planted_as_the_temporary_key_file_is_not_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("keys");
    ok(&keys(&["init"], &d));
    let theirs = dir.path().join("theirs");
    std::fs::write(&theirs, b"").unwrap();
    std::os::unix::fs::symlink(&theirs, d.join("token.key.tmp")).unwrap();
    ok(&keys(&["rotate-token-key"], &d));
    assert_eq!(
        std::fs::read(&theirs).unwrap(),
        b"",
        "the key went through the link"
    );
    let meta = std::fs::symlink_metadata(d.join("token.key")).unwrap();
    assert!(meta.file_type().is_file(), "token.key is a plain file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(d.join("token.key")).unwrap().len(), 32);
}

/// Attack (found by review): `assent keys init --config` checked only whether the database
/// held audit records, so over a database that a gateway under key set A had claimed but not
/// yet written to it made a new key set, which every start then refused. It now refuses up
/// front, naming A's audit key and both ways on (copy A's keys, or `audit-key-replaces`),
/// and makes no key; so too once A's first start recorded its configuration there
/// (`config.loaded`), which it now does.
fn keys_init_over_a_claim_only(extra: &str, env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let [a] = key_sets(&keys, ["a"]);
    stop(serve_keys(dir.path(), "keys/a", extra, env));
    let cfg = config(dir.path(), free_port(), "keys/c", extra);
    let out = keys_init_config(&cfg, env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1)
            && err.contains(&a)
            && err.contains("claimed by audit key")
            && err.contains("audit-key-replaces"),
        "{err}"
    );
    for f in ["token.key", "audit.key"] {
        assert!(!keys.join("c").join(f).exists(), "{f} made");
    }
    // The claiming key set's own directory is no new key set: init over it is fine.
    let cfg = config(dir.path(), free_port(), "keys/a", extra);
    let out = keys_init_config(&cfg, env);
    ok(&out);
}

#[test]
fn keys_init_refuses_new_keys_over_a_database_only_claimed_by_another_key_set_sqlite() {
    keys_init_over_a_claim_only("", &[]);
}

#[test]
fn keys_init_refuses_new_keys_over_a_database_only_claimed_by_another_key_set_postgres() {
    on_postgres(keys_init_over_a_claim_only);
}

/// Attack (found by review): `assent audit verify` accepted a claim at record 0 signed by any
/// key, so a database whose claim was swapped for another key set's valid one (copied from
/// that key set's own fresh database by whoever can write this one) verified as before. It
/// now says which key claimed the database and fails unless that is the key checked with, one
/// a recorded take-over leads from, or one `audit-key-replaces` declares replaced.
#[test]
fn audit_verify_fails_on_a_claim_swapped_in_from_another_key_set() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let [a, x] = key_sets(&keys, ["a", "x"]);
    let (a, x) = (a.as_str(), x.as_str());
    let (ours, theirs) = (dir.path().join("ours"), dir.path().join("theirs"));
    for (home, k) in [(&ours, "../keys/a"), (&theirs, "../keys/x")] {
        std::fs::create_dir(home).unwrap();
        let s = serve_keys(home, k, "", &[]);
        if k.ends_with('a') {
            assert_eq!(propose(&s.url, 5000)["decision"], "pending");
        }
        stop(s);
    }
    let cfg = config(&ours, free_port(), "../keys/a", "");
    let out = verify(&cfg, &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains(&format!("by audit key {a}: the key checked with")),
        "{said}"
    );
    let db = ours.join("data").join("assent.db");
    let swap = format!(
        "DELETE FROM audit_checkpoints WHERE seq = 0; ATTACH '{}' AS o; INSERT INTO audit_checkpoints SELECT * FROM o.audit_checkpoints WHERE seq = 0;",
        theirs.join("data").join("assent.db").display()
    );
    ok(&Command::new("sqlite3")
        .arg(&db)
        .arg(&swap)
        .output()
        .unwrap());
    let out = verify(&cfg, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1)
            && err.contains(&format!("claimed at record 0 by audit key {x}"))
            && err.contains(a)
            && err.contains("audit-key-replaces"),
        "{err}"
    );
    // Declared replaced, knowingly: accepted, and said so.
    let replaces = keys.join("a").join("audit-key-replaces");
    std::fs::write(&replaces, format!("{x}\n")).unwrap();
    chmod(&replaces, 0o600);
    let out = verify(&cfg, &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("declared replaced"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
