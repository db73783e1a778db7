//! `POST /v1/policies/replay` (issue 16 §1, an operator's key): a candidate policy replayed
//! against the gateway's recorded history. The answer is `assent-core`'s replay
//! [`Report`](assent_core::replay::report::Report) as it serialises, with `unreadable` and
//! `truncated`.

use assent_core::replay::report::Report;
use serde::{Deserialize, Serialize};

/// One policy file of the candidate: its name and its YAML text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The file it replaces: a path as the gateway's config lists it, or its base name when
    /// that is unique; any other name adds a file.
    pub file: String,
    /// The YAML text (at most the body limit).
    pub text: String,
}

/// The candidate: the gateway's policy files as they are on disk now, with these replacing
/// the ones of the same name (or added), over the proposals recorded in `[since, until)`. At
/// most 256 files in `agents` and `governance` together (`400` past it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"governance": [{"file": "payments.yaml", "text": "policies: []\n"}], "since": "2026-11-01T00:00:00Z"}))]
pub struct ReplayRequest {
    /// Agent files of the candidate.
    #[serde(default)]
    pub agents: Vec<PolicyFile>,
    /// Governance files of the candidate.
    #[serde(default)]
    pub governance: Vec<PolicyFile>,
    /// Only proposals at or after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only proposals before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// The replay report (`assent replay --json`'s shape): `overall`, `by_tool`, `examples`,
/// `loosened`, `first`, `last`, `not_replayed`, plus what this answer adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplayResponse {
    /// The report, flattened into this object.
    #[serde(flatten)]
    pub report: Report,
    /// Audit records of a proposal kind that could not be read as one.
    pub unreadable: u64,
    /// Whether the history held more proposals than one replay reads (200,000, or 1 GiB of
    /// their stored text; the newest were left out; narrow with `since`/`until`).
    pub truncated: bool,
    /// Prompts the candidate removes (negative: adds).
    pub prompts_removed: i64,
}
