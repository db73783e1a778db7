//! Load errors of the policy registry: [`LoadError`] (file, line, reason) and [`LoadErrors`]
//! (all of them, one per line), and the conversion of a YAML parse error into one. Shared by
//! the agent-file and governance loaders; it knows nothing of either format.

use std::fmt;

/// A configuration error with the file, the line when known, and the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadError {
    /// The file, as given to [`Registry::load`](super::Registry::load).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// All errors found while loading, one per line.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadErrors(pub Vec<LoadError>);

impl fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
impl std::error::Error for LoadErrors {}

/// A YAML syntax or shape error of `file` as a [`LoadError`]: the parser's line when it has
/// one, and the first line of its message (the rest may repeat the location or quote the
/// source).
pub(super) fn yaml_err(file: &str, e: serde_saphyr::Error) -> LoadError {
    let line = e.location().map(|l| l.line());
    let msg = e.to_string();
    // The rendered message may repeat the location and quote the source; keep the first line.
    let msg = msg.lines().next().unwrap_or("invalid YAML").to_string();
    LoadError {
        file: file.to_string(),
        line,
        message: msg,
    }
}
