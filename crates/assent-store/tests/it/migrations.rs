//! The migration runner on both backends: a fresh run, an idempotent re-run, the refusal of a
//! newer schema or an edited migration, the adoption of a SQLite file migrated before the
//! runner existed, and the store's own statements against the schema both dialects build.

use crate::pgkit::{both, both_connected, fresh_pg, fresh_sqlite};
use assent_store::db::{Backend, Conn, Database, tuple};
use assent_store::migrate::{MIGRATIONS, SchemaState, latest, migrate, schema_state};

/// Every table the numbered migrations create.
const TABLES: &[&str] = &[
    "approvals",
    "decisions",
    "tokens",
    "audit",
    "grants",
    "usage",
    "aaep_subscriptions",
    "aaep_events",
    "clarifications",
    "plans",
    "tool_servers",
    "tool_pins",
    "tool_reviews",
    "webhook_cursors",
    "webhook_dead_letters",
    "card_links",
    "audit_checkpoints",
    "cancelled_sessions",
    "confirm_context",
    "assent_schema",
];

#[test]
fn a_fresh_database_is_migrated_once_and_reopening_applies_nothing() {
    both(|db| {
        let conn = db.connect().unwrap();
        let c = conn.conn();
        assert_eq!(
            schema_state(c).unwrap(),
            SchemaState::Behind {
                at: 0,
                latest: latest()
            }
        );
        let all: Vec<u32> = (1..=latest()).collect();
        assert_eq!(migrate(c, "db").unwrap(), all);
        for t in TABLES {
            assert!(c.has_table(t).unwrap(), "{t} on {db:?}");
        }
        assert_eq!(schema_state(c).unwrap(), SchemaState::Current(latest()));
        drop(conn);
        let again = db.connect().unwrap();
        assert_eq!(migrate(again.conn(), "db").unwrap(), Vec::<u32>::new());
        let rows: Vec<(i64, String)> = again
            .conn()
            .query_map(
                "SELECT version, name FROM assent_schema ORDER BY version",
                [],
                tuple,
            )
            .unwrap();
        let want: Vec<(i64, String)> = MIGRATIONS
            .iter()
            .map(|m| (m.version.into(), m.name.to_string()))
            .collect();
        assert_eq!(rows, want);
        if let Database::Sqlite { .. } = db {
            let v: i64 = again
                .conn()
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap();
            assert_eq!(
                v,
                i64::from(latest()),
                "older binaries still read user_version"
            );
        }
    });
}

#[test]
fn two_processes_migrating_at_once_apply_each_migration_once() {
    both(|db| {
        let runs: Vec<Vec<u32>> = std::thread::scope(|s| {
            let run = || {
                s.spawn(|| {
                    let conn = db.connect().unwrap();
                    migrate(conn.conn(), "db").unwrap()
                })
            };
            let (a, b) = (run(), run());
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        let mut all: Vec<u32> = runs.concat();
        all.sort();
        assert_eq!(all, (1..=latest()).collect::<Vec<_>>(), "{runs:?}");
    });
}

/// Postgres only: the migration lock is a Postgres advisory lock (SQLite's runner serialises
/// on the file's write lock). Found by review: the wait for it obeyed the session's 10 s
/// `lock_timeout`, so a replica starting beside a migration longer than that failed to start;
/// and a later review found a `statement_timeout` the role or database sets cut it too.
#[test]
fn a_replica_starting_beside_a_long_migration_waits_for_it_instead_of_failing() {
    let Some(db) = fresh_pg() else { return };
    let holder = db.connect().unwrap();
    let h = holder.conn();
    // The lock another process's migration holds: the runner's key and this schema's oid.
    h.batch("SELECT pg_advisory_lock(1835624306, (SELECT oid::int FROM pg_namespace WHERE nspname = current_schema()))")
        .unwrap();
    let started = std::time::Instant::now();
    let held_for = std::time::Duration::from_secs(11);
    let applied = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let conn = db.connect().unwrap();
            // As a role's or database's own limit would (found by review: it cut the wait).
            conn.conn().batch("SET statement_timeout = '2s'").unwrap();
            let out = migrate(conn.conn(), "db");
            let after = started.elapsed();
            // The session's own lock wait is bounded again after the migration.
            let t: String = conn
                .conn()
                .query_row("SHOW lock_timeout", [], |r| r.get(0))
                .unwrap();
            (out.map_err(|e| e.to_string()), after, t)
        });
        std::thread::sleep(held_for);
        h.batch("SELECT pg_advisory_unlock_all()").unwrap();
        waiter.join().unwrap()
    });
    let (out, after, lock_timeout) = applied;
    assert_eq!(out, Ok((1..=latest()).collect::<Vec<_>>()));
    assert!(
        after >= held_for,
        "it ran while the lock was held ({after:?})"
    );
    assert_eq!(lock_timeout, "10s");
}

#[test]
fn a_schema_newer_than_this_binary_is_refused_on_both_backends() {
    both_connected(|_, c| {
        migrate(c, "the db").unwrap();
        let next = latest() + 1;
        c.execute(
            "INSERT INTO assent_schema (version, name, sha256, applied_at) VALUES (?1, 'future', '', 0)",
            [next],
        )
        .unwrap();
        assert_eq!(
            schema_state(c).unwrap(),
            SchemaState::Newer {
                at: next,
                latest: latest()
            }
        );
        let e = migrate(c, "the db").unwrap_err().to_string();
        let want = format!(
            "the db: schema version {next} is newer than this assent ({})",
            latest()
        );
        assert!(e.contains(&want), "{e}");
    });
}

#[test]
fn a_sqlite_file_from_before_the_runner_is_adopted_and_one_marked_newer_refused() {
    // Migrated the old way: each file and `user_version`, no `assent_schema`.
    let (_dir, db) = fresh_sqlite();
    let conn = db.connect().unwrap();
    let c = conn.conn();
    for m in MIGRATIONS {
        c.batch(m.sqlite).unwrap();
    }
    c.batch(&format!("PRAGMA user_version = {}", latest()))
        .unwrap();
    assert_eq!(migrate(c, "old").unwrap(), Vec::<u32>::new());
    let n: i64 = c
        .query_row("SELECT count(*) FROM assent_schema", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, i64::from(latest()));
    // A file an older runner left at a newer user_version only is refused as well.
    c.batch(&format!("PRAGMA user_version = {}", latest() + 1))
        .unwrap();
    let e = migrate(c, "old").unwrap_err().to_string();
    assert!(e.contains("is newer than this assent"), "{e}");
}

#[test]
fn a_released_migration_edited_after_it_was_applied_is_refused() {
    both_connected(|_, c| {
        migrate(c, "db").unwrap();
        c.execute(
            "UPDATE assent_schema SET sha256 = 'edited' WHERE version = 3",
            [],
        )
        .unwrap();
        let e = migrate(c, "db").unwrap_err().to_string();
        assert!(
            e.contains("migration 3 (0003_aaep)") && e.contains("edited"),
            "{e}"
        );
    });
}

#[test]
fn both_migration_folders_hold_the_same_numbered_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let names = |sub: &str| {
        let mut v: Vec<String> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let want: Vec<String> = MIGRATIONS
        .iter()
        .map(|m| format!("{}.sql", m.name))
        .collect();
    assert_eq!(names("sqlite"), want);
    assert_eq!(names("postgres"), want);
}

/// Each table's columns and whether they are NOT NULL, as the backend's catalogue has them
/// (Postgres's explicit `rowid` columns left out: SQLite has them implicitly).
fn columns(c: Conn<'_>) -> Vec<(String, String, bool)> {
    let sql = match c.backend() {
        Backend::Sqlite => {
            "SELECT m.name, p.name, p.\"notnull\" OR p.pk FROM sqlite_master m, pragma_table_info(m.name) p
             WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY 1, 2"
        }
        Backend::Postgres => {
            "SELECT table_name::text, column_name::text, is_nullable = 'NO' FROM information_schema.columns
             WHERE table_schema = current_schema() AND column_name <> 'rowid' ORDER BY 1, 2"
        }
    };
    c.query_map(sql, [], tuple).unwrap()
}

/// `read` of a freshly migrated database on each backend the tests run (SQLite, then
/// PostgreSQL unless skipped): what it read, in that order.
fn migrated_on_both<T>(mut read: impl FnMut(Conn<'_>) -> T) -> Vec<T> {
    let mut seen = Vec::new();
    both_connected(|_, c| {
        migrate(c, "db").unwrap();
        seen.push(read(c));
    });
    seen
}

#[test]
fn both_dialects_build_the_same_tables_and_columns() {
    let seen = migrated_on_both(columns);
    if seen.len() == 2 {
        let (lite, pg) = (&seen[0], &seen[1]);
        let differ: Vec<_> = lite.iter().filter(|c| !pg.contains(c)).collect();
        assert!(differ.is_empty(), "columns unlike Postgres's: {differ:?}");
        assert_eq!(lite.len(), pg.len());
    }
}

/// The indexes the migrations name (SQLite's automatic ones for keys and Postgres's for
/// constraints left out), each with whether it is partial.
fn indexes(c: Conn<'_>) -> Vec<(String, bool)> {
    let sql = match c.backend() {
        Backend::Sqlite => {
            "SELECT name, sql LIKE '%WHERE%' FROM sqlite_master
             WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex_%' ORDER BY 1"
        }
        Backend::Postgres => {
            "SELECT c.relname::text, x.indpred IS NOT NULL FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
             WHERE c.relnamespace = current_schema()::regnamespace AND NOT x.indisprimary
               AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = c.oid) ORDER BY 1"
        }
    };
    c.query_map(sql, [], tuple).unwrap()
}

/// Migrations 0030 and 0031: what only pending approvals are looked up by is indexed only while
/// they are pending, and audit records by approval only for the kinds looked up so, on both
/// backends alike (fewer entries keyed by a random approval id per write).
#[test]
fn both_dialects_build_the_same_indexes_and_index_pending_approvals_alone() {
    let seen = migrated_on_both(|c| {
        let idx = indexes(c);
        for partial in [
            "approvals_pending",
            "approvals_pending_expires",
            "audit_approval",
        ] {
            assert!(
                idx.contains(&(partial.to_string(), true)),
                "{partial} in {idx:?}"
            );
        }
        for gone in [
            "approvals_dedupe",
            "approvals_agent",
            "approvals_status_expires",
        ] {
            assert!(
                !idx.iter().any(|(n, _)| n == gone),
                "{gone} still in {idx:?}"
            );
        }
        idx
    });
    if seen.len() == 2 {
        assert_eq!(seen[0], seen[1], "SQLite's indexes, then Postgres's");
    }
}

/// Found by review: linking a result report to its approval read the approval's
/// `token.redeemed` record with no index covering it (migration 0031 narrowed
/// `audit_approval`), a scan of the whole audit log under the write lock on every report — an
/// agent could stall the gateway with reports. Migration 0053's `audit_redeemed` serves that
/// look-up on both backends (PostgreSQL with sequential scans off: an empty table's plan would
/// not say whether the partial index matches the query). And every redemption looks up the
/// approval's `token.redeemed` and `token.voided` records (a token whose `used_at` was set
/// back redeems nothing): found by review, one query over both kinds matched neither partial
/// index; each is served by its own (`audit_voided`, migration 0062).
#[test]
fn the_redeemed_record_of_an_approval_is_found_through_an_index() {
    both_connected(|db, c| {
        migrate(c, "db").unwrap();
        let pg = matches!(db, Database::Postgres { .. });
        if pg {
            c.execute("SET enable_seqscan = off", assent_store::params![])
                .unwrap();
        }
        for (look_up, index) in [
            (
                "SELECT data FROM audit WHERE approval_id = 'x' AND kind = 'token.redeemed' ORDER BY seq LIMIT 1",
                "audit_redeemed",
            ),
            (
                "SELECT 1 FROM audit WHERE approval_id = 'x' AND kind = 'token.redeemed' LIMIT 1",
                "audit_redeemed",
            ),
            (
                "SELECT 1 FROM audit WHERE approval_id = 'x' AND kind = 'token.voided' LIMIT 1",
                "audit_voided",
            ),
        ] {
            let plan: Vec<String> = if pg {
                crate::pgkit::column(c, &format!("EXPLAIN {look_up}"), assent_store::params![])
            } else {
                sqlite_plan(c, look_up)
            };
            assert_names(&plan, index, look_up);
        }
    });
}

/// Found by review: reads an agent or an operator can repeat walked the whole history — the
/// decisions of the last minute counted at every in-client approval and operator edit (every
/// approval scanned, on the writer), the clarification list (every question sorted), an
/// operator's session cancel (every question), a receipt (every grant). Each is served by an
/// index now (migration 0068).
#[test]
fn the_reads_agents_and_operators_repeat_are_found_through_an_index() {
    both_connected(|db, c| {
        migrate(c, "db").unwrap();
        let pg = matches!(db, Database::Postgres { .. });
        for (look_up, index) in [
            (
                "SELECT count(*) FROM decisions d JOIN approvals a ON a.id = d.approval_id WHERE a.agent = 'x' AND d.at >= 5 AND (CAST(NULL AS TEXT) IS NULL OR a.session_id = 's')",
                "decisions_at",
            ),
            (
                "SELECT id FROM clarifications ORDER BY requested_at DESC, id DESC LIMIT 501",
                "clarifications_requested",
            ),
            (
                "SELECT id FROM clarifications WHERE status = 'pending' ORDER BY requested_at DESC, id DESC LIMIT 501",
                "clarifications_status_requested",
            ),
            (
                "SELECT agent FROM clarifications WHERE session_id = 's'",
                "clarifications_session",
            ),
            (
                "SELECT id FROM grants WHERE approval_id = 'x'",
                "grants_approval",
            ),
        ] {
            // PostgreSQL plans by its statistics: on empty tables a walk of the primary key
            // or a sort of a few estimated rows costs less than the index, whatever the
            // indexes; there the index is checked to exist.
            let plan: Vec<String> = if pg {
                let sql = format!("SELECT indexname FROM pg_indexes WHERE indexname = '{index}'");
                crate::pgkit::column(c, &sql, assent_store::params![])
            } else {
                sqlite_plan(c, look_up)
            };
            assert_names(&plan, index, look_up);
        }
    });
}

/// SQLite's plan of `look_up`, a line a step.
fn sqlite_plan(c: assent_store::db::Conn<'_>, look_up: &str) -> Vec<String> {
    let explain = format!("EXPLAIN QUERY PLAN {look_up}");
    c.query_map(&explain, assent_store::params![], |r| r.get(3))
        .unwrap()
}

/// Asserts that a line of `plan` (of `look_up`) names `index`.
fn assert_names(plan: &[String], index: &str, look_up: &str) {
    assert!(
        plan.iter().any(|l| l.contains(index)),
        "{look_up}: {plan:#?}"
    );
}

/// Found by review: the migrations are hashed byte for byte, so a checkout that turned their
/// line ends into CRLF (Windows, `core.autocrlf`) built an assent that refused every database
/// a Linux build migrated, as "a released migration was edited". `.gitattributes` keeps them
/// LF; this fails on a build from such a checkout.
#[test]
fn the_migrations_hashed_have_no_carriage_returns() {
    for m in MIGRATIONS {
        for (dialect, sql) in [("sqlite", m.sqlite), ("postgres", m.postgres)] {
            assert!(!sql.contains('\r'), "{dialect}/{}.sql holds a CR", m.name);
        }
    }
}

/// Attack (found by review): only SQLite's schema was compared with what the migrations
/// create, so on PostgreSQL a trigger planted by whoever holds the gateway's role ran inside
/// the gateway's own transactions unseen, and row security could hide rows from its reads.
/// Start-up now refuses a schema holding a trigger, rule, policy, view or function (or row
/// security on a table), naming it; dropped, the store opens.
#[test]
fn a_trigger_or_row_security_planted_in_the_postgres_schema_stops_start_up() {
    let Some(db) = fresh_pg() else { return };
    let dir = tempfile::tempdir().unwrap();
    drop(crate::open(dir.path(), &db));
    let admin = db.connect().unwrap();
    let opened =
        || assent_store::Store::open_database(dir.path(), dir.path(), &db, 60_000, crate::wire());
    for (plant, undo, says) in [
        (
            "CREATE FUNCTION planted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
             CREATE TRIGGER planted AFTER INSERT ON audit FOR EACH ROW EXECUTE FUNCTION planted()",
            "DROP TRIGGER planted ON audit; DROP FUNCTION planted()",
            "`planted`",
        ),
        (
            "ALTER TABLE grants ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE grants DISABLE ROW LEVEL SECURITY",
            "row security on table `grants`",
        ),
    ] {
        admin.conn().batch(plant).unwrap();
        let e = opened().err().expect("refused").to_string();
        assert!(e.contains(says) && e.contains("altered"), "{e}");
        admin.conn().batch(undo).unwrap();
    }
    opened().unwrap();
}

/// Migration 0069 names each question's AAEP event after its clarification, so a resuming
/// stream can be sent the questions still pending in the part of the log it skipped; the
/// questions pending while it runs are found by their reply token (an answered one's event
/// is left unnamed). Its backfill run again here, on both backends, over events written as
/// before it.
#[test]
fn migration_0069_names_the_events_of_the_questions_pending_when_it_runs() {
    let m = MIGRATIONS.iter().find(|m| m.version == 69).unwrap();
    both_connected(|_, c| {
        let backend = c.backend();
        migrate(c, "db").unwrap();
        for (id, token, status) in [
            ("q-pending", "rpl_01", "pending"),
            ("q-done", "rpl_02", "answered"),
        ] {
            c.execute(
                "INSERT INTO clarifications (id, agent, session_id, question, kinds, choices, reply_token, requested_at, expires_at, status)
                 VALUES (?1, 'bot', 's', 'Why?', '[]', '[]', ?2, 0, 1, ?3)",
                assent_store::params![id, token, status],
            )
            .unwrap();
            let data = format!(
                r#"{{"type":"aaep:agent.awaiting.clarification","question":"Why?","reply_token":"{token}"}}"#
            );
            c.execute(
                "INSERT INTO aaep_events (event_id, type, critical, subscription_id, approval_id, at, data)
                 VALUES (?1, 'aaep:agent.awaiting.clarification', ?2, NULL, NULL, 0, ?3)",
                assent_store::params![format!("evt_{id}"), true, data],
            )
            .unwrap();
        }
        let sql = match backend {
            Backend::Sqlite => m.sqlite,
            Backend::Postgres => m.postgres,
        };
        let backfill = &sql[sql.find("UPDATE aaep_events").unwrap()..];
        c.batch(backfill).unwrap();
        let named: Vec<(String, Option<String>)> = c
            .query_map(
                "SELECT event_id, clarification_id FROM aaep_events ORDER BY event_id",
                [],
                tuple,
            )
            .unwrap();
        assert_eq!(
            named,
            [
                ("evt_q-done".to_string(), None),
                ("evt_q-pending".to_string(), Some("q-pending".to_string()))
            ],
            "{backend:?}"
        );
    });
}
