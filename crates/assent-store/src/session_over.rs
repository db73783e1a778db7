//! Whether a session is over (AAEP §4.1.4): cancelled for its agent by [`crate::Store::cancel_session`]
//! (`cancelled_sessions`, migration 0071), which every proposal and question of the agent in
//! it asks. Kit: imports only the database layer.

use crate::db::{self, Conn};
use crate::params;

/// When agent `agent`'s session `session_id` was cancelled, and by whom (`cancelled_sessions`,
/// by its key); `None` when it was not. A session is over from the moment its cancellation
/// begins, and stays so unless that cancellation leaves a call of the agent pending in it
/// (`sessions::close`).
pub(crate) fn cancelled_at(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
) -> db::Result<Option<(i64, String)>> {
    use crate::db::OptionalExtension as _;
    tx.prepare_cached(
        "SELECT at, actor FROM cancelled_sessions WHERE agent = ?1 AND session_id = ?2",
    )?
    .query_row(params![agent, session_id], db::tuple)
    .optional()
}

