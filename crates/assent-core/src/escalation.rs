//! Escalation (issue 10 §5 `on_timeout`, issue 14 §3 escalation chains): the steps that widen
//! who may decide a pending approval while it waits, and when each happens for one approval
//! ([`schedule`]). Pure: the store applies a [`Schedule`]; governance files are parsed into an
//! [`Escalation`] by `policy::governance`.
//!
//! - An `escalation` chain step has `after_seconds`, counted from when the approval was
//!   raised; the approval's first wait ends at the first step, and after the last step the
//!   approvers have the approval's timeout before the default decision applies.
//! - An `on_timeout` is one step at the end of the first wait (the approval's timeout), then
//!   `after_seconds` more (`last_wait_seconds`).

use crate::approval::millis;
use serde::{Deserialize, Serialize};

/// The escalation of an approval: steps that widen who may decide while it waits, then the
/// default decision.
///
/// Also the wire form (`escalation` of an approval and of a verdict), so it accepts unknown
/// keys: a client must read the approval of a newer gateway; governance files are read
/// strictly by their own raw form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Escalation {
    /// The steps; their order does not matter ([`schedule`] sorts them by time).
    pub steps: Vec<EscalationStep>,
    /// How long, in seconds, the approvers have after the last step before the default
    /// decision applies; `None`: the approval's own timeout. An `on_timeout` sets it (its
    /// `after_seconds`); an `escalation` chain leaves it `None`.
    #[serde(default)]
    pub last_wait_seconds: Option<u64>,
}

/// One step of an [`Escalation`]: when it happens and the roles that join the approvers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EscalationStep {
    /// Seconds after the approval was raised (an `escalation` chain's `after`); `None`: when
    /// the approval's first wait (its timeout) ends (an `on_timeout` step).
    #[serde(default)]
    pub after_seconds: Option<u64>,
    /// Operator roles added to the approvers (and to the quorum groups that allow them:
    /// [`crate::quorum::QuorumGroup::escalation`]).
    pub approvers: Vec<String>,
}

impl Escalation {
    /// Every role its steps add, in step order, once each.
    pub fn roles(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.steps.iter().flat_map(|s| &s.approvers) {
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
        out
    }

    /// The escalation of several covering rules together: all their steps (steps due at the
    /// same moment are merged by [`schedule`]), and the shortest `last_wait_seconds` any of
    /// them sets.
    pub fn merge(&mut self, other: &Escalation) {
        self.steps.extend(other.steps.iter().cloned());
        self.last_wait_seconds = match (self.last_wait_seconds, other.last_wait_seconds) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// When one approval's escalation steps happen and when its default decision applies, in Unix
/// milliseconds. Stored with the approval when it is raised, so a later policy change does not
/// move the deadlines an approval announced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// The steps in time order, each at a distinct moment.
    pub steps: Vec<ScheduledStep>,
    /// When the default decision applies (after the last step).
    pub deadline: i64,
    /// The approvers who may decide from the start, before any step added roles: recorded by
    /// the store when the call is held (the stored approvers are widened by each step taken,
    /// and a step that names a first role again leaves no trace there). `None` in schedules
    /// stored before it was recorded, and in [`schedule`]'s own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_approvers: Option<Vec<String>>,
}

/// One step of a [`Schedule`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledStep {
    /// Unix milliseconds.
    pub at: i64,
    /// Roles that join the approvers at `at`.
    pub approvers: Vec<String>,
}

/// The schedule of `e` for an approval raised at `raised_at` (Unix ms) whose first wait is
/// `wait_ms` (its timeout, AAEP extensions included): each step at `raised_at` plus its
/// `after_seconds` (an `on_timeout` step at `raised_at + wait_ms`), steps due at the same moment
/// merged (roles in order, once), and the deadline `last_wait_seconds` (else `wait_ms`) after
/// the last step. Saturating arithmetic: no overflow for any input. `None` without steps.
pub fn schedule(e: &Escalation, raised_at: i64, wait_ms: i64) -> Option<Schedule> {
    let mut timed: Vec<(i64, &[String])> = e
        .steps
        .iter()
        .map(|s| {
            let offset = s.after_seconds.map_or(wait_ms, millis);
            (raised_at.saturating_add(offset), s.approvers.as_slice())
        })
        .collect();
    timed.sort_by_key(|(at, _)| *at);
    let mut steps: Vec<ScheduledStep> = Vec::new();
    for (at, roles) in timed {
        if steps.last().is_none_or(|l| l.at != at) {
            steps.push(ScheduledStep {
                at,
                approvers: Vec::new(),
            });
        }
        let last = steps.last_mut().expect("pushed above");
        for r in roles {
            if !last.approvers.contains(r) {
                last.approvers.push(r.clone());
            }
        }
    }
    let last_at = steps.last()?.at;
    let last_wait = e.last_wait_seconds.map_or(wait_ms, millis);
    Some(Schedule::new(steps, last_at.saturating_add(last_wait)))
}

impl Schedule {
    /// A schedule of `steps` and `deadline` that records no first approvers.
    pub fn new(steps: Vec<ScheduledStep>, deadline: i64) -> Self {
        Schedule {
            steps,
            deadline,
            first_approvers: None,
        }
    }

    /// When the approval next changes after `done` steps (Unix ms): the next step, or the
    /// deadline once every step is done.
    pub fn next(&self, done: usize) -> i64 {
        self.steps.get(done).map_or(self.deadline, |s| s.at)
    }

    /// How many steps are due at `now` (Unix ms): those whose time has come.
    pub fn due(&self, now: i64) -> usize {
        self.steps.iter().take_while(|s| s.at <= now).count()
    }

    /// The roles the first `done` steps added, in order, once each.
    pub fn added(&self, done: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.steps.iter().take(done) {
            for r in &s.approvers {
                if !out.contains(r) {
                    out.push(r.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(after: Option<u64>, roles: &[&str]) -> EscalationStep {
        EscalationStep {
            after_seconds: after,
            approvers: roles.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn a_chain_counts_from_the_raise_and_the_last_step_gets_the_timeout() {
        let e = Escalation {
            steps: vec![step(Some(1800), &["cfo"]), step(Some(600), &["lead"])],
            last_wait_seconds: None,
        };
        let s = schedule(&e, 1_000, 300_000).unwrap();
        assert_eq!(s.steps[0].at, 1_000 + 600_000);
        assert_eq!(s.steps[0].approvers, vec!["lead"]);
        assert_eq!(s.steps[1].at, 1_000 + 1_800_000);
        assert_eq!(s.deadline, 1_000 + 1_800_000 + 300_000);
        assert_eq!(s.next(0), 601_000);
        assert_eq!(s.next(2), s.deadline);
        assert_eq!(s.due(601_000), 1);
        assert_eq!(s.due(600_999), 0);
        assert_eq!(s.added(2), vec!["lead", "cfo"]);
    }

    #[test]
    fn an_on_timeout_step_is_at_the_first_wait_and_merges_with_its_peers() {
        let mut e = Escalation {
            steps: vec![step(None, &["lead"])],
            last_wait_seconds: Some(100),
        };
        e.merge(&Escalation {
            steps: vec![step(None, &["cfo", "lead"])],
            last_wait_seconds: Some(50),
        });
        let s = schedule(&e, 0, 30_000).unwrap();
        assert_eq!(s.steps.len(), 1);
        assert_eq!(s.steps[0].approvers, vec!["lead", "cfo"]);
        assert_eq!(s.deadline, 30_000 + 50_000);
    }

    #[test]
    fn huge_offsets_saturate_instead_of_wrapping() {
        let e = Escalation {
            steps: vec![step(Some(u64::MAX), &["a"])],
            last_wait_seconds: Some(u64::MAX),
        };
        let s = schedule(&e, i64::MAX - 5, i64::MAX).unwrap();
        assert_eq!(s.deadline, i64::MAX);
        assert!(
            schedule(
                &Escalation {
                    steps: vec![],
                    last_wait_seconds: None
                },
                0,
                1
            )
            .is_none()
        );
    }
}
