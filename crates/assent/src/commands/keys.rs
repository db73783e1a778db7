//! `assent keys init` and `assent keys rotate-token-key`: make the token and audit keys of a
//! keys directory (issue 13 §2), the one set every replica of a shared PostgreSQL database is
//! given, and rotate the token key by `kid` (issue 14 §6). The files and what may never
//! happen to them (no overwrite, no rotation of the audit key) are the store's
//! `assent_store::keys`.

use crate::args::{KeysCmd, KeysPlace};
use anyhow::Result;
use assent_server::config::Config;
use serde_json::json;
use std::path::PathBuf;

/// The directory an `assent keys` subcommand works on: `--keys-dir`, or the config's.
fn dir_of(place: KeysPlace) -> Result<PathBuf> {
    match (place.keys_dir, place.config) {
        (Some(d), _) => Ok(d),
        (None, Some(f)) => Ok(Config::load(&f)?.keys_dir()),
        (None, None) => anyhow::bail!("name the directory: --keys-dir DIR or --config FILE"),
    }
}

/// Runs one `assent keys` subcommand to its exit status (0; errors are returned: exit 1).
pub(crate) fn run(cmd: KeysCmd) -> Result<i32> {
    match cmd {
        KeysCmd::Init {
            place,
            json: as_json,
        } => {
            let dir = dir_of(place)?;
            let done = assent_store::keys::init(&dir)?;
            let v = json!({"keys_dir": dir, "created": done.created, "audit_public_key": done.audit_public_key});
            report(as_json, v, || {
                let what = match done.created.as_slice() {
                    [] => "both keys were already there; nothing replaced".to_string(),
                    made => format!("created {}", made.join(" and ")),
                };
                format!(
                    "{}: {what}. Give this directory to every replica (config `keys_dir`). Audit public key: {}",
                    dir.display(),
                    done.audit_public_key
                )
            })
        }
        KeysCmd::RotateTokenKey {
            place,
            json: as_json,
        } => {
            let dir = dir_of(place)?;
            let done = assent_store::keys::rotate_token_key(&dir)?;
            let v = json!({"keys_dir": dir, "kid": done.kid, "retired_kid": done.retired_kid, "retired_file": done.retired_file});
            report(as_json, v, || {
                format!(
                    "{}: new token key {}; the old key {} ({}) keeps verifying until its tokens have expired. Gateways using this directory sign with the new key within 10 s.",
                    dir.display(),
                    done.kid,
                    done.retired_kid,
                    done.retired_file
                )
            })
        }
    }
}

/// Prints what a subcommand did: `v` (with `--json`) or the sentence `text` makes; exit 0.
fn report(as_json: bool, v: serde_json::Value, text: impl FnOnce() -> String) -> Result<i32> {
    if as_json {
        println!("{v}");
    } else {
        println!("{}", text());
    }
    Ok(0)
}
