//! Agent Format 1.0 fields the schema does not define: found where they are, a warning with
//! the file and line, an error in strict mode.

use assent_core::agf::unknown_fields;
use assent_core::policy::Registry;
use serde_json::json;

const TYPO: &str = "schema_version: \"1.0.0\"\nmetadata: {id: typo_bot}\naction_space:\n  local_tools:\n    - alias: pay\n      aproval: true\n";

#[test]
fn fields_the_schema_does_not_define_are_found_where_they_are() {
    let doc = json!({
        "schema_version": "1.0.0",
        "metadata": {"id": "a", "labels": {"anything": "goes"}, "colour": "red"},
        "interface": {"input": {"type": "object"}},
        "action_space": {
            "local_tools": [{"alias": "pay", "aproval": true},
                            {"alias": "x", "approval": {"condition": {"args_match": {"amount": {"gt": 1}}}, "mesage_template": "?"}}],
            "mcp_servers": [{"alias": "fs", "allowed_tools": ["read", {"name": "write", "approvl": true}]}],
            "local_agents": [{"alias": "sub", "source": "s.agf.yaml", "aproval": true}],
            "remote_agents": [{"alias": "r", "allowed_skills": ["s", {"id": "t", "approval": true, "extra": 1}]}]
        },
        "execution_policy": {"id": "agf.react", "config": {"max_turns": 3}},
        "apiVersion": "agf/v1"
    });
    assert_eq!(
        unknown_fields(&doc),
        [
            "action_space.local_agents[0].aproval",
            "action_space.local_tools[0].aproval",
            "action_space.local_tools[1].approval.mesage_template",
            "action_space.mcp_servers[0].allowed_tools[1].approvl",
            "action_space.remote_agents[0].allowed_skills[1].extra",
            "apiVersion",
            "metadata.colour",
        ]
    );
}

#[test]
fn unknown_fields_warn_with_file_and_line_and_fail_in_strict_mode() {
    let files = [("typo.agf.yaml".to_string(), TYPO.to_string())];
    let reg = Registry::load(&files, &[]).unwrap();
    assert!(
        reg.warnings.iter().any(|w| w
            .starts_with("typo.agf.yaml:6: unknown field `action_space.local_tools[0].aproval`")),
        "{:?}",
        reg.warnings
    );
    // Ignored, as the format requires: the tool has no approval.
    assert!(reg.agents["typo_bot"].local_tools[0].approval.is_none());
    let err = Registry::load_with(&files, &[], true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("typo.agf.yaml:6") && err.contains("aproval"),
        "{err}"
    );
}

/// Attack (found by review): a list written with no value — `allowed_tools:` with every entry
/// commented out, or `allowed_skills: ~` — is YAML null, which serde read as the key left
/// out: "no restriction", so every tool of the server reached the agent. Refused with the
/// file and line.
#[test]
fn a_list_of_tools_or_skills_written_with_no_value_is_refused_not_read_as_everything() {
    let cases = [
        "metadata: {id: gh_bot}\naction_space:\n  mcp_servers:\n    - alias: gh\n      allowed_tools:\n      #  - list_repos\n",
        "metadata: {id: gh_bot}\naction_space:\n  mcp_servers:\n    - alias: gh\n      allowed_tools: ~\n",
        "metadata: {id: gh_bot}\naction_space:\n  remote_agents:\n    - alias: gh\n      allowed_skills: null\n",
    ];
    for text in cases {
        let files = [("gh.agf.yaml".to_string(), text.to_string())];
        let err = Registry::load(&files, &[]).unwrap_err().to_string();
        assert!(
            err.contains("gh.agf.yaml:5") && err.contains("no value (null)"),
            "{text}: {err}"
        );
    }
    // Written with entries, or left out, they load as before.
    let listed = "metadata: {id: gh_bot}\naction_space:\n  mcp_servers:\n    - alias: gh\n      allowed_tools: [list_repos]\n    - alias: all\n";
    let files = [("gh.agf.yaml".to_string(), listed.to_string())];
    let reg = Registry::load(&files, &[]).unwrap();
    let servers = &reg.agents["gh_bot"].mcp_servers;
    assert_eq!(servers[0].allowed_tools.as_ref().map(Vec::len), Some(1));
    assert!(servers[1].allowed_tools.is_none());
}
