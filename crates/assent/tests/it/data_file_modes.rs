//! The data directory's database files as a user finds them: `assent.db` and the `-wal` and
//! `-shm` files SQLite gives its mode are private (0600) whatever the umask and the
//! directory's mode, and root's administration commands leave them to the directory's owner;
//! and `assent backup --force` never replaces the audit checkpoint file's symbolic link.

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A file's permission bits.
fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `assent ARGS…` run under umask 022 (the usual one, which leaves a file SQLite creates
/// 0644), whatever the test runner's umask is.
fn umask_022(args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", "umask 022 && exec \"$0\" \"$@\"", BIN])
        .args(args);
    c
}

/// [`umask_022`] run to its end; it must succeed.
#[track_caller]
fn umask_ok(args: &[&str]) {
    ok(&umask_022(args).output().unwrap());
}

/// The service user of the root-only tests (its uid, and its gid too).
const SERVICE_UID: u32 = 4243;

/// For the root-only tests: a fresh directory and in it a service user's data directory
/// (`svc`, 0700, owned by uid and gid [`SERVICE_UID`]); `None` when the tests do not run as
/// root (nobody else may give a file away, so those tests pass without running).
fn root_and_service_dir() -> Option<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    if std::fs::metadata(dir.path()).unwrap().uid() != 0 {
        return None;
    }
    let data = dir.path().join("svc");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&data, Some(SERVICE_UID), Some(SERVICE_UID)).unwrap();
    Some((dir, data))
}

/// [`root_and_service_dir`] with the data directory's database made by root (`assent migrate`
/// under umask 022).
fn migrated_service_dir() -> Option<(tempfile::TempDir, PathBuf)> {
    let (dir, data) = root_and_service_dir()?;
    umask_ok(&["migrate", "--data-dir", data.to_str().unwrap()]);
    Some((dir, data))
}

/// [`migrated_service_dir`] backed up by root (`assent backup` under umask 022) to
/// `copy.db` beside the data directory: the directory, the data directory and the copy.
fn backed_up_service_dir() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let (dir, data) = migrated_service_dir()?;
    let copy = dir.path().join("copy.db");
    umask_ok(&[
        "backup",
        "--data-dir",
        data.to_str().unwrap(),
        copy.to_str().unwrap(),
    ]);
    Some((dir, data, copy))
}

/// [`migrated_service_dir`] and beside it `backups`, a directory another user owns
/// ([`others_dir`]): the directory, the data directory and `backups`.
fn service_dir_and_others_backups() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let (dir, data) = migrated_service_dir()?;
    let outdir = others_dir(dir.path(), "backups");
    Some((dir, data, outdir))
}

/// A new directory `name` in `dir` owned by another low-privilege user (uid and gid 4244).
fn others_dir(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir(&p).unwrap();
    std::os::unix::fs::chown(&p, Some(4244), Some(4244)).unwrap();
    p
}

/// Asserts that `p` is a regular file of the service user (uid and gid [`SERVICE_UID`]),
/// 0600; `what` says what failed.
#[track_caller]
fn services_private(p: &Path, what: &str) {
    let m = std::fs::symlink_metadata(p).unwrap();
    assert!(m.is_file(), "{what}: {} is no regular file", p.display());
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o7777),
        (SERVICE_UID, SERVICE_UID, 0o600),
        "{what}"
    );
}

/// Asserts that the database files of `data` (those that exist, `assent.db` at least) are
/// 0600.
#[track_caller]
fn private(data: &Path, files: &[&str]) {
    for f in files {
        let p = data.join(f);
        assert_eq!(mode(&p), 0o600, "{} is readable by others", p.display());
    }
}

/// Found by review: SQLite created `assent.db` 0644 under umask 022 (and its `-wal` and
/// `-shm` files with the same mode), so in an existing data directory others may enter (kept
/// with a warning) every local user could read every held call's arguments, the tokens'
/// hashes and the sessions. A gateway serving a fresh 0755 data directory now makes all
/// three 0600; the directory keeps its mode; a backup and the database a restore puts in
/// place are 0600 too.
#[test]
fn local_users_cannot_read_the_database_of_a_data_directory_they_may_enter() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), port, "");
    let c = cfg.to_str().unwrap();
    let s = serve_with(umask_022(&["serve", "--config", c]), port);
    approved(&s.url, 5000);
    // While it serves, the write-ahead log and its index exist beside the database.
    private(&data, &["assent.db", "assent.db-wal", "assent.db-shm"]);
    assert_eq!(mode(&data), 0o755, "an existing directory keeps its mode");
    stop(s);
    // `assent migrate` on a fresh directory of its own: the same.
    let fresh = dir.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
    umask_ok(&["migrate", "--data-dir", fresh.to_str().unwrap()]);
    private(&fresh, &["assent.db"]);
    // A backup, and the database a restore puts in place (and the one it sets aside).
    let copy = dir.path().join("copy.db");
    umask_ok(&["backup", "--config", c, copy.to_str().unwrap()]);
    assert_eq!(mode(&copy), 0o600);
    let restore = [
        "restore",
        "--data-dir",
        data.to_str().unwrap(),
        "--allow-outstanding-tokens",
        copy.to_str().unwrap(),
    ];
    umask_ok(&restore);
    private(&data, &["assent.db"]);
    for e in std::fs::read_dir(&data).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().contains("before-restore") {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
    // The restored database served again: its new write-ahead log is private as well.
    let s = serve_with(umask_022(&["serve", "--config", c]), port);
    approved(&s.url, 5000);
    private(&data, &["assent.db", "assent.db-wal", "assent.db-shm"]);
    stop(s);
}

/// The same fix run by root (`sudo assent migrate` on a service user's fresh data directory):
/// the 0600 database root creates is given to the directory's owner, else the service could
/// not open it. Only as root: nobody else may give a file away.
#[test]
fn root_migrating_a_service_users_data_directory_leaves_the_database_to_that_user() {
    let Some((_dir, data)) = root_and_service_dir() else {
        return;
    };
    umask_ok(&["migrate", "--data-dir", data.to_str().unwrap()]);
    services_private(
        &data.join("assent.db"),
        "the database is not the service user's",
    );
}

/// Found by review: `sudo assent keys rotate-token-key` (or `keys init`) on a service user's
/// keys directory left the new `token.key` and the retired key root's, so the service's
/// gateways could not re-read the directory (they kept signing with the old key, while the
/// command said they would switch) and the next start failed. The key files root makes there
/// are the directory owner's, 0600. Only as root.
#[test]
fn root_making_or_rotating_a_service_users_keys_leaves_them_to_that_user() {
    let Some((_dir, keys)) = root_and_service_dir() else {
        return;
    };
    let k = keys.to_str().unwrap();
    umask_ok(&["keys", "init", "--keys-dir", k]);
    umask_ok(&["keys", "rotate-token-key", "--keys-dir", k]);
    let mut files: Vec<_> = std::fs::read_dir(&keys)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.starts_with("token-retired-")),
        "{files:?}"
    );
    for f in &files {
        services_private(&keys.join(f), f);
    }
}

/// Attack (found by review): the service user owning a keys directory replaced `token.key`
/// (or `audit.key`) with a symbolic link to a 32-byte secret of root's; root's scheduled
/// `assent keys rotate-token-key` read the secret through it and wrote it into the retired
/// key file it hands to the service user, who then read root's secret. Root's administration
/// commands refuse a key reached through another user's link, and leave no copy. Only as root.
#[test]
fn root_never_copies_a_secret_a_service_users_key_link_points_to() {
    let Some((dir, keys)) = root_and_service_dir() else {
        return;
    };
    let k = keys.to_str().unwrap();
    umask_ok(&["keys", "init", "--keys-dir", k]);
    let secret = dir.path().join("root-secret");
    let bytes = [0x5au8; 32];
    std::fs::write(&secret, bytes).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (file, args) in [
        (
            "token.key",
            vec!["keys", "rotate-token-key", "--keys-dir", k],
        ),
        ("audit.key", vec!["audit", "key", "--keys-dir", k]),
    ] {
        let key = keys.join(file);
        std::fs::remove_file(&key).unwrap();
        std::os::unix::fs::symlink(&secret, &key).unwrap();
        std::os::unix::fs::lchown(&key, Some(SERVICE_UID), Some(SERVICE_UID)).unwrap();
        let out = umask_022(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{file}: read through the link: {err}"
        );
        assert!(
            err.contains(key.to_str().unwrap()) && err.contains("symbolic link"),
            "{err}"
        );
        for e in std::fs::read_dir(&keys).unwrap() {
            let p = e.unwrap().path();
            let copied = std::fs::symlink_metadata(&p).unwrap().is_file()
                && std::fs::read(&p).unwrap() == bytes;
            assert!(!copied, "{file}: root's secret copied to {}", p.display());
        }
        // Put a key of the service's own back for the next round.
        std::fs::remove_file(&key).unwrap();
        std::fs::write(&key, [7u8; 32]).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&key, Some(SERVICE_UID), Some(SERVICE_UID)).unwrap();
    }
}

/// Found by review: root restoring a backup into a service user's data directory renamed its
/// own 0600 copy into place, owned by root, so the service could not open its database. The
/// restored file is the directory owner's, 0600. Only as root.
#[test]
fn root_restoring_into_a_service_users_data_directory_leaves_the_database_to_that_user() {
    let Some((_dir, data, copy)) = backed_up_service_dir() else {
        return;
    };
    let (d, c) = (data.to_str().unwrap(), copy.to_str().unwrap());
    umask_ok(&["restore", "--data-dir", d, "--force", c]);
    services_private(
        &data.join("assent.db"),
        "the restored database is not the service user's",
    );
}

/// Found by review: the `--out` guard compared the output's place with the checkpoint file
/// resolved through its links, so with `audit_checkpoints.file` a symbolic link (or a link
/// to a link), `assent backup --force LINK` renamed a database copy over the configured link.
/// Refused now, naming the checkpoint file, for the link and each link on its way (and the
/// resolved file), by `backup` and `export learning-samples` alike; the links are unchanged.
#[test]
fn a_forced_backup_never_replaces_the_checkpoint_files_symbolic_link() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    std::fs::create_dir(&ck).unwrap();
    let real = ck.join("checkpoints.jsonl");
    std::fs::write(&real, "").unwrap();
    // configured → hop (relative) → checkpoints.jsonl
    let hop = ck.join("hop.jsonl");
    std::os::unix::fs::symlink("checkpoints.jsonl", &hop).unwrap();
    let configured = dir.path().join("audit-checkpoints.jsonl");
    std::os::unix::fs::symlink(&hop, &configured).unwrap();
    let port = free_port();
    let cfg = write_config(
        dir.path(),
        port,
        &format!(
            "audit_checkpoints: {{every_records: 1, every_seconds: 1, file: {}}}\n",
            configured.display()
        ),
    );
    let s = serve(&cfg, port);
    approved(&s.url, 5000);
    let c = cfg.to_str().unwrap();
    let via_dots = ck.join("..").join("audit-checkpoints.jsonl");
    for out in [&configured, &hop, &real, &via_dots] {
        let o = out.to_str().unwrap();
        let tries = [
            run(&["backup", "--config", c, "--force", o]),
            run(&["export", "learning-samples", "--config", c, "--out", o]),
        ];
        for t in tries {
            let err = String::from_utf8_lossy(&t.stderr);
            assert_eq!(t.status.code(), Some(1), "{o}: {err}");
            assert!(
                err.contains("is the audit checkpoint file")
                    && err.contains(configured.to_str().unwrap()),
                "{o}: {err}"
            );
        }
    }
    assert_eq!(std::fs::read_link(&configured).unwrap(), hop);
    assert_eq!(
        std::fs::read_link(&hop).unwrap(),
        Path::new("checkpoints.jsonl")
    );
    assert!(std::fs::symlink_metadata(&real).unwrap().is_file());
    // A file beside them is written as asked.
    let beside = ck.join("copy.db");
    ok(&run(&["backup", "--config", c, beside.to_str().unwrap()]));
    stop(s);
}

/// Asserts that `out` failed naming `db` and the refusal to follow it.
#[track_caller]
fn refused_link(out: &std::process::Output, db: &Path) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "followed the link: {err}");
    assert!(
        err.contains(db.to_str().unwrap()) && err.contains("refusing to follow"),
        "{err}"
    );
}

/// Found by review: the database's file was created exclusively but an existing name was
/// opened by SQLite, which follows a symbolic link, so the service user owning a data
/// directory could run `ln -s /etc/nologin DATA/assent.db`, and root's `assent migrate`
/// (or `serve`, `passkeys enrol`) created `/etc/nologin` with the schema (or wrote it into
/// an existing file). Refused now, naming the link: a dangling link's target is not
/// created, an existing target is unchanged, and so for a link to a link and for a hard link
/// to a root-owned file. Only as root (the attack is on root; the refusal is everyone's,
/// checked first as root too).
#[test]
fn root_never_follows_a_database_link_planted_in_a_service_users_data_directory() {
    let Some((dir, data)) = root_and_service_dir() else {
        return;
    };
    let d = data.to_str().unwrap();
    let db = data.join("assent.db");
    // Dangling: the target must not come into being.
    let victim = dir.path().join("victim");
    std::os::unix::fs::symlink(&victim, &db).unwrap();
    refused_link(
        &umask_022(&["migrate", "--data-dir", d]).output().unwrap(),
        &db,
    );
    assert!(
        std::fs::symlink_metadata(&victim).is_err(),
        "target created"
    );
    for side in ["-wal", "-shm", "-journal"] {
        let p = dir.path().join(format!("victim{side}"));
        assert!(std::fs::symlink_metadata(&p).is_err(), "{}", p.display());
    }
    // An existing file, directly and through a second link: unchanged.
    std::fs::write(&victim, "root's file\n").unwrap();
    let hop = dir.path().join("hop");
    std::os::unix::fs::symlink(&victim, &hop).unwrap();
    for target in [&victim, &hop] {
        std::fs::remove_file(&db).unwrap();
        std::os::unix::fs::symlink(target, &db).unwrap();
        refused_link(
            &umask_022(&["migrate", "--data-dir", d]).output().unwrap(),
            &db,
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
    }
    // A hard link to an empty root-owned file (where the system lets users make one).
    std::fs::remove_file(&db).unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    std::fs::hard_link(&empty, &db).unwrap();
    let out = umask_022(&["migrate", "--data-dir", d]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("other hard links"));
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "written through"
    );
    // A data directory reached through a link still works, and a regular file opens.
    std::fs::remove_file(&db).unwrap();
    let via = dir.path().join("via");
    std::os::unix::fs::symlink(&data, &via).unwrap();
    umask_ok(&["migrate", "--data-dir", via.to_str().unwrap()]);
    assert!(std::fs::symlink_metadata(&db).unwrap().is_file());
    umask_ok(&["migrate", "--data-dir", d]);
}

/// Found by review: root's backup copy was given to the owner of the directory it was
/// written to (meant for restore, which gives the copy to the data directory's owner), so
/// `sudo assent backup /srv/backups/a.db` with `/srv/backups` owned by a low-privilege
/// account handed that account the whole database. Root's backup stays root's, 0600; a
/// restore still leaves the database to the data directory's owner. Only as root.
#[test]
fn root_backup_into_another_users_directory_is_not_given_to_that_user() {
    let Some((_dir, data, outdir)) = service_dir_and_others_backups() else {
        return;
    };
    let d = data.to_str().unwrap();
    let copy = outdir.join("b.db");
    let c = copy.to_str().unwrap();
    umask_ok(&["backup", "--data-dir", d, c]);
    let m = std::fs::metadata(&copy).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 0, 0o600));
    umask_ok(&["restore", "--data-dir", d, "--force", c]);
    services_private(&data.join("assent.db"), "the restored database");
}

/// An inotify watch of the names made (created or moved in) in `dir`, for [`made_in`].
fn watch_made(dir: &Path) -> rustix::fd::OwnedFd {
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    let watch = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&watch, dir, WatchFlags::CREATE | WatchFlags::MOVED_TO).unwrap();
    watch
}

/// The names made in the directory watched by `inotify` (created or moved in) since it was
/// watched, each with whether it was a directory.
fn made_in(inotify: &rustix::fd::OwnedFd) -> Vec<(String, bool)> {
    use rustix::fs::inotify::{ReadFlags, Reader};
    let mut buf = [std::mem::MaybeUninit::uninit(); 8192];
    let mut r = Reader::new(inotify, &mut buf);
    let mut made = Vec::new();
    while let Ok(e) = r.next() {
        if e.events()
            .intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
        {
            let name = e.file_name().map(|n| n.to_string_lossy().into_owned());
            made.push((
                name.unwrap_or_default(),
                e.events().contains(ReadFlags::ISDIR),
            ));
        }
    }
    made
}

/// Found by review: root's backup was staged in `OUTDIR/.assent-backup-<random>/assent.db`
/// and worked on by path, so the owner of OUTDIR (a low-privilege account) could rename
/// root's staging directory away and put one of theirs under its name holding an `assent.db`
/// symbolic link (root then wrote the copy where it pointed, e.g. into `/etc/cron.d`) or a
/// file they could read (root wrote the whole database into it). The swap's timing cannot be
/// forced, so the test asserts the property that rules it out: into a directory another
/// user owns, root makes no directory and nothing but one new temporary file (made through
/// a handle) and the final name; the directory then holds only the copy, root's, 0600; and
/// a symbolic link planted at the name is replaced with `--force`, its target unchanged.
/// Only as root (Linux: the directory is watched with inotify).
#[test]
fn root_backup_into_a_directory_another_user_owns_stages_nothing_that_user_could_swap() {
    let Some((dir, data, outdir)) = service_dir_and_others_backups() else {
        return;
    };
    let d = data.to_str().unwrap();
    std::fs::set_permissions(&outdir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = outdir.join("x.db");
    let c = copy.to_str().unwrap();
    let watch = watch_made(&outdir);
    umask_ok(&["backup", "--data-dir", d, c]);
    let made = made_in(&watch);
    assert!(
        made.iter().all(|(n, is_dir)| !is_dir
            && (n == "x.db" || (n.starts_with(".assent-backup-") && n.ends_with(".tmp")))),
        "root staged in a directory another user may change: {made:?}"
    );
    let names: Vec<_> = std::fs::read_dir(&outdir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["x.db"]);
    let m = std::fs::symlink_metadata(&copy).unwrap();
    assert!(m.is_file());
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 0, 0o600));
    // The copy is a whole database: `audit verify` on it passes.
    let check = dir.path().join("check");
    std::fs::create_dir(&check).unwrap();
    std::fs::copy(&copy, check.join("assent.db")).unwrap();
    ok(&run(&[
        "audit",
        "verify",
        "--data-dir",
        check.to_str().unwrap(),
    ]));
    // A link planted at the name: without --force refused, with it replaced, not followed.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "root's file\n").unwrap();
    std::fs::remove_file(&copy).unwrap();
    std::os::unix::fs::symlink(&victim, &copy).unwrap();
    let refused = umask_022(&["backup", "--data-dir", d, c]).output().unwrap();
    assert!(!refused.status.success());
    umask_ok(&["backup", "--data-dir", d, "--force", c]);
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"root's file\n",
        "the link was followed"
    );
    let m = std::fs::symlink_metadata(&copy).unwrap();
    assert!(m.is_file(), "the link was kept");
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o600));
    assert_eq!(made_in(&watch).iter().filter(|(_, d)| *d).count(), 0);
}

/// Found by review: the offline readers (`assent audit verify`, `backup`'s source side,
/// exports) opened `DATA/assent.db` by a plain path, so a symbolic link the data directory's
/// owner planted there was followed (by root, too): `audit verify` reported on, and
/// `backup` copied, whatever database the link pointed to. Refused now, naming the link, the
/// target untouched; a dangling link is refused the same way. Run by any user (the refusal
/// is everyone's).
#[test]
fn audit_verify_and_backup_never_follow_a_database_link_in_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    ok(&run(&["migrate", "--data-dir", other.to_str().unwrap()]));
    let target = other.join("assent.db");
    let before = std::fs::read(&target).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let d = data.to_str().unwrap();
    let db = data.join("assent.db");
    std::os::unix::fs::symlink(&target, &db).unwrap();
    let out = dir.path().join("copy.db");
    for args in [
        vec!["audit", "verify", "--data-dir", d],
        vec!["backup", "--data-dir", d, out.to_str().unwrap()],
    ] {
        refused_link(&run(&args), &db);
    }
    assert_eq!(std::fs::read(&target).unwrap(), before, "target changed");
    assert!(std::fs::symlink_metadata(&out).is_err(), "copy written");
    std::fs::remove_file(&db).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &db).unwrap();
    refused_link(&run(&["audit", "verify", "--data-dir", d]), &db);
}

/// Found by review: root's restore into a service user's data directory staged the copy in
/// `DATA/.assent-restore-<random>/assent.db` and worked on it by path (SQLite's backup API,
/// ending the sign-ins, the checks, the rename), so that user, owning DATA, could rename
/// root's staging directory away and put one of theirs under its name with an `assent.db`
/// link: root then wrote the backup's contents (text agents control) where it pointed, e.g.
/// into `/etc/cron.d`. The swap's timing cannot be forced, so the test asserts the property
/// that rules it out: root makes no directory in DATA, only a temporary file (made through a
/// handle) and `assent.db` (and the replaced database kept aside, a hard link); the result is
/// the service user's, 0600, and verifies. And the live `assent.db` was opened and
/// hard-linked by path: a symbolic link there to a root file is now refused, naming it, the
/// file unchanged. With TMPDIR another user may change, the restore is refused naming it.
/// Only as root (Linux: DATA is watched with inotify).
#[test]
fn root_restore_into_a_service_users_data_directory_stages_nothing_that_user_could_swap() {
    let Some((dir, data, copy)) = backed_up_service_dir() else {
        return;
    };
    let (d, c) = (data.to_str().unwrap(), copy.to_str().unwrap());
    let watch = watch_made(&data);
    let restore = |extra: &[(&str, &Path)]| {
        let mut cmd = umask_022(&["restore", "--data-dir", d, "--force", c]);
        cmd.envs(extra.iter().copied());
        cmd.output().unwrap()
    };
    ok(&restore(&[]));
    // Besides: SQLite's rollback journal of the live database while it is taken and its log
    // folded in (opened by SQLite with `O_NOFOLLOW`, as any command working on DATA does).
    let made = made_in(&watch);
    assert!(
        made.iter().all(|(n, is_dir)| !is_dir
            && (n == "assent.db"
                || n == "assent.db-journal"
                || n.starts_with("assent.db.before-restore-")
                || (n.starts_with(".assent-restore-") && n.ends_with(".tmp")))),
        "root staged in a directory another user may change: {made:?}"
    );
    assert!(made.iter().any(|(n, _)| n == "assent.db"), "{made:?}");
    let left: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".assent-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let db = data.join("assent.db");
    services_private(&db, "the restored database is not the service user's");
    ok(&run(&["audit", "verify", "--data-dir", d]));
    // A link planted at the live database's name: refused, naming it, its target unchanged.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "root's file\n").unwrap();
    std::fs::remove_file(&db).unwrap();
    std::os::unix::fs::symlink(&victim, &db).unwrap();
    refused_link(&restore(&[]), &db);
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's file\n");
    assert!(std::fs::symlink_metadata(&db).unwrap().is_symlink());
    for side in ["-wal", "-shm", "-journal"] {
        let p = dir.path().join(format!("victim{side}"));
        assert!(std::fs::symlink_metadata(&p).is_err(), "{}", p.display());
    }
    // A temporary directory another user may change: refused, naming TMPDIR.
    std::fs::remove_file(&db).unwrap();
    let tmp = others_dir(dir.path(), "tmp");
    let out = restore(&[("TMPDIR", &tmp)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("TMPDIR"), "{err}");
    assert!(std::fs::symlink_metadata(&db).is_err(), "restored");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}

/// Found by review: root restoring a backup with outstanding tokens into a service user's
/// data directory wrote the restore's marker (the next start voids the tokens) 0600 and
/// root's, so the service's gateway could not read it and did not start. It is the data
/// directory owner's now, written through the handle. Only as root.
#[test]
fn root_restore_leaves_the_token_voiding_marker_to_the_service_user() {
    let Some((dir, data)) = root_and_service_dir() else {
        return;
    };
    let port = free_port();
    let cfg = write_config(dir.path(), port, "");
    let c = cfg.to_str().unwrap();
    let s = serve_with(umask_022(&["serve", "--config", c]), port);
    approved(&s.url, 5000);
    let copy = dir.path().join("copy.db");
    let b = copy.to_str().unwrap();
    umask_ok(&["backup", "--config", c, b]);
    stop(s);
    let d = data.to_str().unwrap();
    umask_ok(&[
        "restore",
        "--data-dir",
        d,
        "--force",
        "--allow-outstanding-tokens",
        b,
    ]);
    let m = std::fs::symlink_metadata(data.join(assent_store::voided::MARKER)).unwrap();
    assert!(m.is_file());
    assert_eq!(
        (m.uid(), m.gid()),
        (SERVICE_UID, SERVICE_UID),
        "the marker is root's"
    );
}
