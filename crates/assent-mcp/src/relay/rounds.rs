//! The upstream's own `input_required` rounds (MCP 2026-07-28, SEP-2322): the `requestState`
//! values the upstream gave in its answers to this proxy's forwarded `tools/call`s, each kept
//! with the tool and the arguments of the call it answered. A client's continuation (a
//! `tools/call` carrying `params.requestState`) goes upstream only when the upstream issued
//! that state for a call of the same tool with the same arguments, and only once. Found by
//! review: the proxy passed on any `requestState` a client wrote, which no `call_hash` covers,
//! so an upstream that keeps a pending operation in an unsigned state could be made to continue
//! another operation under an approval of `{name, arguments}`.

use assent_core::canonical::{canonical_value, sha256_hex};
use serde_json::Value;
use std::collections::VecDeque;

/// The most rounds remembered at once; the oldest is forgotten first (its continuation is
/// then refused).
pub(super) const MAX_ROUNDS: usize = 64;

/// The longest `requestState` remembered, in bytes; a longer one is not remembered, and its
/// continuation is refused.
pub(super) const MAX_STATE_BYTES: usize = 16 * 1024;

/// The open rounds, oldest first: at most [`MAX_ROUNDS`] of at most [`MAX_STATE_BYTES`] each
/// (about 1 MiB).
#[derive(Default)]
pub(super) struct Rounds {
    open: VecDeque<Round>,
}

/// One state the upstream issued: for which tool, and the SHA-256 of the canonical JSON
/// (RFC 8785) of the arguments the call ran with.
struct Round {
    state: String,
    tool: String,
    arguments: String,
}

/// The SHA-256 (hex) of `arguments`' canonical JSON; `None` when it has none (a number
/// canonical JSON cannot write), which remembers nothing and matches nothing.
fn digest(arguments: &Value) -> Option<String> {
    canonical_value(arguments)
        .ok()
        .map(|c| sha256_hex(c.as_bytes()))
}

impl Rounds {
    /// Remembers that the upstream answered a call of `tool` with `arguments` (what it ran
    /// with: an operator's edit when there was one) by asking for input under `state`. A
    /// state over [`MAX_STATE_BYTES`] is not remembered; one remembered already is replaced.
    pub(super) fn note(&mut self, state: &str, tool: &str, arguments: &Value) {
        let Some(arguments) = digest(arguments) else {
            return;
        };
        if state.len() > MAX_STATE_BYTES {
            return;
        }
        self.open.retain(|r| r.state != state);
        if self.open.len() >= MAX_ROUNDS {
            self.open.pop_front();
        }
        self.open.push_back(Round {
            state: state.to_string(),
            tool: tool.to_string(),
            arguments,
        });
    }

    /// Takes the round `state` for a continuation calling `tool` with `arguments`: `Ok` when
    /// the upstream issued `state` for a call of that tool with those arguments. The round is
    /// used up whether or not it matches (a client that guesses does not get to guess again).
    /// Errors: the refusal's words, naming what did not match.
    pub(super) fn take(
        &mut self,
        state: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<(), &'static str> {
        let Some(at) = self.open.iter().position(|r| r.state == state) else {
            return Err(
                "requestState is not one the upstream issued to this proxy (or it was used already)",
            );
        };
        let round = self.open.remove(at).expect("found above");
        if round.tool != tool || Some(round.arguments) != digest(arguments) {
            return Err(
                "requestState was issued for a call of another tool or other arguments than this one",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A state is good once, for the tool and the arguments it was issued for (in any key
    /// order); never one the upstream did not issue.
    #[test]
    fn a_state_continues_only_the_call_it_was_issued_for_and_once() {
        let mut r = Rounds::default();
        r.note("s1", "read", &json!({"a": 1, "b": [true]}));
        assert!(r.take("s1", "read", &json!({"b": [true], "a": 1})).is_ok());
        assert!(r.take("s1", "read", &json!({"a": 1, "b": [true]})).is_err());
        assert!(r.take("forged", "read", &json!({})).is_err());
        r.note("s2", "read", &json!({"a": 1}));
        assert!(r.take("s2", "write", &json!({"a": 1})).is_err());
        // Used up by the mismatch above.
        assert!(r.take("s2", "read", &json!({"a": 1})).is_err());
        r.note("s3", "read", &json!({"a": 1}));
        assert!(r.take("s3", "read", &json!({"a": 2})).is_err());
    }

    /// Bounded: the oldest of more than [`MAX_ROUNDS`] is forgotten, and a state over
    /// [`MAX_STATE_BYTES`] is never remembered.
    #[test]
    fn rounds_are_bounded_in_number_and_size() {
        let mut r = Rounds::default();
        for k in 0..=MAX_ROUNDS {
            r.note(&format!("s{k}"), "t", &json!({}));
        }
        assert_eq!(r.open.len(), MAX_ROUNDS);
        assert!(r.take("s0", "t", &json!({})).is_err());
        assert!(r.take(&format!("s{MAX_ROUNDS}"), "t", &json!({})).is_ok());
        let long = "x".repeat(MAX_STATE_BYTES + 1);
        r.note(&long, "t", &json!({}));
        assert!(r.take(&long, "t", &json!({})).is_err());
    }
}
