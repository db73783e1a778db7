//! What happened, as typed values for the wire-format renderer: the AAEP events
//! ([`AaepEvent`]) and the MPLP Confirm trace events ([`MplpEvent`]) a state change reports,
//! borrowing the store's records, and the [`Envelopes`] trait the store is opened with. The
//! store writes the rendered JSON in the transaction of the state change (`emit.rs`: to
//! `aaep_events` and to the audit chain), so an event is never sent for something
//! that did not happen and a restart loses none. Building the JSON (AAEP chapter 3 envelopes,
//! MPLP `common/events.schema.json`) is not here: it is the edge's, `assent-server`'s
//! `envelopes` module.

use crate::aaep::Clarification;
use crate::record::ApprovalRecord;
use serde_json::Value;

/// An AAEP event the store emits (AAEP chapters 4–6), with the records it reports on.
#[derive(Debug, Clone, Copy)]
pub enum AaepEvent<'a> {
    /// `aaep:agent.awaiting.confirmation` for a freshly held, pending approval and its new
    /// `rpl_…` reply token (AAEP §4.4.1, §6).
    AwaitingConfirmation {
        /// The pending approval, as just stored.
        approval: &'a ApprovalRecord,
        /// Its single-use reply token.
        reply_token: &'a str,
    },
    /// `aaep:agent.progress.updated`: the pending approval was escalated at `at` (Unix ms) to
    /// its `on_timeout.escalate_to` roles; `approval` carries the new approvers and deadline.
    Escalated {
        /// The approval after escalation.
        approval: &'a ApprovalRecord,
        /// Unix milliseconds.
        at: i64,
    },
    /// `aaep:agent.progress.updated`: a vote was counted on a pending approval that needs a
    /// quorum (issue 14 §1) and the quorum is not met yet (when it is, [`Self::Resolution`]).
    VoteCounted {
        /// The approval with the vote recorded.
        approval: &'a ApprovalRecord,
        /// The principal who voted.
        by: &'a str,
        /// Their vote.
        decision: assent_core::approval::DecisionKind,
        /// Unix milliseconds.
        at: i64,
    },
    /// `aaep:agent.state.changed`: how a confirmation was resolved (AAEP §6.7.2, §6.1); with
    /// `courtesy_for` (a late reply's token) a courtesy notice to one subscription.
    Resolution {
        /// The approval as resolved.
        approval: &'a ApprovalRecord,
        /// Unix milliseconds.
        at: i64,
        /// The reply token of a late reply this notice answers.
        courtesy_for: Option<&'a str>,
    },
    /// `aaep:agent.progress.updated` with `percent` (50 or 90) of a confirmation's time
    /// elapsed (AAEP §6.4.3).
    Countdown {
        /// The pending approval.
        approval: &'a ApprovalRecord,
        /// Share of the announced wait that has passed.
        percent: u8,
        /// Unix milliseconds.
        at: i64,
    },
    /// `aaep:agent.session.cancelled` (AAEP §6.8): `cancelled` pending confirmations of
    /// `agent`'s `session` were withdrawn, by an operator or by the agent itself.
    SessionCancelled {
        /// The agent.
        agent: &'a str,
        /// Its session id as the agent gave it.
        session: &'a str,
        /// An operator cancelled (else the agent).
        by_operator: bool,
        /// How many pending approvals were cancelled.
        cancelled: usize,
        /// Unix milliseconds.
        at: i64,
    },
    /// `aaep:agent.awaiting.clarification` for a new question (AAEP §4.4.2, §6.5).
    AwaitingClarification {
        /// The pending question.
        clarification: &'a Clarification,
    },
    /// `aaep:agent.state.changed` after a clarification was answered, expired or withdrawn.
    ClarificationResolved {
        /// The question as resolved.
        clarification: &'a Clarification,
        /// Unix milliseconds.
        at: i64,
    },
}

impl AaepEvent<'_> {
    /// Whether the event is critical (a confirmation or clarification request; AAEP §5.5.4):
    /// never filtered or rate-limited. Stored in `aaep_events.critical`.
    pub fn is_critical(&self) -> bool {
        matches!(
            self,
            AaepEvent::AwaitingConfirmation { .. } | AaepEvent::AwaitingClarification { .. }
        )
    }
}

/// What an MPLP Confirm trace event (`confirm.*`) reports.
#[derive(Debug, Clone, Copy)]
pub enum ConfirmEvent<'a> {
    /// `confirm.requested`: the approval was held.
    Requested {
        /// The approval id.
        confirm_id: &'a str,
        /// MPLP `target_type` (`plan`, `other`, …).
        target_type: &'a str,
        /// The target shown (a plan step's id for a tool call of that step).
        target_id: &'a str,
        /// The requesting agent.
        requested_by_role: &'a str,
    },
    /// `confirm.<status>`: the approval was decided, expired or cancelled.
    Decided {
        /// The approval id.
        confirm_id: &'a str,
        /// UUID v4 of the decision row.
        decision_id: &'a str,
        /// MPLP Confirm status (`approved`, `rejected`, `cancelled`, …).
        status: &'a str,
        /// Who decided (`grant:<id>`, a principal, `system:expiry`).
        decided_by_role: &'a str,
        /// The decision's reason.
        reason: Option<&'a str>,
    },
}

/// An MPLP trace event of a Confirm (`common/events.schema.json`), linked to its trace and,
/// when the call named them, its MPLP plan and step (seed 000 §4.2).
#[derive(Debug, Clone, Copy)]
pub struct MplpEvent<'a> {
    /// What happened.
    pub confirm: ConfirmEvent<'a>,
    /// The approval's trace id.
    pub trace_id: &'a str,
    /// Unix milliseconds.
    pub at: i64,
    /// The MPLP plan the call named.
    pub plan_id: Option<&'a str>,
    /// The MPLP plan step the call named.
    pub step_id: Option<&'a str>,
}

impl MplpEvent<'_> {
    /// The dotted `event_type`, also the audit record's `kind`: `confirm.requested` or
    /// `confirm.<status>`.
    pub fn event_type(&self) -> String {
        match self.confirm {
            ConfirmEvent::Requested { .. } => "confirm.requested".to_string(),
            ConfirmEvent::Decided { status, .. } => format!("confirm.{status}"),
        }
    }
}

/// Renders the events the store writes into their wire JSON. The store is opened with one
/// ([`crate::Store::open`]); `assent-server`'s `WireEnvelopes` is the implementation.
pub trait Envelopes: Send + Sync {
    /// The AAEP event with its chapter 3 envelope (`event_id`, `type`, …; no
    /// `sequence_number`, which is the row's `seq` added when read).
    fn aaep(&self, e: &AaepEvent<'_>) -> Value;
    /// The MPLP trace event (UUID v4 `event_id`, `event_type`, `source`, `timestamp`,
    /// `trace_id`, `data`).
    fn mplp(&self, e: &MplpEvent<'_>) -> Value;
}
