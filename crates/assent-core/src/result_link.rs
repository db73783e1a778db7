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
}
