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
//! It builds no wire format either: each AAEP event and MPLP Confirm trace event a state
//! change reports is a typed [`AaepEvent`] or [`MplpEvent`] borrowing the store's records,
//! rendered by the [`Envelopes`] the store was opened with (`assent_server::WireEnvelopes`:
//! envelopes are built at the edge) and written, as rendered, in the transaction of the state
//! change, so an event is never sent for something that did not happen and a restart loses
//! none. The offline readers ([`verify_offline`], [`learning`]'s export) open the database
//! read-only, emit nothing and need no renderer.
//!
//! The files follow the approval's life cycle, each importing only files listed after it:
//! [`sessions`] (cancel a session), `expiry` (expire, escalate, countdowns) → `decide`
//! (decide, cancel) → `propose` (gate a call, hold it) → `clarifications`, `subscriptions`
//! → `tokens` (mint, redeem, grants), [`plans`], `usage` (prior calls, pending counts) →
//! `emit` (writing rendered AAEP events and MPLP trace events) → `mplp` (reading Confirm
//! trace events back), `reads` (approval queries), [`learning`], [`integrity`] → `open`
//! (data directory, keys, migrations), [`pins`], [`outbox`], [`confirm`] → [`checkpoint`] →
//! [`retention`] (archiving old audit records) → [`archive`] (the signed export and its
//! anchors) → [`audit`] → the kit at the bottom: `store` (the [`Store`] handle, its renderer
//! and its write transaction) → [`events`] (typed events, the [`Envelopes`] trait) → [`aaep`]
//! (subscription, stored-event and clarification types), `record` (the approval row and its
//! strict reader) → [`stored`] (strict column reading), `sql` (typed rows, JSON columns, a
//! row read by column name), `kit` (time, ids, files, JSON text), [`migrate`] (the numbered
//! migrations of both backends and their runner) → `error` → the storage kernel at the very
//! bottom (issue 13): [`db`] (one API over SQLite and Postgres: sessions, statements, rows,
//! the write transaction, NOTIFY/LISTEN) → `db_listen` (the LISTEN thread), `db_pg` (the
//! Postgres session, statement cache, write lock), `db_sqlite` (the rusqlite glue) →
//! `db_value` (parameters, column values, the kernel's error), `db_sql` (`?N` → `$N`).
//! This file only mounts them and re-exports their public items.

#![warn(missing_docs)]

pub mod aaep;
mod approval_record;
mod approval_seal;
pub mod archive;
mod archive_dir;
mod archived_approvals;
pub mod audit;
pub mod auth_failures;
mod batch;
mod bound_outstanding;
pub mod checkpoint;
mod clarifications;
pub mod config_generations;
mod config_serving;
pub mod confirm;
mod consent;
pub mod db;
mod db_listen;
mod db_pg;
mod db_sql;
mod db_sqlite;
mod db_tls;
mod db_value;
mod decide;
mod decision_input;
mod emit;
mod error;
pub mod events;
mod expiry;
pub mod grants_revoke;
mod group;
pub mod history;
pub mod insights;
pub mod integrity;
mod integrity_checkpoints;
mod integrity_people;
mod integrity_pins;
mod integrity_plans;
mod integrity_tokens;
mod joins;
mod key_ranges;
mod key_replaced;
pub mod keys;
mod kit;
pub mod learning;
pub mod migrate;
mod mplp;
pub mod oidc_logins;
mod open;
pub mod ops;
pub mod outbox;
mod owner;
pub mod passkeys;
mod pin_reads;
pub mod pins;
pub mod plans;
mod propose;
mod readers;
pub mod readiness;
mod reads;
mod receipts;
mod record;
pub mod results;
pub mod retention;
mod retention_carry;
mod retention_entries;
mod seal;
mod sealing_marker;
mod session_over;
mod session_risk;
pub mod sessions;
mod settlement_seal;
mod single_use;
pub mod slack;
mod sql;
mod store;
pub mod stored;
mod subscriptions;
#[cfg(test)]
mod test_kit;
mod token_keys;
mod tokens;
pub mod tool_schemas;
pub mod ui_sessions;
mod usage;
pub mod voided;
mod votes;
pub mod wal;

pub use approval_record::{ApprovalRecord, DecisionRecord, EditedCall, TokenInfo, VoteRecord};
pub use audit::Via;
pub use clarifications::{AskRefused, MAX_CLARIFICATIONS_LISTED};
pub use confirm::ConfirmContext;
pub use decide::DecisionInput;
pub use decision_input::StillStands;
pub use error::{DecideError, RedeemError, StoreError};
pub use events::{AaepEvent, ConfirmEvent, Envelopes, MplpEvent};
pub use insights::Insights;
pub use kit::{ordered_id, ordered_uuid, random_id, rfc3339};
pub use open::{AdminConnection, ClaimReport, claim_report, verify_offline};
pub use propose::{ConfirmTarget, PoliciesOf, Proposal, Proposed};
pub use receipts::ReceiptOf;
pub use store::Store;
pub use stored::Settlement;
pub use tokens::VerifiedToken;
pub use usage::{CallsSeen, EditObservations};
