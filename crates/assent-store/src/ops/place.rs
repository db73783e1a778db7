//! Where `assent backup` and `assent restore` build their copy and how they put the verified
//! copy in place (at `--out`; at `DATA/assent.db`).
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
//!
//! The same attack on `sudo assent restore --data-dir DATA` with DATA a service user's (found
//! by review): the copy was staged in `DATA/.assent-restore-<random>/` and worked on by path,
//! and the live `DATA/assent.db` was opened and hard-linked by path, so a link planted there
//! was followed. Now the copy is built and checked where only this user or root may change
//! anything (DATA itself when it is such a place, else `TMPDIR`: [`restore_staging`]) and
//! written into DATA through a handle on it, the live file taken without following a link
//! and kept aside by `linkat` on the handle ([`swap_in`]).

use super::{DB_FILE, Staging, parent_of, refuse};
use crate::error::StoreError;
use crate::kit::{io, random_id};
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
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

/// Writes the verified copy `staged` to `out` through handles: `out`'s directory is opened
/// once ([`Dir::open`]) and checked not to lie in any of `dirs` (the data and keys
/// directories, by device and inode up to `/`: [`not_inside`], the guard of
/// [`super::clear_of_state`] on the directory actually written); a new file
/// `.assent-backup-<random>.tmp` is made in it by that handle ([`Dir::new_file`]: 0600, this
/// user's), and renamed onto `out`'s name (`force`: a file or a symbolic link there is
/// replaced, never followed) or linked to it (no `force`: an existing name is not replaced)
/// by the same handle, which is fsynced. The name must then be the file written (someone
/// changing the directory meanwhile is refused). Errors: `Invalid` for an existing `out`
/// without `force`, a directory inside `dirs`, or a change meanwhile; `Io`.
pub(super) fn by_handle(
    staged: &Path,
    out: &Path,
    force: bool,
    dirs: &[&Path],
) -> Result<(), StoreError> {
    let name = out
        .file_name()
        .ok_or_else(|| refuse(format!("{} names no file", out.display())))?;
    let dir = Dir::open(&parent_of(out))?;
    not_inside(&dir.fd, dirs, out)?;
    let mut src = std::fs::File::open(staged).map_err(io(staged))?;
    let mut tmp = dir.new_file("backup", &mut src, false)?;
    if force {
        tmp.rename_to(name).map_err(|e| io(out)(e.into()))?;
    } else {
        tmp.link_to(name).map_err(|e| {
            if e == Errno::EXIST {
                refuse(format!(
                    "{} appeared meanwhile; nothing written",
                    out.display()
                ))
            } else {
                io(out)(e.into())
            }
        })?;
    }
    let id = tmp.id;
    // Left only when not renamed (by `force`): linked, or failed.
    drop(tmp);
    dir.sync()?;
    dir.holds(name, id, out)
}

/// A directory held by a handle, and its path resolved (for messages and for SQLite, which
/// opens by path). Everything [`by_handle`] and [`swap_in`] make, link, rename or remove in it
/// goes through the handle, so a directory swapped under the path meanwhile is not written.
pub(super) struct Dir {
    fd: OwnedFd,
    /// The directory's path, resolved when it was opened.
    pub path: PathBuf,
}

impl Dir {
    /// Opens `dir` resolved, one component at a time from `/`, each with
    /// `O_DIRECTORY|O_NOFOLLOW` (so a component replaced by a symbolic link after resolving,
    /// by someone who may change a directory above, is refused rather than followed). Errors:
    /// `Io` naming `dir`.
    pub(super) fn open(dir: &Path) -> Result<Dir, StoreError> {
        let path = dir.canonicalize().map_err(io(dir))?;
        let sys = |e: Errno| io(&path)(std::io::Error::from(e));
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let walk = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let walk = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut at = rustix::fs::open("/", walk, Mode::empty()).map_err(sys)?;
        for c in path.components() {
            if let std::path::Component::Normal(n) = c {
                at = rustix::fs::openat(&at, n, walk, Mode::empty()).map_err(sys)?;
            }
        }
        let read = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&at, ".", read, Mode::empty()).map_err(sys)?;
        Ok(Dir { fd, path })
    }

    /// A new file `.assent-<what>-<random>.tmp` made in the directory by its handle
    /// (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600), holding what `src` reads, fsynced; then, with
    /// `give` and run as root, given to the directory's owner by its handle (the directory
    /// as opened, not as a path names it now). Removed when the [`Temp`] is dropped unless
    /// renamed. Errors: `Io` naming the file.
    pub(super) fn new_file(
        &self,
        what: &str,
        src: &mut dyn std::io::Read,
        give: bool,
    ) -> Result<Temp<'_>, StoreError> {
        let name = format!(".assent-{what}-{}.tmp", random_id(""));
        let path = self.path.join(&name);
        let sys = |e: Errno| io(&path)(std::io::Error::from(e));
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name.as_str(), flags, Mode::from_raw_mode(0o600))
            .map_err(sys)?;
        let st = rustix::fs::fstat(&fd).map_err(sys)?;
        let mut t = Temp {
            dir: self,
            name,
            file: std::fs::File::from(fd),
            id: dev_ino(&st),
            placed: false,
        };
        std::io::copy(src, &mut t.file).map_err(io(&path))?;
        t.file.sync_all().map_err(io(&path))?;
        if give && rustix::process::geteuid().is_root() {
            let d = rustix::fs::fstat(&self.fd).map_err(sys)?;
            let (uid, gid) = (
                rustix::fs::Uid::from_raw(d.st_uid),
                rustix::fs::Gid::from_raw(d.st_gid),
            );
            rustix::fs::fchown(&t.file, Some(uid), Some(gid)).map_err(sys)?;
        }
        Ok(t)
    }

    /// Fsyncs the directory, so that a rename or link in it survives a crash.
    pub(super) fn sync(&self) -> Result<(), StoreError> {
        rustix::fs::fsync(&self.fd).map_err(|e| io(&self.path)(e.into()))
    }

    /// Checks that `name` in the directory is the file `id` (device, inode) without following
    /// a link. Errors: `Invalid` naming `shown`: someone changed the directory meanwhile.
    fn holds(&self, name: &OsStr, id: (u64, u64), shown: &Path) -> Result<(), StoreError> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if dev_ino(&st) == id => Ok(()),
            _ => Err(refuse(format!(
                "{}: the directory was changed while the copy was written there; check what the name holds",
                shown.display()
            ))),
        }
    }
}

/// A file's device and inode (their types differ between systems).
#[allow(clippy::unnecessary_cast)]
fn dev_ino(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// A new file [`Dir::new_file`] made, removed when dropped unless renamed.
pub(super) struct Temp<'a> {
    dir: &'a Dir,
    name: String,
    file: std::fs::File,
    /// Its device and inode.
    id: (u64, u64),
    placed: bool,
}

impl Temp<'_> {
    /// Renames it onto `name` in its directory by the handle (`renameat`: whatever is at the
    /// name, a symbolic link included, is replaced, never followed).
    fn rename_to(&mut self, name: &OsStr) -> Result<(), Errno> {
        let d = &self.dir.fd;
        rustix::fs::renameat(d, self.name.as_str(), d, name)?;
        self.placed = true;
        Ok(())
    }

    /// Links it to `name` in its directory by the handle (`EEXIST` on an existing name).
    fn link_to(&self, name: &OsStr) -> Result<(), Errno> {
        let d = &self.dir.fd;
        rustix::fs::linkat(d, self.name.as_str(), d, name, AtFlags::empty())
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if !self.placed {
            let _ = rustix::fs::unlinkat(&self.dir.fd, self.name.as_str(), AtFlags::empty());
        }
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

/// Where `assent restore` builds and checks the copy, with the data directory held by a
/// handle ([`Dir::open`]) for [`swap_in`]; whether the staging directory is inside it. In
/// `data_dir` when it is [`only_ours`] (a non-root user's own data directory, root's): as
/// before, nobody else can change anything there. Else (root restoring a service user's data
/// directory: found by review, that user could rename root's staging directory away and put
/// one of their own under its name, with an `assent.db` link, and root wrote the backup's
/// contents where it pointed) in the temporary directory, which must then be [`only_ours`];
/// [`swap_in`] writes the verified copy into `data_dir` by the handle. Errors: `Invalid`
/// naming `TMPDIR` when it is not such a place; `Io`.
pub(super) fn restore_staging(data_dir: &Path) -> Result<(Staging, Dir, bool), StoreError> {
    let dir = Dir::open(data_dir)?;
    if only_ours(&dir.path).is_some() {
        let staging = Staging::new(&dir.path, "restore", Some(&dir.path))?;
        return Ok((staging, dir, true));
    }
    let tmp = std::env::temp_dir();
    match only_ours(&tmp) {
        Some(t) => Ok((Staging::new(&t, "restore", None)?, dir, false)),
        None => Err(refuse(format!(
            "{} may be changed by other users than this one and root, so the copy is built and checked in the temporary directory {} first, but that may be changed by others too; set TMPDIR to a directory only this user (or root) may change",
            dir.path.display(),
            tmp.display()
        ))),
    }
}

/// Puts the checked copy of `staging` at `assent.db` in `dir`, for [`super::restore`]: staged
/// elsewhere, it is first written into a new file there by the handle ([`Dir::new_file`],
/// given to the directory's owner when run as root). Then the live database, if anything is
/// at the name, is taken exclusively ([`super::take_exclusively`]: a link or other
/// non-regular file is refused, naming it) and kept aside ([`keep_aside`]); the old `-wal` and
/// `-shm` are removed and, with `mark`, the restore's marker written (the next start voids
/// the tokens issued before it, [`crate::voided`]) — all by the handle; then the copy is
/// renamed onto `assent.db` (by the handle, or staged beside it by path) and the directory
/// fsynced. Returns where the replaced database was kept. Errors (nothing replaced): the
/// refusals named, a stray `-wal` without its database; `Io`, SQLite's.
pub(super) fn swap_in(
    dir: &Dir,
    staging: &Staging,
    beside: bool,
    mark: Option<i64>,
) -> Result<Option<PathBuf>, StoreError> {
    let live = dir.path.join(DB_FILE);
    let mut tmp = match beside {
        true => None,
        false => {
            let mut src = std::fs::File::open(staging.db()).map_err(io(&staging.db()))?;
            Some(dir.new_file("restore", &mut src, true)?)
        }
    };
    let wal = format!("{DB_FILE}-wal");
    let nofollow = AtFlags::SYMLINK_NOFOLLOW;
    let (lock, set_aside) = match rustix::fs::statat(&dir.fd, DB_FILE, nofollow) {
        Ok(_) => (
            Some(super::take_exclusively(&live)?),
            Some(keep_aside(dir)?),
        ),
        Err(Errno::NOENT) => match rustix::fs::statat(&dir.fd, wal.as_str(), nofollow) {
            Ok(st) if st.st_size > 0 => {
                return Err(refuse(format!(
                    "{} is a write-ahead log without its database; move it away first",
                    dir.path.join(&wal).display()
                )));
            }
            _ => (None, None),
        },
        Err(e) => return Err(io(&live)(e.into())),
    };
    // The old write-ahead log (folded into the file set aside) goes before the copy takes the
    // name, while the lock is held: a gateway opening the restored file must not find it.
    for stale in [wal, format!("{DB_FILE}-shm")] {
        let _ = rustix::fs::unlinkat(&dir.fd, stale.as_str(), AtFlags::empty());
    }
    // Before the copy takes the name: whatever happens next, the next start voids them.
    // Beside, by path as ever (nobody else may change the directory); else by the handle,
    // the directory owner's (found by review: root's 0600 marker kept a service user's
    // gateway from reading it).
    match mark {
        Some(at) if beside => crate::voided::mark(&dir.path, at)?,
        Some(at) => {
            let mut m = dir.new_file("restore", &mut at.to_string().as_bytes(), true)?;
            m.rename_to(OsStr::new(crate::voided::MARKER))
                .map_err(|e| io(&dir.path.join(crate::voided::MARKER))(e.into()))?;
        }
        None => {}
    }
    let placed = match &mut tmp {
        Some(t) => t.rename_to(OsStr::new(DB_FILE)).map_err(Into::into),
        None => std::fs::rename(staging.db(), &live),
    };
    if let Err(e) = placed {
        // Nothing was replaced: the live database's tokens are not to be voided.
        let _ = rustix::fs::unlinkat(&dir.fd, crate::voided::MARKER, AtFlags::empty());
        return Err(io(&live)(e));
    }
    dir.sync()?;
    drop(lock);
    if let Some(t) = &tmp {
        dir.holds(OsStr::new(DB_FILE), t.id, &live)?;
    }
    Ok(set_aside)
}

/// Keeps the live database (held by [`super::take_exclusively`], already self-contained) as
/// a second name in `dir`, `assent.db.before-restore-<UTC time>` (with a random suffix when
/// that is taken): a hard link made by the handle, never following a link (`linkat` without
/// `AT_SYMLINK_FOLLOW`), so `assent.db` never stops existing. Errors: `Io` naming it.
fn keep_aside(dir: &Dir) -> Result<PathBuf, StoreError> {
    let name = format!("{DB_FILE}.before-restore-{}", super::utc_stamp());
    let link = |n: &str| rustix::fs::linkat(&dir.fd, DB_FILE, &dir.fd, n, AtFlags::empty());
    let name = match link(&name) {
        Err(Errno::EXIST) => {
            let other = format!("{name}-{}", random_id(""));
            link(&other).map(|()| other)
        }
        r => r.map(|()| name),
    };
    match name {
        Ok(n) => Ok(dir.path.join(n)),
        Err(e) => Err(io(&dir.path.join(DB_FILE))(e.into())),
    }
}

/// Copies the restore's `input` (and its `-wal`, when there is one: beside the link's target
/// for a link, resolved once) byte for byte into `staging` as `input.db`, whose path it
/// returns: SQLite then opens only that private copy. Each file is opened for reading without
/// blocking and must be a regular file (`fstat` on the handle; the `-wal`, which the operator
/// did not name, not through a symbolic link). Attack (found by review): SQLite opened the
/// input by path, so root's `assent restore /srv/backups/b.db` in a directory another user may
/// write opened that
/// user's `b.db-wal` and created or opened `b.db-shm` there read-write (owned by whoever owns
/// `b.db`, and a hard link planted at that name was written through), and a FIFO swapped in
/// after the check held the restore, and the data directory's lock, for ever. Errors: the
/// input or its `-wal` is not a regular file, named; `Io`.
pub(super) fn take_input(input: &Path, staging: &Staging) -> Result<PathBuf, StoreError> {
    let private = staging.dir.join("input.db");
    // One resolution for both files (found by review: resolved twice, a `latest.db` link moved
    // between could pair one backup with another's log).
    let input = &std::fs::canonicalize(input).unwrap_or_else(|_| input.to_path_buf());
    copy_regular(input, &private, true)?.ok_or_else(|| {
        refuse(format!(
            "{}: no such file, or not a regular file",
            input.display()
        ))
    })?;
    // Beside the file itself, as SQLite looks for it: through a `latest.db` link, the target's.
    let mut wal = input.as_os_str().to_owned();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    if std::fs::symlink_metadata(&wal).is_ok()
        && copy_regular(&wal, &private.with_file_name("input.db-wal"), false)?.is_none()
    {
        return Err(refuse(format!(
            "{} is beside the backup but is not a regular file",
            wal.display()
        )));
    }
    Ok(private)
}

/// Copies the regular file `from` to the new private file `to` (0600): `None` when `from` is
/// missing or not a regular file (opened without blocking, judged on the handle), or, unless
/// `follow`, a symbolic link. `Io` else.
fn copy_regular(from: &Path, to: &Path, follow: bool) -> Result<Option<()>, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = OFlags::NONBLOCK;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    let src = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(from)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => return Ok(None),
        Err(e) => return Err(io(from)(e)),
    };
    if !src.metadata().map_err(io(from))?.is_file() {
        return Ok(None);
    }
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(io(to))?;
    std::io::copy(&mut &src, &mut dst).map_err(io(from))?;
    Ok(Some(()))
}

/// Removes the private copy [`take_input`] made (and SQLite's side files of it), once copied.
pub(super) fn drop_input(private: &Path) {
    for side in ["", "-wal", "-shm"] {
        let mut p = private.as_os_str().to_owned();
        p.push(side);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}
