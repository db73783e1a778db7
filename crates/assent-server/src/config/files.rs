//! The files a configuration names: expanding the `agents` and `governance` paths and globs
//! ([`expand`]), and reading every file — the configuration itself, each agent and governance
//! file — through one opened handle that must be a regular file of at most [`MAX_FILE_BYTES`]
//! ([`read_bounded`]), all of one configuration's together within [`MAX_TOTAL_BYTES`]
//! (`read_policy_files`). Kit of [`crate::config`].

use super::raw::{ConfigError, at};
use assent_core::suggest::edit::PolicyFiles;
use serde_saphyr::Spanned;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest configuration, agent or governance file read (4 MiB). Found by review: files
/// were read whole, and the policy-set hash copied every text, so a huge file in a globbed
/// directory could exhaust memory on a reload and end the running gateway.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The text of `path`, read through one opened handle: the handle must be a regular file
/// (`fstat`, so a FIFO, device or directory swapped in is refused, not read or waited on) of
/// at most [`MAX_FILE_BYTES`], and UTF-8. The error names the file, and for a file too large
/// its size and the limit; a file that grows past the limit while being read is refused too.
pub fn read_bounded(path: &Path) -> Result<String, ConfigError> {
    let fail = |why: String| at(path, None, why);
    // Non-blocking, so that opening a FIFO swapped in does not wait for a writer (found by
    // review: the reload thread waited for ever, holding the reload lock); a regular file
    // reads the same either way.
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        open.custom_flags(flags.bits() as i32);
    }
    let f = open.open(path).map_err(|e| fail(e.to_string()))?;
    let meta = f.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail(format!(
            "is not a regular file ({}); assent reads only regular files",
            kind_of(&meta.file_type())
        )));
    }
    let too_large = |size: u64| {
        fail(format!(
            "is {size} bytes, larger than the limit of {MAX_FILE_BYTES} bytes"
        ))
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_large(meta.len()));
    }
    // A regular file: reads block as usual again (a FUSE filesystem may honour O_NONBLOCK with
    // EAGAIN, which `read_to_end` does not retry).
    #[cfg(unix)]
    rustix::fs::fcntl_setfl(&f, rustix::fs::OFlags::empty()).map_err(|e| fail(e.to_string()))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| fail("stream did not contain valid UTF-8".into()))
}

/// The most all the agent and governance files of one configuration may hold together
/// (64 MiB): found by review, a glob over many files of [`MAX_FILE_BYTES`] each still had no
/// bound.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024 * 1024;

/// `(name, text)` of every file in `files`, each read with [`read_bounded`], while `budget`
/// (bytes, shared by the calls of one load) lasts; a file past it is refused, naming the
/// limit.
fn read_all(files: &[PathBuf], budget: &mut usize) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let text = read_bounded(f)?;
        *budget = budget.checked_sub(text.len()).ok_or_else(|| {
            at(
                f,
                None,
                format!(
                    "the agent and governance files together pass the limit of {MAX_TOTAL_BYTES} bytes"
                ),
            )
        })?;
        out.push((f.display().to_string(), text));
    }
    Ok(out)
}

/// The agent and governance files `agents` and `governance` as `(name, text)` pairs, each
/// read with [`read_bounded`] and all of them within one budget of [`MAX_TOTAL_BYTES`]: what
/// a load reads, and what every later reader of the same files must read too (found by
/// review: `assent suggest` and the replay and suggestion endpoints read the files a second
/// time without the total bound).
pub(crate) fn read_policy_files(
    agents: &[PathBuf],
    governance: &[PathBuf],
) -> Result<PolicyFiles, ConfigError> {
    let mut budget = MAX_TOTAL_BYTES;
    Ok(PolicyFiles {
        agents: read_all(agents, &mut budget)?,
        governance: read_all(governance, &mut budget)?,
    })
}

/// What a file that is not a regular file is, for the errors.
#[cfg(unix)]
fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "a special file"
    }
}

/// What a file that is not a regular file is, for the errors (off Unix: a directory or not).
#[cfg(not(unix))]
fn kind_of(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// A glob match: a regular file to read (a symbolic link to one included), a directory (which
/// a glob such as `policies/*` may match beside the files: skipped, as it always was), or
/// `Err(why)` for anything else.
fn glob_match(f: &Path) -> Result<bool, String> {
    match std::fs::metadata(f) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) if m.is_dir() => Ok(false),
        Ok(m) => Err(format!(
            "is not a regular file ({})",
            kind_of(&m.file_type())
        )),
        Err(_) if f.symlink_metadata().is_ok() => {
            Err("is a symbolic link whose target does not exist (a moved mount?)".into())
        }
        Err(e) => Err(format!("cannot be read: {e}")),
    }
}

/// A plain (non-glob) configured path: `Ok` for a regular file (a symbolic link to one
/// included), else `Err(why)` saying what it is (found by review: a named pipe or a directory
/// there was reported as a file that does not exist).
fn plain_path(f: &Path) -> Result<(), String> {
    match std::fs::metadata(f) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => Err(format!(
            "is {}, not a regular file; assent reads only regular files",
            kind_of(&m.file_type())
        )),
        Err(_) if f.symlink_metadata().is_ok() => {
            Err("is a symbolic link whose target does not exist (a moved mount?)".into())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("does not exist".into()),
        Err(e) => Err(format!("cannot be read: {e}")),
    }
}

/// How configured globs match: as [`glob::glob`] (`MatchOptions::new()`: case-sensitive,
/// `*` may match `/`), except that a name starting with `.` is matched only by a pattern
/// whose `.` is literal (found by review: `*.yaml` matched an editor's dangling lock link
/// `.#finance.yaml`, failing every start and reload, and a file renamed `.old.yaml` to
/// disable it was still loaded).
const GLOB_OPTIONS: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: false,
    require_literal_leading_dot: true,
};

/// The glob `pattern` relative to `base`, with `base` escaped: only the configured pattern is
/// a glob (found by review: a configuration in `/x/g[x]/` loaded agents and governance from a
/// sibling `/x/gx/`, since its own directory was read as a pattern).
fn glob_pattern(base: &Path, pattern: &str) -> String {
    let base = glob::Pattern::escape(&base.to_string_lossy());
    Path::new(&base)
        .join(pattern)
        .to_string_lossy()
        .into_owned()
}

/// The files `patterns` (paths or globs relative to `base`) name, in order, without
/// repeats (a file named twice, by any path or link, is kept where first named): a missing plain path is an error of `file`. A glob match that is neither a regular
/// file nor a directory (a dangling symbolic link, a FIFO, a device), or an entry the glob
/// cannot read, is an error naming the match and why (found by review: such matches were
/// skipped, so a governance file behind a dangling link — a moved mount — silently went
/// missing, at start-up and on reload); directories a glob matches are skipped. A glob that
/// matches no file is an error when `required` (`governance`: its rules bind every agent, and
/// a mount moved or a directory left empty would otherwise start the gateway without the
/// organisation's denials — fail closed) and a warning pushed to `warnings` otherwise
/// (`agents`: an agent without a file is refused, so nothing opens).
pub(crate) fn expand(
    base: &Path,
    file: &Path,
    patterns: &[Spanned<String>],
    (what, required): (&str, bool),
    warnings: &mut Vec<String>,
) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::new();
    for p in patterns {
        let line = Some(p.referenced.line());
        let p = &p.value;
        let full = base.join(p);
        let is_glob = p.contains(['*', '?', '[']);
        if !is_glob {
            if let Err(why) = plain_path(&full) {
                return Err(at(
                    file,
                    line,
                    format!("{what} file `{p}` {why} ({})", full.display()),
                ));
            }
            out.push(full);
            continue;
        }
        let mut found: Vec<PathBuf> = Vec::new();
        let matches = glob::glob_with(&glob_pattern(base, p), GLOB_OPTIONS)
            .map_err(|e| at(file, line, format!("{what} glob `{p}`: {e}")))?;
        for entry in matches {
            let f = entry.map_err(|e| at(file, line, format!("{what} glob `{p}`: {e}")))?;
            match glob_match(&f) {
                Ok(true) => found.push(f),
                Ok(false) => {}
                Err(why) => {
                    return Err(at(
                        file,
                        line,
                        format!("{what} glob `{p}` matches {}, which {why}", f.display()),
                    ));
                }
            }
        }
        found.sort();
        if found.is_empty() && required {
            return Err(at(
                file,
                line,
                format!(
                    "{what} glob `{p}` matches no file: {what} rules bind every agent, \
                     so assent does not start without them (name the files, or remove the entry)"
                ),
            ));
        }
        if found.is_empty() {
            let w = at(file, line, format!("{what} glob `{p}` matches no file"));
            warnings.push(w.to_string());
        }
        out.extend(found);
    }
    // Each file once, however it is named (`a.yaml` and `./a.yaml`, a second glob, a symbolic
    // link to it), the first place it is named kept (found by review: only adjacent repeats
    // were dropped, so the same file was read twice and the load failed with an `already
    // defined` error naming that one file).
    let mut seen = std::collections::HashSet::new();
    out.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    Ok(out)
}
