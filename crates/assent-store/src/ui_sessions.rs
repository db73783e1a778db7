//! The dashboard's signed-in sessions (issue 13 §2): kept in the database, so a session
//! started on one replica is known to every other and survives a restart, by the SHA-256 of
//! the cookie's value (the database never holds a value that signs anyone in, nor the key
//! that seals a row). Expired
//! sessions are removed when a new one starts. Not audited (sign-ins are logged by the
//! server) and not announced to the event streams. A session is started by an operator key
//! (its roles are the principal's, looked up on every request) or by single sign-on (issue 14
//! §7: `kind = 'oidc'`, and the roles the provider's claims mapped to are kept with the groups
//! they were mapped from, [`SsoGrant`], so the server maps them again under its current
//! configuration on every request). Each
//! keeps when it signed in (`authenticated_at`, migration 0023), for the step-up a sensitive
//! form asks for.
//!
//! **Sealed rows** (migration 0027): each row carries a seal, HMAC-SHA256 over its columns
//! under a key derived from the audit key ([`crate::seal`]), which every replica reads
//! from `keys_dir` and the database never holds. A row without its seal — planted or edited
//! by whoever can write the database but has no key — is no session: before, a planted row
//! signed its planter in as any operator, and their approvals then carried that operator's
//! name in genuine audit records, which `audit verify` could not tell apart.
//!
//! **Key binding** (migration 0036): a key's session keeps the binding the server made of the
//! key it signed in with ([`SignedInWith::Key`]), under the seal; the server compares it with
//! its principal's current key on every request, so a key rotated by a restart, or a name
//! removed and added again, ends the sessions started before.
//!
//! **Provider binding**: a single sign-on session keeps, in the same sealed column, the
//! binding the server made of the provider it signed in through (its issuer and client id,
//! [`SignedInWith::Sso`]); the server compares it with its configured provider's on every
//! request, so a session from another provider (the `oidc` issuer or client id changed by a
//! restart) signs no one in. No migration: an SSO row stored before has an empty binding and
//! reads as no session (its operator signs in again).

use crate::db::OptionalExtension as _;
use crate::error::StoreError;
use crate::params;
use crate::seal::Sealed;
use crate::single_use;
use crate::store::Store;

/// The most live dashboard sessions one operator (one principal name, or one `oidc:` name)
/// has at once: a new sign-in past it ends that operator's oldest
/// ([`Store::start_ui_session`]).
pub const MAX_UI_SESSIONS: usize = 32;

/// A stored session row: the session, its kind (`key`, `oidc`), its roles column and when it
/// signed in.
struct Row {
    session: UiSession,
    kind: String,
    roles: String,
    authenticated_at: i64,
    /// A key's session's binding to its key, a single sign-on session's to its provider (64
    /// hex; empty in an SSO row stored before it was kept: no session).
    key_binding: String,
}

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

/// What a single sign-on session was granted at its sign-in (issue 14 §7): the roles its
/// provider's groups mapped to then, and those groups. Stored as the JSON object
/// `{"roles": [...], "groups": [...]}` in the session's `roles` column.
///
/// Attack (found by review): only the roles were kept, so an operator whose group lost a
/// role in the gateway's `oidc.roles` map (a restart with the new map) kept acting
/// with it until the session ended, up to its whole lifetime. The server now maps `groups`
/// again with the map in force and keeps only roles both mappings give
/// (`dashboard::session::signed_in_as`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsoGrant {
    /// The roles the groups mapped to at sign-in: 1 to 256, each 1 to 256 bytes.
    pub roles: Vec<String>,
    /// The provider's groups that mapped to some role: at most 1,000, each 1 to 256 bytes.
    pub groups: Vec<String>,
}

/// How a session signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignedInWith {
    /// With an operator key: the binding to that key the server made at sign-in (64 hex),
    /// which it compares with its principal's current key's on every request.
    Key {
        /// 64 lowercase hex digits.
        binding: String,
    },
    /// By single sign-on, with what its claims were granted and the binding to the provider
    /// the server made at sign-in (64 hex), which it compares with its configured provider's
    /// on every request.
    Sso {
        /// What the claims were granted.
        grant: SsoGrant,
        /// 64 lowercase hex digits.
        binding: String,
    },
}

/// A session and how it signed in.
pub type SessionWithRoles = (UiSession, SignedInWith);

impl Store {
    /// Stores session `s` under `id_sha256` (64 hex: the SHA-256 of the cookie's value),
    /// signed in with the key whose binding is `key_binding` (64 hex, made by the server:
    /// [`SignedInWith::Key`]), and removes the sessions that ended before `now` (Unix ms) and
    /// the operator's oldest beyond [`MAX_UI_SESSIONS`].
    /// `Invalid` for an id or a binding that is not 64 lowercase hex digits.
    pub fn start_ui_session(
        &self,
        id_sha256: &str,
        s: &UiSession,
        key_binding: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        check_digest(id_sha256)?;
        single_use::check_digest(
            key_binding,
            "a dashboard session's key binding is 64 lowercase hex digits",
        )?;
        self.insert_ui_session(id_sha256, s, ("key", "[]", key_binding), (now, now))
    }

    /// Stores a single sign-on session `s` (issue 14 §7) with what its claims were granted and
    /// its binding to the provider (64 hex, made by the server: [`SignedInWith::Sso`]), like
    /// [`Store::start_ui_session`], authenticated at `authenticated_at` (Unix ms: the
    /// provider's `auth_time`, which may be long before `now`; expired sessions are removed
    /// by `now`). `Invalid` for a bad id or binding, no role, more than 256 roles, a role that is empty
    /// or over 256 bytes, more than 1,000 groups, or a group that is empty or over 256 bytes.
    pub fn start_sso_ui_session(
        &self,
        id_sha256: &str,
        s: &UiSession,
        grant: &SsoGrant,
        binding: &str,
        (authenticated_at, now): (i64, i64),
    ) -> Result<(), StoreError> {
        check_digest(id_sha256)?;
        single_use::check_digest(
            binding,
            "a single sign-on session's provider binding is 64 lowercase hex digits",
        )?;
        let bad = |v: &[String], most: usize| {
            v.len() > most || v.iter().any(|r| r.is_empty() || r.len() > 256)
        };
        if grant.roles.is_empty() || bad(&grant.roles, 256) || bad(&grant.groups, 1000) {
            return Err(StoreError::Invalid(
                "an SSO session has 1 to 256 roles and at most 1,000 groups, each of 1 to 256 bytes"
                    .into(),
            ));
        }
        let grant = serde_json::to_string(grant).expect("strings serialise");
        let columns = ("oidc", grant.as_str(), binding);
        self.insert_ui_session(id_sha256, s, columns, (authenticated_at, now))
    }

    /// Stores `s` under `id_sha256` (checked by the caller) as a session of `kind` (`key` or
    /// `oidc`) with `roles` (`[]` for a key's session; an SSO grant's JSON) and `key_binding`
    /// (to its key, or for SSO to its provider), authenticated at `authenticated_at` (its sign-in:
    /// [`Store::ui_session_authenticated_at`]), and removes the sessions that ended before
    /// `now` (found by review: one time served both, so an SSO sign-in without `auth_time`
    /// removed none) and, in the same transaction, the operator's oldest sessions (by when
    /// they end) beyond [`MAX_UI_SESSIONS`] with this one.
    ///
    /// Attack (found by review): every sign-in added a row and none was removed before it
    /// expired, so one operator's key (or a script holding it) signing in in a loop grew the
    /// table without bound for 12 hours.
    fn insert_ui_session(
        &self,
        id_sha256: &str,
        s: &UiSession,
        (kind, roles, key_binding): (&str, &str, &str),
        (authenticated_at, now): (i64, i64),
    ) -> Result<(), StoreError> {
        let row = Row {
            session: s.clone(),
            kind: kind.into(),
            roles: roles.into(),
            authenticated_at,
            key_binding: key_binding.into(),
        };
        let key = self.seal_key(Sealed::UiSession);
        let seal = key.seal(&Self::sealed_columns(id_sha256, &row));
        self.write_unannounced(|tx| {
            tx.execute("DELETE FROM ui_sessions WHERE expires_at <= ?1", [now])?;
            tx.execute(
                "INSERT INTO ui_sessions (id_sha256, operator, csrf, expires_at, kind, roles, authenticated_at, seal, key_binding) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![id_sha256, s.operator, s.csrf, s.expires_at, kind, roles, authenticated_at, seal, key_binding],
            )?;
            // The operator's other sessions beyond the newest `MAX_UI_SESSIONS - 1` end.
            tx.execute(
                "DELETE FROM ui_sessions WHERE operator = ?1 AND id_sha256 <> ?2 AND id_sha256 NOT IN (SELECT id_sha256 FROM ui_sessions WHERE operator = ?1 AND id_sha256 <> ?2 ORDER BY expires_at DESC, id_sha256 LIMIT ?3)",
                params![s.operator, id_sha256, MAX_UI_SESSIONS as i64 - 1],
            )
            .map(drop)
        })?;
        Ok(())
    }

    /// The columns of session row `row` stored under `id_sha256`, as sealed:
    /// `[id_sha256, operator, csrf, expires_at, kind, roles, authenticated_at, key_binding]`
    /// (the binding since migration 0036: a row sealed before reads as no session).
    fn sealed_columns(id_sha256: &str, row: &Row) -> serde_json::Value {
        let s = &row.session;
        serde_json::json!([
            id_sha256,
            s.operator,
            s.csrf,
            s.expires_at,
            row.kind,
            row.roles,
            row.authenticated_at,
            row.key_binding
        ])
    }

    /// The live row stored under `id_sha256` (checked by the caller) at `now` (on PostgreSQL,
    /// or the database's clock if it is later), if its seal is the row's own
    /// ([`crate::seal`]); a row whose seal is not is treated as absent (fail closed).
    fn sealed_row(&self, id_sha256: &str, now: i64) -> Result<Option<Row>, StoreError> {
        let read = |c: crate::db::Conn<'_>| {
            // Found by review: a replica whose clock ran an hour slow kept serving a session
            // an hour past its end (to read the queue; every action is a write, refused on
            // that replica). On PostgreSQL it ends by the later of the two clocks.
            let sql = format!(
                "SELECT operator, csrf, expires_at, kind, roles, authenticated_at, seal, key_binding FROM ui_sessions WHERE id_sha256 = ?1 AND expires_at > {}",
                c.later_clock_sql(2)
            );
            c.query_row(&sql, params![id_sha256, now], |r| {
                let session = UiSession {
                    operator: r.get(0)?,
                    csrf: r.get(1)?,
                    expires_at: r.get(2)?,
                };
                let row = Row {
                    session,
                    kind: r.get(3)?,
                    roles: r.get(4)?,
                    authenticated_at: r.get(5)?,
                    key_binding: r.get(7)?,
                };
                Ok((row, r.get::<String>(6)?))
            })
            .optional()
        };
        // A read in one snapshot on a read session beside the writer, on SQLite too
        // (`readers.rs`): the dashboard looks a session up on each of its requests (and a
        // flood of made-up cookies until the throttle stops it), and on SQLite `Store::read`
        // takes the writer's connection, waiting out each open group commit and holding up the
        // next (found by review). A one-row lookup by key loses little to a cold page cache.
        // Inside a batch (none calls this today) on the writer, as `Store::read` does.
        let row = if crate::db::HOLDS_BATCH.with(|h| h.get()) {
            self.read(read)?
        } else {
            self.readers.read(&self.database, read)?
        };
        let key = self.seal_key(Sealed::UiSession);
        Ok(row
            .filter(|(row, seal)| key.holds(&Self::sealed_columns(id_sha256, row), seal))
            .map(|(row, _)| row))
    }

    /// The session stored under `id_sha256` if it has not ended by `now` (Unix ms).
    pub fn ui_session(&self, id_sha256: &str, now: i64) -> Result<Option<UiSession>, StoreError> {
        Ok(self.ui_session_with_roles(id_sha256, now)?.map(|(s, _)| s))
    }

    /// [`Store::ui_session`] with how it signed in: a key's session with its key binding (its
    /// roles are its principal's), a single sign-on session with what it was granted and its
    /// provider binding. A key's session without a binding (started before migration 0036), an
    /// SSO session without one (stored before it was kept), or an SSO session whose stored
    /// grant does not read back, has no role, or was stored before its groups were kept (a
    /// bare array of roles) is treated as unknown (fail closed: its operator signs in again),
    /// and so is any row whose seal is not its own (see the module doc).
    pub fn ui_session_with_roles(
        &self,
        id_sha256: &str,
        now: i64,
    ) -> Result<Option<SessionWithRoles>, StoreError> {
        check_digest(id_sha256)?;
        let row = self.sealed_row(id_sha256, now)?;
        Ok(row.and_then(
            |Row {
                 session,
                 kind,
                 roles,
                 key_binding,
                 ..
             }| match kind.as_str() {
                "key" if !key_binding.is_empty() => Some((
                    session,
                    SignedInWith::Key {
                        binding: key_binding,
                    },
                )),
                "oidc" if !key_binding.is_empty() => serde_json::from_str::<SsoGrant>(&roles)
                    .ok()
                    .filter(|g| !g.roles.is_empty())
                    .map(|grant| {
                        let binding = key_binding;
                        (session, SignedInWith::Sso { grant, binding })
                    }),
                _ => None,
            },
        ))
    }

    /// When the session stored under `id_sha256` last authenticated (Unix ms: the `now` of its
    /// sign-in), if it has not ended by `now` and its seal is its own. What a sensitive
    /// form's step-up checks (removing a passkey).
    pub fn ui_session_authenticated_at(
        &self,
        id_sha256: &str,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        check_digest(id_sha256)?;
        Ok(self.sealed_row(id_sha256, now)?.map(|r| r.authenticated_at))
    }

    /// Ends every dashboard session of `operator` (on every replica at once): a reload that
    /// changed their key or roles signs them out (issue 14 §8). Returns how many ended.
    pub fn end_ui_sessions_of(&self, operator: &str) -> Result<usize, StoreError> {
        Ok(self.write_unannounced(|tx| {
            tx.execute("DELETE FROM ui_sessions WHERE operator = ?1", [operator])
        })?)
    }

    /// Ends the single sign-on sessions of `operator` (an `oidc:` name) for which `stands`,
    /// given the session's [`SsoGrant`], is false (on every replica at once); a row whose grant
    /// cannot be read ends too. How many. What a newer sign-in of that person does first
    /// (the server's `dashboard::oidc::regroup`): a session keeps the groups of its own
    /// sign-in and maps them again on every request, so without this a group the provider
    /// took away stood in the person's older sessions until they expired. Errors: the store's.
    pub fn end_sso_sessions_unless(
        &self,
        operator: &str,
        stands: impl Fn(&SsoGrant) -> bool,
    ) -> Result<usize, StoreError> {
        let rows: Vec<(String, String)> = crate::sql::rows(
            self.lock().conn(),
            "SELECT id_sha256, roles FROM ui_sessions WHERE operator = ?1 AND kind = 'oidc'",
            params![operator],
            crate::db::tuple,
        )?;
        let ends =
            |roles: &str| serde_json::from_str::<SsoGrant>(roles).map_or(true, |g| !stands(&g));
        let ended: Vec<String> = rows
            .into_iter()
            .filter(|(_, roles)| ends(roles))
            .map(|(id, _)| id)
            .collect();
        if ended.is_empty() {
            return Ok(0);
        }
        self.write_unannounced(|tx| {
            for id in &ended {
                tx.execute(
                    "DELETE FROM ui_sessions WHERE id_sha256 = ?1",
                    [id.as_str()],
                )?;
            }
            Ok::<_, StoreError>(ended.len())
        })
    }

    /// Ends the session stored under `id_sha256` (on every replica at once).
    pub fn end_ui_session(&self, id_sha256: &str) -> Result<(), StoreError> {
        check_digest(id_sha256)?;
        self.write_unannounced(|tx| {
            tx.execute("DELETE FROM ui_sessions WHERE id_sha256 = ?1", [id_sha256])
                .map(drop)
        })?;
        Ok(())
    }
}

/// `Invalid` unless `d` is 64 lowercase hex digits.
fn check_digest(d: &str) -> Result<(), StoreError> {
    single_use::check_digest(
        d,
        "a dashboard session is stored by the 64 hex digits of its SHA-256",
    )
}
