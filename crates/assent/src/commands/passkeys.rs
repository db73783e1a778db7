//! `assent passkeys enrol NAME`: issues a one-time passkey enrolment code for an operator
//! (issue 14 §4), written to the gateway's database (SQLite in the data directory, or the
//! PostgreSQL database of `--config FILE`). The code is printed once and stored only by its
//! SHA-256, its row sealed with the gateway's audit key (read from `keys_dir`); the
//! dashboard's Passkeys page takes it, once. Whoever runs this has the database and the keys,
//! which a stolen operator key does not give — so such a key cannot enrol its own passkey, and
//! a database writer cannot plant a code of their own.

use crate::args::PasskeysCmd;
use anyhow::{Context, Result};
use serde_json::json;

/// Runs one `assent passkeys` subcommand; its exit status (errors are returned: exit 1).
pub(crate) fn run(cmd: PasskeysCmd) -> Result<i32> {
    let PasskeysCmd::Enrol {
        name,
        place,
        hours,
        json: as_json,
    } = cmd;
    let db = crate::setup::database(&place)?;
    // The row is sealed with the gateway's audit key: the gateway takes no unsealed code.
    let keys_dir = crate::commands::audit::resolve(&place)?.keys_dir;
    let audit_key = assent_store::checkpoint::read_key(&keys_dir)?.with_context(|| {
        format!(
            "no {} in {}: the code is sealed with the gateway's audit key; run this where the gateway's keys_dir is (give --config FILE), or start the gateway once to make its keys",
            assent_store::checkpoint::KEY_FILE,
            keys_dir.display()
        )
    })?;
    // Beside the data directory's lock, as a gateway: a restore under way finishes first.
    let conn = assent_store::AdminConnection::open(&db)
        .with_context(|| format!("cannot open the {db:?} database"))?;
    let mut raw = [0u8; 20];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("no random source: {e}"))?;
    let code = hex::encode(raw);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let expires_at = now + (hours as i64) * 3_600_000;
    let digest = assent_core::canonical::sha256_hex(code.as_bytes());
    let by = format!("cli:{}", whoami());
    assent_store::passkeys::issue_enrolment(
        conn.conn(),
        &audit_key,
        &name,
        &digest,
        expires_at,
        &by,
        now,
    )?;
    if as_json {
        println!(
            "{}",
            json!({"principal": name, "code": code, "expires_at": expires_at})
        );
    } else {
        println!(
            "enrolment code for {name} (valid {hours} h, once): {code}\nGive it to {name} by a channel you trust; they enter it on the dashboard's Passkeys page."
        );
    }
    Ok(0)
}

/// The local user name, for the audit record (`cli:USER`).
fn whoami() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into())
}
