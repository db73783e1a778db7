//! `assent replay` and `assent suggest` on a history made through the real API (issue 16
//! §1–§2): 1,000+ proposals with approvals and rejections by an operator, replayed under a
//! candidate policy and compared call by call with a second gateway that runs the candidate
//! and is sent the same calls; the CI exit rule both ways; a planted always-approved pattern
//! suggested, its edited file replayed.

use super::{BIN, OP_KEY, free_port, hex_sha256, serve, stop};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

const KEY: &str = "dev-bot-test-key";

const AGENT: &str = "metadata: {id: dev_bot}\naction_space:\n  local_tools:\n    - alias: read_file\n    - alias: git_push\n    - alias: pay\n    - alias: wipe\n";

/// The policy the history is made under: pushes and payments asked, wiping denied.
const OLD: &str = "policies:\n  - id: acme.dev-v1\n    selector: {agents: [dev_bot]}\n    rules:\n      - tool: git_push\n        approval: {condition: {args_match: {branch: {not_in: [release]}}}}\n      - tool: pay\n        approval: {condition: {args_match: {amount: {gt: 100}}}}\n      - tool: wipe\n        deny: true\n";

/// A candidate that tightens: payments over 50 asked, reading `/etc` asked.
const TIGHTER: &str = "policies:\n  - id: acme.dev-v1\n    selector: {agents: [dev_bot]}\n    rules:\n      - tool: git_push\n        approval: true\n      - tool: pay\n        approval: {condition: {args_match: {amount: {gt: 50}}}}\n      - tool: read_file\n        approval: {condition: {args_match: {path: {pattern: \"^/etc/\"}}}}\n      - tool: wipe\n        deny: true\n";

/// A candidate that loosens: wiping is no longer denied, pushes no longer asked.
const LOOSER: &str = "policies:\n  - id: acme.dev-v1\n    selector: {agents: [dev_bot]}\n    rules:\n      - tool: pay\n        approval: {condition: {args_match: {amount: {gt: 100}}}}\n";

/// Writes agent, governance (`gov`) and config files into `dir` (data in `data/`, listening on
/// `port`) and returns the config's path.
fn setup(dir: &Path, port: u16, gov: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("dev.agf.yaml"), AGENT).unwrap();
    std::fs::write(dir.join("gov.yaml"), gov).unwrap();
    let cfg = format!(
        "listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [dev.agf.yaml]\ngovernance: [gov.yaml]\nmax_pending_per_agent: 5000\nprincipals:\n  - {{name: alice, kind: operator, roles: [dev], key_env: TEST_ALICE_KEY}}\n  - {{name: dev, kind: agent, agent_id: dev_bot, key_sha256: \"{}\"}}\n",
        hex_sha256(KEY)
    );
    let p = dir.join("assent.yaml");
    std::fs::write(&p, cfg).unwrap();
    p
}

/// The calls of the history, in order: `(session, tool, arguments)`.
fn calls() -> Vec<(String, &'static str, Value)> {
    let mut out = Vec::new();
    for i in 0..1040u32 {
        let s = format!("s{}", i % 37);
        let (tool, args) = match i % 8 {
            0 | 1 => (
                "read_file",
                json!({"path": if i % 16 == 0 { "/etc/hosts".to_string() } else { format!("/srv/f{i}") }}),
            ),
            2 | 3 => (
                "pay",
                json!({"amount": (i * 7) % 180, "to": format!("r{}", i % 5)}),
            ),
            4 => (
                "git_push",
                json!({"branch": if i % 3 == 0 { "main".to_string() } else { format!("feature/b{i}") }}),
            ),
            5 => ("wipe", json!({"disk": "/dev/sdb"})),
            _ => ("read_file", json!({"path": format!("/srv/g{i}")})),
        };
        out.push((s, tool, args));
    }
    out
}

/// Proposes `(session, tool, args)` as dev_bot: the answer's `decision` and `approval_id`.
fn propose(
    http: &reqwest::blocking::Client,
    url: &str,
    c: &(String, &str, Value),
) -> (String, Option<String>) {
    let body = json!({"agent": "dev_bot", "session_id": c.0, "tool": c.1, "arguments": c.2});
    let a: Value = http
        .post(format!("{url}/v1/tool-calls"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let id = a["approval_id"].as_str().map(str::to_string);
    (
        a["decision"]
            .as_str()
            .unwrap_or_else(|| panic!("{a}"))
            .to_string(),
        id,
    )
}

/// Alice decides approval `id`.
fn decide(http: &reqwest::blocking::Client, url: &str, id: &str, approve: bool) {
    let d = if approve { "approve" } else { "deny" };
    let st = http
        .post(format!("{url}/v1/approvals/{id}/decision"))
        .bearer_auth(OP_KEY)
        .json(&json!({"decision": d}))
        .send()
        .unwrap()
        .status();
    assert!(st.is_success(), "{st}");
}

fn replay(config: &Path, data: &Path, extra: &[&str]) -> (i32, Value) {
    let out = Command::new(BIN)
        .arg("replay")
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

/// `assent suggest --config CONFIG --data-dir DATA EXTRA…` to its end.
fn suggest(config: &Path, data: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["suggest", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn replay_matches_a_gateway_running_the_candidate_call_by_call_and_gates_loosening() {
    let http = reqwest::blocking::Client::new();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (pa, pb) = (free_port(), free_port());
    let cfg_a = setup(a.path(), pa, OLD);
    let server_a = serve(&cfg_a, pa);
    let calls = calls();
    let mut held = 0;
    for (i, c) in calls.iter().enumerate() {
        let (decision, id) = propose(&http, &server_a.url, c);
        if decision == "pending" {
            held += 1;
            // Pushes to main and payments to r0 are rejected, the rest approved.
            let reject = c.2["branch"] == "main" || c.2["to"] == "r0";
            decide(&http, &server_a.url, &id.unwrap(), !reject || i % 11 == 0);
        }
    }
    assert!(held > 200, "{held} held");
    stop(server_a);

    // The same calls, in the same order, through a gateway running the candidate.
    let cfg_b = setup(b.path(), pb, TIGHTER);
    let server_b = serve(&cfg_b, pb);
    let independent: Vec<String> = calls
        .iter()
        .map(|c| propose(&http, &server_b.url, c).0)
        .collect();
    stop(server_b);

    let (code, report) = replay(&cfg_b, &a.path().join("data"), &["--all-calls"]);
    assert_eq!(
        code, 0,
        "tightening loosens nothing: {}",
        report["loosened"]
    );
    let replayed = report["calls"].as_array().unwrap();
    assert_eq!(replayed.len(), calls.len());
    for (i, (r, want)) in replayed.iter().zip(&independent).enumerate() {
        let now = match r["now"].as_str().unwrap() {
            "confirm" => "pending",
            k => k,
        };
        assert_eq!(now, want, "call {i}: {r}");
        assert_eq!(r["tool"], calls[i].1, "call {i} in order");
    }
    let o = &report["overall"];
    assert_eq!(o["calls"], 1040);
    assert!(o["allow_to_confirm"].as_u64().unwrap() > 50, "{o}");
    assert_eq!(o["loosened"], 0);
    assert_eq!(report["by_tool"]["wipe"]["unchanged"], 130);

    // Loosening: the denied wipes and the rejected pushes would now run.
    let cfg_l = a.path().join("looser.yaml");
    std::fs::write(a.path().join("looser-gov.yaml"), LOOSER).unwrap();
    let text = std::fs::read_to_string(&cfg_a)
        .unwrap()
        .replace("gov.yaml", "looser-gov.yaml");
    std::fs::write(&cfg_l, text).unwrap();
    let (code, report) = replay(&cfg_l, &a.path().join("data"), &[]);
    assert_eq!(code, 3, "{}", report["overall"]);
    let loosened = report["overall"]["loosened"].as_u64().unwrap();
    assert!(loosened >= 130, "every wipe at least: {loosened}");
    assert!(
        report["loosened"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["tool"] == "git_push" && e["outcome"] == "rejected")
    );
    assert!(
        report["loosened"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["tool"] == "wipe" && e["outcome"] == "denied")
    );

    // The text report names the loosened calls and the exit status is the same.
    let out = Command::new(BIN)
        .args(["replay", "--config"])
        .arg(&cfg_l)
        .arg("--data-dir")
        .arg(a.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("LOOSENED:"));
}

#[test]
fn a_planted_always_approved_pattern_is_suggested_and_its_file_replays_to_exactly_those_prompts() {
    let http = reqwest::blocking::Client::new();
    let a = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = setup(a.path(), port, OLD);
    let server = serve(&cfg, port);
    let mut planted = 0;
    for i in 0..60u32 {
        let feature = i % 4 != 0;
        let branch = if feature {
            format!("feature/x{i}")
        } else {
            "main".to_string()
        };
        let c = (format!("s{i}"), "git_push", json!({"branch": branch}));
        let (d, id) = propose(&http, &server.url, &c);
        assert_eq!(d, "pending");
        // Every feature push approved; pushes to main rejected every other time.
        decide(&http, &server.url, &id.unwrap(), feature || i % 8 == 0);
        planted += u64::from(feature);
    }
    stop(server);
    let data = a.path().join("data");
    let out = suggest(&cfg, &data, &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["suggestions"][0];
    assert_eq!(s["kind"], "remove_prompt", "{v}");
    assert_eq!(
        s["pattern"],
        json!({"kind": "prefix", "key": "branch", "prefix": "feature/"})
    );
    assert_eq!(s["evidence"]["decisions"], planted);
    assert_eq!(s["evidence"]["deciders"], json!(["alice"]));
    // The text form says what to write.
    let out = suggest(&cfg, &data, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("not_pattern") && text.contains("45 approvals by alice"),
        "{text}"
    );
    // Write the suggested file and replay it: exactly the planted prompts go, nothing loosens.
    let edit = &s["edits"][0];
    std::fs::write(
        edit["file"].as_str().unwrap(),
        edit["text"].as_str().unwrap(),
    )
    .unwrap();
    let (code, report) = replay(&cfg, &data, &[]);
    assert_eq!(code, 0, "{}", report["loosened"]);
    let o = &report["overall"];
    assert_eq!(o["confirm_to_allow"], planted, "{o}");
    assert_eq!(
        o["prompts_before"].as_u64().unwrap() - o["prompts_after"].as_u64().unwrap(),
        planted
    );
    assert_eq!(o["loosened"], 0);
    assert_eq!(o["deny_to_allow"], 0);
    // With the suggestion in place there is nothing left to suggest for feature pushes.
    let v: Value = serde_json::from_slice(&suggest(&cfg, &data, &["--json"]).stdout).unwrap();
    assert_eq!(v["suggestions"], json!([]), "{v}");
}

#[test]
fn replay_refuses_a_bad_range_and_a_missing_history() {
    let a = tempfile::tempdir().unwrap();
    let cfg = setup(a.path(), free_port(), OLD);
    let run = |args: &[&str]| {
        Command::new(BIN)
            .arg("replay")
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--since \"yesterday\" is not an RFC 3339 time")
    );
    let out = run(&[
        "--since",
        "2026-11-02T00:00:00Z",
        "--until",
        "2026-11-01T00:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(2));
    // A history with no proposal is no evidence: exit 1 unless it is expected.
    let port = free_port();
    let empty = setup(a.path(), port, OLD);
    stop(serve(&empty, port));
    let data = a.path().join("data");
    let out = run(&["--data-dir", data.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no recorded proposal"));
    let out = run(&["--data-dir", data.to_str().unwrap(), "--allow-empty"]);
    assert_eq!(out.status.code(), Some(0));
    let out = run(&["--data-dir", a.path().join("nothing").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no assent database here"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_replay_endpoint_replays_a_candidate_file_for_operators_only() {
    let http = reqwest::blocking::Client::new();
    let a = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = setup(a.path(), port, OLD);
    let server = serve(&cfg, port);
    let url = server.url.clone();
    for c in calls().iter().take(40) {
        let (d, id) = propose(&http, &url, c);
        if d == "pending" {
            decide(&http, &url, &id.unwrap(), c.2["branch"] != "main");
        }
    }
    let post = |key: &str, body: Value| {
        let r = http
            .post(format!("{url}/v1/policies/replay"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().unwrap())
    };
    // The candidate replaces gov.yaml (named by its base name): wipes and pushes to main loosen.
    let (st, v) = post(
        OP_KEY,
        json!({"governance": [{"file": "gov.yaml", "text": LOOSER}]}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["overall"]["calls"], 40);
    let first: Vec<_> = calls().into_iter().take(40).collect();
    let wipes = first.iter().filter(|c| c.1 == "wipe").count();
    let mains = first.iter().filter(|c| c.2["branch"] == "main").count();
    assert!(wipes > 0 && mains > 0);
    assert_eq!(v["overall"]["loosened"], wipes + mains, "{}", v["overall"]);
    assert_eq!(v["truncated"], false);
    assert!(
        v["loosened"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["now"] == "allow")
    );
    // The policy on disk is unchanged and still in force.
    let (st, v) = post(OP_KEY, json!({}));
    assert_eq!((st, &v["overall"]["unchanged"]), (200, &json!(40)), "{v}");
    // Refusals: an agent's key, a candidate that does not load, a bad time, an unknown field.
    let (st, v) = post(KEY, json!({}));
    assert_eq!((st, v["code"].as_str()), (403, Some("FORBIDDEN")));
    let (st, v) = post(
        OP_KEY,
        json!({"governance": [{"file": "gov.yaml", "text": "policies: [{id: BAD ID}]"}]}),
    );
    assert_eq!(
        (st, v["code"].as_str()),
        (422, Some("POLICY_INVALID")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("gov.yaml"), "{v}");
    let (st, v) = post(OP_KEY, json!({"since": "last week"}));
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("since"), "{v}");
    let (st, _) = post(OP_KEY, json!({"files": []}));
    assert_eq!(st, 400);
    stop(server);
}

/// Found by review: replay took a call held for a person as a prompt even where a grant
/// standing now covers it. Here `pay` to `prod` is denied, alice approves a `pay` to `acme` for
/// the whole tool, and `assent replay` of a candidate without the deny, reading the grants
/// standing in the history's database, exits 3 naming the call a grant would let through.
#[test]
fn replay_counts_a_denied_call_a_standing_grant_would_let_through_as_loosened() {
    let http = reqwest::blocking::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let rules = |deny: &str| {
        format!(
            "policies:\n  - id: acme.pay-v1\n    selector: {{agents: [dev_bot]}}\n    rules:\n{deny}      - tool: pay\n        approval: true\n"
        )
    };
    let deny = "      - tool: pay\n        deny: {condition: {args_match: {to: prod}}}\n";
    let cfg = setup(dir.path(), port, &rules(deny));
    let server = serve(&cfg, port);
    let call = |to: &str| ("s1".to_string(), "pay", json!({"amount": 5, "to": to}));
    assert_eq!(propose(&http, &server.url, &call("prod")).0, "deny");
    let (d, id) = propose(&http, &server.url, &call("acme"));
    assert_eq!(d, "pending");
    let grant = json!({"decision": "approve", "scope": "15m", "whole_tool": true});
    let r = http
        .post(format!(
            "{}/v1/approvals/{}/decision",
            server.url,
            id.unwrap()
        ))
        .bearer_auth(OP_KEY)
        .json(&grant)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    stop(server);
    std::fs::write(dir.path().join("gov.yaml"), rules("")).unwrap();
    let (code, v) = replay(&cfg, &dir.path().join("data"), &[]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["overall"]["loosened"], 1, "{v}");
    let e = &v["loosened"][0];
    assert_eq!(
        (&e["covered_by_grant"], &e["arguments"]["to"]),
        (&json!(true), &json!("prod")),
        "{e}"
    );
}
