//! The dashboard's signed-in sessions (issue 13 §2): kept in the database, so a session
//! started on one replica is known to every other and survives a restart, by the SHA-256 of
//! the cookie's value (the database never holds a value that signs anyone in). Expired
//! sessions are removed when a new one starts. Not audited (sign-ins are logged by the
//! server) and not announced to the event streams.

use crate::db::OptionalExtension as _;
use crate::error::StoreError;
use crate::params;
use crate::store::Store;

/// One signed-in operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiSession {
    /// The operator principal's name.
    pub operator: String,
    /// The session's CSRF token (64 hex), echoed by its forms.
    pub csrf: String,
    /// When it ends, Unix ms.
    pub expires_at: i64,
}

impl Store {
    /// Stores session `s` under `id_sha256` (64 hex: the SHA-256 of the cookie's value) and
    /// removes the sessions that ended before `now` (Unix ms). `Invalid` for an id that is not
    /// 64 hex digits.
    pub fn start_ui_session(
        &self,
        id_sha256: &str,
        s: &UiSession,
        now: i64,
    ) -> Result<(), StoreError> {
        check_digest(id_sha256)?;
        let guard = self.lock();
        guard.conn().write(|tx| {
            tx.execute("DELETE FROM ui_sessions WHERE expires_at <= ?1", [now])?;
            tx.execute(
                "INSERT INTO ui_sessions (id_sha256, operator, csrf, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![id_sha256, s.operator, s.csrf, s.expires_at],
            )
            .map(drop)
        })?;
        Ok(())
    }

    /// The session stored under `id_sha256` if it has not ended by `now` (Unix ms).
    pub fn ui_session(&self, id_sha256: &str, now: i64) -> Result<Option<UiSession>, StoreError> {
        check_digest(id_sha256)?;
        let guard = self.lock();
        Ok(guard
            .conn()
            .query_row(
                "SELECT operator, csrf, expires_at FROM ui_sessions WHERE id_sha256 = ?1 AND expires_at > ?2",
                params![id_sha256, now],
                |r| {
                    Ok(UiSession {
                        operator: r.get(0)?,
                        csrf: r.get(1)?,
                        expires_at: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    /// Ends the session stored under `id_sha256` (on every replica at once).
    pub fn end_ui_session(&self, id_sha256: &str) -> Result<(), StoreError> {
        check_digest(id_sha256)?;
        let guard = self.lock();
        guard.conn().write(|tx| {
            tx.execute("DELETE FROM ui_sessions WHERE id_sha256 = ?1", [id_sha256])
                .map(drop)
        })?;
        Ok(())
    }
}

/// `Invalid` unless `d` is 64 lowercase hex digits.
fn check_digest(d: &str) -> Result<(), StoreError> {
    if d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(StoreError::Invalid(
            "a dashboard session is stored by the 64 hex digits of its SHA-256".into(),
        ))
    }
}
