//! `assent check`: evaluates one tool call against the policy files offline, with no server
//! and no store, and prints the verdict with its reasons (text or one JSON object). The
//! verdict is `assent_core::evaluate`'s; the exit status encodes it (0 allow, 10 confirm,
//! 11 deny, 2 bad input).

use crate::render::reason_line;
use assent_core::{ToolCall, Verdict, VerdictKind, evaluate};
use assent_server::config::Config;
use serde_json::{Value, json};

/// Loads `config` (`strict`: unknown agent-file fields are errors), evaluates `tool` on
/// `server` with `args` (a strict JSON object) for `agent`, prints the verdict (`as_json`: one
/// JSON object with `verdict`, `reasons`, `risk_tier`, `irreversible`, `call_hash` and, for
/// confirm, the message, side effects, rollback and dry-run tool). Returns the exit status:
/// 0 allow, 10 confirm, 11 deny, 2 a bad config or bad arguments.
pub(crate) fn check(
    config: &std::path::Path,
    agent: &str,
    tool: &str,
    server: Option<String>,
    args: &str,
    as_json: bool,
    strict: bool,
) -> i32 {
    let cfg = match Config::load_with(config, strict) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("assent: {e}");
            return 2;
        }
    };
    for w in &cfg.warnings {
        eprintln!("assent: warning: {w}");
    }
    let arguments: Value = match assent_core::json::parse_value(args.as_bytes()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("assent: --args is not strict JSON: {e}");
            return 2;
        }
    };
    let call = match ToolCall::new(tool, server, arguments) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("assent: --args: {e}");
            return 2;
        }
    };
    let v = evaluate(&cfg.registry, agent, &call);
    if as_json {
        print_json(&v, &call);
    } else {
        print_text(&v);
    }
    match v.kind {
        VerdictKind::Allow => 0,
        VerdictKind::Confirm => 10,
        VerdictKind::Deny => 11,
    }
}

/// The verdict as one JSON object on one line.
fn print_json(v: &Verdict, call: &ToolCall) {
    let mut out = json!({"verdict": v.kind.as_str(), "reasons": v.terms.reasons, "risk_tier": v.terms.risk_tier.as_str(), "irreversible": v.terms.irreversible});
    if let Ok((_, h)) = call.canonical_and_hash() {
        out["call_hash"] = Value::String(h);
    }
    if v.kind == VerdictKind::Confirm {
        out["message"] = Value::String(v.terms.message.clone());
        out["side_effects"] = json!(v.terms.side_effects);
        out["rollback"] = json!(v.terms.rollback);
        out["dry_run_tool"] = json!(v.terms.dry_run_tool);
    }
    println!("{out}");
}

/// The verdict as text: the kind, each reason, the risk tier and, for confirm, what the
/// approver would be shown.
fn print_text(v: &Verdict) {
    println!("{}", v.kind.as_str());
    for r in &v.terms.reasons {
        println!("  - {}", reason_line(r));
    }
    println!(
        "  risk tier {} ({}){}",
        v.terms.risk_tier.as_str(),
        v.terms.risk_tier.risk_level(),
        if v.terms.irreversible {
            ", irreversible"
        } else {
            ""
        }
    );
    if v.kind == VerdictKind::Confirm {
        println!("  message: {}", v.terms.message);
        for e in &v.terms.side_effects {
            println!("  side effects: {e}");
        }
        for r in &v.terms.rollback {
            println!("  rollback: {r}");
        }
        if let Some(t) = &v.terms.dry_run_tool {
            println!("  dry run: {t}");
        }
    }
}
