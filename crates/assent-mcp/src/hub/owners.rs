//! Who owns the hub's MCP tasks ([`TaskOwners`]), and how many one agent may hold
//! ([`MAX_TASKS_PER_AGENT`]).

use crate::tasks::TASK_TTL_MS;
use std::collections::HashMap;
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
/// takes), at most once a minute.
#[derive(Default)]
pub(super) struct TaskOwners {
    by_id: HashMap<String, (String, Instant)>,
    pruned: Option<Instant>,
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
        self.pruned = Some(now);
    }

    /// Whether `agent` may make one more task at `now` (fewer than [`MAX_TASKS_PER_AGENT`]).
    pub(super) fn has_room(&mut self, agent: &str, now: Instant) -> bool {
        self.prune(now);
        let held = self.by_id.values().filter(|(a, _)| a == agent).count();
        held < MAX_TASKS_PER_AGENT
    }

    /// Records task `id` of `agent`, made at `now`.
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
            assert!(o.has_room("mallory", t0));
            o.insert(format!("m{i}"), "mallory".into(), t0);
        }
        assert!(!o.has_room("mallory", t0), "the cap holds");
        assert!(
            o.has_room("alice", t0),
            "another agent is not held to mallory's"
        );
        assert_eq!(o.owner("m0"), Some("mallory"));
        // A minute before KEEP runs out they are all still held; after it, forgotten.
        let later = t0 + KEEP - Duration::from_secs(61);
        assert!(!o.has_room("mallory", later));
        let after = t0 + KEEP + Duration::from_secs(1);
        assert!(o.has_room("mallory", after));
        assert_eq!(o.owner("m0"), None);
    }
}
