//! The entry of the CLI: parses the command line (`args`), starts the tokio runtime and maps
//! each subcommand onto `serve` or its file under `commands/`, turning an error into one
//! `assent: …` line on stderr and exit status 1. It holds no command's logic.

use crate::args::{Cli, Cmd};
use crate::commands::{
    approvals, audit, backup, check, clarifications, export, grants, keys, mcp, migrate, passkeys,
    receipt, reload, replay, replicas, suggest, tools, watch,
};
use crate::remote::connect;
use crate::render::one_line;
use anyhow::Result;
use clap::Parser;

/// Runs the CLI and returns the process exit code: the command's, 2 for a usage error (0 for
/// `--help`/`--version`), 1 for an error or a runtime that cannot start.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: cannot start runtime: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        match dispatch(cli.cmd).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("assent: {}", one_line(&e));
                1
            }
        }
    })
}

/// Runs one subcommand to its exit status.
async fn dispatch(cmd: Cmd) -> Result<i32> {
    // An administrator (root) may read the service user's keys; a gateway may not.
    if !matches!(cmd, Cmd::Serve { .. }) {
        assent_store::keys::let_root_read_service_keys();
    }
    match cmd {
        Cmd::Serve {
            config,
            listen,
            data_dir,
            strict,
            insecure_demo_keys,
            adopt_config,
        } => {
            let flags = (strict, insecure_demo_keys, adopt_config);
            crate::serve::serve(config, listen, data_dir, flags).await
        }
        Cmd::Pending { json, remote } => approvals::pending(&remote, json).await,
        Cmd::Show { id, json, remote } => approvals::show(&remote, &id, json).await,
        Cmd::Watch { remote } => watch::run(connect(&remote)?).await,
        Cmd::Approve {
            ids,
            reason,
            scope,
            whole_tool,
            yes_workspace,
            args,
            remote,
        } => {
            approvals::approve(
                &remote,
                &ids,
                reason,
                scope,
                whole_tool,
                yes_workspace,
                args,
            )
            .await
        }
        Cmd::Deny {
            ids,
            reason,
            remote,
        } => approvals::deny(&remote, &ids, reason).await,
        Cmd::Cancel {
            id,
            session,
            reason,
            remote,
        } => approvals::cancel(&remote, &id, session, reason).await,
        Cmd::Grants { list, remote } => grants::grants(&remote, list.all, list.json).await,
        Cmd::Revoke { id, remote } => grants::revoke(&remote, &id).await,
        Cmd::Reload { json, remote } => reload::run(&remote, json).await,
        Cmd::Clarifications { list, remote } => {
            clarifications::clarifications(&remote, list.all, list.json).await
        }
        Cmd::Answer { id, value, remote } => clarifications::answer(&remote, &id, &value).await,
        Cmd::Check {
            config,
            agent,
            tool,
            server,
            args,
            json,
            strict,
        } => Ok(check::check(
            &config, &agent, &tool, server, &args, json, strict,
        )),
        // The PostgreSQL client blocks on its own runtime: never on this one's thread.
        cmd @ Cmd::Replay { .. } => tokio::task::spawn_blocking(move || replay::run(cmd)).await?,
        cmd @ Cmd::Suggest { .. } => tokio::task::spawn_blocking(move || suggest::run(cmd)).await?,
        cmd @ Cmd::Mcp { .. } => mcp::run(cmd).await,
        // The PostgreSQL client blocks on its own runtime: never on this one's thread.
        Cmd::Audit { cmd } => tokio::task::spawn_blocking(move || audit::audit(cmd)).await?,
        Cmd::Keys { cmd } => keys::run(cmd),
        // The PostgreSQL client blocks on its own runtime: never on this one's thread.
        Cmd::Passkeys { cmd } => tokio::task::spawn_blocking(move || passkeys::run(cmd)).await?,
        cmd @ (Cmd::Backup { .. } | Cmd::Restore { .. }) => backup::run(cmd),
        // The PostgreSQL client blocks on its own runtime: never on this one's thread.
        Cmd::Migrate { place, json } => {
            tokio::task::spawn_blocking(move || migrate::run(&place, json)).await?
        }
        Cmd::Replicas { place, json } => {
            tokio::task::spawn_blocking(move || replicas::run(&place, json)).await?
        }
        Cmd::Tools { cmd, remote } => tools::tools(&remote, cmd).await,
        Cmd::Receipt { cmd } => receipt::run(cmd).await,
        // The PostgreSQL client blocks on its own runtime: never on this one's thread.
        Cmd::Export { cmd } => tokio::task::spawn_blocking(move || export::run(cmd)).await?,
    }
}
