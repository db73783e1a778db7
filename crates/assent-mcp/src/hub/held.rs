//! The bytes the hub holds for calls in flight ([`HeldCalls`]), counted by the weight of the
//! arguments each keeps parsed ([`crate::kit::json_weight`]) from the moment it is taken until
//! it ends — answered, denied, withdrawn or stopped (its [`CallWeight`] dropped with its
//! `Call`) — against a bound per agent ([`MAX_HELD_BYTES_PER_AGENT`]) and one for the whole
//! hub ([`MAX_HELD_BYTES`]), as the stdio relay bounds its client's (`crate::held`). A call
//! past either is answered at once with a JSON-RPC error naming the bound ([`BUSY`]), never
//! gated. Found by review: the hub runs inside `assent serve`, a held call waits for a human
//! for hours, and nothing bounded how many an agent had in flight but the gateway's pending
//! approvals (100 an agent by default, none for calls that join one approval, and none for
//! calls waiting on a tool's review): forty calls of 250 KB of zeros, 4 MiB each parsed, took
//! the gateway's process past a gigabyte, and a few agents could have taken it down for all.

use crate::held::{HeldBytes, HeldGuard};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Bytes (by weight) the hub holds for one agent's calls in flight, over all its MCP sessions
/// (HTTP and stdio alike): 64 MiB, the stdio relay's bound for one client. An agent's call
/// alone is never refused for its size (the `/mcp` body bound, `max_arguments_bytes` and some
/// overhead, bounds it).
pub(super) const MAX_HELD_BYTES_PER_AGENT: usize = 64 << 20;

/// Bytes (by weight) the hub holds for every agent's calls in flight: 256 MiB. Past it a call
/// is refused whoever makes it (a call alone in the whole hub excepted).
pub(super) const MAX_HELD_BYTES: usize = 256 << 20;

/// The JSON-RPC error code of a call refused for the bytes held: `-32000` (server busy), as
/// the stdio relay's.
pub(super) const BUSY: i32 = -32000;

/// The bytes held for the hub's calls in flight: in all, and each agent's.
pub(super) struct HeldCalls {
    total: Arc<HeldBytes>,
    agents: Mutex<HashMap<String, Arc<HeldBytes>>>,
}

/// One call's weight, counted for its agent and in all until this is dropped.
pub(super) struct CallWeight {
    agent: HeldGuard,
    total: HeldGuard,
    /// What it counts now.
    weight: usize,
}

impl Default for HeldCalls {
    fn default() -> Self {
        Self {
            total: HeldBytes::named(MAX_HELD_BYTES, "the bytes held for all agents' calls"),
            agents: Mutex::default(),
        }
    }
}

impl HeldCalls {
    /// Counts a call of `agent` weighing `weight` bytes until the returned weight is dropped;
    /// `Err(why)` (nothing counted) when it would take the agent's bytes, or the hub's, past
    /// its bound: `why` names the bound. An agent's entry stays (agents are the gateway's
    /// configured ones, a bounded set).
    pub(super) fn take(&self, agent: &str, weight: usize) -> Result<CallWeight, String> {
        let of_agent = {
            let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            agents
                .entry(agent.to_string())
                .or_insert_with(|| {
                    HeldBytes::named(
                        MAX_HELD_BYTES_PER_AGENT,
                        "the bytes held for agent's calls in flight at this hub",
                    )
                })
                .clone()
        };
        let a = of_agent.take(weight)?;
        let t = self.total.take(weight)?;
        Ok(CallWeight {
            agent: a,
            total: t,
            weight,
        })
    }
}

impl CallWeight {
    /// Counts `weight` bytes for this call from now on, for its agent and in all, in place of
    /// what it counted (a call forwarded with an operator's edit keeps the edited arguments
    /// instead of its own). Less is always taken; more is refused (`Err(why)`, naming the
    /// bound; nothing changed) when it would take the agent's bytes, or the hub's, past its
    /// bound beside other calls ([`crate::held::HeldGuard::resize`], as the stdio relay
    /// refuses such an edit). Found by review: the hub counted a call by the arguments its
    /// agent sent, and an operator's edit (up to `max_arguments_bytes`, 64 MiB at most) was
    /// held uncounted, so edits could take the hub past both bounds.
    pub(super) fn resize(&mut self, weight: usize) -> Result<(), String> {
        self.agent.resize(weight)?;
        if let Err(why) = self.total.resize(weight) {
            // Back to what it counted: less is always taken.
            let _ = self.agent.resize(self.weight);
            return Err(why);
        }
        self.weight = weight;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attack (memory): one agent's calls past its bound are refused while another agent's
    /// are still taken; a refused call counts nowhere, and a dropped one frees its bytes.
    #[test]
    fn an_agent_past_its_bound_is_refused_and_others_are_not() {
        let held = HeldCalls::default();
        let a = held.take("a", MAX_HELD_BYTES_PER_AGENT).unwrap();
        let why = held.take("a", 1).err().expect("past the agent's bound");
        assert!(why.contains("bytes held for agent's calls"), "{why}");
        let b = held.take("b", 1 << 20).unwrap();
        drop(a);
        let _a = held.take("a", 1).unwrap();
        drop(b);
    }

    /// Attack (memory): an operator's edit grows a held call past its agent's bound beside
    /// the agent's other calls: refused, and nothing changes (the agent's other calls and
    /// another agent's are still counted as they were); within the bound it is counted.
    #[test]
    fn an_edit_past_the_agents_bound_is_refused_and_changes_nothing() {
        let held = HeldCalls::default();
        let _big = held.take("a", MAX_HELD_BYTES_PER_AGENT - 10).unwrap();
        let mut small = held.take("a", 5).unwrap();
        let why = small.resize(20).expect_err("past the agent's bound");
        assert!(why.contains("as approved (20 bytes)"), "{why}");
        assert!(held.take("a", 5).is_ok(), "the refused edit counts nothing");
        small.resize(10).unwrap();
        assert!(
            held.take("a", 1).is_err(),
            "the edit within the bound counts"
        );
        small.resize(1).unwrap();
        assert!(held.take("a", 9).is_ok(), "a smaller edit frees the rest");
    }

    /// Attack (memory): an edit past the hub's bound (its agent's within its own) is refused,
    /// and its agent's count is put back as it was.
    #[test]
    fn an_edit_past_the_hub_bound_is_refused_and_its_agent_count_restored() {
        let held = HeldCalls::default();
        let per = MAX_HELD_BYTES_PER_AGENT;
        let _kept: Vec<_> = (0..MAX_HELD_BYTES / per - 1)
            .map(|i| held.take(&format!("agent-{i}"), per).unwrap())
            .collect();
        let _other = held.take("a", per - 100).unwrap();
        let mut small = held.take("b", 1).unwrap();
        let why = small.resize(200).expect_err("past the hub's bound");
        assert!(why.contains("all agents' calls"), "{why}");
        assert!(
            held.take("b", per - 1).is_err(),
            "past the hub's bound still"
        );
        drop(_other);
        assert!(held.take("b", per - 1).is_ok(), "b still counts 1 byte");
    }

    /// Attack (memory): many agents together are bounded by the hub's bound.
    #[test]
    fn agents_together_are_refused_past_the_hub_bound() {
        let held = HeldCalls::default();
        let per = MAX_HELD_BYTES_PER_AGENT;
        let kept: Vec<_> = (0..MAX_HELD_BYTES / per)
            .map(|i| held.take(&format!("agent-{i}"), per).unwrap())
            .collect();
        let why = held.take("late", 1).err().expect("past the hub's bound");
        assert!(why.contains("all agents' calls"), "{why}");
        drop(kept);
        assert!(held.take("late", 1).is_ok());
    }
}
