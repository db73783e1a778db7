//! `assent export learning-samples`: every settled approval as an MPLP learning sample, one
//! JSON object per line, read straight from the database (read-only; the gateway may keep
//! running). The samples are `assent_store::learning`'s; this file only writes them out.

use crate::args::ExportCmd;
use crate::setup::data_dir_or_default;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Runs one `assent export` command; its exit status.
pub(crate) fn run(cmd: ExportCmd) -> Result<i32> {
    match cmd {
        ExportCmd::LearningSamples { data_dir, out } => learning_samples(data_dir, out),
    }
}

/// Writes the JSONL of `data_dir` (see [`data_dir_or_default`]) to `out`, saying on stderr
/// how many were written, or to standard output. Exit status 0.
fn learning_samples(data_dir: Option<PathBuf>, out: Option<PathBuf>) -> Result<i32> {
    let list = assent_store::learning::learning_samples_offline(&data_dir_or_default(data_dir)?)?;
    let mut text = String::new();
    for v in &list {
        text.push_str(&v.to_string());
        text.push('\n');
    }
    match out {
        Some(f) => {
            std::fs::write(&f, text).with_context(|| format!("cannot write {}", f.display()))?;
            eprintln!("{} learning samples written to {}", list.len(), f.display());
        }
        None => {
            use std::io::Write;
            std::io::stdout().write_all(text.as_bytes())?;
        }
    }
    Ok(0)
}
