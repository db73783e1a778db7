//! The check every serialised write makes of the configuration its process serves (issue 13
//! §2, [`crate::store::Store::serve_config`]): a replica superseded by another's newer
//! configuration writes nothing, from the moment that registration commits; nor does one whose
//! clock differs from the database's by more than
//! [`crate::kit::MAX_CLOCK_SKEW_MS`] (found by review: `/readyz` only took it out of
//! the load balancer's rotation, and requests reaching it directly were judged by its clock).

use crate::db::{Backend, Conn};
use crate::kit::skewed;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The configurations this process's writes may be made under ([`Store::serve_config`]),
/// checked in every serialised write transaction before anything is written
/// ([`refuse_if_out_of_step`]), and whether a refusal under them was logged yet.
#[derive(Default)]
pub(crate) struct Serving {
    digests: RwLock<Option<Vec<String>>>,
    logged: AtomicBool,
    /// Whether the open group commit's first writer skipped the check (a registration).
    led_unchecked: AtomicBool,
}

impl Serving {
    /// Checks the writes under `digests` from now on (`None`: no check), logging the next
    /// refusal.
    pub(crate) fn set(&self, digests: Option<Vec<String>>) {
        *self.digests.write().unwrap_or_else(|p| p.into_inner()) = digests;
        self.logged.store(false, Ordering::SeqCst);
    }

    /// The first writer of a group commit checked the configuration (`checked`) or not.
    pub(crate) fn lead(&self, checked: bool) {
        self.led_unchecked.store(!checked, Ordering::SeqCst);
    }

    /// Whether the open group's first writer checked the configuration for all its members.
    pub(crate) fn led_checked(&self) -> bool {
        !self.led_unchecked.load(Ordering::SeqCst)
    }
}

/// Before anything is written in the write transaction `conn` (holding the schema's write lock, so
/// no registration of another replica interleaves): `Err(Unusable)` when this process serves
/// configurations (`serving`) none of which is the newest generation (or the database knows none of
/// them: its table emptied or restored), or none yet (start-up before its registration), or when
/// the schema is newer than this build's migrations, or when
/// this process's clock differs from the database's by more than [`crate::kit::MAX_CLOCK_SKEW_MS`]
/// (or may, given the query's round trip: the database's clock is read in the same query,
/// [`crate::kit::skewed`]); logged at the first refusal. Nothing is read when none is set (SQLite,
/// the command line). Found by review: a replica learnt it was superseded only at its next check,
/// every 2 s, and the decisions, grants and redemptions it took meanwhile under its older
/// principals and policies stood. Errors: that, the database's.
pub(crate) fn refuse_if_out_of_step(conn: Conn<'_>, serving: &Serving) -> crate::db::Result<()> {
    let Some(digests) = serving
        .digests
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    else {
        return Ok(());
    };
    let (mine, newest, clock, schema) = if digests.is_empty() {
        (None, None, None, None)
    } else {
        read_standing(conn, &digests)?
    };
    let latest = i64::from(crate::migrate::latest());
    let why = match (mine, newest) {
        // Found by review: a replica of an older build kept writing after a newer one had
        // migrated the schema (a rolling upgrade), rows the newer build reads as damaged.
        _ if schema.is_some_and(|v| v > latest) => format!(
            "the schema (version {}) is newer than this assent ({latest}): another replica migrated it; this one writes nothing until it is upgraded",
            schema.unwrap_or_default()
        ),
        (Some(m), Some(n)) if m >= n => match clock.and_then(|(b, db, a)| skewed(b, db, a)) {
            None => {
                // The next refusal, whatever its reason, is logged again.
                serving.logged.store(false, Ordering::Relaxed);
                return Ok(());
            }
            Some(why) => format!("{why}; it writes nothing until it is"),
        },
        _ if digests.is_empty() => "this replica has not registered its configuration yet (it is starting): it writes nothing until it has".to_string(),
        _ => format!(
            "this replica's configuration (generation {}) is not the newest (generation {}) another replica put in force: it writes nothing until it is reloaded with the newest",
            mine.map_or("unknown".into(), |g| g.to_string()),
            newest.map_or("unknown".into(), |g| g.to_string())
        ),
    };
    if !serving.logged.swap(true, Ordering::SeqCst) {
        tracing::error!(error = %why, "writes refused");
    }
    Err(crate::db::DbError::Unusable(why))
}

/// What [`refuse_if_out_of_step`] reads in one round trip: the newest generation among
/// `digests`, the newest of all, on PostgreSQL this process's clock before and after the
/// query with the database's between (`None` on SQLite: one process, one clock), and the
/// schema's version.
type Standing = (
    Option<i64>,
    Option<i64>,
    Option<(i64, i64, i64)>,
    Option<i64>,
);

/// Reads [`Standing`] for `digests` (at least one) in `conn`.
fn read_standing(conn: Conn<'_>, digests: &[String]) -> crate::db::Result<Standing> {
    let marks: Vec<String> = (1..=digests.len()).map(|i| format!("?{i}")).collect();
    let clock = match conn.backend() {
        Backend::Postgres => crate::db::PG_CLOCK_MS,
        Backend::Sqlite => "NULL",
    };
    let sql = format!(
        "SELECT (SELECT max(generation) FROM config_generations WHERE digest IN ({})),
                (SELECT max(generation) FROM config_generations), {clock},
                (SELECT max(version) FROM assent_schema)",
        marks.join(", ")
    );
    let p: Vec<&dyn crate::db::ToValue> = digests.iter().map(|d| d as _).collect();
    let before = crate::kit::now_ms();
    type Row = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);
    let (mine, newest, db, schema): Row =
        conn.prepare_cached(&sql)?.query_row(p.as_slice(), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
    let after = crate::kit::now_ms();
    Ok((mine, newest, db.map(|db| (before, db, after)), schema))
}
