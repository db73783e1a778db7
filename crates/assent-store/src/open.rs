//! Opening a store: the private data directory, the key files (`keys.rs`), the connection (the
//! kernel's `db_sqlite::open`) and the schema migrations (`migrate.rs`); and the read-only offline audit verification (which, writing
//! nothing, needs no event renderer). Nothing that reads or writes approvals.

use crate::audit;
use crate::db::Database;
use crate::error::StoreError;
use crate::events::Envelopes;
use crate::key_replaced::{Signer, newest_verifying};
use crate::keys::{self, KeyFiles};
use crate::kit::{create_private_dir, io};
use crate::migrate;
use crate::sql::lite;
use crate::store::Store;
use rusqlite::Connection;
use std::path::Path;
use std::sync::{Arc, Mutex};

impl Store {
    /// Opens (creating when needed) `<data_dir>/assent.db`, `<data_dir>/token.key` and the
    /// audit checkpoint key `<data_dir>/audit.key` ([`crate::checkpoint`]), and applies pending
    /// migrations. `token_ttl_ms` is how long a minted token stays redeemable; `envelopes`
    /// renders the AAEP and MPLP events state changes write (`assent_server::WireEnvelopes`).
    pub fn open(
        data_dir: &Path,
        token_ttl_ms: i64,
        envelopes: Arc<dyn Envelopes>,
    ) -> Result<Store, StoreError> {
        let path = data_dir.join("assent.db");
        Self::open_database(
            data_dir,
            data_dir,
            &Database::Sqlite { path },
            token_ttl_ms,
            envelopes,
        )
    }

    /// Opens a store over `database` (SQLite or Postgres, issue 13) with its key files in
    /// `keys_dir` ([`keys`]), and applies pending migrations. Over SQLite a missing key is
    /// created (the embedded default); over Postgres both keys must exist (`assent keys init`
    /// made them), because every replica of a shared database must sign with the same keys.
    /// `data_dir` is created (0700) and holds what is local to this process: over SQLite the
    /// database file itself, which [`Store::db_path`], backup, restore and readiness concern.
    /// Over SQLite, tokens a restore left outstanding are voided first ([`crate::voided`]).
    /// Errors: `Invalid` for a missing or damaged key or a newer schema; `Db`; `Io`.
    pub fn open_database(
        data_dir: &Path,
        keys_dir: &Path,
        database: &crate::db::Database,
        token_ttl_ms: i64,
        envelopes: Arc<dyn Envelopes>,
    ) -> Result<Store, StoreError> {
        create_private_dir(data_dir).map_err(io(data_dir))?;
        let files = match database {
            Database::Sqlite { .. } => KeyFiles::CreateMissing,
            Database::Postgres { .. } => KeyFiles::MustExist,
        };
        if files == KeyFiles::MustExist
            && let Some(file) = keys::first_missing(keys_dir)?
        {
            let served = keys::holds_audit_records(database)?;
            return Err(keys::missing_keys(keys_dir, file, served));
        }
        let keys = keys::load(keys_dir, files)?;
        let created = keys.created_audit;
        let opened = Self::open_with(data_dir, keys_dir, database, keys, token_ttl_ms, envelopes);
        if created && opened.is_err() {
            // A key made for a database that is not served is not kept: the next start would
            // take it as the database's own (found by review: a start failing on a planted
            // trigger left the new key, and the start after its removal served the database
            // under it).
            let key = keys_dir.join(crate::checkpoint::KEY_FILE);
            if let Err(e) = std::fs::remove_file(&key)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(io(&key)(e));
            }
        }
        opened
    }

    /// [`Store::open_database`] once the keys are loaded.
    fn open_with(
        data_dir: &Path,
        keys_dir: &Path,
        database: &crate::db::Database,
        keys: keys::Keys,
        token_ttl_ms: i64,
        envelopes: Arc<dyn Envelopes>,
    ) -> Result<Store, StoreError> {
        // Before the database is opened: a restore under way finishes first.
        let data_lock = match database {
            Database::Sqlite { .. } => Some(crate::kit::DataDirLock::shared(data_dir)?),
            Database::Postgres { .. } => None,
        };
        let conn = database.connect()?;
        migrate::migrate(conn.conn(), &format!("{database:?}"))?;
        if let Some(d) = migrate::altered_schema(conn.conn())? {
            return Err(StoreError::Invalid(format!(
                "{database:?}: the database's schema {d}: it was altered behind the gateway's back (a planted trigger or view runs inside its transactions), so it is not served; run `assent audit verify`, then restore a backup or drop the object"
            )));
        }
        if keys.created_audit {
            refuse_a_new_audit_key(conn.conn(), keys_dir)?;
        }
        let (mine, over) =
            refuse_another_audit_key(conn.conn(), &keys.audit.verifying_key(), keys_dir)?;
        // A key whose take-over is recorded never serves again (whatever the file says).
        let replaced = crate::key_replaced::Watch::default();
        refuse_replaced(conn.conn(), &keys.audit.verifying_key(), &replaced)?;
        // Accepted over a newer checkpoint of another key (`audit-key-replaces`): taken over.
        let taking_over = over.is_some();
        let checkpointer = match database {
            Database::Sqlite { path } => {
                conn.conn().batch(crate::wal::WRITER_PRAGMAS)?;
                Some(crate::wal::Checkpointer::start(path)?)
            }
            Database::Postgres { .. } => None,
        };
        let store = Store {
            conn: Mutex::new(conn),
            database: database.clone(),
            key: keys.token,
            seal_keys: crate::seal::SealKeys::of(&keys.audit),
            audit_key: keys.audit,
            db_path: data_dir.join("assent.db"),
            token_ttl_ms,
            envelopes,
            checkpointer,
            readers: Default::default(),
            replaced,
            _data_lock: data_lock,
            delegations: Default::default(),
            rules: Default::default(),
            serving: Default::default(),
        };
        // Written on the store's connection itself, not through `Store::write`, which
        // refuses a key whose take-over is recorded.
        let claim_now = || -> Result<(), StoreError> {
            let conn = store.lock();
            conn.conn()
                .write(|tx| claim(**tx, &store.audit_key, keys_dir))
        };
        // A take-over first: recorded before this store writes anything else (voiding a
        // restore's tokens included).
        if taking_over {
            claim_now()?;
        }
        if let Database::Sqlite { .. } = database {
            store.void_restored_tokens(data_dir, crate::kit::now_ms())?;
        }
        // Last: nothing after it fails, so a start that does not serve leaves no claim (an
        // `audit.key` made for it is removed, and its claim would refuse the next one). Only
        // while no row verifies under this key: once claimed, opening writes nothing (a
        // reader opened during a held write transaction does not wait for it).
        if mine.is_none() && !taking_over {
            claim_now()?;
        }
        Ok(store)
    }
}

/// Refuses a database that holds audit records when its `audit.key` was just created because
/// it was missing (the caller then removes the new key, else the next start would take it):
/// every checkpoint and every sealed row of the database was made with the lost key. Found by
/// review: a deleted `audit.key` was silently replaced at the next start, which also turned
/// off the start-up check against the checkpoint file (no line under the new key counted as
/// no file yet), so a rolled-back or rewritten database was served. `assent keys init`
/// creates a new key knowingly. Errors: `Invalid` saying so; the database's.
fn refuse_a_new_audit_key(conn: crate::db::Conn<'_>, keys_dir: &Path) -> Result<(), StoreError> {
    use crate::db::OptionalExtension;
    let records: Option<i64> = conn
        .prepare_cached("SELECT seq FROM audit LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if records.is_none() {
        return Ok(());
    }
    let key = keys_dir.join(crate::checkpoint::KEY_FILE);
    Err(StoreError::Invalid(format!(
        "{}: the audit key is missing, but the database already holds audit records, checkpoints and sealed rows made with it; put back the audit.key kept with this database (a new key would leave every checkpoint and seal unverifiable), or — for a database that never had one, or knowingly — create one with `assent keys init --keys-dir {}` (over stored checkpoints the start then names what accepts it)",
        key.display(),
        keys_dir.display()
    )))
}

/// Claims the database for the audit key `key` in the write transaction `conn` (the writes
/// of every process are serialised: SQLite's `BEGIN IMMEDIATE`, PostgreSQL's schema-wide
/// advisory write lock): [`refuse_another_audit_key`] again, inside it, then, when no
/// stored row verifies under `key` yet, the claim ([`crate::checkpoint::store_claim`]: a
/// signed checkpoint of the empty chain at record 0). Attack (found by review): two replicas
/// given key sets of their own over a fresh database found no checkpoint to refuse, so both
/// served, each signing checkpoints the other ignored and tokens and seals it refused, until
/// one restarted. Of two such starts, the one serialised second now finds the first's claim
/// and is refused. When the row is taken, what is there must be a claim this key may serve
/// under ([`claimed_before`]). When a newer checkpoint of another key was accepted (a
/// take-over through `audit-key-replaces`), the take-over is recorded instead
/// ([`crate::checkpoint::take_over`]), so that the replaced key's replicas write nothing more
/// from this transaction on. Errors: those of [`refuse_another_audit_key`],
/// [`claimed_before`] and `take_over`; the database's.
fn claim(
    conn: crate::db::Conn<'_>,
    key: &ed25519_dalek::SigningKey,
    keys_dir: &Path,
) -> Result<(), StoreError> {
    let (mine, over) = refuse_another_audit_key(conn, &key.verifying_key(), keys_dir)?;
    // In the transaction, serialised with another replica's take-over of this key.
    refuse_replaced(
        conn,
        &key.verifying_key(),
        &crate::key_replaced::Watch::default(),
    )?;
    // Past that refusal, a newer checkpoint of another key is one `audit-key-replaces`
    // accepts: the take-over is recorded, so the replaced key's replicas write no more.
    if let Some((seq, theirs)) = over {
        crate::checkpoint::take_over(conn, key, seq, &theirs, crate::kit::now_ms())?;
        return Ok(());
    }
    if mine.is_some() || crate::checkpoint::store_claim(conn, key, crate::kit::now_ms())? {
        return Ok(());
    }
    claimed_before(conn, &key.verifying_key(), keys_dir)
}

/// When [`claim`] found the row at record 0 taken: accepted only when it is a claim of the
/// empty chain ([`crate::checkpoint::not_a_claim`]) by `key`, or by another key that
/// `audit-key-replaces` names (a takeover accepted knowingly, as in
/// [`refuse_another_audit_key`]). Attack (found by review): the claim's `false` was dropped,
/// so a junk row planted at record 0 of a fresh database — passed over by
/// [`refuse_another_audit_key`] as not verifying — left it claimed by no key set, and a
/// second replica with keys of its own served it too; likewise another key's claim behind
/// [`crate::key_replaced::LOOKED_AT`] junk rows. Errors: `Invalid` naming the row and what to
/// do (delete it if it is damage), or that of another key set's claim; the database's; `Io`.
fn claimed_before(
    conn: crate::db::Conn<'_>,
    key: &ed25519_dalek::VerifyingKey,
    keys_dir: &Path,
) -> Result<(), StoreError> {
    use crate::checkpoint::{named_key, not_a_claim, public_key_hex};
    let ours = public_key_hex(key);
    let Some(cp) = crate::checkpoint::claim_row(conn)? else {
        return Err(no_claim(&ours, "it vanished as the claim was stored"));
    };
    if let Some(why) = not_a_claim(&cp) {
        return Err(no_claim(
            &ours,
            &format!("{why}; it names {}", named_key(&cp)),
        ));
    }
    // A claim: its key parses and verifies it; compared as this store writes keys.
    let theirs = public_key_hex(&crate::checkpoint::parse_public_key(&cp.public_key)?);
    if theirs == ours {
        return Ok(());
    }
    let named = keys::read_replaced_key(keys_dir)?;
    if named.as_deref() == Some(theirs.as_str()) {
        return accepted(&ours, &theirs, 0, None).map(|_| ());
    }
    Err(another_key(keys_dir, (&ours, None), (&theirs, 0), named))
}

/// The refusal of [`claimed_before`] of a row at record 0 that is no claim (`why`), for a
/// start under the audit key `ours` (64 hex).
fn no_claim(ours: &str, why: &str) -> StoreError {
    StoreError::Invalid(format!(
        "audit_checkpoints: the row at record 0, where the database's claim for one audit key is kept, is no claim ({why}): this start, under audit key {ours}, cannot claim the database for its key set, and a database no key set claims would be served by another key set too, so it is not served. If the row is damage (no other key set serves the database), delete it — DELETE FROM audit_checkpoints WHERE seq = 0 — and start again (the start claims the database anew); run `assent audit verify` first. If another key set serves it, copy keys_dir (token.key and audit.key) from that replica instead"
    ))
}

/// Refuses a database on which another audit key than the one in `keys_dir` (`key`) signed
/// the newest checkpoint: a checkpoint that verifies under another key and lies past (higher
/// `seq`) the newest one this key signed — or any, when this key signed none. The claim of a
/// database at record 0 ([`claim`]) counts as a checkpoint here. The database is then served
/// with another key set, whose tokens and seals this gateway would refuse or take for
/// damage, and whose checkpoints it would ignore. Found by review: a new PostgreSQL replica
/// given a key set of its own (`assent keys init` run on its host, as the missing-keys
/// message said) started, as did an `audit.key` made anew after the old one was lost; and
/// (later review) once a key had signed one checkpoint it was served whatever another key
/// signed after it. Only a checkpoint that verifies under the key it names counts (of the
/// newest [`crate::key_replaced::LOOKED_AT`] rows naming a key): a row naming some key is no
/// key set, and junk rows are passed over (`assent audit verify` reports them). Returns the
/// `seq` of the newest row verifying under `key`, if any, and — when it was accepted through
/// `audit-key-replaces` — the `(seq, public key)` of the newer checkpoint of the key it takes
/// the database over from (the take-over to record, [`claim`]).
///
/// A key made knowingly for a database whose key is lost for good is accepted when
/// `<keys_dir>/audit-key-replaces` ([`keys::AUDIT_KEY_REPLACES_FILE`]) holds the public key
/// the refusal names (that of the newest foreign signer) and this key has not yet signed
/// past any checkpoint of that key: the file accepts taking over, never going back. Found by
/// review: left in place, it accepted the old key again once a replica still serving under
/// it signed after the new one. The file is read under the owner rules of the key files
/// ([`keys::read_replaced_key`]: ours or root's, writable by no one else, in a directory
/// only its owner may write unless sticky), so another local user cannot plant it to silence
/// the refusal. Once the new key has signed past the lost one's checkpoints the file is no
/// longer needed; the old key's checkpoints lie behind and are passed over, and a replica
/// still serving under the old key is refused at its next start. A copy of another
/// gateway's database brought in by `restore --force` is likewise refused (not served with
/// a warning) until the keys backed up with it are put back, or the file names its key.
/// Errors: `Invalid` naming both public keys and what to do, or the acceptance file and
/// what is wrong with it; the database's; `Io`.
fn refuse_another_audit_key(
    conn: crate::db::Conn<'_>,
    key: &ed25519_dalek::VerifyingKey,
    keys_dir: &Path,
) -> Result<(Option<i64>, Option<Foreign>), StoreError> {
    let ours = crate::checkpoint::public_key_hex(key);
    let mine = newest_verifying(conn, Signer::Is(&ours), i64::MIN, i64::MAX)?.map(|(s, _)| s);
    let after = mine.unwrap_or(i64::MIN);
    let Some((seq, theirs)) = newest_verifying(conn, Signer::Not(&ours), after, i64::MAX)? else {
        return Ok((mine, None));
    };
    let accept = keys_dir.join(keys::AUDIT_KEY_REPLACES_FILE);
    let named = keys::read_replaced_key(keys_dir)?;
    if named.as_deref() == Some(theirs.as_str()) {
        // Taking over only: a checkpoint of theirs before our newest is one we signed past.
        let over = Some((seq, theirs.clone()));
        let Some(m) = mine else {
            return accepted(&ours, &theirs, seq, mine).map(|m| (m, over));
        };
        let Some((passed, _)) = newest_verifying(conn, Signer::Is(&theirs), i64::MIN, m)? else {
            return accepted(&ours, &theirs, seq, mine).map(|m| (m, over));
        };
        return Err(StoreError::Invalid(format!(
            "{}: it names audit key {theirs}, which signed a checkpoint at record {seq}, after the newest this audit key (public key {ours}) signed, at record {m}; but this key had already taken the database over from it (it signed past that key's checkpoint at record {passed}), and the file accepts taking over from a lost key, never going back to it: a replica still serves the database under the old key set, so that key is not lost. Stop that replica, or serve every replica with its keys_dir; delete {} (it is no longer needed once this key signed past the old one's checkpoints)",
            accept.display(),
            accept.display()
        )));
    }
    Err(another_key(keys_dir, (&ours, mine), (&theirs, seq), named))
}

/// A checkpoint of another audit key: `(seq, public key)` (64 hex).
type Foreign = (i64, String);

/// Refuses the start under the audit key `key` whose take-over by another key is recorded
/// on the database ([`crate::key_replaced::replaced_by`], through `watch`): the file
/// `audit-key-replaces` accepts taking over, never going back. Errors: `Invalid` naming the
/// new key and what to do; the database's.
fn refuse_replaced(
    conn: crate::db::Conn<'_>,
    key: &ed25519_dalek::VerifyingKey,
    watch: &crate::key_replaced::Watch,
) -> Result<(), StoreError> {
    let Some((seq, theirs)) = watch.replaced_by(conn, key)? else {
        return Ok(());
    };
    let ours = crate::checkpoint::public_key_hex(key);
    Err(StoreError::Invalid(format!(
        "{}; not served",
        crate::key_replaced::replaced_message(&ours, &theirs, seq)
    )))
}

/// The refusal of [`refuse_another_audit_key`]: audit key `theirs` signed a checkpoint (or
/// the claim, at record 0) at record `seq`, after the newest of `ours` (`mine`: at that
/// record, or none); `named`, what `audit-key-replaces` names, if anything.
fn another_key(
    keys_dir: &Path,
    (ours, mine): (&str, Option<i64>),
    (theirs, seq): (&str, i64),
    named: Option<String>,
) -> StoreError {
    let accept = keys_dir.join(keys::AUDIT_KEY_REPLACES_FILE);
    let file = keys_dir.join(crate::checkpoint::KEY_FILE);
    let what = match mine {
        None => format!(
            "this audit key (public key {ours}) signed none of the database's checkpoints; they were signed by audit key {theirs}: the database was served with another key set"
        ),
        Some(m) => format!(
            "audit key {theirs} signed a checkpoint at record {seq}, after the newest this audit key (public key {ours}) signed, at record {m}: another key set serves the database now (a replica given keys of its own, or this key replaced)"
        ),
    };
    let stale = match named {
        Some(n) => format!(" ({} names {n}, not that key)", accept.display()),
        None => String::new(),
    };
    StoreError::Invalid(format!(
        "{}: {what}: copy keys_dir (token.key and audit.key) from an existing replica, or put back the keys kept with this database; a replica serving it under other keys would sign checkpoints, tokens and seals the others ignore or take for damage. Only if that key is lost for good, accept this one knowingly: write {theirs} into {} (owned by the user assent runs as, writable by no one else){stale}",
        file.display(),
        accept.display()
    ))
}

/// The acceptance of [`refuse_another_audit_key`] through `audit-key-replaces`: logged
/// (`ours` over `theirs`, whose checkpoint at `seq` is newer); returns `mine`.
fn accepted(
    ours: &str,
    theirs: &str,
    seq: i64,
    mine: Option<i64>,
) -> Result<Option<i64>, StoreError> {
    tracing::warn!(audit_key = %ours, replaces = %theirs, newer_at = seq, "a new audit key accepted over the checkpoints of a lost one (audit-key-replaces): they no longer verify under the gateway's key");
    Ok(mine)
}

/// A session an administration command writes through (`assent migrate`, `assent passkeys
/// enrol`), beside the data directory's lock held shared as a gateway holds it, so that it
/// waits while a restore runs and a restore is refused while it is open (found by review: the
/// commands opened the file without the lock, so one run during a restore wrote into the
/// database the restore was setting aside, or migrated a file being replaced).
pub struct AdminConnection {
    conn: crate::db::Connection,
    _lock: Option<crate::kit::DataDirLock>,
}

impl AdminConnection {
    /// Opens `database`: for SQLite, first the shared lock of the file's directory (waiting
    /// up to 120 s for a restore, then `Invalid`), then the file ([`Database::connect`]); for
    /// PostgreSQL, the session alone. Errors: the lock or the database cannot be opened.
    pub fn open(database: &Database) -> Result<AdminConnection, StoreError> {
        let lock = match database {
            Database::Sqlite { path } => {
                let dir = path.parent().unwrap_or(Path::new("."));
                Some(crate::kit::DataDirLock::shared(dir)?)
            }
            Database::Postgres { .. } => None,
        };
        Ok(AdminConnection {
            conn: database.connect()?,
            _lock: lock,
        })
    }

    /// [`AdminConnection::open`] for a check that writes nothing: the SQLite file opened
    /// read-only ([`open_read_only`]: no link followed, nothing created, its journal mode left
    /// alone), beside the data directory's shared lock (a restore under way finishes first).
    /// Found by review: `assent audit verify-export --data-dir` opened the database read-write
    /// without the lock, setting WAL mode on a restored file and able to run during a restore.
    /// Errors: those of [`AdminConnection::open`] and [`open_read_only`].
    pub fn open_read_only(database: &Database) -> Result<AdminConnection, StoreError> {
        match database {
            Database::Sqlite { path } => {
                let dir = path.parent().unwrap_or(Path::new("."));
                let lock = crate::kit::DataDirLock::shared(dir)?;
                Ok(AdminConnection {
                    conn: crate::db::Connection::Sqlite(open_read_only(dir)?),
                    _lock: Some(lock),
                })
            }
            Database::Postgres { .. } => AdminConnection::open(database),
        }
    }

    /// The session, borrowed for statements and transactions.
    pub fn conn(&self) -> crate::db::Conn<'_> {
        self.conn.conn()
    }
}

/// Verifies the audit chain of the database in `data_dir` without starting a server, read-only.
pub fn verify_offline(data_dir: &Path) -> Result<audit::VerifyReport, StoreError> {
    Ok(audit::verify(lite(&open_read_only(data_dir)?))?)
}

/// Opens `<data_dir>/assent.db` read-only for the offline readers (audit verification,
/// learning samples, `assent backup`'s source), waiting up to 10 s for a running gateway's
/// writes. The file must be a regular file and is opened without following a link
/// ([`crate::db_sqlite::open_existing`], the rule the gateway's own opening applies). Found
/// by review: a symbolic link at `assent.db` planted by the data directory's owner was
/// followed by root's `assent audit verify` or `backup`. Errors: `Invalid` when there is
/// nothing at the name (opening would not create one); `Unusable` naming a link or other
/// non-regular file; SQLite's.
pub(crate) fn open_read_only(data_dir: &Path) -> Result<Connection, StoreError> {
    let path = data_dir.join(crate::kit::DB_FILE);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::Invalid(format!(
                "{}: no assent database here",
                path.display()
            )));
        }
        _ => {}
    }
    let conn = crate::db_sqlite::open_existing(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

/// Whose claim a database holds at record 0, for `assent audit verify` ([`claim_report`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClaimReport {
    /// The audit public key of the claim (64 hex).
    pub public_key: String,
    /// How it stands to the key the verification checks with: `checked_key` (that key),
    /// `taken_over` (take-overs recorded on the database lead from it to that key: it is
    /// the oldest key of `key_ranges`, each take-over an `audit.key_replaced` record with its
    /// take-over signature),
    /// `declared_replaced` (`<keys_dir>/audit-key-replaces` names it), `unchecked` (no key to
    /// check with) or `foreign` (none of these: [`ClaimReport::problem`]).
    pub standing: &'static str,
    /// Why the claim is not accepted (`foreign`), in a sentence naming both keys.
    pub problem: Option<String>,
}

/// For `assent audit verify`: who claimed `database` at record 0 and whether that key is
/// `key` (the key the verification checks with), one a recorded take-over chain leads from to
/// `key`, or one `<keys_dir>/audit-key-replaces` declares replaced ([`ClaimReport`]); `None`
/// when there is no claim (a row there that is no claim is `integrity`'s to report). Found by
/// review: verify accepted a claim by any key's valid signature, so a database served by
/// another key set, or a claim swapped in by whoever can write the database, passed
/// unremarked. Read-only (the SQLite file opened as `open_read_only` does). Errors: the
/// database cannot be opened or read; `audit-key-replaces` refused by its owner rules.
pub fn claim_report(
    database: &Database,
    keys_dir: &Path,
    key: Option<&ed25519_dalek::VerifyingKey>,
) -> Result<Option<ClaimReport>, StoreError> {
    use crate::checkpoint::{claim_row, not_a_claim, parse_public_key, public_key_hex};
    let conn = match database {
        Database::Sqlite { path } => {
            crate::db::Connection::Sqlite(open_read_only(path.parent().unwrap_or(Path::new(".")))?)
        }
        Database::Postgres { .. } => database.connect()?,
    };
    let conn = conn.conn();
    let Some(cp) = claim_row(conn)?.filter(|cp| not_a_claim(cp).is_none()) else {
        return Ok(None);
    };
    let theirs = public_key_hex(&parse_public_key(&cp.public_key)?);
    let report = |standing, problem| {
        Ok(Some(ClaimReport {
            public_key: theirs.clone(),
            standing,
            problem,
        }))
    };
    let Some(k) = key else {
        return report("unchecked", None);
    };
    let ours = public_key_hex(k);
    if theirs == ours {
        return report("checked_key", None);
    }
    // Taken over: the oldest key of the ranges the recorded take-overs make, each signed as
    // one, is the claim's (found by review: a foreign claim counted as taken over through a
    // take-over row signed only by a routine checkpoint; and after A→B→C a take-over carried
    // by C, signed by C, was not followed).
    let oldest = crate::key_ranges::key_ranges(conn, k)?
        .ok()
        .and_then(|r| r.spans().first().map(|s| public_key_hex(&s.0)));
    if oldest.as_deref() == Some(theirs.as_str()) {
        return report("taken_over", None);
    }
    if keys::read_replaced_key(keys_dir)?.as_deref() == Some(theirs.as_str()) {
        return report("declared_replaced", None);
    }
    let accept = keys_dir.join(keys::AUDIT_KEY_REPLACES_FILE);
    report(
        "foreign",
        Some(format!(
            "the database is claimed at record 0 by audit key {theirs}, not by the key this verification checks with ({ours}), and no take-over from that key to this one is recorded (audit.key_replaced records, each with its take-over signature) or declared ({} names it not): the database was claimed by another key set, or the claim was swapped in by someone who can write the database. If this key took the database over from {theirs} knowingly (before take-overs were recorded), write {theirs} into {}",
            accept.display(),
            accept.display()
        )),
    )
}
