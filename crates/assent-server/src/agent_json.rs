//! The body an agent sends for itself, as one extractor ([`AgentJson`]): the agent key
//! ([`Agent`]), the strict JSON body ([`ApiJson`]) and the check that the body's `agent` is the
//! key's own, written once for the agent routes that name their agent (tool calls, delegations,
//! tool results, plans, confirms, clarification questions, tool checks). Kit: it imports only
//! [`crate::extract`], [`crate::error`], [`crate::state`] and `assent-api`; no handler module.

use crate::error::ApiError;
use crate::extract::{Agent, ApiJson, Refusal};
use crate::state::AppState;
use axum::extract::{FromRequest, FromRequestParts, Request};
use serde::de::DeserializeOwned;

/// Whether `token` is this process's MCP hub token ([`assent_api::tools::hub_token`]; compared
/// in constant time): the body comes from the hub of this very gateway, not from the agent's
/// key alone (tool checks pin for every agent, tool results are the hub's word). Any other
/// token, or none, is the agent's own: a hub in another process holds another token.
pub(crate) fn from_own_hub(token: Option<&str>) -> bool {
    use subtle::ConstantTimeEq as _;
    match (token, assent_api::tools::hub_token()) {
        (Some(t), Some(own)) => bool::from(t.as_bytes().ct_eq(own.as_bytes())),
        _ => false,
    }
}

/// A request body that names the agent it is for (its `"agent"` field).
pub(crate) trait NamesAgent {
    /// The agent the body names.
    fn agent(&self) -> &str;
}

macro_rules! names_agent {
    ($($t:ty),* $(,)?) => {$(
        impl NamesAgent for $t {
            fn agent(&self) -> &str {
                &self.agent
            }
        }
    )*};
}

names_agent!(
    assent_api::gate::ToolCallRequest,
    assent_api::gate::DelegationRequest,
    assent_api::gate::ToolResultRequest,
    assent_api::clarify::AskRequest,
    assent_api::tools::ToolCheckRequest,
    assent_api::plans::CreatePlanRequest,
    assent_api::plans::UpdatePlanRequest,
    assent_api::plans::SubmitPlanRequest,
    assent_api::plans::ConfirmRequest,
);

/// An agent's JSON body `T` for itself: the key is an agent's ([`Agent`]: `401`, or `403` with
/// `R::MESSAGE` for an operator key), the body parses ([`ApiJson`]'s rejections), and the body's
/// `agent` is the key's. Otherwise `403 FORBIDDEN`: "this key acts for agent `A`, not `B`"
/// ([`Agent::acts_for`]), or with `ONE_REFUSAL` the route's `R::MESSAGE` ([`Agent::is`]).
pub(crate) struct AgentJson<R, T, const ONE_REFUSAL: bool = false>(
    pub(crate) Agent<R>,
    pub(crate) T,
);

/// [`AgentJson`] on a route that refuses a body naming another agent with its one `403`
/// message, `R::MESSAGE` ([`Agent::is`]).
pub(crate) type AgentJsonOneRefusal<R, T> = AgentJson<R, T, true>;

impl<R, T, const ONE_REFUSAL: bool> FromRequest<AppState> for AgentJson<R, T, ONE_REFUSAL>
where
    R: Refusal + Send,
    T: DeserializeOwned + NamesAgent,
{
    type Rejection = ApiError;
    async fn from_request(req: Request, st: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let agent = Agent::<R>::from_request_parts(&mut parts, st).await?;
        let ApiJson(b) = ApiJson::<T>::from_request(Request::from_parts(parts, body), st).await?;
        if ONE_REFUSAL {
            agent.is(b.agent())?;
        } else {
            agent.acts_for(b.agent())?;
        }
        Ok(AgentJson(agent, b))
    }
}
