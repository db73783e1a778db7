//! assent-store: durable state of the assent gateway in one SQLite file.
//!
//! [`Store`] keeps approvals, their decisions, approval tokens and the hash-chained audit log
//! ([`audit`]) in `<data_dir>/assent.db` (WAL, `synchronous=FULL`), and the token signing key
//! in `<data_dir>/token.key` (directory mode 0700, file mode 0600); the Ed25519 key that signs
//! audit checkpoints is `<data_dir>/audit.key` ([`checkpoint`]; [`integrity`] verifies it all
//! offline). Every state change is
//! written in one `BEGIN IMMEDIATE` transaction together with its audit record. The first
//! decision on an approval wins; later ones are audited as late and change nothing.
//!
//! It is not the policy engine (that is `assent-core`) nor an API: callers pass in the time
//! (Unix milliseconds) and the verdicts. Calls are blocking; async callers use
//! `spawn_blocking`. One connection behind a mutex serialises writers in-process, and
//! `busy_timeout` waits for other processes instead of failing. Every policy decision taken
//! inside a transaction (who may decide, which scope a decision may take, which grant covers a
//! call, when a verdict becomes a deny) is a pure `assent-core` function; the store keeps
//! atomicity and persistence.
//!
//! The files follow the approval's life cycle, each importing only files listed after it:
//! [`sessions`] (cancel a session), `expiry` (expire, escalate, countdowns) → `decide`
//! (decide, cancel) → `propose` (gate a call, hold it) → `clarifications`, `subscriptions`
//! → `tokens` (mint, redeem, grants), [`plans`], `usage` (prior calls, pending counts) →
//! [`aaep`] (envelopes and types) → `mplp` (Confirm trace events), [`learning`],
//! [`integrity`] → `record` (the approval row and its strict reader) → `open` (data
//! directory, keys, migrations), [`pins`], [`outbox`], [`confirm`] → [`checkpoint`] →
//! [`audit`] → the kit at the bottom: `store` (the [`Store`] handle and its write
//! transaction), [`stored`] (strict column reading), `sql` (typed rows, JSON columns, a row
//! read by column name), `kit` (time, files, JSON text), `error`.
//! This file only mounts them and re-exports their public items.

#![warn(missing_docs)]

pub mod aaep;
pub mod audit;
pub mod checkpoint;
mod clarifications;
pub mod confirm;
mod decide;
mod error;
mod expiry;
pub mod integrity;
mod kit;
pub mod learning;
mod mplp;
mod open;
pub mod outbox;
pub mod pins;
pub mod plans;
mod propose;
mod record;
pub mod sessions;
mod sql;
mod store;
pub mod stored;
mod subscriptions;
mod tokens;
mod usage;

pub use confirm::ConfirmContext;
pub use decide::DecisionInput;
pub use error::{DecideError, RedeemError, StoreError};
pub use kit::rfc3339;
pub use open::verify_offline;
pub use propose::{ConfirmTarget, PoliciesOf, Proposal, Proposed};
pub use record::{ApprovalRecord, DecisionRecord, EditedCall, TokenInfo};
pub use store::Store;
pub use stored::Settlement;
pub use tokens::GrantRecord;
