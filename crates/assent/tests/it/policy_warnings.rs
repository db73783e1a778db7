//! Load warnings of governance files through the real binary (`assent check`): however many
//! rules a file has, the pair warnings (a quorum rule beside approving defaults, an approving
//! default beside another rule's thresholds) are one a rule and at most 1,000 in all.

/// Attack (found by review): 3,000 rules needing a quorum and 3,000 approving rules for the
/// same tool (a ~300 KB file, under the file size limit) made 9 M warnings of ~380 bytes,
/// copied into the configuration, the reload reply and the log: the gateway died on reload.
/// `assent check` ends with at most 1,000 warnings, and the pairs compared are bounded.
#[test]
fn thousands_of_quorum_and_approving_rules_give_at_most_a_thousand_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let mut gov =
        String::from("policies:\n  - id: a.many-v1\n    selector: {agents: [bot]}\n    rules:\n");
    for _ in 0..3_000 {
        gov.push_str("      - {tool: pay, approvers: {roles: [fin], count: 2}}\n");
        gov.push_str("      - {tool: pay, default_decision: approve}\n");
    }
    std::fs::write(dir.path().join("gov.yaml"), gov).unwrap();
    let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n";
    std::fs::write(dir.path().join("bot.agf.yaml"), agent).unwrap();
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(&cfg, "agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\n").unwrap();
    let out = crate::check_bot_pay(&cfg);
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("assent: warning: "))
        .collect();
    assert!(out.status.success(), "{err}");
    // 9 M pairs to compare: the check stops at its budget and says so first (found by
    // review: the comparisons alone held a reload for hours at a million rules).
    assert!(
        (600..=1_000).contains(&warnings.len()),
        "{}",
        &err[..err.len().min(2_000)]
    );
    assert!(
        warnings[0].contains("stopped after 2000000 comparisons"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1].contains("needs a quorum") && warnings[1].contains(" and 2997 more say"),
        "{}",
        warnings[1]
    );
    assert!(err.len() < 1_000_000, "{} bytes of warnings", err.len());
}
