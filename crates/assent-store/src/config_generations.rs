//! The configurations the replicas of one database have loaded (issue 13 §2), by generation,
//! and the replicas serving now ([`replicas`], for `assent replicas`). Each distinct digest of
//! a configuration's consent-relevant part (principals, agents, policies, the single sign-on
//! role map and the restart-only settings that decide what consent is worth, computed by the
//! server)
//! becomes the newest generation when a replica puts it in force: at start-up only when no
//! other live replica serves another configuration, or when told to adopt it
//! (`serve --adopt-config`); by a reload always (the operator's deliberate act). A replica
//! whose digest is not the newest generation serves an older configuration than another put
//! in force: the server has it serve nothing and withdraw nothing until it loads the newest.
//! Found by review: a replica restarted with an older file withdrew, in the shared database,
//! the votes, grants and tokens of operators a newer configuration had added, and kept taking
//! the decisions of operators it had removed. Nothing here decides what to do.

use crate::db::{Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::params;
use crate::store::Store;

/// Where a configuration's digest stands among the generations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigStanding {
    /// It is the newest generation (`generation`, from 1).
    Newest {
        /// Its generation.
        generation: i64,
    },
    /// A newer configuration was loaded since.
    Superseded(Superseded),
    /// Not registered: another live replica serves another configuration (start-up without
    /// `adopt`): `(that replica, how long ago it was seen, in ms)`.
    Refused(String, i64),
    /// The digest is no generation at all (the table was emptied or restored from an older
    /// backup): only [`Store::config_standing`] answers this; registering makes it the newest.
    Unknown,
}

/// The newer configuration that supersedes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superseded {
    /// The superseded digest's generation.
    pub generation: i64,
    /// The newest generation.
    pub newest: i64,
    /// When the newest was loaded (Unix ms; the database's clock on PostgreSQL).
    pub loaded_at: i64,
    /// The replica that loaded it, as it named itself (host and process).
    pub loaded_by: String,
}

/// Longest `loaded_by` kept (bytes); a longer name is cut at a character boundary.
const MAX_LOADED_BY: usize = 200;

/// How long a replica counts as live after it last said which configuration it serves (ms):
/// replicas say so every 2 s.
pub const LIVE_MS: i64 = 10_000;

/// How long the row of a replica not seen is kept (ms): a replica killed without a graceful
/// stop leaves it, and each registration deletes those older (one day).
const FORGET_MS: i64 = 86_400_000;

/// `by` cut to [`MAX_LOADED_BY`] bytes at a character boundary.
fn cut(by: &str) -> &str {
    let mut end = by.len().min(MAX_LOADED_BY);
    while !by.is_char_boundary(end) {
        end -= 1;
    }
    &by[..end]
}

/// Says in `tx` that replica `by` serves `digest` at `now`.
fn seen(tx: Conn<'_>, by: &str, digest: &str, now: i64) -> crate::db::Result<()> {
    tx.prepare_cached(
        "INSERT INTO config_replicas (holder, digest, seen_at) VALUES (?1, ?2, ?3)
         ON CONFLICT(holder) DO UPDATE SET digest = excluded.digest, seen_at = excluded.seen_at",
    )?
    .execute(params![by, digest, now])?;
    Ok(())
}

/// The digest's generation and the newest generation's `(generation, loaded_at, loaded_by)`.
fn standing_in(tx: Conn<'_>, digest: &str) -> crate::db::Result<ConfigStanding> {
    let mine: Option<i64> = tx
        .prepare_cached("SELECT generation FROM config_generations WHERE digest = ?1")?
        .query_row(params![digest], |r| r.get(0))
        .optional()?;
    let newest: Option<(i64, i64, String)> = tx
        .prepare_cached(
            "SELECT generation, loaded_at, loaded_by FROM config_generations ORDER BY generation DESC LIMIT 1",
        )?
        .query_row(params![], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(match (mine, newest) {
        (None, _) => ConfigStanding::Unknown,
        (Some(g), Some((n, _, _))) if g >= n => ConfigStanding::Newest { generation: g },
        (Some(g), Some((newest, loaded_at, loaded_by))) => ConfigStanding::Superseded(Superseded {
            generation: g,
            newest,
            loaded_at,
            loaded_by,
        }),
        (Some(g), None) => ConfigStanding::Newest { generation: g },
    })
}

impl Store {
    /// Has every later write of this store first check, in its transaction, that one of
    /// `digests` (configurations' digests, as registered with [`Store::register_config`]) is
    /// the newest generation, and refuse to write otherwise: `None`, no check (the default);
    /// `Some(&[])`, refuse every write (a replica starting, before its registration); two
    /// while a reload switches from one to the other (so that the writes queued meanwhile
    /// are not refused). The server sets it on PostgreSQL to the configuration it has in
    /// force.
    pub fn serve_config(&self, digests: Option<&[&str]>) {
        let digests = digests.map(|d| d.iter().map(|s| s.to_string()).collect());
        self.serving.set(digests);
    }

    /// Registers the configuration with digest `digest` (any text of at most 128 bytes) as
    /// the one replica `by` serves from `now` (Unix ms; the database's clock on PostgreSQL):
    /// [`ConfigStanding::Refused`] when another replica seen within [`LIVE_MS`] serves the
    /// newest generation, another configuration than this, and not `adopt` (a replica still
    /// serving a superseded one refuses nobody: found by review, it blocked every rolling
    /// restart); otherwise it becomes (or stays) the newest
    /// generation and `by` is recorded as serving it; rows of replicas not seen for a day are
    /// deleted. Never answers `Superseded` or
    /// `Unknown`. In the one write transaction, so two replicas registering at once are
    /// ordered. Errors: `Invalid` for an empty or over-long digest; the store's.
    pub fn register_config(
        &self,
        digest: &str,
        by: &str,
        adopt: bool,
        now: i64,
    ) -> Result<ConfigStanding, StoreError> {
        if digest.is_empty() || digest.len() > 128 {
            return Err(StoreError::Invalid(
                "a configuration digest is 1 to 128 bytes".into(),
            ));
        }
        let by = cut(by);
        // Not checked against the configuration served: this is how it changes.
        self.write_unchecked(|tx| {
            let now = tx.shared_clock_ms(now)?;
            let other: Option<(String, i64)> = tx
                .prepare_cached(
                    "SELECT r.holder, r.seen_at FROM config_replicas r JOIN config_generations g ON g.digest = r.digest
                     WHERE r.holder <> ?1 AND r.digest <> ?2 AND r.seen_at >= ?3
                       AND g.generation = (SELECT max(generation) FROM config_generations)
                     ORDER BY r.seen_at DESC LIMIT 1",
                )?
                .query_row(params![by, digest, now.saturating_sub(LIVE_MS)], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            if let Some((holder, at)) = other.filter(|_| !adopt) {
                return Ok(ConfigStanding::Refused(holder, now.saturating_sub(at)));
            }
            let standing = standing_in(**tx, digest)?;
            let generation = match standing {
                ConfigStanding::Newest { generation } => generation,
                _ => {
                    let next: i64 = tx
                        .prepare_cached(
                            "SELECT COALESCE(MAX(generation), 0) + 1 FROM config_generations",
                        )?
                        .query_row(params![], |r| r.get(0))?;
                    tx.prepare_cached(
                        "INSERT INTO config_generations (digest, generation, loaded_at, loaded_by) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT(digest) DO UPDATE SET generation = excluded.generation, loaded_at = excluded.loaded_at, loaded_by = excluded.loaded_by",
                    )?
                    .execute(params![digest, next, now, by])?;
                    next
                }
            };
            seen(**tx, by, digest, now)?;
            // Replicas killed without a graceful stop leave their rows: gone after a day.
            tx.prepare_cached("DELETE FROM config_replicas WHERE seen_at < ?1")?
                .execute(params![now.saturating_sub(FORGET_MS)])?;
            Ok::<_, StoreError>(ConfigStanding::Newest { generation })
        })
    }

    /// Replica `by` says it serves `digest` at `now` (renewing its liveness, [`LIVE_MS`]) and
    /// reads where that configuration stands: written without the schema's write lock (one
    /// row's upsert, [`crate::db::Conn::write_unserialised`]), as every replica says so every
    /// 2 s. Errors: the store's.
    pub fn config_heartbeat(
        &self,
        digest: &str,
        by: &str,
        now: i64,
    ) -> Result<ConfigStanding, StoreError> {
        let by = cut(by);
        let guard = self.lock();
        Ok(guard.conn().write_unserialised(|tx| {
            let now = tx.shared_clock_ms(now)?;
            seen(**tx, by, digest, now)?;
            standing_in(**tx, digest)
        })?)
    }

    /// Replica `by` stops serving (a graceful stop): it no longer counts as live. Errors:
    /// the store's.
    pub fn leave_config(&self, by: &str) -> Result<(), StoreError> {
        let by = cut(by);
        let guard = self.lock();
        Ok(guard.conn().write_unserialised(|tx| {
            tx.execute("DELETE FROM config_replicas WHERE holder = ?1", params![by])?;
            Ok::<_, crate::db::DbError>(())
        })?)
    }

    /// Where the configuration with digest `digest` stands now, read beside the writer
    /// ([`Store::aside`]: a check every few seconds must not queue behind the writes).
    /// Errors: the store's.
    pub fn config_standing(&self, digest: &str) -> Result<ConfigStanding, StoreError> {
        self.aside(|c| standing_in(c, digest))
    }
}

/// The newest configuration generation, as [`replicas`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NewestConfig {
    /// Its generation (from 1).
    pub generation: i64,
    /// Its digest (`v2:` and 64 hex, as the server computes it).
    pub digest: String,
    /// When it was put in force (Unix ms; the database's clock on PostgreSQL).
    pub loaded_at: i64,
    /// The replica that put it in force, as it named itself (host, process id, random part).
    pub loaded_by: String,
}

/// A replica as the database last heard of it ([`replicas`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaSeen {
    /// How it names itself (host, process id, random part).
    pub holder: String,
    /// The digest of the configuration it serves.
    pub digest: String,
    /// That configuration's generation (`None`: no generation has that digest, the table was
    /// emptied or restored).
    pub generation: Option<i64>,
    /// How long ago it last said so (ms, by the database's clock on PostgreSQL); replicas say
    /// so every 2 s.
    pub seen_ms_ago: i64,
    /// Seen within [`LIVE_MS`] (a graceful stop removes its row at once).
    pub live: bool,
    /// Its configuration is the newest generation.
    pub newest: bool,
}

/// The replicas of the database `conn` opens, as they last said which configuration they
/// serve, most recently seen first, and the newest generation (`None` with none: SQLite,
/// whose one process keeps none, or a database no replica has served), read at `now` (Unix
/// ms; the database's clock on PostgreSQL). For `assent replicas`: which
/// replica serves what, and which one put the newest in force. Errors: the database's (a
/// schema before migration 0060 has no such tables). Read in one snapshot ([`Conn::snapshot`]):
/// found by review, a reload between two reads showed a replica serving the new generation as
/// on an older one, and the command exited 2.
pub fn replicas(
    conn: Conn<'_>,
    now: i64,
) -> Result<(Option<NewestConfig>, Vec<ReplicaSeen>), StoreError> {
    Ok(conn.snapshot(|c| replicas_in(c, now))?)
}

/// [`replicas`], in the snapshot `conn` holds.
fn replicas_in(
    conn: Conn<'_>,
    now: i64,
) -> crate::db::Result<(Option<NewestConfig>, Vec<ReplicaSeen>)> {
    let now = conn.shared_clock_ms(now)?;
    let newest: Option<NewestConfig> = conn
        .prepare_cached(
            "SELECT generation, digest, loaded_at, loaded_by FROM config_generations ORDER BY generation DESC LIMIT 1",
        )?
        .query_row(params![], |r| {
            Ok(NewestConfig {
                generation: r.get(0)?,
                digest: r.get(1)?,
                loaded_at: r.get(2)?,
                loaded_by: r.get(3)?,
            })
        })
        .optional()?;
    let mut seen = Vec::new();
    conn.prepare_cached(
        "SELECT r.holder, r.digest, g.generation, r.seen_at FROM config_replicas r
         LEFT JOIN config_generations g ON g.digest = r.digest ORDER BY r.seen_at DESC, r.holder",
    )?
    .for_each(params![], |r| {
        let (generation, at): (Option<i64>, i64) = (r.get(2)?, r.get(3)?);
        let ago = now.saturating_sub(at);
        seen.push(ReplicaSeen {
            holder: r.get(0)?,
            digest: r.get(1)?,
            newest: generation.is_some() && newest.as_ref().map(|n| n.generation) == generation,
            generation,
            seen_ms_ago: ago,
            live: ago <= LIVE_MS,
        });
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    Ok((newest, seen))
}
