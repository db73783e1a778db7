//! The `slack:` configuration and `principals[].slack_user_id` as `assent.yaml` gives them:
//! the user map built from the principals, and the files refused with the line and reason
//! (a Slack id on a non-operator or on two operators, a bot token without a channel, a plain
//! http `api_url` off loopback, an unknown key), and an unset signing secret stopping start-up.

use crate::kit::{AGENTS, policy};
use assent_server::config::Config;
use std::path::PathBuf;

/// `assent.yaml` with `rest` after the agent and governance files, in a fresh directory.
fn write(rest: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bot.agf.yaml"), AGENTS).unwrap();
    let gov = policy("acme.test.slack", "- tool: pay\n  approvers: [finance]\n");
    std::fs::write(dir.path().join("gov.yaml"), gov).unwrap();
    let file = dir.path().join("assent.yaml");
    let text = format!("agents: [bot.agf.yaml]\ngovernance: [gov.yaml]\n{rest}");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

const KEY: &str =
    "key_sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"";

fn alice(extra: &str) -> String {
    format!("  - {{name: alice, kind: operator, roles: [finance], {KEY}{extra}}}\n")
}

#[test]
fn slack_users_map_to_operators_and_the_endpoint_is_configured() {
    let rest = format!(
        "principals:\n{}slack:\n  signing_secret_env: ASSENT_TEST_SLACK_UNSET_SECRET\n  bot_token_env: ASSENT_TEST_SLACK_UNSET_TOKEN\n  channel: C0APPROVE\n  api_url: http://127.0.0.1:9/api/\n",
        alice(", slack_user_id: U0ALICE")
    );
    let (_dir, file) = write(&rest);
    let cfg = Config::load(&file).unwrap();
    let s = cfg.slack.clone().unwrap();
    assert_eq!(s.users.get("U0ALICE").map(String::as_str), Some("alice"));
    assert_eq!(s.api_url, "http://127.0.0.1:9/api");
    assert_eq!(s.channel.as_deref(), Some("C0APPROVE"));
    assert_eq!(
        s.team_id, None,
        "no team_id: any workspace (start-up warns)"
    );
    // The secret is read at start-up only: unset, it stops start-up naming the variable.
    let e = cfg.slack().unwrap_err().to_string();
    assert!(e.contains("ASSENT_TEST_SLACK_UNSET_SECRET"), "{e}");
    // Without `slack:` there is no integration (the endpoint answers 404).
    let (_dir, file) = write(&format!("principals:\n{}", alice("")));
    assert!(Config::load(&file).unwrap().slack.is_none());
}

#[test]
fn slack_configurations_that_could_let_the_wrong_person_decide_are_refused() {
    let agent =
        format!("  - {{name: bot, kind: agent, agent_id: bot, slack_user_id: U0BOT, {KEY}}}\n");
    let twice = format!(
        "{}  - {{name: fred, kind: operator, roles: [finance], slack_user_id: U0ALICE, key_sha256: \"{}\"}}\n",
        alice(", slack_user_id: U0ALICE"),
        "1".repeat(64)
    );
    let slack = "slack:\n  signing_secret_env: S\n";
    for (principals, extra, says) in [
        (
            agent.clone(),
            slack.to_string(),
            "only an operator has a slack_user_id",
        ),
        (twice, slack.to_string(), "is also `alice`'s"),
        (
            alice(", slack_user_id: alice"),
            slack.to_string(),
            "is not a Slack user id",
        ),
        (
            alice(""),
            format!("{slack}  bot_token_env: T\n"),
            "needs a channel",
        ),
        (
            alice(""),
            format!("{slack}  channel: C1\n"),
            "channel needs bot_token_env",
        ),
        (
            alice(""),
            format!("{slack}  api_url: http://slack.example.com/api\n"),
            "must be an https URL",
        ),
        // Found by review: a password without a user name passed; a refused URL with
        // credentials is not repeated in the error.
        (
            alice(""),
            format!("{slack}  api_url: https://:hunter2secret@slack.example.com/api\n"),
            "api_url (not shown: it holds credentials) must be an https URL",
        ),
        (
            alice(""),
            format!("{slack}  signing_secret: inline\n"),
            "unknown field",
        ),
        (
            alice(""),
            format!("{slack}  team_id: acme\n"),
            "is not a Slack workspace id",
        ),
    ] {
        let (_dir, file) = write(&format!("principals:\n{principals}{extra}"));
        let e = Config::load(&file).unwrap_err().to_string();
        assert!(e.contains(says) && !e.contains("hunter2"), "{says}: {e}");
        assert!(e.contains("assent.yaml:"), "names the file and line: {e}");
    }
}
