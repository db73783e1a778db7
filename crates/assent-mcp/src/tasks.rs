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
/// that would go past it is not kept, an error is kept in its place ([`task_run`]); and an
/// agent (a proxy) with less than [`TASK_RESULT_HEADROOM`] of it left makes no new task
/// until its results are forgotten. Found by review: tasks were capped in number only, and
/// each result may be 16 MiB, so one agent could have the gateway hold gigabytes by making
/// tasks and never reading them.
pub(crate) const RESULT_BYTES_PER_AGENT: u64 = 64 << 20;

/// The bytes of budget a task's call sets aside for its result before it is forwarded
/// upstream (1 MiB, [`ResultSlot::reserve`]), and the least that must be left of a budget
/// for a new task to be made ([`HeldResults::has_room`]). A result weighing no more (as
/// [`held_weight`] counts it, what it holds parsed: a result of many small JSON values weighs
/// far more than its text) is always held; a larger one is held when what is left (the reservation included) takes it, else
/// the task fails saying so (the result was reported to the gateway first, so its
/// `call.result` record has it). Found by review: a task was made, and its call forwarded,
/// with a budget that had a few bytes left, or none at the proxy, so a side-effecting call ran
/// and what it returned was dropped. At 1 MiB, 64 calls of one agent run as tasks at once.
pub(crate) const TASK_RESULT_HEADROOM: u64 = 1 << 20;

/// The most bytes of finished task results (serialised JSON) all agents' MCP tasks hold at
/// one hub (512 MiB), kept as [`RESULT_BYTES_PER_AGENT`] is.
pub(crate) const RESULT_BYTES_IN_ALL: u64 = 512 << 20;

/// How long a kept result counts against the budgets: rmcp keeps a finished task for a TTL
/// after it finished (reading it frees nothing: `tasks/get` may be asked again), and a
/// minute's margin.
const RESULT_HELD_FOR: Duration = Duration::from_millis(TASK_TTL_MS + 60_000);

/// The bytes of finished task results held, by owner (an agent at a hub) and in all, each
/// counted for [`RESULT_HELD_FOR`] after it was kept, and the bytes set aside for the results
/// of calls forwarded and not yet answered ([`ResultSlot`]), which count against the same
/// budgets until the result comes. Counts saturate; nothing here panics.
pub(crate) struct HeldResults {
    /// Each kept result's owner, bytes and when it stops counting, oldest first.
    held: VecDeque<(String, u64, Instant)>,
    by_owner: HashMap<String, u64>,
    total: u64,
    /// Bytes set aside, by owner and in all.
    reserved: HashMap<String, u64>,
    reserved_total: u64,
    /// The budgets: bytes per owner, and in all; and the least left for a new task.
    per_owner: u64,
    in_all: u64,
    headroom: u64,
}

impl Default for HeldResults {
    /// [`RESULT_BYTES_PER_AGENT`] per owner and [`RESULT_BYTES_IN_ALL`] in all, with
    /// [`TASK_RESULT_HEADROOM`].
    fn default() -> Self {
        Self::new(
            RESULT_BYTES_PER_AGENT,
            RESULT_BYTES_IN_ALL,
            TASK_RESULT_HEADROOM,
        )
    }
}

impl HeldResults {
    /// No results held; budgets of `per_owner` bytes for one owner and `in_all` in all, and
    /// `headroom` bytes the least left of both for a new task (and set aside by each call
    /// forwarded as one).
    pub(crate) fn new(per_owner: u64, in_all: u64, headroom: u64) -> Self {
        Self {
            held: VecDeque::new(),
            by_owner: HashMap::new(),
            total: 0,
            reserved: HashMap::new(),
            reserved_total: 0,
            per_owner,
            in_all,
            headroom,
        }
    }

    /// What `owner` holds (kept and set aside), and what is left of its budget and of all.
    fn left(&self, owner: &str) -> (u64, u64, u64) {
        let mine = (self.by_owner.get(owner).copied().unwrap_or(0))
            .saturating_add(self.reserved.get(owner).copied().unwrap_or(0));
        let all = self.total.saturating_add(self.reserved_total);
        (
            mine,
            self.per_owner.saturating_sub(mine),
            self.in_all.saturating_sub(all),
        )
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

    /// `Err(why)` when less than the headroom ([`TASK_RESULT_HEADROOM`]) is left at `now` of
    /// `owner`'s budget or of all owners' (results kept and set aside both count): no new
    /// task should then be made for `owner`, as the result of its call might not be held.
    /// `why` names the budget, and says to retry later or call without a task.
    pub(crate) fn has_room(&mut self, owner: &str, now: Instant) -> Result<(), String> {
        self.release(now);
        let (mine, left_mine, left_all) = self.left(owner);
        if left_mine < self.headroom {
            return Err(format!(
                "the task-result budget is full: the tasks of {owner} hold or await {mine} bytes of results, of its budget of {} bytes, and a task needs {} bytes left; no new task is made until results are forgotten (a day after each finished) or running calls end: retry later, or call without the tasks extension",
                self.per_owner, self.headroom
            ));
        }
        if left_all < self.headroom {
            return Err(format!(
                "the task-result budget is full: all tasks here hold or await {} bytes of results, of the budget of {} bytes for all task results, and a task needs {} bytes left; no new task is made until results are forgotten (a day after each finished) or running calls end: retry later, or call without the tasks extension",
                self.in_all.saturating_sub(left_all),
                self.in_all,
                self.headroom
            ));
        }
        Ok(())
    }

    /// Sets aside the headroom ([`TASK_RESULT_HEADROOM`]) of `owner`'s budget (and all
    /// owners') at `now` for a result still to come, when that much is left: `Ok` with the
    /// bytes set aside; else sets aside nothing and says why (`Err`: the call is then not to
    /// be forwarded). Undone by [`HeldResults::unreserve`].
    fn reserve(&mut self, owner: &str, now: Instant) -> Result<u64, String> {
        self.release(now);
        let bytes = self.headroom;
        let (mine, left_mine, left_all) = self.left(owner);
        if bytes > left_mine || bytes > left_all {
            return Err(format!(
                "the task-result budget is full: the call was not run, as its result could not be held (the tasks of {owner} hold or await {mine} bytes of results, of its budget of {} bytes, and all {} of {}); retry later, or call without the tasks extension",
                self.per_owner,
                self.in_all.saturating_sub(left_all),
                self.in_all
            ));
        }
        let r = self.reserved.entry(owner.to_string()).or_insert(0);
        *r = r.saturating_add(bytes);
        self.reserved_total = self.reserved_total.saturating_add(bytes);
        Ok(bytes)
    }

    /// Frees `bytes` that [`HeldResults::reserve`] set aside for `owner`.
    fn unreserve(&mut self, owner: &str, bytes: u64) {
        if let Some(r) = self.reserved.get_mut(owner) {
            *r = r.saturating_sub(bytes);
            if *r == 0 {
                self.reserved.remove(owner);
            }
        }
        self.reserved_total = self.reserved_total.saturating_sub(bytes);
    }

    /// Counts a finished result of `bytes` (its JSON) for `owner` at `now` when it fits what
    /// is left of both budgets (what others set aside counts as used); else counts nothing
    /// and says why (`Err`: the result is then not to be kept).
    fn keep(&mut self, owner: &str, bytes: u64, now: Instant) -> Result<(), String> {
        self.release(now);
        let (mine, left_mine, left_all) = self.left(owner);
        if bytes > left_mine || bytes > left_all {
            return Err(format!(
                "the call's result (weighing {bytes} bytes held parsed) is too large to hold and was not kept (it was reported to the gateway): the tasks of {owner} hold or await {mine} bytes of their budget of {} bytes for task results, and all {} of {}",
                self.per_owner,
                self.in_all.saturating_sub(left_all),
                self.in_all
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

/// What holding `v` parsed costs, in bytes: [`assent_core::json::json_weight`] (its text plus
/// the pieces and nodes a parsed value keeps); `u64::MAX` when it cannot be serialised (fail
/// closed). Found by review: a result was counted as the length of its text, but rmcp holds
/// it parsed for a day, so `[0,0,…]` (2 bytes an element, about 32 parsed) let an agent's
/// budget hold some 16 times what it says.
pub(crate) fn held_weight(v: &impl serde::Serialize) -> u64 {
    match assent_core::json::json_weight(v) {
        0 => u64::MAX,
        w => u64::try_from(w).unwrap_or(u64::MAX),
    }
}

/// A budget of held task results, shared by the tasks that count against it.
pub(crate) type Budget = Arc<Mutex<HeldResults>>;

/// One task's place in a [`Budget`] (of its owner): the headroom its call sets aside before
/// it is forwarded ([`ResultSlot::reserve`]), and its result counted when it comes
/// ([`ResultSlot::keep`], which frees what was set aside). Dropped with anything still set
/// aside (the task ended without a result), that is freed.
pub(crate) struct ResultSlot {
    budget: Budget,
    owner: String,
    /// Bytes this slot has set aside now.
    reserved: Mutex<u64>,
}

impl ResultSlot {
    /// A place for one task of `owner` (how the budget's refusals name it) in `budget`.
    pub(crate) fn new(budget: Budget, owner: String) -> Arc<Self> {
        Arc::new(Self {
            budget,
            owner,
            reserved: Mutex::new(0),
        })
    }

    /// Sets aside the budget's headroom ([`TASK_RESULT_HEADROOM`]) for the result of the
    /// task's call, to be done
    /// before the call is forwarded upstream (once: again it does nothing). `Err(why)` when
    /// the budget has not that much left: the call must then not be forwarded, as what it
    /// returns might not be held (fail closed, also when the count is unusable).
    pub(crate) fn reserve(&self) -> Result<(), String> {
        let mut mine = self.reserved.lock().map_err(|_| UNUSABLE.to_string())?;
        if *mine > 0 {
            return Ok(());
        }
        let mut b = self.budget.lock().map_err(|_| UNUSABLE.to_string())?;
        *mine = b.reserve(&self.owner, Instant::now())?;
        Ok(())
    }

    /// Counts the task's finished result weighing `bytes` ([`held_weight`]), what this slot set aside
    /// freed first (so a result within [`TASK_RESULT_HEADROOM`] always fits); `Err(why)`
    /// when it does not fit what is left: the result is then not to be kept.
    pub(crate) fn keep(&self, bytes: u64) -> Result<(), String> {
        let mut mine = self.reserved.lock().map_err(|_| UNUSABLE.to_string())?;
        let mut b = self.budget.lock().map_err(|_| UNUSABLE.to_string())?;
        b.unreserve(&self.owner, std::mem::take(&mut *mine));
        b.keep(&self.owner, bytes, Instant::now())
    }
}

impl Drop for ResultSlot {
    /// Frees what this slot still sets aside.
    fn drop(&mut self) {
        let mine = self.reserved.get_mut().map_or(0, std::mem::take);
        if mine > 0
            && let Ok(mut b) = self.budget.lock()
        {
            b.unreserve(&self.owner, mine);
        }
    }
}

/// Why a count of task results could not be used (a panic poisoned its lock).
const UNUSABLE: &str = "the count of task results is unusable";

/// The results of this process's tasks: the stdio proxy's, which serves one client, so one
/// budget of [`RESULT_BYTES_PER_AGENT`] for them all.
static PROCESS_RESULTS: LazyLock<Budget> = LazyLock::new(|| {
    Arc::new(Mutex::new(HeldResults::new(
        RESULT_BYTES_PER_AGENT,
        RESULT_BYTES_PER_AGENT,
        TASK_RESULT_HEADROOM,
    )))
});

/// How this process's tasks are named in the budget's refusals.
const PROCESS_OWNER: &str = "this proxy";

/// A place for a new task of this process (the stdio proxy) in its one budget.
pub(crate) fn process_slot() -> Arc<ResultSlot> {
    ResultSlot::new(PROCESS_RESULTS.clone(), PROCESS_OWNER.into())
}

/// Whether this process (the stdio proxy) may make a new task now
/// ([`HeldResults::has_room`]); `Err(why)` to answer the call with.
pub(crate) fn process_has_room() -> Result<(), String> {
    match PROCESS_RESULTS.lock() {
        Ok(mut r) => r.has_room(PROCESS_OWNER, Instant::now()),
        Err(_) => Err(UNUSABLE.into()),
    }
}

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
/// `done` (a result its `slot` does not keep is not held: the task fails with a JSON-RPC
/// error saying why, which `tasks/get` shows), the status message kept to what it waits for,
/// and on `tasks/cancel` — or when rmcp ends the task at its TTL — the wait withdrawn by
/// `withdraw` (a call already forwarded completes: cancellation is cooperative). The call's
/// job sets aside room for the result in the same `slot` before it forwards the call
/// ([`ResultSlot::reserve`]).
pub(crate) async fn task_run(
    tctx: rmcp::task_manager::TaskContext,
    mut done: oneshot::Receiver<Result<Value, TaskExit>>,
    held: Arc<HoldState>,
    name: String,
    slot: Arc<ResultSlot>,
    withdraw: impl FnOnce() + Send,
) -> Result<rmcp::model::CallToolResult, TaskExit> {
    let mut watch = held.subscribe();
    let mut withdraw = Withdraw(Some(withdraw));
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
                        let kept = slot.keep(held_weight(&e));
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
                let kept = slot.keep(held_weight(&result));
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
                let slot = ResultSlot::new(Arc::default(), "m".into());
                Box::pin(task_run(tctx, done, held, "t".into(), slot, move || {
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
        let mut r = HeldResults::new(100, 150, 1);
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
        assert!(
            held_weight(&serde_json::json!({"a": "bc"})) >= 10,
            "at least its text"
        );
    }

    /// Found by review: results were held whatever their bytes. A finished task whose result
    /// would pass its budget fails with an error saying so (what `tasks/get` shows); the task
    /// whose result was kept first is untouched.
    #[tokio::test]
    async fn a_result_past_the_budget_is_kept_as_an_error_not_held() {
        let tasks = rmcp::task_manager::TaskManager::new();
        let budget = Arc::new(Mutex::new(HeldResults::new(4000, 4000, 1)));
        // Its text is some 640 bytes; it weighs about 2,500 held parsed.
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
        let slot = ResultSlot::new(budget.clone(), "m".into());
        let t = tasks.spawn(TaskOptions::new(), move |tctx| {
            Box::pin(task_run(tctx, rx, held, "t".into(), slot, || {}))
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

    /// Attack (found by review): a result counted by the length of its text was held parsed,
    /// so an upstream answering `structuredContent: [0,0,…]` (2 bytes of text an element, some
    /// 32 parsed) filled some 16 times an agent's budget. It counts what it holds parsed: a
    /// result whose text fits the budget and whose parsed weight does not is refused.
    #[tokio::test]
    async fn a_heavy_result_counts_its_parsed_weight_against_the_budget() {
        let tasks = rmcp::task_manager::TaskManager::new();
        let budget = Arc::new(Mutex::new(HeldResults::new(64 << 10, 64 << 10, 1)));
        let zeros = serde_json::json!({"content": [], "structuredContent": vec![0; 10_000]});
        assert!(
            zeros.to_string().len() < 64 << 10,
            "its text fits the budget"
        );
        let got = settled(&tasks, &budget, Ok(zeros)).await;
        assert_eq!(got["status"], "failed", "{got}");
        assert!(got.to_string().contains("too large to hold"), "{got}");
    }

    /// Found by review: an upstream's error answer (up to 16 MiB of `message` and `data`, an
    /// echo of the arguments, say) was held as the failed task's error uncounted. It counts
    /// against the budget as a result does: past it, a short error is held instead, and a
    /// small result still fits afterwards.
    #[tokio::test]
    async fn an_upstream_error_past_the_budget_is_not_held_either() {
        let tasks = rmcp::task_manager::TaskManager::new();
        let budget = Arc::new(Mutex::new(HeldResults::new(4000, 4000, 1)));
        let big = Err(TaskExit::Error(rmcp::ErrorData::internal_error(
            "x".repeat(5000),
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

    /// Found by review: a task was made with a few bytes of its budget left (the hub refused
    /// only an owner with none left), so a call ran whose result could not be held. Less than
    /// the headroom left, of the owner's budget or of all, makes no new task; the refusal says
    /// the budget is full and to retry later or call without a task.
    #[test]
    fn no_task_is_made_with_less_than_the_headroom_left_for_its_result() {
        let mut r = HeldResults::new(100, 1000, 10);
        let t0 = Instant::now();
        assert!(r.keep("mallory", 85, t0).is_ok());
        assert!(r.has_room("mallory", t0).is_ok(), "15 bytes left");
        assert!(r.keep("mallory", 6, t0).is_ok());
        let why = r.has_room("mallory", t0).unwrap_err();
        assert!(why.contains("task-result budget is full"), "{why}");
        assert!(why.contains("retry later"), "{why}");
        assert!(r.has_room("alice", t0).is_ok());
        let mut all = HeldResults::new(1000, 100, 10);
        assert!(all.keep("alice", 91, t0).is_ok());
        let why = all.has_room("bob", t0).unwrap_err();
        assert!(why.contains("budget of 100 bytes for all"), "{why}");
    }

    /// Attack: calls forwarded as tasks one after another, each finding the headroom left,
    /// then their results filling the budget (or another agent's filling the hub's) so that
    /// a side-effecting call ran and what it returned was dropped. Each forwarded call sets
    /// aside the headroom first: once none is left no further call may be forwarded, a
    /// result within what was set aside is always held, others' results cannot take that
    /// room, and what a slot set aside is freed when its result comes or it is dropped.
    #[test]
    fn a_result_set_aside_for_before_forwarding_is_always_held() {
        let budget: Budget = Arc::new(Mutex::new(HeldResults::new(1000, 100, 30)));
        let slot = |owner: &str| ResultSlot::new(budget.clone(), owner.into());
        let (a, b, c) = (slot("m"), slot("m"), slot("other"));
        assert!(a.reserve().is_ok());
        assert!(a.reserve().is_ok(), "once per slot");
        assert!(b.reserve().is_ok());
        let why = c.keep(41).unwrap_err();
        assert!(why.contains("too large to hold"), "{why}");
        assert!(c.keep(40).is_ok(), "what was not set aside");
        let why = slot("m").reserve().unwrap_err();
        assert!(why.contains("was not run"), "{why}");
        assert!(a.keep(30).is_ok(), "a result within what was set aside");
        assert!(b.keep(20).is_ok());
        // 90 held, nothing set aside: 10 left.
        assert!(slot("m").keep(11).is_err());
        // A slot dropped without a result frees what it set aside.
        let budget: Budget = Arc::new(Mutex::new(HeldResults::new(1000, 50, 30)));
        let (d, e) = (
            ResultSlot::new(budget.clone(), "m".into()),
            ResultSlot::new(budget.clone(), "m".into()),
        );
        assert!(d.reserve().is_ok());
        assert!(e.reserve().is_err(), "20 left");
        drop(d);
        assert!(e.reserve().is_ok(), "freed when its slot was dropped");
    }
}
