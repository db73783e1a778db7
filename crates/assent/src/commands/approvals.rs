//! The approval commands an operator runs against the gateway: `pending` and `show` (the
//! card, or the API's JSON), `approve` (scope, whole-tool grant, edited arguments), `deny`
//! and `cancel` (one approval or a whole session). Each is one or two `/v1/approvals` calls
//! through `assent_api::Client` and a printed line; the card itself is `render::card`.

use crate::args::Remote;
use crate::remote::{connect, print_json, print_list};
use crate::render::{card, edited_arguments, for_stdout, inert};
use anyhow::{Result, anyhow, bail};
use assent_api::approvals::{Approval, BatchDecisionRequest, CancelRequest, DecisionRequest};
use assent_api::{ApprovalStatus, DecisionKind};

/// `assent pending`: every pending approval as a card and an empty line (`--json`: the API's
/// list as is).
pub(crate) async fn pending(r: &Remote, as_json: bool) -> Result<i32> {
    let list = connect(r)?
        .approvals(Some(ApprovalStatus::Pending), None)
        .await?;
    let empty = Some("no pending approvals");
    print_list(&list, &list.approvals, as_json, empty, |a| {
        for_stdout(&card(a)) + "\n"
    })
}

/// `assent show ID`: one approval's card (`--json`: the API's object).
pub(crate) async fn show(r: &Remote, id: &str, as_json: bool) -> Result<i32> {
    let a = connect(r)?.approval(id).await?;
    if as_json {
        print_json(&a)?;
    } else {
        print!("{}", for_stdout(&card(&a)));
    }
    Ok(0)
}

/// The line a decision prints: `ID STATUS`, the scope and grant id of a scoped approval, and
/// the edited arguments when the approver changed them, a quorum's progress while it is unmet.
fn decided_line(a: &Approval) -> String {
    let mut line = format!("{} {}", a.id, a.status.as_str());
    if let Some(s) = a.scope.as_deref().filter(|s| *s != "once") {
        line.push_str(&format!(
            " (scope {s}, grant {})",
            a.grant_id.as_deref().unwrap_or("")
        ));
    }
    if a.arguments_changed {
        line.push_str(&format!(" with arguments {}", edited_arguments(a)));
    }
    if let Some(v) = a
        .votes
        .as_ref()
        .filter(|_| a.status == ApprovalStatus::Pending)
    {
        line.push_str(&format!(" (vote counted: {})", v.approvals.describe()));
    }
    inert(&line)
}

/// Decides `ids` with `req`. One id: `POST /v1/approvals/{id}/decision`; several:
/// `POST /v1/approvals/decisions` (no edited arguments), each decided on its own, a failure
/// printed `assent: ID: CODE: message` on stderr. Exit 1 when any failed.
async fn decide(r: &Remote, ids: &[String], req: DecisionRequest) -> Result<i32> {
    let c = connect(r)?;
    if let [id] = ids {
        println!("{}", decided_line(&c.decide(id, &req).await?));
        return Ok(0);
    }
    let batch = BatchDecisionRequest {
        ids: ids.to_vec(),
        decision: req,
    };
    let mut failed = 0;
    for r in c.decide_batch(&batch).await?.results {
        match r.approval.filter(|_| r.ok) {
            Some(a) => println!("{}", decided_line(&a)),
            None => {
                failed += 1;
                // The gateway's message may quote what an agent sent: made inert.
                let line = format!(
                    "assent: {}: {}: {}",
                    r.id,
                    r.code.as_deref().unwrap_or(""),
                    r.message.as_deref().unwrap_or("")
                );
                eprintln!("{}", inert(&line));
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `assent approve IDS`: approves each with `scope` (`once`, `session`, `workspace` or a
/// duration), `whole_tool` and `yes_workspace`; `args` (strict JSON, one id only) approves an
/// edited call. Exit 1 when any approval failed.
pub(crate) async fn approve(
    r: &Remote,
    ids: &[String],
    reason: Option<String>,
    scope: String,
    whole_tool: bool,
    yes_workspace: bool,
    args: Option<String>,
) -> Result<i32> {
    let mut req = DecisionRequest {
        reason,
        scope: Some(scope),
        whole_tool,
        confirm_workspace: yes_workspace,
        ..DecisionRequest::new(DecisionKind::Approve)
    };
    if let Some(a) = args {
        if ids.len() != 1 {
            bail!("--args edits one call: give exactly one approval id");
        }
        req.arguments = Some(
            assent_core::json::parse_value(a.as_bytes())
                .map_err(|e| anyhow!("--args is not strict JSON: {e}"))?,
        );
    }
    decide(r, ids, req).await
}

/// `assent deny IDS`: denies each; the reason reaches the agent. Exit 1 when any failed.
pub(crate) async fn deny(r: &Remote, ids: &[String], reason: Option<String>) -> Result<i32> {
    let req = DecisionRequest {
        reason,
        ..DecisionRequest::new(DecisionKind::Deny)
    };
    decide(r, ids, req).await
}

/// `assent cancel ID` (`--session`: every pending approval of session `id`, its `session`
/// grants and unredeemed tokens), printing the new status or how many were cancelled, revoked
/// and voided.
pub(crate) async fn cancel(
    r: &Remote,
    id: &str,
    session: bool,
    reason: Option<String>,
) -> Result<i32> {
    let c = connect(r)?;
    let req = CancelRequest { reason };
    if session {
        let out = c.cancel_session(id, &req).await?;
        let (n, g, t) = (
            out.cancelled.len(),
            out.grants_revoked.len(),
            out.tokens_voided,
        );
        println!(
            "session {id}: {n} pending approval(s) cancelled, {g} session grant(s) revoked, {t} unredeemed token(s) voided"
        );
    } else {
        let a = c.cancel(id, &req).await?;
        println!("{id} {}", a.status.as_str());
    }
    Ok(0)
}
