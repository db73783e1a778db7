//! MCP tool-list pinning (issue 4): the gateway records a fingerprint of each upstream tool —
//! the SHA-256 of the canonical JSON of its name, description, schemas, title and
//! annotations ([`fingerprint`]) — the first time it sees the server (trust on first use). A
//! tool whose fingerprint differs from its pin, or a tool that appears after the server was
//! first seen, gets a pending *review*; its calls are refused until an operator accepts the new
//! definition, which becomes the pin.
//! Every pin, change and review decision is an audit record.
//!
//! Pins, reviews and servers seen belong to whoever reported the definitions ([`PinScope`]):
//! the gateway's own MCP hub (the upstreams of its config) for every agent, or one agent's own
//! relay (`POST /v1/tools/check`) for that agent alone. An agent's report is checked against
//! its own pins first and then the gateway's (a trusted baseline), never another agent's; its
//! reviews hold only its own calls, and it may have at most [`AGENT_PENDING_CAP`] pending per
//! server.

use crate::audit;
use crate::db::{self, Change, Conn, OptionalExtension as _, Tx};
use crate::error::StoreError;
use crate::params;
use crate::sql::{from_row, json_or_default};
use crate::store::Store;
use assent_core::pin::{PinState, ReviewStatus, SERVER_ENTRY, ToolReview, ToolState, server_entry};
use serde_json::{Value, json};

/// Pending reviews one agent's reports may have per server; a report that would pass it is
/// refused whole ([`PinCheckError::TooManyPending`]).
pub const AGENT_PENDING_CAP: usize = 100;

/// Pending reviews the gateway's hub may have per server: one whole tool list (the
/// server's 10000 definitions per report).
pub const GATEWAY_PENDING_CAP: usize = 10_000;

/// Who reported a tool list, and so whose pins, reviews and servers seen it reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinScope<'a> {
    /// The gateway's own MCP hub reporting an upstream of its config: pins and reviews that
    /// hold for every agent (stored with scope `''`).
    Gateway,
    /// The named agent's own relay: pins and reviews of that agent only (scope: its name,
    /// never empty).
    Agent(&'a str),
}

impl PinScope<'_> {
    /// The stored `scope` column: `''` for the gateway, else the agent.
    pub fn key(&self) -> &str {
        match self {
            PinScope::Gateway => "",
            PinScope::Agent(a) => a,
        }
    }

    /// The most pending reviews per server ([`AGENT_PENDING_CAP`], [`GATEWAY_PENDING_CAP`]).
    pub fn pending_cap(&self) -> usize {
        match self {
            PinScope::Gateway => GATEWAY_PENDING_CAP,
            PinScope::Agent(_) => AGENT_PENDING_CAP,
        }
    }

    /// The audit data naming the reporter: `{"scope": "gateway", "reporter": "hub"}` or
    /// `{"scope": "agent", "reporter": AGENT}`.
    fn audit(&self) -> (&'static str, &str) {
        match self {
            PinScope::Gateway => ("gateway", "hub"),
            PinScope::Agent(a) => ("agent", a),
        }
    }
}

/// The stored scope `key` as a review's or pin's owner: `None` for the gateway.
pub(crate) fn owner(key: String) -> Option<String> {
    (!key.is_empty()).then_some(key)
}

/// Why a tool list was not checked.
#[derive(Debug, thiserror::Error)]
pub enum PinCheckError {
    /// The report would take the reporter's pending reviews of the server past its cap
    /// ([`PinScope::pending_cap`]); nothing was stored (the server's `429
    /// TOO_MANY_PENDING_REVIEWS`).
    #[error(
        "{server}: this report would take its reporter's pending tool reviews past {cap}; nothing of it was stored (an operator decides the pending ones first)"
    )]
    TooManyPending {
        /// The MCP server alias.
        server: String,
        /// The cap.
        cap: usize,
    },
    /// An agent scope with an empty name (it would be the gateway's).
    #[error("a tool list must be reported by a named agent or the gateway")]
    NoReporter,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for PinCheckError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Store(e.into())
    }
}
impl From<db::DbError> for PinCheckError {
    fn from(e: db::DbError) -> Self {
        Self::Store(e.into())
    }
}
impl db::Settles for PinCheckError {}

/// The fingerprint of a tool definition: SHA-256 (hex) of the RFC 8785 canonical JSON of its
/// `name`, `description` and `inputSchema` (missing ones as `null`, as [`fingerprint_v1`]) and,
/// when present, its `title`, `annotations` (`title`, `readOnlyHint`, `destructiveHint`,
/// `idempotentHint`, `openWorldHint`), `outputSchema` and `icons` ([`icons`]). Found by review: the pin covered the
/// first three only, so an upstream could turn a destructive tool's annotations to
/// `readOnlyHint: true` (which clients use to decide whether to ask the user) or retitle it
/// with no review. The fields are those of the MCP `Tool` as rmcp reads it, nulls and unknown
/// annotation keys left out, so the hub's pins (made from rmcp's `Tool`) and an agent's relay
/// (the upstream's JSON) fingerprint one definition alike; a tool with none of the added
/// fields keeps its [`fingerprint_v1`].
///
/// The entry of a server's own words ([`SERVER_ENTRY`]) is fingerprinted as
/// [`server_entry`] reads it: its instructions and server info (but the version).
pub fn fingerprint(tool: &Value) -> String {
    if is_server_entry(tool) {
        return digest(&server_entry(
            tool.get("instructions"),
            tool.get("serverInfo"),
        ));
    }
    digest(&v2_fields(tool, true))
}

/// Whether `def` is the entry of a server's own words ([`SERVER_ENTRY`]), not a tool.
fn is_server_entry(def: &Value) -> bool {
    def["name"] == SERVER_ENTRY
}

/// The fields [`fingerprint`] covers, as one object; `with_icons: false` as it was before the
/// icons counted (2026-11-30).
fn v2_fields(tool: &Value, with_icons: bool) -> Value {
    let mut v = v1_fields(tool);
    if let Some(t) = tool.get("title").filter(|t| t.is_string()) {
        v["title"] = t.clone();
    }
    if let Some(o) = tool.get("outputSchema").filter(|o| o.is_object()) {
        v["outputSchema"] = o.clone();
    }
    let known = [
        "title",
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    ];
    let annotations: serde_json::Map<String, Value> = known
        .iter()
        .filter_map(|k| {
            let a = tool.get("annotations")?.get(*k)?;
            (a.is_boolean() || a.is_string()).then(|| (k.to_string(), a.clone()))
        })
        .collect();
    if !annotations.is_empty() {
        v["annotations"] = Value::Object(annotations);
    }
    let icons = assent_core::pin::icons(tool.get("icons"));
    if with_icons && !icons.is_empty() {
        v["icons"] = Value::Array(icons);
    }
    v
}

/// Whether `fp` is what an earlier form of [`fingerprint`] made of `def`: [`fingerprint_v1`],
/// or the fingerprint before the icons counted.
pub(crate) fn earlier_fingerprint(def: &Value, fp: &str) -> bool {
    // The entry of a server's words had no earlier form.
    if is_server_entry(def) {
        return false;
    }
    fingerprint_v1(def) == fp || digest(&v2_fields(def, false)) == fp
}

/// The three fields [`fingerprint_v1`] covers, as one object (missing ones as `null`).
fn v1_fields(tool: &Value) -> Value {
    json!({"name": tool["name"], "description": tool["description"],
           "inputSchema": tool["inputSchema"]})
}

/// SHA-256 (hex) of the RFC 8785 canonical text of `v`.
fn digest(v: &Value) -> String {
    let text = assent_core::canonical::canonical_value(v).unwrap_or_else(|_| v.to_string());
    assent_core::canonical::sha256_hex(text.as_bytes())
}

/// The fingerprint pins had before [`fingerprint`] covered the whole definition: SHA-256
/// (hex) of the canonical `{"name", "description", "inputSchema"}` (missing fields as `null`).
pub fn fingerprint_v1(tool: &Value) -> String {
    digest(&v1_fields(tool))
}

/// Whether tool definition `t` is the one pinned with fingerprint `pin_fp` and stored
/// definition `pinned_def`: its [`fingerprint`] is the pin's, or the pin is one of
/// an earlier fingerprint of its stored definition ([`fingerprint_v1`], before the annotations
/// and title counted, or before the icons did) and `t` fingerprints as its stored definition — so no pin made before the upgrade needs a review, and nothing the
/// old fingerprint left out can change under it unreviewed.
pub(crate) fn matches_pin(pin_fp: &str, pinned_def: &Value, t: &Value) -> bool {
    let fp = fingerprint(t);
    fp == pin_fp || (earlier_fingerprint(pinned_def, pin_fp) && fingerprint(pinned_def) == fp)
}

/// The pin of `server`/`tool` that holds in scope `scope` (a stored key): its own, else the
/// gateway's (the baseline every agent's report is checked against).
pub(crate) fn pinned(
    conn: Conn<'_>,
    scope: &str,
    server: &str,
    tool: &str,
) -> db::Result<Option<(String, Value)>> {
    conn.prepare_cached(
        "SELECT fingerprint, definition FROM tool_pins WHERE server = ?1 AND tool = ?2 AND (scope = ?3 OR scope = '') ORDER BY scope DESC LIMIT 1",
    )?
    .query_row(crate::params![server, tool, scope], |r| {
        Ok((r.get(0)?, json_or_default(r, 1)?))
    })
    .optional()
}

/// A `tool_reviews` row read with [`REVIEW_COLS`] as a [`ToolReview`] (no `pinned` nor
/// `diff` yet; an unknown status reads as `rejected`: fail closed).
pub(crate) fn review_row(r: &db::Row<'_>) -> db::Result<ToolReview> {
    let status: String = r.get("status")?;
    from_row!(r => ToolReview {
        id, server, tool, fingerprint, seen_by, decided_by, seen_at, decided_at,
        agent: owner(r.get("scope")?),
        status: ReviewStatus::parse(&status).unwrap_or(ReviewStatus::Rejected),
        definition: json_or_default(r, "definition")?,
        pinned: None,
        diff: None,
    })
}

/// The columns [`review_row`] reads.
pub(crate) const REVIEW_COLS: &str = "id, scope, server, tool, fingerprint, definition, seen_at, seen_by, status, decided_by, decided_at";

/// A [`ToolState`] of tool `name`.
fn state(
    name: &str,
    state: PinState,
    review: Option<(String, ReviewStatus)>,
    pinned: Option<Value>,
) -> ToolState {
    let (review_id, review_status) = review.map_or((None, None), |(i, s)| (Some(i), Some(s)));
    ToolState {
        name: name.into(),
        state,
        review_id,
        review_status,
        pinned,
    }
}

/// One report's check, tool by tool, inside its write transaction.
struct Report<'a> {
    scope: PinScope<'a>,
    server: &'a str,
    /// The agent whose session (relay, or hub session) reported it: the records' actor.
    actor: &'a str,
    now: i64,
    /// Whether the server was seen before in this scope or the gateway's (else: first use).
    seen: bool,
    /// The scope's pending reviews of the server, this report's new ones included.
    pending: usize,
}

impl<'a> Report<'a> {
    /// The report of `actor` at `now` on `server` in `scope` (`seen`: whether the server was
    /// seen before), with the scope's pending reviews of the server counted.
    fn open(
        tx: &Tx<'_>,
        scope: PinScope<'a>,
        server: &'a str,
        (actor, now): (&'a str, i64),
        seen: bool,
    ) -> db::Result<Self> {
        let pending: i64 = tx
            .prepare_cached("SELECT count(*) FROM tool_reviews WHERE scope = ?1 AND server = ?2 AND status = 'pending'")?
            .query_row(params![scope.key(), server], |r| r.get(0))?;
        Ok(Report {
            scope,
            server,
            actor,
            now,
            seen,
            pending: usize::try_from(pending).unwrap_or(usize::MAX),
        })
    }

    /// The audit data of one tool: `extra` with the server, tool, fingerprint and reporter.
    fn data(&self, name: &str, fp: &str, extra: Value) -> Value {
        let (scope, reporter) = self.scope.audit();
        let mut d = json!({"server": self.server, "tool": name, "fingerprint": fp,
                           "scope": scope, "reporter": reporter});
        if let (Value::Object(d), Value::Object(x)) = (&mut d, extra) {
            d.extend(x);
        }
        d
    }

    /// Tool `t` (named `name`): pinned, pinned now (first use), or held by its review.
    fn check(&mut self, tx: &Tx<'_>, name: &str, t: &Value) -> Result<ToolState, PinCheckError> {
        let fp = fingerprint(t);
        let key = self.scope.key();
        match pinned(**tx, key, self.server, name)? {
            Some((pfp, def)) if matches_pin(&pfp, &def, t) => {
                Ok(state(name, PinState::Pinned, None, Some(def)))
            }
            None if !self.seen => {
                tx.prepare_cached("INSERT INTO tool_pins (scope, server, tool, fingerprint, definition, pinned_at, pinned_by) VALUES (?1,?2,?3,?4,?5,?6,'trust-on-first-use')")?
                    .execute(params![key, self.server, name, fp, t.to_string(), self.now])?;
                let data = self.data(name, &fp, json!({"by": "trust-on-first-use"}));
                audit::append(**tx, self.now, "tool.pinned", None, self.actor, &data)?;
                Ok(state(name, PinState::FirstUse, None, Some(t.clone())))
            }
            pin => {
                let review = self.review(tx, name, t, &fp, pin.as_ref().map(|p| p.0.as_str()))?;
                Ok(state(name, PinState::Held, Some(review), pin.map(|p| p.1)))
            }
        }
    }

    /// The review of tool `t` at fingerprint `fp` in the scope, created (`tool.changed`, or
    /// `tool.new` when nothing was pinned) when there is none yet, within the scope's cap.
    fn review(
        &mut self,
        tx: &Tx<'_>,
        name: &str,
        t: &Value,
        fp: &str,
        pinned_fp: Option<&str>,
    ) -> Result<(String, ReviewStatus), PinCheckError> {
        let key = self.scope.key();
        // The review of this definition: by its fingerprint, or one made under the
        // fingerprint before the annotations counted whose definition fingerprints alike now
        // (found by review: a second review of it held the calls until both were decided).
        let reviews: Vec<(String, String, String, String)> = crate::sql::rows(
            **tx,
            "SELECT id, status, fingerprint, definition FROM tool_reviews WHERE scope = ?1 AND server = ?2 AND tool = ?3",
            params![key, self.server, name],
            db::tuple,
        )?;
        let existing = reviews.into_iter().find(|(_, _, rfp, def)| {
            rfp == fp
                || serde_json::from_str::<Value>(def)
                    .is_ok_and(|d| earlier_fingerprint(&d, rfp) && fingerprint(&d) == fp)
        });
        if let Some((id, status, ..)) = existing {
            return Ok((
                id,
                ReviewStatus::parse(&status).unwrap_or(ReviewStatus::Rejected),
            ));
        }
        let cap = self.scope.pending_cap();
        if self.pending >= cap {
            return Err(PinCheckError::TooManyPending {
                server: self.server.to_string(),
                cap,
            });
        }
        self.pending += 1;
        let id = uuid::Uuid::new_v4().to_string();
        let seen = crate::session_risk::change_at(**tx, key, (self.server, name), self.now)?;
        tx.prepare_cached("INSERT INTO tool_reviews (id, scope, server, tool, fingerprint, definition, seen_at, seen_by, status) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,'pending')")?
            .execute(params![id, key, self.server, name, fp, t.to_string(), seen, self.actor])?;
        let kind = if pinned_fp.is_some() {
            "tool.changed"
        } else {
            "tool.new"
        };
        let data = self.data(
            name,
            fp,
            json!({"pinned_fingerprint": pinned_fp, "review_id": id}),
        );
        audit::append(**tx, self.now, kind, None, self.actor, &data)?;
        Ok((id, ReviewStatus::Pending))
    }
}

impl Store {
    /// Checks the tools an upstream advertises (`tools/list` entries) against the pins of
    /// `server` that hold in `scope` (its own, then the gateway's), in one transaction: a
    /// server never seen in either is pinned as it is in `scope` (`tool.pinned`, trust on
    /// first use); otherwise a tool matching its pin is `pinned`, and any other gets (or
    /// keeps) a review in `scope` (`tool.changed` / `tool.new` when it is created). `actor`
    /// is the agent whose session reported it (the records' actor; their data names the
    /// scope and reporter). Errors: `TooManyPending` past the scope's cap (nothing stored),
    /// `NoReporter` for an unnamed agent, `Store`.
    pub fn check_tools(
        &self,
        scope: PinScope<'_>,
        server: &str,
        tools: &[Value],
        actor: &str,
        now: i64,
    ) -> Result<Vec<ToolState>, PinCheckError> {
        named_reporter(scope)?;
        let key = scope.key();
        self.write(|tx| {
            // Seen: a server row, or any pin or review of one of its tools (found by review:
            // with its server row deleted, the next definition would have been pinned on first
            // use, unreviewed). The entry of its own words is not a tool: pinned first, it
            // leaves the tools to be pinned on their own first use ([`Store::check_server_entry`]).
            let seen = tx
                .prepare_cached("SELECT 1 FROM tool_servers WHERE server = ?1 AND (scope = ?2 OR scope = '')
                    UNION ALL SELECT 1 FROM tool_pins WHERE server = ?1 AND (scope = ?2 OR scope = '') AND tool <> ?3
                    UNION ALL SELECT 1 FROM tool_reviews WHERE server = ?1 AND (scope = ?2 OR scope = '') AND tool <> ?3 LIMIT 1")?
                .query_row(params![server, key, SERVER_ENTRY], |_| Ok(()))
                .optional()?
                .is_some();
            if !seen {
                tx.prepare_cached("INSERT INTO tool_servers (scope, server, first_seen) VALUES (?1, ?2, ?3)")?
                    .execute(params![key, server, now])?;
            }
            let mut report = Report::open(tx, scope, server, (actor, now), seen)?;
            let mut out = Vec::with_capacity(tools.len());
            for t in tools {
                // A tool list never speaks for the server's own words.
                if let Some(name) = t["name"].as_str().filter(|n| *n != SERVER_ENTRY) {
                    out.push(report.check(tx, name, t)?);
                }
            }
            Ok(out)
        })
    }

    /// Checks a server's own words — `words`: `{"instructions"?, "serverInfo"?}` as its
    /// handshake gave them — against their pin in `scope` (its own, then the gateway's), as
    /// [`Store::check_tools`] checks a tool: the entry [`server_entry`] makes of them, named
    /// [`SERVER_ENTRY`], is pinned on its own first use (never reported before in `scope` or the
    /// gateway's: the words were not pinned before this entry was, so the first report after
    /// an upgrade trusts them as the first report of a server does its tools), `pinned` when it
    /// matches its pin, and otherwise held by a review (`tool.changed`, or `tool.new` when
    /// nothing is pinned) that an operator decides as a tool's; held without a review, showing
    /// the pinned words, when the scope's reviews are at their cap. Errors: those of
    /// [`Store::check_tools`] but `TooManyPending`.
    pub fn check_server_entry(
        &self,
        scope: PinScope<'_>,
        server: &str,
        words: &Value,
        actor: &str,
        now: i64,
    ) -> Result<ToolState, PinCheckError> {
        named_reporter(scope)?;
        let key = scope.key();
        let entry = server_entry(words.get("instructions"), words.get("serverInfo"));
        let checked = self.write(|tx| {
            let seen = tx
                .prepare_cached("SELECT 1 FROM tool_pins WHERE server = ?1 AND (scope = ?2 OR scope = '') AND tool = ?3
                    UNION ALL SELECT 1 FROM tool_reviews WHERE server = ?1 AND (scope = ?2 OR scope = '') AND tool = ?3 LIMIT 1")?
                .query_row(params![server, key, SERVER_ENTRY], |_| Ok(()))
                .optional()?
                .is_some();
            let mut report = Report::open(tx, scope, server, (actor, now), seen)?;
            report.check(tx, SERVER_ENTRY, &entry)
        });
        match checked {
            // The scope's review queue is full: the changed words wait, unrecorded, and the
            // client is shown the pinned ones (found by review: it was shown no words at all,
            // not even those an operator had reviewed).
            Err(PinCheckError::TooManyPending { .. }) => {
                let pin = self.read(|c| pinned(c, key, server, SERVER_ENTRY))?;
                Ok(state(SERVER_ENTRY, PinState::Held, None, pin.map(|p| p.1)))
            }
            other => other,
        }
    }

    /// Whether `agent`'s calls of `server`/`tool` must wait: the id of the oldest pending
    /// review of it in the gateway's scope or `agent`'s own, if any (what holds its
    /// proposals).
    pub fn pending_tool_review(
        &self,
        agent: &str,
        server: &str,
        tool: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(pending_review(self.lock().conn(), agent, server, tool)?)
    }

    /// Decides a pending review (`accept`: the new definition becomes the pin in the review's
    /// scope, `tool.accepted`; otherwise `tool.rejected`). `Ok(None)` when there is no such
    /// review; `Err(Invalid)` when it was decided already.
    pub fn decide_tool_review(
        &self,
        id: &str,
        accept: bool,
        actor: &str,
        now: i64,
    ) -> Result<Option<ToolReview>, StoreError> {
        let found = self.write(|tx| {
            let Some(r) = tx
                .prepare_cached(&format!(
                    "SELECT {REVIEW_COLS} FROM tool_reviews WHERE id = ?1"
                ))?
                .query_row([id], review_row)
                .optional()?
            else {
                return Ok(false);
            };
            if r.status != ReviewStatus::Pending {
                return Err(StoreError::Invalid(format!(
                    "review is already {}",
                    r.status.as_str()
                )));
            }
            let status = if accept { "accepted" } else { "rejected" };
            tx.prepare_cached("UPDATE tool_reviews SET status = ?2, decided_by = ?3, decided_at = ?4 WHERE id = ?1")?
                .execute(params![id, status, actor, now])?;
            let scope = r.agent.as_deref().unwrap_or("");
            if accept {
                let at = crate::session_risk::change_at(**tx, scope, (&r.server, &r.tool), now)?;
                tx.prepare_cached("INSERT INTO tool_pins (scope, server, tool, fingerprint, definition, pinned_at, pinned_by) VALUES (?1,?2,?3,?4,?5,?6,?7)
                    ON CONFLICT (scope, server, tool) DO UPDATE SET fingerprint = excluded.fingerprint, definition = excluded.definition, pinned_at = excluded.pinned_at, pinned_by = excluded.pinned_by")?
                    .execute(params![scope, r.server, r.tool, r.fingerprint, r.definition.to_string(), at, actor])?;
                // Other pending versions of the same tool stay pending: each is reviewed alone.
            }
            audit::append(
                **tx,
                now,
                if accept {
                    "tool.accepted"
                } else {
                    "tool.rejected"
                },
                None,
                actor,
                &json!({"server": r.server, "tool": r.tool, "fingerprint": r.fingerprint, "review_id": id,
                        "scope": if r.agent.is_some() { "agent" } else { "gateway" }, "agent": r.agent}),
            )?;
            tx.changed(Change::Review(id.to_string()));
            Ok(true)
        })?;
        if !found {
            return Ok(None);
        }
        self.tool_review(id)
    }
}

/// The oldest pending review of `server`/`tool` that holds `agent`'s calls: the gateway's
/// (its hub's upstream changed, for everyone) or `agent`'s own; never another agent's.
pub(crate) fn pending_review(
    conn: Conn<'_>,
    agent: &str,
    server: &str,
    tool: &str,
) -> db::Result<Option<String>> {
    conn.prepare_cached("SELECT id FROM tool_reviews WHERE server = ?1 AND tool = ?2 AND status = 'pending' AND (scope = '' OR scope = ?3) ORDER BY seen_at, rowid LIMIT 1")?
        .query_row(params![server, tool, agent], |r| r.get(0))
        .optional()
}

/// The pending review `(id, server, tool)` of the MCP tool of approval `aid`'s call that holds
/// its agent's calls, as [`pending_review`] finds it; `None` for a local tool or none pending.
/// One primary-key lookup and one index lookup (`tool_reviews_pending`): read at every
/// redemption.
pub(crate) fn review_holding_approval(
    conn: Conn<'_>,
    aid: &str,
) -> db::Result<Option<(String, String, String)>> {
    conn.prepare_cached(
        "SELECT r.id, r.server, r.tool FROM approvals a JOIN tool_reviews r ON r.server = a.server AND r.tool = a.tool
         WHERE a.id = ?1 AND r.status = 'pending' AND (r.scope = '' OR r.scope = a.agent) ORDER BY r.seen_at, r.rowid LIMIT 1",
    )?
    .query_row(params![aid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
    .optional()
}

/// `NoReporter` when `scope` is an agent's or person's scope without a name (the gateway's
/// own scope has none and needs none).
pub(crate) fn named_reporter(scope: PinScope<'_>) -> Result<(), PinCheckError> {
    if scope.key().is_empty() && scope != PinScope::Gateway {
        return Err(PinCheckError::NoReporter);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hub pins rmcp's `Tool` (nulls and unknown fields dropped, no `execution`); an
    /// agent's relay reports the upstream's JSON. One definition fingerprints alike either way,
    /// a plain tool keeps its old fingerprint, and a changed hint or title does not.
    #[test]
    fn one_definition_fingerprints_alike_as_the_hub_and_a_relay_read_it() {
        let plain =
            json!({"name": "rm", "description": "Remove.", "inputSchema": {"type": "object"}});
        assert_eq!(fingerprint(&plain), fingerprint_v1(&plain));
        let mut hub = plain.clone();
        hub["annotations"] = json!({"destructiveHint": true});
        let mut relay = hub.clone();
        relay["title"] = Value::Null;
        relay["execution"] = json!({"taskSupport": "optional"});
        relay["annotations"]["x-vendor"] = json!(1);
        relay["annotations"]["readOnlyHint"] = Value::Null;
        relay["_meta"] = json!({"n": 1});
        assert_eq!(fingerprint(&hub), fingerprint(&relay));
        assert_ne!(fingerprint(&hub), fingerprint(&plain));
        let mut pulled = hub.clone();
        pulled["annotations"] = json!({"destructiveHint": false, "readOnlyHint": true});
        assert_ne!(fingerprint(&hub), fingerprint(&pulled));
        let mut titled = hub.clone();
        titled["title"] = json!("Harmless");
        assert_ne!(fingerprint(&hub), fingerprint(&titled));
        // A pin of the old fingerprint holds for its own definition only.
        assert!(matches_pin(&fingerprint_v1(&hub), &hub, &relay));
        assert!(!matches_pin(&fingerprint_v1(&hub), &hub, &pulled));
        // Icons count, as rmcp keeps them (unknown keys and non-strings left out); a pin made
        // before they counted holds for its own definition's icons only.
        let mut iconed = hub.clone();
        iconed["icons"] = json!([{"src": "https://a.example/i.png", "sizes": ["48x48"]}]);
        let mut relayed = iconed.clone();
        relayed["icons"][0]["x-vendor"] = json!(true);
        assert_eq!(fingerprint(&iconed), fingerprint(&relayed));
        assert_ne!(fingerprint(&iconed), fingerprint(&hub));
        let mut moved = iconed.clone();
        moved["icons"][0]["src"] = json!("https://attacker.example/i.png");
        let before_icons = digest(&v2_fields(&iconed, false));
        assert!(matches_pin(&before_icons, &iconed, &relayed));
        assert!(!matches_pin(&before_icons, &iconed, &moved));
        // Shapes rmcp refuses (only a relay forwards them) count as they are.
        for odd in [
            json!(["https://attacker.example/i.png"]),
            json!({"src": "https://attacker.example/i.png"}),
            json!([{"src": "https://a.example/i.png", "sizes": "48x48"}]),
            json!([{"src": "https://a.example/i.png", "theme": "evil"}]),
        ] {
            let mut t = hub.clone();
            t["icons"] = odd;
            assert_ne!(fingerprint(&t), fingerprint(&hub), "{t}");
        }
    }
}
