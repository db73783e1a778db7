//! Bearer-key authentication: the presented key's SHA-256 is compared in constant time with
//! every principal's (no early exit), and the key itself is never stored or logged. An
//! executor's key (issue 14 §6) authenticates only at `POST /v1/tokens/redeem` ([`Redeemer`]);
//! everywhere else it is refused with `403`.

use crate::config::{Principal, PrincipalKind};
use crate::error::ApiError;
use crate::state::AppState;
use assent_core::approval::Canceller;
use assent_core::redeem::Presenter;
use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Finds the principal for the `Authorization: Bearer KEY` header. 401 when the header is
/// missing, malformed or the key unknown; 403 for an executor's key (it may only redeem
/// tokens, [`Redeemer`]).
pub fn authenticate<'a>(
    principals: &'a [Principal],
    headers: &HeaderMap,
) -> Result<&'a Principal, ApiError> {
    let key = bearer_key(headers).ok_or_else(ApiError::unauthenticated)?;
    let p = principal_for_key(principals, key).ok_or_else(ApiError::unauthenticated)?;
    if matches!(p.kind, PrincipalKind::Executor { .. }) {
        return Err(ApiError::forbidden(EXECUTOR_ONLY_REDEEMS));
    }
    Ok(p)
}

/// The `403` message an executor's key gets outside `POST /v1/tokens/redeem`.
pub const EXECUTOR_ONLY_REDEEMS: &str =
    "an executor key may only redeem tokens (POST /v1/tokens/redeem)";

/// Who presents a token at `POST /v1/tokens/redeem`: an agent or an executor. `401` without a
/// known key, `403 FORBIDDEN` for an operator's.
pub struct Redeemer(pub Principal);

impl FromRequestParts<AppState> for Redeemer {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        let key = bearer_key(&parts.headers).ok_or_else(ApiError::unauthenticated)?;
        let all = st.principals();
        let p = principal_for_key(&all, key).ok_or_else(ApiError::unauthenticated)?;
        match p.kind {
            PrincipalKind::Operator { .. } => Err(ApiError::forbidden(
                "only an agent or an executor key may redeem tokens",
            )),
            _ => Ok(Redeemer(p.clone())),
        }
    }
}

/// The key of an `Authorization: Bearer KEY` header ([`assent_api::bearer_credential`]: the
/// scheme in any case, surrounding spaces trimmed), if the request carries a non-empty one.
pub fn bearer_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(assent_api::bearer_credential)
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
            PrincipalKind::Operator { .. } | PrincipalKind::Executor { .. } => None,
        }
    }
    /// Whether this principal may see what agent `agent` asked for (approvals, questions,
    /// plans): an agent only its own, an operator everything, an executor nothing; others get
    /// the same `404` as a missing id.
    pub fn sees(&self, agent: &str) -> bool {
        match &self.kind {
            PrincipalKind::Agent { agent_id } => agent_id == agent,
            PrincipalKind::Operator { .. } => true,
            PrincipalKind::Executor { .. } => false,
        }
    }
    /// The roles of an operator (`None` for agents and executors).
    pub fn roles(&self) -> Option<&[String]> {
        match &self.kind {
            PrincipalKind::Operator { roles } => Some(roles),
            PrincipalKind::Agent { .. } | PrincipalKind::Executor { .. } => None,
        }
    }
    /// This principal presenting a token for a call of `tool` on `server` (issue 14 §6):
    /// an agent as itself, an executor with what it executes; `None` for an operator.
    pub fn presenter<'a>(
        &'a self,
        tool: &'a str,
        server: Option<&'a str>,
    ) -> Option<Presenter<'a>> {
        match &self.kind {
            PrincipalKind::Agent { agent_id } => Some(Presenter::Agent(agent_id)),
            PrincipalKind::Executor {
                agents,
                servers,
                tools,
            } => Some(Presenter::Executor {
                name: &self.name,
                agents,
                servers: servers.as_deref(),
                tools: tools.as_deref(),
                tool,
                server,
            }),
            PrincipalKind::Operator { .. } => None,
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
            // Unreachable (an executor's key is refused before any cancel route): an agent
            // canceller bound to no agent id may withdraw nothing.
            PrincipalKind::Executor { .. } => Canceller::Agent {
                name: &self.name,
                agent: "",
            },
        }
    }
}
