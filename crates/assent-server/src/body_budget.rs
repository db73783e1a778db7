//! The request-body bytes each principal may have the gateway hold at once while their bodies
//! arrive ([`BodyBudget`], [`MAX_BODY_BYTES_IN_FLIGHT`]): kit for `edge.rs`'s body reader. It
//! knows no route, no store and no policy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most request-body bytes one principal's requests may have in flight (being read) at
/// once: 32 MiB, a hundred bodies at the default limit (`max_arguments_bytes` and 64 KiB).
/// Found by review: a known key's body was read up to the body limit on each of up to 1,000
/// connections per address for the body-read timeout, so one agent's key from ten addresses
/// had the gateway hold gigabytes.
pub const MAX_BODY_BYTES_IN_FLIGHT: usize = 32 * 1024 * 1024;

/// Bytes in flight per principal name; a principal with none has no entry.
#[derive(Debug, Default)]
pub struct BodyBudget(Arc<Mutex<HashMap<String, usize>>>);

/// `bytes` of a principal's budget, given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Arc<Mutex<HashMap<String, usize>>>,
    name: String,
    bytes: usize,
}

impl BodyBudget {
    /// Takes `bytes` of `name`'s budget: `None` when that would pass
    /// [`MAX_BODY_BYTES_IN_FLIGHT`] (a body larger than the whole budget is taken only when
    /// nothing else is in flight, so no body within the limit is refused for ever).
    pub fn take(&self, name: &str, bytes: usize) -> Option<Held> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let used = m.get(name).copied().unwrap_or(0);
        if used > 0 && used.saturating_add(bytes) > MAX_BODY_BYTES_IN_FLIGHT {
            return None;
        }
        *m.entry(name.to_string()).or_default() += bytes;
        Some(Held {
            budget: self.0.clone(),
            name: name.to_string(),
            bytes,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut m = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(used) = m.get_mut(&self.name) {
            *used = used.saturating_sub(self.bytes);
            if *used == 0 {
                m.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_its_budget_and_gets_it_back() {
        let b = BodyBudget::default();
        let big = b.take("bot", MAX_BODY_BYTES_IN_FLIGHT - 10).unwrap();
        assert!(b.take("bot", 11).is_none(), "past the budget");
        let small = b.take("bot", 10).unwrap();
        assert!(b.take("alice", 1_000).is_some(), "another principal's own");
        drop(big);
        assert!(b.take("bot", 1_000).is_some());
        drop(small);
        assert!(b.0.lock().unwrap().is_empty(), "nothing left in flight");
        // A body over the whole budget, alone, is still read.
        assert!(b.take("bot", MAX_BODY_BYTES_IN_FLIGHT + 1).is_some());
    }
}
