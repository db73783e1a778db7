//! Dashboard sign-ins through an OpenID Connect provider in progress (issue 14 §7): kept in
//! the database by the SHA-256 of their `state`, so that the provider's redirect may reach any
//! replica; bound to the browser that started them (the SHA-256 of a cookie's value); taken
//! once, and only before they expire. The database never holds a value that finishes a sign-in
//! on its own: the `state` and the browser cookie are stored as digests (the nonce and PKCE
//! verifier are useless without the provider's one-time code). Not audited: sign-ins are
//! logged by the server; and written unannounced, as bookkeeping that wakes no event stream
//! (found by review: every start, which needs no key, woke every replica's streams).

use crate::db::OptionalExtension as _;
use crate::error::StoreError;
use crate::params;
use crate::single_use;
use crate::sql::from_row;
use crate::store::Store;

/// One sign-in in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcLogin {
    /// SHA-256 (64 hex) of the random value in the browser's sign-in cookie.
    pub browser_sha256: String,
    /// The nonce the ID token must carry.
    pub nonce: String,
    /// The PKCE code verifier (RFC 7636) sent with the code.
    pub pkce_verifier: String,
    /// The dashboard path to go to afterwards.
    pub next: String,
    /// Unix ms; the sign-in cannot be finished after it.
    pub expires_at: i64,
}

/// Longest `nonce`, `pkce_verifier` or `next` stored, in bytes.
const MAX_FIELD: usize = 4096;

/// Most sign-ins in progress at once: starting one needs no key, so the table is bounded
/// (past it, new SSO sign-ins wait until some expire; key sign-in is unaffected). A row is a
/// few hundred bytes: the bound is about 30 MB.
pub const MAX_IN_PROGRESS: i64 = 100_000;

/// Most sign-ins in progress started by one client (a network: the server's digest of it);
/// past it, its next start is refused until one finishes or expires. None is ever replaced.
///
/// Attacks (found by review): 10,000 `GET /ui/oidc/start` from one address (17 a second keeps
/// it so) filled [`MAX_IN_PROGRESS`] and every operator's SSO sign-in was refused; and when a
/// client's start past the bound replaced its oldest, a neighbour behind the same NAT (or, with
/// replicas each counting its own starts, anyone sharing the address) replaced the sign-in a
/// person had in progress.
pub const MAX_PER_CLIENT: i64 = 64;

impl Store {
    /// Stores sign-in `l` under `state_sha256` (64 hex), started by the client whose digest is
    /// `client_sha256` (64 hex: the server's digest of its network), after removing those that
    /// expired before `now` (Unix ms): `true`; `false` (nothing stored) when that client has
    /// [`MAX_PER_CLIENT`] in progress already — counted in the write transaction, so every
    /// replica's starts together. `Invalid` for a digest that is not 64 lowercase hex digits,
    /// a field longer than 4096 bytes, or when [`MAX_IN_PROGRESS`] sign-ins are in progress.
    pub fn put_oidc_login(
        &self,
        state_sha256: &str,
        client_sha256: &str,
        l: &OidcLogin,
        now: i64,
    ) -> Result<bool, StoreError> {
        check_digest(state_sha256)?;
        check_digest(client_sha256)?;
        check_digest(&l.browser_sha256)?;
        if [&l.nonce, &l.pkce_verifier, &l.next]
            .iter()
            .any(|f| f.len() > MAX_FIELD)
        {
            return Err(StoreError::Invalid(
                "an SSO sign-in's nonce, verifier and next path are at most 4096 bytes".into(),
            ));
        }
        self.write_unannounced(|tx| {
            let n = single_use::prune_and_count(tx, "oidc_logins", "expires_at", now, None)?;
            let mine: i64 = tx
                .prepare_cached("SELECT COUNT(*) FROM oidc_logins WHERE client_sha256 = ?1")?
                .query_row(params![client_sha256], |r| r.get(0))?;
            if mine >= MAX_PER_CLIENT {
                return Ok(false);
            }
            if n >= MAX_IN_PROGRESS {
                return Err(StoreError::Invalid(format!(
                    "{n} single sign-on sign-ins are in progress; wait until some expire"
                )));
            }
            tx.execute(
                "INSERT INTO oidc_logins (state_sha256, browser_sha256, nonce, pkce_verifier, next, expires_at, client_sha256) VALUES (?1,?2,?3,?4,?5,?6,?7)",
                params![state_sha256, l.browser_sha256, l.nonce, l.pkce_verifier, l.next, l.expires_at, client_sha256],
            )?;
            Ok(true)
        })
    }

    /// Takes the sign-in stored under `state_sha256` once: it is removed whatever follows, and
    /// returned when it has not expired by `now` and was started by the browser whose cookie
    /// digest is `browser_sha256`; `None` otherwise (unknown, taken already, expired, or
    /// another browser's: a `state` is never usable twice, even by a wrong first try). An
    /// unknown state is found by a read, without the write transaction (found by review: the
    /// callback needs no credentials, and every request with a made-up state took the writer).
    pub fn take_oidc_login(
        &self,
        state_sha256: &str,
        browser_sha256: &str,
        now: i64,
    ) -> Result<Option<OidcLogin>, StoreError> {
        check_digest(state_sha256)?;
        check_digest(browser_sha256)?;
        let known: Option<i64> = self
            .lock()
            .conn()
            .prepare_cached("SELECT 1 FROM oidc_logins WHERE state_sha256 = ?1")?
            .query_row([state_sha256], |r| r.get(0))
            .optional()?;
        if known.is_none() {
            return Ok(None);
        }
        self.write_unannounced(|tx| {
            let l = single_use::take(
                tx,
                ("oidc_logins", "state_sha256", state_sha256),
                "browser_sha256, nonce, pkce_verifier, next, expires_at",
                |r| {
                    from_row!(r => OidcLogin {
                        browser_sha256, nonce, pkce_verifier, next, expires_at,
                    })
                },
                // Whoever names the state uses it up, whichever browser it is.
                |_| true,
            )?;
            Ok(l.filter(|l| l.expires_at > now && l.browser_sha256 == browser_sha256))
        })
    }
}

/// `Invalid` unless `d` is 64 lowercase hex digits.
fn check_digest(d: &str) -> Result<(), StoreError> {
    single_use::check_digest(
        d,
        "an SSO sign-in is stored by SHA-256 digests of 64 hex digits",
    )
}
