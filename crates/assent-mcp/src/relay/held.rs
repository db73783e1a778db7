//! The bytes the relay holds for a client's calls in flight ([`HeldBytes`], the crate's `crate::held`): each `tools/call`
//! is counted, by the weight of what the relay keeps of it parsed ([`crate::kit::json_weight`]:
//! its text plus 32 bytes a piece, about what a parsed value costs), from the moment it is read
//! until it is answered — denied, asked of the client, withdrawn, or forwarded and its result
//! reported (once forwarded, only the text of the arguments it ran with is kept, and counted;
//! a forwarded call its client cancelled counts no more once it is given up at the upstream,
//! which should not answer it: what is kept of it is bounded with the given-up ids,
//! `super::ids::MAX_GONE_BYTES`, and one past that bound still counts here) — and
//! a call that would take the total past [`MAX_HELD_BYTES`] is answered at once with a
//! JSON-RPC error saying so ([`super::client::BUSY`]), never gated. A call alone is always
//! taken (nothing else held), so that no call is refused for its size alone: the line bound
//! (16 MiB) bounds it, and a line weighing more than the bound is refused before it is
//! parsed (`super::weigh`). A call forwarded with an operator's edit counts the edited
//! arguments it keeps, and one that would take the total past the bound beside other calls
//! is not run ([`HeldGuard::resize`]). Found by review: a call held for a
//! human keeps its request (arguments and all, up to the 16 MiB line bound) in memory, and
//! only the number of calls in flight was bounded (256), so a client sending 256 calls of
//! 16 MiB pinned 4 GiB — the gateway refuses arguments over `max_arguments_bytes` only once
//! the relay has them, and other `params` keys it never sees. The same shape as the queues'
//! byte bound (`super::lines`): counters that saturate, released by a guard when dropped.

/// Bytes (by weight) the relay holds for one client's calls in flight: 64 MiB, as one queue's
/// byte bound (`super::lines::MAX_QUEUED_BYTES`) and the heaviest line parsed
/// (`crate::weigh::MAX_LINE_WEIGHT`). A call alone is never refused ([`HeldBytes::take`]).
pub(super) const MAX_HELD_BYTES: usize = crate::weigh::MAX_LINE_WEIGHT;

pub(super) use crate::held::{HeldBytes, HeldGuard};
