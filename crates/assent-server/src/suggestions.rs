//! The top suggestions of a range (issue 16 §2, §4) for `GET /v1/insights` and the dashboard's
//! insights page: the gateway's policy files as they are on disk and the settled decisions
//! recorded in `[since, until)` handed to [`assent_core::suggest`] (each suggestion replayed
//! over the same history). At most [`MAX_HISTORY`] proposals, and [`MAX_HISTORY_BYTES`] of
//! their stored records, are read and [`MAX_REPLAYS`] candidates replayed, one request at a
//! time; none when the gateway was not started from a config file (there is no file to
//! change), and none over a range with more than that or a record that cannot be read (the
//! evidence would be partial; [`Top::withheld`] says so). Only arguments a tool
//! really takes are mined: those its trusted pinned input schema declares
//! ([`assent_store::tool_schemas::trusted`]) or
//! the policy names; the tools left unmined for want of one are listed with why.

use crate::error::ApiError;
use crate::policies::{policy_files, read_history};
use crate::state::AppState;
use crate::store_call::blocking;
use assent_core::Registry;
use assent_core::replay::Recorded;
use assent_core::suggest::{Mined, Settings, Suggestion, suggest_with};

/// Proposals read for suggestions at the most.
pub const MAX_HISTORY: usize = 50_000;

/// The stored record text (`audit.data`, the call's arguments its bulk) read for suggestions
/// at the most, in bytes (64 MiB): every proposal read is held until mining ends, so this
/// bounds the memory one request takes (this plus one page,
/// [`assent_store::history::PAGE_BYTES`], and the parsed copies). Found by review: only the
/// count was bounded, and 50,000 calls padded to `max_arguments_bytes` (256 KiB by default)
/// are about 12 GiB, which any agent with an auto-allowed tool could write in 30 days for the
/// next operator opening the insights page to read. A range past it gets no suggestion: one
/// mined from the part read could miss the rejections that refute it.
pub const MAX_HISTORY_BYTES: u64 = 64 << 20;

/// Candidate suggestions replayed per request at the most: each replays the whole history read
/// (B7: about 200,000 proposals/s), so one request costs at most about 12 × 50,000 / 200,000 =
/// 3 s of one blocking thread.
pub const MAX_REPLAYS: usize = 12;

/// One suggestion computation at a time in this process (operators asking at once queue).
static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Suggestions shown.
pub const TOP: usize = 3;

/// Tools listed as left unmined, at the most (those with the most decisions).
pub const MAX_UNMINED: usize = 20;

/// Settled decisions a pattern needs before it is suggested (`assent suggest`'s default).
pub const MIN_DECISIONS: u32 = 10;

/// The suggestions of a range, and whether they were withheld.
#[derive(Debug, Default)]
pub(crate) struct Top {
    /// The suggestions and the tools left unmined (empty when `withheld`).
    pub(crate) mined: Mined,
    /// The range held more than is read for suggestions ([`MAX_HISTORY`] proposals or
    /// [`MAX_HISTORY_BYTES`] of records) or a record that cannot be read, so no suggestion
    /// was mined from it (partial evidence: narrow the range).
    pub(crate) withheld: bool,
}

/// The first [`TOP`] suggestions for `[since, until)` (Unix ms), and the first
/// [`MAX_UNMINED`] tools left unmined with why; empty without a config file, when the policy
/// files do not load now (the running set is what is in force either way), or, marked
/// [`Top::withheld`], when the range has more than [`MAX_HISTORY`] proposals or
/// [`MAX_HISTORY_BYTES`] of them, or an unreadable one.
///
/// Errors: `503` when the store cannot be read.
pub(crate) async fn top(st: &AppState, since: i64, until: i64) -> Result<Top, ApiError> {
    let Some(source) = st.reload.clone() else {
        return Ok(Top::default());
    };
    // The permit goes with the work into the blocking pool, and back (found by review: held
    // only here, a client that hung up freed it while its reading and replays went on).
    let turn = ONE_AT_A_TIME
        .acquire()
        .await
        .map_err(ApiError::unavailable)?;
    let (file, strict) = (source.file.clone(), source.strict);
    let Ok((files, _)) = blocking(move || policy_files(&file, strict)).await? else {
        return Ok(Top::default());
    };
    let (history, schemas, unreadable, cut, turn) = st
        .store_call_apart(move |s| {
            let mut all: Vec<Recorded> = Vec::new();
            let (from, to) = (Some(since), Some(until));
            let (max, max_bytes) = (MAX_HISTORY, MAX_HISTORY_BYTES);
            let (unreadable, cut) =
                read_history(s, from, to, max, max_bytes, &mut |r| all.push(r.clone()))?;
            let schemas = s.trusted_schemas(&all)?;
            Ok((all, schemas, unreadable, cut, turn))
        })
        .await?;
    // Evidence read in part is no evidence: a suggestion, and the replay that vouches "no
    // refused call let through", would leave out the proposals after the cut or the records
    // that could not be read (found by review: both were dropped unseen, so an agent
    // flooding cheap allowed calls between the approvals and the later rejections had a
    // pattern suggested that the rejections refute). The answer says so.
    if cut || unreadable > 0 {
        tracing::warn!(
            since,
            until,
            unreadable,
            more_than = MAX_HISTORY,
            more_bytes_than = MAX_HISTORY_BYTES,
            "no suggestions: the range holds more proposals (or bytes of them) than are read for them, or records that cannot be read; narrow the range"
        );
        return Ok(Top {
            mined: Mined::default(),
            withheld: true,
        });
    }
    let mined = blocking(move || {
        let _turn = turn;
        let Ok(reg) = Registry::load(&files.agents, &files.governance) else {
            return Mined::default();
        };
        let settings = Settings {
            min_decisions: MIN_DECISIONS,
            max_replays: Some(MAX_REPLAYS),
        };
        let mut found = suggest_with(&reg, &files, &history, settings, &schemas);
        found.suggestions.truncate(TOP);
        found.unmined.truncate(MAX_UNMINED);
        found
    })
    .await?;
    Ok(Top {
        mined,
        withheld: false,
    })
}

/// `text` fit for one YAML comment line: characters that act on the display (controls,
/// bidirectional and invisible ones) as visible escapes ([`assent_core::template::visible`]),
/// and every control character and Unicode line or paragraph separator left (a line break an
/// agent put in a tool name or an argument) a space, so nothing it holds can start a line of
/// YAML.
fn comment(text: &str) -> String {
    assent_core::template::visible(text)
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Suggestion `n` (1-based) as a YAML document to download: comments saying what it is, its
/// evidence and replay, then each edit's file, place and YAML (serialised by `serde-saphyr`,
/// which quotes what must be quoted).
pub fn export(n: usize, s: &Suggestion) -> String {
    let e = &s.evidence;
    let r = &s.replay;
    let tool = comment(&match &s.server {
        Some(a) => format!("{a}/{}", s.tool),
        None => s.tool.clone(),
    });
    let mut out = format!(
        "# assent suggestion {n}: {tool}: {}\n# evidence: {} decisions by {} ({} to {}); {} on the other side, none covered\n# replay: prompts {} -> {}, loosened {}\n# nothing is applied until you write this into the file named below and reload\n",
        comment(&s.description),
        e.decisions,
        comment(&e.deciders.join(", ")),
        assent_core::stamp::rfc3339(e.first),
        assent_core::stamp::rfc3339(e.last),
        e.other_side,
        r.prompts_before,
        r.prompts_after,
        r.loosened
    );
    for ed in &s.edits {
        out.push_str(&format!(
            "---\n# in {} ({})\n{}",
            comment(&ed.file),
            comment(&ed.location),
            ed.yaml
        ));
        if !ed.yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// What names a suggestion in its export link: 32 hex digits of the SHA-256 of what the page
/// shows of it (the description, the pattern, each edit's file, place and YAML). The export
/// recomputes the suggestions and hands out only the one with the same fingerprint, so an
/// operator downloads exactly what they reviewed, never whatever has moved into its position
/// since (new decisions in the range, a policy reload).
pub(crate) fn fingerprint(s: &Suggestion) -> String {
    use sha2::{Digest, Sha256};
    let edits: Vec<(&str, &str, &str)> = s
        .edits
        .iter()
        .map(|e| (e.file.as_str(), e.location.as_str(), e.yaml.as_str()))
        .collect();
    let shown = serde_json::to_vec(&(&s.description, &s.pattern, edits)).unwrap_or_default();
    hex::encode(&Sha256::digest(&shown)[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use assent_core::suggest::edit::Edit;
    use assent_core::suggest::mine::Constraint;
    use assent_core::suggest::{Evidence, Kind};

    /// Attack: an agent names a tool (or an argument value the pattern quotes) with a line
    /// break and YAML after it, hoping the exported file carries a rule of its own.
    #[test]
    fn a_line_break_in_an_agents_text_cannot_start_a_yaml_line_of_the_export() {
        let evil = "pay\r\npolicies: [{id: evil}]\u{2028}x";
        let s = Suggestion {
            kind: Kind::RemovePrompt,
            tool: evil.into(),
            server: None,
            pattern: Constraint::Prefix {
                key: "to".into(),
                prefix: "a\nb-".into(),
            },
            description: format!("ask unless to starts with {:?}", "a\nb-"),
            evidence: Evidence {
                decisions: 10,
                other_side: 0,
                deciders: vec!["alice\nrules: []".into()],
                agents: vec!["bot".into()],
                first: 0,
                last: 0,
            },
            edits: vec![Edit {
                file: "gov.yaml\nx: 1".into(),
                location: "policy p rules[0]".into(),
                yaml: "approval: true\n".into(),
                text: String::new(),
            }],
            replay: Default::default(),
        };
        let out = export(1, &s);
        assert!(!out.contains('\u{2028}') && !out.contains('\r'), "{out:?}");
        for line in out.lines() {
            assert!(
                line.starts_with('#') || line == "---" || line == "approval: true",
                "{line:?} in {out}"
            );
        }
    }
}
