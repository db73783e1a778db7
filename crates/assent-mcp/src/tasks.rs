//! MCP tasks (SEP-2663) shared by the stdio relay and the hub: a task's settings and the life
//! of a call that became a task (its outcome, its status message kept to what it waits for,
//! its cancellation). Which calls become tasks, and how their ids are named, is decided by
//! the relay and the hub.

use crate::kit::{Hold, HoldState};
use rmcp::task_manager::{TaskExit, TaskOptions};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Delivers a task's outcome: the `tools/call` result (JSON), or how it ended without one.
pub(crate) type TaskDone = oneshot::Sender<Result<Value, TaskExit>>;

/// How long an MCP task outlives its creation (24 h, in ms): a call still waiting then is
/// marked failed; a finished task is kept as long again for the client to read.
pub(crate) const TASK_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A task's settings: its TTL, a 1 s suggested polling interval and `status` as its message.
pub(crate) fn task_options(status: String) -> TaskOptions {
    TaskOptions::new()
        .with_ttl_ms(TASK_TTL_MS)
        .with_poll_interval_ms(1000)
        .with_status_message(status)
}

/// The JSON of a task's `CallToolResult`: parsed for the task store, or why not.
fn tool_result(v: &Value) -> Result<rmcp::model::CallToolResult, TaskExit> {
    serde_json::from_value(v.clone()).map_err(|e| {
        TaskExit::Error(rmcp::ErrorData::internal_error(
            format!("the upstream's result is not a tool result: {e}"),
            None,
        ))
    })
}

/// The life of a call that became an MCP task, after its creation: the outcome from
/// `done`, the status message kept to what it waits for, and on `tasks/cancel` the wait
/// withdrawn by `withdraw` (a call already forwarded completes: cancellation is cooperative).
pub(crate) async fn task_run(
    tctx: rmcp::task_manager::TaskContext,
    mut done: oneshot::Receiver<Result<Value, TaskExit>>,
    held: Arc<HoldState>,
    name: String,
    withdraw: impl FnOnce() + Send,
) -> Result<rmcp::model::CallToolResult, TaskExit> {
    let mut watch = held.subscribe();
    let mut withdraw = Some(withdraw);
    loop {
        tokio::select! {
            r = &mut done => {
                let cancelled = withdraw.is_none();
                let value = r.unwrap_or(Err(TaskExit::Cancelled))?;
                let result = tool_result(&value)?;
                if cancelled && result.is_error == Some(true) && *held.borrow() != Hold::Forwarding {
                    return Err(TaskExit::Cancelled);
                }
                let ran = *held.borrow() == Hold::Forwarding;
                tctx.set_status_message(if ran { format!("ran {name}") } else { format!("{name} was not run") });
                return Ok(result);
            }
            changed = watch.changed() => {
                if changed.is_ok() {
                    let now = watch.borrow_and_update().describe(&name);
                    tctx.set_status_message(now);
                }
            }
            _ = tctx.cancelled(), if withdraw.is_some() => {
                if let Some(w) = withdraw.take() {
                    w();
                }
            }
        }
    }
}
