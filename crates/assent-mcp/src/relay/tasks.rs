//! The relay's own MCP tasks (SEP-2663) as the client reads them: `tasks/get`,
//! `tasks/cancel` and `tasks/update` answered from the proxy's task manager, and a task named
//! after its approval (`approval-ID`) that this process does not know resumed from the
//! gateway on `tasks/get` ([`resume_task`]: the call was made through a connection that is
//! gone), or withdrawn there on `tasks/cancel`, never resumed to be cancelled. Making a task
//! of a held call is the call's job.

use super::pins::pin_gate;
use super::state::{Forwarded, Relay, State, clear_to_forward};
use super::task_names::MAX_WITHDRAWALS;
use crate::era;
use crate::kit::cancel_unless_forwarded;
use crate::kit::{Hold, HoldState, Outcome, denied_value, hold_unless_cancelled, reply};
use crate::tasks::{ResultSlot, TaskDone, process_has_room, process_slot, task_options, task_run};
use assent_api::gate::CallOutcome;
use rmcp::task_manager::TaskExit;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// The prefix of the id of a task held for an approval: `approval-` and the approval id.
pub(super) const TASK_APPROVAL_PREFIX: &str = "approval-";

/// How long a cancelled task's call may go on after its approval was withdrawn, for the
/// withdrawal (or the decision that came first) to end it; then it is stopped.
const SETTLE_AFTER_CANCEL: std::time::Duration = std::time::Duration::from_secs(120);

impl Relay {
    /// Answers the client's `tasks/get`, `tasks/cancel` or `tasks/update` (`m`, request `id`)
    /// about one of the proxy's own tasks; the external task id is echoed.
    pub(super) fn on_task_request(&self, m: &str, id: &Value, msg: &Value) {
        let st = &self.state;
        let ext = msg["params"]["taskId"].as_str().unwrap_or("").to_string();
        let known = st.task_ids.get(&ext);
        // A task named after an approval that this process does not know was
        // made through a connection that is gone: resumed from the gateway.
        let approval = ext
            .strip_prefix(TASK_APPROVAL_PREFIX)
            .filter(|a| era::approval_id_ok(a));
        let local = match (known, approval) {
            (Some(l), _) => l,
            // Cancelling a task this process does not know withdraws its approval at the
            // gateway and resumes nothing (found by review: it was resumed to be cancelled,
            // and an approved call could be redeemed and forwarded first).
            (None, Some(a)) if m == "tasks/cancel" => {
                let Some(counted) = st.task_ids.withdrawal() else {
                    let why = format!(
                        "assent: {MAX_WITHDRAWALS} withdrawals are in flight already; cancel more once they are done"
                    );
                    return self.busy(id, why);
                };
                // On the gateway client's tracker, which the proxy waits for before it ends.
                let withdrawing = st.gw.cancel(a, "the client cancelled its task");
                tokio::spawn(async move {
                    withdrawing.await;
                    drop(counted);
                });
                let done = json!({"resultType": "complete"});
                let _ = self.to_client.send(reply(id, Ok(done)));
                return;
            }
            (None, Some(a)) if m == "tasks/get" => {
                // Not resumed with too little left of the budget for task results to hold
                // what the call returns: the approval stays, for a `tasks/get` once there is.
                if let Err(why) = process_has_room() {
                    let e = rmcp::ErrorData::internal_error(format!("not resumed: {why}"), None);
                    let _ = self.to_client.send(reply(id, Err(e)));
                    return;
                }
                if let Some(why) = st.task_ids.resume_refused(st.tasks.running_task_count()) {
                    return self.busy(id, why);
                }
                let l = resume_task(st.clone(), self.to_upstream.clone(), a.to_string());
                st.task_ids.insert(ext.clone(), l.clone());
                l
            }
            _ => ext.clone(),
        };
        let r = match m {
            "tasks/get" => st.tasks.get_task(&local).map(|t| {
                let mut v =
                    serde_json::to_value(rmcp::model::GetTaskResult::new(t)).unwrap_or_default();
                v["taskId"] = json!(ext);
                v
            }),
            "tasks/cancel" => st
                .tasks
                .cancel_task(&local)
                .map(|()| json!({"resultType": "complete"})),
            _ => st
                .tasks
                .get_task(&local)
                .map(|_| json!({"resultType": "complete"})),
        };
        let _ = self.to_client.send(reply(id, r));
    }

    /// Answers request `id` that a bound refused ([`super::task_names`]) with `BUSY` and `why`.
    fn busy(&self, id: &Value, why: String) {
        tracing::warn!(id = %id, "refused a client's task request: {why}");
        let busy = rmcp::ErrorData::new(rmcp::model::ErrorCode(super::client::BUSY), why, None);
        let _ = self.to_client.send(reply(id, Err(busy)));
    }
}

/// Resumes the task of held call `approval` for a client that made it through a connection
/// that is gone (another proxy process): a new task in this process waits for the approval
/// ([`resumed_call`]) and its result completes the task. Cancelling the task stops the call
/// as a cancel stops a held one: its hold set to [`Hold::Cancelled`] unless it is being
/// forwarded already (then it runs to its end), so that it is never forwarded after, its wait
/// ended and its approval withdrawn (found by review: only the approval was withdrawn, and a
/// call approved already was redeemed and forwarded all the same). Returns the new task's id
/// in this process's task manager.
fn resume_task(st: Arc<State>, to_upstream: super::lines::Lines, approval: String) -> String {
    let held: Arc<HoldState> = Arc::new(watch::Sender::new(Hold::Approval(approval.clone())));
    let (done_tx, done_rx) = oneshot::channel::<Result<Value, TaskExit>>();
    let status = held.borrow().describe("the call");
    let slot = process_slot();
    let call = resumed_call(
        st.clone(),
        to_upstream,
        approval.clone(),
        (held.clone(), slot.clone()),
        done_tx,
    );
    let job = tokio::spawn(call).abort_handle();
    let (gw, a) = (st.gw.clone(), approval);
    let task = st.tasks.spawn(task_options(status), {
        let mine = held.clone();
        move |tctx| {
            Box::pin(task_run(
                tctx,
                done_rx,
                held,
                "the call".into(),
                slot,
                move || match cancel_unless_forwarded(&mine, "the MCP client cancelled the task") {
                    // Waiting for the decision, or its token being redeemed: the approval is
                    // withdrawn, and the call's own wait ends with that (or with the decision
                    // that came first: a cleared call is then reported as not run). Found by
                    // review: aborted, a wait whose token was being redeemed left the approval
                    // redeemed with no word of what became of the call.
                    Some(Hold::Approval(_)) => {
                        let withdrawing = gw.cancel(&a, "the MCP client cancelled the task");
                        tokio::spawn(async move {
                            withdrawing.await;
                            tokio::time::sleep(SETTLE_AFTER_CANCEL).await;
                            job.abort();
                        });
                    }
                    // Not yet waiting for the decision: nothing was redeemed.
                    Some(_) => {
                        job.abort();
                        let _withdrawing = gw.cancel(&a, "the MCP client cancelled the task");
                    }
                    None => {}
                },
            ))
        }
    });
    task.task_id
}

/// The call of resumed task `approval` (this agent's, on this server:
/// [`crate::Gateway::resume`]): waits for the approval, passes the tool's pin check, redeems
/// the token and forwards exactly the approved call through `to_upstream` under an id of the
/// proxy's own, unless `held` says it was cancelled first, or no room is left in the budget
/// for task results to hold what it returns (`slot`: then it is reported as not run, and the
/// task says why); its outcome goes to `done`. The token is single-use, so a call already
/// forwarded elsewhere is never forwarded again.
async fn resumed_call(
    st: Arc<State>,
    to_upstream: super::lines::Lines,
    approval: String,
    (held, slot): (Arc<HoldState>, Arc<ResultSlot>),
    done: TaskDone,
) {
    // Until the call waits for its decision, a cancel ends it here and now (its task ends
    // cancelled): nothing was redeemed yet. From then on the withdrawal at the gateway ends
    // its wait (`resume_task`).
    let before = async {
        // A continuation of an upstream's round is refused by `Gateway::resume` below (its
        // round belonged to the connection that held it).
        let tool = st.gw.approval(&approval).await?.call.tool;
        pin_gate(&st.gw, &st.pins, &tool, &held).await?;
        Ok::<_, String>(tool)
    };
    let mut hold = held.subscribe();
    let checked = tokio::select! {
        t = before => t,
        _ = hold.wait_for(|h| matches!(h, Hold::Cancelled(_))) => return,
    };
    if let Err(why) = checked {
        let _ = done.send(Ok(denied_value(&why)));
        return;
    }
    if !hold_unless_cancelled(&held, Hold::Approval(approval.clone())) {
        return;
    }
    let (outcome, tool, args) = st.gw.resume(&approval, None, None, &held).await;
    match outcome {
        Outcome::Forward {
            edited,
            approval_id,
            ..
        } => {
            let run_with = edited.unwrap_or(args);
            // Not without room set aside for its result, nor once its client cancelled the
            // task (one step each on the hold): reported as not run.
            let no_room = slot.reserve().err();
            if no_room.is_some() || !clear_to_forward(&held) {
                let id = approval_id.as_deref();
                st.gw
                    .report_no_result(&tool, &run_with, id, CallOutcome::NotRun)
                    .await;
                if let Some(why) = no_room {
                    let _ = done.send(Ok(denied_value(&why)));
                }
                return;
            }
            let own = json!(format!("assent-resumed-{approval}"));
            st.forwarded.lock().expect("forwarded").insert(
                own.to_string(),
                Forwarded {
                    tool: tool.clone(),
                    arguments: run_with.to_string(),
                    approval_id,
                    task: Some(done),
                    held: None,
                    settling: Some(st.gw.settling_token()),
                },
            );
            let call = json!({"jsonrpc": "2.0", "id": own, "method": "tools/call",
                              "params": {"name": tool, "arguments": run_with}});
            let _ = to_upstream.send(call.to_string());
        }
        Outcome::Denied(why) => {
            let _ = done.send(Ok(denied_value(&why)));
        }
        // `resume` never asks: the question was asked when the call was made.
        Outcome::AskClient { approval_id, .. } => {
            let why = format!("approval {approval_id} waits for an answer this task cannot give");
            let _ = done.send(Ok(denied_value(&why)));
        }
    }
}
