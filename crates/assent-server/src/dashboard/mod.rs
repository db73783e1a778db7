//! The operator dashboard (issue 5; seed 002 "operator UX"): server-rendered pages under
//! `/ui`, no JavaScript build step (one small script for the live queue, count-downs and the
//! JSON editor's check).
//!
//! - Sign-in with an operator key (`POST /ui/login`) starts a session: a random 256-bit id in
//!   the session cookie (`HttpOnly`, `SameSite=Strict`; over https `__Host-assent_ui`,
//!   `Secure`, `Path=/`, else `assent_ui`, `Path=/ui`: `session::Jar`), valid 12 hours, stored by its SHA-256
//!   (every replica knows it; a restart keeps it). Every form carries the session's CSRF token, checked in
//!   constant time; a post without it is `403` and changes nothing. The sign-in form itself
//!   is protected by a double-submit cookie.
//! - Single sign-on (issue 14 §7, [`oidc`]): with `oidc` configured, the sign-in page offers
//!   "Sign in with SSO" (OpenID Connect, code + PKCE); the session is an operator named
//!   `oidc:…` carrying the roles the provider's groups claim mapped to.
//! - `/ui`: the queue of pending approvals (similar calls grouped, each decided on its own)
//!   and pending clarification questions, refreshed when the server signals a change over
//!   SSE (`/ui/events`), with count-downs to expiry and an `aria-live` announcement.
//! - `/ui/approvals/{id}`: the card — the exact canonical arguments, risk tier, the rules
//!   that triggered, predicted side effects and rollback notes (rule keys `side_effects`,
//!   `rollback`), the rendered message, and the decision options (once, session, a duration,
//!   workspace with its warning, an edit of the arguments checked before submit, deny with a
//!   reason).
//! - `/ui/passkeys`: the operator's passkeys, registered here (issue 14 §4); an approval that
//!   needs one is approved from its card with the passkey (`navigator.credentials.get()`).
//! - `/ui/history` (filters: agent, tool, status, decided by) and `/ui/audit` (whether the
//!   audit chain verifies, and its newest records).
//! - `/ui/insights` ([`insights`], issue 16 §4): prompts per day, approval rate and time to
//!   decision by tool, agent and operator, rubber stamps, as server-drawn SVG charts
//!   ([`charts`]) with tables of the same numbers.
//!
//! Decisions go through the same code as `POST /v1/approvals/{id}/decision`, so roles,
//! scopes and edits are checked exactly as there, and the decision is recorded under the
//! signed-in operator's name.
//!
//! Layout: [`page`] (headers, rendering: the kit), [`sessions`] (the session store), [`session`] (sign-in, CSRF),
//! [`views`] (queue, cards, SSE, history, audit), [`chain`] (the audit page's chain verification: beside the writer, one at a time), [`forms`] (decisions, edits, answers, card
//! links), [`dry_run`] (the dry-run button: approvers, the tool's pin, one at a time). Its routes are mounted by [`crate::router`](mod@crate::router).

pub mod chain;
pub mod charts;
pub mod dry_run;
pub mod forms;
pub mod insights;
pub mod oidc;
pub mod page;
pub mod passkeys;
pub mod session;
pub mod sessions;
pub(crate) mod streams;
pub mod suggested;
pub mod views;
