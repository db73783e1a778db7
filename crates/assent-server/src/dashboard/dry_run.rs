//! The dashboard's dry run (seed 002: "a dry-run button when feasible"): an approver runs the
//! rule's `dry_run_tool` with the held call's arguments on its MCP upstream and sees the
//! result on the card; the held call itself does not run. The dry-run tool runs only while
//! its definition matches its pin, and one dry run of an approval at a time on each replica
//! (the guard is this process's: with replicas behind a load balancer, two presses reaching
//! two replicas may run together).

use super::forms::PostedForm;
use super::page::{page_with, secured};
use super::session::Operator;
use super::views::card;
use crate::state::{AppState, DryRun, now_ms};
use assent_core::approval::ApprovalStatus;
use assent_core::gatekeeper::evaluate_with;
use assent_core::pin::PinState;
use assent_store::pins::PinScope;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// `POST /ui/approvals/{id}/dry-run` (`csrf`): runs the rule's `dry_run_tool` with the held
/// call's arguments on its MCP upstream, records it in the audit log (`dry_run`, with the
/// result's hash) and shows the result on the card. Refused, with nothing run:
/// - `403` unless the operator may decide the approval (one of its approver roles; found by
///   review: any signed-in operator could run the upstream tool with the agent's arguments,
///   again and again);
/// - `409` when the approval's stored record does not hold its seal (edited or planted behind
///   the gateway's back: its terms seal, its call hash, a damaged column), when no dry run is
///   available (the approval is not pending, its rule names no `dry_run_tool`, or the policy in
///   force names another one or none, its upstream is not the hub's), when the dry-run tool's definition does
///   not match its pin in the gateway's scope now (a changed one waits for its review, as
///   every gated call of it does), or while a dry run of the same approval is running.
pub(crate) async fn dry_run_form(
    State(st): State<AppState>,
    form: PostedForm,
) -> Result<Response, Response> {
    let (op, _, loaded) = form.card(&st, "Nothing was run.").await?;
    let id = &form.id;
    let refuse = |status: StatusCode, why: &str| page_with(status, &card(&st, &op, &loaded, why));
    // What runs is read again with its seal checked, and the tool is the one the policy in
    // force names for this call, not the stored name (found by review: a database writer set
    // `dry_run_tool` to the held tool itself, or planted an unsealed row, and one approver's
    // press ran it on the upstream with no approval).
    let id2 = id.clone();
    let intact = st.store_call(move |s| s.intact_approval(&id2)).await;
    let a = match intact {
        Ok(Some(a)) => a,
        Ok(None) => return Err(refuse(StatusCode::CONFLICT, NOT_INTACT)),
        Err(e) => return Err(secured(e.into_response())),
    };
    let named = evaluate_with(&st.live().registry, &a.agent, &a.call, None)
        .terms
        .dry_run_tool;
    let (Some(tool), Some(server), Some(runner)) = (
        a.terms
            .dry_run_tool
            .clone()
            .filter(|t| named.as_ref() == Some(t)),
        a.call.server.clone(),
        st.dry_run.clone(),
    ) else {
        return Err(refuse(StatusCode::CONFLICT, UNAVAILABLE));
    };
    if a.status != ApprovalStatus::Pending || !runner.serves(&server) {
        return Err(refuse(StatusCode::CONFLICT, UNAVAILABLE));
    }
    let roles = op.principal.roles().unwrap_or_default();
    if !assent_core::approval::may_decide(&a.terms.approvers, roles) {
        let why = format!(
            "Only an operator with one of this approval's approver roles ({}) runs its dry run. Nothing was run.",
            a.terms.approvers.join(", ")
        );
        return Err(refuse(StatusCode::FORBIDDEN, &why));
    }
    let Some(_running) = Running::start(&st.dry_runs, id) else {
        let why = "A dry run of this call is running now; its result will show here. Nothing more was run.";
        return Err(refuse(StatusCode::CONFLICT, why));
    };
    if let Err(why) = pinned_now(&st, runner.as_ref(), &server, &tool, &op).await {
        return Err(refuse(StatusCode::CONFLICT, &why));
    }
    let outcome = runner.run(&server, &tool, &a.call.arguments).await;
    tracing::info!(approval_id = %id, operator = %op.principal.name, tool = %tool, ok = outcome.is_ok(), "dry run");
    let (name, id2) = (op.principal.name.clone(), id.clone());
    let recorded = st
        .store_call(move |s| s.record_dry_run(&id2, &name, &tool, &outcome, now_ms()))
        .await;
    match recorded {
        Ok(()) => Ok(secured(
            Redirect::to(&format!("/ui/approvals/{id}#dry-run")).into_response(),
        )),
        Err(e) => Err(secured(e.into_response())),
    }
}

/// The refusal of a dry run that is not available for the call.
const UNAVAILABLE: &str = "No dry run is available for this call.";

/// The refusal of a dry run of an approval whose stored record does not hold its seal.
const NOT_INTACT: &str = "This approval's stored record does not match what the gateway sealed; no dry run is run for it. Nothing was run.";

/// `Ok` when `tool` is advertised by upstream `server` now with the definition pinned for it
/// in the gateway's scope, or pinned by this check (the hub's pins: the list is checked as
/// the hub's `tools/list` checks it, so a server first seen here is pinned whole on first
/// use, and a changed definition gets its review). `Err` is the card's message: the list
/// could not be read, is not one the gateway pins ([`crate::tools::check_list`]), does not
/// name the tool, or the tool is not pinned as advertised.
async fn pinned_now(
    st: &AppState,
    runner: &dyn DryRun,
    server: &str,
    tool: &str,
    op: &Operator,
) -> Result<(), String> {
    let list = runner.tools(server).await.map_err(|e| {
        format!("The tool list of `{server}` could not be read ({e}). Nothing was run.")
    })?;
    // The list is held to the rules `POST /v1/tools/check` holds every list to (found by
    // review: a list the gateway refuses there still had pins and reviews stored here).
    crate::tools::check_list(&list).map_err(|e| {
        format!(
            "The tool list of `{server}` is not one the gateway pins ({}). Nothing was run.",
            e.message
        )
    })?;
    if !list.iter().any(|t| t["name"] == tool) {
        return Err(format!(
            "`{tool}` is not advertised by `{server}` now. Nothing was run."
        ));
    }
    let (server2, actor) = (server.to_string(), op.principal.name.clone());
    let states = st
        .store_task(move |s| {
            s.check_tools_read_first(PinScope::Gateway, &server2, &list, &actor, now_ms())
        })
        .await
        .map_err(|e| format!("{}. Nothing was run.", e.message))?
        .map_err(|e| {
            format!("The tool list of `{server}` could not be checked ({e}). Nothing was run.")
        })?;
    if states.iter().any(|s| s.state != PinState::Pinned) {
        st.changed();
    }
    match states.iter().find(|s| s.name == tool) {
        Some(s) if s.state != PinState::Held => Ok(()),
        Some(s) => Err(format!(
            "The definition of `{tool}` on `{server}` has changed since it was pinned; it waits for the review {} (`assent tools`). Nothing was run.",
            s.review_id.as_deref().unwrap_or("of the change")
        )),
        None => Err(format!(
            "`{tool}` on `{server}` could not be verified. Nothing was run."
        )),
    }
}

/// A dry run of one approval in progress: its id is in the state's set from
/// [`Running::start`] until this is dropped (also when the request is abandoned midway).
struct Running {
    set: Arc<Mutex<HashSet<String>>>,
    id: String,
}

impl Running {
    /// Marks approval `id`'s dry run as running; `None` when one already is.
    fn start(set: &Arc<Mutex<HashSet<String>>>, id: &str) -> Option<Self> {
        let mut running = set.lock().unwrap_or_else(|p| p.into_inner());
        running.insert(id.to_string()).then(|| Running {
            set: set.clone(),
            id: id.to_string(),
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self.set.lock().unwrap_or_else(|p| p.into_inner());
        running.remove(&self.id);
    }
}
