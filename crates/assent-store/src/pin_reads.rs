//! The read-only fast path of a tool-pin check (issue 13 §4: fewer writes per allowed MCP
//! call). The hub checks the called tool's pin on every call; [`Store::check_tools`] is a write
//! transaction even when every tool matches its pin and nothing is written. Here the pins are
//! read first, in one read snapshot; only when some tool is not pinned with exactly its
//! fingerprint (new, changed, under review, or a server never seen) does the check become the
//! write, which decides everything again inside its own transaction. What the read answers is
//! exactly what the write would answer for those tools: "pinned", with the pinned definition.

use crate::db::OptionalExtension as _;
use crate::error::StoreError;
use crate::params;
use crate::pins::fingerprint;
use crate::sql::json_or_default;
use crate::store::Store;
use assent_core::pin::{PinState, ToolState};
use serde_json::Value;

impl Store {
    /// [`Store::check_tools`] of `tools` advertised by `server`, answered from a read when every
    /// tool with a string `name` matches its pin (all `Pinned`, nothing written); otherwise
    /// the write transaction of [`Store::check_tools`] (pins, reviews, audit records). Errors:
    /// `Db`.
    pub fn check_tools_read_first(
        &self,
        server: &str,
        tools: &[Value],
        agent: &str,
        now: i64,
    ) -> Result<Vec<ToolState>, StoreError> {
        if let Some(all) = self.all_pinned(server, tools)? {
            return Ok(all);
        }
        self.check_tools(server, tools, agent, now)
    }

    /// Every tool of `tools` (with a string `name`; others are skipped, as the write skips
    /// them) as `Pinned` with its pinned definition, when each one's fingerprint is its pin's;
    /// `None` as soon as one is not (or `tools` has none).
    fn all_pinned(
        &self,
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
                let pin: Option<(String, Value)> = c
                    .prepare_cached(
                        "SELECT fingerprint, definition FROM tool_pins WHERE server = ?1 AND tool = ?2",
                    )?
                    .query_row(params![server, name], |r| {
                        Ok((r.get(0)?, json_or_default(r, 1)?))
                    })
                    .optional()?;
                match pin {
                    Some((fp, def)) if fp == fingerprint(t) => out.push(ToolState {
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
}
