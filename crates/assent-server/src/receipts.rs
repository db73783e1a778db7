//! `GET /v1/approvals/{id}/receipt` (issue 14 §5): the signed receipt of one approval, for any
//! operator or the agent that asked (another agent gets the same `404` as a missing id).
//! `assent receipt verify FILE` checks it offline.

use crate::body::Body;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::state::{AppState, now_ms};
use assent_core::receipt::Receipt;
use assent_store::ReceiptOf;
use axum::extract::{Path, State};
use axum::http::StatusCode;

/// The receipt of approval `id`, signed now with the gateway's audit key. `404` when there is
/// no such approval (or it is another agent's), `409 APPROVAL_DAMAGED` (with `damaged`) when
/// its row does not hold its seal or cannot be read (nothing is signed), `503` when the store
/// fails.
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
    let missing = || ApiError::not_found(format!("no approval `{id}`"));
    match r.ok_or_else(missing)? {
        // A held result's receipt signs its call, preview and all: its agent gets none until
        // an operator released it (found by review: the receipt showed what the hold withheld).
        ReceiptOf::Signed(r)
            if p.agent_id().is_some()
                && p.sees(&r.agent)
                && r.call.tool.starts_with("result.")
                && r.status != assent_core::ApprovalStatus::Approved =>
        {
            Err(ApiError::forbidden(format!(
                "approval `{id}` holds a tool result for an operator: its receipt is the \
                 operators' until the result is released"
            )))
        }
        ReceiptOf::Signed(r) if p.sees(&r.agent) => Ok(Body(*r)),
        ReceiptOf::Damaged { agent, damaged } if p.sees(&agent) => {
            tracing::error!(approval = %id, ?damaged, "no receipt: the stored approval is damaged");
            let mut message = format!(
                "approval `{id}` is damaged ({}): no receipt is signed for a row the gateway \
                 cannot vouch for",
                damaged.join(", ")
            );
            if damaged
                .iter()
                .any(|d| d == "seal" || d == "settlement_seal")
            {
                message.push_str(
                    " (an approval held or settled before schema migration 0035 carries no \
                     such seal; its records are in the audit chain)",
                );
            }
            Err(
                ApiError::new(StatusCode::CONFLICT, "APPROVAL_DAMAGED", message)
                    .with_damaged(damaged),
            )
        }
        _ => Err(missing()),
    }
}
