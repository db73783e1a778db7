//! The seal of a `grants` row ([`crate::seal`], [`crate::seal::Sealed::Grant`]): what it is
//! over ([`GrantSeal`]: the sealed columns, the key binding of migration 0048, the maker), its
//! two forms (over the maker since `v2:`, the form before without), and the one reading of a
//! stored row's sealed columns and seal alone ([`StoredGrantSeal`], [`SEALED_COLUMNS`]) that
//! the cover of a proposed call (`cover.rs`) and the origins of a grant-minted token
//! (`origin.rs`) check: they read nothing the seal is not over (found by review: reading the
//! whole row there let a mistyped `discouraged` or `revoked_by` fail every proposal of the
//! tool). The listing (`tokens.rs`) reads grants whole and checks them with
//! [`GrantSeal::of`]. A grant is sealed when it is made (`tokens.rs` `create_grant`).

use crate::db;
use crate::seal::SealKey;
use assent_core::grant::Grant;
use serde_json::{Value, json};

/// A `grants` row's sealed columns ([`crate::seal`]): `[id, agent, session_id, tool, server,
/// call_hash, scope, expires_at, approval_id, created_at]` — what decides which calls it
/// covers and where it came from (`revoked_at` is not: a revocation undone is found by `audit
/// verify`).
pub(crate) type GrantColumns<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    &'a str,
    Option<i64>,
    &'a str,
    i64,
);

/// What a `grants` row's seal is over: its [`GrantColumns`], its `key_binding` (migration
/// 0048) and its maker (`created_by`), as stored.
pub(crate) struct GrantSeal<'a> {
    /// The row's [`GrantColumns`].
    pub cols: GrantColumns<'a>,
    /// Its `key_binding`, `None` for a grant made before migration 0048.
    pub binding: Option<&'a str>,
    /// Its `created_by`: whom separation of duties judges (`grant::creator_conflict`) and
    /// whose removal revokes it (`grants_revoke.rs`).
    pub created_by: &'a str,
}

/// The prefix of a seal over the maker too ([`GrantSeal::seal`]); a seal without it is of the
/// form before (the columns and binding only).
const MAKER_SEALED: &str = "v2:";

/// The tag that opens the columns of a seal over the maker: that form's list can equal no
/// list of the form before (which opens with the grant's id and is 10 or 11 long, not 13).
const MAKER_TAG: &str = "assent/grant/v2";

impl GrantSeal<'_> {
    /// The sealed value of the row: with `maker`, `[MAKER_TAG, …columns, key_binding or null,
    /// created_by]` (every grant made since its maker is sealed); without, the form before
    /// (`[…columns]`, followed by its `key_binding` when it has one, migration 0048), which a
    /// grant made before keeps. The one place either list is built.
    pub(crate) fn columns(&self, maker: bool) -> Value {
        let g = self.cols;
        if maker {
            return json!([
                MAKER_TAG,
                g.0,
                g.1,
                g.2,
                g.3,
                g.4,
                g.5,
                g.6,
                g.7,
                g.8,
                g.9,
                self.binding,
                self.created_by
            ]);
        }
        let mut v = json!([g.0, g.1, g.2, g.3, g.4, g.5, g.6, g.7, g.8, g.9]);
        if let Some(b) = self.binding {
            v.as_array_mut().expect("an array").push(json!(b));
        }
        v
    }

    /// The seal of a new grant under `key`: [`MAKER_SEALED`] and the HMAC over its columns,
    /// binding and maker. Found by review: `created_by` was not sealed, so a database writer
    /// renaming a grant's maker kept it alive past the maker's removal, or past separation of
    /// duties.
    pub(crate) fn seal(&self, key: &SealKey) -> String {
        format!("{MAKER_SEALED}{}", key.seal(&self.columns(true)))
    }

    /// Whether `seal` is this row's under `key`: over the maker when it says so
    /// ([`MAKER_SEALED`]), else in the form before. A maker-sealed seal stripped of its
    /// prefix holds for no row of the form before (its HMAC is over another list), so a
    /// grant made since cannot be downgraded to leave its maker unsealed; a binding cleared,
    /// copied in or changed, or a maker renamed, breaks it (the grant then covers nothing).
    pub(crate) fn holds(&self, key: &SealKey, seal: &str) -> bool {
        match seal.strip_prefix(MAKER_SEALED) {
            Some(mac) => key.holds(&self.columns(true), mac),
            None => key.holds(&self.columns(false), seal),
        }
    }
}

impl<'a> GrantSeal<'a> {
    /// What the seal of listed grant `g` is over, with its `key_binding` `binding`.
    pub(crate) fn of(g: &'a Grant, binding: Option<&'a str>) -> Self {
        GrantSeal {
            cols: (
                &g.id,
                &g.agent,
                g.session_id.as_deref(),
                &g.tool,
                g.server.as_deref(),
                g.call_hash.as_deref(),
                &g.scope,
                g.expires_at,
                &g.approval_id,
                g.created_at,
            ),
            binding,
            created_by: &g.created_by,
        }
    }
}

/// What [`StoredGrantSeal::read`] reads, in its order: the sealed columns, `key_binding`,
/// `created_by` and `seal` of a `grants` row (unqualified names: select them from `grants`).
pub(crate) const SEALED_COLUMNS: &str = "id, agent, session_id, tool, server, call_hash, scope, \
     expires_at, approval_id, created_at, key_binding, created_by, seal";

/// A stored `grants` row's sealed columns and seal as read ([`SEALED_COLUMNS`]): checked with
/// [`StoredGrantSeal::holds`] before anything it says is used.
pub(crate) struct StoredGrantSeal {
    /// Grant id.
    pub id: String,
    /// The agent it lets through.
    pub agent: String,
    /// Its session, for a `session` grant.
    pub session_id: Option<String>,
    /// Its tool.
    pub tool: String,
    /// Its MCP server, if any.
    pub server: Option<String>,
    /// The call hash it is bound to; `None` for a whole-tool grant.
    pub call_hash: Option<String>,
    /// Its scope as stored (`session`, `workspace`, a duration).
    pub scope: String,
    /// When it ends, Unix ms; `None` for none.
    pub expires_at: Option<i64>,
    /// The approval whose decision made it.
    pub approval_id: String,
    /// When it was made, Unix ms.
    pub created_at: i64,
    /// Its `key_binding` (migration 0048), `None` before.
    pub binding: Option<String>,
    /// Its maker.
    pub created_by: String,
    /// Its seal as stored.
    pub seal: String,
}

impl StoredGrantSeal {
    /// The [`SEALED_COLUMNS`] of row `r`, its first 13 columns (a query may select more
    /// after them). Errors: a column of another type than the gateway writes (a damaged row:
    /// `is_damaged_row`).
    pub(crate) fn read(r: &db::Row<'_>) -> db::Result<Self> {
        Ok(StoredGrantSeal {
            id: r.get(0)?,
            agent: r.get(1)?,
            session_id: r.get(2)?,
            tool: r.get(3)?,
            server: r.get(4)?,
            call_hash: r.get(5)?,
            scope: r.get(6)?,
            expires_at: r.get(7)?,
            approval_id: r.get(8)?,
            created_at: r.get(9)?,
            binding: r.get(10)?,
            created_by: r.get(11)?,
            seal: r.get(12)?,
        })
    }

    /// What its seal is over.
    pub(crate) fn sealed(&self) -> GrantSeal<'_> {
        GrantSeal {
            cols: (
                &self.id,
                &self.agent,
                self.session_id.as_deref(),
                &self.tool,
                self.server.as_deref(),
                self.call_hash.as_deref(),
                &self.scope,
                self.expires_at,
                &self.approval_id,
                self.created_at,
            ),
            binding: self.binding.as_deref(),
            created_by: &self.created_by,
        }
    }

    /// Whether its stored seal is its own under `key` ([`GrantSeal::holds`]).
    pub(crate) fn holds(&self, key: &SealKey) -> bool {
        self.sealed().holds(key, &self.seal)
    }
}
