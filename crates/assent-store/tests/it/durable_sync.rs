//! How SQLite makes a commit durable (`.cargo/config.toml`, `LIBSQLITE3_FLAGS`): the bundled
//! SQLite is built with `HAVE_FDATASYNC`, so a commit syncs its WAL with fdatasync(2), never
//! fsync(2). fsync also writes the file's inode (its mtime) on every commit: on a journaled
//! ext4 that is a journal commit per transaction, measured 0.64 → 0.42 ms per sync
//! (BENCHMARKS.md). SQLite only (PostgreSQL syncs its own WAL); Linux only (seccomp).
//!
//! Each case opens a store (its key files are written with fsync, as a new file should be),
//! then commits on a thread of its own that a seccomp filter makes one system call fail on
//! (with EIO): the store's group commit runs a lone writer's commit on that writer's thread.

use assent_store::Store;
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
use serde_json::json;

/// Opens a SQLite store in a new directory, then commits one audit record on a thread where
/// `syscall` fails with EIO; what committing gave.
fn commit_where_fails(syscall: libc::c_long) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), 60_000, crate::wire()).unwrap();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let filter = SeccompFilter::new(
                    [(syscall, vec![])].into_iter().collect(),
                    SeccompAction::Allow,
                    SeccompAction::Errno(libc::EIO as u32),
                    std::env::consts::ARCH.try_into().unwrap(),
                )
                .unwrap();
                let program: BpfProgram = filter.try_into().unwrap();
                seccompiler::apply_filter(&program).unwrap();
                s.append_audit("sync.probe", None, "bot", &json!({"n": 1}), 1)
                    .map_err(|e| e.to_string())?;
                // What was committed is read back from the file.
                let report = s.verify_audit().map_err(|e| e.to_string())?;
                assert_eq!(report.records, 1);
                Ok(())
            })
            .join()
            .unwrap()
    })
}

/// A store commits with fsync(2) made to fail: nothing it does needs fsync. With SQLite built
/// without `HAVE_FDATASYNC` (the `.cargo/config.toml` line removed) the commit's WAL sync is
/// fsync and this fails with a disk I/O error.
#[test]
fn a_commit_is_made_durable_with_fdatasync_not_fsync() {
    commit_where_fails(libc::SYS_fsync).expect("a commit with fsync failing");
}

/// The converse, which shows the filter reaches the store's syncs: with fdatasync(2) failing,
/// the store cannot commit and says so (an error, not a panic, and no answer of success).
#[test]
fn a_commit_whose_sync_fails_is_refused() {
    let err = commit_where_fails(libc::SYS_fdatasync).expect_err("fdatasync failing");
    assert!(err.to_lowercase().contains("i/o"), "{err}");
}
