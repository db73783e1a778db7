//! Signed audit checkpoints (issue 10 §11): the gateway's Ed25519 audit key signs how far the
//! hash chain reached, so that whoever can write the database cannot rewrite, truncate or empty
//! the audit log unseen.
//!
//! - The key is `<data_dir>/audit.key`: the 32-byte Ed25519 seed, mode 0600, created on first
//!   use like `token.key` and separate from it. Its public half is written as 64 lowercase hex
//!   characters (the 32 raw bytes of the RFC 8032 public key).
//! - A checkpoint signs the RFC 8785 canonical JSON of `{"head_hash", "record_count", "seq",
//!   "time"}`: `seq` is the audit sequence number of the newest record covered, `head_hash` that
//!   record's chain hash, `record_count` the number of audit records then, archived ones
//!   included (equal to `seq` in a whole chain), `time` Unix milliseconds. The signature is 128 hex characters.
//! - Checkpoints are stored in their own table (`audit_checkpoints`, never as audit records)
//!   and handed to the caller for external sinks: an append-only JSONL file
//!   ([`append_jsonl`]) and the log.
//! - The gateway signs only a chain that extends its previous checkpoint: before signing, the
//!   records after the previous checkpoint are checked to link to it. (The first checkpoint of
//!   a database, e.g. one older than checkpoints, signs the head as it is, without walking the
//!   chain under the store's lock; `assent audit verify` checks it.)
//! - The row at record 0 is no checkpoint of a record but the database's claim for one audit
//!   key (`store_claim`, stored at the first open under that key: `open.rs`), signed as a
//!   checkpoint of the empty chain; it is not listed or extended, and `assent audit verify`
//!   checks only that it is such a claim, by any key (`integrity_checkpoints::claim_problem`); who claimed it is
//!   `open.rs`'s `claim_report`.
//! - A take-over (`audit-key-replaces`, `open.rs`) is recorded at the new key's first start
//!   (`take_over`); a key whose take-over is recorded signs nothing more
//!   (`key_replaced.rs`).

use crate::archive;
use crate::audit;
use crate::db::{self, Conn, OptionalExtension};
use crate::error::StoreError;
use crate::kit::io;
use crate::params;
use crate::sql::{self, from_row};
use crate::store::Store;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use std::ops::ControlFlow;
use std::path::Path;

/// File name of the audit key in the data directory.
pub const KEY_FILE: &str = "audit.key";

/// One signed checkpoint: `assent-core`'s record, which this module signs, stores and checks.
pub use assent_core::checkpoint::Checkpoint;

/// Signs a checkpoint of head `(seq, head_hash)` with `record_count` records at `time` (ms).
pub fn sign(
    key: &SigningKey,
    seq: i64,
    head_hash: &str,
    record_count: i64,
    time: i64,
) -> Checkpoint {
    let mut cp = Checkpoint {
        seq,
        head_hash: head_hash.to_string(),
        record_count,
        time,
        public_key: public_key_hex(&key.verifying_key()),
        signature: String::new(),
    };
    cp.signature = hex::encode(key.sign(&cp.signed_bytes()).to_bytes());
    cp
}

/// A public key as 64 lowercase hex characters.
pub fn public_key_hex(key: &VerifyingKey) -> String {
    hex::encode(key.to_bytes())
}

/// Parses a public key given as 64 hex characters (the 32 raw bytes).
/// Errors: [`StoreError::Invalid`] saying why.
pub fn parse_public_key(text: &str) -> Result<VerifyingKey, StoreError> {
    let bytes: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            StoreError::Invalid(format!(
                "public key `{text}` is not 64 hex characters (32 bytes)"
            ))
        })?;
    VerifyingKey::from_bytes(&bytes)
        .map_err(|_| StoreError::Invalid(format!("public key `{text}` is not an Ed25519 key")))
}

/// Reads `<dir>/audit.key` (32 bytes). `Ok(None)` when it does not exist.
/// Errors: unreadable file ([`StoreError::Io`]), a file that is not 32 bytes, or one others
/// may read or replace (`Invalid`, [`crate::kit::read_key_file`]).
pub fn read_key(dir: &Path) -> Result<Option<SigningKey>, StoreError> {
    let path = dir.join(KEY_FILE);
    let Some(k) = crate::kit::read_key_file(&path)? else {
        return Ok(None);
    };
    let seed: [u8; 32] = k.try_into().map_err(|_| {
        StoreError::Invalid(format!(
            "{}: the audit key is not 32 bytes; restore it (checkpoints signed with it can no longer be checked without its public key)",
            path.display()
        ))
    })?;
    Ok(Some(SigningKey::from_bytes(&seed)))
}

/// Reads `<dir>/audit.key`, creating it (32 random bytes, mode 0600) when it does not exist.
/// `dir` must exist. The key returned is the one on disk ([`load_or_create`]).
pub fn load_or_create_key(dir: &Path) -> Result<SigningKey, StoreError> {
    Ok(load_or_create(dir)?.0)
}

/// [`load_or_create_key`], and whether this call placed the key. A new key is placed without
/// replacing anything ([`crate::kit::place_private`]: when another process made one first,
/// theirs is kept), then read back, so that the key returned is always the one on disk —
/// found by review: the seed generated here was returned even when a concurrent creator's
/// rename had replaced it, so two `assent keys init` at once printed different keys.
/// Errors: as [`read_key`]; `Io` placing it.
pub(crate) fn load_or_create(dir: &Path) -> Result<(SigningKey, bool), StoreError> {
    if let Some(k) = read_key(dir)? {
        return Ok((k, false));
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| StoreError::Invalid(format!("no randomness: {e}")))?;
    let path = dir.join(KEY_FILE);
    let placed = crate::kit::place_private(dir, KEY_FILE, &seed).map_err(io(&path))?;
    let on_disk = read_key(dir)?.ok_or_else(|| {
        StoreError::Invalid(format!(
            "{}: the audit key vanished as it was made; run again",
            path.display()
        ))
    })?;
    Ok((on_disk, placed))
}

/// When a checkpoint is due ([`Store::checkpoint_if_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Sign once this many records were appended since the previous checkpoint.
    pub every_records: i64,
    /// Sign once this many milliseconds passed since the previous checkpoint and the chain
    /// grew. `0` with `every_records` `1` signs whenever the chain grew (used at shutdown).
    pub every_ms: i64,
}

impl Due {
    /// Due whenever the chain grew since the previous checkpoint (shutdown).
    pub const NOW: Due = Due {
        every_records: 1,
        every_ms: 0,
    };
}

/// Reads a checkpoint row ([`COLUMNS`], by name).
fn row(r: &db::Row<'_>) -> db::Result<Checkpoint> {
    from_row!(r => Checkpoint { seq, head_hash, record_count, time, public_key, signature })
}

const COLUMNS: &str = "seq, head_hash, record_count, time, public_key, signature";

/// Every stored checkpoint, oldest first (the claim at record 0, `store_claim`, is not
/// one). A database without the table (schema before v8) has none.
pub fn stored(conn: Conn<'_>) -> db::Result<Vec<Checkpoint>> {
    if !conn.has_table("audit_checkpoints")? {
        return Ok(Vec::new());
    }
    let sql = format!("SELECT {COLUMNS} FROM audit_checkpoints WHERE seq > 0 ORDER BY seq");
    sql::rows(conn, &sql, [], row)
}

/// The newest stored checkpoint signed with `key` (the claim at record 0 is none): rows
/// naming another public key (those of a foreign backup restored with `--force`) are passed
/// over. Errors: `Invalid` when that row does not verify under `key` — found by review: the
/// signer trusted the newest row as it was, so a row planted far ahead of the chain stopped
/// every later checkpoint unseen, and one planted over a rewritten record had the rewrite
/// signed.
fn latest(conn: Conn<'_>, key: &VerifyingKey) -> Result<Option<Checkpoint>, StoreError> {
    let cp = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM audit_checkpoints WHERE public_key = ?1 AND seq > 0 ORDER BY seq DESC LIMIT 1"
        ))?
        .query_row([public_key_hex(key)], row)
        .optional()?;
    match cp {
        Some(c) if !c.verifies(key) => Err(StoreError::Invalid(format!(
            "the stored checkpoint at record {} names this gateway's audit key but its signature does not verify: the checkpoints were edited behind the gateway's back; no checkpoint signed (run assent audit verify)",
            c.seq
        ))),
        c => Ok(c),
    }
}

/// Checks that the records after `prev` (to the head) still link to it: the record at
/// `prev.seq` has `prev.head_hash`, and every later record's `prev_hash` and `hash` fit.
/// When records up to or past `prev` were archived ([`crate::retention`]), the walk starts
/// at the newest archive anchor instead, whose signature must verify under `key`. Returns
/// why not. Costs one hash per record since `prev` (none without a `prev`).
pub(crate) fn extends(
    conn: Conn<'_>,
    prev: Option<&Checkpoint>,
    key: &VerifyingKey,
) -> db::Result<Option<String>> {
    // Nothing to extend before the first checkpoint; `assent audit verify` checks the chain.
    let Some(p) = prev else {
        return Ok(None);
    };
    let (mut from, mut hash) = (p.seq, p.head_hash.clone());
    if let Some(a) = archive::stored(conn)?.pop()
        && a.last_seq >= from
    {
        if !a.verifies(key) || (a.last_seq == from && a.last_hash != hash) {
            return Ok(Some(format!(
                "the archive anchor at record {} does not verify or does not match the checkpoint",
                a.last_seq
            )));
        }
        (from, hash) = (a.last_seq, a.last_hash);
    } else {
        let at: Option<String> = conn
            .prepare_cached("SELECT hash FROM audit WHERE seq = ?1")?
            .query_row([from], |r| r.get(0))
            .optional()?;
        if at.as_deref() != Some(hash.as_str()) {
            return Ok(Some(format!(
                "record {from} no longer has the hash of the checkpoint signed at it"
            )));
        }
    }
    let mut expect = from + 1;
    let mut broken = None;
    conn.prepare_cached(
        "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit WHERE seq > ?1 ORDER BY seq",
    )?
    .for_each([from], |r| {
        let seq: i64 = r.get(0)?;
        let aid: Option<String> = r.get(3)?;
        let (kind, actor, data): (String, String, String) = (r.get(2)?, r.get(4)?, r.get(5)?);
        let (prev_hash, h): (String, String) = (r.get(6)?, r.get(7)?);
        let again = audit::record_hash(
            &prev_hash,
            seq,
            r.get(1)?,
            &kind,
            aid.as_deref(),
            &actor,
            &data,
        );
        if seq != expect || prev_hash != hash || again != h {
            broken = Some(format!("audit record {seq} does not link to the chain"));
            return Ok(ControlFlow::Break(()));
        }
        expect += 1;
        hash = h;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(broken)
}

/// The head `(seq, hash)` and the previous checkpoint when a checkpoint is `due` at `now`:
/// the chain grew since the previous checkpoint by `due.every_records` records, or by any and
/// `due.every_ms` passed (the first checkpoint is due as soon as there is a record).
/// Errors: `Invalid` when the newest checkpoint signed with `key` does not verify
/// ([`latest`]) or lies past the chain's head (records were removed from its tail).
fn due_head(
    conn: Conn<'_>,
    due: Due,
    now: i64,
    key: &VerifyingKey,
) -> Result<Option<(i64, String, Option<Checkpoint>)>, StoreError> {
    let head: Option<(i64, String)> = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], db::tuple)
        .optional()?;
    let prev = latest(conn, key)?;
    let head_seq = head.as_ref().map_or(0, |h| h.0);
    if let Some(p) = prev.as_ref().filter(|p| p.seq > head_seq) {
        return Err(StoreError::Invalid(format!(
            "the audit chain ends at record {head_seq}, before the checkpoint signed at record {}: records were removed from its tail; no checkpoint signed (run assent audit verify)",
            p.seq
        )));
    }
    let Some((seq, hash)) = head else {
        return Ok(None);
    };
    let grown = seq - prev.as_ref().map_or(0, |p| p.seq);
    let timely = prev.as_ref().is_none_or(|p| now - p.time >= due.every_ms);
    Ok((grown > 0 && (grown >= due.every_records || timely)).then_some((seq, hash, prev)))
}

impl Store {
    /// The public half of the audit key.
    pub fn audit_public_key(&self) -> VerifyingKey {
        self.audit_key.verifying_key()
    }

    /// Signs and stores a checkpoint of the current head when one is `due` (at `now`, Unix
    /// ms): the chain grew since the previous checkpoint by `due.every_records` records, or by
    /// any and `due.every_ms` passed. Returns the new checkpoint (the caller writes it to the
    /// external sinks), or `None` when none is due.
    ///
    /// Errors: [`StoreError::Invalid`] when the records after the previous checkpoint do not
    /// link to it (the chain was altered: nothing is signed); SQLite errors.
    pub fn checkpoint_if_due(&self, due: Due, now: i64) -> Result<Option<Checkpoint>, StoreError> {
        self.sign_if_due(due, now, None)
    }

    /// [`Store::checkpoint_if_due`], where the chain must also extend `published`: the newest
    /// checkpoint the caller published outside the database (its checkpoint file), when it is
    /// newer than the newest stored one. Found by review: with the stored checkpoints after a
    /// rewritten record deleted, the gateway checked the chain from an older one only and
    /// signed the rewritten head into the file. Returns first the newest stored
    /// checkpoint of the key when it is newer than `published` (found by review: the
    /// take-over's was published only with the next due one). Errors: as `checkpoint_if_due`.
    pub fn checkpoint_if_due_after(
        &self,
        due: Due,
        now: i64,
        published: Option<&Checkpoint>,
    ) -> Result<Option<Checkpoint>, StoreError> {
        // Read first: the write lock is taken only when a checkpoint is due. A stored one of
        // this key newer than `published` (the take-over's, signed at start-up, or one whose
        // publishing was cut short) is returned to be published first, as it was written.
        let public = self.audit_key.verifying_key();
        let guard = self.lock();
        let stored = latest(guard.conn(), &public)?;
        if let Some(cp) = stored.filter(|s| published.is_none_or(|p| s.seq > p.seq)) {
            // Only over a chain still extending what was published, read in one snapshot
            // (found by review: returned unchecked; then, read in two, another replica's
            // retention between them made a sound chain read as altered).
            if let Some(why) = guard.conn().snapshot(|c| extends(c, published, &public))? {
                return Err(StoreError::Invalid(format!(
                    "audit chain altered since the published checkpoint at record {}: {why}; nothing published (run assent audit verify)",
                    published.map_or(0, |p| p.seq)
                )));
            }
            return Ok(Some(cp));
        }
        drop(guard);
        self.sign_if_due(due, now, published)
    }

    /// [`Store::checkpoint_if_due_after`] but for what was stored and not published.
    fn sign_if_due(
        &self,
        due: Due,
        now: i64,
        published: Option<&Checkpoint>,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let key = self.audit_key.verifying_key();
        if due_head(self.lock().conn(), due, now, &key)?.is_none() {
            return Ok(None);
        }
        // The group's first member checked in this transaction that the key was not taken
        // over (`Store::write`); no take-over can interleave before the commit.
        self.write(|tx| sign_due(**tx, (&self.audit_key, true), due, now, published))
    }

    /// Every stored checkpoint, oldest first.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(stored(self.lock().conn())?)
    }

    /// Stored checkpoints newest first: at most `limit`, only those with `seq < before_seq`
    /// when given (paging); the claim at record 0 (`store_claim`) is not listed.
    pub fn recent_checkpoints(
        &self,
        before_seq: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM audit_checkpoints WHERE seq > 0 AND (CAST(?1 AS BIGINT) IS NULL OR seq < ?1) ORDER BY seq DESC LIMIT ?2"
        );
        Ok(sql::rows(
            self.lock().conn(),
            &sql,
            crate::params![before_seq, limit],
            row,
        )?)
    }

    /// The newest stored checkpoint signed with this gateway's audit key, if any. Errors:
    /// `Invalid` when it does not verify (the table was edited).
    pub fn latest_checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        latest(self.lock().conn(), &self.audit_key.verifying_key())
    }
}

/// Stores the claim of the database for the audit `key`, in the write transaction `conn`:
/// a checkpoint of the empty chain (record 0, the genesis hash, 0 records) signed at `now`
/// (Unix ms) with `key`, at the row of record 0, which no checkpoint of a record takes (they
/// cover records from 1). It is what a second key set opening the database finds to be
/// refused by (`open.rs`) before any checkpoint of a record was signed; it is not listed
/// or extended by the signer ([`stored`], [`latest`]), though it verifies as a checkpoint of
/// the empty chain ([`not_a_claim`]). Nothing is stored when the row is taken (by another
/// key's claim, or a junk row): returns whether it was stored, and the caller reads what is
/// there ([`claim_row`]). Errors: the database's.
pub(crate) fn store_claim(conn: Conn<'_>, key: &SigningKey, now: i64) -> db::Result<bool> {
    let cp = sign(key, 0, audit::GENESIS, 0, now);
    Ok(insert(conn, &cp, "ON CONFLICT (seq) DO NOTHING")? == 1)
}

/// The row at record 0 of `audit_checkpoints` as stored (the claim, [`store_claim`], or
/// whatever else took its place), if any. A database without the table has none. Errors:
/// the database's.
pub(crate) fn claim_row(conn: Conn<'_>) -> db::Result<Option<Checkpoint>> {
    if !conn.has_table("audit_checkpoints")? {
        return Ok(None);
    }
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM audit_checkpoints WHERE seq = 0"
    ))?
    .query_row([], row)
    .optional()
}

/// Why the row `cp` at record 0 is no claim ([`store_claim`]); `None` when it is one: a
/// checkpoint of the empty chain (record 0, the genesis hash, 0 records) whose signature
/// verifies under the public key it names (any key: whose it is, is the caller's to judge).
pub(crate) fn not_a_claim(cp: &Checkpoint) -> Option<String> {
    let Ok(key) = parse_public_key(&cp.public_key) else {
        return Some("it names no Ed25519 public key".to_string());
    };
    if cp.seq != 0 || cp.head_hash != audit::GENESIS || cp.record_count != 0 {
        let hash = if cp.head_hash == audit::GENESIS {
            ""
        } else {
            ", not at the genesis hash"
        };
        return Some(format!(
            "it is no checkpoint of the empty chain (it covers {} records{hash})",
            cp.record_count
        ));
    }
    (!cp.verifies(&key)).then(|| "its signature does not verify under the key it names".into())
}

/// The key the row `cp` names, for a message: its 64 hex characters, re-encoded (nothing
/// read from the database is echoed as it is), or that it names none.
pub(crate) fn named_key(cp: &Checkpoint) -> String {
    match parse_public_key(&cp.public_key) {
        Ok(k) => format!("audit key {}", public_key_hex(&k)),
        Err(_) => "no Ed25519 public key".to_string(),
    }
}

/// Inserts checkpoint `cp` into `audit_checkpoints`, `then` appended to the statement (a
/// conflict clause, or nothing): the rows inserted. Errors: the database's.
fn insert(conn: Conn<'_>, cp: &Checkpoint, then: &str) -> db::Result<usize> {
    conn.prepare_cached(&format!(
        "INSERT INTO audit_checkpoints ({COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6) {then}"
    ))?
    .execute(params![
        cp.seq,
        cp.head_hash,
        cp.record_count,
        cp.time,
        cp.public_key,
        cp.signature
    ])
}

/// Appends `cp` as one JSON line to `path`, opened with `O_APPEND` (created 0600 when
/// missing), and syncs it to disk.
pub fn append_jsonl(path: &Path, cp: &Checkpoint) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    let mut line = serde_json::to_string(cp).expect("a checkpoint serialises");
    line.push('\n');
    f.write_all(line.as_bytes())?;
    f.sync_data()
}

/// Every checkpoint in the JSONL file `path` whose signature verifies under `key`, in the
/// file's order, and how many lines were skipped (not a checkpoint, or not signed by `key`).
/// Errors: the file cannot be read.
pub fn read_jsonl(path: &Path, key: &VerifyingKey) -> std::io::Result<(Vec<Checkpoint>, usize)> {
    let text = std::fs::read_to_string(path)?;
    let mut signed = Vec::new();
    let mut skipped = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Checkpoint>(line) {
            Ok(cp) if cp.verifies(key) => signed.push(cp),
            _ => skipped += 1,
        }
    }
    Ok((signed, skipped))
}

/// The newest (highest `seq`) checkpoint in the JSONL file `path` whose signature verifies
/// under `key`: lines are parsed, then signatures checked from the newest down until one
/// verifies (one, when the file is the gateway's own). Errors: the file cannot be read.
pub fn newest_signed_in_jsonl(
    path: &Path,
    key: &VerifyingKey,
) -> std::io::Result<Option<Checkpoint>> {
    let mut all = parsed_jsonl(path, |_| true)?;
    all.sort_by_key(|c| std::cmp::Reverse(c.seq));
    Ok(all.into_iter().find(|c| c.verifies(key)))
}

/// The checkpoints in the JSONL file `path` at records `after + 1 ..= upto` whose signature
/// verifies under `key` and that were signed over a whole chain (`record_count == seq`), in
/// the file's order: what retention checks the records it archives against
/// (`retention.rs`), so that records rewritten behind the gateway's back are never signed
/// into an export. Only lines in the range have their signatures checked. Errors: the file
/// cannot be read (`NotFound` when there is none yet).
pub fn signed_in_jsonl_between(
    path: &Path,
    key: &VerifyingKey,
    after: i64,
    upto: i64,
) -> std::io::Result<Vec<Checkpoint>> {
    let in_range = parsed_jsonl(path, |c| c.seq > after && c.seq <= upto)?;
    Ok(in_range
        .into_iter()
        .filter(|c| c.record_count == c.seq && c.verifies(key))
        .collect())
}

/// Every line of the JSONL file `path` that parses as a checkpoint `keep` takes, in the
/// file's order (signatures not checked), read line by line: only those are held in memory.
/// Errors: the file cannot be read, or a line is not UTF-8.
fn parsed_jsonl(
    path: &Path,
    keep: impl Fn(&Checkpoint) -> bool,
) -> std::io::Result<Vec<Checkpoint>> {
    use std::io::BufRead;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(std::fs::File::open(path)?).lines() {
        if let Ok(cp) = serde_json::from_str::<Checkpoint>(&line?)
            && keep(&cp)
        {
            out.push(cp);
        }
    }
    Ok(out)
}

/// In the write transaction `conn`: signs with `key` and stores a checkpoint of the head when
/// one is `due` at `now` (Unix ms), after checking that the records since the previous
/// checkpoint (the newest stored one signed with `key`, or `published` when that is newer)
/// still link to it. The body of [`Store::checkpoint_if_due_after`], shared with
/// [`sign_head_of_copy`] and `sealing_marker::carry`. Refuses first when the key was taken
/// over, unless `replaced_checked` (the store's group commit checked it in this
/// transaction). Returns the new checkpoint (`None`: none due). Errors: as `checkpoint_if_due_after`.
pub(crate) fn sign_due(
    conn: Conn<'_>,
    (key, replaced_checked): (&SigningKey, bool),
    due: Due,
    now: i64,
    published: Option<&Checkpoint>,
) -> Result<Option<Checkpoint>, StoreError> {
    let public = key.verifying_key();
    // Fail closed before signing: a key another key set took the database over from signs
    // nothing (serialised with the take-over: this runs in the write transaction).
    if !replaced_checked {
        crate::key_replaced::refuse_if_replaced(conn, &public, None)?;
    }
    let Some((seq, hash, prev)) = due_head(conn, due, now, &public)? else {
        return Ok(None);
    };
    let prev = match (prev, published) {
        (Some(p), Some(q)) if q.seq > p.seq => Some(q.clone()),
        (None, Some(q)) => Some(q.clone()),
        (p, _) => p,
    };
    let last_seq = prev.as_ref().map_or(0, |p| p.seq);
    if let Some(why) = extends(conn, prev.as_ref(), &public)? {
        return Err(StoreError::Invalid(format!(
            "audit chain altered since the checkpoint at record {last_seq}: {why}; no checkpoint signed (run assent audit verify)"
        )));
    }
    crate::key_replaced::refuse_unsigned(conn, last_seq, &public)?;
    Ok(Some(store_signed(conn, key, seq, &hash, now)?))
}

/// Signs with `key` at `now` (Unix ms) and stores the checkpoint of head `(seq, hash)`,
/// counting the records ever appended: those in the table and those archived before them.
/// Errors: the database's (a row at `seq` already taken).
fn store_signed(
    conn: Conn<'_>,
    key: &SigningKey,
    seq: i64,
    hash: &str,
    now: i64,
) -> db::Result<Checkpoint> {
    let count: i64 = conn.query_row("SELECT count(*) FROM audit", [], |r| r.get::<i64>(0))?
        + audit::anchor(conn)?.0;
    let cp = sign(key, seq, hash, count, now);
    insert(conn, &cp, "")?;
    Ok(cp)
}

/// In the write transaction `conn` of a retention run (`retention.rs`) that carried an
/// `audit.key_replaced` record forward to the head: signs the head with `key` at `now` (Unix
/// ms), after checking that the chain extends the newest checkpoint of `key`, and signs
/// the carried record with a take-over signature
/// ([`crate::key_replaced::sign_takeover`]), as `take_over` signed the first. Errors:
/// `Invalid` when the chain does not extend it or holds a take-over record this key did not
/// sign (nothing is signed or archived); the database's.
pub(crate) fn sign_carried(
    conn: Conn<'_>,
    key: &SigningKey,
    now: i64,
) -> Result<Checkpoint, StoreError> {
    let public = key.verifying_key();
    let prev = latest(conn, &public)?;
    if let Some(why) = extends(conn, prev.as_ref(), &public)? {
        return Err(StoreError::Invalid(format!(
            "audit chain altered since the newest checkpoint of this audit key: {why}; nothing archived or signed (run assent audit verify)"
        )));
    }
    let (head, hash): (i64, String) = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], db::tuple)?;
    crate::key_replaced::sign_takeover(conn, key, head)?;
    crate::key_replaced::refuse_unsigned(conn, prev.as_ref().map_or(0, |p| p.seq), &public)?;
    Ok(store_signed(conn, key, head, &hash, now)?)
}

pub use crate::key_replaced::KEY_REPLACED;

/// Records, in the write transaction `conn` of a start accepted through `audit-key-replaces`
/// (`open.rs`), that audit `key` takes the database over from the key `theirs` (64 hex),
/// whose newest verifying checkpoint (or claim, at 0) is at record `seq`: after checking
/// that the chain still extends that checkpoint (under `theirs`), it appends an
/// [`KEY_REPLACED`] record (`{"public_key", "replaces", "replaced_at_record",
/// "archived_through", "archived_anchors_sha256"}`: the archive as found,
/// [`crate::key_ranges::Archived`]; actor
/// `system:audit-key`, no approval) and signs that record with `key` twice, at `now` (Unix
/// ms): a take-over signature ([`crate::key_replaced::sign_takeover`], which only a
/// take-over makes) and the checkpoint of the new head. That record with its take-over
/// signature is the recorded take-over
/// ([`crate::key_replaced::replaced_by`]): a replica still serving under the old key writes
/// and signs nothing more from that transaction on
/// ([`crate::key_replaced::refuse_if_replaced`]), and never starts again. Found by review: the take-over was
/// recorded only by the new key's first due checkpoint, and a replica still running under
/// the replaced key kept writing rows sealed, and signing checkpoints, under it until it
/// restarted. Errors: `Invalid` when the chain does not extend the old key's checkpoint
/// (nothing is taken over or signed); the database's.
pub(crate) fn take_over(
    conn: Conn<'_>,
    key: &SigningKey,
    seq: i64,
    theirs: &str,
    now: i64,
) -> Result<Checkpoint, StoreError> {
    let old = parse_public_key(theirs)?;
    let theirs = public_key_hex(&old);
    let prev = if seq > 0 {
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM audit_checkpoints WHERE seq = ?1"
        ))?
        .query_row([seq], row)
        .optional()?
    } else {
        None
    };
    if let Some(why) = extends(conn, prev.as_ref(), &old)? {
        return Err(StoreError::Invalid(format!(
            "audit chain altered since the checkpoint audit key {theirs} signed at record {seq}: {why}; the database is not taken over and nothing is signed (run assent audit verify)"
        )));
    }
    let ours = public_key_hex(&key.verifying_key());
    // The archive as found: the replaced key's anchors are accepted up to here, as they are.
    let anchors = archive::stored(conn)?;
    let data = serde_json::json!({"public_key": ours, "replaces": theirs, "replaced_at_record": seq,
        "archived_through": anchors.last().map_or(0, |a| a.last_seq),
        "archived_anchors_sha256": archive::anchors_digest(&anchors)});
    audit::append(conn, now, KEY_REPLACED, None, "system:audit-key", &data)?;
    let (head, hash): (i64, String) = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], db::tuple)?;
    tracing::warn!(audit_key = %ours, replaces = %theirs, at_record = head, "the database taken over from the replaced audit key: a replica still serving under it writes nothing more");
    crate::key_replaced::sign_takeover(conn, key, head)?;
    Ok(store_signed(conn, key, head, &hash, now)?)
}

/// `assent backup`: signs with the gateway's audit `key` a checkpoint at the exact head of
/// the copy `conn` (an SQLite database no one else has open: the staged backup) and stores
/// it in the copy's `audit_checkpoints`, as the gateway's signer does ([`sign_due`] with
/// [`Due::NOW`], at `now`, Unix ms): the records since the newest checkpoint signed with
/// `key` (or `published`, the checkpoint file's newest, when newer) must still link to it.
/// `assent restore` then refuses a copy whose head no checkpoint of the gateway's key
/// covers: without the key, nothing in the copy can be rewritten or appended to unseen.
/// Returns the checkpoint, `None` when one already covers the head, there is no record, or
/// the copy's schema predates checkpoints (v8, no table to store one in). Errors: the chain
/// does not extend the previous checkpoint, that checkpoint does not verify or lies past the
/// head (`Invalid`: nothing signed); SQLite errors.
pub fn sign_head_of_copy(
    conn: &rusqlite::Connection,
    key: &SigningKey,
    now: i64,
    published: Option<&Checkpoint>,
) -> Result<Option<Checkpoint>, StoreError> {
    if !sql::lite(conn).has_table("audit_checkpoints")? {
        return Ok(None);
    }
    sql::lite(conn).write(|tx| sign_due(**tx, (key, false), Due::NOW, now, published))
}
