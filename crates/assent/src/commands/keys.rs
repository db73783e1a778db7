//! `assent keys init`: makes the token and audit keys of a keys directory (issue 13 §2), the
//! one set every replica of a shared PostgreSQL database is given. The files and what may
//! never happen to them (no overwrite) are the store's `assent_store::keys`.

use crate::args::KeysCmd;
use anyhow::Result;
use assent_server::config::Config;
use serde_json::json;

/// Runs one `assent keys` subcommand to its exit status (0; errors are returned: exit 1).
pub(crate) fn run(cmd: KeysCmd) -> Result<i32> {
    match cmd {
        KeysCmd::Init {
            keys_dir,
            config,
            json: as_json,
        } => {
            let dir = match (keys_dir, config) {
                (Some(d), _) => d,
                (None, Some(f)) => Config::load(&f)?.keys_dir(),
                (None, None) => {
                    anyhow::bail!("name the directory: --keys-dir DIR or --config FILE")
                }
            };
            let done = assent_store::keys::init(&dir)?;
            if as_json {
                println!(
                    "{}",
                    json!({"keys_dir": dir, "created": done.created, "audit_public_key": done.audit_public_key})
                );
            } else {
                let what = match done.created.as_slice() {
                    [] => "both keys were already there; nothing replaced".to_string(),
                    made => format!("created {}", made.join(" and ")),
                };
                println!(
                    "{}: {what}. Give this directory to every replica (config `keys_dir`). Audit public key: {}",
                    dir.display(),
                    done.audit_public_key
                );
            }
            Ok(0)
        }
    }
}
