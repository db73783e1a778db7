//! The check every serialised write makes of the configuration its process serves (issue 13
//! §2, [`crate::store::Store::serve_config`]): a replica superseded by another's newer
//! configuration writes nothing, from the moment that registration commits.

use crate::db::Conn;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The configurations this process's writes may be made under ([`Store::serve_config`]),
/// checked in every serialised write transaction before anything is written
/// ([`refuse_if_superseded`]), and whether a refusal under them was logged yet.
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

/// Before anything is written in the write transaction `conn` (holding the schema's write
/// lock, so no registration of another replica interleaves): `Err(Unusable)` when this
/// process serves configurations (`serving`) none of which is the newest generation (or the
/// database knows none of them: its table emptied or restored), or none yet (start-up before
/// its registration); logged at the first refusal. Nothing is read when none is set (SQLite,
/// the command line). Found by review: a replica learnt it was superseded only at its next
/// check, every 2 s, and the decisions, grants and redemptions it took meanwhile under its
/// older principals and policies stood. Errors: that, the database's.
pub(crate) fn refuse_if_superseded(conn: Conn<'_>, serving: &Serving) -> crate::db::Result<()> {
    let Some(digests) = serving
        .digests
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    else {
        return Ok(());
    };
    let (mine, newest): (Option<i64>, Option<i64>) = if digests.is_empty() {
        (None, None)
    } else {
        let marks: Vec<String> = (1..=digests.len()).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "SELECT (SELECT max(generation) FROM config_generations WHERE digest IN ({})),
                    (SELECT max(generation) FROM config_generations)",
            marks.join(", ")
        );
        let p: Vec<&dyn crate::db::ToValue> = digests.iter().map(|d| d as _).collect();
        conn.prepare_cached(&sql)?
            .query_row(p.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))?
    };
    let why = match (mine, newest) {
        (Some(m), Some(n)) if m >= n => return Ok(()),
        _ if digests.is_empty() => "this replica has not registered its configuration yet (it is starting): it writes nothing until it has".to_string(),
        _ => format!(
            "this replica's configuration (generation {}) is not the newest (generation {}) another replica put in force: it writes nothing until it is reloaded with the newest",
            mine.map_or("unknown".into(), |g| g.to_string()),
            newest.map_or("unknown".into(), |g| g.to_string())
        ),
    };
    if !serving.logged.swap(true, Ordering::SeqCst) {
        tracing::error!(error = %why, "writes refused: configuration superseded");
    }
    Err(crate::db::DbError::Unusable(why))
}
