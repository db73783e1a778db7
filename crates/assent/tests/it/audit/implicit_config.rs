//! The offline commands run with neither `--config` nor `--data-dir` in the gateway's own
//! directory: ./assent.yaml is read whole, as `--config` reads it, not for its `data_dir`
//! alone.

use super::*;

/// `assent ARGS…` run in `dir`, as an operator in the gateway's directory would.
fn run_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(crate::BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Attack (found by review): someone who can write the database drops the newest records and
/// every stored checkpoint. The operator runs a plain `assent audit verify` in the gateway's
/// directory, as the README suggests: ./assent.yaml was read for its `data_dir` only, so the
/// config's checkpoint file was skipped without a word and the truncated chain verified (exit
/// 0), and a plain `assent backup` signed the truncated head into its copy. Both now read the
/// config as `--config` does and refuse.
#[test]
fn a_plain_verify_or_backup_in_the_gateways_directory_checks_its_checkpoint_file() {
    let g = signed_gateway();
    sql(
        &g,
        "DELETE FROM audit WHERE seq > (SELECT max(seq) - 2 FROM audit); DELETE FROM audit_checkpoints;",
    );
    assert_eq!(g.cfg, g.dir.path().join("assent.yaml"));
    let out = run_in(g.dir.path(), &["audit", "verify"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("removed from the end"), "{err}");
    // `--data-dir` names the database alone, as before: the chain by itself looks whole.
    let data = g.data.to_str().unwrap();
    let out = run_in(g.dir.path(), &["audit", "verify", "--data-dir", data]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let copy = g.dir.path().join("copy.db");
    let out = run_in(g.dir.path(), &["backup", copy.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("audit chain altered since the checkpoint"),
        "{err}"
    );
    assert!(!copy.exists(), "no copy is left behind");
}
