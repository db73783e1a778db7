//! The window of a reload (issue 14 §8) between a decision's authentication and its commit:
//! a decision that authenticated with a key the reload then removes or rotates is checked
//! again, inside its write transaction, against the principals in force then; one that
//! committed before the reload's second pass has its token voided by that pass. And the window
//! of an escalation step: an AAEP reply settles what is due before it is decided, as every
//! other door does. Either backend.

use crate::grant_revocation::{reloaded, reloading_gateway_with};
use crate::kit::{AGENTS, BOT, Gw, OP, policy, token_of};
use crate::reload::principals;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The principals these tests reload: alice (finance), olaf (ops) and the agent bot.
const ALICE: (&str, &str, &str) = ("alice", "kind: operator, roles: [finance]", OP);
const OLAF: (&str, &str, &str) = ("olaf", "kind: operator, roles: [ops]", "olaf-key");
const AGENT: (&str, &str, &str) = ("bot", "kind: agent, agent_id: bot", BOT);

/// `read` is held for a person.
fn gov() -> String {
    policy(
        "acme.test.reload-window",
        "- tool: read\n  approval: true\n",
    )
}

/// A gateway on `dir` reloading `conf/assent.yaml` (principals `list`) that holds up to 1,000
/// calls of one agent at once.
async fn reloading(dir: &std::path::Path, list: &str) -> Gw {
    reloading_gateway_with(dir, &gov(), list, |st| {
        st.settings.max_pending_per_agent = 1_000;
    })
    .await
}

/// How many decisions the store holds (read behind the gateway, either backend).
fn decisions(gw: &Gw) -> i64 {
    gw.sql().int("SELECT count(*) FROM decisions", &[])
}

/// Attack (found by review): alice's key is stolen; the thief approves every held call, each
/// with an edit (which the gateway re-gates, reading the store, between authenticating the
/// request and deciding), and the operators rotate alice's key by a reload meanwhile. A
/// request that authenticated with the old key before the reload's swap committed its decision
/// as alice's (roles and binding read at authentication) after the reload had withdrawn what
/// that key stood behind: its token stayed redeemable. Each decision is now checked again in
/// its write transaction against the principals in force then (refused `403`, audited
/// `decision.refused`), and one that committed before the reload's second pass has its token
/// voided by that pass: no token alice's old key approved redeems.
#[tokio::test]
async fn decisions_in_flight_with_a_key_a_reload_rotates_leave_no_token_to_redeem() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, olaf, bot) = (ALICE, OLAF, AGENT);
    let mut gw = reloading(dir.path(), &principals(&[alice, olaf, bot])).await;
    let (ids, flying) = approving_all_with_edits(&gw).await;
    let rotated = ("alice", "kind: operator, roles: [finance]", "alice-new-key");
    let b = reloaded(&gw, dir.path(), &principals(&[rotated, olaf, bot])).await;
    assert_eq!(b["changed"], json!(["alice"]), "{b}");
    let (mut approved, mut refused, mut unknown) = (Vec::new(), 0, 0);
    for (i, (id, f)) in ids.iter().zip(flying).enumerate() {
        let (s, b) = f.await.unwrap();
        match s {
            StatusCode::OK => approved.push((i, id)),
            StatusCode::FORBIDDEN => refused += 1,
            StatusCode::UNAUTHORIZED => unknown += 1,
            // The old key, unknown since the swap, failed as many times as requests were
            // still to be read: past the address's allowance of failed authentications the
            // rest are throttled before being authenticated (seen under load). Nothing decided.
            StatusCode::TOO_MANY_REQUESTS if b["code"] == "AUTH_THROTTLED" => unknown += 1,
            s => panic!("{s} {b}"),
        }
    }
    // The old key's failures may have locked this address out, right keys too (that is the
    // throttle's rule): the tokens are checked from another loopback address.
    gw.http = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    for (i, id) in &approved {
        voided(&gw, id, *i, "alice's rotated key").await;
    }
    let after = "SELECT count(*) FROM audit WHERE kind = 'token.voided' AND seq > (SELECT seq FROM audit WHERE kind = 'config.reloaded')";
    let second = gw.sql().int(after, &[]);
    eprintln!(
        "approved {}, refused {refused}, unauthenticated {unknown}, voided by the second pass {second}",
        approved.len()
    );
    // Whether any decision crossed the swap depends on the machine's timing (70-128 of 200
    // here): the rule that must hold whatever the timing — no token of the old key redeems —
    // is checked above for every approval; a run in which none crossed says so, not fails.
    if refused == 0 {
        eprintln!("no decision was in flight across the reload's swap this time (raise N)");
    }
    let sql = "SELECT count(*) FROM audit WHERE kind = 'decision.refused' AND actor = 'alice'";
    assert_eq!(gw.sql().int(sql, &[]), refused);
    gw.stop().await;
}

/// Attack (found by review): a stolen agent key is removed by a reload while its long-poll
/// waits on a held call; an operator then approves the call. The poll, authenticated before
/// the reload, answered with the approval's token — not redeemable through the gateway (its
/// redeem checks the key in force), but a signed token an executor verifying it offline
/// takes. Each look of the long-poll checks the key again: the poll is answered `401`, with
/// no token.
#[tokio::test]
async fn a_long_poll_opened_with_a_key_a_reload_removes_gets_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, olaf, bot) = (ALICE, OLAF, AGENT);
    let gw = reloading(dir.path(), &principals(&[alice, olaf, bot])).await;
    let id = gw.pending("read", json!({"path": "/etc/hosts"})).await;
    let poll = {
        let (http, url) = (
            gw.http.clone(),
            format!("{}/v1/approvals/{id}?wait=30", gw.url),
        );
        tokio::spawn(async move {
            let r = http.get(url).bearer_auth(BOT).send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap_or(Value::Null))
        })
    };
    // The poll waits (a state read, not a guess of time), then the reload removes the key.
    let start = Instant::now();
    while gw.state.waiters.waiting() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the poll never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b = reloaded(&gw, dir.path(), &principals(&[alice, olaf])).await;
    assert_eq!(b["removed"], json!(["bot"]), "{b}");
    let (s, d) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let (s, answer) = poll.await.unwrap();
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{answer}");
    assert!(answer.get("token").is_none(), "{answer}");
    gw.stop().await;
}

/// Attack (found by review of the fix above): the same stolen key, with a session grant
/// standing for its calls. A proposal authenticated before the reload removed the key, and
/// stored after it, was covered by the grant and answered with a token. The key is checked
/// again inside the proposal's store transaction, against the principals the reload swapped
/// in: no grant is used, and no token minted, for the key after `config.reloaded`.
#[tokio::test]
async fn proposals_in_flight_with_a_key_a_reload_removes_use_no_grant_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, olaf, bot) = (ALICE, OLAF, AGENT);
    let gw = reloading(dir.path(), &principals(&[alice, olaf, bot])).await;
    let first = gw.held("s1", "read", json!({"path": "/0"})).await;
    let body = json!({"decision": "approve", "scope": "session", "reason": "test"});
    let (s, d) = gw.decide_with(&first, OP, body).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let bodies = (0..N).map(|i| {
        json!({"agent": "bot", "session_id": "s1", "tool": "read",
               "arguments": {"path": "/0"}, "run_id": format!("r{i}")})
    });
    let flying = sent_as_bot(&gw, "/v1/tool-calls", bodies);
    // Some were covered, the others are still on their way (a state read).
    until_recorded(&gw, "grant.used").await;
    let b = reloaded(&gw, dir.path(), &principals(&[alice, olaf])).await;
    assert_eq!(b["removed"], json!(["bot"]), "{b}");
    let mut answers = Vec::new();
    for f in flying {
        answers.push(f.await.unwrap());
    }
    let after = "SELECT count(*) FROM audit WHERE kind = 'grant.used' AND seq > (SELECT seq FROM audit WHERE kind = 'config.reloaded')";
    assert_eq!(
        gw.sql().int(after, &[]),
        0,
        "a grant used for a removed key"
    );
    let refused = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::UNAUTHORIZED)
        .count();
    for (s, b) in &answers {
        assert!(
            *s == StatusCode::OK || *s == StatusCode::UNAUTHORIZED || b["code"] == "AUTH_THROTTLED",
            "{s} {b}"
        );
    }
    eprintln!("{refused} of {N} proposals refused after the reload");
    gw.stop().await;
}

/// Asserts that the token of approval `id` (of [`approving_all_with_edits`]'s call `i`) does
/// not redeem: voided (`409 TOKEN_USED`); `who` approved it.
async fn voided(gw: &Gw, id: &str, i: usize, who: &str) {
    let token = token_of(&gw.as_agent(id).await);
    let path = json!({"path": format!("/{i}")});
    let (s, b) = gw.redeem(&token, "read", path, None).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::CONFLICT, Some("TOKEN_USED")),
        "a token {who} approved redeemed: {b}"
    );
}

/// A decision request in flight: its status and body once answered.
type Flying = tokio::task::JoinHandle<(StatusCode, Value)>;

/// Holds [`N`] `read` calls of `bot` at `gw` and has alice approve each with an edit (which
/// the gateway re-gates, reading the store, between authenticating and deciding), all at
/// once; returns once some have decided and the others are under way (a state read, not a
/// guess of time): the approval ids and their requests in flight.
async fn approving_all_with_edits(gw: &Gw) -> (Vec<String>, Vec<Flying>) {
    let mut ids = Vec::new();
    for i in 0..N {
        ids.push(
            gw.held("s1", "read", json!({"path": format!("/{i}")}))
                .await,
        );
    }
    let mut flying = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let url = format!("{}/v1/approvals/{id}/decision", gw.url);
        let body = json!({"decision": "approve", "arguments": {"path": format!("/{i}")}});
        let r = gw.http.post(url).bearer_auth(OP).json(&body);
        flying.push(tokio::spawn(async move {
            let resp = r.send().await.unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        }));
    }
    let start = Instant::now();
    while decisions(gw) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nothing was decided"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (ids, flying)
}

/// How many calls are held and decided at once.
const N: usize = 200;

/// Attack on availability (found by review): an AAEP reply skipped the expiry and escalation
/// sweep every other door runs first, so until the 1-second timer ran a due escalation step,
/// the reply of an operator that step makes an approver (olaf, `ops`) was refused as not an
/// approver and dropped without a word (`204`, AAEP §6.3.4). The reply settles what is due
/// first: olaf's accept, sent as soon as the step is due, approves the call. An attempt the
/// timer beat (its `approval.escalated` record already written) is tried again.
#[tokio::test]
async fn an_aaep_reply_counts_as_soon_as_the_escalation_step_adding_its_sender_is_due() {
    let rules = "- tool: quick\n  approval: true\n  approvers: [finance]\n  timeout_seconds: 1\n  on_timeout: {escalate_to: [ops], after_seconds: 60}\n";
    let dir = tempfile::tempdir().unwrap();
    let settings = assent_server::Settings {
        approval_timeout_ms: Some(300_000),
        ..Default::default()
    };
    let gov = policy("acme.test.reply-escalation", rules);
    let gw = crate::kit::start_reg(dir.path(), 300_000, settings, AGENTS, &gov).await;
    let (sub, mut sse) = gw.subscribe("olaf-key", true, json!({})).await;
    for n in 0..5 {
        let id = gw.pending("quick", json!({"n": n})).await;
        let token = sse.reply_token("aaep:agent.awaiting.confirmation").await;
        let at = "SELECT requested_at FROM approvals WHERE id = ?1";
        let due = gw.sql().int(at, &[(&id).into()]) + 1_000;
        let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        while (now().unwrap().as_millis() as i64) < due + 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let escalated =
            "SELECT count(*) FROM audit WHERE kind = 'approval.escalated' AND approval_id = ?1";
        if gw.sql().int(escalated, &[(&id).into()]) > 0 {
            continue;
        }
        let reply = json!({"type": "confirmation.reply", "reply_token": token, "decision": "accept",
            "subscription_id": sub, "timestamp": assent_core::stamp::rfc3339(now().unwrap().as_millis() as i64),
            "decided_by": "user:olaf"});
        assert_eq!(
            gw.reply(Some("olaf-key"), reply).await,
            StatusCode::NO_CONTENT
        );
        let (s, b) = gw.approval(&id, OP).await;
        assert_eq!(
            (s, b["status"].as_str()),
            (StatusCode::OK, Some("approved")),
            "{b}"
        );
        gw.stop().await;
        return;
    }
    panic!("the timer ran every due step before the reply could be sent");
}

/// Attack (found by review): alice approves every held call of `bot`, each with an edit (which
/// the gateway re-gates between authenticating the request and deciding), while a reload makes
/// her `bot`'s owner under a rule with separation of duties. A decision checked against the
/// agents she owned at authentication and committed after the reload's second pass stood:
/// its token redeemed, an owner approving their own agent's call. The decider's duties are
/// now checked again inside the write: a decision crossing the reload is refused (`403`), one
/// committed before its second pass has its token voided. No token she approved redeems.
#[tokio::test]
async fn decisions_in_flight_when_a_reload_makes_the_decider_the_agents_owner_leave_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy(
        "acme.test.reload-duties",
        "- tool: read\n  approval: true\n  separation_of_duties: true\n",
    );
    let (alice, olaf, bot) = (ALICE, OLAF, AGENT);
    let gw = reloading_gateway_with(dir.path(), &gov, &principals(&[alice, olaf, bot]), |st| {
        st.settings.max_pending_per_agent = 1_000;
    })
    .await;
    let (ids, flying) = approving_all_with_edits(&gw).await;
    let owner = ("alice", "kind: operator, roles: [finance], owns: [bot]", OP);
    let b = reloaded(&gw, dir.path(), &principals(&[owner, olaf, bot])).await;
    assert_eq!(b["changed"], json!(["alice"]), "{b}");
    let (mut approved, mut refused) = (0, 0);
    for (i, (id, f)) in ids.iter().zip(flying).enumerate() {
        let (s, b) = f.await.unwrap();
        match s {
            StatusCode::OK => {
                approved += 1;
                voided(&gw, id, i, "alice, now the agent's owner,").await;
            }
            StatusCode::FORBIDDEN => refused += 1,
            s => panic!("{s} {b}"),
        }
    }
    eprintln!("approved {approved} (voided), refused {refused}");
    gw.stop().await;
}

/// Found by review: the store's executor commits what a reload queued on it (its
/// `config.reloaded` record, the withdrawals and revocations) whether or not the request that
/// asked is still there, but the rest of the reload ran in the request's handler, dropped when
/// its client hung up: the audit log said the configuration was reloaded, what the old one
/// stood behind was withdrawn, and the old keys stayed in force. A reload now runs apart from
/// its request. Here the store is held while alice reloads a file rotating bot's key, she
/// hangs up while the reload waits for it, the store is let go: the reload is recorded once
/// and the new key is in force, the old one refused.
#[tokio::test]
async fn a_reload_whose_client_hangs_up_still_puts_what_it_recorded_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, olaf) = (ALICE, OLAF);
    let gw = reloading(dir.path(), &principals(&[alice, olaf, ("bot", BOT_P, BOT)])).await;
    const NEW: &str = "bot-key-rotated-while-alice-hung-up";
    let rotated = principals(&[alice, olaf, ("bot", BOT_P, NEW)]);
    crate::grant_revocation::write_config(dir.path(), &rotated);
    let before = crate::kit::audit_count(&gw.data_dir, "config.reloaded");
    let blocker = crate::backend::block_writes(&gw.data_dir);
    let asked = gw
        .http
        .post(format!("{}/v1/reload", gw.url))
        .bearer_auth(OP)
        .timeout(Duration::from_secs(2))
        .send();
    let asked = tokio::spawn(asked);
    // Her reload is under way (then it waits for the store) when she hangs up: the handler
    // was dropped before or after the store was asked, which recorded nothing or everything.
    let deadline = Instant::now() + Duration::from_secs(10);
    let source = gw.state.reload.clone().unwrap();
    while !source.in_progress() {
        assert!(Instant::now() < deadline, "the reload never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        asked.await.unwrap().is_err(),
        "alice hung up before an answer"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(blocker);
    // Waits for the record to be committed, not for the new key: the reload puts its
    // principals in force inside its write, a moment before the commit (found as a flaky run
    // under load: the key answered, the record was not yet counted).
    let deadline = Instant::now() + Duration::from_secs(10);
    let reloaded = || crate::kit::audit_count(&gw.data_dir, "config.reloaded");
    while reloaded() == before {
        assert!(Instant::now() < deadline, "the reload was never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(gw.get("/v1/whoami", NEW).await.0, StatusCode::OK);
    assert_eq!(gw.get("/v1/whoami", BOT).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(reloaded(), before + 1);
    gw.stop().await;
}

/// The kit's `bot`, an agent, as a [`principals`] entry's kind.
const BOT_P: &str = "kind: agent, agent_id: bot";

/// Attack (found by review): a stolen agent key and the tokens of calls a person approved for
/// it. The operators remove the key by a reload, while the thief's redemptions, authenticated
/// with it before the reload, wait for the store's writer: they redeemed after
/// `config.reloaded`, and the calls ran. The presenter is looked up again inside the
/// redemption's store task, among the principals the reload swapped in: no token is redeemed
/// with the key after `config.reloaded`.
#[tokio::test]
async fn redemptions_in_flight_with_a_key_a_reload_removes_redeem_nothing_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, olaf, bot) = (ALICE, OLAF, AGENT);
    let gw = reloading(dir.path(), &principals(&[alice, olaf, bot])).await;
    let mut tokens = Vec::new();
    for i in 0..N {
        let id = gw
            .held("s1", "read", json!({"path": format!("/{i}")}))
            .await;
        let (s, d) = gw.decide(&id, OP, "approve").await;
        assert_eq!(s, StatusCode::OK, "{d}");
        tokens.push(token_of(&gw.as_agent(&id).await));
    }
    let bodies = tokens.into_iter().enumerate().map(|(i, token)| {
        json!({"token": token, "tool": "read", "arguments": {"path": format!("/{i}")}})
    });
    let flying = sent_as_bot(&gw, "/v1/tokens/redeem", bodies);
    // Some were redeemed, the others are still on their way (a state read).
    until_recorded(&gw, "token.redeemed").await;
    let b = reloaded(&gw, dir.path(), &principals(&[alice, olaf])).await;
    assert_eq!(b["removed"], json!(["bot"]), "{b}");
    for f in flying {
        let (s, b) = f.await.unwrap();
        assert!(
            [StatusCode::OK, StatusCode::UNAUTHORIZED].contains(&s)
                || b["code"] == "AUTH_THROTTLED",
            "{s} {b}"
        );
    }
    let after = "SELECT count(*) FROM audit WHERE kind = 'token.redeemed' AND seq > (SELECT seq FROM audit WHERE kind = 'config.reloaded')";
    assert_eq!(
        gw.sql().int(after, &[]),
        0,
        "a token redeemed with a removed key"
    );
    gw.stop().await;
}

/// Sends each of `bodies` to `path` as the agent bot, each from its own task, all at once:
/// the requests in flight.
fn sent_as_bot(gw: &Gw, path: &str, bodies: impl Iterator<Item = Value>) -> Vec<Flying> {
    let url = format!("{}{path}", gw.url);
    bodies
        .map(|body| {
            let r = gw.http.post(&url).bearer_auth(BOT).json(&body);
            tokio::spawn(async move {
                let resp = r.send().await.unwrap();
                (resp.status(), resp.json::<Value>().await.unwrap())
            })
        })
        .collect()
}

/// Returns once the store holds an audit record of `kind` (read behind the gateway, either
/// backend); fails after 20 s.
async fn until_recorded(gw: &Gw, kind: &str) {
    let start = Instant::now();
    while crate::backend::audit_count(&gw.data_dir, kind) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no {kind} recorded"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
