//! Unit tests of `throttle.rs`: address networks, lock-outs, the client address behind a
//! trusted proxy, sessions that pass a lock-out.

use super::*;
use axum::http::HeaderMap;

/// Found by review: every failed authentication was also a write to the shared store,
/// queued ahead of the agents' work. With its places in flight taken, a failure is counted
/// here only: this throttle still locks the address out after its burst, and the shared
/// count has none of them.
#[tokio::test]
async fn past_its_places_in_flight_a_failure_is_counted_here_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = assent_store::Store::open(
        dir.path(),
        60_000,
        std::sync::Arc::new(crate::WireEnvelopes),
    )
    .unwrap();
    let store = std::sync::Arc::new(store);
    let t = Throttle::new(RateLimits::default()).shared(store.clone());
    let taken = t
        .shared_in_flight
        .clone()
        .try_acquire_many_owned(SHARED_COUNTS_IN_FLIGHT as u32)
        .unwrap();
    let addr: IpAddr = "192.0.2.7".parse().unwrap();
    let mut locked = None;
    for _ in 0..=FAILURE_BURST {
        locked = t.failed_addr(Some(addr)).await;
    }
    assert!(locked.is_some(), "locked out here after the burst");
    drop(taken);
    let label = Who::Addr(network(addr)).label();
    let over = store
        .count_auth_failure(&[label], 0, 200, i64::from(FAILURE_BURST))
        .unwrap();
    assert_eq!(over, [0], "none of them reached the shared count");
}

#[test]
fn an_ipv6_client_counts_by_its_64_an_ipv4_one_whole() {
    let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(network(a), network(b));
    assert_ne!(network(a), network(c));
    let (x, y): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
    assert_ne!(network(x), network(y));
    let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
    assert_eq!(network(mapped), x);
    // Failures from one /64 share one allowance.
    let t = Throttle::with_proxies(RateLimits::default(), vec![]);
    assert_eq!(
        Throttle::keys(Some(a), "k")[0],
        Throttle::keys(Some(b), "k")[0]
    );
    let _ = t;
}

#[test]
fn behind_a_trusted_proxy_the_forwarded_client_is_the_address() {
    let proxy: IpAddr = "10.0.0.1".parse().unwrap();
    let t = Throttle::with_proxies(RateLimits::default(), vec![proxy]);
    let mut h = HeaderMap::new();
    h.insert(
        "x-forwarded-for",
        "203.0.113.9, 198.51.100.7, 10.0.0.1".parse().unwrap(),
    );
    // The right-most address the trusted proxy did not add itself.
    assert_eq!(
        t.addr_from(Some(proxy), &h),
        Some("198.51.100.7".parse().unwrap())
    );
    // Anyone else's X-Forwarded-For is ignored: it could be forged.
    let other: IpAddr = "192.0.2.5".parse().unwrap();
    assert_eq!(t.addr_from(Some(other), &h), Some(other));
    assert_eq!(t.addr_from(Some(proxy), &HeaderMap::new()), Some(proxy));
}

/// Attack: behind a proxy that appends `ip:port`, an entry that did not parse was skipped,
/// so the client's own forged left-hand entry became its address and a failed-key lockout
/// was dodged by changing it on every try.
#[test]
fn a_forged_forwarded_entry_is_never_taken_past_one_that_does_not_parse() {
    let proxy: IpAddr = "10.0.0.1".parse().unwrap();
    let t = Throttle::with_proxies(RateLimits::default(), vec![proxy]);
    let from = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", v.parse().unwrap());
        t.addr_from(Some(proxy), &h)
    };
    let client: IpAddr = "198.51.100.7".parse().unwrap();
    let v6: IpAddr = "2001:db8::7".parse().unwrap();
    assert_eq!(from("203.0.113.9, 198.51.100.7:4711"), Some(client));
    assert_eq!(from("203.0.113.9, [2001:db8::7]:4711"), Some(v6));
    assert_eq!(from("203.0.113.9, [2001:db8::7]"), Some(v6));
    for odd in [
        "203.0.113.9, unknown",
        "203.0.113.9, ",
        "203.0.113.9, host.example",
    ] {
        assert_eq!(from(odd), Some(proxy), "{odd}");
    }
    // Two header lines read as one list, the last line right-most.
    let mut h = HeaderMap::new();
    h.append("x-forwarded-for", "203.0.113.9".parse().unwrap());
    h.append("x-forwarded-for", "198.51.100.7, 10.0.0.1".parse().unwrap());
    assert_eq!(t.addr_from(Some(proxy), &h), Some(client));
}

#[test]
fn a_session_passes_the_lockout_only_of_the_address_it_signed_in_from() {
    let t = Throttle::default();
    let (here, there): (IpAddr, IpAddr) =
        ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
    t.session_authenticated(Some(here), "s1");
    assert!(t.passes_session_lockout(Some(here), "s1"));
    assert!(!t.passes_session_lockout(Some(there), "s1"));
    assert!(!t.passes_session_lockout(Some(here), "s2"));
    assert!(!t.passes_session_lockout(None, "s1"));
    // The memory is bounded: past it the one seen longest ago is forgotten.
    for i in 0..SESSIONS_KNOWN {
        t.session_authenticated(Some(there), &format!("other-{i}"));
    }
    let seen = t.sessions_seen.lock().unwrap().len();
    assert_eq!(seen, SESSIONS_KNOWN);
    assert!(!t.passes_session_lockout(Some(here), "s1"));
}

/// Found by review: one live session used from thousands of IPv6 /64s filled the memory
/// and pushed another operator's session out of it (then held at a locked-out address). A
/// session keeps its last few networks only.
#[test]
fn one_session_from_many_networks_does_not_push_others_out() {
    let t = Throttle::default();
    let here: IpAddr = "192.0.2.1".parse().unwrap();
    t.session_authenticated(Some(here), "s1");
    for i in 0..5_000u32 {
        let net: IpAddr = format!("2001:db8:{:x}:{:x}::1", i >> 16, i & 0xffff)
            .parse()
            .unwrap();
        t.session_authenticated(Some(net), "s2");
    }
    assert!(t.passes_session_lockout(Some(here), "s1"));
    let seen = t.sessions_seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen.values().all(|n| n.len() <= NETWORKS_PER_SESSION));
    assert_eq!(
        seen.values().map(Vec::len).sum::<usize>(),
        1 + NETWORKS_PER_SESSION
    );
}

#[test]
fn a_locked_prefix_refuses_wrong_keys_only_a_locked_address_everything() {
    let t = Throttle::default();
    let attacker: IpAddr = "192.0.2.66".parse().unwrap();
    let mut locked = None;
    for i in 0..100 {
        let who = Throttle::keys(Some(attacker), &format!("alice-de-guess-{i}"));
        if let Some(w) = t.failed_here(&who) {
            locked = Some(w);
            break;
        }
    }
    assert!(locked.is_some());
    let owner: IpAddr = "192.0.2.10".parse().unwrap();
    assert!(t.locked_out(Some(owner), "alice-demo-key", false).is_none());
    assert!(t.locked_out(Some(owner), "alice-demo-key", true).is_some());
    assert!(
        t.locked_out(Some(attacker), "anything-else", false)
            .is_some()
    );
}

/// Found by review: expired lock-outs were swept on every request carrying a key, under the one
/// lock. They are read as absent once expired, kept the longer of two, and swept when an
/// entry is added past twice the size left by the last sweep: 2,000 expired ones are gone
/// after the 1,024th is added, and the live one stays.
#[test]
fn expired_lock_outs_read_as_none_and_are_swept_as_the_map_grows() {
    let mut l = Lockouts::default();
    let now = Instant::now();
    let live = Who::Prefix("live-key".into());
    l.lock_out(live.clone(), now + Duration::from_secs(60));
    l.lock_out(live.clone(), now + Duration::from_secs(5));
    assert!(
        l.left(&live, now).unwrap() > Duration::from_secs(50),
        "the longer kept"
    );
    let gone = Who::Prefix("gone-key".into());
    l.lock_out(gone.clone(), now - Duration::from_millis(1));
    assert_eq!(l.left(&gone, now), None);
    for i in 0..2_000 {
        l.lock_out(
            Who::Prefix(format!("old{i}")),
            now - Duration::from_millis(1),
        );
    }
    assert!(l.until.len() < 1_024, "swept: {}", l.until.len());
    assert!(l.left(&live, Instant::now()).is_some());
}
