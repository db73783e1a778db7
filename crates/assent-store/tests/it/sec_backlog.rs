//! Regression tests of the security backlog through the store's API, on both backends: the
//! retention sweep prunes the session state (issue 16 §3) of idle sessions only, never an
//! active one's; the insights' outright verdicts, read a chunk at a time along the time index,
//! count each record once.

use crate::{both_stores, pay};
use assent_core::session_risk::{Effects, SessionRisk};
use assent_core::{ToolCall, VerdictKind};
use assent_store::db::Database;
use assent_store::{DecisionInput, Proposed, Store};
use serde_json::json;

const DAY: i64 = 86_400_000;

/// Proposes `tool` in `session` at `now` with `effects`, gated as `kind` (a held call waits
/// 100 days): the state the proposal observed and the outcome.
fn gate(
    s: &Store,
    session: &str,
    (tool, effects): (&str, Effects),
    kind: VerdictKind,
    now: i64,
) -> (SessionRisk, Proposed) {
    crate::gate_observed(s, session, (tool, effects), kind, now, 100 * DAY)
}

fn untrusted() -> (&'static str, Effects) {
    let e = Effects {
        untrusted_output: true,
        ..Effects::default()
    };
    ("fetch", e)
}

/// What a harmless call in `session` at `now` observes (denied: it changes nothing).
fn look(s: &Store, session: &str, now: i64) -> SessionRisk {
    let harmless = ("look", Effects::default());
    gate(s, session, harmless, VerdictKind::Deny, now).0
}

/// The id of a held outcome.
fn held(o: Proposed) -> String {
    match o {
        Proposed::Held { approval, .. } => approval.id,
        o => panic!("not held: {o:?}"),
    }
}

fn count(db: &Database, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    let c = db.connect().unwrap();
    c.conn()
        .query_row(&sql, assent_store::params![], |r| r.get(0))
        .unwrap()
}

/// Attack surface: session state grew one row per session forever (an agent opening sessions
/// fills the database), but pruning it naively would reset the risk of a live session (fail
/// open: untrusted output forgotten, egress allowed). The retention sweep removes the state
/// of sessions idle since before the cut-off only; a session with a recent call, a pending
/// approval, or an approval requested or decided since keeps its state.
#[test]
fn retention_prunes_idle_sessions_state_but_never_an_active_ones() {
    both_stores(|db, s| {
        let archive = tempfile::tempdir().unwrap();
        for session in ["idle", "active", "waiting", "decided", "comes-back"] {
            gate(s, session, untrusted(), VerdictKind::Allow, DAY);
        }
        // Still active: a call ran on day 9.
        gate(
            s,
            "active",
            ("plain", Effects::default()),
            VerdictKind::Allow,
            9 * DAY,
        );
        // A call held on day 2, still waiting on day 10.
        held(gate(s, "waiting", untrusted(), VerdictKind::Confirm, 2 * DAY).1);
        // A call held on day 2 and refused on day 7.
        let refused = held(gate(s, "decided", untrusted(), VerdictKind::Confirm, 2 * DAY).1);
        s.decide(
            &refused,
            &DecisionInput::deny(Some("no")),
            "op",
            &[],
            7 * DAY,
        )
        .unwrap();
        // Held and refused on day 2 in an idle session: its held effects go with it.
        let old = held(gate(s, "idle", untrusted(), VerdictKind::Confirm, 2 * DAY).1);
        s.decide(&old, &DecisionInput::deny(Some("no")), "op", &[], 2 * DAY)
            .unwrap();
        assert_eq!(count(db, "session_risk"), 5);
        assert_eq!(count(db, "session_risk_held"), 3);

        // The sweep, keeping 5 days back from day 10.
        s.archive_audit(archive.path(), 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap();
        assert_eq!(count(db, "session_risk"), 3, "idle and comes-back go");
        assert_eq!(
            count(db, "session_risk_held"),
            2,
            "the idle session's refused call goes"
        );
        assert_eq!(look(s, "idle", 10 * DAY), SessionRisk::CLEAN);
        for live in ["active", "waiting", "decided"] {
            let seen = look(s, live, 10 * DAY);
            assert_eq!(seen.began_ms, Some(DAY), "{live}");
            assert!(seen.untrusted.is_some(), "{live} lost its mark");
        }
        // An idle session that comes back starts clean (a new session, as far as risk goes).
        assert!(look(s, "comes-back", 10 * DAY).untrusted.is_none());
    });
}

/// Audits an outright verdict of `tool` at `now` (`allow`: allowed, else denied).
fn outright(s: &Store, tool: &str, allow: bool, now: i64) {
    let (_, mut v) = pay(1);
    v.kind = if allow {
        VerdictKind::Allow
    } else {
        VerdictKind::Deny
    };
    let call = ToolCall::new(tool, None, json!({})).unwrap();
    s.record_verdict("bot", "s1", &call, &"0".repeat(64), &v, now)
        .unwrap();
}

/// The outright verdicts are read in chunks along the `(at, seq)` index (migration 0023): more
/// than a chunk of records with one timestamp, then later ones, are each counted once, and
/// records outside the range are not.
#[test]
fn outright_verdicts_read_by_time_count_each_record_once_across_chunks() {
    both_stores(|_, s| {
        let n = assent_store::insights::AUDIT_CHUNK + 3;
        outright(s, "read", true, DAY - 1);
        for i in 0..n {
            outright(s, "read", i % 2 == 0, DAY);
        }
        outright(s, "read", false, DAY + 1);
        outright(s, "rm", false, DAY + 2);
        outright(s, "read", true, 2 * DAY);
        let got = s.insights(DAY, 2 * DAY).unwrap();
        let read = got.outright.iter().find(|o| o.tool == "read").unwrap();
        assert_eq!(
            (read.allowed, read.denied),
            (n as u64 / 2 + 1, n as u64 / 2 + 1)
        );
        let rm = got.outright.iter().find(|o| o.tool == "rm").unwrap();
        assert_eq!((rm.allowed, rm.denied), (0, 1));
        assert_eq!((got.outright_total, got.outright_truncated), (2, false));
    });
}

/// Hazard of a rollback: a call whose default is `approve` was pending when the backup was
/// taken and denied after it; restored, it was pending again, and once its deadline passed
/// the expiry sweep approved it by its default with no one deciding (found by review). The
/// restore leaves its marker and the next start cancels it (actor `restore`); one whose
/// default is `reject` stays pending for a person to decide.
#[test]
fn a_restore_cancels_what_its_default_would_approve_once_a_denial_is_rolled_back() {
    let (dir, s) = crate::fresh();
    let (lenient, _) = crate::pending(&s, 5, 1_000, 10_000, true);
    let (strict, _) = crate::pending(&s, 6, 1_000, 10_000, false);
    // Requested by a host whose clock ran a day ahead of the restoring one's (found by review:
    // by the restoring host's clock it came "after" the restore and was left alone).
    let ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + DAY;
    let (skewed, _) = crate::pending(&s, 7, ahead, 10 * DAY, true);
    let backups = tempfile::tempdir().unwrap();
    let out = backups.path().join("b.db");
    assent_store::ops::backup(dir.path(), dir.path(), &out, false).unwrap();
    s.decide(
        &lenient,
        &DecisionInput::deny(Some("no")),
        "alice",
        &[],
        2_000,
    )
    .unwrap();
    drop(s);
    assent_store::ops::restore(dir.path(), dir.path(), &out, (false, false), None).unwrap();
    assert!(dir.path().join(assent_store::voided::MARKER).exists());
    let s = Store::open(dir.path(), 60_000, crate::wire()).unwrap();
    assert!(!dir.path().join(assent_store::voided::MARKER).exists());
    for id in [&lenient, &skewed] {
        let rec = s.get_approval(id).unwrap().unwrap();
        assert_eq!(rec.status, assent_core::ApprovalStatus::Cancelled);
        assert_eq!(rec.decisions[0].actor, "restore");
    }
    assert!(s.expire_due(1_000_000).unwrap().contains(&strict));
    let strict = s.get_approval(&strict).unwrap().unwrap();
    assert_eq!(strict.status, assent_core::ApprovalStatus::Expired);
    let lenient = s.get_approval(&lenient).unwrap().unwrap();
    assert_eq!(lenient.status, assent_core::ApprovalStatus::Cancelled);
}
