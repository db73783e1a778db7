//! The clap tree of the `assent` binary: every subcommand, flag, default and help text (the
//! `--help` output is this file). It parses only; what each command does lives in `serve.rs`
//! and `commands/`, and `dispatch.rs` maps one onto the other. The clap types carry `//`
//! comments rather than doc comments where a doc comment would become help text.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

// The parsed command line: one subcommand.
#[derive(Parser)]
#[command(
    name = "assent",
    version,
    about = "A human approval gateway for AI agent actions"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

// Where the gateway is and whose key to send: `--url`/`ASSENT_URL` and
// `--api-key`/`ASSENT_API_KEY`, global to the subcommand that flattens it.
#[derive(clap::Args, Clone)]
pub(crate) struct Remote {
    /// Gateway URL.
    #[arg(
        long,
        env = "ASSENT_URL",
        default_value = "http://127.0.0.1:7878",
        global = true
    )]
    pub(crate) url: String,
    /// API key (an operator's for pending/show/approve/deny).
    #[arg(
        long = "api-key",
        env = "ASSENT_API_KEY",
        hide_env_values = true,
        global = true
    )]
    pub(crate) api_key: Option<String>,
    /// Read the API key from FILE instead (one line; trailing white space dropped): other
    /// users cannot read it from the process list, as they can `--api-key`.
    #[arg(
        long = "api-key-file",
        env = "ASSENT_API_KEY_FILE",
        value_name = "FILE",
        global = true
    )]
    pub(crate) api_key_file: Option<PathBuf>,
    /// Send the key over plain http to a host that is not this machine (refused without it:
    /// anyone on the network path would read the key).
    #[arg(long = "insecure-http", global = true)]
    pub(crate) insecure_http: bool,
}

/// The options of a listing command (`grants`, `clarifications`): `--all` lists the settled
/// entries too (revoked, expired, answered), `--json` prints the API's JSON instead of a table.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct Listing {
    // `--all`: not only the active or pending entries (no `///`: clap would print it).
    #[arg(long)]
    pub(crate) all: bool,
    // `--json`: the API's JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

// Where an offline command finds the database: `--config FILE` (its `data_dir`) or
// `--data-dir DIR`; neither: ./assent.yaml if present, read as `--config` would be (its
// database, keys and checkpoint file too: `setup::config_file`), else `.assent`.
#[derive(clap::Args, Clone)]
pub(crate) struct DataPlace {
    /// The gateway's config: its `data_dir` holds the database.
    #[arg(long, conflicts_with = "data_dir")]
    pub(crate) config: Option<PathBuf>,
    /// The data directory (default: ./assent.yaml's store if present, else .assent).
    #[arg(long = "data-dir")]
    pub(crate) data_dir: Option<PathBuf>,
}

// Which keys directory an `assent keys` subcommand works on: `--keys-dir DIR` (created 0700
// when missing), or the `keys_dir` of `--config FILE` (default its `data_dir`); one is needed.
#[derive(clap::Args, Clone)]
pub(crate) struct KeysPlace {
    /// The keys directory (`keys init` creates it, 0700, when missing).
    #[arg(
        long = "keys-dir",
        conflicts_with = "config",
        required_unless_present = "config"
    )]
    pub(crate) keys_dir: Option<PathBuf>,
    /// The gateway's config: its `keys_dir` (default its `data_dir`).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
}

// Which recorded history `replay` and `suggest` read: the SQLite file of `--data-dir DIR`, or
// the store of `--history-config FILE`, else the store of the command's `--config`; within
// `--since` and `--until` (RFC 3339).
#[derive(clap::Args, Clone)]
pub(crate) struct History {
    /// Read the history from this data directory's SQLite file.
    #[arg(long = "data-dir", conflicts_with = "history_config")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Read the history from this gateway config's store (its `data_dir` or `database`).
    #[arg(long = "history-config")]
    pub(crate) history_config: Option<PathBuf>,
    /// Only proposals at or after this time (RFC 3339, e.g. 2026-11-01T00:00:00Z).
    #[arg(long)]
    pub(crate) since: Option<String>,
    /// Only proposals before this time (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<String>,
}

// Every subcommand of `assent`.
#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Run the gateway (HTTP API; the store on the embedded SQLite file, or PostgreSQL).
    Serve {
        #[arg(long, default_value = "assent.yaml")]
        config: PathBuf,
        /// Overrides `listen` from the config.
        #[arg(long)]
        listen: Option<String>,
        /// Overrides `data_dir` from the config.
        #[arg(long = "data-dir")]
        data_dir: Option<PathBuf>,
        /// Refuse to start when an agent file has a field Agent Format 1.0 does not define
        /// (a typo such as `aproval:`), instead of warning.
        #[arg(long)]
        strict: bool,
        /// Accept `key_env` keys shorter than 32 characters (the README's demo keys). Only on a
        /// loopback address; never for real use.
        #[arg(long = "insecure-demo-keys")]
        insecure_demo_keys: bool,
        /// On a PostgreSQL database shared by replicas: make this configuration the newest
        /// even though another replica loaded a newer one (a deliberate return to an earlier
        /// file). Without it such a start is refused; the other replicas then stop serving
        /// until they load this configuration.
        #[arg(long = "adopt-config")]
        adopt_config: bool,
    },
    /// List pending approvals with what a person needs to decide.
    Pending {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Watch the queue in a terminal UI: ↑/↓ select, enter opens the card, a approves, d
    /// denies (with a reason), each confirmed with y; q quits. Honours NO_COLOR.
    Watch {
        #[command(flatten)]
        remote: Remote,
    },
    /// Show one approval.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Approve pending approvals: each gets its own single-use token for its exact call.
    /// Several ids are decided one by one with the same options.
    Approve {
        #[arg(required = true)]
        ids: Vec<String>,
        #[arg(long)]
        reason: Option<String>,
        /// once (default), session, workspace, or a duration such as 15m, 2h, 1d. Anything
        /// but once stores a grant that lets later matching calls through.
        #[arg(long, default_value = "once")]
        scope: String,
        /// Let the grant cover every call of the tool, not only these exact arguments.
        #[arg(long = "whole-tool")]
        whole_tool: bool,
        /// Confirm a workspace grant, or one timed past `session_grant_max_seconds`, on R3/R4.
        #[arg(long = "yes-workspace")]
        yes_workspace: bool,
        /// Approve with these arguments instead (a JSON object; one id only). The gatekeeper
        /// checks them again and the token binds them.
        #[arg(long)]
        args: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Deny pending approvals; the reason reaches the agent.
    Deny {
        #[arg(required = true)]
        ids: Vec<String>,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Cancel a pending approval, or with --session every pending approval of a session.
    Cancel {
        /// The approval id (or the session id with --session).
        id: String,
        #[arg(long)]
        session: bool,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// List active grants (scoped approvals); --all includes revoked and expired ones.
    Grants {
        #[command(flatten)]
        list: Listing,
        #[command(flatten)]
        remote: Remote,
    },
    /// Revoke a grant.
    Revoke {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Make the running gateway re-read its config file's principals, agents and policies
    /// (an operator's key; SIGHUP does the same). A file with errors is refused and the
    /// gateway keeps the set it had; a removed or changed key stops working at once.
    #[command(
        after_help = "Exit codes: 0 reloaded; 1 refused (the errors are printed as FILE:LINE: reason) or the gateway could not be reached."
    )]
    Reload {
        /// Print the API's JSON answer.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// List clarification questions agents are waiting on (pending unless --all).
    Clarifications {
        #[command(flatten)]
        list: Listing,
        #[command(flatten)]
        remote: Remote,
    },
    /// Answer a clarification. VALUE is read as the question's accepted kind: a choice's value
    /// for multiple_choice, yes/no (or true/false) for yes_no, a number for numeric, else text.
    Answer {
        id: String,
        value: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Evaluate a call against the policy files, without a server.
    /// Exit status: 0 allow, 10 confirm, 11 deny, 2 bad input.
    Check {
        #[arg(long, default_value = "assent.yaml")]
        config: PathBuf,
        #[arg(long)]
        agent: String,
        #[arg(long)]
        tool: String,
        #[arg(long)]
        server: Option<String>,
        /// The arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        #[arg(long)]
        json: bool,
        /// Treat unknown fields in agent files as errors (exit 2).
        #[arg(long)]
        strict: bool,
    },
    /// Re-evaluate every recorded proposal under a candidate policy and report how verdicts
    /// would change (issue 16 §1), per tool and overall, with examples and the rules
    /// responsible.
    #[command(
        after_help = "Exit codes: 0 no call would be loosened; 3 a call that was denied, or rejected by a person, would now be allowed without anyone's consent (gate policy changes in CI on this); 1 the history could not be read, some of its records could not be read as proposals, or it held none (without --allow-empty); 2 bad config or arguments. For a CI gate, name the history explicitly (--history-config or --data-dir): otherwise it is the store the candidate config names."
    )]
    Replay {
        /// The candidate config: its agent and governance files are the policy replayed.
        #[arg(long)]
        config: PathBuf,
        #[command(flatten)]
        history: History,
        /// Every replayed call in the JSON report (`calls`), not only examples.
        #[arg(long = "all-calls", requires = "json")]
        all_calls: bool,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// Treat unknown fields in agent files as errors (exit 2).
        #[arg(long)]
        strict: bool,
        /// Exit 0 when the history holds no proposal (a new deployment).
        #[arg(long = "allow-empty")]
        allow_empty: bool,
    },
    /// Propose rules mined from settled approvals (issue 16 §2): argument patterns people always
    /// approved become a narrower approval condition, patterns always denied a deny rule; each
    /// with its evidence and its replay. Nothing is applied.
    Suggest {
        /// The gateway's config: the policy the suggestions change.
        #[arg(long, default_value = "assent.yaml")]
        config: PathBuf,
        #[command(flatten)]
        history: History,
        /// Settled decisions a pattern needs before it is suggested.
        #[arg(long = "min-decisions", default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=100_000))]
        min_decisions: u32,
        /// Print the suggestions as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run an MCP stdio proxy in front of an MCP server: `assent mcp --agent ID --server ALIAS -- CMD ARGS...`
    ///
    /// Or, with `--config assent.yaml` instead of `--server` and a command: one stdio endpoint
    /// in front of every upstream in the config's `mcp_upstreams`, tools named `ALIAS__TOOL`.
    Mcp {
        #[arg(long)]
        agent: String,
        /// The agent file's MCP server alias of the upstream command (single-upstream mode:
        /// tool names unchanged).
        #[arg(long, required_unless_present = "config", conflicts_with = "config")]
        server: Option<String>,
        /// Serve every upstream of this config's `mcp_upstreams` (hub mode).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Session id for every call (default: a new UUID per proxy process).
        #[arg(long)]
        session: Option<String>,
        /// The person this agent acts for (a principal name), sent with every call as
        /// `on_behalf_of`: under separation of duties they may not approve its calls.
        #[arg(long = "on-behalf-of", env = "ASSENT_ON_BEHALF_OF")]
        on_behalf_of: Option<String>,
        /// Seconds per long-poll while a call waits for a human.
        #[arg(long, default_value_t = 25)]
        poll_seconds: u64,
        /// Seconds between progress notifications while a call waits, sent when the client
        /// gave a progress token (keeps clients that reset their timeout on progress waiting).
        #[arg(long, default_value_t = 10)]
        progress_seconds: u64,
        /// Relay the upstream's resources, prompts and completions unchecked (off: the proxy
        /// offers tools only, as no rule gates, records or bounds the others; a method it does
        /// not know is refused either way).
        #[arg(long)]
        pass_ungated: bool,
        #[command(flatten)]
        remote: Remote,
        #[arg(
            last = true,
            required_unless_present = "config",
            conflicts_with = "config"
        )]
        command: Vec<String>,
    },
    /// Copy the database to OUT while the gateway runs, then verify the copy.
    ///
    /// SQLite's online backup in one snapshot (the gateway keeps serving), written 0600 beside
    /// OUT, fsynced, then checked (SQLite's integrity check and the whole `audit verify`); only
    /// a copy that verifies becomes OUT. The keys are not in the database: back up
    /// DATA_DIR/token.key and DATA_DIR/audit.key separately (once; they do not change).
    #[command(
        after_help = "Exit codes: 0 written and verified; 1 refused or failed (OUT exists, no database, the copy does not verify), nothing written to OUT."
    )]
    Backup {
        #[command(flatten)]
        place: DataPlace,
        /// Replace OUT when it exists.
        #[arg(long)]
        force: bool,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// The file to write.
        #[arg(value_name = "OUT")]
        out: PathBuf,
    },
    /// Replace the database with a backup, for a stopped gateway.
    ///
    /// Refuses while a gateway (or another program) has the database open, a file that is not
    /// an assent database, a schema newer than this assent, a backup whose audit chain does not
    /// verify, and (unless --force) one whose signed checkpoints do not verify under
    /// DATA_DIR/audit.key or whose newest records no such checkpoint covers. The replaced
    /// database is kept as assent.db.before-restore-TIME; the new one is renamed in place.
    #[command(
        after_help = "Restore token.key and audit.key from the same backup first: under other keys every token minted before is refused and the checkpoints fail `assent audit verify`.\n\nExit codes: 0 restored; 1 refused or failed, nothing replaced."
    )]
    Restore {
        #[command(flatten)]
        place: DataPlace,
        /// Restore even though the backup's checkpoints were signed by another audit key (or
        /// DATA_DIR has none), or its newest records are covered by no checkpoint of this
        /// gateway's audit key (a backup by an older `assent backup`, or one added to or
        /// rewritten since).
        #[arg(long)]
        force: bool,
        /// Restore even though the backup holds approval tokens neither redeemed nor expired
        /// (one redeemed since the backup would be redeemable again: replace token.key after).
        #[arg(long)]
        allow_outstanding_tokens: bool,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// The backup to restore (a file `assent backup` wrote).
        #[arg(value_name = "IN")]
        input: PathBuf,
    },
    /// Bring the database to this build's schema version.
    ///
    /// SQLite in the data directory (created when missing), or the PostgreSQL database of
    /// `--config`'s `database: {url_env: VAR}` (the URL is read from VAR). `assent serve` runs
    /// the same migrations at start-up; replicas starting together migrate once.
    #[command(
        after_help = "Exit codes: 0 at this build's version; 1 refused or failed (unreachable database, a schema newer than this build, a migration edited after it was applied)."
    )]
    Migrate {
        #[command(flatten)]
        place: DataPlace,
        /// Print `{"applied": [versions], "version": N}`.
        #[arg(long)]
        json: bool,
    },
    /// The replicas on `--config`'s PostgreSQL database: which configuration generation each
    /// serves, when it was last seen, and which replica put the newest in force.
    #[command(
        after_help = "Exit codes: 0 every replica seen live serves the newest configuration; 2 one serves an older one (it serves nothing until reloaded or restarted with the newest); 1 the database cannot be read."
    )]
    Replicas {
        #[command(flatten)]
        place: DataPlace,
        /// Print `{"newest": {...} | null, "replicas": [{holder, digest, generation, seen_ms_ago, live, newest}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Passkeys (issue 14 §4): issue a one-time enrolment code, on the gateway's database.
    Passkeys {
        #[command(subcommand)]
        cmd: PasskeysCmd,
    },
    /// Key files: make the token and audit keys replicas share.
    Keys {
        #[command(subcommand)]
        cmd: KeysCmd,
    },
    /// Audit log commands.
    Audit {
        #[command(subcommand)]
        cmd: AuditCmd,
    },
    /// Approval receipts: fetch one, verify one offline (issue 14 §5).
    Receipt {
        #[command(subcommand)]
        cmd: ReceiptCmd,
    },
    /// Export data for other tools.
    Export {
        #[command(subcommand)]
        cmd: ExportCmd,
    },
    /// MCP tool-list pinning: review changed or new upstream tools.
    Tools {
        #[command(subcommand)]
        cmd: ToolsCmd,
        #[command(flatten)]
        remote: Remote,
    },
}

// `assent receipt …`: approval receipts.
#[derive(Subcommand)]
pub(crate) enum ReceiptCmd {
    /// Print approval ID's receipt (JSON), signed now by the gateway's audit key.
    Get {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Verify a receipt FILE offline: its call against its canonical form and call_hash, its
    /// signature under the audit public key (--public-key, or the data directory's) and passkeys.
    #[command(
        after_help = "Exit codes: 0 verified; 1 the receipt does not verify (edited call, vote or signature), or with --approves it is not an approval of that call; 2 usage or I/O error (unreadable file, not a receipt, no public key)."
    )]
    Verify {
        /// The receipt file (as `assent receipt get` prints it).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The audit public key (64 hex characters, from `assent audit key`).
        #[arg(long = "public-key")]
        public_key: Option<String>,
        /// The dashboard's origin (`passkeys.origin`): every passkey assertion was made there.
        #[arg(long, value_name = "URL")]
        origin: Option<url::Url>,
        /// Exit 1 unless it approved this call (64 hex): the one it let run, an edit if any.
        #[arg(long, value_name = "CALL_HASH")]
        approves: Option<String>,
        #[command(flatten)]
        place: DataPlace,
    },
}

// `assent tools …`: MCP tool-list pinning.
#[derive(Subcommand)]
pub(crate) enum ToolsCmd {
    /// Tools whose definition changed (or that are new) since their server was pinned, each
    /// with the diff from its pinned definition. Their calls wait until accepted.
    Pending {
        #[arg(long)]
        json: bool,
    },
    /// Accept a changed tool's new definition: it becomes the pin and its calls go on.
    Accept { ids: Vec<String> },
    /// Reject a changed tool's new definition: its calls are refused.
    Reject { ids: Vec<String> },
    /// Every pinned tool.
    Pins {
        #[arg(long)]
        json: bool,
    },
}

// `assent export …`.
#[derive(Subcommand)]
pub(crate) enum ExportCmd {
    /// Every settled approval as an MPLP learning sample, one JSON object per line (JSONL).
    /// Reads the database directly (read-only; the gateway may keep running).
    #[command(
        after_help = "Exit codes: 0 written; 1 the database cannot be read (a damaged row, an unreachable PostgreSQL) or --out cannot be written; with --out nothing is left behind then: the file appears whole or not at all."
    )]
    LearningSamples {
        #[command(flatten)]
        place: DataPlace,
        /// Write to this file instead of standard output (whole or not at all: written beside
        /// it, then renamed over it).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

// `assent passkeys …`: enrolment of operators' passkeys.
#[derive(Subcommand)]
pub(crate) enum PasskeysCmd {
    /// Issue a one-time code with which operator NAME registers a passkey in the dashboard
    /// (Passkeys page). Written straight to the gateway's database: whoever runs this has its
    /// data directory or database, which a stolen operator key does not give.
    #[command(
        after_help = "Exit codes: 0 issued (the code is printed once); 1 the database cannot be written or its schema is behind (run assent migrate)."
    )]
    Enrol {
        /// The operator principal's name.
        name: String,
        #[command(flatten)]
        place: DataPlace,
        /// How long the code is valid, in hours (1 to 168).
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=168))]
        hours: u64,
        /// Print `{"principal", "code", "expires_at"}`.
        #[arg(long)]
        json: bool,
    },
}

// `assent keys …`: the key files of a gateway.
#[derive(Subcommand)]
pub(crate) enum KeysCmd {
    /// Create `token.key` and `audit.key` in a keys directory, keeping any that exist.
    ///
    /// An embedded (SQLite) gateway makes its keys on first start. Replicas sharing one
    /// PostgreSQL database must all sign with the same keys, so `assent serve` never makes
    /// them for it: run this once and give the directory (`keys_dir`) to every replica.
    #[command(
        after_help = "Exit codes: 0 both keys present (created now or before); 1 an existing key is damaged, or the directory cannot be written."
    )]
    Init {
        #[command(flatten)]
        place: KeysPlace,
        /// Print `{"keys_dir", "created": [files], "audit_public_key"}`.
        #[arg(long)]
        json: bool,
    },
    /// Make a new current token signing key (`token.key`); the old one is kept as
    /// `token-retired-<ms>.key` and keeps verifying (and stays in the JWKS) until every token
    /// it signed has expired. The audit key is not touched.
    ///
    /// Running gateways sharing the directory pick it up within 10 seconds, no restart.
    #[command(
        name = "rotate-token-key",
        after_help = "Exit codes: 0 rotated; 1 no token key yet (run `assent keys init`), a damaged key, or the directory cannot be written."
    )]
    RotateTokenKey {
        #[command(flatten)]
        place: KeysPlace,
        /// Print `{"keys_dir", "kid", "retired_kid", "retired_file"}`.
        #[arg(long)]
        json: bool,
    },
}

// `assent audit …`: offline verification and the checkpoint key.
#[derive(Subcommand)]
pub(crate) enum AuditCmd {
    /// Verify the audit log offline: hash chain, signed checkpoints, state tables.
    ///
    /// Read-only; the gateway may keep running. Checks the whole hash chain; every stored
    /// checkpoint's Ed25519 signature and that the chain at its record has exactly its head
    /// hash; with --checkpoint, that the chain reaches the newest valid checkpoint of that
    /// file; and the state tables against the chain (approvals, decisions, minted and redeemed
    /// tokens). Names the first problem.
    #[command(
        after_help = "Exit codes: 0 verified; 1 the chain is broken, a checkpoint does not verify or is not reached, an export is missing or does not verify (with --archive-dir), or the state tables disagree with the chain; 2 usage or I/O error (no database, unreadable file, no public key)."
    )]
    Verify {
        #[command(flatten)]
        place: DataPlace,
        /// A checkpoint sink file (JSONL, `audit_checkpoints.file`): the chain must reach its
        /// newest checkpoint signed by the audit key (detects a truncated or rewritten log).
        /// Default: the `audit_checkpoints.file` of --config, when it exists.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// The audit public key (64 hex characters, from `assent audit key`); default: the
        /// public half of DATA_DIR/audit.key.
        #[arg(long = "public-key")]
        public_key: Option<String>,
        /// Fail (exit 1) when more than this many records are covered by no checkpoint: set it
        /// a little above `audit_checkpoints.every_records`, and a chain rewritten after its
        /// stored checkpoints were deleted is caught even without a checkpoint file.
        #[arg(long = "max-unsigned", value_parser = clap::value_parser!(i64).range(0..))]
        max_unsigned: Option<i64>,
        /// A directory holding retention exports (DATA_DIR/archive; repeat it for each
        /// replica's): every archive anchor's export must be in one of them, verify, and end
        /// in that anchor's manifest. Without it the exports are not opened.
        #[arg(long = "archive-dir")]
        archive_dirs: Vec<PathBuf>,
        /// Print the report as one JSON object (`ok`, `records`, `head`, `problem`, …).
        #[arg(long)]
        json: bool,
    },
    /// Archive old audit records into a signed export, then delete them from the store.
    ///
    /// Records older than --older-than-days (default: `audit_retention_days` of --config) go
    /// to a new file in DATA_DIR/archive (JSONL, one record a line, then a manifest signed by
    /// the audit key), written and synced before they are deleted; the store keeps the
    /// manifest as its anchor, so the remaining chain still verifies. Records a pending
    /// approval, a live token or grant, or an undelivered webhook still needs stay. Safe while
    /// gateways run (replicas racing archive a range once). With a checkpoint file
    /// (--checkpoint, or `audit_checkpoints.file` of --config) the records are checked against
    /// its signatures and archived only up to the newest of them.
    #[command(
        after_help = "Exit codes: 0 archived (or nothing due); 1 refused or failed (no retention period, no audit key, a chain that does not verify: nothing deleted)."
    )]
    Archive {
        #[command(flatten)]
        place: DataPlace,
        /// Archive records older than this many days (1 to 36500).
        #[arg(long = "older-than-days")]
        older_than_days: Option<u64>,
        /// The checkpoint sink file (JSONL) to check the records against; default: the
        /// `audit_checkpoints.file` of --config.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Print `{"archived": [{manifest, path, bytes, more}], "cutoff": ms}`.
        #[arg(long)]
        json: bool,
    },
    /// Verify an audit export (a file `assent audit archive` wrote) offline.
    ///
    /// Checks every record's chain link and hash, that the manifest's signature verifies
    /// under the audit public key (--public-key, or DATA_DIR/audit.key) and that it describes
    /// exactly the records in the file; with --config or --data-dir, also that the store's
    /// archive anchor is this manifest (the store deleted these records on its strength).
    #[command(
        after_help = "Exit codes: 0 verified; 1 a record, the manifest or the store's anchor does not verify; 2 usage or I/O error."
    )]
    VerifyExport {
        /// The export file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[command(flatten)]
        place: DataPlace,
        /// The audit public key (64 hex characters, from `assent audit key`).
        #[arg(long = "public-key")]
        public_key: Option<String>,
        /// Print the report as one JSON object (`ok`, `records`, `manifest`, `problem`).
        #[arg(long)]
        json: bool,
    },
    /// Print the audit checkpoint public key (64 hex characters).
    ///
    /// The 32 raw bytes of the Ed25519 public key as lowercase hex, of the audit key in the
    /// keys directory of --config (its `keys_dir`, default its `data_dir`) or --keys-dir;
    /// else in --data-dir, where it is created (mode 0600) when missing.
    Key {
        /// Data directory (default: `data_dir` of ./assent.yaml if present, else .assent).
        #[arg(long = "data-dir", conflicts_with_all = ["config", "keys_dir"])]
        data_dir: Option<PathBuf>,
        /// The gateway's config: the audit key of its `keys_dir` (never created here: run
        /// `assent keys init`).
        #[arg(long, conflicts_with = "keys_dir")]
        config: Option<PathBuf>,
        /// A keys directory (never created here: run `assent keys init`).
        #[arg(long = "keys-dir")]
        keys_dir: Option<PathBuf>,
    },
}
