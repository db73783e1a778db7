//! The subcommands other than `serve`, one file per group: `approvals` (pending, show,
//! approve, deny, cancel), `grants` (grants, revoke), `clarifications` (clarifications,
//! answer), `tools` (tool-list pinning reviews), `watch` (the terminal UI), `check` (offline
//! policy evaluation), `mcp` (the stdio proxy and hub), `audit` (verify, key, and retention's archive and
//! verify-export), `backup`
//! (backup, restore), `migrate` (the schema), `replicas` (which configuration each PostgreSQL
//! replica serves), `passkeys` (enrolment codes), `export` (learning samples), `replay` (a
//! candidate policy against the recorded history), `suggest` (rules mined from settled
//! approvals) and `reload` (the running gateway re-reads its principals, agents and
//! policies). Each returns the process exit status; none imports another, only the kit below
//! them (`args`, `remote`, `render`, `setup`).

pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod backup;
pub(crate) mod check;
pub(crate) mod clarifications;
pub(crate) mod export;
pub(crate) mod grants;
pub(crate) mod keys;
pub(crate) mod mcp;
pub(crate) mod migrate;
pub(crate) mod passkeys;
pub(crate) mod receipt;
pub(crate) mod reload;
pub(crate) mod replay;
pub(crate) mod replicas;
pub(crate) mod suggest;
pub(crate) mod tools;
pub(crate) mod watch;
