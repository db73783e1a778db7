//! `assent restore --config` against the configuration's checkpoint file: a backup whose
//! history was rewritten is refused before the file could be moved aside.

use super::*;

/// Attack (found by review): someone who can write a backup (not the keys) rewrites and
/// re-chains its history and deletes its stored checkpoints; `restore` checked only the
/// checkpoints left in the copy, so it restored the fork, and the documented step after a
/// deliberate restore — moving the checkpoint file aside, since the gateway will not start on
/// an older chain — threw away the one signature that showed it. Restoring through `--config`
/// now checks the copy against every checkpoint of the file up to the copy's head: the
/// forged copy is refused, a genuine one restored.
#[test]
fn a_rewritten_backup_is_not_restored_against_the_checkpoint_file() {
    let g = signed_gateway();
    let (data, cfg) = (g.data.to_str().unwrap(), g.cfg.to_str().unwrap());
    let genuine = g.dir.path().join("genuine.db");
    ok(&run(&[
        "backup",
        "--data-dir",
        data,
        genuine.to_str().unwrap(),
    ]));
    rewrite_the_last_record(&g);
    sql(&g, "DELETE FROM audit_checkpoints;");
    let forged = g.dir.path().join("forged.db");
    // The copy verifies on its own: nothing in it gives the rewrite away.
    ok(&run(&[
        "backup",
        "--data-dir",
        data,
        forged.to_str().unwrap(),
    ]));
    let out = run(&["restore", "--config", cfg, forged.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not a copy of the history the checkpoint file vouches for")
            && err.contains("was rewritten"),
        "{err}"
    );
    let restore_genuine = || {
        ok(&run(&[
            "restore",
            "--config",
            cfg,
            genuine.to_str().unwrap(),
        ]))
    };
    let text = restore_genuine();
    assert!(
        text.contains("up to its head; its last 0 records"),
        "{text}"
    );
    assert!(!text.contains("mv "), "nothing past its head yet: {text}");
    // The gateway goes on (a call held, checkpoints past the backup's head in the file); the
    // genuine backup, now older than the file, is still restored, checked up to its head.
    let s = serve(&g.cfg, g.port);
    held(&s.url, 7100);
    crate::stop(s);
    let text = restore_genuine();
    assert!(
        text.contains("checkpoints past the copy's head") && text.contains("mv "),
        "{text}"
    );
}

/// Rewrites the newest record (an allowed call, which no state table mirrors) and hashes it
/// again with the gateway's own `record_hash`: the bare chain verifies.
fn rewrite_the_last_record(g: &Signed) {
    let rows = sql_with(
        g,
        &["-json"],
        "SELECT seq, at, kind, approval_id, actor, data, prev_hash FROM audit ORDER BY seq DESC LIMIT 1;",
    );
    let r = &serde_json::from_str::<Vec<Value>>(&rows).unwrap()[0];
    assert_eq!(r["kind"], "call.allowed", "{r}");
    let data = r["data"]
        .as_str()
        .unwrap()
        .replace("get_balance", "get_balances");
    assert_ne!(data, r["data"].as_str().unwrap());
    let hash = assent_store::audit::record_hash(
        r["prev_hash"].as_str().unwrap(),
        r["seq"].as_i64().unwrap(),
        r["at"].as_i64().unwrap(),
        r["kind"].as_str().unwrap(),
        r["approval_id"].as_str(),
        r["actor"].as_str().unwrap(),
        &data,
    );
    sql(
        g,
        &format!(
            "UPDATE audit SET data = '{}', hash = '{hash}' WHERE seq = {};",
            data.replace('\'', "''"),
            r["seq"]
        ),
    );
}
