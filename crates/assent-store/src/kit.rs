//! The kit at the bottom of the crate: RFC 3339 time stamps, random (and time-ordered) prefixed ids, file helpers for the data
//! directory (private files and directories, I/O errors naming the path) and JSON text for
//! JSON columns. No SQL and no approval logic.

use crate::error::StoreError;
use std::path::Path;

pub use assent_core::stamp::rfc3339;

/// The SQLite database's file name in the data directory.
pub const DB_FILE: &str = "assent.db";

/// `prefix` + 32 lowercase hex characters of 128 random bits: the ids the store mints and
/// keeps (`sub_` subscriptions, file names).
pub fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    format!("{prefix}{}", hex::encode(b))
}

/// `prefix` + 12 lowercase hex characters of `at_ms` (milliseconds since the epoch, clamped to
/// 0..2⁴⁸) + 32 of 128 random bits: as unguessable and as unique as [`random_id`], but in
/// the order of time, so that a unique index of them grows at its end instead of dirtying a
/// random page of it on every insert (BENCHMARKS.md, "Where a cycle's server CPU goes"). The
/// `rpl_` reply tokens of confirmations and clarifications and the `evt_` event ids (AAEP
/// §3.2.3: `evt_` + 1–64 alphanumerics, any generation method that keeps them unique; §6.2.1
/// likewise for `rpl_`): 44 characters after the prefix.
pub fn ordered_id(prefix: &str, at_ms: i64) -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    let at = at_ms.clamp(0, 0xffff_ffff_ffff);
    format!("{prefix}{at:012x}{}", hex::encode(b))
}

/// A UUID of the version-4 form (`xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`, the pattern MPLP's
/// identifiers schema requires) whose first 48 bits are `at_ms` (milliseconds since the epoch,
/// clamped to 0..2⁴⁸, big-endian) and whose other 74 free bits are random: unique and
/// unguessable as a random id of that size, but in the order of time, so that the indexes keyed
/// by it — the approvals' primary key, and every index leading with an approval id (its audit
/// records, decisions, usage, Confirm context, token) — grow at their ends instead of dirtying
/// a random leaf on every insert ([`ordered_id`] for the ids that are not UUIDs; BENCHMARKS.md,
/// "Where a cycle's server CPU goes"). For the ids of approvals, decisions, tokens and the
/// default trace and target ids; none of them is a secret (every read of an approval checks
/// who asks), and 74 random bits keep them from being guessed all the same.
pub fn ordered_uuid(at_ms: i64) -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    let at = at_ms.clamp(0, 0xffff_ffff_ffff).to_be_bytes();
    b[..6].copy_from_slice(&at[2..]);
    uuid::Builder::from_random_bytes(b).into_uuid().to_string()
}

/// Maps an I/O error on `path` to [`StoreError::Io`] naming it.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Now, in Unix milliseconds (0 before 1970).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Writes `bytes` to a new file `path` with mode 0600 (Unix) and syncs it: whatever was at
/// `path` is removed first (a symbolic link itself, not its target) and the file is created
/// exclusively, so neither a link planted there nor a file someone else created (with
/// another mode or owner) is written through (found by review: the key files' temporary
/// file was opened following links, with the mode applied only when it was created).
#[cfg(unix)]
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    hand_to_dir_owner(&f, path.parent().unwrap_or(Path::new(".")))?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// In an administration command run by root ([`let_root_read_service_keys`]), gives `file`,
/// just created in `dir`, to `dir`'s owner when that is another user: the service user whose
/// keys directory it is must be able to read what root made there. Found by review: `sudo
/// assent keys rotate-token-key` on a service's keys directory left `token.key` and the
/// retired key root's, so the running gateways could not re-read the directory (they kept
/// signing with the old key while the command said they would switch within 10 s) and the
/// next start failed. A gateway never gives files away. By the handle, not the path.
#[cfg(unix)]
pub(crate) fn hand_to_dir_owner(file: &std::fs::File, dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let admin = ROOT_READS_SERVICE_KEYS.load(std::sync::atomic::Ordering::Relaxed);
    if !admin || std::fs::metadata(dir)?.uid() == 0 {
        return Ok(());
    }
    crate::owner::give_as_root(file, dir)
}

#[cfg(not(unix))]
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// Reads the private key file `path` (`None` when it does not exist) after checking that no
/// one but its owner can read or replace it: it must be owned by this process's user with no
/// group or other permission (0600, 0400), or by root with group read at the most (0640: a
/// secret a platform mounts for a group), the rule PostgreSQL applies to its TLS key; in an
/// administration command ([`crate::keys::let_root_read_service_keys`]) root may also read a
/// key another user owns (`assent audit verify` or `assent backup` on a service's keys), under
/// the same mode rule, never a gateway (found by review: a gateway running as root took keys
/// an unprivileged user owned, and could replace). Its directory must be
/// writable by no one but its owner (this user or root) unless sticky, else another could
/// swap the file (say, a retired key renamed to `token.key`). The mode and owner are those of
/// the file opened (following links, as a mounted secret is one), so a file swapped in
/// between cannot pass.
///
/// It must be a regular file, opened without blocking (found by review: a FIFO named
/// `token-retired-….key` hung the read for ever, holding the token keys' lock, so no token
/// could be minted or redeemed). In an administration command run by root, a key reached
/// through a symbolic link that is not root's, and in another user's directory a key owned by
/// neither root nor that user or a root-owned key with other hard links, are refused (found
/// by review: the service user linked `token.key` to a secret of root's, and `sudo assent
/// keys rotate-token-key` copied it into a retired key file it handed to the service user).
/// Errors: `Invalid` naming the file or directory, what is wrong and the `chmod`/`chown` that
/// mends it; `Io`.
pub(crate) fn read_key_file(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    use std::io::Read;
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut o,
        rustix::fs::OFlags::NONBLOCK.bits() as i32,
    );
    let mut f = match o.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let m = f.metadata().map_err(io(path))?;
    if !m.is_file() {
        return Err(StoreError::Invalid(format!(
            "{}: a private key must be a regular file, and this is not one (a FIFO, device or directory?)",
            path.display()
        )));
    }
    #[cfg(unix)]
    {
        check_private(path, &m)?;
        check_admin_read(path, &m)?;
    }
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(io(path))?;
    Ok(Some(bytes))
}

/// The further rules of [`read_key_file`] for root in an administration command reading
/// `path` (opened, with metadata `m`): no symbolic link of another user's on the way; in a
/// directory another user owns, the file root's or that user's, and a root-owned file linked
/// nowhere else (either could be a hard link to a third party's secret). Nothing to check for
/// a gateway or a user reading their own keys.
#[cfg(unix)]
fn check_admin_read(path: &Path, m: &std::fs::Metadata) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    if me != 0 || !ROOT_READS_SERVICE_KEYS.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let owner = std::fs::metadata(dir).map_err(io(dir))?.uid();
    let link = std::fs::symlink_metadata(path).map_err(io(path))?;
    let refuse = |why: &str| {
        Err(StoreError::Invalid(format!(
            "{}: {why}; root does not read it on the directory owner's behalf (it could be a link to another secret); replace it with the key file itself",
            path.display()
        )))
    };
    if link.file_type().is_symlink() && link.uid() != 0 {
        return refuse(&format!("a symbolic link of user id {}", link.uid()));
    }
    if owner != 0 && m.uid() != 0 && m.uid() != owner {
        return refuse(&format!(
            "owned by user id {}, neither root nor the directory's owner ({owner})",
            m.uid()
        ));
    }
    if m.uid() == 0 && owner != 0 && m.nlink() > 1 {
        return refuse("a root-owned file with other hard links, in another user's directory");
    }
    Ok(())
}

/// Whether root may read a key another user owns ([`crate::keys::let_root_read_service_keys`]).
static ROOT_READS_SERVICE_KEYS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Lets root read (under the mode rule) key files and directories another user owns.
pub(crate) fn let_root_read_service_keys() {
    ROOT_READS_SERVICE_KEYS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The owner and mode rules of [`read_key_file`] for `path` with metadata `m`.
#[cfg(unix)]
fn check_private(path: &Path, m: &std::fs::Metadata) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let admin = me == 0 && ROOT_READS_SERVICE_KEYS.load(std::sync::atomic::Ordering::Relaxed);
    let owned = |uid: u32| uid == me || uid == 0 || admin;
    let invalid = |what: String| Err(StoreError::Invalid(what));
    if !owned(m.uid()) {
        return invalid(format!(
            "{}: this private key belongs to user id {}, not to the user assent runs as ({me}) or root; run assent as its owner, or `chown {me} {}`",
            path.display(),
            m.uid(),
            path.display()
        ));
    }
    let mode = m.mode() & 0o7777;
    let allowed = if m.uid() == 0 { 0o037 } else { 0o077 };
    if mode & allowed != 0 {
        return invalid(format!(
            "{}: this private key has mode {mode:04o}, which lets {} read or change it; `chmod 600 {}`",
            path.display(),
            if mode & 0o007 != 0 {
                "every user"
            } else {
                "its group"
            },
            path.display()
        ));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let d = std::fs::metadata(dir).map_err(io(dir))?;
    let sticky = d.mode() & 0o1000 != 0;
    if (d.mode() & 0o022 != 0 && !sticky) || !owned(d.uid()) {
        return invalid(format!(
            "{}: users other than its owner may replace the key files in this directory (mode {:04o}, owner {}); `chmod go-w {}` and give it to the user assent runs as",
            dir.display(),
            d.mode() & 0o7777,
            d.uid(),
            dir.display()
        ));
    }
    Ok(())
}

/// Creates `dir` with mode 0700 (Unix; missing parents as `create_dir_all` makes them) when it
/// does not exist. An existing directory is never changed (found by review: it was chmod'ed
/// to 0700, so `sudo assent keys init --keys-dir /etc` made `/etc` root-only); it is refused
/// when users other than its owner may write it and it is not sticky (they could replace the
/// key files or the database in it), and a warning names it when they may read it. Errors:
/// `PermissionDenied` naming the directory, its mode and the `chmod` that mends it; I/O.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => return check_existing_dir(dir, &m),
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "not a directory",
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    match b.create(dir) {
        Ok(()) => {}
        // Made by another process meanwhile: checked as any existing directory.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return check_existing_dir(dir, &std::fs::metadata(dir)?);
        }
        Err(e) => return Err(e),
    }
    // Made here: 0700 whatever the umask left (it only takes bits away).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The rule of [`create_private_dir`] for an existing directory `dir` with metadata `m`.
fn check_existing_dir(dir: &Path, m: &std::fs::Metadata) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let mode = m.mode() & 0o7777;
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "users other than its owner may write this directory (mode {mode:04o}), so they could replace the key files or the database in it; assent changes no existing directory's mode: `chmod go-w {}`, or name a new directory",
                    dir.display()
                ),
            ));
        }
        if mode & 0o077 != 0 {
            tracing::warn!(dir = %dir.display(), mode = format!("{mode:04o}"), "an existing directory others may enter: its mode is left as it is (the key files are 0600; `chmod 700` it to keep the database file private too)");
        }
    }
    #[cfg(not(unix))]
    let _ = (dir, m);
    Ok(())
}

/// Places `bytes` at `<dir>/<name>` (mode 0600) only when nothing is there yet: written and
/// synced to a temporary file of a random name, hard-linked to `name` (which fails when the
/// name exists: nothing is replaced, a link planted there is not followed), the temporary
/// name removed and the directory synced. On a filesystem without hard links (the link fails
/// with `EPERM`, `EOPNOTSUPP`, `EXDEV`, `ENOSYS` or `EMLINK`: some network, FUSE and
/// container volumes) the file is created at `name` exclusively instead
/// ([`create_private_new`]), which replaces nothing either. Returns whether it was placed
/// now (`false`: something was there — another process placed it first; the caller reads
/// what is there). Found by review: keys were checked for, then written to a fixed
/// temporary name and renamed over the name, so two `assent keys init` at once (init
/// containers on a shared volume) each printed, and signed with, a key the other had
/// replaced; and (later review) `assent keys init` failed outright where hard links are not
/// made. Errors: I/O.
pub(crate) fn place_private(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<bool> {
    place_with(dir, name, bytes, |from, to| std::fs::hard_link(from, to))
}

/// [`place_private`] with `link` making the hard link (a test forces its failure).
fn place_with(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    link: impl FnOnce(&Path, &Path) -> std::io::Result<()>,
) -> std::io::Result<bool> {
    let tmp = dir.join(random_id(&format!(".{name}.tmp-")));
    write_private(&tmp, bytes)?;
    let linked = link(&tmp, &dir.join(name));
    let removed = std::fs::remove_file(&tmp);
    let placed = match linked {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) if no_hard_links(&e) => {
            removed?;
            return create_private_new(dir, name, bytes);
        }
        Err(e) => return Err(e),
    };
    removed?;
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(placed)
}

/// Whether `link()` failed with `e` because the filesystem makes no hard link there.
fn no_hard_links(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        use rustix::io::Errno;
        let no = [
            Errno::PERM,
            Errno::OPNOTSUPP,
            Errno::NOTSUP,
            Errno::XDEV,
            Errno::NOSYS,
            Errno::MLINK,
        ];
        Errno::from_io_error(e).is_some_and(|x| no.contains(&x))
    }
    #[cfg(not(unix))]
    {
        e.kind() == std::io::ErrorKind::Unsupported
    }
}

/// Creates `<dir>/<name>` exclusively (`O_CREAT|O_EXCL`, mode 0600: neither an existing file
/// nor a link planted there is written through), writes `bytes`, syncs it and the directory.
/// `Ok(false)` when the name exists. A file left short by a failed write is removed. The
/// content is written after the name appears, so a concurrent reader may find it empty for a
/// moment (a key file reader then refuses it as damaged: nothing short is ever signed with).
/// Errors: I/O.
fn create_private_new(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<bool> {
    use std::io::Write;
    let path = dir.join(name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = match opts.open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    #[cfg(unix)]
    let handed = hand_to_dir_owner(&f, dir);
    #[cfg(not(unix))]
    let handed = Ok(());
    if let Err(e) = handed
        .and_then(|()| f.write_all(bytes))
        .and_then(|()| f.sync_all())
    {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(true)
}

/// JSON text of a serialisable value, for JSON columns (every value the store writes
/// serialises; a failure is a bug).
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(x: &T) -> String {
    serde_json::to_string(x).expect("serialisable")
}

#[cfg(test)]
mod tests {
    use super::{ordered_id, ordered_uuid, place_with};

    /// `assent keys init` on a filesystem without hard links (found by review: it failed
    /// there): the key is created in place, private, and still never replaces anything.
    #[cfg(unix)]
    #[test]
    fn a_key_is_placed_without_hard_links_and_still_replaces_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let no_links = |_: &std::path::Path, _: &std::path::Path| {
            Err(std::io::Error::from_raw_os_error(1)) // EPERM
        };
        assert!(place_with(d, "k.key", b"first", no_links).unwrap());
        assert!(!place_with(d, "k.key", b"second", no_links).unwrap());
        let path = d.join("k.key");
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["k.key"], "no temporary file left");
        // A link planted at the name is not written through.
        std::os::unix::fs::symlink(d.join("target"), d.join("l.key")).unwrap();
        assert!(!place_with(d, "l.key", b"x", no_links).unwrap());
        assert!(!d.join("target").exists());
        // Any other link failure is an error, nothing placed.
        let denied = |_: &std::path::Path, _: &std::path::Path| {
            Err(std::io::Error::from_raw_os_error(13)) // EACCES
        };
        assert!(place_with(d, "m.key", b"x", denied).is_err());
        assert!(!d.join("m.key").exists());
    }

    #[test]
    fn ordered_ids_sort_by_time_and_differ_within_a_millisecond() {
        let a = ordered_id("evt_", 1_700_000_000_000);
        let b = ordered_id("evt_", 1_700_000_000_000);
        let c = ordered_id("evt_", 1_700_000_000_001);
        assert_ne!(a, b, "128 random bits follow the time");
        assert!(a < c && b < c, "{a} {b} {c}");
        assert_eq!(a.len(), 4 + 12 + 32);
        assert!(a[4..].bytes().all(|x| x.is_ascii_hexdigit()));
        // Out-of-range times are clamped, never wider or negative.
        assert!(ordered_id("rpl_", -5).starts_with("rpl_000000000000"));
        assert!(ordered_id("rpl_", i64::MAX).starts_with("rpl_ffffffffffff"));
    }

    /// The approvals' ids (and decisions', tokens') sort by time and still match MPLP's
    /// identifier pattern (version 4, variant 10xx).
    #[test]
    fn ordered_uuids_sort_by_time_and_keep_the_version_4_form() {
        let a = ordered_uuid(1_700_000_000_000);
        let b = ordered_uuid(1_700_000_000_000);
        let c = ordered_uuid(1_700_000_000_001);
        assert_ne!(a, b, "74 random bits follow the time");
        assert!(a < c && b < c, "{a} {b} {c}");
        let u = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(u.get_version_num(), 4);
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(a, u.to_string(), "lowercase, hyphenated");
        assert!(a.starts_with("018bcfe5-6800-4"), "{a}");
        assert!(ordered_uuid(-5).starts_with("00000000-0000-4"));
        assert!(ordered_uuid(i64::MAX).starts_with("ffffffff-ffff-4"));
    }

    /// A clock is in step only when it surely is: the difference from the round trip's
    /// midpoint plus half the round trip stays within the bound. Attack (found by review):
    /// the round trip was added to the bound, so a database slowed to answer in 4 s let a
    /// replica 4 s off write.
    #[test]
    fn a_clock_is_in_step_only_when_the_round_trip_cannot_hide_a_skew() {
        use super::{MAX_CLOCK_SKEW_MS as MAX, skewed};
        let t = 1_700_000_000_000;
        assert_eq!(skewed(t, t + MAX, t), None);
        assert_eq!(skewed(t, t - MAX, t), None);
        assert!(skewed(t, t + MAX + 1, t).unwrap().contains("behind"));
        assert!(skewed(t, t - MAX - 1, t).unwrap().contains("ahead of"));
        // A 400 ms round trip: its midpoint 200 ms in, so at most 1,800 ms off that.
        assert_eq!(skewed(t, t + 200 + MAX - 200, t + 400), None);
        let off = skewed(t, t + 200 + MAX - 199, t + 400).unwrap();
        assert!(off.contains("give or take 200 ms"), "{off}");
        // A round trip of twice the bound tells nothing, even when the clocks agree.
        assert!(skewed(t, t + MAX + 1, t + 2 * MAX + 2).is_some());
        // A clock stepped back 4 s during the query: the round trip counts as 4 s.
        assert!(skewed(t, t, t - 2 * MAX).is_some());
        // Extremes neither panic nor pass.
        assert!(skewed(0, i64::MAX, 0).is_some());
        assert!(skewed(i64::MAX, i64::MIN, i64::MAX).is_some());
        assert!(skewed(i64::MIN, 0, i64::MAX).is_some());
    }
}

/// `<data_dir>/assent.lock`, locked (`flock`) while held: shared by every store open on the
/// SQLite database of `data_dir` (a gateway, an administration command), exclusive by a
/// restore. Found by review: a gateway started while a restore ran opened the old file,
/// waited on its lock, then served the database the restore had just set aside (and spent
/// the restore's marker on it, leaving the restored copy's tokens unvoided).
#[derive(Debug)]
pub struct DataDirLock(#[allow(dead_code)] std::fs::File);

/// The lock file's name in `data_dir`.
pub const DATA_LOCK_FILE: &str = "assent.lock";

/// How long opening a store waits for a restore to finish.
const DATA_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

impl DataDirLock {
    /// Opens `<data_dir>/assent.lock` read-only (a lock needs no more), creating it first
    /// when missing: mode 0644 (the 0700 directory keeps it private) and, when root creates
    /// it, owned by the directory's owner — found by review: created 0600 by root running an
    /// administration command on a service user's data directory, it kept the service from
    /// starting.
    fn file(data_dir: &Path) -> Result<std::fs::File, StoreError> {
        let path = data_dir.join(DATA_LOCK_FILE);
        let mut create = std::fs::OpenOptions::new();
        create.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            create.mode(0o644);
        }
        match create.open(&path) {
            Ok(created) => {
                // By the handle, not the path (found by review: the directory's owner could
                // swap the name for a link to another file between the two).
                #[cfg(unix)]
                crate::owner::give_as_root(&created, data_dir).map_err(io(&path))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&path)(e)),
        }
        let mut open = std::fs::OpenOptions::new();
        open.read(true);
        // Neither through a link nor waiting on a pipe planted under the name.
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
            open.custom_flags(flags.bits() as i32);
        }
        open.open(&path).map_err(io(&path))
    }

    /// Shared, for a store: waits while a restore holds it (at most [`DATA_LOCK_WAIT`], then
    /// `Invalid` saying so).
    pub(crate) fn shared(data_dir: &Path) -> Result<Self, StoreError> {
        let f = Self::file(data_dir)?;
        let until = std::time::Instant::now() + DATA_LOCK_WAIT;
        let mut told = false;
        loop {
            match f.try_lock_shared() {
                Ok(()) => return Ok(DataDirLock(f)),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                    if !told {
                        tracing::warn!(data_dir = %data_dir.display(), "a restore holds the data directory: waiting for it to finish");
                        told = true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(StoreError::Invalid(format!(
                        "{}: a restore has held {DATA_LOCK_FILE} for over {} s; not opened",
                        data_dir.display(),
                        DATA_LOCK_WAIT.as_secs()
                    )));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(io(&data_dir.join(DATA_LOCK_FILE))(e));
                }
            }
        }
    }

    /// Exclusive, for a restore: `Invalid` at once while anything holds it.
    pub(crate) fn exclusive(data_dir: &Path) -> Result<Self, StoreError> {
        let f = Self::file(data_dir)?;
        match f.try_lock() {
            Ok(()) => Ok(DataDirLock(f)),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Invalid(format!(
                "{} is in use: a gateway (or another assent command) has its database open; stop the gateway before restoring",
                data_dir.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(io(&data_dir.join(DATA_LOCK_FILE))(e)),
        }
    }
}

/// The most this replica's clock may differ from the database's (ms) and the replica still be
/// ready (`/readyz`) and write (each write transaction's check on PostgreSQL,
/// `config_serving.rs`): replicas compare the times they write (approvals' and tokens'
/// expiry, leases, the shared sign-in allowance) with each other's, so one whose clock runs
/// minutes fast would expire approvals early and one running slow take decisions and redeem
/// tokens late.
pub const MAX_CLOCK_SKEW_MS: i64 = 2_000;

/// Why this process's clock, read at `before` and `after` (Unix ms) around a query that read
/// the database's at `db`, may differ from it by more than [`MAX_CLOCK_SKEW_MS`]: the
/// difference from the round trip's midpoint plus half the round trip (the database read its
/// clock somewhere in it); `None` when it cannot. Fails closed: a round trip over twice the
/// bound tells nothing and is refused (found by review: the round trip was added to the
/// bound, so a slow answer let a clock off by the bound plus the whole round trip pass).
pub(crate) fn skewed(before: i64, db: i64, after: i64) -> Option<String> {
    let skew = db.saturating_sub(before / 2 + after / 2);
    // A clock stepped back during the query gives a negative round trip: as long a one
    // counts (found by review: taken as none, a step back of 4 s passed a clock 4 s off).
    let half = after.saturating_sub(before).saturating_abs() / 2;
    if skew.saturating_abs().saturating_add(half) <= MAX_CLOCK_SKEW_MS {
        return None;
    }
    let (by, way) = (
        skew.saturating_abs(),
        if skew > 0 { "behind" } else { "ahead of" },
    );
    Some(format!(
        "this replica's clock is {by} ms {way} the database's, give or take {half} ms (at most {MAX_CLOCK_SKEW_MS} ms is allowed): approvals, tokens and leases would expire early or late here; synchronise it (NTP)"
    ))
}
