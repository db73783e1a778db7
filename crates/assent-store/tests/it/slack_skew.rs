//! Slack's replay memory across replicas whose clocks differ (issue 15 §4, on both backends):
//! a request signature accepted by one replica stays refused on every other while any of them
//! could still find its timestamp inside Slack's 5-minute window. Two `Store`s over one
//! database stand for two replicas.

use assent_store::slack::SKEW_MARGIN_MS;

/// Slack's window (`slack::verify::WINDOW_S` of the server), in ms.
const WINDOW_MS: i64 = 300_000;

/// Attack (found by review): each replica pruned the remembered signatures by its own clock.
/// Replica B, running fast, pruned a signature replica A had accepted at `t` once B's clock
/// passed the end of the window, while A (on time) still accepted the timestamp, so a replay
/// sent to A was accepted. A signature is now kept [`SKEW_MARGIN_MS`] past its window.
#[test]
fn a_replica_with_a_fast_clock_cannot_prune_a_signature_another_replica_still_accepts() {
    crate::both_in_dirs(|db, dir| {
        let (a, b) = (crate::open(dir, db), crate::open(dir, db));
        let t = 1_700_000_000_000_i64;
        let (sig, other) = ("ab".repeat(32), "cd".repeat(32));
        // A accepts a request signed at `t`: remembered until the window ends (+1 s).
        let until = t + WINDOW_MS + 1_000;
        assert!(a.slack_first_seen(&sig, until, t).unwrap(), "first seen");
        // B, its clock 400 s ahead (100 s past the window's end by it), accepts another
        // request, pruning what it thinks has ended.
        assert!(
            b.slack_first_seen(&other, t + 700_000, t + 400_000)
                .unwrap()
        );
        // A replay reaching A a second later is still refused.
        assert!(
            !a.slack_first_seen(&sig, until, t + 1_000).unwrap(),
            "a replay within A's window was accepted after B pruned it"
        );
        assert!(!b.slack_first_seen(&sig, until, t + 400_000).unwrap());
        // Past the window and the margin, by any clock, the row goes (the table stays bounded).
        let gone = until + SKEW_MARGIN_MS;
        assert!(
            a.slack_first_seen(&sig, gone + WINDOW_MS, gone).unwrap(),
            "pruned at last"
        );
    });
}
