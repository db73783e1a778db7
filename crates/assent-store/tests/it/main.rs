//! Store behaviour against real SQLite files in a temporary directory.

use assent_core::gatekeeper::Verdict;
use assent_core::policy::Registry;
use assent_core::{ApprovalStatus, CanonicalCall, ToolCall, evaluate};
use assent_store::db::{DbError, Settles};
use assent_store::{
    ApprovalRecord, DecideError, DecisionInput, Proposal, RedeemError, Store, verify_offline,
};
use serde_json::json;

mod aaep_grace;
mod batch;
mod bound_outstanding;
mod ceremonies;
mod checkpoint_publish;
mod checkpoints;
mod db;
mod dead_letter_bounds;
mod decide_holes;
mod decide_races;
#[cfg(target_os = "linux")]
mod durable_sync;
mod escalation;
mod group;
mod heavy_reads;
mod history;
mod insights;
mod key_claims;
mod learning;
mod listening;
mod migrations;
mod oidc_logins;
mod ordered_ids;
mod passkey_votes;
mod pgkit;
mod pin_reads;
mod pin_scope;
mod pin_words;
mod plans;
mod readers;
mod replica_clocks;
mod replicas;
mod retention;
mod retention_approvals;
mod retention_config;
mod retention_grants;
mod retention_passkeys;
mod retention_plans;
mod retention_published;
mod retention_tools;
mod sealing_marker;
mod sec_backlog;
mod session_cancel;
mod session_risk;
mod slack_skew;
mod store_sql;
mod stricter;
mod tls;
mod wal;
mod wal_batches;
mod windows;

const AGENT: &str =
    "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";

/// A write closure's error that, like the store's audited refusals, keeps what was written
/// before it ([`Settles::keeps_writes`]).
#[derive(Debug)]
enum Refused {
    Audited,
    Db(#[allow(dead_code)] DbError),
}
impl From<DbError> for Refused {
    fn from(e: DbError) -> Self {
        Refused::Db(e)
    }
}
impl Settles for Refused {
    fn keeps_writes(&self) -> bool {
        matches!(self, Refused::Audited)
    }
}

/// The real clock (Unix ms): on PostgreSQL some reads and writes also go by the database's.
fn now_ms() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    d.unwrap().as_millis() as i64
}

/// The server's envelope renderer, the one the gateway opens its store with.
fn wire() -> std::sync::Arc<dyn assent_store::Envelopes> {
    std::sync::Arc::new(assent_server::WireEnvelopes)
}

/// A store over `db` with its keys (made if missing) in `dir`, tokens valid for 60 s.
fn open(dir: &std::path::Path, db: &assent_store::db::Database) -> Store {
    assent_store::keys::init(dir).unwrap();
    Store::open_database(dir, dir, db, 60_000, wire()).unwrap()
}

/// The kinds of the store's newest `limit` audit records, newest first.
fn audit_kinds(s: &Store, limit: u32) -> Vec<String> {
    s.audit_tail(limit)
        .unwrap()
        .into_iter()
        .map(|r| r.kind)
        .collect()
}

/// Runs `f` with a fresh temporary data directory over a fresh SQLite file and then over a
/// fresh Postgres database ([`pgkit::both_migrated`]), for a test that opens its stores there.
fn both_in_dirs(mut f: impl FnMut(&assent_store::db::Database, &std::path::Path)) {
    pgkit::both_migrated(|db| {
        let dir = tempfile::tempdir().unwrap();
        f(db, dir.path());
    });
}

/// Runs `f` with a store (see [`open`], in a temporary directory of its own) over a fresh
/// SQLite file and then over a fresh Postgres database ([`both_in_dirs`]).
fn both_stores(mut f: impl FnMut(&assent_store::db::Database, &Store)) {
    both_in_dirs(|db, dir| f(db, &open(dir, db)));
}

/// A store in a fresh temporary data directory (kept while the `TempDir` lives), tokens valid
/// for 60 s.
fn fresh() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    (dir, s)
}

/// The `pay` call for `amount` and the gatekeeper's confirm verdict for it.
fn pay(amount: i64) -> (ToolCall, Verdict) {
    let reg = Registry::load(&[("a".into(), AGENT.into())], &[]).unwrap();
    let call = ToolCall::new("pay", None, json!({"amount": amount})).unwrap();
    let v = evaluate(&reg, "bot", &call);
    (call, v)
}

/// A proposal of `call` by agent `bot` in `session` at `now`: held approvals wait `ttl` ms;
/// no run, device or trace id, no target, plan or policies, no cap on pending approvals
/// (override fields with `Proposal { …, ..proposal(…) }`).
fn proposal<'a>(
    call: &'a CanonicalCall,
    session: &'a str,
    now: i64,
    ttl: &'a dyn Fn(&Verdict) -> i64,
) -> Proposal<'a> {
    Proposal::for_call("bot", session, call, now, ttl, u64::MAX)
}

/// Proposes `tool` of agent `bot` in `session` at `now` with `effects`, gated as `kind` (a
/// held call waits `ttl_ms`): the session state the proposal observed, and its outcome.
fn gate_observed(
    s: &Store,
    session: &str,
    (tool, effects): (&str, assent_core::session_risk::Effects),
    kind: assent_core::VerdictKind,
    now: i64,
    ttl_ms: i64,
) -> (
    assent_core::session_risk::SessionRisk,
    assent_store::Proposed,
) {
    let call = CanonicalCall::new(ToolCall::new(tool, None, json!({"n": now})).unwrap()).unwrap();
    let ttl = |_: &Verdict| ttl_ms;
    let p = Proposal {
        effects,
        ..proposal(&call, session, now, &ttl)
    };
    let mut seen = None;
    let (_, outcome) = s
        .propose_observed(&p, None, |_, risk, _| {
            seen = Some(risk.clone());
            let mut v = pay(1).1;
            v.kind = kind;
            v
        })
        .unwrap();
    (seen.unwrap(), outcome)
}

/// Holds `call` of agent `bot` in `session` with verdict `v` at `now`, expiring at
/// `expires_at`, without gating it ([`Store::create_approval`]).
fn hold(
    store: &Store,
    session: &str,
    call: &ToolCall,
    v: &Verdict,
    now: i64,
    expires_at: i64,
) -> ApprovalRecord {
    let call = CanonicalCall::new(call.clone()).unwrap();
    let ttl = move |_: &Verdict| expires_at - now;
    store
        .create_approval(&proposal(&call, session, now, &ttl), v)
        .unwrap()
}

fn pending(
    store: &Store,
    amount: i64,
    now: i64,
    ttl: i64,
    default_approve: bool,
) -> (String, String) {
    let (call, mut v) = pay(amount);
    if default_approve {
        v.terms.default_decision = assent_core::DefaultDecision::Approve;
    }
    let rec = hold(store, "s1", &call, &v, now, now + ttl);
    assert_eq!(rec.status, ApprovalStatus::Pending);
    (rec.id, rec.call_hash)
}

/// Runs `sql` on the SQLite file behind the store's back (`?1` is approval `id`), as a damaged
/// or older database would hold the row; then reads the approval back through the store.
fn edited_behind(s: &Store, sql: &str, id: &str) -> ApprovalRecord {
    let db = rusqlite::Connection::open(s.db_path()).unwrap();
    db.execute(sql, [id]).unwrap();
    s.get_approval(id).unwrap().unwrap()
}

/// [`pending`] at 1 000 for `ttl` ms, then approved by `alice` at 2 000 (its token minted).
/// Returns the approval id and call hash.
fn approved(store: &Store, amount: i64, ttl: i64, default_approve: bool) -> (String, String) {
    let (id, h) = pending(store, amount, 1_000, ttl, default_approve);
    store
        .decide(&id, &DecisionInput::approve(), "alice", &[], 2_000)
        .unwrap();
    (id, h)
}

#[test]
fn first_decision_wins_and_late_ones_are_audited() {
    let (_dir, s) = fresh();
    let (id, _) = pending(&s, 5, 1_000, 10_000, false);
    let r = s
        .decide(&id, &DecisionInput::deny(Some("no")), "alice", &[], 2_000)
        .unwrap();
    assert_eq!(r.status, ApprovalStatus::Rejected);
    assert!(s.token_string(&id).unwrap().is_none());
    let e = s
        .decide(&id, &DecisionInput::approve(), "bob", &[], 3_000)
        .unwrap_err();
    assert!(matches!(e, DecideError::AlreadyDecided(_)));
    let r = s.get_approval(&id).unwrap().unwrap();
    assert_eq!((r.status, r.decisions.len()), (ApprovalStatus::Rejected, 1));
    assert_eq!(r.decisions[0].actor, "alice");
    assert!(matches!(
        s.decide("nope", &DecisionInput::approve(), "a", &[], 1)
            .unwrap_err(),
        DecideError::NotFound
    ));
    let rep = s.verify_audit().unwrap();
    // approval.requested, settlement.sealing (with the first settlement), confirm.requested,
    // confirm.rejected, decision, decision.late
    assert_eq!((rep.records, rep.broken), (6, None));
}

#[test]
fn tokens_are_single_use_bound_and_expire() {
    let (dir, s) = fresh();
    let (id, h) = approved(&s, 5, 10_000, false);
    let t = s.token_string(&id).unwrap().unwrap();
    assert!(matches!(
        s.redeem(&t, "bot", &"0".repeat(64), None, 3_000),
        Err(RedeemError::Mismatch { .. })
    ));
    assert!(matches!(
        s.redeem(&t, "other", &h, None, 3_000),
        Err(RedeemError::WrongAgent)
    ));
    assert!(matches!(
        s.redeem(&format!("{t}x"), "bot", &h, None, 3_000),
        Err(RedeemError::Invalid)
    ));
    assert!(matches!(
        s.redeem(&t, "bot", &h, None, 70_000),
        Err(RedeemError::Expired)
    ));
    let c = s.redeem(&t, "bot", &h, None, 3_000).unwrap();
    assert_eq!(c.aid, id);
    assert!(matches!(
        s.redeem(&t, "bot", &h, None, 3_001),
        Err(RedeemError::Used)
    ));
    // Tokens survive a reopen (the key is on disk), and a key from another data dir is refused.
    drop(s);
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    assert!(matches!(
        s.redeem(&t, "bot", &h, None, 3_002),
        Err(RedeemError::Used)
    ));
    let other = tempfile::tempdir().unwrap();
    let s2 = Store::open(other.path(), 60_000, wire()).unwrap();
    assert!(matches!(
        s2.redeem(&t, "bot", &h, None, 3_000),
        Err(RedeemError::Invalid)
    ));
}

#[test]
fn expiry_applies_the_default_and_mints_only_for_approve() {
    let (_dir, s) = fresh();
    let (rej, _) = pending(&s, 1, 1_000, 5_000, false);
    let (app, h) = pending(&s, 2, 1_000, 5_000, true);
    let (later, _) = pending(&s, 3, 1_000, 50_000, false);
    assert!(s.expire_due(5_999).unwrap().is_empty());
    let mut done = s.expire_due(6_000).unwrap();
    done.sort();
    let mut want = vec![rej.clone(), app.clone()];
    want.sort();
    assert_eq!(done, want);
    let r = s.get_approval(&rej).unwrap().unwrap();
    assert_eq!(
        (r.status, r.decisions[0].default_applied.map(|d| d.as_str())),
        (ApprovalStatus::Expired, Some("reject"))
    );
    assert!(s.token_string(&rej).unwrap().is_none());
    let a = s.get_approval(&app).unwrap().unwrap();
    assert_eq!(
        a.decisions[0].default_applied.map(|d| d.as_str()),
        Some("approve")
    );
    let t = s.token_string(&app).unwrap().unwrap();
    s.redeem(&t, "bot", &h, None, 6_001).unwrap();
    assert_eq!(
        s.get_approval(&later).unwrap().unwrap().status,
        ApprovalStatus::Pending
    );
    assert!(matches!(
        s.decide(&rej, &DecisionInput::approve(), "alice", &[], 7_000),
        Err(DecideError::AlreadyDecided(_))
    ));
}

#[test]
fn audit_verify_names_the_altered_or_removed_record() {
    let (dir, s) = fresh();
    for i in 0..3 {
        approved(&s, i, 5_000, false);
    }
    drop(s);
    let rep = verify_offline(dir.path()).unwrap();
    // Per approval: approval.requested, confirm.requested, confirm.approved, decision,
    // token.minted; and settlement.sealing with the first settlement.
    assert_eq!((rep.records, rep.broken.clone()), (16, None));
    let db = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    db.execute("UPDATE audit SET actor = 'mallory' WHERE seq = 5", [])
        .unwrap();
    let rep = verify_offline(dir.path()).unwrap();
    assert_eq!(rep.broken.as_ref().map(|b| b.0), Some(5), "{rep:?}");
    assert!(rep.broken.unwrap().1.contains("altered"));
    // Removing a record in the middle breaks the chain at the record after it.
    let dir2 = tempfile::tempdir().unwrap();
    let s = Store::open(dir2.path(), 60_000, wire()).unwrap();
    for i in 0..2 {
        pending(&s, i, 1_000, 5_000, false);
    }
    pending(&s, 9, 1_000, 5_000, false);
    drop(s);
    let db = rusqlite::Connection::open(dir2.path().join("assent.db")).unwrap();
    db.execute("DELETE FROM audit WHERE seq = 2", []).unwrap();
    assert_eq!(
        verify_offline(dir2.path()).unwrap().broken.map(|b| b.0),
        Some(3)
    );
}

#[cfg(unix)]
#[test]
fn data_dir_and_key_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    Store::open(&d, 1, wire()).unwrap();
    assert_eq!(
        std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(d.join("token.key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

/// Review finding: the key files were read whatever their mode and owner, so a `token.key`
/// that every local user could read (a copy made with `cp`, a secret mounted 0644) let any of
/// them mint tokens for every held call, and one another user owned could be a key they
/// chose. A store now refuses such a key, naming the file and the `chmod` or `chown` that
/// mends it, and refuses a key in a directory others may write.
#[cfg(unix)]
#[test]
fn a_key_file_others_may_read_or_replace_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let chmod = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    drop(Store::open(&d, 1, wire()).unwrap());
    for (file, mode) in [
        ("token.key", 0o644),
        ("audit.key", 0o604),
        ("token.key", 0o620),
    ] {
        let key = d.join(file);
        chmod(&key, mode);
        let e = Store::open(&d, 1, wire())
            .err()
            .expect("a readable key is refused");
        let text = e.to_string();
        assert!(
            text.contains(&key.display().to_string())
                && text.contains(&format!("mode {mode:04o}"))
                && text.contains("chmod 600"),
            "{text}"
        );
        chmod(&key, 0o600);
    }
    drop(Store::open(&d, 1, wire()).unwrap());
    // A key in a directory others may write (not sticky) could be swapped for another: a
    // group member renaming a retired key to `token.key` (found by review of the first form,
    // which looked at other users' write only).
    for mode in [0o777, 0o770] {
        chmod(&d, mode);
        let e = assent_store::checkpoint::read_key(&d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("may replace the key files"), "{e}");
    }
    chmod(&d, 0o1777);
    assert!(assent_store::checkpoint::read_key(&d).unwrap().is_some());
    chmod(&d, 0o700);
    if running_as_root() {
        // Root's key may be group-readable (a secret mounted for a group). A gateway run as
        // root refuses a key another user owns (who could replace it: found by review); an
        // administration command may read the service user's private key, not a readable one.
        chmod(&d.join("audit.key"), 0o640);
        assert!(assent_store::checkpoint::read_key(&d).unwrap().is_some());
        std::os::unix::fs::chown(d.join("audit.key"), Some(4242), None).unwrap();
        chmod(&d.join("audit.key"), 0o600);
        let e = assent_store::checkpoint::read_key(&d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("belongs to user id 4242"), "{e}");
        assent_store::keys::let_root_read_service_keys();
        assert!(assent_store::checkpoint::read_key(&d).unwrap().is_some());
        chmod(&d.join("audit.key"), 0o640);
        assert!(assent_store::checkpoint::read_key(&d).is_err());
    }
}

/// Whether the tests run as root (who may change a file's owner).
#[cfg(unix)]
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let probe = tempfile::tempfile().unwrap();
    probe.metadata().unwrap().uid() == 0
}

#[test]
fn only_an_approver_role_may_decide_and_refusals_are_audited() {
    let (dir, s) = fresh();
    let (call, mut v) = pay(1);
    v.terms.approvers = vec!["finance".into()];
    let id = hold(&s, "s", &call, &v, 1, 10_000).id;
    let e = s
        .decide(&id, &DecisionInput::approve(), "olaf", &["ops".into()], 2)
        .unwrap_err();
    assert!(
        matches!(&e, DecideError::NotApprover(r) if r == &vec!["finance".to_string()]),
        "{e}"
    );
    assert_eq!(
        s.get_approval(&id).unwrap().unwrap().status,
        ApprovalStatus::Pending
    );
    let r = s
        .decide(
            &id,
            &DecisionInput::approve(),
            "alice",
            &["ops".into(), "finance".into()],
            3,
        )
        .unwrap();
    assert_eq!(r.status, ApprovalStatus::Approved);
    let db = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    let kinds: Vec<String> = db
        .prepare("SELECT kind FROM audit ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "confirm.requested",
            "decision.refused",
            "settlement.sealing",
            "confirm.approved",
            "decision",
            "token.minted"
        ]
    );
}

/// Attack (issue 10 §8): whoever can write the database corrupts one decision-relevant column
/// of a pending approval, hoping a lenient reader widens who may approve it or what happens at
/// expiry, or lifts a limit with a negative count. Each unreadable column is named in `damaged`, holds its most restrictive value, and
/// nobody may decide, cancel or expire the approval; every refusal is audited.
#[test]
fn a_corrupted_column_makes_an_approval_damaged_and_undecidable() {
    let cases: &[(&str, &str)] = &[
        ("approvers", "'[\"finance\"'"),
        ("approvers", "42"),
        ("risk_tier", "'R9'"),
        ("default_decision", "'approve please'"),
        ("escalate_to", "'{'"),
        ("arguments", "'not json'"),
        ("reasons", "x'00ff'"),
        ("scope", "'forever'"),
        ("status", "'limbo'"),
        // A negative count read as u64 would be 2^64 - 1: no limit on the result's size.
        ("output_bytes", "-1"),
        ("escalate_after_ms", "-5000"),
        ("quorum", "'{\"groups\": 2'"),
        // Escalation chains (issue 14 §3): a schedule or step count nobody can read must not
        // skip steps or lift the deadline.
        ("escalation", "'{'"),
        ("escalation_schedule", "'{\"steps\": 1}'"),
        ("escalation_steps", "-1"),
        ("escalation_steps", "7"),
    ];
    for (col, bad) in cases {
        let (_dir, s) = fresh();
        let (id, _) = pending(&s, 5, 1_000, 10_000, true);
        let db = rusqlite::Connection::open(s.db_path()).unwrap();
        db.execute_batch("PRAGMA ignore_check_constraints = 1;")
            .unwrap();
        db.execute(
            &format!("UPDATE approvals SET {col} = {bad} WHERE id = ?1"),
            [&id],
        )
        .unwrap();
        let rec = s.get_approval(&id).unwrap().unwrap();
        assert_eq!(rec.damaged, vec![col.to_string()], "{col} = {bad}");
        match *col {
            "approvers" => assert_eq!(rec.terms.approvers, [assent_store::stored::UNREADABLE_ROLE]),
            "risk_tier" => assert_eq!(rec.terms.risk_tier, assent_core::RiskTier::R4),
            "default_decision" => {
                assert_eq!(
                    rec.terms.default_decision,
                    assent_core::DefaultDecision::Reject
                )
            }
            "status" => assert_eq!(rec.status, ApprovalStatus::Cancelled),
            "scope" => assert_eq!(rec.scope, Some(assent_core::approval::GrantScope::Once)),
            "output_bytes" => assert_eq!(rec.terms.output_bytes, Some(0)),
            "quorum" => {
                let q = rec.terms.quorum.as_ref().unwrap();
                assert_eq!(q.groups[0].roles, [assent_store::stored::UNREADABLE_ROLE]);
            }
            "escalate_after_ms" => assert!(
                rec.terms
                    .escalation
                    .iter()
                    .all(|e| e.last_wait_seconds == Some(0)),
                "{:?}",
                rec.terms.escalation
            ),
            _ => {}
        }
        let e = s
            .decide(&id, &DecisionInput::approve(), "alice", &[], 2_000)
            .unwrap_err();
        assert!(
            matches!(&e, DecideError::Damaged(c) if c == &[col.to_string()]),
            "{e}"
        );
        assert!(matches!(
            s.cancel(&id, None, "bot", 2_000),
            Err(DecideError::Damaged(_))
        ));
        // Overdue, yet the sweep leaves it alone (and does not fail).
        assert!(s.expire_due(100_000).unwrap().is_empty());
        assert!(s.token_string(&id).unwrap().is_none());
        let refused: i64 = db
            .query_row(
                "SELECT count(*) FROM audit WHERE kind = 'decision.refused' AND approval_id = ?1",
                [&id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(refused, 2, "{col}");
        let found = assent_store::integrity::cross_check(&db).unwrap();
        assert!(
            found
                .iter()
                .any(|(_, m)| m
                    .contains(&format!("approval {id} is damaged: stored column(s) {col}"))),
            "{found:?}"
        );
    }
}

/// Issue 10 §5: with an `on_timeout` escalation (first wait 100 s, then 100 s more), the
/// confirmation announces 200 s, countdowns fire at 50 % and 10 % of those 200 s, the
/// escalation is announced with the time left to the same deadline, and the default applies
/// exactly there.
#[test]
fn countdowns_and_the_escalation_count_toward_the_announced_deadline() {
    let (_dir, s) = fresh();
    let (call, mut v) = pay(1);
    v.terms.escalation = Some(assent_core::triggers::Escalation {
        steps: vec![assent_core::triggers::EscalationStep {
            after_seconds: None,
            approvers: vec!["ops".into()],
        }],
        last_wait_seconds: Some(100),
    });
    v.terms.approvers = vec!["finance".into()];
    let rec = hold(&s, "s1", &call, &v, 1_000, 101_000);
    assert_eq!(rec.announced_deadline(), 201_000);
    let db = rusqlite::Connection::open(s.db_path()).unwrap();
    let events = |ty: &str| -> Vec<serde_json::Value> {
        let mut st = db
            .prepare("SELECT data FROM aaep_events WHERE type = ?1 ORDER BY rowid")
            .unwrap();
        st.query_map([ty], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|d| serde_json::from_str(&d.unwrap()).unwrap())
            .collect()
    };
    let awaiting = events("aaep:agent.awaiting.confirmation");
    assert_eq!(awaiting[0]["timeout_seconds"], 200);
    // Half of the first wait is not half of the announced one.
    assert_eq!(s.emit_countdowns(60_000).unwrap(), 0);
    assert_eq!(s.expire_due(101_000).unwrap(), vec![rec.id.clone()]);
    assert_eq!(s.emit_countdowns(101_000).unwrap(), 1);
    assert_eq!(s.emit_countdowns(180_999).unwrap(), 0);
    assert_eq!(s.emit_countdowns(181_000).unwrap(), 1);
    let progress = events("aaep:agent.progress.updated");
    let seen: Vec<_> = progress
        .iter()
        .map(|e| (e["progress"]["percent"].clone(), e["eta_ms"].clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (json!(50), json!(100_000)), // the escalation, halfway
            (json!(50), json!(100_000)),
            (json!(90), json!(20_000)),
        ]
    );
    assert_eq!(
        progress[0]["extensions"]["assent"]["escalation"]["approvers"],
        json!(["finance", "ops"])
    );
    assert!(s.expire_due(200_999).unwrap().is_empty());
    assert_eq!(s.expire_due(201_000).unwrap(), vec![rec.id.clone()]);
    let rec = s.get_approval(&rec.id).unwrap().unwrap();
    assert_eq!(rec.status, ApprovalStatus::Expired);
}

/// A settled approval's decision row is read strictly too: an unreadable `decision` or
/// `default_applied` is named in `damaged` (as `decisions.COLUMN`) and reads as the most
/// restrictive value (`deny`, `reject`).
#[test]
fn a_corrupted_decision_row_is_named_and_reads_as_a_deny() {
    let (_dir, s) = fresh();
    let (id, _) = approved(&s, 5, 10_000, true);
    let rec = edited_behind(
        &s,
        "UPDATE decisions SET decision = 'approve!', default_applied = 'yes' WHERE approval_id = ?1",
        &id,
    );
    assert_eq!(
        rec.damaged,
        ["decisions.decision", "decisions.default_applied"]
    );
    assert_eq!(rec.decisions[0].decision, assent_store::Settlement::Deny);
    assert_eq!(
        rec.decisions[0].default_applied,
        Some(assent_core::DefaultDecision::Reject)
    );
}
