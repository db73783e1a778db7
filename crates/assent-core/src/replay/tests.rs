//! Unit tests of the replay: each change, the loosened rule both ways, blocks kept, thresholds
//! counting the session as it happened, grants, synthetic calls and the example cap.

use super::report::{MAX_TOOLS, OTHER_TOOLS};
use super::*;
use serde_json::json;

const AGENT: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n    - alias: read\n    - alias: wipe\n";

fn registry(governance: &str) -> Registry {
    let gov = if governance.is_empty() {
        vec![]
    } else {
        vec![("gov.yaml".to_string(), governance.to_string())]
    };
    Registry::load(&[("bot.agf.yaml".into(), AGENT.into())], &gov).unwrap()
}

fn rec(seq: i64, session: &str, tool: &str, args: serde_json::Value, was: Was) -> Recorded {
    Recorded {
        seq,
        at_ms: 1_000_000 + seq * 1000,
        agent: "bot".into(),
        session_id: session.into(),
        call: ToolCall::new(tool, None, args).unwrap(),
        risk_tier: RiskTier::R2,
        reasons: vec![],
        was,
        redeemed_at_ms: None,
    }
}

fn held(status: ApprovalStatus, by: &str) -> Was {
    Was::Held {
        status,
        decided_by: Some(by.into()),
        decided_at_ms: Some(2_000_000),
        edited: false,
    }
}

/// Replays `history` keeping every call: the report and each call's new verdict.
fn every_call(reg: &Registry, history: &[Recorded]) -> (Report, Vec<VerdictKind>) {
    let opts = Options {
        keep_calls: true,
        ..Options::default()
    };
    let r = replay(reg, history, opts);
    let now = r.calls.iter().map(|c| c.now).collect();
    (r, now)
}

const PAY_NEEDS_APPROVAL: &str = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        approval: {condition: {args_match: {amount: {gt: 100}}}}\n";

#[test]
fn each_change_is_classified_and_prompts_counted() {
    let reg = registry(PAY_NEEDS_APPROVAL);
    let history = vec![
        // allowed then, held now (amount > 100)
        rec(1, "s", "pay", json!({"amount": 500}), Was::Allowed),
        // held then, allowed now
        rec(
            2,
            "s",
            "pay",
            json!({"amount": 5}),
            held(ApprovalStatus::Approved, "alice"),
        ),
        // held then, held now
        rec(
            3,
            "s",
            "pay",
            json!({"amount": 900}),
            held(ApprovalStatus::Approved, "alice"),
        ),
        // allowed then and now
        rec(4, "s", "read", json!({}), Was::Allowed),
    ];
    let r = replay(&reg, &history, Options::default());
    assert_eq!(r.overall.calls, 4);
    assert_eq!(r.overall.allow_to_confirm, 1);
    assert_eq!(r.overall.confirm_to_allow, 1);
    assert_eq!(r.overall.unchanged, 2);
    assert_eq!((r.overall.prompts_before, r.overall.prompts_after), (2, 2));
    assert_eq!(r.overall.loosened, 0);
    assert_eq!(r.by_tool["pay"].calls, 3);
    assert_eq!(r.by_tool["read"].unchanged, 1);
    // The example of allow→confirm names the rule that now holds the call.
    let ex = r
        .examples
        .iter()
        .find(|e| e.change == Change::AllowToConfirm)
        .unwrap();
    assert_eq!(ex.seq, 1);
    assert!(
        ex.added_reasons.iter().any(|x| x.file == "gov.yaml"),
        "{ex:?}"
    );
    assert_eq!(r.examples.len(), 2, "unchanged calls give no example");
}

#[test]
fn a_denied_or_person_rejected_call_now_allowed_is_loosened() {
    let reg = registry("");
    let history = vec![
        rec(
            1,
            "s",
            "pay",
            json!({"amount": 5}),
            Was::Denied { blocked: false },
        ),
        rec(
            2,
            "s",
            "pay",
            json!({"amount": 6}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
        // The expiry default is nobody's refusal.
        rec(
            3,
            "s",
            "pay",
            json!({"amount": 7}),
            held(ApprovalStatus::Rejected, "system:expiry"),
        ),
        // Approved then, allowed now: a prompt removed, not loosened.
        rec(
            4,
            "s",
            "pay",
            json!({"amount": 8}),
            held(ApprovalStatus::Approved, "alice"),
        ),
    ];
    let r = replay(&reg, &history, Options::default());
    assert_eq!(r.overall.loosened, 2);
    assert_eq!(r.overall.deny_to_allow, 1);
    assert_eq!(r.overall.confirm_to_allow, 3);
    let seqs: Vec<i64> = r.loosened.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(r.loosened[1].outcome, "rejected");
    assert_eq!(r.prompts_removed(), 3);
}

#[test]
fn a_deny_rule_makes_to_deny_and_nothing_is_loosened() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: wipe\n        deny: true\n";
    let reg = registry(gov);
    let history = vec![
        rec(1, "s", "wipe", json!({}), Was::Allowed),
        rec(
            2,
            "s",
            "wipe",
            json!({}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
    ];
    let r = replay(&reg, &history, Options::default());
    assert_eq!(r.overall.to_deny, 2, "allowed and held calls alike");
    assert_eq!(r.overall.unchanged, 0);
    assert_eq!(r.overall.loosened, 0);
    assert_eq!(r.by_tool["wipe"].to_deny, 2);
    assert_eq!(r.overall.prompts_after, 0);
    assert_eq!(r.overall.calls, 2);
}

#[test]
fn a_block_of_the_time_is_kept() {
    let reg = registry("");
    let mut blocked = rec(1, "s", "pay", json!({}), Was::Denied { blocked: true });
    blocked.reasons.push(Reason {
        file: String::new(),
        rule: BLOCK_RULE.into(),
        text: "plan p1 is not approved".into(),
    });
    let r = replay(&reg, &[blocked], Options::default());
    assert_eq!(r.overall.unchanged, 1);
    assert_eq!(r.overall.loosened, 0);
}

#[test]
fn thresholds_count_the_session_as_it_happened() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        thresholds: {rate: {max: 2, per_seconds: 3600}}\n";
    let reg = registry(gov);
    let history = vec![
        rec(1, "s", "pay", json!({}), Was::Allowed),
        // rejected: does not count toward the rate
        rec(
            2,
            "s",
            "pay",
            json!({}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
        rec(3, "s", "pay", json!({}), Was::Allowed),
        // a third counting call in the hour: held by the rate threshold
        rec(4, "s", "pay", json!({}), Was::Allowed),
        // another session starts from nothing
        rec(5, "t", "pay", json!({}), Was::Allowed),
    ];
    let (r, now) = every_call(&reg, &history);
    use VerdictKind::{Allow, Confirm};
    assert_eq!(now, [Allow, Allow, Allow, Confirm, Allow]);
    assert_eq!(r.overall.loosened, 1, "the rejected one would now run");
}

/// Found by review: each call copied every counting call of the session's longest window, so
/// a long session replayed in time quadratic in its calls. A session keeps only the newest
/// calls of each tool up to the largest rate's `max`; the verdicts stay those of the whole
/// window, for a rule covering several tools too, and a window that passed starts again.
#[test]
fn a_rate_over_many_calls_of_several_tools_is_judged_as_by_the_whole_window() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: \"*\"\n        thresholds: {rate: {max: 3, per_seconds: 3600}}\n      - tool: pay\n        thresholds: {rate: {max: 2, per_seconds: 60}}\n";
    let reg = registry(gov);
    let tool = |i: i64| if i % 3 == 0 { "pay" } else { "read" };
    let mut history: Vec<Recorded> = (1..=40)
        .map(|i| rec(i, "s", tool(i), json!({}), Was::Allowed))
        .collect();
    // Two hours later, the window has passed: three calls run again.
    history.extend((41..=45).map(|i| {
        let mut r = rec(i, "s", tool(i), json!({}), Was::Allowed);
        r.at_ms += 7_200_000;
        r
    }));
    let (_, now) = every_call(&reg, &history);
    use VerdictKind::{Allow, Confirm};
    let mut want = vec![Allow; 3];
    want.extend([Confirm; 37]);
    want.extend([Allow, Allow, Allow, Confirm, Confirm]);
    assert_eq!(now, want);
}

/// Found by review of the cap above: with an agent-wide threshold a call is held when the
/// agent's calls are too many to count, which a session of 4,100 calls of another tool still
/// shows in the replay.
#[test]
fn a_call_under_an_agent_wide_rate_is_held_past_the_calls_it_can_count() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        thresholds: {rate: {max: 5, per_seconds: 86400, per: agent}}\n";
    let reg = registry(gov);
    let mut history: Vec<Recorded> = (1..=4_100)
        .map(|i| rec(i, "s", "read", json!({}), Was::Allowed))
        .collect();
    history.push(rec(4_101, "s", "pay", json!({}), Was::Allowed));
    let (_, now) = every_call(&reg, &history);
    assert_eq!(now.last(), Some(&VerdictKind::Confirm));
}

#[test]
fn a_granted_call_held_again_is_no_prompt_unless_a_trigger_fired() {
    let reg = registry(PAY_NEEDS_APPROVAL);
    let history = vec![rec(1, "s", "pay", json!({"amount": 500}), Was::Granted)];
    let r = replay(&reg, &history, Options::default());
    assert_eq!((r.overall.prompts_before, r.overall.prompts_after), (0, 0));
    assert_eq!(r.overall.unchanged, 1);
}

#[test]
fn synthetic_calls_are_not_replayed_and_examples_are_capped() {
    let reg = registry(PAY_NEEDS_APPROVAL);
    let mut history = vec![rec(1, "s", "mplp.plan", json!({}), Was::Allowed)];
    history.extend((2..20).map(|i| rec(i, "s", "pay", json!({"amount": 500}), Was::Allowed)));
    let r = replay(&reg, &history, Options::default());
    assert_eq!(r.not_replayed, 1);
    assert_eq!(r.overall.calls, 18);
    assert_eq!(r.overall.allow_to_confirm, 18);
    assert_eq!(r.examples.len(), 3);
    assert_eq!(r.first, Some(1_002_000));
    assert_eq!(r.last, Some(1_019_000));
}

#[test]
fn examples_mask_the_candidates_redact_paths() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        approval: true\n        redact: [card]\n";
    let reg = registry(gov);
    let history = vec![rec(
        1,
        "s",
        "pay",
        json!({"card": "4111-1111", "amount": 1}),
        Was::Allowed,
    )];
    let r = replay(&reg, &history, Options::default());
    assert_eq!(r.examples[0].arguments["card"], json!("[redacted]"));
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains("4111-1111"), "{text}");
}

#[test]
fn cost_totals_and_rate_windows_follow_the_whole_session() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        thresholds: {cost: {argument: amount, max_per_session: 100}, rate: {max: 3, per_seconds: 10}}\n";
    let reg = registry(gov);
    // One call a second (see `rec`), 30 each: a rejected call adds nothing, so the session
    // total passes 100 at the fifth call (120), which is also the fourth counting call in 10 s.
    let mut history = vec![
        rec(1, "s", "pay", json!({"amount": 30}), Was::Allowed),
        rec(
            2,
            "s",
            "pay",
            json!({"amount": 30}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
        rec(3, "s", "pay", json!({"amount": 30}), Was::Allowed),
        rec(4, "s", "pay", json!({"amount": 30}), Was::Allowed),
        rec(5, "s", "pay", json!({"amount": 30}), Was::Allowed),
    ];
    // Far later, past the rate window, the cost total still counts.
    let mut late = rec(100, "s", "pay", json!({"amount": 1}), Was::Allowed);
    late.at_ms += 1_000_000;
    history.push(late);
    let (r, now) = every_call(&reg, &history);
    use VerdictKind::{Allow, Confirm};
    assert_eq!(now, [Allow, Allow, Allow, Allow, Confirm, Confirm]);
    let why = &r.calls[4].added_reasons;
    assert!(why.iter().any(|x| x.text.contains("amount")), "{why:?}");
}

#[test]
fn the_session_risk_of_the_candidate_is_replayed() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: read\n        untrusted_output: true\n      - tool: pay\n        egress: true\n";
    let reg = registry(gov);
    let history = vec![
        // A rejected read never ran: it marks nothing.
        rec(
            1,
            "s",
            "read",
            json!({}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
        rec(2, "s", "pay", json!({}), Was::Allowed),
        rec(3, "s", "read", json!({}), Was::Allowed),
        rec(4, "s", "pay", json!({}), Was::Allowed),
        // Another session is clean.
        rec(5, "t", "pay", json!({}), Was::Allowed),
    ];
    let (r, now) = every_call(&reg, &history);
    use VerdictKind::{Allow, Confirm};
    assert_eq!(now, [Allow, Allow, Allow, Confirm, Allow]);
    assert_eq!(r.calls[3].risk_tier_now, RiskTier::R3);
    assert!(
        r.calls[3]
            .added_reasons
            .iter()
            .any(|x| x.text.contains("untrusted")),
        "{:?}",
        r.calls[3].added_reasons
    );
    assert_eq!(r.overall.allow_to_confirm, 1);
}

#[test]
fn an_approval_an_operator_edited_first_is_loosened_when_the_original_would_now_run() {
    let reg = registry("");
    let mut edited = rec(
        1,
        "s",
        "pay",
        json!({"amount": 5000}),
        held(ApprovalStatus::Approved, "alice"),
    );
    if let Was::Held { edited: e, .. } = &mut edited.was {
        *e = true;
    }
    let plain = rec(
        2,
        "s",
        "pay",
        json!({"amount": 5}),
        held(ApprovalStatus::Approved, "alice"),
    );
    let r = replay(&reg, &[edited, plain], Options::default());
    assert_eq!(r.overall.loosened, 1);
    assert_eq!(r.loosened[0].seq, 1);
}

#[test]
fn a_grant_never_stands_in_again_for_a_call_the_candidate_makes_irreversible() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        irreversible: true\n";
    let reg = registry(gov);
    let r = replay(
        &reg,
        &[rec(1, "s", "pay", json!({}), Was::Granted)],
        Options::default(),
    );
    assert_eq!((r.overall.prompts_before, r.overall.prompts_after), (0, 1));
}

#[test]
fn an_mcp_tool_named_like_a_synthetic_call_is_replayed() {
    // Attack: an MCP server names its tool `delegate.send` so that the CI gate skips its calls.
    let agent = "metadata: {id: bot}\naction_space:\n  mcp_servers:\n    - alias: mail\n";
    let reg = Registry::load(&[("a".into(), agent.into())], &[]).unwrap();
    let mut r = rec(1, "s", "x", json!({}), Was::Denied { blocked: false });
    r.call = ToolCall::new("delegate.send", Some("mail".into()), json!({})).unwrap();
    let local = rec(2, "s", "delegate.helper", json!({}), Was::Allowed);
    let report = replay(&reg, &[r, local], Options::default());
    assert_eq!((report.overall.calls, report.not_replayed), (1, 1));
    assert_eq!(report.overall.loosened, 1, "the denied MCP call now runs");
}

/// Attack on the CI gate (found by review): the replay marked an approved call's effects at
/// its proposal, the live gateway only when its token is redeemed. An untrusted `read` held,
/// approved and redeemed only after a `pay` (egress) a person rejected: under a candidate that
/// drops the approval of `pay`, the live gateway lets that `pay` run (nothing marked yet) —
/// the replay held it at R3 and reported no loosening. A held call marks its session when
/// its token was redeemed, and one never redeemed marks nothing.
#[test]
fn an_approved_call_marks_its_session_when_redeemed_as_the_live_gateway_does() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: read\n        untrusted_output: true\n      - tool: pay\n        egress: true\n";
    let reg = registry(gov);
    let mut read = rec(
        1,
        "s",
        "read",
        json!({}),
        held(ApprovalStatus::Approved, "alice"),
    );
    read.redeemed_at_ms = Some(read.at_ms + 5_500);
    let history = vec![
        read,
        rec(
            2,
            "s",
            "pay",
            json!({}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
        rec(
            7,
            "s",
            "pay",
            json!({}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
        // Approved, never redeemed: it never ran.
        rec(
            8,
            "t",
            "read",
            json!({}),
            held(ApprovalStatus::Approved, "alice"),
        ),
        rec(
            9,
            "t",
            "pay",
            json!({}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
    ];
    let (r, now) = every_call(&reg, &history);
    use VerdictKind::{Allow, Confirm};
    assert_eq!(now, [Allow, Allow, Confirm, Allow, Allow]);
    assert_eq!(r.overall.loosened, 2, "{:?}", r.overall);
}

/// Review finding: `by_tool` had an entry for every tool name in the history, and an agent can
/// call a new made-up name each time. Past [`MAX_TOOLS`] tools, the rest are counted together.
#[test]
fn made_up_tool_names_do_not_grow_the_report_without_bound() {
    let reg = registry("");
    let n = MAX_TOOLS as i64 + 5;
    let history: Vec<Recorded> = (0..n)
        .map(|i| rec(i, "s", &format!("made_up_{i}"), json!({}), Was::Allowed))
        .collect();
    let r = replay(&reg, &history, Options::default());
    assert_eq!(r.by_tool.len(), MAX_TOOLS + 1);
    assert_eq!(r.by_tool[OTHER_TOOLS].calls, 5);
    assert_eq!(r.overall.calls, n as u64);
}

/// A whole-tool grant standing for `bot`'s `pay` (no expiry), and one for another agent.
fn pay_grants() -> Vec<StandingGrant> {
    let grant = |agent: &str| StandingGrant {
        agent: agent.into(),
        session_id: None,
        tool: "pay".into(),
        server: None,
        call_hash: None,
        expires_at: None,
        created_at: 0,
    };
    vec![grant("other"), grant("bot")]
}

/// Found by review: replay took a confirm as a prompt even where a grant standing now covers
/// it, so a candidate turning a `deny` into a confirm passed the CI gate while the live gateway
/// would let the denied calls run under an old whole-tool grant, nobody asked. Such a call is
/// loosened; so is one a person rejected while the grant stood (its terms then kept the grant
/// from it), and a session grant covers any session (the agent names its own). Without the
/// grant, with only another agent's, with one made after the rejection (the grant's doing,
/// shown, not counted), lapsed, or under a rule no grant may stand in for (irreversible), no.
#[test]
fn a_refused_call_a_standing_grant_would_cover_under_the_candidate_is_loosened() {
    let history = vec![
        rec(
            1,
            "s",
            "pay",
            json!({"amount": 500}),
            Was::Denied { blocked: false },
        ),
        rec(
            2,
            "s",
            "pay",
            json!({"amount": 7}),
            held(ApprovalStatus::Rejected, "alice"),
        ),
    ];
    let asks = registry(
        "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        approval: true\n",
    );
    let run = |reg: &Registry, grants: Vec<StandingGrant>| {
        let mut r = Replayer::new(reg, Options::default()).with_standing_grants(grants, 5_000_000);
        for h in &history {
            r.push(h);
        }
        r.finish()
    };
    let covered = run(&asks, pay_grants());
    assert_eq!(covered.overall.loosened, 2, "{:?}", covered.overall);
    assert_eq!(covered.overall.prompts_after, 0);
    let e = &covered.loosened[0];
    assert_eq!(
        (e.seq, e.covered_by_grant, e.now),
        (1, true, VerdictKind::Confirm)
    );
    // Made after the rejection: only the denied call is the candidate's doing.
    let mut later = pay_grants();
    later[1].created_at = 1_500_000;
    let r = run(&asks, later);
    assert_eq!((r.overall.loosened, r.overall.prompts_after), (1, 0));
    // A session grant of another session, made before, still covers both.
    let mut session = pay_grants();
    session[1].session_id = Some("another".into());
    session[1].expires_at = Some(9_000_000);
    assert_eq!(run(&asks, session).overall.loosened, 2);
    let bare = run(&asks, vec![]);
    assert_eq!((bare.overall.loosened, bare.overall.prompts_after), (0, 2));
    let others = run(&asks, pay_grants()[..1].to_vec());
    assert_eq!(
        (others.overall.loosened, others.overall.prompts_after),
        (0, 2)
    );
    // A grant that lapsed before the replay runs covers nothing.
    let mut lapsed = pay_grants();
    lapsed[1].expires_at = Some(4_000_000);
    assert_eq!(run(&asks, lapsed).overall.loosened, 0);
    let irreversible = registry(
        "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        approval: true\n        irreversible: true\n",
    );
    assert_eq!(run(&irreversible, pay_grants()).overall.loosened, 0);
}
