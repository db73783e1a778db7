//! Live reload through the real binary (issue 14 §8): SIGHUP makes a running `assent serve`
//! re-read its config file (a removed agent key then gets 401), a file with errors keeps the
//! old set and `assent reload` prints the errors as `FILE:LINE: reason` (exit 1), an applied
//! `assent reload` prints whose keys were revoked, an agent's key cannot reload, and `assent
//! show` names the policy set a call was held under.

use crate::{BOT_KEY, FS_KEY, cli, get_as, get_op, held, ok, served, stop};
use std::process::Command;
use std::time::{Duration, Instant};

/// The status of `GET {url}/v1/whoami` with `key`.
fn whoami(url: &str, key: &str) -> u16 {
    get_as(url, "/v1/whoami", key).status().as_u16()
}

/// The config file's text with the principal `bot`'s line left out.
fn without_bot(cfg: &std::path::Path) -> String {
    std::fs::read_to_string(cfg)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("name: bot,"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn sighup_reloads_the_running_binary_and_a_removed_key_gets_401() {
    let sv = served("");
    let (cfg, server) = (sv.cfg, sv.server);
    let url = server.url.clone();
    assert_eq!(whoami(&url, BOT_KEY), 200);
    std::fs::write(&cfg, without_bot(&cfg)).unwrap();
    crate::sighup(&server.child);
    // The signal is handled on the server's own time: wait (bounded) for the key to go.
    let start = Instant::now();
    while whoami(&url, BOT_KEY) != 401 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "SIGHUP did not revoke the key"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(whoami(&url, FS_KEY), 200);
    stop(server);
}

#[test]
fn assent_reload_refuses_a_broken_file_with_file_and_line_then_applies_a_fixed_one() {
    let sv = served("");
    let (cfg, server) = (sv.cfg, sv.server);
    let url = server.url.clone();
    let good = without_bot(&cfg);
    // Line 2 of the file gets a key no configuration has.
    let broken = good.replacen('\n', "\nlisten_typo: 1\n", 1);
    std::fs::write(&cfg, &broken).unwrap();
    let out = cli(&url, &["reload"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:2:", cfg.display())) && err.contains("listen_typo"),
        "{err}"
    );
    assert_eq!(whoami(&url, BOT_KEY), 200, "the old set stays in force");
    let out = cli(&url, &["reload", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let refused: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(refused["code"], "CONFIG_INVALID", "{refused}");
    assert_eq!(refused["errors"][0]["line"], 2, "{refused}");
    std::fs::write(&cfg, &good).unwrap();
    let text = ok(&cli(&url, &["reload"]));
    assert!(text.contains("removed (keys revoked): bot"), "{text}");
    assert_eq!(whoami(&url, BOT_KEY), 401);
    let json = ok(&cli(&url, &["reload", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["removed"], serde_json::json!([]));
    stop(server);
}

#[test]
fn assent_reload_with_an_agent_key_is_refused() {
    let sv = served("");
    let server = sv.server;
    let out = Command::new(crate::BIN)
        .arg("reload")
        .env("ASSENT_URL", &server.url)
        .env("ASSENT_API_KEY", BOT_KEY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("FORBIDDEN"), "{err}");
    stop(server);
}

#[test]
fn assent_show_names_the_policy_set_a_call_was_held_under() {
    let sv = served("");
    let server = sv.server;
    let url = server.url.clone();
    let id = held(&url, 5000);
    let hash = get_op(&url, &format!("/v1/approvals/{id}"))["policy_set_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(hash.len(), 64);
    let card = ok(&cli(&url, &["show", &id]));
    assert!(
        card.contains(&format!(
            "policy set: sha256:{hash} (in force when it was held)"
        )),
        "{card}"
    );
    stop(server);
}
