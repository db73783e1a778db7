//! `POST /v1/reload` (an operator's key; issue 14 §8): what the gateway answers when it put
//! its configuration file's principals, agents and policies in force ([`Reloaded`]), and each
//! problem of a file it refused ([`ConfigProblem`], in the `errors` of its `422
//! CONFIG_INVALID` body, [`crate::ApiErrorBody::errors`]).

use serde::{Deserialize, Serialize};

/// The answer to a reload that was applied (`200`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Reloaded {
    /// The configuration file read.
    pub file: String,
    /// Agents, governance policies and principals now in force.
    pub agents: usize,
    /// See `agents`.
    pub policies: usize,
    /// See `agents`.
    pub principals: usize,
    /// SHA-256 (hex) of the policy set now in force (`Registry::policy_set_sha256`).
    pub policy_set_sha256: String,
    /// The policy set's hash before the reload.
    pub previous_policy_set_sha256: String,
    /// Principals added, by name.
    pub added: Vec<String>,
    /// Principals removed, by name: their keys stopped working.
    pub removed: Vec<String>,
    /// Principals whose key, kind, roles, agent or owned agents changed, by name (a changed
    /// key: the old one stopped working).
    pub changed: Vec<String>,
    /// Settings the file changed that only a restart applies (still as at start-up).
    pub needs_restart: Vec<String>,
    /// The file's warnings (globs matching nothing, the registry's warnings), and a note when
    /// the principal who asked is no longer an operator.
    pub warnings: Vec<String>,
}

/// One problem of a configuration the gateway refused, as start-up reports it: `FILE:LINE:
/// reason` ([`ConfigProblem::line_text`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConfigProblem {
    /// The file at fault, if named.
    pub file: Option<String>,
    /// Its line (1-based), if named.
    pub line: Option<u64>,
    /// What is wrong.
    pub reason: String,
}

impl ConfigProblem {
    /// `FILE:LINE: reason`, `FILE: reason` without a line, or the reason alone without a file.
    pub fn line_text(&self) -> String {
        match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{f}:{l}: {}", self.reason),
            (Some(f), None) => format!("{f}: {}", self.reason),
            _ => self.reason.clone(),
        }
    }
}
