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
            let (dir, database) = match (place.keys_dir, place.config) {
                (Some(d), _) => (d, None),
                (None, Some(f)) => {
                    let c = Config::load(&f)?;
                    (c.keys_dir(), Some(c.database()))
                }
                (None, None) => {
                    anyhow::bail!("name the directory: --keys-dir DIR or --config FILE")
                }
            };
            let done = init(&dir, database)?;
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

/// `assent keys init` of `dir`; through a config (`database`, as it resolved) its database is
/// looked at too, and one already served is refused new keys
/// ([`assent_store::keys::init_for`]). Without access to it (its URL's variable unset, the
/// server unreachable — keys are often made before), the keys are made unchecked, with a
/// warning: a gateway then refuses to serve a database under keys it was not served with.
fn init(
    dir: &std::path::Path,
    database: Option<Result<assent_store::db::Database, assent_server::config::ConfigError>>,
) -> Result<assent_store::keys::Initialised> {
    let looked = database.map(|d| {
        let d = d.map_err(anyhow::Error::from)?;
        off_runtime(|| assent_store::keys::holds_audit_records(&d))?;
        anyhow::Ok(d)
    });
    Ok(match looked {
        Some(Ok(db)) => off_runtime(|| assent_store::keys::init_for(dir, &db))?,
        Some(Err(e)) => {
            eprintln!(
                "assent: warning: the config's database could not be looked at ({e:#}), so whether it was served before under other keys is not checked; a gateway refuses to serve a database under keys it was not served with"
            );
            assent_store::keys::init(dir)?
        }
        None => assent_store::keys::init(dir)?,
    })
}

/// `f` on a thread of its own: the PostgreSQL client blocks on its own runtime, never on the
/// thread of the command's (`assent keys` runs on it).
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
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
