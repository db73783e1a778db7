//! Audit retention (issue 13 §3, `audit_retention_days`): old audit records are first written
//! to a signed, verifiable export file and only then deleted; what remains still verifies.
//!
//! - **The export** (one file per run, `<data_dir>/archive/audit-FIRST-LAST-RANDOM.jsonl`,
//!   directory 0700, file 0600, created new, fsynced before anything is deleted): one JSON
//!   line per record ([`AuditRecord`], oldest first), then one line `{"manifest": …}` — the
//!   [`Manifest`]: the range, the first record's `prev_hash`, the last record's hash, the
//!   SHA-256 of the record lines' bytes, and an Ed25519 signature by the audit key over the
//!   RFC 8785 canonical JSON of the manifest's other fields plus `"format":
//!   "assent-audit-export/1"`.
//! - **The anchor**: the same signed manifest stored in `audit_archives` in the transaction
//!   that deletes the records. The remaining chain starts at `last_seq + 1` and links to
//!   `last_hash` ([`crate::audit::verify`]); the anchors chain from genesis, and their
//!   signatures are checked by [`crate::integrity::verify_offline`], so deleting more records
//!   or editing an anchor is found.
//! - **What may go**: a prefix of the chain whose every record is older than the cut-off,
//!   never the newest record, never a record of an approval that is pending or has a token
//!   neither used nor expired, never a record a webhook has not delivered yet (its cursor),
//!   at most `max_records` per run (a standing grant's record is carried forward:
//!   `retention_carry.rs`). The state
//!   tables are not touched, except the session state of sessions idle since before the
//!   cut-off ([`Store::prune_session_risk`], at most `max_records` rows per table per run; an
//!   active session keeps its state), the card links expired and the webhook dead letters
//!   failed before the cut-off ([`Store::prune_outbox`]), and the AAEP events and closed
//!   subscriptions older than the cut-off but those of pending approvals
//!   ([`Store::prune_aaep`]).
//! - **Replicas racing** (Postgres): each writes its own export (a random name) before its
//!   write transaction; the transaction (serialised by the database's write lock) deletes only
//!   when the newest anchor is still the one the run started from and the records still have
//!   the hashes exported, so exactly one run deletes a range and its anchor names a file that
//!   was written and synced; a run that lost removes its own file. A COMMIT that fails after
//!   the transaction's work was done may still take effect: its export is kept
//!   ([`Store::committed_after_all`]).
//!
//! The format, the anchors and the offline checks of an export are [`crate::archive`].

use crate::archive::{CARRIES_TOOLS, COLUMNS, Manifest};
use crate::audit::{self, AuditRecord};
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::key_ranges::KeyRanges;
use crate::kit::{io, random_id};
use crate::params;
use crate::sql::{self, from_row};
use crate::store::Store;
use assent_core::checkpoint::Checkpoint;
use ed25519_dalek::SigningKey;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// What an export hands its deleting transaction: the digest of its records' `seq:hash`
/// pairs and what the run records of the approvals they name ([`crate::archived_approvals`]).
type Exported = (Vec<u8>, Vec<crate::archived_approvals::Entry>);

/// The directory of the exports, in the data directory.
pub const ARCHIVE_DIR: &str = "archive";
/// Records one run archives at most (a bigger backlog takes several runs, one file each).
pub const DEFAULT_MAX_RECORDS: i64 = 100_000;
/// Records read per lock of the store's connection while exporting.
const CHUNK: i64 = 5_000;

/// What one run archived.
#[derive(Debug, Clone, Serialize)]
pub struct Archived {
    /// The export's signed manifest (now the store's anchor).
    pub manifest: Manifest,
    /// The export file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// The run stopped at `max_records`: more records are due (run again).
    pub more: bool,
}

/// The range a run archives: records `prev_seq + 1 ..= cut`, after `prev_hash`.
struct Plan {
    prev_seq: i64,
    prev_hash: String,
    /// The anchors' earliest `sealing_since` ([`Manifest::sealing_since`]).
    prev_sealing: Option<i64>,
    cut: i64,
    more: bool,
}

/// The least of `cut` and (the first record from `after + 1` that `sql` selects, `?1` the
/// lower bound, `?2` `cut`, `?3` `p3`) minus one.
fn hold(conn: Conn<'_>, sql: &str, after: i64, cut: i64, p3: i64) -> db::Result<i64> {
    let first: Option<i64> = conn
        .query_row(sql, params![after, cut, p3], |r| r.get(0))
        .optional()?;
    Ok(first.map_or(cut, |s| cut.min(s - 1)))
}

/// The range due at `now` for records older than `cutoff`, at most `max` records; `None`
/// when nothing is due.
fn plan(conn: Conn<'_>, cutoff: i64, now: i64, max: i64) -> db::Result<Option<Plan>> {
    let (prev_seq, prev_hash) = audit::anchor(conn)?;
    let head: Option<i64> = conn.query_row("SELECT max(seq) FROM audit", [], |r| r.get(0))?;
    let Some(head) = head else {
        return Ok(None);
    };
    // The newest record always stays: the chain goes on from it.
    let capped = prev_seq.saturating_add(max);
    let mut cut = (head - 1).min(capped);
    cut = hold(
        conn,
        "SELECT seq FROM audit WHERE seq > ?1 AND seq <= ?2 AND at >= ?3 ORDER BY seq LIMIT 1",
        prev_seq,
        cut,
        cutoff,
    )?;
    // A standing grant's record is carried instead (`retention_carry::carry_grants`).
    let standing = "SELECT seq FROM audit WHERE seq > ?1 AND seq <= ?2 AND approval_id IN (
             SELECT id FROM approvals WHERE status = 'pending'
             UNION SELECT approval_id FROM tokens WHERE used_at IS NULL AND expires_at > ?3)
         ORDER BY seq LIMIT 1";
    cut = hold(conn, standing, prev_seq, cut, now)?;
    let cursor: Option<i64> =
        conn.query_row("SELECT min(last_seq) FROM webhook_cursors", [], |r| {
            r.get(0)
        })?;
    if let Some(c) = cursor {
        cut = cut.min(c);
    }
    Ok((cut > prev_seq).then_some(Plan {
        prev_seq,
        prev_hash,
        prev_sealing: crate::sealing_marker::anchored(conn)?,
        cut,
        more: cut == capped,
    }))
}

/// An export being written: removed when dropped unless [`Partial::keep`] was called.
struct Partial {
    path: PathBuf,
    kept: bool,
    bytes: u64, // its size once synced, read through its handle
}

impl Partial {
    fn keep(mut self) -> PathBuf {
        self.kept = true;
        std::mem::take(&mut self.path)
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Running digests of an export: of the record lines, and of `seq:hash` pairs (compared
/// again in the deleting transaction).
struct Written {
    lines: Sha256,
    pairs: Sha256,
    expect: i64,
    prev: String,
    /// The `settlement.sealing` records met (`seq`, `prev_hash`, `data`).
    sealing: Vec<(i64, String, String)>,
    /// The approvals the records name, each with the `seq` of its first settling record among
    /// them ([`crate::archived_approvals`]).
    approvals: BTreeMap<String, Option<i64>>,
}

impl Written {
    /// Checks `rec` continues the chain (and matches every checkpoint at it, stored or in
    /// the checkpoint file) and returns its line; `Err` says why not.
    fn next(&mut self, rec: &AuditRecord, checkpoints: &[Mark]) -> Result<String, String> {
        if let Some(why) = audit::break_in(rec, self.expect, &self.prev) {
            return Err(format!("audit record {}: {why}", rec.seq));
        }
        let missed = checkpoints
            .iter()
            .find(|c| c.seq == rec.seq && (!c.ok || c.head_hash != rec.hash));
        if let Some(c) = missed {
            return Err(format!(
                "{} at record {} does not verify or does not match it (the chain was rewritten)",
                c.whose, rec.seq
            ));
        }
        let mut line = serde_json::to_string(rec).expect("a record serialises");
        line.push('\n');
        self.lines.update(line.as_bytes());
        self.pairs.update(format!("{}:{}\n", rec.seq, rec.hash));
        if rec.kind == crate::sealing_marker::SETTLEMENT_SEALING {
            let found = (rec.seq, rec.prev_hash.clone(), rec.data.clone());
            self.sealing.push(found);
        }
        if let Some(a) = &rec.approval_id {
            let settling = crate::archived_approvals::SETTLING.contains(&rec.kind.as_str());
            let at = self.approvals.entry(a.clone()).or_insert(None);
            if settling && at.is_none() {
                *at = Some(rec.seq);
            }
        }
        self.expect += 1;
        self.prev = rec.hash.clone();
        Ok(line)
    }
}

/// A checkpoint the archived records must meet: signed at record `seq` over `head_hash`;
/// `ok` is `false` for a stored one whose signature does not verify; `whose` names it in a
/// refusal ("the stored checkpoint", "the checkpoint in FILE").
#[derive(Clone)]
struct Mark {
    seq: i64,
    head_hash: String,
    ok: bool,
    whose: String,
}

/// A refusal: `StoreError::Invalid`.
fn refuse(msg: impl Into<String>) -> StoreError {
    StoreError::Invalid(msg.into())
}

impl Store {
    /// One retention run at `now`: archives the records older than `cutoff` (Unix ms) that
    /// may go (see the module doc), at most `max_records`, into a new export in `archive_dir`
    /// (created 0700), then deletes them and stores the export's manifest as the anchor, in
    /// one write transaction. `Ok(None)`: nothing due, or another run (a replica) archived
    /// first (its export stands; this run's file is removed). Then, unless the run refused
    /// (`StoreError::Invalid` or a damaged row: nothing deleted, these included; after an
    /// I/O or other database error they are), it prunes the state of
    /// sessions idle since before `cutoff` ([`Store::prune_session_risk`]), the webhooks'
    /// expired card links and dead letters older than `cutoff` ([`Store::prune_outbox`]) and
    /// the AAEP events and closed subscriptions older than `cutoff` ([`Store::prune_aaep`]).
    ///
    /// The records are checked against the checkpoints signed among them: those stored, and
    /// when `checkpoint_file` is given (the config's `audit_checkpoints.file`, kept where a
    /// database writer cannot reach) every one of that file's that verifies under the audit
    /// key; then the range ends at the newest of the file's (`Ok(None)` when it has none
    /// among the records due), so that every record archived leads to a head the file
    /// signed. Found by review: only stored checkpoints were checked, so records rewritten and
    /// re-chained, their stored checkpoints deleted, were signed into an export and deleted,
    /// and the file's checkpoint among them could no longer be checked against anything.
    ///
    /// `published` is the newest checkpoint the running gateway published (the server's
    /// memory of it): a chain that no longer extends it ([`crate::checkpoint::extends`]) is
    /// refused, at the plan and again in the deleting transaction. Found by review: without a
    /// checkpoint file, records rewritten and re-chained, their stored checkpoints deleted,
    /// were signed into an export (and a checkpoint signed at the forged head) by the very
    /// gateway whose checkpoint timer refused to sign that chain.
    ///
    /// Errors (nothing deleted, and the export removed — but for an error of the COMMIT
    /// itself, whose export is kept, as the records may be gone): the records to archive do not
    /// verify from the anchor, a checkpoint among them does not verify or match, the
    /// newest anchor's signature does not verify (a broken chain is never archived away),
    /// the records changed between the export and the transaction; I/O and database errors.
    pub fn archive_audit(
        &self,
        archive_dir: &Path,
        cutoff: i64,
        max_records: i64,
        now: i64,
        checkpoint_file: Option<&Path>,
        published: Option<&Checkpoint>,
    ) -> Result<Option<Archived>, StoreError> {
        let marks = (checkpoint_file, published);
        let run = self.archive_checked(archive_dir, (cutoff, max_records, now), marks);
        // The same sweep bounds the session state (issue 16 §3) by the same cut-off, and what
        // the webhooks leave behind — never after a refusal (found by review: a run refused
        // for a tampered chain had already deleted them, then logged "nothing deleted", and
        // what they held may be what an investigation needs), but after a run that failed
        // otherwise (an archive directory that cannot be written, the database busy): those
        // tables stay bounded while an operator mends it (found by review of the fix). A
        // failure here is logged, not returned: the run's export stands; the next run prunes.
        if let Err(e) = &run
            && (matches!(e, StoreError::Invalid(_)) || e.is_damaged_row())
        {
            return run;
        }
        let pruned = self
            .prune_session_risk(cutoff, max_records, now)
            .and_then(|_| self.prune_outbox(cutoff, max_records, now))
            .and_then(|_| self.prune_aaep(cutoff, max_records));
        if let Err(e) = pruned {
            tracing::error!(error = %e, "audit retention could not prune the session state, dead letters and AAEP events due (the next run tries again)");
        }
        run
    }

    /// [`Store::archive_audit`] but for the pruning: checks, exports and deletes (`(cutoff,
    /// max_records, now)`, `(checkpoint_file, published)` as there).
    fn archive_checked(
        &self,
        archive_dir: &Path,
        (cutoff, max_records, now): (i64, i64, i64),
        (checkpoint_file, published): (Option<&Path>, Option<&Checkpoint>),
    ) -> Result<Option<Archived>, StoreError> {
        let key = self.audit_key.verifying_key();
        let (p, anchors, ranges) = {
            let guard = self.lock();
            let conn = guard.conn();
            crate::retention_carry::refuse_if_altered(conn, published, &key)?;
            (
                plan(conn, cutoff, now, max_records.max(1))?,
                crate::archive::stored(conn)?,
                crate::key_ranges::key_ranges(conn, &key)?,
            )
        };
        // Each checkpoint among the records is judged under the key of its range (the key
        // this gateway took the database over from, before the take-over).
        let ranges = ranges.map_err(|(_, why)| refuse(format!("{why}; nothing archived")))?;
        if let Some((seq, why)) = crate::archive::check_anchors_under(&anchors, &ranges) {
            return Err(refuse(format!(
                "the archive anchor ending at record {seq} is not one this gateway's audit keys signed ({why}); nothing archived (run assent audit verify)"
            )));
        }
        let Some(mut p) = p else { return Ok(None) };
        let filed = match checkpoint_file {
            Some(f) => {
                let filed = filed_between(f, &ranges, &p)?;
                // The range ends at a head the file signed, so that every record archived is
                // vouched for by a signature kept out of the database's reach (found by
                // review: with the file's checkpoints all above the cut, records rewritten
                // below it were archived unchecked).
                let Some(last) = filed.iter().map(|c| c.seq).max() else {
                    tracing::info!(
                        file = %f.display(), from = p.prev_seq + 1, to = p.cut,
                        "no audit records archived: the checkpoint file has no checkpoint among those due"
                    );
                    return Ok(None);
                };
                if last < p.cut {
                    (p.cut, p.more) = (last, false);
                }
                filed
            }
            None => Vec::new(),
        };
        // Never write exports (or chmod) through a link planted where the directory should be:
        // held by a handle from here on (`archive_dir.rs`).
        let dir = crate::archive_dir::ArchiveDir::open_or_make(archive_dir)?;
        let marks = (filed.as_slice(), &ranges);
        let Some((manifest, partial, pairs)) = self.export(&dir, &p, marks, cutoff, now)? else {
            return Ok(None);
        };
        // Whether the transaction's work ran to its end, so that an error can only have come
        // from its COMMIT, whose outcome is then unknown.
        let reached_commit = std::cell::Cell::new(false);
        let done = self.write(|tx| {
            crate::retention_carry::refuse_if_altered(**tx, published, &key)?;
            let done = commit(tx, (&p, &self.audit_key), &manifest, &pairs);
            reached_commit.set(done.is_ok());
            done
        });
        let done = match done {
            Ok(true) => Some(partial),
            Ok(false) => None,
            Err(e) if !reached_commit.get() => return Err(e),
            Err(e) => Some(self.committed_after_all(&manifest, partial, e)?),
        };
        let Some(partial) = done else {
            return Ok(None);
        };
        // Not read again by path (found by review: a failed stat after the commit reported a
        // run that deleted records as one that deleted nothing).
        let bytes = partial.bytes;
        let path = partial.keep();
        Ok(Some(Archived {
            manifest,
            path,
            bytes,
            more: p.more,
        }))
    }

    /// After the deleting transaction's COMMIT failed with `e` (its work done, so it may have
    /// taken effect: on PostgreSQL a connection lost after the server's `COMMIT`, or a commit
    /// waiting on a synchronous standby, is an error here though the records are, or will be,
    /// gone): committed when the archive row naming this export is there, and then the
    /// export, the only copy of its records, is kept and returned. Otherwise `e`, and the
    /// export is kept still, its path logged (its records may yet be deleted; it is the only
    /// copy then, else a later run archives them again and this file is spare). Found by
    /// review: the export was removed on every error, also on one after the commit.
    fn committed_after_all(
        &self,
        m: &Manifest,
        partial: Partial,
        e: StoreError,
    ) -> Result<Partial, StoreError> {
        let file = m.file.clone();
        let ours = self.read(move |c| {
            Ok(
                c.prepare_cached("SELECT 1 FROM audit_archives WHERE file = ?1")?
                    .query_row([&file], |_| Ok(()))
                    .optional()?
                    .is_some(),
            )
        });
        if ours.as_ref().is_ok_and(|x| *x) {
            tracing::warn!(error = %e, file = %partial.path.display(),
                "the audit retention commit reported an error but took effect; the export is kept");
            return Ok(partial);
        }
        let kept = partial.keep();
        tracing::error!(error = %e, file = %kept.display(),
            "the audit retention commit failed and may yet take effect; the export is kept: once `assent audit verify` passes and no archive names this file, it may be removed");
        Err(e)
    }

    /// Writes the export of `p` (chunk by chunk, the store's connection locked per chunk),
    /// signed, synced; returns its manifest, the file (removed if dropped) and the digest of
    /// its `seq:hash` pairs; `None` when another run archived the records meanwhile. The
    /// records must meet the checkpoints of the file (`filed`) and those stored, each stored
    /// one verifying under the key of its range in `ranges`.
    fn export(
        &self,
        dir: &crate::archive_dir::ArchiveDir,
        p: &Plan,
        (filed, ranges): (&[Mark], &KeyRanges),
        cutoff: i64,
        now: i64,
    ) -> Result<Option<(Manifest, Partial, Exported)>, StoreError> {
        let (first, last) = (p.prev_seq + 1, p.cut);
        let name = format!("audit-{first:012}-{last:012}-{}.jsonl", &random_id("")[..8]);
        let (file, path) = dir.create_new(&name)?;
        let mut partial = Partial {
            path: path.clone(),
            kept: false,
            bytes: 0,
        };
        let mut out = std::io::BufWriter::new(file);
        let mut w = Written {
            lines: Sha256::new(),
            pairs: Sha256::new(),
            expect: first,
            prev: p.prev_hash.clone(),
            sealing: Vec::new(),
            approvals: BTreeMap::new(),
        };
        let mut from = p.prev_seq;
        while from < last {
            let to = last.min(from + CHUNK);
            let guard = self.lock();
            let conn = guard.conn();
            let mut checkpoints = checkpoints_in(conn, from, to, ranges)?;
            let chunk = filed.iter().filter(|c| c.seq > from && c.seq <= to);
            checkpoints.extend(chunk.cloned());
            let mut failed: Option<StoreError> = None;
            conn.prepare_cached(
                "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
            )?
            .for_each(params![from, to], |r| {
                let rec = AuditRecord::read_in_order(r)?;
                match w.next(&rec, &checkpoints) {
                    Ok(line) => {
                        if let Err(e) = out.write_all(line.as_bytes()) {
                            failed = Some(io(&path)(e));
                        }
                    }
                    Err(why) => failed = Some(refuse(format!("{why}; nothing archived"))),
                }
                Ok(if failed.is_some() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
            })?;
            if w.expect != to + 1 && failed.is_none() {
                failed = Some(refuse(format!(
                    "audit record {} is missing (a record was removed); nothing archived",
                    w.expect
                )));
            }
            if let Some(e) = failed {
                // Another run (a replica) archived and deleted these records meanwhile.
                if audit::anchor(conn)?.0 != p.prev_seq {
                    return Ok(None);
                }
                return Err(e);
            }
            drop(guard);
            from = to;
        }
        let entries = self.archived_entries(&w.approvals)?;
        let manifest = Manifest {
            first_seq: first,
            last_seq: last,
            first_prev_hash: p.prev_hash.clone(),
            last_hash: w.prev.clone(),
            record_count: last - first + 1,
            records_sha256: hex::encode(w.lines.finalize()),
            file: name,
            cutoff,
            archived_at: now,
            public_key: String::new(),
            signature: String::new(),
            carries: CARRIES_TOOLS.to_string(),
            sealing_since: crate::sealing_marker::archived_since(
                &self.audit_key,
                p.prev_sealing,
                &w.sealing,
            ),
            approvals_sha256: Some(crate::archived_approvals::digest(&entries)),
        }
        .signed(&self.audit_key);
        let trailer = format!("{}\n", json!({ "manifest": manifest }));
        out.write_all(trailer.as_bytes()).map_err(io(&path))?;
        let file = out.into_inner().map_err(|e| io(&path)(e.into_error()))?;
        file.sync_all().map_err(io(&path))?;
        partial.bytes = file.metadata().map_err(io(&path))?.len();
        dir.sync()?;
        let exported = (w.pairs.finalize().to_vec(), entries);
        Ok(Some((manifest, partial, exported)))
    }
}

/// The checkpoints in the file `file` among the records `p` archives that verify under the
/// key of their range in `ranges` ([`crate::checkpoint::signed_in_jsonl_between`]). Errors: the file does not exist or
/// cannot be read (nothing is archived unchecked: a path mistyped or a volume not mounted is
/// not taken for a file not written yet, as records due are days older than the gateway's
/// first checkpoint).
fn filed_between(file: &Path, ranges: &KeyRanges, p: &Plan) -> Result<Vec<Mark>, StoreError> {
    let mut found = Ok(Vec::new());
    for (key, from, to) in ranges.spans() {
        let (after, upto) = (p.prev_seq.max(from.saturating_sub(1)), p.cut.min(to - 1));
        if after >= upto || found.is_err() {
            continue;
        }
        found =
            crate::checkpoint::signed_in_jsonl_between(file, &key, after, upto).and_then(|more| {
                found.map(|mut f: Vec<Checkpoint>| {
                    f.extend(more);
                    f
                })
            });
    }
    let found = match found {
        Ok(found) => found,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(format!(
                "the checkpoint file {} does not exist; nothing archived (records are archived up to a checkpoint it signed)",
                file.display()
            )));
        }
        Err(e) => return Err(io(file)(e)),
    };
    let whose = format!("the checkpoint in {}", file.display());
    Ok(found
        .into_iter()
        .map(|c| Mark {
            seq: c.seq,
            head_hash: c.head_hash,
            ok: true,
            whose: whose.clone(),
        })
        .collect())
}

/// The stored checkpoints at records `from + 1 ..= to`; `ok` when the signature verifies
/// under the key of its range in `ranges` and it was signed over a whole chain.
fn checkpoints_in(conn: Conn<'_>, from: i64, to: i64, ranges: &KeyRanges) -> db::Result<Vec<Mark>> {
    if !conn.has_table("audit_checkpoints")? {
        return Ok(Vec::new());
    }
    sql::rows(
        conn,
        "SELECT seq, head_hash, record_count, time, public_key, signature FROM audit_checkpoints WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
        params![from, to],
        |r| {
            let cp: db::Result<Checkpoint> = from_row!(r => Checkpoint {
                seq, head_hash, record_count, time, public_key, signature
            });
            let cp = cp?;
            let ok = cp.verifies(ranges.key_at(cp.seq)) && cp.record_count == cp.seq;
            let whose = "the stored checkpoint".to_string();
            Ok(Mark {
                seq: cp.seq,
                head_hash: cp.head_hash,
                ok,
                whose,
            })
        },
    )
}

/// The deleting transaction: `Ok(false)` when the newest anchor moved since the plan (another
/// run archived); otherwise checks the records still have the exported hashes and the next
/// record links to the last, carries forward what must stay in the live chain (signing a
/// carried take-over with `key`; the word that settlements are sealed, `sealing_marker.rs`,
/// and a checkpoint by `key` over it), deletes them and stores the anchor.
fn commit(
    tx: &db::Tx<'_>,
    (p, key): (&Plan, &SigningKey),
    m: &Manifest,
    (pairs, entries): &Exported,
) -> Result<bool, StoreError> {
    let (now_prev, _) = audit::anchor(**tx)?;
    if now_prev != p.prev_seq {
        return Ok(false);
    }
    // Each record is checked whole here, under the write lock, before anything is carried
    // from it: found by review, only `seq:hash` was compared, so a writer who edited an old
    // record's kind, actor or data between the export and this transaction had the edit
    // carried into the live chain with a fresh hash (a forged `audit.key_replaced` even
    // signed with the audit key).
    let mut d = Sha256::new();
    let (mut n, mut prev, mut broken) = (0i64, p.prev_hash.clone(), None);
    tx.prepare_cached(
        "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq",
    )?
    .for_each(params![m.first_seq, m.last_seq], |r| {
        let rec = audit::AuditRecord::read_in_order(r)?;
        if let Some(why) = audit::break_in(&rec, m.first_seq + n, &prev) {
            broken = Some((rec.seq, why));
            return Ok(ControlFlow::Break(()));
        }
        d.update(format!("{}:{}\n", rec.seq, rec.hash));
        n += 1;
        prev = rec.hash;
        Ok(ControlFlow::Continue(()))
    })?;
    if let Some((seq, why)) = broken {
        return Err(refuse(format!(
            "audit record {seq} changed while the records were being archived ({why}); nothing deleted"
        )));
    }
    if n != m.record_count || d.finalize().as_slice() != pairs {
        return Err(refuse(
            "audit records changed while they were being archived; nothing deleted",
        ));
    }
    let next: Option<String> = tx
        .query_row(
            "SELECT prev_hash FROM audit WHERE seq = ?1",
            [m.last_seq + 1],
            |r| r.get(0),
        )
        .optional()?;
    if next.as_deref() != Some(m.last_hash.as_str()) {
        return Err(refuse(format!(
            "audit record {} does not link to record {}; nothing deleted",
            m.last_seq + 1,
            m.last_seq
        )));
    }
    crate::retention_carry::carry_all(tx, m, key)?;
    crate::archived_approvals::record(**tx, (m, entries))?;
    let gone = tx.execute(
        "DELETE FROM audit WHERE seq >= ?1 AND seq <= ?2",
        params![m.first_seq, m.last_seq],
    )?;
    if gone as i64 != m.record_count {
        return Err(refuse(
            "audit records changed while they were being deleted",
        ));
    }
    tx.execute(
        &format!(
            "INSERT INTO audit_archives ({COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)"
        ),
        params![
            m.first_seq,
            m.last_seq,
            m.first_prev_hash,
            m.last_hash,
            m.record_count,
            m.records_sha256,
            m.file,
            m.cutoff,
            m.archived_at,
            m.public_key,
            m.signature,
            m.carries,
            m.sealing_since,
            m.approvals_sha256
        ],
    )?;
    Ok(true)
}

#[cfg(test)]
#[path = "retention_race.rs"]
mod race;
