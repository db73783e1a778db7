//! Risk that follows the session (issue 16 §3) through the public API: the rule keys
//! `untrusted_output`, `private_data`, `egress`, `writes` load and compose, and a session's
//! state raises later calls — untrusted output then egress or writes is R3, private data and
//! egress in either order is R4 (lethal trifecta), a tool changed during the session is R4 —
//! only ever upwards, never past a deny, and never to where a grant could stand in.

use assent_core::policy::Registry;
use assent_core::session_risk::{Effects, Mark, SessionRisk, ToolChange};
use assent_core::triggers::{Observations, lexical_only};
use assent_core::{RiskTier, ToolCall, Verdict, VerdictKind, evaluate_in, grant};
use serde_json::json;

const AGENT: &str = "metadata: {id: bot}
action_space:
  local_tools:
    - alias: fetch
    - alias: read_inbox
    - alias: send_email
    - alias: write_file
    - alias: shred
    - alias: plain
    - alias: blocked
    - alias: nuke
    - alias: post
  mcp_servers:
    - alias: web
";

const GOV: &str = "policies:
  - id: t.effects-v1
    selector: {agents: [bot]}
    rules:
      - tool: fetch
        untrusted_output: true
      - tool: read_inbox
        private_data: true
      - tool: send_email
        egress: true
      - tool: write_file
        writes: true
      - tool: shred
        irreversible: true
      - tool: blocked
        egress: true
        deny: true
      - tool: nuke
        egress: true
        risk_tier: R4
      - tool: post
        egress: true
        approval: true
      - tool: browse
        server: web
        untrusted_output: true
      - tool: browse
        server: web
        risk_tier: R1
";

fn reg() -> Registry {
    Registry::load(
        &[("a.yaml".into(), AGENT.into())],
        &[("g.yaml".into(), GOV.into())],
    )
    .unwrap()
}

fn mark(tool: &str) -> Option<Mark> {
    Some(Mark {
        tool: tool.into(),
        server: None,
        at_ms: 1_700_000_000_000,
    })
}

/// The verdict on `tool` (on `server`) for `bot` in `session`.
fn eval(r: &Registry, tool: &str, server: Option<&str>, session: &SessionRisk) -> Verdict {
    let call = ToolCall::new(tool, server.map(String::from), json!({})).unwrap();
    let obs = Observations {
        now_ms: 1_700_000_100_000,
        prior_calls: &[],
        agent_calls: &[],
        session,
        resolve_path: &lexical_only,
    };
    evaluate_in(r, "bot", &call, None, &obs)
}

fn texts(v: &Verdict) -> String {
    let t: Vec<&str> = v.terms.reasons.iter().map(|r| r.text.as_str()).collect();
    t.join(" | ")
}

/// Asserts that `v` asks a person (`Confirm`) at risk tier `tier`.
#[track_caller]
fn assert_confirm_at(v: &Verdict, tier: RiskTier) {
    assert_eq!(
        (v.kind, v.terms.risk_tier),
        (VerdictKind::Confirm, tier),
        "{}",
        texts(v)
    );
}

/// A session that sent data out with `send_email`.
fn sent_out() -> SessionRisk {
    SessionRisk {
        egress: mark("send_email"),
        ..SessionRisk::default()
    }
}

fn untrusted() -> SessionRisk {
    SessionRisk {
        untrusted: mark("fetch"),
        ..SessionRisk::default()
    }
}

#[test]
fn effect_keys_load_compose_and_irreversible_counts_as_writes() {
    let r = reg();
    let e = |tool: &str, server: Option<&str>| r.effects_of("bot", tool, server);
    assert!(e("fetch", None).untrusted_output && !e("fetch", None).egress);
    assert!(e("read_inbox", None).private_data);
    assert!(e("send_email", None).egress);
    assert!(e("write_file", None).writes);
    assert!(e("shred", None).writes, "irreversible counts as writes");
    assert_eq!(e("plain", None), Effects::default());
    // Two rules cover web/browse; the effect of one is kept.
    assert!(e("browse", Some("web")).untrusted_output);
    assert_eq!(r.effects_of("ghost", "fetch", None), Effects::default());
    // A non-boolean is refused with the file and the line.
    let bad = GOV.replace("untrusted_output: true", "untrusted_output: yes please");
    let e = Registry::load(
        &[("a.yaml".into(), AGENT.into())],
        &[("g.yaml".into(), bad)],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("g.yaml:6"), "{e}");
    let typo = GOV.replace(
        "egress: true\n        approval",
        "egres: true\n        approval",
    );
    let e = Registry::load(
        &[("a.yaml".into(), AGENT.into())],
        &[("g.yaml".into(), typo)],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("egres"), "{e}");
}

#[test]
fn a_clean_session_changes_nothing() {
    let r = reg();
    for tool in ["fetch", "read_inbox", "send_email", "write_file", "plain"] {
        let v = eval(&r, tool, None, &SessionRisk::CLEAN);
        assert_eq!(v.kind, VerdictKind::Allow, "{tool}: {}", texts(&v));
        assert_eq!(v.terms.risk_tier, RiskTier::R2);
        assert!(v.terms.triggers.is_empty());
    }
}

#[test]
fn untrusted_output_then_egress_or_writes_is_held_at_r3_naming_the_cause() {
    let r = reg();
    let s = untrusted();
    let v = eval(&r, "send_email", None, &s);
    assert_confirm_at(&v, RiskTier::R3);
    assert_eq!(v.terms.triggers, ["session_untrusted"]);
    let t = texts(&v);
    assert!(
        t.contains("session read untrusted content from `fetch` at 2023-11-14T22:13:20.000Z")
            && t.contains("`send_email` sends data out"),
        "{t}"
    );
    let v = eval(&r, "write_file", None, &s);
    assert_confirm_at(&v, RiskTier::R3);
    assert!(
        texts(&v).contains("`write_file` changes state"),
        "{}",
        texts(&v)
    );
    let v = eval(&r, "shred", None, &s);
    assert_eq!(v.terms.triggers, ["session_untrusted"]);
    // Neither egress nor writes: untouched; a second read of untrusted content neither.
    for tool in ["plain", "fetch", "read_inbox"] {
        let v = eval(&r, tool, None, &s);
        assert_eq!(v.kind, VerdictKind::Allow, "{tool}: {}", texts(&v));
    }
}

#[test]
fn egress_before_untrusted_output_does_not_escalate_the_read() {
    let r = reg();
    let s = sent_out();
    let v = eval(&r, "fetch", None, &s);
    assert_eq!(v.kind, VerdictKind::Allow, "{}", texts(&v));
}

#[test]
fn private_data_then_egress_is_the_lethal_trifecta_at_r4() {
    let r = reg();
    let s = SessionRisk {
        private_data: mark("read_inbox"),
        ..SessionRisk::default()
    };
    let v = eval(&r, "send_email", None, &s);
    assert_confirm_at(&v, RiskTier::R4);
    assert_eq!(v.terms.triggers, ["lethal_trifecta"]);
    let t = texts(&v);
    assert!(
        t.contains("lethal trifecta") && t.contains("`read_inbox`"),
        "{t}"
    );
    // R4 brings its own defaults: a passkey and separation of duties.
    assert!(v.terms.require_passkey && v.terms.separation_of_duties);
    // With untrusted content too, both reasons are given and R4 wins.
    let s = SessionRisk {
        untrusted: mark("fetch"),
        ..s
    };
    let v = eval(&r, "send_email", None, &s);
    assert_eq!(v.terms.risk_tier, RiskTier::R4);
    assert_eq!(v.terms.triggers, ["session_untrusted", "lethal_trifecta"]);
}

#[test]
fn egress_then_private_data_is_the_lethal_trifecta_too() {
    let r = reg();
    let s = sent_out();
    let v = eval(&r, "read_inbox", None, &s);
    assert_confirm_at(&v, RiskTier::R4);
    let t = texts(&v);
    assert!(
        t.contains("lethal trifecta") && t.contains("already sent data out with `send_email`"),
        "{t}"
    );
}

#[test]
fn a_tool_changed_during_the_session_is_r4() {
    let r = reg();
    let change = |at_ms| ToolChange {
        server: "web".into(),
        tool: "browse".into(),
        at_ms,
        what: "a new definition was accepted".into(),
    };
    let s = SessionRisk {
        began_ms: Some(1_000),
        changed_tools: vec![change(2_000)],
        ..SessionRisk::default()
    };
    let v = eval(&r, "browse", Some("web"), &s);
    assert_confirm_at(&v, RiskTier::R4);
    assert_eq!(v.terms.triggers, ["tool_changed"]);
    assert!(
        texts(&v).contains("definition of `web/browse` changed"),
        "{}",
        texts(&v)
    );
    // Changed before the session began: the session saw only the new definition.
    let s = SessionRisk {
        changed_tools: vec![change(500)],
        ..s
    };
    assert_eq!(eval(&r, "browse", Some("web"), &s).kind, VerdictKind::Allow);
    // A session in which nothing ran yet has seen no definition at work.
    let s = SessionRisk {
        began_ms: None,
        changed_tools: vec![change(2_000)],
        ..SessionRisk::default()
    };
    assert_eq!(eval(&r, "browse", Some("web"), &s).kind, VerdictKind::Allow);
    // Another tool (or the same name on no server) is not the changed one.
    let s = SessionRisk {
        changed_tools: vec![change(2_000)],
        began_ms: Some(1_000),
        ..SessionRisk::default()
    };
    assert_eq!(eval(&r, "fetch", None, &s).kind, VerdictKind::Allow);
}

#[test]
fn escalation_never_turns_a_deny_into_anything_else_nor_lowers_a_tier() {
    let r = reg();
    let s = SessionRisk {
        untrusted: mark("fetch"),
        private_data: mark("read_inbox"),
        ..SessionRisk::default()
    };
    let v = eval(&r, "blocked", None, &s);
    assert_eq!(v.kind, VerdictKind::Deny);
    // Already R4 by its rule: R3 escalation keeps R4.
    let v = eval(&r, "nuke", None, &untrusted());
    assert_confirm_at(&v, RiskTier::R4);
}

/// A grant never stands in for the person an escalated call needs: the same call that a grant
/// may cover in a clean session may not be covered once untrusted content entered it.
#[test]
fn a_grant_never_covers_an_escalated_call() {
    let r = reg();
    let clean = eval(&r, "post", None, &SessionRisk::CLEAN);
    assert_eq!(clean.kind, VerdictKind::Confirm);
    assert!(grant::may_use_grant(&clean.terms, false));
    let v = eval(&r, "post", None, &untrusted());
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(
        !grant::may_use_grant(&v.terms, false),
        "{:?}",
        v.terms.triggers
    );
}
