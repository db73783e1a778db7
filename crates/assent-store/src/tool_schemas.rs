//! The input schemas of pinned MCP tools, read for suggestions (issue 16 §2): a suggestion
//! mines only the arguments a tool really takes ([`assent_core::suggest::known`]), and a
//! pinned definition's `inputSchema` says which — when the gateway trusts whoever pinned it
//! ([`trusted`]). Read only, by primary key (`tool_pins (scope, server, tool)`), in one read
//! snapshot; on a running gateway's store or offline (`assent suggest`).

use crate::db::{self, Conn, Database, OptionalExtension as _};
use crate::error::StoreError;
use crate::sql::json_or_default;
use crate::store::Store;
use assent_core::replay::Recorded;
use assent_core::suggest::Schemas;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What `pinned_by` holds for a pin made on first use, with no operator looking.
const FIRST_USE: &str = "trust-on-first-use";

/// One pinned definition's input schema.
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedSchema {
    /// The MCP server alias.
    pub server: String,
    /// The tool.
    pub tool: String,
    /// Whose pin: `None` for the gateway's (its MCP hub, reporting the upstreams of its own
    /// config), else the agent whose own relay reported it.
    pub agent: Option<String>,
    /// Whether an operator accepted this definition in a tool review (`false`: pinned on
    /// first use).
    pub reviewed: bool,
    /// The definition's `inputSchema` (`null` when it has none).
    pub input_schema: Value,
}

/// The MCP tools (`(server, tool)`) of `history`, each with the agents that called it.
pub fn tools_of(history: &[Recorded]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut tools: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for r in history {
        if let Some(server) = &r.call.server {
            tools
                .entry((server.clone(), r.call.tool.clone()))
                .or_default()
                .insert(r.agent.clone());
        }
    }
    tools
}

/// For each `(server, tool)` of `tools`, the gateway's pin and each listed agent's own pin
/// that exist, with their input schemas.
pub fn read_pinned(
    c: Conn<'_>,
    tools: &BTreeMap<(String, String), BTreeSet<String>>,
) -> db::Result<Vec<PinnedSchema>> {
    let mut out = Vec::new();
    for ((server, tool), agents) in tools {
        for scope in std::iter::once("").chain(agents.iter().map(String::as_str)) {
            let row = c
                .prepare_cached("SELECT definition, pinned_by FROM tool_pins WHERE scope = ?1 AND server = ?2 AND tool = ?3")?
                .query_row(crate::params![scope, server, tool], |r| {
                    let def: Value = json_or_default(r, 0)?;
                    let by: String = r.get(1)?;
                    Ok((def, by))
                })
                .optional()?;
            if let Some((def, by)) = row {
                out.push(PinnedSchema {
                    server: server.clone(),
                    tool: tool.clone(),
                    agent: (!scope.is_empty()).then(|| scope.to_string()),
                    reviewed: by != FIRST_USE,
                    input_schema: def.get("inputSchema").cloned().unwrap_or(Value::Null),
                });
            }
        }
    }
    Ok(out)
}

/// The schemas of `pins` the gateway trusts: the pins of its own MCP hub (definitions it
/// fetched from the upstreams of its config, first use or reviewed). A definition an agent's
/// own relay reported is the agent's word — its key could have sent any `inputSchema`, naming
/// the argument it means to steer — so it is not counted, only noted
/// ([`Schemas::unreviewed`]), even once an operator accepted it in a tool review: accepting
/// says the tool is safe to call, not that the upstream takes each argument it lists (found
/// by review: a harmless change sent to review carried the made-up argument of the first-use
/// pin along, unseen in the diff).
pub fn trusted(pins: Vec<PinnedSchema>) -> Schemas {
    let mut out = Schemas::default();
    for p in pins {
        if p.agent.is_none() {
            out.declare(Some(&p.server), &p.tool, &p.input_schema);
        } else {
            out.unreviewed.insert((Some(p.server), p.tool));
        }
    }
    out
}

/// [`trusted`] of the pins of `history`'s MCP tools, read from `database` opened read-only
/// (SQLite) or on a session of its own (PostgreSQL): what `assent suggest` reads, with no
/// gateway running. Errors: no database there, an unreachable one, a failed query.
pub fn trusted_offline(database: &Database, history: &[Recorded]) -> Result<Schemas, StoreError> {
    let conn = match database {
        Database::Sqlite { path } => {
            let dir = path.parent().unwrap_or(std::path::Path::new("."));
            db::Connection::Sqlite(crate::open::open_read_only(dir)?)
        }
        Database::Postgres { .. } => database.connect()?,
    };
    let tools = tools_of(history);
    let pins = conn.conn().snapshot(|c| read_pinned(c, &tools))?;
    Ok(trusted(pins))
}

impl Store {
    /// [`trusted`] of the pins of `history`'s MCP tools (one read snapshot). Errors: the
    /// store cannot be read.
    pub fn trusted_schemas(&self, history: &[Recorded]) -> Result<Schemas, StoreError> {
        let tools = tools_of(history);
        Ok(trusted(self.read(|c| read_pinned(c, &tools))?))
    }
}
