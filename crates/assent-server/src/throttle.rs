//! Request rate limits and failed-authentication throttling (issue 10 §15), on governor's
//! keyed GCRA limiters.
//!
//! - Every authenticated principal may make `rate_limits.requests_per_second` requests per
//!   second with bursts of `rate_limits.burst` (default 1,000/s and 2,000, so that a normal agent
//!   never meets it); more get `429 RATE_LIMITED` with `Retry-After`.
//! - Failed authentications are counted per client address and per key prefix (the first 8
//!   characters presented): past [`FAILURES_PER_SECOND`] a second (bursts of
//!   [`FAILURE_BURST`]), that address or prefix is locked out until its allowance refills.
//!   From a locked-out address every request carrying a key, right or wrong, gets `429
//!   AUTH_THROTTLED` without being checked, so guessing is held to that rate; a locked-out
//!   prefix refuses only wrong keys (another address guessing at a key's prefix cannot lock
//!   its owner out). A key of at least [`crate::config::MIN_KEY_CHARS`] characters that
//!   authenticated from an address in the last [`KNOWN_FOR`] is the exception: that exact key
//!   (by its SHA-256) still passes that address's lock-out, so that an agent guessing keys
//!   cannot lock out the operator (or the other agents) working from the same host (found by
//!   review). Nothing else is checked or counted during a lock-out, so the exception tells a
//!   guesser nothing short of the whole key, which a long random key puts out of reach; a
//!   short key (`--insecure-demo-keys`, a `key_sha256` of a short key) gets no exception.
//!   The memory is this process's: after a restart, or on another replica, it starts empty.
//!   The API, `/mcp` and the dashboard sign-in share it.
//! - Dashboard session cookies (`edge::throttle`, on `/ui` paths) are checked like keys: from
//!   a locked-out address a cookie gets `429 AUTH_THROTTLED` before the store is asked, unless
//!   that session signed someone in from there before ([`Throttle::passes_session_lockout`]);
//!   a cookie naming no live session counts against the address alone
//!   ([`Throttle::failed_addr`]), and a live one's requests count against its operator's
//!   rate. Found by review: made-up cookies were looked up in the store with no limit.
//! - Single sign-on code exchanges have an allowance of their own per client address (network):
//!   each exchange the provider refuses ([`Throttle::sso_exchange_failed`]) counts, at the same
//!   rate, and a locked-out address's callbacks get `429` before the provider is asked
//!   ([`Throttle::sso_locked_out`]); at most
//!   [`SSO_EXCHANGES`](crate::config::oidc::SSO_EXCHANGES) exchanges are in flight on one
//!   replica at once, fairly shared between networks (`dashboard/oidc/places.rs`). Only
//!   exchanges count: a callback refused before the provider is asked (no or a forged
//!   sign-in cookie, a spent `state`, the provider's `error=`) guesses nothing and counts
//!   nothing, so a web page firing callbacks at the gateway from its visitors' browsers
//!   cannot lock their address out (found by
//!   review: every refused callback counted against the address's failed authentications, so
//!   `<img src=…/ui/oidc/callback?state=x&code=y>` locked an office's NAT out of single
//!   sign-on and of key sign-in). Neither allowance locks out the other: guessing keys does
//!   not stop single sign-on, nor failed exchanges key sign-ins.
//! - On PostgreSQL the failures are also counted in the database ([`Throttle::shared`]), so
//!   that every replica charges one allowance: a lockout found there holds on the replica
//!   that found it, and the others find it at the caller's next failure there. Request rate
//!   limits stay per replica (a shared counter would put a database write on every request):
//!   behind N replicas a principal may make up to N times `rate_limits`.
//! - Single sign-on starts (`GET /ui/oidc/start`) are not limited here: a start holds nothing
//!   on the server (the sign-in in progress is sealed into the browser's cookie,
//!   `crate::dashboard::oidc`) and costs what a page does. Found by review: they were limited
//!   per client network (40, then one per 30 s) and the network's sign-ins in progress capped,
//!   so one host behind an office's NAT kept everyone behind it from signing in.
//! - The client address is the TCP peer, or, when the peer is one of `trusted_proxies`, the
//!   right-most `X-Forwarded-For` address that is not (so clients behind a reverse proxy are
//!   told apart instead of sharing the proxy's address).

use crate::error::ApiError;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed authentications allowed per second, per client address and per key prefix.
pub const FAILURES_PER_SECOND: u32 = 5;
/// Failed authentications allowed in a burst before the rate applies.
pub const FAILURE_BURST: u32 = 20;
/// Characters of a presented key that make its prefix.
const PREFIX_CHARS: usize = 8;
/// How long a key's authentication from an address lets it past that address's lock-out
/// ([`Throttle::passes_lockout`]): 7 days.
pub const KNOWN_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// The addresses (networks) remembered per key at the most; past it the one seen longest ago
/// is forgotten. Only keys that authenticated are remembered, so the memory is bounded by the
/// principals' keys, whatever addresses one of them comes from.
const KNOWN_ADDRESSES: usize = 64;

/// How old a key's newest note of its address may be before [`Throttle::authenticated`]
/// notes it again (the memory is kept to [`KNOWN_FOR`], so a minute more or less is nothing).
const RENOTE_AFTER: Duration = Duration::from_secs(60);

/// Dashboard sessions remembered as having signed in from an address, at the most
/// ([`Throttle::session_authenticated`]).
pub const SESSIONS_KNOWN: usize = 4096;
/// The client networks a dashboard session signed in from, with when last.
type SessionNetworks = Vec<(IpAddr, Instant)>;

/// Client networks remembered per dashboard session, at the most (the ones seen last): found
/// by review, one session used from thousands of IPv6 /64s filled the whole memory and pushed
/// the other operators' sessions out of it.
pub const NETWORKS_PER_SESSION: usize = 4;
/// How long a session's sign-in from an address lets it past that address's lock-out: a
/// session's whole lifetime (12 hours).
pub const SESSION_KNOWN_FOR: Duration = Duration::from_secs(12 * 3600);

pub use crate::config::RateLimits;

/// The addresses (networks) one key authenticated from, each with when it last did.
type Seen = Vec<(IpAddr, Instant)>;

/// What a locked-out caller is known by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Who {
    Addr(IpAddr),
    Prefix(String),
    /// A client address (network) whose single sign-on code exchanges failed.
    Sso(IpAddr),
}

impl Who {
    /// Its row in the shared count: the SHA-256 (hex) of `addr:A` or `prefix:P`, so the
    /// database holds neither addresses nor the beginnings of keys.
    fn label(&self) -> String {
        use sha2::Digest;
        let text = match self {
            Who::Addr(a) => format!("addr:{a}"),
            Who::Prefix(p) => format!("prefix:{p}"),
            Who::Sso(a) => format!("sso:{a}"),
        };
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    }
}

/// How many keys the failure limiter holds before its stale ones are first dropped.
const FAILURES_SWEPT_PAST: usize = 100_000;

/// Who is locked out until when. Expired entries are read as absent and swept when an entry is
/// added and the map has doubled since the last sweep (found by review: they were swept on
/// every request carrying a key, under the one lock, so an attacker locking out many networks
/// made every request scan them all).
#[derive(Default)]
struct Lockouts {
    until: HashMap<Who, Instant>,
    sweep_at: usize,
}

impl Lockouts {
    /// How long `who` stays locked out after `now`; `None` when it is not.
    fn left(&self, who: &Who, now: Instant) -> Option<Duration> {
        self.until
            .get(who)
            .filter(|until| **until > now)
            .map(|until| *until - now)
    }

    /// Locks `who` out until `until`, or longer if it is locked out longer already.
    fn lock_out(&mut self, who: Who, until: Instant) {
        let at = self.until.entry(who).or_insert(until);
        *at = (*at).max(until);
        if self.until.len() >= self.sweep_at.max(1024) {
            let now = Instant::now();
            self.until.retain(|_, u| *u > now);
            self.sweep_at = self.until.len() * 2;
        }
    }
}

/// The limiters of one gateway.
pub struct Throttle {
    principals: DefaultKeyedRateLimiter<String>,
    failures: DefaultKeyedRateLimiter<Who>,
    locked: Mutex<Lockouts>,
    /// The size of the failure limiter's state past which its stale keys are dropped next.
    failures_sweep_at: std::sync::atomic::AtomicUsize,
    /// Per long key that authenticated (its SHA-256): from which addresses (networks), last
    /// when.
    known: Mutex<HashMap<[u8; 32], Seen>>,
    /// Dashboard sessions that signed someone in from an address (network): by the SHA-256 of
    /// the session's id, the networks (at most [`NETWORKS_PER_SESSION`]) with when last
    /// ([`Throttle::session_authenticated`]).
    sessions_seen: Mutex<HashMap<[u8; 32], SessionNetworks>>,
    trusted_proxies: Vec<IpAddr>,
    /// Places for single sign-on code exchanges in flight
    /// ([`SSO_EXCHANGES`](crate::config::oidc::SSO_EXCHANGES)).
    /// The store failures are also counted in (replicas of one PostgreSQL database).
    shared: Option<std::sync::Arc<assent_store::Store>>,
    /// Places for shared counts in flight ([`SHARED_COUNTS_IN_FLIGHT`]).
    shared_in_flight: std::sync::Arc<tokio::sync::Semaphore>,
}

/// The most failures counted in the shared store at once. Each count is a write on the
/// store's one connection, which every agent's proposals and decisions wait for; past this a
/// failure is counted here only (this replica's own allowance still locks the network out).
/// Found by review: any request without a valid key, from ever new IPv6 networks, queued a
/// write ahead of the agents' work.
pub const SHARED_COUNTS_IN_FLIGHT: usize = 2;

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle").finish_non_exhaustive()
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new(RateLimits::default())
    }
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n.max(1)).expect("at least 1")
}

/// One `X-Forwarded-For` entry as an address: `192.0.2.1`, `2001:db8::1`, `192.0.2.1:4711`,
/// `[2001:db8::1]` or `[2001:db8::1]:4711` (proxies write all of them); `None` for anything else
/// (`unknown`, a name, an empty entry).
fn forwarded_ip(entry: &str) -> Option<IpAddr> {
    let e = entry.trim();
    let ip = e.parse::<IpAddr>().ok().or_else(|| {
        let bare = e.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        bare.and_then(|b| b.parse().ok())
            .or_else(|| e.parse::<SocketAddr>().ok().map(|s| s.ip()))
    })?;
    Some(ip.to_canonical())
}

impl Throttle {
    /// [`Throttle::new`], reading client addresses behind `trusted_proxies`.
    pub fn with_proxies(limits: RateLimits, trusted_proxies: Vec<IpAddr>) -> Self {
        Self {
            trusted_proxies,
            ..Self::new(limits)
        }
    }

    /// Limiters with `limits` per principal and the fixed failure allowance.
    pub fn new(limits: RateLimits) -> Self {
        Self {
            principals: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(nz(limits.requests_per_second)).allow_burst(nz(limits.burst)),
            ),
            failures: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(nz(FAILURES_PER_SECOND)).allow_burst(nz(FAILURE_BURST)),
            ),
            locked: Mutex::default(),
            failures_sweep_at: std::sync::atomic::AtomicUsize::new(FAILURES_SWEPT_PAST),
            known: Mutex::default(),
            sessions_seen: Mutex::default(),
            trusted_proxies: Vec::new(),
            shared: None,
            shared_in_flight: std::sync::Arc::new(tokio::sync::Semaphore::new(
                SHARED_COUNTS_IN_FLIGHT,
            )),
        }
    }

    /// This throttle, also counting failures in `store`'s database, which other replicas
    /// share (see the module doc).
    pub fn shared(self, store: std::sync::Arc<assent_store::Store>) -> Self {
        Self {
            shared: Some(store),
            ..self
        }
    }

    /// The client address of `req`: the TCP peer, or behind a trusted proxy the right-most
    /// `X-Forwarded-For` entry that is not a trusted proxy.
    pub fn client_addr(&self, req: &Request) -> Option<IpAddr> {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        self.addr_from(peer, req.headers())
    }

    /// Whether `peer` is one of `trusted_proxies` (its forwarding headers are believed).
    /// An IPv4 peer seen on an IPv6 socket (`::ffff:127.0.0.1`) is its IPv4 address.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted_proxies.contains(&peer.to_canonical())
    }

    /// [`Throttle::client_addr`] from the TCP peer and the request headers.
    pub fn addr_from(
        &self,
        peer: Option<IpAddr>,
        headers: &axum::http::HeaderMap,
    ) -> Option<IpAddr> {
        let peer = peer?.to_canonical();
        if !self.trusts(peer) {
            return Some(peer);
        }
        let values = headers.get_all("x-forwarded-for");
        let entries = values.iter().map(|v| v.to_str().ok()).collect::<Vec<_>>();
        let entries = entries.iter().rev().flat_map(|v| match v {
            Some(v) => v.rsplit(',').map(Some).collect::<Vec<_>>(),
            None => vec![None],
        });
        // Right to left: each entry was written by the hop after it. The first that is not a
        // trusted proxy is the client; one that does not read as an address (found by review:
        // it was skipped, so an `ip:port` written by the proxy passed over to the client's own
        // forged entry) stops the walk at the last hop we trust, the peer.
        for entry in entries {
            match entry.and_then(forwarded_ip) {
                Some(a) if self.trusts(a) => continue,
                Some(a) => return Some(a),
                None => return Some(peer),
            }
        }
        Some(peer)
    }

    fn keys(addr: Option<IpAddr>, key: &str) -> Vec<Who> {
        let mut out: Vec<Who> = addr.map(|a| Who::Addr(network(a))).into_iter().collect();
        out.push(Who::Prefix(prefix(key)));
        out
    }

    /// `Some(wait)` while the address (`by_prefix`: or the key's prefix) is locked out.
    pub fn locked_out(&self, addr: Option<IpAddr>, key: &str, by_prefix: bool) -> Option<Duration> {
        let now = Instant::now();
        let locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
        Self::keys(addr, key)
            .iter()
            .filter(|w| by_prefix || matches!(w, Who::Addr(_)))
            .filter_map(|w| locked.left(w, now))
            .max()
    }

    /// Notes that `key`, a principal's whose SHA-256 is `digest`, authenticated from `addr`
    /// now (nothing without an address, or for a key shorter than
    /// [`crate::config::MIN_KEY_CHARS`]): remembered by its SHA-256, with at most
    /// [`KNOWN_ADDRESSES`] addresses each.
    pub fn authenticated(&self, addr: Option<IpAddr>, key: &str, digest: &[u8; 32]) {
        let Some(addr) = addr.map(network) else {
            return;
        };
        if key.chars().count() < crate::config::MIN_KEY_CHARS {
            return;
        }
        let now = Instant::now();
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let seen = known.entry(*digest).or_default();
        // Noted in the last minute: nothing to rewrite (this runs on every authenticated
        // request).
        if seen
            .last()
            .is_some_and(|(a, at)| *a == addr && now.duration_since(*at) < RENOTE_AFTER)
        {
            return;
        }
        seen.retain(|(a, at)| *a != addr && now.duration_since(*at) < KNOWN_FOR);
        if seen.len() >= KNOWN_ADDRESSES {
            seen.remove(0);
        }
        seen.push((addr, now));
    }

    /// Whether `key` passes a lock-out of `addr`: this very key authenticated from there within
    /// [`KNOWN_FOR`] (on this replica, [`Throttle::authenticated`]). An agent locking out its
    /// host by guessing thus cannot lock out the operator deciding from it, and learns nothing
    /// from a refusal but that its guess is not a whole key used there.
    pub fn passes_lockout(&self, addr: Option<IpAddr>, key: &str) -> bool {
        let Some(addr) = addr.map(network) else {
            return false;
        };
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(&digest(key)).is_some_and(|seen| {
            seen.iter()
                .any(|(a, at)| *a == addr && at.elapsed() < KNOWN_FOR)
        })
    }

    /// Counts a failed authentication, here and (on PostgreSQL) in the database the replicas
    /// share; `Some(wait)` when it used up the allowance of the address or the prefix, which
    /// are locked out for `wait`. A database that does not answer leaves the local count.
    pub async fn failed(&self, addr: Option<IpAddr>, key: &str) -> Option<Duration> {
        self.count(Self::keys(addr, key)).await
    }

    /// A wrong `key` from `addr`: `Some(wait)` while its prefix is locked out, or when this
    /// failure used up the allowance of the address or the prefix ([`Throttle::failed`]). The
    /// address is counted whether or not the prefix is locked out (found by review: a wrong
    /// key under a prefix another network had locked out was answered `429` uncounted, so a
    /// second network could guess keys of that prefix at any rate, the `429` of a wrong guess
    /// telling it apart from a right one, spending one counted failure a second to keep the
    /// prefix locked).
    pub async fn wrong_key(&self, addr: Option<IpAddr>, key: &str) -> Option<Duration> {
        match self.locked_out(addr, key, true) {
            Some(prefix) => Some(
                self.failed_addr(addr)
                    .await
                    .map_or(prefix, |a| a.max(prefix)),
            ),
            None => self.failed(addr, key).await,
        }
    }

    /// Counts a failed authentication against the client address (network) alone, like
    /// [`Throttle::failed`] (the same allowance, here and in the shared count): a dashboard
    /// session cookie that names no live session. Not by prefix: a cookie's value is no key,
    /// and counting its first characters would let anyone lock out a prefix for nothing.
    /// `None` without an address.
    pub async fn failed_addr(&self, addr: Option<IpAddr>) -> Option<Duration> {
        self.count(addr.map(|a| Who::Addr(network(a))).into_iter().collect())
            .await
    }

    /// Notes that dashboard session `id` (its cookie's value) signed someone in from `addr`
    /// now, so that it passes a later lock-out of that address
    /// ([`Throttle::passes_session_lockout`]) as a known key does. At most
    /// [`SESSIONS_KNOWN`] sessions are remembered, each with its last
    /// [`NETWORKS_PER_SESSION`] networks; past it those older than [`SESSION_KNOWN_FOR`] are
    /// forgotten, then the one seen longest ago.
    pub fn session_authenticated(&self, addr: Option<IpAddr>, id: &str) {
        let Some(net) = addr.map(network) else {
            return;
        };
        let k = digest(id);
        let now = Instant::now();
        let mut seen = self.sessions_seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= SESSIONS_KNOWN && !seen.contains_key(&k) {
            let last = |nets: &SessionNetworks| nets.iter().map(|(_, at)| *at).max();
            seen.retain(|_, nets| {
                last(nets).is_some_and(|at| now.duration_since(at) < SESSION_KNOWN_FOR)
            });
            if seen.len() >= SESSIONS_KNOWN
                && let Some(oldest) = seen.iter().min_by_key(|(_, n)| last(n)).map(|(k, _)| *k)
            {
                seen.remove(&oldest);
            }
        }
        let nets = seen.entry(k).or_default();
        nets.retain(|(n, _)| *n != net);
        if nets.len() >= NETWORKS_PER_SESSION
            && let Some(i) = nets
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(i, _)| i)
        {
            nets.remove(i);
        }
        nets.push((net, now));
    }

    /// Whether dashboard session `id` passes a lock-out of `addr`: it signed someone in from
    /// there within [`SESSION_KNOWN_FOR`] (on this replica). An agent locking out its host by
    /// guessing keys or cookies thus does not lock out the operator's open dashboard there; a
    /// guessed cookie passes only by being a live session's whole 256-bit id.
    pub fn passes_session_lockout(&self, addr: Option<IpAddr>, id: &str) -> bool {
        let Some(net) = addr.map(network) else {
            return false;
        };
        let seen = self.sessions_seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(&digest(id)).is_some_and(|nets| {
            nets.iter()
                .any(|(n, at)| *n == net && at.elapsed() < SESSION_KNOWN_FOR)
        })
    }

    /// `Some(wait)` while single sign-on code exchanges from `addr` are locked out (too many
    /// failed: [`Throttle::sso_exchange_failed`]). The key lock-out of the address
    /// ([`Throttle::locked_out`]) does not apply, nor this one to keys.
    pub fn sso_locked_out(&self, addr: Option<IpAddr>) -> Option<Duration> {
        let who = Who::Sso(network(addr?));
        let now = Instant::now();
        let locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
        locked.left(&who, now)
    }

    /// Counts a single sign-on code exchange (or its ID token) the provider's answer failed
    /// against the client address (network) alone, like [`Throttle::failed`]; `Some(wait)`
    /// when that used up its allowance, and its exchanges are locked out for `wait`. `None`
    /// without an address.
    pub async fn sso_exchange_failed(&self, addr: Option<IpAddr>) -> Option<Duration> {
        self.count(addr.map(|a| Who::Sso(network(a))).into_iter().collect())
            .await
    }

    /// Counts one failure of each of `who` here and (on PostgreSQL) in the shared count.
    async fn count(&self, who: Vec<Who>) -> Option<Duration> {
        let mut wait = self.failed_here(&who);
        let Some(store) = self.shared.clone() else {
            return wait;
        };
        let Ok(place) = self.shared_in_flight.clone().try_acquire_owned() else {
            return wait;
        };
        let labels: Vec<String> = who.iter().map(Who::label).collect();
        let interval = 1000 / i64::from(FAILURES_PER_SECOND);
        // SQLite's clock; on PostgreSQL the store counts by the database's clock, which every
        // replica shares (found by review: a replica with a skewed clock locked callers out,
        // or handed out a fresh allowance, against the `tat`s its peers wrote).
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let counted = tokio::task::spawn_blocking(move || {
            let _place = place;
            store.count_auth_failure(&labels, now, interval, i64::from(FAILURE_BURST))
        })
        .await;
        match counted {
            Ok(Ok(over)) => {
                for (w, ms) in who.into_iter().zip(over).filter(|(_, ms)| *ms > 0) {
                    let d = Duration::from_millis(ms as u64).max(Duration::from_secs(1));
                    let mut locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
                    locked.lock_out(w, Instant::now() + d);
                    wait = Some(wait.map_or(d, |x| x.max(d)));
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "shared failure count unavailable"),
            Err(_) => {}
        }
        wait
    }

    /// Counts a failure of each of `who` in this process's limiter.
    fn failed_here(&self, who: &[Who]) -> Option<Duration> {
        let clock = DefaultClock::default();
        let mut wait: Option<Duration> = None;
        for w in who {
            if let Err(not_until) = self.failures.check_key(w) {
                let d = not_until
                    .wait_time_from(clock.now())
                    .max(Duration::from_secs(1));
                let mut locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
                locked.lock_out(w.clone(), Instant::now() + d);
                wait = Some(wait.map_or(d, |x| x.max(d)));
            }
        }
        // Stale keys are dropped once the state has doubled since (found by review: past
        // 100,000 keys every failure scanned them all).
        use std::sync::atomic::Ordering::Relaxed;
        if self.failures.len() > self.failures_sweep_at.load(Relaxed) {
            self.failures.retain_recent();
            let next = (self.failures.len() * 2).max(FAILURES_SWEPT_PAST);
            self.failures_sweep_at.store(next, Relaxed);
        }
        wait
    }

    /// `Some(wait)` when `principal` is over its request rate.
    pub fn over_rate(&self, principal: &str) -> Option<Duration> {
        self.over_rate_of(format!("principal:{principal}"))
    }

    /// `Some(wait)` when the Prometheus scrape key is over the request rate a principal has
    /// (it is no principal, and no principal's name can share its count).
    pub fn over_scrape_rate(&self) -> Option<Duration> {
        self.over_rate_of("scrape key".to_string())
    }

    /// `Some(wait)` when the requests counted under `key` are over the rate.
    fn over_rate_of(&self, key: String) -> Option<Duration> {
        match self.principals.check_key(&key) {
            Ok(()) => None,
            Err(not_until) => Some(not_until.wait_time_from(DefaultClock::default().now())),
        }
    }
}

/// The SHA-256 of `key`.
pub(crate) fn digest(key: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes()).into()
}

/// The prefix a key is counted by: its first [`PREFIX_CHARS`] characters.
fn prefix(key: &str) -> String {
    key.chars().take(PREFIX_CHARS).collect()
}

/// A `429` with `code` and `Retry-After` (whole seconds, at least 1).
pub fn too_many(code: &'static str, message: &str, wait: Duration) -> Response {
    let secs = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    let mut r = ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message).into_response();
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// The network a client address counts as, for per-address limits (failed authentications,
/// connections): an IPv4 address whole, an IPv6 address by its /64 — the block one host or
/// one LAN is given (found by review: counted per whole IPv6 address, one host rotating
/// through its /64 had a fresh allowance for every address).
pub fn network(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[cfg(test)]
#[path = "throttle_tests.rs"]
mod tests;
