//! The WAL housekeeping of a batch (`Store::batch_then`, issue 13 §4): the store executor
//! answers a batch's calls as soon as its commit ended; the inline WAL checkpoint that commit
//! made due (`wal.rs`) runs after the answers, not in front of them, and still runs, so the
//! WAL stays bounded under batches as it does under single writes. SQLite only: the WAL is
//! SQLite's.

use crate::wal::WalRig;
use serde_json::json;

/// One batch writing past the WAL limit: its answer is given while the database file is still
/// small (the checkpoint that copies the WAL into it has not run: a checkpoint before the
/// answer would be the answers waiting for a copy and an fsync of the database file), and by
/// the time the batch returns that checkpoint ran (the file holds the pages). The answer
/// says the batch committed.
#[test]
fn a_batchs_answers_do_not_wait_for_its_wal_checkpoint_which_still_runs_after_them() {
    let WalRig {
        dir, s, wal, blob, ..
    } = WalRig::open();
    let db = dir.path().join("assent.db");
    let size = || std::fs::metadata(&db).map_or(0, |m| m.len());
    let before = size();
    let at_answer = s.batch_then(
        || {
            for i in 0..2_300 {
                let data = json!({"i": i, "blob": blob});
                s.append_audit("bench.blob", None, "bot", &data, 1).unwrap();
            }
        },
        |(), outcome| {
            assert_eq!(outcome, Ok(()), "the batch committed");
            size()
        },
    );
    let wal = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert!(
        wal > assent_store::wal::WAL_LIMIT || size() > before + (16 << 20),
        "the batch wrote past the WAL limit ({wal} bytes)"
    );
    assert!(
        at_answer < before + (1 << 20),
        "the answer waited for the checkpoint: the database file had grown from {before} to {at_answer} bytes when it was given"
    );
    assert!(
        size() > before + (16 << 20),
        "the checkpoint did not run after the answer: the database file is {} bytes",
        size()
    );
    assert_eq!(s.verify_audit().unwrap().records, 2_300);
}

/// Batches one after another, each writing a few MiB, as the executor runs them under
/// sustained load: the WAL file never passes the limit by more than one batch's pages, since
/// each batch's due checkpoint runs after its answers (without it, nothing would bound the WAL
/// under batches: over 40 MiB here), and every record is committed and chained.
#[test]
fn sustained_batches_keep_the_wal_bounded() {
    let mut rig = WalRig::open();
    for round in 0..20 {
        let (s, blob) = (&rig.s, &rig.blob);
        let ((), outcome) = s.batch(|| {
            for i in 0..256 {
                let data = json!({"round": round, "i": i, "blob": blob});
                s.append_audit("bench.blob", None, "bot", &data, 1).unwrap();
            }
        });
        assert_eq!(outcome, Ok(()));
        rig.assert_bounded();
    }
    assert_eq!(rig.s.verify_audit().unwrap().records, 20 * 256);
}
