//! Redacted values never leave through rendered text (issue 5, a review's finding): a secret
//! under `redact` used to be masked in texts only where it appeared whole — but the message
//! template escapes a newline as `\u000a`, the human summary cuts a value to 120 characters and
//! a reason escapes bidi and C1 characters, so a PEM key, the first 118 characters of a long
//! token and a bidi-laced account went out in AAEP events, webhooks and Slack payloads. Here
//! a real gateway holds a call carrying all three and every exit is read back: no 16-character
//! piece of any of them may be in it.

use crate::kit::{OP, one_tool_agent, policy, start_custom};
use crate::webhooks::{Receiver, ops_and_chat, serve_receiver, with_links_and_hooks};
use assent_server::Settings;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A PEM-like private key: newlines and a tab inside.
const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n\tVJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----";

/// A 200-character token: no 16-character piece of it is in any other text of the test.
fn token() -> String {
    let mut t = String::from("tok_");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while t.len() < 200 {
        // xorshift: a fixed, varied sequence of letters and digits.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let c = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"[(x % 57) as usize];
        t.push(c as char);
    }
    t
}

/// An account name with a right-to-left override and a C1 control (NEL) in it.
const NOTE: &str = "acct-7Q2xH9\u{202e}Lm4Pz8Kd\u{85}Rt5Wv3Ky6Bn";

/// `deploy` is held when its key looks like a PEM key and its note like an account; every text
/// of the approval quotes the three redacted arguments (`{{tool_args}}` all of them at once).
fn gov() -> String {
    policy(
        "acme.test.redact-v1",
        r#"
- tool: deploy
  approvers: [finance]
  redact: [key, token, note]
  side_effects: "Signs with {{tool_args.key}} as {{tool_args.token}}."
  rollback: "Revoke {{tool_args.note}}; undo {{tool_args}}."
  approval:
    message_template: "Install {{tool_args.key}} for {{tool_args.token}} ({{tool_args.note}}) on {{tool_args.host}}: {{tool_args}}"
    condition: {args_match: {key: {pattern: "BEGIN"}, note: {pattern: "^acct-"}}}
"#,
    )
}

/// Every 16-character piece of `secret` found in `text`.
fn pieces_in(secret: &str, text: &str) -> Vec<String> {
    let chars: Vec<char> = secret.chars().collect();
    chars
        .windows(16)
        .map(|w| w.iter().collect::<String>())
        .filter(|p| text.contains(p.as_str()))
        .collect()
}

/// Every string in `v`, keys and values, decoded.
fn texts(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| texts(x, out)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push(k.clone());
            texts(x, out)
        }),
        _ => {}
    }
}

/// Panics naming `what` and the piece when any of the secrets is in `v` (decoded or as JSON).
fn assert_clean(what: &str, v: &Value, secrets: &[&str]) {
    let mut all = vec![v.to_string()];
    texts(v, &mut all);
    for s in secrets {
        for t in &all {
            let found = pieces_in(s, t);
            assert!(found.is_empty(), "{what} leaks {found:?} in {t:?}");
        }
    }
}

#[tokio::test]
async fn multiline_long_and_bidi_secrets_under_redact_never_leave_through_rendered_texts() {
    let token = token();
    let secrets = [PEM, token.as_str(), NOTE];
    let recv = Receiver::default();
    let port = serve_receiver(&recv, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start_custom(
        dir.path(),
        300_000,
        Settings::default(),
        &one_tool_agent("bot", "{alias: deploy}"),
        &gov(),
        |st| with_links_and_hooks(st, ops_and_chat(port, 20)),
    )
    .await;
    let (_sub, mut sse) = gw.listen().await;
    let args = json!({"key": PEM, "token": token, "note": NOTE, "host": "web-1"});
    let (s, b) = gw.propose("deploy", args.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();

    // AAEP: the confirmation names the call with the secrets masked, in every field.
    let awaiting = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    assert_clean("the AAEP confirmation", &awaiting, &secrets);
    let action = awaiting["action"].as_str().unwrap();
    assert!(
        action.starts_with("Install [redacted] for [redacted] ([redacted]) on web-1: "),
        "{action}"
    );
    assert!(
        awaiting["summary_detailed"]
            .as_str()
            .unwrap()
            .contains(r#"key = "[redacted]""#),
        "{awaiting}"
    );

    // The operator's answer keeps the real call (documented), but its rendered texts are
    // rendered from the masked arguments.
    let (s, a) = gw.approval(&id, OP).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["call"]["arguments"], args, "the stored call is unchanged");
    for k in ["message", "side_effects", "rollback"] {
        assert_clean(&format!("the API answer's {k}"), &a[k], &secrets);
    }
    assert_eq!(a["side_effects"][0], "Signs with [redacted] as [redacted].");
    // Nor does the hash of the real call, which a reader could test guesses against.
    let hash = a["call_hash"].as_str().unwrap().to_string();
    assert_eq!(hash.len(), 64, "{a}");
    assert_clean("the AAEP confirmation", &awaiting, &[hash.as_str()]);

    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    let resolved = sse.expect("aaep:agent.state.changed").await.data;
    assert_clean("the AAEP resolution", &resolved, &secrets);

    // Webhooks: the JSON body (message, summary, reasons, side effects, rollback) of the
    // request and of the resolution, and the Slack payload.
    for body in recv.bodies("/hook", 2).await {
        assert_clean("a webhook body", &body, &secrets);
        assert_clean("a webhook body", &body, &[hash.as_str()]);
        assert_eq!(body["approval"]["arguments"]["host"], "web-1");
        assert!(
            body["approval"]["human_summary"]
                .as_str()
                .unwrap()
                .contains(r#"token = "[redacted]""#),
            "{body}"
        );
    }
    for body in recv.bodies("/slack", 2).await {
        assert_clean("a Slack payload", &body, &secrets);
        assert_clean("a Slack payload", &body, &[hash.as_str()]);
    }

    // An export leaves the gateway too.
    let samples = gw.get_text("/v1/learning-samples", OP).await;
    assert!(samples.contains(&id), "{samples}");
    let samples: Value = samples
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::String(l.into())))
        .collect();
    assert_clean("the learning export", &samples, &secrets);
}

/// Attack (found by review): a held result (`result.TOOL`, its call's result past
/// `thresholds.output_bytes`) kept its call's `redact` paths, but they were applied at its own
/// top level, where they name nothing: its call's arguments sit under `call.arguments`. So an
/// agent or upstream whose results passed the threshold sent every redacted value to the
/// webhooks, Slack and AAEP subscribers in clear, and the AAEP event carried the hash of a
/// call holding it. The paths are read below `call.arguments` there. Found by review since:
/// the result's `preview` (its first 2,048 characters, which may echo the card number) went
/// out in clear beside the masked arguments; the redacted values are masked in it too.
#[tokio::test]
async fn a_held_results_call_keeps_its_redacted_arguments_masked() {
    let token = token();
    let recv = Receiver::default();
    let port = serve_receiver(&recv, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: deploy\n  redact: [card.number]\n  thresholds: {output_bytes: 100}\n";
    let gw = start_custom(
        dir.path(),
        300_000,
        Settings::default(),
        &one_tool_agent("bot", "{alias: deploy}"),
        &policy("acme.test.redact-result-v1", rules),
        |st| with_links_and_hooks(st, ops_and_chat(port, 20)),
    )
    .await;
    let (_sub, mut sse) = gw.listen().await;
    let args = json!({"card": {"number": token}, "host": "web-1"});
    let (s, b) = gw.propose("deploy", args.clone()).await;
    assert_eq!(s, StatusCode::OK, "allowed: {b}");
    let report = json!({"agent": "bot", "session_id": "s1", "tool": "deploy", "arguments": args,
                        "output_bytes": 5000, "result_sha256": "ab".repeat(32),
                        "preview": format!("charged card {token} on web-1")});
    let (s, b) = gw.post("/v1/tool-results", crate::kit::BOT, report).await;
    assert_eq!(s, StatusCode::ACCEPTED, "held: {b}");
    let awaiting = sse.expect("aaep:agent.awaiting.confirmation").await.data;
    assert_clean("the AAEP confirmation", &awaiting, &[token.as_str()]);
    assert!(awaiting["call_hash"].is_null(), "{awaiting}");
    for body in recv.bodies("/hook", 1).await {
        assert_clean("a webhook body", &body, &[token.as_str()]);
        let shown = &body["approval"]["arguments"]["call"]["arguments"];
        assert_eq!(shown["card"]["number"], "[redacted]", "{body}");
        let preview = &body["approval"]["arguments"]["preview"];
        assert_eq!(preview, "charged card [redacted] on web-1", "{body}");
    }
    for body in recv.bodies("/slack", 1).await {
        assert_clean("a Slack payload", &body, &[token.as_str()]);
    }
}
