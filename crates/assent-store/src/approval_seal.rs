//! The seal of an approval's terms ([`crate::seal`], migration 0029): what it was held under and
//! what its token will bind, fixed when it is held — id, agent, session, device, call hash and
//! canonical call, risk tier, irreversibility, default decision, quorum, passkey, separation of
//! duties, in-client approval, `on_behalf_of`, target and request time. An approval whose seal
//! does not hold (its row planted or edited by whoever can write the database but not read
//! `keys_dir`) is never approved: an operator's approval is refused as damaged, and its expiry
//! rejects whatever its stored default says; it can still be denied or cancelled. Found by
//! review: a pending call's stored default turned to `approve` and its deadline to the past had
//! the expiry sweep mint a genuine token, and a device binding removed from a pending call made
//! the operator's approval mint a token for any device.

use crate::db::{self, Conn, OptionalExtension as _};
use crate::seal::SealKey;
use serde_json::{Value, json};

/// An approval's sealed terms, as stored.
pub(crate) struct Terms<'a> {
    pub id: &'a str,
    pub agent: &'a str,
    pub session_id: &'a str,
    pub device_id: Option<&'a str>,
    pub call_hash: &'a str,
    pub canonical: &'a str,
    pub risk_tier: &'a str,
    pub irreversible: bool,
    pub default_decision: &'a str,
    /// The stored `quorum` column (JSON text), if any.
    pub quorum: Option<&'a str>,
    pub require_passkey: bool,
    pub separation_of_duties: bool,
    pub in_client: bool,
    pub on_behalf_of: Option<&'a str>,
    pub target_type: &'a str,
    pub target_id: &'a str,
    pub requested_at: i64,
}

impl Terms<'_> {
    /// The JSON array the seal is over, in the field order above.
    fn columns(&self) -> Value {
        json!([
            self.id,
            self.agent,
            self.session_id,
            self.device_id,
            self.call_hash,
            self.canonical,
            self.risk_tier,
            self.irreversible,
            self.default_decision,
            self.quorum,
            self.require_passkey,
            self.separation_of_duties,
            self.in_client,
            self.on_behalf_of,
            self.target_type,
            self.target_id,
            self.requested_at
        ])
    }

    /// The seal of these terms under `key` (64 hex).
    pub(crate) fn seal(&self, key: &SealKey) -> String {
        key.seal(&self.columns())
    }
}

/// Runs `f` on approval `id`'s stored terms and seal; `None` when there is no such approval.
fn with_stored<T>(
    conn: Conn<'_>,
    id: &str,
    f: impl FnOnce(&Terms<'_>, &str) -> T,
) -> db::Result<Option<T>> {
    type Texts = (String, String, Option<String>, String, String, String);
    type Flags = (bool, String, Option<String>, bool, bool, bool);
    type Rest = (Option<String>, String, String, i64, String);
    let row: Option<(Texts, Flags, Rest)> = conn
        .prepare_cached(
            "SELECT agent, session_id, device_id, call_hash, canonical, risk_tier,
                    irreversible, default_decision, quorum, require_passkey, separation_of_duties, in_client,
                    on_behalf_of, target_type, target_id, requested_at, seal
             FROM approvals WHERE id = ?1",
        )?
        .query_row([id], |r| {
            let texts = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?);
            let flags = (r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?);
            let rest = (r.get(12)?, r.get(13)?, r.get(14)?, r.get(15)?, r.get(16)?);
            Ok((texts, flags, rest))
        })
        .optional()?;
    Ok(row.map(|(t, g, r)| {
        let terms = Terms {
            id,
            agent: &t.0,
            session_id: &t.1,
            device_id: t.2.as_deref(),
            call_hash: &t.3,
            canonical: &t.4,
            risk_tier: &t.5,
            irreversible: g.0,
            default_decision: &g.1,
            quorum: g.2.as_deref(),
            require_passkey: g.3,
            separation_of_duties: g.4,
            in_client: g.5,
            on_behalf_of: r.0.as_deref(),
            target_type: &r.1,
            target_id: &r.2,
            requested_at: r.3,
        };
        f(&terms, &r.4)
    }))
}

/// Seals approval `id` as just inserted, in the inserting transaction (so what is sealed is
/// what the gateway wrote).
pub(crate) fn seal_new(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<()> {
    if let Some(seal) = with_stored(conn, id, |t, _| t.seal(key))? {
        conn.prepare_cached("UPDATE approvals SET seal = ?2 WHERE id = ?1")?
            .execute(crate::params![id, seal])?;
    }
    Ok(())
}

/// Whether approval `id`'s stored terms hold their seal under `key`; `false` for an unsealed
/// row (before migration 0029, or planted) and for no such approval.
pub(crate) fn holds(conn: Conn<'_>, key: &SealKey, id: &str) -> db::Result<bool> {
    let held = with_stored(conn, id, |t, seal| key.holds(&t.columns(), seal))?;
    Ok(held.unwrap_or(false))
}
