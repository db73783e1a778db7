//! The redeem step of an approval's life: the single-use token an approval (or a grant)
//! mints, as the seed 002 Token document; redeeming it for the exact call
//! (`POST /v1/tokens/redeem`); and the grants a scope wider than `once` creates
//! (`GET /v1/grants`, `DELETE /v1/grants/{id}`). Not the approval itself
//! ([`crate::approvals`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Seed 002 Token (`docs/schemas/approval-token.schema.json`) of a minted token: the
/// `approval_token` of gate answers and approvals. Not the signed string itself (`token`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalToken {
    /// Token id, UUID v4.
    pub token_id: String,
    /// The approval that minted it.
    pub approval_id: String,
    /// The `call_hash` it binds (the operator's edit when the arguments were changed).
    pub tool_call_hash: String,
    /// When it can no longer be redeemed, RFC 3339.
    pub expires_at: String,
    /// Always `true`: a token is redeemed once.
    pub single_use: bool,
    /// The approval's scope: `once`, `session`, a duration such as `15m`, or `workspace`.
    pub scope: String,
    /// The client device id it is bound to, `null` when the agent sent none.
    pub issued_to_client_device_id: Option<String>,
}

/// `POST /v1/tokens/redeem` (an agent key): redeems a single-use token for the exact call it
/// binds, just before the call runs. Errors: `401 TOKEN_INVALID`, `403 FORBIDDEN` (another
/// agent's), `409 TOKEN_USED`, `410 TOKEN_EXPIRED`, `403 DEVICE_MISMATCH`,
/// `403 TOKEN_MISMATCH` (another call), `409 PLAN_STOPPED` (its plan stopped since),
/// `409 SETTLEMENT_UNSEALED` (its approval's settlement changed behind the gateway's back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"token": "eyJ...", "tool": "send_payment", "server": "bank", "arguments": {"amount": 120, "to": "acme"}}))]
pub struct RedeemRequest {
    /// The signed token string (`token` of an approval or a grant's `allow`).
    pub token: String,
    /// The tool about to run (for a held result, `result.TOOL`).
    pub tool: String,
    /// Its MCP server alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The arguments it will run with (the operator's edit when `arguments_changed`).
    pub arguments: Value,
    /// The client device id, when the token is bound to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
}

/// The answer to a redemption (HTTP 200): the call may run now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Redeemed {
    /// SHA-256 (lowercase hex) of the redeemed call's canonical JSON.
    pub call_hash: String,
    /// The approval whose token it was.
    pub approval_id: String,
    /// The token's id.
    pub token_id: String,
    /// The agent the token was issued to (its `sub`): whose call this is. Tool names are
    /// each agent's own, so an executor serving several agents learns here whose `tool` it
    /// runs.
    pub agent: String,
    /// The call's arguments as its `call_hash` reads them (RFC 8785 canonical JSON parsed
    /// back: `-0` is `0`, `1.0` and `1e2` the integers `1` and `100`): what the executor runs,
    /// spelt as the approver saw them, whatever spelling the agent sent. Found by review: an
    /// executor ran the agent's `{"amount": 1e2}` — a float to a Python or Go tool — for an
    /// approved `{"amount": 100}`. (Absent from gateways before it: `null` then.)
    #[serde(default)]
    pub arguments: Value,
}

/// `GET /v1/grants[?all=true]` (operator): active grants, or with `all=true` revoked and
/// expired ones too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GrantList {
    /// The grants.
    pub grants: Vec<Grant>,
}

/// One grant (seed 002 "Approve with scope"): `assent-core`'s own type, the row the store
/// reads back and the body this lists are one type. Its times are Unix milliseconds in Rust
/// and RFC 3339 text on the wire.
pub use assent_core::grant::Grant;
