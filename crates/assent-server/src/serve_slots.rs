//! The connection slots [`crate::serve::serve`] hands out (issue 10 §12): `max_connections`
//! in all, `max_connections_per_address` from one client network (an IPv4 address, an IPv6
//! /64; a trusted proxy's connections are not held to it), and, when every slot is taken, the
//! fair-share eviction of an idle connection.
//!
//! Attack (found by review): ten addresses (or ten IPv6 /64s) each holding its
//! `max_connections_per_address` of idle keep-alive sockets took every slot, and the gateway
//! answered every other client `503` — operators, agents and health checks — for as long as
//! the sockets were re-opened. Now a connection arriving when all slots are taken takes the
//! slot of a connection serving no *known* request (none of a known key or live dashboard
//! session in flight: between requests, still sending a head, or sending a keyless body) of
//! the network holding the most connections, when that network holds at least two more than
//! the newcomer's would. The victim stops keep-alive at once; unless it has served a known
//! request by the end of [`EVICT_GRACE`] (then it is let finish and flush what it holds), it
//! is closed then. A connection serving a known request (a long-poll, an SSE stream, a held
//! MCP call) is never taken, nor one of a `trusted_proxies` peer (its pooled connections
//! carry every client behind it). So a flood
//! from a few networks cannot keep others out — keyless requests in flight do not shield it
//! (found by review: a keyless body sent a byte every 28 s kept a connection busy) — and a
//! network never evicts its own. What stays for the proxy in front: a client with as many
//! networks as there are slots is beyond any per-network rule. One principal's requests in
//! flight shield at most [`Shields`]' cap of connections (found by review: a valid key sending
//! bodies of one declared byte, never sent, shielded every slot from ten networks, and a full
//! gateway refused everyone else).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long an evicted connection is given before it is closed, unless it has served a known
/// request by then (counted by `known_seen`; such a connection is let finish and flush).
pub(crate) const EVICT_GRACE: Duration = Duration::from_secs(2);

/// One served connection's state, shared by its task, its requests and the slot table.
#[derive(Default)]
pub(crate) struct Conn {
    /// Known requests in flight (from the throttle's check until the response body is dropped).
    known: AtomicUsize,
    /// Known requests ever started on it.
    known_seen: AtomicU64,
    /// Set once the table has given this connection's slot to another.
    evicted: AtomicBool,
    /// Woken when evicted.
    wake: Notify,
    /// The slot of `max_connections` this connection holds (taken when evicted).
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

/// A request's connection, in its extensions (none on a request not served by
/// [`crate::serve::serve`]): the throttle counts a known request on it ([`Conn::known_request`]).
#[derive(Clone)]
pub(crate) struct ConnSlot(pub(crate) Arc<Conn>);

impl Conn {
    /// Counts a request of a known key or session in flight until the returned guard is
    /// dropped: the connection is not evicted meanwhile.
    pub(crate) fn known_request(self: &Arc<Self>) -> InFlight {
        self.known.fetch_add(1, Ordering::SeqCst);
        self.known_seen.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Serving no known request: may be evicted.
    pub(crate) fn unshielded(&self) -> bool {
        self.known.load(Ordering::SeqCst) == 0
    }

    /// How many known requests have started on it.
    pub(crate) fn known_seen(&self) -> u64 {
        self.known_seen.load(Ordering::SeqCst)
    }

    /// Completes once the table has given this connection's slot to another.
    pub(crate) async fn evicted(&self) {
        loop {
            let woken = self.wake.notified();
            if self.evicted.load(Ordering::SeqCst) {
                return;
            }
            woken.await;
        }
    }
}

/// A request counted in flight on its connection; uncounted when dropped.
pub(crate) struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.known.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Per principal, how many of its requests in flight shield their connection from eviction
/// (see the module doc): at most `cap` each ([`shield_cap`]). A request past it is served
/// all the same; it only leaves its connection evictable when every slot is taken.
#[derive(Default)]
pub struct Shields {
    held: Mutex<HashMap<String, usize>>,
}

/// The shielding requests a principal may have in flight besides its long-polls.
pub(crate) const SHIELDS_BESIDE_WAITS: usize = 64;

/// How many requests of one principal may shield their connection: its long-polls
/// (`waits`, `max_waiters_per_principal`) and [`SHIELDS_BESIDE_WAITS`] more, and never more
/// than half of `max_connections` (found by review: on a gateway of 1,088 slots or fewer the
/// default cap was every slot).
pub(crate) fn shield_cap(waits: usize, max_connections: usize) -> usize {
    (waits + SHIELDS_BESIDE_WAITS)
        .min(max_connections / 2)
        .max(1)
}

/// One request's shield ([`Shields::shield`]): counted on its connection and for its principal
/// until dropped.
pub(crate) struct Shield {
    _in_flight: InFlight,
    shields: Arc<Shields>,
    principal: String,
}

impl Drop for Shield {
    fn drop(&mut self) {
        let mut held = self.shields.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.principal);
            }
        }
    }
}

impl Shields {
    /// A known request of `principal` on `conn` ([`Conn::known_request`]), unless the
    /// principal has `cap` shielding requests in flight already (`None`).
    pub(crate) fn shield(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        principal: &str,
        cap: usize,
    ) -> Option<Shield> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(principal.to_string()).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Shield {
            _in_flight: conn.known_request(),
            shields: self.clone(),
            principal: principal.to_string(),
        })
    }
}

/// A response body whose known request stays counted in flight until hyper drops it (once its
/// last frame is taken). Size hint and end of stream are the inner body's, so a sized answer keeps
/// its `Content-Length` (found in testing: a mapped body that hid them went out chunked).
pub(crate) struct Counted {
    inner: axum::body::Body,
    _in_flight: Shield,
}

impl Counted {
    /// `inner`, counted by `in_flight`.
    pub(crate) fn new(inner: axum::body::Body, in_flight: Shield) -> Self {
        Self {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl axum::body::HttpBody for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The connections of one client network.
#[derive(Default)]
struct Net {
    conns: HashMap<u64, Arc<Conn>>,
    /// How many of `conns` are evicted but not yet closed.
    evicted: usize,
}

impl Net {
    /// Connections not evicted.
    fn live(&self) -> usize {
        self.conns.len() - self.evicted
    }

    /// A connection serving no known request, not yet evicted.
    fn unshielded_one(&self) -> Option<&Arc<Conn>> {
        self.conns
            .values()
            .find(|c| c.unshielded() && !c.evicted.load(Ordering::SeqCst))
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every slot is taken and no idle connection may be given up for it.
    Full,
    /// The client's network holds `max_connections_per_address` already.
    ForAddress,
}

/// The most evicted connections left open at once (each is closed within [`EVICT_GRACE`]
/// unless a known request holds it): past it, nothing more is evicted until some close.
/// Found by review: each eviction hands the slot over before the victim's socket closes, so
/// thousands of evictions at once held sockets past `max_connections` and into the 64 files
/// kept for the store and logs.
pub(crate) const MAX_LINGERING: usize = 32;

/// The slot table: `max_connections` permits and the connections of each client network.
pub(crate) struct Slots {
    total: Arc<Semaphore>,
    per_address: usize,
    table: Mutex<Table>,
    /// The next connection's key in its network.
    next: AtomicU64,
}

/// The connections by network, and how many evicted ones are still open.
#[derive(Default)]
struct Table {
    /// By `(trusted, address or network)`: a trusted proxy's own entry, apart from the
    /// untrusted clients of its /64.
    nets: HashMap<(bool, IpAddr), Net>,
    lingering: usize,
}

/// A slot held by one connection; given back (and the connection unlisted) when dropped.
pub(crate) struct Held {
    slots: Arc<Slots>,
    /// The network it is listed under and its key there (`None`: the private socket's, never
    /// listed).
    net: Option<((bool, IpAddr), u64)>,
    pub(crate) conn: Arc<Conn>,
}

impl Slots {
    /// `max` slots in all (at least one), `per_address` from one network.
    pub(crate) fn new(max: usize, per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            total: Arc::new(Semaphore::new(max.max(1))),
            per_address,
            table: Mutex::default(),
            next: AtomicU64::new(0),
        })
    }

    /// A slot for a connection of the process's own (the private socket): never listed under
    /// a network, never evicted; when every slot is taken, one taken as for a newcomer from a
    /// network holding none (found by review: under a flood of idle sockets the hub was shut
    /// out). `None` when no slot may be had.
    pub(crate) fn own(self: &Arc<Self>) -> Option<Held> {
        let permit = match self.total.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => self.table.lock().expect("slot table").evict_for(0)?,
        };
        let conn = Arc::new(Conn::default());
        *conn.permit.lock().expect("slot permit") = Some(permit);
        Some(Held {
            slots: self.clone(),
            net: None,
            conn,
        })
    }

    /// A slot for a connection from `net` (a client network, or a trusted proxy's address
    /// with `trusted`: not held to `per_address`, never evicted, and when every slot is
    /// taken one taken for it as for a network holding none — found by review: passing its
    /// pool's size, a proxy could almost never take one): a free one, else the slot of a
    /// connection serving no known request of the network holding the most, when it holds at
    /// least two more than `net` (see the module doc).
    pub(crate) fn admit(self: &Arc<Self>, net: IpAddr, trusted: bool) -> Result<Held, Refusal> {
        let mut table = self.table.lock().expect("slot table");
        let net = (trusted, net);
        let (open, live) = match table.nets.get(&net) {
            Some(n) if !trusted => (n.conns.len(), n.live()),
            _ => (0, 0),
        };
        if open >= self.per_address {
            return Err(Refusal::ForAddress);
        }
        let permit = match self.total.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => table.evict_for(live).ok_or(Refusal::Full)?,
        };
        let conn = Arc::new(Conn::default());
        *conn.permit.lock().expect("slot permit") = Some(permit);
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        table
            .nets
            .entry(net)
            .or_default()
            .conns
            .insert(key, conn.clone());
        Ok(Held {
            slots: self.clone(),
            net: Some((net, key)),
            conn,
        })
    }
}

impl Table {
    /// Takes the slot of a connection serving no known request of the untrusted network with
    /// the most live connections that has one, if it holds more than `live + 1`; marks that
    /// connection evicted and wakes it. `None` past [`MAX_LINGERING`]. The networks holding
    /// more than `live + 1` are tried from the largest down, each scanned until one of its
    /// connections is unshielded (under the table's lock; only when every slot is taken).
    fn evict_for(&mut self, live: usize) -> Option<OwnedSemaphorePermit> {
        if self.lingering >= MAX_LINGERING {
            return None;
        }
        let mut larger: Vec<(usize, (bool, IpAddr))> = self
            .nets
            .iter()
            .filter(|((trusted, _), n)| !trusted && n.live() > live + 1)
            .map(|(k, n)| (n.live(), *k))
            .collect();
        larger.sort_unstable_by_key(|(l, _)| std::cmp::Reverse(*l));
        for (_, key) in larger {
            let net = self.nets.get_mut(&key).expect("listed");
            while let Some(victim) = net.unshielded_one().cloned() {
                victim.evicted.store(true, Ordering::SeqCst);
                net.evicted += 1;
                self.lingering += 1;
                victim.wake.notify_one();
                if let Some(p) = victim.permit.lock().expect("slot permit").take() {
                    return Some(p);
                }
            }
        }
        None
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((net, key)) = self.net {
            let mut table = self.slots.table.lock().expect("slot table");
            let evicted = self.conn.evicted.load(Ordering::SeqCst);
            let mut unlisted = false;
            if let Some(listed) = table.nets.get_mut(&net) {
                unlisted = listed.conns.remove(&key).is_some();
                if unlisted && evicted {
                    listed.evicted -= 1;
                }
                if listed.conns.is_empty() {
                    table.nets.remove(&net);
                }
            }
            if unlisted && evicted {
                table.lingering -= 1;
            }
        }
        drop(self.conn.permit.lock().expect("slot permit").take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    fn evicted(held: &[Held]) -> usize {
        held.iter()
            .filter(|h| h.conn.evicted.load(Ordering::SeqCst))
            .count()
    }

    #[test]
    fn a_full_table_gives_an_unshielded_slot_of_the_largest_network_to_a_newcomer() {
        let slots = Slots::new(4, 100);
        let held: Vec<_> = (0..4).map(|_| slots.admit(ip(1), false).unwrap()).collect();
        let known = held[0].conn.known_request();
        let mut newcomers = vec![slots.admit(ip(2), false).unwrap()];
        assert_eq!(evicted(&held), 1);
        assert!(
            !held[0].conn.evicted.load(Ordering::SeqCst),
            "a connection serving a known request is kept"
        );
        // The flooding network does not win a slot back (3 live, nobody holds 5).
        assert_eq!(slots.admit(ip(1), false).err(), Some(Refusal::Full));
        newcomers.push(slots.admit(ip(3), false).unwrap());
        newcomers.push(slots.admit(ip(4), false).unwrap());
        assert_eq!(evicted(&held), 3);
        // One live each now: nobody holds two more than a fifth network would.
        assert_eq!(slots.admit(ip(5), false).err(), Some(Refusal::Full));
        assert!(slots.own().is_none(), "nobody holds two more than none");
        assert_eq!(slots.total.available_permits(), 0);
        drop((known, newcomers, held));
        assert!(slots.table.lock().unwrap().nets.is_empty());
        assert_eq!(slots.total.available_permits(), 4);
    }

    #[test]
    fn evicted_connections_left_open_are_bounded() {
        let n = MAX_LINGERING + 8;
        let slots = Slots::new(n, 1000);
        let held: Vec<_> = (0..n).map(|_| slots.admit(ip(1), false).unwrap()).collect();
        let newcomers: Vec<_> = (0..MAX_LINGERING)
            .map(|i| {
                slots
                    .admit(IpAddr::from([10, 1, 0, i as u8]), false)
                    .unwrap()
            })
            .collect();
        assert_eq!(evicted(&held), MAX_LINGERING);
        let refused = slots.admit(ip(2), false).err();
        assert_eq!(
            refused,
            Some(Refusal::Full),
            "no more until evicted ones close"
        );
        let closed = held
            .into_iter()
            .find(|h| h.conn.evicted.load(Ordering::SeqCst));
        drop(closed);
        assert!(
            slots.admit(ip(2), false).is_ok(),
            "one closed: one more evicted"
        );
        drop(newcomers);
    }

    #[test]
    fn a_counted_body_keeps_its_size_and_its_request_in_flight_until_dropped() {
        use axum::body::HttpBody;
        let conn = Arc::new(Conn::default());
        let shields = Arc::new(Shields::default());
        let shield = shields.shield(&conn, "bot", 1).unwrap();
        let body = Counted::new(axum::body::Body::from("abc"), shield);
        let sized = body.size_hint().exact();
        assert_eq!(sized, Some(3), "sent with a Content-Length");
        assert!(!conn.unshielded());
        // The principal's cap (1) is reached: its next request shields nothing.
        assert!(shields.shield(&conn, "bot", 1).is_none());
        assert!(shields.shield(&conn, "alice", 1).is_some_and(drop_it));
        drop(body);
        assert!(conn.unshielded());
        assert_eq!(conn.known_seen(), 2);
        assert!(shields.shield(&conn, "bot", 1).is_some());
    }

    #[test]
    fn a_principal_shields_at_most_half_the_slots() {
        assert_eq!(shield_cap(1024, 10_000), 1088);
        assert_eq!(shield_cap(1024, 80), 40);
        assert_eq!(shield_cap(1, 16), 8);
        assert_eq!(shield_cap(1, 1), 1);
    }

    fn drop_it(s: Shield) -> bool {
        drop(s);
        true
    }

    #[test]
    fn shielded_and_trusted_connections_are_never_given_up_and_the_cap_per_address_holds() {
        let slots = Slots::new(4, 2);
        let a: Vec<_> = (0..2).map(|_| slots.admit(ip(1), false).unwrap()).collect();
        assert_eq!(slots.admit(ip(1), false).err(), Some(Refusal::ForAddress));
        let proxy: Vec<_> = (0..2).map(|_| slots.admit(ip(9), true).unwrap()).collect();
        let first = a[0].conn.known_request();
        let _second = a[1].conn.known_request();
        assert_eq!(slots.admit(ip(2), false).err(), Some(Refusal::Full));
        assert_eq!(evicted(&proxy), 0, "a trusted proxy's connections stay");
        drop(first);
        let own = slots.own().expect("the hub takes an unshielded slot");
        assert!(a[0].conn.evicted.load(Ordering::SeqCst));
        drop((own, proxy, a));
        assert_eq!(slots.total.available_permits(), 4);
        // A trusted proxy holding many connections takes a slot as a network holding none.
        let proxy = slots.admit(ip(9), true).unwrap();
        let b: Vec<_> = (0..2).map(|_| slots.admit(ip(3), false).unwrap()).collect();
        let c = slots.admit(ip(4), false).unwrap();
        assert!(
            slots.admit(ip(9), true).is_ok(),
            "the proxy evicts from 10.0.0.3's two"
        );
        assert_eq!(evicted(&b), 1);
        drop((proxy, b, c));
    }
}
