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
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;

/// A pin's identity: `(scope, server, tool)`, scope `''` for the gateway's hub.
type PinKey = (String, String, String);

/// The newest record that set a pin: `(seq, at, fingerprint, by)`, `by` being
/// `trust-on-first-use` or the accepting operator (the row's `pinned_by`).
type PinRecord = (i64, i64, String, String);

/// The stored scope a pin or review record names: `''` for the gateway (and for records
/// written before pins had scopes), else the agent (`reporter` of `tool.pinned`, `tool.new`
/// and `tool.changed`; `agent` of `tool.accepted` and `tool.rejected`).
fn scope_of(kind: &str, d: &Value) -> String {
    match kind {
        "tool.accepted" | "tool.rejected" => text_at(d, "agent").unwrap_or_default(),
        _ if d["scope"] == "agent" => text_at(d, "reporter").unwrap_or_default(),
        _ => String::new(),
    }
}

/// The time a record stands for: its own, or for a copy audit retention carried forward
/// (`carried_from`), the original's (`carried_at`).
fn time_of(at: i64, d: &Value) -> i64 {
    match (&d["carried_from"], d["carried_at"].as_i64()) {
        (Value::Number(_), Some(t)) => t,
        _ => at,
    }
}

/// The place in the chain a record stands for: its own `seq`, or for a carried copy the
/// original's (`carried_from`, kept through every later carry), so that copies keep the order
/// of what they copy — found by review: a pin accepted again after the cut was followed by
/// the carried copy of its earlier acceptance, which then read as the pin's newest record.
fn order_of(seq: i64, d: &Value) -> i64 {
    d["carried_from"].as_i64().unwrap_or(seq)
}

/// The pin and server records of the chain, in order: the newest record that set each pin,
/// when each server was first reported in each scope, and every pin made on first use.
#[derive(Default)]
struct PinRecords {
    /// Each pin's newest record, and its order ([`order_of`]).
    newest: BTreeMap<PinKey, (PinRecord, i64)>,
    /// `(scope, server, words)` → `(order, at, seq)` of its first `tool.pinned`, `tool.new` or
    /// `tool.changed` record (by [`order_of`]; carried copies count as their originals), of
    /// its tools (`words: false`) or of the entry of its own words (`true`,
    /// [`assent_core::pin::SERVER_ENTRY`]: pinned on its own first use, which may come after
    /// its tools' or before).
    first_seen: HashMap<(String, String, bool), (i64, i64, i64)>,
    /// `(order, at, pin)` of each `tool.pinned` record.
    on_first_use: Vec<(i64, i64, PinKey)>,
}

impl PinRecords {
    /// Records `rec` (of order `order`) as `key`'s newest unless a later one is there.
    fn set_newest(&mut self, key: PinKey, rec: PinRecord, order: i64) {
        if self.newest.get(&key).is_none_or(|(_, o)| *o < order) {
            self.newest.insert(key, (rec, order));
        }
    }
}

/// Reads every pin-setting and tool-report record ([`PinRecords`]).
fn pin_records(conn: Conn<'_>) -> db::Result<PinRecords> {
    let mut out = PinRecords::default();
    conn.prepare_cached(
        "SELECT seq, at, kind, actor, data FROM audit WHERE kind IN ('tool.pinned', 'tool.accepted', 'tool.new', 'tool.changed') ORDER BY seq",
    )?
    .for_each([], |r| {
        let (seq, at, kind, actor): (i64, i64, String, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        let d = json_of(r)?;
        let key = (
            scope_of(&kind, &d),
            text_at(&d, "server").unwrap_or_default(),
            text_at(&d, "tool").unwrap_or_default(),
        );
        // A carried copy stands for its original: its time and place in the chain.
        let (order, at) = (order_of(seq, &d), time_of(at, &d));
        if kind != "tool.accepted" {
            let words = key.2 == assent_core::pin::SERVER_ENTRY;
            let first = out.first_seen.entry((key.0.clone(), key.1.clone(), words));
            let first = first.or_insert((order, at, seq));
            if order < first.0 {
                *first = (order, at, seq);
            }
        }
        let fp = text_at(&d, "fingerprint").unwrap_or_default();
        match kind.as_str() {
            "tool.pinned" => {
                let by = text_at(&d, "by").unwrap_or_else(|| "trust-on-first-use".into());
                out.on_first_use.push((order, at, key.clone()));
                out.set_newest(key, (seq, at, fp, by), order);
            }
            "tool.accepted" => out.set_newest(key, (seq, at, fp, actor), order),
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

/// A pin made on first use is one of the first report of its server in its scope (the
/// records of one report share its time), and, in an agent's scope, comes before any record
/// of the gateway's hub for that server (an agent's relay checks against the hub's pins once
/// there are any): found by review, deleting a server's `tool_servers` row (and its pins) made
/// the next definition, however changed, be pinned on first use, with no review, and its
/// records then looked well formed. Order is the chain's (`seq`; a carried copy's is its
/// original's): a report's time is taken before it waits for the write lock, so two reports'
/// times need not follow their order. Audit retention carries each server's first report
/// forward ([`to_carry`]), so the rule still holds after the records are archived.
fn first_use_only_first(r: &PinRecords, out: &mut Vec<(Option<i64>, String)>) {
    for (seq, at, key) in &r.on_first_use {
        let (scope, server, tool) = key;
        let words = tool == assent_core::pin::SERVER_ENTRY;
        let first = |s: &str| r.first_seen.get(&(s.to_string(), server.clone(), words));
        let own = first(scope).filter(|(_, first_at, _)| first_at != at);
        let hub = first("").filter(|(first_seq, ..)| !scope.is_empty() && first_seq < seq);
        if let Some((_, first, _)) = own.or(hub) {
            out.push((Some(*seq), format!(
                "audit record {seq} pinned {} on first use, but its server was first reported at {first}: the server was made to look new, and the definition was trusted unreviewed",
                pin_name(key)
            )));
        }
    }
}

/// Every `tool_pins` row must be the pin its newest `tool.pinned` / `tool.accepted` record set
/// (same fingerprint, pinned at that record's time, by the same operator or on first use), and
/// its stored definition must have that fingerprint; a row without a record is reported unless
/// it was pinned before the cut-off of an archive run that did not carry its records
/// ([`Gone::tools_before`]). A record whose pin is gone is reported too, and a pin made on
/// first use of a server reported before ([`first_use_only_first`]). The `seq` of each record
/// that vouches for a row (the row matches it) goes into `vouch`.
pub(crate) fn pins(
    conn: Conn<'_>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
    vouch: &mut BTreeSet<i64>,
) -> db::Result<()> {
    let records = pin_records(conn)?;
    first_use_only_first(&records, out);
    let mut recorded: BTreeMap<PinKey, PinRecord> = records
        .newest
        .into_iter()
        .map(|(k, (rec, _))| (k, rec))
        .collect();
    type PinRow = (PinKey, String, String, i64, String);
    let rows: Vec<PinRow> = conn.query_map(
        "SELECT scope, server, tool, fingerprint, definition, pinned_at, pinned_by FROM tool_pins ORDER BY scope, server, tool",
        [],
        |r| Ok(((r.get(0)?, r.get(1)?, r.get(2)?), r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)),
    )?;
    for (key, fp, definition, pinned_at, pinned_by) in rows {
        let name = pin_name(&key);
        let defined = defines(&definition, &fp);
        if !defined {
            out.push((None, format!(
                "the pin of {name} holds a definition whose fingerprint is not its own {fp}: the definition shown was changed"
            )));
        }
        match recorded.remove(&key) {
            None if gone.tools_before(pinned_at) => {}
            None => out.push((None, format!(
                "the pin of {name} has no tool.pinned or tool.accepted record: nobody pinned or accepted it, yet calls matching it go through"
            ))),
            Some((seq, at, want, by)) if want != fp || at != pinned_at || by != pinned_by => out.push((Some(seq), format!(
                "the pin of {name} differs from its newest record {seq} (fingerprint {want}, pinned at {at} by {by}): a definition nobody reviewed would be called"
            ))),
            Some((seq, ..)) => {
                if defined {
                    vouch.insert(seq);
                }
            }
        }
    }
    for (key, (seq, ..)) in recorded {
        out.push((Some(seq), format!(
            "audit record {seq} pinned {}, which is not in the pins table: the next definition would be trusted unreviewed",
            pin_name(&key)
        )));
    }
    Ok(())
}

/// Whether stored definition `definition` (JSON text) has fingerprint `fp`.
fn defines(definition: &str, fp: &str) -> bool {
    serde_json::from_str::<Value>(definition).is_ok_and(|d| {
        crate::pins::fingerprint(&d) == fp || crate::pins::earlier_fingerprint(&d, fp)
    })
}

/// `server/tool` of the gateway's hub, or `server/tool for agent A`.
fn pin_name((scope, server, tool): &PinKey) -> String {
    if scope.is_empty() {
        format!("{server}/{tool}")
    } else {
        format!("{server}/{tool} for agent {scope}")
    }
}

/// One review record: `(seq, kind, at, actor)` and the review it describes (scope, server,
/// tool, fingerprint).
type ReviewRecord = ((i64, String, i64, String), (PinKey, String));

/// Each record of the kinds `kinds` naming a `review_id`: that id → its newest record.
fn review_records(conn: Conn<'_>, kinds: &str) -> db::Result<HashMap<String, ReviewRecord>> {
    let mut out = HashMap::new();
    conn.prepare_cached(&format!(
        "SELECT seq, kind, at, actor, data FROM audit WHERE kind IN ({kinds}) ORDER BY seq"
    ))?
    .for_each([], |r| {
        let d = json_of(r)?;
        if let Some(id) = text_at(&d, "review_id") {
            let (seq, kind, at, actor): (i64, String, i64, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let at = time_of(at, &d);
            let key = (
                scope_of(&kind, &d),
                text_at(&d, "server").unwrap_or_default(),
                text_at(&d, "tool").unwrap_or_default(),
            );
            let fp = text_at(&d, "fingerprint").unwrap_or_default();
            out.insert(id, ((seq, kind, at, actor), (key, fp)));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

/// A `tool_reviews` row: id, what it reviews (scope, server, tool, fingerprint), its
/// definition, when and by whom it was seen, its status and who decided it when.
struct ReviewRow {
    id: String,
    reviews: (PinKey, String),
    definition: String,
    seen: (i64, String),
    status: String,
    decided: (Option<String>, Option<i64>),
}

/// Every `tool_reviews` row must be the review its `tool.changed` / `tool.new` record raised
/// (same scope, server, tool and fingerprint, seen at that time by that agent) and hold a
/// definition with that fingerprint — found by review: an accepted review whose fingerprint
/// and definition were swapped for a rug-pulled version let that version through —, and its
/// status, decider and time must be what its `tool.accepted` / `tool.rejected` record says
/// (`pending` without one): a review marked accepted lets the waiting relay go on. Rows seen
/// before the cut-off of an archive run that did not carry their records
/// ([`Gone::tools_before`]) may have lost them. The `seq` of each record that vouches for a
/// row goes into `vouch`.
pub(crate) fn reviews(
    conn: Conn<'_>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
    vouch: &mut BTreeSet<i64>,
) -> db::Result<()> {
    let mut raised = review_records(conn, "'tool.changed', 'tool.new'")?;
    let decided = review_records(conn, "'tool.accepted', 'tool.rejected'")?;
    let rows: Vec<ReviewRow> = conn.query_map(
        "SELECT id, scope, server, tool, fingerprint, definition, seen_at, seen_by, status, decided_by, decided_at FROM tool_reviews ORDER BY seen_at, id",
        [],
        |r| {
            Ok(ReviewRow {
                id: r.get(0)?,
                reviews: ((r.get(1)?, r.get(2)?, r.get(3)?), r.get(4)?),
                definition: r.get(5)?,
                seen: (r.get(6)?, r.get(7)?),
                status: r.get(8)?,
                decided: (r.get(9)?, r.get(10)?),
            })
        },
    )?;
    for row in rows {
        check_review(
            &row,
            raised.remove(&row.id),
            decided.get(&row.id),
            gone,
            out,
            vouch,
        );
    }
    let mut orphans: Vec<(i64, String)> = raised
        .into_iter()
        .map(|(id, ((seq, ..), _))| (seq, id))
        .collect();
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

/// [`reviews`] of one row against the record that raised it and the one that decided it.
fn check_review(
    row: &ReviewRow,
    raised: Option<ReviewRecord>,
    decided: Option<&ReviewRecord>,
    gone: &Gone,
    out: &mut Vec<(Option<i64>, String)>,
    vouch: &mut BTreeSet<i64>,
) {
    let id = &row.id;
    let name = pin_name(&row.reviews.0);
    let archived = gone.tools_before(row.seen.0);
    let defined = defines(&row.definition, &row.reviews.1);
    if !defined {
        out.push((None, format!(
            "tool review {id} ({name}) holds a definition whose fingerprint is not its own: the definition shown was changed"
        )));
    }
    match raised {
        None if archived => {}
        None => out.push((None, format!(
            "tool review {id} ({name}) has no tool.changed or tool.new record: no relay reported it"
        ))),
        Some(((seq, kind, at, actor), reviews)) if reviews != row.reviews || at != row.seen.0 || actor != row.seen.1 => {
            out.push((Some(seq), format!(
                "tool review {id} ({name}) differs from its {kind} record {seq} (scope, server, tool, fingerprint, time or reporter changed): its decision would pass another definition"
            )))
        }
        Some(((seq, ..), _)) => {
            if defined {
                vouch.insert(seq);
            }
        }
    }
    match decided {
        None if row.status == "pending" || archived => {}
        None => out.push((None, format!(
            "tool review {id} ({name}) is {}, but the audit log has no tool.accepted or tool.rejected record for it",
            row.status
        ))),
        Some(((seq, kind, at, actor), reviews)) => {
            let st = if kind == "tool.accepted" { "accepted" } else { "rejected" };
            let by = (Some(actor.clone()), Some(*at));
            if st != row.status || by != row.decided || reviews != &row.reviews {
                out.push((Some(*seq), format!(
                    "tool review {id} ({name}) is {} (decided by {:?} at {:?}), but audit record {seq} says {actor} {st} it at {at}",
                    row.status, row.decided.0, row.decided.1
                )));
            } else if defined {
                vouch.insert(*seq);
            }
        }
    }
}

/// The `seq` of every audit record audit retention carries forward before archiving it: each
/// record that vouches for a standing tool pin or review (the records [`pins`] and [`reviews`]
/// match a row against, where the row matches; a row that does not match is not vouched for
/// again), and each server's first report in each scope (so that [`first_use_only_first`]
/// still sees a server was reported before — found by review: otherwise a first-use pin of a
/// server made to look new passed once the first report was archived).
pub(crate) fn to_carry(conn: Conn<'_>) -> db::Result<BTreeSet<i64>> {
    let (mut out, mut carry) = (Vec::new(), BTreeSet::new());
    let gone = Gone::of(conn)?;
    pins(conn, &gone, &mut out, &mut carry)?;
    reviews(conn, &gone, &mut out, &mut carry)?;
    carry.extend(
        pin_records(conn)?
            .first_seen
            .values()
            .map(|(_, _, seq)| *seq),
    );
    Ok(carry)
}
