//! `GET /readyz` through HTTP: ready on a fresh gateway (no key needed), and `503` naming the
//! reason when the database behind the running gateway is locked by another program, moved
//! away, or not at this build's schema version.

use crate::kit::*;
use reqwest::StatusCode;
use serde_json::Value;

/// `GET /readyz` without a key, checked afresh: the last answer (kept for a second) is
/// forgotten first.
async fn readyz(gw: &Gw) -> (StatusCode, Value) {
    *gw.state.readiness.lock().await = None;
    gw.req("GET", "/readyz", None, None).await
}

/// Asserts a `503` whose body is `not_ready` with `reason`.
#[track_caller]
fn not_ready(r: (StatusCode, Value), reason: &str) {
    let (s, b) = r;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert_eq!(
        (b["status"].as_str(), b["reason"].as_str()),
        (Some("not_ready"), Some(reason)),
        "{b}"
    );
    assert!(
        b["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty() && !m.contains('/')),
        "{b}"
    );
}

#[tokio::test]
async fn a_fresh_gateway_is_ready_at_the_schema_version_its_migrations_reach() {
    let gw = serve().await;
    let (s, b) = readyz(&gw).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["status"], "ready");
    // The build's schema version is the one its migrations leave in the file.
    let db = gw.state.store.db_path().to_path_buf();
    let found: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(found, assent_store::ops::SCHEMA_VERSION);
    assert_eq!(
        (
            b["schema_version"].as_i64(),
            b["expected_schema_version"].as_i64()
        ),
        (Some(found), Some(found))
    );
    gw.stop().await;
}

#[tokio::test]
async fn readyz_is_503_while_another_program_holds_the_write_lock_and_ready_again_after() {
    let gw = serve().await;
    assert_eq!(
        gw.propose("read", serde_json::json!({})).await.0,
        StatusCode::OK
    );
    let db = gw.state.store.db_path().to_path_buf();
    let other = rusqlite::Connection::open(&db).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    not_ready(readyz(&gw).await, "database_locked");
    other.execute_batch("ROLLBACK").unwrap();
    assert_eq!(readyz(&gw).await.0, StatusCode::OK);
    gw.stop().await;
}

#[tokio::test]
async fn readyz_is_503_when_the_schema_is_ahead_of_this_build() {
    let gw = serve().await;
    let db = gw.state.store.db_path().to_path_buf();
    let other = rusqlite::Connection::open(&db).unwrap();
    other.pragma_update(None, "user_version", 99).unwrap();
    let (s, b) = readyz(&gw).await;
    not_ready((s, b.clone()), "schema_ahead");
    assert_eq!(b["schema_version"], 99);
    other
        .pragma_update(None, "user_version", assent_store::ops::SCHEMA_VERSION - 1)
        .unwrap();
    not_ready(readyz(&gw).await, "schema_behind");
    other
        .pragma_update(None, "user_version", assent_store::ops::SCHEMA_VERSION)
        .unwrap();
    assert_eq!(readyz(&gw).await.0, StatusCode::OK);
    gw.stop().await;
}

#[tokio::test]
async fn readyz_is_503_while_the_database_file_is_moved_away_behind_the_gateway() {
    let gw = serve().await;
    assert_eq!(
        gw.propose("read", serde_json::json!({})).await.0,
        StatusCode::OK
    );
    let db = gw.state.store.db_path().to_path_buf();
    let away = db.with_extension("moved");
    std::fs::rename(&db, &away).unwrap();
    not_ready(readyz(&gw).await, "database_missing");
    std::fs::rename(&away, &db).unwrap();
    assert_eq!(readyz(&gw).await.0, StatusCode::OK);
    gw.stop().await;
}

/// Attack (found by review): `/readyz` needs no key and no rate limit applies to it, and each
/// check held the store's connection, so a flood of probes stalled every proposal and
/// decision. The check now runs at most once a second; every other probe gets its answer.
#[tokio::test]
async fn readyz_is_checked_at_most_once_a_second_however_often_it_is_asked() {
    let gw = serve().await;
    assert_eq!(readyz(&gw).await.0, StatusCode::OK);
    let db = gw.state.store.db_path().to_path_buf();
    let other = rusqlite::Connection::open(&db).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    // Within the second: the shared answer, not a new check (which would say locked).
    let probes = (0..10).map(|_| gw.req("GET", "/readyz", None, None));
    for (s, b) in futures::future::join_all(probes).await {
        assert_eq!((s, &b["status"]), (StatusCode::OK, &Value::from("ready")));
    }
    not_ready(readyz(&gw).await, "database_locked");
    other.execute_batch("ROLLBACK").unwrap();
    gw.stop().await;
}
