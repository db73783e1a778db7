//! Who is calling and whether the gateway is up and ready: `GET /v1/whoami`, `GET /healthz`
//! and `GET /readyz`. Not
//! authentication itself (that is the bearer key on every request, see [`crate::Client`]).

use serde::{Deserialize, Serialize};

/// `GET /v1/whoami`: the principal the key belongs to, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum WhoAmI {
    /// An agent key: it proposes, redeems and reports for one agent.
    Agent {
        /// The principal's name.
        name: String,
        /// The agent it acts for.
        agent_id: String,
    },
    /// An operator key: it decides, cancels and reads.
    Operator {
        /// The principal's name.
        name: String,
        /// Its roles (approver roles of the policies).
        roles: Vec<String>,
    },
}

impl WhoAmI {
    /// The agent id, for an agent key.
    pub fn agent_id(&self) -> Option<&str> {
        match self {
            Self::Agent { agent_id, .. } => Some(agent_id),
            Self::Operator { .. } => None,
        }
    }
}

/// `GET /healthz` (no key): `{"status": "ok"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// `GET /readyz` (no key): `200` with `status` `ready` when the database answers a query at
/// its path, takes the write lock and has this build's schema version; `503` with `status`
/// `not_ready`, a stable `reason` and a `message` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Ready {
    /// `ready` or `not_ready`.
    pub status: String,
    /// The database's schema version (`PRAGMA user_version`), when it could be read.
    pub schema_version: Option<i64>,
    /// The schema version this build serves.
    pub expected_schema_version: i64,
    /// Why not ready: `database_missing`, `database_unreadable`, `database_locked`,
    /// `database_error`, `schema_behind` or `schema_ahead`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What is wrong, in a sentence (names no file path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
