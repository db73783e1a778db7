//! Per-session windows kept incrementally (issue 13 §5), on both backends: what a proposal's
//! thresholds are given ([`Store::propose_within`], [`Store::session_window`]) answers as the
//! session's whole history does ([`Store::session_calls`]) after every kind of change to it —
//! allowed calls, held calls, a rejection, a cancellation, an approved edit, an expiry into an
//! approval or a rejection, a window that slides past calls, a cost argument a policy names
//! for the first time mid-session.

use crate::both_stores;
use assent_core::VerdictKind;
use assent_core::gatekeeper::Verdict;
use assent_core::triggers::window::{WindowNeeds, add_cost};
use assent_core::triggers::{PriorCall, window_start_ms};
use assent_core::{CanonicalCall, DefaultDecision, ToolCall};
use assent_store::{DecisionInput, EditedCall, Proposed, Store};
use serde_json::json;

const AGENT: &str = "bot";
const SESSION: &str = "s";
/// The rate window the tests observe (seconds).
const WINDOW: u64 = 60;

fn needs(arguments: &[&str]) -> WindowNeeds {
    WindowNeeds {
        longest_rate_seconds: Some(WINDOW),
        cost_arguments: arguments.iter().map(|a| a.to_string()).collect(),
        longest_agent_seconds: None,
    }
}

/// What the thresholds see in `prior` at `now`: the calls in the last [`WINDOW`] seconds and
/// the session totals of `amount` and `fee` (as core's rate and cost checks count them).
fn seen(prior: &[PriorCall], now: i64) -> (usize, f64, f64) {
    let since = window_start_ms(now, WINDOW);
    let n = prior.iter().filter(|c| c.at_ms > since).count();
    let sum = |a: &str| prior.iter().fold(0.0, |t, c| add_cost(t, &c.arguments, a));
    (n, sum("amount"), sum("fee"))
}

/// Proposes `pay {amount, fee: 1}` at `now` through the window of `needs`, allowed outright
/// or held (expiring after `ttl` ms, defaulting to `default` then). Returns what the
/// thresholds saw (calls in the window, `amount` total) and the held approval's id.
fn propose(
    s: &Store,
    needs: &WindowNeeds,
    amount: i64,
    allow: bool,
    now: i64,
    ttl: i64,
    default: DefaultDecision,
) -> ((usize, f64), Option<String>) {
    let (call, mut v): (ToolCall, Verdict) = crate::pay(amount);
    let call = ToolCall::new(&call.tool, None, json!({"amount": amount, "fee": 1})).unwrap();
    v.terms.default_decision = default;
    if allow {
        v.kind = VerdictKind::Allow;
    }
    let call = CanonicalCall::new(call).unwrap();
    let timeout = move |_: &Verdict| ttl;
    let p = crate::proposal(&call, SESSION, now, &timeout);
    let mut saw = None;
    let (_, outcome) = s
        .propose_within(&p, needs, |prior| {
            let (n, amount, _) = seen(prior, now);
            saw = Some((n, amount));
            v
        })
        .unwrap();
    let id = match outcome {
        Proposed::Allowed => None,
        Proposed::Held { approval, .. } => Some(approval.id),
        o => panic!("{o:?}"),
    };
    (saw.unwrap(), id)
}

/// The window of `needs` and the whole history, without `except`'s call, seen alike at `now`;
/// returns what they see.
fn agree(s: &Store, needs: &WindowNeeds, except: Option<&str>, now: i64) -> (usize, f64, f64) {
    let window = s
        .session_window(AGENT, SESSION, except, needs, now)
        .unwrap();
    let history = s.session_calls(AGENT, SESSION, except).unwrap();
    let (w, h) = (seen(&window, now), seen(&history, now));
    // The window keeps totals only of the arguments its policy names.
    let named = |a: &str| needs.cost_arguments.iter().any(|x| x == a);
    assert_eq!(w.0, h.0, "rate count, except {except:?}");
    assert!(!named("amount") || w.1 == h.1, "amount total {w:?} {h:?}");
    assert!(!named("fee") || w.2 == h.2, "fee total {w:?} {h:?}");
    h
}

fn edit(amount: i64) -> EditedCall {
    let call = ToolCall::new("pay", None, json!({"amount": amount, "fee": 1})).unwrap();
    let (canonical, call_hash) = call.canonical_and_hash().unwrap();
    EditedCall {
        canonical_arguments: call.canonical_arguments().unwrap(),
        arguments: call.arguments,
        canonical,
        call_hash,
    }
}

/// Every change that decides whether a call counts, checked against the history after each:
/// a rejected and a cancelled call stop counting, an approved edit replaces its call's
/// amount, an expiry into an approval counts and one into a rejection does not, a call leaves
/// the rate window but stays in the totals, and an edit's re-gate leaves its own call out.
#[test]
fn the_kept_window_answers_as_the_history_after_every_change() {
    both_stores(|_, s| {
        let n = needs(&["amount"]);
        let (hour, reject, approve) =
            (3_600_000, DefaultDecision::Reject, DefaultDecision::Approve);
        assert_eq!(propose(s, &n, 10, true, 1_000, hour, reject).0, (0, 0.0));
        let (saw, a1) = propose(s, &n, 20, false, 2_000, hour, reject);
        assert_eq!(saw, (1, 10.0));
        let (saw, a2) = propose(s, &n, 40, false, 3_000, 5_000, approve);
        assert_eq!(saw, (2, 30.0));
        let (saw, a3) = propose(s, &n, 100, false, 4_000, hour, reject);
        assert_eq!(saw, (3, 70.0));
        let (_, a4) = propose(s, &n, 1000, false, 4_100, 1_000, reject);
        let (_, a5) = propose(s, &n, 500, false, 4_200, hour, reject);
        let (a1, a2, a3, a4, a5) = (
            a1.unwrap(),
            a2.unwrap(),
            a3.unwrap(),
            a4.unwrap(),
            a5.unwrap(),
        );
        // An edit's re-gate leaves the held call out, live or not.
        assert_eq!(agree(s, &n, Some(&a3), 4_300), (5, 1570.0, 5.0));
        s.decide(&a1, &DecisionInput::deny(None), "alice", &[], 4_500)
            .unwrap();
        s.cancel(&a5, None, AGENT, 4_600).unwrap();
        // The rejection and the cancellation count at once, before any proposal folds them.
        assert_eq!(agree(s, &n, None, 4_700), (4, 1150.0, 4.0));
        let (saw, _) = propose(s, &n, 1, true, 5_000, hour, reject);
        assert_eq!(saw, (4, 1150.0));
        let approve_edit = DecisionInput {
            edited: Some(edit(7)),
            ..DecisionInput::approve()
        };
        s.decide(&a3, &approve_edit, "alice", &[], 5_500).unwrap();
        assert_eq!(agree(s, &n, None, 5_600), (5, 1058.0, 5.0));
        // a4 expires into a rejection, a2 into an approval.
        s.expire_due(9_000).unwrap();
        assert_eq!(agree(s, &n, None, 9_100), (4, 58.0, 4.0));
        let (saw, _) = propose(s, &n, 2, true, 10_000, hour, reject);
        assert_eq!(saw, (4, 58.0));
        // Folded now: an edit's re-gate still leaves a settled counting call out.
        assert_eq!(agree(s, &n, Some(&a2), 10_100), (4, 20.0, 4.0));
        assert_eq!(agree(s, &n, Some(&a4), 10_100), (5, 60.0, 5.0));
        // Past the window: no call in it, every one still in the totals.
        let (saw, _) = propose(s, &n, 3, true, 100_000, hour, reject);
        assert_eq!(saw, (0, 60.0));
        assert_eq!(agree(s, &n, None, 100_100), (1, 63.0, 6.0));
    });
}

/// A policy that names a cost argument for the first time in the middle of a session: its
/// totals are summed from the history once and kept from then on.
#[test]
fn a_cost_argument_named_mid_session_is_summed_from_the_history() {
    both_stores(|_, s| {
        let (amount, both_args) = (needs(&["amount"]), needs(&["amount", "fee"]));
        let hour = 3_600_000;
        for (i, allow) in [true, false, true, true].into_iter().enumerate() {
            let now = 1_000 * (i as i64 + 1);
            propose(s, &amount, 5, allow, now, hour, DefaultDecision::Reject);
        }
        assert_eq!(agree(s, &both_args, None, 4_500), (4, 20.0, 4.0));
        let (saw, _) = propose(s, &both_args, 5, true, 5_000, hour, DefaultDecision::Reject);
        assert_eq!(saw, (4, 20.0));
        for now in [6_000, 7_000] {
            propose(s, &both_args, 5, true, now, hour, DefaultDecision::Reject);
        }
        assert_eq!(agree(s, &both_args, None, 7_500), (7, 35.0, 7.0));
    });
}

/// Found by review: a proposal read every call the agent made in the agent-wide window (up to
/// seven days, with arguments) inside the write lock. It reads the newest
/// `AGENT_CALLS_CAP` + 1 at most (core holds what it cannot count past the cap), newest kept,
/// and returns them oldest first. SQLite only: the rows are written straight into the file.
#[test]
fn an_agent_window_reads_at_most_one_call_past_the_cap_newest_first() {
    use assent_core::triggers::window::AGENT_CALLS_CAP;
    let (dir, s) = crate::fresh();
    let rows = AGENT_CALLS_CAP as i64 + 500;
    let c = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    c.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO usage (agent, session_id, tool, server, at, arguments, approval_id, folded)
         SELECT 'bot', 's' || i, 'pay', NULL, 1000000 + i, '{\"amount\":1}', NULL, 1 FROM n",
        [rows],
    )
    .unwrap();
    let needs = WindowNeeds {
        longest_agent_seconds: Some(86_400),
        ..needs(&["amount"])
    };
    let now = 1_000_000 + rows + 1;
    let seen = s.agent_window(AGENT, None, &needs, now).unwrap();
    assert_eq!(seen.len(), AGENT_CALLS_CAP + 1);
    assert_eq!(seen.last().unwrap().at_ms, 1_000_000 + rows, "the newest");
    assert!(
        seen.windows(2).all(|w| w[0].at_ms < w[1].at_ms),
        "oldest first"
    );
}

/// Found by review: the agent window's cap counted only the calls that count, so an agent that
/// had its own held calls cancelled by the thousand had each of them scanned, with a look-up of
/// its approval, on every proposal a per-agent rule covers. At most four times the cap of the
/// window's newest rows are looked at; when they hold fewer counting calls than the cap, the
/// list is made up past it with entries dated before every window (counted by no threshold),
/// which tells core the window was not read whole. SQLite only: rows are written straight in.
#[test]
fn an_agent_window_of_cancelled_calls_is_looked_at_up_to_a_bound_and_said_unread() {
    use assent_core::triggers::window::AGENT_CALLS_CAP;
    let (dir, s) = crate::fresh();
    let wide = WindowNeeds {
        longest_agent_seconds: Some(86_400),
        ..needs(&["amount"])
    };
    let (_, held) = propose(&s, &wide, 5, false, 1_000, 60_000, DefaultDecision::Reject);
    let held = held.unwrap();
    s.cancel(&held, None, AGENT, 1_500).unwrap();
    let c = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    let copies = 4 * AGENT_CALLS_CAP as i64 + 10;
    c.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO usage (agent, session_id, tool, server, at, arguments, approval_id, folded)
         SELECT 'bot', 'c' || i, 'pay', NULL, 2000 + i, '{\"amount\":1}', ?2, 0 FROM n",
        rusqlite::params![copies, held],
    )
    .unwrap();
    let now = 2000 + copies + 1;
    let seen = s.agent_window(AGENT, None, &wide, now).unwrap();
    assert_eq!(seen.len(), AGENT_CALLS_CAP + 1, "said not read whole");
    assert!(seen.iter().all(|c| c.at_ms == i64::MIN), "nothing counted");
    // Fewer than the bound: read whole, nothing made up.
    c.execute(
        "DELETE FROM usage WHERE session_id LIKE 'c%' AND at > 3000",
        [],
    )
    .unwrap();
    let seen = s.agent_window(AGENT, None, &wide, now).unwrap();
    assert!(seen.iter().all(|c| c.at_ms != i64::MIN), "{}", seen.len());
}
