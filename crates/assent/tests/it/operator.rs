//! The operator's commands through the real binary against a running gateway (approve with
//! edited arguments, batch deny, scopes and grants, revoke, clarifications, learning-sample
//! export), and `check`'s exit codes and JSON without a server.

use crate::{BIN, BOT_KEY, FS_KEY, OP_KEY, Served, cli, examples, ok, propose, served};
use serde_json::{Value, json};
use std::process::Command;

/// `assent check --config examples/assent.yaml ARGS`: exit status, stdout, stderr.
fn check(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["check", "--config"];
    let cfg = examples().join("assent.yaml");
    let cfg = cfg.to_str().unwrap().to_string();
    all.push(&cfg);
    all.extend_from_slice(args);
    let out = Command::new(BIN).args(&all).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn check_exit_codes_and_json() {
    let (c, out, _) = check(&["--agent", "treasury_bot", "--tool", "get_balance", "--json"]);
    assert_eq!(c, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "allow");
    for r in v["reasons"].as_array().unwrap() {
        assert!(r.get("file").is_some() && r.get("rule").is_some() && r.get("text").is_some());
    }
    let transfer = [
        "--agent",
        "treasury_bot",
        "--tool",
        "transfer_funds",
        "--args",
        r#"{"amount": 5000, "currency": "EUR", "recipient": "bob"}"#,
    ];
    let (c, out, _) = check(&[&transfer[..], &["--json"]].concat());
    assert_eq!(c, 10, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "confirm");
    assert!(
        v["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["file"].as_str().unwrap().ends_with("finance.yaml"))
    );
    // The rule's side effects and rollback note, rendered like the message.
    assert_eq!(
        v["side_effects"][0],
        "Moves 5000 EUR from the treasury account to bob."
    );
    assert!(v["rollback"][0].as_str().unwrap().contains("24 h"), "{v}");
    let (_, text, _) = check(&transfer);
    assert!(
        text.contains("side effects: Moves 5000 EUR from the treasury account to bob."),
        "{text}"
    );
    let (c, out, _) = check(&["--agent", "treasury_bot", "--tool", "drop_tables"]);
    assert_eq!(c, 11);
    assert!(
        out.starts_with("deny") && out.contains("drop_tables"),
        "{out}"
    );
    let (c, _, err) = check(&["--agent", "treasury_bot", "--tool", "x", "--args", "{"]);
    assert_eq!(c, 2);
    assert!(err.contains("--args"), "{err}");
    let (c, _, _) = check(&["--agent", "treasury_bot"]);
    assert_eq!(c, 2, "a missing flag is bad input");
}

#[test]
fn operator_commands_edit_batch_deny_grant_revoke_and_answer() {
    let Served {
        dir, server: mut s, ..
    } = served("");
    let url = s.url.clone();
    let id_of = |v: &Value| v["approval_id"].as_str().unwrap().to_string();

    // Approve with modifications: the token binds the edited call, the line says so.
    let a = id_of(&propose(&url, 5000));
    let text = ok(&cli(
        &url,
        &[
            "approve",
            &a,
            "--args",
            r#"{"amount": 4000, "currency": "EUR", "recipient": "ext-1"}"#,
        ],
    ));
    assert!(
        text.contains("approved with arguments {\"amount\":4000"),
        "{text}"
    );
    let shown = ok(&cli(&url, &["show", &a]));
    assert!(
        shown.contains("approved arguments: {\"amount\":4000"),
        "{shown}"
    );

    // Two ids denied in one batch, each with the reason.
    let (b, c) = (id_of(&propose(&url, 6000)), id_of(&propose(&url, 6001)));
    let text = ok(&cli(&url, &["deny", &b, &c, "--reason", "over budget"]));
    assert_eq!(text.matches(" rejected").count(), 2, "{text}");
    for id in [&b, &c] {
        let v: Value = serde_json::from_str(&ok(&cli(&url, &["show", id, "--json"]))).unwrap();
        assert_eq!(v["status"], "rejected");
        assert_eq!(v["decisions"][0]["reason"], "over budget");
    }

    // An irreversible transfer is approved once: a session scope is refused.
    let d = id_of(&propose(&url, 7000));
    let out = cli(&url, &["approve", &d, "--scope", "session"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("irreversible"));
    ok(&cli(&url, &["approve", &d]));
    // A session grant lets the same (reversible) call through; revoking it holds it again.
    let write = || {
        reqwest::blocking::Client::new()
            .post(format!("{url}/v1/tool-calls"))
            .bearer_auth(FS_KEY)
            .json(&json!({"agent": "fs_agent", "session_id": "s", "tool": "write_file", "server": "fs", "arguments": {"path": "/tmp/x", "content": "y"}}))
            .send()
            .unwrap()
            .json::<Value>()
            .unwrap()
    };
    let w = id_of(&write());
    let text = ok(&cli(&url, &["approve", &w, "--scope", "session"]));
    assert!(text.contains("(scope session, grant "), "{text}");
    let again = write();
    assert_eq!(again["decision"], "allow", "{again}");
    assert!(again["token"].is_string(), "{again}");
    let grants: Value = serde_json::from_str(&ok(&cli(&url, &["grants", "--json"]))).unwrap();
    let grant = grants["grants"][0]["id"].as_str().unwrap().to_string();
    assert!(ok(&cli(&url, &["grants"])).contains(&grant));
    assert!(ok(&cli(&url, &["revoke", &grant])).contains("revoked"));
    assert_eq!(write()["decision"], "pending");
    assert!(ok(&cli(&url, &["grants"])).contains("no grants"));

    // A clarification: listed, a wrong-kind answer refused before it is sent, then answered.
    let q: Value = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/clarifications"))
        .bearer_auth(BOT_KEY)
        .json(
            &json!({"agent": "treasury_bot", "session_id": "s", "question": "Pay the late fee too?",
                      "accepted_response_kinds": ["yes_no"]}),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let qid = q["id"].as_str().unwrap().to_string();
    let listed = ok(&cli(&url, &["clarifications"]));
    assert!(
        listed.contains(&qid) && listed.contains("Pay the late fee too?"),
        "{listed}"
    );
    let out = cli(&url, &["answer", &qid, "maybe"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("accepts yes_no"));
    let text = ok(&cli(&url, &["answer", &qid, "yes"]));
    assert!(text.contains("answered with true"), "{text}");
    let out = cli(&url, &["answer", &qid, "no"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("ALREADY_ANSWERED"));
    assert!(ok(&cli(&url, &["clarifications"])).contains("no pending clarifications"));

    // Learning samples straight from the database while the gateway runs: one per settled
    // approval (edited a, denied b and c, approved d, granted w and its grant use), as the API
    // gives them.
    let out = Command::new(BIN)
        .args(["export", "learning-samples", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let jsonl = ok(&out);
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "{jsonl}");
    assert!(
        lines
            .iter()
            .all(|l| l["sample_family"] == "confirm_decision")
    );
    let api = reqwest::blocking::Client::new()
        .get(format!("{url}/v1/learning-samples"))
        .bearer_auth(OP_KEY)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(api, jsonl);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

/// `assent export learning-samples --data-dir DATA --out FILE`: the output of the run.
fn export_to(data: &std::path::Path, file: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .args(["export", "learning-samples", "--data-dir"])
        .arg(data)
        .arg("--out")
        .arg(file)
        .output()
        .unwrap()
}

/// Found by review: `assent export learning-samples --out FILE` truncated FILE before the
/// first read and wrote page by page, so a run that failed (a damaged row, a database gone)
/// left an empty or partial file in place of the last whole export, where a script expected
/// the history. The file now appears whole or not at all, and nothing is left beside it.
#[test]
fn a_failed_learning_export_leaves_the_previous_file_whole() {
    let s = served("");
    let url = &s.server.url;
    let id = propose(url, 5000)["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let cancelled = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/approvals/{id}/cancel"))
        .bearer_auth(BOT_KEY)
        .send()
        .unwrap();
    assert!(cancelled.status().is_success(), "{cancelled:?}");
    let outdir = tempfile::tempdir().unwrap();
    let file = outdir.path().join("samples.jsonl");
    let first = export_to(&s.data, &file);
    assert!(String::from_utf8_lossy(&first.stderr).contains("1 learning samples written"));
    let whole = std::fs::read_to_string(&file).unwrap();
    assert_eq!(whole.lines().count(), 1, "{whole}");
    // The row is damaged behind the gateway's back: the next run fails.
    let sql = format!("UPDATE approvals SET requested_at = 'x' WHERE id = '{id}';");
    let db = s.data.join("assent.db");
    let st = Command::new("sqlite3").arg(&db).arg(&sql).status().unwrap();
    assert!(st.success());
    let failed = export_to(&s.data, &file);
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), whole);
    let names: Vec<_> = std::fs::read_dir(outdir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "nothing beside it: {names:?}");
}

/// Found by review of the listing's byte bound: `GET /v1/approvals` ends a page after about
/// 1 MiB of call text, and the CLI read only the first page, so an agent's newest big calls
/// hid its older pending ones from `assent pending` (and `assent watch`). The client follows
/// the pages' `Link` to the end.
#[test]
fn assent_pending_lists_the_calls_past_a_page_of_big_ones() {
    // The directory kept: the listing reads on a connection of its own, opened per page.
    let crate::Served {
        dir: _dir,
        server: s,
        ..
    } = crate::served("");
    let url = s.url.clone();
    let first = crate::propose(&url, 5000)["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let big = "x".repeat(200 * 1024);
    for i in 0..6 {
        // Each its own call (an identical one would join the pending approval).
        let v = crate::propose_to(&url, 5000, &format!("{i}{big}"));
        assert!(
            v["approval_id"].is_string(),
            "not held: {}",
            &v.to_string()[..200]
        );
    }
    let out = ok(&cli(&url, &["pending", "--json"]));
    let v: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = v["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 7, "{ids:?}");
    assert!(ids.contains(&first.as_str()), "{ids:?}");
}
