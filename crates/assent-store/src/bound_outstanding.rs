//! Whether anything outstanding rests on decisions made with a given kind of binding: what a
//! single sign-on asks before it weighs again what the person's earlier sign-ins decided (the
//! server's `dashboard::oidc::regroup`), so that a sign-in of someone with nothing
//! outstanding costs one read beside the writer, not a scan of every vote, grant and token on
//! it (found by review: a sign-in refused for having no role, repeated in a loop, stalled every
//! proposal and decision behind those scans).

use crate::error::StoreError;
use crate::params;
use crate::store::Store;

/// Rows whose binding column `c` starts with `?1`: by length and text, as both backends
/// compare it (no `LIKE`, whose `%` and `_` an identity may hold).
fn starts(c: &str) -> String {
    format!("substr({c}, 1, length(CAST(?1 AS TEXT))) = CAST(?1 AS TEXT)")
}

/// One row when anything rests on a binding starting with `?1` at `?2` (Unix ms): a vote on a
/// pending approval; an unexpired grant; an unredeemed unexpired token of an approval decided
/// or voted on with it, or let through by a grant made with it (named by the sealed decision
/// `grant:<gid>` or by `approvals.grant_id`, expired or not: [`crate::consent`]).
fn outstanding() -> String {
    let live = "t.used_at IS NULL AND t.expires_at > ?2";
    let by_grant = "g ON substr(d.actor, 1, 6) = 'grant:' AND g.id = substr(d.actor, 7)";
    [
        format!("SELECT 1 FROM votes v JOIN approvals a ON a.id = v.approval_id WHERE a.status = 'pending' AND {}", starts("v.key_binding")),
        format!("SELECT 1 FROM grants WHERE revoked_at IS NULL AND {} AND {}", crate::sql::grant_unexpired_at("?2"), starts("key_binding")),
        format!("SELECT 1 FROM tokens t JOIN decisions d ON d.approval_id = t.approval_id WHERE {live} AND {}", starts("d.key_binding")),
        format!("SELECT 1 FROM tokens t JOIN votes v ON v.approval_id = t.approval_id WHERE {live} AND {}", starts("v.key_binding")),
        format!("SELECT 1 FROM tokens t JOIN decisions d ON d.approval_id = t.approval_id JOIN grants {by_grant} WHERE {live} AND {}", starts("g.key_binding")),
        format!("SELECT 1 FROM tokens t JOIN approvals a ON a.id = t.approval_id JOIN grants g ON g.id = a.grant_id WHERE {live} AND {}", starts("g.key_binding")),
    ]
    .join(" UNION ALL ")
        + " LIMIT 1"
}

impl Store {
    /// Whether, at `now` (Unix ms), anything outstanding rests on a binding (`votes`, `grants`,
    /// `decisions` `key_binding`) that starts with `prefix` ([`outstanding`]). Found by
    /// review: a grant's expiry was not asked, so one expired grant made every later sign-in of
    /// its maker scan again; and the tokens a grant let through were not asked. A superset of
    /// what [`Store::withdraw_votes`], [`Store::revoke_grants_unless`] and
    /// [`Store::void_unbacked_tokens`] could take back from those bindings: `false` means
    /// they have nothing to do. Read in one snapshot beside the writer. Errors: the store's.
    pub fn binding_outstanding(&self, prefix: &str, now: i64) -> Result<bool, StoreError> {
        use crate::db::OptionalExtension as _;
        self.aside(|c| {
            let row: Option<i64> = c
                .query_row(&outstanding(), params![prefix, now], |r| r.get(0))
                .optional()?;
            Ok(row.is_some())
        })
    }
}
