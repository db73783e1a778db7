//! The storage kernel (`assent_store::db`) against a real SQLite file and a real Postgres
//! cluster: the same statements, through the same API, must answer the same on both.

use crate::Refused;
use crate::pgkit::{both, both_connected, cluster, column, fresh_pg, value};
use assent_store::db::{
    Backend, Change, Conn, Connection, Database, DbError, Heard, OptionalExtension, ToValue,
    ValueRef, dollar_params, listen, tuple,
};
use assent_store::params;
use std::ops::ControlFlow;
use std::sync::mpsc;
use std::time::Duration;

/// A small table in each dialect: the 0/1 column is BOOLEAN on Postgres, as in the store.
fn table(c: Conn<'_>) {
    c.batch(match c.backend() {
        Backend::Sqlite => {
            "CREATE TABLE k (id TEXT PRIMARY KEY, n INTEGER, flag INTEGER NOT NULL, note TEXT);
             CREATE TABLE seqd (seq INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT NOT NULL)"
        }
        Backend::Postgres => {
            "CREATE TABLE k (id TEXT COLLATE \"C\" PRIMARY KEY, n BIGINT, flag BOOLEAN NOT NULL, note TEXT COLLATE \"C\");
             CREATE TABLE seqd (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v TEXT NOT NULL)"
        }
    })
    .unwrap();
}

/// A fresh Postgres schema with [`table`]'s tables and one session of it; `None` when
/// `ASSENT_TEST_NO_PG=1` (the Postgres-only tests then pass without running).
fn pg_table() -> Option<(Database, Connection)> {
    let db = fresh_pg()?;
    let conn = db.connect().unwrap();
    table(conn.conn());
    Some((db, conn))
}

/// [`both_connected`] over [`table`]'s tables.
fn with_table(mut f: impl FnMut(&Database, Conn<'_>)) {
    both_connected(|db, c| {
        table(c);
        f(db, c)
    });
}

const INSERT: &str = "INSERT INTO k (id, n, flag, note) VALUES (?1, ?2, ?3, ?4)";

/// Inserts the row `id` into [`table`]'s `k` (n 1, flag false, no note) on `c`.
fn put(c: &Conn<'_>, id: &str) -> Result<usize, DbError> {
    c.execute(INSERT, params![id, 1i64, false, None::<String>])
}

#[test]
fn parameters_nulls_booleans_and_reads_answer_alike_on_both_backends() {
    with_table(|_, c| {
        assert!(c.has_table("k").unwrap() && !c.has_table("nope").unwrap());
        let none: Option<&str> = None;
        assert_eq!(c.execute(INSERT, params!["a", 1i64, true, "x"]).unwrap(), 1);
        assert_eq!(
            c.execute(INSERT, params!["b", None::<i64>, false, none])
                .unwrap(),
            1
        );
        assert_eq!(
            c.execute(INSERT, params!["B", 3i64, false, "x"]).unwrap(),
            1
        );
        assert_eq!(c.execute(INSERT, params!["_", 4i64, true, "y"]).unwrap(), 1);
        // By index and by name; a NULL reads as None; the boolean reads as a bool either way.
        let (n, flag, note): (Option<i64>, bool, Option<String>) = c
            .query_row("SELECT n, flag, note FROM k WHERE id = ?1", ["b"], |r| {
                Ok((r.get(0)?, r.get("flag")?, r.get("note")?))
            })
            .unwrap();
        assert_eq!((n, flag, note), (None, false, None));
        // The untyped-NULL filter in the form both engines accept.
        let by_note = |note: Option<&str>| -> Vec<String> {
            column(
                c,
                "SELECT id FROM k WHERE CAST(?1 AS TEXT) IS NULL OR note = ?1 ORDER BY id",
                [note],
            )
        };
        assert_eq!(by_note(Some("x")), ["B", "a"]);
        assert_eq!(
            by_note(None),
            ["B", "_", "a", "b"],
            "bytewise order on both"
        );
        // A bare boolean parameter.
        let flagged = |all: bool| -> Vec<String> {
            column(
                c,
                "SELECT id FROM k WHERE ?1 OR flag ORDER BY id",
                params![all],
            )
        };
        assert_eq!(flagged(false), ["_", "a"]);
        assert_eq!(flagged(true).len(), 4);
        // A list built at run time binds as a slice.
        let wanted = ["a", "B"];
        let list: Vec<&dyn ToValue> = wanted.iter().map(|s| s as &dyn ToValue).collect();
        let listed: Vec<String> = column(
            c,
            "SELECT id FROM k WHERE id IN (?1, ?2) ORDER BY id",
            &list[..],
        );
        assert_eq!(listed, ["B", "a"]);
        // No row: NoRows, made None by optional(); a row: Some.
        let missing = c.query_row("SELECT id FROM k WHERE id = ?1", ["zz"], |r| {
            r.get::<String>(0)
        });
        assert!(matches!(missing, Err(DbError::NoRows)));
        let none = c
            .query_row("SELECT id FROM k WHERE id = ?1", ["zz"], |r| {
                r.get::<String>(0)
            })
            .optional()
            .unwrap();
        assert_eq!(none, None);
        // ON CONFLICT DO NOTHING counts no row changed; RETURNING gives the row's value.
        let again = "INSERT INTO k (id, n, flag) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING";
        assert_eq!(c.execute(again, params!["a", 9i64, true]).unwrap(), 0);
        let n: i64 = value(c, "UPDATE k SET n = n + 1 WHERE id = ?1 RETURNING n", ["a"]);
        assert_eq!(n, 2);
        let seq: i64 = value(c, "INSERT INTO seqd (v) VALUES (?1) RETURNING seq", ["v"]);
        assert_eq!(seq, 1);
    });
}

#[test]
fn the_strict_reader_tells_null_integers_booleans_and_text_apart() {
    with_table(|db, c| {
        c.execute(INSERT, params!["a", 7i64, true, None::<String>])
            .unwrap();
        c.query_row("SELECT id, n, flag, note FROM k", [], |r| {
            assert_eq!(r.get_ref(0)?, ValueRef::Text(b"a"));
            assert_eq!(r.get_ref("n")?, ValueRef::Int(7));
            let flag = r.get_ref(2)?;
            match db {
                Database::Sqlite { .. } => assert_eq!(flag, ValueRef::Int(1)),
                Database::Postgres { .. } => assert_eq!(flag, ValueRef::Bool(true)),
            }
            assert_eq!(r.get_ref(3)?, ValueRef::Null);
            // A column read as the wrong type names the column and why.
            let e = r.get::<i64>("id").unwrap_err().to_string();
            assert!(
                e.contains("column id") && e.contains("expected an integer"),
                "{e}"
            );
            let e = r.get::<String>(9).unwrap_err().to_string();
            assert!(e.contains('9'), "{e}");
            Ok(())
        })
        .unwrap();
    });
}

#[test]
fn a_row_callback_may_run_other_statements_on_the_same_session() {
    with_table(|_, c| {
        c.execute(INSERT, params!["a", 1i64, false, "b"]).unwrap();
        c.execute(INSERT, params!["b", 2i64, true, None::<String>])
            .unwrap();
        let next = |note: &str| -> Result<i64, DbError> {
            c.query_row("SELECT n FROM k WHERE id = ?1", [note], |r| r.get(0))
        };
        let via_row = c
            .query_row("SELECT note FROM k WHERE id = ?1", ["a"], |r| {
                next(&r.get::<String>(0)?)
            })
            .unwrap();
        assert_eq!(via_row, 2);
        let via_map: Vec<i64> = c
            .query_map("SELECT note FROM k WHERE note IS NOT NULL", [], |r| {
                next(&r.get::<String>(0)?)
            })
            .unwrap();
        assert_eq!(via_map, [2]);
    });
}

#[test]
fn for_each_streams_rows_until_told_to_stop() {
    with_table(|_, c| {
        for i in 0..50i64 {
            c.execute(INSERT, params![format!("{i:03}"), i, false, None::<String>])
                .unwrap();
        }
        let mut seen = Vec::new();
        c.prepare_cached("SELECT n FROM k ORDER BY n")
            .unwrap()
            .for_each([], |r| {
                seen.push(r.get::<i64>(0)?);
                Ok(if seen.len() == 10 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                })
            })
            .unwrap();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        // The session is usable again after a stopped stream.
        let n: i64 = value(c, "SELECT count(*) FROM k", []);
        assert_eq!(n, 50);
    });
}

#[test]
fn a_write_commits_on_ok_and_rolls_back_on_error_unless_the_error_keeps_writes() {
    with_table(|_, c| {
        let failed: Result<(), DbError> = c.write(|tx| {
            put(tx, "gone")?;
            Err(DbError::Unusable("refused".into()))
        });
        assert!(failed.is_err());
        c.write(|tx| put(tx, "kept")).unwrap();
        let ids: Vec<String> = column(c, "SELECT id FROM k", []);
        assert_eq!(ids, ["kept"]);
        // A failed statement inside the closure rolls the whole write back on both engines.
        let dup: Result<usize, DbError> = c.write(|tx| {
            put(tx, "more")?;
            put(tx, "kept")
        });
        assert!(dup.is_err());
        let n: i64 = value(c, "SELECT count(*) FROM k", []);
        assert_eq!(n, 1);
        // An error that keeps its writes (an audited refusal) commits them.
        let refused: Result<(), Refused> = c.write(|tx| {
            put(tx, "audited")?;
            Err(Refused::Audited)
        });
        assert!(matches!(refused, Err(Refused::Audited)));
        let ids: Vec<String> = column(c, "SELECT id FROM k ORDER BY id", []);
        assert_eq!(ids, ["audited", "kept"]);
    });
}

#[test]
fn a_transaction_inside_a_write_is_refused_and_the_outer_write_rolls_back() {
    with_table(|_, c| {
        let nested: Result<(), DbError> = c.write(|tx| {
            put(tx, "outer")?;
            (**tx).write(|_| Ok::<_, DbError>(()))?;
            Ok(())
        });
        assert!(nested.is_err());
        let n: i64 = value(c, "SELECT count(*) FROM k", []);
        assert_eq!(n, 0, "nothing of the refused write was committed");
        // The session is usable for the next write.
        c.write(|tx| put(tx, "next")).unwrap();
    });
}

#[test]
fn a_read_snapshot_does_not_see_writes_committed_meanwhile() {
    both(|db| {
        let reader = db.connect().unwrap();
        let writer = db.connect().unwrap();
        table(reader.conn());
        let count = |c: Conn<'_>| -> i64 { value(c, "SELECT count(*) FROM k", []) };
        let (before, after) = reader
            .conn()
            .snapshot(|c| {
                let before = count(c);
                writer.conn().write(|tx| put(tx, "w")).unwrap();
                Ok((before, count(c)))
            })
            .unwrap();
        assert_eq!((before, after), (0, 0));
        assert_eq!(count(reader.conn()), 1, "seen once the snapshot ended");
    });
}

#[test]
fn the_write_lock_serialises_two_connections() {
    both(|db| {
        let first = db.connect().unwrap();
        table(first.conn());
        let (started_tx, started) = mpsc::channel();
        let (go_tx, go) = mpsc::channel::<()>();
        let db2 = db.clone();
        std::thread::scope(|s| {
            // Owned here, so a failing assertion drops it and the first writer gives up.
            let go_tx = go_tx;
            let a = s.spawn(move || hold_the_write_lock(&first, "a1", started_tx, go, Some("a2")));
            started.recv().unwrap();
            let b = s.spawn(move || {
                let second = db2.connect().unwrap();
                second
                    .conn()
                    .write(|tx| {
                        let seen: i64 = tx.query_row("SELECT count(*) FROM k", [], |r| r.get(0))?;
                        tx.execute(INSERT, params!["b", 3i64, false, None::<String>])?;
                        Ok::<_, DbError>(seen)
                    })
                    .unwrap()
            });
            wait_until_blocked(db);
            go_tx.send(()).unwrap();
            a.join().unwrap();
            // The second writer ran only after the first committed: it saw both of its rows.
            assert_eq!(b.join().unwrap(), 2);
        });
    });
}

/// One write on `conn` that inserts `id`, says so on `held`, and keeps the write lock until
/// `release` receives (if its sender is dropped instead, the write panics and rolls back);
/// then inserts `then` (when given) and commits.
fn hold_the_write_lock(
    conn: &Connection,
    id: &str,
    held: mpsc::Sender<()>,
    release: mpsc::Receiver<()>,
    then: Option<&str>,
) {
    conn.conn()
        .write(|tx| {
            put(tx, id)?;
            held.send(()).unwrap();
            release.recv().unwrap();
            then.map_or(Ok(0), |then| put(tx, then))
        })
        .unwrap();
}

/// Returns once a session waits for the write lock (Postgres: an ungranted advisory lock in
/// `pg_locks`); on SQLite, which shows no waiter, after giving the second writer a moment to
/// reach its `BEGIN IMMEDIATE` (the test's assertion holds either way; this only makes the
/// wait likely to be exercised).
fn wait_until_blocked(db: &Database) {
    match db {
        Database::Sqlite { .. } => std::thread::sleep(Duration::from_millis(200)),
        Database::Postgres { .. } => {
            let mut admin = cluster().unwrap().admin();
            let waiting =
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
            // A bound only so that a broken lock fails the test instead of hanging it.
            let give_up = std::time::Instant::now() + Duration::from_secs(30);
            while admin.query_one(waiting, &[]).unwrap().get::<_, i64>(0) == 0 {
                assert!(
                    std::time::Instant::now() < give_up,
                    "the second writer never waited for the write lock"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

#[test]
fn notify_reaches_a_listener_after_commit_and_never_after_rollback() {
    // Postgres only: SQLite serves one process, which wakes its own waiters directly.
    let Some(db) = fresh_pg() else { return };
    let Database::Postgres { url } = &db else {
        unreachable!()
    };
    let (tx, heard) = mpsc::channel();
    let listener = listen(url, move |h| {
        let _ = tx.send(h);
    })
    .unwrap();
    assert_eq!(
        heard.recv_timeout(Duration::from_secs(30)).unwrap(),
        Heard::Resync
    );
    let conn = db.connect().unwrap();
    let c = conn.conn();
    table(c);
    let rolled: Result<(), DbError> = c.write(|tx| {
        tx.changed(Change::Approval("rolled-back".into()));
        Err(DbError::Unusable("refused".into()))
    });
    assert!(rolled.is_err());
    c.write(|tx| {
        tx.changed(Change::Approval("kept".into()));
        tx.changed(Change::Approval("kept".into()));
        tx.changed(Change::Events);
        // Nothing is sent before the commit: the listener has heard nothing yet.
        assert!(heard.try_recv().is_err());
        Ok::<_, DbError>(())
    })
    .unwrap();
    let wait = Duration::from_secs(30);
    // The first thing heard is the committed write's change (the rolled back one never comes),
    // once however often it was reported, then the next.
    assert_eq!(
        heard.recv_timeout(wait).unwrap(),
        Heard::Changed(Change::Approval("kept".into()))
    );
    assert_eq!(
        heard.recv_timeout(wait).unwrap(),
        Heard::Changed(Change::Events)
    );
    // After its connection is cut, the listener reconnects and says so with a Resync.
    // Only this schema's listener: the cluster is shared with the tests running alongside,
    // whose listeners would otherwise hear a Resync they do not expect.
    let oid: i64 = value(
        c,
        "SELECT CAST(oid AS BIGINT) FROM pg_namespace WHERE nspname = current_schema()",
        [],
    );
    let mut admin = cluster().unwrap().admin();
    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN assent\\_{oid}\\_%'"
        ))
        .unwrap();
    assert_eq!(heard.recv_timeout(wait).unwrap(), Heard::Resync);
    c.write(|tx| {
        tx.changed(Change::Review("it's r1".into()));
        Ok::<_, DbError>(())
    })
    .unwrap();
    assert_eq!(
        heard.recv_timeout(wait).unwrap(),
        Heard::Changed(Change::Review("it's r1".into()))
    );
    drop(listener);
}

#[test]
fn numbered_parameters_become_dollar_parameters_outside_literals_and_identifiers() {
    let cases = [
        ("SELECT ?1", "SELECT $1"),
        (
            "UPDATE t SET a = ?2 WHERE id = ?1",
            "UPDATE t SET a = $2 WHERE id = $1",
        ),
        ("VALUES (?1,?2,?10,?36)", "VALUES ($1,$2,$10,$36)"),
        (
            "SELECT '?1', \"?2\" FROM t WHERE x = ?3",
            "SELECT '?1', \"?2\" FROM t WHERE x = $3",
        ),
        ("SELECT 'it''s ?1' || ?2", "SELECT 'it''s ?1' || $2"),
        (
            "SELECT \"a\"\"?1\" FROM t WHERE ?1",
            "SELECT \"a\"\"?1\" FROM t WHERE $1",
        ),
        (
            "SELECT json_extract(d, '$.x') WHERE y = ?1",
            "SELECT json_extract(d, '$.x') WHERE y = $1",
        ),
        ("SELECT 1 -- ?1 $\n, ?2", "SELECT 1 -- ?1 $\n, $2"),
        ("SELECT /* ?1 */ ?2", "SELECT /* ?1 */ $2"),
        ("SELECT 'é?1', ?1", "SELECT 'é?1', $1"),
    ];
    for (sql, want) in cases {
        assert_eq!(dollar_params(sql).unwrap(), want, "{sql}");
    }
    for bad in [
        "SELECT ?",
        "SELECT ?0",
        "SELECT $1",
        "SELECT ? , ?1",
        "SELECT ?a",
    ] {
        let e = dollar_params(bad).unwrap_err();
        assert!(e.contains("byte"), "{bad}: {e}");
    }
}

#[test]
fn text_with_a_nul_character_is_invalid_input_on_postgres_never_a_database_failure() {
    // An agent could otherwise turn each of its proposals into a 503 on Postgres, which
    // cannot store U+0000 in TEXT (SQLite can). The edge should refuse NUL; this is the
    // backstop: the error is `Invalid` (a 4xx), not `Database`.
    with_table(|db, c| {
        let out = put(&c, "a\0b");
        match db {
            Database::Sqlite { .. } => assert_eq!(out.unwrap(), 1),
            Database::Postgres { .. } => {
                let e = assent_store::StoreError::from(out.unwrap_err());
                assert!(matches!(e, assent_store::StoreError::Invalid(_)), "{e:?}");
            }
        }
    });
}

#[test]
fn each_postgres_session_bounds_its_lock_wait_and_idle_transactions() {
    // Postgres only: SQLite's counterpart is busy_timeout, and it has no idle sessions.
    let Some(db) = fresh_pg() else { return };
    let conn = db.connect().unwrap();
    let settings: (String, String) = conn
        .conn()
        .query_row(
            "SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')",
            [],
            tuple,
        )
        .unwrap();
    assert_eq!(settings, ("10s".to_string(), "10s".to_string()));
}

#[test]
fn stores_in_different_postgres_schemas_do_not_share_the_write_lock() {
    // Postgres only: the lock's second key is the schema, so parallel tests (and tenants) in
    // one database do not serialise each other. A shared lock would make the second write
    // wait for the first, which waits for the second: lock_timeout would fail it.
    let (Some(one), Some(two)) = (fresh_pg(), fresh_pg()) else {
        return;
    };
    let (a, b) = (one.connect().unwrap(), two.connect().unwrap());
    table(a.conn());
    table(b.conn());
    a.conn()
        .write(|tx| {
            put(tx, "a")?;
            std::thread::scope(|s| {
                s.spawn(move || b.conn().write(|tx| put(tx, "b")))
                    .join()
                    .unwrap()
            })
        })
        .unwrap();
}

#[test]
fn a_write_that_panics_rolls_back_and_frees_the_write_lock() {
    with_table(|db, c| {
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _: Result<(), DbError> = c.write(|tx| {
                put(tx, "half")?;
                panic!("a bug in the middle of a write");
            });
        }));
        assert!(panicked.is_err());
        // Another session can take the write lock at once, and nothing of the write is there.
        let other = db.connect().unwrap();
        let n: i64 = other
            .conn()
            .write(|tx| tx.query_row("SELECT count(*) FROM k", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(n, 0);
        c.write(|tx| put(tx, "next")).unwrap();
    });
}

#[test]
fn a_postgres_session_prepares_each_statement_text_once() {
    // Postgres only (rusqlite keeps SQLite's cache): without the kernel's cache every call
    // would pay a Parse round trip.
    let Some((_db, conn)) = pg_table() else {
        return;
    };
    let c = conn.conn();
    for i in 0..5i64 {
        c.execute(INSERT, params![format!("id{i}"), i, false, None::<String>])
            .unwrap();
    }
    let prepared: i64 = value(
        c,
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO k %'",
        [],
    );
    assert_eq!(prepared, 1);
}

/// Found by review: on Postgres a statement that fails inside a transaction aborts it, and a
/// COMMIT then silently rolls back. A write whose closure swallowed such an error used to be
/// reported committed with nothing kept (an audited refusal lost). Now a write reports `Ok`
/// only when its rows are there: on SQLite the failed statement leaves the rest to commit; on
/// Postgres the commit fails and nothing is kept.
#[test]
fn a_write_that_swallowed_a_failed_statement_is_never_reported_committed() {
    with_table(|_, c| {
        c.write(|tx| put(tx, "dup")).unwrap();
        let out: Result<(), DbError> = c.write(|tx| {
            put(tx, "x")?;
            let _ = tx.execute(INSERT, params!["dup", 2i64, false, None::<String>]);
            Ok(())
        });
        let n: i64 = value(c, "SELECT count(*) FROM k WHERE id = 'x'", []);
        assert_eq!(out.is_ok(), n == 1, "{out:?}");
        assert_eq!(out.is_err(), c.backend() == Backend::Postgres);
        // The session is usable afterwards.
        c.write(|tx| put(tx, "y")).unwrap();
    });
}

/// Found by review: a write that timed out waiting for the write lock left its Postgres
/// session in an aborted transaction, so every later statement of the process failed. Now the
/// timed-out write fails alone and the next write of the same session succeeds.
#[test]
fn a_write_that_times_out_on_the_write_lock_leaves_its_session_usable() {
    let Some((db, holder)) = pg_table() else {
        return;
    };
    let waiter = db.connect().unwrap();
    waiter.conn().batch("SET lock_timeout = '100ms'").unwrap();
    let (held_tx, held) = mpsc::channel();
    let (done_tx, done) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let h = s.spawn(move || hold_the_write_lock(&holder, "h", held_tx, done, None));
        held.recv().unwrap();
        let timed_out: Result<usize, DbError> = waiter.conn().write(|tx| put(tx, "w1"));
        assert!(timed_out.is_err());
        done_tx.send(()).unwrap();
        h.join().unwrap();
    });
    waiter.conn().write(|tx| put(tx, "w2")).unwrap();
    let ids: Vec<String> = waiter
        .conn()
        .query_map("SELECT id FROM k ORDER BY id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ids, ["h", "w2"]);
}

/// Found in the replica tests' logs: a Postgres failure was logged as the driver's bare
/// "db error", which says nothing to an operator. The store's errors carry the server's
/// severity, message and SQLSTATE.
#[test]
fn a_postgres_error_says_what_the_server_said() {
    let Some(db) = fresh_pg() else { return };
    let conn = db.connect().unwrap();
    let e = conn.conn().batch("SELEC 1").unwrap_err().to_string();
    assert!(
        e.contains("ERROR") && e.contains("syntax error") && e.contains("(42601)"),
        "{e}"
    );
}

#[test]
fn tuple_reads_the_first_columns_in_order_with_the_closures_errors_on_both_backends() {
    with_table(|_, c| {
        c.execute(INSERT, params!["a", 1i64, true, "x"]).unwrap();
        c.execute(INSERT, params!["b", None::<i64>, false, None::<String>])
            .unwrap();
        let sql = "SELECT id, n, flag, note FROM k ORDER BY id";
        let rows: Vec<(String, Option<i64>, bool, Option<String>)> =
            c.query_map(sql, [], tuple).unwrap();
        let by_hand: Vec<(String, Option<i64>, bool, Option<String>)> = c
            .query_map(sql, [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap();
        assert_eq!(rows, by_hand);
        assert_eq!(rows[1], ("b".into(), None, false, None));
        // Fewer columns than the row has: the first ones.
        let first: (String, Option<i64>) = c.query_row(sql, [], tuple).unwrap();
        assert_eq!(first, ("a".into(), Some(1)));
        // A column of another type: the error names it, as the closure's does.
        let text = "SELECT id, note FROM k ORDER BY id";
        let err = c.query_row(text, [], tuple::<(String, i64)>).unwrap_err();
        let hand = c
            .query_row(text, [], |r| Ok::<(String, i64), _>((r.get(0)?, r.get(1)?)))
            .unwrap_err();
        assert!(
            matches!(&err, DbError::Column { column, .. } if column == "1"),
            "{err}"
        );
        assert_eq!(err.to_string(), hand.to_string());
        // No row: NoRows.
        let none = c.query_row(
            "SELECT id, n FROM k WHERE id = 'z'",
            [],
            tuple::<(String, i64)>,
        );
        assert!(matches!(none, Err(DbError::NoRows)));
    });
}
