//! `assent replay` (issue 16 §1): every recorded proposal re-evaluated under the candidate
//! policy of `--config`, in recorded order ([`assent_core::replay`]), and the report printed —
//! counts per tool and overall, prompts added or removed, examples with the rules responsible,
//! and every *loosened* call. Exit status 3 when a call that was denied, or rejected by a
//! person, would now run without anyone's consent, so a policy repository can gate changes.

use crate::args::Cmd;
use crate::history;
use crate::render::reason_line;
use crate::render::say;
use anyhow::{Context as _, Result};
use assent_core::replay::report::{Counts, Example, Report};
use assent_core::replay::{Change, Options, Replayer};

/// Exit status when a call would be loosened.
pub(crate) const LOOSENED: i32 = 3;

/// Runs `assent replay`: exit 0, [`LOOSENED`], 2 (a bad config or range), or an error (1)
/// when the history cannot be read.
pub(crate) fn run(cmd: Cmd) -> Result<i32> {
    let Cmd::Replay {
        config,
        history: h,
        all_calls,
        json,
        strict,
        allow_empty,
    } = cmd
    else {
        unreachable!("dispatch sends only replay here")
    };
    let cfg = match history::load_config(&config, strict) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if let Err(e) = history::range(&h) {
        eprintln!("assent: {e}");
        return Ok(2);
    }
    let opts = Options {
        keep_calls: all_calls,
        ..Options::default()
    };
    let db = history::database(&h, &cfg)?;
    let source = history::describe(&db);
    // The candidate would go in force now, beside the grants standing now.
    let now = assent_server::now_ms();
    let grants = assent_store::history::standing_grants_offline(&db, now)
        .with_context(|| format!("reading the grants standing in {source}"))?;
    let mut replayer = Replayer::new(&cfg.registry, opts).with_standing_grants(grants, now);
    eprintln!("assent: replaying the history of {source}");
    let unreadable = history::read(&h, &db, &mut |page| {
        for rec in &page {
            replayer.push(rec);
        }
    })?;
    let report = replayer.finish();
    if json {
        let mut out = serde_json::to_value(&report)?;
        out["unreadable"] = unreadable.into();
        out["prompts_removed"] = report.prompts_removed().into();
        say!("{out}");
    } else {
        print_text(&report);
    }
    Ok(if report.overall.loosened > 0 {
        LOOSENED
    } else if unreadable > 0 {
        // Fail closed: the gate cannot vouch for calls it could not read.
        eprintln!(
            "assent: {unreadable} audit records of proposals could not be read: they were not replayed"
        );
        1
    } else if report.overall.calls == 0 && !allow_empty {
        eprintln!(
            "assent: no recorded proposal was replayed from {source}: is it the right history? (--allow-empty to accept)"
        );
        1
    } else {
        0
    })
}

/// The report as text: the totals, one line per tool that changed, the examples, the loosened.
fn print_text(r: &Report) {
    let o = &r.overall;
    say!(
        "replayed {} proposals{}{}",
        o.calls,
        match (r.first, r.last) {
            (Some(f), Some(l)) => format!(
                " from {} to {}",
                assent_core::stamp::rfc3339(f),
                assent_core::stamp::rfc3339(l)
            ),
            _ => String::new(),
        },
        if r.not_replayed > 0 {
            format!(" ({} synthetic calls not replayed)", r.not_replayed)
        } else {
            String::new()
        }
    );
    say!(
        "prompts: {} → {} ({:+})",
        o.prompts_before,
        o.prompts_after,
        -r.prompts_removed()
    );
    say!("changes: {}", changes(o));
    let changed: Vec<_> = r
        .by_tool
        .iter()
        .filter(|(_, c)| c.unchanged < c.calls)
        .collect();
    if !changed.is_empty() {
        say!("by tool:");
        for (tool, c) in changed {
            say!(
                "  {tool}: {} calls; {}; prompts {} → {}",
                c.calls,
                changes(c),
                c.prompts_before,
                c.prompts_after
            );
        }
    }
    if !r.examples.is_empty() {
        say!("examples:");
        for e in &r.examples {
            print_example(e);
        }
    }
    if o.loosened > 0 {
        say!(
            "LOOSENED: {} calls that were denied or rejected by a person would now run without anyone's consent:",
            o.loosened
        );
        for e in &r.loosened {
            print_example(e);
        }
    }
}

/// The non-zero changes of `c`, e.g. `confirm→allow 3, →deny 1`, or `none`.
fn changes(c: &Counts) -> String {
    let all = [
        (Change::AllowToConfirm, c.allow_to_confirm),
        (Change::ConfirmToAllow, c.confirm_to_allow),
        (Change::ToDeny, c.to_deny),
        (Change::DenyToAllow, c.deny_to_allow),
        (Change::DenyToConfirm, c.deny_to_confirm),
    ];
    let parts: Vec<String> = all
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(ch, n)| format!("{} {n}", ch.arrow()))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// One example: where and when, the change, and the rules responsible.
fn print_example(e: &Example) {
    let tool = match &e.server {
        Some(s) => format!("{s}/{}", e.tool),
        None => e.tool.clone(),
    };
    say!(
        "  #{} {} {} session {} {tool} {}: {} ({}) → {}, {} → {}",
        e.seq,
        assent_core::stamp::rfc3339(e.at),
        e.agent,
        e.session_id,
        e.arguments,
        e.was.as_str(),
        e.outcome,
        e.now.as_str(),
        e.risk_tier_was.as_str(),
        e.risk_tier_now.as_str()
    );
    if e.covered_by_grant {
        say!("      a grant standing now covers it: no one would be asked");
    }
    for r in &e.added_reasons {
        say!("      + {}", reason_line(r));
    }
    for r in &e.removed_reasons {
        say!("      - {}", reason_line(r));
    }
}
