//! Where `assent backup` builds its copy and how it puts the verified copy at `--out`.
//!
//! Attack (found by review): the copy was staged in `OUTDIR/.assent-backup-<random>/` and
//! then worked on by path (SQLite's backup API, the integrity check, the rename into place).
//! With `OUTDIR` writable by another user (its owner, say `sudo assent backup
//! /srv/backups/a.db` with `/srv/backups` a low-privilege account's), that user could rename
//! root's staging directory away and put one of their own under its name, holding an
//! `assent.db` symbolic link (root then wrote agent-controlled text where it pointed, e.g.
//! into `/etc/cron.d`) or a plain file they could read (root wrote the whole database into
//! it). Now the copy is staged and worked on by path only where no one but this user or root
//! can rename or replace anything ([`only_ours`]): beside `out` when its directory is such a
//! place (renamed or linked into place as before), else in the data directory or the
//! temporary directory when one is, and then written into `OUTDIR` through this process's
//! own handles ([`by_handle`]): nothing there is opened by a path someone else can redirect.

use super::{Staging, parent_of, refuse};
use crate::error::StoreError;
use crate::kit::{io, random_id};
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::path::{Path, PathBuf};

/// `dir` resolved (no symbolic link left on the way to it), when it and every directory
/// above it are writable by no one but their owner, this user or root, unless sticky (in a
/// sticky directory others cannot rename or remove what this user made, and the next
/// directory down is again this user's or root's): no other user can then rename, remove or
/// replace anything made in it or on the way to it. `None` when it is not so, or cannot be
/// resolved or inspected. The resolved path is the one to use: a link on the given path may
/// lie in a directory someone else may change.
pub(super) fn only_ours(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = dir.canonicalize().ok()?;
    let me = rustix::process::geteuid().as_raw();
    let ours = dir.ancestors().all(|d| {
        std::fs::metadata(d).is_ok_and(|m| {
            (m.uid() == me || m.uid() == 0) && (m.mode() & 0o022 == 0 || m.mode() & 0o1000 != 0)
        })
    });
    ours.then_some(dir)
}

/// Where a backup to `out` is built: the staging directory, and `out` as it is to be placed
/// from there — `Some(<out's resolved directory>/<name>)` when the staging directory is beside
/// it (the copy is renamed or linked into place), `None` when it is elsewhere (written there
/// by [`by_handle`]). The first of `out`'s directory, `data_dir` and the temporary directory
/// that is [`only_ours`] and where the staging directory can be made. Beside `out`, `out`
/// resolved is checked again to be clear of `dirs` (the data and keys directories,
/// [`super::clear_of_state`]): a link on the path given may have been changed since the
/// first check. Errors: `Invalid` when no place is, or `out` is not clear.
pub(super) fn staging_for(
    out: &Path,
    data_dir: &Path,
    dirs: &[&Path],
) -> Result<(Staging, Option<PathBuf>), StoreError> {
    let out_dir = parent_of(out);
    if let (Some(d), Some(name)) = (only_ours(&out_dir), out.file_name()) {
        let resolved = d.join(name);
        super::clear_of_state(&resolved, dirs, None)?;
        return Ok((Staging::new(&d, "backup", None)?, Some(resolved)));
    }
    for d in [data_dir.to_path_buf(), std::env::temp_dir()] {
        if let Some(d) = only_ours(&d)
            && let Ok(s) = Staging::new(&d, "backup", None)
        {
            return Ok((s, None));
        }
    }
    Err(refuse(format!(
        "{} may be changed by other users, and neither the data directory {} nor the temporary directory {} is a place only this user (or root) may change to build the copy in; set TMPDIR to one",
        out_dir.display(),
        data_dir.display(),
        std::env::temp_dir().display()
    )))
}

/// Writes the verified copy `staged` to `out` through handles: `out`'s directory (resolved)
/// is opened once (`O_DIRECTORY|O_NOFOLLOW`) and checked not to lie in any of `dirs` (the
/// data and keys directories, by device and inode up to `/`: [`not_inside`], the guard of
/// [`super::clear_of_state`] on the directory actually written); a new file
/// `.assent-backup-<random>.tmp` is created in it by that handle (`O_CREAT|O_EXCL|O_NOFOLLOW`,
/// 0600, this user's), the bytes copied and fsynced through it, and it is renamed onto `out`'s
/// name (`force`: a file or a symbolic link there is replaced, never followed) or linked to it
/// (no `force`: an existing name is not replaced) by the same handle, which is fsynced. The
/// name must then be the file written (someone changing the directory meanwhile is refused).
/// Errors: `Invalid` for an existing `out` without `force`, a directory inside `dirs`, or a
/// change meanwhile; `Io`.
pub(super) fn by_handle(
    staged: &Path,
    out: &Path,
    force: bool,
    dirs: &[&Path],
) -> Result<(), StoreError> {
    let dir = parent_of(out).canonicalize().map_err(io(&parent_of(out)))?;
    let name = out
        .file_name()
        .ok_or_else(|| refuse(format!("{} names no file", out.display())))?;
    let sys = |e: rustix::io::Errno| std::io::Error::from(e);
    let dfd = rustix::fs::open(
        &dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(&dir)(sys(e)))?;
    not_inside(&dfd, dirs, out)?;
    let tmp = format!(".assent-backup-{}.tmp", random_id(""));
    let fd = rustix::fs::openat(
        &dfd,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| io(&dir.join(&tmp))(sys(e)))?;
    let mut file = std::fs::File::from(fd);
    let placed: Result<(), StoreError> = (|| {
        let mut src = std::fs::File::open(staged).map_err(io(staged))?;
        std::io::copy(&mut src, &mut file).map_err(io(out))?;
        file.sync_all().map_err(io(out))?;
        if force {
            rustix::fs::renameat(&dfd, tmp.as_str(), &dfd, name).map_err(|e| io(out)(sys(e)))?;
        } else {
            rustix::fs::linkat(&dfd, tmp.as_str(), &dfd, name, AtFlags::empty()).map_err(|e| {
                if e == rustix::io::Errno::EXIST {
                    refuse(format!(
                        "{} appeared meanwhile; nothing written",
                        out.display()
                    ))
                } else {
                    io(out)(sys(e))
                }
            })?;
        }
        Ok(())
    })();
    // Left only when not renamed (by `force`): linked, or failed.
    let _ = rustix::fs::unlinkat(&dfd, tmp.as_str(), AtFlags::empty());
    placed?;
    rustix::fs::fsync(&dfd).map_err(|e| io(&dir)(sys(e)))?;
    let ours = rustix::fs::fstat(&file).map_err(|e| io(out)(sys(e)))?;
    match rustix::fs::statat(&dfd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino) => Ok(()),
        _ => Err(refuse(format!(
            "{}: the directory was changed while the copy was written there; check what the name holds",
            out.display()
        ))),
    }
}

/// Refuses the directory open as `dfd` when it is one of `dirs` or lies under one, by device
/// and inode from it up to `/` (each parent opened through the one below, so no path is
/// followed twice). Errors: `Invalid` naming `out` and the directory; `Io`.
fn not_inside(dfd: &OwnedFd, dirs: &[&Path], out: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let sys = |e: rustix::io::Errno| io(out)(std::io::Error::from(e));
    let ids: Vec<_> = dirs
        .iter()
        .filter_map(|d| std::fs::metadata(d).ok().map(|m| ((m.dev(), m.ino()), *d)))
        .collect();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let up_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let up_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut at = rustix::fs::openat(dfd, ".", up_flags, Mode::empty()).map_err(sys)?;
    loop {
        let st = rustix::fs::fstat(&at).map_err(sys)?;
        let id = (st.st_dev as u64, st.st_ino as u64);
        if let Some((_, d)) = ids.iter().find(|(i, _)| *i == id) {
            return Err(refuse(format!(
                "{} is inside {}, which holds the gateway's database and keys; write it elsewhere",
                out.display(),
                d.display()
            )));
        }
        let up = rustix::fs::openat(&at, "..", up_flags, Mode::empty()).map_err(sys)?;
        let ust = rustix::fs::fstat(&up).map_err(sys)?;
        if (ust.st_dev as u64, ust.st_ino as u64) == id {
            return Ok(());
        }
        at = up;
    }
}
