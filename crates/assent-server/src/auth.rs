//! Bearer-key authentication: the presented key's SHA-256 is compared in constant time with
//! every principal's (no early exit), and the key itself is never stored or logged.

use crate::config::{Principal, PrincipalKind};
use crate::error::ApiError;
use assent_core::approval::Canceller;
use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Finds the principal for the `Authorization: Bearer KEY` header. 401 when the header is
/// missing, malformed or the key unknown.
pub fn authenticate<'a>(
    principals: &'a [Principal],
    headers: &HeaderMap,
) -> Result<&'a Principal, ApiError> {
    let key = bearer_key(headers).ok_or_else(ApiError::unauthenticated)?;
    principal_for_key(principals, key).ok_or_else(ApiError::unauthenticated)
}

/// The key of an `Authorization: Bearer KEY` header (`bearer` also accepted, surrounding
/// spaces trimmed), if the request carries a non-empty one.
pub fn bearer_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// The principal whose key is `key` (compared by SHA-256, in constant time with every
/// principal), if any.
pub fn principal_for_key<'a>(principals: &'a [Principal], key: &str) -> Option<&'a Principal> {
    let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    let mut found = None;
    for p in principals {
        if bool::from(p.key_sha256.ct_eq(&digest)) {
            found = Some(p);
        }
    }
    found
}

impl Principal {
    /// The agent id an agent principal is bound to.
    pub fn agent_id(&self) -> Option<&str> {
        match &self.kind {
            PrincipalKind::Agent { agent_id } => Some(agent_id),
            PrincipalKind::Operator { .. } => None,
        }
    }
    /// Whether this principal may see what agent `agent` asked for (approvals, questions,
    /// plans): an agent only its own, an operator everything; others get the same `404` as
    /// a missing id.
    pub fn sees(&self, agent: &str) -> bool {
        self.agent_id().is_none_or(|a| a == agent)
    }
    /// The roles of an operator (`None` for agents).
    pub fn roles(&self) -> Option<&[String]> {
        match &self.kind {
            PrincipalKind::Operator { roles } => Some(roles),
            PrincipalKind::Agent { .. } => None,
        }
    }
    /// This principal withdrawing a request: the agent itself, or an operator with their roles.
    pub fn canceller(&self) -> Canceller<'_> {
        match &self.kind {
            PrincipalKind::Agent { agent_id } => Canceller::Agent {
                name: &self.name,
                agent: agent_id,
            },
            PrincipalKind::Operator { roles } => Canceller::Operator {
                name: &self.name,
                roles,
            },
        }
    }
}
