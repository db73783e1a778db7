//! One key set per database from the first start, and token keys no rotation loses (found by
//! review). Stores given key sets of their own over a fresh database — no checkpoint yet to
//! refuse — all opened and served, each signing checkpoints the others ignored. Opening
//! claims the database for its audit key in the serialised write transaction, so of several
//! at once exactly one opens; on both backends. `Store::open_database` with a keys directory
//! per store stands for a replica. Token key rotations run at once keep every key.

use crate::pgkit::both;
use assent_store::Store;
use assent_store::db::Database;
use std::sync::{Arc, Barrier};

/// Opens `db` with a key set of its own in `keys` (made now), after `start` lets every opener go.
fn open_own(db: &Database, keys: &std::path::Path, start: &Barrier) -> Result<Store, String> {
    assent_store::keys::init(keys).unwrap();
    start.wait();
    Store::open_database(keys, keys, db, 60_000, crate::wire()).map_err(|e| e.to_string())
}

#[test]
fn stores_with_their_own_key_sets_opening_a_fresh_database_at_once_only_one_serves_it() {
    both(|db| {
        const N: usize = 4;
        let dirs: Vec<_> = (0..N).map(|_| tempfile::tempdir().unwrap()).collect();
        let start = Arc::new(Barrier::new(N));
        let opened: Vec<Result<Store, String>> = std::thread::scope(|s| {
            let runs: Vec<_> = dirs
                .iter()
                .map(|d| {
                    let start = start.clone();
                    s.spawn(move || open_own(db, d.path(), &start))
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let served: Vec<usize> = (0..N).filter(|&i| opened[i].is_ok()).collect();
        assert_eq!(
            served.len(),
            1,
            "{db:?}: {:?}",
            opened.iter().map(|o| o.as_ref().err()).collect::<Vec<_>>()
        );
        let winner = served[0];
        let key = |i: usize| {
            let k = assent_store::checkpoint::read_key(dirs[i].path()).unwrap();
            assent_store::checkpoint::public_key_hex(&k.unwrap().verifying_key())
        };
        for (i, o) in opened.iter().enumerate().filter(|(i, _)| *i != winner) {
            let e = o.as_ref().err().unwrap();
            assert!(
                e.contains("signed none") && e.contains(&key(winner)) && e.contains(&key(i)),
                "{e}"
            );
        }
        // The claim is no checkpoint of a record: none listed, and the winner reopens.
        let s = opened.into_iter().nth(winner).unwrap().unwrap();
        assert!(s.checkpoints().unwrap().is_empty());
        assert_eq!(s.latest_checkpoint().unwrap(), None);
        drop(s);
        let again = Store::open_database(
            dirs[winner].path(),
            dirs[winner].path(),
            db,
            60_000,
            crate::wire(),
        );
        assert!(again.is_ok(), "{:?}", again.err());
        // A loser is still refused on its own, later.
        let loser = (winner + 1) % N;
        let e = Store::open_database(
            dirs[loser].path(),
            dirs[loser].path(),
            db,
            60_000,
            crate::wire(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("signed none"), "{e}");
    });
}

/// The claim keeps `assent audit verify` passing: over the empty chain, and once records and
/// checkpoints follow (SQLite, verified offline).
#[test]
fn a_claimed_database_still_verifies() {
    use assent_store::checkpoint::Due;
    use assent_store::integrity::{VerifyOptions, verify_offline};
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), 60_000, crate::wire()).unwrap();
    let opts = VerifyOptions {
        public_key: None,
        checkpoint_file: None,
        archive_dirs: &[],
    };
    let rep = verify_offline(dir.path(), &opts).unwrap();
    assert_eq!(rep.problem, None);
    assert_eq!(rep.checkpoints, 0);
    crate::pending(&s, 5, 1_000, 10_000, false);
    let cp = s.checkpoint_if_due(Due::NOW, 2_000).unwrap().unwrap();
    assert!(cp.seq > 0);
    let rep = verify_offline(dir.path(), &opts).unwrap();
    assert_eq!(rep.problem, None);
    assert_eq!((rep.checkpoints, rep.unsigned_records), (1, 0));
}

/// Attack (found by review): `assent keys rotate-token-key` checked for a free
/// `token-retired-<ms>.key` name, then renamed over it, and read the current key without
/// keeping other rotations out. Rotations at once (eight, a few rounds, started together)
/// replaced retired keys, and retired one current key twice while the key another had made
/// was replaced unretired (its tokens then failed everywhere). Now every key that was current
/// is kept: the one in `token.key`, or a retired file of its own holding it.
#[test]
fn token_key_rotations_run_at_once_lose_no_key() {
    use assent_core::token::TokenSigner;
    const N: usize = 8;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    assent_store::keys::init(dir).unwrap();
    let kid_of = |p: &std::path::Path| {
        let seed: [u8; 32] = std::fs::read(p).unwrap().try_into().unwrap();
        TokenSigner::from_seed(&seed).kid().to_string()
    };
    let mut current = vec![kid_of(&dir.join("token.key"))];
    for _ in 0..4 {
        let start = Arc::new(Barrier::new(N));
        let done: Vec<_> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..N)
                .map(|_| {
                    let start = start.clone();
                    s.spawn(move || {
                        start.wait();
                        assent_store::keys::rotate_token_key(dir).unwrap()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        current.extend(done.iter().map(|d| d.kid.clone()));
        for d in &done {
            assert_eq!(kid_of(&dir.join(&d.retired_file)), d.retired_kid);
        }
    }
    let mut kept: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "key") && !p.ends_with("audit.key"))
        .map(|p| kid_of(&p))
        .collect();
    kept.sort();
    current.sort();
    assert_eq!(kept, current, "every key that was current is kept, once");
}

/// The audit public key (64 hex) of the key set in `dir`.
fn audit_hex(dir: &std::path::Path) -> String {
    let k = assent_store::checkpoint::read_key(dir).unwrap().unwrap();
    assent_store::checkpoint::public_key_hex(&k.verifying_key())
}

/// `assent audit verify` of `db` under the audit key of `keys`: the problem it finds.
fn verify_problem(db: &Database, keys: &std::path::Path) -> Option<(Option<i64>, String)> {
    use assent_store::integrity::{VerifyOptions, verify_database};
    let opts = VerifyOptions {
        public_key: None,
        checkpoint_file: None,
        archive_dirs: &[],
    };
    let rep = verify_database(db, keys, &opts).unwrap();
    rep.problem.map(|p| (p.seq, p.reason))
}

/// Attack (found by review): whoever can write the database plants a junk row (one that does
/// not verify) at record 0 of `audit_checkpoints` before the first start. The first start's
/// claim found the row taken and dropped that; the junk was passed over as not verifying, so
/// the database was served claimed by no key set, and a second replica with keys of its own
/// served it too; `assent audit verify` read no row 0. Now every start is refused, naming the
/// row and the way out, `audit verify` reports it (saying whether it names the key it
/// checks with), and once the row is deleted the first start claims the database again.
#[test]
fn a_junk_row_planted_at_record_0_of_a_fresh_database_claims_it_for_no_key_set() {
    both(|db| {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assent_store::keys::init(a.path()).unwrap();
        assent_store::keys::init(b.path()).unwrap();
        let conn = db.connect().unwrap();
        assent_store::migrate::migrate(conn.conn(), "test").unwrap();
        // Junk naming A's key: its signature is no signature.
        let junk = format!(
            "INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) VALUES (0, '{}', 0, 1, '{}', '{}')",
            assent_store::audit::GENESIS,
            audit_hex(a.path()),
            "00".repeat(64)
        );
        conn.conn().execute(&junk, []).unwrap();
        for keys in [a.path(), b.path()] {
            let e = Store::open_database(keys, keys, db, 60_000, crate::wire())
                .err()
                .expect("a start over the junk row")
                .to_string();
            assert!(
                e.contains("row at record 0")
                    && e.contains("DELETE FROM audit_checkpoints WHERE seq = 0")
                    && e.contains("does not verify")
                    && e.contains(&audit_hex(keys)),
                "{db:?}: {e}"
            );
        }
        let (seq, why) = verify_problem(db, a.path()).expect("row 0 reported");
        assert_eq!(seq, Some(0), "{why}");
        assert!(
            why.contains(&audit_hex(a.path()))
                && why.contains("(the key this verification checks with)"),
            "{why}"
        );
        let (_, why) = verify_problem(db, b.path()).expect("row 0 reported");
        assert!(
            why.contains(&format!(
                "not the key this verification checks with, {}",
                audit_hex(b.path())
            )),
            "{why}"
        );
        // Damage deleted: A claims the database, and B is refused as another key set.
        conn.conn()
            .execute("DELETE FROM audit_checkpoints WHERE seq = 0", [])
            .unwrap();
        drop(Store::open_database(a.path(), a.path(), db, 60_000, crate::wire()).unwrap());
        assert_eq!(verify_problem(db, a.path()), None);
        let e = Store::open_database(b.path(), b.path(), db, 60_000, crate::wire())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("signed none") && e.contains(&audit_hex(a.path())),
            "{e}"
        );
    });
}

/// Attack (found by review): the start-up check looks at the newest 1000 rows naming another
/// key, passing over those that do not verify; with 1000 junk rows planted above another key
/// set's claim, a second key set found nothing to refuse, its own claim found the row taken,
/// and it served. The row at record 0 is read again when the claim stores nothing: another
/// key's claim refuses the start, naming that key.
#[test]
fn another_key_sets_claim_behind_a_thousand_junk_rows_still_refuses_a_second_key_set() {
    both(|db| {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assent_store::keys::init(a.path()).unwrap();
        assent_store::keys::init(b.path()).unwrap();
        drop(Store::open_database(b.path(), b.path(), db, 60_000, crate::wire()).unwrap());
        let conn = db.connect().unwrap();
        let junk = format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) SELECT i, '{g}', i, 1, '{k}', '{s}' FROM n",
            g = assent_store::audit::GENESIS,
            k = "11".repeat(32),
            s = "00".repeat(64)
        );
        conn.conn().execute(&junk, []).unwrap();
        let e = Store::open_database(a.path(), a.path(), db, 60_000, crate::wire())
            .err()
            .expect("a second key set served the database")
            .to_string();
        assert!(
            e.contains("signed none")
                && e.contains(&audit_hex(a.path()))
                && e.contains(&audit_hex(b.path())),
            "{db:?}: {e}"
        );
    });
}

/// Attack (found by review): a store whose audit key another key set took over from
/// (`audit-key-replaces`) kept writing and signing under it until it was restarted; and the
/// take-over was recorded only by the new key's first due checkpoint, which could not even be
/// stored while the old key's checkpoint covered the head. The new key's open records it at
/// once (an `audit.key_replaced` record and a checkpoint past the old key's), in the
/// serialised write transaction; from then on the old store's writes and checkpoints are
/// refused, naming the new key, and its readiness is `audit_key_replaced`; on both backends.
#[test]
fn a_store_whose_audit_key_was_taken_over_writes_and_signs_nothing_more() {
    use assent_store::checkpoint::{Due, public_key_hex, read_key};
    both(|db| {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for d in [&a, &b] {
            assent_store::keys::init(d.path()).unwrap();
        }
        let key = |d: &tempfile::TempDir| {
            public_key_hex(&read_key(d.path()).unwrap().unwrap().verifying_key())
        };
        let (ka, kb) = (key(&a), key(&b));
        // Over SQLite the data directory is the file's (readiness looks at the file there).
        let data = match db {
            Database::Sqlite { path } => path.parent().unwrap().to_path_buf(),
            Database::Postgres { .. } => a.path().to_path_buf(),
        };
        let sa = Store::open_database(&data, a.path(), db, 60_000, crate::wire()).unwrap();
        let note = serde_json::json!({"n": 1});
        sa.append_audit("test.note", None, "t", &note, 1).unwrap();
        // A's checkpoint covers the head: the take-over cannot sign at the same record.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!(sa.checkpoint_if_due(Due::NOW, now).unwrap().is_some());
        std::fs::write(b.path().join("audit-key-replaces"), format!("{ka}\n")).unwrap();
        let sb = Store::open_database(&data, b.path(), db, 60_000, crate::wire()).unwrap();
        let newest = sb.checkpoints().unwrap().pop().unwrap();
        assert_eq!(newest.public_key, kb, "{db:?}: the take-over is not signed");
        let e = sa
            .append_audit("test.note", None, "t", &note, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("was replaced") && e.contains(&kb), "{db:?}: {e}");
        sb.append_audit("test.note", None, "t", &note, 3).unwrap();
        let e = sa
            .checkpoint_if_due(Due::NOW, now + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("was replaced") && e.contains(&kb), "{db:?}: {e}");
        let ready = sa.readiness().problem.unwrap();
        assert_eq!(ready.reason, "audit_key_replaced", "{db:?}");
        assert!(ready.message.contains(&ka) && ready.message.contains(&kb));
        assert_eq!(sb.readiness().problem, None, "{db:?}");
    });
}

/// Found by review: one damaged retired token key failed every read of the keys, refusing
/// start-up, even a file retired long after its tokens expired. A retired key's file older
/// than the longest token lifetime and its grace is not read; a damaged one still in its
/// window still stops the store (a key it may need is gone), naming the file.
#[test]
fn a_damaged_retired_key_stops_the_store_only_while_its_tokens_may_live() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    drop(Store::open(dir, 60_000, crate::wire()).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let damaged = |at: i64| {
        let p = dir.join(format!("token-retired-{at}.key"));
        std::fs::write(&p, b"short").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    // Two days ago: past the longest lifetime (one day) and its minute of grace.
    let old = damaged(now - 2 * 86_400_000);
    assert!(Store::open(dir, 60_000, crate::wire()).is_ok());
    std::fs::remove_file(old).unwrap();
    damaged(now - 3_600_000);
    let err = Store::open(dir, 60_000, crate::wire())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("a token key is a 32-byte Ed25519 seed"),
        "{err}"
    );
}
