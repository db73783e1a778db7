//! Text rendering shared by the commands and `assent watch`: the human card of one approval
//! (what `assent show` prints and the watcher's card pane shows), the time left before an
//! approval or clarification expires, a call's `server/tool` target, canonical JSON for
//! arguments, and an error on one line. It does no I/O and knows no endpoint.

use serde_json::Value;

/// An error with its causes (`{e:#}`) on one line: newlines become `; `.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', "; ")
}

/// Time left until `expires_at` (RFC 3339): `42s left`, `3m 07s left`, or `expiring now`;
/// the text itself when it is not a timestamp.
pub(crate) fn time_left(expires_at: &str) -> String {
    let Ok(t) =
        time::OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339)
    else {
        return expires_at.to_string();
    };
    let secs = (t - time::OffsetDateTime::now_utc()).whole_seconds();
    if secs <= 0 {
        "expiring now".into()
    } else if secs < 60 {
        format!("{secs}s left")
    } else {
        format!("{}m {:02}s left", secs / 60, secs % 60)
    }
}

/// `v` as canonical JSON (RFC 8785, the text `call_hash` is taken over); plain JSON when it
/// cannot be canonicalised.
pub(crate) fn canonical(v: &Value) -> String {
    assent_core::canonical::canonical_value(v).unwrap_or_else(|_| v.to_string())
}

/// The target of a call or grant object with `server` and `tool`: `server/tool`, or `tool`
/// alone for a local tool (no `server`).
pub(crate) fn target(call: &Value) -> String {
    match call["server"].as_str() {
        Some(s) => format!("{s}/{}", call["tool"].as_str().unwrap_or("")),
        None => call["tool"].as_str().unwrap_or("").to_string(),
    }
}

/// The human card of one approval (an API approval object): exact call, risk and why, time
/// left, message, side effects and rollback, decisions, `call_hash`; one field a line.
pub(crate) fn card(a: &Value) -> String {
    let mut out = String::new();
    card_call(a, &mut out);
    card_effects(a, &mut out);
    card_why(a, &mut out);
    card_outcome(a, &mut out);
    out
}

/// Id and time left (or status), agent and session, the exact call, risk, message, triggers.
fn card_call(a: &Value, out: &mut String) {
    let call = &a["call"];
    let target = target(call);
    let status = a["status"].as_str().unwrap_or("");
    let when = if status == "pending" {
        time_left(a["expires_at"].as_str().unwrap_or(""))
    } else {
        status.to_string()
    };
    out.push_str(&format!("{}  [{when}]\n", a["id"].as_str().unwrap_or("")));
    out.push_str(&format!(
        "  agent:     {} (session {})\n",
        a["agent"].as_str().unwrap_or(""),
        a["session_id"].as_str().unwrap_or("")
    ));
    out.push_str(&format!("  call:      {target}\n"));
    out.push_str(&format!("  arguments: {}\n", canonical(&call["arguments"])));
    out.push_str(&format!(
        "  risk:      {} ({}){}\n",
        a["risk_tier"].as_str().unwrap_or(""),
        a["risk_level"].as_str().unwrap_or(""),
        if a["irreversible"] == true {
            ", irreversible"
        } else {
            ""
        }
    ));
    out.push_str(&format!(
        "  message:   {}\n",
        a["message"].as_str().unwrap_or("")
    ));
    if let Some(t) = a["triggers"].as_array().filter(|t| !t.is_empty()) {
        let t: Vec<&str> = t.iter().filter_map(Value::as_str).collect();
        out.push_str(&format!("  triggers:  {}\n", t.join(", ")));
    }
}

/// Side effects, rollback, the dry-run tool and suggested alternatives.
fn card_effects(a: &Value, out: &mut String) {
    let lines = |k: &str| -> Vec<String> {
        a[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l.as_str().map(str::to_string))
            .collect()
    };
    match lines("side_effects").as_slice() {
        [] => out.push_str("  side effects: not described by any rule\n"),
        l => out.push_str(&format!("  side effects: {}\n", l.join("; "))),
    }
    match lines("rollback").as_slice() {
        [] if a["irreversible"] == true => {
            out.push_str("  rollback:  none: the action is irreversible\n")
        }
        [] => out.push_str("  rollback:  not described by any rule\n"),
        l => out.push_str(&format!("  rollback:  {}\n", l.join("; "))),
    }
    if let Some(t) = a["dry_run_tool"].as_str() {
        out.push_str(&format!(
            "  dry run:   {t} (from the dashboard, through the MCP hub)\n"
        ));
    }
    for alt in a["suggested_alternatives"].as_array().into_iter().flatten() {
        out.push_str(&format!("  alternative: {}\n", alt.as_str().unwrap_or("")));
    }
}

/// Why the call is held (each reason's file, rule and text) and who may decide it.
fn card_why(a: &Value, out: &mut String) {
    out.push_str("  why:\n");
    for r in a["reasons"].as_array().into_iter().flatten() {
        let file = r["file"].as_str().unwrap_or("");
        let rule = r["rule"].as_str().unwrap_or("");
        let src = if file.is_empty() {
            rule.to_string()
        } else {
            format!("{file} {rule}")
        };
        out.push_str(&format!(
            "    - {src}: {}\n",
            r["text"].as_str().unwrap_or("")
        ));
    }
    if let Some(roles) = a["approvers"].as_array().filter(|r| !r.is_empty()) {
        let roles: Vec<&str> = roles.iter().filter_map(Value::as_str).collect();
        out.push_str(&format!("  approvers: {}\n", roles.join(", ")));
    }
}

/// The default decision on timeout, the decisions taken, `call_hash`, edited arguments and
/// the grant scope.
fn card_outcome(a: &Value, out: &mut String) {
    out.push_str(&format!(
        "  on timeout: {} (expires {})\n",
        a["default_decision"].as_str().unwrap_or(""),
        a["expires_at"].as_str().unwrap_or("")
    ));
    for d in a["decisions"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  decision:  {} by {} at {}{}\n",
            d["decision"].as_str().unwrap_or(""),
            d["by"].as_str().unwrap_or(""),
            d["at"].as_str().unwrap_or(""),
            d["reason"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "  call_hash: {}\n",
        a["call_hash"].as_str().unwrap_or("")
    ));
    if a["arguments_changed"] == true {
        out.push_str(&format!(
            "  approved arguments: {} (call_hash {})\n",
            canonical(&a["arguments"]),
            a["approved_call_hash"].as_str().unwrap_or("")
        ));
    }
    if let Some(s) = a["scope"].as_str() {
        out.push_str(&format!("  scope:     {s}\n"));
    }
}
