//! `assent audit …`: offline checks of the audit log on the database file (read-only; the
//! gateway may keep running). `verify` checks the hash chain, the signed checkpoints (stored
//! and, with `--checkpoint`, a sink file) and the state tables against the chain, and names
//! the first problem; `key` prints the checkpoint public key. The checks themselves are
//! `assent_store::integrity`'s; this file maps them to text, JSON and exit statuses.

use crate::args::AuditCmd;
use crate::render::one_line;
use crate::setup::data_dir_or_default;
use anyhow::Result;
use serde_json::json;
use std::path::PathBuf;

/// Runs one `assent audit` subcommand to its exit status.
pub(crate) fn audit(cmd: AuditCmd) -> Result<i32> {
    match cmd {
        AuditCmd::Verify {
            data_dir,
            config,
            checkpoint,
            public_key,
            max_unsigned,
            json,
        } => {
            let place = crate::args::DataPlace { config, data_dir };
            audit_verify(place, checkpoint, public_key, max_unsigned, json)
        }
        AuditCmd::Key { data_dir } => audit_key(data_dir),
    }
}

/// `assent audit verify` on `place`'s database (`--config`'s, SQLite or PostgreSQL, with its
/// `keys_dir`; else `--data-dir`, see [`data_dir_or_default`]): `checkpoint` a sink
/// file the chain must reach, `public_key` 64 hex (default: the data dir's key),
/// `max_unsigned` records allowed after the newest checkpoint, `as_json` one JSON report.
/// Returns the exit status: 0 verified, 1 a problem found, 2 usage or I/O error.
fn audit_verify(
    place: crate::args::DataPlace,
    checkpoint: Option<PathBuf>,
    public_key: Option<String>,
    max_unsigned: Option<i64>,
    as_json: bool,
) -> Result<i32> {
    use assent_store::integrity::{Problem, VerifyOptions, verify_database};
    let run = || -> Result<assent_store::integrity::Report> {
        let (database, keys_dir) = match &place.config {
            Some(f) => {
                let cfg = assent_server::config::Config::load(f)?;
                (cfg.database()?, cfg.keys_dir())
            }
            None => {
                let dir = data_dir_or_default(place.data_dir.clone())?;
                let path = dir.join(assent_store::ops::DB_FILE);
                (assent_store::db::Database::Sqlite { path }, dir)
            }
        };
        let public_key = match public_key.as_deref() {
            Some(k) => Some(assent_store::checkpoint::parse_public_key(k)?),
            None => None,
        };
        let opts = VerifyOptions {
            public_key,
            checkpoint_file: checkpoint.as_deref(),
        };
        Ok(verify_database(&database, &keys_dir, &opts)?)
    };
    let mut rep = match run() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: {}", one_line(&e));
            return Ok(2);
        }
    };
    if let Some(max) = max_unsigned
        && rep.problem.is_none()
        && rep.unsigned_records > max
    {
        rep.problem = Some(Problem {
            check: "checkpoint",
            seq: None,
            reason: format!(
                "{} records are covered by no checkpoint (at most {max} allowed): the stored checkpoints were deleted, or the gateway has not signed for too long",
                rep.unsigned_records
            ),
        });
    }
    let p = rep.problem.as_ref();
    if as_json {
        let broken = p
            .filter(|p| p.check == "chain")
            .map(|p| json!({"seq": p.seq, "reason": p.reason}));
        let mut v = serde_json::to_value(&rep)?;
        v["ok"] = json!(p.is_none());
        v["broken"] = json!(broken);
        println!("{v}");
    }
    let Some(p) = p else {
        if !as_json {
            print_verified(&rep);
        }
        return Ok(0);
    };
    match p.check {
        "chain" => eprintln!(
            "assent: audit chain broken at record {}: {}",
            p.seq.unwrap_or(0),
            p.reason
        ),
        "state" => eprintln!(
            "assent: the state tables disagree with the audit chain: {}{}",
            p.reason,
            match rep.state_disagreements {
                0 | 1 => String::new(),
                n => format!(" ({} more)", n - 1),
            }
        ),
        _ => eprintln!("assent: audit checkpoint not met: {}", p.reason),
    }
    Ok(1)
}

/// The text report of a chain that verifies: records and head, checkpoints, the sink file,
/// unsigned records, the state tables.
fn print_verified(rep: &assent_store::integrity::Report) {
    println!(
        "audit chain verifies: {} records, head {}",
        rep.records, rep.head
    );
    match (&rep.newest_checkpoint, &rep.public_key) {
        (Some(cp), Some(k)) => println!(
            "{} stored checkpoints verify under audit key {k}; the newest covers record {} ({})",
            rep.checkpoints,
            cp.seq,
            assent_store::rfc3339(cp.time)
        ),
        _ => println!("no stored checkpoints"),
    }
    if let Some(cp) = &rep.file_checkpoint {
        println!(
            "the chain reaches the checkpoint file's newest checkpoint (record {}, {}; {} lines skipped)",
            cp.seq,
            assent_store::rfc3339(cp.time),
            rep.file_lines_skipped
        );
    }
    if rep.unsigned_records > 0 {
        println!(
            "{} records after the newest checkpoint are not signed yet",
            rep.unsigned_records
        );
    }
    println!("the state tables agree with the audit chain");
}

/// `assent audit key`: prints the audit public key (64 hex), creating the key when missing.
fn audit_key(data_dir: Option<PathBuf>) -> Result<i32> {
    let dir = data_dir_or_default(data_dir)?;
    if !dir.exists() {
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    let key = assent_store::checkpoint::load_or_create_key(&dir)?;
    println!(
        "{}",
        assent_store::checkpoint::public_key_hex(&key.verifying_key())
    );
    Ok(0)
}
