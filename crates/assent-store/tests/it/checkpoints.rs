//! Signed audit checkpoints and the state cross-checks of `integrity::verify_offline`.

use super::{approved, fresh, pending, wire};
use assent_store::Store;
use assent_store::checkpoint::{self, Due};
use assent_store::integrity::{VerifyOptions, verify_offline};

fn sql(dir: &std::path::Path, q: &str) {
    let c = rusqlite::Connection::open(dir.join("assent.db")).unwrap();
    c.execute_batch(q).unwrap();
}

/// An approved, redeemed approval with a checkpoint over the whole chain.
fn redeemed(dir: &std::path::Path) -> (String, checkpoint::Checkpoint) {
    let s = Store::open(dir, 60_000, wire()).unwrap();
    let (id, h) = approved(&s, 5, 10_000, false);
    let t = s.token_string(&id).unwrap().unwrap();
    s.redeem(&t, "bot", &h, None, 3_000).unwrap();
    let cp = s.checkpoint_if_due(Due::NOW, 4_000).unwrap().unwrap();
    (id, cp)
}

#[test]
fn the_audit_key_is_private_separate_and_signs_checkpoints_when_due() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, s) = fresh();
    let key = dir.path().join("audit.key");
    assert_eq!(std::fs::read(&key).unwrap().len(), 32);
    assert_ne!(
        std::fs::read(&key).unwrap(),
        std::fs::read(dir.path().join("token.key")).unwrap()
    );
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // An empty chain gets no checkpoint.
    assert!(s.checkpoint_if_due(Due::NOW, 1).unwrap().is_none());
    let every = Due {
        every_records: 10,
        every_ms: 60_000,
    };
    pending(&s, 5, 1_000, 10_000, false);
    // The first checkpoint is due at once; the next after 10 records or 60 s with growth.
    let first = s.checkpoint_if_due(every, 2_000).unwrap().unwrap();
    assert_eq!((first.seq, first.record_count), (2, 2));
    assert!(first.verifies(&s.audit_public_key()));
    assert!(s.checkpoint_if_due(every, 70_000).unwrap().is_none());
    pending(&s, 6, 3_000, 10_000, false);
    assert!(s.checkpoint_if_due(every, 4_000).unwrap().is_none());
    let second = s.checkpoint_if_due(every, 62_000).unwrap().unwrap();
    assert_eq!(second.seq, 4);
    assert_eq!(
        s.checkpoints().unwrap(),
        vec![first.clone(), second.clone()]
    );
    assert_eq!(s.latest_checkpoint().unwrap(), Some(second));
    // The public key in the file is the store's; a reopen keeps the key.
    drop(s);
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    assert!(first.verifies(&s.audit_public_key()));
    assert_eq!(
        checkpoint::parse_public_key(&first.public_key).unwrap(),
        s.audit_public_key()
    );
    // A tampered checkpoint does not verify.
    let mut forged = first;
    forged.head_hash = "0".repeat(64);
    assert!(!forged.verifies(&s.audit_public_key()));
}

#[test]
fn a_chain_rewritten_after_a_checkpoint_is_never_signed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cp) = redeemed(dir.path());
    // The newest signed record's content changed (and its hash recomputed by whoever did it).
    sql(
        dir.path(),
        &format!("UPDATE audit SET hash = 'x' WHERE seq = {};", cp.seq),
    );
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    s.append_audit("note", None, "test", &serde_json::json!({}), 5_000)
        .unwrap();
    let e = s.checkpoint_if_due(Due::NOW, 6_000).unwrap_err();
    assert!(e.to_string().contains("no checkpoint signed"), "{e}");
}

/// Found by review: the signer took the newest stored checkpoint as it was. A row planted far
/// ahead of the chain (under this gateway's public key, with no valid signature) stopped every
/// later checkpoint without a word, and one planted over a rewritten record had the rewrite
/// signed; a chain whose tail was deleted under its checkpoint was passed over in silence too.
/// Each is refused, loudly; a row naming another key (a foreign backup restored with
/// `--force`) is passed over.
#[test]
fn a_planted_checkpoint_row_or_a_truncated_tail_is_refused_not_signed_over() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cp) = redeemed(dir.path());
    let plant = |key: &str| {
        sql(
            dir.path(),
            &format!(
                "INSERT INTO audit_checkpoints (seq, head_hash, record_count, time, public_key, signature) \
                 VALUES (900000000000000, '{h}', 900000000000000, 5000, '{key}', '{s}');",
                h = "0".repeat(64),
                s = "0".repeat(128)
            ),
        )
    };
    plant(&cp.public_key);
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    s.append_audit("note", None, "test", &serde_json::json!({}), 5_000)
        .unwrap();
    let e = s.checkpoint_if_due(Due::NOW, 6_000).unwrap_err();
    assert!(e.to_string().contains("does not verify"), "{e}");
    assert!(s.latest_checkpoint().is_err());
    drop(s);
    // Under another key: passed over; the chain since the genuine checkpoint is signed.
    sql(
        dir.path(),
        "DELETE FROM audit_checkpoints WHERE seq = 900000000000000;",
    );
    plant(&"1".repeat(64));
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    let next = s.checkpoint_if_due(Due::NOW, 6_000).unwrap().unwrap();
    assert_eq!(next.seq, cp.seq + 1);
    assert_eq!(s.latest_checkpoint().unwrap(), Some(next.clone()));
    drop(s);
    // The tail under the newest checkpoint deleted: refused.
    sql(
        dir.path(),
        &format!("DELETE FROM audit WHERE seq = {};", next.seq),
    );
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    let e = s.checkpoint_if_due(Due::NOW, 7_000).unwrap_err();
    assert!(e.to_string().contains("removed from its tail"), "{e}");
}

#[test]
fn verify_passes_untouched_and_names_each_attack() {
    let dir = tempfile::tempdir().unwrap();
    let (id, cp) = redeemed(dir.path());
    let file = dir.path().join("cp.jsonl");
    std::fs::write(&file, "not json\n").unwrap();
    checkpoint::append_jsonl(&file, &cp).unwrap();
    let opts = VerifyOptions {
        public_key: None,
        checkpoint_file: Some(&file),
        ..Default::default()
    };
    let rep = verify_offline(dir.path(), &opts).unwrap();
    assert_eq!(rep.problem, None, "{rep:?}");
    assert_eq!((rep.checkpoints, rep.file_lines_skipped), (1, 1));
    assert_eq!(rep.file_checkpoint, Some(cp.clone()));
    assert_eq!(rep.unsigned_records, 0);

    let attack = |q: &str| {
        let copy = tempfile::tempdir().unwrap();
        for f in ["assent.db", "audit.key", "token.key"] {
            std::fs::copy(dir.path().join(f), copy.path().join(f)).unwrap();
        }
        sql(copy.path(), q);
        let rep = verify_offline(copy.path(), &opts).unwrap();
        let p = rep.problem.expect("detected");
        (p.check, p.reason)
    };
    // Un-using a redeemed token.
    let (check, why) = attack("UPDATE tokens SET used_at = NULL;");
    assert_eq!(check, "state");
    assert!(why.contains("not marked used"), "{why}");
    // Marking an approval pending again.
    let (check, why) = attack(&format!(
        "UPDATE approvals SET status = 'pending' WHERE id = '{id}';"
    ));
    assert!(check == "state" && why.contains("is pending"), "{why}");
    // A forged checkpoint signature.
    let (check, why) =
        attack("UPDATE audit_checkpoints SET signature = substr('00000000' || signature, 1, 128);");
    assert!(
        check == "checkpoint" && why.contains("does not verify"),
        "{why}"
    );
    // Truncation, stored checkpoints deleted too: the file still knows.
    let (check, why) = attack(&format!(
        "DELETE FROM audit WHERE seq > {}; DELETE FROM audit_checkpoints;",
        cp.seq - 2
    ));
    assert!(
        check == "checkpoint_file" && why.contains("removed from the end"),
        "{why}"
    );
    // An emptied audit table.
    let (check, why) = attack("DELETE FROM audit;");
    assert!(
        check == "checkpoint" && why.contains("ends at record 0"),
        "{why}"
    );
    // Without any key, stored checkpoints cannot be checked: a usage error.
    std::fs::remove_file(dir.path().join("audit.key")).unwrap();
    assert!(verify_offline(dir.path(), &VerifyOptions::default()).is_err());
    let with_key = VerifyOptions {
        public_key: Some(checkpoint::parse_public_key(&cp.public_key).unwrap()),
        checkpoint_file: None,
        ..Default::default()
    };
    assert_eq!(verify_offline(dir.path(), &with_key).unwrap().problem, None);
}

/// `audit::record_hash` streams the canonical JSON into the hash; it must be the SHA-256 of
/// the RFC 8785 canonical JSON of the record's array for every string (quotes, backslashes,
/// every control character, DEL, non-ASCII, astral) and integer (up to i64's ends).
#[test]
fn record_hash_is_the_sha256_of_the_rfc8785_array() {
    use assent_core::canonical::{canonical_value, sha256_hex};
    let mut tricky: Vec<String> = (0u32..0x80)
        .map(|c| char::from_u32(c).unwrap().to_string())
        .collect();
    tricky.extend(
        [
            "",
            "a\"b\\c/d",
            "é€𝄞\u{2028}\u{feff}",
            "{\"k\":[1,\"\\n\"]}",
            "\u{1f}\u{7f}",
        ]
        .map(str::to_string),
    );
    let ints = [
        0,
        1,
        -1,
        1 << 53,
        -(1 << 53),
        (1 << 53) + 1,
        i64::MAX,
        i64::MIN,
    ];
    for (i, t) in tricky.iter().enumerate() {
        let n = ints[i % ints.len()];
        let aid = (i % 2 == 0).then_some(t.as_str());
        let want = sha256_hex(
            canonical_value(&serde_json::json!([
                t,
                n,
                -n.saturating_add(1),
                t,
                aid,
                t,
                t
            ]))
            .unwrap()
            .as_bytes(),
        );
        let got = assent_store::audit::record_hash(t, n, -n.saturating_add(1), t, aid, t, t);
        assert_eq!(got, want, "{t:?} {n}");
    }
}

/// Found by review: a deleted `audit.key` was replaced by a new one at the next start, so
/// every checkpoint and seal of the database became unverifiable and the start-up check
/// against the checkpoint file (no line under the new key: "no file yet") was off — a
/// rolled-back or rewritten database was served. A database with audit records is refused
/// until the key is put back (or a new one made knowingly with `assent keys init`), and the
/// key made in the attempt is removed, so a second start does not take it either.
#[test]
fn a_missing_audit_key_is_not_replaced_under_a_database_that_used_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cp) = redeemed(dir.path());
    let key = dir.path().join("audit.key");
    let kept = std::fs::read(&key).unwrap();
    std::fs::remove_file(&key).unwrap();
    for _ in 0..2 {
        let e = Store::open(dir.path(), 60_000, wire()).err().unwrap();
        assert!(e.to_string().contains("the audit key is missing"), "{e}");
        assert!(!key.exists());
    }
    // A start that fails for another reason first (a planted trigger) keeps no new key either
    // (found by review: the key stayed, and the start after the trigger's removal took it).
    sql(
        dir.path(),
        "CREATE TRIGGER planted AFTER INSERT ON audit BEGIN SELECT 1; END;",
    );
    let e = Store::open(dir.path(), 60_000, wire()).err().unwrap();
    assert!(e.to_string().contains("altered"), "{e}");
    assert!(!key.exists());
    sql(dir.path(), "DROP TRIGGER planted;");
    let e = Store::open(dir.path(), 60_000, wire()).err().unwrap();
    assert!(e.to_string().contains("the audit key is missing"), "{e}");
    // Put back (readable by its owner alone), it opens and its checkpoints verify.
    std::fs::write(&key, &kept).unwrap();
    #[cfg(unix)]
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    assert!(cp.verifies(&s.audit_public_key()));
    drop(s);
    // A new key made with `keys init` alone is refused over the lost key's checkpoints, naming
    // it; accepted knowingly (the lost key's public key written into `audit-key-replaces`), it
    // opens it (its checkpoints no longer verify under that key).
    std::fs::remove_file(&key).unwrap();
    assent_store::keys::init(dir.path()).unwrap();
    let e = Store::open(dir.path(), 60_000, wire()).err().unwrap();
    assert!(e.to_string().contains(&cp.public_key), "{e}");
    let accept = dir.path().join(assent_store::keys::AUDIT_KEY_REPLACES_FILE);
    std::fs::write(&accept, format!("{}\n", cp.public_key)).unwrap();
    let s = Store::open(dir.path(), 60_000, wire()).unwrap();
    assert!(!cp.verifies(&s.audit_public_key()));
}
