//! Retention and standing grants: a grant still standing no longer holds back the chain; its
//! `grant.created` record is carried to the chain's end, and `audit verify` still holds the
//! grant's row to it. Both backends.

use super::retention::{scalar, tamper, verify};
use assent_core::approval::GrantScope;
use assent_store::DecisionInput;
use assent_store::db::Database;
use assent_store::integrity::{VerifyOptions, verify_database};
use std::path::Path;

const DAY: i64 = 86_400_000;

/// The first problem of the full verification under the gateway's own keys (seals checked).
fn full(db: &Database, dir: &Path) -> Option<String> {
    let rep = verify_database(db, dir, &VerifyOptions::default()).unwrap();
    rep.problem.map(|p| p.reason)
}

/// The live chain's `grant.created` records: (seq, approval id, data).
fn made(db: &Database) -> Vec<(i64, Option<String>, serde_json::Value)> {
    let conn = db.connect().unwrap();
    let rows: Vec<(i64, Option<String>, String)> = conn
        .conn()
        .query_map(
            "SELECT seq, approval_id, data FROM audit WHERE kind = 'grant.created' ORDER BY seq",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let parse = |d: String| serde_json::from_str(&d).unwrap();
    rows.into_iter().map(|(s, a, d)| (s, a, parse(d))).collect()
}

/// Found by review: retention cut the chain just before the first record of any approval
/// with a standing grant, and a `workspace` grant never expires, so one such grant approved on
/// day 1 kept every record after it forever, whatever `audit_retention_days` said, and the
/// hourly run logged nothing. Now the run archives past it and writes the grant's
/// `grant.created` record again at the chain's end: the grant still covers calls, `audit
/// verify` still holds its row to that record (a widened row is named), and once the grant is
/// revoked a later run archives the carried record too, with the chain still verifying.
#[test]
fn a_standing_grant_does_not_hold_retention_back_and_its_record_is_carried() {
    crate::both_in_dirs(|db, dir| {
        let s = super::open(dir, db);
        let (granted, _) = super::pending(&s, 5, 1_000, 5_000, false);
        let input = DecisionInput {
            scope: GrantScope::Workspace,
            ..DecisionInput::approve()
        };
        s.decide(&granted, &input, "alice", &[], 2_000).unwrap();
        let before = made(db);
        assert_eq!(before.len(), 1, "{before:?}");
        let (first_seq, gid) = (before[0].0, before[0].2["grant_id"].clone());
        for i in 0..3 {
            super::approved(&s, 10 + i, 5_000, false);
        }
        s.append_audit("note", None, "test", &serde_json::json!({}), 10 * DAY)
            .unwrap();
        let arch = dir.join(assent_store::retention::ARCHIVE_DIR);
        let a = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap()
            .expect("records past the grant's approval were due");
        assert!(a.manifest.last_seq > first_seq, "{:?}", a.manifest);
        let head: i64 = scalar(db, "SELECT max(seq) FROM audit", []);
        let left: i64 = scalar(db, "SELECT count(*) FROM audit", []);
        assert!(
            left <= 3,
            "only the note, the carried record and markers stay: {left}"
        );
        let carried = made(db);
        assert_eq!(carried.len(), 1, "{carried:?}");
        let (seq, approval, data) = &carried[0];
        assert!(*seq > a.manifest.last_seq && *seq <= head, "{carried:?}");
        assert_eq!(approval, &None, "{carried:?}");
        assert_eq!(data["grant_id"], gid);
        assert_eq!(data["carried_from"], first_seq);
        assert_eq!(data["approval_id"], granted.as_str());
        assert_eq!(data["carried_at"], 2_000);
        assert_eq!(verify(&s, db).problem, None);
        assert_eq!(full(db, dir), None);
        let (active, _) = s.list_grants(false, 11 * DAY, 100, None).unwrap();
        assert_eq!(active.len(), 1, "the grant still stands");

        // Carried again by a later run, the original `carried_from` and time are kept.
        s.append_audit("note", None, "test", &serde_json::json!({}), 30 * DAY)
            .unwrap();
        s.archive_audit(&arch, 25 * DAY, 1_000, 30 * DAY, None, None)
            .unwrap()
            .expect("the first run's records were due");
        let again = made(db);
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(again[0].2["carried_from"], first_seq);
        assert_eq!(again[0].2["carried_at"], 2_000);
        assert_eq!(verify(&s, db).problem, None);

        // A row widened behind the gateway's back is still named.
        let gid = gid.as_str().unwrap();
        tamper(
            db,
            &format!("UPDATE grants SET tool = 'wire' WHERE id = '{gid}'"),
        );
        let p = verify(&s, db).problem.expect("the widened grant is found");
        assert!(
            p.reason.contains("differs from its grant.created record"),
            "{p:?}"
        );
        tamper(
            db,
            &format!("UPDATE grants SET tool = 'pay' WHERE id = '{gid}'"),
        );
        assert_eq!(verify(&s, db).problem, None);

        // Revoked, its records go at the next run, and what remains verifies.
        assert!(s.revoke_grant(gid, "alice", 31 * DAY).unwrap());
        // Attack (found by review of the carrying): a writer clears the revocation. The run
        // would carry the revived grant's record and delete the one revoking it, leaving
        // nothing for `audit verify` to name; it refuses instead, archiving nothing.
        let revive = format!("UPDATE grants SET revoked_at = NULL WHERE id = '{gid}'");
        tamper(db, &revive);
        let note = serde_json::json!({});
        s.append_audit("note", None, "test", &note, 40 * DAY)
            .unwrap();
        let before: i64 = scalar(db, "SELECT count(*) FROM audit", []);
        let e = s
            .archive_audit(&arch, 35 * DAY, 1_000, 40 * DAY, None, None)
            .expect_err("a revived grant stops the run");
        assert!(e.to_string().contains("revoked_at was cleared"), "{e}");
        assert_eq!(scalar::<i64>(db, "SELECT count(*) FROM audit", []), before);
        let p = verify(&s, db).problem.expect("the revived grant is named");
        assert!(p.reason.contains("not marked revoked"), "{p:?}");
        tamper(
            db,
            &format!(
                "UPDATE grants SET revoked_at = {} WHERE id = '{gid}'",
                31 * DAY
            ),
        );
        s.archive_audit(&arch, 35 * DAY, 1_000, 40 * DAY, None, None)
            .unwrap()
            .expect("the revoked grant's records were due");
        assert_eq!(made(db), Vec::new());
        assert_eq!(verify(&s, db).problem, None);
        assert_eq!(full(db, dir), None);
    });
}
