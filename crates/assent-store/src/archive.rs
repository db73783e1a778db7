//! The audit export format and its checks (issue 13 §3, retention): the signed
//! [`Manifest`] that ends an export file and is stored as the store's archive anchor
//! (`audit_archives`), reading the anchors back ([`stored`], [`check_anchors`]), and
//! verifying an export offline ([`verify_export`]) and against the store ([`against_store`]).
//! Writing exports and deleting what they hold is [`crate::retention`].
//!
//! An export is JSONL: one line per audit record ([`AuditRecord`], oldest first), then one
//! line `{"manifest": …}`. The manifest's signature is Ed25519 by the audit key over the
//! RFC 8785 canonical JSON of its other fields plus `"format": "assent-audit-export/1"`.

use crate::audit::{self, AuditRecord, GENESIS};
use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::key_ranges::KeyRanges;
use crate::kit::io;
use crate::sql::{self, from_row};
use assent_core::canonical::canonical_value;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The export format, part of what is signed.
pub const FORMAT: &str = "assent-audit-export/1";

/// The longest line [`verify_export`] reads (a record's `data` is bounded by the gateway's
/// `max_arguments_bytes`, at most 64 MiB, plus its escaping).
pub const MAX_LINE_BYTES: u64 = 160 * 1024 * 1024;

/// The signed manifest of one export, stored as the store's anchor once its records are
/// deleted. Times are Unix milliseconds; hashes and keys lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `seq` of the first record in the export.
    pub first_seq: i64,
    /// `seq` of the last record in the export.
    pub last_seq: i64,
    /// The first record's `prev_hash`: the previous export's `last_hash`, or [`GENESIS`].
    pub first_prev_hash: String,
    /// The last record's chain hash: the remaining chain's first record links to it.
    pub last_hash: String,
    /// Records in the export (`last_seq - first_seq + 1`).
    pub record_count: i64,
    /// SHA-256 of the bytes of the export's record lines (each with its `\n`).
    pub records_sha256: String,
    /// The export's file name (in `<data_dir>/archive`).
    pub file: String,
    /// Records older than this were due.
    pub cutoff: i64,
    /// When the export was written.
    pub archived_at: i64,
    /// The audit public key that signed it (64 hex; not trusted by the checks).
    pub public_key: String,
    /// Ed25519 signature of [`Manifest::signed_bytes`] (128 hex).
    pub signature: String,
    /// What the run wrote again at the chain's end before deleting, besides the standing
    /// passkey registrations every run carries: [`CARRIES_TOOLS`] (the records of the standing
    /// tool pins and reviews), or `""` for a run before schema 26. Signed when not empty; an
    /// export without it reads as `""`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub carries: String,
    /// Where the audit chain's word that every settlement is sealed stands (the `seq` a
    /// `settlement.sealing` record names, `sealing_marker.rs`), as of this run: the least
    /// place named by such a record the run archived whose seal holds, or the earliest of
    /// the stored anchors', whichever is earlier (migration 0055); `None` when neither. Signed when
    /// present; an export without it reads as `None`. `audit verify` holds every settlement
    /// after it to its seal, whatever is left in the live chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealing_since: Option<i64>,
    /// The digest of the approvals the run recorded as archived, with their seals
    /// ([`crate::archived_approvals::digest`], migration 0061): `audit verify` excuses a settled
    /// approval's missing records only for one a run recorded. Signed when present; `None` for
    /// a run before schema 61.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_sha256: Option<String>,
}

/// [`Manifest::carries`] of a run that carried the records of the standing tool pins and
/// reviews (`retention.rs` `carry_tools`).
pub const CARRIES_TOOLS: &str = "tools";

impl Manifest {
    /// What is signed: the canonical JSON of every field but `signature`, with `"format"`
    /// (`carries` only when not empty, `sealing_since` and `approvals_sha256` only when
    /// present, so a manifest from before any of them verifies as it was signed).
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut v = json!({"format": FORMAT, "first_seq": self.first_seq, "last_seq": self.last_seq,
            "first_prev_hash": self.first_prev_hash, "last_hash": self.last_hash,
            "record_count": self.record_count, "records_sha256": self.records_sha256,
            "file": self.file, "cutoff": self.cutoff, "archived_at": self.archived_at,
            "public_key": self.public_key});
        if !self.carries.is_empty() {
            v["carries"] = self.carries.clone().into();
        }
        if let Some(at) = self.sealing_since {
            v["sealing_since"] = at.into();
        }
        if let Some(d) = &self.approvals_sha256 {
            v["approvals_sha256"] = d.clone().into();
        }
        canonical_value(&v)
            .expect("strings and integers canonicalise")
            .into_bytes()
    }

    /// Whether the signature is valid under `key` (strict RFC 8032).
    pub fn verifies(&self, key: &VerifyingKey) -> bool {
        assent_core::checkpoint::signature_verifies(key, &self.signed_bytes(), &self.signature)
    }

    /// `self` with `public_key` and `signature` set: signed by `key`.
    pub(crate) fn signed(mut self, key: &SigningKey) -> Manifest {
        self.public_key = hex::encode(key.verifying_key().to_bytes());
        self.signature = hex::encode(key.sign(&self.signed_bytes()).to_bytes());
        self
    }
}

/// The columns of `audit_archives`, in [`Manifest`] order.
pub(crate) const COLUMNS: &str = "first_seq, last_seq, first_prev_hash, last_hash, record_count, records_sha256, file, cutoff, archived_at, public_key, signature, carries, sealing_since, approvals_sha256";

fn row(r: &db::Row<'_>) -> db::Result<Manifest> {
    from_row!(r => Manifest { first_seq, last_seq, first_prev_hash, last_hash, record_count,
        records_sha256, file, cutoff, archived_at, public_key, signature, carries, sealing_since,
        approvals_sha256 })
}

/// Every stored anchor, oldest first (none before schema 11).
pub fn stored(conn: Conn<'_>) -> db::Result<Vec<Manifest>> {
    if !conn.has_table("audit_archives")? {
        return Ok(Vec::new());
    }
    let sql = format!("SELECT {COLUMNS} FROM audit_archives ORDER BY last_seq");
    sql::rows(conn, &sql, [], row)
}

/// Checks the export of every anchor in `anchors` against it: the file its `file` names, in
/// the first of `dirs` that holds it, must verify ([`verify_export`], under `key`) and end in
/// the anchor's own manifest. Returns how many exports verified, and the first problem
/// (the anchor's `last_seq` and why): an export in none of `dirs` (its records' only copy is
/// gone, or kept elsewhere: a replica's own `data_dir/archive`), one that does not verify, or
/// one whose manifest is not the anchor's. A `file` that is not a plain file name is a
/// problem too (never looked up outside `dirs`), and so is a symbolic link (never followed).
/// Errors: I/O reading a file.
pub fn check_exports(
    anchors: &[Manifest],
    dirs: &[PathBuf],
    key: &VerifyingKey,
) -> Result<(usize, Option<(i64, String)>), StoreError> {
    check_exports_under(anchors, dirs, &KeyRanges::only(*key))
}

/// [`check_exports`] once the database was taken over: each export's manifest is verified
/// under the key its anchor verifies under ([`anchor_key`]; found by review: every export
/// was verified under the newest key only, so an export the replaced key wrote failed
/// `assent audit verify --archive-dir` after a take-over). Errors: as [`check_exports`].
pub(crate) fn check_exports_under(
    anchors: &[Manifest],
    dirs: &[PathBuf],
    ranges: &KeyRanges,
) -> Result<(usize, Option<(i64, String)>), StoreError> {
    let spans = ranges.spans();
    let mut verified = 0;
    for a in anchors {
        let key = &anchor_key(a, &spans).unwrap_or(*ranges.key_at(a.last_seq));
        let range = format!("records {}..{}", a.first_seq, a.last_seq);
        let plain = Path::new(&a.file)
            .file_name()
            .is_some_and(|n| n == a.file.as_str());
        if !plain {
            let why = format!(
                "the anchor of {range} names `{}`, which is not a file name",
                a.file
            );
            return Ok((verified, Some((a.last_seq, why))));
        }
        // The first regular file of that name, else the first entry of any kind (reported
        // below): a stray entry in one directory does not hide a good copy in the next. A
        // symbolic link is never followed (found by review: a link in an archive directory
        // made the check read, and vouch for, a file outside it).
        let candidates: Vec<PathBuf> = dirs.iter().map(|d| d.join(&a.file)).collect();
        let found = candidates
            .iter()
            .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
            .or_else(|| {
                candidates
                    .iter()
                    .find(|p| std::fs::symlink_metadata(p).is_ok())
            });
        let Some(path) = found.cloned() else {
            let why = format!(
                "the export of {range}, {}, is in none of the archive directories given ({}): the only copy of those records is missing",
                a.file,
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return Ok((verified, Some((a.last_seq, why))));
        };
        // Not a regular file (a FIFO would be waited on), or unreadable: a finding, not an
        // I/O error of the command (found by review).
        let rep = export_in_dir(&path).and_then(|f| verify_export_from(f, &path, key));
        let rep = match rep {
            Ok(rep) => rep,
            Err(e) => {
                let why = format!(
                    "the export of {range}, {}, cannot be read: {e}",
                    path.display()
                );
                return Ok((verified, Some((a.last_seq, why))));
            }
        };
        let why = match (rep.problem, rep.manifest) {
            (Some(p), _) => format!("the export of {range}, {}: {p}", path.display()),
            (None, Some(m)) if m == *a => {
                verified += 1;
                continue;
            }
            (None, _) => format!(
                "the export of {range}, {}, verifies but its manifest is not the anchor the store keeps for it",
                path.display()
            ),
        };
        return Ok((verified, Some((a.last_seq, why))));
    }
    Ok((verified, None))
}

/// Why the stored anchors are not one signed chain from genesis under `key`; `None` when
/// they are. Checks each signature, that the first starts at record 1 after [`GENESIS`], and
/// that each next one starts where the previous ended (`first_seq`, `first_prev_hash`).
pub fn check_anchors(anchors: &[Manifest], key: &VerifyingKey) -> Option<(i64, String)> {
    check_anchors_under(anchors, &KeyRanges::only(*key))
}

/// [`check_anchors`] once the database was taken over: an anchor must verify under the key
/// of the range its last record lies in, or under a key of a later range (a run of the key
/// that took over archives records of the key it replaced), never under an older one
/// ([`crate::key_ranges`]); and a replaced key's anchor only as the take-over that replaced
/// it found the archive ([`crate::key_ranges::Archived`]: up to its newest anchor then, each
/// as it was, by the digest of their signatures). Found by review: the stolen old key could
/// sign an anchor over the records before the take-over (with any cut-off) and so permit
/// deleting them unseen.
pub(crate) fn check_anchors_under(
    anchors: &[Manifest],
    ranges: &KeyRanges,
) -> Option<(i64, String)> {
    let spans = ranges.anchor_spans();
    let (mut seq, mut hash) = (0, GENESIS.to_string());
    let mut digest = Sha256::new();
    for a in anchors {
        digest.update(a.signature.as_bytes());
        digest.update(b"\n");
        let so_far = hex::encode(digest.clone().finalize());
        let judged = spans.iter().find(|(k, to, arch)| {
            *to > a.last_seq
                && a.verifies(k)
                && arch.as_ref().is_none_or(|(upto, d)| {
                    a.last_seq < *upto || (a.last_seq == *upto && so_far == *d)
                })
        });
        let why = if judged.is_none() {
            format!(
                "the archive anchor ending at record {}: its signature does not verify under audit key {}, nor under a replaced key as the take-over found the archive (forged or edited)",
                a.last_seq,
                hex::encode(ranges.key_at(a.last_seq).to_bytes())
            )
        } else if a.first_seq != seq + 1 || a.first_prev_hash != hash {
            format!(
                "the archive anchor ending at record {} does not continue the one before it (records {}..{} are unaccounted for)",
                a.last_seq,
                seq + 1,
                a.first_seq - 1
            )
        } else if a.record_count != a.last_seq - a.first_seq + 1 {
            format!(
                "the archive anchor ending at record {} has a wrong record count",
                a.last_seq
            )
        } else {
            seq = a.last_seq;
            hash = a.last_hash.clone();
            continue;
        };
        return Some((a.last_seq, why));
    }
    None
}

/// The digest of `anchors` ([`crate::key_ranges::Archived`]): SHA-256 over each one's
/// signature followed by `\n`, oldest first, 64 hex.
pub(crate) fn anchors_digest(anchors: &[Manifest]) -> String {
    let mut digest = Sha256::new();
    for a in anchors {
        digest.update(a.signature.as_bytes());
        digest.update(b"\n");
    }
    hex::encode(digest.finalize())
}

/// The key of `spans` ([`KeyRanges::spans`]) whose range reaches past anchor `a`'s last
/// record and under which `a` verifies, if any: the key its export is verified under
/// ([`check_exports_under`], after [`check_anchors_under`] accepted the anchors).
pub(crate) fn anchor_key(a: &Manifest, spans: &[(VerifyingKey, i64, i64)]) -> Option<VerifyingKey> {
    spans
        .iter()
        .find(|(k, _, to)| *to > a.last_seq && a.verifies(k))
        .map(|(k, ..)| *k)
}

/// Result of [`verify_export`].
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// Record lines read.
    pub records: i64,
    /// The manifest, when the file has one.
    pub manifest: Option<Manifest>,
    /// The first problem; `None`: the export verifies.
    pub problem: Option<String>,
}

/// Reads one line of at most [`MAX_LINE_BYTES`] into `buf`; `false` at the end of the file.
fn read_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    buf.clear();
    let n = std::io::Read::take(r, MAX_LINE_BYTES + 1).read_until(b'\n', buf)?;
    if n as u64 > MAX_LINE_BYTES {
        return Err(std::io::Error::other(format!(
            "a line is longer than {MAX_LINE_BYTES} bytes"
        )));
    }
    Ok(n > 0)
}

/// Verifies the export `path` offline under the audit public key `key`: every record line
/// links to the one before (seq, `prev_hash`, recomputed hash), the file ends with one
/// manifest whose signature verifies under `key`, and the manifest's range, hashes, count and
/// `records_sha256` are what the records are. Streams the file (one line in memory).
/// Errors: the file cannot be read (or has a line over [`MAX_LINE_BYTES`]); findings are in
/// [`ExportReport::problem`].
pub fn verify_export(path: &Path, key: &VerifyingKey) -> Result<ExportReport, StoreError> {
    let f = std::fs::File::open(path).map_err(io(path))?;
    verify_export_from(f, path, key)
}

/// The export at `path` inside an archive directory, opened for [`verify_export_from`]: not
/// through a symbolic link (`O_NOFOLLOW`), never waiting on a FIFO (`O_NONBLOCK`), and a
/// regular file by the handle's own `fstat`, so what was checked is what is read. Found by
/// review: the path was checked with `lstat` and then opened again, following a link swapped
/// in between (a FIFO hung the run; a link to a copy elsewhere was reported as in the
/// archive directory).
fn export_in_dir(path: &Path) -> Result<std::fs::File, StoreError> {
    use rustix::fs::{Mode, OFlags};
    let how = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let f = match rustix::fs::open(path, how, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::LOOP) => {
            return Err(StoreError::Invalid(
                "it is a symbolic link (refused: an export is read only inside its archive directory)".into(),
            ));
        }
        Err(e) => return Err(io(path)(e.into())),
    };
    match f.metadata().map_err(io(path))?.is_file() {
        true => Ok(f),
        false => Err(StoreError::Invalid("it is not a regular file".into())),
    }
}

/// [`verify_export`] over `f`, the export opened from `path` (named in errors).
fn verify_export_from(
    f: std::fs::File,
    path: &Path,
    key: &VerifyingKey,
) -> Result<ExportReport, StoreError> {
    let mut r = std::io::BufReader::new(f);
    let mut buf = Vec::new();
    let mut lines = Sha256::new();
    let mut rep = ExportReport {
        records: 0,
        manifest: None,
        problem: None,
    };
    let mut start: Option<(i64, String)> = None;
    let (mut expect, mut prev) = (0, String::new());
    let mut problem = None;
    while read_line(&mut r, &mut buf).map_err(io(path))? {
        if rep.manifest.is_some() {
            problem.get_or_insert("there are lines after the manifest".to_string());
            break;
        }
        let text = String::from_utf8_lossy(&buf);
        if let Ok(t) = serde_json::from_str::<Trailer>(&text) {
            rep.manifest = Some(t.manifest);
            continue;
        }
        let rec: AuditRecord = match serde_json::from_str(&text) {
            Ok(rec) => rec,
            Err(e) => {
                problem = Some(format!(
                    "line {} is neither an audit record nor the manifest: {e}",
                    rep.records + 1
                ));
                break;
            }
        };
        if start.is_none() {
            start = Some((rec.seq, rec.prev_hash.clone()));
            (expect, prev) = (rec.seq, rec.prev_hash.clone());
        }
        if let Some(why) = audit::break_in(&rec, expect, &prev) {
            problem = Some(format!("audit record {}: {why}", rec.seq));
            break;
        }
        lines.update(&buf);
        rep.records += 1;
        // A `seq` of i64::MAX in the file (its hash needs no key) is the last one there can be.
        let Some(next) = expect.checked_add(1) else {
            problem = Some(format!("audit record {}: no record can follow it", rec.seq));
            break;
        };
        expect = next;
        prev = rec.hash;
    }
    rep.problem = problem.or_else(|| {
        let start = start.unwrap_or((0, GENESIS.to_string()));
        manifest_problem(
            rep.manifest.as_ref(),
            key,
            start,
            (expect - 1, &prev),
            rep.records,
            &hex::encode(lines.finalize()),
        )
    });
    Ok(rep)
}

/// The manifest line of an export.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Trailer {
    manifest: Manifest,
}

/// Why manifest `m` does not describe records `start.0 ..= last.0` (first `prev_hash`
/// `start.1`, last hash `last.1`, `n` records, lines hashing to `sha`) or is not signed by `key`.
fn manifest_problem(
    m: Option<&Manifest>,
    key: &VerifyingKey,
    start: (i64, String),
    last: (i64, &str),
    n: i64,
    sha: &str,
) -> Option<String> {
    let Some(m) = m else {
        return Some(
            "the export has no manifest (truncated, or not an assent audit export)".into(),
        );
    };
    if !m.verifies(key) {
        return Some(format!(
            "the manifest's signature does not verify under audit key {} (signed by another key, forged, or edited)",
            hex::encode(key.to_bytes())
        ));
    }
    let checks = [
        (
            m.first_seq == start.0 && m.first_prev_hash == start.1,
            "its first record",
        ),
        (
            m.last_seq == last.0 && m.last_hash == last.1,
            "its last record",
        ),
        (m.record_count == n, "its record count"),
        (m.records_sha256 == sha, "the SHA-256 of its record lines"),
    ];
    checks.iter().find(|c| !c.0).map(|c| {
        format!(
            "the signed manifest does not match {} (records {}..{} were edited, removed or added)",
            c.1, m.first_seq, m.last_seq
        )
    })
}

/// Why the store's anchors do not include `m` exactly (the export's manifest); `None` when
/// the store has an anchor equal to it. A store without one never deleted these records
/// (say, the export of a run that lost a race or crashed before its transaction).
pub fn against_store(conn: Conn<'_>, m: &Manifest) -> db::Result<Option<String>> {
    let stored = stored(conn)?;
    Ok(match stored.iter().find(|a| a.last_seq == m.last_seq) {
        Some(a) if a == m => None,
        Some(_) => Some(format!(
            "the store's archive anchor at record {} differs from this export's manifest (another export, or an edited anchor)",
            m.last_seq
        )),
        None => Some(format!(
            "the store has no archive anchor for records {}..{}: these records were not deleted on the strength of this export",
            m.first_seq, m.last_seq
        )),
    })
}

/// What audit retention took out of the store ([`crate::retention`]): records older than the newest
/// anchor's `cutoff`, in a run at `archived_at`, of nothing live then (no pending approval, no
/// token neither used nor expired; a grant neither revoked nor expired had its `grant.created`
/// carried). A state row whose records are missing passes only when it fits that; anything
/// else still needs its records.
pub(crate) struct Gone {
    /// The latest `(cutoff, archived_at)` of the anchors; `None`: nothing was archived.
    newest: Option<(i64, i64)>,
    /// The latest `cutoff` of the anchors of runs that did not carry the tool pins' and
    /// reviews' records ([`CARRIES_TOOLS`]); `None`: every run carried them (or none ran).
    tools_uncarried: Option<i64>,
    /// The latest `cutoff` of the anchors of runs that did not record the approvals they
    /// archived ([`Manifest::approvals_sha256`], schema 61); `None`: every run did (or none).
    approvals_unrecorded: Option<i64>,
}

impl Gone {
    /// Read from the stored archive anchors.
    pub(crate) fn of(conn: Conn<'_>) -> db::Result<Gone> {
        let all = stored(conn)?;
        let cutoff = all.iter().map(|a| a.cutoff).max();
        let at = all.iter().map(|a| a.archived_at).max();
        let tools_uncarried = all
            .iter()
            .filter(|a| a.carries != CARRIES_TOOLS)
            .map(|a| a.cutoff)
            .max();
        let approvals_unrecorded = all
            .iter()
            .filter(|a| a.approvals_sha256.is_none())
            .map(|a| a.cutoff)
            .max();
        Ok(Gone {
            newest: cutoff.zip(at),
            tools_uncarried,
            approvals_unrecorded,
        })
    }
    /// Whether a record written at `t` may have been archived.
    pub(crate) fn before(&self, t: i64) -> bool {
        self.newest.is_some_and(|(cutoff, _)| t < cutoff)
    }
    /// Whether a tool pin or review dated `t` may have lost its records to a run that did not
    /// carry them (a run before schema 26); runs since write them again, so a row they cover
    /// needs its records.
    pub(crate) fn tools_before(&self, t: i64) -> bool {
        self.tools_uncarried.is_some_and(|cutoff| t < cutoff)
    }
    /// Whether a settled approval requested at `t` may have lost its records to a run that
    /// did not record the approvals it archived (a run before schema 61); runs since record
    /// each ([`crate::archived_approvals`]), and only those are excused.
    pub(crate) fn unrecorded_before(&self, t: i64) -> bool {
        self.approvals_unrecorded.is_some_and(|cutoff| t < cutoff)
    }
    /// Whether something that ended at `t` (used, expired, revoked) had ended by the run.
    pub(crate) fn ended(&self, t: Option<i64>) -> bool {
        matches!((self.newest, t), (Some((_, at)), Some(t)) if t <= at)
    }
}
