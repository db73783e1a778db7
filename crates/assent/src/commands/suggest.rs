//! `assent suggest` (issue 16 §2): rules mined from the settled approvals of the recorded
//! history ([`assent_core::suggest`]) — argument patterns people always approved as a narrower
//! approval condition, patterns always rejected as a deny policy — each printed with its
//! evidence, its replay and the YAML to write. Nothing is applied.

use crate::args::Cmd;
use crate::history;
use crate::render::say;
use anyhow::{Result, bail};
use assent_core::Registry;
use assent_core::replay::Recorded;
use assent_core::suggest::{Kind, Mined, Settings, suggest_with};
use serde_json::json;

/// Proposals `assent suggest` holds in memory at the most (narrow with `--since`).
const MAX_HISTORY: usize = 1_000_000;

/// Runs `assent suggest`: exit 0 (also with no suggestion), 2 for a bad config or range, or an
/// error (1) when the history cannot be read or is larger than [`MAX_HISTORY`].
pub(crate) fn run(cmd: Cmd) -> Result<i32> {
    let Cmd::Suggest {
        config,
        history: h,
        min_decisions,
        json,
    } = cmd
    else {
        unreachable!("dispatch sends only suggest here")
    };
    let cfg = match history::load_config(&config, false) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if let Err(e) = history::range(&h) {
        eprintln!("assent: {e}");
        return Ok(2);
    }
    // The files as read now (bounded as a load reads them), and the registry made from
    // exactly these texts.
    let files = match cfg.policy_files() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("assent: {e}");
            return Ok(2);
        }
    };
    let reg = match Registry::load(&files.agents, &files.governance) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("assent: {e}");
            return Ok(2);
        }
    };
    let mut all: Vec<Recorded> = Vec::new();
    let mut too_many = false;
    let db = history::database(&h, &cfg)?;
    eprintln!("assent: mining the history of {}", history::describe(&db));
    history::read(&h, &db, &mut |page| {
        too_many |= all.len() + page.len() > MAX_HISTORY;
        if !too_many {
            all.extend(page);
        }
    })?;
    if too_many {
        bail!("the history holds more than {MAX_HISTORY} proposals: narrow it with --since");
    }
    // Only arguments a tool really takes are mined: those its trusted input schema declares
    // (the gateway's hub's pins) or a rule for the tool itself names.
    let schemas = assent_store::tool_schemas::trusted_offline(&db, &all)?;
    let mined = suggest_with(
        &reg,
        &files,
        &all,
        Settings::with_min(min_decisions),
        &schemas,
    );
    if json {
        let (found, unmined) = (&mined.suggestions, &mined.unmined);
        say!(
            "{}",
            json!({"proposals": all.len(), "suggestions": found, "unmined": unmined})
        );
    } else {
        print_text(&mined, all.len());
    }
    Ok(0)
}

/// Each suggestion: what, the evidence, the replay, the YAML; then each tool not mined, and
/// why.
fn print_text(mined: &Mined, proposals: usize) {
    let found = &mined.suggestions;
    say!(
        "{} suggestions from {proposals} recorded proposals (nothing is applied):",
        found.len()
    );
    for (i, s) in found.iter().enumerate() {
        let tool = match &s.server {
            Some(a) => format!("{a}/{}", s.tool),
            None => s.tool.clone(),
        };
        let e = &s.evidence;
        let side = if s.kind == Kind::Deny {
            ("rejections", "approvals")
        } else {
            ("approvals", "rejections")
        };
        say!("{}. {tool}: {}", i + 1, s.description);
        say!(
            "   evidence: {} {} by {} (agents {}) from {} to {}; {} {} of the tool, none covered",
            e.decisions,
            side.0,
            e.deciders.join(", "),
            e.agents.join(", "),
            assent_core::stamp::rfc3339(e.first),
            assent_core::stamp::rfc3339(e.last),
            e.other_side,
            side.1
        );
        let r = &s.replay;
        say!(
            "   replay: prompts {} → {}; confirm→allow {}, →deny {}, loosened {}",
            r.prompts_before,
            r.prompts_after,
            r.confirm_to_allow,
            r.to_deny,
            r.loosened
        );
        for ed in &s.edits {
            say!("   in {} ({}):", ed.file, ed.location);
            for line in ed.yaml.lines() {
                say!("     {line}");
            }
        }
    }
    for u in &mined.unmined {
        let tool = match &u.server {
            Some(a) => format!("{a}/{}", u.tool),
            None => u.tool.clone(),
        };
        say!(
            "not mined: {tool} ({} decisions): {}",
            u.decisions,
            crate::render::inert(&u.reason)
        );
    }
}
