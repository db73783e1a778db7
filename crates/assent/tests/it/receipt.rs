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

/// A gateway with one call held and decided by the operator with `decision` (the decision's
/// body), its receipt written to `receipt.json`: the gateway, the file and the receipt.
fn decided(decision: serde_json::Value) -> (Served, std::path::PathBuf, serde_json::Value) {
    let gw = served("");
    let url = gw.server.url.clone();
    let id = crate::held(&url, 5000);
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/approvals/{id}/decision"))
        .bearer_auth(crate::OP_KEY)
        .json(&decision)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text());
    let text = ok(&cli(&url, &["receipt", "get", &id]));
    let file = gw.dir.path().join("receipt.json");
    std::fs::write(&file, &text).unwrap();
    (gw, file, serde_json::from_str(&text).unwrap())
}

/// `assent receipt verify FILE --data-dir DATA`, then `extra`: its output.
fn verify_with(
    file: &std::path::Path,
    data: &std::path::Path,
    extra: &[&str],
) -> std::process::Output {
    let (f, d) = (file.to_str().unwrap(), data.to_str().unwrap());
    let mut args = vec!["receipt", "verify", f, "--data-dir", d];
    args.extend_from_slice(extra);
    run(&args)
}

/// Found by review: a receipt of a call an operator approved with edits verified as
/// "approval X (approved), call_hash <proposed>", so an auditor read that the proposed call
/// was approved. `receipt verify` now says it was approved with edits, naming the edited
/// call's hash.
#[test]
fn a_receipt_of_an_edited_approval_says_so() {
    let (gw, file, receipt) = decided(serde_json::json!({"decision": "approve",
        "arguments": {"amount": 4000, "currency": "EUR", "recipient": "ext-1"}}));
    let edited = receipt["approved_call_hash"].as_str().unwrap();
    let out = ok(&verify_with(&file, &gw.data, &[]));
    assert!(
        out.contains(&format!(
            "approved with edits: the operator approved another call, call_hash {edited}"
        )),
        "{out}"
    );
    // Found by review: a script taking exit 0 for "this call was approved" took the proposed
    // call as approved. `--approves H` passes for the call that ran, not the one proposed.
    let approves = |h: &str| verify_with(&file, &gw.data, &["--approves", h]);
    let out = approves(edited);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let proposed = receipt["call_hash"].as_str().unwrap();
    let out = approves(proposed);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("the call it let run is call_hash {edited}")),
        "{said}"
    );
    assert_eq!(approves("not-a-hash").status.code(), Some(2));
}

/// Found by review: `receipt verify` exits 0 for a valid receipt of a denial, so a script
/// reading exit 0 as "approved" took a denied call as approved. `--approves H` exits 1 for it.
#[test]
fn a_receipt_of_a_denial_does_not_pass_as_an_approval() {
    let (gw, file, receipt) = decided(serde_json::json!({"decision": "deny", "reason": "no"}));
    let hash = receipt["call_hash"].as_str().unwrap();
    ok(&verify_with(&file, &gw.data, &[]));
    let out = verify_with(&file, &gw.data, &["--approves", hash]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("its status is rejected"), "{said}");
    crate::stop(gw.server);
}

/// An assertion of `r`'s approval by a P-256 authenticator for relying party `rp_id`, its
/// client data ending with `origin` (members `origin`, `crossOrigin`), as a browser makes one.
fn assertion(
    r: &assent_core::receipt::Receipt,
    rp_id: &str,
    origin: &str,
) -> assent_core::passkey::PasskeyProof {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use p256::ecdsa::signature::Signer;
    use sha2::{Digest, Sha256};
    let sk = p256::ecdsa::SigningKey::from_slice(&[5u8; 32]).unwrap();
    let point = sk.verifying_key().to_encoded_point(false);
    let challenge =
        assent_core::passkey::vote_challenge(&r.approval_id, &r.call_hash, "approve", "n1");
    let client = format!(
        r#"{{"type":"webauthn.get","challenge":"{}",{origin}}}"#,
        B64.encode(challenge)
    );
    let mut auth = Sha256::digest(rp_id.as_bytes()).to_vec();
    auth.extend_from_slice(&[0x05, 0, 0, 0, 1]);
    let mut signed = auth.clone();
    signed.extend_from_slice(&Sha256::digest(client.as_bytes()));
    let sig: p256::ecdsa::Signature = sk.sign(&signed);
    assent_core::passkey::PasskeyProof {
        credential_id: "cred-1".into(),
        public_key: assent_core::passkey::PublicJwk {
            kty: "EC".into(),
            crv: "P-256".into(),
            x: B64.encode(point.x().unwrap()),
            y: Some(B64.encode(point.y().unwrap())),
        },
        rp_id: rp_id.into(),
        nonce: "n1".into(),
        authenticator_data: B64.encode(&auth),
        client_data_json: B64.encode(client.as_bytes()),
        signature: B64.encode(sig.to_der().as_bytes()),
    }
}

/// Attack (found by review): the offline check of a receipt's passkey assertions read only the
/// client data's `type` and `challenge`, and `assent receipt verify` printed neither the
/// relying party nor the origin. A holder of the audit key who got an operator's authenticator
/// to sign the challenge on another site (or in a cross-origin frame), or who showed one
/// authenticator's assertion under two voters' names, had a receipt that verified. Now an
/// assertion made off the relying party's domain or in a frame, or one credential under two
/// names, does not verify; the origin is printed, and `--origin` holds each to the dashboard's.
/// Nor does one beside an edit, a grant or `whole_tool`, which the passkey never signs, nor one
/// on a deny.
#[test]
fn a_passkey_assertion_made_elsewhere_or_shown_under_two_names_does_not_verify() {
    let Served {
        dir, data, server, ..
    } = served("");
    let id = approved(&server.url, 5000);
    let text = ok(&cli(&server.url, &["receipt", "get", &id]));
    let fetched: assent_core::receipt::Receipt = serde_json::from_str(&text).unwrap();
    let signer = assent_store::checkpoint::read_key(&data).unwrap().unwrap();
    let file = dir.path().join("receipt.json");
    let d = data.to_str().unwrap();
    let verify = |edit: &dyn Fn(&mut assent_core::receipt::Receipt), extra: &[&str]| {
        let mut r = fetched.clone();
        edit(&mut r);
        let r = r.signed(&signer);
        std::fs::write(&file, serde_json::to_string(&r).unwrap()).unwrap();
        let mut args = vec!["receipt", "verify", file.to_str().unwrap(), "--data-dir", d];
        args.extend_from_slice(extra);
        let out = run(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let at = |origin: &'static str| {
        move |r: &mut assent_core::receipt::Receipt| {
            r.decisions[0].passkey = Some(assertion(r, "assent.example", origin));
        }
    };
    let (code, out) = verify(&at(r#""origin":"https://assent.example""#), &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("for assent.example at https://assent.example;")
            && out.contains("give --origin URL"),
        "{out}"
    );
    let here = ["--origin", "https://assent.example"];
    let (code, out) = verify(&at(r#""origin":"https://assent.example""#), &here);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("give --origin"), "{out}");
    // Made at another origin of the domain: verified, but not where the dashboard is.
    let (code, out) = verify(&at(r#""origin":"https://wiki.assent.example""#), &here);
    assert!(
        code == Some(1) && out.contains("made at another origin"),
        "{out}"
    );
    for elsewhere in [
        r#""origin":"https://evil.example""#,
        r#""origin":"https://assent.example","crossOrigin":true"#,
        r#""origin":"http://assent.example""#,
    ] {
        let (code, out) = verify(&at(elsewhere), &[]);
        assert!(
            code == Some(1) && out.contains("NOT VERIFIED"),
            "{elsewhere}: {out}"
        );
    }
    // One authenticator shown as two voters' consent.
    let twice = |r: &mut assent_core::receipt::Receipt| {
        at(r#""origin":"https://assent.example""#)(r);
        let mut again = r.decisions[0].clone();
        again.by = "mallory".into();
        r.decisions.push(again);
    };
    let (code, out) = verify(&twice, &[]);
    assert!(
        code == Some(1) && out.contains("another voter too"),
        "{out}"
    );
    // The same key under another credential id (the id is not under the assertion's signature).
    let renamed = |r: &mut assent_core::receipt::Receipt| {
        twice(r);
        r.decisions[1].passkey.as_mut().unwrap().credential_id = "cred-2".into();
    };
    let (code, out) = verify(&renamed, &[]);
    assert!(
        code == Some(1) && out.contains("another voter too"),
        "{out}"
    );
    let good = at(r#""origin":"https://assent.example""#);
    // Found by review: re-signed with an edit, a grant or `whole_tool` beside the passkey
    // (which signs the call as proposed, once), it verified beside "passkey: … signed".
    type Edit = dyn Fn(&mut assent_core::receipt::Receipt);
    let widened: [&Edit; 3] = [
        &|r| r.approved_call_hash = Some("ab".repeat(32)),
        &|r| r.scope = Some("workspace".into()),
        &|r| r.whole_tool = true,
    ];
    for widen in widened {
        let (code, out) = verify(&|r| (good(r), widen(r)).1, &[]);
        assert!(
            code == Some(1) && out.contains("yet the receipt shows an edit or a grant"),
            "{out}"
        );
    }
    // Found by review: a genuine assertion moved onto a deny vote verified beside it.
    let on_a_deny = |r: &mut assent_core::receipt::Receipt| {
        good(r);
        let mut deny = r.decisions[0].clone();
        deny.by = "bob".into();
        deny.decision = assent_core::approval::Settlement::Deny;
        r.decisions = vec![deny];
    };
    let (code, out) = verify(&on_a_deny, &[]);
    assert!(
        code == Some(1) && out.contains("yet the receipt shows it on a deny"),
        "{out}"
    );
    // An --origin that is no origin is a usage error, not a verdict.
    let (code, _) = verify(&good, &["--origin", "localhost:8443"]);
    assert_eq!(code, Some(2));
    crate::stop(server);
}
