//! Who owns the hub's MCP tasks ([`TaskOwners`]), how many one agent may hold
//! ([`MAX_TASKS_PER_AGENT`]), and how many bytes of their results
//! ([`RESULT_BYTES_PER_AGENT`](crate::tasks::RESULT_BYTES_PER_AGENT) an agent,
//! [`RESULT_BYTES_IN_ALL`](crate::tasks::RESULT_BYTES_IN_ALL) all agents).

use crate::tasks::{Budget, ResultSlot, TASK_TTL_MS};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most tasks one agent holds at the hub within [`KEEP`] (live, or finished and still
/// readable): a call of an agent at the cap is refused, not made a task. Found by review: an
/// agent that made held calls into tasks and cancelled them in a loop grew the hub's tasks
/// without bound — each kept for a day — and every `tasks/get` of every agent walks them all.
pub const MAX_TASKS_PER_AGENT: usize = 1_000;

/// How long rmcp may keep a task: it fails at its TTL, and a finished task stays readable for
/// a TTL more; and a minute's margin.
const KEEP: Duration = Duration::from_millis(2 * TASK_TTL_MS + 60_000);

/// The hub's tasks and the agent each belongs to, each kept for [`KEEP`] after it was made.
/// Forgetting is by age (found by review: asking rmcp whether each task was still there,
/// on every new task, cost time quadratic in the tasks held, under a lock every `tasks/get`
/// takes), at most once a minute. With them, the bytes of their results, held and set aside
/// ([`crate::tasks::HeldResults`], by agent and in all, shared with each task's
/// [`ResultSlot`]).
#[derive(Default)]
pub(super) struct TaskOwners {
    by_id: HashMap<String, (String, Instant)>,
    /// Each agent's places taken by calls not yet recorded ([`Place`]): as many as the
    /// handle's other clones.
    making: HashMap<String, Arc<()>>,
    pruned: Option<Instant>,
    results: Budget,
}

/// A call's place among its agent's tasks ([`TaskOwners::has_room`]), held from the check
/// until its task is recorded ([`TaskOwners::insert`]) or the call ends without one.
#[derive(Debug)]
pub(super) struct Place {
    _held: Arc<()>,
}

/// How an agent is named in the count of results (and in what the budget's refusals say).
fn holder(agent: &str) -> String {
    format!("agent `{agent}`")
}

impl TaskOwners {
    /// Forgets the tasks made more than [`KEEP`] before `now` (at most once a minute).
    fn prune(&mut self, now: Instant) {
        if self
            .pruned
            .is_some_and(|p| now.saturating_duration_since(p) < Duration::from_secs(60))
        {
            return;
        }
        self.by_id
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < KEEP);
        self.making.retain(|_, m| Arc::strong_count(m) > 1);
        self.pruned = Some(now);
    }

    /// Whether `agent` may make one more task at `now`, and if so its [`Place`]: it holds
    /// fewer than [`MAX_TASKS_PER_AGENT`] tasks and places, and at least
    /// [`TASK_RESULT_HEADROOM`](crate::tasks::TASK_RESULT_HEADROOM) is left of its budget for
    /// task results and of the hub's. `Err(why)` says which limit it reached. Attack (found by
    /// review): only tasks already recorded were counted, and a call is recorded once it is
    /// held, several awaits later, so many calls sent at once all passed the cap.
    pub(super) fn has_room(&mut self, agent: &str, now: Instant) -> Result<Place, String> {
        self.prune(now);
        let making = self
            .making
            .get(agent)
            .map_or(0, |m| Arc::strong_count(m) - 1);
        let held = self.by_id.values().filter(|(a, _)| a == agent).count() + making;
        if held >= MAX_TASKS_PER_AGENT {
            return Err(format!(
                "agent `{agent}` holds {MAX_TASKS_PER_AGENT} tasks at this hub (made in the last two days); no more are made until they age out"
            ));
        }
        match self.results.lock() {
            Ok(mut r) => r.has_room(&holder(agent), now)?,
            Err(_) => return Err("the count of task results is unusable".into()),
        }
        let held = self.making.entry(agent.to_string()).or_default().clone();
        Ok(Place { _held: held })
    }

    /// A place for one new task of `agent` in the budgets for task results (the agent's and
    /// the hub's): its call sets aside room for its result before it is forwarded, and its
    /// result is counted when it comes.
    pub(super) fn slot(&self, agent: &str) -> Arc<ResultSlot> {
        ResultSlot::new(self.results.clone(), holder(agent))
    }

    /// Records task `id` of `agent`, made at `now` (its [`Place`] may go once this is done).
    pub(super) fn insert(&mut self, id: String, agent: String, now: Instant) {
        self.prune(now);
        self.by_id.insert(id, (agent, now));
    }

    /// The agent task `id` belongs to, if the hub knows it.
    pub(super) fn owner(&self, id: &str) -> Option<&str> {
        self.by_id.get(id).map(|(a, _)| a.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_holds_at_most_the_cap_and_old_tasks_are_forgotten_by_age() {
        let mut o = TaskOwners::default();
        let t0 = Instant::now();
        for i in 0..MAX_TASKS_PER_AGENT {
            let place = o.has_room("mallory", t0).unwrap();
            o.insert(format!("m{i}"), "mallory".into(), t0);
            drop(place);
        }
        assert!(o.has_room("mallory", t0).is_err(), "the cap holds");
        assert!(
            o.has_room("alice", t0).is_ok(),
            "another agent is not held to mallory's"
        );
        assert_eq!(o.owner("m0"), Some("mallory"));
        // A minute before KEEP runs out they are all still held; after it, forgotten.
        let later = t0 + KEEP - Duration::from_secs(61);
        assert!(o.has_room("mallory", later).is_err());
        let after = t0 + KEEP + Duration::from_secs(1);
        assert!(o.has_room("mallory", after).is_ok());
        assert_eq!(o.owner("m0"), None);
    }

    /// Attack (found by review): calls sent at once all passed the cap, since a task was
    /// counted only once recorded, after its call was held. A place is counted from the
    /// check: the cap holds with none recorded yet, and a call that ends without a task gives
    /// its place back.
    #[test]
    fn calls_sent_at_once_cannot_pass_the_task_cap() {
        let mut o = TaskOwners::default();
        let t0 = Instant::now();
        let mut places: Vec<Place> = (0..MAX_TASKS_PER_AGENT)
            .map(|_| o.has_room("mallory", t0).unwrap())
            .collect();
        assert!(o.has_room("mallory", t0).is_err(), "the cap holds");
        assert!(o.has_room("alice", t0).is_ok());
        places.pop();
        let place = o.has_room("mallory", t0).expect("a place given back");
        o.insert("m0".into(), "mallory".into(), t0);
        drop(place);
        assert!(
            o.has_room("mallory", t0).is_err(),
            "the recorded task counts"
        );
    }

    /// Found by review: an agent could hold gigabytes of task results under the count cap.
    /// One whose results reach its byte budget makes no new task (the refusal names the
    /// budget); another agent still may; and the hub's budget holds across agents.
    #[test]
    fn an_agent_whose_results_fill_its_byte_budget_makes_no_new_task() {
        use crate::tasks::{RESULT_BYTES_IN_ALL, RESULT_BYTES_PER_AGENT};
        let mut o = TaskOwners::default();
        let t0 = Instant::now();
        o.insert("m0".into(), "mallory".into(), t0);
        assert!(o.slot("mallory").keep(RESULT_BYTES_PER_AGENT).is_ok());
        assert!(o.slot("mallory").keep(1).is_err(), "past the budget");
        let why = o.has_room("mallory", t0).unwrap_err();
        assert!(why.contains(&RESULT_BYTES_PER_AGENT.to_string()), "{why}");
        assert!(o.has_room("alice", t0).is_ok());
        let mut n = 0;
        while o
            .slot(&format!("a{n}"))
            .keep(RESULT_BYTES_PER_AGENT)
            .is_ok()
        {
            n += 1;
        }
        assert_eq!(
            (n + 1) * RESULT_BYTES_PER_AGENT,
            RESULT_BYTES_IN_ALL,
            "the hub's budget stops the agents'"
        );
        let why = o.has_room("alice", t0).unwrap_err();
        assert!(why.contains(&RESULT_BYTES_IN_ALL.to_string()), "{why}");
    }
}
