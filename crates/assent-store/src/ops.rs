//! Operating the SQLite file: an online, verified [`backup`] of a running gateway's database,
//! and a checked [`restore`] into a stopped gateway's data directory (whether a running one
//! can serve is `readiness.rs`). The checks on a copy are the offline verification's
//! ([`crate::integrity::verify_offline`]): nothing here decides what a valid chain is.
//!
//! The keys are not in the database: `token.key` and `audit.key` are backed up and restored
//! as files, beside it. A database restored under other keys fails its checkpoint verification
//! (the checkpoints were signed with the old `audit.key`, which [`restore`] checks) and every
//! token minted before is refused (they were signed with the old `token.key`, which nothing in
//! the database can check).

use crate::checkpoint;
use crate::error::StoreError;
use crate::integrity::{self, Report, VerifyOptions};
use crate::kit::{create_private_dir, io, random_id};
use ed25519_dalek::VerifyingKey;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod place;
mod vouch;

/// The schema version this build migrates a database to (`PRAGMA user_version` after
/// `Store::open`): the number of migrations the runner knows ([`crate::migrate::MIGRATIONS`]).
pub const SCHEMA_VERSION: i64 = crate::migrate::MIGRATIONS.len() as i64;

/// The database's file name in the data directory.
pub use crate::kit::DB_FILE;

/// How long [`backup`] retries a copy step the database answers busy or locked.
const BUSY_PATIENCE: Duration = Duration::from_secs(10);

/// What [`backup`] wrote or [`restore`] put in place: the copy as its verification saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Copied {
    /// The file written (`backup`) or replaced (`restore`: `<data_dir>/assent.db`).
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its `PRAGMA user_version`.
    pub schema_version: i64,
    /// Audit records in its chain.
    pub records: i64,
    /// Audit records archived before them (retention, `audit_retention_days`): only the signed
    /// exports in `<data_dir>/archive` hold them, and neither `backup` nor `restore` copies
    /// those (found by review: nothing said so, and a restore on a new host lost them).
    pub archived_records: i64,
    /// Hash of its newest audit record.
    pub head: String,
    /// Its signed checkpoints (all verified).
    pub checkpoints: usize,
    /// The audit public key (64 hex) its checkpoints were verified with, when there were any.
    pub public_key: Option<String>,
    /// Records after its newest checkpoint (not signed yet).
    pub unsigned_records: i64,
    /// A checkpoint signed with the audit key of the keys directory covers the copy's head
    /// (or it has no audit record). `backup` signs one there, into the copy (`false`: there
    /// is no `audit.key` to sign with, and `restore` will refuse the copy without `--force`);
    /// `restore` refuses a copy without one unless `--force` (`false`: so forced).
    pub head_signed: bool,
    /// `restore`: where the database it replaced was kept
    /// (`assent.db.before-restore-YYYYMMDDTHHMMSSZ`), when there was one.
    pub set_aside: Option<PathBuf>,
    /// `restore --force`: the checkpoints were signed by another audit key than the data
    /// directory's (or it has none); `assent audit verify` there will fail until the matching
    /// `audit.key` is put back.
    pub other_audit_key: bool,
    /// `restore` with a checkpoint file: what checking the copy against it found (`None`: not
    /// checked — no file given, no audit key, or the copy signed by another key).
    pub checkpoint_file: Option<crate::integrity::FileCheck>,
}

/// A refusal: `StoreError::Invalid` with `msg`.
fn refuse(msg: impl Into<String>) -> StoreError {
    StoreError::Invalid(msg.into())
}

/// A private staging directory (mode 0700) in a place only this user or root may change
/// (beside its destination when that is one, `place.rs`), removed with what is left in it
/// when dropped (on success the copy was moved or copied out of it first).
struct Staging {
    dir: PathBuf,
}

impl Staging {
    /// Creates `<parent>/.assent-<what>-<random>` and an empty 0600 `assent.db` in it, given
    /// to `owner` (`Some(dir)`: that directory's owner) when root makes it, else left as made.
    /// `restore` passes the data directory: root renames the copy into a service user's data
    /// directory, which could not open a root-owned 0600 database (found by review). `backup`
    /// passes `None`: found by review, the copy was given to the `--out` directory's owner,
    /// so `sudo assent backup --out /srv/backups/a.db` with that directory owned by a
    /// low-privilege account handed it the whole database; root's backup stays root's, 0600.
    fn new(parent: &Path, what: &str, owner: Option<&Path>) -> Result<Staging, StoreError> {
        let dir = parent.join(format!(".assent-{what}-{}", random_id("")));
        // Created here with mode 0700 from the start, failing if the name exists (never
        // adopting a directory someone else planted); the file too is new, 0600.
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(&dir))?;
        let s = Staging { dir };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(s.db())
            .map_err(io(&s.db()))?;
        if let Some(owner) = owner {
            crate::owner::give_as_root(&file, owner).map_err(io(&s.db()))?;
        }
        Ok(s)
    }
    fn db(&self) -> PathBuf {
        self.dir.join(DB_FILE)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Copies the database `src` into the empty file `dst` with SQLite's online backup API in one
/// step: one read transaction, so the copy is one consistent snapshot however much a gateway
/// writes meanwhile (WAL: the gateway is not blocked). The copy is left in rollback-journal
/// mode (self-contained: no `-wal` file), integrity-checked and fsynced. Returns its
/// `user_version`. Errors: `src` is not an SQLite database, or the copy fails its integrity
/// check.
fn copy_db(src: &Connection, dst: &Path, what: &str) -> Result<i64, StoreError> {
    let mut out = Connection::open(dst)?;
    {
        let b = Backup::new(src, &mut out).map_err(|e| not_a_db(e, what))?;
        let start = std::time::Instant::now();
        loop {
            match b.step(-1).map_err(|e| not_a_db(e, what))? {
                StepResult::Done => break,
                StepResult::More => continue,
                StepResult::Busy | StepResult::Locked if start.elapsed() < BUSY_PATIENCE => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => return Err(refuse(format!("{what} stayed locked for 10 s; try again"))),
            }
        }
    }
    out.pragma_update(None, "journal_mode", "DELETE")?;
    let check: String = out.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(refuse(format!(
            "{what} fails SQLite's integrity check: {check}"
        )));
    }
    let version: i64 = out.pragma_query_value(None, "user_version", |r| r.get(0))?;
    drop(out);
    std::fs::File::open(dst)
        .and_then(|f| f.sync_all())
        .map_err(io(dst))?;
    Ok(version)
}

/// SQLite's "not a database" (and kin) as a refusal naming `what`; other errors as they are.
fn not_a_db(e: rusqlite::Error, what: &str) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            refuse(format!("{what} is not an SQLite database"))
        }
        _ => e.into(),
    }
}

/// Fsyncs a directory, so that a rename or link in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

/// Refuses to write `out` where it would land on the gateway's own state: inside one of
/// `dirs` (its data directory: the database, its write-ahead log, `token.key`, `audit.key`;
/// its keys directory) or on `checkpoint_file` (the audit checkpoint file, or a symbolic link
/// on the way to it: [`places_of`]). Every writer here places `out` by renaming or linking a
/// finished file onto its name, which replaces a symbolic link at `out` rather than following
/// it, so the place compared is `out`'s directory as the file system resolves it (symbolic
/// links and `..` followed) joined with its name. A directory or file that does not exist is
/// skipped: nothing is there to harm.
///
/// Found by review: `assent backup --force DATA/assent.db` renamed a copy over the live
/// database under a running gateway, and `--out DATA/token.key` replaced the token key.
///
/// Errors: [`StoreError::Invalid`] naming `out` and what it would replace, or `out` naming no
/// file (`..`, `/`).
pub fn clear_of_state(
    out: &Path,
    dirs: &[&Path],
    checkpoint_file: Option<&Path>,
) -> Result<(), StoreError> {
    let Some(name) = out.file_name() else {
        return Err(refuse(format!("{} names no file", out.display())));
    };
    // A directory that cannot be resolved holds nothing to harm: the write itself fails there
    // with its own error.
    let Ok(parent) = parent_of(out).canonicalize() else {
        return Ok(());
    };
    let place = parent.join(name);
    for d in dirs {
        if let Some(d) = d.canonicalize().ok().filter(|d| place.starts_with(d)) {
            return Err(refuse(format!(
                "{} is inside {}, which holds the gateway's database and keys; write it elsewhere",
                out.display(),
                d.display()
            )));
        }
    }
    if let Some(f) = checkpoint_file.filter(|f| places_of(f).contains(&place)) {
        return Err(refuse(format!(
            "{} is the audit checkpoint file {} (or a link on its way to it); write it elsewhere",
            out.display(),
            f.display()
        )));
    }
    Ok(())
}

/// Every place where writing a file would replace the checkpoint file `file` or cut the way
/// to it: the file fully resolved, and for it and each symbolic link it leads through (at
/// most 40), the place of it and of each directory above it as [`clear_of_state`] computes
/// `out`'s (the directory resolved, the name not followed). Found by review: only the fully
/// resolved file was compared, so with `audit_checkpoints.file` a link, `assent backup
/// --force LINK` renamed a database copy over the configured link.
fn places_of(file: &Path) -> Vec<PathBuf> {
    let place = |p: &Path| Some(parent_of(p).canonicalize().ok()?.join(p.file_name()?));
    let mut places: Vec<PathBuf> = file.canonicalize().into_iter().collect();
    let mut hop = file.to_path_buf();
    for _ in 0..40 {
        places.extend(hop.ancestors().filter_map(place));
        match std::fs::read_link(&hop) {
            // A relative target is relative to the link's directory; an absolute one replaces it.
            Ok(target) => hop = parent_of(&hop).join(target),
            Err(_) => break,
        }
    }
    places
}

/// The directory a path's file is in (`.` for a bare file name).
fn parent_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The public half of `<keys_dir>/audit.key`, if there is one.
fn audit_public_key(keys_dir: &Path) -> Result<Option<VerifyingKey>, StoreError> {
    Ok(checkpoint::read_key(keys_dir)?.map(|k| k.verifying_key()))
}

/// [`Copied`] of a verified copy at `path`.
fn copied(path: PathBuf, schema_version: i64, rep: &Report) -> Result<Copied, StoreError> {
    Ok(Copied {
        bytes: std::fs::metadata(&path).map_err(io(&path))?.len(),
        path,
        schema_version,
        records: rep.records,
        archived_records: rep.archived_records,
        head: rep.head.clone(),
        checkpoints: rep.checkpoints,
        public_key: rep.newest_checkpoint.as_ref().and(rep.public_key.clone()),
        unsigned_records: rep.unsigned_records,
        head_signed: rep.unsigned_records == 0,
        set_aside: None,
        other_audit_key: false,
        checkpoint_file: None,
    })
}

/// The first problem of a verification as a refusal of `what`.
fn unverified(what: &str, rep: &Report) -> Option<StoreError> {
    rep.problem.as_ref().map(|p| {
        refuse(format!(
            "{what} does not verify ({} check{}): {}",
            p.check,
            p.seq.map(|s| format!(" at record {s}")).unwrap_or_default(),
            p.reason
        ))
    })
}

/// [`backup_checked`] with no checkpoint file.
pub fn backup(
    data_dir: &Path,
    keys_dir: &Path,
    out: &Path,
    force: bool,
) -> Result<Copied, StoreError> {
    backup_checked(data_dir, keys_dir, out, force, None)
}

/// `assent backup`: an online copy of `<data_dir>/assent.db` written to `out`, safe while a
/// gateway serves and writes. The copy is one snapshot (SQLite's backup API in one step),
/// written privately (mode 0600, this user's) into a staging directory only this user or root
/// may change (beside `out` when its directory is one, else in `data_dir` or the temporary
/// directory: `place.rs`, found by review), fsynced; a checkpoint
/// at its exact head is signed with the audit key of `keys_dir` (the gateway's `keys_dir`, by
/// default its data directory) and stored in it, as the gateway's signer does
/// ([`checkpoint::sign_head_of_copy`]: the records since the newest checkpoint of the key, or
/// of `checkpoint_file` when newer, must link to it), so that [`restore`] can tell the copy
/// was not rewritten or added to since; none without an `audit.key` ([`Copied::head_signed`]).
/// Then checked (`PRAGMA integrity_check`, then the offline verification: the hash chain,
/// every stored checkpoint under that key, the state tables against the chain) and only then
/// moved to `out` — never over an existing file unless `force` (the placing is a hard link,
/// which fails on an existing name, or with `force` a rename; staged elsewhere, the bytes are
/// first written into a new file made through a handle on `out`'s directory,
/// [`place::by_handle`]). A symbolic link at `out` is replaced with `force`, never followed.
///
/// Errors (nothing is written to `out`): `out` exists (without `force`) or is a directory, or
/// its directory does not exist, or it lies in `data_dir` or `keys_dir` ([`clear_of_state`]),
/// or no place to stage the copy is only this user's or root's;
/// no database in `data_dir`; the chain does not extend its newest checkpoint (nothing
/// signed); the copy does not verify; an unreadable checkpoint file; I/O and SQLite errors.
pub fn backup_checked(
    data_dir: &Path,
    keys_dir: &Path,
    out: &Path,
    force: bool,
    checkpoint_file: Option<&Path>,
) -> Result<Copied, StoreError> {
    if out.is_dir() {
        return Err(refuse(format!("{} is a directory", out.display())));
    }
    if !parent_of(out).is_dir() {
        return Err(refuse(format!(
            "{}: no such directory",
            parent_of(out).display()
        )));
    }
    clear_of_state(out, &[data_dir, keys_dir], None)?;
    if out.exists() && !force {
        return Err(refuse(format!(
            "{} exists; choose another name, or --force to replace it",
            out.display()
        )));
    }
    let src = crate::open::open_read_only(data_dir)?;
    let (staging, beside) = place::staging_for(out, data_dir, &[data_dir, keys_dir])?;
    let what = format!("the database in {}", data_dir.display());
    let version = copy_db(&src, &staging.db(), &what)?;
    drop(src);
    let key = checkpoint::read_key(keys_dir)?;
    if let Some(k) = &key {
        sign_head(&staging.db(), k, checkpoint_file)?;
    }
    let opts = VerifyOptions {
        public_key: key.map(|k| k.verifying_key()),
        checkpoint_file: None,
        ..Default::default()
    };
    // With `keys_dir`'s audit key, so the seals are checked too (found by review: the
    // staging directory holds no key, so an edited settlement or plan restored unnoticed).
    let copy = crate::db::Database::Sqlite { path: staging.db() };
    let rep = integrity::verify_database(&copy, keys_dir, &opts)?;
    if let Some(e) = unverified("the copy", &rep) {
        return Err(e);
    }
    let mut done = copied(staging.db(), version, &rep)?;
    if let Some(resolved) = beside {
        put_beside(&staging, &resolved, force)?;
    } else {
        place::by_handle(&staging.db(), out, force, &[data_dir, keys_dir])?;
    }
    done.path = out.to_path_buf();
    Ok(done)
}

/// Puts the verified copy staged beside `out` (`out`'s directory resolved: one only this user
/// or root may change, [`place::only_ours`]) at `out`: a hard link, which fails on an existing name, or
/// with `force` a rename; then fsyncs the directory.
fn put_beside(staging: &Staging, out: &Path, force: bool) -> Result<(), StoreError> {
    if force {
        std::fs::rename(staging.db(), out).map_err(io(out))?;
    } else {
        std::fs::hard_link(staging.db(), out).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                refuse(format!(
                    "{} appeared meanwhile; nothing written",
                    out.display()
                ))
            } else {
                io(out)(e)
            }
        })?;
    }
    sync_dir(&parent_of(out))
}

/// Signs a checkpoint at the head of the staged copy `staged` with `key`
/// ([`checkpoint::sign_head_of_copy`]), the newest checkpoint of `file` (if any) signed with
/// it taken as published, and fsyncs the copy. Errors: the signer's; an unreadable file.
fn sign_head(
    staged: &Path,
    key: &ed25519_dalek::SigningKey,
    file: Option<&Path>,
) -> Result<(), StoreError> {
    let published = match file {
        None => None,
        Some(f) => match checkpoint::newest_signed_in_jsonl(f, &key.verifying_key()) {
            Ok(cp) => cp,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(f)(e)),
        },
    };
    let conn = Connection::open(staged)?;
    checkpoint::sign_head_of_copy(&conn, key, crate::kit::now_ms(), published.as_ref())?;
    drop(conn);
    std::fs::File::open(staged)
        .and_then(|f| f.sync_all())
        .map_err(io(staged))
}

/// Takes `db` for this process alone: SQLite's exclusive locking mode and an exclusive
/// transaction with no waiting. A running gateway (and any other connection, e.g. an
/// `assent audit verify` in progress) holds a shared lock on the file as long as it has it
/// open, so this fails while one does — and while this connection lives, no gateway can open
/// the database. The write-ahead log is folded into the file and removed (journal mode
/// `DELETE`), so the file alone is the whole database. The file must be a regular one and is
/// opened without following a link ([`crate::db_sqlite::open_existing`]; found by review: a
/// link planted at `DATA/assent.db` by the data directory's owner was opened, and written,
/// by root's restore). Errors: `Invalid` while in use; `Unusable` naming a link or other
/// non-regular file; SQLite's.
fn take_exclusively(db: &Path) -> Result<Connection, StoreError> {
    let conn = crate::db_sqlite::open_existing(db, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    conn.busy_timeout(Duration::ZERO)?;
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    let busy = |e: &rusqlite::Error| {
        matches!(
            e.sqlite_error_code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        )
    };
    match conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;") {
        Err(e) if busy(&e) => {
            return Err(refuse(format!(
                "{} is in use: a gateway (or another program) has it open; stop the gateway before restoring",
                db.display()
            )));
        }
        r => r?,
    }
    conn.pragma_update(None, "journal_mode", "DELETE")?;
    Ok(conn)
}

/// Checks that the staged copy is an assent database this build can serve: its tables are
/// there and its schema is not newer than [`SCHEMA_VERSION`].
fn check_assent_db(staged: &Path, version: i64, what: &str) -> Result<(), StoreError> {
    let open = || Connection::open_with_flags(staged, OpenFlags::SQLITE_OPEN_READ_ONLY);
    let recorded =
        crate::migrate::staged_version(crate::db::Connection::Sqlite(open()?).conn(), what)?;
    let version = version.max(recorded.into());
    let conn = open()?;
    let tables: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('audit', 'approvals', 'tokens')",
        [],
        |r| r.get(0),
    )?;
    if version < 1 || tables < 3 {
        return Err(refuse(format!(
            "{what} is an SQLite database but not an assent one (no assent schema)"
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(refuse(format!(
            "{what} has schema version {version}, newer than this assent ({SCHEMA_VERSION}); restore it with the newer assent that wrote it"
        )));
    }
    check_schema_objects(&conn, version, what)
}

/// A backup's schema must be exactly what this build's migrations up to `version` create
/// ([`crate::migrate::schema_difference`]): a trigger, view, index or altered table planted in
/// a file (say, a trigger that clears `tokens.used_at` after every redemption, making tokens
/// replayable) would run inside the gateway's own transactions once restored. Refused,
/// naming the first difference.
fn check_schema_objects(conn: &Connection, version: i64, what: &str) -> Result<(), StoreError> {
    match crate::migrate::schema_difference(conn, version)? {
        Some(d) => Err(refuse(format!(
            "{what}: its schema {d}; it was altered, so it is not restored"
        ))),
        None => Ok(()),
    }
}

/// Refuses (unless `allowed`) a staged copy holding approval tokens that are neither redeemed
/// nor expired: any of them redeemed after the backup was taken is unredeemed again in the
/// copy, so it could be redeemed a second time (a replay) until it expires. Allowed, they are
/// voided at the next start ([`crate::voided`]); how many there are.
fn check_outstanding_tokens(staged: &Path, what: &str, allowed: bool) -> Result<i64, StoreError> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
    let conn = Connection::open_with_flags(staged, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let (n, until): (i64, Option<i64>) = conn.query_row(
        "SELECT count(*), max(expires_at) FROM tokens WHERE used_at IS NULL AND expires_at > ?1",
        [now as i64],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if n == 0 || allowed {
        return Ok(n);
    }
    Err(refuse(format!(
        "{what} holds {n} approval token(s) neither redeemed nor expired (until {}): one redeemed after the backup was taken could be redeemed again. Restore after that time, or with --allow-outstanding-tokens, which voids every one of them when the gateway next starts (each recorded as token.voided; their agents must ask again)",
        crate::rfc3339(until.unwrap_or(0))
    )))
}

/// Pending approvals in the staged copy whose default decision is `approve`: any of them
/// may have been denied or cancelled after the backup was taken, and its expiry would now
/// approve it, so the next start cancels them ([`crate::voided`]).
fn pending_defaults(staged: &Path) -> Result<i64, StoreError> {
    let conn = Connection::open_with_flags(staged, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    Ok(conn.query_row(
        "SELECT count(*) FROM approvals WHERE status = 'pending' AND default_decision = 'approve'",
        [],
        |r| r.get(0),
    )?)
}

/// The tables of sign-in state a restore empties in the staged copy: dashboard sessions,
/// passkey enrolment codes, passkey ceremonies (registrations and votes) in progress. (Single
/// sign-on logins in progress live in the browser's sealed cookie; the spent states that
/// refuse a replayed callback are kept.)
const SIGN_IN_STATE: [&str; 3] = ["ui_sessions", "passkey_enrolments", "passkey_ceremonies"];

/// Ends, in the staged copy, every dashboard session and every sign-in still in progress
/// ([`SIGN_IN_STATE`], those of its tables the copy's schema has); how many rows went. Found
/// by review: a session signed out (or an enrolment code used) after the backup was taken was
/// live again in the restored database. Everyone signs in again after a restore.
fn end_sign_ins(staged: &Path) -> Result<usize, StoreError> {
    let conn = Connection::open(staged)?;
    let mut n = 0;
    for t in SIGN_IN_STATE {
        let exists: bool = conn.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [t],
            |r| r.get(0),
        )?;
        if exists {
            n += conn.execute(&format!("DELETE FROM {t}"), [])?;
        }
    }
    Ok(n)
}

/// The time the restore's marker holds ([`crate::voided`]): this host's `now` (Unix ms), or
/// the newest token issue or approval request in the staged copy when that is later — a
/// backup taken on a host whose clock ran ahead of this one's (found by review: a token
/// issued "after" the restore by this host's clock was left unvoided). What is served after
/// the restore is never older than it by more than that skew.
fn restored_at(staged: &Path, now: i64) -> Result<i64, StoreError> {
    let conn = Connection::open_with_flags(staged, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let newest: Option<i64> = conn.query_row(
        "SELECT max(m) FROM (SELECT max(issued_at) AS m FROM tokens UNION ALL SELECT max(requested_at) FROM approvals)",
        [],
        |r| r.get(0),
    )?;
    Ok(newest.map_or(now, |n| n.max(now)))
}

/// Now in UTC as `YYYYMMDDTHHMMSSZ` (the suffix of what a restore sets aside).
pub fn utc_stamp() -> String {
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    time::OffsetDateTime::now_utc()
        .format(fmt)
        .unwrap_or_else(|_| "unknown-time".into())
}

/// `assent restore`: replaces `<data_dir>/assent.db` with the database `input` (a file
/// `assent backup` wrote), for a gateway that is stopped.
///
/// In order: `input` is copied into a private staging directory (SQLite's backup API: a file
/// that is not an SQLite database is refused) in `data_dir` when only this user or root may
/// change it, else in the temporary directory, which must be such a place (`TMPDIR`;
/// `place.rs`, found by review: root staging in a service user's data directory could be
/// made to write the copy where a planted link pointed), and checked: SQLite's integrity
/// check, assent's tables, a schema not newer than [`SCHEMA_VERSION`] (an older one is
/// migrated when the gateway starts), and the offline verification (chain, checkpoints, state
/// tables) with the audit key of `keys_dir`: checkpoints signed by another audit key are
/// refused unless `force`, and so is a copy whose head no checkpoint of that key covers
/// (records added or rewritten since, or a backup by an older `assent backup`, which signed
/// none there: `vouch.rs`); approval tokens neither redeemed nor expired (one redeemed after
/// the backup would be redeemable again) are refused unless `outstanding_tokens` — a
/// separate consent, so accepting other keys never silently accepts replayable tokens — and
/// then voided when the gateway next starts ([`crate::voided`]). With `checkpoint_file` (the
/// config's `audit_checkpoints.file`), every checkpoint of that file at or below the copy's
/// head must hold in the copy ([`crate::integrity::fork_from_file`]: a rewritten copy is
/// refused; later checkpoints are expected, the copy being older); what was checked is in
/// [`Copied::checkpoint_file`] (not checked for a copy signed by another key). The copy's dashboard
/// sessions and sign-ins in progress are ended (everyone signs in again). Then the live database is
/// taken exclusively (refused while a gateway or another program has it open, and when it is
/// a symbolic link or not a regular file), its write-ahead log folded in, kept as
/// `assent.db.before-restore-<time>`, and the copy renamed over `assent.db` (atomic: the name
/// always holds a whole database) — staged elsewhere, first written into `data_dir` as a new
/// file and everything there done through a handle on it ([`place::swap_in`]); run by root,
/// the restored file is the data directory owner's. A `data_dir` without a database gets the
/// copy.
///
/// Errors (nothing replaced): the refusals above, a stray `assent.db-wal` without its
/// database, I/O and SQLite errors.
pub fn restore(
    data_dir: &Path,
    keys_dir: &Path,
    input: &Path,
    (force, outstanding_tokens): (bool, bool),
    checkpoint_file: Option<&Path>,
) -> Result<Copied, StoreError> {
    if std::fs::metadata(input).is_err() {
        return Err(refuse(format!("{}: no such file", input.display())));
    }
    create_private_dir(data_dir).map_err(io(data_dir))?;
    // Held to the end: no store opens the data directory's database meanwhile (a gateway
    // starting waits for it).
    let _exclusive = crate::kit::DataDirLock::exclusive(data_dir)?;
    let what = input.display().to_string();
    let (staging, dir, beside) = place::restore_staging(data_dir)?;
    let private = place::take_input(input, &staging)?;
    let src = Connection::open_with_flags(&private, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| not_a_db(e, &what))?;
    let version = copy_db(&src, &staging.db(), &what)?;
    drop(src);
    place::drop_input(&private);
    check_assent_db(&staging.db(), version, &what)?;
    let key = audit_public_key(keys_dir)?;
    let vouch::Vouched {
        rep,
        other_key,
        head_signed,
    } = vouch::verify_staged(&staging, key, keys_dir, &what, force)?;
    // The file's checkpoints are signed with this data directory's key: a copy signed by
    // another (`--force`) cannot be checked against them.
    let mut file_check = None;
    if let (Some(file), Some(key), false) = (checkpoint_file, key, other_key) {
        let conn = crate::db::Connection::Sqlite(crate::open::open_read_only(&staging.dir)?);
        let found = crate::integrity::fork_from_file(conn.conn(), file, &key)?;
        if let Some(why) = &found.problem {
            return Err(refuse(format!(
                "{what} is not a copy of the history the checkpoint file vouches for ({why}); nothing replaced"
            )));
        }
        file_check = Some(found);
    }
    let outstanding = check_outstanding_tokens(&staging.db(), &what, outstanding_tokens)?;
    let defaults = pending_defaults(&staging.db())?;
    let at = restored_at(&staging.db(), crate::kit::now_ms())?;
    end_sign_ins(&staging.db())?;
    let mut out = copied(staging.db(), version, &rep)?;
    let mark = (outstanding > 0 || defaults > 0).then_some(at);
    out.set_aside = place::swap_in(&dir, &staging, beside, mark)?;
    out.path = data_dir.join(DB_FILE);
    out.other_audit_key = other_key;
    out.head_signed = head_signed;
    out.checkpoint_file = file_check;
    Ok(out)
}
