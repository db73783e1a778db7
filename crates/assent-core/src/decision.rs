//! The rules of deciding a held approval (seed 002 "Operator decision options", MPLP Confirm
//! §2.3): which options a decision may combine, which scope it may take on a given approval
//! (Confirm targets, irreversible actions, `workspace` on R3/R4), what MPLP status a settlement
//! has, who may decide after an escalation step, and the deadline it announces. Pure functions the store calls
//! inside its transaction; who may decide at all is [`crate::approval::may_decide`]. Not the
//! state machine itself ([`crate::approval::transition`]) nor any storage.

use crate::approval::{
    ApprovalStatus, DecisionKind, DefaultDecision, Event, GrantScope, mints_token,
};
use crate::escalation::Schedule;
use crate::risk::RiskTier;

/// Checks the options of one operator decision on their own: a decision kind is required; a
/// deny takes no scope, no `whole_tool` and no edited arguments; `whole_tool` widens a grant,
/// so it needs a scope other than `once`. `Ok` is the decision kind; `Err` says what is wrong
/// (the store's `DecideError::Invalid`, HTTP 422).
pub fn check_options(
    kind: Option<DecisionKind>,
    scope: GrantScope,
    edited: bool,
    whole_tool: bool,
) -> Result<DecisionKind, String> {
    let kind = kind.ok_or_else(|| "decision is required".to_string())?;
    if kind == DecisionKind::Deny && (scope.is_grant() || edited || whole_tool) {
        return Err("scope, whole_tool and arguments apply to approvals only".into());
    }
    if whole_tool && !scope.is_grant() {
        return Err("whole_tool widens a grant: give a scope other than once".into());
    }
    Ok(kind)
}

/// The held approval, as a decision's scope is measured against it.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// MPLP Confirm `target_type`: `other` for a tool call, else `plan`, `context`, ….
    pub target_type: &'a str,
    /// Whether a rule marked the action irreversible.
    pub irreversible: bool,
    /// The approval's risk tier.
    pub risk_tier: RiskTier,
}

/// Why a decision may not take the scope (or edit) it asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeRefusal {
    /// A Confirm on a plan, context, … is decided once, as submitted (the target type).
    #[error("a Confirm on a {0} is decided once, as submitted: no scope and no edits")]
    ConfirmTarget(String),
    /// An irreversible action is approved once (seed 001): no grant scope.
    #[error(
        "an irreversible action is approved once, with explicit consent each time (seed 001): no session, duration or workspace scope"
    )]
    Irreversible,
    /// `workspace`, or a duration longer than a `session` grant may last, on an R3/R4
    /// approval without the explicit confirmation flag (the tier and the scope as written).
    #[error("scope `{scope}` on a {tier} tool needs explicit confirmation")]
    WorkspaceNeedsConfirmation {
        /// The approval's risk tier.
        tier: RiskTier,
        /// The scope asked for, as written on the wire (`workspace`, `30d`).
        scope: String,
    },
}

/// Whether `scope` is discouraged for an approval of `tier`: `workspace` on R3 or R4, or a
/// duration longer than `session_max_ms` (the longest a `session` grant lives,
/// `session_grant_max_seconds`, in ms) there. Such a grant needs explicit confirmation and is
/// stored marked `discouraged`. Found by review: a `366d` grant, agent-bound like `workspace`
/// and as lasting, passed without the confirmation seed 002 asks for "always" on R3+.
pub fn workspace_discouraged(scope: GrantScope, tier: RiskTier, session_max_ms: i64) -> bool {
    let lasting = match scope {
        GrantScope::Workspace => true,
        GrantScope::Duration(s) => crate::approval::millis(s) > session_max_ms,
        _ => false,
    };
    lasting && tier >= RiskTier::R3
}

/// Checks the scope (and whether arguments were edited) a decision on `held` asks for, in this
/// order: a Confirm whose target is not a tool call takes scope `once` and no edit; an
/// irreversible action takes no grant scope; `workspace`, or a duration past `session_max_ms`,
/// on R3/R4 needs `confirm_workspace`. `Ok` says whether the scope is discouraged
/// ([`workspace_discouraged`]).
pub fn check_scope(
    held: &Held<'_>,
    scope: GrantScope,
    edited: bool,
    confirm_workspace: bool,
    session_max_ms: i64,
) -> Result<bool, ScopeRefusal> {
    if held.target_type != "other" && (scope != GrantScope::Once || edited) {
        return Err(ScopeRefusal::ConfirmTarget(held.target_type.to_string()));
    }
    if held.irreversible && scope.is_grant() {
        return Err(ScopeRefusal::Irreversible);
    }
    let discouraged = workspace_discouraged(scope, held.risk_tier, session_max_ms);
    if discouraged && !confirm_workspace {
        return Err(ScopeRefusal::WorkspaceNeedsConfirmation {
            tier: held.risk_tier,
            scope: scope.to_wire(),
        });
    }
    Ok(discouraged)
}

/// The MPLP Confirm status (`approved`, `rejected`, `cancelled`) of an approval that moved to
/// `next` by `event`: an expiry whose default approves counts as `approved`, any other expiry
/// as `rejected`.
pub fn confirm_status(next: ApprovalStatus, event: Event) -> &'static str {
    match next {
        ApprovalStatus::Approved => "approved",
        ApprovalStatus::Cancelled => "cancelled",
        ApprovalStatus::Expired if mints_token(event) => "approved",
        _ => "rejected",
    }
}

/// The approver roles after an `on_timeout` escalation (issue 10 §5): `approvers` with each of
/// `escalate_to` added once, in order. An approval that any operator could decide (no
/// approver roles) stays so.
pub fn escalated_approvers(approvers: &[String], escalate_to: &[String]) -> Vec<String> {
    let mut out = approvers.to_vec();
    if !out.is_empty() {
        for r in escalate_to {
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
    }
    out
}

/// The AAEP deadline (Unix ms) announced in `agent.awaiting.confirmation`'s `timeout_seconds`
/// (AAEP §6.1, §6.4; issue 10 §5, issue 14 §3): when the default decision really applies —
/// the escalation schedule's deadline when the approval has one, else `expires_at`.
pub fn announced_deadline(expires_at: i64, schedule: Option<&Schedule>) -> i64 {
    schedule.map_or(expires_at, |s| s.deadline)
}

/// The AAEP §6.4.3 countdown due at `now` (Unix ms) for a confirmation requested at
/// `requested_at` with announced `deadline`, given the `marks` already sent (bit 1: the 50 %
/// event, bit 2: the 90 % one). Only a wait longer than 60 s counts down; when both are due
/// only the later is sent. `Some((percent, marks after))`, or `None` when nothing is due.
///
/// Saturating: times no gateway writes (a row edited to `i64::MIN`) never overflow.
pub fn countdown_due(requested_at: i64, deadline: i64, marks: i64, now: i64) -> Option<(u8, i64)> {
    let span = deadline.saturating_sub(requested_at);
    let late = marks & 2 == 0 && now >= deadline.saturating_sub(span / 10);
    let half = marks & 1 == 0 && now >= requested_at.saturating_add(span / 2);
    if span <= 60_000 || !(late || half) {
        return None;
    }
    Some(if late {
        (90, marks | 3)
    } else {
        (50, marks | 1)
    })
}

/// The most restrictive stand-ins for unreadable stored values of an approval (issue 10 §8:
/// fail closed on stored data). A reader that cannot read a column records its name as
/// damaged and uses these, so a damaged approval never becomes easier to approve.
pub mod most_restrictive {
    use super::{ApprovalStatus, DefaultDecision, GrantScope, RiskTier};

    /// For an unreadable `risk_tier`: the highest tier.
    pub const RISK_TIER: RiskTier = RiskTier::R4;
    /// For an unreadable `default_decision` (or a decision's `default_applied`): `reject`.
    pub const DEFAULT_DECISION: DefaultDecision = DefaultDecision::Reject;
    /// For an unreadable `status`: `cancelled`, a final status nobody can move.
    pub const STATUS: ApprovalStatus = ApprovalStatus::Cancelled;
    /// For an unreadable decided `scope`: `once`, which creates no grant.
    pub const SCOPE: GrantScope = GrantScope::Once;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn options_need_a_kind_and_fit_it() {
        use DecisionKind::*;
        let (once, session) = (GrantScope::Once, GrantScope::Session);
        assert_eq!(
            check_options(None, once, false, false),
            Err("decision is required".into())
        );
        assert_eq!(check_options(Some(Approve), once, true, false), Ok(Approve));
        assert_eq!(
            check_options(Some(Approve), session, false, true),
            Ok(Approve)
        );
        assert_eq!(check_options(Some(Deny), once, false, false), Ok(Deny));
        for (scope, edited, whole) in [(session, false, false), (once, true, false)] {
            assert_eq!(
                check_options(Some(Deny), scope, edited, whole),
                Err("scope, whole_tool and arguments apply to approvals only".into())
            );
        }
        assert!(check_options(Some(Deny), session, false, true).is_err());
        assert_eq!(
            check_options(Some(Approve), once, false, true),
            Err("whole_tool widens a grant: give a scope other than once".into())
        );
    }

    #[test]
    fn scope_rules_in_order() {
        let call = |tier, irreversible| Held {
            target_type: "other",
            irreversible,
            risk_tier: tier,
        };
        let plan = Held {
            target_type: "plan",
            irreversible: false,
            risk_tier: RiskTier::R1,
        };
        let irreversible = call(RiskTier::R1, true);
        let r3 = call(RiskTier::R3, false);
        let r2 = call(RiskTier::R2, false);
        let confirm_target = || Err(ScopeRefusal::ConfirmTarget("plan".into()));
        const DAY_MS: i64 = 86_400_000;
        let needs = |tier, scope: &str| {
            Err(ScopeRefusal::WorkspaceNeedsConfirmation {
                tier,
                scope: scope.into(),
            })
        };
        // (held, scope, edited, confirm_workspace, expected)
        let cases = [
            (&plan, GrantScope::Session, false, false, confirm_target()),
            (&plan, GrantScope::Once, true, false, confirm_target()),
            (&plan, GrantScope::Once, false, false, Ok(false)),
            (
                &irreversible,
                GrantScope::Duration(60),
                false,
                false,
                Err(ScopeRefusal::Irreversible),
            ),
            (&irreversible, GrantScope::Once, true, false, Ok(false)),
            (
                &r3,
                GrantScope::Workspace,
                false,
                false,
                needs(RiskTier::R3, "workspace"),
            ),
            (&r3, GrantScope::Workspace, false, true, Ok(true)),
            (&r3, GrantScope::Session, false, false, Ok(false)),
            (&r2, GrantScope::Workspace, false, false, Ok(false)),
            // Attack (found by review): a year-long timed grant on R3 is as lasting as
            // `workspace` and needs the same confirmation; one a session could last does not.
            (
                &r3,
                GrantScope::Duration(366 * 86_400),
                false,
                false,
                needs(RiskTier::R3, "366d"),
            ),
            (
                &r3,
                GrantScope::Duration(86_401),
                false,
                false,
                needs(RiskTier::R3, "86401s"),
            ),
            (
                &r3,
                GrantScope::Duration(366 * 86_400),
                false,
                true,
                Ok(true),
            ),
            (&r3, GrantScope::Duration(86_400), false, false, Ok(false)),
            (
                &r2,
                GrantScope::Duration(366 * 86_400),
                false,
                false,
                Ok(false),
            ),
        ];
        for (i, (held, scope, edited, confirm, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                check_scope(held, scope, edited, confirm, DAY_MS),
                expected,
                "case {i}"
            );
        }
        assert!(workspace_discouraged(
            GrantScope::Workspace,
            RiskTier::R4,
            DAY_MS
        ));
        assert!(!workspace_discouraged(
            GrantScope::Session,
            RiskTier::R4,
            DAY_MS
        ));
        // The bound is the configured session maximum, not a fixed day.
        let hour = GrantScope::Duration(3_601);
        assert!(workspace_discouraged(hour, RiskTier::R4, 3_600_000));
        assert!(!workspace_discouraged(hour, RiskTier::R4, DAY_MS));
    }

    #[test]
    fn confirm_status_of_each_settlement() {
        use ApprovalStatus::*;
        let approve = Event::Decide(DecisionKind::Approve);
        assert_eq!(confirm_status(Approved, approve), "approved");
        assert_eq!(
            confirm_status(Rejected, Event::Decide(DecisionKind::Deny)),
            "rejected"
        );
        assert_eq!(confirm_status(Cancelled, Event::Cancel), "cancelled");
        assert_eq!(
            confirm_status(Expired, Event::Expire(DefaultDecision::Approve)),
            "approved"
        );
        assert_eq!(
            confirm_status(Expired, Event::Expire(DefaultDecision::Reject)),
            "rejected"
        );
    }

    #[test]
    fn escalation_adds_roles_once_and_keeps_any_operator() {
        assert_eq!(
            escalated_approvers(&s(&["finance"]), &s(&["ops", "finance", "ops"])),
            s(&["finance", "ops"])
        );
        assert!(escalated_approvers(&[], &s(&["ops"])).is_empty());
        assert_eq!(escalated_approvers(&s(&["a"]), &[]), s(&["a"]));
    }

    #[test]
    fn stand_ins_are_the_most_restrictive_values() {
        assert_eq!(most_restrictive::RISK_TIER, RiskTier::R4);
        assert!(RiskTier::R4 >= RiskTier::R3 && RiskTier::R4 > RiskTier::R0);
        assert_eq!(most_restrictive::DEFAULT_DECISION, DefaultDecision::Reject);
        assert_eq!(
            crate::approval::transition(most_restrictive::STATUS, Event::Cancel),
            Err(crate::approval::AlreadyDecided(ApprovalStatus::Cancelled))
        );
        assert!(!most_restrictive::SCOPE.is_grant());
    }

    #[test]
    fn the_announced_deadline_is_the_schedules() {
        let sched = Schedule {
            steps: vec![],
            deadline: 201_000,
            first_approvers: None,
        };
        assert_eq!(announced_deadline(101_000, Some(&sched)), 201_000);
        assert_eq!(announced_deadline(101_000, None), 101_000);
    }

    #[test]
    fn countdowns_at_half_and_ninety_percent_of_long_waits() {
        // 200 s wait from 1 s: half at 101 s, 90 % at 181 s.
        assert_eq!(countdown_due(1_000, 201_000, 0, 100_999), None);
        assert_eq!(countdown_due(1_000, 201_000, 0, 101_000), Some((50, 1)));
        assert_eq!(countdown_due(1_000, 201_000, 1, 180_999), None);
        assert_eq!(countdown_due(1_000, 201_000, 1, 181_000), Some((90, 3)));
        assert_eq!(countdown_due(1_000, 201_000, 0, 190_000), Some((90, 3)));
        assert_eq!(countdown_due(1_000, 201_000, 3, 200_000), None);
        // A wait of 60 s or less gets none.
        assert_eq!(countdown_due(0, 60_000, 0, 59_000), None);
        assert_eq!(countdown_due(0, 60_001, 0, 59_000), Some((90, 3)));
        // Times edited out of any range (the row's seal then refuses it) never overflow.
        for (from, to) in [(i64::MIN, i64::MAX), (i64::MAX, i64::MIN), (0, i64::MAX)] {
            let _ = countdown_due(from, to, 0, 0);
        }
    }
}
