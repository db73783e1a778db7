//! A throw-away Postgres cluster for the tests, started once per test binary: `initdb` into a
//! temporary directory and `pg_ctl start` on a Unix socket in that directory only (no TCP),
//! as the `postgres` user when the tests run as root. A watchdog process stops the cluster
//! and removes the directory when the test binary exits (it waits for EOF on a pipe only this
//! process holds). Each test gets its own schema ([`fresh_schema`]), or a database of its own
//! copied from one the caller migrated once ([`from_template`]).
//!
//! The binaries are found under `/usr/lib/postgresql/*/bin` (or `ASSENT_PG_BIN`). When they
//! are missing the Postgres tests fail, naming the fix, unless `ASSENT_TEST_NO_PG=1` says to
//! run only the SQLite half.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The running cluster: its socket directory and the watchdog that stops it.
pub struct Cluster {
    dir: PathBuf,
    _watchdog: Mutex<Child>,
}

const PORT: u16 = 5432;

/// The newest `bin` directory with an `initdb`.
fn bin_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("ASSENT_PG_BIN") {
        return Some(PathBuf::from(d)).filter(|b| b.join("initdb").exists());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| {
        let v = p
            .parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str());
        v.and_then(|v| v.parse::<u32>().ok()).unwrap_or(0)
    });
    found.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program` with `args`, as the `postgres` user when we are root (Postgres refuses root).
fn as_pg(root: bool, program: &Path, args: &[&str]) -> Command {
    let mut c = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    c.args(args).stdin(Stdio::null()).stdout(Stdio::null());
    c
}

fn run(c: &mut Command, what: &str) {
    let out = c.stderr(Stdio::piped()).output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start() -> Cluster {
    let (dir, watchdog) = boot(
        "assent-pg-",
        |d| format!("-p {PORT} -k {d} -c listen_addresses='' -c fsync=off -c max_connections=200"),
        |_| {},
    );
    Cluster {
        dir,
        _watchdog: Mutex::new(watchdog),
    }
}

/// Starts a cluster in a new temporary directory named `prefix…`: `prepare(dir)` (to add files
/// the server options name, before the directory is handed to the `postgres` user), `initdb`
/// into `data/`, then `pg_ctl start` with the options `opts(dir)`. The directory and the
/// watchdog process that stops the cluster and removes the directory when this process exits.
pub(crate) fn boot(
    prefix: &str,
    opts: impl FnOnce(&str) -> String,
    prepare: impl FnOnce(&Path),
) -> (PathBuf, Child) {
    let bin = bin_dir().unwrap_or_else(|| {
        panic!(
            "no Postgres binaries (initdb) under /usr/lib/postgresql/*/bin or $ASSENT_PG_BIN: \
             install Debian's postgresql (scripts/test.sh does), or set ASSENT_TEST_NO_PG=1 to \
             run the SQLite tests only"
        )
    });
    let started = std::time::Instant::now();
    let root = is_root();
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .unwrap()
        .keep();
    let (d, data) = (dir.to_str().unwrap(), dir.join("data"));
    let data = data.to_str().unwrap();
    let pg_ctl = bin.join("pg_ctl");
    // The watchdog first, so even a failed start is cleaned up when this process exits; it
    // ignores the signals that end a test run (and its `cat` inherits that), so a test binary
    // killed by a timeout still leaves no cluster behind.
    let stop = format!(
        "trap '' HUP INT TERM; cat >/dev/null; {} '{}' -D '{data}' -m immediate -w stop; rm -rf '{d}'",
        if root { "runuser -u postgres --" } else { "" },
        pg_ctl.display()
    );
    let watchdog = Command::new("sh")
        .args(["-c", &stop])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    prepare(&dir);
    if root {
        run(Command::new("chown").args(["-R", "postgres:", d]), "chown");
    }
    let initdb = bin.join("initdb");
    let init = ["-D", data, "-A", "trust", "-U", "assent", "-E", "UTF8"];
    run(
        as_pg(root, &initdb, &init).args(["--locale=C.UTF-8", "-N"]),
        "initdb",
    );
    let opts = opts(d);
    let log = dir.join("log");
    let args = [
        "-D",
        data,
        "-l",
        log.to_str().unwrap(),
        "-w",
        "-o",
        &opts,
        "start",
    ];
    run(&mut as_pg(root, &pg_ctl, &args), "pg_ctl start");
    eprintln!(
        "postgres test cluster in {d} started in {} ms",
        started.elapsed().as_millis()
    );
    (dir, watchdog)
}

/// The cluster, started on first use; `None` when `ASSENT_TEST_NO_PG=1`.
pub fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            if std::env::var("ASSENT_TEST_NO_PG").is_ok_and(|v| v == "1") {
                eprintln!("ASSENT_TEST_NO_PG=1: the Postgres half of the tests is not run");
                return None;
            }
            Some(start())
        })
        .as_ref()
}

impl Cluster {
    /// A connection string to the cluster's `postgres` database with `search_path` `schema`.
    pub fn url(&self, schema: &str) -> String {
        format!(
            "host={} port={PORT} user=assent dbname=postgres options='-c search_path={schema}'",
            self.dir.display()
        )
    }

    /// The same as a `postgresql://` URL (what `database: {url_env}` takes): the socket
    /// directory as the `host` parameter, `search_path` `schema` in `options`.
    pub fn postgres_url(&self, schema: &str) -> String {
        format!(
            "postgresql://assent@/postgres?host={}&port={PORT}&options=-c%20search_path%3D{schema}",
            self.dir.display()
        )
    }

    /// An administrative client (schema `public`).
    pub fn admin(&self) -> postgres::Client {
        postgres::Client::connect(&self.url("public"), postgres::NoTls).unwrap()
    }
}

/// A new empty schema in the cluster, and the cluster; `None` when `ASSENT_TEST_NO_PG=1`.
fn new_schema() -> Option<(&'static Cluster, String)> {
    let c = cluster()?;
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    c.admin()
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    Some((c, schema))
}

/// A new empty schema of its own for one test: the connection string (libpq key=value form,
/// Unix socket, `search_path` set to it); `None` when `ASSENT_TEST_NO_PG=1`.
pub fn fresh_schema() -> Option<String> {
    new_schema().map(|(c, s)| c.url(&s))
}

/// [`fresh_schema`] as a `postgresql://` URL ([`Cluster::postgres_url`]).
pub fn fresh_schema_url() -> Option<String> {
    new_schema().map(|(c, s)| c.postgres_url(&s))
}

/// A fresh schema with everything a test may need to reach it.
pub struct Schema {
    /// Its name (`t_…`).
    pub name: String,
    /// The libpq `key=value` connection string ([`Cluster::url`]).
    pub url: String,
    /// The `postgresql://` URL ([`Cluster::postgres_url`]), what `database: {url_env}` takes.
    pub postgres_url: String,
}

impl Schema {
    /// A client with `search_path` set to this schema: for a test to look at the rows a
    /// gateway wrote, independently of assent's own store code.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap()
    }
}

/// A new database of its own, copied by `CREATE DATABASE … TEMPLATE` from a template made once
/// per test binary by `prepare` (given the template's libpq connection string; it must close
/// every connection it opened before it returns, as Postgres copies no template in use). The
/// copy's schema is `public` ([`Schema::name`]). `None` when `ASSENT_TEST_NO_PG=1`.
///
/// This is for suites that start many gateways: migrating a fresh schema through every
/// migration costs about 0.3 s of the cluster's CPU, copying the migrated template about a
/// sixth of that. `prepare` runs on the calling thread, under a lock other callers wait on.
pub fn from_template(prepare: impl FnOnce(&str)) -> Option<Schema> {
    static TEMPLATE: Mutex<bool> = Mutex::new(false);
    let c = cluster()?;
    let url_of = |db: &str| {
        format!(
            "host={} port={PORT} user=assent dbname={db} options='-c search_path=public'",
            c.dir.display()
        )
    };
    let mut made = TEMPLATE.lock().unwrap_or_else(|p| p.into_inner());
    if !*made {
        c.admin()
            .batch_execute("CREATE DATABASE assent_template")
            .unwrap();
        prepare(&url_of("assent_template"));
        *made = true;
    }
    drop(made);
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    c.admin()
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE assent_template"))
        .unwrap();
    Some(Schema {
        url: url_of(&name),
        postgres_url: format!(
            "postgresql://assent@/{name}?host={}&port={PORT}&options=-c%20search_path%3Dpublic",
            c.dir.display()
        ),
        name: "public".into(),
    })
}

/// A new empty [`Schema`]; `None` when `ASSENT_TEST_NO_PG=1`.
pub fn schema() -> Option<Schema> {
    new_schema().map(|(c, name)| Schema {
        url: c.url(&name),
        postgres_url: c.postgres_url(&name),
        name,
    })
}
