//! Reads on the read sessions beside the writer (`readers.rs`, issue 13 §4 and item 5), on
//! both backends: whatever a write acknowledged is what a read then finds, from many threads
//! at once (more than the pool's sessions), and a decided approval's long-poll answer (the
//! record and its signed token, one snapshot) matches the writer's; a learning export reads
//! beside a commit in progress.

use crate::both_stores;
use assent_core::ApprovalStatus;
use assent_store::DecisionInput;

/// 12 threads (the pool has 4 sessions) each hold and decide approvals and read each one back
/// right after every acknowledged write: pending after the hold, approved with its one
/// decision and its token after the decision; the token is the one `token_string` signs.
#[test]
fn every_acknowledged_write_is_read_back_from_the_read_sessions() {
    both_stores(|_, s| {
        let (call, v) = crate::pay(7);
        std::thread::scope(|scope| {
            for t in 0..12 {
                let (s, call, v) = (&s, &call, &v);
                scope.spawn(move || {
                    for k in 0..4 {
                        let id = crate::hold(s, &format!("s{t}-{k}"), call, v, 1_000, 100_000).id;
                        let (rec, token) = s.approval_and_token(&id, true).unwrap();
                        assert_eq!(rec.unwrap().status, ApprovalStatus::Pending);
                        assert_eq!(token, None);
                        s.decide(&id, &DecisionInput::approve(), "alice", &[], 2_000)
                            .unwrap();
                        let (rec, token) = s.approval_and_token(&id, true).unwrap();
                        let rec = rec.unwrap();
                        assert_eq!(
                            (rec.status, rec.decisions.len()),
                            (ApprovalStatus::Approved, 1)
                        );
                        assert_eq!(token, s.token_string(&id).unwrap());
                        assert!(token.is_some());
                        // Without asking for the token (an operator's read), none is given.
                        assert_eq!(s.approval_and_token(&id, false).unwrap().1, None);
                    }
                });
            }
        });
        let all = s
            .list_approvals(Some(ApprovalStatus::Approved), 100)
            .unwrap();
        assert_eq!(all.len(), 48);
        assert!(s.get_approval("no-such-id").unwrap().is_none());
    });
}

/// Found by review: the learning-sample export (`GET /v1/learning-samples`) read the whole
/// history on the writer's connection, so every proposal waited for it. It reads in a
/// snapshot beside the writer: here it finishes while a commit holds the writer's connection
/// (the commit observer runs under it and waits for the export, at most 20 s).
#[test]
fn a_learning_export_does_not_wait_for_the_writer() {
    use std::sync::{Mutex, mpsc};
    use std::time::Duration;
    both_stores(|_, s| {
        let (call, v) = crate::pay(7);
        for k in 0..3 {
            let id = crate::hold(s, &format!("s{k}"), &call, &v, 1_000, 100_000).id;
            s.decide(&id, &DecisionInput::approve(), "alice", &[], 2_000)
                .unwrap();
        }
        let (committing, started) = mpsc::channel::<()>();
        let (exported, done) = mpsc::channel::<usize>();
        let done = Mutex::new(done);
        let (seen_tx, seen) = mpsc::channel::<Option<usize>>();
        let seen_tx = Mutex::new(seen_tx);
        assert!(s.observe_commits(Box::new(move |_| {
            let _ = committing.send(());
            let got = done.lock().unwrap().recv_timeout(Duration::from_secs(20));
            let _ = seen_tx.lock().unwrap().send(got.ok());
        })));
        let s = &s;
        std::thread::scope(|scope| {
            scope.spawn(move || {
                started.recv().unwrap();
                let _ = exported.send(s.learning_samples(None, 1_000).unwrap().samples.len());
            });
            crate::hold(s, "s-next", &call, &v, 3_000, 100_000);
        });
        assert_eq!(
            seen.recv().unwrap(),
            Some(3),
            "the export ran beside the commit"
        );
    });
}
