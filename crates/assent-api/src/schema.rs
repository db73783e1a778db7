//! The `assent-core` wire types whose OpenAPI schemas (utoipa `ToSchema`) the document names,
//! under one path: core derives `ToSchema` behind its `openapi` feature, which this crate turns
//! on, so each schema is the type the gateway really serialises (times that core keeps as Unix
//! milliseconds are described as the RFC 3339 strings the wire carries). That the document
//! describes what the gateway answers is checked on a live gateway: `assent-server`'s
//! `tests/it/openapi.rs` validates every answer of a whole approval life cycle against it, and
//! Schemathesis (`tests/e2e/test_openapi.py`) checks the answers to the cases it generates.

pub use assent_core::approval::{ApprovalStatus, DecisionKind, DefaultDecision, Settlement};
pub use assent_core::canonical::ToolCall;
pub use assent_core::checkpoint::Checkpoint as SignedCheckpoint;
pub use assent_core::clarification::{Clarification, ClarificationStatus};
pub use assent_core::escalation::{Escalation, EscalationStep};
pub use assent_core::grant::Grant;
pub use assent_core::pin::{PinState, ReviewStatus, ToolPin, ToolReview, ToolState};
pub use assent_core::quorum::{DenyRule, GroupTally, Quorum, QuorumGroup, Tally};
pub use assent_core::receipt::{Receipt, ReceiptDecision, ReceiptVote};
pub use assent_core::risk::RiskTier;
pub use assent_core::verdict::{ApprovalTerms, Reason};
