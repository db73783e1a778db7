//! A take-over of an audit key is decided only by its record (found by review of the
//! `audit_key_replaced` guard): checkpoint rows planted past the take-over — one signed by the
//! replaced key (a replica still running an older binary, a restored backup), one signed by a
//! key of a database writer's own, one naming the replaced key that does not verify — neither
//! stop the replica that took over (its writes and `/readyz`) nor let the replaced one write
//! again; and one junk row far ahead does not blind the replaced replica to a later take-over.
//! On SQLite and on PostgreSQL (skipped with `ASSENT_TEST_NO_PG=1`).

use crate::keys_guard::{chmod, config, keys_init, propose_status, readyz};
use crate::{free_port, propose, serve_cmd, serve_with, stop};
use std::path::Path;
use std::time::{Duration, Instant};

/// Checkpoints never due while a test runs: only the take-over signs one.
const NOT_DUE: &str = "audit_checkpoints: {every_records: 1000000, every_seconds: 86400}\n";

/// The row planted in `audit_checkpoints` after the take-over, past every other.
#[derive(Clone, Copy)]
enum Plant {
    /// Validly signed by the replaced key A.
    SignedByTheReplacedKey,
    /// Validly signed by a key of no replica (a database writer's own).
    SignedByAStranger,
    /// Naming A, with a signature that does not verify.
    UnverifiedNamingTheReplacedKey,
}

/// `f` over a throw-away PostgreSQL schema; nothing where PostgreSQL is skipped
/// (`ASSENT_TEST_NO_PG=1`).
fn on_postgres(f: impl FnOnce(Option<assent_testkit::pg::Schema>)) {
    if let Some(schema) = assent_testkit::pg::schema() {
        f(Some(schema));
    }
}

/// Runs `q` against the test's database: `sqlite3` on `db`, or the PostgreSQL `schema`.
fn exec(db: &Path, schema: Option<&assent_testkit::pg::Schema>, q: &str) {
    match schema {
        Some(s) => s.client().batch_execute(q).unwrap(),
        None => {
            // Waits out a replica's write transaction (a busy database is no finding here).
            let out = std::process::Command::new("sqlite3")
                .args(["-cmd", ".timeout 10000"])
                .arg(db)
                .arg(q)
                .output()
                .unwrap();
            crate::ok(&out);
        }
    }
}

/// What every take-over test sets up: the test's directory (config, `data`, `keys/{a,b,c}`),
/// the public keys of A and B, the environment of every command (the PostgreSQL URL, when
/// on PostgreSQL) and the config's `extra` lines.
struct Setup {
    dir: tempfile::TempDir,
    keys: std::path::PathBuf,
    a: String,
    b: String,
    env: Vec<(&'static str, String)>,
    extra: String,
    schema: Option<assent_testkit::pg::Schema>,
}

impl Setup {
    /// Key sets A, B and C over a fresh database (SQLite, or the PostgreSQL `schema`), with
    /// `extra` config lines.
    fn new(schema: Option<assent_testkit::pg::Schema>, extra: &str) -> Setup {
        let url = schema
            .as_ref()
            .map(|s| format!("{}&application_name={}", s.postgres_url, s.name));
        let env = url
            .iter()
            .map(|u| ("ASSENT_DATABASE_URL", u.clone()))
            .collect();
        let db = if schema.is_some() {
            "database: {url_env: ASSENT_DATABASE_URL}\n"
        } else {
            ""
        };
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let a = keys_init(&keys.join("a"))["audit_public_key"].clone();
        let b = keys_init(&keys.join("b"))["audit_public_key"].clone();
        keys_init(&keys.join("c"));
        Setup {
            a: a.as_str().unwrap().to_string(),
            b: b.as_str().unwrap().to_string(),
            dir,
            keys,
            env,
            extra: format!("{db}{extra}"),
            schema,
        }
    }

    /// The environment of every command.
    fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    /// The config of a replica serving under `keys_dir` (`keys/a`, …).
    fn config(&self, keys_dir: &str) -> std::path::PathBuf {
        config(self.dir.path(), free_port(), keys_dir, &self.extra)
    }

    /// A replica serving under `keys_dir`.
    fn start(&self, keys_dir: &str) -> crate::Server {
        let port = free_port();
        let mut cmd = serve_cmd(&config(self.dir.path(), port, keys_dir, &self.extra));
        cmd.envs(self.env());
        serve_with(cmd, port)
    }

    /// `keys/<name>/audit-key-replaces` holding `key` (mode 0600).
    fn replaces(&self, name: &str, key: &str) {
        let f = self.keys.join(name).join("audit-key-replaces");
        std::fs::write(&f, format!("{key}\n")).unwrap();
        chmod(&f, 0o600);
    }

    /// `keys/<name>` takes the database over from `old` (`audit-key-replaces`): served, then
    /// stopped.
    fn take_over(&self, name: &str, old: &str) {
        self.replaces(name, old);
        stop(self.start(&format!("keys/{name}")));
    }

    /// Replica A serves (one approval proposed), then replica B takes the database over from
    /// it (`audit-key-replaces` naming A) and serves (one more); A is left running when
    /// `a_keeps_running`, else stopped before B starts. Returns A (when running) and B.
    fn a_then_b(&self, a_keeps_running: bool) -> (Option<crate::Server>, crate::Server) {
        let sa = self.start("keys/a");
        assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
        let sa = if a_keeps_running {
            Some(sa)
        } else {
            stop(sa);
            None
        };
        self.replaces("b", &self.a);
        let sb = self.start("keys/b");
        assert_eq!(propose(&sb.url, 6000)["decision"], "pending");
        (sa, sb)
    }

    /// A's keys directory is given an `audit-key-replaces` naming B: A's start is refused,
    /// saying B replaced it.
    fn a_cannot_take_it_back(&self) {
        self.replaces("a", &self.b);
        let err = crate::keys_guard::start_refused(serve_cmd(&self.config("keys/a")), &self.env());
        let says = format!("audit key {} was replaced by audit key {}", self.a, self.b);
        assert!(err.contains(&says), "{err}");
    }

    /// `assent audit verify --config cfg` passes.
    fn verifies(&self, cfg: &Path) {
        let out = crate::keys_guard::verify(cfg, &self.env());
        assert!(out.status.success(), "{}", said(&out));
    }

    /// Runs `q` against the test's database: `sqlite3` on its file, or the PostgreSQL schema.
    fn exec(&self, q: &str) {
        exec(
            &self.dir.path().join("data").join("assent.db"),
            self.schema.as_ref(),
            q,
        );
    }

    /// Plants checkpoint `cp` as a row of `audit_checkpoints`.
    fn plant(&self, cp: &assent_store::checkpoint::Checkpoint) {
        self.exec(&format!(
            "INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) VALUES ({}, '{}', {}, {}, '{}', '{}')",
            cp.seq, cp.head_hash, cp.record_count, cp.time, cp.public_key, cp.signature
        ));
    }

    /// The first row of query `q` (every column cast to text), as strings.
    fn row(&self, q: &str) -> Vec<String> {
        match &self.schema {
            Some(s) => {
                let r = s.client().query_one(q, &[]).unwrap();
                (0..r.len()).map(|i| r.get::<_, String>(i)).collect()
            }
            None => {
                let db = self.dir.path().join("data").join("assent.db");
                let mut cmd = std::process::Command::new("sqlite3");
                cmd.args(["-cmd", ".timeout 10000", "-separator", "|"]);
                let text = crate::ok(&cmd.arg(db).arg(q).output().unwrap());
                text.trim_end().split('|').map(str::to_string).collect()
            }
        }
    }

    /// The audit signing key of `keys/<name>`.
    fn signing_key(&self, name: &str) -> ed25519_dalek::SigningKey {
        assent_store::checkpoint::read_key(&self.keys.join(name))
            .unwrap()
            .unwrap()
    }

    /// A checkpoint signed by `keys/<name>` at `seq` 1,000,000, far past every other.
    fn checkpoint_far_ahead(&self, name: &str) -> assent_store::checkpoint::Checkpoint {
        let head = "ab".repeat(32);
        let key = self.signing_key(name);
        assent_store::checkpoint::sign(&key, 1_000_000, &head, 1_000_000, 1)
    }
}

/// Kills a replica left running (its shutdown would try to write under a replaced key).
fn kill(s: crate::Server) {
    let mut s = s;
    let _ = s.child.kill();
    let _ = s.child.wait();
}

/// Replica A serves; replica B takes the database over from it (`audit-key-replaces`) while A
/// keeps running; `plant` is inserted at the head of `audit_checkpoints`. B keeps serving and
/// its `/readyz` never says it was replaced (nor tells to copy A's keys); A still writes
/// nothing (`503`).
fn planted_past_a_take_over(plant: Plant, schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, NOT_DUE);
    let (sa, sb) = t.a_then_b(true);
    let sa = sa.expect("A keeps running");
    let cp = match plant {
        Plant::SignedByTheReplacedKey => t.checkpoint_far_ahead("a"),
        Plant::SignedByAStranger => t.checkpoint_far_ahead("c"),
        Plant::UnverifiedNamingTheReplacedKey => {
            let mut cp = t.checkpoint_far_ahead("a");
            cp.signature = "00".repeat(64);
            cp
        }
    };
    t.plant(&cp);
    // A, still running, writes nothing: the row naming it at the head changes nothing.
    let (status, body) = propose_status(&sa.url, 7000);
    assert_eq!(status, 503, "{body}");
    // B keeps serving, and is not told it was replaced (nor to copy A's keys).
    let (status, body) = propose_status(&sb.url, 8000);
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["decision"], "pending", "{body}");
    // `/readyz` answers from a check at most a second old: watched for two seconds.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let (_, body) = readyz(&sb.url);
        assert_ne!(body["reason"], "audit_key_replaced", "{body}");
        assert!(
            !body.to_string().contains(&format!("serving under {}", t.a)),
            "{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, body) = propose_status(&sb.url, 9000);
    assert_eq!(status, 202, "{body}");
    stop(sb);
    kill(sa);
}

#[test]
fn a_row_the_replaced_key_signs_past_the_take_over_does_not_stop_the_new_key_sqlite() {
    planted_past_a_take_over(Plant::SignedByTheReplacedKey, None);
}

#[test]
fn a_row_the_replaced_key_signs_past_the_take_over_does_not_stop_the_new_key_postgres() {
    on_postgres(|schema| planted_past_a_take_over(Plant::SignedByTheReplacedKey, schema));
}

#[test]
fn a_row_a_strangers_key_signs_past_the_take_over_does_not_stop_the_new_key_sqlite() {
    planted_past_a_take_over(Plant::SignedByAStranger, None);
}

#[test]
fn a_row_a_strangers_key_signs_past_the_take_over_does_not_stop_the_new_key_postgres() {
    on_postgres(|schema| planted_past_a_take_over(Plant::SignedByAStranger, schema));
}

#[test]
fn an_unverified_row_naming_the_replaced_key_at_the_head_does_not_let_it_write_sqlite() {
    planted_past_a_take_over(Plant::UnverifiedNamingTheReplacedKey, None);
}

#[test]
fn an_unverified_row_naming_the_replaced_key_at_the_head_does_not_let_it_write_postgres() {
    on_postgres(|schema| planted_past_a_take_over(Plant::UnverifiedNamingTheReplacedKey, schema));
}

/// Attack: after replica B took the database over from key A (recorded), A's keys directory
/// is given an `audit-key-replaces` naming B, so that A takes the database back (B had signed
/// nothing before A's newest checkpoint, so the file's "taking over only" rule alone let it).
/// Refused: a key whose take-over is recorded never serves again, naming B.
fn a_replaced_key_takes_nothing_back(schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, "");
    let (_, sb) = t.a_then_b(false);
    kill(sb);
    t.a_cannot_take_it_back();
}

#[test]
fn a_replaced_key_cannot_take_the_database_back_through_audit_key_replaces_sqlite() {
    a_replaced_key_takes_nothing_back(None);
}

#[test]
fn a_replaced_key_cannot_take_the_database_back_through_audit_key_replaces_postgres() {
    on_postgres(a_replaced_key_takes_nothing_back);
}

/// Attack: while replica A serves, one junk row is planted in `audit_checkpoints` at a huge
/// `seq`; A's next write examines it, and its watch of take-overs moved past it, so the
/// take-over B records later (at a lower `seq`, its own record's) was never seen and A kept
/// writing under its replaced key. Its watch never moves past the audit head: A writes
/// nothing more (`503`) and its `/readyz` says `audit_key_replaced`.
fn a_junk_row_far_ahead_then_a_take_over(schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, NOT_DUE);
    let sa = t.start("keys/a");
    assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
    t.exec(
        "INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) VALUES (9000000000000000000, 'x', 0, 0, 'junk', 'junk')",
    );
    // A writes once more: its watch examines the junk row.
    assert_eq!(propose(&sa.url, 5500)["decision"], "pending");
    t.replaces("b", &t.a);
    let sb = t.start("keys/b");
    assert_eq!(propose(&sb.url, 6000)["decision"], "pending");
    let (status, body) = propose_status(&sa.url, 7000);
    assert_eq!(status, 503, "A kept writing under its replaced key: {body}");
    // `/readyz` answers from a check at most a second old.
    let until = Instant::now() + Duration::from_secs(3);
    let mut said = readyz(&sa.url).1;
    while said["reason"] != "audit_key_replaced" && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        said = readyz(&sa.url).1;
    }
    assert_eq!(said["reason"], "audit_key_replaced", "{said}");
    stop(sb);
    kill(sa);
}

#[test]
fn a_junk_checkpoint_row_far_ahead_does_not_blind_the_replaced_replica_sqlite() {
    a_junk_row_far_ahead_then_a_take_over(None);
}

#[test]
fn a_junk_checkpoint_row_far_ahead_does_not_blind_the_replaced_replica_postgres() {
    on_postgres(a_junk_row_far_ahead_then_a_take_over);
}

/// Attack (found by review): `audit-key-replaces` left in place after key set B took over
/// from A accepted A again: a checkpoint A signed after B's (a replica of A on an older
/// binary, or A's key, lost, in other hands) made A the newest foreign signer the file names,
/// and B's restart served silently beside it. The file accepts taking over, never going
/// back: B's restart is refused, naming the file and both keys.
fn a_stale_replaces_file_takes_no_old_key_back(schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, NOT_DUE);
    let (_, sb) = t.a_then_b(false);
    stop(sb);
    t.plant(&t.checkpoint_far_ahead("a"));
    let err = crate::keys_guard::start_refused(serve_cmd(&t.config("keys/b")), &t.env());
    let file = t.keys.join("b").join("audit-key-replaces");
    assert!(
        err.contains(file.to_str().unwrap())
            && err.contains("never going back")
            && err.contains(&t.a)
            && err.contains(&t.b),
        "{err}"
    );
}

#[test]
fn a_stale_audit_key_replaces_file_takes_no_old_key_back_sqlite() {
    a_stale_replaces_file_takes_no_old_key_back(None);
}

#[test]
fn a_stale_audit_key_replaces_file_takes_no_old_key_back_postgres() {
    on_postgres(a_stale_replaces_file_takes_no_old_key_back);
}

/// The database of `t` as the store opens it.
fn database(t: &Setup) -> assent_store::db::Database {
    match &t.schema {
        Some(_) => assent_store::db::Database::Postgres {
            url: t.env[0].1.clone(),
        },
        None => assent_store::db::Database::Sqlite {
            path: t.dir.path().join("data").join("assent.db"),
        },
    }
}

/// `keys/<name>`'s store over the database of `t`.
fn store(t: &Setup, name: &str) -> assent_store::Store {
    let data = t.dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let envelopes = std::sync::Arc::new(assent_server::WireEnvelopes);
    assent_store::Store::open_database(&data, &t.keys.join(name), &database(t), 60_000, envelopes)
        .unwrap()
}

/// [`store`] with three `note` records appended to its audit chain.
fn store_with_notes(t: &Setup, name: &str) -> assent_store::Store {
    let s = store(t, name);
    for i in 0..3 {
        let data = serde_json::json!({"i": i});
        s.append_audit("note", None, "test", &data, 1_000 + i)
            .unwrap();
    }
    s
}

/// [`store_with_notes`] under key A, a checkpoint signed over the notes.
fn notes_signed_by_a(t: &Setup) -> assent_store::Store {
    let sa = store_with_notes(t, "a");
    sa.checkpoint_if_due(assent_store::checkpoint::Due::NOW, 2_000)
        .unwrap()
        .expect("A signs");
    sa
}

/// Retention by `s` into `data/archive` with every record past its cut-off.
fn archive_all(t: &Setup, s: &assent_store::Store) -> Option<assent_store::retention::Archived> {
    let now = 10_000_000_000_000;
    let archive = t.dir.path().join("data").join("archive");
    s.archive_audit(&archive, now, 1000, now, None, None)
        .unwrap()
}

/// What a command said: its stdout, then its stderr.
fn said(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Attacks (found by review): after B took the database over from A, whose key had signed
/// checkpoints, `assent audit verify` under B failed on A's checkpoints (and retention stopped
/// at them); and retention then archived the take-over record with the old ones, after which
/// the take-over was recorded nowhere: A could take the database back through an
/// `audit-key-replaces` naming B. A's checkpoints are judged under A up to the take-over
/// (named by the record B signed), retention carries the record forward, signed by B: the
/// audit verifies before and after retention, and A's start is refused.
fn old_checkpoints_and_retention(schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, NOT_DUE);
    drop(notes_signed_by_a(&t));
    t.replaces("b", &t.a);
    let sb = t.start("keys/b");
    assert_eq!(propose(&sb.url, 6000)["decision"], "pending");
    stop(sb);
    // Verified with no `audit-key-replaces` to lean on: only the recorded take-over counts.
    std::fs::remove_file(t.keys.join("b").join("audit-key-replaces")).unwrap();
    let cfg_b = t.config("keys/b");
    t.verifies(&cfg_b);
    // Retention past the take-over (the pending approval's records stay; A's go).
    let sb = store(&t, "b");
    let archived = archive_all(&t, &sb).expect("records archived");
    assert!(archived.manifest.last_seq >= 4, "{:?}", archived.manifest);
    drop(sb);
    t.verifies(&cfg_b);
    t.a_cannot_take_it_back();
}

#[test]
fn the_replaced_keys_checkpoints_verify_and_retention_keeps_the_take_over_sqlite() {
    old_checkpoints_and_retention(None);
}

#[test]
fn the_replaced_keys_checkpoints_verify_and_retention_keeps_the_take_over_postgres() {
    on_postgres(old_checkpoints_and_retention);
}

/// Found by review: the take-over's checkpoint (signed by B at its start) reached the
/// checkpoint file only with B's next due checkpoint, so the file vouched for nothing of B's
/// until then. It is published as it is written: the file has it while no other is due.
#[test]
fn the_take_over_checkpoint_reaches_the_checkpoint_file_when_it_is_written() {
    let t = Setup::new(
        None,
        "audit_checkpoints: {every_records: 1000000, every_seconds: 86400, file: checkpoints.jsonl}\n",
    );
    let (_, sb) = t.a_then_b(false);
    let file = t.dir.path().join("checkpoints.jsonl");
    let key = assent_store::checkpoint::parse_public_key(&t.b).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let mut found = None;
    while found.is_none() && Instant::now() < until {
        found = assent_store::checkpoint::newest_signed_in_jsonl(&file, &key)
            .ok()
            .flatten();
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(sb);
    let cp = found.expect("B's take-over checkpoint in the file");
    assert_eq!(cp.public_key, t.b);
}

/// Appends at the head of the audit chain of `t`, correctly chained, an `audit.key_replaced`
/// record saying `new` (64 hex) took over from `old` — as a database writer without any
/// gateway key can. Returns its `seq`.
fn append_takeover_row(t: &Setup, new: &str, old: &str) -> i64 {
    let head = t.row("SELECT CAST(seq AS TEXT), hash FROM audit ORDER BY seq DESC LIMIT 1");
    let seq: i64 = head[0].parse::<i64>().unwrap() + 1;
    let data = assent_core::canonical::canonical_value(
        &serde_json::json!({"public_key": new, "replaces": old, "replaced_at_record": seq - 1}),
    )
    .unwrap();
    let (kind, actor, at) = ("audit.key_replaced", "system:audit-key", 1_700_000_000_000);
    let hash = assent_store::audit::record_hash(&head[1], seq, at, kind, None, actor, &data);
    t.exec(&format!(
        "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash) VALUES ({seq}, {at}, '{kind}', NULL, '{actor}', '{data}', '{}', '{hash}')",
        head[1]
    ));
    seq
}

/// Plants an archive anchor over records `1..=last` signed by `key` (cut-off `i64::MAX`) and
/// deletes those records and the stored checkpoints at them, as a database writer holding
/// `key` would to remove that history.
fn plant_anchor_and_delete(t: &Setup, key: &ed25519_dalek::SigningKey, last: i64) {
    use ed25519_dalek::Signer;
    let h = &t.row(&format!("SELECT hash FROM audit WHERE seq = {last}"))[0];
    let g = assent_store::audit::GENESIS;
    let k = hex::encode(key.verifying_key().to_bytes());
    let mut m: assent_store::archive::Manifest = serde_json::from_value(serde_json::json!({"first_seq": 1, "last_seq": last, "first_prev_hash": g, "last_hash": h, "record_count": last, "records_sha256": "0".repeat(64), "file": "forged.jsonl", "cutoff": i64::MAX, "archived_at": 1, "public_key": k, "signature": ""})).unwrap();
    m.signature = hex::encode(key.sign(&m.signed_bytes()).to_bytes());
    t.exec(&format!(
        "INSERT INTO audit_archives (first_seq, last_seq, first_prev_hash, last_hash, record_count, records_sha256, file, cutoff, archived_at, public_key, signature, carries) VALUES (1, {last}, '{g}', '{h}', {last}, '{}', 'forged.jsonl', {}, 1, '{}', '{}', '')",
        m.records_sha256, i64::MAX, m.public_key, m.signature
    ));
    t.exec(&format!(
        "DELETE FROM audit WHERE seq <= {last}; DELETE FROM audit_checkpoints WHERE seq > 0 AND seq <= {last}"
    ));
}

/// `assent audit verify --config cfg` fails (exit 1), saying `says`.
fn verify_fails(t: &Setup, cfg: &Path, says: &str) {
    let out = crate::keys_guard::verify(cfg, &t.env());
    let said = said(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(says), "{said}");
}

/// Attack (found by review): a database writer without any gateway key appends at the head a
/// chained take-over row naming the gateway's key A as new and their own key X as replaced;
/// A's shutdown checkpoint signed that head, which counted as the take-over's signature, so
/// an archive anchor signed by X let them delete history unseen. Now the routine signer refuses to sign over a
/// take-over it did not write, and only a take-over signature (which only a take-over makes)
/// counts: `audit verify` fails naming the planted record.
fn planted_takeover_row(schema: Option<assent_testkit::pg::Schema>) {
    use assent_store::checkpoint::Due;
    let t = Setup::new(schema, NOT_DUE);
    let sa = t.start("keys/a");
    assert_eq!(propose(&sa.url, 5000)["decision"], "pending");
    stop(sa);
    let x = t.signing_key("c");
    let xh = hex::encode(x.verifying_key().to_bytes());
    let planted = append_takeover_row(&t, &t.a, &xh);
    // The shutdown checkpoint of a start and stop signs nothing over it.
    stop(t.start("keys/a"));
    let sa = store(&t, "a");
    let err = sa
        .checkpoint_if_due(Due::NOW, 2_000_000_000_000)
        .unwrap_err();
    let says = format!(
        "audit record {planted} (audit.key_replaced) records a take-over this gateway did not write"
    );
    assert!(err.to_string().contains(&says), "{err}");
    let newest = sa.latest_checkpoint().unwrap().expect("A signed before");
    assert!(newest.seq < planted, "{newest:?}");
    drop(sa);
    plant_anchor_and_delete(&t, &x, 1);
    let says = format!("audit record {planted} (audit.key_replaced) is not accounted for");
    verify_fails(&t, &t.config("keys/a"), &says);
}

#[test]
fn a_planted_take_over_row_the_checkpoint_timer_signs_hands_no_history_to_its_key_sqlite() {
    planted_takeover_row(None);
}

#[test]
fn a_planted_take_over_row_the_checkpoint_timer_signs_hands_no_history_to_its_key_postgres() {
    on_postgres(planted_takeover_row);
}

/// Found by review: `audit verify --archive-dir` checked every export's manifest under the
/// trusted key only, so after B took the database over from A an export A had written failed
/// the verification. Each export is verified like its anchor, under the key of its range.
fn export_of_the_replaced_key(schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, NOT_DUE);
    let sa = notes_signed_by_a(&t);
    assert!(archive_all(&t, &sa).is_some());
    drop(sa);
    t.take_over("b", &t.a);
    let archive = t.dir.path().join("data").join("archive");
    let mut cmd = std::process::Command::new(crate::BIN);
    cmd.args(["audit", "verify", "--archive-dir"]).arg(&archive);
    let out = cmd
        .arg("--config")
        .arg(t.config("keys/b"))
        .envs(t.env())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
}

#[test]
fn an_export_the_replaced_key_wrote_verifies_after_the_take_over_sqlite() {
    export_of_the_replaced_key(None);
}

#[test]
fn an_export_the_replaced_key_wrote_verifies_after_the_take_over_postgres() {
    on_postgres(export_of_the_replaced_key);
}

/// Attack (found by review): the replaced key A, stolen, signs an archive anchor over the
/// records before B's take-over (with any cut-off) and a database writer deletes them: A's
/// anchors were accepted below the take-over whatever they were. The take-over record now
/// names the archive as it found it (none here), and A's anchors count only up to there.
fn old_key_anchor_before_the_take_over(schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, NOT_DUE);
    let (_, sb) = t.a_then_b(false);
    stop(sb);
    let at = t.row("SELECT CAST(max(seq) AS TEXT) FROM audit WHERE kind = 'audit.key_replaced'");
    let at: i64 = at[0].parse().unwrap();
    plant_anchor_and_delete(&t, &t.signing_key("a"), at - 1);
    let says = format!("the archive anchor ending at record {}", at - 1);
    verify_fails(&t, &t.config("keys/b"), &says);
}

#[test]
fn an_anchor_the_replaced_key_signs_before_the_take_over_deletes_no_history_sqlite() {
    old_key_anchor_before_the_take_over(None);
}

#[test]
fn an_anchor_the_replaced_key_signs_before_the_take_over_deletes_no_history_postgres() {
    on_postgres(old_key_anchor_before_the_take_over);
}

/// Found by review: after A→B→C, C's retention carried the A→B record (signed by C), and
/// `audit verify` took A's claim at record 0 for a foreign one. The claim's standing is
/// decided from the key ranges: the claim's key is the oldest range's.
fn a_then_b_then_c_carried(schema: Option<assent_testkit::pg::Schema>) {
    let t = Setup::new(schema, NOT_DUE);
    drop(store_with_notes(&t, "a"));
    t.take_over("b", &t.a);
    t.take_over("c", &t.b);
    let sc = store(&t, "c");
    let archived = archive_all(&t, &sc).unwrap();
    drop(sc);
    let first = t.row("SELECT CAST(min(seq) AS TEXT) FROM audit WHERE kind = 'audit.key_replaced'");
    assert!(
        first[0].parse::<i64>().unwrap() > archived.manifest.last_seq,
        "{first:?}"
    );
    std::fs::remove_file(t.keys.join("c").join("audit-key-replaces")).unwrap();
    t.verifies(&t.config("keys/c"));
}

#[test]
fn a_take_over_carried_by_a_later_key_keeps_the_first_keys_claim_sqlite() {
    a_then_b_then_c_carried(None);
}

#[test]
fn a_take_over_carried_by_a_later_key_keeps_the_first_keys_claim_postgres() {
    on_postgres(a_then_b_then_c_carried);
}
