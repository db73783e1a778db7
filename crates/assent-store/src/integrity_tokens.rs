//! The cross-check of what lets a call through (`assent audit verify`, check `state`): tokens
//! and grants against their audit records. The gateway signs a token from its row and lets a
//! call through on a grant row, so a row edited behind its back (a token bound to another
//! call or living longer, a revoked grant brought back) would let calls through while every
//! record still looks well formed. Called by [`crate::integrity::cross_check_on`], in its
//! snapshot.

use crate::archive::Gone;
use crate::audit::{json_of, text_at};
use crate::db::{self, Conn};
use crate::sql;
use assent_core::canonical::{canonical_value, sha256_hex};
use serde_json::Value;
use std::collections::HashMap;
use std::ops::ControlFlow;

/// The fields of a grant that its `grant.created` record fixes: agent, session, tool, server,
/// call hash, scope, expiry, and who made it (the record's actor).
type GrantFields = (
    String,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    String,
    Option<i64>,
    String,
);

/// Each audit record of `kind` naming `key` in its data: that value → `(seq, data, actor)`,
/// the oldest record of each.
type Records = HashMap<String, (i64, Value, String)>;

fn records_by(conn: Conn<'_>, kind: &str, key: &str) -> db::Result<Records> {
    let mut out = HashMap::new();
    conn.prepare_cached("SELECT seq, data, actor FROM audit WHERE kind = ?1 ORDER BY seq")?
        .for_each([kind], |r| {
            let d = json_of(r)?;
            if let Some(id) = text_at(&d, key) {
                out.entry(id).or_insert((r.get(0)?, d, r.get(2)?));
            }
            Ok(ControlFlow::Continue(()))
        })?;
    Ok(out)
}

/// Every grant must be the one its `grant.created` record describes (same agent, session,
/// tool, server, call hash, scope and expiry, made by the record's actor: found by review, a
/// maker renamed in the database went unnoticed, and who made a grant decides whether it stands
/// for a call under separation of duties and whether a reload revokes it): a grant inserted or widened behind the
/// gateway's back would let calls through with no one's approval. It is revoked exactly when a
/// `grant.revoked` record says so: found by review, a revoked grant whose `revoked_at` was
/// cleared let calls through again. A `grant.created` record whose grant is gone is reported
/// too.
pub(crate) fn grants(
    conn: Conn<'_>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
) -> db::Result<()> {
    let mut created: HashMap<String, (i64, GrantFields)> =
        records_by(conn, "grant.created", "grant_id")?
            .into_iter()
            .map(|(gid, (seq, d, actor))| {
                let fields: GrantFields = (
                    text_at(&d, "agent").unwrap_or_default(),
                    text_at(&d, "session_id"),
                    text_at(&d, "tool").unwrap_or_default(),
                    text_at(&d, "server"),
                    text_at(&d, "call_hash"),
                    text_at(&d, "scope").unwrap_or_default(),
                    d["expires_at"].as_i64(),
                    actor,
                );
                (gid, (seq, fields))
            })
            .collect();
    let revoked = records_by(conn, "grant.revoked", "grant_id")?;
    // A row with a value of another type than the gateway writes is named, not a failure of
    // the whole check (its cover leaves it out: it lets no call through).
    type GrantRow = (String, Result<(GrantFields, Option<i64>), String>);
    let rows: Vec<GrantRow> = conn.query_map(
        "SELECT id, agent, session_id, tool, server, call_hash, scope, expires_at, revoked_at, created_by FROM grants ORDER BY created_at, rowid",
        [],
        |r| {
            let read = || -> db::Result<(GrantFields, Option<i64>)> {
                let fields = (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(9)?);
                Ok((fields, r.get(8)?))
            };
            match read() {
                Ok(row) => Ok((r.get(0)?, Ok(row))),
                Err(e) if e.is_damaged_row() => Ok((r.get(0)?, Err(e.to_string()))),
                Err(e) => Err(e),
            }
        },
    )?;
    for (gid, read) in rows {
        let (fields, revoked_at) = match read {
            Ok(row) => row,
            Err(e) => {
                created.remove(&gid);
                out.push((None, format!(
                    "grant {gid} is damaged: {e} (a value of another type than the gateway writes); it covers no call until it is repaired"
                )));
                continue;
            }
        };
        match created.remove(&gid) {
            None if grant_archived(conn, &gid, gone)? => {}
            None => out.push((None, format!(
                "grant {gid} has no grant.created record: no approval created it, yet it would let calls through"
            ))),
            Some((seq, rec)) if rec != fields => out.push((Some(seq), format!(
                "grant {gid} differs from its grant.created record {seq} (agent, session, tool, server, call hash, scope, expiry or maker changed)"
            ))),
            Some(_) => match (revoked_at, revoked.get(&gid)) {
                (None, Some((seq, ..))) => out.push((Some(*seq), format!(
                    "grant {gid} was revoked (audit record {seq}) but is not marked revoked: it would let calls through again"
                ))),
                (Some(_), None) => out.push((None, format!(
                    "grant {gid} is marked revoked, but the audit log has no grant.revoked record for it"
                ))),
                _ => {}
            },
        }
    }
    let mut orphans: Vec<(i64, String)> =
        created.into_iter().map(|(g, (seq, _))| (seq, g)).collect();
    orphans.sort();
    for (seq, g) in orphans {
        out.push((Some(seq), format!(
            "audit record {seq} (grant.created) names grant {g}, which is not in the grants table"
        )));
    }
    grant_uses(conn, out)
}

/// Every call a grant let through (`grant.used`, naming the approval and `grant_id`) must
/// still name that grant in `approvals.grant_id`, which no seal covers. Found by review: a
/// writer who cleared it hid the call's token from the voiding when the grant was revoked
/// (the redemption reads the grant from the sealed decision too, `crate::consent`), with
/// `audit verify` green. An approval that is gone is reported by the approvals' check.
fn grant_uses(conn: Conn<'_>, out: &mut Vec<(Option<i64>, String)>) -> db::Result<()> {
    conn.prepare_cached(
        "SELECT au.seq, au.approval_id, au.data, a.grant_id FROM audit au \
         JOIN approvals a ON a.id = au.approval_id WHERE au.kind = 'grant.used' ORDER BY au.seq",
    )?
    .for_each([], |r| {
        let (seq, aid, row): (i64, String, Option<String>) = (r.get(0)?, r.get(1)?, r.get(3)?);
        let recorded = text_at(&json_of(r)?, "grant_id");
        if recorded.is_some() && row != recorded {
            let (g, now) = (recorded.unwrap_or_default(), row.as_deref().unwrap_or("none"));
            out.push((Some(seq), format!(
                "approval {aid} was let through by grant {g} (audit record {seq}, grant.used), but its row names grant {now}: its token would escape that grant's revocation"
            )));
        }
        Ok(ControlFlow::Continue(()))
    })
}

/// Whether grant `gid`'s `grant.created` record may have been archived: created before the
/// cut-off and revoked or expired by the run (a grant still standing then had its record
/// carried forward). A `session` grant stored without an expiry lapsed
/// [`assent_core::grant::DEFAULT_SESSION_GRANT_MAX_MS`] after it was made.
fn grant_archived(conn: Conn<'_>, gid: &str, gone: &Gone) -> db::Result<bool> {
    type Row = (i64, Option<i64>, Option<i64>, Option<String>);
    let (created, expires, revoked, session): Row = conn.query_row(
        "SELECT created_at, expires_at, revoked_at, session_id FROM grants WHERE id = ?1",
        [gid],
        db::tuple,
    )?;
    let lapsed =
        session.map(|_| created.saturating_add(assent_core::grant::DEFAULT_SESSION_GRANT_MAX_MS));
    Ok(gone.before(created) && (gone.ended(revoked) || gone.ended(expires.or(lapsed))))
}

/// A token row: id, then what its `token.minted` record fixes (approval, agent, call hash,
/// expiry, scope, device), then used_at and issued_at.
struct TokenRow {
    id: String,
    minted: (String, String, String, i64, String, Option<String>),
    used: Option<i64>,
    issued: i64,
}

/// Whether token row `t` differs from its `token.minted` record `d` of approval `aid`: in
/// the approval, or in any of agent, call hash, expiry, scope and device the record holds (a
/// record written before a field was recorded does not fix it).
fn differs(t: &TokenRow, aid: Option<&str>, d: &Value) -> bool {
    let (approval, agent, call_hash, expires_at, scope, device_id) = &t.minted;
    let row = [
        ("agent", Value::from(agent.as_str())),
        ("call_hash", Value::from(call_hash.as_str())),
        ("expires_at", Value::from(*expires_at)),
        ("scope", Value::from(scope.as_str())),
        (
            "device_id",
            device_id.as_deref().map_or(Value::Null, Value::from),
        ),
    ];
    aid != Some(approval.as_str())
        || row
            .iter()
            .any(|(k, v)| d.get(*k).is_some_and(|recorded| recorded != v))
}

/// Every token must be the one its `token.minted` record describes (same approval, agent,
/// call hash, expiry, scope and device) and be used exactly when a `token.redeemed` record
/// says so, for the call it was minted for. Found by review: the gateway signs a token from
/// its row, so a row whose `call_hash` was changed gave a validly signed token for another
/// call (and one whose `expires_at` was moved, a token that lived on), while the records
/// still described the approved call.
pub(crate) fn tokens(
    conn: Conn<'_>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
) -> db::Result<()> {
    let mut minted: HashMap<String, (i64, Value, Option<String>)> = HashMap::new();
    conn.prepare_cached(
        "SELECT seq, approval_id, data FROM audit WHERE kind = 'token.minted' ORDER BY seq",
    )?
    .for_each([], |r| {
        let d = json_of(r)?;
        if let Some(t) = text_at(&d, "token_id") {
            minted.entry(t).or_insert((r.get(0)?, d, r.get(1)?));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let mut redeemed = records_by(conn, "token.redeemed", "token_id")?;
    // A token voided (`crate::voided`: by a restore, or its consent withdrawn) is used with
    // this record instead.
    let mut voided = records_by(conn, "token.voided", "token_id")?;
    let rows: Vec<TokenRow> = sql::rows(
        conn,
        "SELECT token_id, approval_id, agent, call_hash, expires_at, scope, device_id, used_at, issued_at FROM tokens ORDER BY issued_at, rowid",
        [],
        |r| {
            Ok(TokenRow {
                id: r.get(0)?,
                minted: (
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ),
                used: r.get(7)?,
                issued: r.get(8)?,
            })
        },
    )?;
    for t in &rows {
        let (tid, aid) = (&t.id, &t.minted.0);
        // Archived only when it was used or expired by the run (a live token kept its records).
        let archived =
            gone.before(t.issued) && (gone.ended(Some(t.minted.3)) || gone.ended(t.used));
        let record = minted.remove(tid);
        match &record {
            None if archived => {}
            None => out.push((None, format!("token {tid} (approval {aid}) has no token.minted record"))),
            Some((seq, d, raid)) if differs(t, raid.as_deref(), d) => out.push((Some(*seq), format!(
                "token {tid} (approval {aid}) differs from its token.minted record {seq} (approval, agent, call hash, expiry, scope or device changed): the gateway would sign it for what the row says"
            ))),
            Some(_) => {}
        }
        let void = voided.remove(tid);
        let how = void
            .as_ref()
            .map(|(_, d, _)| voided_how(d))
            .unwrap_or_default();
        match (t.used, redeemed.remove(tid)) {
            // Found by review: a voided token set unused again (its seal leaves `used_at` out)
            // could be redeemed a second time; voided and then redeemed means it was.
            (None, _) if let Some((seq, ..)) = &void => out.push((Some(*seq), format!(
                "token {tid} (approval {aid}) was voided {how} (audit record {seq}) but is not marked used: it could be redeemed again"
            ))),
            (Some(_), Some((seq, ..))) if void.is_some() => out.push((Some(seq), format!(
                "token {tid} (approval {aid}) was voided {how} but redeemed afterwards (audit record {seq})"
            ))),
            (Some(_), None) if void.is_some() => {}
            (Some(u), None) if archived && gone.before(u) => {}
            (Some(_), None) => out.push((None, format!(
                "token {tid} (approval {aid}) is marked used, but the audit log has no token.redeemed record for it"
            ))),
            (None, Some((seq, ..))) => out.push((Some(seq), format!(
                "token {tid} (approval {aid}) was redeemed (audit record {seq}) but is not marked used: it could be redeemed again"
            ))),
            (Some(_), Some((seq, d, _))) => {
                let bound = record.as_ref().and_then(|(_, m, _)| text_at(m, "call_hash"));
                if bound.is_some() && text_at(&d, "call_hash") != bound {
                    out.push((Some(seq), format!(
                        "token {tid} (approval {aid}) was redeemed (audit record {seq}) for another call than its token.minted record binds"
                    )));
                }
            }
            (None, None) => {}
        }
    }
    let minted = minted
        .into_iter()
        .map(|(t, (seq, _, _))| (seq, t, "token.minted"));
    let redeemed = redeemed
        .into_iter()
        .map(|(t, (seq, ..))| (seq, t, "token.redeemed"));
    let voided = voided
        .into_iter()
        .map(|(t, (seq, ..))| (seq, t, "token.voided"));
    orphans("token", minted.chain(redeemed).chain(voided), out);
    Ok(())
}

/// How a `token.voided` record with data `d` says its token was voided, as a phrase after
/// "was voided": `by a restore` (`restored_at`, [`crate::voided`]), or `because <why>` (the
/// consent it was minted under withdrawn: a revoked grant, an operator removed), or `(no
/// reason recorded)`.
fn voided_how(d: &Value) -> String {
    if d.get("restored_at").is_some() {
        return "by a restore".into();
    }
    match text_at(d, "why") {
        Some(why) => format!("because {why}"),
        None => "(no reason recorded)".into(),
    }
}

/// The fields of an approval that its `approval.requested` record fixes, that check
/// [`terms_differ`] compares: `call` as the SHA-256 of its canonical form, the others as
/// recorded (the later ones only in records written since they are recorded).
const SINCE: [&str; 6] = [
    "approvers",
    "quorum",
    "require_passkey",
    "separation_of_duties",
    "in_client_approval",
    "on_behalf_of",
];

/// The digest of a call as [`terms_differ`] compares it.
fn call_digest(call: &Value) -> Value {
    canonical_value(call).map_or(Value::Null, |c| Value::from(sha256_hex(c.as_bytes())))
}

/// What [`terms_differ`] needs of `approval.requested` record data `d`.
pub(crate) fn requested_terms(d: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("call".into(), call_digest(&d["call"]));
    for k in ["call_hash", "risk_tier", "irreversible", "default_decision"]
        .into_iter()
        .chain(SINCE)
        .chain(["session_id", "device_id"])
    {
        if let Some(v) = d.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(m) = d.get("message") {
        out.insert(SHOWN.into(), shown_digest(m, &d["reasons"], &d["triggers"]));
    }
    Value::Object(out)
}

/// The name [`terms_differ`] gives a difference in what the approver was shown.
const SHOWN: &str = "message, reasons or triggers";

/// The digest of what an approver is shown beside a call (its message, reasons and
/// triggers) as [`terms_differ`] compares it: held as a digest, not the texts, per approval.
fn shown_digest(
    message: &impl serde::Serialize,
    reasons: &impl serde::Serialize,
    triggers: &impl serde::Serialize,
) -> Value {
    call_digest(&serde_json::json!([message, reasons, triggers]))
}

/// The first of an approval's fields that differs from what its records fix (`d`, from
/// [`requested_terms`], with the approvers of its newest `approval.escalated` record when
/// escalated): the call and its hash (also against the call itself), risk tier,
/// irreversibility and default decision, and — in records written since they are recorded —
/// approvers, quorum, passkey, separation of duties, in-client approval and on whose behalf,
/// the session and device, and what the approver is shown (message, reasons, triggers).
/// `None` when none does. Found by review: a quorum and passkey cleared, a default turned to
/// `approve`, a `call_hash` moved to another call, each with `audit verify` green.
pub(crate) fn terms_differ(rec: &crate::record::ApprovalRecord, d: &Value) -> Option<&'static str> {
    if !rec.call_intact() {
        return Some("call_hash (not the SHA-256 of the stored call)");
    }
    let t = &rec.terms;
    let always = [
        ("call", call_digest(&serde_json::json!(rec.call))),
        ("call_hash", Value::from(rec.call_hash.as_str())),
        ("risk_tier", serde_json::json!(t.risk_tier)),
        ("irreversible", Value::from(t.irreversible)),
        ("default_decision", serde_json::json!(t.default_decision)),
    ];
    let since = [
        serde_json::json!(t.approvers),
        serde_json::json!(t.quorum),
        Value::from(t.require_passkey),
        Value::from(t.separation_of_duties),
        Value::from(t.in_client_approval),
        serde_json::json!(rec.on_behalf_of),
    ];
    // Where the record names them (found by review: a device binding removed from a pending
    // call went unreported, and the token then minted redeemed from any device).
    let bound = [
        ("session_id", Value::from(rec.session_id.as_str())),
        ("device_id", serde_json::json!(rec.device_id)),
    ];
    // What the approver was shown beside the call (found by review: a held destructive call's
    // message and reasons rewritten in the database to harmless ones went unreported).
    let shown = [(SHOWN, shown_digest(&t.message, &t.reasons, &t.triggers))];
    let since = SINCE.iter().copied().zip(since).chain(bound).chain(shown);
    always
        .into_iter()
        .find(|(k, v)| d.get(*k) != Some(v))
        .or_else(|| {
            since
                .into_iter()
                .find(|(k, v)| d.get(*k).is_some_and(|r| r != v))
        })
        .map(|(k, _)| k)
}

/// Reports, oldest first, each audit record `(seq, id, what)` left over after the
/// cross-check: it names `noun` `id` (an approval, a token), which is not in the `noun`s table.
pub(crate) fn orphans<'a>(
    noun: &str,
    left: impl Iterator<Item = (i64, String, &'a str)>,
    out: &mut Vec<(Option<i64>, String)>,
) {
    let mut left: Vec<_> = left.collect();
    left.sort();
    for (seq, id, what) in left {
        out.push((
            Some(seq),
            format!(
                "audit record {seq} ({what}) names {noun} {id}, which is not in the {noun}s table"
            ),
        ));
    }
}
