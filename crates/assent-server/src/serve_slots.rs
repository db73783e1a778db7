//! The connection slots [`crate::serve::serve`] hands out (issue 10 §12): `max_connections`
//! in all, `max_connections_per_address` from one client network (an IPv4 address, an IPv6
//! /64; a trusted proxy's connections are not held to it), and, when every slot is taken, the
//! fair-share eviction of an idle connection.
//!
//! Attack (found by review): ten addresses (or ten IPv6 /64s) each holding its
//! `max_connections_per_address` of idle keep-alive sockets took every slot, and the gateway
//! answered every other client `503` — operators, agents and health checks — for as long as
//! the sockets were re-opened. Now a connection arriving when all slots are taken takes the
//! slot of an *idle* connection (no request in flight: between requests, or still sending its
//! first head) of the network holding the most connections, when that network holds at least
//! two more than the newcomer's would; the idle one is closed (a request that raced in first
//! is finished, keep-alive off). A connection serving a request (a long-poll, an SSE stream, a
//! held MCP call) is never taken. So a flood from a few networks cannot keep others out, and
//! a network never evicts its own. What stays: slow readers keep their slot for up to
//! `header_read_timeout_seconds` per response, and a client with as many networks as there
//! are slots is beyond any per-network rule — the proxy's per-client limits are for that.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// One served connection's state, shared by its task, its requests and the slot table.
#[derive(Default)]
pub(crate) struct Conn {
    /// Requests in flight (from the service's call until its response body is dropped).
    busy: AtomicUsize,
    /// Set once the table has given this connection's slot to another.
    evicted: AtomicBool,
    /// Woken when evicted.
    wake: Notify,
    /// The slot of `max_connections` this connection holds (taken when evicted).
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

impl Conn {
    /// Counts a request in flight until the returned guard is dropped.
    pub(crate) fn request(self: &Arc<Self>) -> InFlight {
        self.busy.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// No request in flight.
    pub(crate) fn idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
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
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body whose request stays counted in flight until hyper drops it (once its last
/// frame is taken). Size hint and end of stream are the inner body's, so a sized answer keeps
/// its `Content-Length` (found in testing: a mapped body that hid them went out chunked).
pub(crate) struct Counted {
    inner: axum::body::Body,
    _in_flight: InFlight,
}

impl Counted {
    /// `inner`, counted by `in_flight`.
    pub(crate) fn new(inner: axum::body::Body, in_flight: InFlight) -> Self {
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
    conns: Vec<Arc<Conn>>,
    /// How many of `conns` are evicted but not yet closed.
    evicted: usize,
}

impl Net {
    /// Connections not evicted.
    fn live(&self) -> usize {
        self.conns.len() - self.evicted
    }

    /// An idle connection not yet evicted.
    fn idle_one(&self) -> Option<&Arc<Conn>> {
        self.conns
            .iter()
            .find(|c| c.idle() && !c.evicted.load(Ordering::SeqCst))
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

/// The slot table: `max_connections` permits and the connections of each client network.
pub(crate) struct Slots {
    total: Arc<Semaphore>,
    max: usize,
    per_address: usize,
    nets: Mutex<HashMap<IpAddr, Net>>,
}

/// A slot held by one connection; given back (and the connection unlisted) when dropped.
pub(crate) struct Held {
    slots: Arc<Slots>,
    /// The network it is listed under (`None`: the private socket's, never listed).
    net: Option<IpAddr>,
    pub(crate) conn: Arc<Conn>,
}

impl Slots {
    /// `max` slots in all (at least one), `per_address` from one network.
    pub(crate) fn new(max: usize, per_address: usize) -> Arc<Self> {
        let max = max.max(1);
        Arc::new(Self {
            total: Arc::new(Semaphore::new(max)),
            max,
            per_address,
            nets: Mutex::default(),
        })
    }

    /// A slot for a connection of the process's own (the private socket): never listed under
    /// a network, never evicted, never taken from another. `None` when every slot is taken.
    pub(crate) fn own(self: &Arc<Self>) -> Option<Held> {
        let permit = self.total.clone().try_acquire_owned().ok()?;
        let conn = Arc::new(Conn::default());
        *conn.permit.lock().expect("slot permit") = Some(permit);
        Some(Held {
            slots: self.clone(),
            net: None,
            conn,
        })
    }

    /// A slot for a connection from `net` (a client network, or a trusted proxy's address
    /// with `capped` false: not held to `per_address`): a free one, else an idle
    /// connection's of the network holding the most, when it holds at least two more than
    /// `net` (see the module doc).
    pub(crate) fn admit(self: &Arc<Self>, net: IpAddr, capped: bool) -> Result<Held, Refusal> {
        let mut nets = self.nets.lock().expect("slot table");
        let (open, live) = nets.get(&net).map_or((0, 0), |n| (n.conns.len(), n.live()));
        if capped && open >= self.per_address {
            return Err(Refusal::ForAddress);
        }
        let permit = match self.total.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => Self::evict_for(&mut nets, live).ok_or(Refusal::Full)?,
        };
        let conn = Arc::new(Conn::default());
        *conn.permit.lock().expect("slot permit") = Some(permit);
        nets.entry(net).or_default().conns.push(conn.clone());
        Ok(Held {
            slots: self.clone(),
            net: Some(net),
            conn,
        })
    }

    /// Takes the slot of an idle connection of the network with the most live connections,
    /// if it holds more than `live + 1`; marks that connection evicted and wakes it.
    fn evict_for(nets: &mut HashMap<IpAddr, Net>, live: usize) -> Option<OwnedSemaphorePermit> {
        loop {
            let (key, victim) = nets
                .iter()
                .filter(|(_, n)| n.live() > live + 1)
                .filter_map(|(k, n)| n.idle_one().map(|c| (n.live(), *k, c)))
                .max_by_key(|(l, _, _)| *l)
                .map(|(_, k, c)| (k, c.clone()))?;
            victim.evicted.store(true, Ordering::SeqCst);
            nets.get_mut(&key).expect("the victim's network").evicted += 1;
            victim.wake.notify_one();
            if let Some(p) = victim.permit.lock().expect("slot permit").take() {
                return Some(p);
            }
        }
    }

    /// Waits until every slot is free (every connection has ended).
    pub(crate) async fn all_free(&self) {
        let n = u32::try_from(self.max).unwrap_or(u32::MAX);
        let _ = self.total.acquire_many(n).await;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(key) = self.net {
            let mut nets = self.slots.nets.lock().expect("slot table");
            if let Some(net) = nets.get_mut(&key) {
                if let Some(i) = net.conns.iter().position(|c| Arc::ptr_eq(c, &self.conn)) {
                    net.conns.swap_remove(i);
                    if self.conn.evicted.load(Ordering::SeqCst) {
                        net.evicted -= 1;
                    }
                }
                if net.conns.is_empty() {
                    nets.remove(&key);
                }
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
    fn a_full_table_gives_an_idle_slot_of_the_largest_network_to_a_newcomer() {
        let slots = Slots::new(4, 100);
        let held: Vec<_> = (0..4).map(|_| slots.admit(ip(1), true).unwrap()).collect();
        let busy = held[0].conn.request();
        let mut newcomers = vec![slots.admit(ip(2), true).unwrap()];
        assert_eq!(evicted(&held), 1);
        assert!(
            !held[0].conn.evicted.load(Ordering::SeqCst),
            "a busy connection is kept"
        );
        // The flooding network does not win a slot back (3 live, nobody holds 5).
        assert_eq!(slots.admit(ip(1), true).err(), Some(Refusal::Full));
        newcomers.push(slots.admit(ip(3), true).unwrap());
        newcomers.push(slots.admit(ip(4), true).unwrap());
        assert_eq!(evicted(&held), 3);
        // One live each now: nobody holds two more than a fifth network would.
        assert_eq!(slots.admit(ip(5), true).err(), Some(Refusal::Full));
        assert_eq!(slots.total.available_permits(), 0);
        drop((busy, newcomers, held));
        assert!(slots.nets.lock().unwrap().is_empty());
        assert_eq!(slots.total.available_permits(), 4);
    }

    #[test]
    fn a_counted_body_keeps_its_size_and_its_request_in_flight_until_dropped() {
        use axum::body::HttpBody;
        let conn = Arc::new(Conn::default());
        let body = Counted::new(axum::body::Body::from("abc"), conn.request());
        assert_eq!(
            body.size_hint().exact(),
            Some(3),
            "sent with a Content-Length"
        );
        assert!(!conn.idle());
        drop(body);
        assert!(conn.idle());
    }

    #[test]
    fn busy_connections_are_never_given_up_and_the_cap_per_address_holds() {
        let slots = Slots::new(3, 2);
        let a: Vec<_> = (0..2).map(|_| slots.admit(ip(1), true).unwrap()).collect();
        assert_eq!(slots.admit(ip(1), true).err(), Some(Refusal::ForAddress));
        let proxy = slots.admit(ip(9), false).unwrap();
        let first = a[0].conn.request();
        let _second = a[1].conn.request();
        assert_eq!(slots.admit(ip(2), true).err(), Some(Refusal::Full));
        assert!(slots.own().is_none());
        drop(first);
        let newcomer = slots.admit(ip(2), true).unwrap();
        assert!(a[0].conn.evicted.load(Ordering::SeqCst));
        drop((newcomer, proxy, a));
        assert_eq!(slots.total.available_permits(), 3);
    }
}
