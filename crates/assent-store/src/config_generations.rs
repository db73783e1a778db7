//! The configurations the replicas of one database have loaded (issue 13 §2), by generation:
//! each distinct digest of a configuration's consent-relevant part (principals, agents and
//! policies, computed by the server) gets the next generation when a replica first loads it,
//! or when one adopts it again on purpose (a reload, or `serve --adopt-config`). A replica
//! whose digest is not the newest generation runs an older configuration than another replica
//! put in force: the server has it serve nothing and withdraw nothing until it loads the
//! newest. Found by review: a replica restarted with an older file withdrew, in the shared
//! database, the votes, grants and tokens of operators a newer configuration had added, and
//! kept taking the decisions of operators it had removed. Nothing here decides what to do.

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
    /// Registers the configuration with digest `digest` (any text of at most 128 bytes),
    /// loaded by replica `by` at `now` (Unix ms; the database's clock on PostgreSQL): a digest
    /// never seen becomes the newest generation; a known one that is the newest stays it; a
    /// known older one is [`ConfigStanding::Superseded`], or with `adopt` becomes the newest
    /// again (a deliberate return to an earlier configuration). Never answers `Unknown`. In
    /// the one write transaction, so two replicas registering at once get two generations in
    /// order. Errors: `Invalid` for an empty or over-long digest; the store's.
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
        let mut end = by.len().min(MAX_LOADED_BY);
        while !by.is_char_boundary(end) {
            end -= 1;
        }
        let by = &by[..end];
        self.write_unannounced(|tx| {
            let now = tx.shared_clock_ms(now)?;
            let standing = standing_in(**tx, digest)?;
            let take = |tx: Conn<'_>| -> crate::db::Result<i64> {
                let next: i64 = tx
                    .prepare_cached("SELECT COALESCE(MAX(generation), 0) + 1 FROM config_generations")?
                    .query_row(params![], |r| r.get(0))?;
                tx.prepare_cached(
                    "INSERT INTO config_generations (digest, generation, loaded_at, loaded_by) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(digest) DO UPDATE SET generation = excluded.generation, loaded_at = excluded.loaded_at, loaded_by = excluded.loaded_by",
                )?
                .execute(params![digest, next, now, by])?;
                Ok(next)
            };
            Ok::<_, StoreError>(match standing {
                ConfigStanding::Unknown => ConfigStanding::Newest {
                    generation: take(**tx)?,
                },
                ConfigStanding::Superseded(_) if adopt => ConfigStanding::Newest {
                    generation: take(**tx)?,
                },
                other => other,
            })
        })
    }

    /// Where the configuration with digest `digest` stands now, read beside the writer
    /// ([`Store::aside`]: a check every few seconds must not queue behind the writes).
    /// Errors: the store's.
    pub fn config_standing(&self, digest: &str) -> Result<ConfigStanding, StoreError> {
        self.aside(|c| standing_in(c, digest))
    }
}
