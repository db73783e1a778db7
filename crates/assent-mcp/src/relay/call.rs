//! One `tools/call` through the relay: the pin check, the gateway (waiting for a human when
//! held, with progress notifications or as an MCP task), cancellation by the client, and the
//! outcome — forwarded upstream exactly as approved (the operator's edit included), asked of a
//! modern client in an `input_required` result, or answered `TOOL_DENIED:` and never
//! forwarded. The client closing stdin withdraws every approval still waited on
//! ([`Relay::withdraw_waiting`]). The call's result is the upstream reader's.

use super::ids::own_elicitation_id;
use super::pins::pin_gate;
use super::state::{Forwarded, Relay, Resume, State, Stop, Waiting, clear_to_forward};
use super::tasks::TASK_APPROVAL_PREFIX;
use crate::ask::{AskUser, Asker, elicitation_schema, user_answer};
use crate::era::{self, Era};
use crate::kit::{Hold, HoldState, Outcome, denied_result, denied_value, reply};
use crate::tasks::{ResultSlot, TaskDone, process_has_room, process_slot, task_options, task_run};
use rmcp::task_manager::TaskExit;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// Set when the call became a task: where its outcome goes, its id, and its place in the
/// budget for task results.
type TaskSlot = Mutex<Option<(TaskDone, String, Arc<ResultSlot>)>>;

/// How long a stopped call's wait goes on after its approval was withdrawn, for the
/// withdrawal (or the decision that came first) to end it.
const SETTLE_AFTER_STOP: std::time::Duration = std::time::Duration::from_secs(120);

/// What a cleared call its client stopped became.
const NOT_RUN: assent_api::gate::CallOutcome = assent_api::gate::CallOutcome::NotRun;

/// A `tools/call` on its way through the relay, owning what it needs.
struct CallJob {
    relay: Relay,
    /// What is kept of the client's request (after the proxy's own round was stripped): what
    /// goes upstream besides the arguments ([`super::gated::kept_of_call`]).
    msg: Value,
    /// The request id, and its JSON text (the key of the relay's tables).
    id: Value,
    key: String,
    tool: String,
    args: Value,
    progress_token: Value,
    /// What the call waits for, for progress, task status and cancellation.
    approval: Arc<HoldState>,
    /// Whether a held call becomes an MCP task.
    as_task: bool,
    /// Set once it did.
    became_task: Arc<AtomicBool>,
    /// The call's bytes (the weight of `msg` and `args`), counted in [`State::held_bytes`]
    /// until it is answered (moved to its [`Forwarded`] entry when it is forwarded, counting
    /// what that keeps, until its result is reported or, cancelled, it is given up upstream).
    held: super::held::HeldGuard,
}

impl Relay {
    /// Gates `tools/call` `msg` (its request `id`) in a task of its own: registered as
    /// waiting (so the client can cancel it), answered or forwarded when the gateway has
    /// decided. Only what goes upstream is kept of it ([`super::gated::kept_of_call`]), and
    /// weighed ([`crate::kit::json_weight`]): a call that would take the bytes held for calls
    /// in flight past their bound ([`super::held`]) is answered at once with a JSON-RPC error
    /// ([`super::client::BUSY`]) saying so, and never gated.
    pub(super) fn on_tools_call(
        &self,
        mut msg: Value,
        id: Value,
        declares_tasks: bool,
        resume: Resume,
    ) {
        let st = &self.state;
        let mut args = super::gated::kept_of_call(&mut msg);
        // A continuation of the upstream's own input round names a state the upstream issued
        // for this very call, once ([`super::rounds`]); any other is refused, never gated. Its
        // answers are gated with its arguments ([`super::gated::input_responses_of`]), and
        // its round is used up only once nothing else refuses it (found by review: a `BUSY`
        // refusal, which a client retries, had spent it).
        let continues = msg["params"]["requestState"].is_string();
        let responses = match continues {
            true => super::gated::input_responses_of(&mut msg, &args),
            false => Ok(None),
        };
        let responses = match responses {
            Ok(r) => r,
            Err(why) => return self.refuse_call(&id, why),
        };
        let len = crate::kit::json_weight(&args)
            .saturating_add(crate::kit::json_weight(&msg))
            .saturating_add(responses.as_ref().map_or(0, crate::kit::json_weight));
        let held = match st.held_bytes.take(len) {
            Ok(g) => g,
            Err(why) => {
                tracing::warn!(id = %id, len, "refused a tools/call: {why}");
                let code = rmcp::model::ErrorCode(super::client::BUSY);
                let busy = rmcp::ErrorData::new(code, why, None);
                let _ = self.to_client.send(reply(&id, Err(busy)));
                return;
            }
        };
        self.ask_pins();
        let key = id.to_string();
        let tool = msg["params"]["name"].as_str().unwrap_or("").to_string();
        let progress_token = msg["params"]["_meta"]["progressToken"].clone();
        let approval: Arc<HoldState> = Arc::new(watch::Sender::new(Hold::Nothing));
        let as_task = declares_tasks || st.client_tasks.load(Ordering::SeqCst);
        // A call that may become a task is refused before anything is gated when too little
        // is left of the budget for task results to hold what it returns
        // ([`crate::tasks::TASK_RESULT_HEADROOM`]). Found by review: the proxy checked no
        // budget, so the call ran and its result was dropped.
        if as_task && let Err(why) = process_has_room() {
            let _ = self.to_client.send(denied_result(&id, &why));
            return;
        }
        if continues {
            let state = msg["params"]["requestState"].as_str().unwrap_or("");
            let taken = st.rounds.lock().expect("rounds").take(state, &tool, &args);
            if let Err(why) = taken {
                return self.refuse_call(&id, why);
            }
            super::gated::fold_input_responses(&mut args, responses);
        }
        // A continuation is not asked in the client: the retry could carry only one
        // `requestState`, assent's or the upstream's (found by review: the upstream's was
        // lost and the approval never settled). Operators decide it.
        let asker = if continues {
            Asker::Nobody
        } else {
            self.asker(as_task)
        };
        let (cancel_tx, cancel_rx) = oneshot::channel::<Stop>();
        let became_task = Arc::new(AtomicBool::new(false));
        st.waiting.lock().expect("waiting").insert(
            key.clone(),
            Waiting {
                approval: approval.clone(),
                cancel: Some(cancel_tx),
                task: became_task.clone(),
            },
        );
        let span = crate::trace::call_span(&tool, &msg["params"]);
        let job = CallJob {
            relay: self.clone(),
            msg,
            id,
            key,
            tool,
            args,
            progress_token,
            approval,
            as_task,
            became_task,
            held,
        };
        tokio::spawn(tracing::Instrument::instrument(
            job.run(asker, resume, cancel_rx),
            span,
        ));
    }

    /// Answers client request `id` with a JSON-RPC invalid-params error saying `why` (a
    /// `tools/call` refused before it was gated), and logs it.
    fn refuse_call(&self, id: &Value, why: &str) {
        tracing::warn!(id = %id, "refused a tools/call: {why}");
        let bad = rmcp::ErrorData::invalid_params(why.to_string(), None);
        let _ = self.to_client.send(reply(id, Err(bad)));
    }

    /// In-client approval: a modern client is asked in an input_required result, a legacy one
    /// by elicitation (a task has no request to answer).
    fn asker(&self, as_task: bool) -> Asker {
        let ends = &self.state.ends;
        match ends.client() {
            Some(Era::Modern) if !as_task && era::can_elicit(&ends.client_capabilities()) => {
                Asker::InputRequired
            }
            Some(Era::Modern) => Asker::Nobody,
            _ if self.state.client_elicits.load(Ordering::SeqCst) => Asker::Elicit(self.ask_user()),
            _ => Asker::Nobody,
        }
    }

    /// Asks the client's user by an `elicitation/create` request of the proxy's own (under an
    /// id nobody can guess, [`own_elicitation_id`]); the answer comes back through the client
    /// reader.
    fn ask_user(&self) -> AskUser {
        let (tc, st) = (self.to_client.clone(), self.state.clone());
        Arc::new(move |question: String| {
            let id = own_elicitation_id();
            let (tx, rx) = oneshot::channel::<Value>();
            st.elicits.lock().expect("elicits").insert(id.clone(), tx);
            let _ = tc.send(
                json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
                    "message": question, "requestedSchema": elicitation_schema(),
                }})
                .to_string(),
            );
            Box::pin(async move {
                let reply = rx.await.ok()?;
                let r = &reply["result"];
                user_answer(r["action"].as_str()?, r.get("content"))
            })
        })
    }

    /// The client closed stdin: withdraws the approvals it was waiting on. A call that became
    /// a task outlives the connection: its approval stays, for `tasks/get` through another
    /// one; one being forwarded runs to its end. What the client still owed the upstream is
    /// dropped, and the proposals on their way are settled ([`Relay::settle`]).
    pub(super) async fn withdraw_waiting(&self) {
        self.drop_owed();
        self.withdraw(false, "the MCP client disconnected").await;
        self.settle("the client").await;
    }

    /// The upstream exited: every approval a call waits on is withdrawn, a task's too (nothing
    /// in this process can run it any more), and every call forwarded and still unanswered is
    /// reported as [`CallOutcome::NoAnswer`](assent_api::gate::CallOutcome) (it may have run).
    /// Found by review: the calls held then stayed pending and approvable, an approval
    /// redeemed a token for a call written into a closed pipe, and the audit stopped at
    /// "approved, redeemed" with no outcome (the hub reported it; the relay did not).
    pub(super) async fn upstream_gone(&self) {
        self.drop_owed();
        self.withdraw(true, "the upstream MCP server exited").await;
        let unanswered: Vec<Forwarded> = self
            .state
            .forwarded
            .lock()
            .expect("forwarded")
            .drain()
            .map(|(_, f)| f)
            .collect();
        for f in unanswered {
            let args: Value = serde_json::from_str(&f.arguments).unwrap_or(Value::Null);
            let outcome = assent_api::gate::CallOutcome::NoAnswer;
            (self.state.gw)
                .report_no_result(&f.tool, &args, f.approval_id.as_deref(), outcome)
                .await;
        }
        self.settle("the upstream").await;
    }

    /// Waits up to [`crate::kit::PROPOSALS_SETTLE`] for the proposals on their way and the
    /// withdrawals they leave; a warning names who `left` when one is still under way.
    async fn settle(&self, left: &str) {
        let settled = self.state.gw.settle_proposals(crate::kit::PROPOSALS_SETTLE);
        if !settled.await {
            tracing::warn!(
                left,
                "a proposal was still on its way when the session ended"
            );
        }
    }

    /// Withdraws the approvals calls wait on (`why`), a task's only with `tasks_too`.
    async fn withdraw(&self, tasks_too: bool, why: &'static str) {
        let held: Vec<Waiting> = self
            .state
            .waiting
            .lock()
            .expect("waiting")
            .drain()
            .map(|(_, w)| w)
            .collect();
        for mut w in held {
            if !tasks_too && w.task.load(Ordering::SeqCst) {
                continue;
            }
            let Some(was) = crate::kit::cancel_unless_forwarded(&w.approval, why) else {
                continue;
            };
            if let Some(a) = was.approval() {
                self.state.gw.cancel(&a, why).await;
            }
            if let Some(tx) = w.cancel.take() {
                let _ = tx.send(Stop::default());
            }
        }
    }
}

/// A cleared call (`cleared`, a [`Outcome::Forward`] with the arguments it would run with)
/// whose arguments would take the bytes held for calls in flight past their bound (`why`,
/// [`super::held::HeldGuard::resize`]): reported to the gateway as not run, then its client
/// (or its task) answered with a JSON-RPC error ([`super::client::BUSY`]) saying why.
async fn not_run_past_bound(
    relay: &Relay,
    id: &Value,
    tool: &str,
    cleared: Outcome,
    task: Option<TaskDone>,
    why: &str,
) {
    tracing::warn!(tool, reason = %why, "a cleared call was not run");
    if let Outcome::Forward {
        edited: Some(args),
        approval_id,
        ..
    } = &cleared
    {
        let gw = &relay.state.gw;
        gw.report_no_result(tool, args, approval_id.as_deref(), NOT_RUN)
            .await;
    }
    match task {
        Some(done) => {
            let _ = done.send(Ok(denied_value(why)));
        }
        None => {
            let code = rmcp::model::ErrorCode(super::client::BUSY);
            let busy = rmcp::ErrorData::new(code, why.to_string(), None);
            let _ = relay.to_client.send(reply(id, Err(busy)));
        }
    }
}

/// Removes the `waiting` entry of the call whose hold is `approval` under id `key`, and only
/// its own (found by review): a client that cancelled a call may already have reused its id
/// for a new one, whose entry must stay (its cancellation and the id check read it).
fn leave_waiting(state: &State, key: &str, approval: &Arc<HoldState>) {
    let mut waiting = state.waiting.lock().expect("waiting");
    if waiting
        .get(key)
        .is_some_and(|w| Arc::ptr_eq(&w.approval, approval))
    {
        waiting.remove(key);
    }
}

impl CallJob {
    /// Waits for the first of the gateway's outcome, the client's cancellation (and, ticking
    /// alongside, progress or the task's creation), then acts on it. Its `waiting` entry is
    /// its own to remove: a cancel only stops it ([`State::stop_waiting`]).
    async fn run(self, asker: Asker, resume: Resume, mut stop_rx: oneshot::Receiver<Stop>) {
        let task: TaskSlot = Mutex::new(None);
        let mut stop = None;
        let mut decide = Box::pin(self.decide(asker, resume));
        let outcome = tokio::select! {
            o = &mut decide => Some(o),
            _ = self.ticker(&task) => None,
            s = &mut stop_rx => { stop = Some(s.unwrap_or_default()); None }
        };
        // A cancel that landed as the outcome came still stops the call: a cleared call is
        // forwarded only when it steps to Forwarding before any cancel (one step each on the
        // hold: exactly one of the two happens), and no other outcome is answered once
        // the hold says cancelled. The cancel sends why right after it set the hold. A
        // cleared call stopped so is reported as not run. A task's call first sets aside room
        // for its result: without it, it is not forwarded (`no_room`), and reported so.
        let task = task.lock().expect("task").take();
        let (mut not_run, mut no_room) = (None, None);
        let outcome = outcome.filter(|o| match o {
            Outcome::Forward { .. } => {
                if let Some(Err(why)) = task.as_ref().map(|t| t.2.reserve()) {
                    no_room = Some((o.clone(), why));
                    return false;
                }
                let go = clear_to_forward(&self.approval);
                if !go {
                    not_run = Some(o.clone());
                }
                go
            }
            _ => !matches!(*self.approval.borrow(), Hold::Cancelled(_)),
        });
        if let Some((cleared, why)) = no_room {
            leave_waiting(&self.relay.state, &self.key, &self.approval);
            return self.not_run_for_room(cleared, &why, task).await;
        }
        if outcome.is_none() && stop.is_none() {
            stop = Some((&mut stop_rx).await.unwrap_or_default());
        }
        let st = &self.relay.state;
        // A forwarded call leaves `waiting` only once it is in `forwarded`, so that its id is
        // in use all along (`Relay::id_in_use`); every other outcome leaves it now.
        if !matches!(outcome, Some(Outcome::Forward { .. })) {
            leave_waiting(st, &self.key, &self.approval);
        }
        let task = task.map(|(done, id, _)| (done, id));
        match outcome {
            None => {
                let stop = stop.unwrap_or_default();
                self.stopped(stop, task, not_run, &mut decide).await;
            }
            Some(Outcome::Forward {
                edited,
                approval_id,
                ..
            }) => {
                let (relay, key) = (self.relay.clone(), self.key.clone());
                let approval = self.approval.clone();
                drop(decide);
                self.forward(edited, approval_id, task).await;
                leave_waiting(&relay.state, &key, &approval);
            }
            Some(Outcome::AskClient {
                approval_id,
                question,
            }) => {
                let answer = era::input_required(&question, &approval_id);
                let _ = self.relay.to_client.send(reply(&self.id, Ok(answer)));
            }
            Some(Outcome::Denied(why)) => {
                tracing::info!(tool = self.tool.as_str(), reason = %why, "call denied");
                match task {
                    Some((done, _)) => {
                        let _ = done.send(Ok(denied_value(&why)));
                    }
                    None => {
                        let _ = self.relay.to_client.send(denied_result(&self.id, &why));
                    }
                }
            }
        }
    }

    /// Stopped by the client (`stop`): the approval withdrawn; no answer is due (its task,
    /// if any, ends cancelled). Its own wait (`decide`) goes on until the withdrawal ends it,
    /// or the decision that came first does — found by review: dropped at once, a wait whose
    /// token was being redeemed left the approval redeemed with no word of what became of the
    /// call; a cleared call (`not_run`, or one that `decide` clears) is reported as not run.
    async fn stopped(
        &self,
        Stop { why, approval }: Stop,
        task: Option<(TaskDone, String)>,
        mut not_run: Option<Outcome>,
        decide: &mut (impl std::future::Future<Output = Outcome> + Unpin),
    ) {
        if let Some((done, _)) = task {
            let _ = done.send(Err(TaskExit::Cancelled));
        }
        if let Some(a) = approval {
            if let Some(why) = why {
                self.relay.state.gw.cancel(&a, why).await;
            }
            if not_run.is_none() {
                let waited = tokio::time::timeout(SETTLE_AFTER_STOP, decide).await;
                not_run = waited.ok().filter(|o| matches!(o, Outcome::Forward { .. }));
            }
        }
        if let Some(cleared) = not_run {
            self.report_not_run(cleared).await;
        }
    }

    /// A task's call cleared (`cleared`, a [`Outcome::Forward`]) for which no room was left to
    /// hold its result (`why`): not forwarded, reported to the gateway as not run, and its
    /// task answered with the denial saying why (its status: not run).
    async fn not_run_for_room(
        &self,
        cleared: Outcome,
        why: &str,
        task: Option<(TaskDone, String, Arc<ResultSlot>)>,
    ) {
        tracing::warn!(tool = self.tool.as_str(), reason = %why, "a task's call was not run");
        self.report_not_run(cleared).await;
        if let Some((done, _, _)) = task {
            let _ = done.send(Ok(denied_value(why)));
        }
    }

    /// Reports cleared call `cleared` (an [`Outcome::Forward`]: with the operator's edit, if
    /// any) to the gateway as not run.
    async fn report_not_run(&self, cleared: Outcome) {
        if let Outcome::Forward {
            edited,
            approval_id,
            ..
        } = cleared
        {
            let ran_with = edited.as_ref().unwrap_or(&self.args);
            let gw = &self.relay.state.gw;
            gw.report_no_result(&self.tool, ran_with, approval_id.as_deref(), NOT_RUN)
                .await;
        }
    }

    /// The pin check, then the gateway: a first call, or a modern client's retry resuming its
    /// approval.
    async fn decide(&self, asker: Asker, resume: Resume) -> Outcome {
        let (st, tool, args) = (&self.relay.state, &self.tool, &self.args);
        if let Err(why) = pin_gate(&st.gw, &st.pins, tool, &self.approval).await {
            return Outcome::Denied(why);
        }
        match resume {
            Some((id, answer)) => {
                st.gw
                    .resume(&id, Some((tool, args)), answer.as_ref(), &self.approval)
                    .await
                    .0
            }
            None => st.gw.gate_asking(tool, args, &self.approval, asker).await,
        }
    }

    /// Progress while the call waits, when the client asked for it; for a client that uses
    /// tasks, the task the call becomes once it waits for a human. Never ends. No tick is sent
    /// while the client's queue is full ([`super::lines::Lines::full`]).
    async fn ticker(&self, task: &TaskSlot) {
        if self.as_task {
            return self.become_task(task).await;
        }
        if self.progress_token.is_null() {
            return std::future::pending::<()>().await;
        }
        let mut n = 0u64;
        loop {
            tokio::time::sleep(self.relay.state.progress_every).await;
            n += 1;
            // A client that reads nothing would otherwise queue one line a tick for as long
            // as the call waits (found by review); a skipped tick's count is not sent.
            if self.relay.to_client.full() {
                continue;
            }
            let what = self.approval.borrow().describe(&self.tool);
            let _ = self.relay.to_client.send(
                json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": self.progress_token, "progress": n, "message": what}})
                .to_string(),
            );
        }
    }

    /// Once it waits for a human, the call becomes a task: the client is answered with it, and
    /// its outcome goes to `task`. A task held for an approval is named after it
    /// (`approval-ID`), so that a client that lost this connection resumes it from another.
    async fn become_task(&self, task: &TaskSlot) {
        let st = &self.relay.state;
        let mut rx = self.approval.subscribe();
        let _ = rx
            .wait_for(|h| matches!(h, Hold::Review(_) | Hold::Approval(_)))
            .await
            .is_ok();
        let (done_tx, done_rx) = oneshot::channel();
        let (held, state, key, name) = (
            self.approval.clone(),
            st.clone(),
            self.key.clone(),
            self.tool.clone(),
        );
        let status = held.borrow().describe(&self.tool);
        let mine = held.clone();
        let slot = process_slot();
        let room = slot.clone();
        let t = st.tasks.spawn(task_options(status), move |tctx| {
            Box::pin(task_run(tctx, done_rx, held, name, room, move || {
                // Only this task's call (as a cancel of its request: stopped unless it is
                // being forwarded, its entry left to its job).
                state.stop_waiting(&key, Some(&mine), "the MCP client cancelled the task");
            }))
        });
        *task.lock().expect("task") = Some((done_tx, t.task_id.clone(), slot));
        self.became_task.store(true, Ordering::SeqCst);
        let local = t.task_id.clone();
        let mut created =
            serde_json::to_value(rmcp::model::CreateTaskResult::new(t)).unwrap_or_default();
        if let Some(a) = self.approval.borrow().approval() {
            let ext = format!("{TASK_APPROVAL_PREFIX}{a}");
            created["taskId"] = json!(ext);
            st.task_ids.insert(ext, local);
        }
        let _ = self.relay.to_client.send(reply(&self.id, Ok(created)));
        std::future::pending::<()>().await
    }

    /// Forwards the cleared call (its hold stepped to [`Hold::Forwarding`] already) upstream,
    /// with the operator's `edited` arguments when there are any, and registers it for its
    /// result. A call that became a task is sent under an
    /// id of the proxy's own (`assent-task-ID`): the client was answered with the task.
    async fn forward(
        self,
        edited: Option<Value>,
        approval_id: Option<String>,
        task: Option<(TaskDone, String)>,
    ) {
        let CallJob {
            relay,
            msg,
            id,
            key,
            tool,
            args,
            mut held,
            ..
        } = self;
        // Spelt as the hash reads it, so the upstream gets the numbers the approver saw.
        let run_with = assent_core::canonical::as_hashed(edited.as_ref().unwrap_or(&args));
        // What goes upstream is rebuilt from what was gated (found by review: the client's
        // other `params` keys and `_meta` entries went upstream unhashed, a channel around
        // the approval for an upstream that reads them).
        let modern = relay.state.ends.upstream() == Some(Era::Modern);
        let mut msg = super::gated::gated_call(&msg, &tool, &run_with, modern);
        // In a trace, the upstream gets the upstream call's span as its parent.
        let span = crate::trace::upstream_span(&tool, approval_id.as_deref());
        crate::trace::stamp(&mut msg["params"], &span);
        let (task, key) = match task {
            Some((done, task_id)) => {
                let own = json!(format!("assent-task-{task_id}"));
                msg["id"] = own.clone();
                (Some(done), own.to_string())
            }
            None => (None, key),
        };
        // What is kept of the call until its result comes is the text of the arguments it ran
        // with, and that is what it counts from now on (the line to the upstream is its
        // queue's to count).
        // Found by review: an operator's edit could make that more than the call counted, and
        // pushed the total past the bound; an edit that would is not run, and said so.
        let arguments = run_with.to_string();
        if let Err(why) = held.resize(arguments.len().saturating_add(tool.len())) {
            drop((arguments, held, msg));
            let cleared = Outcome::Forward {
                edited: Some(run_with),
                output_limit: None,
                approval_id,
            };
            return not_run_past_bound(&relay, &id, &tool, cleared, task, &why).await;
        }
        drop(run_with);
        // Never in place of another call's entry (its answer would be recorded and held as
        // this one's): the id checks keep an id in flight from being reused, and this one
        // fails closed should they ever miss one.
        let mut forwarded = relay.state.forwarded.lock().expect("forwarded");
        if forwarded.contains_key(&key) {
            drop(forwarded);
            tracing::error!(id = %key, "a cleared call's id is another's in flight: not forwarded");
            let why = "the request id is in use by another call in flight";
            match task {
                Some(done) => {
                    let _ = done.send(Ok(denied_value(why)));
                }
                None => {
                    let _ = relay.to_client.send(denied_result(&id, why));
                }
            }
            return;
        }
        forwarded.insert(
            key,
            Forwarded {
                tool: tool.clone(),
                arguments,
                approval_id,
                task,
                held: Some(held),
                settling: Some(relay.state.gw.settling_token()),
            },
        );
        drop(forwarded);
        if edited.is_some() {
            tracing::info!(tool, "forwarding the operator's modified arguments");
        }
        let _ = relay.to_upstream.send(msg.to_string());
    }
}
