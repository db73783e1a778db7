//! `assent tools …`: MCP tool-list pinning from the operator's side. `pending` lists tools
//! whose definition changed (or that are new) since their server was pinned, each with the
//! diff from its pinned definition; `accept`/`reject` review them one by one; `pins` lists
//! every pinned tool. Pinning itself happens in the MCP relay and the gateway.

use crate::args::{Remote, ToolsCmd};
use crate::remote::{connect, print_list};
use crate::render::{canonical, inert, one_line, shown};
use anyhow::{Result, bail};
use assent_api::Client;
use assent_api::tools::{ReviewStatus, ToolPin, ToolReview};
use serde::Deserialize;
use serde_json::Value;

/// Runs one `assent tools` subcommand; `accept`/`reject` exit 1 when any review failed.
pub(crate) async fn tools(r: &Remote, cmd: ToolsCmd) -> Result<i32> {
    let c = connect(r)?;
    match cmd {
        ToolsCmd::Pending { json } => {
            let list = c.tool_reviews(Some(ReviewStatus::Pending)).await?;
            let empty = Some("no tool changes waiting for review");
            print_list(&list, &list.reviews, json, empty, review_block)
        }
        ToolsCmd::Accept { ids } | ToolsCmd::Reject { ids } if ids.is_empty() => {
            bail!("give at least one review id (assent tools pending)")
        }
        ToolsCmd::Accept { ids } => review_each(&c, &ids, true).await,
        ToolsCmd::Reject { ids } => review_each(&c, &ids, false).await,
        ToolsCmd::Pins { json } => {
            let list = c.tool_pins().await?;
            print_list(&list, &list.pins, json, None, pin_line)
        }
    }
}

/// `assent tools pending`, one review: its id, server/tool, new or changed, when and by whom
/// it was seen, and the definition (new) or the diff against the pin (`-`/`+` lines); an
/// empty line after.
fn review_block(t: &ToolReview) -> String {
    let what = if t.pinned.is_none() {
        "new tool"
    } else {
        "changed"
    };
    // Every value is made inert on its own: a line break in an upstream's definition (a
    // property name holding `\n` becomes a diff path) must not start a line of the review;
    // and blank runs are marked (found by review: a description padded with thousands of
    // spaces pushed an instruction off screen, or a fake `+ /path:` line to a line start).
    let v = shown;
    let mut out = format!(
        "{}  {}/{} ({what}, seen {} by {})\n",
        v(&t.id),
        v(&t.server),
        v(&t.tool),
        v(&t.seen_at.to_string()),
        v(&t.seen_by)
    );
    if t.pinned.is_none() {
        out.push_str(&format!("  definition: {}\n", v(&canonical(&t.definition))));
    }
    diff_lines(t, &mut out);
    out.push('\n');
    out
}

/// One operation of an RFC 6902 JSON Patch (a review's `diff`): what it does, where, and the
/// new value (`add`, `replace`; `null` when absent).
#[derive(Deserialize)]
struct PatchOp {
    op: String,
    path: String,
    #[serde(default)]
    value: Value,
}

/// One review's JSON-Patch diff as `- path: old` / `+ path: new` lines, the old value looked
/// up by the operation's JSON Pointer (RFC 6901: `~1` is `/`, `~0` is `~`) in the pinned
/// definition as the operations before it left it (RFC 6902 applies them in order). Found by
/// review: it was looked up as a dotted path, literal key first, so a changed `file.path`
/// property showed the old value of the nested `file`/`path` one, and a change read as no
/// change; and later in the pinned definition as it was, so an array losing its last two items
/// (`remove /required/1` twice) showed the first of them twice and never the second.
fn diff_lines(t: &ToolReview, out: &mut String) {
    let ops: Vec<PatchOp> = t
        .diff
        .clone()
        .and_then(|d| serde_json::from_value(d).ok())
        .unwrap_or_default();
    // The same operations as the patch library applies them; none once one does not apply.
    let typed: Vec<json_patch::PatchOperation> = t
        .diff
        .clone()
        .and_then(|d| serde_json::from_value(d).ok())
        .unwrap_or_default();
    let mut doc = t.pinned.clone().unwrap_or(Value::Null);
    let mut applies = typed.len() == ops.len();
    for (i, PatchOp { op, path, value }) in ops.iter().enumerate() {
        let old = doc.pointer(path).map(canonical).unwrap_or_default();
        applies = applies && json_patch::patch(&mut doc, &typed[i..=i]).is_ok();
        if !applies {
            doc = Value::Null;
        }
        let (path, old, new) = (shown(path), shown(&old), shown(&canonical(value)));
        match op.as_str() {
            "remove" => out.push_str(&format!("  - {path}: {old}\n")),
            "add" => out.push_str(&format!("  + {path}: {new}\n")),
            _ => {
                out.push_str(&format!("  - {path}: {old}\n"));
                out.push_str(&format!("  + {path}: {new}\n"));
            }
        }
    }
}

/// `assent tools pins`, one pin: server/tool, the first 12 characters of its fingerprint,
/// when and by whom it was pinned.
fn pin_line(p: &ToolPin) -> String {
    let fp: String = p.fingerprint.chars().take(12).collect();
    format!(
        "{}/{}  {}  pinned {} by {}\n",
        p.server, p.tool, fp, p.pinned_at, p.pinned_by
    )
}

/// Accepts (`accept`) or rejects each review id, printing `ID server/tool STATUS` or the
/// error; exit 1 when any failed.
async fn review_each(c: &Client, ids: &[String], accept: bool) -> Result<i32> {
    let mut failed = 0;
    for id in ids {
        match c.decide_review(id, accept).await {
            Ok(t) => println!(
                "{}",
                inert(&format!(
                    "{id} {}/{} {}",
                    t.server,
                    t.tool,
                    t.status.as_str()
                ))
            ),
            Err(e) => {
                failed += 1;
                eprintln!("assent: {id}: {}", one_line(&e.into()));
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}
