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

/// `withdraw`, run when dropped unless taken: a task ended by rmcp at its TTL (its future
/// dropped) withdraws its wait as a `tasks/cancel` does (found by review: the task failed at
/// 24 h while its approval stayed open — an operator approving it on day 2 had the call run
/// for a client told it failed, which may have retried it — and `tasks/cancel` could no
/// longer withdraw it).
struct Withdraw<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for Withdraw<F> {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            w();
        }
    }
}

/// The life of a call that became an MCP task, after its creation: the outcome from
/// `done`, the status message kept to what it waits for, and on `tasks/cancel` — or when
/// rmcp ends the task at its TTL — the wait withdrawn by `withdraw` (a call already forwarded
/// completes: cancellation is cooperative).
pub(crate) async fn task_run(
    tctx: rmcp::task_manager::TaskContext,
    mut done: oneshot::Receiver<Result<Value, TaskExit>>,
    held: Arc<HoldState>,
    name: String,
    withdraw: impl FnOnce() + Send,
) -> Result<rmcp::model::CallToolResult, TaskExit> {
    let mut watch = held.subscribe();
    let mut withdraw = Withdraw(Some(withdraw));
    loop {
        tokio::select! {
            r = &mut done => {
                // Settled: nothing to withdraw any more (`cancelled`: it was already).
                let cancelled = withdraw.0.take().is_none();
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
            _ = tctx.cancelled(), if withdraw.0.is_some() => {
                if let Some(w) = withdraw.0.take() {
                    w();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A task rmcp ends at its TTL, still waiting, withdraws its wait; one that settled first
    /// does not.
    #[tokio::test]
    async fn a_task_ended_at_its_ttl_withdraws_its_wait() {
        let tasks = rmcp::task_manager::TaskManager::new();
        let spawn = |withdrawn: Arc<AtomicBool>, done| {
            let held = Arc::new(tokio::sync::watch::Sender::new(Hold::Nothing));
            tasks.spawn(TaskOptions::new().with_ttl_ms(50), move |tctx| {
                Box::pin(task_run(tctx, done, held, "t".into(), move || {
                    withdrawn.store(true, Ordering::SeqCst);
                }))
            })
        };
        let (waiting, settled) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (_keep, rx) = oneshot::channel();
        let w = spawn(waiting.clone(), rx);
        let (tx, rx) = oneshot::channel();
        let s = spawn(settled.clone(), rx);
        let _ = tx.send(Ok(serde_json::json!({"content": []})));
        tokio::time::sleep(std::time::Duration::from_millis(120)).await;
        // The sweep (run by any read) ends the waiting one at its TTL.
        let _ = tasks.get_task(&w.task_id);
        let _ = tasks.get_task(&s.task_id);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            waiting.load(Ordering::SeqCst),
            "the expired task's wait was not withdrawn"
        );
        assert!(
            !settled.load(Ordering::SeqCst),
            "a settled task was withdrawn"
        );
    }
}
