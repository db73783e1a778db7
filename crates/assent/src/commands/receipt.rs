//! `assent receipt get ID` and `assent receipt verify FILE` (issue 14 §5): an approval's
//! signed receipt from the gateway, and its offline check (`Receipt::check`: the call against
//! its canonical form and `call_hash`, the signature under the audit public key).

use crate::args::{DataPlace, ReceiptCmd};
use crate::commands::audit::{audit_public_key, resolve};
use crate::remote::{connect, print_json};
use crate::render::{inert, one_line, shown};
use anyhow::{Context, Result};
use assent_api::approvals::Receipt;
use ed25519_dalek::VerifyingKey;

/// Runs one `assent receipt` command; its exit status.
pub(crate) async fn run(cmd: ReceiptCmd) -> Result<i32> {
    match cmd {
        ReceiptCmd::Get { id, remote } => {
            print_json(&connect(&remote)?.receipt(&id).await?)?;
            Ok(0)
        }
        ReceiptCmd::Verify {
            file,
            public_key,
            origin,
            approves,
            place,
        } => {
            let checked = verify(&file, public_key.as_deref(), origin.as_ref(), &place)?;
            match (checked, approves) {
                (Ok(receipt), Some(want)) => Ok(approves_call(&receipt, &want)),
                (Ok(_), None) => Ok(0),
                (Err(code), _) => Ok(code),
            }
        }
    }
}

/// Verifies receipt `file` under `public_key` (64 hex) or the audit key of `place`'s keys
/// directory, and with `origin` that each passkey assertion was made there
/// ([`assent_core::receipt::Receipt::check_origin`]): prints `verified: approval ID (STATUS),
/// call_hash H` and gives the receipt checked, or prints the problem and gives `Err(1)`. An
/// unreadable file, a file that is not a receipt, or no key is an error (`Err(2)`).
fn verify(
    file: &std::path::Path,
    public_key: Option<&str>,
    origin: Option<&url::Url>,
    place: &DataPlace,
) -> Result<Result<assent_core::receipt::Receipt, i32>> {
    // `localhost:8443` parses as a URL with no origin: no assertion could match it (found by
    // review: every passkey receipt then failed, and one without a passkey passed).
    if let Some(o) = origin.filter(|o| !o.origin().is_tuple()) {
        eprintln!("assent: --origin {o} is not an origin: give scheme://host[:port]");
        return Ok(Err(2));
    }
    let (receipt, key) = match read(file, public_key, place) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: {}", one_line(&e));
            return Ok(Err(2));
        }
    };
    let checked = Receipt::check_text(&receipt, &key).and_then(|r| match origin {
        Some(o) => r.check_origin(o).map(|()| r),
        None => Ok(r),
    });
    match checked {
        Ok(receipt) => {
            println!(
                "verified: approval {} ({}), call_hash {}",
                receipt.approval_id,
                receipt.status.as_str(),
                receipt.call_hash
            );
            // Found by review: a call approved with edits read as the proposed call approved.
            if let Some(edited) = &receipt.approved_call_hash {
                println!(
                    "approved with edits: the operator approved another call, call_hash {edited} (the receipt holds the proposed call, not the edited one)"
                );
            }
            if let Some(scope) = &receipt.scope {
                let which = if receipt.whole_tool {
                    "every call of the tool, whatever its arguments,"
                } else {
                    "the agent's calls identical to this one"
                };
                println!(
                    "approved for scope {}: a grant let {which} through without asking, until it lapsed or was revoked",
                    shown(scope)
                );
            }
            print_passkeys(&receipt, origin.is_some());
            Ok(Ok(receipt))
        }
        Err(e) => {
            // Inert, as every other line quoting the file (defence in depth: the errors checked
            // before the signature quote none of it today).
            println!("NOT VERIFIED: {}", inert(&e.to_string()));
            Ok(Err(1))
        }
    }
}

/// With `--approves CALL_HASH`, of receipt `r` that [`verify`] checked: 0 when it shows the
/// call `want` approved (status `approved`, and `want` the call it let run: the edited call's
/// hash when approved with edits, else `call_hash`), else prints why not and 1; 2 for a
/// `want` that is not 64 lowercase hex. Found by review: a script taking exit 0 for "this
/// call was approved" accepted a receipt of a denial, or of the proposed call an operator
/// approved only edited.
fn approves_call(r: &assent_core::receipt::Receipt, want: &str) -> i32 {
    if want.len() != 64 || !want.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        eprintln!("assent: --approves takes a call_hash: 64 lowercase hex characters");
        return 2;
    }
    let ran = r.approved_call_hash.as_deref().unwrap_or(&r.call_hash);
    let why = if r.status != assent_core::ApprovalStatus::Approved {
        format!("its status is {}", r.status.as_str())
    } else if ran != want {
        format!("the call it let run is call_hash {ran}")
    } else {
        println!("approves: call_hash {want}");
        return 0;
    };
    println!("NOT AN APPROVAL OF call_hash {want}: {why}");
    1
}

/// Prints, for each passkey-signed vote or decision, who signed with which credential and key,
/// for which relying party and at which origin (found by review: neither was shown).
/// The receipt proves that key signed this approval of this call; that the key was that
/// operator's is the `passkey.registered` audit record with the same credential id and key
/// (found by review: a holder of the audit signing key can put a fresh key in a receipt, so
/// the verifier is shown what to compare, not told the vote is the operator's). Without
/// `origin_checked` (`--origin`), the origin is the verifier's to compare with the dashboard's.
fn print_passkeys(r: &assent_core::receipt::Receipt, origin_checked: bool) {
    let votes = r.votes.iter().map(|v| (&v.by, &v.passkey));
    let decisions = r.decisions.iter().map(|d| (&d.by, &d.passkey));
    let mut any = false;
    for (by, proof) in votes.chain(decisions) {
        let Some(p) = proof else { continue };
        any = true;
        let k = &p.public_key;
        println!(
            "passkey: {by} signed with credential {} ({} {} x={}{}) for {} at {}; compare with its passkey.registered audit record",
            shown(&p.credential_id),
            shown(&k.kty),
            shown(&k.crv),
            shown(&k.x),
            k.y.as_deref()
                .map(|y| format!(" y={}", shown(y)))
                .unwrap_or_default(),
            shown(&p.rp_id),
            shown(&p.origin().unwrap_or_default()),
        );
    }
    if any && !origin_checked {
        println!(
            "note: the origins were not compared with the dashboard's (give --origin URL to check them)"
        );
    }
}

/// Receipt `file`'s JSON, read strictly (a duplicate key or an inexact number is refused) and
/// seen to be a receipt, and the
/// key to check it under: `public_key`, else the audit key of `place`'s keys directory.
fn read(
    file: &std::path::Path,
    public_key: Option<&str>,
    place: &DataPlace,
) -> Result<(serde_json::Value, VerifyingKey)> {
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let receipt: serde_json::Value = assent_core::json::parse(&text)
        .with_context(|| format!("{} is not JSON", file.display()))?;
    // Its shape is checked here, so that a file that is no receipt is a usage error (exit 2).
    serde_json::from_value::<Receipt>(receipt.clone())
        .with_context(|| format!("{} is not an approval receipt", file.display()))?;
    let key = match public_key {
        Some(_) => audit_public_key(public_key, std::path::Path::new("."))?,
        None => audit_public_key(None, &resolve(place)?.keys_dir)?,
    };
    Ok((receipt, key))
}
