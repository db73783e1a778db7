//! A settlement edited in the database while the gateway runs (`assent-store`
//! `settlement_seal.rs`): its token is refused at redemption (`409 SETTLEMENT_UNSEALED`),
//! not only voided at the next start; and `audit verify` reports it whatever
//! `assent_schema.applied_at` of migration 0035, the row's `decided_at` or its cleared seals
//! say: the audit chain's `settlement.sealing` record, written with the first settlement,
//! holds every later one to its seal. Either backend.

use crate::backend::{Param, audit_count, audit_problem};
use crate::kit::{Gw, OP, assert_error, serve, token_of};
use reqwest::StatusCode;
use serde_json::json;

/// `pay(500, to)` held in session `s1` and decided `d` by the operator: its approval id.
async fn decided(gw: &Gw, to: &str, d: &str) -> String {
    let id = gw.held("s1", "pay", json!({"amount": 500, "to": to})).await;
    assert_eq!(gw.decide(&id, OP, d).await.0, StatusCode::OK);
    id
}

/// Redeems `token` for `pay(500, to)` as bot.
async fn redeem_pay(gw: &Gw, token: &str, to: &str) -> (StatusCode, serde_json::Value) {
    gw.redeem(token, "pay", json!({"amount": 500, "to": to}), None)
        .await
}

/// Runs `sql` behind the gateway's back; it must change one row.
#[track_caller]
fn tamper(gw: &Gw, sql: &str) {
    assert_eq!(gw.sql().exec(sql, &[]), 1, "{sql}");
}

/// The first problem `audit verify` reports, if any.
fn problem(gw: &Gw) -> Option<String> {
    audit_problem(&gw.data_dir).map(|p| p.reason)
}

/// Attack (found by review): the settlement seal was checked at start-up and by `audit
/// verify`, not at redemption. A database writer edits approved settlements while the gateway
/// runs — the deciding operator renamed, a decision's key binding stripped (so that a later
/// rotation of the stolen key would not void its token) — and the tokens redeem at once. Now
/// each is refused `409 SETTLEMENT_UNSEALED`, audited `token.refused`, and stays unused: put
/// back as the gateway sealed it, it redeems. An untouched approval redeems.
#[tokio::test]
async fn a_settlement_edited_behind_the_running_gateway_redeems_nothing() {
    let gw = serve().await;
    let renamed = decided(&gw, "alice", "approve").await;
    let stripped = decided(&gw, "bob", "approve").await;
    let untouched = decided(&gw, "carol", "approve").await;
    let tokens: Vec<String> = [&renamed, &stripped, &untouched]
        .map(|id| id.clone())
        .to_vec();
    let mut minted = Vec::new();
    for id in &tokens {
        minted.push(token_of(&gw.as_agent(id).await));
    }
    let actor = |id: &str| {
        let sql = "SELECT actor FROM decisions WHERE approval_id = ?1";
        gw.sql().text(sql, &[Param::from(id)])
    };
    let by = actor(&renamed);
    tamper(
        &gw,
        &format!("UPDATE decisions SET actor = 'eve' WHERE approval_id = '{renamed}'"),
    );
    tamper(
        &gw,
        &format!("UPDATE decisions SET key_binding = NULL WHERE approval_id = '{stripped}'"),
    );
    for (token, to) in [(&minted[0], "alice"), (&minted[1], "bob")] {
        let (s, b) = redeem_pay(&gw, token, to).await;
        assert_error(s, &b, StatusCode::CONFLICT, "SETTLEMENT_UNSEALED");
        assert!(b["message"].as_str().unwrap().contains("seal"), "{b}");
    }
    assert_eq!(audit_count(&gw.data_dir, "token.refused"), 2);
    let (s, b) = redeem_pay(&gw, &minted[2], "carol").await;
    assert_eq!(s, StatusCode::OK, "an untouched settlement redeems: {b}");
    // Refused, not consumed: put back as it was sealed, the settlement vouches again.
    tamper(
        &gw,
        &format!("UPDATE decisions SET actor = '{by}' WHERE approval_id = '{renamed}'"),
    );
    let (s, b) = redeem_pay(&gw, &minted[0], "alice").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(audit_count(&gw.data_dir, "token.redeemed"), 2);
    gw.stop().await;
}

/// Attack (found by review): `audit verify` checked the settlements decided since
/// `assent_schema.applied_at` of migration 0035, by the row's own `decided_at`. A database
/// writer who strips a decision's key binding and moves `applied_at` forward (or the row's
/// `decided_at` back) had the edit go unreported. Now which settlements were sealed is told
/// by the audit chain and the seals: the edited settlement is reported, so is one whose seal
/// was cleared after a sealed one, one with no seal whose terms hold today's seal, and one
/// made to look settled before 0035 (no seal, its terms' seal voided) but settled after the
/// chain's `settlement.sealing` record.
#[tokio::test]
async fn verify_reports_an_edited_settlement_whatever_applied_at_and_decided_at_say() {
    let gw = serve().await;
    let old = decided(&gw, "alice", "approve").await;
    let sealed = decided(&gw, "bob", "deny").await;
    let edited = decided(&gw, "carol", "approve").await;
    assert_eq!(problem(&gw), None);
    // Made to look settled before 0035 (no settlement seal, its terms' seal voided,
    // 0033/0034): it was settled after the chain's `settlement.sealing` record, so it is
    // reported; put back, it passes.
    let seals = |id: &str| {
        let sql = "SELECT settlement_seal, seal FROM approvals WHERE id = ?1";
        let r = gw.sql().rows(sql, &[Param::from(id)]);
        (r[0][0].clone(), r[0][1].clone())
    };
    let (settlement_seal, seal) = seals(&old);
    tamper(
        &gw,
        &format!("UPDATE approvals SET settlement_seal = '', seal = '' WHERE id = '{old}'"),
    );
    let p = problem(&gw).expect("a settlement after settlement.sealing without a seal");
    assert!(
        p.contains(&old) && p.contains("does not hold its seal"),
        "{p}"
    );
    tamper(
        &gw,
        &format!(
            "UPDATE approvals SET settlement_seal = '{settlement_seal}', seal = '{seal}' WHERE id = '{old}'"
        ),
    );
    assert_eq!(problem(&gw), None, "put back");
    tamper(
        &gw,
        "UPDATE assent_schema SET applied_at = 4102444800000 WHERE version = 35",
    );
    let binding = {
        let sql = "SELECT key_binding FROM decisions WHERE approval_id = ?1";
        gw.sql().text(sql, &[Param::from(edited.as_str())])
    };
    let strip = format!("UPDATE decisions SET key_binding = NULL WHERE approval_id = '{edited}'");
    tamper(&gw, &strip);
    let reported = |gw: &Gw, id: &str, what: &str| {
        let p = problem(gw).unwrap_or_else(|| panic!("{what}: not reported"));
        assert!(
            p.contains(id) && p.contains("does not hold its seal"),
            "{what}: {p}"
        );
    };
    reported(&gw, &edited, "applied_at moved forward");
    tamper(
        &gw,
        &format!("UPDATE approvals SET decided_at = 1 WHERE id = '{edited}'"),
    );
    reported(&gw, &edited, "decided_at moved back too");
    // Put back whole, then its seal cleared instead: settled after a sealed one.
    let back =
        format!("UPDATE decisions SET key_binding = '{binding}' WHERE approval_id = '{edited}'");
    tamper(&gw, &back);
    let decided_at = {
        let sql = "SELECT at FROM decisions WHERE approval_id = ?1";
        gw.sql().int(sql, &[Param::from(edited.as_str())])
    };
    tamper(
        &gw,
        &format!("UPDATE approvals SET decided_at = {decided_at} WHERE id = '{edited}'"),
    );
    assert_eq!(problem(&gw), None, "put back as sealed");
    let clear = |id: &str| format!("UPDATE approvals SET settlement_seal = '' WHERE id = '{id}'");
    tamper(&gw, &clear(&edited));
    reported(&gw, &edited, "seal cleared after a sealed settlement");
    // Every seal since cleared: the terms still hold today's seal, which only a gateway that
    // seals settlements writes.
    tamper(&gw, &clear(&sealed));
    reported(&gw, &sealed, "every seal cleared");
    gw.stop().await;
}

/// The number of state disagreements `audit verify` (the store's public API, as
/// [`audit_problem`]) finds in the database of the gateway `gw`, and the first.
fn disagreements(gw: &Gw) -> (usize, Option<String>) {
    let db = crate::backend::database(&gw.data_dir);
    let rep = crate::backend::off_runtime(|| {
        let opts = Default::default();
        assent_store::integrity::verify_database(&db, &gw.data_dir, &opts).unwrap()
    });
    (rep.state_disagreements, rep.problem.map(|p| p.reason))
}

/// Attack (found by review): which settlements must hold a seal was told by the seals
/// themselves and the terms' seals, columns a database writer controls. One who clears every
/// seal, the settlement's and the terms', back to the first settlement (so that none holds
/// to place the others after, and none looks held by a gateway that seals) and strips the
/// last approval's decision key binding had the edit pass `audit verify`. Now every
/// settlement after the audit chain's `settlement.sealing` record (hash-linked, signed by the
/// checkpoints, written with the first settlement) must hold its seal: each cleared one is
/// reported, and with the untouched ones' seals put back, the edited one is named.
#[tokio::test]
async fn verify_names_an_edited_settlement_after_every_seal_before_it_was_cleared() {
    let gw = serve().await;
    let mut before = Vec::new();
    for to in ["alice", "bob"] {
        let id = decided(&gw, to, "approve").await;
        let sql = "SELECT settlement_seal, seal FROM approvals WHERE id = ?1";
        let r = gw.sql().rows(sql, &[Param::from(id.as_str())]);
        before.push((id, r[0][0].clone(), r[0][1].clone()));
    }
    let edited = decided(&gw, "carol", "approve").await;
    assert_eq!(disagreements(&gw), (0, None));
    assert_eq!(audit_count(&gw.data_dir, "settlement.sealing"), 1);
    let last = {
        let sql = "SELECT rowid FROM approvals WHERE id = ?1";
        gw.sql().int(sql, &[Param::from(edited.as_str())])
    };
    let cleared = gw.sql().exec(
        &format!("UPDATE approvals SET seal = '', settlement_seal = '' WHERE rowid <= {last}"),
        &[],
    );
    assert_eq!(cleared, 3);
    tamper(
        &gw,
        &format!("UPDATE decisions SET key_binding = NULL WHERE approval_id = '{edited}'"),
    );
    let (n, p) = disagreements(&gw);
    assert_eq!(n, 3, "every cleared settlement is reported: {p:?}");
    for (id, settlement_seal, seal) in &before {
        tamper(
            &gw,
            &format!(
                "UPDATE approvals SET settlement_seal = '{settlement_seal}', seal = '{seal}' WHERE id = '{id}'"
            ),
        );
    }
    let (n, p) = disagreements(&gw);
    let p = p.expect("the edited settlement is reported");
    assert!(
        n == 1 && p.contains(&edited) && p.contains("does not hold its seal"),
        "{n}: {p}"
    );
    // Nor can the record go: renamed to another kind, or deleted, it breaks the chain.
    let chain_broken = |gw: &Gw, what: &str| {
        let p = audit_problem(&gw.data_dir).expect(what);
        assert_eq!(p.check, "chain", "{what}: {p:?}");
    };
    let sealing = "kind = 'settlement.sealing'";
    tamper(
        &gw,
        &format!("UPDATE audit SET kind = 'note' WHERE {sealing}"),
    );
    chain_broken(&gw, "renamed");
    tamper(
        &gw,
        &format!("UPDATE audit SET {sealing} WHERE kind = 'note'"),
    );
    tamper(&gw, &format!("DELETE FROM audit WHERE {sealing}"));
    chain_broken(&gw, "deleted");
    gw.stop().await;
}
