//! `assent export learning-samples`: every settled approval as an MPLP learning sample, one
//! JSON object per line, read straight from the database (read-only; the gateway may keep
//! running): SQLite in a data directory, or the PostgreSQL database of `--config FILE`. The
//! samples and their pages are `assent_store::learning`'s; this file only writes them out,
//! page by page as each is read (found by review: the whole history was read into one list
//! and one text before a line was written), each line made inert for a terminal, into a file
//! that appears whole or not at all.

use crate::args::{DataPlace, ExportCmd};
use crate::render::inert;
use anyhow::{Context, Result};
use assent_api::audit::LEARNING_SAMPLES_DEFAULT_LIMIT;
use assent_store::learning::OfflinePages;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Runs one `assent export` command; its exit status.
pub(crate) fn run(cmd: ExportCmd) -> Result<i32> {
    match cmd {
        // The PostgreSQL client blocks on its own runtime: the caller runs this off the
        // command runtime's threads.
        ExportCmd::LearningSamples { place, out } => learning_samples(&place, out),
    }
}

/// Writes the JSONL of the database `place` names (`--config FILE`: its SQLite `data_dir` or
/// its PostgreSQL `database`; else SQLite in `--data-dir` or the default data directory) to
/// `out`, saying on stderr how many were written, or to standard output; exit status 0.
/// Pages of [`LEARNING_SAMPLES_DEFAULT_LIMIT`] samples (and about 8 MiB) are read one at a
/// time, each written before the next is read. Each line is [`inert`]: JSON escapes C0
/// controls but may carry C1 controls (the one-byte CSI U+009B), DEL and bidi overrides
/// (U+202E) raw, which an agent's arguments can hold; they are written as `\uXXXX`, so the
/// line is still JSON of the same value (found by review: the export wrote agent text raw to
/// the operator's terminal).
///
/// `out` is whole or absent: the lines go to a new file beside it (`.NAME.XXXXXX.partial`,
/// mode 0600; removed on any error, left only by a run killed midway), renamed over `out`
/// once the last page is written and synced (found by review: a failed run left a
/// partial file where a script expected the whole history). Standard output gets each page
/// as it is read.
///
/// Errors: no database, an unreachable or unreadable one (a damaged row), a write that fails
/// (`--out` in a directory that cannot be written), `--out` in the data or keys directory or
/// on the checkpoint file (`assent_store::ops::clear_of_state`: found by review, `--out
/// DATA/assent.db` renamed the export over the live database).
fn learning_samples(place: &DataPlace, out: Option<PathBuf>) -> Result<i32> {
    let r = crate::commands::audit::resolve(place)?;
    if let Some(out) = &out {
        let dirs = [r.data_dir.as_path(), &r.keys_dir];
        assent_store::ops::clear_of_state(out, &dirs, r.checkpoint_file.as_deref())?;
    }
    let pages = OfflinePages::open(&r.db, LEARNING_SAMPLES_DEFAULT_LIMIT)?;
    let Some(out) = out else {
        write_pages(pages, std::io::BufWriter::new(std::io::stdout().lock()))?;
        return Ok(0);
    };
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Named after `out`, so that one left by a run killed midway says what it is.
    // At most 200 bytes of it: with the prefix and suffix a name must stay within 255.
    let mut name = out.file_name().map_or("learning-samples".into(), |n| {
        n.to_string_lossy().into_owned()
    });
    while name.len() > 200 {
        name.pop();
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    let mut sink = std::io::BufWriter::new(tmp);
    let written = write_pages(pages, &mut sink)?;
    let tmp = sink.into_inner().map_err(|e| e.into_error())?;
    tmp.as_file().sync_all()?;
    tmp.persist(&out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!("{written} learning samples written to {}", out.display());
    Ok(0)
}

/// Writes every page of `pages` to `sink`, one [`inert`] line a sample, flushing after each
/// page; how many lines. Errors: a page that cannot be read, a write that fails.
fn write_pages(pages: OfflinePages, mut sink: impl Write) -> Result<usize> {
    let mut written = 0_usize;
    for page in pages {
        for v in page? {
            writeln!(sink, "{}", inert(&v.to_string()))?;
            written += 1;
        }
        sink.flush()?;
    }
    Ok(written)
}
