//! The wire contract of assent's `/v1` HTTP API, shared by the gateway (`assent-server`, which
//! serialises these types), the CLI (`assent`) and the MCP proxy and hub (`assent-mcp`), which
//! call the gateway through the one [`Client`].
//!
//! - Every `/v1` request body, response body and the error body `{"code", "message"}` as serde
//!   types, grouped by the approval's life cycle: [`gate`] (submit a tool call, delegation or
//!   tool result; the allow / deny / pending answer), [`approvals`] (the approval, its lists,
//!   decisions, cancellations, the user's in-client decision), [`tokens`] (the seed 002 Token,
//!   redemption, grants), [`clarify`], [`plans`], [`policies`] (replaying a candidate policy), [`tools`] (pins and reviews), [`audit`]
//!   (checkpoints, dead letters), [`identity`] (`whoami`, `healthz`) and [`error`] (the error
//!   body and its stable codes). The shared vocabulary (risk tiers, statuses, reasons) is in
//!   [`kit`]. Each type serialises to exactly the JSON the gateway writes: the same keys, `null`
//!   where the gateway writes `null`, a key left out where the gateway leaves it out; times are
//!   RFC 3339 strings unless a field says Unix milliseconds.
//! - [`Client`]: one async (reqwest) client with a typed method per route and a raw-JSON escape
//!   hatch ([`Client::raw`]); failures are a [`ClientError`] that tells "unreachable" from "the
//!   gateway said no" (with its parsed error body) from "an unexpected body".
//!
//! Not here: the AAEP envelopes (`/aaep/v1/…`, SSE), MPLP documents (plans, Confirms, learning
//! samples and pipeline events are `serde_json::Value`), webhook bodies and the dashboard
//! (`/ui`); nor any policy, storage or server code — this crate depends only on
//! `assent-core` (pure, no I/O: the vocabulary it re-exports), serde, serde_json, reqwest and
//! thiserror, and on `tracing` and OpenTelemetry's API for W3C Trace Context ([`trace`]).

pub mod approvals;
pub mod audit;
pub mod clarify;
mod client;
pub mod error;
pub mod gate;
pub mod identity;
pub mod insights;
pub mod plans;
pub mod policies;
pub mod reload;
mod routes;
pub mod tokens;
pub mod tools;
pub mod trace;

mod bearer;
pub mod kit;
pub use bearer::bearer_credential;
pub mod schema;

pub use client::{
    Client, ClientError, MIN_POLL_INTERVAL, NO_CA_ROOTS, RawResponse, direct_to_loopback,
    http_builder, loopback_host, no_ca_roots, no_ca_roots_error, pace_poll,
};
pub use error::ApiErrorBody;
pub use kit::{
    ApprovalStatus, ApprovalTerms, DecisionKind, DefaultDecision, Reason, RiskLevel, RiskTier,
};
pub use reqwest::Method;
