//! Redeeming: an agent — or an executor of the call's server or tool (issue 14 §6) — redeems
//! an approval token for the exact call it was minted for (`POST /v1/tokens/redeem`, bound to
//! the agent, the `call_hash` and the device; once), and
//! operators list and revoke grants (`GET /v1/grants`, `DELETE /v1/grants/{id}`). Minting is
//! the store's; routes are mounted by [`crate::router`](mod@crate::router).

use crate::approvals::{page_link, page_query};
use crate::auth::Redeemer;
use crate::body::Body;
use crate::calls::call_hash;
use crate::error::ApiError;
use crate::extract::{ListGrants, Operator, RevokeGrants, parse_body, read_body};
use crate::state::{AppState, now_ms};
use crate::telemetry;
use assent_api::tokens::{GrantList, RedeemRequest, Redeemed};
use assent_store::RedeemError;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use tracing::Instrument;

/// The API error of a refused redemption: `401 TOKEN_INVALID`, `403` (another agent's),
/// `403 NOT_EXECUTOR` (an executor's for a call it does not execute),
/// `409 TOKEN_USED`, `410 TOKEN_EXPIRED`, `403 DEVICE_MISMATCH`, `403 TOKEN_MISMATCH`,
/// `409 PLAN_STOPPED` (the call's plan was stopped since), `409 SETTLEMENT_UNSEALED` (the
/// approval's terms or settlement, or the grant that let its call through or that grant's
/// source call, were changed in the database behind the gateway's back), `409
/// RULES_TIGHTENED` (the rules in force, changed since the call was held, ask more of it),
/// `409 TOOL_UNDER_REVIEW` (the call's MCP tool's changed definition awaits review), `409
/// SESSION_CANCELLED` (the call's session is over, or its cancellation under way), `503`.
fn redeem_error(e: RedeemError) -> ApiError {
    match e {
        RedeemError::Invalid => {
            ApiError::new(StatusCode::UNAUTHORIZED, "TOKEN_INVALID", e.to_string())
        }
        RedeemError::WrongAgent => ApiError::forbidden(e.to_string()),
        RedeemError::NotExecutor { .. } => ApiError::new(
            StatusCode::FORBIDDEN,
            assent_api::error::NOT_EXECUTOR,
            e.to_string(),
        ),
        RedeemError::Used => ApiError::new(StatusCode::CONFLICT, "TOKEN_USED", e.to_string()),
        RedeemError::Expired => ApiError::new(StatusCode::GONE, "TOKEN_EXPIRED", e.to_string()),
        RedeemError::DeviceMismatch => {
            ApiError::new(StatusCode::FORBIDDEN, "DEVICE_MISMATCH", e.to_string())
        }
        RedeemError::Mismatch { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, "TOKEN_MISMATCH", e.to_string())
        }
        RedeemError::PlanStopped { .. } => {
            let code = assent_api::error::PLAN_STOPPED;
            ApiError::new(StatusCode::CONFLICT, code, e.to_string())
        }
        RedeemError::Unsealed => {
            let code = assent_api::error::SETTLEMENT_UNSEALED;
            ApiError::new(StatusCode::CONFLICT, code, e.to_string())
        }
        RedeemError::SessionCancelled { .. } => {
            let code = assent_api::error::SESSION_CANCELLED;
            ApiError::new(StatusCode::CONFLICT, code, e.to_string())
        }
        RedeemError::ToolUnderReview { .. } => {
            let code = assent_api::error::TOOL_UNDER_REVIEW;
            ApiError::new(StatusCode::CONFLICT, code, e.to_string())
        }
        RedeemError::RulesTightened(_) => {
            let code = assent_api::error::RULES_TIGHTENED;
            ApiError::new(StatusCode::CONFLICT, code, e.to_string())
        }
        RedeemError::Store(e) => ApiError::unavailable(e),
    }
}

/// `POST /v1/tokens/redeem` (the agent, or an executor: [`Redeemer`]): `{"token", "tool",
/// "server"?, "arguments", "device_id"?}` (strict JSON) → `{"call_hash", "approval_id",
/// "token_id", "agent"}` when the token was minted for exactly this call (and device), to
/// this agent or, for an executor, to one of its `agents` for a call on what it executes,
/// and is unused and unexpired (an executor never redeems a derived call's token, `result.`,
/// `delegate.`, `mplp.`, unless its `tools` name it). Every refusal the store decides (the
/// token, its binding, the presenter) is audited `token.refused`; a malformed body or key is
/// refused before (`400`, `401`, `403`), unaudited.
#[utoipa::path(post, path = "/v1/tokens/redeem", tag = "redeem",
    request_body = assent_api::tokens::RedeemRequest,
    responses((status = 200, description = "Redeemed: the call may run", body = assent_api::tokens::Redeemed)),
    security(("agent_key" = []), ("executor_key" = [])))]
pub(crate) async fn redeem(
    State(st): State<AppState>,
    Redeemer(p): Redeemer,
    req: Request,
) -> Result<Body<Redeemed>, ApiError> {
    let bytes = read_body(req, &st).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "request body is empty; expected a JSON object",
        ));
    }
    let b: RedeemRequest = parse_body(&bytes)?;
    // Held to the rules of every id before it reaches the audit log (found by review).
    crate::calls::check_id("device_id", &b.device_id)?;
    // Attack (found by review): a tool name of hundreds of kilobytes, which no gated call can
    // have, was recorded on the redemption's span before anything looked at it.
    check_redeemed_tool(&b.tool)?;
    crate::calls::check_id("server", &b.server)?;
    let arguments = assent_core::canonical::as_hashed(&b.arguments);
    let hash = call_hash(b.tool.clone(), b.server.clone(), b.arguments)?;
    let span = telemetry::step_span(telemetry::Step::Redeem);
    telemetry::record(&span, "assent.call_hash", &hash);
    telemetry::record(&span, "assent.tool", &b.tool);
    let (h2, tool, server, token, device) = (hash.clone(), b.tool, b.server, b.token, b.device_id);
    // The signature is checked here, on this request's worker: the store's one writer, which
    // every agent's writes wait behind, only reads and writes rows (issue 13 §4).
    let verified = st.store.verify_token(&token, now_ms());
    let people = st.clone();
    let c = st
        .store_task(move |s| {
            // The presenter as the principals in force now have it, inside the writer a reload
            // swaps them in (found by review: a redemption authenticated before a reload removed
            // the key, or narrowed the executor, redeemed after `config.reloaded`).
            let live = people.live();
            let now = crate::decide::standing(&live, &p)?;
            // Whose plans stop whose tokens: the agent files' declared local delegates.
            let d = live.registry.delegations();
            Some(match now.presenter(&tool, server.as_deref()) {
                Some(by) => s.redeem_verified(verified, by, &h2, device.as_deref(), now_ms(), d),
                None => Err(RedeemError::WrongAgent),
            })
        })
        .instrument(span.clone())
        .await?
        .ok_or_else(ApiError::unauthenticated)?
        .map_err(redeem_error);
    let result = c.as_ref().map_or_else(|e| e.code, |_| "redeemed");
    st.metrics.redemption(result);
    telemetry::record(&span, "assent.outcome", &result.to_ascii_lowercase());
    let c = c?;
    telemetry::record(&span, "assent.approval_id", &c.aid);
    Ok(Body(Redeemed {
        call_hash: hash,
        approval_id: c.aid,
        token_id: c.jti,
        agent: c.sub,
        arguments,
    }))
}

/// `400` unless `tool` could name a gated call: held to the rules of a tool name
/// ([`crate::calls::check_name`]) once a derived call's prefix (`result.`, `delegate.`,
/// `mplp.`) is set aside.
fn check_redeemed_tool(tool: &str) -> Result<(), ApiError> {
    let base = assent_core::redeem::DERIVED_PREFIXES
        .iter()
        .find_map(|p| tool.strip_prefix(p))
        .unwrap_or(tool);
    crate::calls::check_name("tool", base)
}

/// The `limit` of `GET /v1/grants` when none is given: the most a page holds, so that a
/// client written before the listing was paged (it ignores `Link`) still sees up to 1,000
/// active grants — a grant's row is small (found by review: a default of 100 hid grants an
/// operator meant to revoke from such a client).
pub const GRANTS_DEFAULT_LIMIT: u32 = 1_000;

/// `GET /v1/grants[?all=true&limit=N&before=CURSOR]` (operators): active grants — not
/// revoked, not expired, and holding their seal (a grant that covers no call is not listed as
/// active) — or all, with revoked, expired and unsealed ones; newest first, one page at a time
/// (`limit` 1 to 1,000, default [`GRANTS_DEFAULT_LIMIT`]; while more may follow, the answer
/// has `Link: </v1/grants?all=B&limit=N&before=CURSOR>; rel="next"`; a page may come back
/// short, even empty, with a next one). Read beside the writer. `400` naming the parameter
/// for an unknown one, `all` not `true`/`false`, `limit` out of range or a `before` not as
/// given.
#[utoipa::path(get, path = "/v1/grants", tag = "redeem",
    params(("all" = Option<bool>, Query, description = "Also revoked and expired grants"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "At most this many (default 1000)"),
           ("before" = Option<String>, Query, description = "The opaque cursor of the next page, from the previous answer's `Link` header (`rel=\"next\"`)")),
    responses((status = 200, description = "OK", body = assent_api::tokens::GrantList,
        headers(("Link" = String, description = "`</v1/grants?all=B&limit=N&before=CURSOR>; rel=\"next\"` while more may follow; absent on the last page")))),
    security(("operator_key" = [])))]
pub(crate) async fn list_grants(
    State(st): State<AppState>,
    _op: Operator<ListGrants>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    crate::extract::only_keys(&q, &["all", "limit", "before"])?;
    let all = match q.get("all").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("all must be true or false")),
    };
    let (limit, before) = page_query(&q, GRANTS_DEFAULT_LIMIT)?;
    let (grants, next) = st
        .store_call_apart(move |s| s.list_grants(all, now_ms(), limit, before))
        .await?;
    let mut resp = Body(GrantList { grants }).into_response();
    if let Some(next) = next {
        let link = page_link(&format!("/v1/grants?all={all}&limit={limit}"), next)?;
        resp.headers_mut().insert(header::LINK, link);
    }
    Ok(resp)
}

/// `DELETE /v1/grants/{id}` (operators): revokes a grant (`204`; `404` when unknown or
/// revoked already).
#[utoipa::path(delete, path = "/v1/grants/{id}", tag = "redeem",
    params(("id" = String, Path, description = "The item's id")),
    responses((status = 204, description = "Revoked")),
    security(("operator_key" = [])))]
pub(crate) async fn revoke_grant(
    State(st): State<AppState>,
    op: Operator<RevokeGrants>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let name = op.name().to_string();
    if st
        .store_call(move |s| s.revoke_grant(&id, &name, now_ms()))
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("no active grant with this id"))
    }
}
