//! The hub's MCP tasks (SEP-2663): a `tools/call` of a client that declared the tasks
//! extension becomes a task once it waits for a human ([`call_as_task`]), owned by the agent
//! that made it; `tasks/get` and `tasks/cancel` reach only the owner's tasks ([`own_task`]).
//! The call itself is [`Call`]'s.

use super::call::{Call, failed};
use super::state::{Hub, PROCESS_TASKS};
use crate::ask::Asker;
use crate::kit::Hold;
use crate::tasks::{task_options, task_run};
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CreateTaskResult};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::TaskExit;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// `tools/call` for a client that declared the tasks extension (SEP-2663): a call that
/// clears at once is answered at once; a call that waits for a human (an approval, or the
/// review of a changed tool) becomes a task the client polls with `tasks/get`, whose
/// status message says what it waits for. `tasks/cancel` withdraws the approval (or stops
/// the wait for a review); a call already approved and forwarded completes anyway. Until it
/// is a task the call is among client session `session`'s calls, then among the process's
/// tasks ([`PROCESS_TASKS`]), so that a client gone stops it ([`Hub::client_gone`],
/// [`Hub::tasks_gone`]).
pub(super) async fn call_as_task(
    hub: &Arc<Hub>,
    (call, session): (Call, &str),
    ask: Asker,
    agent: String,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    // Refused before anything is gated or run, with less than the headroom left for its
    // result (a result it could not hold would be lost).
    // Its place among the agent's tasks is held until its task is recorded.
    let (slot, _place) = {
        let mut owners = hub.task_owners.lock().expect("task owners");
        match owners.has_room(&agent, Instant::now()) {
            Ok(place) => (owners.slot(&agent), place),
            Err(why) => return Ok(failed(&format!("TOOL_DENIED: {why}")).into()),
        }
    };
    // The call sets aside room for its result before it is forwarded (not forwarded when
    // there is none: `Call::run`); the result is counted when it is kept.
    let mut call = call;
    call.result_slot = Some(slot.clone());
    let (held, gw) = (call.held.clone(), call.gw.clone());
    let name = format!("{}__{}", call.alias, call.tool);
    // In the client's trace (its `_meta.traceparent`), as a call that is no task is.
    let meta = serde_json::json!({"_meta": serde_json::to_value(&ctx.meta).unwrap_or_default()});
    let span = crate::trace::call_span(&name, &meta);
    let mut job = tokio::spawn(tracing::Instrument::instrument(
        async move {
            match call.run(ask, None).await {
                Ok(CallToolResponse::Complete(r)) => r,
                Ok(_) => failed("the call asked for input a task cannot give"),
                // Not run (an edit past the held bytes bound): denied, as the relay's task is.
                Err(e) => super::call::denied_result(&e.message),
            }
        },
        span,
    ));
    let in_session = hub.under_way(session, held.clone(), gw.clone(), job.abort_handle());
    let mut watch = held.subscribe();
    tokio::select! {
        r = &mut job => {
            return Ok(r.unwrap_or_else(|e| {
                tracing::error!(error = %e, "a hub call's task failed");
                failed("the call failed (the gateway's log says why)")
            }).into());
        }
        _ = async { watch.wait_for(|h| matches!(h, Hold::Review(_) | Hold::Approval(_))).await.is_ok() } => {}
        _ = ctx.ct.cancelled() => {
            let why = "the MCP client cancelled the request";
            super::stop::stop_unless_forwarded(&job.abort_handle(), &held, &gw, why).await;
            return Err(McpError::invalid_request("cancelled by the client", None));
        }
    }
    let status = held.borrow().describe(&name);
    let (done_tx, done_rx) = oneshot::channel();
    let abort = job.abort_handle();
    let kept = hub.under_way(PROCESS_TASKS, held.clone(), gw.clone(), job.abort_handle());
    drop(in_session);
    tokio::spawn(async move {
        let _kept = kept;
        let outcome = match job.await {
            Ok(r) => Ok(serde_json::to_value(r).unwrap_or_default()),
            Err(e) if e.is_cancelled() => Err(TaskExit::Cancelled),
            Err(e) => {
                tracing::error!(error = %e, "a hub task's call failed");
                Err(TaskExit::Error(McpError::internal_error(
                    "the call failed (the gateway's log says why)",
                    None,
                )))
            }
        };
        let _ = done_tx.send(outcome);
    });
    let task = hub.tasks.spawn(task_options(status), move |tctx| {
        let waits = held.clone();
        Box::pin(task_run(tctx, done_rx, held, name, slot, move || {
            // In one step with the call's own step to Forwarding (found by review: read, then
            // aborted, a call could be forwarded in between and leave no result).
            match crate::kit::cancel_unless_forwarded(&waits, "the MCP client cancelled the task") {
                // On the gateway client's tracker (the stdio hub waits for it before it ends).
                Some(Hold::Approval(a)) => {
                    let _withdrawing = gw.cancel(&a, "the MCP client cancelled the task");
                }
                // Nothing was forwarded yet: stop the wait (for the review).
                Some(_) => abort.abort(),
                // Already running upstream (or cancelled): it completes.
                None => {}
            }
        }))
    });
    let mut owners = hub.task_owners.lock().expect("task owners");
    owners.insert(task.task_id.clone(), agent, Instant::now());
    Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
}

/// `Ok` when `task_id` is a task of the agent whose key (`key`) made this request; any other
/// task is reported as unknown, as if it did not exist.
pub(super) async fn own_task(hub: &Hub, key: &str, task_id: &str) -> Result<(), McpError> {
    let agent = hub
        .agent_of(key)
        .await
        .map_err(|e| McpError::invalid_request(e, None))?;
    let owner = hub
        .task_owners
        .lock()
        .expect("task owners")
        .owner(task_id)
        .map(str::to_string);
    if owner.as_deref() == Some(agent.as_str()) {
        Ok(())
    } else {
        Err(McpError::invalid_params(
            format!("unknown task `{task_id}`"),
            None,
        ))
    }
}
