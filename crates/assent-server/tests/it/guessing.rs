//! Guessing keys from more than one network (behind a trusted proxy naming each client in
//! `X-Forwarded-For`): a key prefix locked out by one network does not let another guess under
//! it uncounted, and the Prometheus scrape key is held to an address's lock-out as a
//! principal's key is.

use crate::kit::{OP, assert_error, start_tuned};
use assent_server::throttle::{RateLimits, Throttle};
use reqwest::StatusCode;
use std::sync::Arc;

/// The scrape key of the gateway [`gateway`] starts.
const SCRAPE: &str = "scrape-key-0123456789abcdef0123456789";

/// A gateway trusting a proxy at `127.0.0.1` to name its clients, with [`SCRAPE`] as its
/// scrape key; its data directory is kept by the caller.
async fn gateway(dir: &std::path::Path) -> crate::kit::Gw {
    start_tuned(dir, |st| {
        let proxy = vec!["127.0.0.1".parse().unwrap()];
        st.throttle = Arc::new(Throttle::with_proxies(RateLimits::default(), proxy));
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(SCRAPE.as_bytes()).into();
        st.metrics_key_sha256 = Some(Arc::new(digest));
    })
    .await
}

/// `GET path` with bearer `key` from client `from` (through the trusted proxy): the status
/// and the JSON body (`null` when it is none).
async fn get_from(
    gw: &crate::kit::Gw,
    from: &str,
    path: &str,
    key: &str,
) -> (StatusCode, serde_json::Value) {
    let r = gw
        .http
        .get(format!("{}{path}", gw.url))
        .bearer_auth(key)
        .header("x-forwarded-for", from)
        .send()
        .await
        .unwrap();
    let s = r.status();
    (s, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// Sends wrong keys `PREFIX-guess-N` from `from` until one is answered `429`; how many were
/// sent. Panics when 60 never were.
async fn lock_out(gw: &crate::kit::Gw, from: &str, prefix: &str) -> usize {
    for i in 0..60 {
        let (s, _) = get_from(gw, from, "/v1/whoami", &format!("{prefix}-guess-{i:04}")).await;
        if s == StatusCode::TOO_MANY_REQUESTS {
            return i;
        }
    }
    panic!("60 wrong keys from {from} were never throttled")
}

/// Attack (found by review): network A locks out a key prefix with twenty wrong keys; from
/// network B every wrong key under that prefix was then answered `429` without being counted,
/// so B could guess keys of that prefix at any rate (a right one authenticates past a prefix's
/// lock-out, so `429` against `200` tells the guess), spending one counted failure a second to
/// keep the prefix locked. B's guesses count against B's address now: B is locked out.
#[tokio::test]
async fn a_prefix_locked_by_one_network_lets_no_other_guess_under_it_uncounted() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    lock_out(&gw, "192.0.2.1", "abcdefgh").await;
    for i in 0..40 {
        let key = format!("abcdefgh-other-{i:04}");
        let (s, b) = get_from(&gw, "192.0.2.2", "/v1/whoami", &key).await;
        assert_error(s, &b, StatusCode::TOO_MANY_REQUESTS, "AUTH_THROTTLED");
    }
    // B's address is locked out: a wrong key of another prefix, and a right key never used
    // from there, are refused unchecked.
    for key in ["zyxwvuts-another-prefix", OP] {
        let (s, b) = get_from(&gw, "192.0.2.2", "/v1/whoami", key).await;
        assert_error(s, &b, StatusCode::TOO_MANY_REQUESTS, "AUTH_THROTTLED");
    }
    // A third network is not: its wrong key of another prefix is a plain `401`.
    let (s, b) = get_from(&gw, "192.0.2.3", "/v1/whoami", "zyxwvuts-another-prefix").await;
    assert_error(s, &b, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED");
    gw.stop().await;
}

/// Attack (found by review): the scrape key was checked before the address's lock-out, so
/// from a locked-out address it was answered `200` where every wrong key got an uncounted
/// `429`: the scrape key could be guessed there at any rate. A locked-out address now gets
/// `429` for it too, unless the scrape key was used from there before (as a principal's key
/// passes a lock-out of an address it authenticated from).
#[tokio::test]
async fn the_scrape_key_is_held_to_an_address_lock_out_unless_it_scraped_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let (s, _) = get_from(&gw, "192.0.2.10", "/metrics", SCRAPE).await;
    assert_eq!(s, StatusCode::OK);
    for (addr, prefix) in [("192.0.2.10", "tenguess"), ("192.0.2.11", "elevengu")] {
        lock_out(&gw, addr, prefix).await;
    }
    let (s, b) = get_from(&gw, "192.0.2.11", "/metrics", SCRAPE).await;
    assert_error(s, &b, StatusCode::TOO_MANY_REQUESTS, "AUTH_THROTTLED");
    // Where Prometheus scraped before, it still scrapes.
    let (s, _) = get_from(&gw, "192.0.2.10", "/metrics", SCRAPE).await;
    assert_eq!(s, StatusCode::OK);
    gw.stop().await;
}
