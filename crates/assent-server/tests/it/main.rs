//! The HTTP API against a real server on a loopback port and a real SQLite file, or a real
//! PostgreSQL schema with `ASSENT_TEST_BACKEND=postgres` (`backend.rs`; `scripts/test.sh` runs
//! both): one module per subject, all built on the shared kit in `kit.rs` (the gateway, its
//! default policy and the life-cycle helpers) and the schema validators in `schemas.rs`. This
//! file only mounts them.

mod backend;
mod dashboard_kit;
mod kit;
mod schemas;

mod aaep;
mod abuse;
mod access;
mod agent_thresholds;
mod checkpoints;
mod config_attacks;
mod dashboard_edge;
mod dashboard_forgery;
mod dashboard_origin;
mod dashboard_sessions;
mod decide_guards;
mod decide_holes;
mod delegation;
mod diff_bounds;
mod durability;
mod duties;
mod edit_approval_needs;
mod grant_duties;
mod grant_lifetime;
mod grant_maker_seal;
mod grant_revocation;
mod guessing;
mod heavy_reads;
mod held_for_a_person;
mod insights;
mod learning;

mod lifecycle;
mod metrics;
mod nul;
mod openapi;
mod paged_lists;
mod passkeys;
mod pin_scope;
mod plan_seal;
mod plans;
mod policy_refs;
mod protocol;
mod query_words;
mod quorum;
mod quorum_timeout;
mod ready;
mod receipts;
mod redact_rendered;
mod reload;
mod reload_tightened;
mod reload_window;
mod replay_candidates;
mod restart_rules;
mod review_core;
mod scope_shapes;
mod sealed;
mod sec_backlog;
mod security;
mod session_risk;
mod settlement_edits;
mod sign_in;
mod slack;
mod sso;
mod sso_reload;
mod sso_votes;
mod suggestions;
mod tools;
mod tools_words;
mod verdict_holes;
mod webhook_steps;
mod webhooks;
mod withdrawn_consent;
mod withdrawn_consent_holes;
