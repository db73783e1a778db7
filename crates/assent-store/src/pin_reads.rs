//! The read side of tool pinning: the read-only fast path of a tool-pin check (issue 13 §4:
//! fewer writes per allowed MCP call) and the operator's lists of reviews and pins.
//!
//! The hub checks the called tool's pin on every call; [`Store::check_tools`] is a write
//! transaction even when every tool matches its pin and nothing is written. Here the pins are
//! read first, in one read snapshot; only when some tool is not pinned with exactly its
//! fingerprint (new, changed, under review, or a server never seen) does the check become the
//! write, which decides everything again inside its own transaction. What the read answers is
//! exactly what the write would answer for those tools: "pinned", with the pinned definition
//! that holds in the reporter's scope (its own, else the gateway's).

use crate::error::StoreError;
use crate::pins::{PinCheckError, PinScope, REVIEW_COLS, matches_pin, owner, pinned, review_row};
use crate::sql::{self, from_row, json_or_default};
use crate::store::Store;
use assent_core::pin::{PinState, ToolPin, ToolReview, ToolState};
use serde_json::Value;

impl Store {
    /// [`Store::check_tools`] of `tools` advertised by `server` in `scope`, answered from a
    /// read when every tool with a string `name` matches the pin that holds in `scope` (all
    /// `Pinned`, nothing written); otherwise the write transaction of [`Store::check_tools`]
    /// (pins, reviews, audit records). Errors: those of [`Store::check_tools`].
    pub fn check_tools_read_first(
        &self,
        scope: PinScope<'_>,
        server: &str,
        tools: &[Value],
        actor: &str,
        now: i64,
    ) -> Result<Vec<ToolState>, PinCheckError> {
        crate::pins::named_reporter(scope)?;
        if let Some(all) = self.all_pinned(scope, server, tools)? {
            return Ok(all);
        }
        self.check_tools(scope, server, tools, actor, now)
    }

    /// [`Store::check_server_entry`] of a server's own words `words`, answered from a read
    /// when the entry they make matches the pin that holds in `scope` (`Pinned`, nothing
    /// written); otherwise its write transaction.
    pub fn check_server_entry_read_first(
        &self,
        scope: PinScope<'_>,
        server: &str,
        words: &Value,
        actor: &str,
        now: i64,
    ) -> Result<ToolState, PinCheckError> {
        crate::pins::named_reporter(scope)?;
        let entry =
            assent_core::pin::server_entry(words.get("instructions"), words.get("serverInfo"));
        if let Some(mut all) = self.all_pinned(scope, server, std::slice::from_ref(&entry))?
            && let Some(state) = all.pop()
        {
            return Ok(state);
        }
        self.check_server_entry(scope, server, words, actor, now)
    }

    /// Every tool of `tools` (with a string `name`; others are skipped, as the write skips
    /// them) as `Pinned` with its pinned definition, when each one's fingerprint is the pin's
    /// that holds in `scope`; `None` as soon as one is not (or `tools` has none).
    fn all_pinned(
        &self,
        scope: PinScope<'_>,
        server: &str,
        tools: &[Value],
    ) -> Result<Option<Vec<ToolState>>, StoreError> {
        let guard = self.lock();
        Ok(guard.conn().snapshot(|c| {
            let mut out = Vec::with_capacity(tools.len());
            for t in tools {
                let Some(name) = t["name"].as_str() else {
                    continue;
                };
                match pinned(c, scope.key(), server, name)? {
                    Some((fp, def)) if matches_pin(&fp, &def, t) => out.push(ToolState {
                        name: name.into(),
                        state: PinState::Pinned,
                        review_id: None,
                        review_status: None,
                        pinned: Some(def),
                    }),
                    _ => return Ok(None),
                }
            }
            Ok((!out.is_empty()).then_some(out))
        })?)
    }

    /// Reviews, newest first, each with the pin it would replace in its own scope; only
    /// those with `status` when given.
    pub fn tool_reviews(&self, status: Option<&str>) -> Result<Vec<ToolReview>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let sql = format!(
            "SELECT {REVIEW_COLS} FROM tool_reviews WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) ORDER BY seen_at DESC, rowid DESC"
        );
        let mut list = sql::rows(conn, &sql, [status], review_row)?;
        for r in &mut list {
            let scope = r.agent.as_deref().unwrap_or("");
            r.pinned = pinned(conn, scope, &r.server, &r.tool)?.map(|p| p.1);
        }
        Ok(list)
    }

    /// One page of reviews, newest first (`seen_at`, then insertion order), only those with
    /// `status` when given, starting after `before` (`None`: the newest), each with the pin
    /// it would replace in its own scope, read in one snapshot beside the writer
    /// ([`Store::aside`]): at most `limit` (at least 1), and the page ends early once the
    /// definitions it holds (each review's new and pinned definition, as JSON text) reach
    /// `max_bytes` — at least one review, so a page holds at most `max_bytes` plus one. Also
    /// the cursor of the next page (`(seen_at, rowid)` of the last review read; `None` on the
    /// last page). Found by review: `?status=all` read every review ever made, whole, and
    /// decided reviews accumulate with every upstream change.
    pub fn tool_review_page(
        &self,
        status: Option<&str>,
        limit: u32,
        before: Option<(i64, i64)>,
        max_bytes: usize,
    ) -> Result<ReviewPage, StoreError> {
        let (at, row) = before.unwrap_or((i64::MAX, i64::MAX));
        let n = i64::from(limit.max(1));
        self.aside(|conn| {
            let keys: Vec<(String, i64, i64)> = sql::rows(
                conn,
                "SELECT id, seen_at, rowid FROM tool_reviews WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1)
                   AND seen_at <= ?2 AND (seen_at < ?2 OR rowid < ?3) ORDER BY seen_at DESC, rowid DESC LIMIT ?4",
                crate::params![status, at, row, n + 1],
                crate::db::tuple,
            )?;
            let sql = format!("SELECT {REVIEW_COLS} FROM tool_reviews WHERE id = ?1");
            let (mut out, mut bytes) = (Vec::new(), 0usize);
            for (i, (id, _, _)) in keys.iter().enumerate() {
                if i > 0 && (i as i64 == n || bytes >= max_bytes) {
                    let (_, at, row) = keys[i - 1];
                    return Ok((out, Some((at, row))));
                }
                let Some(mut r) = sql::rows(conn, &sql, [id], review_row)?.pop() else {
                    continue;
                };
                let scope = r.agent.as_deref().unwrap_or("");
                r.pinned = pinned(conn, scope, &r.server, &r.tool)?.map(|p| p.1);
                bytes = bytes.saturating_add(review_weight(&r));
                out.push(r);
            }
            Ok((out, None))
        })
    }

    /// One review, with the pin it would replace in its own scope.
    pub fn tool_review(&self, id: &str) -> Result<Option<ToolReview>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let sql = format!("SELECT {REVIEW_COLS} FROM tool_reviews WHERE id = ?1");
        let Some(mut r) = sql::rows(conn, &sql, [id], review_row)?.pop() else {
            return Ok(None);
        };
        let scope = r.agent.as_deref().unwrap_or("");
        r.pinned = pinned(conn, scope, &r.server, &r.tool)?.map(|p| p.1);
        Ok(Some(r))
    }

    /// Every pin, the gateway's first, then by agent, server and tool.
    pub fn tool_pins(&self) -> Result<Vec<ToolPin>, StoreError> {
        Ok(sql::rows(
            self.lock().conn(),
            "SELECT scope, server, tool, fingerprint, definition, pinned_at, pinned_by FROM tool_pins ORDER BY scope, server, tool",
            [],
            |r| {
                from_row!(r => ToolPin {
                    server, tool, fingerprint, pinned_by, pinned_at,
                    agent: owner(r.get("scope")?),
                    definition: json_or_default(r, "definition")?,
                })
            },
        )?)
    }
}

/// One page of [`Store::tool_review_page`]: its reviews, and the cursor of the next page
/// (`(seen_at, rowid)`; `None` on the last page).
pub(crate) type ReviewPage = (Vec<ToolReview>, Option<(i64, i64)>);

/// The bytes a review counts against a page's budget: its new and its pinned definition as
/// JSON text (what an upstream sizes; the API's diff between them is at most about as much).
fn review_weight(r: &ToolReview) -> usize {
    let text = |v: &Value| serde_json::to_string(v).map_or(0, |s| s.len());
    text(&r.definition) + r.pinned.as_ref().map_or(0, text)
}
