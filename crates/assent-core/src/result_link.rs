//! When a forwarded call's reported result may be linked to an approval (`POST
//! /v1/tool-results`, issue 4 "Results"): only when that approval cleared the very call
//! reported. The approval was approved (by an operator, a grant, the agent's user, or its
//! approving default on timeout: a token was minted), its token was redeemed (the MCP proxy
//! and the hub forward a held or granted call only after redeeming its token, and report its
//! result, or that it did not run or got no answer, only then), and the reported call is the
//! one the token was redeemed for (the approved call, or the operator's edit of it). A pure
//! check of what the store read in its write transaction; found by review: a report was linked
//! to any of the agent's approvals, pending or denied, its token never redeemed, its call
//! another, so the audit showed a result of a call that never ran, and a fake early result made
//! the hub's later `not_run` / `no_answer` report fail `409 RESULT_RECORDED`.
//! [`admit`] decides whether a report is recorded beside the reports before it: who made each
//! ([`Reporter`]: the hub of the gateway's own process, or the agent's key alone) and whether it
//! said the call ran.

use crate::ApprovalStatus;

/// What the store knows of the approval a report names.
#[derive(Debug, Clone, Copy)]
pub struct Linked<'a> {
    /// Its status.
    pub status: ApprovalStatus,
    /// Whether a token was minted for it.
    pub minted: bool,
    /// The call hash its token was redeemed for (from its `token.redeemed` record); `None`
    /// when it was never redeemed.
    pub redeemed_for: Option<&'a str>,
}

/// Why a report may not be linked to the approval it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unlinked {
    /// The approval was not approved (pending, denied, cancelled, or expired with no token).
    #[error(
        "the approval is {}, not approved: a result is recorded only for a call its approval cleared to run",
        .0.as_str()
    )]
    NotApproved(ApprovalStatus),
    /// Approved, but its token was never redeemed: its call was not cleared to run.
    #[error(
        "the approval's token was never redeemed, so its call was not cleared to run: no result of it is recorded"
    )]
    NotRedeemed,
    /// The reported call is not the one the approval's token was redeemed for.
    #[error(
        "the reported call (call_hash {reported}) is not the one the approval cleared (call_hash {cleared})"
    )]
    OtherCall {
        /// The hash of the call the token was redeemed for.
        cleared: String,
        /// The hash of the call reported.
        reported: String,
    },
}

/// Whether a report of the call with hash `reported` may be linked to the approval `a`: `Ok`
/// only when it was approved (a token minted), its token redeemed, and for exactly that call.
/// An outcome (`not_run`, `no_answer`) is held to the same rule: it is reported of a cleared
/// call, one whose token was redeemed.
pub fn check(a: &Linked<'_>, reported: &str) -> Result<(), Unlinked> {
    let approved = match a.status {
        ApprovalStatus::Approved => true,
        // Its approving default applied on timeout: a token was minted.
        ApprovalStatus::Expired => a.minted,
        ApprovalStatus::Pending | ApprovalStatus::Rejected | ApprovalStatus::Cancelled => false,
    };
    if !approved {
        return Err(Unlinked::NotApproved(a.status));
    }
    let Some(cleared) = a.redeemed_for else {
        return Err(Unlinked::NotRedeemed);
    };
    if cleared != reported {
        return Err(Unlinked::OtherCall {
            cleared: cleared.to_string(),
            reported: reported.to_string(),
        });
    }
    Ok(())
}

/// The most reports (results and outcomes) one reporter may make of one approval's call: 8. A
/// held call runs once (its token is single-use), so it has one result and perhaps an outcome
/// from whoever reported first; the rest is room for retries. Counted per [`Reporter`] (found by
/// review: an agent filling the call's reports had the hub's true report refused).
pub const MAX_REPORTS: usize = 8;

/// Who made a report (`reported_by` of its `call.result` record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reporter {
    /// The MCP hub inside the gateway's own process (it sent the process's hub token): it
    /// forwarded the call, so its word is the call's.
    Hub,
    /// The agent's key alone: its own relay (`assent mcp`), a REST agent, or a hub in another
    /// process. The gateway cannot tell them apart.
    Agent,
}

impl Reporter {
    /// `"hub"` or `"agent"`, as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hub => "hub",
            Self::Agent => "agent",
        }
    }

    /// The reporter recorded as `s` (`"hub"`, `"agent"`); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hub" => Some(Self::Hub),
            "agent" => Some(Self::Agent),
            _ => None,
        }
    }
}

/// A report recorded before, of the same approval's call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prior {
    /// Who made it; `None` for a record that names none or none known (made before reports
    /// named their reporter, or unreadable): it counts as either's (fail closed).
    pub reporter: Option<Reporter>,
    /// Whether it was an outcome (`not_run`, `no_answer`) rather than a result.
    pub outcome: bool,
}

/// Why a report is not recorded beside the reports before it ([`admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// An outcome of a call whose result its reporter, or the hub, reported already.
    Recorded,
    /// Its reporter made [`MAX_REPORTS`] reports of this call already.
    TooMany,
}

/// Whether a report by `by` (an outcome when `outcome`) is recorded after the reports `prior`
/// of the same approval's call. Refused [`Refused::TooMany`] when `by` made [`MAX_REPORTS`]
/// already; [`Refused::Recorded`] for an outcome when a result stands that `by` must not
/// contradict: for the agent any result, for the hub only its own (a result the agent reported
/// is its word, which the hub that forwarded the call may answer with `no_answer`; found by
/// review: a made-up result the agent sent first had the hub's true `no_answer` refused). A
/// result is always recorded within the bound: the call ran, whatever was said before. A prior
/// report of no known reporter counts as both's.
pub fn admit(prior: &[Prior], by: Reporter, outcome: bool) -> Result<(), Refused> {
    let theirs = |p: &&Prior| p.reporter.is_none_or(|r| r == by);
    if prior.iter().filter(theirs).count() >= MAX_REPORTS {
        return Err(Refused::TooMany);
    }
    let binding = |p: &&Prior| match by {
        Reporter::Agent => true,
        Reporter::Hub => theirs(p),
    };
    if outcome && prior.iter().filter(binding).any(|p| !p.outcome) {
        return Err(Refused::Recorded);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ApprovalStatus::*;

    fn linked(status: ApprovalStatus, minted: bool, redeemed_for: Option<&str>) -> Linked<'_> {
        Linked {
            status,
            minted,
            redeemed_for,
        }
    }

    #[test]
    fn only_an_approved_call_redeemed_for_the_reported_call_links() {
        assert_eq!(check(&linked(Approved, true, Some("h")), "h"), Ok(()));
        // Approved by its default on timeout.
        assert_eq!(check(&linked(Expired, true, Some("h")), "h"), Ok(()));
    }

    #[test]
    fn an_approval_that_was_not_approved_links_nothing() {
        for s in [Pending, Rejected, Cancelled, Expired] {
            assert_eq!(
                check(&linked(s, false, None), "h"),
                Err(Unlinked::NotApproved(s)),
                "{s:?}"
            );
        }
        // Even with a redemption the store should never hold: the status decides first.
        assert_eq!(
            check(&linked(Rejected, true, Some("h")), "h"),
            Err(Unlinked::NotApproved(Rejected))
        );
    }

    #[test]
    fn an_approved_call_whose_token_was_not_redeemed_links_nothing() {
        assert_eq!(
            check(&linked(Approved, true, None), "h"),
            Err(Unlinked::NotRedeemed)
        );
        assert_eq!(
            check(&linked(Expired, true, None), "h"),
            Err(Unlinked::NotRedeemed)
        );
    }

    #[test]
    fn a_report_of_another_call_than_the_one_cleared_links_nothing() {
        let e = check(&linked(Approved, true, Some("edited")), "original").unwrap_err();
        assert_eq!(
            e,
            Unlinked::OtherCall {
                cleared: "edited".into(),
                reported: "original".into()
            }
        );
        let said = e.to_string();
        assert!(
            said.contains("edited") && said.contains("original"),
            "{said}"
        );
    }

    fn prior(reporter: Option<Reporter>, outcome: bool) -> Prior {
        Prior { reporter, outcome }
    }

    #[test]
    fn an_agents_outcome_never_contradicts_a_result() {
        for by in [Some(Reporter::Agent), Some(Reporter::Hub), None] {
            let results = [prior(by, false)];
            assert_eq!(
                admit(&results, Reporter::Agent, true),
                Err(Refused::Recorded),
                "{by:?}"
            );
            assert_eq!(admit(&results, Reporter::Agent, false), Ok(()), "{by:?}");
        }
    }

    #[test]
    fn the_hubs_outcome_is_refused_only_after_a_result_the_hub_may_have_made() {
        // The agent's made-up result does not silence the hub that forwarded the call.
        let agents = [prior(Some(Reporter::Agent), false)];
        assert_eq!(admit(&agents, Reporter::Hub, true), Ok(()));
        for by in [Some(Reporter::Hub), None] {
            assert_eq!(
                admit(&[prior(by, false)], Reporter::Hub, true),
                Err(Refused::Recorded),
                "{by:?}"
            );
        }
        // Outcomes before do not refuse one another.
        let outcomes = [prior(None, true), prior(Some(Reporter::Hub), true)];
        assert_eq!(admit(&outcomes, Reporter::Hub, true), Ok(()));
    }

    #[test]
    fn each_reporter_has_its_own_bound_and_unknown_reports_count_for_both() {
        let agents = vec![prior(Some(Reporter::Agent), false); MAX_REPORTS];
        assert_eq!(
            admit(&agents, Reporter::Agent, false),
            Err(Refused::TooMany)
        );
        assert_eq!(admit(&agents, Reporter::Hub, false), Ok(()));
        let mut under = vec![prior(Some(Reporter::Agent), true); MAX_REPORTS - 1];
        assert_eq!(admit(&under, Reporter::Agent, true), Ok(()));
        under.push(prior(None, true));
        assert_eq!(admit(&under, Reporter::Agent, true), Err(Refused::TooMany));
        let unknown = vec![prior(None, true); MAX_REPORTS];
        assert_eq!(admit(&unknown, Reporter::Hub, false), Err(Refused::TooMany));
    }

    #[test]
    fn a_reporter_reads_back_as_recorded() {
        for r in [Reporter::Hub, Reporter::Agent] {
            assert_eq!(Reporter::parse(r.as_str()), Some(r));
        }
        assert_eq!(Reporter::parse("Hub"), None);
    }
}
