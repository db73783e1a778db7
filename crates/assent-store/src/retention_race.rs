//! The deleting transaction of a retention run against a database writer who edits an old
//! record between the export and that transaction (found by review). The interleaving is
//! staged here, inside the crate, because no public call stops between the two steps: the
//! export is written, the record edited behind the store's back, then [`super::commit`] runs.

use super::{commit, plan};
use crate::checkpoint::Due;
use crate::store::Store;
use crate::test_kit::Bare;

/// A day in Unix milliseconds.
const DAY: i64 = 86_400_000;
use serde_json::json;

/// Attack: between the export (which checked every record's hash) and the deleting
/// transaction, a writer rewrites an archived record's kind and data, leaving its `hash`
/// alone, into a forged `audit.key_replaced` naming a key of theirs. Before the fix the
/// transaction compared `seq:hash` pairs only, so it carried the forged take-over into the
/// live chain with a fresh hash and signed it with the gateway's audit key. Now the whole
/// record is checked under the write lock: the run is refused, nothing is carried or deleted.
#[test]
fn a_record_edited_between_the_export_and_the_delete_is_refused_not_carried() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), 60_000, std::sync::Arc::new(Bare)).unwrap();
    for i in 0..4 {
        s.append_audit("note", None, "test", &json!({ "i": i }), 1_000 + i)
            .unwrap();
    }
    // A checkpoint above the old records: what a running gateway has (every 60 s).
    s.checkpoint_if_due(Due::NOW, 2_000).unwrap().unwrap();
    s.append_audit("note", None, "test", &json!({}), 10 * DAY)
        .unwrap();
    let (cutoff, now) = (5 * DAY, 10 * DAY);
    let key = s.audit_key.verifying_key();
    let (p, ranges) = {
        let guard = s.lock();
        let conn = guard.conn();
        let p = plan(conn, cutoff, now, 1_000)
            .unwrap()
            .expect("records due");
        (
            p,
            crate::key_ranges::key_ranges(conn, &key).unwrap().unwrap(),
        )
    };
    let arch = dir.path().join("archive");
    let arch = crate::archive_dir::ArchiveDir::open_or_make(&arch).unwrap();
    let (manifest, _partial, pairs) = s
        .export(&arch, &p, (&[], &ranges), cutoff, now)
        .unwrap()
        .expect("exported");
    let theirs = hex::encode([7u8; 32]);
    let forged = json!({"public_key": hex::encode(key.as_bytes()), "replaces": theirs,
        "seq": 0, "archived_through": i64::MAX});
    let before: i64 = count(&s, "SELECT count(*) FROM audit");
    s.lock()
        .conn()
        .execute(
            "UPDATE audit SET kind = 'audit.key_replaced', data = ?1 WHERE seq = 2",
            [forged.to_string()],
        )
        .unwrap();
    let e = s
        .write(|tx| commit(tx, (&p, &s.audit_key), &manifest, &pairs))
        .unwrap_err();
    assert!(
        e.to_string().contains("audit record 2 changed while"),
        "{e}"
    );
    assert_eq!(count(&s, "SELECT count(*) FROM audit"), before);
    let carried: i64 = count(
        &s,
        "SELECT count(*) FROM audit WHERE kind = 'audit.key_replaced' AND seq > 2",
    );
    assert_eq!(carried, 0, "the forged take-over was carried");
}

fn count(s: &Store, sql: &str) -> i64 {
    s.lock().conn().query_row(sql, [], |r| r.get(0)).unwrap()
}
