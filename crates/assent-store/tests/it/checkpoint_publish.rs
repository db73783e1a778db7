//! What the checkpoint signer hands out to be published (`checkpoint_if_due_after`).

use super::fresh;
use assent_store::checkpoint::Due;

/// Found by review: a stored checkpoint newer than the one the caller published (its
/// publishing cut short) was handed out to be published without checking that the chain
/// still extends the published one. Now the chain is walked from the published checkpoint
/// first: with a record after it rewritten, nothing is published.
#[test]
fn a_stored_checkpoint_is_not_published_over_a_chain_rewritten_since_the_published_one() {
    let (dir, s) = fresh();
    let note = |i: i64| {
        let data = serde_json::json!({"i": i});
        s.append_audit("note", None, "test", &data, 1_000 + i)
            .unwrap();
    };
    (0..3).for_each(note);
    let published = s.checkpoint_if_due(Due::NOW, 2_000).unwrap().unwrap();
    (3..5).for_each(note);
    let stored = s.checkpoint_if_due(Due::NOW, 3_000).unwrap().unwrap();
    assert!(stored.seq > published.seq);
    // Untouched, the stored one is handed out to be published.
    let out = s.checkpoint_if_due_after(Due::NOW, 4_000, Some(&published));
    assert_eq!(out.unwrap().map(|c| c.seq), Some(stored.seq));
    let c = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
    let q = format!(
        "UPDATE audit SET data = '{{\"i\":9}}' WHERE seq = {}",
        published.seq + 1
    );
    c.execute_batch(&q).unwrap();
    let err = s
        .checkpoint_if_due_after(Due::NOW, 4_000, Some(&published))
        .unwrap_err();
    let says = format!(
        "audit chain altered since the published checkpoint at record {}",
        published.seq
    );
    assert!(err.to_string().contains(&says), "{err}");
}
