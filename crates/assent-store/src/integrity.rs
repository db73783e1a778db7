//! `assent audit verify` in full, offline and read-only: the hash chain, the signed
//! checkpoints (stored, and optionally the newest in an external JSONL sink file), and the
//! state tables cross-checked against the chain.
//!
//! The cross-checks are exact for the records the store writes: every approval has its
//! `approval.requested` record; an approval out of `pending` has the record that settled it
//! (`decision` with the same status, `approval.expired`, `approval.cancelled`, or `grant.used`
//! for one a grant let through, which is inserted already approved), and no settled approval
//! is still pending; every token has its `token.minted` record and every `token.minted`
//! record its token; a token is marked used exactly when it has its `token.redeemed` record.

use crate::archive::{self, Manifest};
use crate::audit::{self, json_of, text_at};
use crate::checkpoint::{self, Checkpoint};
use crate::db::{self, Conn, Database};
use crate::error::StoreError;
use crate::integrity_checkpoints::{against_chain, check_stored, file_problem};
use crate::key_ranges::{KeyRanges, key_ranges};
use crate::kit::io;
use crate::seal::{SealKey, Sealed};
use crate::sql;
use crate::sql::lite;
use ed25519_dalek::VerifyingKey;
use serde::Serialize;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;

/// What to check besides the chain and the state tables.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions<'a> {
    /// The trusted audit public key; `None`: the public half of `<data_dir>/audit.key`.
    pub public_key: Option<VerifyingKey>,
    /// A JSONL checkpoint sink file: the chain must reach its newest valid checkpoint.
    pub checkpoint_file: Option<&'a Path>,
    /// Directories holding the exports of retention runs (`data_dir/archive` of each
    /// replica): when any, every anchor's export must be in one of them and verify as that
    /// anchor ([`archive::check_exports`]); none: the exports are not opened.
    pub archive_dirs: &'a [std::path::PathBuf],
}

/// The first thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Which check failed: `archive`, `chain`, `schema`, `checkpoint`, `checkpoint_file` or
    /// `state`.
    pub check: &'static str,
    /// The audit record (or checkpoint `seq`) concerned, when there is one.
    pub seq: Option<i64>,
    /// What is wrong, in a sentence naming the record, checkpoint, approval or token.
    pub reason: String,
}

/// Result of [`verify_offline`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Audit records in the store's chain (up to the first broken one).
    pub records: i64,
    /// Records archived and deleted before them (the newest anchor's `last_seq`; 0: none).
    pub archived_records: i64,
    /// Hash of the newest record ([`GENESIS`] when empty).
    pub head: String,
    /// The public key checkpoints were checked with (64 hex), if one was available.
    pub public_key: Option<String>,
    /// Stored checkpoints checked.
    pub checkpoints: usize,
    /// The newest stored checkpoint.
    pub newest_checkpoint: Option<Checkpoint>,
    /// The newest archive anchor (the signed manifest of the last export), if any.
    pub anchor: Option<Manifest>,
    /// The newest valid checkpoint of the checkpoint file, when one was given.
    pub file_checkpoint: Option<Checkpoint>,
    /// Lines of the checkpoint file that were not checkpoints signed by the key.
    pub file_lines_skipped: usize,
    /// Records after the newest checkpoint (stored or from the file): not yet signed.
    pub unsigned_records: i64,
    /// The first problem; `None`: everything verifies.
    pub problem: Option<Problem>,
    /// How many state disagreements there are in all (the first is in `problem`).
    pub state_disagreements: usize,
    /// Exports opened and verified as their anchors (only with `archive_dirs`).
    pub exports_verified: usize,
}

/// Verifies the SQLite database in `data_dir` read-only (a running gateway may keep
/// writing), with the audit key of `data_dir`: [`verify_database`] over `<data_dir>/assent.db`.
pub fn verify_offline(data_dir: &Path, opts: &VerifyOptions<'_>) -> Result<Report, StoreError> {
    let db = Database::Sqlite {
        path: data_dir.join(crate::kit::DB_FILE),
    };
    verify_database(&db, data_dir, opts)
}

/// Verifies `database` (the SQLite file opened read-only, or a Postgres session) with
/// [`verify_on`]; the key is `opts.public_key`, else the public half of `<keys_dir>/audit.key`.
/// When `<keys_dir>/audit.key` is that key, the settlements' seals are checked as well
/// ([`crate::integrity_people::settlements`]).
///
/// Errors (usage or I/O, not findings): no database, an unreachable one, an unreadable key or
/// checkpoint file, or checkpoints or archive anchors to check without a public key (no
/// `audit.key` and no `opts.public_key`). Findings are in [`Report::problem`].
pub fn verify_database(
    database: &Database,
    keys_dir: &Path,
    opts: &VerifyOptions<'_>,
) -> Result<Report, StoreError> {
    let conn = match database {
        Database::Sqlite { path } => {
            let dir = path.parent().unwrap_or(Path::new("."));
            db::Connection::Sqlite(crate::open::open_read_only(dir)?)
        }
        Database::Postgres { .. } => database.connect()?,
    };
    // The gateway's own key, when `keys_dir` holds it: an unreadable one is an error only
    // when nothing else gives the key to check with.
    let own = match opts.public_key {
        Some(_) => checkpoint::read_key(keys_dir).ok().flatten(),
        None => checkpoint::read_key(keys_dir)?,
    };
    let key = opts.public_key.or(own.as_ref().map(|k| k.verifying_key()));
    // Settlement seals are checked under the gateway's own key only (the seal key derives
    // from it), and only when it is the key checked with.
    let settled = own.filter(|k| Some(k.verifying_key()) == key).map(|k| {
        (
            SealKey::of(&k, Sealed::Settlement),
            SealKey::of(&k, Sealed::Approval),
            SealKey::of(&k, Sealed::Plan),
        )
    });
    let opts = VerifyOptions {
        public_key: key,
        ..opts.clone()
    };
    let missing = format!("no {} in {}", checkpoint::KEY_FILE, keys_dir.display());
    let conn = conn.conn();
    let text = file_text(&opts)?;
    let given = (&opts, text.as_deref());
    conn.snapshot(|c| Ok(verify_snapshot(c, given, &missing, settled.as_ref())))?
}

/// Verifies the store behind `conn` (either backend) in one read snapshot: the archive
/// anchors ([`crate::archive`]: signed by the key, one chain from genesis), the hash chain from the
/// newest anchor, every stored checkpoint, the row at record 0 (a claim of the empty chain by
/// any key, `integrity_checkpoints::claim_problem`), the checkpoint file of `opts`, and the state
/// tables against the chain. `opts.public_key` is the trusted key; `no_key` starts the error when it
/// is needed and missing.
///
/// Errors (usage or I/O, not findings): an unreadable checkpoint file, or checkpoints or
/// anchors to check without a key. Findings are in [`Report::problem`].
pub fn verify_on(
    conn: Conn<'_>,
    opts: &VerifyOptions<'_>,
    no_key: &str,
) -> Result<Report, StoreError> {
    let text = file_text(opts)?;
    let given = (opts, text.as_deref());
    conn.snapshot(|c| Ok(verify_snapshot(c, given, no_key, None)))?
}

/// The text of `opts`' checkpoint file, read before the snapshot the chain is read in: a
/// checkpoint the running gateway commits and appends while the chain is walked is then not
/// in what is checked, rather than found "past the end" of the snapshot (found by review: a
/// live gateway's next checkpoint made `assent audit verify` report records removed from the
/// end). Errors: the file cannot be read.
fn file_text(opts: &VerifyOptions<'_>) -> Result<Option<String>, StoreError> {
    opts.checkpoint_file
        .map(|f| std::fs::read_to_string(f).map_err(io(f)))
        .transpose()
}

/// An `archive` problem at the run ending at record `seq`.
fn archive_problem((seq, reason): (i64, String)) -> Problem {
    Problem {
        check: "archive",
        seq: Some(seq),
        reason,
    }
}

/// [`verify_on`] in its snapshot; with `settled` (the settlement and terms seal keys of the
/// gateway's own audit key, [`verify_database`]) the settlements' seals are checked too
/// ([`crate::integrity_people::settlements`]).
fn verify_snapshot(
    conn: Conn<'_>,
    (opts, file_text): (&VerifyOptions<'_>, Option<&str>),
    no_key: &str,
    settled: Option<&crate::integrity_people::SettledKeys>,
) -> Result<Report, StoreError> {
    let key = opts.public_key;
    let anchors = archive::stored(conn)?;
    let chain = audit::verify(conn)?;
    let stored = checkpoint::stored(conn)?;
    if key.is_none()
        && (!stored.is_empty() || !anchors.is_empty() || opts.checkpoint_file.is_some())
    {
        return Err(StoreError::Invalid(format!(
            "{no_key}: give the audit public key with --public-key"
        )));
    }
    // The keys that judge each checkpoint and anchor (the key checked with, and before each
    // recorded take-over the key it replaced): a take-over not accounted for is a problem.
    let (ranges, takeover) = ranges_of(conn, key.as_ref())?;
    let archive = ranges
        .as_ref()
        .and_then(|r| archive::check_anchors_under(&anchors, r))
        .map(archive_problem);
    // After the chain's own problems (a chain that starts in the middle comes first).
    let recorded = crate::archived_approvals::check(conn, &anchors)?.map(archive_problem);
    let mut rep = Report {
        records: chain.records,
        archived_records: chain.archived,
        head: chain.head.clone(),
        public_key: key.as_ref().map(checkpoint::public_key_hex),
        checkpoints: stored.len(),
        newest_checkpoint: stored.last().cloned(),
        anchor: anchors.last().cloned(),
        file_checkpoint: None,
        file_lines_skipped: 0,
        unsigned_records: 0,
        problem: takeover
            .or(archive)
            .or(chain.broken.map(|(seq, reason)| Problem {
                check: "chain",
                seq: Some(seq),
                reason,
            }))
            .or(recorded),
        state_disagreements: 0,
        exports_verified: 0,
    };
    if rep.problem.is_none()
        && let Some(d) = crate::migrate::altered_schema(conn)?
    {
        rep.problem = Some(Problem {
            check: "schema",
            seq: None,
            reason: format!(
                "the database's schema {d}: it was altered behind the gateway's back (a trigger or view runs inside the gateway's transactions)"
            ),
        });
    }
    let head_seq = rep.archived_records + rep.records;
    if let (Some(key), Some(ranges)) = (&key, &ranges) {
        let keys = (key, ranges);
        let given = (opts, file_text);
        check_signed(conn, &mut rep, keys, given, (&anchors, &stored), head_seq)?;
    }
    // The row at record 0 must be a claim of the empty chain (by any key), if there is one.
    if rep.problem.is_none()
        && let Some(reason) = crate::integrity_checkpoints::claim_problem(conn, key.as_ref())?
    {
        rep.problem = Some(Problem {
            check: "checkpoint",
            seq: Some(0),
            reason,
        });
    }
    // A verified anchor signs the chain up to its last record, as a checkpoint does.
    let signed = [&rep.newest_checkpoint, &rep.file_checkpoint]
        .iter()
        .filter_map(|c| c.as_ref().map(|c| c.seq))
        .chain([rep.archived_records])
        .max()
        .unwrap_or(0);
    rep.unsigned_records = (head_seq - signed).max(0);
    let mut state = cross_check_on(conn)?;
    if let Some(k) = settled {
        crate::integrity_people::settlements(conn, k, &mut state)?;
        crate::integrity_plans::seals(conn, &k.2, &mut state)?;
    }
    rep.state_disagreements = state.len();
    if rep.problem.is_none() {
        rep.problem = state.into_iter().next().map(|(seq, reason)| Problem {
            check: "state",
            seq,
            reason,
        });
    }
    Ok(rep)
}

/// The key ranges under the trusted `key` ([`key_ranges`]; `None` without a key) and the
/// problem of a take-over record not accounted for (the ranges are then `key`'s alone).
/// Errors: the database's.
fn ranges_of(
    conn: Conn<'_>,
    key: Option<&VerifyingKey>,
) -> db::Result<(Option<KeyRanges>, Option<Problem>)> {
    let Some(k) = key else {
        return Ok((None, None));
    };
    Ok(match key_ranges(conn, k)? {
        Ok(r) => (Some(r), None),
        Err((seq, reason)) => (
            Some(KeyRanges::only(*k)),
            Some(Problem {
                check: "checkpoint",
                seq: Some(seq),
                reason,
            }),
        ),
    })
}

/// The checks of [`verify_snapshot`] that need the audit `key`, into `rep` (its first
/// problem kept): the exports of the `anchors` (with `opts.archive_dirs`), the `stored`
/// checkpoints, and the checkpoint file of `opts`, against the chain ending at `head_seq`,
/// each checkpoint under the key of its range in `ranges`. Errors: an unreadable checkpoint
/// file or export directory; the database's.
fn check_signed(
    conn: Conn<'_>,
    rep: &mut Report,
    (key, ranges): (&VerifyingKey, &KeyRanges),
    (opts, file_text): (&VerifyOptions<'_>, Option<&str>),
    (anchors, stored): (&[Manifest], &[Checkpoint]),
    head_seq: i64,
) -> Result<(), StoreError> {
    if !opts.archive_dirs.is_empty() && rep.problem.is_none() {
        let (n, found) = archive::check_exports_under(anchors, opts.archive_dirs, ranges)?;
        rep.exports_verified = n;
        rep.problem = found.map(|(seq, reason)| Problem {
            check: "archive",
            seq: Some(seq),
            reason,
        });
    }
    if rep.problem.is_none() {
        rep.problem =
            check_stored(conn, stored, anchors, ranges, head_seq)?.map(|(seq, reason)| Problem {
                check: "checkpoint",
                seq,
                reason,
            });
    }
    if let (Some(file), Some(text)) = (opts.checkpoint_file, file_text) {
        let (cps, skipped) = crate::integrity_checkpoints::parse_file(text, ranges);
        rep.file_lines_skipped = skipped;
        let found =
            file_problem(conn, file, &cps, key, anchors, head_seq)?.map(|(seq, reason)| Problem {
                check: "checkpoint_file",
                seq,
                reason,
            });
        rep.file_checkpoint = cps.into_iter().max_by_key(|c| c.seq);
        if rep.problem.is_none() {
            rep.problem = found;
        }
    }
    Ok(())
}

/// What [`fork_from_file`] found: how many of the file's checkpoints it checked, how many
/// records come after the newest of them (vouched for by no checkpoint of the file), and the
/// first that the chain does not hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileCheck {
    /// The file's checkpoints signed by the key at or below the store's head, all checked.
    pub checked: usize,
    /// Whether the file exists (`false`: nothing was checked).
    pub exists: bool,
    /// Records after the newest checkpoint checked (all of them when none was).
    pub unvouched: i64,
    /// The file's checkpoints past the store's head (not checked: the store is older).
    pub later: usize,
    /// Why the store forks from the file; `None`: it holds every checkpoint checked.
    pub problem: Option<String>,
}

/// Checks the store behind `conn` against the checkpoint file `file` ([`FileCheck`]): every
/// checkpoint in it signed by `key` at or below the store's head must hold in the chain (its
/// record not rewritten, the anchors' signatures whole); checkpoints past the head are not
/// checked (a backup is older than the file). For `assent restore` (found by review: a backup
/// edited and re-chained, its stored checkpoints deleted, was restored, and the documented
/// step after a restore — moving the checkpoint file aside — then threw away the one signature
/// that showed the fork). A file that does not exist checks nothing (`exists: false`).
/// Errors: the file cannot be read; the store's.
pub fn fork_from_file(
    conn: Conn<'_>,
    file: &Path,
    key: &VerifyingKey,
) -> Result<FileCheck, StoreError> {
    let cps = match checkpoint::read_jsonl(file, key) {
        Ok((cps, _)) => Some(cps),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(file)(e)),
    };
    Ok(conn.snapshot(|c| {
        let anchors = archive::stored(c)?;
        let newest: i64 =
            c.query_row("SELECT COALESCE(MAX(seq), 0) FROM audit", [], |r| r.get(0))?;
        let head_seq = newest.max(anchors.last().map_or(0, |a| a.last_seq));
        let mut out = FileCheck {
            exists: cps.is_some(),
            unvouched: head_seq,
            ..FileCheck::default()
        };
        let Some(cps) = cps else { return Ok(out) };
        if let Some(why) = anchors_problem(c, &anchors, key)? {
            out.problem = Some(why);
            return Ok(out);
        }
        out.later = cps.iter().filter(|cp| cp.seq > head_seq).count();
        for cp in cps.iter().filter(|cp| cp.seq <= head_seq) {
            if let Some(why) = against_chain(c, cp, &anchors, head_seq)? {
                out.problem = Some(format!("{}: {why}", file.display()));
                return Ok(out);
            }
            out.checked += 1;
            out.unvouched = out.unvouched.min(head_seq - cp.seq);
        }
        Ok(out)
    })?)
}

/// Why the store behind `conn` does not hold the newest checkpoint of the checkpoint file
/// `file` signed by `key` (none when the file does not exist yet, or holds none): the gateway
/// refuses to start on a chain rolled back below a checkpoint it published (that record is
/// gone), or rewritten and re-chained below it (that record no longer hashes to the signed
/// head). The archive anchors must verify under `key` (an unsigned anchor row would stand
/// in for the records). The newest record is hashed again from its columns, not read from
/// its `hash`; a deliberate splice that keeps that one record whole while breaking the links
/// below it is left to `assent audit verify`, which walks the chain. Costs the file's lines
/// parsed and one signature and one record per checkpoint checked: flat with history.
/// Errors: the file cannot be read; the store's.
pub fn sink_problem(
    conn: Conn<'_>,
    file: &Path,
    key: &VerifyingKey,
) -> Result<Option<String>, StoreError> {
    let cp = match checkpoint::newest_signed_in_jsonl(file, key) {
        Ok(Some(cp)) => cp,
        Ok(None) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(file)(e)),
    };
    let why = conn.snapshot(|c| {
        let anchors = archive::stored(c)?;
        if let Some(why) = anchors_problem(c, &anchors, key)? {
            return Ok(Some(why));
        }
        let newest: i64 =
            c.query_row("SELECT COALESCE(MAX(seq), 0) FROM audit", [], |r| r.get(0))?;
        let head_seq = newest.max(anchors.last().map_or(0, |a| a.last_seq));
        if let Some(why) = against_chain(c, &cp, &anchors, head_seq)? {
            return Ok(Some(format!("{}: {why}", file.display())));
        }
        let archived = anchors.last().map_or(0, |a| a.last_seq);
        if cp.seq > archived {
            let rec = c.query_row(
                "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit WHERE seq = ?1",
                [cp.seq],
                audit::AuditRecord::read_in_order,
            )?;
            if rec.content_hash() != cp.head_hash {
                return Ok(Some(format!(
                    "{}: record {} no longer hashes to the head_hash signed at it: the chain up to it was rewritten",
                    file.display(),
                    cp.seq
                )));
            }
        }
        Ok(None)
    })?;
    Ok(why)
}

/// Why the archive `anchors` are not one signed chain from genesis under the key of their
/// ranges for the trusted `key` ([`archive::check_anchors_under`]), or why those ranges
/// cannot be told (a take-over record not accounted for). Errors: the database's.
fn anchors_problem(
    conn: Conn<'_>,
    anchors: &[Manifest],
    key: &VerifyingKey,
) -> db::Result<Option<String>> {
    if anchors.is_empty() {
        return Ok(None);
    }
    Ok(match key_ranges(conn, key)? {
        Ok(r) => archive::check_anchors_under(anchors, &r).map(|(_, why)| why),
        Err((_, why)) => Some(why),
    })
}

impl crate::store::Store {
    /// [`sink_problem`] of checkpoint file `file` under this store's audit key: why the
    /// chain does not hold the newest checkpoint the file has of it (`None`: it does, or
    /// there is no file yet). Errors: an unreadable file; the store's.
    pub fn checkpoint_file_problem(&self, file: &Path) -> Result<Option<String>, StoreError> {
        let key = self.audit_public_key();
        sink_problem(self.lock().conn(), file, &key)
    }
}

/// The audit records the cross-checks need, by approval id or token id.
#[derive(Default)]
struct Seen {
    requested: HashMap<String, (i64, serde_json::Value)>,
    settled: HashMap<String, (i64, String, Option<String>)>,
}

fn seen(conn: Conn<'_>) -> db::Result<Seen> {
    let mut s = Seen::default();
    // The token id and status are read from the JSON in Rust (SQLite's `json_extract` has no
    // portable form); a value that is not a string counts as absent, as before.
    conn.prepare_cached(
        "SELECT seq, kind, approval_id, data FROM audit
         WHERE kind IN ('approval.requested', 'approval.escalated', 'decision', 'approval.expired', 'approval.cancelled', 'grant.used')
         ORDER BY seq",
    )?
    .for_each([], |r| {
        let (seq, kind): (i64, String) = (r.get(0)?, r.get(1)?);
        let aid: Option<String> = r.get(2)?;
        let data = json_of(r)?;
        let tid = text_at(&data, "token_id");
        let status = text_at(&data, "status");
        match (kind.as_str(), aid, tid) {
            // Only what the check compares is kept (the call as its digest): a verify or a
            // backup of a million approvals holds no arguments.
            ("approval.requested", Some(a), _) => {
                s.requested
                    .entry(a)
                    .or_insert((seq, crate::integrity_tokens::requested_terms(&data)));
            }
            // An escalation step records the approvers after it: the newest is what holds.
            ("approval.escalated", Some(a), _) => {
                if let Some((_, terms)) = s.requested.get_mut(&a) {
                    terms["approvers"] = data["approvers"].clone();
                }
            }
            ("decision" | "approval.expired" | "approval.cancelled" | "grant.used", Some(a), _) => {
                s.settled.entry(a).or_insert((seq, kind, status));
            }
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(s)
}

/// The status an approval must have after the record that settled it.
fn settles_to(kind: &str, status: Option<&str>) -> Option<String> {
    match kind {
        "decision" => status.map(str::to_string),
        "approval.expired" => Some("expired".into()),
        "approval.cancelled" => Some("cancelled".into()),
        "grant.used" => Some("approved".into()),
        _ => None,
    }
}

/// Every disagreement between the state tables and the audit chain, approvals first (an
/// approval with unreadable stored columns, [`crate::ApprovalRecord::damaged`], is one), then
/// tokens and grants (`integrity_tokens.rs`), quorum votes, decisions and passkeys
/// (`integrity_people.rs`), tool pins and reviews (`integrity_pins.rs`), plans' statuses
/// (`integrity_plans.rs`), each with the audit
/// record concerned (`seq`) when there is one. Call it inside a read transaction when the
/// database may be written meanwhile (one snapshot for all tables). Reads every approval,
/// token, pin and review and their audit records: linear in their number. Over a
/// SQLite file opened by the caller; [`cross_check_on`] over either backend.
pub fn cross_check(conn: &rusqlite::Connection) -> db::Result<Vec<(Option<i64>, String)>> {
    cross_check_on(lite(conn))
}

/// Approval `id` as [`cross_check_on`] reads it: a row of another type than the gateway
/// writes (SQLite keeps what it is given), or an id no look-up finds, is named in `out` and
/// read as `None`, and the check goes on with the other approvals.
fn read_checked(
    conn: Conn<'_>,
    id: &str,
    out: &mut Vec<(Option<i64>, String)>,
) -> db::Result<Option<crate::ApprovalRecord>> {
    Ok(match crate::record::read_approval(conn, id) {
        Ok(None) => {
            out.push((None, format!(
                "approval {id} is damaged: its id is stored as another type than the gateway writes, so no look-up finds it; it cannot be read or decided until it is repaired"
            )));
            None
        }
        Ok(rec) => rec,
        Err(e) if e.is_damaged_row() => {
            out.push((None, format!(
                "approval {id} is damaged: {e} (a value of another type than the gateway writes); it cannot be read or decided until it is repaired"
            )));
            None
        }
        Err(e) => return Err(e),
    })
}

/// [`cross_check`] over a kernel session (either backend).
pub fn cross_check_on(conn: Conn<'_>) -> db::Result<Vec<(Option<i64>, String)>> {
    let mut s = seen(conn)?;
    let gone = archive::Gone::of(conn)?;
    let recorded = crate::archived_approvals::Recorded::of(conn)?;
    let mut out = Vec::new();
    let rows: Vec<(String, String, i64, Option<i64>)> = sql::rows(
        conn,
        "SELECT CAST(id AS TEXT), CAST(status AS TEXT), requested_at, decided_at FROM approvals ORDER BY requested_at, rowid",
        [],
        // A time of another type than the gateway writes is the approval's read's to name.
        |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2).unwrap_or(0),
                r.get(3).ok().flatten(),
            ))
        },
    )?;
    for (id, status, requested_at, decided_at) in &rows {
        let rec = read_checked(conn, id, &mut out)?;
        if let Some(rec) = &rec {
            let (status, unreadable): (Vec<&String>, Vec<&String>) =
                rec.damaged.iter().partition(|d| *d == "status.settled");
            if !status.is_empty() {
                out.push((None, format!(
                    "approval {id} is pending, but it has a decision row or a decided_at: it was set back to pending behind the gateway's back; nobody may decide it until it is repaired"
                )));
            }
            if !unreadable.is_empty() {
                let cols: Vec<&str> = unreadable.iter().map(|d| d.as_str()).collect();
                out.push((None, format!(
                    "approval {id} is damaged: stored column(s) {} cannot be read; nobody may decide it until it is repaired",
                    cols.join(", ")
                )));
            }
        }
        // A settled approval's records may have been archived (never a pending one's): by a
        // run that recorded it, or by one before runs did (schema 61). Found by review: any
        // settled approval older than the cut-off was excused, one planted or edited too.
        let archived = status != "pending"
            && gone.before(*requested_at)
            && (recorded.has(id) || gone.unrecorded_before(*requested_at));
        match s.requested.remove(id) {
            None if !archived => out.push((
                None,
                format!("approval {id} has no approval.requested record"),
            )),
            Some((seq, data)) => {
                if let Some(what) = rec
                    .as_ref()
                    .and_then(|r| crate::integrity_tokens::terms_differ(r, &data))
                {
                    out.push((Some(seq), format!(
                        "approval {id} differs from its approval.requested record {seq} in {what}: the call or who must decide it was changed"
                    )));
                }
            }
            None => {}
        }
        match (s.settled.remove(id), status.as_str()) {
            (None, "pending") => {}
            (None, _) if archived && gone.before(decided_at.unwrap_or(*requested_at)) => {}
            (None, st) => out.push((None, format!(
                "approval {id} is {st}, but the audit log has no decision, expiry, cancellation or grant record for it"
            ))),
            (Some((seq, kind, rec)), st) => {
                let want = settles_to(&kind, rec.as_deref());
                if want.as_deref() != Some(st) {
                    out.push((Some(seq), format!(
                        "approval {id} is {st}, but audit record {seq} ({kind}) settled it as {}",
                        want.as_deref().unwrap_or("?")
                    )));
                }
            }
        }
    }
    let requested = s
        .requested
        .drain()
        .map(|(a, (seq, _))| (seq, a, "approval.requested"));
    let settling = s
        .settled
        .drain()
        .map(|(a, (seq, _, _))| (seq, a, "settling"));
    crate::integrity_tokens::orphans("approval", requested.chain(settling), &mut out);
    recorded.problems(conn, &mut out)?;
    crate::integrity_tokens::tokens(conn, &gone, &mut out)?;
    crate::integrity_tokens::grants(conn, &gone, &mut out)?;
    crate::integrity_people::decisions(conn, &mut out)?;
    crate::integrity_people::votes(conn, &gone, &mut out)?;
    crate::integrity_people::passkeys(conn, &mut out)?;
    let mut vouched = std::collections::BTreeSet::new();
    crate::integrity_pins::pins(conn, &gone, &mut out, &mut vouched)?;
    crate::integrity_pins::reviews(conn, &gone, &mut out, &mut vouched)?;
    crate::integrity_plans::plans(conn, &mut out)?;
    crate::integrity_plans::sessions(conn, &mut out)?;
    Ok(out)
}
