//! `assent backup` and `assent restore`: the SQLite database copied out of a running gateway
//! and put back into a stopped one, each copy verified. The copying and every check are
//! `assent_store::ops`'s; this file finds the data directory (`--config` or `--data-dir`) and
//! prints what was done, as text or JSON.

use crate::args::{Cmd, DataPlace};
use crate::setup::{config_file, data_dir_or_default};
use anyhow::Result;
use assent_server::config::Config;
use assent_store::ops::{self, Copied};
use std::path::{Path, PathBuf};

/// The data and keys directories of `place` and its checkpoint file: `--config FILE`'s (or
/// ./assent.yaml's, [`config_file`])
/// `data_dir`, `keys_dir` and `audit_checkpoints.file`, else `--data-dir` (or
/// [`data_dir_or_default`]) for both and none. A config on PostgreSQL is refused: its
/// database is backed up with `pg_dump` (README, "PostgreSQL").
fn dirs(place: &DataPlace) -> Result<(PathBuf, PathBuf, Option<PathBuf>)> {
    match config_file(place) {
        Some(f) => {
            let cfg = Config::load(&f)?;
            if cfg.database != assent_server::config::DatabaseConfig::Sqlite {
                anyhow::bail!(
                    "{}: database: PostgreSQL — assent backup and restore copy the embedded SQLite file; back a PostgreSQL database up with pg_dump and restore it with pg_restore (README, \"PostgreSQL\"), and keep a copy of {} with it",
                    f.display(),
                    cfg.keys_dir().display()
                );
            }
            let keys = cfg.keys_dir();
            Ok((cfg.data_dir, keys, cfg.audit_checkpoints.file))
        }
        None => {
            let d = data_dir_or_default(place.data_dir.clone());
            Ok((d.clone(), d, None))
        }
    }
}

/// Runs `assent backup` or `assent restore` (any other command is a bug: status 2).
pub(crate) fn run(cmd: Cmd) -> Result<i32> {
    match cmd {
        Cmd::Backup {
            place,
            force,
            json,
            out,
        } => backup(&place, &out, force, json),
        Cmd::Restore {
            place,
            force,
            allow_outstanding_tokens,
            json,
            input,
        } => restore(&place, &input, (force, allow_outstanding_tokens), json),
        _ => Ok(2),
    }
}

/// `assent backup`: writes the verified copy of the database to `out` (replacing it only with
/// `force`) and prints the report. Exit status 0; a refusal is an error (status 1).
fn backup(place: &DataPlace, out: &Path, force: bool, json: bool) -> Result<i32> {
    let (dir, keys, file) = dirs(place)?;
    ops::clear_of_state(out, &[], file.as_deref())?;
    let done = ops::backup_checked(&dir, &keys, out, force, file.as_deref())?;
    if json {
        println!("{}", serde_json::to_string(&done)?);
        return Ok(0);
    }
    println!(
        "backup written to {} ({} bytes, schema version {})",
        done.path.display(),
        done.bytes,
        done.schema_version
    );
    print_verified(&done);
    if done.head_signed {
        println!(
            "its head is covered by a checkpoint signed with the audit key: `assent restore` refuses the copy if records are added to it or rewritten"
        );
    } else {
        eprintln!(
            "assent: warning: {} holds no {}: the copy's head is not signed, so `assent restore` will refuse it without --force (back up with --config, whose keys_dir holds the key)",
            keys.display(),
            assent_store::checkpoint::KEY_FILE
        );
    }
    println!(
        "the keys are not in it: keep a copy of {} and {} with your backups",
        keys.join(assent_store::keys::TOKEN_KEY_FILE).display(),
        keys.join(assent_store::checkpoint::KEY_FILE).display()
    );
    if done.archived_records > 0 {
        println!(
            "nor are the {} audit records retention archived before its chain: keep a copy of {} (their signed exports) with your backups",
            done.archived_records,
            dir.join(assent_store::retention::ARCHIVE_DIR).display()
        );
    }
    Ok(0)
}

/// `assent restore`: replaces the database with the verified backup `input` and prints the
/// report. Exit status 0; a refusal is an error (status 1).
fn restore(place: &DataPlace, input: &Path, force: (bool, bool), json: bool) -> Result<i32> {
    let (dir, keys, file) = dirs(place)?;
    let done = ops::restore(&dir, &keys, input, force, file.as_deref())?;
    if json {
        println!("{}", serde_json::to_string(&done)?);
        return Ok(0);
    }
    println!(
        "restored {} into {} (schema version {})",
        input.display(),
        done.path.display(),
        done.schema_version
    );
    if let Some(p) = &done.set_aside {
        println!("the replaced database is kept as {}", p.display());
    }
    print_verified(&done);
    print_file_check(file.as_deref(), &done);
    let archive = dir.join(assent_store::retention::ARCHIVE_DIR);
    if done.archived_records > 0 && !archive.is_dir() {
        eprintln!(
            "assent: warning: the copy's oldest {} audit records were archived by retention, and {} holds none of their exports: put back the archive directory kept with the backup, or they can no longer be verified (assent audit verify --archive-dir)",
            done.archived_records,
            archive.display()
        );
    }
    if !done.head_signed && !done.other_audit_key {
        eprintln!(
            "assent: warning: restored with --force: the copy's last {} audit records are covered by no checkpoint signed with {}'s audit key — nothing shows they are the history this gateway wrote, and the gateway will sign them as its own. Check them (assent audit verify; the records since the backup's time) before serving",
            done.unsigned_records,
            keys.display()
        );
    }
    if done.other_audit_key {
        eprintln!(
            "assent: warning: the backup's checkpoints were signed by another audit key than {}'s: the gateway refuses to start and `assent audit verify` fails until the audit.key and token.key backed up with it are put back (or audit-key-replaces names its audit key)",
            keys.display()
        );
    }
    Ok(0)
}

/// What the copy's verification found: the chain, the checkpoints, the state tables.
fn print_verified(c: &Copied) {
    println!(
        "verified: integrity check ok; audit chain of {} records, head {}",
        c.records, c.head
    );
    match &c.public_key {
        Some(k) => println!(
            "{} signed checkpoints verify under audit key {k}; {} records after the newest are not signed yet",
            c.checkpoints, c.unsigned_records
        ),
        None => println!("no signed checkpoints"),
    }
    println!("the state tables agree with the audit chain");
}

/// What checking the restored copy against the checkpoint file `file` found, and what to do
/// next; a warning where it was not checked.
fn print_file_check(file: Option<&Path>, done: &Copied) {
    let Some(f) = file else {
        println!(
            "not checked against a checkpoint file (restore with --config, whose audit_checkpoints.file is then checked)"
        );
        return;
    };
    match &done.checkpoint_file {
        Some(c) if c.checked > 0 => println!(
            "the copy holds the {} checkpoints of {} up to its head; its last {} records come after the newest of them and are vouched for by none",
            c.checked,
            f.display(),
            c.unvouched
        ),
        Some(c) if !c.exists => eprintln!(
            "assent: warning: the checkpoint file {} does not exist: the copy was NOT checked against it",
            f.display()
        ),
        Some(_) => eprintln!(
            "assent: warning: the checkpoint file {} holds no checkpoint of this audit key at or below the copy's head: the copy was NOT checked against it",
            f.display()
        ),
        None => eprintln!(
            "assent: warning: the copy was NOT checked against the checkpoint file {} (no audit key here, or the copy was signed by another)",
            f.display()
        ),
    }
    // Whatever was checked: later checkpoints keep the gateway from starting on the copy.
    if let Some(c) = done.checkpoint_file.as_ref().filter(|c| c.later > 0) {
        let stamp = assent_store::ops::utc_stamp();
        let aside = format!("{}.before-restore-{stamp}", f.display());
        println!(
            "the file has {} checkpoints past the copy's head: the gateway will not start on the older chain until it is moved aside (keep it: it records what was rolled back): mv {} {aside}",
            c.later,
            f.display()
        );
    }
}
