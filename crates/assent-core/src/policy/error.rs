//! Load errors of the policy registry: [`LoadError`] (file, line, reason; rendered with its
//! control characters escaped) and [`LoadErrors`] (all of them, one per line), and the
//! conversion of a YAML parse error into one. Shared by
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
    /// `FILE:LINE: message` (or `FILE: message`) on one line, the file and the message made
    /// [`visible`](crate::template::visible): they quote ids, names, paths and values from
    /// files another team may write (found by review: quoted as they were, an agent file's
    /// escape sequence cleared the operator's screen, and its line break forged a problem line
    /// of its own, through a start-up or reload error).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let visible = crate::template::visible;
        let (file, message) = (visible(&self.file), visible(&self.message));
        match self.line {
            Some(l) => write!(f, "{file}:{l}: {message}"),
            None => write!(f, "{file}: {message}"),
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

/// The reason in a YAML error's text `e` (a `serde_saphyr` error rendered), without the
/// `error: line L column C:` it starts with (the caller puts the file and line in front, so
/// the reader sees `file:14: unknown field … (column 1)`, not `file:14: error: line 14
/// column 1: unknown field …`) and without the parser's advice to its caller. The first
/// line of the text only (the rest may quote the source); `invalid YAML` when empty.
pub fn yaml_reason(e: &str) -> String {
    let first = e.lines().next().unwrap_or("invalid YAML");
    // The parser's advice to its caller is not the reader's business.
    let first = first
        .split_once(", set DuplicateKeyPolicy")
        .map_or(first, |(why, _)| why);
    let rest = first.strip_prefix("error: ").unwrap_or(first);
    match rest.strip_prefix("line ").and_then(|r| r.split_once(": ")) {
        Some((place, why))
            if place
                .split(' ')
                .all(|w| w == "column" || w.parse::<u64>().is_ok()) =>
        {
            format!("{why} (column {})", place.rsplit(' ').next().unwrap_or("?"))
        }
        _ => rest.to_string(),
    }
}

/// A YAML syntax or shape error of `file` as a [`LoadError`]: the parser's line when it has
/// one, and the first line of its message (the rest may repeat the location or quote the
/// source).
pub(super) fn yaml_err(file: &str, e: serde_saphyr::Error) -> LoadError {
    let line = e.location().map(|l| l.line());
    // The rendered message may repeat the location and quote the source; keep the reason.
    let msg = yaml_reason(&e.to_string());
    LoadError {
        file: file.to_string(),
        line,
        message: msg,
    }
}

#[cfg(test)]
mod tests {
    use super::yaml_reason;

    #[test]
    fn a_yaml_reason_drops_the_location_the_caller_gives_and_the_parsers_advice() {
        assert_eq!(
            yaml_reason("error: line 14 column 1: unknown field `x`, expected one of a\nmore"),
            "unknown field `x`, expected one of a (column 1)"
        );
        assert_eq!(
            yaml_reason(
                "error: line 3 column 2: duplicate mapping key: listen, set DuplicateKeyPolicy in Options if acceptable"
            ),
            "duplicate mapping key: listen (column 2)"
        );
        assert_eq!(yaml_reason("invalid type: string"), "invalid type: string");
        assert_eq!(yaml_reason(""), "invalid YAML");
    }
}
