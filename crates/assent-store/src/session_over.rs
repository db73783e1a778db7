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

/// The session of approval `aid` and who cancelled it, when that session is over for the
/// approval's agent ([`cancelled_at`]); `None` otherwise (or no such approval). What a
/// redemption asks: a call approved while its session's cancellation was under way — by
/// another operator, an in-client answer or a timeout's approving default — runs nothing
/// (found by review: its token was redeemed before the cancellation's last write voided it).
pub(crate) fn of_approval(tx: Conn<'_>, aid: &str) -> db::Result<Option<(String, String)>> {
    use crate::db::OptionalExtension as _;
    tx.prepare_cached(
        "SELECT a.session_id, c.actor FROM approvals a JOIN cancelled_sessions c \
         ON c.agent = a.agent AND c.session_id = a.session_id WHERE a.id = ?1",
    )?
    .query_row(params![aid], db::tuple)
    .optional()
}
