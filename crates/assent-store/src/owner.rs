//! Files a root process creates for a service user: [`give_as_root`] hands a new file to
//! the owner of its directory. A leaf: it imports nothing of the crate.

use std::path::Path;

/// When this process runs as root, gives the open `file` (just created) to the user and group
/// owning `owner` (its directory, or the path it replaces), so that the service user the
/// directory belongs to can still open it; otherwise does nothing. By the handle, not the
/// path: the directory's owner could swap the name for a link to another file in between
/// (found by review). Errors: reading `owner`'s metadata or the `fchown` itself.
#[cfg(unix)]
pub(crate) fn give_as_root(file: &std::fs::File, owner: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let d = std::fs::metadata(owner)?;
    std::os::unix::fs::fchown(file, Some(d.uid()), Some(d.gid()))
}
