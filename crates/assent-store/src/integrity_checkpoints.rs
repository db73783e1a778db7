//! The checks of `assent audit verify` (`integrity.rs`) of the signed checkpoints — those
//! stored and those of a checkpoint file — against the chain, each judged under the audit
//! key of its range ([`crate::key_ranges`]: the key checked with, and before each recorded
//! take-over the key it replaced).

use crate::archive::Manifest;
use crate::audit::GENESIS;
use crate::checkpoint::{self, Checkpoint};
use crate::db::{self, Conn, OptionalExtension as _};
use crate::key_ranges::KeyRanges;
use std::path::Path;

/// A finding: the record (or checkpoint `seq`) concerned, when there is one, and why.
pub(crate) type Found = (Option<i64>, String);

/// Every checkpoint of `text` (a checkpoint file's JSONL, read before the snapshot it is
/// checked against) whose signature verifies under the key of its range in `ranges`, in the
/// file's order, and how many lines were skipped (not a checkpoint, or not signed by that
/// key).
pub(crate) fn parse_file(text: &str, ranges: &KeyRanges) -> (Vec<Checkpoint>, usize) {
    let mut signed = Vec::new();
    let mut skipped = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Checkpoint>(line) {
            Ok(cp) if cp.verifies(ranges.key_at(cp.seq)) => signed.push(cp),
            _ => skipped += 1,
        }
    }
    (signed, skipped)
}

/// Why the chain (ending at record `head_seq`) does not reach every checkpoint `cps` read
/// from `file`: none signed by `key`, or the first one the chain does not hold as signed.
///
/// Attack (found by review): only the file's newest checkpoint was checked, so after a
/// rollback or a rewrite the gateway, restarted, signed the forked chain and appended that to
/// the file; the older checkpoint that no longer held went unseen. Every one is checked: two
/// checkpoints at one record with different hashes cannot both hold.
pub(crate) fn file_problem(
    conn: Conn<'_>,
    file: &Path,
    cps: &[Checkpoint],
    key: &ed25519_dalek::VerifyingKey,
    anchors: &[Manifest],
    head_seq: i64,
) -> db::Result<Option<Found>> {
    if cps.is_empty() {
        return Ok(Some((
            None,
            format!(
                "{} holds no checkpoint signed by audit key {}",
                file.display(),
                checkpoint::public_key_hex(key)
            ),
        )));
    }
    for cp in cps {
        if let Some(reason) = against_chain(conn, cp, anchors, head_seq)? {
            return Ok(Some((
                Some(cp.seq),
                format!("{}: {reason}", file.display()),
            )));
        }
    }
    Ok(None)
}

/// Checks every stored checkpoint's signature under the key of its range in `ranges` and its
/// place in the chain. Errors: the database's.
pub(crate) fn check_stored(
    conn: Conn<'_>,
    stored: &[Checkpoint],
    anchors: &[Manifest],
    ranges: &KeyRanges,
    head_seq: i64,
) -> db::Result<Option<Found>> {
    for cp in stored {
        let key = ranges.key_at(cp.seq);
        let reason = if !cp.verifies(key) {
            Some(format!(
                "stored checkpoint at record {}: the signature does not verify under audit key {} (forged or altered)",
                cp.seq,
                checkpoint::public_key_hex(key)
            ))
        } else {
            against_chain(conn, cp, anchors, head_seq)?
                .map(|r| format!("stored checkpoint at record {}: {r}", cp.seq))
        };
        if let Some(reason) = reason {
            return Ok(Some((Some(cp.seq), reason)));
        }
    }
    Ok(None)
}

/// Why the (verified) chain ending at record `head_seq` does not reach `cp` exactly. A
/// checkpoint at an archived record is checked against the anchor ending there, if one does
/// (the others were checked against their records before those were archived).
pub(crate) fn against_chain(
    conn: Conn<'_>,
    cp: &Checkpoint,
    anchors: &[Manifest],
    head_seq: i64,
) -> db::Result<Option<String>> {
    let records = head_seq;
    if cp.seq > records {
        return Ok(Some(format!(
            "the chain ends at record {records}, but a checkpoint signed at {} covers {} records: records were removed from the end (or the audit table was emptied)",
            crate::rfc3339(cp.time),
            cp.seq
        )));
    }
    if cp.record_count != cp.seq {
        return Ok(Some(format!(
            "it was signed over {} records ending at record {}: the chain had a gap then",
            cp.record_count, cp.seq
        )));
    }
    let archived = anchors.last().map_or(0, |a| a.last_seq);
    let hash: Option<String> = if cp.seq == 0 {
        Some(GENESIS.to_string())
    } else if cp.seq <= archived {
        match anchors.iter().find(|a| a.last_seq == cp.seq) {
            Some(a) => Some(a.last_hash.clone()),
            None => return Ok(None),
        }
    } else {
        conn.query_row("SELECT hash FROM audit WHERE seq = ?1", [cp.seq], |r| {
            r.get(0)
        })
        .optional()?
    };
    Ok((hash.as_deref() != Some(cp.head_hash.as_str())).then(|| {
        format!(
            "record {}'s hash is not the head_hash signed at {}: the chain up to it was rewritten",
            cp.seq,
            crate::rfc3339(cp.time)
        )
    }))
}

/// For `assent audit verify` (`integrity.rs`): why the row at record 0 is no claim of the
/// empty chain ([`not_a_claim`]), naming the key it names and whether that is `key`, the
/// key the verification checks with (`--public-key`, else the keys directory's); `None`
/// when there is no such row or it is a claim, by any key. Found by review: every reader
/// skipped record 0, so a junk row planted there — which kept the first start from
/// claiming the database, letting a second key set serve it too — went unreported.
/// Errors: the database's.
pub(crate) fn claim_problem(
    conn: Conn<'_>,
    key: Option<&ed25519_dalek::VerifyingKey>,
) -> db::Result<Option<String>> {
    let Some(cp) = checkpoint::claim_row(conn)? else {
        return Ok(None);
    };
    let Some(why) = checkpoint::not_a_claim(&cp) else {
        return Ok(None);
    };
    let named = checkpoint::named_key(&cp);
    let whose = match key.map(checkpoint::public_key_hex) {
        Some(k) if named.ends_with(&k) => " (the key this verification checks with)".into(),
        Some(k) => format!(" (not the key this verification checks with, {k})"),
        None => String::new(),
    };
    Ok(Some(format!(
        "the row at record 0 of audit_checkpoints, where the database's claim for its audit key is kept, is no claim: {why}; it names {named}{whose}. A gateway whose audit key signed nothing here yet refuses to start on it; if it is damage, delete it (DELETE FROM audit_checkpoints WHERE seq = 0) and the next start claims the database again"
    )))
}
