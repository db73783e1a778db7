//! The bytes an MCP front end holds for calls in flight ([`HeldBytes`]), shared by the stdio
//! relay (one client's calls, `crate::relay`) and the hub (an agent's calls, and all of them,
//! `crate::hub`): each `tools/call` is counted by the weight of what is kept of it parsed
//! ([`crate::kit::json_weight`]: its text plus 32 bytes a piece, about what a parsed value
//! costs) from the moment it is read until it is answered, withdrawn or given up (its
//! [`HeldGuard`] dropped); a call that would take the total past the bound is refused with
//! why (a JSON-RPC error, `-32000`), never gated. A call alone is always taken (nothing else
//! held), so that no call is refused for its size alone. Counters saturate.
//!
//! The relay's story of the bound is `crate::relay::held`'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes held by calls in flight, and the most allowed ([`HeldBytes::take`]).
pub(crate) struct HeldBytes {
    used: AtomicUsize,
    max: usize,
    /// What the bound is on, in its refusals (`the bytes held for calls in flight`).
    what: &'static str,
}

/// One call's bytes, counted in its [`HeldBytes`] until this is dropped.
pub(crate) struct HeldGuard {
    of: Arc<HeldBytes>,
    len: usize,
}

impl HeldBytes {
    /// Nothing held; at most `max` bytes (the bound on `the bytes held for calls in flight`).
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Self::named(max, "the bytes held for calls in flight")
    }

    /// Nothing held; at most `max` bytes, the bound on `what` (named in its refusals).
    pub(crate) fn named(max: usize, what: &'static str) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            max,
            what,
        })
    }

    /// Counts a call of `len` bytes until the returned guard is dropped; `Err(why)` (nothing
    /// counted) when that would take the total past the bound and something is held already
    /// (a call alone is always taken): `why` names the bound, what is held and the call's size.
    pub(crate) fn take(self: &Arc<Self>, len: usize) -> Result<HeldGuard, String> {
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let after = used.saturating_add(len);
            if after > self.max && used > 0 {
                return Err(format!(
                    "assent: the calls in flight hold {used} bytes of the {} MiB bound on {}, and this call ({len} bytes) would exceed it; send it once some are answered",
                    self.max >> 20,
                    self.what
                ));
            }
            match self
                .used
                .compare_exchange(used, after, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    return Ok(HeldGuard {
                        of: self.clone(),
                        len,
                    });
                }
                Err(now) => used = now,
            }
        }
    }

    /// How many bytes are held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }
}

impl HeldGuard {
    /// Counts `len` bytes for this call from now on, in place of what it counted (what the
    /// relay keeps of a forwarded call: the text of the arguments it runs with). Less is always
    /// taken; more is refused (`Err(why)`, nothing changed) when it would take the total past
    /// the bound and other calls hold bytes too, as [`HeldBytes::take`] refuses a new call.
    /// Found by review: a call forwarded with an operator's edit kept the edited arguments
    /// (up to the gateway's `max_arguments_bytes`, 64 MiB at most, each) and counted them
    /// whatever the total, so edits could push it past the bound.
    pub(crate) fn resize(&mut self, len: usize) -> Result<(), String> {
        let was = self.len;
        let (max, what) = (self.of.max, self.of.what);
        self.of
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                let others = u.saturating_sub(was);
                let after = others.saturating_add(len);
                (len <= was || after <= max || others == 0).then_some(after)
            })
            .map_err(|u| {
                format!(
                    "assent: the calls in flight hold {} bytes of the {} MiB bound on {what}, and this call as approved ({len} bytes) would exceed it; it was not run: send it again once some are answered",
                    u.saturating_sub(was),
                    max >> 20
                )
            })?;
        self.len = len;
        Ok(())
    }
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        let _ = self
            .of
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                Some(u.saturating_sub(self.len))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attack (memory): calls of many bytes each, held for a human, until their total passes
    /// the bound: the call past it is refused with why (nothing counted for it), and once one
    /// held call is answered (its guard dropped) its bytes are free again.
    #[test]
    fn calls_past_the_byte_bound_are_refused_until_held_ones_are_answered() {
        let held = HeldBytes::new(100);
        let a = held.take(60).unwrap();
        let b = held.take(40).unwrap();
        assert_eq!(held.used(), 100);
        let why = held.take(1).err().expect("past the bound");
        assert!(why.contains("this call (1 bytes) would exceed it"), "{why}");
        assert!(why.contains("hold 100 bytes"), "{why}");
        assert_eq!(held.used(), 100, "a refused call counts nothing");
        drop(a);
        assert_eq!(held.used(), 40);
        let c = held.take(60).unwrap();
        assert!(held.take(1).is_err());
        drop((b, c));
        assert_eq!(held.used(), 0);
    }

    /// A call larger than the bound is taken when nothing else is held (no call is refused
    /// for its size alone: the line bound bounds it), and nothing is taken beside it.
    #[test]
    fn a_call_over_the_whole_bound_is_taken_alone_only() {
        let held = HeldBytes::new(10);
        let big = held.take(11).unwrap();
        assert!(held.take(1).is_err());
        drop(big);
        assert_eq!(held.used(), 0);
        let _all = held.take(10).unwrap();
        assert!(held.take(11).is_err(), "not beside another");
    }

    /// What a forwarded call keeps is counted in place of what it read: shrunk, the rest is
    /// free for other calls.
    #[test]
    fn a_resized_guard_counts_its_new_size() {
        let held = HeldBytes::new(100);
        let mut a = held.take(90).unwrap();
        assert!(held.take(20).is_err());
        a.resize(30).unwrap();
        assert_eq!(held.used(), 30);
        let b = held.take(70).unwrap();
        drop((a, b));
        assert_eq!(held.used(), 0);
    }

    /// Attack (memory): an operator's edit makes a held call larger as it is forwarded. It
    /// grows within the bound, or past it when it is alone; past it beside other calls it is
    /// refused with why, and nothing changes.
    #[test]
    fn a_guard_grows_past_the_bound_only_alone() {
        let held = HeldBytes::new(100);
        let mut a = held.take(10).unwrap();
        a.resize(60).unwrap();
        let mut b = held.take(30).unwrap();
        let why = b.resize(50).expect_err("past the bound beside another");
        assert!(why.contains("hold 60 bytes"), "{why}");
        assert!(why.contains("as approved (50 bytes)"), "{why}");
        assert_eq!(held.used(), 90, "a refused growth changes nothing");
        b.resize(40).unwrap();
        drop(a);
        b.resize(500).unwrap();
        assert_eq!(held.used(), 500);
        drop(b);
        assert_eq!(held.used(), 0);
    }
}
