//! The approval state machine (MPLP Confirm status, seed 002 decisions) and the
//! default-decision safety rule (AAEP §6.4.1).

use crate::quorum::{DenyRule, Quorum};
use crate::risk::RiskTier;
use serde::{Deserialize, Serialize};

/// Status of an approval. `pending` is the only non-terminal state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// An operator approved; a token was minted.
    Approved,
    /// An operator denied.
    Rejected,
    /// Timed out; the default decision was applied.
    Expired,
    /// Withdrawn before a decision.
    Cancelled,
}

impl ApprovalStatus {
    /// The lowercase name used in the store and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
    /// Parses [`as_str`](Self::as_str) output; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "approved" => Self::Approved,
            "rejected" => Self::Rejected,
            "expired" => Self::Expired,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

/// An operator's decision (seed 002 "Operator decision options": approve once / deny).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    /// Approve once: mints a single-use token.
    Approve,
    /// Deny, with an optional reason for the agent.
    Deny,
}

impl DecisionKind {
    /// `"approve"` or `"deny"`, as stored and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Deny => "deny",
        }
    }
    /// The inverse of [`DecisionKind::as_str`]; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approve" => Some(Self::Approve),
            "deny" => Some(Self::Deny),
            _ => None,
        }
    }
}

/// How an approval left `pending` (`decisions.decision`; an approval's `decisions[]` on the
/// wire, MPLP Confirm §2.4): an approve or deny (an operator, a grant or the agent's user), the
/// expiry sweep's `expire` (the default decision says what applied), or a `cancel`.
/// Serialised, and shown, as the lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Settlement {
    /// Approved (an operator, a grant, or the agent's user).
    Approve,
    /// Denied.
    Deny,
    /// Timed out; the default decision says what applied.
    Expire,
    /// Withdrawn.
    Cancel,
}

impl Settlement {
    /// `"approve"`, `"deny"`, `"expire"` or `"cancel"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Deny => "deny",
            Self::Expire => "expire",
            Self::Cancel => "cancel",
        }
    }
    /// Parses [`as_str`](Self::as_str) output; `None` for anything else (never a fallback).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "approve" => Self::Approve,
            "deny" => Self::Deny,
            "expire" => Self::Expire,
            "cancel" => Self::Cancel,
            _ => return None,
        })
    }
    /// The settlement an approval [`Event`] stores.
    pub fn of(e: Event) -> Self {
        match e {
            Event::Decide(DecisionKind::Approve) => Self::Approve,
            Event::Decide(DecisionKind::Deny) => Self::Deny,
            Event::Expire(_) => Self::Expire,
            Event::Cancel => Self::Cancel,
        }
    }
}

impl std::fmt::Display for Settlement {
    /// [`Settlement::as_str`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The scope of an approval (seed 002 "Approve with scope"). Anything wider than `once` is
/// stored as a *grant* that lets later matching calls through without a prompt, each with its
/// own single-use token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GrantScope {
    /// This call only (the default).
    #[default]
    Once,
    /// Matching calls of the same agent and session.
    Session,
    /// Matching calls of the same agent for this many seconds.
    Duration(u64),
    /// Matching calls of the same agent until revoked (discouraged for R3/R4).
    Workspace,
}

impl GrantScope {
    /// Parses `once`, `session`, `workspace`, or a duration: a whole number followed by `s`,
    /// `m`, `h` or `d` (`15m`, `2h`), at most 366 days. `Err` says what is accepted.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "unknown scope `{s}` (expected once, session, workspace or a duration such as 15m, 2h, 1d)"
            )
        };
        Ok(match s {
            "once" => Self::Once,
            "session" => Self::Session,
            "workspace" => Self::Workspace,
            _ => {
                let unit = s.chars().last().ok_or_else(bad)?;
                let n: u64 = s[..s.len() - unit.len_utf8()].parse().map_err(|_| bad())?;
                let mult = match unit {
                    's' => 1,
                    'm' => 60,
                    'h' => 3600,
                    'd' => 86_400,
                    _ => return Err(bad()),
                };
                let secs = n.checked_mul(mult).ok_or_else(bad)?;
                if secs == 0 || secs > 366 * 86_400 {
                    return Err(format!(
                        "scope `{s}`: a duration must be between 1 second and 366 days"
                    ));
                }
                Self::Duration(secs)
            }
        })
    }

    /// The wire form: `once`, `session`, `workspace`, or the duration in the largest whole unit
    /// (`900` s → `15m`).
    pub fn to_wire(self) -> String {
        match self {
            Self::Once => "once".into(),
            Self::Session => "session".into(),
            Self::Workspace => "workspace".into(),
            Self::Duration(s) => {
                for (u, m) in [('d', 86_400), ('h', 3600), ('m', 60)] {
                    if s % m == 0 {
                        return format!("{}{u}", s / m);
                    }
                }
                format!("{s}s")
            }
        }
    }

    /// Whether it creates a grant (anything but `once`).
    pub fn is_grant(self) -> bool {
        self != Self::Once
    }
}

/// Serialises as the wire form ([`GrantScope::to_wire`]): `"once"`, `"session"`, `"15m"`,
/// `"workspace"`.
impl Serialize for GrantScope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_wire())
    }
}

/// What happens when an approval times out (AAEP `default_decision`; `reject` when omitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DefaultDecision {
    /// Approve at expiry (never for irreversible actions).
    Approve,
    /// Reject at expiry.
    #[default]
    Reject,
}

impl DefaultDecision {
    /// `"approve"` or `"reject"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }
    /// Parses [`as_str`](Self::as_str) output (`"approve"`, `"reject"`); `None` for anything
    /// else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }
}

/// Whether an operator holding `roles` may decide (or cancel) an approval whose approver roles
/// are `approvers`: when it names none (any operator), or the operator holds one of them
/// (seed 002 "authorise: role allowed by the policy"). Cancelling is a way of saying no, so
/// the same rule applies to it (issue 10 §7).
pub fn may_decide(approvers: &[String], roles: &[String]) -> bool {
    approvers.is_empty() || approvers.iter().any(|a| roles.contains(a))
}

/// Whether an operator may cancel an approval needing `quorum` (the quorum in force;
/// `None`: one decision settles it). Cancelling is a way of saying no, so it may not say
/// alone what a deny may not: under `deny: quorum` one operator's cancel would settle what
/// only a quorum of deny votes may, so it is refused (`Err` says why; they vote deny
/// instead). The agent withdrawing its own request is not an operator's no and is not
/// asked.
pub fn operator_may_cancel(quorum: Option<&Quorum>) -> Result<(), &'static str> {
    match quorum {
        Some(q) if q.deny == DenyRule::Quorum => Err(
            "a deny of this approval needs a quorum (deny: quorum), so one operator may not cancel it: vote deny instead",
        ),
        _ => Ok(()),
    }
}

/// Whether a decision at `now` (Unix ms) comes too late for an approval whose default
/// decision applies at `deadline` (its announced deadline, escalation steps included:
/// [`crate::decision::announced_deadline`]): from the deadline on the default applies, not a
/// person's decision, even before the expiry sweep has run.
pub fn past_deadline(now: i64, deadline: i64) -> bool {
    now >= deadline
}

/// Who withdraws a request (an approval, a session's pending requests, a plan): the agent
/// itself, which may withdraw only its own, or an operator, who may withdraw only what their
/// roles let them decide ([`may_decide`]: cancelling is a way of saying no).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canceller<'a> {
    /// The agent that asked, through its own key.
    Agent {
        /// The principal's name (recorded as the actor).
        name: &'a str,
        /// The agent id the key is bound to.
        agent: &'a str,
    },
    /// An operator.
    Operator {
        /// The principal's name (recorded as the actor).
        name: &'a str,
        /// Their roles.
        roles: &'a [String],
    },
}

impl<'a> Canceller<'a> {
    /// The principal's name, recorded as the actor.
    pub fn name(&self) -> &'a str {
        match self {
            Self::Agent { name, .. } | Self::Operator { name, .. } => name,
        }
    }

    /// The agent, when the agent itself cancels (what it may touch is limited to its own).
    pub fn agent(&self) -> Option<&'a str> {
        match self {
            Self::Agent { agent, .. } => Some(agent),
            Self::Operator { .. } => None,
        }
    }

    /// The operator's roles (`None` for the agent itself).
    pub fn roles(&self) -> Option<&'a [String]> {
        match self {
            Self::Operator { roles, .. } => Some(roles),
            Self::Agent { .. } => None,
        }
    }
}

/// Events that move an approval out of `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// An authorised operator decided.
    Decide(DecisionKind),
    /// `expires_at` passed; the default decision is applied.
    Expire(DefaultDecision),
    /// The requester or an operator withdrew the request.
    Cancel,
}

/// The transition was refused because the approval is no longer pending (`ALREADY_DECIDED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("approval is already {}", .0.as_str())]
pub struct AlreadyDecided(pub ApprovalStatus);

/// Applies `event` to `status`. Only `pending` moves; every other status is final, so the first
/// valid event wins and later ones get [`AlreadyDecided`].
pub fn transition(status: ApprovalStatus, event: Event) -> Result<ApprovalStatus, AlreadyDecided> {
    if status != ApprovalStatus::Pending {
        return Err(AlreadyDecided(status));
    }
    Ok(match event {
        Event::Decide(DecisionKind::Approve) => ApprovalStatus::Approved,
        Event::Decide(DecisionKind::Deny) => ApprovalStatus::Rejected,
        Event::Expire(_) => ApprovalStatus::Expired,
        Event::Cancel => ApprovalStatus::Cancelled,
    })
}

/// Whether an approval token is minted after `event`: on approval, and on expiry only when the
/// applied default is `approve` (seed 002 "minted only on approval").
pub fn mints_token(event: Event) -> bool {
    matches!(
        event,
        Event::Decide(DecisionKind::Approve) | Event::Expire(DefaultDecision::Approve)
    )
}

/// `seconds` in milliseconds, saturating at `i64::MAX` instead of wrapping (issue 10 §10): for
/// callers that turn a policy's `timeout_seconds` or `on_timeout.after_seconds` (bounded at
/// load to [`crate::policy::MAX_WAIT_SECONDS`]) into a deadline. Add it to a time with
/// `saturating_add`.
pub fn millis(seconds: u64) -> i64 {
    i64::try_from(seconds)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .unwrap_or(i64::MAX)
}

/// The load-time warning for a rule whose `approvers` need a quorum and which says
/// `default_decision: approve` (itself, or another rule covering the same tool): that default
/// never applies to a call needing the quorum ([`default_at_timeout`]).
pub const QUORUM_DEFAULT_NOTE: &str = "a call whose approvers need a quorum is never approved by its timeout, so `default_decision: approve` does not apply to it: its default on timeout is reject (a quorum met by nobody is no approval)";

/// The AAEP §6.4.1 check for one rule, run at load time.
///
/// `Err` when an irreversible action would default to `approve` (seed 001: no irreversible
/// action without explicit human consent — stricter than AAEP's "SHOULD" for low risk);
/// `Ok(Some(warning))` for a rule that needs a `quorum` (its `approvers` ask for more than
/// one approval, or a quorum to deny: [`QUORUM_DEFAULT_NOTE`], the default is not applied)
/// or a reversible high-risk action that defaults to `approve`.
pub fn check_default_decision(
    irreversible: bool,
    quorum: Option<&Quorum>,
    tier: RiskTier,
    default: DefaultDecision,
) -> Result<Option<String>, String> {
    if default != DefaultDecision::Approve {
        return Ok(None);
    }
    if irreversible {
        return Err("an irreversible action must not have `default_decision: approve` (AAEP §6.4.1: no irreversible action without explicit human consent)".into());
    }
    if quorum.is_some() {
        return Ok(Some(QUORUM_DEFAULT_NOTE.into()));
    }
    if tier.risk_level() == "high" {
        return Ok(Some(format!(
            "a {} (high-risk) action with `default_decision: approve` is discouraged (AAEP §6.4.1 SHOULD be reject)",
            tier.as_str()
        )));
    }
    Ok(None)
}

/// The default that is applied at expiry: `reject` whenever the action is irreversible, even if
/// a composed rule set said otherwise (or, found by review, a stored default edited behind the
/// gateway's back: the expiry sweep applies this too), else the configured default.
pub fn effective_default(irreversible: bool, configured: DefaultDecision) -> DefaultDecision {
    if irreversible {
        DefaultDecision::Reject
    } else {
        configured
    }
}

/// The default that is applied when an approval times out (AAEP §6.4), from its terms: `reject`
/// whenever the action is irreversible ([`effective_default`]), needs a passkey-signed approval
/// (issue 14 §4: a timeout carries no passkey), or needs a `quorum` (issue 14 §1: several
/// distinct people must approve, and a timeout is nobody — found by review: an approving
/// default of another covering rule, or escalation steps ending in the default, approved a
/// `{count: 2, deny: quorum}` call with no vote counted); else the `configured` default.
/// The gatekeeper composes a verdict's default with it, the expiry sweep applies it to the
/// stored terms (so a row held before this rule, or by a differently composed verdict, is
/// still never approved by its timeout), and joining compares with it.
pub fn default_at_timeout(
    irreversible: bool,
    require_passkey: bool,
    quorum: Option<&Quorum>,
    configured: DefaultDecision,
) -> DefaultDecision {
    if require_passkey || quorum.is_some() {
        DefaultDecision::Reject
    } else {
        effective_default(irreversible, configured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ApprovalStatus::*;

    /// A stored settlement reads back as itself, as its wire text, and nothing else reads at
    /// all (no fallback: an unreadable decision row is named damaged by the store).
    #[test]
    fn settlements_round_trip_and_refuse_anything_else() {
        use Settlement::*;
        for s in [Approve, Deny, Expire, Cancel] {
            assert_eq!(Settlement::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(Settlement::parse("Approve"), None);
        assert_eq!(Settlement::parse(""), None);
        assert_eq!(
            Settlement::of(Event::Expire(DefaultDecision::Approve)),
            Expire
        );
        assert_eq!(Settlement::of(Event::Cancel), Cancel);
    }

    #[test]
    fn only_pending_moves_and_first_event_wins() {
        let approve = Event::Decide(DecisionKind::Approve);
        let deny = Event::Decide(DecisionKind::Deny);
        assert_eq!(transition(Pending, approve), Ok(Approved));
        assert_eq!(transition(Pending, deny), Ok(Rejected));
        assert_eq!(
            transition(Pending, Event::Expire(DefaultDecision::Approve)),
            Ok(Expired)
        );
        assert_eq!(transition(Pending, Event::Cancel), Ok(Cancelled));
        for s in [Approved, Rejected, Expired, Cancelled] {
            for e in [
                approve,
                deny,
                Event::Cancel,
                Event::Expire(DefaultDecision::Reject),
            ] {
                assert_eq!(transition(s, e), Err(AlreadyDecided(s)));
            }
            assert_eq!(ApprovalStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ApprovalStatus::parse("bogus"), None);
    }

    /// An operator's cancel is a no: under `deny: quorum` one operator may not say it alone.
    #[test]
    fn an_operator_may_not_cancel_alone_what_only_a_quorum_may_deny() {
        let q = |v: serde_json::Value| crate::quorum::parse_approvers(&v).unwrap().quorum;
        let by_quorum = q(serde_json::json!({"roles": ["ops"], "count": 2, "deny": "quorum"}));
        let any = q(serde_json::json!({"roles": ["ops"], "count": 2}));
        assert!(operator_may_cancel(by_quorum.as_ref()).is_err());
        assert_eq!(operator_may_cancel(any.as_ref()), Ok(()));
        assert_eq!(operator_may_cancel(None), Ok(()));
    }

    #[test]
    fn the_deadline_itself_is_too_late() {
        assert!(!past_deadline(999, 1_000));
        assert!(past_deadline(1_000, 1_000));
        assert!(past_deadline(i64::MAX, 1_000));
    }

    #[test]
    fn tokens_only_on_approval_or_approving_default() {
        assert!(mints_token(Event::Decide(DecisionKind::Approve)));
        assert!(mints_token(Event::Expire(DefaultDecision::Approve)));
        assert!(!mints_token(Event::Expire(DefaultDecision::Reject)));
        assert!(!mints_token(Event::Decide(DecisionKind::Deny)));
        assert!(!mints_token(Event::Cancel));
    }

    #[test]
    fn default_decision_rule() {
        use DefaultDecision::*;
        for t in [RiskTier::R0, RiskTier::R2, RiskTier::R4] {
            assert!(check_default_decision(true, None, t, Approve).is_err());
            assert_eq!(check_default_decision(true, None, t, Reject), Ok(None));
        }
        assert!(
            check_default_decision(false, None, RiskTier::R3, Approve)
                .unwrap()
                .is_some()
        );
        assert!(
            check_default_decision(false, None, RiskTier::R4, Approve)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            check_default_decision(false, None, RiskTier::R2, Approve),
            Ok(None)
        );
        assert_eq!(
            check_default_decision(false, None, RiskTier::R1, Approve),
            Ok(None)
        );
        assert_eq!(effective_default(true, Approve), Reject);
        assert_eq!(millis(604_800), 604_800_000);
        assert_eq!(millis(u64::MAX), i64::MAX);
        assert_eq!(millis(1 << 62), i64::MAX);
        assert_eq!(effective_default(false, Approve), Approve);
    }

    /// The attack: a quorum call (`{roles: [finance], count: 2, deny: quorum}`) that nobody
    /// voted on, or that one finance person denied (not enough alone), was approved at its
    /// timeout by an approving default. A quorum, a passkey or irreversibility make the
    /// timeout reject; a plain reversible call keeps its configured default.
    #[test]
    fn a_quorum_call_is_never_approved_by_its_timeout() {
        use DefaultDecision::*;
        let q = |v: serde_json::Value| crate::quorum::parse_approvers(&v).unwrap().quorum;
        let by_quorum = q(serde_json::json!({"roles": ["finance"], "count": 2, "deny": "quorum"}));
        let two = q(serde_json::json!({"count": 2}));
        for quorum in [&by_quorum, &two] {
            assert!(quorum.is_some());
            assert_eq!(
                default_at_timeout(false, false, quorum.as_ref(), Approve),
                Reject
            );
            assert_eq!(
                default_at_timeout(false, false, quorum.as_ref(), Reject),
                Reject
            );
            let w = check_default_decision(false, quorum.as_ref(), RiskTier::R1, Approve);
            assert_eq!(w, Ok(Some(QUORUM_DEFAULT_NOTE.to_string())));
        }
        assert_eq!(default_at_timeout(false, true, None, Approve), Reject);
        assert_eq!(default_at_timeout(true, false, None, Approve), Reject);
        assert_eq!(default_at_timeout(false, false, None, Approve), Approve);
        assert_eq!(default_at_timeout(false, false, None, Reject), Reject);
        assert_eq!(
            check_default_decision(false, two.as_ref(), RiskTier::R1, Reject),
            Ok(None)
        );
    }
}
