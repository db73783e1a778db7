//! A bare AAEP stream's subscription whose gateway was killed (`kill -9`) during the grace
//! that follows its stream's end: the close waiting in that process is gone, so the restarted
//! gateway's sweep closes it (found by review: it stayed open until retention, counted against
//! the operator's 16 open subscriptions).

use crate::{OP_KEY, serve, served};
use serde_json::Value;
use std::io::BufRead;
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether subscription `sub` is closed in the SQLite database of `data`, and how many
/// `aaep.closed` records name it (read with `sqlite3`).
fn closed(data: &std::path::Path, sub: &str) -> (bool, i64) {
    let q = format!(
        "SELECT (SELECT count(*) FROM aaep_subscriptions WHERE id = '{sub}' AND closed_at IS NOT NULL), \
         (SELECT count(*) FROM audit WHERE kind = 'aaep.closed' AND data LIKE '%{sub}%');"
    );
    let out = Command::new("sqlite3")
        .arg(data.join("assent.db"))
        .arg(q)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.trim().split('|');
    let n = |p: Option<&str>| p.and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
    (n(parts.next()) == 1, n(parts.next()))
}

/// A bare AAEP stream opened on the gateway at `url` by the operator: its lines (the stream
/// ends when they are dropped) and the id of the subscription it announced.
pub(crate) fn bare_stream(
    url: &str,
) -> (
    std::io::Lines<std::io::BufReader<reqwest::blocking::Response>>,
    String,
) {
    let resp = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap()
        .get(format!("{url}/aaep/v1/events"))
        .bearer_auth(OP_KEY)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut lines = std::io::BufReader::new(resp).lines();
    let sub = loop {
        let line = lines.next().expect("the announcement").unwrap();
        if let Some(d) = line.strip_prefix("data:") {
            let v: Value = serde_json::from_str(d.trim()).unwrap();
            break v["subscription_id"].as_str().unwrap().to_string();
        }
    };
    (lines, sub)
}

#[test]
fn a_bare_subscription_whose_gateway_was_killed_in_its_grace_is_closed_after_restart() {
    let gw = served(""); // its directory stays until the test ends
    let (mut s, cfg, data, port) = (gw.server, gw.cfg, gw.data, gw.port);
    let (lines, sub) = bare_stream(&s.url);
    drop(lines); // the stream ends: its 30 s grace starts
    std::thread::sleep(Duration::from_secs(1));
    s.kill9(); // SIGKILL in the grace: its close never runs
    assert!(!closed(&data, &sub).0, "closed before its grace was over");
    let s = serve(&cfg, port);
    let start = Instant::now();
    loop {
        let (shut, audited) = closed(&data, &sub);
        if shut {
            assert_eq!(audited, 1, "the close is audited once");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{sub} was never closed after the restart"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(s);
}
