//! `assent audit verify` against attacks by someone who can write the database file (here with
//! `sqlite3`) but not the audit key or the checkpoint sink file: each test names the attack it
//! stops. The gateway runs with `audit_checkpoints: {every_records: 1, every_seconds: 1, file}`.

use super::*;

mod implicit_config;
mod pins;
mod restore;

/// A data directory whose gateway approved, redeemed, denied and allowed calls, then shut down
/// (SIGTERM: the shutdown checkpoint covers the whole chain), and its checkpoint sink file.
struct Signed {
    dir: tempfile::TempDir,
    data: PathBuf,
    file: PathBuf,
    cfg: PathBuf,
    port: u16,
}

impl Signed {
    /// A running gateway `s` of no checkpoint file, as the attacks take it, and its server.
    fn unsigned(s: Served) -> (Signed, crate::Server) {
        let g = Signed {
            file: s.dir.path().join("unused"),
            data: s.data,
            dir: s.dir,
            cfg: s.cfg,
            port: s.port,
        };
        (g, s.server)
    }
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::new()
}

fn signed_gateway() -> Signed {
    let checkpoints =
        "audit_checkpoints: {every_records: 1, every_seconds: 1, file: checkpoints.jsonl}\n";
    let Served {
        dir,
        data,
        server: s,
        cfg,
        port,
    } = served(checkpoints);
    let a = approved(&s.url, 5000);
    let v: Value = http()
        .get(format!("{}/v1/approvals/{a}", s.url))
        .bearer_auth(BOT_KEY)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let r = http()
        .post(format!("{}/v1/tokens/redeem", s.url))
        .bearer_auth(BOT_KEY)
        .json(&json!({"token": v["token"], "tool": "transfer_funds",
            "arguments": {"amount": 5000, "currency": "EUR", "recipient": "ext-1"}}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text());
    // A checkpoint in the middle of the chain, then one at shutdown.
    std::thread::sleep(Duration::from_millis(1500));
    let b = held(&s.url, 7000);
    assert!(cli(&s.url, &["deny", &b]).status.success());
    // Two calls allowed outright: the newest records touch no state table.
    for _ in 0..2 {
        let r: Value = http()
            .post(format!("{}/v1/tool-calls", s.url))
            .bearer_auth(BOT_KEY)
            .json(&json!({"agent": "treasury_bot", "session_id": "s", "tool": "get_balance", "arguments": {}}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(r["decision"], "allow", "{r}");
    }
    crate::stop(s);
    Signed {
        data,
        file: dir.path().join("checkpoints.jsonl"),
        dir,
        cfg,
        port,
    }
}

fn sql(g: &Signed, q: &str) -> String {
    sql_with(g, &[], q)
}

fn sql_with(g: &Signed, opts: &[&str], q: &str) -> String {
    let out = Command::new("sqlite3")
        .args(opts)
        .arg(g.data.join("assent.db"))
        .arg(q)
        .output()
        .unwrap();
    ok(&out)
}

/// The hash chain alone — all `audit verify` checked before signed checkpoints — still
/// verifies after the attack (`broken` is the chain check's finding).
fn chain_alone_verifies(g: &Signed) {
    let (_, out, _) = verify(g, &["--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["broken"], Value::Null, "{v}");
}

/// Runs `assent audit verify --data-dir DATA ARGS…`: (exit code, stdout, stderr).
fn verify(g: &Signed, args: &[&str]) -> (i32, String, String) {
    let out = audit_verify(&g.data, args);
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Runs `audit verify ARGS…` on `g`, asserts that it fails (exit 1) naming each of `wants`
/// in its stderr, and returns its stdout (the report; JSON with `--json`).
#[track_caller]
fn verify_fails(g: &Signed, args: &[&str], wants: &[&str]) -> String {
    let (code, out, err) = verify(g, args);
    assert_eq!(code, 1, "{out}{err}");
    for want in wants {
        assert!(err.contains(want), "{err}");
    }
    out
}

#[test]
fn an_untouched_database_verifies_with_its_checkpoints_and_the_sink_file() {
    let g = signed_gateway();
    let file = g.file.to_str().unwrap();
    let (code, out, err) = verify(&g, &["--checkpoint", file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("stored checkpoints verify under audit key"),
        "{out}"
    );
    assert!(out.contains("the state tables agree"), "{out}");
    // The shutdown checkpoint covers the whole chain.
    assert!(!out.contains("not signed yet"), "{out}");
    // `assent audit key` prints the key every checkpoint names; --public-key takes it.
    let key = Command::new(BIN)
        .args(["audit", "key", "--data-dir"])
        .arg(&g.data)
        .output()
        .unwrap();
    let key = String::from_utf8(key.stdout).unwrap().trim().to_string();
    assert_eq!(key.len(), 64);
    let sink = std::fs::read_to_string(&g.file).unwrap();
    assert!(sink.lines().count() >= 2);
    assert!(
        sink.lines()
            .all(|l| l.contains(&format!("\"public_key\":\"{key}\"")))
    );
    let (code, out, _) = verify(&g, &["--public-key", &key, "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((code, v["ok"].clone()), (0, json!(true)), "{v}");
    assert_eq!(v["unsigned_records"], 0);
    // Usage and I/O errors exit 2.
    assert_eq!(verify(&g, &["--public-key", "zz"]).0, 2);
    assert_eq!(verify(&g, &["--checkpoint", "/nonexistent/file"]).0, 2);
    let none = audit_verify(&g.dir.path().join("nothing-here"), &[]);
    assert_eq!(none.status.code(), Some(2));
}

/// Changes the approved amount (5000 → 50) in the `approval.requested` record, then
/// recomputes every later hash with the gateway's own `record_hash`: the bare chain verifies
/// again.
fn rewrite_and_rechain(g: &Signed) {
    let rows = sql_with(
        g,
        &["-json"],
        "SELECT seq, at, kind, approval_id, actor, data FROM audit ORDER BY seq;",
    );
    let rows: Vec<Value> = serde_json::from_str(&rows).unwrap();
    let target = rows
        .iter()
        .position(|r| r["kind"] == "approval.requested")
        .unwrap();
    let edits = crate::restore_forged::rechained(&rows, 0, assent_store::audit::GENESIS, |i, r| {
        let data = r["data"].as_str().unwrap();
        let data = if i == target {
            data.replace("5000", "50")
        } else {
            data.to_string()
        };
        (r["actor"].as_str().unwrap().to_string(), data)
    });
    let script = format!("BEGIN;\n{edits}COMMIT;\n");
    sql(g, &script);
    assert!(
        sql(
            g,
            "SELECT data FROM audit WHERE kind = 'approval.requested' LIMIT 1;"
        )
        .contains("\"amount\":50,")
    );
}

#[test]
fn a_rewritten_and_rechained_record_is_caught_by_the_stored_checkpoints() {
    let g = signed_gateway();
    rewrite_and_rechain(&g);
    let wants = ["audit checkpoint not met", "was rewritten"];
    let out = verify_fails(&g, &["--json"], &wants);
    // The hash chain alone (all that was checked before checkpoints) is whole again.
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["broken"], Value::Null, "{v}");
    assert_eq!(v["problem"]["check"], "checkpoint", "{v}");
}

#[test]
fn a_truncated_tail_is_caught_by_the_checkpoint_file() {
    let g = signed_gateway();
    // Drop the two newest records (allowed calls, no state to betray them) and every stored
    // checkpoint: the database alone now looks whole.
    sql(
        &g,
        "DELETE FROM audit WHERE seq > (SELECT max(seq) - 2 FROM audit); DELETE FROM audit_checkpoints;",
    );
    let (code, out, err) = verify(&g, &[]);
    assert_eq!(
        code, 0,
        "without the sink file this is undetectable: {out}{err}"
    );
    chain_alone_verifies(&g);
    verify_fails(
        &g,
        &["--checkpoint", g.file.to_str().unwrap()],
        &["removed from the end"],
    );
    // Review finding: `verify --config` ignored the config's `audit_checkpoints.file`; a
    // sink file not written yet is none to check (exit 0, as without it above; not 2).
    for (code, want) in [(1, "removed from the end"), (0, "does not exist")] {
        let out = run(&["audit", "verify", "--config", g.cfg.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(code) && err.contains(want),
            "{err}"
        );
        let _ = std::fs::remove_file(&g.file);
    }
}

#[test]
fn an_emptied_audit_table_is_caught() {
    let g = signed_gateway();
    sql(&g, "DELETE FROM audit;");
    chain_alone_verifies(&g);
    verify_fails(&g, &[], &["the chain ends at record 0"]);
    // With the stored checkpoints gone too, the state tables still betray it.
    sql(&g, "DELETE FROM audit_checkpoints;");
    verify_fails(&g, &[], &["has no approval.requested record"]);
}

#[test]
fn a_redeemed_token_made_unused_again_is_caught() {
    let g = signed_gateway();
    sql(&g, "UPDATE tokens SET used_at = NULL;");
    chain_alone_verifies(&g);
    let wants = ["the state tables disagree", "is not marked used"];
    let out = verify_fails(&g, &["--json"], &wants);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["check"], "state");
}

#[test]
fn a_forged_checkpoint_signature_is_reported() {
    let g = signed_gateway();
    // A checkpoint re-signed by another key (the attacker's), or with its head moved.
    sql(
        &g,
        "UPDATE audit_checkpoints SET signature = substr('0000' || signature, 1, 128) WHERE seq = (SELECT max(seq) FROM audit_checkpoints);",
    );
    verify_fails(&g, &[], &["signature does not verify"]);
    // A key that did not sign them: every checkpoint fails, and so does the file.
    let other = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    verify_fails(&g, &["--public-key", other], &["signature does not verify"]);
}

#[test]
fn a_grant_inserted_behind_the_gateways_back_is_caught() {
    // A workspace grant for every call of a tool, written straight into the database: the
    // gateway would let those calls through with no one's approval.
    let g = signed_gateway();
    let approval = sql(&g, "SELECT id FROM approvals LIMIT 1;");
    sql(
        &g,
        &format!(
            "INSERT INTO grants (id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at)
             VALUES ('6f1c0000-0000-4000-8000-000000000001', 'treasury_bot', NULL, 'transfer_funds', NULL, NULL, 'workspace', 'R3', 0, '{}', 'alice', 1, NULL);",
            approval.trim()
        ),
    );
    chain_alone_verifies(&g);
    verify_fails(&g, &[], &["has no grant.created record"]);
}

/// Attack: someone who can write the database (e.g. with the PostgreSQL credentials) inserts
/// quorum votes for members who never voted, so that one real vote settles the approval;
/// every decision record stays well formed, so only the cross-check can tell.
#[test]
fn a_vote_inserted_behind_the_gateways_back_is_caught() {
    let g = signed_gateway();
    let approval = sql(&g, "SELECT id FROM approvals LIMIT 1;");
    sql(
        &g,
        &format!(
            "INSERT INTO votes (approval_id, principal, decision, roles, reason, at) VALUES ('{}', 'mallory', 'approve', '[\"finance\"]', NULL, 1);",
            approval.trim()
        ),
    );
    chain_alone_verifies(&g);
    let out = verify_fails(
        &g,
        &["--json"],
        &["a vote by mallory", "has no decision.vote record"],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["check"], "state");
}

/// Attack: a database writer plants their own authenticator's public key as an operator's
/// passkey, to sign passkey-required votes as that operator.
#[test]
fn a_passkey_planted_behind_the_gateways_back_is_caught() {
    let g = signed_gateway();
    sql(
        &g,
        "INSERT INTO passkeys (credential_id, principal, passkey, public_key, label, created_at) VALUES ('AAAA', 'alice', '{}', '{\"kty\":\"EC\"}', 'planted', 1);",
    );
    chain_alone_verifies(&g);
    verify_fails(
        &g,
        &[],
        &["passkey AAAA of alice has no standing passkey.registered record"],
    );
}

/// Attack: someone who can write the database file corrupts one approval's `approvers`
/// column, hoping it reads as "no approver roles" (any operator may decide) and widens who
/// may approve a transfer (issue 10 §8). Reading is strict instead: the approval is damaged,
/// nobody may approve, deny or cancel it (409 `APPROVAL_DAMAGED`, audited
/// `decision.refused`), the expiry sweep leaves it alone, the queue still lists it, and
/// `assent audit verify` names it and the column (exit 1).
#[test]
fn a_corrupted_approvers_column_makes_the_approval_undecidable_not_open_to_all() {
    let (g, mut s) = Signed::unsigned(served(""));
    let a = held(&s.url, 5000);
    let decide = |body: Value| {
        http()
            .post(format!("{}/v1/approvals/{a}/decision", s.url))
            .bearer_auth(OP_KEY)
            .json(&body)
            .send()
            .unwrap()
    };
    // Only the CEO may decide: alice (finance-admin) is refused (her approval is refused
    // before that, as the approvers are sealed: 409).
    live(
        &g,
        &format!("UPDATE approvals SET approvers = '[\"ceo\"]' WHERE id = '{a}';"),
    );
    assert_eq!(decide(json!({"decision": "deny"})).status(), 403);
    assert_eq!(decide(json!({"decision": "approve"})).status(), 409);
    // The attack: the list no longer parses.
    live(
        &g,
        &format!("UPDATE approvals SET approvers = '[\"ceo\"' WHERE id = '{a}';"),
    );
    for body in [json!({"decision": "approve"}), json!({"decision": "deny"})] {
        let r = decide(body);
        assert_eq!(r.status(), 409);
        let v: Value = r.json().unwrap();
        assert_eq!(v["code"], "APPROVAL_DAMAGED", "{v}");
        assert_eq!(v["damaged"], json!(["approvers"]), "{v}");
    }
    let r = http()
        .post(format!("{}/v1/approvals/{a}/cancel", s.url))
        .bearer_auth(OP_KEY)
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 409, "{:?}", r.text());
    // The expiry sweep skips it: overdue, it stays pending.
    live(
        &g,
        &format!("UPDATE approvals SET expires_at = 0 WHERE id = '{a}';"),
    );
    std::thread::sleep(Duration::from_millis(2500));
    let queue = http()
        .get(format!("{}/v1/approvals?status=pending", s.url))
        .bearer_auth(OP_KEY)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(queue.contains(&a), "{queue}");
    // The listing names the column, and that no seal vouches for its terms any more.
    assert!(
        queue.contains(r#""damaged":["approvers","seal"]"#),
        "{queue}"
    );
    assert_eq!(
        live(
            &g,
            &format!("SELECT status FROM approvals WHERE id = '{a}';")
        )
        .trim(),
        "pending"
    );
    let refused = live(
        &g,
        &format!(
            "SELECT count(*) FROM audit WHERE kind = 'decision.refused' AND approval_id = '{a}' AND data LIKE '%damaged%';"
        ),
    );
    // The approval refused for its seal, then the two decisions and the cancel.
    assert_eq!(refused.trim(), "4");
    assert_eq!(
        live(
            &g,
            &format!("SELECT count(*) FROM tokens WHERE approval_id = '{a}';")
        )
        .trim(),
        "0"
    );
    Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .unwrap();
    s.child.wait().unwrap();
    let (code, out, err) = verify(&g, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains(&format!(
            "approval {a} is damaged: stored column(s) approvers"
        )),
        "{out}{err}"
    );
}

/// `sql` while the gateway runs: waits for its write lock instead of failing.
fn live(g: &Signed, q: &str) -> String {
    sql_with(g, &["-cmd", ".timeout 5000"], q)
}

#[test]
fn a_rewrite_after_deleting_the_stored_checkpoints_is_caught_with_max_unsigned() {
    // Deleting every stored checkpoint is the step that lets a re-chained rewrite pass: the
    // chain and the state tables still agree, and without a checkpoint file only the count of
    // records no checkpoint covers gives it away. This gateway signs after every record.
    let g = signed_gateway();
    let (code, out, err) = verify(&g, &["--max-unsigned", "5"]);
    assert_eq!(code, 0, "untouched: {out}{err}");
    sql(&g, "DELETE FROM audit_checkpoints;");
    chain_alone_verifies(&g);
    verify_fails(&g, &["--max-unsigned", "5"], &["covered by no checkpoint"]);
}

/// Attack (found by review): the database rewritten and re-chained (or rolled back to an
/// older copy, making a redeemed token usable again), its stored checkpoints deleted, and the
/// gateway restarted. It served the fork and signed it into the checkpoint file, and `audit
/// verify --checkpoint` checked only the file's newest checkpoint, which the fork now met.
/// Now the gateway refuses to start on a chain that does not hold every checkpoint of its
/// file, and verify checks them all.
#[test]
fn a_forked_chain_is_not_served_and_verify_checks_every_checkpoint_of_the_file() {
    let g = signed_gateway();
    rewrite_and_rechain(&g);
    sql(&g, "DELETE FROM audit_checkpoints;");
    let out = serve_cmd(&g.cfg)
        .env("TEST_ALICE_KEY", OP_KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "served a forked chain: {err}");
    assert!(
        err.contains("does not hold a checkpoint this gateway published"),
        "{err}"
    );
    assert!(err.contains("was rewritten"), "{err}");
    // What the gateway did before: with its file moved aside it serves, and signs the fork.
    let published = g.dir.path().join("published.jsonl");
    std::fs::rename(&g.file, &published).unwrap();
    crate::stop(serve(&g.cfg, g.port));
    let fork = std::fs::read_to_string(&g.file).unwrap();
    let both = std::fs::read_to_string(&published).unwrap() + &fork;
    std::fs::write(&g.file, both).unwrap();
    let file = g.file.to_str().unwrap();
    let out = verify_fails(&g, &["--checkpoint", file, "--json"], &["was rewritten"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["check"], "checkpoint_file", "{v}");
    // The file's newest checkpoint is the fork's: checked alone, as before, it held.
    assert_eq!(
        v["file_checkpoint"]["head_hash"].as_str().unwrap(),
        fork_head(&fork),
        "{v}"
    );
}

/// The `head_hash` of the newest (highest `seq`) checkpoint among the JSON lines `text`.
fn fork_head(text: &str) -> String {
    let newest = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .max_by_key(|v| v["seq"].as_i64().unwrap())
        .unwrap();
    newest["head_hash"].as_str().unwrap().to_string()
}

/// Runs `edit` (SQL) on a copy of `g`'s database and asserts `audit verify` fails on the
/// state check naming each of `wants`; the database is put back afterwards.
#[track_caller]
fn caught_on_a_copy(g: &Signed, edit: &str, wants: &[&str]) {
    let kept = g.dir.path().join("kept.db");
    sql(g, &format!(".backup '{}'", kept.display()));
    sql(g, edit);
    chain_alone_verifies(g);
    let out = verify_fails(g, &["--json"], wants);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["check"], "state", "{v}");
    sql(g, &format!(".restore '{}'", kept.display()));
}

/// Attacks (found by review): the gateway signs an approval's token from its `tokens` row,
/// and a receipt and the approval's answer name the decider from its `decisions` row. A row
/// bound to another call (the token then redeems the attacker's call), one living longer (a
/// token expired a month ago signed again), and a decision row naming someone else all kept
/// `audit verify` green: each now differs from its record, and is reported.
#[test]
fn a_token_or_decision_row_edited_behind_the_gateways_back_is_caught() {
    let g = signed_gateway();
    let evil = "7".repeat(64);
    caught_on_a_copy(
        &g,
        &format!("UPDATE tokens SET call_hash = '{evil}';"),
        &[
            "differs from its token.minted record",
            "would sign it for what the row says",
        ],
    );
    caught_on_a_copy(
        &g,
        "UPDATE tokens SET expires_at = 4102444800000;",
        &["differs from its token.minted record"],
    );
    caught_on_a_copy(
        &g,
        "UPDATE decisions SET actor = 'mallory' WHERE actor = 'alice';",
        &["decision row", "by mallory", "differs from audit record"],
    );
    let (code, out, err) = verify(&g, &[]);
    assert_eq!(code, 0, "put back, it verifies: {out}{err}");
}

/// Attack (found by review): a grant revoked by an operator (`assent revoke`) has its
/// `revoked_at` cleared in the database, and the next call it covers is let through again;
/// `audit verify` compared the grant with its `grant.created` record only.
#[test]
fn a_revoked_grant_brought_back_is_caught() {
    let (g, s) = Signed::unsigned(served(""));
    let write = json!({"agent": "fs_agent", "session_id": "s", "tool": "write_file", "server": "fs",
        "arguments": {"path": "/tmp/x", "content": "y"}});
    let held: Value = http()
        .post(format!("{}/v1/tool-calls", s.url))
        .bearer_auth(FS_KEY)
        .json(&write)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let id = held["approval_id"].as_str().unwrap();
    ok(&cli(&s.url, &["approve", id, "--scope", "session"]));
    let grants: Value = serde_json::from_str(&ok(&cli(&s.url, &["grants", "--json"]))).unwrap();
    let grant = grants["grants"][0]["id"].as_str().unwrap().to_string();
    ok(&cli(&s.url, &["revoke", &grant]));
    crate::stop(s);
    assert_eq!(verify(&g, &[]).0, 0);
    caught_on_a_copy(
        &g,
        "UPDATE grants SET revoked_at = NULL, revoked_by = NULL;",
        &["was revoked", "is not marked revoked"],
    );
    // Found by review: who made a grant decides whether it stands (separation of duties, a
    // reload's revocation); a maker renamed in the database went unnoticed.
    let rename = "UPDATE grants SET created_by = 'mallory';";
    caught_on_a_copy(
        &g,
        rename,
        &["differs from its grant.created record", "maker"],
    );
}

/// Attack (found by review): a trigger planted in the database file (`AFTER INSERT ON
/// approvals`: every held transfer is set to expire at once into an approval) runs inside the
/// gateway's own transactions, survived restarts and `assent backup`, and `audit verify` said
/// nothing; only `restore` checked the schema. Now the gateway refuses to open a database whose
/// schema is not exactly what its migrations create, and verify names the planted object.
#[test]
fn a_trigger_planted_in_the_database_is_refused_at_start_and_reported() {
    let g = signed_gateway();
    sql(
        &g,
        "CREATE TRIGGER zz_auto AFTER INSERT ON approvals WHEN NEW.tool = 'transfer_funds' BEGIN UPDATE approvals SET default_decision = 'approve', expires_at = 0 WHERE id = NEW.id; END;",
    );
    let out = verify_fails(&g, &["--json"], &["has a trigger `zz_auto`", "altered"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["check"], "schema", "{v}");
    let out = serve_cmd(&g.cfg)
        .env("TEST_ALICE_KEY", OP_KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "served a planted trigger: {err}");
    assert!(
        err.contains("has a trigger `zz_auto`") && err.contains("not served"),
        "{err}"
    );
    sql(&g, "DROP TRIGGER zz_auto;");
    assert_eq!(verify(&g, &[]).0, 0, "dropped, it verifies");
}

/// Attacks (found by review): an approval's stored terms and call were trusted as they were.
/// A pending approval's `call_hash` moved to the attacker's call let the operator approve the
/// call shown while the token bound the other; a quorum and passkey cleared made an R4 call
/// one approval away; a default turned to `approve` let a timeout approve an irreversible
/// call — each with `audit verify` green. The edited hash now makes the approval undecidable
/// (`409 APPROVAL_DAMAGED`, the sweep leaves it alone), and verify compares every
/// approval with its `approval.requested` record.
#[test]
fn an_approvals_call_or_terms_edited_behind_the_gateways_back_are_caught() {
    let (g, s) = Signed::unsigned(served(""));
    let a = held(&s.url, 5000);
    let evil = "7".repeat(64);
    live(
        &g,
        &format!("UPDATE approvals SET call_hash = '{evil}' WHERE id = '{a}';"),
    );
    let r = http()
        .post(format!("{}/v1/approvals/{a}/decision", s.url))
        .bearer_auth(OP_KEY)
        .json(&json!({"decision": "approve"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 409);
    let v: Value = r.json().unwrap();
    assert_eq!(v["code"], "APPROVAL_DAMAGED", "{v}");
    assert_eq!(v["damaged"], json!(["call_hash"]), "{v}");
    crate::stop(s);
    verify_fails(
        &g,
        &["--json"],
        &[
            "differs from its approval.requested record",
            "not the SHA-256",
        ],
    );
    let hash = sql(
        &g,
        &format!(
            "SELECT json_extract(data, '$.call_hash') FROM audit WHERE kind = 'approval.requested' AND approval_id = '{a}';"
        ),
    );
    sql(
        &g,
        &format!(
            "UPDATE approvals SET call_hash = '{}' WHERE id = '{a}';",
            hash.trim()
        ),
    );
    assert_eq!(verify(&g, &[]).0, 0, "put back, it verifies");
    for (edit, field) in [
        ("approvers = '[]'", "in approvers"),
        ("default_decision = 'approve'", "in default_decision"),
        ("irreversible = 0", "in irreversible"),
    ] {
        caught_on_a_copy(
            &g,
            &format!("UPDATE approvals SET {edit} WHERE id = '{a}';"),
            &[field],
        );
    }
}
