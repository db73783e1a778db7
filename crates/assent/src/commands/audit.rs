//! `assent audit …`: offline checks of the audit log on the database file (read-only; the
//! gateway may keep running). `verify` checks the hash chain, the signed checkpoints (stored
//! and, with `--checkpoint`, a sink file) and the state tables against the chain, and names
//! the first problem; `key` prints the checkpoint public key. Audit retention (issue 13 §3):
//! `archive` archives old records into a signed export in `data_dir/archive` and deletes them
//! from the store; `verify-export` checks an export offline. Each works on SQLite or on the
//! PostgreSQL database of `--config`. The checks themselves are `assent_store::integrity`'s,
//! `retention`'s and `archive`'s; this file maps them to text, JSON and exit statuses.

use crate::args::{AuditCmd, DataPlace};
use crate::render::{inert, one_line};
use crate::setup::{IMPLICIT_CONFIG, config_file, data_dir_or_default};
use anyhow::{Context, Result, bail};
use assent_server::config::Config;
use assent_store::ClaimReport;
use assent_store::archive::{self, ExportReport};
use assent_store::checkpoint;
use assent_store::db::Database;
use assent_store::retention::{self, Archived};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Runs one `assent audit` subcommand to its exit status.
pub(crate) fn audit(cmd: AuditCmd) -> Result<i32> {
    match cmd {
        AuditCmd::Verify {
            place,
            checkpoint,
            public_key,
            max_unsigned,
            archive_dirs,
            json,
        } => audit_verify(
            &place,
            checkpoint,
            public_key,
            max_unsigned,
            &archive_dirs,
            json,
        ),
        AuditCmd::Key {
            data_dir,
            config,
            keys_dir,
        } => match (config, keys_dir) {
            (Some(f), _) => shared_audit_key(&Config::load(&f)?.keys_dir()),
            (None, Some(d)) => shared_audit_key(&d),
            // ./assent.yaml with a keys_dir of its own: that directory's key, never created
            // there; with none, its data_dir (where the gateway makes the key) as `--data-dir`.
            (None, None) if data_dir.is_none() && Path::new(IMPLICIT_CONFIG).is_file() => {
                let c = Config::load(Path::new(IMPLICIT_CONFIG))?;
                match c.keys_dir() {
                    k if k != c.data_dir => shared_audit_key(&k),
                    _ => audit_key(Some(c.data_dir)),
                }
            }
            (None, None) => audit_key(data_dir),
        },
        AuditCmd::Archive {
            place,
            older_than_days,
            checkpoint,
            json,
        } => archive_run(&place, older_than_days, checkpoint, json),
        AuditCmd::VerifyExport {
            file,
            place,
            public_key,
            json,
        } => verify_export(&file, &place, public_key.as_deref(), json),
    }
}

/// `assent audit verify` on `place` (`--config FILE`: its SQLite file or PostgreSQL
/// database; else SQLite in `--data-dir` or [`data_dir_or_default`]): `checkpoint` a sink
/// file the chain must reach, `public_key` 64 hex (default: the data dir's key),
/// `max_unsigned` records allowed after the newest checkpoint, `archive_dirs` where the
/// exports of the archive anchors must be ([`assent_store::archive::check_exports`]; none:
/// not opened), `as_json` one JSON report.
/// Returns the exit status: 0 verified, 1 a problem found, 2 usage or I/O error.
fn audit_verify(
    place: &DataPlace,
    checkpoint: Option<PathBuf>,
    public_key: Option<String>,
    max_unsigned: Option<i64>,
    archive_dirs: &[PathBuf],
    as_json: bool,
) -> Result<i32> {
    use assent_store::integrity::VerifyOptions;
    let run = || -> Result<(assent_store::integrity::Report, Option<ClaimReport>)> {
        let r = resolve(place)?;
        let public_key = match public_key.as_deref() {
            Some(k) => Some(checkpoint::parse_public_key(k)?),
            None => None,
        };
        // `--checkpoint FILE`, else the config's `audit_checkpoints.file` (found by review:
        // `verify --config` ignored it, so with the stored checkpoints deleted a rewritten
        // chain passed with only an "N records not signed yet" line).
        // A sink file the gateway has not written yet (a fresh install) is none to check, as
        // at the gateway's start; one named by `--checkpoint` must exist.
        let from_config = r.checkpoint_file.clone().filter(|f| {
            let there = f.exists();
            if !there && checkpoint.is_none() {
                eprintln!(
                    "assent: the config's checkpoint file {} does not exist (not written yet?); not checked against it",
                    f.display()
                );
            }
            there
        });
        let checkpoint = checkpoint.or(from_config);
        let opts = VerifyOptions {
            public_key,
            checkpoint_file: checkpoint.as_deref(),
            archive_dirs,
        };
        off_runtime(|| verify_with_claim(&r, &opts))
    };
    let (mut rep, claim) = match run() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: {}", one_line(&e));
            return Ok(2);
        }
    };
    more_problems(&mut rep, max_unsigned, claim.as_ref());
    let p = rep.problem.as_ref();
    if as_json {
        let broken = p
            .filter(|p| p.check == "chain")
            .map(|p| json!({"seq": p.seq, "reason": p.reason}));
        let mut v = serde_json::to_value(&rep)?;
        v["ok"] = json!(p.is_none());
        v["claim"] = json!(claim);
        v["broken"] = json!(broken);
        println!("{}", inert(&v.to_string()));
    }
    let Some(p) = p else {
        if !as_json {
            print_verified(&rep);
            if let Some(c) = &claim {
                print_claim(c);
            }
        }
        return Ok(0);
    };
    // A reason quotes ids and names read from the database: a planted escape sequence must not
    // erase the failure line on the operator's terminal (found by review).
    let reason = inert(&p.reason);
    match p.check {
        "chain" => eprintln!(
            "assent: audit chain broken at record {}: {reason}",
            p.seq.unwrap_or(0),
        ),
        "state" => eprintln!(
            "assent: the state tables disagree with the audit chain: {reason}{}",
            match rep.state_disagreements {
                0 | 1 => String::new(),
                n => format!(" ({} more)", n - 1),
            }
        ),
        "schema" => eprintln!("assent: {reason}"),
        "archive" => eprintln!("assent: audit archive: {reason}"),
        _ => eprintln!("assent: audit checkpoint not met: {reason}"),
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
    if let Some(a) = &rep.anchor {
        if rep.exports_verified > 0 {
            println!(
                "records 1..{} were archived: their {} exports verify and end in the signed anchors the store keeps",
                rep.archived_records, rep.exports_verified
            );
        } else {
            println!(
                "records 1..{} were archived (their signed anchors chain from record 1; the newest names the export {}, not opened: give --archive-dir to check the exports)",
                rep.archived_records, a.file
            );
        }
    }
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

/// [`assent_store::integrity::verify_database`] of `r` with `opts`, and who claimed the
/// database ([`assent_store::claim_report`]) judged against the key it checked with.
/// Errors: those of both (usage or I/O).
fn verify_with_claim(
    r: &Resolved,
    opts: &assent_store::integrity::VerifyOptions<'_>,
) -> Result<(assent_store::integrity::Report, Option<ClaimReport>)> {
    let rep = assent_store::integrity::verify_database(&r.db, &r.keys_dir, opts)?;
    let key = match rep.public_key.as_deref() {
        Some(k) => Some(checkpoint::parse_public_key(k)?),
        None => None,
    };
    let claim = assent_store::claim_report(&r.db, &r.keys_dir, key.as_ref())?;
    Ok((rep, claim))
}

/// The problems `audit verify` adds to a report that has none: more than `max_unsigned`
/// records covered by no checkpoint, then a claim at record 0 by a key neither checked with
/// nor one a take-over replaced (found by review: any key's valid claim passed).
fn more_problems(
    rep: &mut assent_store::integrity::Report,
    max_unsigned: Option<i64>,
    claim: Option<&ClaimReport>,
) {
    use assent_store::integrity::Problem;
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
    if rep.problem.is_none()
        && let Some(why) = claim.and_then(|c| c.problem.clone())
    {
        rep.problem = Some(Problem {
            check: "checkpoint",
            seq: Some(0),
            reason: why,
        });
    }
}

/// The text line of a verified database's claim at record 0: which key claimed it and how
/// that key stands to the one checked with.
fn print_claim(c: &ClaimReport) {
    let how = match c.standing {
        "checked_key" => "the key checked with",
        "taken_over" => "taken over from it, as recorded on the database, by the key checked with",
        "declared_replaced" => "declared replaced by the keys directory's audit-key-replaces",
        _ => "not checked: no audit key to check with",
    };
    println!(
        "the database is claimed (record 0) by audit key {}: {how}",
        c.public_key
    );
}

/// `assent audit key --config FILE | --keys-dir DIR`: the audit public key of a keys directory
/// that may be shared by replicas, which is never created here (found by review: `--data-dir`
/// was the only way to name it, and read — or made — a key in the data directory while the
/// gateway signed with the one in its `keys_dir`).
fn shared_audit_key(keys_dir: &Path) -> Result<i32> {
    let Some(key) = assent_store::checkpoint::read_key(keys_dir)? else {
        bail!(
            "no {} in {}: run `assent keys init --keys-dir {}`",
            assent_store::checkpoint::KEY_FILE,
            keys_dir.display(),
            keys_dir.display()
        );
    };
    println!(
        "{}",
        assent_store::checkpoint::public_key_hex(&key.verifying_key())
    );
    Ok(0)
}

/// `assent audit key [--data-dir D]`: the audit public key of a data directory, read only.
/// Found by review: it created a missing key, so an operator whose gateway refused to start
/// over a lost `audit.key` (documented) ran the harmless-looking `assent audit key` and got a
/// new one, which the next start served under, its check against the checkpoint file off.
/// Keys are made by a gateway's first start over a new SQLite database or by `assent keys
/// init`; the error says which fits (the database holds records: put the old key back).
fn audit_key(data_dir: Option<PathBuf>) -> Result<i32> {
    let dir = data_dir_or_default(data_dir);
    let Some(key) = checkpoint::read_key(&dir)? else {
        let db = Database::Sqlite {
            path: dir.join("assent.db"),
        };
        let served = assent_store::keys::holds_audit_records(&db).unwrap_or(true);
        let file = dir.join(checkpoint::KEY_FILE);
        if served {
            bail!(
                "no {}: the database beside it already holds audit records, checkpoints and seals made with the lost key; put back the audit.key kept with this data directory (nothing is created here: a new key would leave them unverifiable, and the gateway refuses one)",
                file.display()
            );
        }
        bail!(
            "no {}: nothing is created here; the gateway makes it at its first start, or run `assent keys init --keys-dir {}`",
            file.display(),
            dir.display()
        );
    };
    println!("{}", checkpoint::public_key_hex(&key.verifying_key()));
    Ok(0)
}

/// Where `place`'s store is: the data directory, keys directory, database and
/// `audit_retention_days` of `--config FILE` or ./assent.yaml ([`config_file`]); else `--data-dir` (or [`data_dir_or_default`]) for both
/// directories, its SQLite file, and no retention.
pub(crate) struct Resolved {
    pub(crate) data_dir: PathBuf,
    pub(crate) keys_dir: PathBuf,
    pub(crate) db: Database,
    retention_days: Option<u64>,
    /// The config's `audit_checkpoints.file`, if any.
    pub(crate) checkpoint_file: Option<PathBuf>,
}

/// The audit public key a verifier trusts: `public_key` (64 hex), else the public half of
/// the audit key in `keys_dir`. Errors say what to give instead.
pub(crate) fn audit_public_key(
    public_key: Option<&str>,
    keys_dir: &Path,
) -> Result<ed25519_dalek::VerifyingKey> {
    match public_key {
        Some(k) => Ok(checkpoint::parse_public_key(k)?),
        None => checkpoint::read_key(keys_dir)?
            .map(|k| k.verifying_key())
            .with_context(|| {
                format!(
                    "no {} in {}: give the audit public key with --public-key",
                    checkpoint::KEY_FILE,
                    keys_dir.display()
                )
            }),
    }
}

/// [`Resolved`] of `place`.
pub(crate) fn resolve(place: &DataPlace) -> Result<Resolved> {
    Ok(match config_file(place) {
        Some(f) => {
            let c = Config::load(&f)?;
            Resolved {
                db: c.database()?,
                keys_dir: c.keys_dir(),
                retention_days: c.audit_retention_days,
                checkpoint_file: c.audit_checkpoints.file,
                data_dir: c.data_dir,
            }
        }
        None => {
            let d = data_dir_or_default(place.data_dir.clone());
            Resolved {
                db: Database::Sqlite {
                    path: d.join(assent_store::ops::DB_FILE),
                },
                keys_dir: d.clone(),
                data_dir: d,
                retention_days: None,
                checkpoint_file: None,
            }
        }
    })
}

/// Runs `f` on a thread of its own: the PostgreSQL client blocks on its own runtime, never on
/// the command runtime's thread.
fn off_runtime<T: Send>(f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|_| bail!("the command panicked"))
}

/// `assent audit archive`: archives every record due (`days` or the config's
/// `audit_retention_days`), one export per run of at most
/// [`retention::DEFAULT_MAX_RECORDS`], and prints what was archived (`--json`:
/// `{"archived": [runs], "cutoff": ms}`). Exit status 0 (also when nothing was due); an
/// error (no retention set, no audit key, a chain that does not verify) is returned.
fn archive_run(
    place: &DataPlace,
    days: Option<u64>,
    checkpoint: Option<PathBuf>,
    as_json: bool,
) -> Result<i32> {
    let Resolved {
        data_dir: dir,
        keys_dir: keys,
        db,
        retention_days: configured,
        checkpoint_file,
    } = resolve(place)?;
    let checkpoint_file = checkpoint.or(checkpoint_file);
    if checkpoint_file.is_none() {
        eprintln!(
            "note: no checkpoint file (--checkpoint, or audit_checkpoints.file of --config): the records are checked against the stored checkpoints only"
        );
    }
    let Some(days) = days.or(configured) else {
        bail!(
            "no retention period: set audit_retention_days in the config, or give --older-than-days N"
        );
    };
    let bounds = assent_server::config::AUDIT_RETENTION_DAYS_BOUNDS;
    if !(bounds.0..=bounds.1).contains(&days) {
        bail!(
            "--older-than-days is {days}; it must be from {} to {}",
            bounds.0,
            bounds.1
        );
    }
    if checkpoint::read_key(&keys)?.is_none() {
        bail!(
            "no {} in {}: exports are signed with the gateway's audit key; run this where the gateway's keys are",
            checkpoint::KEY_FILE,
            keys.display()
        );
    }
    if let Database::Sqlite { path } = &db
        && !path.exists()
    {
        bail!("{}: no assent database here", path.display());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let cutoff = now - (days as i64) * 86_400_000;
    let runs = off_runtime(|| {
        let store = assent_store::Store::open_database(
            &dir,
            &keys,
            &db,
            60_000,
            std::sync::Arc::new(assent_server::WireEnvelopes),
        )
        .with_context(|| format!("cannot open the {db:?} database"))?;
        let mut runs: Vec<Archived> = Vec::new();
        while let Some(a) = store.archive_audit(
            &dir.join(retention::ARCHIVE_DIR),
            cutoff,
            retention::DEFAULT_MAX_RECORDS,
            now,
            checkpoint_file.as_deref(),
            None,
        )? {
            let more = a.more;
            runs.push(a);
            if !more {
                break;
            }
        }
        Ok(runs)
    })?;
    if as_json {
        println!("{}", json!({"archived": runs, "cutoff": cutoff}));
        return Ok(0);
    }
    if runs.is_empty() {
        println!(
            "no audit records are due for archiving (older than {days} days, not needed by a pending approval, a live token or grant, or a webhook)"
        );
    }
    for a in &runs {
        let m = &a.manifest;
        println!(
            "archived audit records {}..{} ({} records) to {} ({} bytes), signed; the store's chain now starts at record {}",
            m.first_seq,
            m.last_seq,
            m.record_count,
            a.path.display(),
            a.bytes,
            m.last_seq + 1
        );
    }
    Ok(0)
}

/// `assent audit verify-export FILE`: checks the export under `public_key` (64 hex) or the
/// audit key of `place`'s data directory; with a store (`--config` or `--data-dir`), also
/// that the store's anchor is exactly the export's manifest. Exit status 0 verified, 1 a
/// problem found, 2 usage or I/O error.
fn verify_export(
    file: &Path,
    place: &DataPlace,
    public_key: Option<&str>,
    as_json: bool,
) -> Result<i32> {
    let with_store = place.config.is_some() || place.data_dir.is_some();
    let run = || -> Result<(ExportReport, Option<String>)> {
        let Resolved {
            keys_dir: dir, db, ..
        } = resolve(place)?;
        let key = audit_public_key(public_key, &dir)?;
        let mut rep = archive::verify_export(file, &key)?;
        if rep.problem.is_none()
            && with_store
            && let Some(m) = &rep.manifest
        {
            if let Database::Sqlite { path } = &db
                && !path.exists()
            {
                bail!("{}: no assent database here", path.display());
            }
            let m = m.clone();
            rep.problem = off_runtime(move || {
                let conn = assent_store::AdminConnection::open_read_only(&db)?;
                Ok(archive::against_store(conn.conn(), &m)?)
            })?;
        }
        Ok((rep, Some(checkpoint::public_key_hex(&key))))
    };
    let (rep, key) = match run() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: {}", one_line(&e));
            return Ok(2);
        }
    };
    if as_json {
        let mut v = serde_json::to_value(&rep)?;
        v["ok"] = json!(rep.problem.is_none());
        v["public_key"] = json!(key);
        v["checked_against_store"] = json!(with_store);
        println!("{}", inert(&v.to_string()));
    }
    match (&rep.problem, &rep.manifest) {
        (None, Some(m)) => {
            if !as_json {
                println!(
                    "audit export verifies: records {}..{} ({} records), signed by audit key {}{}",
                    m.first_seq,
                    m.last_seq,
                    rep.records,
                    key.unwrap_or_default(),
                    if with_store {
                        "; the store's anchor is this export's manifest"
                    } else {
                        ""
                    }
                );
            }
            Ok(0)
        }
        (problem, _) => {
            eprintln!(
                "assent: audit export {} does not verify: {}",
                file.display(),
                inert(problem.as_deref().unwrap_or("no manifest"))
            );
            Ok(1)
        }
    }
}
