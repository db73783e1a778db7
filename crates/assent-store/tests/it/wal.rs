//! The SQLite WAL checkpoint outside the write lock (issue 13 §4, `wal.rs`): the store's writer
//! no longer checkpoints inside its commits, so the WAL must still be kept bounded, by the
//! background checkpoint and, when that falls behind, by the committing writer. SQLite only:
//! the WAL is SQLite's.

use assent_store::Store;
use serde_json::json;
use std::path::PathBuf;

/// A SQLite store in a new temporary directory and what a WAL test measures it by: the WAL
/// file's path, an 8 KiB string to make records large, and the largest WAL file seen yet.
pub(crate) struct WalRig {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) s: Store,
    pub(crate) wal: PathBuf,
    pub(crate) blob: String,
    largest: u64,
}

impl WalRig {
    pub(crate) fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), 60_000, crate::wire()).unwrap();
        let wal = dir.path().join("assent.db-wal");
        let blob = "x".repeat(8 << 10);
        Self {
            dir,
            s,
            wal,
            blob,
            largest: 0,
        }
    }

    /// Measures the WAL file now: fails the test if it ever passed the limit by more than one
    /// group's (or batch's) pages, 4 MiB.
    #[track_caller]
    pub(crate) fn assert_bounded(&mut self) {
        let bound = assent_store::wal::WAL_LIMIT + (4 << 20);
        let now = std::fs::metadata(&self.wal).map_or(0, |m| m.len());
        self.largest = self.largest.max(now);
        assert!(
            self.largest <= bound,
            "the WAL reached {} bytes (bound {bound})",
            self.largest
        );
    }
}

/// Large records written one after another and from many threads at once: the WAL file never
/// passes the limit by more than one group's pages (without any checkpoint it would reach
/// about 40 MiB here, over twice the limit), and every record is committed and chained.
#[test]
fn the_wal_does_not_grow_without_bound_under_sustained_writes() {
    let mut rig = WalRig::open();
    for round in 0..10 {
        std::thread::scope(|scope| {
            for t in 0..8 {
                let (s, blob) = (&rig.s, &rig.blob);
                scope.spawn(move || {
                    for i in 0..32 {
                        let data = json!({"round": round, "t": t, "i": i, "blob": blob});
                        s.append_audit("bench.blob", None, "bot", &data, 1).unwrap();
                    }
                });
            }
        });
        rig.assert_bounded();
    }
    let report = rig.s.verify_audit().unwrap();
    assert_eq!((report.records, report.broken), (10 * 8 * 32, None));
    // What was written is in the database: a fresh store over the same file reads it all.
    let WalRig { dir, s, .. } = rig;
    drop(s);
    let again = Store::open(dir.path(), 60_000, crate::wire()).unwrap();
    assert_eq!(again.verify_audit().unwrap().records, 10 * 8 * 32);
}
