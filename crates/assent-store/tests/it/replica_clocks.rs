//! Replicas of one database that race or whose clocks differ (issue 13 §2): the expiry sweeps
//! of two replicas settling the same approvals, and the shared failed-authentication count
//! kept by the database's clock. Two `Store`s over one database stand for two replicas.

use crate::pgkit::both;
use assent_store::Store;
use assent_store::db::Database;

/// Two stores (replicas) over `db`, with one keys directory.
fn two(db: &Database) -> (tempfile::TempDir, Store, Store) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (crate::open(dir.path(), db), crate::open(dir.path(), db));
    (dir, a, b)
}

/// Review finding: two replicas' sweeps (each sweeps every second, and before decisions and
/// listings) both read an approval as due and pending; the loser's expiry reached the
/// settlement once the winner's had committed and was recorded as a `decision.late` by
/// `system:expiry` that never happened. A sweep is never late: the loser records nothing.
/// The two sweeps run at once over many due approvals, so that they interleave.
#[test]
fn two_racing_expiry_sweeps_record_no_late_decision_that_never_happened() {
    both(|db| {
        let (_dir, a, b) = two(db);
        let ids: Vec<String> = (0..60)
            .map(|n| crate::pending(&a, n, 1_000, 1_000, false).0)
            .collect();
        let start = std::sync::Barrier::new(2);
        let sweep = |s: &Store| {
            start.wait();
            s.expire_due(5_000).unwrap()
        };
        let (done_a, done_b) = std::thread::scope(|t| {
            let ha = t.spawn(|| sweep(&a));
            let hb = t.spawn(|| sweep(&b));
            (ha.join().unwrap(), hb.join().unwrap())
        });
        let tail = a.audit_tail(1_000).unwrap();
        let late = tail.iter().filter(|r| r.kind == "decision.late").count();
        assert_eq!(late, 0, "late decisions by the sweep that never happened");
        let expired = tail.iter().filter(|r| r.kind == "approval.expired").count();
        assert_eq!(expired, ids.len(), "each approval expired once");
        assert_eq!(
            done_a.len() + done_b.len(),
            ids.len(),
            "each settled by one sweep"
        );
        for id in &ids {
            let rec = a.get_approval(id).unwrap().unwrap();
            assert_eq!(rec.status, assent_core::ApprovalStatus::Expired);
        }
    });
}

/// Review finding (PostgreSQL): the shared failed-authentication allowance compared the `tat`
/// values one replica wrote against another replica's own clock. A guesser alternating
/// between a replica on time and one whose clock runs an hour fast got a fresh allowance at
/// the fast one (its `now` lay past every `tat`), and a replica an hour slow locked out a
/// caller with one failure for an hour. On PostgreSQL the database's clock counts.
#[test]
fn a_replica_with_a_skewed_clock_neither_resets_nor_inflates_the_shared_login_allowance() {
    let Some(db) = crate::pgkit::fresh_pg() else {
        return; // SQLite's writers are one process with one clock
    };
    let (_dir, a, b) = two(&db);
    let real = crate::now_ms();
    let hour = 3_600_000;
    let who = vec!["guesser".to_string()];
    // Five failures through the replica on time use the burst up.
    for _ in 0..5 {
        assert_eq!(a.count_auth_failure(&who, real, 200, 5).unwrap(), vec![0]);
    }
    // The sixth, through the replica an hour fast, is over the allowance, not a fresh start.
    let over = b.count_auth_failure(&who, real + hour, 200, 5).unwrap();
    assert!(over[0] > 0, "a fast replica reset the allowance: {over:?}");
    // A replica an hour slow does not lock a new caller out for its first failure.
    let other = vec!["someone".to_string()];
    assert_eq!(
        b.count_auth_failure(&other, real - hour, 200, 5).unwrap(),
        vec![0],
        "a slow replica locked a caller out on its first failure"
    );
    // Nor does it lock out, for an hour, the guesser the replica on time counted.
    let over = b.count_auth_failure(&who, real - hour, 200, 5).unwrap();
    assert!(over[0] <= 1_000, "locked out for {} ms", over[0]);
}

/// Review finding (PostgreSQL): a replica judged a dashboard session's end by its own clock,
/// so one running an hour slow kept serving a session that had ended (an operator signed out
/// by expiry read the queue and the calls' arguments for another hour there). A session ends
/// by the later of the replica's clock and the database's; one live by both still stands.
#[test]
fn a_replica_with_a_slow_clock_does_not_keep_an_ended_dashboard_session() {
    use assent_store::ui_sessions::UiSession;
    let Some(db) = crate::pgkit::fresh_pg() else {
        return; // SQLite's readers are one process with one clock
    };
    let (_dir, a, b) = two(&db);
    let (real, hour) = (crate::now_ms(), 3_600_000);
    let session = |expires_at| UiSession {
        operator: "alice".into(),
        csrf: "cd".repeat(32),
        expires_at,
    };
    let (ended, live) = ("ab".repeat(32), "ef".repeat(32));
    for (id, s) in [
        (&ended, session(real - 1_000)),
        (&live, session(real + hour)),
    ] {
        a.start_ui_session(id, &s, &"00".repeat(32), real - 2 * hour)
            .unwrap();
    }
    // Replica b's clock runs an hour slow.
    let slow = real - hour;
    assert_eq!(b.ui_session(&ended, slow).unwrap(), None, "kept alive");
    assert_eq!(b.ui_session_authenticated_at(&ended, slow).unwrap(), None);
    assert!(b.ui_session_with_roles(&ended, slow).unwrap().is_none());
    assert_eq!(
        b.ui_session(&live, slow).unwrap(),
        Some(session(real + hour))
    );
    // A replica running fast ends a session early: that fails closed.
    assert_eq!(b.ui_session(&live, real + 2 * hour).unwrap(), None);
}

/// Review finding: a database (or role) whose `default_transaction_isolation` is not `read
/// committed` gave each write transaction a snapshot taken by its write-lock statement, before
/// it waited for the lock: a replica's writes then read what another replica had committed
/// while they waited as not there (the audit chain's head, an approval's status, a session's
/// state), and failed or decided on stale rows. The write transactions are `READ COMMITTED`
/// whatever the default: two replicas holding calls at once on a `serializable` database all
/// succeed, and the audit chain verifies. PostgreSQL only (SQLite has one writer per file).
#[test]
fn writes_of_two_replicas_see_each_other_whatever_the_default_isolation() {
    let Some(schema) = assent_testkit::pg::schema() else {
        return;
    };
    let url = schema.url.replace(
        "options='-c search_path=",
        "options='-c default_transaction_isolation=serializable -c search_path=",
    );
    assert_ne!(url, schema.url, "the isolation default is set");
    let db = Database::Postgres { url };
    let (dir, a, b) = two(&db);
    let start = std::sync::Barrier::new(2);
    let hold = |s: &Store, base: i64| {
        start.wait();
        for n in 0..40 {
            crate::pending(s, base + n, 1_000 + n, 60_000, false);
        }
    };
    std::thread::scope(|t| {
        t.spawn(|| hold(&a, 0));
        t.spawn(|| hold(&b, 1_000));
    });
    let report = b.verify_audit().unwrap();
    assert_eq!(report.broken, None);
    assert!(
        report.records >= 160,
        "two records or more per held call: {report:?}"
    );
    drop(dir);
}
