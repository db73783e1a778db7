//! The ids the store makes for an approval, its decision and its token lead with the time
//! they were made at, in the version-4 form MPLP's identifier pattern requires
//! (`assent_store::ordered_uuid`): the indexes keyed by them grow at their ends
//! (BENCHMARKS.md, 2026-12-02). Found by review: only the id function had a test, so a call
//! site put back on random ids broke nothing.

use super::{DecisionInput, fresh, pending};

/// 1 000 ms and 2 000 ms as the ids' first 48 bits: `00000000-03e8` and `00000000-07d0`.
#[test]
fn an_approval_its_decision_and_its_token_get_ids_that_lead_with_their_time() {
    let (_dir, s) = fresh();
    let (id, h) = pending(&s, 5, 1_000, 60_000, false);
    let (later, _) = pending(&s, 6, 1_001, 60_000, false);
    s.decide(&id, &DecisionInput::approve(), "alice", &[], 2_000)
        .unwrap();
    let rec = s.get_approval(&id).unwrap().unwrap();
    let token = s.token_string(&id).unwrap().unwrap();
    let claims = s.redeem(&token, "bot", &h, None, 3_000).unwrap();
    assert!(id.starts_with("00000000-03e8-4"), "{id}");
    assert!(
        later.starts_with("00000000-03e9-4") && later > id,
        "{later}"
    );
    assert!(
        rec.trace_id.starts_with("00000000-03e8-4"),
        "{}",
        rec.trace_id
    );
    assert!(
        rec.target_id.starts_with("00000000-03e8-4"),
        "{}",
        rec.target_id
    );
    let decision = &rec.decisions[0].decision_id;
    assert!(decision.starts_with("00000000-07d0-4"), "{decision}");
    assert!(claims.jti.starts_with("00000000-07d0-4"), "{}", claims.jti);
    for u in [&id, &later, decision, &claims.jti] {
        let parsed = uuid::Uuid::parse_str(u).unwrap();
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122, "{u}");
    }
}
