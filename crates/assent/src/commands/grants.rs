//! The grant commands: `grants` lists scoped approvals (active, or `--all` with revoked and
//! expired ones) one line each, `revoke` ends one. Grants are minted by `approve --scope`
//! (`commands/approvals.rs`); coverage is decided by the gateway, not here.

use crate::args::Remote;
use crate::remote::{connect, print_list};
use anyhow::Result;
use assent_api::tokens::Grant;
use assent_core::stamp::rfc3339;

/// `assent grants`: each grant's id, agent, target, what it covers, scope and end, and who
/// made it (`--json`: the API's list as is).
pub(crate) async fn grants(r: &Remote, all: bool, as_json: bool) -> Result<i32> {
    let list = connect(r)?.grants(all).await?;
    print_list(&list, &list.grants, as_json, Some("no grants"), grant_line)
}

/// One grant's line: `ID  AGENT TARGET (WHAT) scope SCOPE STATE[  [discouraged…]]  by WHO`,
/// the target `server/tool` (`tool` for a local tool).
fn grant_line(g: &Grant) -> String {
    let target = match &g.server {
        Some(s) => format!("{s}/{}", g.tool),
        None => g.tool.clone(),
    };
    let what = if g.whole_tool {
        "every call".to_string()
    } else {
        format!("call_hash {}", g.call_hash.as_deref().unwrap_or(""))
    };
    let state = if let Some(t) = g.revoked_at {
        format!("revoked {}", rfc3339(t))
    } else if let Some(t) = g.expires_at {
        format!("until {}", rfc3339(t))
    } else {
        "until revoked".into()
    };
    format!(
        "{}  {} {target} ({what}) scope {} {state}{}  by {}\n",
        g.id,
        g.agent,
        g.scope,
        if g.discouraged {
            "  [discouraged: workspace on R3/R4]"
        } else {
            ""
        },
        g.created_by
    )
}

/// `assent revoke ID`: revokes a grant; later matching calls are held again.
pub(crate) async fn revoke(r: &Remote, id: &str) -> Result<i32> {
    connect(r)?.revoke_grant(id).await?;
    println!("{id} revoked");
    Ok(0)
}
