//! The schema migrations of both backends and their runner (issue 13).
//!
//! Migrations are numbered from 1 and kept as SQL files twice, `migrations/sqlite/` and
//! `migrations/postgres/`, with the same numbers and names ([`MIGRATIONS`]). The runner
//! ([`migrate`]) records each applied migration in its own table `assent_schema` (version,
//! name, SHA-256 of the SQL applied, time) on both backends, and on SQLite also keeps
//! `PRAGMA user_version` at the schema version, so that binaries older than this runner still
//! refuse a newer file. It applies each pending migration in one write transaction together
//! with its record, refuses a database whose schema is newer than this binary's, and refuses
//! one where an applied migration's SQL differs from this binary's (a released migration was
//! edited). On Postgres the whole run holds a session advisory lock, so replicas starting
//! together migrate once; on SQLite each step re-reads the version inside its `BEGIN
//! IMMEDIATE`, which serialises processes the same way.

use crate::db::{Backend, Conn, OptionalExtension, Tx};
use crate::db_pg::MIGRATE_LOCK;
use crate::error::StoreError;
use sha2::{Digest, Sha256};

/// One numbered migration, in both dialects.
#[derive(Debug)]
pub struct Migration {
    /// Its number, from 1, without gaps.
    pub version: u32,
    /// Its file name without `.sql` (e.g. `0001_init`).
    pub name: &'static str,
    /// The SQLite SQL (`migrations/sqlite/<name>.sql`).
    pub sqlite: &'static str,
    /// The Postgres SQL (`migrations/postgres/<name>.sql`).
    pub postgres: &'static str,
}

macro_rules! migration {
    ($v:literal, $name:literal) => {
        Migration {
            version: $v,
            name: $name,
            sqlite: include_str!(concat!("../migrations/sqlite/", $name, ".sql")),
            postgres: include_str!(concat!("../migrations/postgres/", $name, ".sql")),
        }
    };
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_init"),
    migration!(2, "0002_protocol"),
    migration!(3, "0003_aaep"),
    migration!(4, "0004_plans"),
    migration!(5, "0005_tool_pins"),
    migration!(6, "0006_in_client"),
    migration!(7, "0007_operator"),
    migration!(8, "0008_audit_checkpoints"),
    migration!(9, "0009_cancelled_sessions"),
    migration!(10, "0010_confirm_context"),
    migration!(11, "0011_replicas"),
    migration!(12, "0012_audit_archives"),
    migration!(13, "0013_usage_windows"),
    migration!(14, "0014_quorum_votes"),
    migration!(15, "0015_separation_of_duties"),
    migration!(16, "0016_escalation_chains"),
    migration!(17, "0017_passkeys"),
    migration!(18, "0018_passkey_enrolments"),
    migration!(19, "0019_oidc"),
    migration!(20, "0020_traceparent"),
    migration!(21, "0021_slack"),
    migration!(22, "0022_session_risk"),
    migration!(23, "0023_security_backlog"),
    migration!(24, "0024_pin_scope"),
    migration!(25, "0025_oidc_login_clients"),
    migration!(26, "0026_archive_carries"),
    migration!(27, "0027_ui_session_seal"),
    migration!(28, "0028_token_grant_seals"),
    migration!(29, "0029_approval_seal"),
    migration!(30, "0030_approval_indexes"),
    migration!(31, "0031_audit_and_session_indexes"),
    migration!(32, "0032_vote_seals"),
    migration!(33, "0033_approval_standing_seal"),
    migration!(34, "0034_reply_token_seal"),
    migration!(35, "0035_settlement_seal"),
    migration!(36, "0036_ui_session_key_binding"),
    migration!(37, "0037_plans_by_agent"),
    migration!(38, "0038_vote_key_binding"),
    migration!(39, "0039_subscription_last_seen"),
    migration!(40, "0040_settled_approvals_index"),
    migration!(41, "0041_awaiting_events_by_approval"),
    migration!(42, "0042_courtesy_notices_sent"),
    migration!(43, "0043_oidc_spent_states"),
    migration!(44, "0044_subscription_stream_marks"),
    migration!(45, "0045_audit_results"),
    migration!(46, "0046_usage_by_agent"),
    migration!(47, "0047_confirm_context_plan_owner"),
    migration!(48, "0048_grant_key_binding"),
    migration!(49, "0049_listing_order"),
    migration!(50, "0050_outstanding_tokens"),
    migration!(51, "0051_audit_takeovers"),
    migration!(52, "0052_decision_key_binding"),
    migration!(53, "0053_audit_redeemed"),
    migration!(54, "0054_settlement_sealing"),
    migration!(55, "0055_archive_sealing_since"),
    migration!(56, "0056_ceremony_codes"),
    migration!(57, "0057_webhook_attempts"),
    migration!(58, "0058_plan_seal"),
    migration!(59, "0059_confirm_context_plan"),
    migration!(60, "0060_config_generations"),
    migration!(61, "0061_archived_approvals"),
    migration!(62, "0062_audit_voided"),
    migration!(63, "0063_enrolment_seal"),
    migration!(64, "0064_ceremony_seal"),
    migration!(65, "0065_audit_plans"),
    migration!(66, "0066_audit_config"),
    migration!(67, "0067_ui_sessions_operator"),
    migration!(68, "0068_history_reads"),
    migration!(69, "0069_awaiting_clarification_events"),
    migration!(70, "0070_passkey_seal"),
    migration!(71, "0071_session_ends"),
];

/// The schema version this binary writes (the last migration's number).
pub fn latest() -> u32 {
    MIGRATIONS.len() as u32
}

impl Migration {
    /// The SQL for `backend`.
    pub fn sql(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        }
    }

    /// Lowercase hex SHA-256 of [`Migration::sql`], as recorded in `assent_schema`.
    pub fn sha256(&self, backend: Backend) -> String {
        hex::encode(Sha256::digest(self.sql(backend).as_bytes()))
    }
}

/// Where a database's schema stands against this binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaState {
    /// At this binary's version.
    Current(u32),
    /// Older: migrations `at + 1 ..= latest` are pending.
    Behind {
        /// The database's version.
        at: u32,
        /// This binary's.
        latest: u32,
    },
    /// Newer than this binary: it refuses to run against it.
    Newer {
        /// The database's version.
        at: u32,
        /// This binary's.
        latest: u32,
    },
}

/// The runner's own table, created outside the numbered migrations.
const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS assent_schema (
    version BIGINT PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// The database's schema version: the highest of `assent_schema` and, on SQLite,
/// `user_version` (a file migrated before this runner existed has only the latter).
fn version(conn: Conn<'_>) -> Result<u32, StoreError> {
    let pragma: i64 = match conn.backend() {
        Backend::Sqlite => conn.query_row("PRAGMA user_version", [], |r| r.get(0))?,
        Backend::Postgres => 0,
    };
    let recorded: i64 = if conn.has_table("assent_schema")? {
        conn.query_row(
            "SELECT coalesce(max(version), 0) FROM assent_schema",
            [],
            |r| r.get(0),
        )?
    } else {
        0
    };
    u32::try_from(pragma.max(recorded))
        .map_err(|_| StoreError::Invalid(format!("schema version {pragma} is not a version")))
}

/// The schema version of a staged copy behind `conn` as the runner will read it ([`version`]:
/// the higher of `user_version` and `assent_schema`), its recorded migrations checked against
/// this build's SQL ([`check_recorded`]); `label` names it in errors. For `assent restore`:
/// found by review, it read `user_version` alone, so a copy whose `assent_schema` claimed a
/// newer version or an edited migration was restored, and the gateway then refused to start.
pub(crate) fn staged_version(conn: Conn<'_>, label: &str) -> Result<u32, StoreError> {
    check_recorded(conn, label, conn.backend())?;
    version(conn)
}

/// Where the schema of the database behind `conn` stands (for `/readyz` and `assent migrate
/// --check`). Writes nothing.
pub fn schema_state(conn: Conn<'_>) -> Result<SchemaState, StoreError> {
    let (at, latest) = (version(conn)?, latest());
    Ok(match at.cmp(&latest) {
        std::cmp::Ordering::Equal => SchemaState::Current(at),
        std::cmp::Ordering::Less => SchemaState::Behind { at, latest },
        std::cmp::Ordering::Greater => SchemaState::Newer { at, latest },
    })
}

/// Applies the pending migrations to the database behind `conn` (a session outside any
/// transaction); `label` names the database in errors (its path, or its schema). Returns the
/// versions applied now, in order (empty when the schema was current).
///
/// `Invalid` when the schema is newer than this binary ("… schema version N is newer than
/// this assent (M); upgrade assent") or an applied migration's recorded SHA-256 differs from
/// this binary's; `Database` when a statement fails (that migration is rolled back whole).
pub fn migrate(conn: Conn<'_>, label: &str) -> Result<Vec<u32>, StoreError> {
    match conn {
        Conn::Sqlite(_) => run(conn, label),
        Conn::Postgres(pg) => {
            let oid = pg.schema_oid() as i32;
            wait_for_migration_lock(conn, label, oid)?;
            let out = run(conn, label);
            let unlocked = conn.batch(&format!("SELECT pg_advisory_unlock({MIGRATE_LOCK}, {oid})"));
            pg.forget_statements();
            let applied = out?;
            unlocked?;
            Ok(applied)
        }
    }
}

/// Takes the session-level migration lock of schema `oid`, waiting as long as another process
/// holds it (a migration may take minutes; found by review: the session's 10 s `lock_timeout`
/// made a replica starting beside a long migration fail instead of waiting for it). The wait
/// is logged once; the holder's session ending frees the lock, so a crashed migrator does not
/// block it for ever. The session's `lock_timeout` is restored before any migration runs.
fn wait_for_migration_lock(conn: Conn<'_>, label: &str, oid: i32) -> Result<(), StoreError> {
    let key = format!("{MIGRATE_LOCK}, {oid}");
    let took: bool = conn.query_row(&format!("SELECT pg_try_advisory_lock({key})"), [], |r| {
        r.get(0)
    })?;
    if took {
        return Ok(());
    }
    tracing::warn!(database = %label, "another process is migrating this schema; waiting for it");
    // Nor a `statement_timeout` the role or database sets (found by review: the wait failed
    // under one, as it had under the session's `lock_timeout`); both are put back after.
    conn.batch(&format!(
        "SET lock_timeout = 0; SET statement_timeout = 0; SELECT pg_advisory_lock({key}); SET lock_timeout = '{}'; RESET statement_timeout",
        crate::db_pg::LOCK_TIMEOUT
    ))?;
    Ok(())
}

fn run(conn: Conn<'_>, label: &str) -> Result<Vec<u32>, StoreError> {
    let backend = conn.backend();
    let newer = |at: u32| {
        StoreError::Invalid(format!(
            "{label}: schema version {at} is newer than this assent ({}); upgrade assent",
            latest()
        ))
    };
    let at = version(conn)?;
    if at > latest() {
        return Err(newer(at));
    }
    if recorded(conn)? < at {
        conn.write(|tx| record(tx, version(**tx)?, backend))?;
    }
    check_recorded(conn, label, backend)?;
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().skip(at as usize) {
        let done = conn.write(|tx| {
            let at = version(**tx)?;
            if at > latest() {
                return Err(newer(at));
            }
            if at >= m.version {
                return Ok(false);
            }
            // A role's or database's `statement_timeout` (common on managed PostgreSQL) does
            // not cut a migration short (found by review: a large index on `audit` could be
            // cancelled); this transaction's only.
            if backend == Backend::Postgres {
                tx.batch("SET LOCAL statement_timeout = 0")?;
            }
            tx.batch(m.sql(backend))?;
            record(tx, m.version, backend)?;
            Ok(true)
        })?;
        if done {
            applied.push(m.version);
        }
    }
    Ok(applied)
}

/// How many migrations `assent_schema` records (0 when it does not exist yet).
fn recorded(conn: Conn<'_>) -> Result<u32, StoreError> {
    if !conn.has_table("assent_schema")? {
        return Ok(0);
    }
    Ok(conn.query_row("SELECT count(*) FROM assent_schema", [], |r| r.get(0))?)
}

/// Records migrations `1..=upto` in `assent_schema` (creating it; the ones recorded already
/// keep their row) and, on SQLite, sets `user_version` to `upto`.
fn record(tx: &Tx<'_>, upto: u32, backend: Backend) -> Result<(), StoreError> {
    tx.batch(SCHEMA_TABLE)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    for m in MIGRATIONS.iter().take(upto as usize) {
        tx.execute(
            "INSERT INTO assent_schema (version, name, sha256, applied_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            crate::params![m.version, m.name, m.sha256(backend), now],
        )?;
    }
    if backend == Backend::Sqlite && upto > 0 {
        tx.batch(&format!("PRAGMA user_version = {upto}"))?;
    }
    Ok(())
}

/// `Invalid` when a recorded migration's SHA-256 is not the one this binary would apply.
fn check_recorded(conn: Conn<'_>, label: &str, backend: Backend) -> Result<(), StoreError> {
    if !conn.has_table("assent_schema")? {
        return Ok(());
    }
    for m in MIGRATIONS {
        let stored: Option<String> = conn
            .query_row(
                "SELECT sha256 FROM assent_schema WHERE version = ?1",
                [m.version],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(s) = stored.filter(|s| *s != m.sha256(backend)) {
            return Err(StoreError::Invalid(format!(
                "{label}: migration {} ({}) was applied from other SQL (sha256 {s}) than this assent's ({}); a released migration was edited",
                m.version,
                m.name,
                m.sha256(backend)
            )));
        }
    }
    Ok(())
}

/// The schema objects (tables, indexes, triggers, views) of an SQLite database, with their
/// SQL, sorted; SQLite's own and the migration runner's record table left out.
fn schema_objects(
    conn: &rusqlite::Connection,
) -> Result<Vec<(String, String, String)>, StoreError> {
    let mut objects = conn
        .prepare(
            "SELECT type, name, coalesce(sql, '') FROM sqlite_master
             WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND NOT (type = 'table' AND name = 'assent_schema')",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<(String, String, String)>>>()?;
    objects.sort();
    Ok(objects)
}

/// How the SQLite schema of `conn` differs from exactly what this build's migrations up to
/// `version` create (built afresh in memory, a few milliseconds): `Some("has a trigger
/// `zz` that this assent's migrations do not create")` or `Some("lacks the index `x` …")`
/// for the first difference, `None` when it is the same. A planted trigger or view runs
/// inside the gateway's own transactions (found by review: an `AFTER INSERT` trigger made
/// every held transfer expire into an approval). Errors: SQLite's.
pub(crate) fn schema_difference(
    conn: &rusqlite::Connection,
    version: i64,
) -> Result<Option<String>, StoreError> {
    let expected = rusqlite::Connection::open_in_memory()?;
    for m in MIGRATIONS.iter().take(version.max(0) as usize) {
        expected.execute_batch(m.sqlite)?;
    }
    let (want, have) = (schema_objects(&expected)?, schema_objects(conn)?);
    if let Some(extra) = have.iter().find(|o| !want.contains(o)) {
        return Ok(Some(format!(
            "has a {} `{}` that this assent's migrations do not create",
            extra.0, extra.1
        )));
    }
    Ok(want.iter().find(|o| !have.contains(o)).map(|gone| {
        format!(
            "lacks the {} `{}` this assent's migrations create",
            gone.0, gone.1
        )
    }))
}

/// [`schema_difference`] of the SQLite store behind `conn` at the version it records; on
/// PostgreSQL, [`PG_PLANTED`]'s first object.
pub(crate) fn altered_schema(conn: Conn<'_>) -> Result<Option<String>, StoreError> {
    match conn {
        Conn::Sqlite(c) => schema_difference(c, i64::from(version(conn)?)),
        Conn::Postgres(_) => {
            let found: Option<(String, String)> = conn
                .query_row(PG_PLANTED, [], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            Ok(found.map(|(kind, name)| {
                format!("has a {kind} `{name}` that this assent's migrations do not create")
            }))
        }
    }
}

/// The first object in the store's PostgreSQL schema that runs code inside its transactions or
/// changes what its queries see, none of which the migrations create: a trigger, a rule, a
/// row-level security policy (or row security turned on), a view or a function — an
/// extension's own left out. Found by review: only SQLite's schema was checked, so a planted
/// trigger ran inside the gateway's own transactions on PostgreSQL unseen. `(kind, name)`.
const PG_PLANTED: &str = "SELECT kind, name FROM (
    SELECT 'trigger' AS kind, t.tgname::text AS name FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
    UNION ALL SELECT 'rule', r.rulename::text FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
        WHERE c.relnamespace = current_schema()::regnamespace AND r.rulename <> '_RETURN'
    UNION ALL SELECT 'row security policy', p.polname::text FROM pg_policy p
        JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL SELECT 'row security on table', c.relname::text FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relrowsecurity
    UNION ALL SELECT 'view', c.relname::text FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('v', 'm')
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
    UNION ALL SELECT 'function', p.proname::text FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
) o ORDER BY kind, name LIMIT 1";
