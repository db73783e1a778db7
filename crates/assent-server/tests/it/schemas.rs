//! JSON Schema validation of what assent emits, against the specs' own schemas: the product
//! spec folder `../shared/spec` when present (so a schema change there fails a test), else the
//! vendored copy in `spec/`; assent's own schemas in `docs/schemas/`.

use jsonschema::{Retrieve, Uri, Validator};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `../shared/spec` next to the repository when it exists, else `spec/`.
pub fn spec_root() -> PathBuf {
    let shared = repo().join("../shared/spec");
    if shared.join("mplp/schemas/v2").is_dir() {
        shared
    } else {
        repo().join("spec")
    }
}

/// Maps schema `$id` URIs to files.
struct Files;

fn local(uri: &str) -> Option<PathBuf> {
    let root = spec_root();
    if let Some(rest) = uri.strip_prefix("https://schemas.mplp.dev/v1.0/") {
        return Some(root.join("mplp/schemas/v2").join(rest));
    }
    if let Some(rest) = uri.strip_prefix("https://mplp.dev/schemas/v1.0/") {
        return Some(root.join("mplp/schemas/v2").join(rest));
    }
    if let Some(rest) = uri.strip_prefix("https://aaep-protocol.org/schemas/v1/") {
        return Some(root.join("aaep/schemas").join(rest));
    }
    if let Some(rest) = uri.strip_prefix("https://assent.dev/schemas/") {
        return Some(repo().join("docs/schemas").join(rest));
    }
    None
}

impl Retrieve for Files {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let s = uri.as_str();
        let path = local(s).ok_or_else(|| format!("no local copy of {s}"))?;
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    }
}

/// A validator for the schema file at `rel` (`mplp/schemas/v2/mplp-confirm.schema.json`,
/// `aaep/schemas/core/...` under the spec root; `docs/schemas/...` under the repository),
/// checking `format` too.
pub fn validator(rel: &str) -> Validator {
    let path = if rel.starts_with("docs/") {
        repo().join(rel)
    } else {
        spec_root().join(rel)
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .with_retriever(Files)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Panics with every error when `instance` does not validate.
pub fn assert_valid(v: &Validator, instance: &Value, what: &str) {
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not validate:\n{}\n{instance:#}",
        errors.join("\n")
    );
}

#[test]
fn vendored_schemas_match_the_spec_folder() {
    let shared = repo().join("../shared/spec");
    if !shared.is_dir() {
        return; // a clone without the product spec next to it: only the vendored copy exists
    }
    for dir in ["aaep/schemas", "mplp/schemas/v2"] {
        let mut stack = vec![shared.join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let rel = p.strip_prefix(&shared).unwrap();
                let ours = repo().join("spec").join(rel);
                assert_eq!(
                    std::fs::read(&p).unwrap(),
                    std::fs::read(&ours).unwrap_or_default(),
                    "spec/{} differs from ../shared/spec/{}; copy it again",
                    rel.display(),
                    rel.display()
                );
            }
        }
    }
    let rel = "agent-format/agentformat-schema.json";
    assert_eq!(
        std::fs::read(shared.join(rel)).unwrap(),
        std::fs::read(repo().join("spec").join(rel)).unwrap_or_default(),
        "spec/{rel} differs from ../shared/spec/{rel}; copy it again"
    );
}

#[test]
fn the_validators_reject_what_the_schemas_forbid() {
    let v = validator("docs/schemas/approval-token.schema.json");
    assert!(!v.is_valid(&serde_json::json!({"tokenId": "x"})));
    let c = validator("mplp/schemas/v2/mplp-confirm.schema.json");
    // The MPLP docs' own example uses protocolVersion and non-UUID ids: the schema refuses it.
    let doc_example = serde_json::json!({"meta": {"protocolVersion": "1.0.0"}, "confirm_id": "conf-8829-x1",
        "target_type": "plan", "target_id": "plan-550-abc", "status": "pending",
        "requested_by_role": "executor-agent", "requested_at": "2025-12-22T10:00:00Z"});
    assert!(!c.is_valid(&doc_example));
    let example: Value = serde_json::from_str(
        &std::fs::read_to_string(spec_root().join("mplp/schemas/v2/examples/confirm.minimal.json"))
            .unwrap(),
    )
    .unwrap();
    let mut example = example;
    example.as_object_mut().unwrap().remove("$comment");
    assert_valid(&c, &example, "confirm.minimal.json");
}
