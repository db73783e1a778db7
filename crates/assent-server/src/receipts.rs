//! `GET /v1/approvals/{id}/receipt` (issue 14 §5): the signed receipt of one approval, for any
//! operator or the agent that asked (another agent gets the same `404` as a missing id).
//! `assent receipt verify FILE` checks it offline.

use crate::body::Body;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::state::{AppState, now_ms};
use assent_core::receipt::Receipt;
use axum::extract::{Path, State};

/// The receipt of approval `id`, signed now with the gateway's audit key. `404` when there is
/// no such approval (or it is another agent's), `503` when the store fails.
#[utoipa::path(get, path = "/v1/approvals/{id}/receipt", tag = "decide",
    params(("id" = String, Path, description = "The item's id")),
    responses((status = 200, description = "The signed receipt", body = assent_api::schema::Receipt)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn receipt(
    State(st): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Body<Receipt>, ApiError> {
    let key = id.clone();
    let r = st.store_call(move |s| s.receipt(&key, now_ms())).await?;
    r.filter(|r| p.sees(&r.agent))
        .map(Body)
        .ok_or_else(|| ApiError::not_found(format!("no approval `{id}`")))
}
