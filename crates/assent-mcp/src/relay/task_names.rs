//! The relay's names for its tasks (`approval-ID` → the task manager's id) and the bounds on
//! what a client's `tasks/*` requests about tasks this process does not know can start:
//! resumes from the gateway ([`MAX_RUNNING_TASKS`] running at once, [`MAX_TASK_NAMES`] names
//! kept) and withdrawals at the gateway ([`MAX_WITHDRAWALS`] in flight). Found by review: a
//! client sending `tasks/get` for ever new made-up `approval-…` ids started a gateway read
//! and a task for each, none of it counted (`tasks/*` is never refused as one request too
//! many), so a burst put any number of requests in flight at once, each ended task's result
//! counted against the process's task-result budget for a day (refusing real task-mode calls
//! once it was full), and the names were never forgotten.

use crate::tasks::TASK_TTL_MS;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many task names the relay keeps at most; past it, names older than a task is readable
/// ([`NAME_KEPT_FOR`]) are forgotten, and no task is resumed while it is still full.
pub(super) const MAX_TASK_NAMES: usize = 10_000;
/// How many of the relay's tasks may be running when a `tasks/get` resumes another one (the
/// hub's per-agent bound, `MAX_TASKS_PER_AGENT`, is the same).
pub(super) const MAX_RUNNING_TASKS: usize = 1_000;
/// How many withdrawals of unknown tasks' approvals (`tasks/cancel`) may be in flight at once.
pub(super) const MAX_WITHDRAWALS: usize = 64;
/// How long a name is worth keeping: as long as rmcp keeps a task readable — a finished task
/// stays for a TTL more, so two TTLs from its start (the hub keeps its owners as long) — and a
/// minute. Found by review: kept one TTL, a task finished late on its first day lost its name
/// while its result was still there, and a `tasks/get` resumed it from the gateway instead.
const NAME_KEPT_FOR: Duration = Duration::from_millis(2 * TASK_TTL_MS + 60_000);

/// The task names, each with when it was given, and the withdrawals in flight.
#[derive(Default)]
pub(super) struct TaskNames {
    names: Mutex<HashMap<String, (String, Instant)>>,
    withdrawing: Arc<AtomicUsize>,
}

/// One withdrawal in flight, counted until dropped.
pub(super) struct Withdrawal(Arc<AtomicUsize>);

impl Drop for Withdrawal {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl TaskNames {
    /// The task manager's id of the task named `ext`, if the relay gave that name.
    pub(super) fn get(&self, ext: &str) -> Option<String> {
        let names = self.names.lock().expect("task names");
        names.get(ext).map(|(local, _)| local.clone())
    }

    /// Names task `local` `ext` (a held call that became a task is always named: the number
    /// of those is bounded by the calls in flight). Names past their task's life are
    /// forgotten first when [`MAX_TASK_NAMES`] are kept.
    pub(super) fn insert(&self, ext: String, local: String) {
        let mut names = self.names.lock().expect("task names");
        forget_old(&mut names, Instant::now());
        names.insert(ext, (local, Instant::now()));
    }

    /// Why a task this process does not know may not be resumed now, if it may not:
    /// [`MAX_TASK_NAMES`] names are kept that are younger than their task's life, or
    /// `running` (the relay's tasks still running) reached [`MAX_RUNNING_TASKS`].
    pub(super) fn resume_refused(&self, running: usize) -> Option<String> {
        let mut names = self.names.lock().expect("task names");
        forget_old(&mut names, Instant::now());
        if names.len() >= MAX_TASK_NAMES {
            return Some(format!(
                "assent: {MAX_TASK_NAMES} tasks were named in the last two days; no more are resumed until they age out"
            ));
        }
        (running >= MAX_RUNNING_TASKS).then(|| {
            format!(
                "assent: {MAX_RUNNING_TASKS} tasks are running already; resume more once some have ended"
            )
        })
    }

    /// A count of one more withdrawal in flight, or `None` when [`MAX_WITHDRAWALS`] are.
    pub(super) fn withdrawal(&self) -> Option<Withdrawal> {
        let n = &self.withdrawing;
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            (v < MAX_WITHDRAWALS).then_some(v + 1)
        })
        .ok()
        .map(|_| Withdrawal(n.clone()))
    }
}

/// Forgets, when [`MAX_TASK_NAMES`] are kept, the names older than [`NAME_KEPT_FOR`] at `now`.
fn forget_old(names: &mut HashMap<String, (String, Instant)>, now: Instant) {
    if names.len() >= MAX_TASK_NAMES {
        names.retain(|_, (_, at)| now.saturating_duration_since(*at) < NAME_KEPT_FOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_and_old_ones_forgotten() {
        let t = TaskNames::default();
        for i in 0..MAX_TASK_NAMES {
            t.insert(format!("approval-{i}"), format!("l{i}"));
        }
        assert_eq!(t.get("approval-7").as_deref(), Some("l7"));
        assert!(t.resume_refused(0).is_some(), "full of young names");
        // Aged past a task's life, the names are forgotten and resumes go on.
        let old = Instant::now() - NAME_KEPT_FOR - Duration::from_secs(1);
        t.names.lock().unwrap().values_mut().for_each(|v| v.1 = old);
        assert!(t.resume_refused(0).is_none());
        assert!(t.get("approval-7").is_none());
        assert!(t.resume_refused(MAX_RUNNING_TASKS).is_some());
    }

    #[test]
    fn withdrawals_in_flight_are_bounded_and_released() {
        let t = TaskNames::default();
        let held: Vec<Withdrawal> = (0..MAX_WITHDRAWALS)
            .filter_map(|_| t.withdrawal())
            .collect();
        assert_eq!(held.len(), MAX_WITHDRAWALS);
        assert!(t.withdrawal().is_none());
        drop(held);
        assert!(t.withdrawal().is_some());
    }
}
