//! The directory audit retention writes its exports to (`data_dir/archive`), held by a
//! handle: made (mode 0700, set through the handle) or opened with `O_NOFOLLOW`, and every
//! export created in it through that handle (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600), so that the
//! name swapped for a symbolic link after the checks is never followed. Found by review: run
//! as root (`sudo assent audit archive`), the directory was checked, then made and chmod'ed
//! and the export created by path, so the service user who owns the data directory could swap
//! `archive` for a link between the steps and have root make another directory 0700 (say
//! `/etc`) or write the export into it. Kit of [`crate::retention`].

use crate::error::StoreError;
use crate::kit::io;
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::path::{Path, PathBuf};

/// The archive directory, held open.
pub(crate) struct ArchiveDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// A refusal naming `dir`.
fn refuse(dir: &Path, why: &str) -> StoreError {
    StoreError::Invalid(format!("{}: {why}; nothing archived", dir.display()))
}

impl ArchiveDir {
    /// Opens `dir`, making it (0700, its parents as `create_dir_all` makes them, its entry in
    /// its parent fsynced) when it is missing: its parent by path, then `dir` itself by name
    /// from the parent's handle with `O_DIRECTORY|O_NOFOLLOW`. A directory made here is set to
    /// 0700 through the handle; an existing one is left as it is, but refused when users other
    /// than its owner may write it and it is not sticky. Errors: `Invalid` when `dir` is a
    /// symbolic link or no directory, or others may write it; `Io` naming it.
    pub(crate) fn open_or_make(dir: &Path) -> Result<ArchiveDir, StoreError> {
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = dir
            .file_name()
            .ok_or_else(|| refuse(dir, "names no directory"))?;
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let sys = |e: Errno| io(dir)(std::io::Error::from(e));
        let look = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let up = rustix::fs::open(parent, look, Mode::empty()).map_err(sys)?;
        let made = match rustix::fs::mkdirat(&up, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(sys(e)),
        };
        let fd = match rustix::fs::openat(&up, name, look | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(refuse(dir, "is not a directory (a symbolic link?)"));
            }
            Err(e) => return Err(sys(e)),
        };
        if made {
            // 0700 whatever the umask left, through the handle: never a path swapped since.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(sys)?;
            // Found by review: the new directory's entry in its parent was never synced, so a
            // power loss after the deleting commit could lose `archive/`, and with it the only
            // copy of the records the run deleted. The exports' own fsyncs come later.
            rustix::fs::fsync(&up).map_err(sys)?;
        } else {
            let mode = rustix::fs::fstat(&fd).map_err(sys)?.st_mode & 0o7777;
            if mode & 0o022 != 0 && mode & 0o1000 == 0 {
                return Err(refuse(
                    dir,
                    &format!(
                        "users other than its owner may write it (mode {mode:04o}); `chmod go-w` it"
                    ),
                ));
            }
        }
        Ok(ArchiveDir {
            fd,
            path: dir.to_path_buf(),
        })
    }

    /// Creates the new file `name` in the directory (never an existing name, never through a
    /// link), mode 0600; with its path for messages. Errors: `Io` naming it.
    pub(crate) fn create_new(&self, name: &str) -> Result<(std::fs::File, PathBuf), StoreError> {
        let path = self.path.join(name);
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            flags | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io(&path)(std::io::Error::from(e)))?;
        Ok((std::fs::File::from(fd), path))
    }

    /// Fsyncs the directory, so that a file made in it survives a crash. Errors: `Io`.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        rustix::fs::fsync(&self.fd).map_err(|e| io(&self.path)(e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::ArchiveDir;
    use std::os::unix::fs::PermissionsExt;

    /// Attack (found by review): once the run had checked and made `archive`, the owner of the
    /// data directory swapped it for a link to another directory, and the export was created
    /// by path, through the link (as root: into `/etc`). Here the swap happens between the
    /// two steps, where no public call stops: the export goes into the directory the run
    /// made, held by its handle, and the link's target gets nothing. A link planted before is
    /// refused, and a directory made here is 0700 whatever the umask.
    #[test]
    fn an_archive_directory_swapped_for_a_link_after_it_was_opened_is_not_followed() {
        let data = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(victim.path(), open).unwrap();
        let arch = data.path().join("archive");
        let held = ArchiveDir::open_or_make(&arch).unwrap();
        let mode = std::fs::metadata(&arch).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let moved = data.path().join("moved");
        std::fs::rename(&arch, &moved).unwrap();
        std::os::unix::fs::symlink(victim.path(), &arch).unwrap();
        let (mut f, _) = held.create_new("audit-1.jsonl").unwrap();
        std::io::Write::write_all(&mut f, b"{}\n").unwrap();
        held.sync().unwrap();
        assert!(moved.join("audit-1.jsonl").is_file());
        assert_eq!(std::fs::read_dir(victim.path()).unwrap().count(), 0);
        // Opened again now, the link is refused, and its target's mode is left alone.
        let e = ArchiveDir::open_or_make(&arch)
            .err()
            .expect("a link is refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let mode = std::fs::metadata(victim.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    }
}
