//! MCP tool-list pinning (issue 4): the gateway records a fingerprint of each upstream tool —
//! the SHA-256 of the canonical JSON of its `name`, `description` and `inputSchema` — the
//! first time it sees the server (trust on first use). A tool whose fingerprint differs from
//! its pin, or a tool that appears after the server was first seen, gets a pending *review*;
//! its calls are refused until an operator accepts the new definition, which becomes the pin.
//! Every pin, change and review decision is an audit record.

use crate::audit;
use crate::db::{self, Change, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::params;
use crate::sql::{self, from_row, json_or_default};
use crate::store::Store;
use assent_core::pin::{PinState, ReviewStatus, ToolPin, ToolReview, ToolState};
use serde_json::{Value, json};

/// The fingerprint of a tool definition: SHA-256 (hex) of the RFC 8785 canonical JSON of
/// `{"name", "description", "inputSchema"}` (missing fields as `null`).
pub fn fingerprint(tool: &Value) -> String {
    let v = json!({"name": tool["name"], "description": tool["description"],
                   "inputSchema": tool["inputSchema"]});
    let text = assent_core::canonical::canonical_value(&v).unwrap_or_else(|_| v.to_string());
    assent_core::canonical::sha256_hex(text.as_bytes())
}

fn pinned(conn: Conn<'_>, server: &str, tool: &str) -> db::Result<Option<(String, Value)>> {
    conn.prepare_cached(
        "SELECT fingerprint, definition FROM tool_pins WHERE server = ?1 AND tool = ?2",
    )?
    .query_row(crate::params![server, tool], |r| {
        Ok((r.get(0)?, json_or_default(r, 1)?))
    })
    .optional()
}

fn review_row(r: &db::Row<'_>) -> db::Result<ToolReview> {
    let status: String = r.get("status")?;
    from_row!(r => ToolReview {
        id, server, tool, fingerprint, seen_by, decided_by, seen_at, decided_at,
        status: ReviewStatus::parse(&status).unwrap_or(ReviewStatus::Rejected),
        definition: json_or_default(r, "definition")?,
        pinned: None,
        diff: None,
    })
}

const REVIEW_COLS: &str =
    "id, server, tool, fingerprint, definition, seen_at, seen_by, status, decided_by, decided_at";

/// A forwarded call's result, reported to [`Store::record_result`].
#[derive(Debug, Clone, Copy)]
pub struct ReportedResult<'a> {
    /// The agent whose call it was.
    pub agent: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// The call's tool.
    pub tool: &'a str,
    /// The call's MCP server alias.
    pub server: Option<&'a str>,
    /// The approval the call ran under, when it was held.
    pub approval_id: Option<&'a str>,
    /// The `call.result` audit data (call hash, result SHA-256, size).
    pub data: &'a Value,
    /// What the call brings into its session (`Registry::effects_of`).
    pub effects: assent_core::session_risk::Effects,
}

impl Store {
    /// Checks the tools an upstream advertises (`tools/list` entries) against the pins of
    /// `server`, in one transaction: a server never seen is pinned as it is
    /// (`tool.pinned`, trust on first use); otherwise a tool matching its pin is `pinned`, and
    /// any other gets (or keeps) a review (`tool.changed` / `tool.new` when it is created).
    pub fn check_tools(
        &self,
        server: &str,
        tools: &[Value],
        agent: &str,
        now: i64,
    ) -> Result<Vec<ToolState>, StoreError> {
        self.write(|tx| {
            let seen: bool = tx
                .prepare_cached("SELECT 1 FROM tool_servers WHERE server = ?1")?
                .query_row([server], |_| Ok(()))
                .optional()?
                .is_some();
            if !seen {
                tx.prepare_cached("INSERT INTO tool_servers (server, first_seen) VALUES (?1, ?2)")?
                    .execute(params![server, now])?;
            }
            let mut out = Vec::with_capacity(tools.len());
            for t in tools {
                let Some(name) = t["name"].as_str() else {
                    continue;
                };
                let fp = fingerprint(t);
                let pin = pinned(**tx, server, name)?;
                match pin {
                    Some((pfp, def)) if pfp == fp => out.push(ToolState {
                        name: name.into(),
                        state: PinState::Pinned,
                        review_id: None,
                        review_status: None,
                        pinned: Some(def),
                    }),
                    None if !seen => {
                        tx.prepare_cached("INSERT INTO tool_pins (server, tool, fingerprint, definition, pinned_at, pinned_by) VALUES (?1,?2,?3,?4,?5,'trust-on-first-use')")?
                            .execute(params![server, name, fp, t.to_string(), now])?;
                        audit::append(
                            **tx,
                            now,
                            "tool.pinned",
                            None,
                            agent,
                            &json!({"server": server, "tool": name, "fingerprint": fp, "by": "trust-on-first-use"}),
                        )?;
                        out.push(ToolState {
                            name: name.into(),
                            state: PinState::FirstUse,
                            review_id: None,
                            review_status: None,
                            pinned: Some(t.clone()),
                        });
                    }
                    pin => {
                        let existing: Option<(String, String)> = tx
                            .prepare_cached("SELECT id, status FROM tool_reviews WHERE server = ?1 AND tool = ?2 AND fingerprint = ?3")?
                            .query_row(params![server, name, fp], |r| Ok((r.get(0)?, r.get(1)?)))
                            .optional()?;
                        let (id, status) = match existing {
                            Some(x) => x,
                            None => {
                                let id = uuid::Uuid::new_v4().to_string();
                                tx.prepare_cached("INSERT INTO tool_reviews (id, server, tool, fingerprint, definition, seen_at, seen_by, status) VALUES (?1,?2,?3,?4,?5,?6,?7,'pending')")?
                                    .execute(params![id, server, name, fp, t.to_string(), now, agent])?;
                                audit::append(
                                    **tx,
                                    now,
                                    if pin.is_some() {
                                        "tool.changed"
                                    } else {
                                        "tool.new"
                                    },
                                    None,
                                    agent,
                                    &json!({"server": server, "tool": name, "fingerprint": fp,
                                            "pinned_fingerprint": pin.as_ref().map(|p| &p.0), "review_id": id}),
                                )?;
                                (id, ReviewStatus::Pending.as_str().to_string())
                            }
                        };
                        out.push(ToolState {
                            name: name.into(),
                            state: PinState::Held,
                            review_id: Some(id),
                            review_status: Some(
                                ReviewStatus::parse(&status).unwrap_or(ReviewStatus::Rejected),
                            ),
                            pinned: pin.map(|p| p.1),
                        });
                    }
                }
            }
            Ok(out)
        })
    }

    /// Whether calls of `server`/`tool` must wait: the id of a pending review of it, if any.
    pub fn pending_tool_review(
        &self,
        server: &str,
        tool: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self.lock().conn().prepare_cached("SELECT id FROM tool_reviews WHERE server = ?1 AND tool = ?2 AND status = 'pending' ORDER BY seen_at LIMIT 1")?
            .query_row(params![server, tool], |r| r.get(0))
            .optional()?)
    }

    /// Reviews, newest first; only those with `status` when given.
    pub fn tool_reviews(&self, status: Option<&str>) -> Result<Vec<ToolReview>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let sql = format!(
            "SELECT {REVIEW_COLS} FROM tool_reviews WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) ORDER BY seen_at DESC, rowid DESC"
        );
        let mut list = sql::rows(conn, &sql, [status], review_row)?;
        for r in &mut list {
            r.pinned = pinned(conn, &r.server, &r.tool)?.map(|p| p.1);
        }
        Ok(list)
    }

    /// One review.
    pub fn tool_review(&self, id: &str) -> Result<Option<ToolReview>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let r = conn
            .prepare_cached(&format!(
                "SELECT {REVIEW_COLS} FROM tool_reviews WHERE id = ?1"
            ))?
            .query_row([id], review_row)
            .optional()?;
        Ok(match r {
            Some(mut r) => {
                r.pinned = pinned(conn, &r.server, &r.tool)?.map(|p| p.1);
                Some(r)
            }
            None => None,
        })
    }

    /// Decides a pending review (`accept`: the new definition becomes the pin, `tool.accepted`;
    /// otherwise `tool.rejected`). `Ok(None)` when there is no such review; `Err(Invalid)` when
    /// it was decided already.
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
            if accept {
                tx.prepare_cached("INSERT INTO tool_pins (server, tool, fingerprint, definition, pinned_at, pinned_by) VALUES (?1,?2,?3,?4,?5,?6)
                    ON CONFLICT (server, tool) DO UPDATE SET fingerprint = excluded.fingerprint, definition = excluded.definition, pinned_at = excluded.pinned_at, pinned_by = excluded.pinned_by")?
                    .execute(params![r.server, r.tool, r.fingerprint, r.definition.to_string(), now, actor])?;
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
                &json!({"server": r.server, "tool": r.tool, "fingerprint": r.fingerprint, "review_id": id}),
            )?;
            tx.changed(Change::Review(id.to_string()));
            Ok(true)
        })?;
        if !found {
            return Ok(None);
        }
        self.tool_review(id)
    }

    /// Appends `call.result` for a forwarded call's result `r` (issue 4 "Results"): `r.data`
    /// holds the call hash and the result's SHA-256 and size; linked to `r.approval_id` when
    /// it is an approval of `r.agent`. In the same transaction the result's session takes in
    /// what the call brings (`r.effects`, issue 16 §3: untrusted output, private data).
    pub fn record_result(&self, r: &ReportedResult<'_>, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            let link: Option<String> = match r.approval_id {
                Some(id) => tx
                    .prepare_cached("SELECT id FROM approvals WHERE id = ?1 AND agent = ?2")?
                    .query_row(params![id, r.agent], |r| r.get(0))
                    .optional()?,
                None => None,
            };
            audit::append(**tx, now, "call.result", link.as_deref(), r.agent, r.data)?;
            let call = (r.tool, r.server);
            crate::session_risk::ran(**tx, r.agent, r.session_id, call, r.effects, now)?;
            Ok(())
        })
    }

    /// Every pin, by server and tool.
    pub fn tool_pins(&self) -> Result<Vec<ToolPin>, StoreError> {
        Ok(sql::rows(
            self.lock().conn(),
            "SELECT server, tool, fingerprint, definition, pinned_at, pinned_by FROM tool_pins ORDER BY server, tool",
            [],
            |r| {
                from_row!(r => ToolPin {
                    server, tool, fingerprint, pinned_by, pinned_at,
                    definition: json_or_default(r, "definition")?,
                })
            },
        )?)
    }
}
