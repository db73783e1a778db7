//! `assent receipt get` and `assent receipt verify` (issue 14 §5) against a real `assent
//! serve`: a receipt fetched from the gateway verifies offline under the audit key; an edited
//! call or vote, a member the signature does not cover, a receipt with a duplicate key, and a
//! missing key are each refused with their own exit code.

use crate::{Served, approved, cli, ok, run, served};

#[test]
fn a_fetched_receipt_verifies_offline_and_an_edited_one_does_not() {
    let Served {
        dir, data, server, ..
    } = served("");
    let url = server.url.clone();
    let id = approved(&url, 5000);
    let text = ok(&cli(&url, &["receipt", "get", &id]));
    let file = dir.path().join("receipt.json");
    std::fs::write(&file, &text).unwrap();
    let key = ok(&run(&[
        "audit",
        "key",
        "--data-dir",
        data.to_str().unwrap(),
    ]));
    let verify = |f: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["receipt", "verify", f.to_str().unwrap()];
        args.extend_from_slice(extra);
        run(&args)
    };
    let out = ok(&verify(&file, &["--public-key", key.trim()]));
    assert!(
        out.contains(&format!("verified: approval {id} (approved)")),
        "{out}"
    );
    // The data directory's own key works too.
    ok(&verify(&file, &["--data-dir", data.to_str().unwrap()]));

    // Attack: the amount edited in the call (and, separately, the approver's name).
    for (from, to) in [("5000", "50000"), ("\"alice\"", "\"mallory\"")] {
        let edited = dir.path().join("edited.json");
        assert!(text.contains(from));
        std::fs::write(&edited, text.replacen(from, to, 1)).unwrap();
        let out = verify(&edited, &["--public-key", key.trim()]);
        assert_eq!(out.status.code(), Some(1), "{from}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("NOT VERIFIED"));
    }
    // Attack: a second `status` key that a lenient reader would take.
    let doubled = dir.path().join("doubled.json");
    std::fs::write(
        &doubled,
        text.replacen('{', "{\"status\": \"rejected\",", 1),
    )
    .unwrap();
    let out = verify(&doubled, &["--public-key", key.trim()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Attack (found by review): text the signature does not cover — a member added inside
    // the call, or the quorum's `deny` left out — that the reader dropped or defaulted, so the
    // file verified carrying it.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["call"]["note"] = serde_json::json!("approved by the CFO");
    let added = dir.path().join("added.json");
    std::fs::write(&added, v.to_string()).unwrap();
    let out = verify(&added, &["--public-key", key.trim()]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("does not cover"), "{said}");
    // The genuine file, re-serialised (compact), still verifies: the check is on members.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let same = dir.path().join("same.json");
    std::fs::write(&same, v.to_string()).unwrap();
    ok(&verify(&same, &["--public-key", key.trim()]));
    // No key: a usage error, not a pass.
    let empty = tempfile::tempdir().unwrap();
    let out = verify(&file, &["--data-dir", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    drop(server);
}

/// Found by review: a receipt of a call an operator approved with edits verified as
/// "approval X (approved), call_hash <proposed>", so an auditor read that the proposed call
/// was approved. `receipt verify` now says it was approved with edits, naming the edited
/// call's hash.
#[test]
fn a_receipt_of_an_edited_approval_says_so() {
    let Served {
        dir, data, server, ..
    } = served("");
    let url = server.url.clone();
    let id = crate::held(&url, 5000);
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/approvals/{id}/decision"))
        .bearer_auth(crate::OP_KEY)
        .json(&serde_json::json!({"decision": "approve",
            "arguments": {"amount": 4000, "currency": "EUR", "recipient": "ext-1"}}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text());
    let text = ok(&cli(&url, &["receipt", "get", &id]));
    let file = dir.path().join("receipt.json");
    std::fs::write(&file, &text).unwrap();
    let receipt: serde_json::Value = serde_json::from_str(&text).unwrap();
    let edited = receipt["approved_call_hash"].as_str().unwrap();
    let out = ok(&run(&[
        "receipt",
        "verify",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]));
    assert!(
        out.contains(&format!(
            "approved with edits: the operator approved another call, call_hash {edited}"
        )),
        "{out}"
    );
}
