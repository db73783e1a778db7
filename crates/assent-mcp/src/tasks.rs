//! MCP tasks (SEP-2663) shared by the stdio relay and the hub: a task's settings and the life
//! of a call that became a task (its outcome, its status message kept to what it waits for,
//! its cancellation). Which calls become tasks, and how their ids are named, is decided by
//! the relay and the hub.

use crate::kit::{Hold, HoldState};
use rmcp::task_manager::{TaskExit, TaskOptions};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Delivers a task's outcome: the `tools/call` result (JSON), or how it ended without one.
pub(crate) type TaskDone = oneshot::Sender<Result<Value, TaskExit>>;

/// How long an MCP task outlives its creation (24 h, in ms): a call still waiting then is
/// marked failed; a finished task is kept as long again for the client to read.
pub(crate) const TASK_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// The most bytes of finished task results (each measured as its serialised JSON) that one
/// agent's MCP tasks hold at a hub, and that one stdio proxy's tasks hold (64 MiB): a result
/// that would go past it is not kept, an error is kept in its place ([`task_run_kept`]); and
/// at a hub, an agent at or over it makes no new task until its results are forgotten.
/// Found by review: tasks were capped in number only, and each result may be 16 MiB, so one
/// agent could have the gateway hold gigabytes by making tasks and never reading them.
pub(crate) const RESULT_BYTES_PER_AGENT: u64 = 64 << 20;

/// The most bytes of finished task results (serialised JSON) all agents' MCP tasks hold at
/// one hub (512 MiB), kept as [`RESULT_BYTES_PER_AGENT`] is.
pub(crate) const RESULT_BYTES_IN_ALL: u64 = 512 << 20;

/// How long a kept result counts against the budgets: rmcp keeps a finished task for a TTL
/// after it finished (reading it frees nothing: `tasks/get` may be asked again), and a
/// minute's margin.
const RESULT_HELD_FOR: Duration = Duration::from_millis(TASK_TTL_MS + 60_000);

/// The bytes of finished task results held, by owner (an agent at a hub) and in all, each
/// counted for [`RESULT_HELD_FOR`] after it was kept. Counts saturate; nothing here panics.
pub(crate) struct HeldResults {
    /// Each kept result's owner, bytes and when it stops counting, oldest first.
    held: VecDeque<(String, u64, Instant)>,
    by_owner: HashMap<String, u64>,
    total: u64,
    /// The budgets: bytes per owner, and in all.
    per_owner: u64,
    in_all: u64,
}

impl Default for HeldResults {
    /// [`RESULT_BYTES_PER_AGENT`] per owner and [`RESULT_BYTES_IN_ALL`] in all.
    fn default() -> Self {
        Self::new(RESULT_BYTES_PER_AGENT, RESULT_BYTES_IN_ALL)
    }
}

impl HeldResults {
    /// No results held; budgets of `per_owner` bytes for one owner and `in_all` in all.
    pub(crate) fn new(per_owner: u64, in_all: u64) -> Self {
        Self {
            held: VecDeque::new(),
            by_owner: HashMap::new(),
            total: 0,
            per_owner,
            in_all,
        }
    }

    /// Stops counting the results whose time ran out by `now` (oldest first: each is kept
    /// for the same time, so the first one still counting ends the walk).
    fn release(&mut self, now: Instant) {
        while let Some((owner, bytes, until)) = self.held.front() {
            if now < *until {
                break;
            }
            if let Some(b) = self.by_owner.get_mut(owner) {
                *b = b.saturating_sub(*bytes);
                if *b == 0 {
                    self.by_owner.remove(owner);
                }
            }
            self.total = self.total.saturating_sub(*bytes);
            self.held.pop_front();
        }
    }

    /// `Err(why)` when `owner`'s results, or all results, are at or over their budget at
    /// `now` (no new task should then be made for `owner`); `why` names the budget.
    pub(crate) fn has_room(&mut self, owner: &str, now: Instant) -> Result<(), String> {
        self.release(now);
        let mine = self.by_owner.get(owner).copied().unwrap_or(0);
        if mine >= self.per_owner {
            return Err(format!(
                "the finished tasks of {owner} hold {mine} bytes of results, at or over its budget of {} bytes for task results; no new task is made until they are forgotten (a day after each finished)",
                self.per_owner
            ));
        }
        if self.total >= self.in_all {
            return Err(format!(
                "finished tasks hold {} bytes of results here, at or over the budget of {} bytes for all task results; no new task is made until they are forgotten (a day after each finished)",
                self.total, self.in_all
            ));
        }
        Ok(())
    }

    /// Counts a finished result of `bytes` (its JSON) for `owner` at `now` when it fits what
    /// is left of both budgets; else counts nothing and says why (`Err`: the result is then
    /// not to be kept).
    pub(crate) fn keep(&mut self, owner: &str, bytes: u64, now: Instant) -> Result<(), String> {
        self.release(now);
        let mine = self.by_owner.get(owner).copied().unwrap_or(0);
        let (left_mine, left_all) = (
            self.per_owner.saturating_sub(mine),
            self.in_all.saturating_sub(self.total),
        );
        if bytes > left_mine || bytes > left_all {
            return Err(format!(
                "the call's result ({bytes} bytes of JSON) is too large to hold and was not kept: the finished tasks of {owner} hold {mine} of their budget of {} bytes for task results, and all hold {} of {}",
                self.per_owner, self.total, self.in_all
            ));
        }
        let b = self.by_owner.entry(owner.to_string()).or_insert(0);
        *b = b.saturating_add(bytes);
        self.total = self.total.saturating_add(bytes);
        let until = now.checked_add(RESULT_HELD_FOR).unwrap_or(now);
        self.held.push_back((owner.to_string(), bytes, until));
        Ok(())
    }
}

/// The length in bytes of `v` serialised as JSON (`u64::MAX` if it cannot be: fail closed),
/// measured without building the text.
pub(crate) fn json_len(v: &impl serde::Serialize) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .saturating_add(u64::try_from(b.len()).unwrap_or(u64::MAX));
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => u64::MAX,
    }
}

/// Whether a finished result of this many bytes may be kept: `Err(why)` keeps an error in
/// its place ([`task_run_kept`]).
pub(crate) type KeepResult = Box<dyn FnOnce(u64) -> Result<(), String> + Send>;

/// The results of this process's tasks run by [`task_run`]: the stdio proxy's, which serves
/// one client, so one budget of [`RESULT_BYTES_PER_AGENT`] for them all.
static PROCESS_RESULTS: LazyLock<Mutex<HeldResults>> = LazyLock::new(|| {
    Mutex::new(HeldResults::new(
        RESULT_BYTES_PER_AGENT,
        RESULT_BYTES_PER_AGENT,
    ))
});

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

/// [`task_run_kept`] with this process's one budget for task results (the stdio proxy's).
pub(crate) async fn task_run(
    tctx: rmcp::task_manager::TaskContext,
    done: oneshot::Receiver<Result<Value, TaskExit>>,
    held: Arc<HoldState>,
    name: String,
    withdraw: impl FnOnce() + Send,
) -> Result<rmcp::model::CallToolResult, TaskExit> {
    let keep: KeepResult = Box::new(|bytes| match PROCESS_RESULTS.lock() {
        Ok(mut r) => r.keep("this proxy", bytes, Instant::now()),
        Err(_) => Err("the proxy's count of task results is unusable".into()),
    });
    task_run_kept(tctx, done, held, name, keep, withdraw).await
}

/// The life of a call that became an MCP task, after its creation: the outcome from
/// `done` (a result `keep` refuses is not kept: the task fails with a JSON-RPC error saying
/// why, which `tasks/get` shows), the status message kept to what it waits for, and on
/// `tasks/cancel` — or when rmcp ends the task at its TTL — the wait withdrawn by `withdraw`
/// (a call already forwarded completes: cancellation is cooperative).
pub(crate) async fn task_run_kept(
    tctx: rmcp::task_manager::TaskContext,
    mut done: oneshot::Receiver<Result<Value, TaskExit>>,
    held: Arc<HoldState>,
    name: String,
    keep: KeepResult,
    withdraw: impl FnOnce() + Send,
) -> Result<rmcp::model::CallToolResult, TaskExit> {
    let mut watch = held.subscribe();
    let mut withdraw = Withdraw(Some(withdraw));
    let mut keep = Some(keep);
    loop {
        tokio::select! {
            r = &mut done => {
                // Settled: nothing to withdraw any more (`cancelled`: it was already).
                let cancelled = withdraw.0.take().is_none();
                // An upstream's error answer is held as the task's error as long as a result
                // is: it counts against the same budget (found by review: 16 MiB errors were
                // held uncounted).
                let value = match r.unwrap_or(Err(TaskExit::Cancelled)) {
                    Err(TaskExit::Error(e)) => {
                        let bytes = serde_json::to_vec(&e).map_or(u64::MAX, |v| v.len() as u64);
                        let kept = keep.take().map_or(Err("no budget".to_string()), |k| k(bytes));
                        return Err(TaskExit::Error(match kept {
                            Ok(()) => e,
                            Err(why) => rmcp::ErrorData::internal_error(why, None),
                        }));
                    }
                    other => other?,
                };
                let result = tool_result(&value)?;
                if cancelled && result.is_error == Some(true) && *held.borrow() != Hold::Forwarding {
                    return Err(TaskExit::Cancelled);
                }
                let ran = *held.borrow() == Hold::Forwarding;
                let what = if ran { format!("ran {name}") } else { format!("{name} was not run") };
                let kept = keep.take().map_or(Err("no budget".to_string()), |k| k(json_len(&result)));
                if let Err(why) = kept {
                    tctx.set_status_message(format!("{what}; its result was too large to hold"));
                    return Err(TaskExit::Error(rmcp::ErrorData::internal_error(why, None)));
                }
                tctx.set_status_message(what);
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

    /// A result that would take its owner (or all owners) past the budget is refused and
    /// counts nothing; results count until they are forgotten, then free their bytes.
    #[test]
    fn held_results_refuse_what_passes_a_budget_and_free_it_when_forgotten() {
        let mut r = HeldResults::new(100, 150);
        let t0 = Instant::now();
        assert!(r.keep("mallory", 60, t0).is_ok());
        let too_big = r.keep("mallory", 41, t0).unwrap_err();
        assert!(too_big.contains("too large to hold") && too_big.contains("100 bytes"));
        assert!(r.keep("mallory", 40, t0).is_ok(), "exactly the budget fits");
        let full = r.has_room("mallory", t0).unwrap_err();
        assert!(full.contains("budget of 100 bytes"), "{full}");
        assert!(r.has_room("alice", t0).is_ok());
        // All owners' budget: 100 held, 50 left.
        assert!(r.keep("alice", 51, t0).is_err());
        assert!(r.keep("alice", 50, t0).is_ok());
        assert!(r.has_room("bob", t0).unwrap_err().contains("150 bytes"));
        assert!(r.keep("bob", u64::MAX, t0).is_err(), "no overflow");
        let later = t0 + RESULT_HELD_FOR;
        assert!(r.has_room("mallory", later).is_ok(), "forgotten: freed");
        assert!(r.keep("bob", 100, later).is_ok());
        assert_eq!(json_len(&serde_json::json!({"a": "bc"})), 10);
    }

    /// Found by review: results were held whatever their bytes. A finished task whose result
    /// would pass its budget fails with an error saying so (what `tasks/get` shows); the task
    /// whose result was kept first is untouched.
    #[tokio::test]
    async fn a_result_past_the_budget_is_kept_as_an_error_not_held() {
        let tasks = rmcp::task_manager::TaskManager::new();
        let budget = Arc::new(Mutex::new(HeldResults::new(1000, 1000)));
        let big = serde_json::json!({"content": [{"type": "text", "text": "x".repeat(600)}]});
        // Each in turn, so the first is kept first.
        let mut got = Vec::new();
        for _ in 0..2 {
            got.push(settled(&tasks, &budget, Ok(big.clone())).await);
        }
        assert_eq!(got[0]["status"], "completed", "{}", got[0]);
        assert_eq!(got[1]["status"], "failed", "{}", got[1]);
        let why = got[1].to_string();
        assert!(why.contains("too large to hold"), "{why}");
        assert!(!why.contains("xxxxxxxx"), "the result was held: {why}");
    }

    /// A task of `tasks` run with `budget` (as agent `m`) that gets `answer`, once settled:
    /// its `tasks/get` view.
    async fn settled(
        tasks: &rmcp::task_manager::TaskManager,
        budget: &Arc<Mutex<HeldResults>>,
        answer: Result<Value, TaskExit>,
    ) -> Value {
        let (tx, rx) = oneshot::channel();
        let held = Arc::new(tokio::sync::watch::Sender::new(Hold::Forwarding));
        let b = budget.clone();
        let keep: KeepResult = Box::new(move |n| b.lock().unwrap().keep("m", n, Instant::now()));
        let t = tasks.spawn(TaskOptions::new(), move |tctx| {
            Box::pin(task_run_kept(tctx, rx, held, "t".into(), keep, || {}))
        });
        let _ = tx.send(answer);
        loop {
            let v = serde_json::to_value(tasks.get_task(&t.task_id).unwrap()).unwrap();
            if v["status"] != "working" {
                return v;
            }
            tokio::task::yield_now().await;
        }
    }

    /// Found by review: an upstream's error answer (up to 16 MiB of `message` and `data`, an
    /// echo of the arguments, say) was held as the failed task's error uncounted. It counts
    /// against the budget as a result does: past it, a short error is held instead, and a
    /// small result still fits afterwards.
    #[tokio::test]
    async fn an_upstream_error_past_the_budget_is_not_held_either() {
        let tasks = rmcp::task_manager::TaskManager::new();
        let budget = Arc::new(Mutex::new(HeldResults::new(1000, 1000)));
        let big = Err(TaskExit::Error(rmcp::ErrorData::internal_error(
            "x".repeat(2000),
            None,
        )));
        let small = Ok(serde_json::json!({"content": [{"type": "text", "text": "ok"}]}));
        let mut got = Vec::new();
        for answer in [big, small] {
            got.push(settled(&tasks, &budget, answer).await);
        }
        let first = got[0].to_string();
        assert_eq!(got[0]["status"], "failed", "{first}");
        assert!(!first.contains("xxxxxxxx"), "the error was held: {first}");
        assert_eq!(got[1]["status"], "completed", "{}", got[1]);
    }
}
