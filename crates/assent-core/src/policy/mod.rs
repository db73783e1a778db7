//! Policy: Agent Format agent files (seed 004) and assent governance policies, parsed from
//! YAML text and validated into a [`Registry`] the gatekeeper reads.
//!
//! Agent files follow Agent Format 1.0 (`metadata`, `action_space.local_tools[]`,
//! `action_space.mcp_servers[]`, `constraints.governance_policies[]`); unknown fields are
//! ignored, as the format's forward-compatibility rule requires. Governance files are assent's
//! own format (`docs/policy.md`) and reject unknown keys, so a typo never silently weakens a rule.
//!
//! Layout: `model` (the validated types), `agent_file` and `governance` (each format's serde
//! shapes and validation), `registry` (loading in steps and the queries), `index` (the rules by
//! tool name, built at load, that the registry answers covering rules from), `delegations`
//! (which agents' plans gate which agents' calls, resolved at load), `error` (load
//! errors, at the bottom). This module only mounts them and re-exports their public items; it decides
//! nothing (the gatekeeper does).

mod agent_file;
mod coverage;
mod delegations;
mod error;
mod governance;
mod index;
mod model;
mod pairs;
mod registry;

pub use crate::risk::RiskTier;
pub use crate::triggers::{Escalation, ScopeSpec, Thresholds};
pub use delegations::{Delegations, NO_DELEGATIONS, plan_gates, plan_reaches_held};
pub use error::{LoadError, LoadErrors, yaml_reason};
pub use governance::MAX_WAIT_SECONDS;
pub use model::{
    Agent, AllowedTool, ApprovalSpec, Delegate, DelegateSource, LocalTool, McpServer,
    ORCHESTRATORS_ANNOTATION, Policy, PolicyRef, Rule, Selector, SkillRef,
};
pub use registry::Registry;
pub(crate) use registry::applies;
