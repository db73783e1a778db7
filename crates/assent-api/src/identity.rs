//! Who is calling and whether the gateway is up: `GET /v1/whoami` and `GET /healthz`. Not
//! authentication itself (that is the bearer key on every request, see [`crate::Client`]).

use serde::{Deserialize, Serialize};

/// `GET /v1/whoami`: the principal the key belongs to, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`.
    pub status: String,
}
