//! The cross-check of what decides whether an MCP tool may be called (`assent audit verify`,
//! check `state`): tool pins and tool reviews against their audit records. A call goes through
//! when the advertised tool's fingerprint matches its pin, and a relay goes on when its review
//! reads `accepted`, so a row written behind the gateway's back (a pin moved to the changed
//! definition of a rug-pulled tool, a review marked accepted, a pin deleted so that the next
//! definition is trusted on first use) would let a tool nobody reviewed be called while every
//! record still looks well formed. Called by [`crate::integrity::cross_check_on`], in its
//! snapshot.

use crate::archive::Gone;
use crate::audit::{json_of, text_at};
use crate::db::{self, Conn};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;

/// A pin's identity: `(scope, server, tool)`, scope `''` for the gateway's hub.
type PinKey = (String, String, String);

/// The newest record that set a pin: `(seq, at, fingerprint)`.
type PinRecord = (i64, i64, String);

/// The stored scope a pin record names: `''` for the gateway (and for records written before
/// pins had scopes), else the agent (`reporter` of `tool.pinned`, `agent` of `tool.accepted`).
fn scope_of(kind: &str, d: &Value) -> String {
    match kind {
        "tool.pinned" if d["scope"] == "agent" => text_at(d, "reporter").unwrap_or_default(),
        "tool.accepted" => text_at(d, "agent").unwrap_or_default(),
        _ => String::new(),
    }
}

/// Every record that set a pin (`tool.pinned`, `tool.accepted`), the newest of each pin.
fn pin_records(conn: Conn<'_>) -> db::Result<BTreeMap<PinKey, PinRecord>> {
    let mut out = BTreeMap::new();
    conn.prepare_cached(
        "SELECT seq, at, kind, data FROM audit WHERE kind IN ('tool.pinned', 'tool.accepted') ORDER BY seq",
    )?
    .for_each([], |r| {
        let (seq, at, kind): (i64, i64, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let d = json_of(r)?;
        let key = (
            scope_of(&kind, &d),
            text_at(&d, "server").unwrap_or_default(),
            text_at(&d, "tool").unwrap_or_default(),
        );
        out.insert(key, (seq, at, text_at(&d, "fingerprint").unwrap_or_default()));
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

/// Every `tool_pins` row must be the pin its newest `tool.pinned` / `tool.accepted` record set
/// (same fingerprint, pinned at that record's time), and its stored definition must have that
/// fingerprint; a row without a record is reported unless it was pinned before the archive's
/// cut-off. A record whose pin is gone is reported too: with its server forgotten as well, the
/// next definition would be pinned on first use, unreviewed.
pub(crate) fn pins(
    conn: Conn<'_>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
) -> db::Result<()> {
    let mut recorded = pin_records(conn)?;
    type PinRow = (PinKey, String, String, i64);
    let rows: Vec<PinRow> = conn.query_map(
        "SELECT scope, server, tool, fingerprint, definition, pinned_at FROM tool_pins ORDER BY scope, server, tool",
        [],
        |r| Ok(((r.get(0)?, r.get(1)?, r.get(2)?), r.get(3)?, r.get(4)?, r.get(5)?)),
    )?;
    for (key, fp, definition, pinned_at) in rows {
        let name = pin_name(&key);
        let defined = serde_json::from_str::<Value>(&definition)
            .map(|d| crate::pins::fingerprint(&d))
            .ok();
        if defined.as_deref() != Some(fp.as_str()) {
            out.push((None, format!(
                "the pin of {name} holds a definition whose fingerprint is not its own {fp}: the definition shown was changed"
            )));
        }
        match recorded.remove(&key) {
            None if gone.before(pinned_at) => {}
            None => out.push((None, format!(
                "the pin of {name} has no tool.pinned or tool.accepted record: nobody pinned or accepted it, yet calls matching it go through"
            ))),
            Some((seq, at, want)) if want != fp || at != pinned_at => out.push((Some(seq), format!(
                "the pin of {name} differs from its newest record {seq} (fingerprint {want}, pinned at {at}): a definition nobody reviewed would be called"
            ))),
            Some(_) => {}
        }
    }
    for (key, (seq, _, _)) in recorded {
        out.push((Some(seq), format!(
            "audit record {seq} pinned {}, which is not in the pins table: the next definition would be trusted unreviewed",
            pin_name(&key)
        )));
    }
    Ok(())
}

/// `server/tool` of the gateway's hub, or `server/tool for agent A`.
fn pin_name((scope, server, tool): &PinKey) -> String {
    if scope.is_empty() {
        format!("{server}/{tool}")
    } else {
        format!("{server}/{tool} for agent {scope}")
    }
}

/// Each record of the kinds `kinds` naming a `review_id`: that id → `(seq, kind)`, the
/// newest record of each.
fn review_records(conn: Conn<'_>, kinds: &str) -> db::Result<HashMap<String, (i64, String)>> {
    let mut out = HashMap::new();
    conn.prepare_cached(&format!(
        "SELECT seq, kind, data FROM audit WHERE kind IN ({kinds}) ORDER BY seq"
    ))?
    .for_each([], |r| {
        if let Some(id) = text_at(&json_of(r)?, "review_id") {
            out.insert(id, (r.get(0)?, r.get(1)?));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

/// Every `tool_reviews` row must have the `tool.changed` / `tool.new` record that raised it,
/// and its status must be what its `tool.accepted` / `tool.rejected` record says (`pending`
/// without one): a review marked accepted behind the gateway's back lets the waiting relay go
/// on. Rows seen before the archive's cut-off may have lost their records.
pub(crate) fn reviews(
    conn: Conn<'_>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
) -> db::Result<()> {
    let mut raised = review_records(conn, "'tool.changed', 'tool.new'")?;
    let decided = review_records(conn, "'tool.accepted', 'tool.rejected'")?;
    type ReviewRow = (String, String, String, String, i64);
    let rows: Vec<ReviewRow> = conn.query_map(
        "SELECT id, server, tool, status, seen_at FROM tool_reviews ORDER BY seen_at, id",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )?;
    for (id, server, tool, status, seen_at) in rows {
        let archived = gone.before(seen_at);
        if raised.remove(&id).is_none() && !archived {
            out.push((None, format!(
                "tool review {id} ({server}/{tool}) has no tool.changed or tool.new record: no relay reported it"
            )));
        }
        let want = decided.get(&id).map(|(seq, kind)| {
            let st = if kind == "tool.accepted" {
                "accepted"
            } else {
                "rejected"
            };
            (*seq, st)
        });
        match want {
            None if status == "pending" || archived => {}
            None => out.push((None, format!(
                "tool review {id} ({server}/{tool}) is {status}, but the audit log has no tool.accepted or tool.rejected record for it"
            ))),
            Some((seq, st)) if st != status => out.push((Some(seq), format!(
                "tool review {id} ({server}/{tool}) is {status}, but audit record {seq} says it was {st}"
            ))),
            Some(_) => {}
        }
    }
    let mut orphans: Vec<(i64, String)> =
        raised.into_iter().map(|(id, (seq, _))| (seq, id)).collect();
    orphans.sort();
    for (seq, id) in orphans {
        out.push((
            Some(seq),
            format!(
                "audit record {seq} raised tool review {id}, which is not in the reviews table"
            ),
        ));
    }
    Ok(())
}
