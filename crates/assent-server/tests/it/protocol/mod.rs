//! Seed 002 decision options, grants, triggers, timeouts, batching, cancelling and the
//! ApprovalRequest / Token / MPLP Confirm shapes, against a real server and SQLite file, under
//! the protocol policy of `env.rs`. This file only mounts the subjects.

mod env;

mod decisions;
mod formats;
mod grants;
mod sessions;
mod triggers;
