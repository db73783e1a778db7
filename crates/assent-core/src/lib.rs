//! assent-core: the domain of the assent approval gateway, with no I/O.
//!
//! It turns a proposed tool call into a [`ToolCall`] and a [`CanonicalCall`] (RFC 8785
//! canonical form and SHA-256 `call_hash`, [`canonical`]), resolves the agent's Agent Format
//! declaration together with governance policies ([`policy`]), evaluates `args_match`
//! conditions ([`condition`]), renders approval messages ([`template`]) and decides a
//! [`Verdict`] ([`gatekeeper`], [`verdict`]) at a [`RiskTier`] ([`risk`]). It also holds the
//! approval state machine ([`approval`]), the HMAC approval token format ([`token`]) and the
//! strict reading of JSON text that every entry point applies ([`json`]: no duplicate keys,
//! no number a double would change).
//!
//! It is not a store, a server or a wire format: it knows nothing of tokio, SQL or HTTP. Time
//! and randomness are passed in by the caller. Policy files are parsed from strings; finding
//! and reading them is the caller's job.

#![warn(missing_docs)]

pub mod agf;
pub mod approval;
pub mod arg_path;
pub mod canonical;
pub mod checkpoint;
pub mod clarification;
pub mod condition;
pub mod decision;
pub mod duties;
pub mod edit;
pub mod escalation;
pub mod gatekeeper;
pub mod grant;
pub mod grant_standing;
pub mod join;
pub mod json;
pub mod passkey;
pub mod pin;
pub mod policy;
pub mod quorum;
pub mod receipt;
pub mod redact;
pub mod redeem;
pub mod replay;
pub mod result_link;
pub mod risk;
pub mod rules_now;
pub mod session_risk;
pub mod stamp;
pub mod suggest;
pub mod summary;
pub mod template;
pub mod token;
pub mod transitions;
pub mod triggers;
pub mod verdict;
pub mod yaml;

pub use approval::{ApprovalStatus, DecisionKind, DefaultDecision};
pub use canonical::{CanonicalCall, CanonicalError, ToolCall};
pub use gatekeeper::{
    delegation_call, evaluate, evaluate_delegation, evaluate_in, evaluate_target, evaluate_with,
};
pub use policy::Registry;
pub use risk::RiskTier;
pub use verdict::{ApprovalTerms, Reason, Verdict, VerdictKind};
