//! What a read of the audit log holds in memory at once, against what is stored: every
//! allocation of this test binary is counted (`peak_alloc`: the workspace forbids
//! `unsafe_code`, so no counting allocator of our own). One test only: the count is the whole
//! process's, and tests run side by side.

use assent_core::policy::Registry;
use assent_core::{ToolCall, VerdictKind, evaluate};
use assent_store::Store;
use assent_store::db::Database;
use assent_store::insights::DAY_MS;
use peak_alloc::PeakAlloc;
use serde_json::json;

#[allow(dead_code, unused_imports)]
#[path = "it/pgkit.rs"]
mod pgkit;

#[global_allocator]
static ALLOCATED: PeakAlloc = PeakAlloc;

/// Agent `bot`, whose `pay` asks a person.
const AGENT: &str =
    "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";

/// Audits an outright verdict (`allow` or `deny`) of `tool` with `arguments` at `now`.
fn outright(s: &Store, tool: &str, allow: bool, now: i64, arguments: serde_json::Value) {
    let reg = Registry::load(&[("a".into(), AGENT.into())], &[]).unwrap();
    let call = ToolCall::new(tool, None, arguments).unwrap();
    let mut v = evaluate(&reg, "bot", &call);
    v.kind = if allow {
        VerdictKind::Allow
    } else {
        VerdictKind::Deny
    };
    s.record_verdict("bot", "s1", &call, &"0".repeat(64), &v, now)
        .unwrap();
}

/// Found by review: insights read the outright verdicts 2,000 audit records at a time,
/// whatever their size, so an agent whose denied calls were padded to `max_arguments_bytes`
/// (256 KiB by default, up to 64 MiB) made the next insights page hold 512 MiB or more at
/// once. A chunk now stops at about 8 MiB of stored text: 48 denied calls of 1 MiB each, four
/// at each instant (so chunks end inside an instant), are all counted while the read holds
/// under 32 MiB at its peak, on both backends (measured: 8 MiB on SQLite, 25 MiB on PostgreSQL,
/// whose client holds a chunk's rows and its strings at once; before, 50 MiB on SQLite).
#[test]
fn calls_padded_to_the_argument_bound_are_read_for_insights_in_chunks_bounded_by_bytes() {
    let (_lite, sqlite) = pgkit::fresh_sqlite();
    let databases: Vec<Database> = std::iter::once(sqlite)
        .chain(pgkit::migrated_pg())
        .collect();
    let pad = "x".repeat(1 << 20);
    for db in &databases {
        let dir = tempfile::tempdir().unwrap();
        assent_store::keys::init(dir.path()).unwrap();
        let wire = std::sync::Arc::new(assent_server::WireEnvelopes);
        let s = Store::open_database(dir.path(), dir.path(), db, 60_000, wire).unwrap();
        let t = 20 * DAY_MS;
        for i in 0..48 {
            outright(&s, "pay", false, t + i / 4, json!({ "pad": pad }));
        }
        outright(&s, "read", true, t + 3, json!({}));
        ALLOCATED.reset_peak_usage();
        let before = ALLOCATED.current_usage();
        let got = s.insights(t, t + DAY_MS).unwrap();
        let peak = ALLOCATED.peak_usage().saturating_sub(before);
        let counts: Vec<_> = got
            .outright
            .iter()
            .map(|o| (o.tool.as_str(), o.allowed, o.denied))
            .collect();
        assert_eq!(counts, [("pay", 0, 48), ("read", 1, 0)], "{db:?}");
        assert!(
            peak < 32 << 20,
            "{db:?}: the read held {peak} bytes at once"
        );
    }
}
