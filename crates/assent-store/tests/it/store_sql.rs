//! A representative set of the store's own statements (copied from `propose.rs`, `decide.rs`,
//! `tokens.rs`, `emit.rs`, `subscriptions.rs`, `outbox.rs`, `pins.rs`,
//! `record.rs`, `reads.rs`, `audit.rs`, `checkpoint.rs`, `sessions.rs`, `usage.rs`, `plans.rs`, `clarifications.rs`, `learning.rs`, `decide.rs`, `propose.rs`; in the portable forms of the Postgres design where
//! the store's text is SQLite-only, named below) run through the kernel against the schema
//! each dialect's migrations build: the Postgres DDL must have every table, column and type
//! the store's SQL uses.

use crate::pgkit::{both, column, value};
use assent_store::db::{Conn, OptionalExtension, tuple};
use assent_store::migrate::migrate;
use assent_store::params;

const APPROVAL: &str = "INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status,
            run_id, device_id, group_key, human_summary, triggers, suggested_alternatives, escalate_to, escalate_after_ms, output_bytes, trace_id, span_id, target_id, target_type, target_diff, in_client, side_effects, rollback, dry_run_tool, redact)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32,?33,?34,?35,?36)";

fn hold(c: Conn<'_>, id: &str, at: i64) {
    let none: Option<String> = None;
    c.execute(
        APPROVAL,
        params![
            id,
            "bot",
            "s1",
            "pay",
            none,
            "{}",
            "{}",
            "h",
            "pay?",
            "R3",
            true,
            "[]",
            "[\"ops\"]",
            "reject",
            at,
            at + 600_000,
            "pending",
            none,
            none,
            "g",
            "",
            "[]",
            "[]",
            "[]",
            None::<i64>,
            Some(10i64),
            "t",
            "sp",
            none,
            "tool_call",
            none,
            false,
            "[]",
            "[]",
            none,
            "[]"
        ],
    )
    .unwrap();
}

#[test]
fn the_stores_statements_run_on_the_schema_of_both_dialects() {
    both(|db| {
        let conn = db.connect().unwrap();
        let c = conn.conn();
        migrate(c, "db").unwrap();
        hold(c, "a1", 1_000);
        hold(c, "a2", 1_000);
        // reads.rs, in the portable form of `?1 IS NULL OR status = ?1`; rowid breaks the tie.
        let ids: Vec<String> = column(
            c,
            "SELECT id FROM approvals WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) ORDER BY requested_at DESC, rowid DESC LIMIT ?2",
            params![None::<String>, 10u32],
        );
        assert_eq!(ids, ["a2", "a1"]);
        let (irreversible, in_client): (bool, bool) = c
            .query_row(
                "SELECT irreversible, in_client FROM approvals WHERE id = ?1",
                ["a1"],
                tuple,
            )
            .unwrap();
        assert_eq!((irreversible, in_client), (true, false));
        // decide.rs: settle, then the decision row.
        let settled = c
            .execute(
                "UPDATE approvals SET status = ?2, decided_at = ?3 WHERE id = ?1 AND status = 'pending'",
                params!["a1", "approved", 2_000i64],
            )
            .unwrap();
        assert_eq!(settled, 1);
        c.execute(
            "INSERT INTO decisions (approval_id, decision, reason, actor, at, default_applied, decision_id) VALUES (?1,?2,?3,?4,?5,?6,?7)",
            params!["a1", "approve", None::<String>, "ann", 2_000i64, None::<String>, "d1"],
        )
        .unwrap();
        // record.rs
        let decided: Vec<String> = c
            .query_map(
                "SELECT decision, reason, actor, at, default_applied, decision_id FROM decisions WHERE approval_id = ?1 ORDER BY rowid",
                ["a1"],
                |r| r.get("actor"),
            )
            .unwrap();
        assert_eq!(decided, ["ann"]);
        // tokens.rs: mint, grant (a boolean column), and the list with a bare boolean parameter.
        c.execute(
            "INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at, scope, device_id) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
            params!["t1", "a1", "bot", "h", 2_000i64, 62_000i64, "once", None::<String>],
        )
        .unwrap();
        c.execute(
            "INSERT INTO grants (id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
            params!["g1", "bot", "s1", "pay", None::<String>, "h", "session", "R3", true, "a1", "ann", 2_000i64, None::<i64>],
        )
        .unwrap();
        let grants = |all: bool| -> Vec<(String, bool)> {
            c.query_map(
                "SELECT id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at, revoked_at, revoked_by
                 FROM grants WHERE ?1 OR (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?2)) ORDER BY created_at DESC, rowid DESC",
                params![all, 3_000i64],
                |r| Ok((r.get("id")?, r.get("discouraged")?)),
            )
            .unwrap()
        };
        assert_eq!(grants(false), [("g1".to_string(), true)]);
        // tokens.rs `server IS ?3`, in the portable form IS NOT DISTINCT FROM.
        let found: Vec<String> = column(
            c,
            "SELECT id FROM grants WHERE agent = ?1 AND tool = ?2 AND server IS NOT DISTINCT FROM ?3 ORDER BY created_at, rowid",
            params!["bot", "pay", None::<String>],
        );
        assert_eq!(found, ["g1"]);
        // tokens.rs: redeem once.
        let used = "UPDATE tokens SET used_at = ?2 WHERE token_id = ?1 AND used_at IS NULL";
        assert_eq!(c.execute(used, params!["t1", 3_000i64]).unwrap(), 1);
        assert_eq!(c.execute(used, params!["t1", 3_001i64]).unwrap(), 0);
        events_and_side_tables(c);
        // expiry.rs: the countdown marks, a bit test on a BIGINT. Not a copy: the store's own
        // statement, run by `emit_countdowns` on two rows held here (both halfway at 400 s).
        hold(c, "a3", 1_000);
        hold(c, "a4", 1_000);
        let dir = tempfile::tempdir().unwrap();
        let store = crate::open(dir.path(), db);
        assert_eq!(store.emit_countdowns(400_000).unwrap(), 2);
    });
}

/// emit.rs, subscriptions.rs, audit.rs, sessions.rs, outbox.rs and pins.rs statements.
fn events_and_side_tables(c: Conn<'_>) {
    // (`Store::still_awaiting`, which reads these events with the pending approvals and
    // questions, runs on both backends in the server's
    // `a_resumption_past_the_window_still_gets_the_confirmations_pending_in_the_gap`.)
    let emit = "INSERT INTO aaep_events (event_id, type, critical, subscription_id, approval_id, at, data, clarification_id) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)";
    for (i, critical) in [(1, true), (2, false), (3, true)] {
        c.execute(
            emit,
            params![
                format!("evt_{i}"),
                "x",
                critical,
                None::<String>,
                "a1",
                5i64,
                "{}",
                None::<String>
            ],
        )
        .unwrap();
    }
    let events: Vec<(i64, bool)> = c
        .query_map(
            "SELECT seq, event_id, type, critical, data FROM aaep_events
             WHERE seq > ?1 AND (subscription_id IS NULL OR subscription_id = ?2) ORDER BY seq LIMIT ?3",
            params![1i64, "sub_x", 10u32],
            |r| Ok((r.get("seq")?, r.get("critical")?)),
        )
        .unwrap();
    assert_eq!(events, [(2, false), (3, true)]);
    c.execute(
        "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
        params![1i64, 5i64, "approval.created", "a1", "bot", "{}", "0", "h1"],
    )
    .unwrap();
    let head: (i64, String) = c
        .query_row(
            "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
            [],
            tuple,
        )
        .unwrap();
    assert_eq!(head, (1, "h1".to_string()));
    // sessions.rs, in the portable form of INSERT OR IGNORE.
    let cancel = "INSERT INTO cancelled_sessions (agent, session_id, at, actor, announced) VALUES (?1,?2,?3,?4,0) ON CONFLICT DO NOTHING";
    assert_eq!(
        c.execute(cancel, params!["bot", "s1", 1i64, "ann"])
            .unwrap(),
        1
    );
    assert_eq!(
        c.execute(cancel, params!["bot", "s1", 2i64, "ann"])
            .unwrap(),
        0
    );
    // outbox.rs: the cursor upsert, a dead letter with its implicit id.
    let cursor = "INSERT INTO webhook_cursors (webhook, last_seq) VALUES (?1, ?2)
         ON CONFLICT(webhook) DO UPDATE SET last_seq = excluded.last_seq";
    c.execute(cursor, params!["w", 1i64]).unwrap();
    c.execute(cursor, params!["w", 7i64]).unwrap();
    let last: i64 = value(
        c,
        "SELECT last_seq FROM webhook_cursors WHERE webhook = ?1",
        ["w"],
    );
    assert_eq!(last, 7);
    let dead: i64 = value(c, "INSERT INTO webhook_dead_letters (webhook, audit_seq, event, body, attempts, last_error, failed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
            params!["w", 1i64, "e", "{}", 3u32, "timeout", 9i64]);
    assert_eq!(dead, 1);
    // pins.rs: reviews ordered newest first, rowid breaking the tie; pins in byte order.
    let review = "INSERT INTO tool_reviews (id, scope, server, tool, fingerprint, definition, seen_at, seen_by, status) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,'pending')";
    c.execute(
        review,
        params!["r1", "bot", "srv", "t", "f1", "{}", 5i64, "bot"],
    )
    .unwrap();
    c.execute(
        review,
        params!["r2", "", "srv", "t", "f2", "{}", 5i64, "bot"],
    )
    .unwrap();
    let reviews: Vec<String> = column(
        c,
        "SELECT id FROM tool_reviews WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) ORDER BY seen_at DESC, rowid DESC",
        ["pending"],
    );
    assert_eq!(reviews, ["r2", "r1"]);
    let pin = "INSERT INTO tool_pins (scope, server, tool, fingerprint, definition, pinned_at, pinned_by) VALUES (?1,?2,?3,?4,?5,?6,?7)";
    for (s, t) in [("b", "x"), ("B", "x"), ("a", "Z"), ("a", "y")] {
        c.execute(pin, params!["", s, t, "f", "{}", 1i64, "tofu"])
            .unwrap();
    }
    // The pin that holds in an agent's scope: its own first, else the gateway's ('').
    c.execute(pin, params!["bot", "a", "y", "own", "{}", 1i64, "tofu"])
        .unwrap();
    let holds = "SELECT fingerprint, definition FROM tool_pins WHERE server = ?1 AND tool = ?2 AND (scope = ?3 OR scope = '') ORDER BY scope DESC LIMIT 1";
    let fp: String = value(c, holds, params!["a", "y", "bot"]);
    assert_eq!(fp, "own");
    let fp: String = value(c, holds, params!["a", "y", "eve"]);
    assert_eq!(fp, "f");
    c.execute("DELETE FROM tool_pins WHERE scope = 'bot'", [])
        .unwrap();
    let pins: Vec<(String, String)> = c
        .query_map(
            "SELECT scope, server, tool, fingerprint, definition, pinned_at, pinned_by FROM tool_pins ORDER BY scope, server, tool",
            [],
            |r| Ok((r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let want = [("B", "x"), ("a", "Z"), ("a", "y"), ("b", "x")];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(s, t)| (s.to_string(), t.to_string()))
        .collect();
    assert_eq!(pins, want, "bytewise, as SQLite's BINARY collation");
    checkpoints(c);
    lifecycle_reads(c);
}

/// checkpoint.rs: the page before a sequence number, in the portable form of
/// `?1 IS NULL OR seq < ?1` (`CAST(?1 AS BIGINT)`), and the newest one.
fn checkpoints(c: Conn<'_>) {
    assert!(c.has_table("audit_checkpoints").unwrap());
    let cols = "seq, head_hash, record_count, time, public_key, signature";
    for seq in [3i64, 7, 9] {
        c.execute(
            &format!("INSERT INTO audit_checkpoints ({cols}) VALUES (?1,?2,?3,?4,?5,?6)"),
            params![seq, "h", seq, 1_000i64, "pk", "sig"],
        )
        .unwrap();
    }
    let page = |before: Option<i64>| -> Vec<i64> {
        c.query_map(
            &format!("SELECT {cols} FROM audit_checkpoints WHERE CAST(?1 AS BIGINT) IS NULL OR seq < ?1 ORDER BY seq DESC LIMIT ?2"),
            params![before, 2u32],
            |r| r.get("seq"),
        )
        .unwrap()
    };
    assert_eq!(page(None), [9, 7]);
    assert_eq!(page(Some(7)), [3]);
    let newest: i64 = value(
        c,
        &format!("SELECT {cols} FROM audit_checkpoints ORDER BY seq DESC LIMIT 1"),
        [],
    );
    assert_eq!(newest, 9);
}

/// sessions.rs, usage.rs, plans.rs, outbox.rs: the forms edited for Postgres (`CAST(?2 AS
/// TEXT)`, `IS DISTINCT FROM`, a UNION without ORDER BY, the plan's stage records by the
/// Confirm's target, the pending Confirm ordered, audit kinds as parameters).
fn lifecycle_reads(c: Conn<'_>) {
    let pending = |agent: Option<&str>| -> Vec<String> {
        column(
            c,
            "SELECT id FROM approvals WHERE session_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR agent = ?2) AND status = 'pending' ORDER BY requested_at",
            params!["s1", agent],
        )
    };
    assert_eq!(pending(Some("nobody")), Vec::<String>::new());
    assert!(!pending(None).is_empty());
    let agents: Vec<String> = column(c, "SELECT agent FROM approvals WHERE session_id = ?1 UNION SELECT agent FROM clarifications WHERE session_id = ?1
             UNION SELECT agent FROM usage WHERE session_id = ?1",
            ["s1"]);
    assert_eq!(agents, ["bot"]);
    let prior = |except: Option<&str>| -> i64 {
        value(c, "SELECT count(*) FROM usage u LEFT JOIN approvals a ON a.id = u.approval_id
             WHERE u.agent = ?1 AND u.session_id = ?2 AND (CAST(?3 AS TEXT) IS NULL OR u.approval_id IS DISTINCT FROM ?3)",
            params!["bot", "s1", except])
    };
    assert_eq!(prior(None), prior(Some("a1")));
    let confirm: Option<String> = c
        .query_row(
            "SELECT id FROM approvals WHERE target_id = ?1 AND status = 'pending' ORDER BY requested_at, rowid LIMIT 1",
            ["no-plan"],
            |r| r.get(0),
        )
        .optional()
        .unwrap();
    assert_eq!(confirm, None);
    let stages: Vec<String> = column(
        c,
        "SELECT data FROM audit WHERE kind = 'pipeline_stage' AND approval_id IN (SELECT id FROM approvals WHERE target_id = ?1) ORDER BY seq",
        ["no-plan"],
    );
    assert!(stages.is_empty());
    let kinds: Vec<i64> = c
        .query_map(
            "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit WHERE seq > ?1 AND kind IN (?3,?4) ORDER BY seq LIMIT ?2",
            params![0i64, 10u32, "nothing.such", "other.such"],
            |r| r.get("seq"),
        )
        .unwrap();
    assert!(kinds.is_empty());
    // clarifications.rs, learning.rs.
    let questions: Vec<String> = column(
        c,
        "SELECT id FROM clarifications WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) ORDER BY requested_at DESC LIMIT 500",
        [None::<String>],
    );
    assert!(questions.is_empty());
    c.execute(
        "UPDATE approvals SET status = 'rejected', decided_at = ?2 WHERE id = ?1",
        params!["a2", 5_000i64],
    )
    .unwrap();
    c.execute(
        "UPDATE approvals SET status = 'cancelled' WHERE id = ?1",
        ["a1"],
    )
    .unwrap();
    let decided: Vec<String> = column(
        c,
        "SELECT id FROM approvals WHERE status != 'pending' ORDER BY decided_at NULLS FIRST, rowid",
        [],
    );
    assert_eq!(
        decided[..2],
        ["a1", "a2"],
        "NULL decided_at first, as SQLite"
    );
    // decide.rs: the edited result limit, computed in Rust and bound as one value; propose.rs:
    // the pending review quoted in a refusal, ordered.
    c.execute(
        "UPDATE approvals SET output_bytes = ?2 WHERE id = ?1",
        params!["a1", 5i64],
    )
    .unwrap();
    let review: Option<String> = c
        .query_row(
            "SELECT id FROM tool_reviews WHERE server = ?1 AND tool = ?2 AND status = 'pending' AND (scope = '' OR scope = ?3) ORDER BY seen_at, rowid LIMIT 1",
            ["nobody", "nothing", "bot"],
            |r| r.get(0),
        )
        .optional()
        .unwrap();
    assert_eq!(review, None);
}

/// The store's life cycle through its public API on both backends: a held call, its approval,
/// a late decision refused (audited `decision.late`, committed), the token redeemed once and
/// refused the second time (audited `token.refused`, committed), and the audit chain verified;
/// on Postgres a listener hears the approval's change.
#[test]
fn a_call_is_held_decided_and_redeemed_on_both_backends() {
    use assent_core::ApprovalStatus;
    use assent_store::{DecideError, DecisionInput, RedeemError};
    crate::both_stores(|db, s| {
        let (call, v) = crate::pay(5);
        let h = call.canonical_and_hash().unwrap().1;
        // On Postgres, another replica's listener hears the decision once it commits.
        let (send, heard) = std::sync::mpsc::channel();
        let _listener = match db {
            assent_store::db::Database::Postgres { url } => {
                let l = assent_store::db::listen(url, move |h| {
                    let _ = send.send(h);
                })
                .unwrap();
                let first = heard.recv_timeout(std::time::Duration::from_secs(30));
                assert_eq!(first.unwrap(), assent_store::db::Heard::Resync);
                Some(l)
            }
            assent_store::db::Database::Sqlite { .. } => None,
        };
        let held = crate::hold(s, "s1", &call, &v, 1_000, 61_000);
        assert_eq!(held.status, ApprovalStatus::Pending);
        let ok = s
            .decide(&held.id, &DecisionInput::approve(), "alice", &[], 2_000)
            .unwrap();
        assert_eq!(ok.status, ApprovalStatus::Approved);
        if _listener.is_some() {
            let want = assent_store::db::Heard::Changed(assent_store::db::Change::Approval(
                held.id.clone(),
            ));
            // Held, then decided: two transactions, each heard with the approval's change.
            let mut all = Vec::new();
            while all.iter().filter(|h| **h == want).count() < 2 {
                all.push(
                    heard
                        .recv_timeout(std::time::Duration::from_secs(30))
                        .unwrap(),
                );
            }
            assert!(all.contains(&assent_store::db::Heard::Changed(
                assent_store::db::Change::Events
            )));
        }
        let late = s.decide(&held.id, &DecisionInput::deny(None), "bob", &[], 2_100);
        assert!(
            matches!(late, Err(DecideError::AlreadyDecided(_))),
            "{late:?}"
        );
        let t = s.token_string(&held.id).unwrap().expect("minted");
        s.redeem(&t, "bot", &h, None, 3_000).unwrap();
        let again = s.redeem(&t, "bot", &h, None, 3_100);
        assert!(matches!(again, Err(RedeemError::Used)), "{again:?}");
        let kinds = crate::audit_kinds(s, 100);
        for k in ["decision.late", "token.refused", "token.redeemed"] {
            assert!(kinds.iter().any(|x| x == k), "{k} committed: {kinds:?}");
        }
        let rep = s.verify_audit().unwrap();
        assert_eq!(rep.broken, None);
        assert!(rep.records >= 5);
    });
}
