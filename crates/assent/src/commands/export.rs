//! `assent export learning-samples`: every settled approval as an MPLP learning sample, one
//! JSON object per line, read straight from the database (read-only; the gateway may keep
//! running). The samples and their pages are `assent_store::learning`'s; this file only writes
//! them out, page by page as each is read (found by review: the whole history was read into
//! one list and one text before a line was written), each line made inert for a terminal.

use crate::args::ExportCmd;
use crate::render::inert;
use crate::setup::data_dir_or_default;
use anyhow::{Context, Result};
use assent_api::audit::LEARNING_SAMPLES_DEFAULT_LIMIT;
use assent_store::db::Database;
use assent_store::learning::OfflinePages;
use std::io::Write;
use std::path::PathBuf;

/// Runs one `assent export` command; its exit status.
pub(crate) fn run(cmd: ExportCmd) -> Result<i32> {
    match cmd {
        ExportCmd::LearningSamples { data_dir, out } => learning_samples(data_dir, out),
    }
}

/// Writes the JSONL of `data_dir` (see [`data_dir_or_default`]) to `out`, saying on stderr
/// how many were written, or to standard output; exit status 0. Pages of
/// [`LEARNING_SAMPLES_DEFAULT_LIMIT`] samples (and about 8 MiB) are read one at a time, each
/// written before the next is read. Each line is [`inert`]: JSON escapes C0 controls but may
/// carry C1 controls (the one-byte CSI U+009B), DEL and bidi overrides (U+202E) raw, which an
/// agent's arguments can hold; they are written as `\uXXXX`, so the line is still JSON of the
/// same value (found by review: the export wrote agent text raw to the operator's terminal).
///
/// Errors: no database in the data directory, a read that fails (a damaged row), a write that
/// fails (`--out` not writable). Lines written before a failure stay written.
fn learning_samples(data_dir: Option<PathBuf>, out: Option<PathBuf>) -> Result<i32> {
    let dir = data_dir_or_default(data_dir)?;
    let db = Database::Sqlite {
        path: dir.join(assent_store::ops::DB_FILE),
    };
    let pages = OfflinePages::open(&db, LEARNING_SAMPLES_DEFAULT_LIMIT)?;
    let mut sink: Box<dyn Write> = match &out {
        Some(f) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(f).with_context(|| format!("cannot write {}", f.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let mut written = 0_usize;
    for page in pages {
        for v in page? {
            writeln!(sink, "{}", inert(&v.to_string()))?;
            written += 1;
        }
        sink.flush()?;
    }
    if let Some(f) = out {
        eprintln!("{written} learning samples written to {}", f.display());
    }
    Ok(0)
}
